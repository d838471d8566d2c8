"""Analytics benchmark: ``format("rocket")`` read throughput and LogHub parsing accuracy.

1. Throughput: an embedded cluster (NameServer + broker-a/broker-b, with their
   slaves when the local cluster starts them), one topic of 4 queues per broker
   group filled with incompressible 4,000-byte bodies (under the 4 KiB client
   compression threshold), read back by Spark on ``local[2]`` with
   ``spark.read.format("rocket")`` and summed (``sum(length(body))``). The
   brokers run with ``maxTransferCountOnMessageInMemory=256`` and
   ``maxTransferBytesOnMessageInMemory=4 MiB`` (RocketMQ's defaults are 32 /
   256 KiB) and the reader with ``pullBatchSize=256``. Figure: body MB/s
   (10^6 bytes) of the best of the timed reads, after a warm-up read that
   starts the Python workers. Target ≥ 50 MB/s.
2. Accuracy: grouping accuracy of the per-system drain3 settings on the 12
   LogHub 2k samples (``../shared/data/loghub``), per system and mean, beside
   Drain's published figures. Target ≥ 0.881 (Drain's published mean).

``run(short=True)``: 20 MB instead of 100 MB, one timed read.
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


def run(short: bool) -> None:
    """Print the throughput and accuracy tables."""
    from rocket.analytics import loghub
    from rocket.analytics.evaluate import evaluate_loghub

    print("-- parsing accuracy (grouping accuracy, LogHub 2k samples) --")
    results = evaluate_loghub()
    if not results:
        print("SKIPPED accuracy: no LogHub sample with ground truth (../shared/data/loghub) found")
    else:
        print(f"{'system':10} {'accuracy':>8} {'Drain':>6} {'templates':>9} {'seconds':>7}")
        for r in results:
            d = "" if r.drain_published is None else f"{r.drain_published:.3f}"
            print(f"{r.system:10} {r.accuracy:>8.3f} {d:>6} {r.templates:>9} {r.seconds:>7.2f}")
        mean = sum(r.accuracy for r in results) / len(results)
        ok = "OK" if mean >= loghub.DRAIN_PUBLISHED_MEAN else "BELOW TARGET"
        print(f"{'mean':10} {mean:>8.3f} {loghub.DRAIN_PUBLISHED_MEAN:>6.3f}  ({len(results)} systems, "
              f"target >= {loghub.DRAIN_PUBLISHED_MEAN}: {ok})")
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
