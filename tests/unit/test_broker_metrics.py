"""The broker's scrape-time metrics: moving rates, the RocketMQ exporter's names, process metrics."""

from __future__ import annotations

import os
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rocket.broker.metrics import BrokerCollector, BrokerMetrics, GaugeSnapshot, LagRow, MovingRates


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_moving_rates_average_since_start_then_over_the_window():
    clock = Clock()
    rates: MovingRates[str] = MovingRates(60, clock=clock)
    clock.now += 10
    assert rates.rates({"a": 50}) == {"a": 5.0}  # since creation, when counters were 0
    for _ in range(12):  # 10 messages/s from now on, scraped every 5 s
        clock.now += 5
        got = rates.rates({"a": 50 + 10 * (clock.now - 1010)})
    assert got["a"] == pytest.approx(10.0)
    clock.now += 60  # idle for a minute
    assert rates.rates({"a": 50 + 10 * 60})["a"] == pytest.approx(0.0)


def test_moving_rates_scrapes_further_apart_than_the_window():
    clock = Clock()
    rates: MovingRates[str] = MovingRates(60, clock=clock)
    clock.now += 300
    assert rates.rates({"a": 300})["a"] == pytest.approx(1.0)
    clock.now += 300
    assert rates.rates({"a": 900, "b": 600})["a"] == pytest.approx(2.0)
    assert rates.rates({"a": 900, "b": 600})["b"] == pytest.approx(2.0)  # same instant: same base


def test_moving_rates_keep_at_most_one_sample_per_interval():
    clock = Clock()
    rates: MovingRates[str] = MovingRates(60, min_interval=1.0, clock=clock)
    for i in range(10_000):
        clock.now += 0.01
        rates.rates({"a": i})
    assert len(rates._samples) <= 62


def _families(metrics: BrokerMetrics) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}


def _value(fams: dict[str, Any], name: str, **labels: str) -> float:
    fam = fams[name.removesuffix("_total")]
    (sample,) = [s for s in fam.samples if s.name == name and labels.items() <= s.labels.items()]
    return float(sample.value)


def test_exporter_names_and_labels():
    metrics = BrokerMetrics()
    now_ms = 1_700_000_000_000
    snap = GaugeSnapshot(
        commitlog_max_offset=4096, commitlog_min_offset=0, disk_usage_ratio=0.5, parked_pulls=0,
        in_flight_sends=0, client_connections=1,
        lag=[
            LagRow("G", "T", 0, broker_offset=10, consumer_offset=4, oldest_unconsumed_ms=now_ms - 7_000),
            LagRow("G", "T", 1, broker_offset=5, consumer_offset=2, oldest_unconsumed_ms=now_ms - 30_000),
            LagRow("G", "T", 2, broker_offset=3, consumer_offset=3),  # caught up
            LagRow("H", "T", 0, broker_offset=10, consumer_offset=10),
        ],
        groups={"G": (2, "CLUSTERING")},
        topic_offsets={"T": 18, "Empty": 0},
        taken_ms=now_ms,
    )
    metrics.install_collector(BrokerCollector(lambda: snap, lambda: "C", lambda: "b0", metrics))
    metrics.count_in("T", 6, 600)
    metrics.count_out("T", "G", 4, 400)
    fams = _families(metrics)
    ids = {"cluster": "C", "broker": "b0"}
    assert _value(fams, "rocketmq_group_diff", group="G", topic="T", countOfOnlineConsumers="2",
                  msgModel="CLUSTERING", **ids) == 9
    assert _value(fams, "rocketmq_group_get_latency_by_storetime", group="G", topic="T", **ids) == 30_000
    assert _value(fams, "rocketmq_group_get_latency_by_storetime", group="H", topic="T", **ids) == 0
    assert _value(fams, "rocketmq_consumer_offset", group="G", topic="T", **ids) == 9
    assert _value(fams, "rocketmq_producer_offset", topic="T", **ids) == 18
    assert _value(fams, "rocketmq_producer_offset", topic="Empty", **ids) == 0
    assert _value(fams, "rocketmq_producer_tps", topic="T", **ids) > 0
    assert _value(fams, "rocketmq_consumer_tps", topic="T", group="G", **ids) > 0
    assert _value(fams, "rocketmq_broker_tps", **ids) == _value(fams, "rocketmq_producer_tps", topic="T", **ids)
    assert _value(fams, "rocketmq_broker_qps", **ids) > 0
    assert {s.name for s in fams["rocketmq_group_get_latency_by_storetime"].samples} == {
        "rocketmq_group_get_latency_by_storetime"}
    assert set(fams["rocketmq_consumer_tps"].samples[0].labels) == {"cluster", "broker", "topic", "group"}
    assert _value(fams, "rocketmq_broker_commitlog_max_offset_bytes") == 4096
    assert _value(fams, "rocketmq_broker_in_bytes_total", topic="T") == 600
    assert _value(fams, "rocketmq_broker_out_bytes_total", topic="T", group="G") == 400


def test_process_metrics_on_the_brokers_own_registry():
    before = os.times()
    fams = _families(BrokerMetrics())
    after = os.times()
    # this process's user + system CPU time (/proc/self/stat, as times(2) counts it, in clock ticks)
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert 0 < before.user + before.system - tick <= _value(fams, "process_cpu_seconds_total") \
        <= after.user + after.system + tick
    assert _value(fams, "process_resident_memory_bytes") > 0
    assert "python_info" in fams
    assert any(name.startswith("python_gc_") for name in fams)
