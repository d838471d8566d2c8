"""Prometheus naming conventions of what every process really exports (live scrape): promtool's
own linter (`promtool check metrics`), one prefix per component, base units."""

from __future__ import annotations

import re
import subprocess
import urllib.request

import pytest

from tests.observability.conftest import Target, scrape
from tests.observability.tools import need_promtool

#: The RocketMQ exporter's well-known names, exported by the broker with the exporter's meaning,
#: unit and labels so that its users' dashboards and alerts work: exempt from the unit rules
#: (rocketmq_group_get_latency_by_storetime is in milliseconds, as the exporter's is).
EXPORTER_NAMES = (
    "rocketmq_group_diff",
    "rocketmq_group_get_latency_by_storetime",
    "rocketmq_producer_tps",
    "rocketmq_producer_offset",
    "rocketmq_consumer_tps",
    "rocketmq_consumer_offset",
    "rocketmq_broker_tps",
    "rocketmq_broker_qps",
)
#: prometheus-client's process and runtime collectors, on every component's registry.
RUNTIME = ("process_", "python_")
PREFIXES = {
    "rocketmq-nameserver": ("rocketmq_nameserver_", *RUNTIME),
    "rocketmq-broker": ("rocketmq_broker_", *EXPORTER_NAMES, *RUNTIME),
    "rocketcluster-operator": ("rocket_operator_", *RUNTIME),
}
#: promtool findings accepted on purpose.
ACCEPTED_LINTS = {
    # The RocketMQ exporter's labels, kept verbatim for compatibility with its dashboards.
    "rocketmq_group_diff label names should be written in 'snake_case' not 'camelCase'",
}


#: Known departures from the conventions, reported to the component's owner; a new one fails.
KNOWN_DEVIATIONS: dict[str, str] = {}


def _body(target: Target) -> bytes:
    with urllib.request.urlopen(f"http://{target.address}/metrics", timeout=10) as resp:
        return resp.read()


def test_promtool_check_metrics(all_targets: list[Target]):
    promtool = need_promtool()
    problems = {}
    for target in all_targets:
        proc = subprocess.run([promtool, "check", "metrics"], input=_body(target), capture_output=True, timeout=60)
        lines = {ln.strip() for ln in (proc.stdout + proc.stderr).decode().splitlines() if ln.strip()}
        if lines - ACCEPTED_LINTS:
            problems[target.name] = sorted(lines - ACCEPTED_LINTS)
    assert not problems, problems


@pytest.mark.parametrize("job", sorted(PREFIXES))
def test_one_prefix_per_component(all_targets: list[Target], job: str):
    targets = [t for t in all_targets if t.job == job]
    assert targets
    for target in targets:
        for name in scrape(target.address):
            assert name.startswith(PREFIXES[job]), f"{target.name}: {name} lacks the {PREFIXES[job]} prefix"


def test_base_units(all_targets: list[Target]):
    bad = []
    for target in all_targets:
        for name, fam in scrape(target.address).items():
            if name.endswith("_created") or name in KNOWN_DEVIATIONS or name in EXPORTER_NAMES:
                continue
            if re.search(r"_(ms|millis|milliseconds|us|micros|kb|mb|gb|kib|mib|percent)(_|$)", name):
                bad.append(f"{name}: not a base unit")
            if re.search(r"(latency|duration)", name) and fam.type in {"histogram", "summary", "gauge"} \
                    and not name.endswith("_seconds"):
                bad.append(f"{name}: a time should end in _seconds")
            if "bytes" in name and not name.endswith("_bytes"):
                bad.append(f"{name}: bytes should be the unit suffix")
            if not fam.documentation:
                bad.append(f"{name}: no HELP text")
    assert not bad, sorted(set(bad))
