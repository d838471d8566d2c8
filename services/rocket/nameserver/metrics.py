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

A registry per instance (not prometheus-client's global one) lets several
NameServers live in one process, as tests do.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rocket.nameserver.routeinfo import RouteInfoManager
from rocket.remoting.codes import RequestCode

#: Histogram buckets in seconds: 50 us .. 1 s (NameServer requests are sub-millisecond).
LATENCY_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)


class NameServerMetrics:
    """The metrics above, reading sizes from ``routes`` at scrape time.

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
        self.route_lookups = Counter(
            "rocketmq_nameserver_route_lookups",
            "GET_ROUTEINFO_BY_TOPIC requests by result.",
            ["result"],
            registry=reg,
        )
        self.lookups_found = self.route_lookups.labels(result="found")
        self.lookups_not_found = self.route_lookups.labels(result="not_found")
        self.evictions = Counter(
            "rocketmq_nameserver_broker_evictions",
            "Broker addresses removed without an UNREGISTER_BROKER, by reason.",
            ["reason"],
            registry=reg,
        )
        self.evictions_timeout = self.evictions.labels(reason="timeout")
        self.evictions_closed = self.evictions.labels(reason="connection_closed")
        self.request_duration = Histogram(
            "rocketmq_nameserver_request_duration_seconds",
            "Time to process a request, by request code.",
            ["code"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        codes = known_codes if known_codes is not None else {int(c) for c in RequestCode}
        self._by_code = {code: self.request_duration.labels(code=str(code)) for code in codes}
        self._other = self.request_duration.labels(code="other")

    def observe_request(self, code: int, seconds: float, response_code: int | None) -> None:
        """A ``Processors.observers`` hook: record one request's duration."""
        self._by_code.get(code, self._other).observe(seconds)
