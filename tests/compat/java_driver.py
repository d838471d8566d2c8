"""One run of a Java driver of this folder (``TimerDriver.java``, ``TransactionDriver.java``)
against a fresh NameServer and one broker of ours.

The driver is compiled like ``bench/compare/Driver.java`` (``bench/compare/java.ensure_driver``)
against Apache RocketMQ's Java client and run once with ``run namesrv=<addr> topic=<topic>
<args>``; it prints its results as JSON lines (``bench/compare/java.driver_results``).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench.compare import java

from tests.compat.cluster import start_cluster


@contextlib.contextmanager
def single_broker_run(root: Path, source: Path, main: str, topic: str, broker_config: dict[str, str],
                      *args: str) -> Iterator[dict[str, Any]]:
    """The driver ``source`` (class ``main``) run once against a cluster of one NameServer and
    ``broker-a`` (with ``broker_config``) under ``root``, after ``topic`` was made with 4 queues.
    Yields the driver's last result with ``_context`` added (its exit code, its stderr's last 40
    lines and the cluster's logs) for assertion messages; the cluster stops on exit. Fails the test
    when the Java client cannot be had or the driver printed no result."""
    try:
        lib = java.ensure_jars()
        classes = java.ensure_driver(lib, source)
    except java.JavaSetupError as exc:
        pytest.fail(f"the Apache RocketMQ Java client is not available: {exc}", pytrace=False)
    with start_cluster(root / "cluster", brokers=("broker-a",), broker_config=broker_config) as cluster:
        cluster.create_topic(topic, queues=4)
        argv = java.driver_argv(lib, classes, root / "home", "run", f"namesrv={cluster.namesrv}", f"topic={topic}",
                                *args, jvm=("-Xms128m", "-Xmx384m"), main=main)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
        results = java.driver_results(proc.stdout)
        result: dict[str, Any] = results[-1] if results else {}
        result["_context"] = (f"driver exit {proc.returncode}; stderr tail:\n"
                              + "\n".join(proc.stderr.splitlines()[-40:]) + f"\n{cluster.logs()}")
        if not results:
            pytest.fail(f"the Java driver printed no result\n{result['_context']}", pytrace=False)
        yield result
