"""Prometheus metrics of a broker (:class:`BrokerMetrics`), on a registry of its own.

Counted as they happen (prefix ``rocketmq_broker_``):

* ``messages_in_total``/``in_bytes_total`` {topic}: stored by producers;
* ``messages_out_total``/``out_bytes_total`` {topic, group}: returned by pulls;
* ``send_latency_seconds``/``pull_latency_seconds``: handling time of a send,
  and of a pull excluding the time it was parked by long polling;
* ``requests_total`` {request_code, response_code};
* ``send_rejected_total`` {reason}: sends answered SYSTEM_BUSY (overload);
* ``flush_latency_seconds``: CommitLog fdatasync time, sampled from the store
  (at most one observation per 0.5 s, the latest flush's duration);
* ``transaction_half_messages_total``/``_commits_total``/``_rollbacks_total``/
  ``_discarded_total`` {topic}, ``transaction_checks_total`` {topic, result} and
  ``transaction_end_refused_total``: registered on this registry by
  :class:`rocket.broker.transaction.TransactionMetrics`.

Read at scrape time from the broker (:class:`BrokerCollector`):

* ``commitlog_max_offset_bytes``/``commitlog_min_offset_bytes``, ``disk_usage_ratio`` (0..1);
* ``consumer_lag`` {group, topic, queue_id}: messages not yet consumed;
* ``parked_pulls``, ``in_flight_sends``, ``client_connections``, ``up``.

And, named and labelled as the RocketMQ exporter does (so that dashboards and
alerts built for it work), from the same scrape-time snapshot:

* ``rocketmq_group_diff`` {cluster, broker, group, topic, countOfOnlineConsumers,
  msgModel}: the lag summed per topic;
* ``rocketmq_group_get_latency_by_storetime`` {cluster, broker, topic, group}:
  milliseconds since the oldest unconsumed message was stored (max over queues,
  0 when caught up);
* ``rocketmq_producer_offset`` {cluster, broker, topic} and
  ``rocketmq_consumer_offset`` {cluster, broker, topic, group}: queue offsets
  summed over the topic's queues (max offset / committed offset);
* ``rocketmq_producer_tps`` {cluster, broker, topic}, ``rocketmq_consumer_tps``
  {cluster, broker, topic, group}, ``rocketmq_broker_tps`` and
  ``rocketmq_broker_qps`` {cluster, broker}: messages per second put / got,
  moving rates over the last minute computed at scrape time from the
  ``messages_in``/``messages_out`` counters (:class:`MovingRates`), so the
  send and pull paths pay nothing for them.

Process metrics (``process_*``, ``python_*``) come from prometheus-client's
collectors, registered on the broker's registry.
"""

from __future__ import annotations

import bisect
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client import metrics as _prom_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString as _untyped_float_to_go_string

log = logging.getLogger("rocket.broker")

#: prometheus_client's ``le`` label formatting (``0.5``, ``+Inf``); the library leaves it unannotated.
_float_to_go_string: Callable[[float], str] = _untyped_float_to_go_string

PREFIX = "rocketmq_broker_"
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Window of the exporter-style TPS gauges (seconds): RocketMQ's "last minute" rates.
RATE_WINDOW = 60.0

K = TypeVar("K", bound=Hashable)


