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

from rocket.message import Message, encode_batch, encode_properties, new_uniq_id
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


async def _run_mode(flush: str, singles: int, batches: int) -> dict[str, float]:
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
                else:  # answered inside the read: the next read comes in a later loop turn, as from a socket
                    await asyncio.sleep(0)

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
        batch_props = encode_properties({"WAIT": "true"})
        batch_frames = [
            frame(320, _send_header(k % QUEUES, batch_props, True),
                  encode_batch([Message(TOPIC, BODY, 0, {"UNIQ_KEY": new_uniq_id()}) for _ in range(32)]))
            for k in range(batches)
        ]
        await phase("batch", batch_frames, 16, batches * 32)
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
