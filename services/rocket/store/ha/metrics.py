"""Replication metrics (prefix ``rocketmq_broker_ha_``), on the broker's own registry.

Counted as they happen:

* ``transferred_bytes_total``: CommitLog bytes a master sent to slaves;
* ``received_bytes_total``: bytes a slave received and appended;
* ``sync_results_total`` {result=ok|timeout|slave_not_available}: SYNC_MASTER sends by outcome;
* ``sync_wait_seconds``: how long SYNC_MASTER sends waited for a slave;
* ``slave_connections_total``: slave connections accepted by a master;
* ``truncations_total``/``truncated_bytes_total``: divergent tails cut by a returning master;
* ``role_changes_total`` {to=master|slave|fenced}: promotions, demotions and (controller mode)
  masters fencing themselves.

Read at scrape time (:class:`HACollector`):

* ``slave_lag_bytes`` / ``slave_lag_seconds`` / ``slave_in_sync`` / ``slave_ack_offset_bytes`` {slave}:
  per slave connected to this master — bytes not yet acknowledged, age of the
  oldest one, 1 while within ``haSlaveFallbehindMax``, the slave's last report;
* ``slaves``: slaves connected to this master;
* ``connection_state`` {state}: a slave's connection to its master, 1 for the current state
  (disconnected, connecting, handshaking, transferring, refused);
* ``master_lag_bytes``: a slave's distance to its master's end as of the last handshake/transfer;
* ``epoch``: the newest epoch of this broker's epoch file; ``is_master``: 1 on a master.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rocket.store.ha.protocol import STATES

log = logging.getLogger("rocket.store.ha")

PREFIX = "rocketmq_broker_ha_"
_WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass(slots=True)
class SlaveRow:
    """One slave as seen by its master."""

    slave: str
    lag_bytes: int
    lag_seconds: float
    in_sync: bool
    ack_offset: int


@dataclass(slots=True)
class HASnapshot:
    """What :class:`HACollector` reads at scrape time."""

    is_master: bool
    epoch: int
    slaves: list[SlaveRow] = field(default_factory=list)
    state: str = "disconnected"
    master_lag_bytes: int = 0


class HAMetrics:
    """Counters and the histogram of replication; see the module doc."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.transferred_bytes = Counter(PREFIX + "transferred_bytes", "CommitLog bytes sent to slaves",
                                         registry=r)
        self.received_bytes = Counter(PREFIX + "received_bytes", "CommitLog bytes received from the master",
                                      registry=r)
        self.sync_results = Counter(PREFIX + "sync_results", "SYNC_MASTER sends by replication outcome",
                                    ["result"], registry=r)
        self.sync_wait = Histogram(PREFIX + "sync_wait_seconds", "Time SYNC_MASTER sends waited for a slave",
                                   buckets=_WAIT_BUCKETS, registry=r)
        self.connections_total = Counter(PREFIX + "slave_connections", "Slave connections accepted", registry=r)
        self.truncations = Counter(PREFIX + "truncations", "Divergent CommitLog tails cut before replicating",
                                   registry=r)
        self.truncated_bytes = Counter(PREFIX + "truncated_bytes", "CommitLog bytes cut as divergent",
                                       registry=r)
        self.role_changes = Counter(PREFIX + "role_changes", "Promotions, demotions and fencings", ["to"], registry=r)


class HACollector(Collector):
    """Scrape-time replication gauges from ``snapshot()``."""

    def __init__(self, snapshot: Callable[[], HASnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        try:
            snap = self._snapshot()
        except Exception:
            log.exception("collecting replication metrics failed")
            return
        lag = GaugeMetricFamily(PREFIX + "slave_lag_bytes", "CommitLog bytes a slave has not acknowledged",
                                labels=["slave"])
        lag_s = GaugeMetricFamily(PREFIX + "slave_lag_seconds",
                                  "Age of the oldest CommitLog byte a slave has not acknowledged (seconds)",
                                  labels=["slave"])
        in_sync = GaugeMetricFamily(PREFIX + "slave_in_sync", "1 while a slave is within haSlaveFallbehindMax",
                                    labels=["slave"])
        ack = GaugeMetricFamily(PREFIX + "slave_ack_offset_bytes", "A slave's last reported CommitLog offset",
                                labels=["slave"])
        for row in snap.slaves:
            lag.add_metric([row.slave], row.lag_bytes)
            lag_s.add_metric([row.slave], row.lag_seconds)
            in_sync.add_metric([row.slave], 1 if row.in_sync else 0)
            ack.add_metric([row.slave], row.ack_offset)
        yield lag
        yield lag_s
        yield in_sync
        yield ack
        slaves = GaugeMetricFamily(PREFIX + "slaves", "Slaves connected to this master")
        slaves.add_metric([], len(snap.slaves))
        yield slaves
        state = GaugeMetricFamily(PREFIX + "connection_state",
                                  "A slave's replication connection to its master: 1 for the current state",
                                  labels=["state"])
        for name in STATES:
            state.add_metric([name], 1 if (not snap.is_master and snap.state == name) else 0)
        yield state
        mlag = GaugeMetricFamily(PREFIX + "master_lag_bytes",
                                 "A slave's distance to its master's CommitLog end, as last known (bytes)")
        mlag.add_metric([], snap.master_lag_bytes)
        yield mlag
        epoch = GaugeMetricFamily(PREFIX + "epoch", "Newest epoch of this broker's epoch file")
        epoch.add_metric([], snap.epoch)
        yield epoch
        master = GaugeMetricFamily(PREFIX + "is_master", "1 when this broker is its group's master")
        master.add_metric([], 1 if snap.is_master else 0)
        yield master
