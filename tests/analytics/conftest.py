"""Fixtures of the analytics tests: one real SparkSession (local[2]) per test session, LogHub data,
and an embedded cluster (NameServer + broker processes on loopback) for the data-source tests.

Every skip says what was skipped and why (no pyspark, no LogHub sample, …).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocket.analytics import loghub

#: Small store files so that a test cluster needs little disk: 64 MiB CommitLog segments,
#: 6,000-entry ConsumeQueue files.
SMALL_STORE_ARGS = ["--set", "mappedFileSizeCommitLog=67108864", "--set", "mappedFileSizeConsumeQueue=120000"]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The tests' shared SparkSession (local[2], UTC, 2 shuffle partitions)."""
    pytest.importorskip("pyspark", reason="pyspark is not installed: install the 'analytics' extra")
    from rocket.analytics.session import spark_session

    session = spark_session("rocket-analytics-tests", master="local[2]",
                            conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def loghub_root() -> Path:
    """``../shared/data/loghub`` when present, else the 200-line sample shipped in ``rocket/data/loghub``."""
    root = loghub.find_loghub_dir()
    if root is None:
        pytest.skip("SKIPPED: no LogHub data (neither ../shared/data/loghub nor rocket/data/loghub)")
    return root


@pytest.fixture(scope="session")
def loghub_truth_root(loghub_root: Path) -> Path:
    """A LogHub folder that has the ground truth (``*_structured.csv``)."""
    if not any(loghub.structured_path(loghub_root, s) for s in loghub.SYSTEMS):
        pytest.skip(f"SKIPPED accuracy against ground truth: {loghub_root} has no *_structured.csv "
                    "(the shipped 200-line sample has none; ../shared/data/loghub has)")
    return loghub_root


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    """A running embedded cluster (2 NameServers, broker-a and broker-b) with small store files."""
    from rocket.local import running_cluster

    data = Path(tempfile.mkdtemp(prefix="rocket-analytics-it-"))
    with running_cluster(data, extra_broker_args=SMALL_STORE_ARGS) as state:
        yield state
    import shutil

    shutil.rmtree(data, ignore_errors=True)
