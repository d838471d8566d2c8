"""A real Prometheus (Debian's package) scraping the embedded cluster returns data for queries the
dashboards and alerts are built on."""

from __future__ import annotations

import math
import time

from tests.observability.conftest import GROUP, TOPIC, Prometheus, Target
from tests.observability.promql import substitute
from tests.observability.test_dashboards import ALL_EXPRESSIONS
from tests.support import wait_for


def wait_result(prom: Prometheus, expr: str, timeout: float = 15.0) -> list[dict]:
    """The instant-query result of ``expr`` once non-empty (scrapes run every second); fails
    after ``timeout`` seconds of empty results."""

    def result() -> list[dict]:
        status, body = prom.query(expr)
        assert status == 200, body
        return list(body["data"]["result"])

    found: list[dict] = wait_for(result, timeout, interval=0.5, what=f"a non-empty result of {expr}")
    return found


def test_every_process_is_up(prometheus_scraping: Prometheus, all_targets: list[Target]):
    result = wait_result(prometheus_scraping, "up")
    by_pod = {r["metric"]["pod"]: float(r["value"][1]) for r in result}
    assert by_pod == {t.name: 1.0 for t in all_targets}


def test_no_alert_fires_on_a_healthy_cluster(prometheus_scraping: Prometheus):
    status, body = prometheus_scraping.query('ALERTS{alertstate="firing"}')
    assert status == 200 and body["data"]["result"] == []


def test_nameservers_see_both_broker_groups(prometheus_scraping: Prometheus):
    result = wait_result(prometheus_scraping, 'rocketmq_nameserver_broker_groups{job="rocketmq-nameserver"}')
    assert len(result) == 2
    assert all(float(r["value"][1]) == 2 for r in result), result


def test_messages_in_counted_per_topic(prometheus_scraping: Prometheus):
    result = wait_result(prometheus_scraping, f'sum(rocketmq_broker_messages_in_total{{topic="{TOPIC}"}})')
    assert result and float(result[0]["value"][1]) == 60, result


def test_consumer_group_lag_is_visible(prometheus_scraping: Prometheus):
    expr = f'sum by (group, topic) (rocketmq_group_diff{{group="{GROUP}", topic="{TOPIC}"}})'
    result = wait_result(prometheus_scraping, expr)
    assert result, f"no rocketmq_group_diff for {GROUP}"
    lag = float(result[0]["value"][1])
    assert 0 <= lag <= 60


def test_exporter_metrics_agree_with_the_brokers_own(prometheus_scraping: Prometheus, all_targets: list[Target]):
    """The RocketMQ exporter's names: offsets summed over queues and brokers, lag by store time."""
    stored = wait_result(prometheus_scraping, f'sum(rocketmq_producer_offset{{topic="{TOPIC}"}})')
    assert stored and float(stored[0]["value"][1]) == 60, stored
    sel = f'group="{GROUP}", topic="{TOPIC}"'
    (lag,) = wait_result(prometheus_scraping, f"sum(rocketmq_group_diff{{{sel}}})")
    (consumed,) = wait_result(prometheus_scraping, f"sum(rocketmq_consumer_offset{{{sel}}})")
    assert float(consumed["value"][1]) + float(lag["value"][1]) == 60
    (age,) = wait_result(prometheus_scraping, f"max(rocketmq_group_get_latency_by_storetime{{{sel}}})")
    if float(lag["value"][1]) > 0:
        assert 0 < float(age["value"][1]) < 600_000, age  # ms since the oldest unconsumed was stored
    else:
        assert float(age["value"][1]) == 0
    tps = wait_result(prometheus_scraping, 'rocketmq_broker_tps{job="rocketmq-broker"}')
    # one series per broker process (2 groups of a master and a slave), each a finite rate
    brokers = {t.name for t in all_targets if t.job == "rocketmq-broker"}
    assert len(brokers) == 4 and sorted(r["metric"]["pod"] for r in tps) == sorted(brokers), tps
    assert all(math.isfinite(float(r["value"][1])) and float(r["value"][1]) >= 0 for r in tps), tps


#: Dashboard queries allowed to be empty on a healthy embedded cluster, and why.
EMPTY_WHEN_HEALTHY = {
    "rocketcluster-broker / Error responses / A": "no request failed",
    "rocketcluster-broker / Sends rejected (SYSTEM_BUSY) / A": "no overload",
    "rocketcluster-overview / Firing alerts / A": "nothing fires",
}


def test_cluster_dashboards_show_data(prometheus_scraping: Prometheus):
    """Every query of the overview, broker and consumer-group dashboards returns series from the live
    embedded cluster (the operator dashboard needs a reconciling operator: see tests/k8s)."""
    wait_result(prometheus_scraping, "rate(rocketmq_broker_messages_in_total[1m])")
    time.sleep(2)  # a couple more scrapes, so that rate() and deriv() have points
    empty = []
    for where, expr in ALL_EXPRESSIONS:
        if where.startswith("rocketcluster-operator") or where in EMPTY_WHEN_HEALTHY:
            continue
        status, body = prometheus_scraping.query(substitute(expr))
        assert status == 200, (where, body)
        if not body["data"]["result"]:
            empty.append(f"{where}: {expr}")
    assert not empty, "dashboard queries with no data on a live cluster:\n" + "\n".join(empty)
