"""Timer messages (``rocket.store.timer``): delivery error, enqueue throughput, scale and recovery.

1. **Delivery error** (actual arrival - scheduled time, ms) p50/p99/max for ``N`` timers (100,000;
   ``--short``: 5,000) whose ``TIMER_DELIVER_MS`` is spread evenly over a window (600 s; ``--short``:
   20 s; env ``ROCKET_BENCH_TIMER_WINDOW`` overrides) that starts once they are all sent, at
   ``timerPrecisionMs`` 1000 and 100. One NameServer and one broker process (``rocket.local``), a
   sender process (our Producer) and a PushConsumer process that timestamps arrivals. The target
   (issue 17) is p99 ≤ precision + 50 ms.
2. **Enqueue throughput**: 5 rounds (``--short``: 1) of 10,000 single sends (64 in flight, one
   process) of plain messages and 10,000 of timer messages due in an hour, the order alternating
   from round to round: msgs/s from the send acknowledgements, the rate until the broker's timer
   enqueue backlog is drained (the wheel has them all), broker CPU per message and the load
   average, per round; then the medians. Target: timer ≥ 70 % of plain, judged on the median of
   the per-round ratios (the machine is shared: paired rounds cancel a drifting load).
3. **Scale and recovery**: ``M`` (1,000,000; ``--short``: 50,000) timer messages due in an hour are
   put straight into a store with a running :class:`~rocket.store.timer.TimerMessageStore` (in one
   process: no network), RSS reported once all are in the wheel; the process is then killed with
   SIGKILL and a new one recovers the store and the timer (``TimerMessageStore.load``): recovery time
   and its rate per million pending timers, and RSS after recovery.

``ROCKET_BENCH_TIMER_PARTS`` (comma-separated ``delivery``, ``enqueue``, ``scale``; default all)
runs only some parts, e.g. ``ROCKET_BENCH_TIMER_PARTS=enqueue make bench BENCH=timer``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_broker import _proc_cpu
from rocket.local import LocalCluster, find_free_base_port, percentile

QUEUES = 4
PLAIN_BODY = b"x" * 128


def _rss_mb(pid: int | None = None) -> float:
    try:
        text = Path(f"/proc/{pid or os.getpid()}/status").read_text()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _hwm_mb(pid: int | None = None) -> float:
    text = Path(f"/proc/{pid or os.getpid()}/status").read_text()
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# -- 1. delivery error ------------------------------------------------------------------------------


def _sender(namesrv: str, topic: str, n: int, window_start_ms: int, window_ms: int) -> tuple[int, float]:
    from rocket.runtime import run

    return run(_send_timers(namesrv, topic, n, window_start_ms, window_ms))


async def _send_timers(namesrv: str, topic: str, n: int, start_ms: int, window_ms: int) -> tuple[int, float]:
    from rocket.client import Producer, build_message

    errors = 0
    t0 = time.perf_counter()
    async with Producer(f"bench-timer-{os.getpid()}", namesrv, send_timeout=20.0) as producer:
        await producer.queues(topic)
        sem = asyncio.Semaphore(64)

        async def one(i: int) -> None:
            nonlocal errors
            at = start_ms + i * window_ms // n
            async with sem:
                try:
                    await producer.send(build_message(topic, struct.pack(">q", at) + b"t" * 56, deliver_time_ms=at))
                except Exception:
                    errors += 1

        await asyncio.gather(*(one(i) for i in range(n)))
    return errors, time.perf_counter() - t0


def _receiver(namesrv: str, topic: str, expected: int, timeout: float, ready_path: str) -> list[float]:
    from rocket.runtime import run

    return run(_receive(namesrv, topic, expected, timeout, ready_path))


async def _receive(namesrv: str, topic: str, expected: int, timeout: float, ready_path: str) -> list[float]:
    from rocket.client import ConsumeFrom, MessageExt, PushConsumer

    errors: list[float] = []
    done = asyncio.Event()

    def handle(msgs: list[MessageExt]) -> None:
        now = time.time() * 1000
        for msg in msgs:
            (at,) = struct.unpack_from(">q", msg.body, 0)
            errors.append(now - at)
        if len(errors) >= expected:
            done.set()

    consumer = PushConsumer(f"bench-timer-c-{os.getpid()}", namesrv, handle, consume_from=ConsumeFrom.LAST_OFFSET,
                            rebalance_interval=1.0, consume_batch_size=32)
    consumer.subscribe(topic)
    await consumer.start()
    deadline = time.monotonic() + 15
    while len(consumer.assigned_queues()) < QUEUES and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    await asyncio.to_thread(Path(ready_path).write_text, "ready")
    try:
        async with asyncio.timeout(timeout):
            await done.wait()
    except TimeoutError:
        pass
    await consumer.shutdown()
    return errors


def _cluster(folder: Path, precision_ms: int) -> tuple[LocalCluster, Any]:
    cluster = LocalCluster(folder, find_free_base_port(), nameservers=1, brokers=1, flush="ASYNC_FLUSH",
                           slaves=False, extra_broker_args=["--set", f"timerPrecisionMs={precision_ms}"])
    return cluster, cluster.start(detach=False, timeout=60)


def _create_topic(namesrv: str, topic: str) -> None:
    from rocket.client import Admin
    from rocket.runtime import run

    async def create() -> None:
        async with Admin(namesrv) as admin:
            await admin.create_topic(topic, queue_nums=QUEUES)

    run(create())
    time.sleep(0.5)


def delivery_error(precision_ms: int, n: int, window_s: float,
                   pool: concurrent.futures.ProcessPoolExecutor) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp(prefix=f"rocket-bench-timer-{precision_ms}-"))
    cluster, state = _cluster(folder, precision_ms)
    topic = f"bench-timer-{precision_ms}"
    try:
        _create_topic(state.namesrv, topic)
        ready = folder / "receiver.ready"
        lead_s = 5.0 + n / 4000  # every timer is sent before the first is due
        recv = pool.submit(_receiver, state.namesrv, topic, n, lead_s + window_s + 60, str(ready))
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        start_ms = int(time.time() * 1000 + lead_s * 1000)
        send_errors, send_s = pool.submit(_sender, state.namesrv, topic, n, start_ms, int(window_s * 1000)).result()
        errs = sorted(recv.result())
        early = sum(1 for e in errs if e < 0)
        out = {"p50": percentile(errs, 50), "p99": percentile(errs, 99), "max": errs[-1] if errs else float("nan"),
               "min": errs[0] if errs else float("nan"), "received": len(errs), "early": early,
               "send_errors": send_errors, "send_s": send_s}
        print(f"[precision {precision_ms} ms] {n:,} timers over {window_s:.0f} s (sent in {send_s:.1f} s, "
              f"{send_errors} send errors): received {len(errs):,}; delivery error p50 {out['p50']:.1f} ms, "
              f"p99 {out['p99']:.1f} ms, max {out['max']:.1f} ms, min {out['min']:.1f} ms, early {early} "
              f"(target p99 <= {precision_ms + 50} ms)", flush=True)
        return out
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


# -- 2. enqueue throughput --------------------------------------------------------------------------


def _send_rate(namesrv: str, topic: str, n: int, timer: bool) -> tuple[float, int]:
    from rocket.runtime import run

    return run(_send_many(namesrv, topic, n, timer))


async def _send_many(namesrv: str, topic: str, n: int, timer: bool) -> tuple[float, int]:
    from rocket.client import Producer, build_message

    errors = 0
    async with Producer(f"bench-tq-{os.getpid()}", namesrv, send_timeout=20.0) as producer:
        await producer.send(build_message(topic, PLAIN_BODY))
        sem = asyncio.Semaphore(64)
        at = int(time.time() * 1000) + 3_600_000
        t0 = time.perf_counter()

        async def one() -> None:
            nonlocal errors
            async with sem:
                try:
                    await producer.send(build_message(topic, PLAIN_BODY, deliver_time_ms=at if timer else None))
                except Exception:
                    errors += 1

        await asyncio.gather(*(one() for _ in range(n)))
        return n / (time.perf_counter() - t0), errors


def _timer_status(http: str) -> dict[str, Any]:
    import urllib.request

    import orjson

    with urllib.request.urlopen(f"{http}/api/v1/status", timeout=10) as resp:
        return dict(orjson.loads(resp.read()).get("timer", {}))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def enqueue_throughput(n: int, pool: concurrent.futures.ProcessPoolExecutor,
                       rounds: int = 1) -> tuple[float, float, float]:
    """``rounds`` rounds of ``n`` plain then ``n`` timer single sends (the order alternating from
    round to round); prints each round and the medians; returns the median plain, timer and
    into-the-wheel rates (msgs/s)."""
    folder = Path(tempfile.mkdtemp(prefix="rocket-bench-timerq-"))
    cluster, state = _cluster(folder, 1000)
    broker = next(p for p in state.processes if p.kind == "broker")
    http = f"http://127.0.0.1:{broker.http_port}"
    plain_rates: list[float] = []
    timer_rates: list[float] = []
    wheel_rates: list[float] = []
    ratios: list[float] = []
    cpu: dict[str, list[float]] = {"plain": [], "timer": []}
    errors = 0
    try:
        _create_topic(state.namesrv, "bench-plain")
        _create_topic(state.namesrv, "bench-timerq")
        pool.submit(_send_rate, state.namesrv, "bench-plain", n // 2, False).result()  # warm-up
        pool.submit(_send_rate, state.namesrv, "bench-timerq", n // 2, True).result()
        while _timer_status(http).get("enqueueBacklog", 1) > 0:
            time.sleep(0.05)
        for i in range(rounds):
            got: dict[str, float] = {}
            for kind in (("plain", "timer") if i % 2 == 0 else ("timer", "plain")):
                timer = kind == "timer"
                c0 = _proc_cpu(broker.pid)
                t0 = time.perf_counter()
                rate, e = pool.submit(_send_rate, state.namesrv, "bench-timerq" if timer else "bench-plain", n,
                                      timer).result()
                errors += e
                while timer and _timer_status(http).get("enqueueBacklog", 1) > 0 and time.perf_counter() - t0 < 600:
                    time.sleep(0.02)
                if timer:
                    wheel_rates.append(n / (time.perf_counter() - t0))
                cpu[kind].append((_proc_cpu(broker.pid) - c0) / n * 1e6)
                got[kind] = rate
            plain_rates.append(got["plain"])
            timer_rates.append(got["timer"])
            ratios.append(got["timer"] / got["plain"])
            print(f"enqueue round {i + 1}: plain {got['plain']:,.0f} msgs/s, timer {got['timer']:,.0f} msgs/s "
                  f"acknowledged ({ratios[-1]:.0%}), all in the wheel at {wheel_rates[-1]:,.0f} msgs/s; broker CPU "
                  f"per message plain {cpu['plain'][-1]:.1f} us, timer {cpu['timer'][-1]:.1f} us (send + wheel "
                  f"enqueue); load average {os.getloadavg()[0]:.1f}", flush=True)
        plain, timer_rate, in_wheel = _median(plain_rates), _median(timer_rates), _median(wheel_rates)
        ratio = _median(ratios)
        cpu_plain, cpu_timer = _median(cpu["plain"]), _median(cpu["timer"])
        verdict = "met" if ratio >= 0.70 and errors == 0 else "NOT met"
        print(f"enqueue throughput (single sends, 64 in flight, one sender process, {n:,} messages per kind and "
              f"round, medians of {rounds} round(s)): plain {plain:,.0f} msgs/s, timer {timer_rate:,.0f} msgs/s "
              f"acknowledged; until all in the wheel {in_wheel:,.0f} msgs/s; broker CPU per message: plain "
              f"{cpu_plain:.1f} us, timer {cpu_timer:.1f} us = {cpu_plain / cpu_timer:.0%} of plain's throughput "
              f"when the broker's CPU is the limit; errors {errors}", flush=True)
        print(f"target timer >= 70 % of plain (median of the per-round ratios "
              f"{', '.join(f'{x:.0%}' for x in ratios)}): {ratio:.0%} — {verdict}", flush=True)
        return plain, timer_rate, in_wheel
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


# -- 3. scale and recovery --------------------------------------------------------------------------

_CHILD = r'''
import asyncio, os, sys, time
sys.path.insert(0, {services!r})
from rocket.message import encode_properties
from rocket.store import DefaultMessageStore, MessageStoreConfig, PutMessageRequest
from rocket.store.timer import TimerMessageStore, TIMER_TOPIC

def rss(kind="VmRSS"):
    for line in open("/proc/self/status"):
        if line.startswith(kind + ":"):
            return int(line.split()[1]) / 1024
    return 0.0

cfg = MessageStoreConfig(store_path_root_dir={root!r}, max_hash_slot_num=500_000, max_index_num=2_000_000)

async def fill(m):
    store = DefaultMessageStore(cfg)
    await store.start()
    timer = TimerMessageStore(store)
    timer.load()
    await timer.start(should_run_dequeue=True)
    base = int(time.time() * 1000) + 3_600_000
    t0 = time.perf_counter()
    batch = 1000
    for start in range(0, m, batch):
        reqs = []
        for i in range(start, min(m, start + batch)):
            at = base + (i % 3_000_000)
            props = encode_properties({{"TIMER_OUT_MS": str(at // 1000 * 1000), "REAL_TOPIC": "Bench",
                                        "REAL_QID": str(i % 4), "UNIQ_KEY": "U%016d" % i}})
            reqs.append(PutMessageRequest(TIMER_TOPIC, 0, b"b" * 64, props, wait_store_msg_ok=False))
        res = await store.put_messages(reqs)
        assert res.ok, res
    while timer.enqueue_backlog() > 0:
        await asyncio.sleep(0.05)
    fill_s = time.perf_counter() - t0
    await asyncio.sleep(2.5)  # two timer checkpoints
    print("FILLED", m, round(fill_s, 2), timer.pending(), round(rss(), 1), round(rss("VmHWM"), 1),
          round(rss("RssAnon"), 1), round(rss("RssFile"), 1), flush=True)
    os.kill(os.getpid(), 9)

async def recover():
    t0 = time.perf_counter()
    store = DefaultMessageStore(cfg)
    await store.start()
    t1 = time.perf_counter()
    timer = TimerMessageStore(store)
    timer.load()
    t2 = time.perf_counter()
    print("RECOVERED", round(t1 - t0, 3), round(t2 - t1, 3), timer.stats.recovered_units, timer.pending(),
          round(rss(), 1), round(rss("VmHWM"), 1), round(rss("RssAnon"), 1), round(rss("RssFile"), 1), flush=True)
    await timer.shutdown()
    await store.shutdown()

asyncio.run(fill(int(sys.argv[2])) if sys.argv[1] == "fill" else recover())
'''


def _allocated(folder: Path) -> int:
    """Bytes the files of ``folder`` take on disk (TimerLog files are sparse until written)."""
    return sum(p.stat().st_blocks * 512 for p in folder.iterdir())


def scale_and_recovery(m: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="rocket-bench-timerscale-"))
    services = str(Path(__file__).resolve().parent.parent / "services")
    script = folder / "child.py"
    script.write_text(_CHILD.format(services=services, root=str(folder / "store")))
    try:
        fill = subprocess.run([sys.executable, str(script), "fill", str(m)], capture_output=True, text=True,
                              timeout=3600)
        line = next((ln for ln in fill.stdout.splitlines() if ln.startswith("FILLED")), None)
        if line is None or fill.returncode != -signal.SIGKILL:
            raise RuntimeError(f"fill failed (exit {fill.returncode}): {fill.stderr[-2000:]}")
        _, count, fill_s, pending, rss, hwm, anon, mapped = line.split()
        print(f"scale: {int(count):,} timers put and in the wheel in {float(fill_s):.1f} s "
              f"({int(count) / float(fill_s):,.0f}/s); pending {int(pending):,}; RSS {rss} MB (peak {hwm} MB) = "
              f"{anon} MB anonymous (Python heap) + {mapped} MB mapped files (CommitLog, TimerLog, wheel); "
              f"TimerLog {_allocated(folder / 'store' / 'timerlog') / 1e6:.0f} MB "
              f"on disk, wheel {(folder / 'store' / 'timerwheel').stat().st_size / 1e6:.1f} MB; then SIGKILL",
              flush=True)
        rec = subprocess.run([sys.executable, str(script), "recover"], capture_output=True, text=True, timeout=3600)
        line = next((ln for ln in rec.stdout.splitlines() if ln.startswith("RECOVERED")), None)
        if line is None:
            raise RuntimeError(f"recovery failed (exit {rec.returncode}): {rec.stderr[-2000:]}")
        _, store_s, timer_s, units, pending, rss, hwm, anon, mapped = line.split()
        per_million = float(timer_s) / max(1, int(pending)) * 1_000_000
        print(f"recovery after SIGKILL: store {float(store_s):.2f} s, timer {float(timer_s):.2f} s "
              f"({int(units):,} TimerLog units re-linked, {int(pending):,} pending) = {per_million:.2f} s per "
              f"million pending timers; RSS after recovery {rss} MB (peak {hwm} MB) = {anon} MB anonymous + "
              f"{mapped} MB mapped files", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(short: bool) -> None:
    n = 5_000 if short else 100_000
    window = float(os.environ.get("ROCKET_BENCH_TIMER_WINDOW", "20" if short else "600"))
    ctx = multiprocessing.get_context("spawn")
    parts = set((os.environ.get("ROCKET_BENCH_TIMER_PARTS") or "delivery,enqueue,scale").replace(" ", "").split(","))
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        if "delivery" in parts:
            for precision in (1000, 100):
                delivery_error(precision, n, window, pool)
        if "enqueue" in parts:
            enqueue_throughput(3_000 if short else 10_000, pool, rounds=1 if short else 5)
    if "scale" in parts:
        scale_and_recovery(50_000 if short else 1_000_000)
