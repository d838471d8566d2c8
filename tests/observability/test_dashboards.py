"""The Grafana dashboards the chart ships: structure, PromQL that a real Prometheus parses, and
metric names that the services really export (checked against a live scrape)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.observability.catalog import NOT_YET_EXPORTED
from tests.observability.conftest import CHART, DASHBOARDS, Prometheus
from tests.observability.promql import SYNTHETIC, label_values_selector, metric_names, substitute

EXPECTED = {"cluster-overview.json", "broker.json", "consumer-groups.json", "operator.json"}
FILES = sorted(DASHBOARDS.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dash["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def expressions(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable's selector."""
    found = []
    for panel in panels(dash):
        for target in panel.get("targets", []):
            found.append((f"{dash['uid']} / {panel['title']} / {target['refId']}", target["expr"]))
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            selector = label_values_selector(query)
            assert selector is not None, f"{dash['uid']}: variable {var['name']}: unexpected query {query!r}"
            found.append((f"{dash['uid']} / variable {var['name']}", selector))
    return found


ALL_EXPRESSIONS = [(where, expr) for path in FILES for where, expr in expressions(load(path))]


def test_the_four_dashboards_exist():
    assert {p.name for p in FILES} == EXPECTED


def test_dashboards_match_their_generator():
    proc = subprocess.run([sys.executable, str(CHART / "hack" / "dashboards.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_dashboard_structure(path: Path):
    dash = load(path)
    assert dash["uid"] and len(dash["uid"]) <= 40
    assert dash["title"].startswith("RocketCluster / ")
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert "datasource" in variables, "every dashboard picks its Prometheus through a datasource variable"
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    occupied: set[tuple[int, int]] = set()
    for panel in panels(dash):
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24, f"{panel['title']}: outside the 24-column grid"
        cells = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
        assert not cells & occupied, f"{panel['title']}: overlaps another panel"
        occupied |= cells
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], f"{panel['title']}: no query"
        for target in panel["targets"]:
            used = set(re.findall(r"\$\{?([a-zA-Z]\w*)", target["expr"]))
            assert used <= variables, f"{panel['title']}: undefined variables {used - variables}"


def test_uids_are_unique():
    uids = [load(p)["uid"] for p in FILES]
    assert len(uids) == len(set(uids))


@pytest.mark.parametrize(("where", "expr"), ALL_EXPRESSIONS, ids=[w for w, _ in ALL_EXPRESSIONS])
def test_expression_parses_in_prometheus(prometheus_parser: Prometheus, where: str, expr: str):
    status, body = prometheus_parser.query(substitute(expr))
    assert status == 200 and body.get("status") == "success", f"{where}: {expr}\n-> {status} {body.get('error')}"


def test_parser_rejects_bad_promql(prometheus_parser: Prometheus):
    """The parse check is real: Prometheus refuses what is not PromQL."""
    status, body = prometheus_parser.query("sum by (le (rate(x[1m]))")
    assert status == 400 and body["errorType"] == "bad_data"


def test_dashboards_name_only_exported_metrics(exported_samples: dict[str, set[str]]):
    exported = set().union(*exported_samples.values())
    unknown: dict[str, list[str]] = {}
    for where, expr in ALL_EXPRESSIONS:
        for name in metric_names(substitute(expr)):
            if name in exported or name in SYNTHETIC or name in NOT_YET_EXPORTED:
                continue
            unknown.setdefault(name, []).append(where)
    assert not unknown, "dashboards use metrics no process exports:\n" + "\n".join(
        f"  {name}: {', '.join(places)}" for name, places in sorted(unknown.items()))
