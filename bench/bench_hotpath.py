"""Broker CPU per message on the hot paths, in one process, without sockets.

A NameServer and a broker (``BrokerController``) run in this process; request
frames, encoded as our client encodes them, are fed straight to a server
:class:`~rocket.remoting.connection.RemotingConnection` whose transport only
counts the answers. So the figures are the broker's own work per message
(decode, checks, CommitLog append, dispatch to ConsumeQueue and IndexFile,
answer), without the client, the kernel's loopback or the scheduler of a
shared machine in them (``time.process_time``: every thread of the process,
the CommitLog writer included). Phases, for ASYNC_FLUSH and SYNC_FLUSH:

1. **single**: SEND_MESSAGE_V2 of 1 KiB with UNIQ_KEY and WAIT, 64 per read
   (as 64 producers in flight would arrive), the next 64 once all are answered;
2. **batch**: SEND_BATCH_MESSAGE of 32 x 1 KiB, 16 per read;
3. **pull**: PULL_MESSAGE of 32 from every queue until everything was read.

Run: ``python -m bench hotpath [--short]`` (``make bench BENCH=hotpath``); the batch phase
alone, for instruction counts: ``python -m bench.bench_hotpath --batches N --build M --shape
java|ours`` (see :func:`main`). The
per-message CPU of ``make bench BENCH=broker`` includes syscalls and, on a
loaded machine, far more wake-ups per message; this one moves only with the
code (and the CPU's speed), so it is the one to compare commits with.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rocket.message import Message, decode_properties, encode_batch, encode_properties, new_uniq_id
from rocket.remoting import RemotingCommand
from rocket.remoting.command import encode
from rocket.remoting.connection import FlowControl, RemotingConnection

BODY = bytes(i % 251 for i in range(1024))
QUEUES = 8
TOPIC = "hotpath"


class _CountingTransport:
    """A transport that counts the answer frames written to it and wakes a waiter at a target."""

    def __init__(self) -> None:
        self.answers = 0
        self.target = 0
        self.waiter: asyncio.Future[None] | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 50000) if name in ("peername", "sockname") else default

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            pos += 4 + int.from_bytes(view[pos:pos + 4], "big")
            self.answers += 1
        if self.waiter is not None and self.answers >= self.target and not self.waiter.done():
            self.waiter.set_result(None)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def _send_header(queue_id: int, properties: str, batch: bool) -> dict[str, str]:
    return {"a": "bench-hotpath", "b": TOPIC, "c": "TBW102", "d": str(QUEUES), "e": str(queue_id), "f": "0",
            "g": str(int(time.time() * 1000)), "h": "0", "i": properties, "j": "0", "k": "false",
            "m": "true" if batch else "false"}


_UNIQ_PREFIX = new_uniq_id()[:20]
_uniq_count = itertools.count()


def _uniq_id() -> str:
    """A UNIQ_KEY as ``MessageClientIDSetter`` makes them (``new_uniq_id``), for a producer sending
    16 messages per millisecond: the same keys whatever the speed of the run (the IndexFile's key
    hashing caches by prefix, so the keys' time digits change its work)."""
    n = next(_uniq_count)
    return f"{_UNIQ_PREFIX}{n // 16:08X}{n & 0xFFFF:04X}"


def _batch_frames_props(shape: str) -> tuple[str, list[str]]:
    """The batch header's properties and a function of the items' properties for ``shape``:
    ``"ours"`` (our client: WAIT on the batch, UNIQ_KEY on each item) or ``"java"`` (Apache's
    Java client, ``DefaultMQProducer.batch`` of ``new Message(topic, "bench", body)``: the batch
    carries its own UNIQ_KEY and WAIT, each item UNIQ_KEY, WAIT and TAGS, in the order of
    Java's ``HashMap``)."""
    if shape == "java":
        return encode_properties({"UNIQ_KEY": _uniq_id(), "WAIT": "true"}), [
            encode_properties({"UNIQ_KEY": _uniq_id(), "WAIT": "true", "TAGS": "bench"}) for _ in range(32)]
    return encode_properties({"WAIT": "true"}), [encode_properties({"UNIQ_KEY": _uniq_id()}) for _ in range(32)]


class _Hotpath:
    """A NameServer and a broker in this process and a server connection to feed frames to
    (:meth:`start`, :meth:`stop`)."""

    def __init__(self, flush: str) -> None:
        self.flush = flush
        self.opaque = 0
        self.transport = _CountingTransport()

    async def start(self, quiet: bool = False) -> None:
        """Start both; ``quiet``: no re-registration with the NameServer while measuring (its
        periodic work would count, in proportion to the run's duration, not its messages), and no
        fast failure of sends waiting in the send queue (under valgrind the wait exceeds
        ``waitTimeMillsInSendQueue`` and sends would be answered SYSTEM_BUSY, not stored)."""
        from rocket.broker.config import BrokerConfig
        from rocket.broker.controller import BrokerController
        from rocket.local import find_free_base_port, ports_for
        from rocket.nameserver.config import NameServerConfig
        from rocket.nameserver.server import NameServer
        from rocket.store.api import FlushDiskType

        self.root = Path(tempfile.mkdtemp(prefix="rocket-bench-hotpath-"))
        self.ns = NameServer(NameServerConfig(host="127.0.0.1", port=0, http_port=0))
        await self.ns.start()
        port, _http = ports_for(find_free_base_port())["broker-a"]  # a free listen port with free VIP and HA ports
        cfg = BrokerConfig(broker_name="hotpath", listen_port=port, namesrv_addr=f"127.0.0.1:{self.ns.port}",
                           store_path_root_dir=str(self.root), bind_address="127.0.0.1", vip_channel_enable=False,
                           flush_disk_type=FlushDiskType(self.flush), http_port=0,
                           wait_time_mills_in_send_queue=3_600_000 if quiet else 200)
        self.broker = broker = BrokerController(cfg)
        await broker.start()
        if quiet:
            async def registered() -> None:
                return None
            broker.register_broker_all = registered  # type: ignore[method-assign]
        broker.metadata.topic_configs.put(broker.new_topic_config(TOPIC, read_queue_nums=QUEUES,
                                                                  write_queue_nums=QUEUES))
        assert broker.remoting is not None
        self.conn = RemotingConnection(broker.remoting.processors, role="server", flow_control=FlowControl())
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]

    async def stop(self) -> None:
        """Stop both and remove the store."""
        await self.broker.shutdown()
        await self.ns.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def frame(self, code: int, ext: dict[str, str], body: bytes) -> bytes:
        """One request frame (the next opaque)."""
        self.opaque += 1
        return encode(RemotingCommand(code=code, ext_fields=ext, body=body, opaque=self.opaque))

    def batch_frames(self, count: int, shape: str) -> list[bytes]:
        """``count`` SEND_BATCH_MESSAGE frames of 32 x 1 KiB with the properties of ``shape``."""
        out = []
        for k in range(count):
            batch_props, item_props = _batch_frames_props(shape)
            out.append(self.frame(320, _send_header(k % QUEUES, batch_props, True), encode_batch(
                [Message(TOPIC, BODY, 0, decode_properties(p)) for p in item_props])))
        return out

    async def feed(self, frames: list[bytes], per_read: int) -> None:
        """Feed ``frames``, ``per_read`` at a time, each time until all of them are answered."""
        loop = asyncio.get_running_loop()
        transport = self.transport
        for i in range(0, len(frames), per_read):
            chunk = frames[i:i + per_read]
            transport.target = transport.answers + len(chunk)
            transport.waiter = loop.create_future()
            self.conn.data_received(b"".join(chunk))
            if transport.answers < transport.target:
                await transport.waiter
            else:  # answered inside the read: the next read comes in a later loop turn, as from a socket
                await asyncio.sleep(0)


