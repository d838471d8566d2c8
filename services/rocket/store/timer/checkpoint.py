"""The timer checkpoint: :class:`TimerCheckpoint` (RocketMQ 5 ``store/timer/TimerCheckpoint``).

File ``<storePathRootDir>/config/timercheck``, one 4096-byte page whose first 56 bytes
are seven big-endian int64s (also the GET_TIMER_CHECK_POINT (60) response body,
``TimerCheckpoint.encode``)::

    0  lastReadTimeMs          slots before this time were delivered
    8  lastTimerLogFlushPos    TimerLog bytes known durable
    16 lastTimerQueueOffset    rmq_sys_wheel_timer queue offset enqueued up to
    24 masterTimerQueueOffset  the master's enqueue offset (slaves copy it)
    32 dataVersion.stateVersion
    40 dataVersion.timestamp
    48 dataVersion.counter
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

_CKPT = struct.Struct(">7q")
PAGE = 4096


@dataclass(slots=True)
class TimerCheckpoint:
    """Timer progress (see the module doc); ``path`` None for a decoded copy."""

    path: Path | None = None
    last_read_time_ms: int = 0
    last_timer_log_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    state_version: int = 0
    timestamp: int = 0
    counter: int = 0

    @classmethod
    def load(cls, path: Path) -> TimerCheckpoint:
        """Read ``path`` (all zero when it does not exist yet)."""
        ckpt = cls(path=Path(path))
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            return ckpt
        if len(data) >= _CKPT.size:
            ckpt._assign(_CKPT.unpack_from(data))
        return ckpt

    def _assign(self, values: tuple[int, ...]) -> None:
        (self.last_read_time_ms, self.last_timer_log_flush_pos, self.last_timer_queue_offset,
         self.master_timer_queue_offset, self.state_version, self.timestamp, self.counter) = values

    def encode(self) -> bytes:
        """The 56-byte form (``TimerCheckpoint.encode``)."""
        return _CKPT.pack(self.last_read_time_ms, self.last_timer_log_flush_pos, self.last_timer_queue_offset,
                          self.master_timer_queue_offset, self.state_version, self.timestamp, self.counter)

    @classmethod
    def decode(cls, data: bytes) -> TimerCheckpoint:
        """Parse the 32- or 56-byte form. Raises ``ValueError`` when it is shorter."""
        if len(data) < 32:
            raise ValueError(f"timer checkpoint of {len(data)} bytes (expected 56)")
        values = struct.unpack_from(">4q", data) + ((struct.unpack_from(">3q", data, 32)) if len(data) >= 56
                                                    else (0, 0, 0))
        ckpt = cls()
        ckpt._assign(values)
        return ckpt

    def flush(self) -> None:
        """Write and fsync the page (blocking: run it in an executor)."""
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            page = self.encode().ljust(PAGE, b"\0")
            os.pwrite(fd, page, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
