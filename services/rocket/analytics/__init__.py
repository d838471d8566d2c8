"""rocket.analytics: Spark 4 data sources and log-analytics jobs for RocketCluster.

* ``format("rocket")`` (batch and streaming): messages pulled from the brokers
  (:mod:`rocket.analytics.source`, :mod:`rocket.analytics.pull`), and written
  back (``df.write.format("rocket")``, ``writeStream``);
* log headers of any topic (:mod:`rocket.analytics.header`) and template
  mining with one setting (:mod:`rocket.analytics.mining`), scored with GA, PA,
  FGA and FTA (:mod:`rocket.analytics.accuracy`, :mod:`rocket.analytics.evaluate`);
* ``format("rocket-commitlog")``: CommitLog segment files, offline
  (:mod:`rocket.analytics.commitlog`);
* jobs: ``traffic`` and ``logs`` (:mod:`rocket.analytics.jobs`), runnable with
  spark-submit or ``rocket analytics <job>`` (:mod:`rocket.analytics.cli`);
  ``make run`` ends with :func:`rocket.analytics.jobs.logs.run_logs_job`.

Get a session with the sources registered from
:func:`rocket.analytics.session.spark_session`. Needs the ``analytics`` extra
(pyspark 4, pandas, matplotlib) and Java 17+.
"""
