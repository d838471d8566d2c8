"""Prometheus metrics of one NameServer, in a registry of its own.

Names follow Prometheus conventions with the ``rocketmq_nameserver_`` prefix:

| metric | type | labels |
|---|---|---|
| ``rocketmq_nameserver_brokers`` | gauge | live broker addresses (masters and slaves) |
| ``rocketmq_nameserver_broker_groups`` | gauge | broker names with at least one address |
| ``rocketmq_nameserver_topics`` | gauge | topics with queue data |
| ``rocketmq_nameserver_route_lookups_total`` | counter | ``result`` = ``found`` / ``not_found`` |
| ``rocketmq_nameserver_broker_evictions_total`` | counter | ``reason`` = ``timeout`` / ``connection_closed`` |
| ``rocketmq_nameserver_request_duration_seconds`` | histogram | ``code`` (request code, or ``other``) |

plus prometheus-client's ``process_*`` (CPU, memory, file descriptors, start
time), ``python_info`` and ``python_gc_*``.

A registry per instance (not prometheus-client's global one) lets several
NameServers live in one process, as tests do.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from rocket.nameserver.routeinfo import RouteInfoManager
from rocket.protocol.codes import RequestCode

#: Histogram buckets in seconds: 50 us .. 1 s (NameServer requests are sub-millisecond).
LATENCY_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)


class _RequestStats:
    """Per-code bucket counts of one histogram series (last slot = +Inf) and their sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0


class NameServerMetrics(Collector):
    """The metrics above, reading sizes from ``routes`` at scrape time.

    The two per-request series (route lookups, request durations) are plain
    integers and lists updated without locks and exported by :meth:`collect`:
    the NameServer updates them only from its event-loop thread, and
    prometheus-client's locked counters cost ~30 % of the route-lookup hot
    path (measured). Scrapes run on the same loop, so they see consistent
    values.

    ``known_codes`` are the request codes that get their own ``code`` label
    value; any other code is counted as ``other`` (so garbage cannot blow up
    the label cardinality).
    """

    def __init__(self, routes: RouteInfoManager, known_codes: set[int] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.brokers = Gauge(
            "rocketmq_nameserver_brokers", "Live broker addresses (masters and slaves).", registry=reg
        )
        self.brokers.set_function(lambda: routes.broker_count)
        self.broker_groups = Gauge(
            "rocketmq_nameserver_broker_groups", "Broker names with at least one address.", registry=reg
        )
        self.broker_groups.set_function(lambda: len(routes.broker_addr_table))
        self.topics = Gauge("rocketmq_nameserver_topics", "Topics with queue data.", registry=reg)
        self.topics.set_function(lambda: routes.topic_count)
        #: GET_ROUTEINFO_BY_TOPIC answered with a route / with TOPIC_NOT_EXIST.
        self.lookups_found = 0
        self.lookups_not_found = 0
        self.evictions = Counter(
            "rocketmq_nameserver_broker_evictions",
            "Broker addresses removed without an UNREGISTER_BROKER, by reason.",
            ["reason"],
            registry=reg,
        )
        self.evictions_timeout = self.evictions.labels(reason="timeout")
        self.evictions_closed = self.evictions.labels(reason="connection_closed")
        codes = known_codes if known_codes is not None else {int(c) for c in RequestCode}
        self._by_code = {code: _RequestStats() for code in sorted(codes)}
        self._other = _RequestStats()
        reg.register(self)
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)

    def observe_request(self, code: int, seconds: float, response_code: int | None) -> None:
        """A ``Processors.observers`` hook: record one request's duration (seconds)."""
        stats = self._by_code.get(code) or self._other
        stats.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        stats.total += seconds

    def collect(self) -> Iterator[Metric]:
        """Export the lock-free series (called by the registry at scrape time)."""
        lookups = CounterMetricFamily(
            "rocketmq_nameserver_route_lookups", "GET_ROUTEINFO_BY_TOPIC requests by result.", labels=["result"]
        )
        lookups.add_metric(["found"], self.lookups_found)
        lookups.add_metric(["not_found"], self.lookups_not_found)
        yield lookups
        duration = HistogramMetricFamily(
            "rocketmq_nameserver_request_duration_seconds",
            "Time to process a request, by request code.",
            labels=["code"],
        )
        series = [(str(code), stats) for code, stats in self._by_code.items()]
        series.append(("other", self._other))
        for label, stats in series:
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), stats.counts, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            duration.add_metric([label], buckets, stats.total)
        yield duration
