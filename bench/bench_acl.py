"""Security benchmark: produce throughput plain, with ACL and with TLS, side by side in one run.

Four local clusters (``rocket.local.LocalCluster``, loopback, ASYNC_FLUSH, 1 NameServer and 1
master each): plain (ACL and TLS off); ACL on (``aclEnable``) with RocketMQ's default
stateless authentication (every signature verified); ACL on with
``authenticationStrategy=stateful`` (verified once per connection and user); TLS enforced
(``tlsMode=enforcing``, the ``rocket local up --secure`` certificates: ECDSA P-256, TLS 1.3 as
OpenSSL negotiates it; the clients verify the server against the cluster's CA). On the ACL ones a
Normal user with ``Pub`` on the bench topic sends, so every request is signed by the client,
verified (HmacSHA1) and authorized by the broker. Same load generator as ``bench_broker`` (1 KiB
messages, ``LOAD_PROCS`` processes); single-send rounds alternate between the clusters
(3 rounds of 6 s, the median round counts), then one batched round each.

Targets (issue #14): ACL on >= 90 % of plain, TLS >= 70 % of plain (single sends, medians).

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
    """One measured load."""

    rate: float
    lat: list[float]
    errors: int
    broker_us: float
    #: CPU of the load processes per message (signing, TLS, the client itself), us.
    client_us: float = 0.0


def _measure(s: Setup, pool: concurrent.futures.ProcessPoolExecutor, concurrency: int, batch: int,
             duration: float, warmup: float) -> Round:
    cpu0 = _proc_cpu(s.broker_pid)
    futures = [pool.submit(_worker, s.env, s.namesrv, "bench-acl", concurrency, batch, duration, warmup, 0.0, False)
               for _ in range(LOAD_PROCS)]
    results = [f.result() for f in futures]
    cpu1 = _proc_cpu(s.broker_pid)
    rate, lat, errors = _merge(results)
    sent = sum(r.messages for r in results) * (duration + warmup) / duration or 1
    return Round(rate, lat, errors, (cpu1 - cpu0) / sent * 1e6,
                 sum(r.cpu_seconds for r in results) / sent * 1e6)


def run(short: bool) -> None:
    """Both clusters up; alternating single-send rounds, then one batched round each; prints the
    medians and the ACL on / off ratio."""
    ctx = multiprocessing.get_context("spawn")
    rounds, duration, warmup = (1, 2.0, 0.5) if short else (3, 6.0, 1.0)
    per_proc = max(1, IN_FLIGHT // LOAD_PROCS)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"1 NameServer + 1 master per setup on loopback (ASYNC_FLUSH), {BODY_SIZE}-byte messages, {QUEUES} "
          f"queues, {per_proc * LOAD_PROCS} sends in flight from {LOAD_PROCS} load process(es), {rounds} "
          f"alternating round(s) of {duration:.0f} s, {os.cpu_count()} CPUs, load average {load:.1f}", flush=True)
    setups: list[Setup] = []
    names = ("plain", "ACL on, stateless", "ACL on, stateful", "TLS")
    single: dict[str, list[Round]] = {name: [] for name in names}
    batched: dict[str, Round] = {}
    try:
        setups = [_start(False), _start(True, "stateless"), _start(True, "stateful"), _start(False, tls=True)]
        with concurrent.futures.ProcessPoolExecutor(max_workers=LOAD_PROCS, mp_context=ctx) as pool:
            for i in range(rounds):
                for s in setups:
                    r = _measure(s, pool, per_proc, 1, duration, warmup)
                    single[s.name].append(r)
                    print(f"[{s.name}] round {i + 1} single sends: {r.rate:,.0f} msgs/s, p50/p99/p99.9 "
                          f"{_pcts(r.lat)} ms, errors {r.errors}, CPU per message: broker {r.broker_us:.0f} us, "
                          f"client {r.client_us:.0f} us", flush=True)
            for s in setups:
                batched[s.name] = r = _measure(s, pool, BATCH_CONCURRENCY_PER_PROC, BATCH_SIZE, duration, warmup)
                print(f"[{s.name}] batched sends ({BATCH_SIZE}/batch): {r.rate:,.0f} msgs/s, errors {r.errors}, "
                      f"broker CPU {r.broker_us:.0f} us/msg", flush=True)
    finally:
        for s in setups:
            s.cluster.stop()
            shutil.rmtree(s.folder, ignore_errors=True)

    def med(name: str) -> Round:
        return sorted(single[name], key=lambda r: r.rate)[len(single[name]) // 2]

    meds = [med(name) for name in names]
    print("\nsummary (single sends: the median round; ratios against plain):")
    print(f"{'':30}" + "".join(f"{name:>22}" for name in names))
    for label, values, fmt, ratio in (
        ("single sends, msgs/s", [m.rate for m in meds], ",.0f", True),
        ("single send p50, ms", [percentile(m.lat, 50) for m in meds], ".2f", False),
        ("single send p99, ms", [percentile(m.lat, 99) for m in meds], ".2f", False),
        ("broker CPU per message, us", [m.broker_us for m in meds], ".0f", False),
        ("client CPU per message, us", [m.client_us for m in meds], ".0f", False),
        ("batched sends, msgs/s", [batched[name].rate for name in names], ",.0f", True),
    ):
        cells = [format(v, fmt) + (f" ({v / values[0]:.0%})" if ratio and i and values[0] else "")
                 for i, v in enumerate(values)]
        print(f"{label:30}" + "".join(f"{c:>22}" for c in cells))
    errors = sum(r.errors for rs in single.values() for r in rs) + sum(r.errors for r in batched.values())
    # On a loaded machine the throughput of a round depends on what else runs; the CPU a message
    # costs (broker + load generator, medians over the rounds) does much less, and bounds the
    # throughput of a machine these processes have to themselves.
    def cpu(name: str) -> float:
        per_round = sorted(r.broker_us + r.client_us for r in single[name])
        return per_round[len(per_round) // 2]

    for name, m in zip(names[1:], meds[1:], strict=True):
        ratio = m.rate / meds[0].rate if meds[0].rate else 0.0
        cpu_ratio = cpu(names[0]) / cpu(name) if cpu(name) else 0.0
        target = TARGETS[name]
        verdict = "met" if ratio >= target and errors == 0 else "NOT met"
        print(f"target {name} >= {target:.0%} of plain (single sends, medians), no errors: "
              f"{ratio:.0%}, {errors} errors — {verdict}; by CPU per message (broker + client, "
              f"{cpu(names[0]):.0f} vs {cpu(name):.0f} us): {cpu_ratio:.0%}")