class MovingRates(Generic[K]):
    """Per-key rates of ever-increasing totals over the last ``window`` seconds, sampled at scrape time.

    :meth:`rates` is given the current totals (counter values) and answers
    ``(total now - total at the base sample) / elapsed``, where the base is the
    newest kept sample at least ``window`` old (or the oldest one while the
    process is younger than that: the first sample is all zeros at creation,
    when the counters start). Scrapes further apart than ``window`` therefore
    give the rate since the previous scrape. A sample is kept at most once per
    ``min_interval``, so memory stays bounded whatever the scrape rate.
    """

    def __init__(self, window: float = RATE_WINDOW, *, min_interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self.min_interval = min_interval
        self._clock = clock
        self._samples: deque[tuple[float, dict[K, float]]] = deque([(clock(), {})])

    def rates(self, totals: Mapping[K, float]) -> dict[K, float]:
        """Per-second rate of every key of ``totals`` (keys absent from the base count from 0)."""
        now = self._clock()
        samples = self._samples
        while len(samples) > 1 and samples[1][0] <= now - self.window:
            samples.popleft()
        base_time, base = samples[0]
        elapsed = now - base_time
        if elapsed > 0:
            out = {k: max(0.0, v - base.get(k, 0.0)) / elapsed for k, v in totals.items()}
        else:
            out = dict.fromkeys(totals, 0.0)
        if now - samples[-1][0] >= self.min_interval:
            samples.append((now, dict(totals)))
        return out


def _use_created() -> bool:
    """Whether ``*_created`` samples are exported (prometheus-client's switch, read at scrape time)."""
    return bool(getattr(_prom_metrics, "_use_created", True))


class _CounterChild:
    """``counter.labels(...)``: one labelled series, incremented without a lock."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        """Add ``amount`` (>= 0)."""
        self.value += amount


class FastCounter(Collector):
    """A labelled counter for the event loop's hot paths: plain numbers, no lock, read at scrape time.

    Exported exactly as ``prometheus_client.Counter(name, documentation, labelnames)``
    is (``<name>_total`` and ``<name>_created`` per label set, in creation order), but
    :meth:`inc` is a dict lookup and an addition: ``Counter.inc`` takes a mutex per call.
    Not thread-safe: increment it from one thread (the broker's event loop) only.
    """

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...] | list[str],
                 registry: CollectorRegistry | None = None) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], _CounterChild] = {}
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str) -> _CounterChild:
        """The series of these label values (created at 0 on first use)."""
        key = tuple(str(v) for v in values)
        if len(key) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {key}")
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = _CounterChild()
        return child

    def describe(self) -> Iterable[Metric]:
        """The family without samples (for the registry's name check)."""
        return [CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterable[Metric]:
        """One counter family with every series."""
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        created = _use_created()
        for key, child in list(self._children.items()):
            family.add_metric(key, child.value, child.created if created else None)
        return [family]


class FastHistogram(Collector):
    """An unlabelled histogram for the event loop's hot paths: plain numbers, no lock.

    Exported exactly as ``prometheus_client.Histogram(name, documentation,
    buckets=buckets)`` is (cumulative ``_bucket{le}`` incl. ``+Inf``, ``_count``,
    ``_sum``, ``_created``); :meth:`observe` (seconds, or whatever unit the buckets
    use) is a bisect and two additions instead of mutex-guarded increments. Not
    thread-safe: observe from one thread (the broker's event loop) only.
    """

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...],
                 registry: CollectorRegistry | None = None) -> None:
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.name = name
        self.documentation = documentation
        self._bounds = bounds
        self._les = [_float_to_go_string(b) for b in bounds]
        self._counts = [0] * len(bounds)
        self._sum = 0.0
        self._created = time.time()
        if registry is not None:
            registry.register(self)

    def observe(self, amount: float) -> None:
        """Count one observation of ``amount`` in the first bucket whose bound is >= it."""
        self._sum += amount
        self._counts[bisect.bisect_left(self._bounds, amount)] += 1

    def describe(self) -> Iterable[Metric]:
        """The family without samples (for the registry's name check)."""
        return [Metric(self.name, self.documentation, "histogram")]

    def collect(self) -> Iterable[Metric]:
        """The histogram family, as prometheus-client writes it."""
        family = Metric(self.name, self.documentation, "histogram")
        acc = 0.0
        for le, count in zip(self._les, list(self._counts), strict=True):
            acc += count
            family.add_sample(self.name + "_bucket", {"le": le}, acc)
        family.add_sample(self.name + "_count", {}, acc)
        if self._bounds[0] >= 0:
            family.add_sample(self.name + "_sum", {}, self._sum)
        if _use_created():
            family.add_sample(self.name + "_created", {}, self._created)
        return [family]


@dataclass(slots=True)
class LagRow:
    """Lag of one queue: ``broker_offset`` (max, exclusive) minus ``consumer_offset``."""

    group: str
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    #: Store time (ms since the epoch) of the oldest unconsumed message; 0 when caught up or unknown.
    oldest_unconsumed_ms: int = 0

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
    #: topic -> max queue offsets summed over its queues (every topic of the broker)
    topic_offsets: dict[str, int] = field(default_factory=dict)
    #: when it was taken (ms since the epoch)
    taken_ms: int = field(default_factory=lambda: int(time.time() * 1000))


class BrokerCollector(Collector):
    """Scrape-time gauges, computed from ``snapshot()``; with ``metrics``, the exporter-style TPS
    gauges too (moving rates of its ``messages_in``/``messages_out`` counters)."""

    def __init__(self, snapshot: Callable[[], GaugeSnapshot], cluster: Callable[[], str], broker: Callable[[], str],
                 metrics: BrokerMetrics | None = None):
        self._snapshot = snapshot
        self._cluster = cluster
        self._broker = broker
        self._metrics = metrics

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
        yield from self._exporter_gauges(snap)
        if self._metrics is not None:
            yield from self._tps()

    def _gauges(self, snap: GaugeSnapshot) -> Iterator[Metric]:
        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(PREFIX + name, doc)
            g.add_metric([], value)
            return g

        yield gauge("up", "1 when the broker's state could be read", 1)
        yield gauge("commitlog_max_offset_bytes", "End of the CommitLog's written data (bytes)",
                    snap.commitlog_max_offset)
        yield gauge("commitlog_min_offset_bytes", "Start of the oldest CommitLog file (bytes)",
                    snap.commitlog_min_offset)
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
        for row in snap.lag:
            lag.add_metric([row.group, row.topic, str(row.queue_id)], row.lag)
            offset.add_metric([row.group, row.topic, str(row.queue_id)], row.consumer_offset)
        yield lag
        yield offset

    def _exporter_gauges(self, snap: GaugeSnapshot) -> Iterator[Metric]:
        """The RocketMQ exporter's per-group and per-topic gauges (its names and label names)."""
        totals: dict[tuple[str, str], int] = {}
        consumed: dict[tuple[str, str], int] = {}
        latency: dict[tuple[str, str], int] = {}
        for row in snap.lag:
            key = (row.group, row.topic)
            totals[key] = totals.get(key, 0) + row.lag
            consumed[key] = consumed.get(key, 0) + row.consumer_offset
            behind = max(0, snap.taken_ms - row.oldest_unconsumed_ms) if row.lag and row.oldest_unconsumed_ms else 0
            latency[key] = max(latency.get(key, 0), behind)
        cluster, broker = self._cluster(), self._broker()
        diff = GaugeMetricFamily(
            "rocketmq_group_diff",
            "Consumer lag of a group on a topic (RocketMQ exporter name)",
            labels=["cluster", "broker", "group", "topic", "countOfOnlineConsumers", "msgModel"],
        )
        by_storetime = GaugeMetricFamily(
            "rocketmq_group_get_latency_by_storetime",
            "Milliseconds since the oldest message a group has not consumed was stored, max over the topic's "
            "queues; 0 when caught up (RocketMQ exporter name and unit)",
            labels=["cluster", "broker", "topic", "group"],
        )
        consumer_offset = GaugeMetricFamily(
            "rocketmq_consumer_offset",
            "Committed consumer offsets of a group summed over a topic's queues (RocketMQ exporter name)",
            labels=["cluster", "broker", "topic", "group"],
        )
        for (group, topic), total in sorted(totals.items()):
            online, model = snap.groups.get(group, (0, ""))
            diff.add_metric([cluster, broker, group, topic, str(online), model], total)
            by_storetime.add_metric([cluster, broker, topic, group], latency[(group, topic)])
            consumer_offset.add_metric([cluster, broker, topic, group], consumed[(group, topic)])
        yield diff
        yield by_storetime
        yield consumer_offset
        producer_offset = GaugeMetricFamily(
            "rocketmq_producer_offset",
            "Max queue offsets of a topic summed over its queues: messages ever stored (RocketMQ exporter name)",
            labels=["cluster", "broker", "topic"],
        )
        for topic, total in sorted(snap.topic_offsets.items()):
            producer_offset.add_metric([cluster, broker, topic], total)
        yield producer_offset

    def _tps(self) -> Iterator[Metric]:
        """``rocketmq_{producer,consumer,broker}_tps`` and ``rocketmq_broker_qps``: last-minute rates."""
        assert self._metrics is not None
        put, get = self._metrics.moving_rates()
        cluster, broker = self._cluster(), self._broker()
        producer = GaugeMetricFamily(
            "rocketmq_producer_tps", "Messages stored to a topic per second, over the last minute "
            "(RocketMQ exporter name)", labels=["cluster", "broker", "topic"])
        for topic, rate in sorted(put.items()):
            producer.add_metric([cluster, broker, topic], rate)
        consumer = GaugeMetricFamily(
            "rocketmq_consumer_tps", "Messages of a topic returned to a group's pulls per second, over the last "
            "minute (RocketMQ exporter name)", labels=["cluster", "broker", "topic", "group"])
        for (topic, group), rate in sorted(get.items()):
            consumer.add_metric([cluster, broker, topic, group], rate)
        broker_tps = GaugeMetricFamily(
            "rocketmq_broker_tps", "Messages stored per second, over the last minute (RocketMQ exporter name)",
            labels=["cluster", "broker"])
        broker_tps.add_metric([cluster, broker], sum(put.values()))
        broker_qps = GaugeMetricFamily(
            "rocketmq_broker_qps", "Messages returned to pulls per second, over the last minute "
            "(RocketMQ exporter name)", labels=["cluster", "broker"])
        broker_qps.add_metric([cluster, broker], sum(get.values()))
        yield from (producer, consumer, broker_tps, broker_qps)


class BrokerMetrics:
    """The broker's metric objects and their registry (never the global one)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # Counted on the event loop per request: lock-free counters, read at scrape time.
        self.messages_in = FastCounter(PREFIX + "messages_in", "Messages stored by producers", ["topic"], registry=r)
        self.bytes_in = FastCounter(PREFIX + "in_bytes", "Message body bytes stored by producers", ["topic"],
                                    registry=r)
        self.messages_out = FastCounter(
            PREFIX + "messages_out", "Messages returned to consumers by pulls", ["topic", "group"], registry=r
        )
        self.bytes_out = FastCounter(
            PREFIX + "out_bytes", "Stored-record bytes returned to consumers by pulls", ["topic", "group"], registry=r
        )
        self.send_latency = FastHistogram(
            PREFIX + "send_latency_seconds", "Time to handle a send request", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.pull_latency = FastHistogram(
            PREFIX + "pull_latency_seconds",
            "Time to handle a pull request, excluding long-poll parking",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.flush_latency = Histogram(
            PREFIX + "flush_latency_seconds", "CommitLog flush (fsync) time", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.requests = FastCounter(
            PREFIX + "requests", "Requests handled", ["request_code", "response_code"], registry=r
        )
        self.send_rejected = Counter(
            PREFIX + "send_rejected", "Sends refused with SYSTEM_BUSY (overload)", ["reason"], registry=r
        )
        self.notify_sent = Counter(
            PREFIX + "notify_consumer_ids_changed", "NOTIFY_CONSUMER_IDS_CHANGED requests sent", registry=r
        )
        # process_* (CPU, memory, file descriptors, start time), python_info, python_gc_*.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self._put_rates: MovingRates[str] = MovingRates()
        self._get_rates: MovingRates[tuple[str, str]] = MovingRates()

        # Labelled children, cached: ``labels()`` costs more than the increment itself.
        self._requests: dict[tuple[int, int | None], _CounterChild] = {}
        self._in: dict[str, tuple[_CounterChild, _CounterChild]] = {}
        self._out: dict[tuple[str, str], tuple[_CounterChild, _CounterChild]] = {}

    def observe_request(self, request_code: int, seconds: float, response_code: int | None) -> None:
        """A :class:`rocket.remoting.Processors` observer: counts every request."""
        key = (request_code, response_code)
        child = self._requests.get(key)
        if child is None:
            child = self._requests[key] = self.requests.labels(
                str(request_code), "none" if response_code is None else str(response_code)
            )
        child.value += 1

    def count_in(self, topic: str, messages: int, nbytes: int) -> None:
        """Messages stored to ``topic``."""
        pair = self._in.get(topic)
        if pair is None:
            pair = self._in[topic] = (self.messages_in.labels(topic), self.bytes_in.labels(topic))
        pair[0].value += messages
        pair[1].value += nbytes

    def count_out(self, topic: str, group: str, messages: int, nbytes: int) -> None:
        """Messages pulled from ``topic`` by ``group``."""
        key = (topic, group)
        pair = self._out.get(key)
        if pair is None:
            pair = self._out[key] = (self.messages_out.labels(topic, group), self.bytes_out.labels(topic, group))
        pair[0].value += messages
        pair[1].value += nbytes

    def moving_rates(self) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
        """Last-minute rates of ``messages_in`` by topic and ``messages_out`` by (topic, group)."""
        put: dict[str, float] = {}
        get: dict[tuple[str, str], float] = {}
        for metric in self.messages_in.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    put[sample.labels["topic"]] = sample.value
        for metric in self.messages_out.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    get[(sample.labels["topic"], sample.labels["group"])] = sample.value
        return self._put_rates.rates(put), self._get_rates.rates(get)

    def install_collector(self, collector: Collector) -> None:
        """Register the scrape-time collector."""
        self.registry.register(collector)

    def render(self) -> bytes:
        """The text exposition format of every metric."""
        return generate_latest(self.registry)
