"""Replication benchmark: produce throughput with ASYNC_MASTER and with SYNC_MASTER, side by side,
and replication lag under load.

For each role (ASYNC_MASTER first, then SYNC_MASTER) it starts one NameServer
and one broker group of a master and a slave (``rocket.local.LocalCluster``,
loopback, ASYNC_FLUSH), creates a topic with 8 queues and runs the same load
generator as ``bench_broker`` (1 KiB messages, ``IN_FLIGHT`` = 256 sends in
flight over ``LOAD_PROCS`` processes — a closed loop needs enough of them to
cover the replication round trip — then batches of 32):

* msgs/s and client-side send latency p50/p99/p99.9;
* replication lag while the load runs, sampled from the master's
  ``/api/v1/ha`` every 100 ms: bytes and seconds behind, p50/p99/max;
* how long the slave needs after the load to reach the master's end.

With ASYNC_MASTER the slave replicates too (same work for the master), the
sends just do not wait for it. Target (issue #5): SYNC_MASTER single sends
≥ 80 % of ASYNC_MASTER's.

Run: ``make bench BENCH=replication`` or ``python -m bench replication [--short]``.
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.bench_broker import (
    BATCH_CONCURRENCY_PER_PROC,
    BATCH_SIZE,
    BODY_SIZE,
    LOAD_PROCS,
    QUEUES,
    _merge,
    _pcts,
    _proc_cpu,
    _send_worker,
)
from rocket.local import LocalCluster, find_free_base_port, percentile

TARGET_RATIO = 0.80
#: Sends in flight (all load processes): enough to keep the master busy while replication
#: round trips are under way (``ROCKET_BENCH_IN_FLIGHT`` overrides).
IN_FLIGHT = int(os.environ.get("ROCKET_BENCH_IN_FLIGHT", "256"))


def _ha(http_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/api/v1/ha", timeout=2.0) as resp:
        return dict(json.loads(resp.read()))


class LagSampler:
    """Samples the master's view of its slave (lag bytes and seconds) in a thread."""

    def __init__(self, http_port: int, interval: float = 0.1) -> None:
        self.http_port = http_port
        self.interval = interval
        self.lag_bytes: list[float] = []
        self.lag_seconds: list[float] = []
        self.missing = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LagSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                slaves = _ha(self.http_port)["slaves"]
            except (OSError, ValueError, KeyError):
                continue
            if not slaves:
                self.missing += 1
                continue
            self.lag_bytes.append(float(slaves[0]["lagBytes"]))
            self.lag_seconds.append(float(slaves[0]["lagSeconds"]))

    def line(self) -> str:
        b, s = sorted(self.lag_bytes), sorted(self.lag_seconds)
        if not b:
            return "no samples"
        note = f", {self.missing} without a slave" if self.missing else ""
        return (f"lag bytes p50/p99/max {percentile(b, 50):,.0f} / {percentile(b, 99):,.0f} / {b[-1]:,.0f}; "
                f"lag seconds p50/p99/max {percentile(s, 50) * 1000:.1f} / {percentile(s, 99) * 1000:.1f} / "
                f"{s[-1] * 1000:.1f} ms ({len(b)} samples{note})")


