"""The TimerLog: :class:`TimerLog`, an append-only queue of memory-mapped files of fixed-size units
(RocketMQ 5 ``store/timer/TimerLog``).

Files live in ``<storePathRootDir>/timerlog``, named by their start offset (20 digits,
as CommitLog files), ``mappedFileSizeTimerLog`` bytes each (100 MiB by default).
A unit is :data:`UNIT_SIZE` (52) bytes, big-endian::

    size          int32   52
    prevPos       int64   TimerLog offset of the previous unit of the same slot (-1: first)
    magic         int32   1 = default, | 2 = roll, | 4 = delete
    currWriteTime int64   the timer's write time when enqueued (ms)
    delayedTime   int32   slot time - currWriteTime (ms)
    offsetPy      int64   CommitLog offset of the message (in rmq_sys_wheel_timer)
    sizePy        int32   its record size
    topicHash     int32   hash of the real topic (metrics)
    reserved      int64   0

A unit never crosses a file: when fewer than ``52 + 16`` bytes are left, a blank
marker (size = bytes left, 8 zero bytes, ``BLANK_MAGIC_CODE``) fills the file's end.
Units of one slot are linked backwards through ``prevPos`` from the wheel slot's
``lastPos``.
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct
from pathlib import Path

from rocket.store.files import offset_name, parse_offset_name

UNIT_SIZE = 4 + 8 + 4 + 8 + 4 + 8 + 4 + 4 + 8
#: ``TimerLog.BLANK_MAGIC_CODE`` (Java: ``0xBBCCDDEE ^ 1880681586 + 8``, int arithmetic).
BLANK_MAGIC_CODE = (0xBBCCDDEE ^ (1880681586 + 8)) - (1 << 32)
MIN_BLANK_LEN = 4 + 8 + 4
MAGIC_DEFAULT = 1
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2

UNIT = struct.Struct(">iqiqiqiiq")
_BLANK = struct.Struct(">iqi")


def is_magic_ok(magic: int) -> bool:
    """``TimerMessageStore.isMagicOK``: only the low four bits may be set."""
    return (magic | 0xF) == 0xF


class TimerLog:
    """The TimerLog files (see the module doc). Single writer, on the event loop.

    :attr:`end` is the offset the next unit is written at; :meth:`load` maps the
    existing files and :meth:`truncate` sets the end after recovery.
    """

    def __init__(self, directory: Path, file_size: int) -> None:
        if file_size < UNIT_SIZE + MIN_BLANK_LEN:
            raise ValueError(f"mappedFileSizeTimerLog {file_size} is smaller than one unit")
        self.dir = Path(directory)
        self.file_size = file_size
        self._starts: list[int] = []
        self._maps: list[mmap.mmap] = []
        #: One descriptor per file, kept open for fdatasync (``mmap.flush`` holds the GIL).
        self._fds: list[int] = []
        self.end = 0
        self.flushed = 0

    def load(self) -> None:
        """Map every file in the directory (in offset order); the end is the last file's end
        until :meth:`truncate` says where the valid units stop."""
        self.dir.mkdir(parents=True, exist_ok=True)
        starts = sorted(s for s in (parse_offset_name(p.name) for p in self.dir.iterdir()) if s is not None)
        for start in starts:
            self._map(start, create=False)
        self.end = (self._starts[-1] + self.file_size) if self._starts else 0

    def _map(self, start: int, create: bool) -> mmap.mmap:
        path = self.dir / offset_name(start)
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        try:
            if os.fstat(fd).st_size != self.file_size:
                os.ftruncate(fd, self.file_size)
            mm = mmap.mmap(fd, self.file_size)
        except BaseException:
            os.close(fd)
            raise
        self._starts.append(start)
        self._maps.append(mm)
        self._fds.append(fd)
        return mm

    @property
    def min_offset(self) -> int:
        """Start of the first file (0 when there is none)."""
        return self._starts[0] if self._starts else 0

    def file_starts(self) -> list[int]:
        """Start offsets of the mapped files."""
        return list(self._starts)

    def _find(self, offset: int) -> tuple[mmap.mmap, int] | None:
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0 or offset >= self._starts[i] + self.file_size:
            return None
        return self._maps[i], offset - self._starts[i]

    def append(self, unit: bytes) -> int:
        """Append one unit; returns its offset. Raises ``OSError`` when a file cannot be created."""
        size = len(unit)
        rel = self.end % self.file_size
        if not self._starts or self.end >= self._starts[-1] + self.file_size:
            mm = self._map(self.end - rel if rel else self.end, create=True)
        else:
            mm = self._maps[-1]
        if rel and size + MIN_BLANK_LEN > self.file_size - rel:
            _BLANK.pack_into(mm, rel, self.file_size - rel, 0, BLANK_MAGIC_CODE)
            self.end += self.file_size - rel
            mm = self._map(self.end, create=True)
            rel = 0
        pos = self.end
        mm[rel:rel + size] = unit
        self.end = pos + size
        return pos

    def read_unit(self, offset: int) -> tuple[int, int, int, int, int, int, int, int, int] | None:
        """The unit at ``offset`` unpacked (size, prevPos, magic, currWriteTime, delayedTime,
        offsetPy, sizePy, topicHash, reserved); None when no file holds it."""
        found = self._find(offset)
        if found is None or found[1] + UNIT_SIZE > self.file_size:
            return None
        mm, rel = found
        return UNIT.unpack_from(mm, rel)

    def scan(self, start: int) -> tuple[list[tuple[int, memoryview]], int]:
        """(file start, view) pairs from the file holding ``start`` on, and the first offset to scan."""
        i = max(0, bisect.bisect_right(self._starts, start) - 1)
        out = [(self._starts[j], memoryview(self._maps[j])) for j in range(i, len(self._starts))]
        first = self._starts[i] if self._starts else 0
        return out, first

    def truncate(self, end: int) -> None:
        """Make ``end`` the write position: zero the rest of its file, drop the files after it."""
        while self._starts and self._starts[-1] >= end:
            start = self._starts.pop()
            self._maps.pop().close()
            os.close(self._fds.pop())
            os.unlink(self.dir / offset_name(start))
        found = self._find(end)
        if found is not None:
            mm, rel = found
            mm[rel:] = bytes(self.file_size - rel)
        self.end = end
        self.flushed = min(self.flushed, end)

    def flush(self) -> int:
        """msync every file up to the current end (blocking: run it in an executor); returns
        the offset now durable."""
        end = self.end
        for start, fd in zip(list(self._starts), list(self._fds), strict=True):
            if start + self.file_size > self.flushed and start < end:
                os.fdatasync(fd)
        self.flushed = end
        return end

    def last_unit_offset_in_file(self) -> int:
        """Offset within a file of the last unit that fits before its blank marker
        (``TimerLog.getOffsetForLastUnit``)."""
        size = self.file_size
        return size - (size - MIN_BLANK_LEN) % UNIT_SIZE - MIN_BLANK_LEN - UNIT_SIZE

    def delete_expired(self, min_commit_log_offset: int) -> int:
        """Delete whole files (never the last) whose last unit points below
        ``min_commit_log_offset``: their messages left the CommitLog, so they can never be
        delivered (Apache ``deleteExpiredFileByOffsetForTimerLog``). Returns how many went."""
        last = self.last_unit_offset_in_file()
        n = 0
        while len(self._starts) > 1:
            unit = UNIT.unpack_from(self._maps[0], last)
            if unit[0] == UNIT_SIZE and unit[5] >= min_commit_log_offset:
                break
            self._delete_first_file()
            n += 1
        return n

    def _delete_first_file(self) -> None:
        """Unmap, close and unlink the oldest file."""
        start = self._starts.pop(0)
        self._maps.pop(0).close()
        os.close(self._fds.pop(0))
        os.unlink(self.dir / offset_name(start))

    def delete_files_before(self, offset: int) -> int:
        """Delete whole files that end at or before ``offset`` (never the last); returns how many."""
        n = 0
        while len(self._starts) > 1 and self._starts[0] + self.file_size <= offset:
            self._delete_first_file()
            n += 1
        return n

    def close(self) -> None:
        """Unmap every file."""
        for mm in self._maps:
            try:
                mm.close()
            except (BufferError, ValueError):
                pass
        for fd in self._fds:
            os.close(fd)
        self._maps.clear()
        self._fds.clear()
        self._starts.clear()
