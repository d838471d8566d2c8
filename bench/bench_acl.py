"""Security benchmark: produce throughput plain, with ACL and with TLS, side by side in one run.

Four local clusters (``rocket.local.LocalCluster``, loopback, ASYNC_FLUSH, 1 NameServer and 1
master each): plain (ACL and TLS off); ACL on (``aclEnable``) with RocketMQ's default
stateless authentication (every signature verified); ACL on with
``authenticationStrategy=stateful`` (verified once per connection and user); TLS enforced
(``tlsMode=enforcing``, the ``rocket local up --secure`` certificates: ECDSA P-256, TLS 1.3 as
OpenSSL negotiates it; the clients verify the server against the cluster's CA). On the ACL ones a
Normal user with ``Pub`` on the bench topic sends, so every request is signed by the client, verified
(HmacSHA1) and authorized by the broker. Same load generator as ``bench_broker`` (1 KiB
messages, ``LOAD_PROCS`` processes). After a warm-up of each, ``ROCKET_BENCH_ROUNDS`` (5) rounds of
5 s single sends: each round measures the four clusters one after another, the order rotating
from round to round; then one batched round each. Every round prints its rate, latencies, broker
and client CPU per message (the client signs every request, so its cost counts too) and the load
average.

Targets (issue #14): ACL on >= 90 % and TLS >= 70 % of plain (single sends), judged on the median of the
per-round ratios (each secured round against the plain round of the same round, so a load that
drifts over the run cancels); reported for both strategies, with a CPU-bound estimate beside it
(plain's broker + client CPU per message over ACL on's, medians), which other tenants of a
shared machine move less than the rates.

Run: ``make bench BENCH=acl`` or ``python -m bench acl [--short]``.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.bench_broker import (
    BATCH_CONCURRENCY_PER_PROC,
    BATCH_SIZE,
    BODY_SIZE,
    LOAD_PROCS,
    QUEUES,
    LoadResult,
    _merge,
    _pcts,
    _proc_cpu,
    _send_worker,
)
from rocket.local import LocalCluster, LocalClusterError, find_free_base_port, percentile

#: Setup name -> the share of plain throughput it should reach (issue #14).
TARGETS = {"ACL on, stateless": 0.90, "ACL on, stateful": 0.90, "TLS": 0.70}
IN_FLIGHT = int(os.environ.get("ROCKET_BENCH_IN_FLIGHT", "128"))
#: Single-send rounds (every setup once per round); the machine is shared, so several.
ROUNDS = int(os.environ.get("ROCKET_BENCH_ROUNDS", "5"))
USER, PASSWORD = "bench-app", "bench-app-secret"


@dataclass
class Setup:
    """One running cluster."""

    name: str
    cluster: LocalCluster
    folder: Path
    namesrv: str
    broker_pid: int
    env: dict[str, str]


def _start(secure: bool, strategy: str = "stateless", *, tls: bool = False) -> Setup:
    from rocket.auth import SessionCredentials
    from rocket.auth.signature import parse_credentials_file
    from rocket.client import Admin
    from rocket.remoting.tls import ClientTls
    from rocket.runtime import run

    name = "TLS" if tls else f"ACL on, {strategy}" if secure else "plain"
    folder = Path(tempfile.mkdtemp(prefix=f"rocket-bench-{'tls' if tls else strategy if secure else 'plain'}-"))
    for attempt in range(3):  # another process may take a port of the block between the check and the bind
        cluster = LocalCluster(folder, find_free_base_port(), nameservers=1, brokers=1, slaves=False, acl=secure,
                               tls=tls, extra_broker_args=["--set", f"authenticationStrategy={strategy}"] if secure
                               else [])
        try:
            state = cluster.start(detach=False, timeout=90)
            break
        except LocalClusterError:
            if attempt == 2:
                raise
    else:  # pragma: no cover - the loop breaks or raises
        raise AssertionError("unreachable")
    broker = next(p for p in state.processes if p.kind == "broker")
    admin_creds = parse_credentials_file(state.credentials_file) if secure else None
    client_tls = ClientTls.trusting(state.tls_ca_file) if tls else False

    async def setup() -> None:
        async with Admin(state.namesrv, credentials=admin_creds, tls=client_tls) as admin:
            await admin.create_topic("bench-acl", queue_nums=QUEUES)
            if secure:
                await admin.put_user(USER, PASSWORD)
                await admin.put_acl(USER, ["Topic:bench-acl", "Group:bench-*"], ["Pub"])

    run(setup())
    env = {"ROCKET_ACCESS_KEY": USER, "ROCKET_SECRET_KEY": PASSWORD} if secure else {}
    if tls:
        env["ROCKET_TLS_CA"] = state.tls_ca_file
    if secure:  # wait until the NameServer copied the user (routes are authorized there too)
        import time

        async def probe() -> bool:
            async with Admin(state.namesrv, credentials=SessionCredentials(USER, PASSWORD), timeout=2) as admin:
                await admin.client.fetch_route("bench-acl", cache=False)
                return True
        deadline = time.monotonic() + 30
        while True:
            try:
                run(probe())
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
    return Setup(name, cluster, folder, state.namesrv, broker.pid, env)


def _worker(env: dict[str, str], *args: object) -> LoadResult:
    """A load process: ``env`` (the credentials, the CA) first, then ``bench_broker``'s send loop."""
    for name in ("ROCKET_ACCESS_KEY", "ROCKET_SECRET_KEY", "ROCKET_TLS", "ROCKET_TLS_CA"):
        os.environ.pop(name, None)
    os.environ.update(env)
    return _send_worker(*args)  # type: ignore[arg-type]


