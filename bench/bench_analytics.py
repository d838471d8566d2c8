"""Analytics benchmark: log parsing accuracy, the logs job's scaling, ``format("rocket")`` read throughput.

1. Accuracy: GA, PA, FGA, FTA of the default pipeline (headers learned, one
   miner setting) on the 12 LogHub 2k samples (``../shared/data/loghub``), per
   system, with the means on the selection and report systems
   (:mod:`rocket.analytics.evaluate`).
2. Logs job scaling: one topic (4 queues per broker group, 8 partitions) of
   1,000,000 lines made from the LogHub samples by re-sampling their parameters
   (:func:`resampled_lines`), published to an embedded cluster, then the whole
   logs job (:func:`rocket.analytics.jobs.logs.analyze_logs`, without charts)
   timed on ``local[1]`` and ``local[2]``: lines/s of a read alone, of read +
   mining per partition, of mining a cached input (no reader, no broker: the
   part that scales with cores), and of the whole job end to end from the
   broker (with its phases' seconds); and the peak resident set of a mining task's Python worker,
   and the load average during the row (the machine is shared). The
   reader's and the miner's Python workers of one task run at once, and the
   brokers share the machine: on a 2-core machine ``local[1]`` already keeps
   both cores busy, so end-to-end scaling needs more cores than that.
3. Throughput: one topic of 4 queues per broker group filled with
   incompressible 4,000-byte bodies, read back by Spark on ``local[2]`` with
   ``spark.read.format("rocket")`` and summed. The brokers run with
   ``maxTransferCountOnMessageInMemory=256`` and
   ``maxTransferBytesOnMessageInMemory=4 MiB`` (RocketMQ's defaults are 32 /
   256 KiB) and the reader with ``pullBatchSize=256``. Figure: body MB/s
   (10^6 bytes) of the best of the timed reads. Target ≥ 50 MB/s.

``run(short=True)``: 100,000 lines and 20 MB instead of 1,000,000 lines and 100 MB, one timed read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path


def _throughput(short: bool) -> dict[str, float]:
    from rocket.analytics.fixtures import publish
    from rocket.analytics.session import spark_session
    from rocket.local import running_cluster

    body_size = 4000
    total = (20 if short else 100) * 1_000_000
    count = total // body_size
    data = Path(tempfile.mkdtemp(prefix="bench-analytics-"))
    args = ["--set", "mappedFileSizeCommitLog=134217728", "--set", "mappedFileSizeConsumeQueue=600000",
            "--set", "maxTransferCountOnMessageInMemory=256",
            "--set", "maxTransferBytesOnMessageInMemory=4194304"]
    try:
        with running_cluster(data, extra_broker_args=args) as state:
            t0 = time.perf_counter()
            publish(state.namesrv, "bench-analytics", [os.urandom(body_size) for _ in range(count)],
                    queue_nums=4, batch=64, concurrency=16)
            publish_s = time.perf_counter() - t0
            time.sleep(1.0)  # let slaves catch up
            spark = spark_session("bench-analytics", master="local[2]")
            df = (spark.read.format("rocket").option("namesrv", state.namesrv).option("topic", "bench-analytics")
                  .option("pullBatchSize", "256").option("pullWindow", "8").load())
            df.selectExpr("sum(length(body)) AS b").collect()  # warm-up: Python workers, connections
            best = 0.0
            read_bytes = 0
            for _ in range(1 if short else 3):
                t = time.perf_counter()
                row = df.selectExpr("count(*) AS n", "sum(length(body)) AS b").collect()[0]
                dt = time.perf_counter() - t
                read_bytes = int(row["b"])
                if int(row["n"]) != count:
                    raise RuntimeError(f"read {row['n']} messages, published {count}")
                best = max(best, read_bytes / dt / 1e6)
            partitions = df.rdd.getNumPartitions()
            spark.stop()
        return {"messages": float(count), "bytes": float(read_bytes), "mb_s": best,
                "publish_mb_s": total / publish_s / 1e6, "partitions": float(partitions)}
    finally:
        shutil.rmtree(data, ignore_errors=True)


def resampled_lines(count: int, seed: int = 1) -> list[str]:
    """``count`` log lines made from the LogHub samples by re-sampling their parameters: a random line of a
    random system, each digit replaced by a random digit (same shape, new values). Deterministic for ``seed``.
    Raises ``RuntimeError`` when no LogHub sample is found."""
    import random
    import re

    from rocket.analytics import loghub

    root = loghub.find_loghub_dir()
    if root is None:
        raise RuntimeError("no LogHub sample found (../shared/data/loghub or rocket/data/loghub)")
    pools = [lines for _, lines in loghub.iter_system_logs(root) if lines]
    rnd = random.Random(seed)
    digit = re.compile(r"\d")
    digits = "0123456789"
    out: list[str] = []
    for _ in range(count):
        line = rnd.choice(rnd.choice(pools))
        out.append(digit.sub(lambda _m: rnd.choice(digits), line))
    return out


def _logs_job_scaling(short: bool) -> list[dict[str, float]]:
    """The logs job end to end (broker → format("rocket") → headers, mining per partition, merge, Parquet)
    on one topic of re-sampled LogHub lines, on local[1] and local[2]."""
    import json

    from rocket.analytics.fixtures import publish
    from rocket.analytics.jobs.logs import STATS_DIR_ENV, analyze_logs, mine_lines
    from rocket.analytics.session import spark_session
    from rocket.local import running_cluster

    count = 100_000 if short else 1_000_000
    lines = resampled_lines(count)
    data = Path(tempfile.mkdtemp(prefix="bench-analytics-logs-"))
    args = ["--set", "mappedFileSizeCommitLog=268435456", "--set", "mappedFileSizeConsumeQueue=6000000",
            "--set", "maxTransferCountOnMessageInMemory=256",
            "--set", "maxTransferBytesOnMessageInMemory=4194304"]
    results: list[dict[str, float]] = []
    try:
        with running_cluster(data, extra_broker_args=args) as state:
            t0 = time.perf_counter()
            publish(state.namesrv, "bench-logs", [line.encode() for line in lines], queue_nums=4, batch=128,
                    concurrency=16)
            publish_s = time.perf_counter() - t0
            del lines
            time.sleep(1.0)
            for cores in (1, 2):
                stats = data / f"stats-{cores}"
                stats.mkdir()
                # the Python workers get it through the executor environment (a stopped session's JVM lingers)
                spark = spark_session(f"bench-logs-{cores}", master=f"local[{cores}]",
                                      conf={f"spark.executorEnv.{STATS_DIR_ENV}": str(stats)})
                load0 = os.getloadavg()[0]
                try:
                    df = (spark.read.format("rocket").option("namesrv", state.namesrv)
                          .option("topic", "bench-logs").option("pullBatchSize", "256").load())
                    t = time.perf_counter()
                    read_n = df.select("queue_offset").count()
                    read_s = time.perf_counter() - t
                    t = time.perf_counter()
                    mined_n = mine_lines(df).select("template").where("template IS NOT NULL").count()
                    mine_s = time.perf_counter() - t
                    cached = df.select("topic", "tags", "keys", "broker_name", "queue_id", "queue_offset",
                                       "store_timestamp", "body").persist()
                    cached.count()
                    t = time.perf_counter()
                    mine_lines(cached).select("template").where("template IS NOT NULL").count()
                    mine_only_s = time.perf_counter() - t
                    cached.unpersist()
                    t = time.perf_counter()
                    summary = analyze_logs(df, data / f"out-{cores}", report=False, loghub_root=data)
                    dt = time.perf_counter() - t
                finally:
                    spark.stop()
                if read_n != count or mined_n != count:
                    raise RuntimeError(f"read {read_n} and mined {mined_n} lines, published {count}")
                topic = summary["topics"]["bench-logs"]
                if topic["lines"] != count:
                    raise RuntimeError(f"the job saw {topic['lines']} lines, published {count}")
                rss = [json.loads(p.read_text())["max_rss_kib"] for p in stats.glob("*.json")]
                results.append({"cores": float(cores), "lines": float(count), "seconds": dt,
                                "lines_s": count / dt, "read_lines_s": count / read_s,
                                "mine_lines_s": count / mine_s, "mine_only_lines_s": count / mine_only_s,
                                "templates": float(topic["templates"]),
                                "tasks": float(len(rss)), "peak_rss_mib": max(rss) / 1024 if rss else float("nan"),
                                "publish_s": publish_s, "load": (load0 + os.getloadavg()[0]) / 2,
                                **{f"phase_{k}": float(v) for k, v in summary.get("phase_seconds", {}).items()}})
        return results
    finally:
        shutil.rmtree(data, ignore_errors=True)


def run(short: bool) -> None:
    """Print the accuracy table, the logs job's scaling (1 vs 2 cores) and the read throughput."""
    from rocket.analytics.evaluate import evaluate_loghub, print_table

    print("-- log parsing accuracy (LogHub 2k samples, headers learned, one default miner setting) --")
    results = evaluate_loghub()
    if not results:
        print("SKIPPED accuracy: no LogHub sample with ground truth (../shared/data/loghub) found")
    else:
        print_table(results)
    print()
    print(f"-- logs job end to end from the broker, one topic of re-sampled LogHub lines "
          f"({'100k' if short else '1M'} lines, 8 queues) --")
    try:
        rows = _logs_job_scaling(short)
    except ImportError as exc:
        print(f"SKIPPED logs job: {exc} (install the 'analytics' extra)")
        rows = []
    if rows:
        print(f"{'cores':>5} {'lines':>9} {'read/s':>8} {'read+mine/s':>11} {'mine/s':>8} {'job s':>7} "
              f"{'job lines/s':>11} {'templates':>9} {'peak RSS/task MiB':>17} {'load':>5}")
        for r in rows:
            print(f"{int(r['cores']):>5} {int(r['lines']):>9} {r['read_lines_s']:>8.0f} {r['mine_lines_s']:>11.0f} "
                  f"{r['mine_only_lines_s']:>8.0f} {r['seconds']:>7.1f} {r['lines_s']:>11.0f} "
                  f"{int(r['templates']):>9} {r['peak_rss_mib']:>17.0f} {r['load']:>5.1f}")
        for r in rows:
            phases = ", ".join(f"{k[len('phase_'):]} {v:.1f}" for k, v in r.items() if k.startswith("phase_"))
            print(f"  job phases on local[{int(r['cores'])}] (s): {phases}")
        print(f"scaling 2 vs 1 cores: job x{rows[1]['lines_s'] / rows[0]['lines_s']:.2f}, read+mine "
              f"x{rows[1]['mine_lines_s'] / rows[0]['mine_lines_s']:.2f}, mine (cached input) "
              f"x{rows[1]['mine_only_lines_s'] / rows[0]['mine_only_lines_s']:.2f} (published in "
              f"{rows[0]['publish_s']:.1f} s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, "
              "shared machine; peak RSS is the Python worker's ru_maxrss, an upper bound per task)")
    print()
    print("-- format('rocket') read throughput, Spark local[2], embedded cluster --")
    try:
        f = _throughput(short)
    except ImportError as exc:
        print(f"SKIPPED throughput: {exc} (install the 'analytics' extra)")
        return
    ok = "OK" if f["mb_s"] >= 50 else "BELOW TARGET"
    print(f"{'messages':>9} {'body MB':>8} {'partitions':>10} {'read MB/s':>9} {'publish MB/s':>12}")
    print(f"{int(f['messages']):>9} {f['bytes'] / 1e6:>8.1f} {int(f['partitions']):>10} {f['mb_s']:>9.1f} "
          f"{f['publish_mb_s']:>12.1f}   (target >= 50 MB/s: {ok}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
