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

Run: ``python -m bench hotpath [--short]`` (``make bench BENCH=hotpath``). The
per-message CPU of ``make bench BENCH=broker`` includes syscalls and, on a
loaded machine, far more wake-ups per message; this one moves only with the
code (and the CPU's speed), so it is the one to compare commits with.
"""

from __future__ import annotations

import asyncio
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


def _batch_frames_props(shape: str) -> tuple[str, list[str]]:
    """The batch header's properties and a function of the items' properties for ``shape``:
    ``"ours"`` (our client: WAIT on the batch, UNIQ_KEY on each item) or ``"java"`` (Apache's
    Java client, ``DefaultMQProducer.batch`` of ``new Message(topic, "bench", body)``: the batch
    carries its own UNIQ_KEY and WAIT, each item UNIQ_KEY, WAIT and TAGS, in the order of
    Java's ``HashMap``)."""
    if shape == "java":
        return encode_properties({"UNIQ_KEY": new_uniq_id(), "WAIT": "true"}), [
            encode_properties({"UNIQ_KEY": new_uniq_id(), "WAIT": "true", "TAGS": "bench"}) for _ in range(32)]
    return encode_properties({"WAIT": "true"}), [encode_properties({"UNIQ_KEY": new_uniq_id()}) for _ in range(32)]


async def _run_mode(flush: str, singles: int, batches: int, with_pulls: bool = True,
                    shape: str = "ours", build: int = 0) -> dict[str, float]:
    from rocket.broker.config import BrokerConfig
    from rocket.broker.controller import BrokerController
    from rocket.local import find_free_base_port, ports_for
    from rocket.nameserver.config import NameServerConfig
    from rocket.nameserver.server import NameServer
    from rocket.store.api import FlushDiskType

    root = Path(tempfile.mkdtemp(prefix="rocket-bench-hotpath-"))
    ns = NameServer(NameServerConfig(host="127.0.0.1", port=0, http_port=0))
    await ns.start()
    port, _http = ports_for(find_free_base_port())["broker-a"]  # a free listen port with free VIP and HA ports
    cfg = BrokerConfig(broker_name="hotpath", listen_port=port, namesrv_addr=f"127.0.0.1:{ns.port}",
                       store_path_root_dir=str(root), bind_address="127.0.0.1", vip_channel_enable=False,
                       flush_disk_type=FlushDiskType(flush), http_port=0)
    broker = BrokerController(cfg)
    await broker.start()
    figures: dict[str, float] = {}
    try:
        broker.metadata.topic_configs.put(broker.new_topic_config(TOPIC, read_queue_nums=QUEUES,
                                                                  write_queue_nums=QUEUES))
        assert broker.remoting is not None
        conn = RemotingConnection(broker.remoting.processors, role="server", flow_control=FlowControl())
        transport = _CountingTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        opaque = 0

        def frame(code: int, ext: dict[str, str], body: bytes) -> bytes:
            nonlocal opaque
            opaque += 1
            return encode(RemotingCommand(code=code, ext_fields=ext, body=body, opaque=opaque))

        async def feed(frames: list[bytes], per_read: int) -> None:
            loop = asyncio.get_running_loop()
            for i in range(0, len(frames), per_read):
                chunk = frames[i:i + per_read]
                transport.target = transport.answers + len(chunk)
                transport.waiter = loop.create_future()
                conn.data_received(b"".join(chunk))
                if transport.answers < transport.target:
                    await transport.waiter

        async def phase(name: str, frames: list[bytes], per_read: int, messages: int) -> None:
            await asyncio.sleep(0.2)
            cpu0, wall0 = time.process_time(), time.perf_counter()
            await feed(frames, per_read)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            figures[name] = cpu / messages * 1e6
            print(f"[{flush}] {name:6} {messages:>7,} msgs: broker CPU {cpu / messages * 1e6:6.2f} us/msg, "
                  f"{messages / wall:>9,.0f} msgs/s in-process, load average {os.getloadavg()[0]:.1f}", flush=True)

        await feed([frame(310, _send_header(0, f"UNIQ_KEY\x01{new_uniq_id()}\x02WAIT\x01true", False), BODY)], 1)
        if singles:
            await phase("single", [frame(310, _send_header(k % QUEUES, f"UNIQ_KEY\x01{new_uniq_id()}\x02WAIT\x01true",
                                                        False), BODY) for k in range(singles)], 64, singles)
        batch_frames = []
        for k in range(max(batches, build)):  # (build: the same client-side work for runs that feed fewer)
            batch_props, item_props = _batch_frames_props(shape)
            batch_frames.append(frame(320, _send_header(k % QUEUES, batch_props, True), encode_batch(
                [Message(TOPIC, BODY, 0, decode_properties(p)) for p in item_props])))
        if batches:
            await phase("batch", batch_frames[:batches], 16, batches * 32)
        if not with_pulls:
            return figures
        stored = {q: broker.store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES)}
        pulls = [
            frame(11, {"consumerGroup": "bench-hotpath", "topic": TOPIC, "queueId": str(q), "queueOffset": str(off),
                       "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                       "subscription": "*", "expressionType": "TAG", "subVersion": "0"}, b"")
            for q in range(QUEUES) for off in range(0, stored[q], 32)
        ]
        await phase("pull", pulls, 16, sum(stored.values()))
    finally:
        await broker.shutdown()
        await ns.stop()
        shutil.rmtree(root, ignore_errors=True)
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
    the batch phase (no single sends, no pulls), for instruction counts under
    ``valgrind --tool=callgrind``: the difference between two runs with different ``N``, divided by
    the difference in messages, is the broker's instructions per batched message."""
    import argparse

    from rocket.runtime import run as run_loop

    parser = argparse.ArgumentParser(prog="python -m bench.bench_hotpath")
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--build", type=int, default=0,
                        help="batches to build (at least --batches): equal client work for runs compared")
    parser.add_argument("--shape", choices=("ours", "java"), default="ours")
    parser.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH")
    args = parser.parse_args(argv)
    run_loop(_run_mode(args.flush, 0, args.batches, with_pulls=False, shape=args.shape, build=args.build))


if __name__ == "__main__":
    main()
