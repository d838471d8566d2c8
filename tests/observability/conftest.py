"""Fixtures for the observability tests: a real Prometheus on loopback, the embedded cluster with
a little traffic, and what its processes export on /metrics."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.observability.tools import need_helm, need_prometheus
from tests.support import ROOT, free_port, rocket_command, running, terminate

HERE = Path(__file__).resolve().parent
CHART = ROOT / "charts" / "rocketcluster-operator"
RULES = CHART / "rules" / "rocketcluster.rules.yaml"
DASHBOARDS = CHART / "dashboards"
LOCAL_CLUSTER_NAME = "DefaultCluster"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Install promtool/prometheus and helm (when missing) before these tests run, outside the
    per-test timeout. A failure is not raised here: each test that needs the tool fails with it."""
    if not any(Path(str(item.fspath)).is_relative_to(HERE) for item in items):
        return
    for need in (need_prometheus, need_helm):
        try:
            need()
        except pytest.fail.Exception:
            pass


# ---- Prometheus -------------------------------------------------------------------------------------

@dataclass
class Prometheus:
    """A Prometheus server started by a test; ``url`` is its base URL."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str, **params: str) -> tuple[int, dict[str, Any]]:
        """GET ``/api/v1/<path>``: (HTTP status, decoded JSON body)."""
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def query(self, expr: str) -> tuple[int, dict[str, Any]]:
        """An instant query."""
        return self.api("query", query=expr)

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def run_prometheus(config: dict[str, Any], workdir: Path) -> Iterator[Prometheus]:
    """Start Debian's ``prometheus`` with ``config`` on a free loopback port; stop it afterwards."""
    binary = need_prometheus()
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    log = workdir / "prometheus.log"
    argv = [
        binary,
        f"--config.file={cfg}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1h",
        "--log.level=warn",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    prom = Prometheus(f"http://127.0.0.1:{port}", proc, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited with {proc.returncode}:\n{prom.log_tail()}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        break
            if time.monotonic() > deadline:
                pytest.fail(f"prometheus not ready after 30 s:\n{prom.log_tail()}")
            time.sleep(0.2)
        yield prom
    finally:
        terminate(proc)


@pytest.fixture(scope="session")
def prometheus_parser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A Prometheus with nothing to scrape: its query API is the PromQL parser (400 on bad syntax)."""
    config = {"global": {"scrape_interval": "1m", "evaluation_interval": "1m"}, "scrape_configs": []}
    with run_prometheus(config, tmp_path_factory.mktemp("prometheus-parser")) as prom:
        yield prom


# ---- the embedded cluster -------------------------------------------------------------------------

@dataclass
class Target:
    """One process of the embedded cluster as a scrape target."""

    name: str
    job: str
    http_port: int
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.http_port}"


@dataclass
class EmbeddedCluster:
    namesrv: str
    targets: list[Target]
    topic: str
    group: str


TOPIC = "observability-orders"
GROUP = "observability-billing"


def _cli(*args: str, timeout: float = 60) -> str:
    proc = subprocess.run(rocket_command(*args), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"rocket {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="session")
def embedded_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    """``rocket local``'s embedded cluster (2 NameServers, brokers broker-a and broker-b) with
    traffic: a topic, 60 messages produced, 20 of them consumed by a group (so it has lag)."""
    from rocket.local import running_cluster

    with running_cluster(tmp_path_factory.mktemp("embedded-cluster")) as state:
        targets = []
        for proc in state.processes:
            if proc.kind == "controller":
                continue  # the controllers' metrics are covered by tests/integration/test_controller_cluster.py
            if proc.kind == "nameserver":
                targets.append(Target(proc.name, "rocketmq-nameserver", proc.http_port,
                                      {"cluster": LOCAL_CLUSTER_NAME, "namespace": "local"}))
            else:
                targets.append(Target(proc.name, "rocketmq-broker", proc.http_port,
                                      {"cluster": LOCAL_CLUSTER_NAME, "namespace": "local", "broker": proc.name}))
        ns = state.namesrv
        _cli("topic", "create", TOPIC, "--queues", "4", "--namesrv", ns)
        _cli("produce", TOPIC, "--count", "60", "--size", "64", "--quiet", "--namesrv", ns)
        _cli("consume", TOPIC, "--group", GROUP, "--from", "first", "--count", "20", "--timeout", "10",
             "--quiet", "--namesrv", ns)
        yield EmbeddedCluster(ns, targets, TOPIC, GROUP)


OPERATOR_ENDPOINT = """
import asyncio, sys
from rocket_operator.metrics import HttpServer

async def main() -> None:
    server = HttpServer("127.0.0.1", int(sys.argv[1]))
    await server.start()
    await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.fixture(scope="session")
def operator_endpoint() -> Iterator[Target]:
    """The operator's own /metrics + /healthz server (rocket_operator.metrics.HttpServer, serving the
    registry the operator fills), in a process of its own. The operator itself needs an API
    server; tests/observability/test_chart_k8s.py runs it against one."""
    port = free_port()
    with running([sys.executable, "-c", OPERATOR_ENDPOINT, str(port)], port=port):
        yield Target("rocket-operator", "rocketcluster-operator", port, {"namespace": "rocket-system"})


def scrape(address: str) -> dict[str, Any]:
    """Parse ``http://address/metrics``: family name -> family (prometheus-client's parser)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {fam.name: fam for fam in text_string_to_metric_families(text)}


#: Sample-name suffixes of each metric type (text format 0.0.4 as prometheus-client writes it).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}


def sample_names(families: dict[str, Any]) -> set[str]:
    """Every sample name the families expose or would expose once a labelled child exists (a
    counter with no children yet still declares ``x_total``)."""
    names: set[str] = set()
    for fam in families.values():
        names.update(s.name for s in fam.samples)
        names.update(fam.name + suffix for suffix in SUFFIXES.get(fam.type, ("",)))
    return names


@pytest.fixture(scope="session")
def all_targets(embedded_cluster: EmbeddedCluster, operator_endpoint: Target) -> list[Target]:
    return [*embedded_cluster.targets, operator_endpoint]


@pytest.fixture(scope="session")
def exported_samples(all_targets: list[Target]) -> dict[str, set[str]]:
    """Job -> every sample name its processes expose (live scrape of each process's /metrics)."""
    out: dict[str, set[str]] = {}
    for target in all_targets:
        out.setdefault(target.job, set()).update(sample_names(scrape(target.address)))
    return out


@pytest.fixture(scope="session")
def prometheus_scraping(all_targets: list[Target],
                        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A Prometheus scraping every process of the embedded cluster and the operator's endpoint each
    second, with the chart's alert rules loaded; returned once every target is up."""
    jobs: dict[str, list[dict[str, Any]]] = {}
    for t in all_targets:
        jobs.setdefault(t.job, []).append({"targets": [t.address], "labels": {**t.labels, "pod": t.name}})
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            # honor_labels as in the chart's monitors: rocketmq_group_diff and the operator's series
            # bring their own cluster/broker/namespace labels.
            {"job_name": job, "honor_labels": True, "static_configs": static}
            for job, static in jobs.items()
        ],
    }
    with run_prometheus(config, tmp_path_factory.mktemp("prometheus-scraping")) as prom:
        expected = len(all_targets)
        deadline = time.monotonic() + 30
        while True:
            status, body = prom.query("up == 1")
            up = len(body.get("data", {}).get("result", [])) if status == 200 else 0
            if up == expected:
                break
            if time.monotonic() > deadline:
                _, targets = prom.api("targets")
                pytest.fail(f"only {up}/{expected} targets up after 30 s: {json.dumps(targets)[:2000]}")
            time.sleep(0.3)
        yield prom
