"""The remoting server and client over real loopback TCP, in process."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocket.remoting import (
    FrameDecoder,
    RemotingClient,
    RemotingCommand,
    RemotingConnectError,
    RemotingConnection,
    RemotingServer,
    RemotingTimeoutError,
    SerializeType,
    encode,
)
from rocket.remoting.command import HeaderFieldError
from tests.support import eventually

pytestmark = pytest.mark.timeout(60)

ECHO, SLOW, FAIL, REQUIRE, CALLBACK, NEVER, RECORD = 1000, 1001, 1002, 1003, 1004, 1005, 1006


class Harness:
    """A RemotingServer with a few test handlers."""

    def __init__(self, max_frame_size: int = 16 * 1024 * 1024) -> None:
        self.server = RemotingServer(host="127.0.0.1", port=0, max_frame_size=max_frame_size, name="test")
        self.release = asyncio.Event()
        self.recorded: list[RemotingCommand] = []
        self.closed: list[RemotingConnection] = []
        self.server.register(ECHO, self.echo)
        self.server.register(SLOW, self.slow)
        self.server.register(FAIL, self.fail)
        self.server.register(REQUIRE, self.require)
        self.server.register(CALLBACK, self.callback)
        self.server.register(NEVER, self.never)
        self.server.register(RECORD, self.record)
        self.server.on_connection_closed.append(self.closed.append)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    @staticmethod
    def echo(request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return request.response(ext_fields=request.ext_fields, body=request.body, remark="echo")

    async def slow(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        await self.release.wait()
        return request.response(remark="slow")

    @staticmethod
    def fail(request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        raise RuntimeError("boom")

    @staticmethod
    def require(request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return request.response(ext_fields={"got": request.require("needed")})

    @staticmethod
    async def callback(request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        # Ask the client something over the same connection, then answer with its reply.
        reply = await conn.request(RemotingCommand(code=40, ext_fields={"consumerGroup": "g"}), timeout=3)
        return request.response(ext_fields={"clientSaid": reply.remark or ""})

    @staticmethod
    async def never(request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand | None:
        await asyncio.Event().wait()
        return None

    def record(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        self.recorded.append(request)
        return request.response(remark="recorded")


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = Harness()
    await h.server.start()
    yield h
    h.release.set()
    await h.server.stop()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient()
    yield c
    await c.close()


async def read_frame(reader: asyncio.StreamReader) -> RemotingCommand:
    decoder = FrameDecoder()
    while True:
        data = await asyncio.wait_for(reader.read(65536), 5)
        assert data, "connection closed before a whole frame arrived"
        commands = decoder.feed(data)
        if commands:
            return commands[0]


# -- request / response ------------------------------------------------------------------------


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
async def test_echo_in_both_serializations(harness: Harness, client: RemotingClient, serialize_type: int) -> None:
    request = RemotingCommand(code=ECHO, ext_fields={"k": "v"}, body=b"\x00body", serialize_type=serialize_type)
    response = await client.invoke(harness.addr, request)
    assert response.is_response and response.code == 0 and response.remark == "echo"
    assert response.ext_fields == {"k": "v"} and response.body == b"\x00body"
    assert response.serialize_type == serialize_type
    assert response.opaque == request.opaque


async def test_slow_async_handler_does_not_block_fast_one(harness: Harness, client: RemotingClient) -> None:
    slow = asyncio.ensure_future(client.invoke(harness.addr, RemotingCommand(code=SLOW), timeout=5))
    await asyncio.sleep(0)  # let the slow request go out first on the shared connection
    fast = await client.invoke(harness.addr, RemotingCommand(code=ECHO, ext_fields={"n": "1"}), timeout=5)
    assert fast.ext_fields == {"n": "1"}
    assert not slow.done()  # answered out of order: the slow one is still pending
    harness.release.set()
    assert (await slow).remark == "slow"


async def test_many_concurrent_requests_are_matched_by_opaque(harness: Harness, client: RemotingClient) -> None:
    requests = [RemotingCommand(code=ECHO, ext_fields={"i": str(i)}) for i in range(200)]
    responses = await asyncio.gather(*(client.invoke(harness.addr, r) for r in requests))
    assert [r.ext_fields["i"] for r in responses] == [str(i) for i in range(200)]


async def test_unknown_code_answers_3(harness: Harness, client: RemotingClient) -> None:
    response = await client.invoke(harness.addr, RemotingCommand(code=999))
    assert response.code == 3 and response.remark == " request type 999 not supported"


async def test_handler_errors_answer_1(harness: Harness, client: RemotingClient) -> None:
    response = await client.invoke(harness.addr, RemotingCommand(code=FAIL))
    assert response.code == 1 and "boom" in (response.remark or "")
    response = await client.invoke(harness.addr, RemotingCommand(code=REQUIRE))
    assert response.code == 1 and response.remark == str(HeaderFieldError("the custom field <needed> is null"))
    response = await client.invoke(harness.addr, RemotingCommand(code=REQUIRE, ext_fields={"needed": "x"}))
    assert response.code == 0 and response.ext_fields == {"got": "x"}


async def test_oneway_is_handled_but_not_answered(harness: Harness) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", harness.server.port)
    try:
        writer.write(encode(RemotingCommand(code=RECORD, opaque=11, flag=2)))
        writer.write(encode(RemotingCommand(code=ECHO, opaque=12)))
        await writer.drain()
        first = await read_frame(reader)
        assert first.opaque == 12  # nothing came back for opaque 11
        assert [r.opaque for r in harness.recorded] == [11]
    finally:
        writer.close()


async def test_client_oneway(harness: Harness, client: RemotingClient) -> None:
    await client.invoke_oneway(harness.addr, RemotingCommand(code=RECORD))
    await client.invoke(harness.addr, RemotingCommand(code=ECHO))  # ordered after the oneway on the connection
    assert len(harness.recorded) == 1 and harness.recorded[0].is_oneway


async def test_request_timeout(harness: Harness, client: RemotingClient) -> None:
    with pytest.raises(RemotingTimeoutError):
        await client.invoke(harness.addr, RemotingCommand(code=NEVER), timeout=0.2)
    # The connection stays usable.
    assert (await client.invoke(harness.addr, RemotingCommand(code=ECHO))).code == 0


async def test_connection_closed_under_pending_request(harness: Harness, client: RemotingClient) -> None:
    pending = asyncio.ensure_future(client.invoke(harness.addr, RemotingCommand(code=NEVER), timeout=5))
    await eventually(lambda: bool(harness.server.connections), 5, interval=0.01, what="a server connection")
    for conn in list(harness.server.connections):
        conn.abort()
    with pytest.raises(RemotingConnectError):
        await pending
    assert (await client.invoke(harness.addr, RemotingCommand(code=ECHO))).code == 0  # reconnects


async def test_connect_error() -> None:
    from tests.support import free_port

    c = RemotingClient(connect_timeout=1)
    with pytest.raises(RemotingConnectError):
        await c.invoke(f"127.0.0.1:{free_port()}", RemotingCommand(code=ECHO))
    await c.close()


async def test_server_initiated_request_handled_by_client_processors(harness: Harness) -> None:
    seen: list[RemotingCommand] = []

    def notify(request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        seen.append(request)
        return request.response(remark=f"client got {request.ext_fields['consumerGroup']}")

    c = RemotingClient()
    c.register(40, notify)
    try:
        response = await c.invoke(harness.addr, RemotingCommand(code=CALLBACK))
        assert response.ext_fields == {"clientSaid": "client got g"}
        assert len(seen) == 1 and not seen[0].is_response
    finally:
        await c.close()


async def test_connection_closed_callback(harness: Harness, client: RemotingClient) -> None:
    await client.invoke(harness.addr, RemotingCommand(code=ECHO))
    conn = next(iter(harness.server.connections))
    conn.attributes["who"] = "me"
    await client.close()
    await eventually(lambda: bool(harness.closed), 5, interval=0.01, what="the connection to close")
    assert harness.closed[0].attributes == {"who": "me"}
    assert not harness.server.connections


async def test_max_frame_size_configurable() -> None:
    h = Harness(max_frame_size=1024)
    await h.server.start()
    small, big = RemotingClient(), RemotingClient()
    try:
        assert (await small.invoke(h.addr, RemotingCommand(code=ECHO, body=b"x" * 500))).body == b"x" * 500
        with pytest.raises(RemotingConnectError):
            await big.invoke(h.addr, RemotingCommand(code=ECHO, body=b"x" * 2000), timeout=5)
        assert (await small.invoke(h.addr, RemotingCommand(code=ECHO, body=b"y"))).body == b"y"
    finally:
        await small.close()
        await big.close()
        await h.server.stop()


# -- fuzzing a live server ---------------------------------------------------------------------------


class ThreadedServer:
    """A Harness served by an event loop in a background thread (for sync hypothesis tests)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.errors: list[dict[str, Any]] = []
        self.loop.set_exception_handler(lambda loop, context: self.errors.append(context))
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.harness: Harness = self._run(self._start())

    async def _start(self) -> Harness:
        h = Harness(max_frame_size=64 * 1024)
        await h.server.start()
        return h

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def stop(self) -> None:
        self._run(self.harness.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture(scope="module")
def threaded() -> Iterator[ThreadedServer]:
    server = ThreadedServer()
    yield server
    server.stop()


def blocking_echo(port: int, opaque: int, serialize_type: int = SerializeType.JSON) -> RemotingCommand:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(encode(RemotingCommand(code=ECHO, opaque=opaque, ext_fields={"o": str(opaque)},
                                            serialize_type=serialize_type)))
        decoder = FrameDecoder()
        while True:
            data = sock.recv(65536)
            assert data, "server closed a healthy connection"
            got = decoder.feed(data)
            if got:
                return got[0]


def send_garbage(port: int, garbage: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(garbage)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(5)
        try:
            while sock.recv(65536):  # drain whatever answers the garbage produced, until the server closes
                pass
        except (ConnectionResetError, TimeoutError):
            pass


def valid_frame(code: int, opaque: int) -> bytes:
    return encode(RemotingCommand(code=code, opaque=opaque, ext_fields={"x": "1"}))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(
    prefix=st.lists(st.sampled_from([ECHO, 999, FAIL, REQUIRE]), max_size=3),
    garbage=st.one_of(
        st.binary(min_size=1, max_size=200),
        st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(0, 2**32 - 1), st.binary(max_size=50)).map(
            lambda t: struct.pack(">iI", t[0], t[1]) + t[2]),
        st.integers(1, 60).map(lambda n: valid_frame(ECHO, 1)[:n]),  # closed mid-frame
    ),
    flips=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=4),
    opaque=st.integers(1, 2**31 - 1),
)
def test_property_live_server_survives_garbage(threaded: ThreadedServer, prefix: list[int], garbage: bytes,
                                               flips: list[tuple[int, int]], opaque: int) -> None:
    data = bytearray(b"".join(valid_frame(code, i + 1) for i, code in enumerate(prefix)) + garbage)
    for pos, value in flips:
        data[pos % len(data)] = value
    send_garbage(threaded.harness.server.port, bytes(data))
    response = blocking_echo(threaded.harness.server.port, opaque, SerializeType.ROCKETMQ if opaque % 2 else 0)
    assert (response.code, response.opaque, response.ext_fields) == (0, opaque, {"o": str(opaque)})
    assert threaded.errors == [], threaded.errors


