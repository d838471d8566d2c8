"""The floor: what one RocketMQ request/response costs in CPython with nothing else to do.

Two processes on loopback, each on uvloop (asyncio's loop when uvloop is missing):

* a **server**: a bare ``asyncio.Protocol`` that splits the byte stream into
  RocketMQ frames (``int32 length``, ``int32 header tag``, a JSON header, the
  body), decodes each header with ``orjson.loads``, and answers it with a
  SEND_MESSAGE-like response (JSON header with ``msgId``, ``queueId``,
  ``queueOffset``, the request's ``opaque``), all answers of one
  ``data_received`` in one ``transport.write``; no store, no checks, no metrics;
* a **client**, in one of two modes:

  - ``canned``: the cheapest possible load: ``CONCURRENCY`` requests kept in
    flight by re-sending one pre-encoded SEND_MESSAGE_V2 frame (1 KiB body,
    the header a Java client sends) for every response frame counted, no
    per-request Python objects;
  - ``coroutines``: the cheapest *realistic* client: ``CONCURRENCY`` coroutines,
    each building its header dict, ``orjson.dumps`` + frame, a future per
    request resolved by opaque, and ``await``-ing it, as any asyncio client must.

Each side reports its own CPU time (``time.process_time()``, user + system,
over the measured window) per request: the sum of both is the CPU one request
costs on this machine with client and server in Python, so ``2 cores / sum``
bounds the requests per second two cores can do at all, before any broker work.

Run: ``python -m bench floor [--short]`` (``make bench BENCH=floor``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
import struct
import time
from typing import Any

import orjson

CONCURRENCY = 64
BODY_SIZE = 1024
_PREFIX = struct.Struct(">iI")
_INT = struct.Struct(">i")

#: The ext fields of a SEND_MESSAGE_V2 (310) request as Apache's Java client sends them.
SEND_V2_EXT = {
    "a": "bench-producer", "b": "bench", "c": "TBW102", "d": "4", "e": "3", "f": "0",
    "g": "1763793600000", "h": "0",
    "i": "UNIQ_KEY\x017F0000010001B4AAC6DC1F7F2C0000\x02WAIT\x01true\x02TAGS\x01bench\x02",
    "j": "0", "k": "false", "l": "16", "m": "false", "n": "broker-a",
}


def _frame(header: dict[str, Any], body: bytes) -> bytes:
    """One JSON-header frame: ``int32 length, int32 tag (0 << 24 | header length), header, body``."""
    h = orjson.dumps(header)
    return _PREFIX.pack(4 + len(h) + len(body), len(h)) + h + body


def _request_header(opaque: int) -> dict[str, Any]:
    return {"code": 310, "extFields": SEND_V2_EXT, "flag": 0, "language": "JAVA", "opaque": opaque,
            "serializeTypeCurrentRPC": "JSON", "version": 453}


class FloorServer(asyncio.Protocol):
    """Decode frames, answer each with a canned SEND_MESSAGE response (one write per read)."""

    def __init__(self, stats: list[int]) -> None:
        self.buf = bytearray()
        self.stats = stats  # [requests answered]
        self.offset = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, end = 0, len(buf)
        out = []
        while end - pos >= 8:
            length, tag = _PREFIX.unpack_from(buf, pos)
            if end - pos - 4 < length:
                break
            hlen = tag & 0xFFFFFF
            header = orjson.loads(bytes(buf[pos + 8 : pos + 8 + hlen]))
            _body = bytes(buf[pos + 8 + hlen : pos + 4 + length])  # the copy a real server makes
            self.offset += 1
            ext = header["extFields"]
            out.append(_frame({"code": 0, "extFields": {"msgId": "7F00000100002A9F0000000000000000",
                                                        "queueId": ext["e"], "queueOffset": str(self.offset),
                                                        "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"},
                               "flag": 1, "language": "JAVA", "opaque": header["opaque"],
                               "serializeTypeCurrentRPC": "JSON", "version": 453}, b""))
            pos += 4 + length
        del buf[:pos]
        if out:
            self.stats[0] += len(out)
            self.transport.write(b"".join(out))


def _loop_run(main: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(main)
    except ImportError:
        return asyncio.run(main)


def _server_proc(port_q: Any, stop_q: Any) -> tuple[int, float]:
    """Serve until told to stop; answer (requests, CPU seconds) between the 'start' and 'stop' marks."""

    async def main() -> tuple[int, float]:
        stats = [0]
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: FloorServer(stats), "127.0.0.1", 0)
        port_q.put(server.sockets[0].getsockname()[1])
        await loop.run_in_executor(None, stop_q.get)  # "start"
        n0, c0 = stats[0], time.process_time()
        await loop.run_in_executor(None, stop_q.get)  # "stop"
        n1, c1 = stats[0], time.process_time()
        server.close()
        return n1 - n0, c1 - c0

    return _loop_run(main())  # type: ignore[no-any-return]


class _CannedClient(asyncio.Protocol):
    def __init__(self, frame: bytes, done: asyncio.Future[None]) -> None:
        self.frame = frame
        self.pending = b""
        self.count = 0
        self.done = done

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.transport.write(self.frame * CONCURRENCY)

    def data_received(self, data: bytes) -> None:
        buf = self.pending + data if self.pending else data
        pos, end, n = 0, len(buf), 0
        while end - pos >= 4:
            (length,) = _INT.unpack_from(buf, pos)
            if end - pos - 4 < length:
                break
            pos += 4 + length
            n += 1
        self.pending = buf[pos:]
        self.count += n
        if n:
            self.transport.write(self.frame * n)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


class _CoroutineClient(asyncio.Protocol):
    """Futures by opaque, as any request/response client keeps them."""

    def __init__(self) -> None:
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.buf = b""
        self.out: list[bytes] = []
        self.scheduled = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.loop = asyncio.get_running_loop()

    def send(self, data: bytes) -> None:  # coalesced: one write per loop turn
        self.out.append(data)
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        self.transport.write(b"".join(self.out))
        self.out.clear()

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        pos, end = 0, len(buf)
        while end - pos >= 8:
            length, tag = _PREFIX.unpack_from(buf, pos)
            if end - pos - 4 < length:
                break
            header = orjson.loads(buf[pos + 8 : pos + 8 + (tag & 0xFFFFFF)])
            fut = self.pending.pop(header["opaque"], None)
            if fut is not None and not fut.done():
                fut.set_result(header)
            pos += 4 + length
        self.buf = buf[pos:]


def _client_proc(port: int, mode: str, warmup: float, duration: float, marks: Any) -> tuple[int, float]:
    """Drive the server for warm-up + duration; answer (requests, CPU seconds) of the measured window."""

    async def main() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        body = bytes(BODY_SIZE)
        if mode == "canned":
            done: asyncio.Future[None] = loop.create_future()
            transport, proto = await loop.create_connection(
                lambda: _CannedClient(_frame(_request_header(1), body), done), "127.0.0.1", port)
            await asyncio.sleep(warmup)
            marks.put("start")
            n0, c0 = proto.count, time.process_time()
            await asyncio.sleep(duration)
            n1, c1 = proto.count, time.process_time()
            marks.put("stop")
            transport.close()
            return n1 - n0, c1 - c0
        transport, cproto = await loop.create_connection(_CoroutineClient, "127.0.0.1", port)
        counter = [0]
        opaque = [0]
        stop = [False]

        async def one() -> None:
            while not stop[0]:
                opaque[0] += 1
                op = opaque[0]
                fut: asyncio.Future[dict[str, Any]] = loop.create_future()
                cproto.pending[op] = fut
                cproto.send(_frame(_request_header(op), body))
                await fut
                counter[0] += 1

        tasks = [loop.create_task(one()) for _ in range(CONCURRENCY)]
        await asyncio.sleep(warmup)
        marks.put("start")
        n0, c0 = counter[0], time.process_time()
        await asyncio.sleep(duration)
        n1, c1 = counter[0], time.process_time()
        marks.put("stop")
        stop[0] = True
        await asyncio.gather(*tasks)
        transport.close()
        return n1 - n0, c1 - c0

    return _loop_run(main())  # type: ignore[no-any-return]


def run(short: bool) -> None:
    """Measure both client modes against the bare server and print CPU µs per request."""
    warmup, duration = (0.5, 2.0) if short else (2.0, 10.0)
    ctx = multiprocessing.get_context("spawn")
    load = os.getloadavg()[0]
    try:
        import uvloop

        loop_name = f"uvloop {uvloop.__version__}"
    except ImportError:
        loop_name = "asyncio"
    print(f"bare Protocol server + client on loopback, {loop_name}, {BODY_SIZE}-byte bodies, "
          f"{CONCURRENCY} requests in flight, {os.cpu_count()} CPUs, load average {load:.1f} at start", flush=True)
    with ctx.Manager() as manager, concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        for mode in ("canned", "coroutines"):
            port_q, marks = manager.Queue(), manager.Queue()
            server = pool.submit(_server_proc, port_q, marks)
            port = port_q.get(timeout=30)
            client = pool.submit(_client_proc, port, mode, warmup, duration, marks)
            cn, ccpu = client.result()
            sn, scpu = server.result()
            s_us = scpu / sn * 1e6 if sn else float("nan")
            c_us = ccpu / cn * 1e6 if cn else float("nan")
            print(f"[{mode}] {cn / duration:,.0f} requests/s; CPU per request: server {s_us:.1f} us, "
                  f"client {c_us:.1f} us, sum {s_us + c_us:.1f} us -> at most "
                  f"{2e6 / (s_us + c_us):,.0f} requests/s on 2 fully used cores "
                  f"(server alone: {1e6 / s_us:,.0f}/s per core)", flush=True)
    print(f"load average at end {os.getloadavg()[0]:.1f}")
