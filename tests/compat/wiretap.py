"""A recording TCP proxy for the remoting protocol: what the real client said and heard.

When a compat test misbehaves, run it with ``ROCKET_COMPAT_WIRETAP=1``: the
real client is then pointed at a proxy in front of each NameServer, and every
GET_ROUTEINFO_BY_TOPIC (105) answer is rewritten so that each broker address
in it is replaced by a proxy in front of that broker. The store host of every
pulled record is rewritten the same way, because clients send a failed
message back (36) to the broker named there. Every frame in both
directions is written to ``<tmp>/wiretap.jsonl`` (one JSON object a line:
time, connection, direction, decoded header, body size and a body preview),
and the test's failure message points there.

The frame decoder here is deliberately independent of ``rocket.remoting`` so
that a bug there cannot hide in the recording. It understands JSON headers
(serialization type 0) and records binary headers (type 1) as hex.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

_ROUTE_CODE = 105
_PULL_CODE = 11


def _decode_header(payload: bytes) -> tuple[dict[str, Any], bytes, int]:
    """(header dict, body, serialization type) of one frame without its length field."""
    (tag,) = struct.unpack_from(">I", payload, 0)
    kind, hlen = tag >> 24, tag & 0xFFFFFF
    header_bytes, body = payload[4 : 4 + hlen], payload[4 + hlen :]
    if kind == 0:
        try:
            header = json.loads(header_bytes)
        except ValueError:
            header = {"undecodable_json": header_bytes[:500].decode(errors="replace")}
    else:
        header = {"binary_header_hex": header_bytes[:200].hex()}
    return header, body, kind


def _encode(header: dict[str, Any], body: bytes) -> bytes:
    hb = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">iI", 4 + len(hb) + len(body), len(hb)) + hb + body


def _preview(body: bytes, limit: int = 600) -> str:
    text = body[:limit].decode("utf-8", errors="backslashreplace")
    return text + ("…" if len(body) > limit else "")


class Wiretap:
    """Proxies for NameServers and brokers, recording to one JSONL file.

    ``nameserver(addr)`` starts a proxy for a NameServer and returns its
    address; brokers get proxies on demand when a route answer names them.
    """

    def __init__(self, record_path: Path) -> None:
        self.record_path = record_path
        self._lock = threading.Lock()
        self._file = open(record_path, "a", encoding="utf-8")
        self._broker_proxies: dict[str, str] = {}
        self._listeners: list[socket.socket] = []
        self._sockets: list[socket.socket] = []
        self._closed = False
        self._conn_seq = 0

    # -- public --------------------------------------------------------------------

    def nameserver(self, upstream: str) -> str:
        return self._listen(upstream, role="namesrv")

    def broker(self, upstream: str) -> str:
        with self._lock:
            known = self._broker_proxies.get(upstream)
        if known:
            return known
        addr = self._listen(upstream, role="broker")
        with self._lock:
            return self._broker_proxies.setdefault(upstream, addr)

    def close(self) -> None:
        self._closed = True
        for sock in self._listeners + self._sockets:
            with contextlib.suppress(OSError):
                sock.close()
        with self._lock:
            self._file.close()

    # -- internals -----------------------------------------------------------------

    def _record(self, **entry: Any) -> None:
        entry["t"] = round(time.time(), 6)
        line = json.dumps(entry, ensure_ascii=False, default=str)
        with self._lock:
            if not self._file.closed:
                self._file.write(line + "\n")
                self._file.flush()

    def _listen(self, upstream: str, role: str) -> str:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        self._listeners.append(sock)
        addr = f"127.0.0.1:{sock.getsockname()[1]}"
        self._record(kind="listen", role=role, proxy=addr, upstream=upstream)
        threading.Thread(target=self._accept_loop, args=(sock, upstream, role, addr), daemon=True).start()
        return addr

    def _accept_loop(self, listener: socket.socket, upstream: str, role: str, proxy: str) -> None:
        while not self._closed:
            try:
                client, peer = listener.accept()
            except OSError:
                return
            host, port = upstream.rsplit(":", 1)
            try:
                server = socket.create_connection((host, int(port)), timeout=5)
                server.settimeout(None)
            except OSError as exc:
                self._record(kind="connect_error", role=role, upstream=upstream, error=str(exc))
                client.close()
                continue
            self._sockets += [client, server]
            with self._lock:
                self._conn_seq += 1
                conn_id = f"{role}#{self._conn_seq}({peer[1]}->{upstream})"
            pending_routes: set[int] = set()
            threading.Thread(target=self._pump, args=(client, server, conn_id, "c2s", role, pending_routes),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, conn_id, "s2c", role, pending_routes),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, conn: str, direction: str, role: str,
              pending_routes: set[int]) -> None:
        buf = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                buf += data
                while len(buf) >= 4:
                    (length,) = struct.unpack_from(">i", buf, 0)
                    if length < 4 or length > 64 * 1024 * 1024:
                        self._record(kind="bad_frame", conn=conn, dir=direction, length=length)
                        dst.sendall(buf)
                        buf = b""
                        break
                    if len(buf) < 4 + length:
                        break
                    frame, buf = buf[: 4 + length], buf[4 + length :]
                    dst.sendall(self._handle_frame(frame, conn, direction, role, pending_routes))
        except OSError as exc:
            self._record(kind="socket_error", conn=conn, dir=direction, error=str(exc))
        finally:
            self._record(kind="closed", conn=conn, dir=direction)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def _handle_frame(self, frame: bytes, conn: str, direction: str, role: str, pending_routes: set[int]) -> bytes:
        try:
            header, body, kind = _decode_header(frame[4:])
        except (struct.error, IndexError) as exc:
            self._record(kind="undecodable", conn=conn, dir=direction, error=str(exc), hex=frame[:200].hex())
            return frame
        entry: dict[str, Any] = {"kind": "frame", "conn": conn, "dir": direction, "serialize": kind,
                                 "header": header, "body_len": len(body)}
        if body:
            entry["body"] = _preview(body)
        out = frame
        is_response = bool(int(header.get("flag", 0) or 0) & 1) if kind == 0 else None
        if role == "namesrv" and kind == 0:
            opaque = header.get("opaque")
            if not is_response and header.get("code") == _ROUTE_CODE:
                pending_routes.add(opaque)  # type: ignore[arg-type]
            elif is_response and opaque in pending_routes:
                pending_routes.discard(opaque)  # type: ignore[arg-type]
                if header.get("code") == 0 and body:
                    new_body = self._rewrite_route(body)
                    if new_body != body:
                        entry["rewritten_body"] = _preview(new_body)
                        out = _encode(header, new_body)
        if role == "broker" and kind == 0:
            opaque = header.get("opaque")
            if not is_response and header.get("code") == _PULL_CODE:
                pending_routes.add(opaque)  # type: ignore[arg-type]
            elif is_response and opaque in pending_routes:
                pending_routes.discard(opaque)  # type: ignore[arg-type]
                if header.get("code") == 0 and body:
                    new_body = self._rewrite_store_hosts(body)
                    if new_body != body:
                        entry["rewritten"] = "store hosts"
                        out = _encode(header, new_body)
        self._record(**entry)
        return out

    def _rewrite_store_hosts(self, body: bytes) -> bytes:
        """Point each pulled record's store host at its broker proxy.

        Clients send CONSUMER_SEND_MSG_BACK (36) to the address in the record's
        STOREHOST field, not to a routed address; without this the send-back
        would bypass the proxy. Only the header's store host changes (the body
        CRC covers the body alone).
        """
        out = bytearray(body)
        pos = 0
        while pos + 84 <= len(out):
            (size,) = struct.unpack_from(">i", out, pos)
            if size <= 0 or pos + size > len(out):
                break
            (sys_flag,) = struct.unpack_from(">i", out, pos + 36)
            if not sys_flag & 0x20:  # IPv4 store host
                host_at = pos + (76 if sys_flag & 0x10 else 64)
                ip = ".".join(str(b) for b in out[host_at : host_at + 4])
                (port,) = struct.unpack_from(">i", out, host_at + 4)
                proxy_port = int(self.broker(f"{ip}:{port}").rsplit(":", 1)[1])
                out[host_at : host_at + 4] = bytes([127, 0, 0, 1])
                struct.pack_into(">i", out, host_at + 4, proxy_port)
            pos += size
        return bytes(out)

    _ADDR = re.compile(rb'"(\d{1,3}(?:\.\d{1,3}){3}:\d+)"')

    def _rewrite_route(self, body: bytes) -> bytes:
        """Replace every ``"ip:port"`` string in a route body by its broker proxy."""

        def swap(match: re.Match[bytes]) -> bytes:
            proxy = self.broker(match.group(1).decode())
            return b'"' + proxy.encode() + b'"'

        return self._ADDR.sub(swap, body)
