"""Broker produce/consume benchmark through the real client.

Starts one NameServer and one broker process (``rocket.local.LocalCluster``,
loopback) for each flush mode (ASYNC_FLUSH, then SYNC_FLUSH), creates a topic
with 8 queues and measures, with 1 KiB messages and ``LOAD_PROCS`` load
processes (multiprocessing, one uvloop each):

1. **single sends**: 64 concurrent producer coroutines (split over the load
   processes) sending one message at a time, back to back: msgs/s and
   client-side send latency p50/p99/p99.9;
2. **batched sends**: SEND_BATCH_MESSAGE with 32 messages each (16 coroutines
   per process): msgs/s and per-batch latency;
3. **consume**: pull consumers (one per load process, queues split between
   them) reading everything stored so far from offset 0: msgs/s;
4. **send latency at half the maximum rate**: an open-loop paced sender at
   50 % of the single-send rate from (1): p50/p99/p99.9;
5. **end-to-end**: a push consumer (long polling) in one process, a paced
   producer (1,000 msgs/s) in another; latency = receive time - send time
   (nanosecond clock in the body, same host).

Targets (issue #4): >= 50,000 msgs/s single sends and >= 200,000 msgs/s batched
with ASYNC_FLUSH; p99 send latency <= 5 ms at half the maximum rate; end-to-end
p99 <= 10 ms.

Run: ``make bench BENCH=broker`` or ``python -m bench broker [--short]``.
``ROCKET_BENCH_PROFILE=1`` also prints a cProfile of one load process during
single sends (where the client spends its time).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import cProfile
import io
import multiprocessing
import os
import pstats
import shutil
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.calibrate import page_cache_write_cost
from rocket.local import LocalCluster, find_free_base_port
from rocket.percentiles import percentile

BODY_SIZE = 1024
QUEUES = 8
#: Load processes: 2, or 1 on a machine with 2 CPUs or fewer (the broker needs one to itself).
LOAD_PROCS = 2 if (os.cpu_count() or 1) > 2 else 1
SINGLE_CONCURRENCY = 64
BATCH_SIZE = 32
BATCH_CONCURRENCY_PER_PROC = 16
E2E_RATE = 1000
TARGETS = {"single": 50_000, "batch": 200_000, "half_rate_p99_ms": 5.0, "e2e_p99_ms": 10.0}


@dataclass
class LoadResult:
    """What one load process reports: messages done, seconds, latency samples (ms)."""

    messages: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    profile: str = ""
    cpu_seconds: float = 0.0


def _body(n: int) -> bytes:
    head = struct.pack(">q", time.time_ns())
    return head + bytes((n + i) % 251 for i in range(BODY_SIZE - len(head)))


# -- load-process entry points (run in a child process each) --------------------------------


def _send_worker(namesrv: str, topic: str, concurrency: int, batch: int, duration: float, warmup: float,
                 rate: float, profile: bool) -> LoadResult:
    from rocket.runtime import run

    profiler = cProfile.Profile() if profile else None
    result = run(_send_load(namesrv, topic, concurrency, batch, duration, warmup, rate, profiler))
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
        result.profile = out.getvalue()
    return result


async def _send_load(namesrv: str, topic: str, concurrency: int, batch: int, duration: float, warmup: float,
                     rate: float, profiler: cProfile.Profile | None) -> LoadResult:
    from rocket.client import Producer, build_message

    result = LoadResult()
    template = _body(0)
    async with Producer(f"bench-{os.getpid()}", namesrv, send_timeout=10.0) as producer:
        await producer.send(build_message(topic, template))  # route + connection
        loop = asyncio.get_running_loop()
        start = loop.time()
        measure_from = start + warmup
        stop_at = measure_from + duration
        interval = concurrency / rate if rate > 0 else 0.0  # per coroutine, for paced sends

        async def one(k: int) -> None:
            next_at = loop.time() + (k * interval / concurrency if interval else 0.0)
            while True:
                now = loop.time()
                if now >= stop_at:
                    return
                if interval:
                    if now < next_at:
                        await asyncio.sleep(next_at - now)
                    next_at += interval
                msgs = [build_message(topic, template) for _ in range(batch)]
                t0 = time.perf_counter()
                try:
                    if batch == 1:
                        await producer.send(msgs[0])
                    else:
                        await producer.send_batch(msgs)
                except Exception:
                    result.errors += 1
                    continue
                t1 = time.perf_counter()
                if t0 >= measure_perf:
                    result.messages += batch
                    result.latencies.append((t1 - t0) * 1000)

        measure_perf = time.perf_counter() + warmup
        if profiler is not None:
            profiler.enable()
        cpu0 = time.process_time()
        await asyncio.gather(*(one(k) for k in range(concurrency)))
        result.cpu_seconds = time.process_time() - cpu0
        if profiler is not None:
            profiler.disable()
        result.seconds = duration
    return result


def _pull_worker(namesrv: str, topic: str, index: int, workers: int) -> LoadResult:
    from rocket.runtime import run

    return run(_pull_load(namesrv, topic, index, workers))


async def _pull_load(namesrv: str, topic: str, index: int, workers: int) -> LoadResult:
    from rocket.client import PullConsumer, PullStatus

    result = LoadResult()
    async with PullConsumer(f"bench-pull-{os.getpid()}", namesrv, timeout=10.0) as consumer:
        mqs = (await consumer.queues(topic))[index::workers]
        started = time.perf_counter()

        async def drain(mq: Any) -> None:
            offset = 0
            while True:
                pulled = await consumer.pull(mq, offset, 32)
                result.messages += len(pulled.messages)
                if pulled.status is PullStatus.NO_NEW_MSG or pulled.status is PullStatus.OFFSET_ILLEGAL:
                    return
                offset = pulled.next_begin_offset

        await asyncio.gather(*(drain(mq) for mq in mqs))
        result.seconds = time.perf_counter() - started
    return result


def _push_worker(namesrv: str, topic: str, expected: int, timeout: float, ready_path: str) -> LoadResult:
    from rocket.runtime import run

    return run(_push_load(namesrv, topic, expected, timeout, ready_path))


async def _push_load(namesrv: str, topic: str, expected: int, timeout: float, ready_path: str) -> LoadResult:
    from rocket.client import ConsumeFrom, MessageExt, PushConsumer

    result = LoadResult()
    done = asyncio.Event()

    def handle(msgs: list[MessageExt]) -> None:
        now = time.time_ns()
        for msg in msgs:
            (sent_ns,) = struct.unpack_from(">q", msg.body, 0)
            result.latencies.append((now - sent_ns) / 1e6)
        if len(result.latencies) >= expected:
            done.set()

    consumer = PushConsumer(f"bench-e2e-{os.getpid()}", namesrv, handle, consume_from=ConsumeFrom.LAST_OFFSET,
                            rebalance_interval=1.0, consume_batch_size=32)
    consumer.subscribe(topic)
    await consumer.start()
    deadline = time.monotonic() + 15
    while len(consumer.assigned_queues()) < QUEUES and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # let every queue's first long poll reach the broker
    await asyncio.to_thread(Path(ready_path).write_text, "ready")
    try:
        async with asyncio.timeout(timeout):
            await done.wait()
    except TimeoutError:
        pass
    await consumer.shutdown()
    result.messages = len(result.latencies)
    return result


def _e2e_sender(namesrv: str, topic: str, count: int, rate: float) -> LoadResult:
    from rocket.runtime import run

    return run(_e2e_send(namesrv, topic, count, rate))


async def _e2e_send(namesrv: str, topic: str, count: int, rate: float) -> LoadResult:
    from rocket.client import Producer, build_message

    result = LoadResult()
    async with Producer(f"bench-e2e-p-{os.getpid()}", namesrv) as producer:
        await producer.queues(topic)
        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks = []
        for i in range(count):
            at = start + i / rate
            delay = at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(producer.send(build_message(topic, _body(i)))))
        await asyncio.gather(*tasks)
        result.messages = count
    return result


# -- orchestration -----------------------------------------------------------------------------


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (:func:`_proc_stat`); 0 when the process is gone."""
    user, system, _ = _proc_stat(pid)
    return user + system


