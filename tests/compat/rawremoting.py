"""A tiny blocking remoting client for the compat harness (admin calls, route checks).

Independent of ``rocket.remoting`` on purpose: the harness should not share
a codec bug with the servers it checks. JSON headers only; ext values are
sent as strings, as Java does.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

_opaque = itertools.count(1)

UPDATE_AND_CREATE_TOPIC = 17
GET_ROUTEINFO_BY_TOPIC = 105
GET_BROKER_CLUSTER_INFO = 106
WIPE_WRITE_PERM_OF_BROKER = 205
GET_MAX_OFFSET = 30
QUERY_CONSUMER_OFFSET = 14


@dataclass
class Reply:
    code: int
    remark: str | None
    ext: dict[str, Any] = field(default_factory=dict)
    body: bytes = b""
    header: dict[str, Any] = field(default_factory=dict)

    def json(self) -> Any:
        """The body parsed as JSON, quoting fastjson's bare integer keys first."""
        import re

        text = self.body.decode()
        try:
            return json.loads(text)
        except ValueError:
            return json.loads(re.sub(r'([{,]\s*)(-?\d+)(\s*:)', r'\1"\2"\3', text))


def request(addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes = b"",
            timeout: float = 5.0) -> Reply:
    """Send one request to ``addr`` (``host:port``) on a fresh connection; return the reply.

    Raises ``OSError``/``TimeoutError`` when the peer is unreachable or silent.
    """
    opaque = next(_opaque)
    header = {
        "code": code, "language": "JAVA", "version": 409, "opaque": opaque, "flag": 0,
        "extFields": {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (ext or {}).items()},
    }
    hb = json.dumps(header).encode()
    frame = struct.pack(">iI", 4 + len(hb) + len(body), len(hb)) + hb + body
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(frame)
        while True:
            (length,) = struct.unpack(">i", _read(sock, 4))
            payload = _read(sock, length)
            (tag,) = struct.unpack_from(">I", payload, 0)
            hlen = tag & 0xFFFFFF
            reply = json.loads(payload[4 : 4 + hlen])
            if reply.get("opaque") != opaque or not int(reply.get("flag", 0)) & 1:
                continue  # a request from the server (e.g. NOTIFY) or someone else's reply
            return Reply(code=int(reply["code"]), remark=reply.get("remark"), ext=reply.get("extFields") or {},
                         body=payload[4 + hlen :], header=reply)


def _read(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("connection closed by peer")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def create_topic(broker_addr: str, topic: str, queues: int = 4, perm: int = 6) -> Reply:
    """UPDATE_AND_CREATE_TOPIC (17) on one broker."""
    return request(broker_addr, UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
        "perm": perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False,
    })


def route(namesrv: str, topic: str) -> Reply:
    """GET_ROUTEINFO_BY_TOPIC (105)."""
    return request(namesrv, GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


def cluster_info(namesrv: str) -> Reply:
    """GET_BROKER_CLUSTER_INFO (106)."""
    return request(namesrv, GET_BROKER_CLUSTER_INFO)


def wipe_write_perm(namesrv: str, broker_name: str) -> Reply:
    """WIPE_WRITE_PERM_OF_BROKER (205)."""
    return request(namesrv, WIPE_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
