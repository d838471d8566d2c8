"""Offset options of the rocket source and the streaming read limit."""

from __future__ import annotations

import pytest

from rocket.analytics.offsets import EARLIEST, LATEST, OffsetSpecError, clamp, parse_offsets, split_queue_key


def test_forms() -> None:
    assert parse_offsets(None, default="earliest").kind == "earliest"
    assert parse_offsets("LATEST", default="earliest").kind == "latest"
    ts = parse_offsets("1718000000000", default="earliest")
    assert ts.kind == "timestamp" and ts.timestamp_ms == 1718000000000
    iso = parse_offsets("2024-06-10T06:13:20Z", default="earliest")
    assert iso.timestamp_ms == 1718000000000
    js = parse_offsets('{"T": {"broker-a:0": 5, "broker-b:1": -2}}', default="latest")
    assert js.kind == "json"
    assert js.lookup("T", "broker-a", 0) == 5
    assert js.lookup("T", "broker-b", 1) == EARLIEST
    assert js.lookup("T", "broker-a", 9) is None


@pytest.mark.parametrize("bad", ["yesterday", "{not json", '{"T": 3}', '{"T": {"a0": 1}}', '{"T": {"a:0": -7}}',
                                 '{"T": {"a:0": "x"}}'])
def test_bad_values_name_the_option(bad: str) -> None:
    with pytest.raises(OffsetSpecError, match="startingOffsets"):
        parse_offsets(bad, default="earliest", option="startingOffsets")


def test_clamp_and_keys() -> None:
    assert clamp(EARLIEST, 3, 9) == 3
    assert clamp(LATEST, 3, 9) == 9
    assert clamp(100, 3, 9) == 9
    assert clamp(1, 3, 9) == 3
    assert split_queue_key("broker-a:12") == ("broker-a", 12)


def test_cap_offsets_shares_the_budget() -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed")
    from rocket.analytics.source import cap_offsets

    start = {"T": {"a:0": 0, "a:1": 10, "a:2": 5}}
    latest = {"T": {"a:0": 100, "a:1": 12, "a:2": 5, "a:3": 7}}
    capped = cap_offsets(start, latest, 20)
    assert capped["T"]["a:1"] == 12  # small queue fully served
    assert capped["T"]["a:0"] == 18  # the rest of the budget
    assert capped["T"]["a:2"] == 5
    assert capped["T"]["a:3"] == 7  # new queue untouched
    total = sum(capped["T"][k] - start["T"].get(k, capped["T"][k]) for k in capped["T"])
    assert total == 20
