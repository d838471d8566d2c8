"""The ``traffic`` job: per topic and store-time minute, messages, bytes, store latency, top producers.

Run with ``spark-submit services/rocket/analytics/jobs/traffic.py --namesrv H:P --topics A,B --out DIR``
(or ``--commitlog STORE_DIR`` offline), as ``rocket analytics traffic ...``, or :func:`analyze_traffic`.

Per (topic, minute of the store timestamp, UTC):

* ``messages``; ``bytes`` = sum of body sizes (decompressed), in bytes;
* store latency = store timestamp - born timestamp, in ms (broker clock minus
  producer clock): ``latency_p50_ms``, ``latency_p95_ms``, ``latency_p99_ms``
  (Spark ``percentile_approx``, accuracy 10000) and ``latency_max_ms``;
* ``top_producers``: the 3 born hosts (``ip:port`` of the producing connection)
  with the most messages, as ``array<struct<born_host, messages>>``.

Output under ``out_dir``: ``per_minute/`` Parquet partitioned by ``date`` and
``topic``; ``summary.json`` (per topic totals, latency percentiles over all
its messages, top 5 producers); ``report.md`` with ``charts/traffic.png``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rocket.analytics.jobs.common import (
    Stopwatch,
    add_input_arguments,
    input_frame,
    input_spec,
    utc_now,
    write_json,
    write_parquet,
)

TOP_PRODUCERS_PER_MINUTE = 3
TOP_PRODUCERS_PER_TOPIC = 5


def analyze_traffic(df: Any, out_dir: str | Path, *, input_info: dict[str, Any] | None = None,
                    report: bool = True) -> dict[str, Any]:
    """Run the traffic job on a message DataFrame (``rocket`` columns); returns the summary dict."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    clock = Stopwatch()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    msgs = df.select(
        "topic", "born_host",
        F.date_trunc("minute", "store_timestamp").alias("minute"),
        F.length("body").alias("size"),
        (F.unix_millis("store_timestamp") - F.unix_millis("born_timestamp")).alias("latency_ms"),
    ).persist()
    try:
        pct = F.percentile_approx("latency_ms", [0.5, 0.95, 0.99], 10000)
        base = msgs.groupBy("topic", "minute").agg(
            F.count("*").alias("messages"), F.sum("size").alias("bytes"), pct.alias("p"),
            F.max("latency_ms").alias("latency_max_ms"))
        producers = msgs.groupBy("topic", "minute", "born_host").agg(F.count("*").alias("messages"))
        rank = Window.partitionBy("topic", "minute").orderBy(F.desc("messages"), "born_host")
        top = (producers.withColumn("r", F.row_number().over(rank)).where(F.col("r") <= TOP_PRODUCERS_PER_MINUTE)
               .groupBy("topic", "minute")
               .agg(F.sort_array(F.collect_list(F.struct(F.col("r"), F.col("born_host"), F.col("messages"))))
                    .alias("tp")))
        per_minute = (base.join(top, ["topic", "minute"], "left")
                      .select("topic", "minute", F.date_format("minute", "yyyy-MM-dd").alias("date"),
                              "messages", "bytes",
                              F.col("p")[0].alias("latency_p50_ms"), F.col("p")[1].alias("latency_p95_ms"),
                              F.col("p")[2].alias("latency_p99_ms"), "latency_max_ms",
                              F.transform("tp", lambda s: F.struct(s["born_host"].alias("born_host"),
                                                                    s["messages"].alias("messages")))
                              .alias("top_producers")))
        write_parquet(per_minute, out / "per_minute", ["date", "topic"], small=True)
        per_minute_pd = per_minute.drop("top_producers").toPandas()
        totals = {r["topic"]: r.asDict() for r in msgs.groupBy("topic").agg(
            F.count("*").alias("messages"), F.sum("size").alias("bytes"), pct.alias("p"),
            F.max("latency_ms").alias("max")).collect()}
        prank = Window.partitionBy("topic").orderBy(F.desc("messages"), "born_host")
        top_topic: dict[str, list[dict[str, Any]]] = {}
        for r in (msgs.groupBy("topic", "born_host").agg(F.count("*").alias("messages"))
                  .withColumn("r", F.row_number().over(prank)).where(F.col("r") <= TOP_PRODUCERS_PER_TOPIC)
                  .orderBy("topic", "r").collect()):
            top_topic.setdefault(r["topic"], []).append({"born_host": r["born_host"], "messages": int(r["messages"])})
    finally:
        msgs.unpersist()

    topics: dict[str, Any] = {}
    for topic in sorted(totals):
        t = totals[topic]
        sub = per_minute_pd[per_minute_pd["topic"] == topic]
        p = t["p"] or [None, None, None]
        topics[topic] = {
            "messages": int(t["messages"]),
            "bytes": int(t["bytes"] or 0),
            "minutes": len(sub),
            "peak_messages_per_minute": int(sub["messages"].max()) if len(sub) else 0,
            "store_latency_ms": {"p50": p[0], "p95": p[1], "p99": p[2], "max": t["max"]},
            "top_producers": top_topic.get(topic, []),
        }
    summary: dict[str, Any] = {
        "job": "traffic",
        "generated_at": utc_now(),
        "input": input_info or {},
        "totals": {"topics": len(topics), "messages": sum(t["messages"] for t in topics.values()),
                   "bytes": sum(t["bytes"] for t in topics.values()), "minutes": len(per_minute_pd)},
        "topics": topics,
        "outputs": {"per_minute": str(out / "per_minute"), "summary": str(out / "summary.json")},
        "seconds": round(clock.seconds, 2),
    }
    if report:
        from rocket.analytics.report import traffic_report

        summary["outputs"]["report"] = traffic_report(summary, per_minute_pd, out)
    write_json(summary, out / "summary.json")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit .../jobs/traffic.py --namesrv H:P --topics T1,T2 --out DIR`` (or ``--commitlog DIR``)."""
    parser = argparse.ArgumentParser(prog="traffic", description="per topic and minute: messages, bytes, latency")
    add_input_arguments(parser)
    args = parser.parse_args(argv)
    from rocket.analytics.session import spark_session

    spec = input_spec(args)
    spark = spark_session("rocket-traffic", master=args.master)
    summary = analyze_traffic(input_frame(spark, spec), args.out, input_info=spec.describe())
    print_summary(summary)
    return 0


def print_summary(summary: dict[str, Any], stream: Any = None) -> None:
    """A plain-text table of the traffic summary."""
    stream = stream or sys.stdout
    print(f"{'topic':28} {'messages':>9} {'bytes':>12} {'p50 ms':>7} {'p99 ms':>7}  top producer", file=stream)
    for topic, t in summary["topics"].items():
        lat = t["store_latency_ms"]
        prod = t["top_producers"][0]["born_host"] if t["top_producers"] else ""
        p50 = "" if lat["p50"] is None else f"{lat['p50']:.0f}"
        p99 = "" if lat["p99"] is None else f"{lat['p99']:.0f}"
        print(f"{topic:28} {t['messages']:>9} {t['bytes']:>12} {p50:>7} {p99:>7}  {prod}", file=stream)
    print(f"outputs: {summary['outputs'].get('report', summary['outputs']['summary'])}", file=stream)


if __name__ == "__main__":
    sys.exit(main())
