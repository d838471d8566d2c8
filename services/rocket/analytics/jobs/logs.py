"""The ``logs`` job: LogHub lines → header fields, templates, levels per minute, error spikes, accuracy.

Run it with ``spark-submit services/rocket/analytics/jobs/logs.py --namesrv H:P --topics loghub-HDFS,... --out
DIR``, as ``rocket analytics logs ...``, or from Python with :func:`run_logs_job` / :func:`analyze_logs`.

Per topic (one LogHub system per topic, found from the tags or the
``loghub-<System>`` topic name), in a grouped pandas UDF:

1. order the lines: by the line number in the message keys (``<System>-<n>``,
   as ``make run`` publishes them), else by store time, queue and offset;
2. split each line's header with the system's regex
   (:mod:`rocket.analytics.loghub`): event time, level (normalised; inferred
   from the words for systems without one), component. A line that does not
   match is **unparsed**: counted, kept with its store time, never mined, never fatal;
3. mine templates from the contents with drain3 (:mod:`rocket.analytics.mining`).

Then Spark aggregates: per-level counts per minute (event-time minutes, UTC),
templates with counts, error-rate spikes (below), and, where the LogHub ground
truth (``*_structured.csv``) is found, the grouping accuracy
(:mod:`rocket.analytics.accuracy`) over the lines matched to it.

Error-rate spike: a minute of a topic whose error count (ERROR + FATAL) is at
least ``min_errors`` (3), whose error rate is at least twice the topic's
overall rate ``p``, and exceeds its expectation by more than 3 binomial
standard deviations: ``errors > n·p + 3·sqrt(n·p·(1-p))``.

Output under ``out_dir``:

* ``lines/`` Parquet, partitioned by ``date`` (the store date: when the line
  was ingested) and ``topic``: one row per line;
* ``level_counts/`` Parquet, partitioned by ``date`` (of the event-time minute)
  and ``topic``: (minute, level, count);
* ``templates/`` Parquet, partitioned by ``topic``: every template with its counts;
* ``error_spikes/`` Parquet, partitioned by ``topic``;
* ``summary.json`` (the dict :func:`analyze_logs` returns) and ``report.md`` with ``charts/*.png``.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rocket.analytics import loghub
from rocket.analytics.accuracy import grouping_accuracy
from rocket.analytics.jobs.common import (
    InputSpec,
    Stopwatch,
    add_input_arguments,
    input_frame,
    input_spec,
    utc_now,
    write_json,
    write_parquet,
)
from rocket.analytics.mining import mine

log = logging.getLogger("rocket.analytics.logs")

#: Schema of the grouped UDF's output (one row per input line).
LINES_SCHEMA = (
    "topic string, system string, line_no int, broker_name string, queue_id int, queue_offset bigint, "
    "store_ms bigint, event_ms bigint, level string, level_inferred boolean, component string, parsed boolean, "
    "template_id int, template string, content string, line string"
)

_KEY_LINE = re.compile(r"^(?P<system>[A-Za-z]+)-(?P<n>\d+)$")

MIN_SPIKE_ERRORS = 3
SPIKE_SIGMAS = 3.0
SPIKE_RATIO = 2.0


def _line_number(keys: Any, system: str | None) -> int | None:
    if not isinstance(keys, str):
        return None
    for key in keys.split(" "):
        m = _KEY_LINE.match(key)
        if m and (system is None or m.group("system").lower() == system.lower()):
            return int(m.group("n"))
    return None


def mine_topic_frame(pdf: Any) -> Any:
    """The grouped-map UDF: one topic's messages (pandas) → one parsed row per line (pandas).

    Input columns: topic, tags, keys, broker_name, queue_id, queue_offset,
    store_ms (epoch ms), line (bytes, or str). Output columns: :data:`LINES_SCHEMA`.
    Never raises for bad lines (they come back with ``parsed = False``).
    """
    import pandas as pd

    rows = mine_topic_rows(pdf.to_dict("records"))
    columns = [c.split(" ")[0] for c in LINES_SCHEMA.split(", ")]
    out = pd.DataFrame(rows, columns=columns)
    for col in ("line_no", "queue_id", "template_id"):
        out[col] = out[col].astype("Int32")
    for col in ("queue_offset", "store_ms", "event_ms"):
        out[col] = out[col].astype("Int64")
    return out


def mine_topic_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`mine_topic_frame` on plain dicts (one per message; same keys)."""
    if not records:
        return []
    topic = str(records[0].get("topic") or "")
    tags = next((r.get("tags") for r in records if r.get("tags")), None)
    system = loghub.system_of(topic, tags)
    prepared = []
    for r in records:
        n = _line_number(r.get("keys"), system)
        store_ms = int(r.get("store_ms") or 0)
        prepared.append((n if n is not None else math.inf, store_ms, str(r.get("broker_name") or ""),
                         int(r.get("queue_id") or 0), int(r.get("queue_offset") or 0), n, r))
    prepared.sort(key=lambda p: p[:5])
    out: list[dict[str, Any]] = []
    contents: list[str] = []
    parsed_rows: list[dict[str, Any]] = []
    for *_, n, r in prepared:
        line = r.get("line")
        if isinstance(line, bytes | bytearray | memoryview):
            line = bytes(line).decode("utf-8", errors="replace")
        line = line if isinstance(line, str) else ""
        store_ms = int(r.get("store_ms") or 0)
        year = datetime.fromtimestamp(store_ms / 1000, tz=UTC).year if store_ms > 0 else 1970
        parsed = None
        if system is not None:
            try:
                parsed = loghub.parse_header(system, line, year)
            except Exception:  # never let one line kill the topic
                parsed = None
        row: dict[str, Any] = {
            "topic": topic, "system": system, "line_no": n, "broker_name": r.get("broker_name"),
            "queue_id": r.get("queue_id"), "queue_offset": r.get("queue_offset"), "store_ms": store_ms,
            "event_ms": store_ms, "level": None, "level_inferred": None, "component": None, "parsed": False,
            "template_id": None, "template": None, "content": line, "line": line,
        }
        if parsed is not None:
            row.update(parsed=True, level=parsed.level, level_inferred=parsed.level_inferred,
                       component=parsed.component, content=parsed.content)
            if parsed.event_time is not None:
                row["event_ms"] = int(parsed.event_time.timestamp() * 1000)
            contents.append(parsed.content)
            parsed_rows.append(row)
        out.append(row)
    if contents:
        result = mine(contents, system)
        for row, cid in zip(parsed_rows, result.cluster_ids, strict=True):
            row["template_id"] = cid
            row["template"] = result.templates.get(cid)
    return out