async def _run_mode(flush: str, singles: int, batches: int) -> dict[str, float]:
    hot = _Hotpath(flush)
    await hot.start()
    broker = hot.broker
    frame = hot.frame
    feed = hot.feed
    figures: dict[str, float] = {}
    try:
        async def phase(name: str, frames: list[bytes], per_read: int, messages: int) -> None:
            await asyncio.sleep(0.2)
            cpu0, wall0 = time.process_time(), time.perf_counter()
            await feed(frames, per_read)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            figures[name] = cpu / messages * 1e6
            print(f"[{flush}] {name:6} {messages:>7,} msgs: broker CPU {cpu / messages * 1e6:6.2f} us/msg, "
                  f"{messages / wall:>9,.0f} msgs/s in-process, load average {os.getloadavg()[0]:.1f}", flush=True)

        await feed([frame(310, _send_header(0, f"UNIQ_KEY\x01{new_uniq_id()}\x02WAIT\x01true", False), BODY)], 1)
        await phase("single", [frame(310, _send_header(k % QUEUES, f"UNIQ_KEY\x01{new_uniq_id()}\x02WAIT\x01true",
                                                        False), BODY) for k in range(singles)], 64, singles)
        await phase("batch", hot.batch_frames(batches, "ours"), 16, batches * 32)
        stored = {q: broker.store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES)}
        pulls = [
            frame(11, {"consumerGroup": "bench-hotpath", "topic": TOPIC, "queueId": str(q), "queueOffset": str(off),
                       "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                       "subscription": "*", "expressionType": "TAG", "subVersion": "0"}, b"")
            for q in range(QUEUES) for off in range(0, stored[q], 32)
        ]
        await phase("pull", pulls, 16, sum(stored.values()))
    finally:
        await hot.stop()
    return figures


def run(short: bool) -> None:
    """Both flush modes; prints broker CPU microseconds per message for each phase."""
    from rocket.runtime import run as run_loop

    singles, batches = (2_000, 100) if short else (20_000, 600)
    print(f"in-process broker, frames fed to a RemotingConnection: {singles:,} single sends, {batches} batches "
          f"of 32, then pulls of 32; 1 KiB bodies, {QUEUES} queues", flush=True)
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        run_loop(_run_mode(flush, singles, batches))


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.bench_hotpath --batches N --build M [--shape java|ours] [--flush ...]``: only
    the batch phase, for instruction counts: ``valgrind --tool=callgrind`` of two runs that build
    the same M batches and feed different N; the difference of their counts divided by the
    difference in messages is the broker's instructions per batched message (the broker does not
    re-register with the NameServer meanwhile: that periodic work would count by duration).
    ``--phase single`` does the same with N single sends (SEND_MESSAGE_V2 of 1 KiB with UNIQ_KEY and
    WAIT, 64 per read, as in :func:`run`) out of M built: instructions per single send."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.bench_hotpath")
    parser.add_argument("--batches", type=int, default=100,
                        help="batches (or single sends, with --phase single) to feed")
    parser.add_argument("--build", type=int, default=0,
                        help="batches to build (at least --batches): the same client-side work in runs that feed "
                             "different numbers, so that their difference is the broker's work alone")
    parser.add_argument("--shape", choices=("ours", "java"), default="ours")
    parser.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH")
    parser.add_argument("--phase", choices=("batch", "single"), default="batch")
    args = parser.parse_args(argv)
    try:
        import uvloop
        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    hot = _Hotpath(args.flush)
    loop.run_until_complete(hot.start(quiet=True))
    try:
        loop.run_until_complete(hot.feed([hot.frame(310, _send_header(
            0, f"UNIQ_KEY\x01{new_uniq_id()}\x02WAIT\x01true", False), BODY)], 1))
        single = args.phase == "single"
        per_frame, per_read = (1, 64) if single else (32, 16)
        if single:
            def singles(n: int) -> list[bytes]:
                return [hot.frame(310, _send_header(k % QUEUES, f"UNIQ_KEY\x01{new_uniq_id()}\x02WAIT\x01true", False),
                                  BODY) for k in range(n)]
            loop.run_until_complete(hot.feed(singles(256), per_read))  # (caches warm)
            frames = singles(max(args.batches, args.build))[:args.batches]
        else:
            loop.run_until_complete(hot.feed(hot.batch_frames(2, args.shape), per_read))  # (caches warm)
            frames = hot.batch_frames(max(args.batches, args.build), args.shape)[:args.batches]
        cpu = time.process_time()
        before = hot.broker.store.stats.put_messages
        loop.run_until_complete(hot.feed(frames, per_read))
        cpu = time.process_time() - cpu
        stored = hot.broker.store.stats.put_messages - before
        if stored != args.batches * per_frame:
            raise SystemExit(f"{stored} messages stored, not {args.batches * per_frame}: some sends were refused")
        what = "single sends" if single else f"batches of 32 ({args.shape})"
        print(f"[{args.flush}] {args.batches} {what}: {cpu / args.batches / per_frame * 1e6:.2f} us "
              f"of CPU per message", flush=True)
    finally:
        loop.run_until_complete(hot.stop())
        loop.close()


if __name__ == "__main__":
    main()
