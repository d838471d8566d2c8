"""The operator's own Prometheus metrics and its HTTP endpoint (``/metrics``, ``/healthz``).

Metrics (registry :data:`REGISTRY`, names prefixed ``rocket_operator_``):

* ``reconciles_total{result}`` — passes by result: ``converged``, ``waiting``, ``error``;
* ``reconcile_errors_total{kind}`` — failed passes by exception class;
* ``reconcile_duration_seconds`` — histogram of pass durations;
* ``clusters`` — RocketClusters the operator currently serves;
* ``cluster_phase{namespace,cluster,phase}`` — 1 for the phase each cluster reports;
* ``drain_pending_messages{namespace,cluster,broker}`` — backlog left on draining groups;
* ``rolling_restarts_total{namespace,cluster}`` — broker pods deleted to roll them.

Plus prometheus-client's ``process_*``, ``python_info`` and ``python_gc_*``.
"""

from __future__ import annotations

import time

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

PHASES = ["Pending", "Running", "Updating", "Scaling", "Draining", "Degraded", "Paused", "Invalid"]

RECONCILES = Counter("rocket_operator_reconciles", "Reconciliation passes by result", ["result"], registry=REGISTRY)
RECONCILE_ERRORS = Counter("rocket_operator_reconcile_errors", "Failed reconciliation passes by exception class",
                           ["kind"], registry=REGISTRY)
RECONCILE_SECONDS = Histogram("rocket_operator_reconcile_duration_seconds", "Duration of one reconciliation pass",
                              buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=REGISTRY)
CLUSTERS = Gauge("rocket_operator_clusters", "RocketClusters served by this operator", registry=REGISTRY)
CLUSTER_PHASE = Enum("rocket_operator_cluster_phase", "Phase of each RocketCluster", ["namespace", "cluster"],
                     states=PHASES, registry=REGISTRY)
DRAIN_PENDING = Gauge("rocket_operator_drain_pending_messages", "Messages still pending on a draining broker group",
                      ["namespace", "cluster", "broker"], registry=REGISTRY)
ROLLING_RESTARTS = Counter("rocket_operator_rolling_restarts", "Broker pods deleted to roll them to a new revision",
                           ["namespace", "cluster"], registry=REGISTRY)


def forget_cluster(namespace: str, cluster: str) -> None:
    """Drop every labelled series of a deleted RocketCluster."""
    for metric in (CLUSTER_PHASE, ROLLING_RESTARTS):
        try:
            metric.remove(namespace, cluster)
        except KeyError:
            pass
    brokers = {sample.labels["broker"] for family in DRAIN_PENDING.collect() for sample in family.samples
               if sample.labels["namespace"] == namespace and sample.labels["cluster"] == cluster}
    for broker in brokers:
        DRAIN_PENDING.remove(namespace, cluster, broker)


def remove_drain_series(namespace: str, cluster: str, broker: str) -> None:
    """Drop the drain gauge of a broker group that left."""
    try:
        DRAIN_PENDING.remove(namespace, cluster, broker)
    except KeyError:
        pass


class HttpServer:
    """aiohttp server on ``host:port`` serving ``/metrics`` (Prometheus text) and ``/healthz``.

    ``/healthz`` answers 200 while the operator's event loop runs and its last
    heartbeat (:meth:`beat`, called by kopf's liveness timer and each pass) is
    younger than ``stale_after`` seconds, else 503.
    """

    def __init__(self, host: str = "0.0.0.0", port: int = 8080, stale_after: float = 120.0) -> None:
        self.host = host
        self.port = port
        self.stale_after = stale_after
        self.last_beat = time.monotonic()
        self._runner: web.AppRunner | None = None

    def beat(self) -> None:
        """Record that the operator is making progress."""
        self.last_beat = time.monotonic()

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        age = time.monotonic() - self.last_beat
        if age > self.stale_after:
            return web.json_response({"status": "stale", "lastBeatSecondsAgo": round(age, 1)}, status=503)
        return web.json_response({"status": "ok", "lastBeatSecondsAgo": round(age, 1)})

    async def start(self) -> int:
        """Start serving; returns the bound port (useful with port 0). Raises ``OSError`` if taken."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        addresses = self._runner.addresses
        if addresses:
            self.port = int(addresses[0][1])
        return self.port

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
