"""Fixtures of the tests against a real Kubernetes API server.

When any test of this directory is collected, the control-plane binaries are
built first if the cache lacks them (``tests/k8s/control_plane.sh build``,
~7-12 min on 2 cores, once per machine). If the build fails, every k8s test
fails with the reason. The session then runs one control plane, one fake
kubelet and one operator (kopf in this process) for all tests; each test
works in its own namespace.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.k8s import harness
from tests.k8s.fakes import FakeAdmin, RoutingAdmin, TestResolver
from tests.support import free_port

_BUILD: dict[str, str | None] = {}


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Build the control plane (once) before any k8s test runs, outside the per-test timeout."""
    here = Path(__file__).parent
    if "result" in _BUILD or not any(Path(str(item.fspath)).is_relative_to(here) for item in items):
        return
    if harness.binaries_present():
        _BUILD["result"] = None
        return
    log = Path(tempfile.gettempdir()) / "rocketcluster-k8s-build.log"
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"building the Kubernetes control plane for tests/k8s (once; log: {log}) ...")
    else:
        print(f"building the Kubernetes control plane (log: {log}) ...", file=sys.stderr)
    _BUILD["result"] = harness.build_control_plane(log)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.ControlPlane]:
    """A running control plane; fails (not skips) when it cannot be built or started."""
    failure = _BUILD.get("result")
    if failure is None and not harness.binaries_present():
        failure = harness.build_control_plane(Path(tempfile.gettempdir()) / "rocketcluster-k8s-build.log")
        _BUILD["result"] = failure
    if failure:
        pytest.fail(f"cannot build the Kubernetes control plane: {failure}", pytrace=False)
    cp = harness.ControlPlane(tmp_path_factory.mktemp("k8s-run"))
    try:
        cp.start()
    except RuntimeError as exc:
        cp.stop()
        pytest.fail(f"cannot start the Kubernetes control plane: {exc}", pytrace=False)
    os.environ["KUBECONFIG"] = str(cp.kubeconfig)
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def api(control_plane: harness.ControlPlane) -> Iterator[Any]:
    """``kubernetes.client.ApiClient`` with the CRD installed."""
    client = harness.api_client(control_plane.kubeconfig)
    harness.install_crd(client)
    yield client
    client.close()


@pytest.fixture(scope="session")
def kubelet(api: Any) -> Iterator[harness.FakeKubelet]:
    """The fake node + kubelet duties + PV pool."""
    fake = harness.FakeKubelet(api)
    fake.start()
    yield fake
    fake.stop()


class OperatorHarness:
    """The running operator with its test hooks: ``admin`` (fake), ``resolver``, ``runner``."""

    def __init__(self) -> None:
        from rocket_operator.admin import RemotingClusterAdmin

        self.fake = FakeAdmin()
        self.resolver = TestResolver()
        self.real_timeout = 3.0
        self.webhook_port = free_port()
        self.runner = harness.OperatorRunner(self._configure)
        self._real = RemotingClusterAdmin

    def _configure(self) -> None:
        from rocket_operator import handlers
        from rocket_operator.settings import OperatorSettings

        handlers.configure(
            resolver=lambda s: self.resolver,
            admin=lambda s: RoutingAdmin(self.fake, self._real(timeout=self.real_timeout)),
            # the pods/eviction webhook on loopback: the API server calls https://127.0.0.1:<port>
            settings=OperatorSettings(http_host="127.0.0.1", http_port=0, recheck_seconds=0.5, resync_seconds=3.0,
                                      webhook_addr="127.0.0.1", webhook_port=self.webhook_port),
        )

    def http_port(self) -> int:
        """Port of the operator's /metrics + /healthz."""
        from rocket_operator import handlers

        http = handlers.state().http
        assert http is not None
        return http.port


@pytest.fixture(scope="session")
def operator(api: Any, kubelet: harness.FakeKubelet) -> Iterator[OperatorHarness]:
    """rocket_operator running under kopf for the whole session."""
    op = OperatorHarness()
    op.runner.start()
    yield op
    op.runner.stop()


@pytest.fixture
def namespace(api: Any) -> Iterator[str]:
    """A fresh namespace, deleted afterwards."""
    with harness.temporary_namespace(api, "t") as name:
        yield name