# -- accuracy ---------------------------------------------------------------------------


def topic_accuracy(system: str, rows: Sequence[tuple[int | None, int | None, str]],
                   truth: loghub.GroundTruth) -> dict[str, Any]:
    """Grouping accuracy of one topic against its ground truth.

    ``rows``: ``(line_no, template_id, raw line)`` per message. A message is
    matched to ground-truth line ``line_no`` when that line's text equals the
    raw line, else to the next unused ground-truth line with the same text;
    unmatched messages are left out. Unparsed lines (``template_id`` None)
    count as singleton groups. Returns ``{"accuracy", "lines_evaluated",
    "ground_truth_lines", "drain_published"}`` (accuracy None when nothing matched).
    """
    gt_lines = truth.lines or []
    by_text = truth.by_line()
    used: set[int] = set()
    true_ids: list[str] = []
    predicted: list[Any] = []
    for i, (line_no, template_id, line) in enumerate(rows):
        idx: int | None = None
        if line_no is not None and 1 <= line_no <= len(truth.event_ids):
            cand = line_no - 1
            if not gt_lines or gt_lines[cand].strip() == line.strip():
                idx = cand
        if idx is None:
            for cand in by_text.get(line, ()):
                if cand not in used:
                    idx = cand
                    break
        if idx is None or idx >= len(truth.event_ids):
            continue
        used.add(idx)
        true_ids.append(truth.event_ids[idx])
        predicted.append(template_id if template_id is not None else f"unparsed-{i}")
    return {
        "accuracy": grouping_accuracy(true_ids, predicted) if true_ids else None,
        "lines_evaluated": len(true_ids),
        "ground_truth_lines": len(truth.event_ids),
        "drain_published": loghub.DRAIN_PUBLISHED_ACCURACY.get(system),
    }


