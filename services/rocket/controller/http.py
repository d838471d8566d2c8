"""The controller's HTTP side (aiohttp) and its Prometheus metrics.

Routes: ``GET /healthz`` (200 while the process serves); ``GET /readyz`` (200 once the
controller has joined Raft and listens, 503 before; the body's ``leader`` names the leader, null
while there is none); ``GET /metrics`` (Prometheus text); ``GET /api/v1/controller``
(:meth:`ControllerManager.status`: the Raft view and every broker group's master, epochs,
SyncStateSet and brokers).

Metrics, RocketMQ 5's controller metric names (``ControllerMetricsConstant``) with the
``rocketmq_controller_`` prefix where it has one, and its labels ``cluster`` and ``broker_set``:

| metric | type | meaning |
|---|---|---|
| ``rocketmq_controller_role`` | gauge | 1 on the ready Raft leader, else 0 |
| ``rocketmq_controller_raft_term``, ``_raft_commit_index``, ``_raft_last_applied`` | gauge | pysyncobj's figures |
| ``rocketmq_controller_active_broker_num`` | gauge | brokers whose heartbeats are current |
| ``rocketmq_controller_master_epoch`` | gauge | the group's master epoch |
| ``rocketmq_controller_sync_state_set_size`` | gauge | members of the SyncStateSet |
| ``rocketmq_controller_has_master`` | gauge | 1 while the group has a master |
| ``rocketmq_controller_election_total`` | counter | ELECT_MASTER outcomes here, by ``election_result``: |
| | | ``new_master_elected``, ``keep_current_master``, ``no_master_elected`` |
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rocket.remoting.http import probe_app, prometheus_response

if TYPE_CHECKING:
    from rocket.auth.http import HttpAuth
    from rocket.controller.manager import ControllerManager


class ControllerCollector(Collector):
    """Reads the metrics above from a :class:`ControllerManager` at scrape time."""

    def __init__(self, manager: ControllerManager) -> None:
        self.manager = manager

    def collect(self) -> Iterator[Metric]:
        """Export the current figures."""
        m = self.manager
        role = GaugeMetricFamily("rocketmq_controller_role", "1 on the ready Raft leader, else 0.")
        role.add_metric([], 1.0 if m.raft.is_leader else 0.0)
        yield role
        raft = m.raft.status()
        for key, name, doc in (("raft_term", "raft_term", "Raft term."),
                               ("commit_idx", "raft_commit_index", "Raft commit index."),
                               ("last_applied", "raft_last_applied", "Last Raft entry applied here.")):
            gauge = GaugeMetricFamily(f"rocketmq_controller_{name}", doc)
            gauge.add_metric([], float(raft.get(key) or 0))
            yield gauge
        labels = ["cluster", "broker_set"]
        active = GaugeMetricFamily("rocketmq_controller_active_broker_num", "Brokers with current heartbeats.",
                                   labels=labels)
        epoch = GaugeMetricFamily("rocketmq_controller_master_epoch", "The group's master epoch.", labels=labels)
        size = GaugeMetricFamily("rocketmq_controller_sync_state_set_size", "Members of the SyncStateSet.",
                                 labels=labels)
        has_master = GaugeMetricFamily("rocketmq_controller_has_master", "1 while the group has a master.",
                                       labels=labels)
        alive = Tally((c, b) for c, b, _ in m.heartbeats.active_brokers())
        with m.raft.lock:
            groups = [(g.cluster_name, name, g.master_epoch, len(g.sync_state_set), g.master_broker_id is not None)
                      for name, g in sorted(m.replicas.groups.items())]
        for cluster, name, master_epoch, members, mastered in groups:
            active.add_metric([cluster, name], float(alive.get((cluster, name), 0)))
            epoch.add_metric([cluster, name], float(master_epoch))
            size.add_metric([cluster, name], float(members))
            has_master.add_metric([cluster, name], 1.0 if mastered else 0.0)
        yield from (active, epoch, size, has_master)
        elections = CounterMetricFamily("rocketmq_controller_election", "ELECT_MASTER outcomes on this controller.",
                                        labels=[*labels, "election_result"])
        for (cluster, name, result), count in sorted(m.election_counts.items()):
            elections.add_metric([cluster, name, result], float(count))
        yield elections


def controller_registry(manager: ControllerManager) -> CollectorRegistry:
    """A registry of its own holding the controller's metrics and the process collectors."""
    from prometheus_client import GCCollector, PlatformCollector, ProcessCollector

    reg = CollectorRegistry(auto_describe=False)
    reg.register(ControllerCollector(manager))
    ProcessCollector(registry=reg)
    PlatformCollector(registry=reg)
    GCCollector(registry=reg)
    return reg


_MANAGER_KEY: web.AppKey[ControllerManager] = web.AppKey("controller")
_READY_KEY: web.AppKey[Callable[[], bool]] = web.AppKey("ready")
_REGISTRY_KEY: web.AppKey[CollectorRegistry] = web.AppKey("registry")


def add_controller_routes(app: web.Application, manager: ControllerManager) -> None:
    """Add ``GET /api/v1/controller`` to an existing application (the NameServer's)."""
    app[_MANAGER_KEY] = manager
    app.router.add_get("/api/v1/controller", _status)


def build_app(manager: ControllerManager, registry: CollectorRegistry, ready: Callable[[], bool],
              http_auth: HttpAuth | None = None) -> web.Application:
    """The standalone controller's application: probes, metrics, status; ``http_auth`` (when
    given) guards ``/api/v1`` (:mod:`rocket.auth.http`)."""
    app = probe_app(http_auth, _readyz, _metrics)
    app[_READY_KEY] = ready
    app[_REGISTRY_KEY] = registry
    add_controller_routes(app, manager)
    return app


async def _readyz(request: web.Request) -> web.Response:
    manager = request.app[_MANAGER_KEY]
    leader = manager.raft.leader
    body = {"leader": leader.address if leader else None, "isLeader": manager.raft.is_leader}
    if request.app[_READY_KEY]():
        return web.json_response({"status": "ready", **body})
    return web.json_response({"status": "not ready", **body}, status=503)


async def _metrics(request: web.Request) -> web.Response:
    return prometheus_response(generate_latest(request.app[_REGISTRY_KEY]))


async def _status(request: web.Request) -> web.Response:
    return web.json_response(request.app[_MANAGER_KEY].status())
