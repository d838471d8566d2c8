"""Prometheus naming conventions of what every process really exports (live scrape): promtool's
own linter (`promtool check metrics`), one prefix per component, base units."""

from __future__ import annotations

import re
import subprocess
import urllib.request

import pytest

from tests.observability.conftest import Target, scrape
from tests.observability.tools import need_promtool

PREFIXES = {
    "rocketmq-nameserver": ("rocketmq_nameserver_",),
    # rocketmq_group_diff: the RocketMQ exporter's name, kept so that its dashboards work.
    "rocketmq-broker": ("rocketmq_broker_", "rocketmq_group_diff"),
    "rocketcluster-operator": ("rocket_operator_",),
}
#: promtool findings accepted on purpose.
ACCEPTED_LINTS = {
    # The RocketMQ exporter's labels, kept verbatim for compatibility with its dashboards.
    "rocketmq_group_diff label names should be written in 'snake_case' not 'camelCase'",
}


#: Known departures from the conventions, reported to the component's owner; a new one fails.
KNOWN_DEVIATIONS = {
    # Prometheus puts the unit last (before _total): rocketmq_broker_in_bytes_total would be
    # conventional (cf. node_network_receive_bytes_total).
    "rocketmq_broker_bytes_in": "unit not last",
    "rocketmq_broker_bytes_out": "unit not last",
}


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
            if name.endswith("_created") or name in KNOWN_DEVIATIONS:
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
