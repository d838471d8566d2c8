"""Malformed frames and HTTP requests against running servers, then a real client.

Real processes on loopback (``rocket nameserver``, ``rocket broker``, ``rocket controller``), one
of each for the module. Every remoting port (NameServer, broker, broker VIP, controller) gets
``FUZZ_FRAMES`` malformed frames (10,000 in ``make fuzz``, 200 in ``make test``), each on a
connection of its own (frames drawn by the hypothesis strategy of :mod:`tests.fuzz.strategies`:
JSON and binary headers with wrong fields, header lengths past the frame, unknown serialization
types, lying length prefixes, random bytes). Every HTTP port gets ``FUZZ_HTTP`` malformed HTTP
requests (1,000 / 50): broken request lines, bad methods, paths and versions, lying
Content-Length, bad chunking, huge headers, hostile JSON bodies. Then:

* every connection ended: answered and closed after our EOF, or closed by the server at once;
  no HTTP answer is a 500 (an exception a handler let escape), and no server logged a traceback;
* the special frames RocketMQ's ``NettyDecoder`` rejects (a length prefix of 2^31, a header
  length longer than the frame, a negative or unknown serialization type) close their own
  connection while another connection of the same server keeps being served;
* each server still serves a real client: the RocketMQ C++ client (``.venv-compat``) looks the
  topic up on the NameServer and sends to the broker; our client asks the controller for its
  metadata; ``/healthz`` answers 200 on every HTTP port;
* each server's resident memory (``VmRSS`` of ``/proc/<pid>/status``) grew by less than
  :data:`RSS_BOUND` from after a warm-up round to the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocket.protocol.codes import RequestCode, ResponseCode
from rocket.remoting import RemotingClient, RemotingCommand
from tests.compat.realclient import CompatVenvError, Driver, ensure_venv
from tests.fuzz import strategies as S
from tests.fuzz.engine import buffer_rng
from tests.integration.broker_harness import broker_process, nameserver_process
from tests.integration.controller_support import ControllerCluster

pytestmark = pytest.mark.timeout(3600)

FRAMES = int(os.environ.get("FUZZ_FRAMES", "200"))
HTTP_REQUESTS = int(os.environ.get("FUZZ_HTTP", "50"))
SEED = int(os.environ.get("FUZZ_SEED", "20261125"))
#: Largest growth of a server's VmRSS over the whole fuzz (after a warm-up round of 10 % of it).
RSS_BOUND = 16 * 1024 * 1024
CONCURRENCY = 32
TOPIC = "FuzzServersT"


@dataclass
class Server:
    """One server process: name, pid, log file, remoting and HTTP ports."""

    name: str
    pid: int
    log: Path
    remoting: list[int]
    http: int

    def rss(self) -> int:
        """VmRSS in bytes."""
        text = Path(f"/proc/{self.pid}/status").read_text()
        match = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
        assert match, text
        return int(match.group(1)) * 1024


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    """A NameServer, a broker registered with it and a one-node controller (real processes)."""
    root = tmp_path_factory.mktemp("fuzz-servers")
    controllers = ControllerCluster(root, n=1)
    with nameserver_process(root) as ns, broker_process(root, "fuzz-a", ns.addr) as broker:
        controllers.start_all()
        try:
            yield {
                "nameserver": Server("nameserver", ns.proc.pid, ns.log, [ns.port], ns.http_port),
                "broker": Server("broker", broker.proc.pid, broker.log, [broker.port, broker.port - 2],
                                 broker.http_port),
                "controller": Server("controller", controllers.procs[0].pid,  # type: ignore[union-attr]
                                     root / "c0.log", [controllers.ports[0]], controllers.http_ports[0]),
            }
        finally:
            controllers.stop()


# -- inputs ----------------------------------------------------------------------------------------


def _draw(strategy: st.SearchStrategy[Any], count: int, name: str) -> list[Any]:
    out: list[Any] = []

    @settings(database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(value: Any) -> None:
        out.append(value)

    rng = buffer_rng(SEED, name)
    while len(out) < count:
        collect.hypothesis.fuzz_one_input(rng.randbytes(2048))  # type: ignore[attr-defined]
    return out


HTTP_PATHS = ["/healthz", "/readyz", "/metrics", "/api/v1/status", "/api/v1/topics", "/api/v1/topics/x/route",
              "/api/v1/cluster", "/api/v1/consumer-groups", "/api/v1/consumer-groups/%00", "/api/v1/ha",
              "/api/v1/role", "/api/v1/controller", "/api/v1/topics/%zz", "//..//", "*", "/" + "a" * 9000, "",
              "/api/v1/topics/" + "%2F" * 50]
HTTP_BODIES = S.json_body([{"topic": "FuzzHttpT", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
                           {"role": "MASTER", "brokerRole": "ASYNC_MASTER", "force": False}])


@st.composite
def http_requests(draw: st.DrawFn) -> bytes:
    """One malformed (or merely odd) HTTP/1.x request as bytes."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=200))
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "G\x00T", "", "get", "CONNECT"])
                  | st.text(max_size=8))
    path = draw(st.sampled_from(HTTP_PATHS) | st.text(max_size=30).map(lambda t: "/" + t))
    version = draw(st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/9.9", "", "HTTP/1.1 x", "HTTP/1"]))
    body = draw(HTTP_BODIES)
    headers = ["Host: 127.0.0.1"] if draw(st.integers(0, 4)) else []
    if draw(st.integers(0, 4)):
        headers.append("Connection: close")
    length = draw(st.sampled_from([str(len(body)), "-1", "abc", str(2**63), "99999999", " 5", str(len(body) + 7)]))
    if draw(st.booleans()):
        headers.append(f"Content-Length: {length}")
    if draw(st.integers(0, 4)) == 0:
        headers.append("Transfer-Encoding: chunked")
        body = draw(st.sampled_from([b"zz\r\nabc\r\n0\r\n\r\n", b"5\r\nab", b"-1\r\n\r\n", b"0\r\n\r\n"]))
    if draw(st.integers(0, 4)) == 0:
        headers.append(draw(st.sampled_from(["X-Big: " + "b" * 70000, "NoColon", ": empty", "Bad\x00Name: 1",
                                             "Content-Type: application/json; charset=nonsense",
                                             "Authorization: Bearer \x01", "Expect: 100-continue"])))
    head = f"{method} {path} {version}\r\n" + "".join(f"{h}\r\n" for h in headers) + "\r\n"
    return head.encode("utf-8", "surrogatepass") + body


# -- sending ---------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """How the connections of one round ended."""

    answered: int = 0
    closed: int = 0
    #: HTTP requests whose server waited for more (a Content-Length or chunk not sent) until our EOF.
    waiting: int = 0
    hung: int = 0
    server_errors: int = 0
    examples: list[str] | None = None


async def _one(port: int, data: bytes, outcome: Outcome, http: bool) -> None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
    except (OSError, TimeoutError):
        outcome.hung += 1
        (outcome.examples or []).append(f"connect failed after {data[:80]!r}")
        return
    try:
        writer.write(data)
        with contextlib.suppress(OSError):
            await writer.drain()
            if http:  # an HTTP server answers before our EOF (it may close at EOF without answering)
                try:
                    reply = await asyncio.wait_for(reader.read(65536), 5)
                except TimeoutError:
                    outcome.waiting += 1
                    reply = b""
                if reply:
                    outcome.answered += 1
                    if reply.startswith(b"HTTP/") and reply[9:12] == b"500":
                        outcome.server_errors += 1
                        if outcome.examples is not None and len(outcome.examples) < 5:
                            outcome.examples.append(f"500 for {data[:300]!r}")
            writer.write_eof()
        reply = await asyncio.wait_for(reader.read(), 15)
        if http:
            return
    except (ConnectionError, OSError):
        outcome.closed += 1
        return
    except TimeoutError:
        outcome.hung += 1
        if outcome.examples is not None and len(outcome.examples) < 5:
            outcome.examples.append(f"no close within 15 s after {data[:120]!r}")
        return
    finally:
        writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await writer.wait_closed()
    if not reply:
        outcome.closed += 1
        return
    outcome.answered += 1


async def _blast(port: int, inputs: list[bytes], http: bool) -> Outcome:
    outcome = Outcome(examples=[])
    window = asyncio.Semaphore(CONCURRENCY)

    async def guarded(data: bytes) -> None:
        async with window:
            await _one(port, data, outcome, http)

    await asyncio.gather(*(guarded(d) for d in inputs))
    return outcome


# -- the special frames ----------------------------------------------------------------------------

HEADER = json.dumps({"code": 0, "language": "JAVA", "version": 453, "opaque": 1, "flag": 0,
                     "extFields": {}}).encode()
SPECIAL_FRAMES = {
    "length prefix 2^31": struct.pack(">I", 2**31) + struct.pack(">I", len(HEADER)) + HEADER,
    "length prefix 2^31 - 1 (over the 16 MiB maximum)": struct.pack(">i", 2**31 - 1) + struct.pack(">I", 0),
    "header length longer than the frame": S.frame(0, HEADER, header_len=len(HEADER) + 1000),
    "header length 2^24 - 1 in a small frame": S.frame(0, HEADER, header_len=0xFFFFFF),
    "negative serialization type (0xFF)": S.frame(0xFF, HEADER),
    "negative serialization type (0x80)": S.frame(0x80, HEADER),
    "unknown serialization type 2": S.frame(2, HEADER),
    "length prefix smaller than the header tag": struct.pack(">i", 3) + b"\x00\x00\x00",
    "negative length prefix": struct.pack(">i", -5) + HEADER,
}


def _request(code: int, opaque: int) -> bytes:
    header = json.dumps({"code": code, "language": "JAVA", "version": 453, "opaque": opaque, "flag": 0,
                         "extFields": {}}).encode()
    return S.frame(0, header)


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf
    (length,) = struct.unpack(">i", exactly(4))
    return exactly(length)


def _answer_code(sock: socket.socket, opaque: int) -> int:
    """Send a request with a code nobody registers on ``sock``; the code of its answer."""
    sock.sendall(_request(9999, opaque))
    payload = _read_frame(sock)
    header_len = struct.unpack(">I", payload[:4])[0] & 0xFFFFFF
    header = json.loads(payload[4 : 4 + header_len])
    assert header["opaque"] == opaque, header
    return int(header["code"])


def _closed_by_server(sock: socket.socket, timeout: float = 10.0) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("kind", sorted(SPECIAL_FRAMES))
def test_special_frame_closes_only_its_connection(servers: dict[str, Server], kind: str) -> None:
    for server in servers.values():
        for port in server.remoting:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as healthy, \
                    socket.create_connection(("127.0.0.1", port), timeout=10) as bad:
                assert _answer_code(healthy, 1) == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
                bad.sendall(SPECIAL_FRAMES[kind])
                assert _closed_by_server(bad), f"{server.name}:{port} kept the connection open after: {kind}"
                assert _answer_code(healthy, 2) == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, (server.name, port)


# -- the fuzz --------------------------------------------------------------------------------------


def _cpp_driver(tmp_path: Path, namesrv: str) -> Driver:
    try:
        python = ensure_venv()
    except CompatVenvError as exc:
        pytest.fail(f"the real RocketMQ C++ client is not available: {exc}", pytrace=False)
    return Driver(python, namesrv, tmp_path / "cpp-home")


async def _create_topic(broker_port: int) -> None:
    client = RemotingClient()
    try:
        resp = await client.invoke(f"127.0.0.1:{broker_port}", RemotingCommand(
            code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
                "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
                "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}), timeout=10)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    finally:
        await client.close()


async def _controller_metadata(port: int) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(f"127.0.0.1:{port}", RemotingCommand(
            code=RequestCode.CONTROLLER_GET_METADATA_INFO), timeout=10)
    finally:
        await client.close()


def _healthz(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


def _tracebacks(server: Server) -> list[str]:
    text = server.log.read_text(errors="replace") if server.log.exists() else ""
    return [m.group(0)[-2000:] for m in re.finditer(r"(?:.*\n){0,3}Traceback \(most recent call last\):(?:\n.*){1,30}",
                                                      text)]


def test_malformed_frames_and_http_then_real_clients(servers: dict[str, Server], tmp_path: Path) -> None:
    frames = _draw(S.frames(), FRAMES, "server-frames")
    https = _draw(http_requests(), HTTP_REQUESTS, "server-http")
    warm_frames, warm_http = frames[: max(1, FRAMES // 10)], https[: max(1, HTTP_REQUESTS // 10)]

    async def round_(frame_inputs: list[bytes], http_inputs: list[bytes]) -> dict[str, Outcome]:
        outcomes: dict[str, Outcome] = {}
        for server in servers.values():
            for port in server.remoting:
                outcomes[f"{server.name} remoting {port}"] = await _blast(port, frame_inputs, http=False)
            outcomes[f"{server.name} http {server.http}"] = await _blast(server.http, http_inputs, http=True)
        return outcomes

    asyncio.run(round_(warm_frames, warm_http))
    before = {name: s.rss() for name, s in servers.items()}
    started = time.monotonic()
    outcomes = asyncio.run(round_(frames, https))
    elapsed = time.monotonic() - started
    after = {name: s.rss() for name, s in servers.items()}

    report = "\n".join(f"  {port}: {o.answered} answered, {o.closed} closed by the server, {o.waiting} waited for "
                       f"more until our EOF, {o.hung} hung, "
                       f"{o.server_errors} HTTP 500 {o.examples or ''}" for port, o in outcomes.items())
    print(f"\n{FRAMES} frames per remoting port, {HTTP_REQUESTS} HTTP requests per HTTP port in {elapsed:.0f} s:\n"
          f"{report}\nVmRSS growth (bound {RSS_BOUND >> 20} MiB): "
          + ", ".join(f"{n} {(after[n] - before[n]) / 2**20:+.1f} MiB" for n in servers))
    for port, outcome in outcomes.items():
        assert outcome.hung == 0, f"{port}: connections neither answered nor closed:\n{report}"
        assert outcome.server_errors == 0, f"{port}: HTTP 500 answers:\n{report}"
    for name, server in servers.items():
        assert not _tracebacks(server), f"{name} logged tracebacks:\n" + "\n---\n".join(_tracebacks(server)[:3])
        assert after[name] - before[name] < RSS_BOUND, f"{name}: VmRSS grew {after[name] - before[name]} bytes"

    # every server still serves a real client
    broker = servers["broker"]
    asyncio.run(_create_topic(broker.remoting[0]))
    ns_port = servers["nameserver"].remoting[0]
    driver = _cpp_driver(tmp_path, f"127.0.0.1:{ns_port}")
    deadline = time.monotonic() + 60
    while True:  # the route reaches the NameServer with the broker's next registration
        sends = driver.send(TOPIC, 5, timeout=60)
        if all(e.get("status") == "SEND_OK" for e in sends) and len(sends) == 5:
            break
        assert time.monotonic() < deadline, f"the C++ client could not send after the fuzz: {sends}"
        time.sleep(2)
    meta = asyncio.run(_controller_metadata(servers["controller"].remoting[0]))
    assert meta.code == ResponseCode.SUCCESS, meta.remark
    assert meta.ext_fields.get("controllerLeaderAddress"), meta.ext_fields
    for name, server in servers.items():
        assert _healthz(server.http) == 200, name
