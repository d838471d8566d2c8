"""Spark jobs: ``traffic`` and ``logs`` (each runnable with spark-submit or ``rocket analytics <job>``)."""
