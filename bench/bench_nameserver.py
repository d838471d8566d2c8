"""NameServer benchmark: REGISTER_BROKER latency and route lookups per second.

Starts a real NameServer process (``python -m rocket.cli nameserver``) on
loopback, then:

1. **Registration**: ``brokers`` masters, each with 100 topics, register in
   turn for several rounds. Every round bumps the data version (so the
   NameServer rebuilds all 100 queue datas: the expensive case), and each is
   followed by a heartbeat with an unchanged version (the common case every
   30 s). Client-side p50/p99 latency of each kind.
2. **Route lookups**: 100 concurrent connections, split over ``procs``
   client processes (multiprocessing), each keeping ``depth`` requests in
   flight (GET_ROUTEINFO_BY_TOPIC for random registered topics) back to back
   for ``duration`` seconds; once with depth 1 (strict request/response) and
   once with depth 8 (pipelined, as a multi-threaded client does).
   Reports lookups per second (all processes together), client-side latency
   p50/p99, and the NameServer process's CPU use during the run.

The NameServer shares the 2 cores with the load generator (and with anything
else running), so besides lookups/s the run prints the NameServer's CPU time
per lookup and the capacity of one whole core at that cost, and how much CPU
other processes took meanwhile.

Run: ``make bench BENCH=nameserver`` or ``python -m bench nameserver [--short]``.
Target (the NameServer brief): >= 20,000 lookups/s on a 2-core machine.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rocket.nameserver import client as ns
from rocket.protocol import DataVersion, TopicConfig
from rocket.remoting import FrameDecoder, RemotingClient, RemotingCommand, RequestCode, encode
from rocket.runtime import run as run_loop

ROOT = Path(__file__).resolve().parent.parent
TOPICS_PER_BROKER = 100
CONNECTIONS = 100
TARGET_LOOKUPS_PER_SECOND = 20_000


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"NameServer exited with {proc.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"NameServer not listening on {port}")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU jiffies of the whole machine so far (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    total = sum(fields[:8])
    return total - idle, total


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _topics(broker: int) -> list[str]:
    return [f"BenchTopic-{broker}-{i}" for i in range(TOPICS_PER_BROKER)]


# -- phase 1: registration --------------------------------------------------------------------------


async def _register_phase(
    client: RemotingClient, addr: str, brokers: int, rounds: int
) -> tuple[list[float], list[float]]:
    """Register every broker ``rounds`` times over ``client`` (left open: closing the
    connection would make the NameServer drop the brokers)."""
    changed: list[float] = []
    heartbeat: list[float] = []
    configs = {b: [TopicConfig(t, 8, 8) for t in _topics(b)] for b in range(brokers)}
    for r in range(rounds):
        version = DataVersion(1_700_000_000_000 + r, r + 1)
        for b in range(brokers):
            for bucket in (changed, heartbeat):  # first a new version, then an unchanged one
                started = time.perf_counter()
                await ns.register_broker(
                    client, addr, cluster_name="BenchCluster", broker_name=f"bench-broker-{b}",
                    broker_addr=f"10.77.{b // 250}.{b % 250 + 1}:10911", broker_id=0,
                    ha_server_addr=f"10.77.{b // 250}.{b % 250 + 1}:10912",
                    topic_configs=configs[b], data_version=version,
                )
                bucket.append(time.perf_counter() - started)
    return changed, heartbeat


# -- phase 2: lookups (runs in child processes) ---------------------------------------------------------


@dataclass
class LookupResult:
    count: int
    errors: int
    latencies: list[float]  # a sample, seconds
    cpu_seconds: float = 0.0  # this client process's CPU time during the run


class _LookupLoad(asyncio.Protocol):
    """One load-generating connection: keeps ``depth`` lookups in flight, back to back.

    A lean asyncio protocol built on the project's frame codec (``encode`` /
    ``FrameDecoder``) rather than :class:`RemotingClient`, so that the load
    generator, which shares the 2 cores with the server, costs as little
    CPU per request as possible. Every request is encoded and every response
    decoded in full, as a real client would. New requests triggered by one
    read are sent in one write.
    """

    def __init__(self, topics: list[str], depth: int, seed: int, result: LookupResult) -> None:
        self.topics = topics
        self.depth = depth
        self.rnd = random.Random(seed)
        self.result = result
        self.decoder = FrameDecoder()
        self.sent_at: dict[int, float] = {}
        self.next_opaque = 0
        self.end = float("inf")
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.warm: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.counting = False

    def _frame(self, now: float) -> bytes:
        self.next_opaque += 1
        self.sent_at[self.next_opaque] = now
        topic = self.topics[self.rnd.randrange(len(self.topics))]
        return encode(RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque=self.next_opaque,
                                      ext_fields={"topic": topic}))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def start(self, end: float) -> None:
        assert self.transport is not None
        self.end = end
        self.counting = True
        now = time.perf_counter()
        self.transport.write(b"".join(self._frame(now) for _ in range(self.depth)))

    def warm_up(self) -> None:
        assert self.transport is not None
        self.transport.write(self._frame(time.perf_counter()))

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        out: list[bytes] = []
        result = self.result
        for response in self.decoder.feed(data):
            started = self.sent_at.pop(response.opaque)
            if not self.counting:
                self.warm.set_result(None)
                continue
            result.count += 1
            if response.code != 0:
                result.errors += 1
            if result.count % 16 == 0:
                result.latencies.append(now - started)
            if now < self.end:
                out.append(self._frame(now))
        if out and self.transport is not None:
            self.transport.write(b"".join(out))
        elif self.counting and not self.sent_at and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"lookup connection lost: {exc}"))


async def _lookup_worker(port: int, connections: int, depth: int, topics: list[str], start_at: float,
                         duration: float) -> LookupResult:
    loop = asyncio.get_running_loop()
    result = LookupResult(0, 0, [])
    loads: list[_LookupLoad] = []
    for i in range(connections):  # connect and warm up before the clock starts
        _, load = await loop.create_connection(
            lambda i=i: _LookupLoad(topics, depth, i, result), "127.0.0.1", port  # type: ignore[misc]
        )
        loads.append(load)
        load.warm_up()
        await load.warm
    await asyncio.sleep(max(0.0, start_at - time.time()))
    end = time.perf_counter() + duration
    cpu_start = time.process_time()
    for load in loads:
        load.start(end)
    await asyncio.gather(*(load.done for load in loads))
    result.cpu_seconds = time.process_time() - cpu_start
    for load in loads:
        if load.transport is not None:
            load.transport.close()
    return result


def _lookup_process(args: tuple[int, int, int, list[str], float, float]) -> LookupResult:
    port, connections, depth, topics, start_at, duration = args
    return run_loop(_lookup_worker(port, connections, depth, topics, start_at, duration))


# -- driver --------------------------------------------------------------------------------------------------


def _lookup_phase(server_pid: int, port: int, topics: list[str], depth: int, procs: int,
                  duration: float) -> float:
    """Run the lookup load from ``procs`` processes, print its figures, return lookups/s."""
    per_proc = [CONNECTIONS // procs + (1 if i < CONNECTIONS % procs else 0) for i in range(procs)]
    start_at = time.time() + 3.0
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(procs) as pool:
        pending = pool.map_async(_lookup_process, [(port, n, depth, topics, start_at, duration) for n in per_proc])
        time.sleep(max(0.0, start_at - time.time()))
        cpu_before, wall_before = _cpu_seconds(server_pid), time.monotonic()
        busy_before, total_before = _machine_busy()
        time.sleep(duration)
        cpu_after, wall_after = _cpu_seconds(server_pid), time.monotonic()
        busy_after, total_after = _machine_busy()
        results = pending.get(timeout=duration + 60)
    total = sum(r.count for r in results)
    errors = sum(r.errors for r in results)
    samples = [s for r in results for s in r.latencies]
    rate = total / duration
    wall = wall_after - wall_before
    server_cpu = cpu_after - cpu_before
    client_cpu = sum(r.cpu_seconds for r in results)
    ncpu = os.cpu_count() or 1
    machine = (busy_after - busy_before) / max(1, total_after - total_before) * ncpu * wall
    others = max(0.0, machine - server_cpu - client_cpu * wall / duration)
    print(f"GET_ROUTEINFO_BY_TOPIC: {CONNECTIONS} connections x {depth} request(s) in flight each, "
          f"{procs} client process(es), {len(topics)} topics, {duration:.0f} s")
    print(f"  {rate:,.0f} lookups/s  ({total:,} lookups, {errors} errors)  "
          f"latency p50 {statistics.median(samples) * 1e3:.3f} ms  p99 {_pct(samples, 0.99) * 1e3:.3f} ms")
    per_lookup = server_cpu / max(1, rate * wall)
    print(f"  NameServer CPU {server_cpu / wall * 100:.0f}% of a core = {per_lookup * 1e6:.1f} us per lookup "
          f"(a whole core: ~{1 / per_lookup:,.0f} lookups/s); load generator "
          f"{client_cpu / duration * 100:.0f}% of a core ({client_cpu / max(1, total) * 1e6:.1f} us per lookup); "
          f"other processes on the machine: {others / wall * 100:.0f}% of a core")
    verdict = "meets" if rate >= TARGET_LOOKUPS_PER_SECOND else "BELOW"
    print(f"  {verdict} the target of {TARGET_LOOKUPS_PER_SECOND:,} lookups/s", flush=True)
    return rate


def run(short: bool) -> None:
    """Run both phases against a fresh NameServer process and print the figures.

    Environment: ``BENCH_NS_DEPTHS`` (comma-separated requests in flight per
    connection, default ``1,8``: strict request/response, then pipelined),
    ``BENCH_NS_PROCS`` (client processes, default 1).
    """
    brokers = 5 if short else 20
    rounds = 3 if short else 10
    duration = 2.0 if short else 10.0
    procs = int(os.environ.get("BENCH_NS_PROCS", "1"))
    depths = [int(d) for d in os.environ.get("BENCH_NS_DEPTHS", "1,8").split(",")]
    port, http_port = _free_port(), _free_port()
    argv = [sys.executable, "-m", "rocket.cli", "nameserver", "--host", "127.0.0.1", "--port", str(port),
            "--http-port", str(http_port), "--log-level", "WARNING"]
    server = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # The brokers' connection must stay open during the lookups (closing it would make the
    # NameServer drop them): keep their client on a loop in a thread.
    broker_loop = asyncio.new_event_loop()
    broker_thread = threading.Thread(target=broker_loop.run_forever, daemon=True)
    broker_thread.start()
    broker_client = RemotingClient()
    try:
        _wait_port(port, server)
        addr = f"127.0.0.1:{port}"
        print(f"NameServer pid {server.pid} on {addr}; {os.cpu_count()} CPUs; "
              f"{brokers} brokers x {TOPICS_PER_BROKER} topics", flush=True)
        changed, heartbeat = asyncio.run_coroutine_threadsafe(
            _register_phase(broker_client, addr, brokers, rounds), broker_loop
        ).result()
        print(f"REGISTER_BROKER, new data version (rebuild {TOPICS_PER_BROKER} queue datas), n={len(changed)}: "
              f"p50 {_pct(changed, 0.5) * 1e3:.3f} ms  p99 {_pct(changed, 0.99) * 1e3:.3f} ms")
        print(f"REGISTER_BROKER, unchanged data version (heartbeat), n={len(heartbeat)}: "
              f"p50 {_pct(heartbeat, 0.5) * 1e3:.3f} ms  p99 {_pct(heartbeat, 0.99) * 1e3:.3f} ms", flush=True)
        topics = [t for b in range(brokers) for t in _topics(b)]
        for depth in depths:
            _lookup_phase(server.pid, port, topics, depth, procs, duration)
    finally:
        asyncio.run_coroutine_threadsafe(broker_client.close(), broker_loop).result(10)
        broker_loop.call_soon_threadsafe(broker_loop.stop)
        broker_thread.join(5)
        broker_loop.close()
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
