"""Prometheus metrics of a broker (:class:`BrokerMetrics`), on a registry of its own.

Counted as they happen (prefix ``rocketmq_broker_``):

* ``messages_in_total``/``bytes_in_total`` {topic}: stored by producers;
* ``messages_out_total``/``bytes_out_total`` {topic, group}: returned by pulls;
* ``send_latency_seconds``/``pull_latency_seconds``: handling time of a send,
  and of a pull excluding the time it was parked by long polling;
* ``requests_total`` {request_code, response_code};
* ``send_rejected_total`` {reason}: sends answered SYSTEM_BUSY (overload);
* ``flush_latency_seconds``: CommitLog fdatasync time, sampled from the store
  (at most one observation per 0.5 s, the latest flush's duration).

Read at scrape time from the broker (:class:`BrokerCollector`):

* ``commitlog_max_offset``/``commitlog_min_offset`` (bytes), ``disk_usage_ratio`` (0..1);
* ``consumer_lag`` {group, topic, queue_id}: messages not yet consumed;
* ``rocketmq_group_diff`` {cluster, broker, group, topic, countOfOnlineConsumers,
  msgModel}: the same lag summed per topic, named and labelled as the RocketMQ
  exporter does so dashboards built for it work;
* ``parked_pulls``, ``in_flight_sends``, ``client_connections``, ``up``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger("rocket.broker")

PREFIX = "rocketmq_broker_"
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(slots=True)
class LagRow:
    """Lag of one queue: ``broker_offset`` (max, exclusive) minus ``consumer_offset``."""

    group: str
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int

    @property
    def lag(self) -> int:
        """Messages behind (never negative)."""
        return max(0, self.broker_offset - self.consumer_offset)


@dataclass(slots=True)
class GaugeSnapshot:
    """Values the collector reads at scrape time."""

    commitlog_max_offset: int
    commitlog_min_offset: int
    disk_usage_ratio: float
    parked_pulls: int
    in_flight_sends: int
    client_connections: int
    lag: list[LagRow]
    #: group -> (online consumers, message model)
    groups: dict[str, tuple[int, str]]


class BrokerCollector(Collector):
    """Scrape-time gauges, computed from ``snapshot()``."""

    def __init__(self, snapshot: Callable[[], GaugeSnapshot], cluster: Callable[[], str], broker: Callable[[], str]):
        self._snapshot = snapshot
        self._cluster = cluster
        self._broker = broker

    def collect(self) -> Iterable[Metric]:
        try:
            snap = self._snapshot()
        except Exception:
            log.exception("collecting broker metrics failed")
            up = GaugeMetricFamily(PREFIX + "up", "1 when the broker's state could be read")
            up.add_metric([], 0)
            yield up
            return
        yield from self._gauges(snap)

    def _gauges(self, snap: GaugeSnapshot) -> Iterator[Metric]:
        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(PREFIX + name, doc)
            g.add_metric([], value)
            return g

        yield gauge("up", "1 when the broker's state could be read", 1)
        yield gauge("commitlog_max_offset", "End of the CommitLog's written data (bytes)", snap.commitlog_max_offset)
        yield gauge("commitlog_min_offset", "Start of the oldest CommitLog file (bytes)", snap.commitlog_min_offset)
        yield gauge("disk_usage_ratio", "Used fraction of the store's disk (0..1)", snap.disk_usage_ratio)
        yield gauge("parked_pulls", "Pull requests held by long polling", snap.parked_pulls)
        yield gauge("in_flight_sends", "Send requests being processed", snap.in_flight_sends)
        yield gauge("client_connections", "Open client connections", snap.client_connections)
        lag = GaugeMetricFamily(
            PREFIX + "consumer_lag",
            "Messages of a queue not yet consumed by a group (max offset - committed offset)",
            labels=["group", "topic", "queue_id"],
        )
        offset = GaugeMetricFamily(
            PREFIX + "consumer_offset", "Committed consumer offset", labels=["group", "topic", "queue_id"]
        )
        totals: dict[tuple[str, str], int] = {}
        for row in snap.lag:
            lag.add_metric([row.group, row.topic, str(row.queue_id)], row.lag)
            offset.add_metric([row.group, row.topic, str(row.queue_id)], row.consumer_offset)
            key = (row.group, row.topic)
            totals[key] = totals.get(key, 0) + row.lag
        yield lag
        yield offset
        diff = GaugeMetricFamily(
            "rocketmq_group_diff",
            "Consumer lag of a group on a topic (RocketMQ exporter name)",
            labels=["cluster", "broker", "group", "topic", "countOfOnlineConsumers", "msgModel"],
        )
        cluster, broker = self._cluster(), self._broker()
        for (group, topic), total in sorted(totals.items()):
            online, model = snap.groups.get(group, (0, ""))
            diff.add_metric([cluster, broker, group, topic, str(online), model], total)
        yield diff


class BrokerMetrics:
    """The broker's metric objects and their registry (never the global one)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.messages_in = Counter(PREFIX + "messages_in", "Messages stored by producers", ["topic"], registry=r)
        self.bytes_in = Counter(PREFIX + "bytes_in", "Message body bytes stored by producers", ["topic"], registry=r)
        self.messages_out = Counter(
            PREFIX + "messages_out", "Messages returned to consumers by pulls", ["topic", "group"], registry=r
        )
        self.bytes_out = Counter(
            PREFIX + "bytes_out", "Stored-record bytes returned to consumers by pulls", ["topic", "group"], registry=r
        )
        self.send_latency = Histogram(
            PREFIX + "send_latency_seconds", "Time to handle a send request", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.pull_latency = Histogram(
            PREFIX + "pull_latency_seconds",
            "Time to handle a pull request, excluding long-poll parking",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.flush_latency = Histogram(
            PREFIX + "flush_latency_seconds", "CommitLog flush (fsync) time", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.requests = Counter(
            PREFIX + "requests", "Requests handled", ["request_code", "response_code"], registry=r
        )
        self.send_rejected = Counter(
            PREFIX + "send_rejected", "Sends refused with SYSTEM_BUSY (overload)", ["reason"], registry=r
        )
        self.notify_sent = Counter(
            PREFIX + "notify_consumer_ids_changed", "NOTIFY_CONSUMER_IDS_CHANGED requests sent", registry=r
        )

        # Labelled children, cached: ``labels()`` costs more than the increment itself.
        self._requests: dict[tuple[int, int | None], Any] = {}
        self._in: dict[str, tuple[Any, Any]] = {}
        self._out: dict[tuple[str, str], tuple[Any, Any]] = {}

    def observe_request(self, request_code: int, seconds: float, response_code: int | None) -> None:
        """A :class:`rocket.remoting.Processors` observer: counts every request."""
        key = (request_code, response_code)
        child = self._requests.get(key)
        if child is None:
            child = self._requests[key] = self.requests.labels(
                str(request_code), "none" if response_code is None else str(response_code)
            )
        child.inc()

    def count_in(self, topic: str, messages: int, nbytes: int) -> None:
        """Messages stored to ``topic``."""
        pair = self._in.get(topic)
        if pair is None:
            pair = self._in[topic] = (self.messages_in.labels(topic), self.bytes_in.labels(topic))
        pair[0].inc(messages)
        pair[1].inc(nbytes)

    def count_out(self, topic: str, group: str, messages: int, nbytes: int) -> None:
        """Messages pulled from ``topic`` by ``group``."""
        key = (topic, group)
        pair = self._out.get(key)
        if pair is None:
            pair = self._out[key] = (self.messages_out.labels(topic, group), self.bytes_out.labels(topic, group))
        pair[0].inc(messages)
        pair[1].inc(nbytes)

    def install_collector(self, collector: Collector) -> None:
        """Register the scrape-time collector."""
        self.registry.register(collector)

    def render(self) -> bytes:
        """The text exposition format of every metric."""
        return generate_latest(self.registry)
