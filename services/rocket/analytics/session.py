"""A SparkSession set up for RocketCluster analytics.

:func:`spark_session` makes (or reuses) a session, points PySpark's Python
workers at this interpreter (so they see ``rocket`` and its dependencies),
binds a local driver to loopback, uses UTC for timestamps and registers the
``rocket`` and ``rocket-commitlog`` data sources.
"""

from __future__ import annotations

import os
import sys
from typing import Any

#: The master used when none is given and none is configured (spark-submit sets one).
DEFAULT_MASTER = "local[2]"


def register_data_sources(spark: Any) -> None:
    """Register ``format("rocket")`` and ``format("rocket-commitlog")`` on ``spark``."""
    from rocket.analytics.commitlog import CommitLogDataSource
    from rocket.analytics.source import RocketDataSource

    spark.dataSource.register(RocketDataSource)
    spark.dataSource.register(CommitLogDataSource)


def spark_session(app_name: str = "rocket-analytics", master: str | None = None,
                  conf: dict[str, str] | None = None) -> Any:
    """The active SparkSession, or a new one (``master`` default: the configured one, else ``local[2]``).

    Sets ``PYSPARK_PYTHON`` to this interpreter unless already set, and for
    local masters ``SPARK_LOCAL_IP=127.0.0.1``. Returns a ``pyspark.sql.SparkSession``
    with the data sources registered. Raises whatever PySpark raises when Java
    is missing (Spark 4 needs Java 17+).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    configured = SparkConf().get("spark.master", None)
    chosen = master or configured or DEFAULT_MASTER
    if chosen.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    if master or not configured:
        builder = builder.master(chosen)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
    }
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    return spark
