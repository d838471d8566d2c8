"""The logs job with real Spark on LogHub data: outputs, accuracy, malformed lines; and the traffic job."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rocket.analytics import loghub
from rocket.analytics.evaluate import evaluate_system
from rocket.analytics.jobs.common import loghub_frame
from rocket.analytics.jobs.logs import analyze_logs
from rocket.analytics.jobs.traffic import analyze_traffic
from rocket.analytics.schema import MESSAGE_SCHEMA

#: Three systems keep the test short; the benchmark runs all twelve.
SYSTEMS = ("HDFS", "Apache", "Proxifier")


@pytest.fixture(scope="module")
def logs_summary(spark: Any, loghub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    df = loghub_frame(spark, loghub_root, SYSTEMS)
    now = datetime.now(tz=UTC)
    bad = [("loghub-HDFS", "b", 9, i, None, "HDFS", {}, now, now, "127.0.0.1:1", body)
           for i, body in enumerate([b"not a log line", b"", b"\xff\xfe binary \x00 junk", b"x" * (1 << 20),
                                     b"\xff invalid utf-8 but mined"])]
    df = df.unionByName(spark.createDataFrame(bad, schema=MESSAGE_SCHEMA))
    out = tmp_path_factory.mktemp("logs-job")
    summary = analyze_logs(df, out, loghub_root=loghub_root, input_info={"source": "test"})
    summary["_out"] = out
    return summary


def test_outputs_exist(logs_summary: dict[str, Any], spark: Any) -> None:
    out: Path = logs_summary["_out"]
    for name in ("lines", "level_counts", "templates", "error_spikes"):
        assert (out / name / "_SUCCESS").exists(), name
    assert any(p.name.startswith("date=") for p in (out / "lines").iterdir())
    assert any(p.name.startswith("topic=") for p in next((out / "lines").glob("date=*")).iterdir())
    saved = json.loads((out / "summary.json").read_text())
    assert saved["totals"]["lines"] == logs_summary["totals"]["lines"]
    report = (out / "report.md").read_text()
    assert "# Log analytics report" in report and "charts/levels.png" in report
    for png in ("levels.png", "timeline.png"):
        assert (out / "charts" / png).stat().st_size > 1000
    lines = spark.read.parquet(str(out / "lines"))
    assert {"date", "topic", "level", "template", "event_time", "minute"} <= set(lines.columns)


def test_per_topic_results(logs_summary: dict[str, Any], loghub_root: Path) -> None:
    topics = logs_summary["topics"]
    for system in SYSTEMS:
        t = topics[f"loghub-{system}"]
        n = len(loghub.read_lines(loghub.log_path(loghub_root, system)))  # type: ignore[arg-type]
        assert t["system"] == system
        assert t["parsed"] == n, (system, t["parsed"])
        assert t["templates"] >= 1 and t["top_templates"]
        assert sum(t["levels"].values()) == t["lines"]
    # bad input is counted by reason, never fatal; lines without a header are mined whole
    hdfs = topics["loghub-HDFS"]
    assert hdfs["skipped"] == {"empty": 1, "binary": 1, "too_long": 1}
    assert hdfs["levels"]["SKIPPED"] == 3
    assert hdfs["unparsed"] == 2  # "not a log line" and the invalid UTF-8 line
    assert topics["loghub-HDFS"]["top_templates"][0]["count"] > 100


def test_accuracy_against_ground_truth(logs_summary: dict[str, Any], loghub_truth_root: Path) -> None:
    for system in SYSTEMS:
        acc = logs_summary["topics"][f"loghub-{system}"]["accuracy"]
        assert acc is not None, system
        assert acc["lines_evaluated"] == acc["ground_truth_lines"] == 2000
        # the job (per partition, then merged) scores as the offline evaluation of the same default pipeline
        offline = evaluate_system(loghub_truth_root, system)
        assert offline is not None
        assert acc["accuracy"] == pytest.approx(offline.accuracy, abs=0.02), (system, acc, offline)
        for key in ("pa", "fga", "fta"):
            assert 0.0 <= acc[key] <= 1.0


def test_traffic_job(spark: Any, loghub_root: Path, tmp_path: Path) -> None:
    df = loghub_frame(spark, loghub_root, ("HDFS", "Apache"))
    summary = analyze_traffic(df, tmp_path, input_info={"source": "test"})
    t = summary["topics"]["loghub-HDFS"]
    assert t["messages"] == len(loghub.read_lines(loghub.log_path(loghub_root, "HDFS")))  # type: ignore[arg-type]
    assert t["bytes"] > 0
    assert t["top_producers"][0]["born_host"] == "127.0.0.1:0"
    assert t["store_latency_ms"]["p99"] == 0
    per_minute = spark.read.parquet(str(tmp_path / "per_minute"))
    row = per_minute.where("topic = 'loghub-HDFS'").first()
    assert row["top_producers"][0]["born_host"] == "127.0.0.1:0"
    assert (tmp_path / "report.md").exists() and (tmp_path / "charts" / "traffic.png").exists()