@dataclass
class Round:
    """One measured load: acknowledged msgs/s, latencies (ms), errors, broker and client CPU per
    message (us), the 1-minute load average when it ended."""

    rate: float
    lat: list[float]
    errors: int
    broker_us: float
    client_us: float
    load: float


def _loadavg() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def _measure(s: Setup, pool: concurrent.futures.ProcessPoolExecutor, concurrency: int, batch: int,
             duration: float, warmup: float, rate: float = 0.0) -> Round:
    """One load on ``s``: as fast as it goes, or paced at ``rate`` msgs/s in all (0: unpaced)."""
    cpu0 = _proc_cpu(s.broker_pid)
    futures = [pool.submit(_worker, s.env, s.namesrv, "bench-acl", concurrency, batch, duration, warmup,
                           rate / LOAD_PROCS, False)
               for _ in range(LOAD_PROCS)]
    results = [f.result() for f in futures]
    cpu1 = _proc_cpu(s.broker_pid)
    rate, lat, errors = _merge(results)
    sent = sum(r.messages for r in results) * (duration + warmup) / duration or 1
    client = sum(r.cpu_seconds for r in results)
    return Round(rate, lat, errors, (cpu1 - cpu0) / sent * 1e6, client / sent * 1e6, _loadavg())


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def run(short: bool) -> None:
    """All three clusters up; ``ROUNDS`` single-send rounds (each round runs every setup once, the
    order rotating from round to round so none always goes first), then one batched round each.
    Prints every round (rate, latency, broker and client CPU per message, load average), the
    medians, and for each ACL setup the median of its per-round ratios to plain (paired rounds
    cancel most of the machine's drifting load) against the target."""
    ctx = multiprocessing.get_context("spawn")
    rounds = 1 if short else ROUNDS
    duration, warmup = (2.0, 0.5) if short else (5.0, 1.0)
    per_proc = max(1, IN_FLIGHT // LOAD_PROCS)
    print(f"1 NameServer + 1 master per setup on loopback (ASYNC_FLUSH), {BODY_SIZE}-byte messages, {QUEUES} "
          f"queues, {per_proc * LOAD_PROCS} sends in flight from {LOAD_PROCS} load process(es), {rounds} "
          f"rotating round(s) of {duration:.0f} s (+{warmup:.0f} s warm-up), {os.cpu_count()} CPUs, "
          f"load average {_loadavg():.1f}", flush=True)
    setups: list[Setup] = []
    names = ("plain", "ACL on, stateless", "ACL on, stateful", "TLS")
    single: dict[str, list[Round]] = {name: [] for name in names}
    batched: dict[str, Round] = {}
    try:
        setups = [_start(False), _start(True, "stateless"), _start(True, "stateful"), _start(False, tls=True)]
        with concurrent.futures.ProcessPoolExecutor(max_workers=LOAD_PROCS, mp_context=ctx) as pool:
            for s in setups:  # warm each broker (and the load processes) before anything counts
                _measure(s, pool, per_proc, 1, 1.0, 0.5)
            for i in range(rounds):
                for s in setups[i % 3:] + setups[:i % 3]:
                    r = _measure(s, pool, per_proc, 1, duration, warmup)
                    single[s.name].append(r)
                    print(f"round {i + 1} [{s.name}] single sends: {r.rate:,.0f} msgs/s, p50/p99/p99.9 "
                          f"{_pcts(r.lat)} ms, errors {r.errors}, CPU per message broker {r.broker_us:.1f} us, "
                          f"client {r.client_us:.1f} us, load average {r.load:.1f}", flush=True)
            for s in setups:
                batched[s.name] = r = _measure(s, pool, BATCH_CONCURRENCY_PER_PROC, BATCH_SIZE, duration, warmup)
                print(f"[{s.name}] batched sends ({BATCH_SIZE}/batch): {r.rate:,.0f} msgs/s, errors {r.errors}, "
                      f"CPU per message broker {r.broker_us:.1f} us, client {r.client_us:.1f} us", flush=True)
    finally:
        for s in setups:
            s.cluster.stop()
            shutil.rmtree(s.folder, ignore_errors=True)

    def med(name: str, attr: str) -> float:
        return _median([getattr(r, attr) for r in single[name]])

    print(f"\nsummary (single sends: medians of {rounds} round(s); ratios against plain):")
    print(f"{'':32}" + "".join(f"{name:>22}" for name in names))
    for label, values, fmt, ratio in (
        ("single sends, msgs/s", [med(n, "rate") for n in names], ",.0f", True),
        ("single send p50, ms", [_median([percentile(r.lat, 50) for r in single[n]]) for n in names], ".2f", False),
        ("single send p99, ms", [_median([percentile(r.lat, 99) for r in single[n]]) for n in names], ".2f", False),
        ("broker CPU per message, us", [med(n, "broker_us") for n in names], ".1f", False),
        ("client CPU per message, us", [med(n, "client_us") for n in names], ".1f", False),
        ("batched sends, msgs/s", [batched[name].rate for name in names], ",.0f", True),
    ):
        cells = [format(v, fmt) + (f" ({v / values[0]:.0%})" if ratio and i and values[0] else "")
                 for i, v in enumerate(values)]
        print(f"{label:32}" + "".join(f"{c:>22}" for c in cells))
    errors = sum(r.errors for rs in single.values() for r in rs) + sum(r.errors for r in batched.values())
    cpu = [med(n, "broker_us") + med(n, "client_us") for n in names]
    for name, c in zip(names[1:], cpu[1:], strict=True):
        print(f"CPU-bound estimate {name}: plain's broker + client CPU per message / this one's (medians) = "
              f"{cpu[0] / c if c else 0.0:.0%} of plain's throughput where the CPU is the limit")
    off = single[names[0]]
    for name in names[1:]:
        ratios = [on.rate / base.rate for on, base in zip(single[name], off, strict=True) if base.rate]
        ratio = _median(ratios) if ratios else 0.0
        target = TARGETS[name]
        verdict = "met" if ratio >= target and errors == 0 else "NOT met"
        print(f"target {name} >= {target:.0%} of plain (single sends, median of the per-round ratios "
              f"{', '.join(f'{x:.0%}' for x in ratios)}), no errors: {ratio:.0%}, {errors} errors — {verdict}")
