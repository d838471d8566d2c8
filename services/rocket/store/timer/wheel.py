"""The timer wheel file: :class:`TimerWheel` and :class:`Slot` (RocketMQ 5 ``store/timer/TimerWheel``,
``Slot``).

The wheel is one file ``<storePathRootDir>/timerwheel`` of ``slotsTotal * 2`` slots of
:data:`SLOT_SIZE` (32) bytes, big-endian as Java's ``ByteBuffer``::

    timeMs / precisionMs : int64    the slot's time, in precision units
    firstPos             : int64    TimerLog offset of the slot's first unit
    lastPos              : int64    TimerLog offset of the slot's last unit (the list head)
    num                  : int32    units in the slot (deletes count -1)
    magic                : int32    unused, kept 0

A time ``t`` (ms) lives in slot ``t // precisionMs % (slotsTotal * 2)``; the slot is
valid for ``t`` only when its stored time equals ``t // precisionMs`` (else it is
empty or stale, read as ``Slot(-1, -1, -1)``). ``slotsTotal`` is 7 days of seconds
(``TimerMessageStore.TIMER_WHEEL_TTL_DAY * DAY_SECS``) whatever the precision, so the
file is always 38,707,200 bytes. The file is memory-mapped: no slot is held in the
Python heap.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import NamedTuple

#: Bytes per slot (``Slot.SIZE``).
SLOT_SIZE = 32
#: ``TimerWheel.BLANK`` / ``IGNORE`` sentinels for :meth:`TimerWheel.revise_slot`.
BLANK = -1
IGNORE = -2

_SLOT = struct.Struct(">qqqii")
_TIME = struct.Struct(">q")
_TIME_ONLY = struct.Struct(">q24x")


class Slot(NamedTuple):
    """One slot: ``time_ms`` (-1 when empty), first and last TimerLog offsets, unit count, magic."""

    time_ms: int
    first_pos: int
    last_pos: int
    num: int = 0
    magic: int = 0


EMPTY = Slot(-1, -1, -1)


class TimerWheel:
    """The memory-mapped wheel file (see the module doc).

    Raises ``ValueError`` when an existing file has another length (another
    ``slotsTotal``), as Java's ``Timer wheel length`` check; ``OSError`` when
    the file cannot be created or mapped.
    """

    def __init__(self, path: Path, slots_total: int, precision_ms: int) -> None:
        self.path = Path(path)
        self.slots_total = slots_total
        self.precision_ms = precision_ms
        self.length = slots_total * 2 * SLOT_SIZE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size not in (0, self.length):
                raise ValueError(f"{self.path}: timer wheel length {size} != expected {self.length}")
            if size == 0:
                os.ftruncate(fd, self.length)
            self._mm = mmap.mmap(fd, self.length)
        except BaseException:
            os.close(fd)
            raise
        #: Kept open: fdatasync on it writes the mapping's dirty pages without holding the GIL
        #: (``mmap.flush`` holds it, stalling the event loop for the whole msync).
        self._fd = fd

    def slot_index(self, time_ms: int) -> int:
        """Index of the slot holding ``time_ms``."""
        return time_ms // self.precision_ms % (self.slots_total * 2)

    def raw_slot(self, time_ms: int) -> Slot:
        """The slot at ``time_ms``'s index as stored (its time may be another's)."""
        t, first, last, num, magic = _SLOT.unpack_from(self._mm, self.slot_index(time_ms) * SLOT_SIZE)
        return Slot(t * self.precision_ms, first, last, num, magic)

    def get_slot(self, time_ms: int) -> Slot:
        """The slot of ``time_ms``, or :data:`EMPTY` when its index holds another time."""
        slot = self.raw_slot(time_ms)
        if slot.time_ms != time_ms // self.precision_ms * self.precision_ms:
            return EMPTY
        return slot

    def put_slot(self, time_ms: int, first_pos: int, last_pos: int, num: int = 0, magic: int = 0) -> None:
        """Write the whole slot of ``time_ms``."""
        _SLOT.pack_into(self._mm, self.slot_index(time_ms) * SLOT_SIZE, time_ms // self.precision_ms,
                        first_pos, last_pos, num, magic)

    def revise_slot(self, time_ms: int, first_pos: int, last_pos: int, force: bool) -> None:
        """``TimerWheel.reviseSlot``: set first/last (``IGNORE`` keeps one) of ``time_ms``'s slot;
        a slot holding another time is overwritten only with ``force``."""
        pos = self.slot_index(time_ms) * SLOT_SIZE
        t, first, last, num, magic = _SLOT.unpack_from(self._mm, pos)
        if t != time_ms // self.precision_ms:
            if force:
                self.put_slot(time_ms, first_pos if first_pos != IGNORE else last_pos, last_pos)
            return
        _SLOT.pack_into(self._mm, pos, t, first if first_pos == IGNORE else first_pos,
                        last if last_pos == IGNORE else last_pos, num, magic)

    def next_used_time(self, start_ms: int, end_ms: int) -> int:
        """The first time ``>= start_ms`` and ``< end_ms`` (both multiples of the precision) whose
        slot is in use; ``end_ms`` when none is. Scans the file in chunks (no Python object per
        empty slot beyond one tuple), so a read pointer crosses idle hours in milliseconds."""
        p = self.precision_ms
        total = self.slots_total * 2
        unit = start_ms // p
        stop = end_ms // p
        mm = self._mm
        while unit < stop:
            index = unit % total
            count = min(stop - unit, total - index, 65536)
            view = memoryview(mm)[index * SLOT_SIZE:(index + count) * SLOT_SIZE]
            try:
                for i, (t,) in enumerate(_TIME_ONLY.iter_unpack(view)):
                    if t == unit + i:
                        return (unit + i) * p
            finally:
                view.release()
            unit += count
        return end_ms

    def sum_num(self, start_ms: int, end_ms: int, limit_slots: int = 2_000_000) -> int:
        """Units counted in the valid slots from ``start_ms`` (inclusive) to ``end_ms`` (exclusive),
        at most ``limit_slots`` slots looked at (``TimerWheel.getAllNum`` over a range)."""
        p = self.precision_ms
        total = self.slots_total * 2
        unit = start_ms // p
        stop = min(end_ms // p, unit + limit_slots, unit + total)
        mm = self._mm
        out = 0
        while unit < stop:
            index = unit % total
            count = min(stop - unit, total - index, 65536)
            view = memoryview(mm)[index * SLOT_SIZE:(index + count) * SLOT_SIZE]
            try:
                for i, (t, _f, _l, num, _m) in enumerate(_SLOT.iter_unpack(view)):
                    if t == unit + i:
                        out += num
            finally:
                view.release()
            unit += count
        return out

    def flush(self) -> None:
        """Write the dirty slots to disk (fdatasync; blocking: run it in an executor)."""
        os.fdatasync(self._fd)

    def close(self) -> None:
        """Unmap and close the file."""
        try:
            self._mm.close()
        except (BufferError, ValueError):
            pass
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
