"""Timer messages side by side: ours and Apache RocketMQ 5's timer wheel, driven by Apache's Java client.

Both the ``timer`` cell of ``make bench-compare`` (:func:`run_cell`) and ``python -m
bench.compare.timer [--short]`` start each system in turn (``bench.compare.servers``, one
ASYNC_FLUSH master, ``timerWheelEnable``, ``timerPrecisionMs``) and run ``tests/compat/TimerDriver.java
bench``: ``n`` timers (``setDeliverTimeMs``) spread over a window that starts once all are sent,
timed by a push consumer: delivery error (arrival - scheduled, ms) p50/p99/max and how many came
early; then enqueue throughput: ``throughput`` plain sync sends and as many timer sends
(``setDeliverTimeMs``, due in an hour), in halves (plain, timer, timer, plain), msgs/s of each and
their failed sends. The driver creates its topics before the consumer starts and times nothing
until the consumer has received a probe message from every queue.

The cell (:data:`CELL`): 2,000 timers over 30 s at ``timerPrecisionMs`` 1000, then 10,000 plain and
10,000 timer sends of 1 KiB from 64 threads (as the ``produce:64`` cell), about 1 minute per
system (the window was 60 s until the run had to fit in 30 minutes: the same 2,000 samples, each
timer's error does not depend on how far ahead it is due within the wheel's first roll).
The standalone command: 20,000 timers over 60 s (``--short``: 2,000 over 15 s) at 1000 and
100 ms, 16 threads, 128-byte bodies; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.compare import java, servers
from bench.compare.results import TIMER

DRIVER = Path(__file__).resolve().parents[2] / "tests" / "compat" / "TimerDriver.java"


@dataclass(frozen=True)
class TimerSettings:
    """One timer run: ``precision`` (ms, the broker's ``timerPrecisionMs``), ``n`` timers over
    ``window`` s, ``throughput`` plain and as many timer sends from ``threads`` threads (the
    delivery-error sends use ``threads`` too) with ``size``-byte bodies."""

    precision: int = 1000
    n: int = 2_000
    window: float = 60.0
    throughput: int = 10_000
    threads: int = 64
    size: int = 1024

    @property
    def config(self) -> str:
        """The page's configuration name of this run (``timerPrecisionMs=1000``)."""
        return f"timerPrecisionMs={self.precision}"


#: The ``timer`` cell of ``make bench-compare``.
CELL = TimerSettings(window=30.0)


def drive(system: str, cluster: servers.Cluster, root: Path, lib: Path, classes: Path,
          s: TimerSettings) -> dict[str, Any]:
    """Run ``TimerDriver bench`` against ``cluster``; its result (``p50``/``p99``/``max`` ms, ``early``,
    ``received``, ``n``, ``send_errors``, ``plain_msgs_s``, ``timer_msgs_s``, ``plain_errors``,
    ``timer_errors``) plus ``errors`` (every failed send and every timer that never arrived) and
    ``error_kinds``. Raises RuntimeError when the driver prints no result."""
    argv = java.driver_argv(lib, classes, root / "driver", "bench", f"namesrv={cluster.namesrv}",
                            f"topic=TimerBench{s.precision}", f"n={s.n}", f"window={s.window}",
                            f"threads={min(s.threads, 16)}", f"tputThreads={s.threads}",
                            f"throughput={s.throughput}", f"size={s.size}", main="TimerDriver")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=s.window + 600, check=False)
    found = java.driver_results(proc.stdout)
    if not found:
        raise RuntimeError(f"{system}: no result (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return tally(dict(found[-1]))


def tally(r: dict[str, Any]) -> dict[str, Any]:
    """Add ``error_kinds`` (failed sends of each part, timers never delivered, timers delivered
    early; kinds with a count only) and ``errors`` (their sum) to a ``TimerDriver bench`` result;
    returns ``r``."""
    missing = max(0, int(r["n"]) - int(r.get("send_errors", 0)) - int(r["received"]))
    kinds = {"failed timer send (delivery part)": int(r.get("send_errors", 0)),
             "timer never delivered": missing,
             "failed plain send (throughput part)": int(r.get("plain_errors", 0)),
             "failed timer send (throughput part)": int(r.get("timer_errors", 0)),
             "timer delivered early": int(r.get("early", 0))}
    r["error_kinds"] = {k: v for k, v in kinds.items() if v}
    r["errors"] = sum(r["error_kinds"].values())
    return r


Record = Callable[[str, str, int, str, dict[str, Any], tuple[float, float]], None]


def run_cell(system: str, rnd: int, lib: Path, classes: Path, record: Record,
             problem: Callable[[str, str, int, str], None], *, ours_path: Path | None = None,
             keep: bool = False, s: TimerSettings = CELL) -> None:
    """The ``timer`` cell for one system and round: start it, :func:`drive`, stop it; the result
    (with the broker CPU seconds it used) goes to ``record(system, config, rnd, "timer", result,
    (load at start, load at end))``, a cluster that does not start to ``problem``."""
    label = f"[round {rnd + 1} timer {system}]"
    root = Path(tempfile.mkdtemp(prefix=f"rocket-compare-timer-{system}-"))
    print(f"{label} starting ({s.config}, {s.n:,} timers over {s.window:g} s, then {s.throughput:,} plain and "
          f"{s.throughput:,} timer sends from {s.threads} threads) ...", flush=True)
    try:
        try:
            cluster = servers.start(system, root, flush="ASYNC_FLUSH", lib=lib, ours_path=ours_path,
                                    extra={"timerPrecisionMs": str(s.precision), "timerWheelEnable": "true"})
        except servers.ClusterStartError as exc:
            print(f"{label} did not start: {exc}", flush=True)
            problem(system, s.config, rnd, f"did not start: {exc}")
            return
        load0, cpu0 = os.getloadavg()[0], cluster.broker_cpu_seconds()
        try:
            r = drive(system, cluster, root, lib, classes, s)
            r["broker_cpu_s"] = round(cluster.broker_cpu_seconds() - cpu0, 3)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            r = {"errors": 1, "failed": str(exc)}
        finally:
            cluster.stop(discard=True)
        r["settings"] = asdict(s)
        load = (load0, os.getloadavg()[0])
        record(system, s.config, rnd, TIMER, r, load)
        print(f"{label} {describe(r)} (load {load[0]:.1f}→{load[1]:.1f})", flush=True)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def describe(r: dict[str, Any]) -> str:
    """One progress line for a timer result."""
    if "failed" in r:
        return f"timer: FAILED {r['failed'][:500]}"
    ratio = r["timer_msgs_s"] / r["plain_msgs_s"] if r.get("plain_msgs_s") else float("nan")
    return (f"timer: delivery error p50/p99/max {r['p50']:.0f}/{r['p99']:.0f}/{r['max']:.0f} ms, early "
            f"{r['early']}, received {r['received']:,}/{r['n']:,}; plain {r['plain_msgs_s']:,.0f} msgs/s, timer "
            f"{r['timer_msgs_s']:,.0f} msgs/s ({ratio:.0%}), errors {r['errors']}")


def one(system: str, lib: Path, classes: Path, s: TimerSettings) -> dict[str, Any]:
    """Start ``system``, :func:`drive` it with ``s``, stop it; the result."""
    root = Path(tempfile.mkdtemp(prefix=f"rocket-timer-compare-{system}-"))
    cluster = servers.start(system, root, flush="ASYNC_FLUSH", lib=lib,
                            extra={"timerPrecisionMs": str(s.precision), "timerWheelEnable": "true"})
    try:
        return drive(system, cluster, root, lib, classes, s)
    finally:
        cluster.stop(discard=True)
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
            r = one(system, lib, classes, TimerSettings(precision, n, window, tput, 16, 128))
            line = (f"| {precision} ms | {system} | {r['p50']:.0f} / {r['p99']:.0f} / {r['max']:.0f} | {r['early']} | "
                    f"{r['received']:,} / {r['n']:,} | {r['plain_msgs_s']:,.0f} | {r['timer_msgs_s']:,.0f} | "
                    f"{r['timer_msgs_s'] / r['plain_msgs_s']:.0%} |")
            rows.append(line)
            print(line, flush=True)
    print("\n" + "\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
