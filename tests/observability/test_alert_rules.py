"""The chart's Prometheus alert rules: promtool's checks and unit tests, a firing unit test for
every alert, metric names the services export, and the rules running in a real Prometheus."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.observability.catalog import NOT_YET_EXPORTED
from tests.observability.conftest import RULES, Prometheus
from tests.observability.promql import SYNTHETIC, metric_names
from tests.observability.tools import need_promtool

UNIT_TESTS = Path(__file__).with_name("alerts_test.yaml")
REQUIRED_ALERTS = {
    "RocketMQBrokerDown",
    "RocketMQNameServerDown",
    "RocketMQConsumerLagGrowing",
    "RocketMQBrokerDiskNearlyFull",
    "RocketMQReplicationLagHigh",
    "RocketMQSlaveOutOfSync",
    "RocketClusterDrainStuck",
}


def alert_rules() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_check_rules():
    proc = subprocess.run([need_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout


def test_promtool_unit_tests():
    proc = subprocess.run([need_promtool(), "test", "rules", str(UNIT_TESTS)], capture_output=True, text=True,
                          timeout=120, cwd=UNIT_TESTS.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_required_alerts_exist():
    assert REQUIRED_ALERTS <= {r["alert"] for r in alert_rules()}


def test_every_alert_has_a_firing_and_a_quiet_unit_test():
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {r["alert"] for r in alert_rules()}
    assert names - firing == set(), f"alerts never shown firing: {sorted(names - firing)}"
    assert names - quiet == set(), f"alerts never shown staying quiet: {sorted(names - quiet)}"


def test_every_alert_has_severity_summary_and_description():
    for rule in alert_rules():
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"].get("summary") and rule["annotations"].get("description"), rule["alert"]


def test_alerts_name_only_exported_metrics(exported_samples: dict[str, set[str]]):
    exported = set().union(*exported_samples.values())
    unknown = {}
    for rule in alert_rules():
        missing = {n for n in metric_names(rule["expr"]) if n not in exported | SYNTHETIC and n not in NOT_YET_EXPORTED}
        if missing:
            unknown[rule["alert"]] = sorted(missing)
    assert not unknown, f"alert rules use metrics no process exports: {unknown}"


def test_rules_load_and_evaluate_in_prometheus(prometheus_scraping: Prometheus):
    status, body = prometheus_scraping.api("rules")
    assert status == 200
    rules = [r for g in body["data"]["groups"] for r in g["rules"]]
    assert {r["name"] for r in rules} == {r["alert"] for r in alert_rules()}
    bad = {r["name"]: r.get("lastError") for r in rules if r["health"] not in {"ok", "unknown"}}
    assert not bad, bad
