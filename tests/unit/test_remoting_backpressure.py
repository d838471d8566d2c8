"""Backpressure of a server connection (``rocket.remoting.connection.FlowControl``), in-process.

A client writes many requests and reads nothing: the server must stop reading once its unsent
replies pass the high-water mark, or once ``max_pending_requests`` requests are being handled;
nothing is lost, the order of dispatch is the order of arrival, and other connections are served.
"""

from __future__ import annotations

import asyncio
import json
import struct

import pytest

from rocket.remoting import FlowControl, RemotingCommand, RemotingConnection, RemotingServer

pytestmark = pytest.mark.timeout(60)

SLOW, FAST, BIG = 1001, 1002, 1003


def _frame(code: int, opaque: int) -> bytes:
    header = json.dumps({"code": code, "language": "JAVA", "version": 409, "opaque": opaque, "flag": 0,
                         "extFields": {"i": str(opaque)}}).encode()
    return struct.pack(">iI", 4 + len(header), len(header)) + header


async def _read_replies(reader: asyncio.StreamReader, count: int) -> list[int]:
    opaques = []
    for _ in range(count):
        (length,) = struct.unpack(">i", await reader.readexactly(4))
        payload = await reader.readexactly(length)
        hlen = struct.unpack_from(">I", payload)[0] & 0xFFFFFF
        header = json.loads(payload[4 : 4 + hlen])
        assert header["flag"] & 1
        opaques.append(int(header["opaque"]))
    return opaques


def _conn(server: RemotingServer, exclude: set[RemotingConnection] = frozenset()) -> RemotingConnection:  # type: ignore[assignment]
    (conn,) = [c for c in server.connections if c not in exclude]
    return conn


def test_flow_control_validates() -> None:
    assert (FlowControl().high, FlowControl().low) == (64 * 1024, 32 * 1024)
    assert FlowControl(write_buffer_high_water_mark=16 * 1024).low == 16 * 1024
    for bad, words in ((dict(write_buffer_high_water_mark=-1), "water marks"),
                       (dict(max_pending_requests=0), "serverChannelMaxPendingRequests"),
                       (dict(write_buffer_high_water_mark=1000, write_buffer_low_water_mark=2000), "above")):
        with pytest.raises(ValueError, match=words):
            FlowControl(**bad)  # type: ignore[arg-type]


async def test_pending_requests_bound_stops_reading_and_loses_nothing() -> None:
    gate = asyncio.Event()
    order: list[int] = []

    async def slow(req: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        order.append(req.opaque)
        await gate.wait()
        return req.response(0)

    def fast(req: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return req.response(0, "fast")

    server = RemotingServer(host="127.0.0.1", flow_control=FlowControl(max_pending_requests=50))
    server.register(SLOW, slow)
    server.register(FAST, fast)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        count = 20_000
        writer.write(b"".join(_frame(SLOW, i + 1) for i in range(count)))
        await asyncio.sleep(0.5)
        conn = _conn(server)
        assert conn.pending_requests == 50
        assert conn.read_pauses >= 1
        # another connection is served while the first is held
        r2, w2 = await asyncio.open_connection("127.0.0.1", server.port)
        w2.write(_frame(FAST, 7))
        assert await asyncio.wait_for(_read_replies(r2, 1), 2.0) == [7]
        w2.close()
        gate.set()
        got = await asyncio.wait_for(_read_replies(reader, count), 30.0)
        assert sorted(got) == list(range(1, count + 1))
        assert order == list(range(1, count + 1))  # dispatched in arrival order
        assert conn.pending_requests == 0
        writer.close()
    finally:
        await server.stop()


async def test_unsent_replies_stay_near_the_high_water_mark() -> None:
    body = b"r" * 10_000

    def big(req: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return req.response(0, None, None, body)

    flow = FlowControl(write_buffer_high_water_mark=128 * 1024, write_buffer_low_water_mark=64 * 1024)
    server = RemotingServer(host="127.0.0.1", flow_control=flow)
    server.register(BIG, big)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        count = 5_000  # 50 MB of replies
        writer.write(b"".join(_frame(BIG, i + 1) for i in range(count)))
        conn = None
        peak = 0
        for _ in range(40):
            await asyncio.sleep(0.025)
            conn = conn or _conn(server)
            transport = conn._transport
            assert transport is not None
            peak = max(peak, transport.get_write_buffer_size())
        assert conn is not None and conn.read_pauses >= 1
        # below the mark when a turn starts, at most the mark's worth more in that turn, plus the
        # reply that crossed it: far below the 50 MB asked for
        assert peak <= 2 * flow.high + 2 * (len(body) + 200), peak
        got = await asyncio.wait_for(_read_replies(reader, count), 30.0)
        assert sorted(got) == list(range(1, count + 1))
        writer.close()
    finally:
        await server.stop()
