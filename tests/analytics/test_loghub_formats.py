"""Header formats of the 12 LogHub systems: content equals the ground truth's Content column,
levels and event times, malformed lines give None (never an exception)."""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rocket.analytics import loghub


@pytest.mark.parametrize("system", loghub.SYSTEMS)
def test_content_matches_structured_csv(loghub_truth_root: Path, system: str) -> None:
    path = loghub.structured_path(loghub_truth_root, system)
    if path is None:
        pytest.skip(f"SKIPPED: no ground truth for {system} under {loghub_truth_root}")
    lines = loghub.read_lines(loghub.log_path(loghub_truth_root, system))  # type: ignore[arg-type]
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(lines)
    for line, row in zip(lines, rows, strict=True):
        parsed = loghub.parse_header(system, line, 2024)
        assert parsed is not None, line
        assert parsed.content == row["Content"], line
        assert parsed.event_time is not None, line
        assert parsed.level in loghub.LEVELS


@pytest.mark.parametrize("system", loghub.SYSTEMS)
def test_malformed_lines_are_none(system: str) -> None:
    for bad in ("", "   ", "garbage without any header", "\x00\x01\x02", "[x] [y]"):
        assert loghub.parse_header(system, bad) is None


def test_fields_level_and_time() -> None:
    p = loghub.parse_header("HDFS", "081109 203615 148 INFO dfs.DataNode$PacketResponder: PacketResponder 1 "
                                    "for block blk_38865049064139660 terminating")
    assert p is not None
    assert p.component == "dfs.DataNode$PacketResponder"
    assert p.level == "INFO" and not p.level_inferred
    assert p.event_time == datetime(2008, 11, 9, 20, 36, 15, tzinfo=UTC)
    a = loghub.parse_header("Android", "03-17 16:13:38.811  1702  2395 E WindowManager: boom", 2017)
    assert a is not None and a.level == "ERROR"
    assert a.event_time == datetime(2017, 3, 17, 16, 13, 38, 811000, tzinfo=UTC)
    o = loghub.parse_header("OpenSSH", "Dec 10 06:55:46 LabSZ sshd[24200]: Invalid user webmaster from 1.2.3.4", 2017)
    assert o is not None and o.level == "ERROR" and o.level_inferred
    ap = loghub.parse_header("Apache", "[Sun Dec 04 04:47:44 2005] [notice] workerEnv.init() ok")
    assert ap is not None and ap.level == "INFO"


def test_system_of_topic_and_tags() -> None:
    assert loghub.system_of("loghub-HDFS") == "HDFS"
    assert loghub.system_of("whatever", "openssh") == "OpenSSH"
    assert loghub.system_of("orders") is None


def test_shipped_sample_layout_is_found() -> None:
    sample = Path(loghub.__file__).resolve().parents[1] / "data" / "loghub"
    if not sample.is_dir():
        pytest.skip("SKIPPED: no sample shipped in rocket/data/loghub")
    path = loghub.log_path(sample, "HDFS")
    assert path is not None and path.name.startswith("HDFS_")
