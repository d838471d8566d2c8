"""Fixtures of the compatibility suite: the real client's venv, clusters, drivers.

Environment knobs (all optional):

* ``ROCKET_COMPAT_VENV``     — where the real client's virtualenv lives (default ``.venv-compat/``)
* ``ROCKET_COMPAT_WIRETAP=1`` — put a recording proxy between the real client and the servers;
  frames go to ``<test tmp>/wiretap.jsonl`` (see ``wiretap.py``)
* ``ROCKET_COMPAT_CPP_LOG``  — the C++ core's log level (``warn`` by default; ``debug`` is verbose)
* ``ROCKET_COMPAT_JAVA_LIB`` — run against the Apache RocketMQ Java servers instead (see ``cluster.py``)
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat.cluster import Cluster, start_cluster
from tests.compat.realclient import CompatVenvError, Driver, ensure_venv
from tests.compat.wiretap import Wiretap


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "compat: drives the real RocketMQ C++ client (PyPI rocketmq==0.4.4) against our servers"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="session")
def compat_python() -> Path:
    """The real client's interpreter; creating its venv on first use. Fails (never skips) when it cannot."""
    try:
        return ensure_venv()
    except CompatVenvError as exc:
        pytest.fail(f"the real RocketMQ client is not available: {exc}", pytrace=False)


ClusterFactory = Callable[..., Cluster]


@pytest.fixture
def cluster_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ClusterFactory]:
    """``cluster_factory(**start_cluster kwargs)`` starts a cluster for this test; all stop at teardown.

    When the test fails, the servers' log tails (and the wiretap file, if on)
    are printed into the test report.
    """
    stack = contextlib.ExitStack()
    clusters: list[Cluster] = []
    taps: list[Wiretap] = []

    def make(**kwargs: Any) -> Cluster:
        root = tmp_path / f"cluster{len(clusters)}"
        cluster = stack.enter_context(start_cluster(root, **kwargs))
        if os.environ.get("ROCKET_COMPAT_WIRETAP") == "1":
            tap = Wiretap(tmp_path / "wiretap.jsonl")
            taps.append(tap)
            cluster.client_namesrv = ";".join(tap.nameserver(ns.addr) for ns in cluster.namesrvs)
        clusters.append(cluster)
        return cluster

    with stack:
        yield make
        report = getattr(request.node, "rep_call", None)
        failed = report is None or report.failed
        if failed:
            for cluster in clusters:
                print(f"\n===== server logs of {cluster.root} =====\n{cluster.logs()}")
            if taps:
                print(f"\n===== wiretap: {tmp_path / 'wiretap.jsonl'} =====")
    for tap in taps:
        tap.close()
    if not failed:
        for cluster in clusters:
            shutil.rmtree(cluster.root / "store", ignore_errors=True)


@pytest.fixture
def cluster(cluster_factory: ClusterFactory) -> Cluster:
    """One NameServer and two broker groups (broker-a, broker-b)."""
    return cluster_factory()


@pytest.fixture
def driver_for(compat_python: Path, tmp_path: Path) -> Callable[[Cluster], Driver]:
    """``driver_for(cluster)``: a :class:`Driver` pointed at that cluster's NameServers."""

    def make(cluster: Cluster) -> Driver:
        level = os.environ.get("ROCKET_COMPAT_CPP_LOG", "warn")
        return Driver(compat_python, cluster.client_namesrv, tmp_path / "home", log_level=level)

    return make


@pytest.fixture
def driver(driver_for: Callable[[Cluster], Driver], cluster: Cluster) -> Driver:
    return driver_for(cluster)
