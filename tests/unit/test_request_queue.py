"""The send queue of a server connection (``rocket.remoting.connection.RequestQueue``), in-process.

A client writes more queued requests than the server handles in time, then one request of an
unqueued code: the server answers every request exactly once, the queued ones in order, those
past the capacity SYSTEM_BUSY ``[OVERLOAD]``, those that waited ``max_wait`` SYSTEM_BUSY
``[TIMEOUT_CLEAN_QUEUE]`` (Apache RocketMQ's ``BrokerFastFailure``), and the unqueued request
is answered without waiting for the queue.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from typing import Any

import pytest

from rocket.remoting import FlowControl, RemotingCommand, RemotingConnection, RemotingServer
from rocket.remoting.connection import OVERLOAD_REMARK, TIMEOUT_CLEAN_QUEUE_REMARK, RequestQueue

pytestmark = pytest.mark.timeout(60)

SEND, HEARTBEAT = 1001, 1002


def _frame(code: int, opaque: int) -> bytes:
    header = json.dumps({"code": code, "language": "JAVA", "version": 409, "opaque": opaque, "flag": 0}).encode()
    return struct.pack(">iI", 4 + len(header), len(header)) + header


async def _read_replies(reader: asyncio.StreamReader, count: int) -> list[dict[str, Any]]:
    headers = []
    for _ in range(count):
        (length,) = struct.unpack(">i", await reader.readexactly(4))
        payload = await reader.readexactly(length)
        hlen = struct.unpack_from(">I", payload)[0] & 0xFFFFFF
        headers.append(json.loads(payload[4 : 4 + hlen]))
    return headers


async def test_queue_fails_fast_and_other_codes_pass() -> None:
    handled: list[int] = []

    def send(req: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        time.sleep(0.002)  # a CPU-bound send: holds the loop
        handled.append(req.opaque)
        return req.response(0)

    def heartbeat(req: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return req.response(0, "beat")

    reasons: list[str] = []
    queue = RequestQueue("send", max_wait=lambda: 0.05, capacity=lambda: 100, on_busy=reasons.append)
    server = RemotingServer(host="127.0.0.1", flow_control=FlowControl(max_pending_requests=50))
    server.register(SEND, send, queue)
    server.register(HEARTBEAT, heartbeat)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        count = 300
        writer.write(b"".join(_frame(SEND, i + 1) for i in range(count)) + _frame(HEARTBEAT, 10_000))
        replies = await asyncio.wait_for(_read_replies(reader, count + 1), 30)
        writer.close()
    finally:
        await server.stop()
    by_opaque = {int(h["opaque"]): h for h in replies}
    assert sorted(by_opaque) == [*range(1, count + 1), 10_000]  # each answered once
    ok = [o for o in range(1, count + 1) if by_opaque[o]["code"] == 0]
    overload = [o for o in range(1, count + 1) if OVERLOAD_REMARK in by_opaque[o].get("remark", "")]
    timeout = [o for o in range(1, count + 1) if TIMEOUT_CLEAN_QUEUE_REMARK in by_opaque[o].get("remark", "")]
    assert ok and overload and timeout, (len(ok), len(overload), len(timeout))
    assert len(ok) + len(overload) + len(timeout) == count
    assert all(by_opaque[o]["code"] == 2 for o in overload + timeout)  # SYSTEM_BUSY
    assert handled == ok == sorted(ok)  # handled in arrival order, and only those
    assert "period in queue: " in by_opaque[timeout[0]]["remark"]
    assert len(reasons) == len(overload) + len(timeout) == queue.overloaded + queue.timed_out
    # the heartbeat did not wait for the queue: answered before the last queued send
    position = [int(h["opaque"]) for h in replies].index(10_000)
    assert position < count, position
    assert len(queue) == 0