def _proc_stat(pid: int) -> tuple[float, float, int]:
    """(user CPU seconds, system CPU seconds, minor page faults) of ``pid`` so far, from one read of
    Linux /proc/PID/stat (fields utime, stime, minflt); zeros when the process is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick, int(fields[7])
    except (OSError, IndexError, ValueError):
        return 0.0, 0.0, 0


def _cpu_line(results: list[LoadResult], broker_cpu: tuple[float, float], wall: float, warmup: float,
              faults: float = 0.0) -> str:
    """Where the CPU went: broker (user + system) and client microseconds per message, broker core use,
    and the broker's minor page faults per message.

    ``broker_cpu`` (user, system seconds) and ``faults`` are already scaled to the measured window;
    the workers' CPU includes their warm-up, so it is scaled by the measured share of their run. The
    system part is mostly the kernel's copy into the page cache (see :mod:`bench.calibrate`).
    """
    n = sum(r.messages for r in results) or 1
    client = sum(r.cpu_seconds * r.seconds / (r.seconds + warmup) for r in results)
    user, system = broker_cpu
    return (f"CPU per message: broker {(user + system) / n * 1e6:.1f} us (user {user / n * 1e6:.1f}, system "
            f"{system / n * 1e6:.1f}), client {client / n * 1e6:.1f} us; "
            f"broker used {(user + system) / wall * 100:.0f}% of a core, {faults / n:.3f} page faults per message")


def _window_cpu(before: tuple[float, float, int], after: tuple[float, float, int], scale: float
                ) -> tuple[float, float]:
    """(user, system) seconds between two :func:`_proc_stat` readings, times ``scale``."""
    return (after[0] - before[0]) * scale, (after[1] - before[1]) * scale


def _merge(results: list[LoadResult]) -> tuple[float, list[float], int]:
    """(msgs/s over all processes, sorted latencies, errors)."""
    rate = sum(r.messages / r.seconds for r in results if r.seconds)
    lat = sorted(x for r in results for x in r.latencies)
    return rate, lat, sum(r.errors for r in results)


def _pcts(lat: list[float]) -> str:
    return " / ".join(f"{percentile(lat, q):.2f}" for q in (50, 99, 99.9))


def _run_mode(flush: str, short: bool, pool: concurrent.futures.ProcessPoolExecutor) -> dict[str, Any]:
    from rocket.client import Admin
    from rocket.runtime import run

    duration, warmup = (2.0, 0.5) if short else (10.0, 2.0)
    folder = Path(tempfile.mkdtemp(prefix=f"rocket-bench-{flush.lower()}-"))
    cluster = LocalCluster(folder, find_free_base_port(), nameservers=1, brokers=1, flush=flush, slaves=False)
    state = cluster.start(detach=False, timeout=60)
    ns = state.namesrv
    broker_pid = next(p.pid for p in state.processes if p.kind == "broker")
    topic = f"bench-{flush.lower()}"
    figures: dict[str, Any] = {"flush": flush}
    try:
        e2e_topic = f"{topic}-e2e"

        async def create() -> None:
            async with Admin(ns) as admin:
                await admin.create_topic(topic, queue_nums=QUEUES)
                await admin.create_topic(e2e_topic, queue_nums=QUEUES)

        run(create())
        time.sleep(0.5)
        profile = bool(os.environ.get("ROCKET_BENCH_PROFILE"))

        # 1. single sends, 64 in flight
        per_proc = SINGLE_CONCURRENCY // LOAD_PROCS
        b0, w0 = _proc_stat(broker_pid), time.perf_counter()
        futures = [pool.submit(_send_worker, ns, topic, per_proc, 1, duration, warmup, 0.0, profile and i == 0)
                   for i in range(LOAD_PROCS)]
        results = [f.result() for f in futures]
        b1, w1 = _proc_stat(broker_pid), time.perf_counter()
        rate, lat, errors = _merge(results)
        figures["single"] = (rate, lat, errors)
        print(f"[{flush}] single sends ({SINGLE_CONCURRENCY} in flight, {LOAD_PROCS} procs): {rate:,.0f} msgs/s, "
              f"latency p50/p99/p99.9 {_pcts(lat)} ms, errors {errors}", flush=True)
        scale = duration / (w1 - w0)
        figures["single_cpu"] = _cpu_line(results, _window_cpu(b0, b1, scale), duration, warmup,
                                          (b1[2] - b0[2]) * scale)
        print(f"    {figures['single_cpu']}", flush=True)
        if results[0].profile:
            print(f"--- profile of one load process during single sends ({flush}) ---\n{results[0].profile}")

        # 2. batches of 32
        b0, w0 = _proc_stat(broker_pid), time.perf_counter()
        futures = [pool.submit(_send_worker, ns, topic, BATCH_CONCURRENCY_PER_PROC, BATCH_SIZE, duration, warmup,
                               0.0, False) for _ in range(LOAD_PROCS)]
        results_b = [f.result() for f in futures]
        b1, w1 = _proc_stat(broker_pid), time.perf_counter()
        rate_b, lat_b, errors_b = _merge(results_b)
        figures["batch"] = (rate_b, lat_b, errors_b)
        print(f"[{flush}] batched sends ({BATCH_SIZE}/batch, {BATCH_CONCURRENCY_PER_PROC * LOAD_PROCS} in flight): "
              f"{rate_b:,.0f} msgs/s, batch latency p50/p99/p99.9 {_pcts(lat_b)} ms, errors {errors_b}", flush=True)
        scale = duration / (w1 - w0)
        print(f"    {_cpu_line(results_b, _window_cpu(b0, b1, scale), duration, warmup, (b1[2] - b0[2]) * scale)}",
              flush=True)

        # 3. consume everything stored so far
        futures = [pool.submit(_pull_worker, ns, topic, i, LOAD_PROCS) for i in range(LOAD_PROCS)]
        pulled = [f.result() for f in futures]
        total = sum(r.messages for r in pulled)
        seconds = max(r.seconds for r in pulled)
        figures["consume"] = total / seconds if seconds else 0.0
        print(f"[{flush}] consume (pull, {LOAD_PROCS} procs): {total:,} msgs in {seconds:.2f} s = "
              f"{figures['consume']:,.0f} msgs/s", flush=True)

        # 4. half of the maximum single-send rate, paced (open loop)
        half = max(rate / 2, 100.0)
        futures = [pool.submit(_send_worker, ns, topic, per_proc, 1, duration, warmup, half / LOAD_PROCS, False)
                   for _ in range(LOAD_PROCS)]
        rate_h, lat_h, errors_h = _merge([f.result() for f in futures])
        figures["half"] = (half, rate_h, lat_h)
        print(f"[{flush}] paced at {half:,.0f} msgs/s (half of max): achieved {rate_h:,.0f} msgs/s, "
              f"latency p50/p99/p99.9 {_pcts(lat_h)} ms, errors {errors_h}", flush=True)

        # 5. end to end with long polling
        count = int(E2E_RATE * (3 if short else 10))
        ready = folder / "e2e-ready"
        consumer = pool.submit(_push_worker, ns, e2e_topic, count, 60.0, str(ready))
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        sender = pool.submit(_e2e_sender, ns, e2e_topic, count, E2E_RATE)
        sender.result()
        e2e = consumer.result()
        lat_e = sorted(e2e.latencies)
        figures["e2e"] = lat_e
        print(f"[{flush}] end-to-end at {E2E_RATE} msgs/s (long polling): {len(lat_e)}/{count} received, "
              f"p50/p99/p99.9 {_pcts(lat_e)} ms", flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return figures


def run(short: bool) -> None:
    """Run both flush modes and print the figures beside the targets."""
    ctx = multiprocessing.get_context("spawn")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"1 NameServer + 1 broker on loopback, {BODY_SIZE}-byte messages, {QUEUES} queues, "
          f"{LOAD_PROCS} load process(es), {os.cpu_count()} CPUs, load average {load:.1f} at start", flush=True)
    print(f"this machine's {page_cache_write_cost().text()} (bench/calibrate.py: the system part of the "
          "broker's CPU below is mostly this copy)", flush=True)
    all_figures = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=LOAD_PROCS + 1, mp_context=ctx) as pool:
        for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            all_figures.append(_run_mode(flush, short, pool))
    print("\nsummary (targets are for ASYNC_FLUSH):")
    print(f"{'':34}{'ASYNC_FLUSH':>16}{'SYNC_FLUSH':>16}{'target':>14}")
    a, s = all_figures

    def row(label: str, va: str, vs: str, target: str) -> None:
        print(f"{label:34}{va:>16}{vs:>16}{target:>14}")

    row("single sends, msgs/s", f"{a['single'][0]:,.0f}", f"{s['single'][0]:,.0f}", f">= {TARGETS['single']:,}")
    row("single send p99, ms", f"{percentile(a['single'][1], 99):.2f}", f"{percentile(s['single'][1], 99):.2f}", "")
    row("batched sends, msgs/s", f"{a['batch'][0]:,.0f}", f"{s['batch'][0]:,.0f}", f">= {TARGETS['batch']:,}")
    row("consume, msgs/s", f"{a['consume']:,.0f}", f"{s['consume']:,.0f}", "")
    row("p99 send at half max rate, ms", f"{percentile(a['half'][2], 99):.2f}",
        f"{percentile(s['half'][2], 99):.2f}", f"<= {TARGETS['half_rate_p99_ms']}")
    row("end-to-end p99, ms", f"{percentile(a['e2e'], 99):.2f}", f"{percentile(s['e2e'], 99):.2f}",
        f"<= {TARGETS['e2e_p99_ms']}")
    row("end-to-end p50, ms", f"{percentile(a['e2e'], 50):.2f}", f"{percentile(s['e2e'], 50):.2f}", "")
