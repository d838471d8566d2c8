"""Backpressure: a client that sends requests back to back and never reads the replies does not
grow a server's memory; once it reads, every reply arrives; other connections are served meanwhile.

Real processes on loopback: a NameServer and a broker (``rocket nameserver``, ``rocket broker``).
A raw socket client (its own frame encoder, independent of ``rocket.remoting``) writes
:data:`REQUESTS` requests without reading, on a non-blocking socket, until the server stops
taking them; the server's RSS (``VmRSS`` of ``/proc/<pid>/status``) is sampled meanwhile and must
stay within :data:`RSS_GROWTH_MIB` of what it was before. A second connection gets a normal
answer while the first is stalled. Then the client reads while it sends the rest, and must get one
reply per request, each opaque exactly once.

Floods: 200k GET_ROUTEINFO_BY_TOPIC to the NameServer, 200k GET_MAX_OFFSET to the broker, and
60k long-polled PULL_MESSAGE (held 200 ms each) to the broker, where the bound that acts is
``serverChannelMaxPendingRequests`` (4096) rather than the write buffer. Without backpressure the
server reads everything at once and keeps every unsent reply in its write buffer (issue 19
measured 283 MiB for 500k requests to a NameServer); the last test is that control, with bounds
set out of reach. The bounds are the connection's ``writeBufferHighWaterMark`` (64 KiB by
default) and ``serverChannelMaxPendingRequests``; see ``rocket.remoting.connection``.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat import rawremoting
from tests.integration.broker_harness import broker_process, nameserver_process
from tests.support import free_port, rocket_command, running, wait_port

pytestmark = pytest.mark.timeout(240)

REQUESTS = 200_000
#: How much a server's RSS may grow while the flood is not read.
RSS_GROWTH_MIB = 32
GET_ROUTEINFO_BY_TOPIC = 105
GET_MAX_OFFSET = 30
PULL_MESSAGE = 11


def _frame(code: int, opaque: int, ext: dict[str, str]) -> bytes:
    header = json.dumps({"code": code, "language": "JAVA", "version": 409, "opaque": opaque, "flag": 0,
                         "extFields": ext}).encode()
    return struct.pack(">iI", 4 + len(header), len(header)) + header


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def _replies(buf: bytearray) -> Iterator[dict[str, object]]:
    """Pop every whole frame from ``buf``; yield each header."""
    pos = 0
    while len(buf) - pos >= 4:
        (length,) = struct.unpack_from(">i", buf, pos)
        if len(buf) - pos - 4 < length:
            break
        (tag,) = struct.unpack_from(">I", buf, pos + 4)
        hlen = tag & 0xFFFFFF
        yield json.loads(bytes(buf[pos + 8 : pos + 8 + hlen]))
        pos += 4 + length
    del buf[:pos]


def _flood(addr: str, pid: int, code: int, ext: dict[str, str], other: str, requests: int = REQUESTS,
           other_request: tuple[int, dict[str, str]] | None = None) -> dict[str, object]:
    """Flood ``addr`` with ``requests`` requests unread, then read them all; the figures of the run.
    Meanwhile ``other_request`` (default: the same request) goes to ``other`` on a second connection."""
    data = b"".join(_frame(code, i + 1, ext) for i in range(requests))
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.setblocking(False)
    rss_before = _rss_kib(pid)
    rss_peak = rss_before
    sent = 0
    stalled_since = None
    try:
        # phase 1: write without reading until the server stops taking requests for 2 s
        while sent < len(data):
            try:
                sent += sock.send(data[sent : sent + 256 * 1024])
                stalled_since = None
            except BlockingIOError:
                now = time.monotonic()
                stalled_since = stalled_since or now
                if now - stalled_since > 2.0:
                    break
                select.select([], [sock], [], 0.05)
            rss_peak = max(rss_peak, _rss_kib(pid))
        sent_unread = sent
        for _ in range(10):
            rss_peak = max(rss_peak, _rss_kib(pid))
            time.sleep(0.05)
        # a second connection is served normally while the first one is stalled
        t0 = time.monotonic()
        other_code, other_ext = other_request or (code, ext)
        reply = rawremoting.request(other, other_code, other_ext, timeout=5.0)
        other_seconds = time.monotonic() - t0
        # phase 2: read everything, sending the rest as the server takes it
        seen: set[int] = set()
        dup = 0
        buf = bytearray()
        deadline = time.monotonic() + 120
        while len(seen) < requests and time.monotonic() < deadline:
            want_write = [sock] if sent < len(data) else []
            readable, writable, _ = select.select([sock], want_write, [], 1.0)
            if writable:
                try:
                    sent += sock.send(data[sent : sent + 256 * 1024])
                except BlockingIOError:
                    pass
            if readable:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
                for header in _replies(buf):
                    opaque = int(header["opaque"])  # type: ignore[call-overload]
                    assert int(header["flag"]) & 1, header  # type: ignore[call-overload]
                    if opaque in seen:
                        dup += 1
                    seen.add(opaque)
        return {"total_bytes": len(data), "rss_before_kib": rss_before, "rss_peak_kib": rss_peak,
                "sent_unread": sent_unread,
                "other_code": reply.code, "other_seconds": other_seconds, "replies": len(seen),
                "duplicates": dup, "missing": requests - len(seen)}
    finally:
        sock.close()


def _check(result: dict[str, object], what: str) -> None:
    growth_mib = (int(result["rss_peak_kib"]) - int(result["rss_before_kib"])) / 1024  # type: ignore[call-overload]
    print(f"{what}: {result}, RSS growth {growth_mib:.1f} MiB")
    # the server stopped taking requests: only the sockets' buffers hold what was sent meanwhile
    assert int(result["sent_unread"]) < int(result["total_bytes"]), (  # type: ignore[call-overload]
        f"{what} took every request without its replies being read: {result}")
    assert growth_mib < RSS_GROWTH_MIB, f"{what}'s RSS grew {growth_mib:.1f} MiB: {result}"
    assert result["other_code"] == 0 and float(result["other_seconds"]) < 3.0, result  # type: ignore[arg-type]
    assert result["missing"] == 0 and result["duplicates"] == 0, result


def test_nameserver_stops_reading_a_client_that_does_not_read(tmp_path: Path) -> None:
    with nameserver_process(tmp_path) as ns, broker_process(tmp_path, "bp", ns.addr) as broker:
        deadline = time.monotonic() + 15
        while rawremoting.route(ns.addr, "TBW102").code != 0:
            assert time.monotonic() < deadline, "the broker never registered TBW102"
            time.sleep(0.2)
        result = _flood(ns.addr, ns.proc.pid, GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}, ns.addr)
        _check(result, "NameServer")
        assert broker.proc.poll() is None


def test_broker_stops_reading_a_client_that_does_not_read(tmp_path: Path) -> None:
    with nameserver_process(tmp_path) as ns, broker_process(tmp_path, "bp", ns.addr) as broker:
        result = _flood(broker.addr, broker.proc.pid, GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"},
                        broker.addr)
        _check(result, "broker")


def test_broker_bounds_long_polled_pulls_per_connection(tmp_path: Path) -> None:
    """60k long-polled pulls (each held 200 ms) on one connection: at most
    serverChannelMaxPendingRequests (4096) are held at once, the rest wait unread."""
    with nameserver_process(tmp_path) as ns, broker_process(tmp_path, "bp", ns.addr) as broker:
        assert rawremoting.create_topic(broker.addr, "BpPullT", 1).code == 0
        pull = {"consumerGroup": "BpG", "topic": "BpPullT", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
                "sysFlag": "6", "commitOffset": "0", "suspendTimeoutMillis": "200", "subscription": "*",
                "subVersion": "0", "expressionType": "TAG"}
        result = _flood(broker.addr, broker.proc.pid, PULL_MESSAGE, pull, broker.addr, requests=60_000,
                        other_request=(GET_MAX_OFFSET, {"topic": "BpPullT", "queueId": "0"}))
        _check(result, "broker (long polls)")


def test_unbounded_settings_show_the_growth(tmp_path: Path) -> None:
    """The control: with bounds too large to matter, a flood like the one above (300k requests)
    does grow the NameServer's RSS past the bound the other tests hold to."""
    port, http_port = free_port(), free_port()
    conf = tmp_path / "ns.toml"
    conf.write_text("write_buffer_high_water_mark = 1073741824\nwrite_buffer_low_water_mark = 536870912\n"
                    "server_channel_max_pending_requests = 1000000000\n")
    argv = rocket_command("nameserver", "--config", str(conf), "--host", "127.0.0.1", "--port", str(port),
                          "--http-port", str(http_port))
    with running(argv, port=port, log_path=tmp_path / "ns.log") as proc:
        wait_port(port)
        addr = f"127.0.0.1:{port}"
        result = _flood(addr, proc.pid, GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}, addr, requests=300_000)
        growth_mib = (int(result["rss_peak_kib"]) - int(result["rss_before_kib"])) / 1024  # type: ignore[call-overload]
        print(f"unbounded NameServer: {result}, RSS growth {growth_mib:.1f} MiB")
        assert result["missing"] == 0
        assert result["sent_unread"] == result["total_bytes"], result
        assert growth_mib > RSS_GROWTH_MIB, result
