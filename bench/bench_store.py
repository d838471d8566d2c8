"""Message store benchmark: append throughput against the disk's own bandwidth, recovery, topic creation.

All in one run, on the file system of this checkout (``bench/results/tmp``):

1. **raw disk**: sequential 4 MiB ``os.write`` calls and one final
   ``fdatasync`` (MB/s), and the latency of a small write + ``fdatasync``
   (p50/p99) — the yardsticks every figure below is compared with.
   Then two floors, the bare loops the store cannot beat in CPython: the
   append loop (crc32 + one ``struct.pack`` per record + ``pwrite``), and the
   group-commit loop (64 coroutines, a future each, ``pwrite`` +
   ``fdatasync`` per group in a thread, nothing else).
2. **ASYNC_FLUSH, batched**: 1 KiB bodies with a tag and a UNIQ_KEY (what a
   Java producer sends, so the IndexFile works too), ``put_messages`` batches
   of 256 from 4 concurrent writers (one queue each); msgs/s and CommitLog
   MB/s until the last batch is acknowledged *and* fdatasync'd (comparable
   with the raw figure), and until acknowledged only. Repeated without keys.
3. **SYNC_FLUSH** with 1, 16 and 64 concurrent writers, one ``put_message``
   at a time each: msgs/s, MB/s, latency p50/p99, messages per fdatasync.
   A writer waits for its fdatasync, so throughput is bounded by
   ``writers x record size / fdatasync latency``; that ceiling is printed.
4. **recovery after kill -9**: a child process appends (ASYNC_FLUSH) until
   the CommitLog holds the target size and is killed with SIGKILL; then the
   time of ``start()`` (abnormal recovery from the checkpoint), and the
   worst case: checkpoint, ConsumeQueues and index deleted, so every record
   is CRC-checked and re-dispatched. Per GiB, extrapolated linearly from the
   size written (128 MiB in short mode).
5. **10,000 topics** created one ``put`` at a time, until persisted.

Targets (issue #3): ASYNC batched >= 50 % of the raw sequential bandwidth;
SYNC with 64 writers >= 30 %; recovery <= 5 s per GiB.

Run: ``make bench BENCH=store`` or ``python -m bench store [--short]``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rocket.broker.metadata import TopicConfigManager
from rocket.message import new_uniq_id, tags_hash_code
from rocket.protocol import TopicConfig
from rocket.runtime import run as run_loop
from rocket.store import (
    DefaultMessageStore,
    FlushDiskType,
    MessageStoreConfig,
    PutMessageRequest,
)

ROOT = Path(__file__).resolve().parent.parent
BODY_SIZE = 1024
BATCH = 256
ASYNC_WRITERS = 4
TARGETS = {"async": 0.50, "sync64": 0.30, "recovery_s_per_gib": 5.0}
GIB = 1024**3
MIB = 1024**2


def _workdir() -> Path:
    base = ROOT / "bench" / "results" / "tmp"
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="store-", dir=base))


def _percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


# -- 1. raw disk ---------------------------------------------------------------------------------


def raw_disk(work: Path, size: int) -> tuple[float, float, float]:
    """(MB/s of write + fdatasync, fdatasync p50 ms, p99 ms)."""
    path = work / "raw"
    block = os.urandom(4 * MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(size // len(block)):
            os.write(fd, block)
        os.fdatasync(fd)
        mbs = size / MIB / (time.perf_counter() - t0)
        lat = []
        small = os.urandom(1100)
        for _ in range(200):
            os.write(fd, small)
            t = time.perf_counter()
            os.fdatasync(fd)
            lat.append((time.perf_counter() - t) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    return mbs, _percentile(lat, 50), _percentile(lat, 99)


# -- 1b. floors: the bare loops the store's figures cannot beat in CPython -----------------------


def floor_append(work: Path, size: int) -> tuple[float, float, int]:
    """The bare ASYNC append loop: per 1 KiB message only ``zlib.crc32`` of the body, one
    ``struct.pack`` of a whole stored record (IPv4 hosts, a UNIQ_KEY-sized properties string)
    appended to a bytearray, a ``pwrite`` per 4 MiB, one ``fdatasync`` at the end: no queue
    offsets, ConsumeQueue, index or results. Returns (CPU us per message, wall MB/s, record size)."""
    body = os.urandom(BODY_SIZE)
    topic = b"\x0aBenchTopic"
    props = f"TAGS\x01TagA\x02UNIQ_KEY\x01{new_uniq_id()}\x02WAIT\x01true".encode()
    rec = struct.Struct(f">iiiiiqqiq8sq8siqi{len(body)}s{len(topic)}sh{len(props)}s")
    host = bytes(8)
    n = size // rec.size
    path = work / "floor-append"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        buf = bytearray()
        pos = 0
        for i in range(n):
            buf += rec.pack(rec.size, -626843481, zlib.crc32(body) & 0x7FFFFFFF, 0, 0, i, pos + len(buf), 0, 1, host,
                            2, host, 0, 0, len(body), body, topic, len(props), props)
            if len(buf) >= 4 * MIB:
                pos += os.pwrite(fd, buf, pos)
                buf = bytearray()
        pos += os.pwrite(fd, buf, pos)
        os.fdatasync(fd)
        cpu = time.process_time() - cpu0
        wall = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink()
    return cpu / n * 1e6, pos / MIB / wall, rec.size


async def _floor_group_commit(work: Path, writers: int, seconds: float, record_size: int
                              ) -> tuple[float, float, float]:
    """The bare SYNC_FLUSH loop: ``writers`` coroutines each awaiting one future per record
    (``record_size`` bytes); one job at a time (a thread) writes everything queued and fdatasyncs it, then
    resolves its futures and the next job takes what was queued meanwhile, as the store's
    group commit does, with no encoding, dispatch or results. Returns (msgs/s, MB/s, CPU us/msg)."""
    loop = asyncio.get_running_loop()
    record = os.urandom(record_size)
    path = work / "floor-sync"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.posix_fallocate(fd, 0, 256 * MIB)
    pool = ThreadPoolExecutor(1)
    queued: list[asyncio.Future[None]] = []
    buf = bytearray()
    pos = 0
    running = False

    def job(data: bytearray, offset: int, futs: list[asyncio.Future[None]]) -> None:
        os.pwrite(fd, data, offset)
        os.fdatasync(fd)
        loop.call_soon_threadsafe(done, futs)

    def done(futs: list[asyncio.Future[None]]) -> None:
        nonlocal running
        running = False
        for f in futs:
            f.set_result(None)
        loop.call_soon(start)  # one loop turn later, as the store: the woken writers join the next job

    def start() -> None:
        nonlocal buf, pos, running, queued
        if running or not buf:
            return
        data, buf = buf, bytearray()
        futs, queued = queued, []
        running = True
        pool.submit(job, data, pos % (200 * MIB), futs)
        pos += len(data)

    count = 0
    stop = time.perf_counter() + seconds

    async def writer() -> None:
        nonlocal count, buf
        while time.perf_counter() < stop:
            buf += record
            f = loop.create_future()
            queued.append(f)
            if not running:
                start()
            await f
            count += 1

    t0 = time.perf_counter()
    cpu0 = time.process_time()
    await asyncio.gather(*(writer() for _ in range(writers)))
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    pool.shutdown()
    os.close(fd)
    path.unlink()
    return count / elapsed, count * len(record) / MIB / elapsed, cpu / max(count, 1) * 1e6


# -- helpers ---------------------------------------------------------------------------------------


def _requests(n: int, queue_id: int, body: bytes, keyed: bool) -> list[PutMessageRequest]:
    tc = tags_hash_code("TagA")
    out = []
    for _ in range(n):
        if keyed:
            u = new_uniq_id()
            out.append(PutMessageRequest(topic="BenchTopic", queue_id=queue_id, body=body,
                                         properties=f"TAGS\x01TagA\x02UNIQ_KEY\x01{u}\x02WAIT\x01true",
                                         tags_code=tc, uniq_key=u, born_host="10.0.0.1:50000"))
        else:
            out.append(PutMessageRequest(topic="BenchTopic", queue_id=queue_id, body=body,
                                         properties="TAGS\x01TagA\x02WAIT\x01true", tags_code=tc,
                                         born_host="10.0.0.1:50000"))
    return out


def _config(root: Path, flush: FlushDiskType) -> MessageStoreConfig:
    return MessageStoreConfig(store_path_root_dir=root, flush_disk_type=flush,
                              max_pending_flush_bytes=512 * MIB, clean_resource_interval=3600)


# -- 2. ASYNC batched --------------------------------------------------------------------------------


async def _async_batched(root: Path, size: int, keyed: bool) -> dict[str, float]:
    store = DefaultMessageStore(_config(root, FlushDiskType.ASYNC_FLUSH))
    await store.start()
    body = os.urandom(BODY_SIZE)
    per_batch = len(_requests(1, 0, body, keyed)[0].body) + 180
    batches = max(size // (per_batch * BATCH * ASYNC_WRITERS), 1)
    # Requests are built up front so that the figure is the store's, not the request builder's.
    work = {q: [_requests(BATCH, q, body, keyed) for _ in range(batches)] for q in range(ASYNC_WRITERS)}
    busy = 0

    async def writer(q: int) -> None:
        nonlocal busy
        for reqs in work[q]:
            while True:
                res = await store.put_messages(reqs)
                if res.ok:
                    break
                busy += 1
                await asyncio.sleep(0.001)

    t0 = time.perf_counter()
    cpu0 = time.process_time()
    await asyncio.gather(*(writer(q) for q in range(ASYNC_WRITERS)))
    acked = time.perf_counter() - t0
    await store.commit_log.flush()
    durable = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    msgs = batches * BATCH * ASYNC_WRITERS
    nbytes = store.max_phy_offset
    await store.shutdown()
    return {"msgs": msgs, "bytes": nbytes, "acked_s": acked, "durable_s": durable, "busy": busy, "cpu_s": cpu}


# -- 3. SYNC writers -----------------------------------------------------------------------------------


async def _sync_writers(root: Path, writers: int, seconds: float) -> dict[str, float]:
    store = DefaultMessageStore(_config(root, FlushDiskType.SYNC_FLUSH))
    await store.start()
    body = os.urandom(BODY_SIZE)
    pool = [_requests(64, w % 8, body, True) for w in range(writers)]
    lat: list[float] = []
    stop = time.perf_counter() + seconds
    count = 0
    errors = 0
    syncs0 = store.stats.commit_log.fdatasyncs
    start_bytes = store.max_phy_offset

    async def writer(w: int) -> None:
        nonlocal count, errors
        reqs = pool[w]
        i = 0
        while time.perf_counter() < stop:
            t = time.perf_counter()
            res = await store.put_message(reqs[i % 64])
            i += 1
            if res.ok:
                lat.append(time.perf_counter() - t)
                count += 1
            else:
                errors += 1

    t0 = time.perf_counter()
    cpu0 = time.process_time()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    syncs = store.stats.commit_log.fdatasyncs - syncs0
    nbytes = store.max_phy_offset - start_bytes
    await store.shutdown()
    return {"msgs": count, "bytes": nbytes, "s": elapsed, "p50": _percentile(lat, 50) * 1000,
            "p99": _percentile(lat, 99) * 1000, "syncs": syncs, "errors": errors, "cpu_s": cpu}


# -- 4. recovery ----------------------------------------------------------------------------------------------

_CHILD = """
import asyncio, os, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from bench.bench_store import _config, _requests
from rocket.store import DefaultMessageStore, FlushDiskType
from rocket.runtime import run