@pytest.mark.parametrize("header", [
    b'{"code":1000,"opaque":1099511627776}',
    b'{"code":1000,"opaque":1e30}',
    b'{"code":99999999999,"opaque":1}',
    b'{"code":1000,"opaque":1,"extFields":{"a":1e300}}',
    b'{"code":1000,"opaque":1,"language":[1],"remark":{"x":1}}',
])
def test_odd_json_headers_never_crash_the_loop(threaded: ThreadedServer, header: bytes) -> None:
    send_garbage(threaded.harness.server.port, struct.pack(">iI", 4 + len(header), len(header)) + header)
    assert blocking_echo(threaded.harness.server.port, 5).opaque == 5
    assert threaded.errors == [], threaded.errors


@pytest.mark.parametrize("loop_factory", ["asyncio", "uvloop"])
def test_cancelling_a_refused_connect_always_cancels(loop_factory: str) -> None:
    """A task retrying a refused connection ends when cancelled, whenever the cancel lands.

    ``asyncio.wait_for`` of Python 3.11 loses a cancellation that arrives in the
    tick its inner operation fails (here about one cancel in three); a broker's
    loop that retries its master then never stops (a slave's promotion hung on it).
    """
    import uvloop

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]  # bound, never listening: every connect is refused
    factory = uvloop.new_event_loop if loop_factory == "uvloop" else asyncio.new_event_loop

    async def scenario() -> int:
        client = RemotingClient(connect_timeout=3.0)

        async def retry_forever() -> None:
            while True:
                try:
                    await client.invoke(f"127.0.0.1:{port}", RemotingCommand(code=ECHO), timeout=3.0)
                except RemotingConnectError:
                    pass

        lost = 0
        for i in range(200):
            task = asyncio.get_running_loop().create_task(retry_forever())
            await asyncio.sleep(0.0001 * (i % 11))
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=1.0)
            if not done:
                lost += 1
                while not task.done():  # end it for good before the next round
                    task.cancel()
                    await asyncio.wait({task}, timeout=0.1)
        await client.close()
        return lost

    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            assert runner.run(scenario()) == 0
    finally:
        closed.close()
