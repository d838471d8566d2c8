"""Replication benchmark: produce throughput with ASYNC_MASTER and with SYNC_MASTER, side by side,
and replication lag under load.

For each role (ASYNC_MASTER and SYNC_MASTER) it starts one NameServer and one
broker group of a master and a slave (``rocket.local.LocalCluster``, loopback,
ASYNC_FLUSH); both stay up side by side. With the same load generator as
``bench_broker`` (1 KiB messages, ``IN_FLIGHT`` = 256 sends in flight over
``LOAD_PROCS`` processes: a closed loop needs enough of them to cover the
replication round trip) it measures single sends in rounds that alternate
between the two roles (3 rounds of 6 s; the median round counts, so that load
drift on a shared machine hits both alike), then batches of 32 once each:

* msgs/s and client-side send latency p50/p99/p99.9;
* master and slave CPU per message;
* replication lag while the load runs, sampled from the master's
  ``/api/v1/ha`` every 100 ms: bytes and seconds behind, p50/p99/max;
* how long the slave needs after the load to reach the master's end.

With ASYNC_MASTER the slave replicates too (same work for the master), the
sends just do not wait for it. Target (issue #5): SYNC_MASTER single sends
>= 80 % of ASYNC_MASTER's.

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
from dataclasses import dataclass
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
from rocket.local import LocalCluster, find_free_base_port
from rocket.percentiles import percentile

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


@dataclass
class Group:
    """One running cluster (NameServer, master, slave) of a role."""

    role: str
    cluster: LocalCluster
    folder: Path
    namesrv: str
    master: Any
    slave: Any
    topic: str


def _start_group(role: str) -> Group:
    from rocket.client import Admin
    from rocket.runtime import run

    folder = Path(tempfile.mkdtemp(prefix=f"rocket-bench-{role.lower()}-"))
    cluster = LocalCluster(folder, find_free_base_port(), nameservers=1, brokers=1, slaves=True, failover="manual",
                           extra_broker_args=["--set", f"brokerRole={role}", "--set", "maxIndexNum=2000000"])
    state = cluster.start(detach=False, timeout=90)
    master = next(p for p in state.processes if p.kind == "broker" and "SLAVE" not in p.argv)
    slave = next(p for p in state.processes if p.kind == "broker" and "SLAVE" in p.argv)
    group = Group(role, cluster, folder, state.namesrv, master, slave, f"bench-{role.lower()}")

    async def create() -> None:
        async with Admin(group.namesrv) as admin:
            await admin.create_topic(group.topic, queue_nums=QUEUES)

    run(create())
    deadline = time.monotonic() + 30
    while not _ha(master.http_port)["slaves"] and time.monotonic() < deadline:
        time.sleep(0.1)
    return group


@dataclass
class Round:
    """One measured load on one group."""

    rate: float
    lat: list[float]
    errors: int
    lag: LagSampler
    catch_up: float
    master_us: float
    slave_us: float
    master_cores: float


def _measure(g: Group, pool: concurrent.futures.ProcessPoolExecutor, concurrency: int, batch: int,
             duration: float, warmup: float) -> Round:
    cpu0 = (_proc_cpu(g.master.pid), _proc_cpu(g.slave.pid), time.perf_counter())
    with LagSampler(g.master.http_port) as lag:
        futures = [pool.submit(_send_worker, g.namesrv, g.topic, concurrency, batch, duration, warmup, 0.0, False)
                   for _ in range(LOAD_PROCS)]
        results = [f.result() for f in futures]
    cpu1 = (_proc_cpu(g.master.pid), _proc_cpu(g.slave.pid), time.perf_counter())
    rate, lat, errors = _merge(results)
    sent = sum(r.messages for r in results) * (duration + warmup) / duration or 1
    return Round(rate, lat, errors, lag, _catch_up(g.master.http_port), (cpu1[0] - cpu0[0]) / sent * 1e6,
                 (cpu1[1] - cpu0[1]) / sent * 1e6, (cpu1[0] - cpu0[0]) / (cpu1[2] - cpu0[2]))


def _print_round(label: str, r: Round) -> None:
    print(f"{label}: {r.rate:,.0f} msgs/s, latency p50/p99/p99.9 {_pcts(r.lat)} ms, errors {r.errors}; CPU per "
          f"message master {r.master_us:.0f} us, slave {r.slave_us:.0f} us (master used {r.master_cores:.2f} "
          f"cores)\n    replication: {r.lag.line()}; slave at the master's end {r.catch_up * 1000:.0f} ms "
          "after the load", flush=True)


def run(short: bool) -> None:
    """Both roles up side by side; single-send rounds alternate between them (so load drift on a
    shared machine hits both alike), then one batched round each. Prints the medians and the
    SYNC/ASYNC ratio."""
    ctx = multiprocessing.get_context("spawn")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rounds, duration, warmup = (1, 2.0, 0.5) if short else (3, 6.0, 1.0)
    per_proc = max(1, IN_FLIGHT // LOAD_PROCS)
    print(f"1 NameServer + master + slave per role on loopback (ASYNC_FLUSH), {BODY_SIZE}-byte messages, "
          f"{QUEUES} queues, {per_proc * LOAD_PROCS} sends in flight from {LOAD_PROCS} load process(es), "
          f"{rounds} alternating round(s) of {duration:.0f} s, {os.cpu_count()} CPUs, load average {load:.1f} "
          "at start", flush=True)
    groups: list[Group] = []
    single: dict[str, list[Round]] = {"ASYNC_MASTER": [], "SYNC_MASTER": []}
    batched: dict[str, Round] = {}
    try:
        for role in single:
            groups.append(_start_group(role))
        with concurrent.futures.ProcessPoolExecutor(max_workers=LOAD_PROCS, mp_context=ctx) as pool:
            for i in range(rounds):
                for g in groups:
                    r = _measure(g, pool, per_proc, 1, duration, warmup)
                    single[g.role].append(r)
                    _print_round(f"[{g.role}] round {i + 1} single sends", r)
            for g in groups:
                batched[g.role] = _measure(g, pool, BATCH_CONCURRENCY_PER_PROC, BATCH_SIZE, duration, warmup)
                _print_round(f"[{g.role}] batched sends ({BATCH_SIZE}/batch)", batched[g.role])
    finally:
        for g in groups:
            g.cluster.stop()
            _print_ha_warnings(g)
            shutil.rmtree(g.folder, ignore_errors=True)

    def med(role: str) -> Round:
        return sorted(single[role], key=lambda r: r.rate)[len(single[role]) // 2]

    a, s = med("ASYNC_MASTER"), med("SYNC_MASTER")
    ba, bs = batched["ASYNC_MASTER"], batched["SYNC_MASTER"]
    print("\nsummary (single sends: the median round):")
    print(f"{'':38}{'ASYNC_MASTER':>16}{'SYNC_MASTER':>16}{'SYNC/ASYNC':>12}")

    def row(label: str, va: float, vs: float, fmt: str, ratio: bool = True) -> None:
        r = f"{vs / va:.0%}" if ratio and va else ""
        print(f"{label:38}{format(va, fmt):>16}{format(vs, fmt):>16}{r:>12}")

    row("single sends, msgs/s", a.rate, s.rate, ",.0f")
    row("single send p50, ms", percentile(a.lat, 50), percentile(s.lat, 50), ".2f", False)
    row("single send p99, ms", percentile(a.lat, 99), percentile(s.lat, 99), ".2f", False)
    row("master CPU per message, us", a.master_us, s.master_us, ".0f", False)
    row("batched sends, msgs/s", ba.rate, bs.rate, ",.0f")
    for label, ra, rs in (("single", a, s), ("batched", ba, bs)):
        row(f"lag p99 under {label} load, KiB", _p99(ra.lag.lag_bytes) / 1024, _p99(rs.lag.lag_bytes) / 1024,
            ",.1f", False)
        row(f"lag p99 under {label} load, ms", _p99(ra.lag.lag_seconds) * 1000, _p99(rs.lag.lag_seconds) * 1000,
            ".1f", False)
    ratio = s.rate / a.rate if a.rate else 0.0
    verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
    print(f"\ntarget SYNC_MASTER >= {TARGET_RATIO:.0%} of ASYNC_MASTER (single sends, medians): "
          f"{ratio:.0%} — {verdict}")


#: Loggers of replication (``rocket.store.ha``) and of the broker's role changes and metadata copy.
_HA_LOGGERS = ("rocket.store.ha", "rocket.broker.replicas", "rocket.broker.slave_sync")


def _print_ha_warnings(g: Group) -> None:
    """Replication warnings the brokers logged during the run (a dropped connection explains a lag spike)."""
    lines: list[str] = []
    for log in sorted((g.folder / "logs").glob("broker-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if any(name in line for name in _HA_LOGGERS) and ("WARNING" in line or "ERROR" in line):
                lines.append(f"{log.stem}: {line}")
    for line in lines[:5]:
        print(f"    [{g.role}] {line}")


def _p99(values: list[float]) -> float:
    return percentile(sorted(values), 99) if values else 0.0