async def main():
    store = DefaultMessageStore(_config(Path({path!r}), FlushDiskType.ASYNC_FLUSH))
    await store.start()
    body = os.urandom(1024)
    target = {size}
    q = 0
    while store.max_phy_offset < target:
        await asyncio.gather(*(store.put_messages(_requests(256, (q + k) % 8, body, True)) for k in range(4)))
        q += 4
    await store.commit_log.flush()
    print(store.max_phy_offset, flush=True)
    await asyncio.sleep(3600)

run(main())
"""


def _write_and_kill(root: Path, size: int) -> int:
    code = _CHILD.format(root=str(ROOT), path=str(root), size=size)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env={**os.environ})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if not line.strip():
        raise RuntimeError("the writer process died before writing its data")
    return int(line)


async def _recover(root: Path) -> tuple[float, float, bool, int, int]:
    store = DefaultMessageStore(_config(root, FlushDiskType.ASYNC_FLUSH))
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    await store.start()
    dt = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    abnormal = store.stats.last_recovery_abnormal
    records = store.stats.last_recovery_records
    end = store.max_phy_offset
    await store.shutdown()
    (root / "abort").touch()  # as if it had crashed again
    return dt, cpu, abnormal, records, end


# -- 5. topics -----------------------------------------------------------------------------------------------


def _topics(root: Path, n: int) -> tuple[float, float]:
    m = TopicConfigManager(root / "topics.db")
    m.load()
    t0 = time.perf_counter()
    for i in range(n):
        m.put(TopicConfig(f"BenchTopic-{i}", 8, 8))
    issued = time.perf_counter() - t0
    m.flush()
    total = time.perf_counter() - t0
    m.store.close()
    return issued, total


# -- the run ---------------------------------------------------------------------------------------------------


def _ratio(mbs: float, raw: float) -> str:
    return f"{mbs / raw * 100:5.1f} % of raw"


def run(short: bool) -> None:
    work = _workdir()
    try:
        _run(work, short)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(work: Path, short: bool) -> None:
    size = 128 * MIB if short else GIB
    sync_seconds = 2.0 if short else 5.0
    print(f"store benchmark in {work} ({'short' if short else 'full'} run), {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} (figures in wall time suffer when other processes compete; "
          f"'with a core to itself' = 1 / CPU time per message)")

    raw, p50, p99 = raw_disk(work, size)
    print(f"raw sequential write   {raw:8.1f} MB/s  (4 MiB writes + fdatasync, {size // MIB} MiB)")
    print(f"raw fdatasync latency  p50 {p50:.3f} ms  p99 {p99:.3f} ms  (1.1 KB write + fdatasync)")
    cpu_us, floor_mbs, rec_size = floor_append(work, size)
    rec_mib = rec_size / MIB
    print(f"floor: bare append     {cpu_us:.2f} us CPU/msg = {rec_mib * 1e6 / cpu_us:.0f} MB/s with a core to itself "
          f"({_ratio(rec_mib * 1e6 / cpu_us, raw)}); {floor_mbs:.0f} MB/s wall (crc32 + one struct.pack per record, "
          f"pwrite per 4 MiB, no store)")
    f_msgs, f_mbs, f_cpu = run_loop(_floor_group_commit(work, 64, sync_seconds, rec_size))
    print(f"floor: bare group commit, 64 writers {f_msgs:9.0f} msgs/s {f_mbs:7.1f} MB/s  {_ratio(f_mbs, raw)}; "
          f"{f_cpu:.1f} us CPU/msg (a future per message, pwrite + fdatasync per group in a thread, no store)")

    for keyed in (True, False):
        r = run_loop(_async_batched(work / f"async-{keyed}", size, keyed))
        shutil.rmtree(work / f"async-{keyed}", ignore_errors=True)
        mbs = r["bytes"] / MIB / r["durable_s"]
        label = "1 KiB + UNIQ_KEY" if keyed else "1 KiB, no keys  "
        cpu_us = r["cpu_s"] / r["msgs"] * 1e6
        cpu_mbs = r["bytes"] / r["msgs"] / MIB * 1e6 / cpu_us
        print(f"ASYNC batched {label} {r['msgs'] / r['durable_s']:9.0f} msgs/s {mbs:7.1f} MB/s  "
              f"{_ratio(mbs, raw)} (target >= {TARGETS['async'] * 100:.0f} %) until fdatasync'd; "
              f"{r['msgs'] / r['acked_s']:.0f} msgs/s until acknowledged; busy answers {r['busy']:.0f}; "
              f"{cpu_us:.1f} us CPU/msg = {cpu_mbs:.0f} MB/s with a core to itself ({_ratio(cpu_mbs, raw)})")

    for writers in (1, 16, 64):
        r = run_loop(_sync_writers(work / f"sync-{writers}", writers, sync_seconds))
        shutil.rmtree(work / f"sync-{writers}", ignore_errors=True)
        mbs = r["bytes"] / MIB / r["s"]
        per_sync = r["msgs"] / r["syncs"] if r["syncs"] else 0.0
        record = r["bytes"] / r["msgs"] if r["msgs"] else 0
        ceiling = writers * record / MIB / (p50 / 1000) if p50 > 0 else 0.0
        target = f" (target >= {TARGETS['sync64'] * 100:.0f} %)" if writers == 64 else ""
        print(f"SYNC {writers:2d} writer(s)        {r['msgs'] / r['s']:9.0f} msgs/s {mbs:7.1f} MB/s  "
              f"{_ratio(mbs, raw)}{target}; latency p50 {r['p50']:.2f} ms p99 {r['p99']:.2f} ms; "
              f"{per_sync:.1f} msgs per fdatasync; ceiling at raw fdatasync p50 {ceiling:.1f} MB/s; "
              f"{r['cpu_s'] / max(r['msgs'], 1) * 1e6:.1f} us CPU/msg"
              + (f"; errors {r['errors']:.0f}" if r["errors"] else ""))

    rec_root = work / "recovery"
    written = _write_and_kill(rec_root, size)
    gib = written / GIB
    dt, cpu, abnormal, records, end = run_loop(_recover(rec_root))
    print(f"recovery after kill -9 {dt:8.2f} s for {written / MIB:.0f} MiB = {dt / gib:.2f} s per GiB "
          f"(target <= {TARGETS['recovery_s_per_gib']:.0f} s; {cpu:.2f} s CPU; "
          f"{'abnormal' if abnormal else 'NORMAL?'}: from the checkpoint's file, {records} records checked)")
    for name in ("checkpoint",):
        (rec_root / name).unlink(missing_ok=True)
    shutil.rmtree(rec_root / "consumequeue", ignore_errors=True)
    shutil.rmtree(rec_root / "index", ignore_errors=True)
    dt_full, cpu_full, _abn, records_full, end_full = run_loop(_recover(rec_root))
    assert end_full == end, "full rebuild disagrees with the normal recovery"
    print(f"recovery, full rebuild {dt_full:8.2f} s for {written / MIB:.0f} MiB = {dt_full / gib:.2f} s per GiB "
          f"({cpu_full:.2f} s CPU; checkpoint, ConsumeQueues and index deleted: every record CRC-checked and "
          f"re-dispatched, {records_full} records)")
    shutil.rmtree(rec_root, ignore_errors=True)

    issued, total = _topics(work, 10_000)
    print(f"10,000 topics one at a time: {issued:.2f} s to create, {total:.2f} s until persisted "
          f"({total / 10_000 * 1e6:.0f} us per topic)")