def _catch_up(master_http: int, timeout: float = 30.0) -> float:
    """Seconds until the slave acknowledged the master's end."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        st = _ha(master_http)
        if st["slaves"] and st["slaves"][0]["ackOffset"] >= st["maxOffset"]:
            return time.perf_counter() - t0
        time.sleep(0.01)
    return float("inf")


def _run_role(role: str, short: bool, pool: concurrent.futures.ProcessPoolExecutor) -> dict[str, Any]:
    from rocket.client import Admin
    from rocket.runtime import run

    duration, warmup = (2.0, 0.5) if short else (10.0, 2.0)
    folder = Path(tempfile.mkdtemp(prefix=f"rocket-bench-{role.lower()}-"))
    cluster = LocalCluster(folder, find_free_base_port(), nameservers=1, brokers=1, slaves=True,
                           extra_broker_args=["--set", f"brokerRole={role}"])
    state = cluster.start(detach=False, timeout=60)
    ns = state.namesrv
    master = next(p for p in state.processes if p.kind == "broker" and "SLAVE" not in p.argv)
    slave = next(p for p in state.processes if p.kind == "broker" and "SLAVE" in p.argv)
    topic = f"bench-{role.lower()}"
    figures: dict[str, Any] = {"role": role}
    try:
        async def create() -> None:
            async with Admin(ns) as admin:
                await admin.create_topic(topic, queue_nums=QUEUES)

        run(create())
        deadline = time.monotonic() + 20
        while not _ha(master.http_port)["slaves"] and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        per_proc = max(1, IN_FLIGHT // LOAD_PROCS)
        cpu0 = (_proc_cpu(master.pid), _proc_cpu(slave.pid), time.perf_counter())
        with LagSampler(master.http_port) as lag:
            futures = [pool.submit(_send_worker, ns, topic, per_proc, 1, duration, warmup, 0.0, False)
                       for _ in range(LOAD_PROCS)]
            results = [f.result() for f in futures]
            rate, lat, errors = _merge(results)
        cpu1 = (_proc_cpu(master.pid), _proc_cpu(slave.pid), time.perf_counter())
        catch = _catch_up(master.http_port)
        figures["single"] = (rate, lat, errors, lag, catch)
        sent = sum(r.messages for r in results) * (duration + warmup) / duration or 1
        wall = cpu1[2] - cpu0[2]
        print(f"[{role}] single sends ({per_proc * LOAD_PROCS} in flight): {rate:,.0f} msgs/s, latency "
              f"p50/p99/p99.9 {_pcts(lat)} ms, errors {errors}", flush=True)
        print(f"    CPU per message: master {(cpu1[0] - cpu0[0]) / sent * 1e6:.0f} us, slave "
              f"{(cpu1[1] - cpu0[1]) / sent * 1e6:.0f} us; cores used: master {(cpu1[0] - cpu0[0]) / wall:.2f}, "
              f"slave {(cpu1[1] - cpu0[1]) / wall:.2f}", flush=True)
        print(f"    replication under load: {lag.line()}; slave at the master's end {catch * 1000:.0f} ms "
              "after the load", flush=True)
        with LagSampler(master.http_port) as lag_b:
            futures = [pool.submit(_send_worker, ns, topic, BATCH_CONCURRENCY_PER_PROC, BATCH_SIZE, duration, warmup,
                                   0.0, False) for _ in range(LOAD_PROCS)]
            rate_b, lat_b, errors_b = _merge([f.result() for f in futures])
        catch_b = _catch_up(master.http_port)
        figures["batch"] = (rate_b, lat_b, errors_b, lag_b, catch_b)
        print(f"[{role}] batched sends ({BATCH_SIZE}/batch): {rate_b:,.0f} msgs/s, batch latency p50/p99/p99.9 "
              f"{_pcts(lat_b)} ms, errors {errors_b}", flush=True)
        print(f"    replication under load: {lag_b.line()}; slave at the master's end {catch_b * 1000:.0f} ms "
              "after the load", flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return figures


def run(short: bool) -> None:
    """ASYNC_MASTER then SYNC_MASTER with the same load; prints the figures and the SYNC/ASYNC ratio."""
    ctx = multiprocessing.get_context("spawn")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"1 NameServer + master + slave on loopback (ASYNC_FLUSH), {BODY_SIZE}-byte messages, {QUEUES} queues, "
          f"{LOAD_PROCS} load process(es), {os.cpu_count()} CPUs, load average {load:.1f} at start", flush=True)
    with concurrent.futures.ProcessPoolExecutor(max_workers=LOAD_PROCS, mp_context=ctx) as pool:
        a = _run_role("ASYNC_MASTER", short, pool)
        s = _run_role("SYNC_MASTER", short, pool)
    print("\nsummary:")
    print(f"{'':36}{'ASYNC_MASTER':>16}{'SYNC_MASTER':>16}{'SYNC/ASYNC':>12}")

    def row(label: str, va: float, vs: float, fmt: str, ratio: bool = True) -> None:
        r = f"{vs / va:.0%}" if ratio and va else ""
        print(f"{label:36}{format(va, fmt):>16}{format(vs, fmt):>16}{r:>12}")

    row("single sends, msgs/s", a["single"][0], s["single"][0], ",.0f")
    row("single send p50, ms", percentile(a["single"][1], 50), percentile(s["single"][1], 50), ".2f", False)
    row("single send p99, ms", percentile(a["single"][1], 99), percentile(s["single"][1], 99), ".2f", False)
    row("batched sends, msgs/s", a["batch"][0], s["batch"][0], ",.0f")
    for key, label in (("single", "single"), ("batch", "batched")):
        la, ls = a[key][3], s[key][3]
        row(f"lag p99 under {label} load, KiB", percentile(sorted(la.lag_bytes), 99) / 1024 if la.lag_bytes else 0,
            percentile(sorted(ls.lag_bytes), 99) / 1024 if ls.lag_bytes else 0, ",.1f", False)
        row(f"lag p99 under {label} load, ms", percentile(sorted(la.lag_seconds), 99) * 1000 if la.lag_seconds else 0,
            percentile(sorted(ls.lag_seconds), 99) * 1000 if ls.lag_seconds else 0, ".1f", False)
    ratio = s["single"][0] / a["single"][0] if a["single"][0] else 0.0
    verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
    print(f"\ntarget SYNC_MASTER >= {TARGET_RATIO:.0%} of ASYNC_MASTER (single sends): {ratio:.0%} — {verdict}")
