"""Timer messages side by side: ours and Apache RocketMQ 5's timer wheel, driven by Apache's Java client.

``python -m bench.compare.timer [--short]`` starts each system in turn (``bench.compare.servers``,
ASYNC_FLUSH master, ``timerPrecisionMs`` 1000 and 100) and runs ``tests/compat/TimerDriver.java
bench``: ``n`` timers (``setDeliverTimeMs``, 20,000; ``--short``: 2,000) spread over a window
(60 s; ``--short``: 15 s) that starts once all are sent, delivery error (arrival - scheduled)
p50/p99/max, and sync-send throughput of plain vs timer messages (16 threads). Prints a
Markdown table.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.compare import java, servers

DRIVER = Path(__file__).resolve().parents[2] / "tests" / "compat" / "TimerDriver.java"


def one(system: str, lib: Path, classes: Path, precision: int, n: int, window: float, tput: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"rocket-timer-compare-{system}-"))
    cluster = servers.start(system, root, flush="ASYNC_FLUSH", lib=lib,
                            extra={"timerPrecisionMs": str(precision), "timerWheelEnable": "true"})
    try:
        argv = java.driver_argv(lib, classes, root / "driver", "bench", f"namesrv={cluster.namesrv}",
                                f"topic=TimerBench{precision}", f"n={n}", f"window={window}", "threads=16",
                                f"throughput={tput}", jvm=("-Xms256m", "-Xmx512m"), main="TimerDriver")
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=window + 600, check=False)
        results = java.driver_results(proc.stdout)
        if not results:
            raise RuntimeError(f"{system}: no result (exit {proc.returncode}): {proc.stderr[-2000:]}")
        return dict(results[-1])
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare.timer")
    parser.add_argument("--short", action="store_true")
    args = parser.parse_args(argv)
    n, window, tput = (2_000, 15.0, 2_000) if args.short else (20_000, 60.0, 10_000)
    lib = java.ensure_jars()
    classes = java.ensure_driver(lib, DRIVER)
    rows = ["| precision | system | delivery error p50 / p99 / max ms | early | received | plain msgs/s | "
            "timer msgs/s | timer / plain |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for precision in (1000, 100):
        for system in ("ours", "apache"):
            r = one(system, lib, classes, precision, n, window, tput)
            line = (f"| {precision} ms | {system} | {r['p50']:.0f} / {r['p99']:.0f} / {r['max']:.0f} | {r['early']} | "
                    f"{r['received']:,} / {r['n']:,} | {r['plain_msgs_s']:,.0f} | {r['timer_msgs_s']:,.0f} | "
                    f"{r['timer_msgs_s'] / r['plain_msgs_s']:.0%} |")
            rows.append(line)
            print(line, flush=True)
    print("\n" + "\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
