"""The replication wire format (RocketMQ 4.x ``HAConnection``/``HAClient`` frames), plus an epoch handshake.

Plain TCP on the master's ``haListenPort`` (default ``listenPort + 1``), no
remoting framing. All integers are big-endian.

RocketMQ 4.x frames (unchanged, so a plain 4.x-style slave still works):

* slave → master, a **report**: 8 bytes, the slave's max CommitLog offset —
  on connect, after every applied batch, and at least every 5 s;
* master → slave, a **transfer**: 8-byte physical offset, 4-byte size, then
  ``size`` bytes of raw CommitLog data (size ≤ 32 KiB); ``size`` 0 is a
  heartbeat, sent after 5 s without data.

RocketCluster handshake (RocketMQ 5 exchanges epochs in its own HA
handshake; this is our equivalent): an epoch-aware slave opens with
``b"RHA1"``, a 4-byte length and a JSON body; the master answers with the
same framing before any transfer. A first 8-byte report can never start with
those 4 bytes (it would be an offset above 5.9e18), so the master tells the
two kinds of slave apart by the first 4 bytes.

Slave hello ``{"brokerName", "brokerAddr", "brokerId", "maxOffset",
"epochs": [[epoch, start], ...]}``; master reply ``{"ok": true,
"brokerName", "masterAddr", "epoch", "epochs", "maxOffset", "minOffset"}``
or ``{"ok": false, "error": "..."}`` followed by a close.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import orjson

#: States of a slave's connection to its master (``HAClient.state``), in order; exported as
#: ``rocketmq_broker_ha_connection_state``.
STATES = ("disconnected", "connecting", "handshaking", "transferring", "refused")
#: First bytes of a handshake frame (``0x52484131``).
HANDSHAKE_MAGIC = b"RHA1"
#: A report: the slave's max offset.
REPORT = struct.Struct(">q")
#: A transfer header: physical offset, data size.
TRANSFER_HEADER = struct.Struct(">qi")
_LEN = struct.Struct(">I")
#: Largest handshake body accepted (bytes).
MAX_HANDSHAKE_BODY = 1024 * 1024
#: Largest transfer body accepted by a slave (bytes); masters send ≤ ``haTransferBatchSize``.
MAX_TRANSFER_BODY = 64 * 1024 * 1024


class HAProtocolError(Exception):
    """A peer broke the replication protocol (the message says how); the connection is dropped."""


def encode_report(offset: int) -> bytes:
    """A slave's report: ``offset`` as an 8-byte big-endian long."""
    return REPORT.pack(offset)


def decode_report(data: bytes) -> int:
    """Inverse of :func:`encode_report`. Raises :class:`HAProtocolError` for a negative offset."""
    offset: int = REPORT.unpack(data)[0]
    if offset < 0:
        raise HAProtocolError(f"slave reported a negative offset {offset}")
    return offset


def encode_transfer_header(offset: int, size: int) -> bytes:
    """The 12-byte header of a transfer of ``size`` bytes at physical ``offset``."""
    return TRANSFER_HEADER.pack(offset, size)


def decode_transfer_header(data: bytes | memoryview) -> tuple[int, int]:
    """``(offset, size)`` of a transfer header. Raises :class:`HAProtocolError` for bad values."""
    offset, size = TRANSFER_HEADER.unpack(data)
    if offset < 0 or size < 0 or size > MAX_TRANSFER_BODY:
        raise HAProtocolError(f"bad transfer header: offset {offset}, size {size}")
    return offset, size


def encode_handshake(body: dict[str, Any]) -> bytes:
    """A handshake frame: magic, 4-byte length, JSON ``body``."""
    data = orjson.dumps(body)
    return HANDSHAKE_MAGIC + _LEN.pack(len(data)) + data


def is_handshake(first4: bytes) -> bool:
    """Do the first 4 bytes a slave sent open a handshake (rather than an 8-byte report)?"""
    return first4 == HANDSHAKE_MAGIC


async def read_handshake_body(reader: asyncio.StreamReader) -> dict[str, Any]:
    """Read the length and JSON body of a handshake whose magic was already read.

    Raises :class:`HAProtocolError` for a too large or non-object body and
    ``asyncio.IncompleteReadError`` when the peer closes.
    """
    (n,) = _LEN.unpack(await reader.readexactly(_LEN.size))
    if n > MAX_HANDSHAKE_BODY:
        raise HAProtocolError(f"handshake body of {n} bytes is too large")
    try:
        obj = orjson.loads(await reader.readexactly(n))
    except orjson.JSONDecodeError as exc:
        raise HAProtocolError(f"handshake body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise HAProtocolError("handshake body is not a JSON object")
    return obj


async def read_handshake(reader: asyncio.StreamReader) -> dict[str, Any]:
    """Read a whole handshake frame (magic included). Raises :class:`HAProtocolError`."""
    magic = await reader.readexactly(len(HANDSHAKE_MAGIC))
    if not is_handshake(magic):
        raise HAProtocolError(f"expected a handshake, got {magic!r}")
    return await read_handshake_body(reader)


class TransferParser:
    """Incremental parser of master → slave transfers (for ``data_received`` style input).

    :meth:`feed` returns the complete transfers ``(offset, data)`` found so
    far; heartbeats come back with empty data. Raises
    :class:`HAProtocolError` for a bad header.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._need: tuple[int, int] | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[tuple[int, bytes | memoryview]]:
        """Add ``data``; return the transfers completed by it, in order.

        When nothing was left over from earlier calls (the usual case: chunks of whole transfers)
        and the transfers found fill at least half of ``data``, their data are views of ``data``
        (no copy; ``data`` stays alive as long as one of them does, so at most twice their size
        is held); otherwise each is copied once. Only a remainder is kept."""
        buf = self._buf
        src: bytes | bytearray
        if buf:
            buf += data
            src = buf
        else:
            src = data
        found: list[tuple[int, int, int]] = []  # (offset, position in src, size)
        pos = 0
        n = len(src)
        share = 0
        hs = TRANSFER_HEADER.size
        with memoryview(src) as view:
            while True:
                if self._need is None:
                    if n - pos < hs:
                        break
                    self._need = decode_transfer_header(view[pos : pos + hs])
                    pos += hs
                offset, size = self._need
                if n - pos < size:
                    break
                found.append((offset, pos, size))
                share += size
                pos += size
                self._need = None
            if src is not buf and 2 * share >= n:
                out: list[tuple[int, bytes | memoryview]] = [(o, view[p : p + k]) for o, p, k in found]
            else:
                out = [(o, bytes(view[p : p + k])) for o, p, k in found]
            if src is not buf:
                buf += view[pos:]
        if src is buf and pos:
            del buf[:pos]
        return out
