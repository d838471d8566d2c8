"""The metric-name finder used to check dashboards and alert rules against a live scrape."""

from __future__ import annotations

import pytest

from tests.observability.promql import label_values_selector, metric_names, substitute


@pytest.mark.parametrize(("expr", "names"), [
    ("up", {"up"}),
    ('up{job="rocketmq-broker"} == 0', {"up"}),
    ('sum by (namespace, cluster) (up{job="x"}) == 0', {"up"}),
    ("sum(rate(a_total[5m])) by (le, topic) / ignoring(le) group_left(topic) b", {"a_total", "b"}),
    ('histogram_quantile(0.99, sum by (le) (rate(x_bucket{code=~"1|2"}[1m])))', {"x_bucket"}),
    ("rocketmq_broker_commitlog_max_offset_bytes - rocketmq_broker_commitlog_min_offset_bytes offset 5m",
     {"rocketmq_broker_commitlog_max_offset_bytes", "rocketmq_broker_commitlog_min_offset_bytes"}),
    ('{__name__="weird:name", a="by"}', {"weird:name"}),
    ("predict_linear(d[6h], 86400) > 0.9 and d > 0.5", {"d"}),
    ("64 * 1024 * 1024 < lag_bytes", {"lag_bytes"}),
    ('count by (alertname) (ALERTS{alertstate="firing", alertname=~"A.*|B(c)"})', {"ALERTS"}),
    ("sum without (instance) (x) unless on (job) y", {"x", "y"}),
])
def test_metric_names(expr: str, names: set[str]):
    assert metric_names(expr) == names


def test_substitute_grafana_variables():
    expr = 'sum(rate(x{namespace=~"$namespace", cluster=~"${cluster}"}[$__rate_interval]))'
    assert substitute(expr) == 'sum(rate(x{namespace=~".*", cluster=~".*"}[1m]))'


def test_label_values_selector():
    assert label_values_selector('label_values(up{job=~"rocketmq-.*"}, namespace)') == 'up{job=~"rocketmq-.*"}'
    assert label_values_selector("label_values(namespace)") is None
