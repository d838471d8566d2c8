"""The operator's metrics, live: with the session's operator (kopf, tests/k8s/conftest.py)
reconciling a RocketCluster on the real API server, a real Prometheus scrapes its /metrics; every
``rocket_operator_*`` name the chart's dashboards and alert rules use is exported, and the operator
dashboard's queries return data."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pytest
import yaml

from tests.observability.conftest import RULES, run_prometheus, sample_names, scrape
from tests.observability.promql import metric_names, substitute
from tests.observability.test_dashboards import ALL_EXPRESSIONS

#: Operator dashboard queries that stay empty while a cluster is simply Running, and why.
EMPTY_WHEN_CONVERGED = {
    "rocketcluster-operator / Reconcile errors by kind / A": "no pass failed",
    "rocketcluster-operator / Rolling restarts (pods rolled per hour) / A": "nothing rolled",
    "rocketcluster-operator / Messages pending on draining broker groups / A": "no scale-in",
}


def _operator_names(exprs: list[str]) -> set[str]:
    return {n for e in exprs for n in metric_names(substitute(e)) if n.startswith("rocket_operator_")}


def test_operator_exports_what_dashboards_and_alerts_use(api: Any, namespace: str, operator: Any,
                                                         tmp_path_factory: pytest.TempPathFactory):
    from kubernetes import client

    body = {"apiVersion": "rocket.dev/v1alpha1", "kind": "RocketCluster", "metadata": {"name": "metrics"},
            "spec": {"broker": {"groups": 1, "replicasPerGroup": 0}}}
    client.CustomObjectsApi(api).create_namespaced_custom_object("rocket.dev", "v1alpha1", namespace,
                                                                 "rocketclusters", body)
    address = f"127.0.0.1:{operator.http_port()}"
    deadline = time.monotonic() + 60
    while True:  # until the operator has reported this cluster's phase
        text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
        if f'namespace="{namespace}"' in text and "rocket_operator_cluster_phase{" in text:
            break
        assert time.monotonic() < deadline, "the operator never reported the cluster's phase"
        time.sleep(0.5)

    exported = sample_names(scrape(address))
    rules = [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    used = _operator_names([e for _, e in ALL_EXPRESSIONS] + rules)
    assert used, "no rocket_operator_* metric in the dashboards or rules?"
    assert used <= exported, f"used but not exported by the operator: {sorted(used - exported)}"

    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "rocketcluster-operator", "honor_labels": True,
                            "static_configs": [{"targets": [address], "labels": {"pod": "operator-0"}}]}],
    }
    with run_prometheus(config, tmp_path_factory.mktemp("prometheus-operator")) as prom:
        deadline = time.monotonic() + 30
        while True:  # scraped twice at least: rate() needs two points
            status, result = prom.query('count_over_time(up{job="rocketcluster-operator"}[1m]) >= 3')
            if status == 200 and result["data"]["result"]:
                break
            assert time.monotonic() < deadline, f"prometheus did not scrape the operator:\n{prom.log_tail()}"
            time.sleep(0.5)
        empty = []
        for where, expr in ALL_EXPRESSIONS:
            if not where.startswith("rocketcluster-operator") or where in EMPTY_WHEN_CONVERGED:
                continue
            status, result = prom.query(substitute(expr))
            assert status == 200, (where, result)
            if not result["data"]["result"]:
                empty.append(f"{where}: {expr}")
        assert not empty, "operator dashboard queries with no data:\n" + "\n".join(empty)
        status, result = prom.query(f'rocket_operator_cluster_phase{{namespace="{namespace}", cluster="metrics"}} == 1')
        assert status == 200 and len(result["data"]["result"]) == 1, result