# -- the job ---------------------------------------------------------------------------------


def parse_lines(df: Any) -> Any:
    """Messages (``rocket`` columns) → the per-line DataFrame of :data:`LINES_SCHEMA` plus
    ``event_time``, ``minute`` (event-time minute), ``store_time`` (timestamps) and ``date``
    (``yyyy-MM-dd`` of the store time, the day the line was ingested), all UTC."""
    from pyspark.sql import functions as F

    msgs = df.select(
        "topic", "tags", "keys", "broker_name", "queue_id", "queue_offset",
        F.unix_millis("store_timestamp").alias("store_ms"),
        F.col("body").alias("line"),  # bytes: decoded in Python, bad UTF-8 replaced (never fatal)
    )
    lines = msgs.groupBy("topic").applyInPandas(mine_topic_frame, schema=LINES_SCHEMA)
    event_time = F.timestamp_millis("event_ms")
    return (lines.withColumn("event_time", event_time)
            .withColumn("minute", F.date_trunc("minute", event_time))
            .withColumn("store_time", F.timestamp_millis("store_ms"))
            .withColumn("date", F.date_format(F.col("store_time"), "yyyy-MM-dd")))


def error_spikes(lines: Any) -> Any:
    """Per topic and minute: lines, errors, rate, z-score; only the spike minutes (module docstring)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    per_min = (lines.where("parsed").groupBy("topic", "minute")
               .agg(F.count("*").alias("lines"),
                    F.sum(F.when(F.col("level").isin("ERROR", "FATAL"), 1).otherwise(0)).alias("errors")))
    w = Window.partitionBy("topic")
    p = F.sum("errors").over(w) / F.sum("lines").over(w)
    scored = (per_min.withColumn("topic_rate", p)
              .withColumn("rate", F.col("errors") / F.col("lines"))
              .withColumn("expected", F.col("lines") * F.col("topic_rate"))
              .withColumn("sd", F.sqrt(F.col("lines") * F.col("topic_rate") * (1 - F.col("topic_rate"))))
              .withColumn("z", F.when(F.col("sd") > 0, (F.col("errors") - F.col("expected")) / F.col("sd"))))
    return scored.where(
        (F.col("errors") >= MIN_SPIKE_ERRORS)
        & (F.col("rate") >= F.col("topic_rate") * SPIKE_RATIO)
        & (F.col("z") > SPIKE_SIGMAS)
    ).select("topic", "minute", "lines", "errors", "rate", "topic_rate", "z")


def analyze_logs(df: Any, out_dir: str | Path, *, loghub_root: str | Path | None = None, top_n: int = 10,
                 input_info: dict[str, Any] | None = None, report: bool = True) -> dict[str, Any]:
    """Run the logs job on a message DataFrame ``df`` and write everything under ``out_dir``.

    ``loghub_root``: where to look for ground truth (default: found by
    :func:`rocket.analytics.loghub.find_loghub_dir`). Returns the summary
    (also written to ``summary.json``): per topic lines, parsed/unparsed,
    templates, level counts, error rate, top templates, spikes, accuracy;
    plus ``accuracy_mean`` over the topics with ground truth.
    """
    from pyspark.sql import functions as F

    clock = Stopwatch()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(loghub_root) if loghub_root else loghub.find_loghub_dir()
    lines = parse_lines(df).persist()
    try:
        write_parquet(lines.drop("line"), out / "lines", ["date", "topic"])
        level_counts = lines.groupBy(F.date_format("minute", "yyyy-MM-dd").alias("date"), "topic", "minute",
                                     F.coalesce("level", F.lit("UNPARSED")).alias("level")).count()
        templates = (lines.where("parsed").groupBy("topic", "system", "template_id", "template")
                     .agg(F.count("*").alias("count"),
                          F.sum(F.when(F.col("level").isin("ERROR", "FATAL"), 1).otherwise(0)).alias("errors"),
                          F.min("event_time").alias("first_seen"), F.max("event_time").alias("last_seen")))
        spikes = error_spikes(lines)
        write_parquet(level_counts, out / "level_counts", ["date", "topic"], small=True)
        write_parquet(templates, out / "templates", ["topic"], small=True)
        write_parquet(spikes, out / "error_spikes", ["topic"], small=True)
        levels_pd = level_counts.toPandas()
        templates_pd = templates.toPandas()
        spikes_pd = spikes.toPandas()
        systems = {r["topic"]: r["system"] for r in lines.select("topic", "system").distinct().collect()}
        with_truth = [t for t, sys_ in systems.items()
                      if root and sys_ and loghub.structured_path(root, sys_) is not None]
        truth_rows: dict[str, list[tuple[int | None, int | None, str]]] = {t: [] for t in with_truth}
        if with_truth:
            for r in (lines.where(F.col("topic").isin(with_truth))
                      .select("topic", "line_no", "template_id", "line").collect()):
                truth_rows[r["topic"]].append((r["line_no"], r["template_id"], r["line"]))
    finally:
        lines.unpersist()

    accuracies: dict[str, dict[str, Any]] = {}
    for topic, rows in truth_rows.items():
        truth = loghub.load_ground_truth(root, systems[topic]) if root else None
        if truth is not None:
            accuracies[topic] = topic_accuracy(systems[topic], rows, truth)
    per_topic: dict[str, dict[str, Any]] = {}
    levels: dict[str, dict[str, int]] = {}
    for topic, sub in levels_pd.groupby("topic"):
        lv = {str(k): int(v) for k, v in sub.groupby("level")["count"].sum().items()}
        levels[str(topic)] = lv
        total = int(sub["count"].sum())
        per_topic[str(topic)] = {
            "system": systems.get(str(topic)),
            "lines": total,
            "parsed": total - lv.get("UNPARSED", 0),
            "templates": int((templates_pd["topic"] == topic).sum()),
            "first_event": sub["minute"].min().to_pydatetime(),
            "last_event": sub["minute"].max().to_pydatetime(),
        }
    top: dict[str, list[dict[str, Any]]] = {}
    for topic, sub in templates_pd.groupby("topic"):
        best = sub.sort_values(["count", "template_id"], ascending=[False, True]).head(top_n)
        top[str(topic)] = [{"template_id": int(r.template_id), "template": r.template, "count": int(r.count),
                            "errors": int(r.errors)} for r in best.itertuples()]
    spike_rows: dict[str, list[dict[str, Any]]] = {}
    for r in spikes_pd.sort_values(["topic", "z"], ascending=[True, False]).itertuples():
        spike_rows.setdefault(str(r.topic), []).append(
            {"minute": r.minute.to_pydatetime(), "lines": int(r.lines), "errors": int(r.errors),
             "rate": float(r.rate), "topic_rate": float(r.topic_rate), "z": float(r.z)})

    topics_summary: dict[str, Any] = {}
    for topic in sorted(per_topic):
        info = per_topic[topic]
        lv = levels.get(topic, {})
        parsed = int(info["parsed"] or 0)
        errors = lv.get("ERROR", 0) + lv.get("FATAL", 0)
        topics_summary[topic] = {
            "system": info.get("system"),
            "lines": int(info["lines"]),
            "parsed": parsed,
            "unparsed": int(info["lines"]) - parsed,
            "templates": int(info["templates"]),
            "levels": dict(sorted(lv.items())),
            "error_rate": errors / parsed if parsed else None,
            "first_event": info.get("first_event"),
            "last_event": info.get("last_event"),
            "top_templates": top.get(topic, []),
            "error_spikes": spike_rows.get(topic, []),
            "accuracy": accuracies.get(topic),
        }
    values = [a["accuracy"] for a in accuracies.values() if a.get("accuracy") is not None]
    summary: dict[str, Any] = {
        "job": "logs",
        "generated_at": utc_now(),
        "input": input_info or {},
        "ground_truth": str(root) if root else None,
        "totals": {
            "topics": len(topics_summary),
            "lines": sum(t["lines"] for t in topics_summary.values()),
            "parsed": sum(t["parsed"] for t in topics_summary.values()),
            "unparsed": sum(t["unparsed"] for t in topics_summary.values()),
            "templates": sum(t["templates"] for t in topics_summary.values()),
            "error_spikes": sum(len(t["error_spikes"]) for t in topics_summary.values()),
        },
        "accuracy_mean": sum(values) / len(values) if values else None,
        "drain_published_mean": loghub.DRAIN_PUBLISHED_MEAN,
        "topics": topics_summary,
        "outputs": {name: str(out / name) for name in ("lines", "level_counts", "templates", "error_spikes")},
        "seconds": round(clock.seconds, 2),
    }
    if report:
        from rocket.analytics.report import logs_report

        summary["outputs"]["report"] = logs_report(summary, levels_pd, spikes_pd, out)
    summary["outputs"]["summary"] = str(out / "summary.json")
    write_json(summary, out / "summary.json")
    return summary


def run_logs_job(namesrv: str, topics: list[str], out_dir: Path) -> dict[str, Any]:
    """The logs job on ``topics`` of a running cluster (``make run`` calls this after publishing LogHub).

    Reads every message from earliest to latest with ``format("rocket")`` on a
    ``local[2]`` SparkSession (reused when one is active; stopped again when
    this call created it), writes Parquet + ``summary.json`` + ``report.md``
    under ``out_dir`` and returns the summary dict (see :func:`analyze_logs`).
    Raises ``JobInputError`` for an empty topic list, and Spark's exception
    (its message naming the topic) when a topic does not exist.
    """
    from pyspark.sql import SparkSession

    from rocket.analytics.session import spark_session

    spec = InputSpec(namesrv=namesrv, topics=tuple(topics))
    active = SparkSession.getActiveSession()
    spark = spark_session("rocket-logs")
    try:
        return analyze_logs(input_frame(spark, spec), out_dir, input_info=spec.describe())
    finally:
        if active is None:
            spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit .../jobs/logs.py --namesrv H:P --topics T1,T2 --out DIR`` (or ``--commitlog``/``--loghub``)."""
    parser = argparse.ArgumentParser(prog="logs", description="LogHub log analytics: templates, levels, spikes")
    add_input_arguments(parser)
    parser.add_argument("--ground-truth", default=None, help="LogHub folder with *_structured.csv")
    parser.add_argument("--top", type=int, default=10, help="templates per topic in the summary")
    args = parser.parse_args(argv)
    from rocket.analytics.session import spark_session

    spec = input_spec(args)
    spark = spark_session("rocket-logs", master=args.master)
    summary = analyze_logs(input_frame(spark, spec), args.out, loghub_root=args.ground_truth, top_n=args.top,
                           input_info=spec.describe())
    print_summary(summary)
    return 0


def print_summary(summary: dict[str, Any], stream: Any = None) -> None:
    """A plain-text table of the summary (topic, lines, unparsed, templates, error rate, accuracy)."""
    stream = stream or sys.stdout
    print(f"{'topic':24} {'lines':>7} {'unparsed':>8} {'templates':>9} {'err rate':>8} {'accuracy':>8} "
          f"{'Drain':>6}", file=stream)
    for topic, t in summary["topics"].items():
        acc = t.get("accuracy") or {}
        a = acc.get("accuracy")
        d = acc.get("drain_published")
        rate = t.get("error_rate")
        print(f"{topic:24} {t['lines']:>7} {t['unparsed']:>8} {t['templates']:>9} "
              f"{'' if rate is None else f'{rate:.3f}':>8} {'' if a is None else f'{a:.3f}':>8} "
              f"{'' if d is None else f'{d:.3f}':>6}", file=stream)
    mean = summary.get("accuracy_mean")
    if mean is not None:
        print(f"mean parsing accuracy {mean:.3f} (Drain published {summary['drain_published_mean']:.3f})",
              file=stream)
    print(f"outputs: {summary['outputs'].get('report', summary['outputs'].get('summary'))}", file=stream)


if __name__ == "__main__":
    sys.exit(main())
