"""The ``checkpoint`` file (``StoreCheckpoint``): how far CommitLog, ConsumeQueues and index are durable.

A 4 KiB file. RocketMQ 4.9.8 ``StoreCheckpoint`` fields, big-endian int64:

====  ======================  =================================================
 0    physicMsgTimestamp      store time (ms) of the last fdatasync'd CommitLog record
 8    logicsMsgTimestamp      store time of the last record whose ConsumeQueue entry is durable
 16   indexMsgTimestamp       store time of the last record whose index entries are durable
====  ======================  =================================================

RocketCluster extension (ignored by RocketMQ, which reads only the first 24
bytes), used to start recovery at an exact record boundary:

====  ======================  =================================================
 24   physicFlushedOffset     CommitLog bytes durable (a record boundary)
 32   logicsDispatchedOffset  CommitLog offset below which every ConsumeQueue
                              and index entry is durable (a record boundary)
 40   int32 CRC32 of bytes 0..40; a mismatch means "extension absent"
====  ======================  =================================================
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from rocket.store.files import pwrite_all

log = logging.getLogger("rocket.store")

CHECKPOINT_SIZE = 4096
_FIELDS = struct.Struct(">qqqqq")
_CRC = struct.Struct(">i")


@dataclass(slots=True)
class Checkpoint:
    """Values of the checkpoint file; offsets are -1 when the extension is absent or invalid."""

    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    physic_flushed_offset: int = -1
    logics_dispatched_offset: int = -1

    def encode(self) -> bytes:
        """The 4 KiB file image."""
        head = _FIELDS.pack(
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            max(self.physic_flushed_offset, 0),
            max(self.logics_dispatched_offset, 0),
        )
        crc = zlib.crc32(head) & 0x7FFFFFFF
        return (head + _CRC.pack(crc)).ljust(CHECKPOINT_SIZE, b"\0")

    @classmethod
    def decode(cls, data: bytes) -> Checkpoint:
        """Parse a file image; short or foreign files give zeros / an absent extension."""
        if len(data) < 24:
            return cls()
        data = data.ljust(48, b"\0")
        phys_ts, logics_ts, index_ts, flushed, dispatched = _FIELDS.unpack_from(data, 0)
        (crc,) = _CRC.unpack_from(data, 40)
        if zlib.crc32(data[:40]) & 0x7FFFFFFF != crc or flushed < 0 or dispatched < 0:
            flushed = dispatched = -1
        return cls(phys_ts, logics_ts, index_ts, flushed, dispatched)

    def min_timestamp(self) -> int:
        """RocketMQ's recovery point: min of the physic and logics times minus 3 s, never negative."""
        return max(min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000, 0)


class StoreCheckpoint:
    """Reads and writes ``<root>/checkpoint``. Blocking: call from a thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.values = Checkpoint()
        self._fd: int | None = None

    def load(self) -> Checkpoint:
        """Open (creating when missing) and read the file."""
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        data = os.pread(self._fd, CHECKPOINT_SIZE, 0)
        self.values = Checkpoint.decode(data)
        return self.values

    def flush(self, values: Checkpoint) -> None:
        """Write ``values`` and fdatasync."""
        if self._fd is None:
            self.load()
        assert self._fd is not None
        pwrite_all(self._fd, values.encode(), 0)
        os.fdatasync(self._fd)
        self.values = values

    def close(self) -> None:
        """Close the descriptor."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
