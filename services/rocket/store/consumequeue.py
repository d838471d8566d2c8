"""ConsumeQueue (RocketMQ's ``ConsumeQueue``): the per-(topic, queueId) index of CommitLog positions.

Layout: ``<root>/consumequeue/<topic>/<queueId>/<20-digit byte position>``,
files of ``mapped_file_size_consume_queue`` bytes (a multiple of 20), each a
run of 20-byte entries (RocketMQ 4.9.8 ``ConsumeQueue``)::

    int64 CommitLog physical offset | int32 record size | int64 tag hash code

Queue offset ``n`` lives at byte ``n * 20``; a file is named by the byte
position of its first entry. ``min_offset`` is the first live entry,
``max_offset`` the number of entries ever written (exclusive).

Entries are appended on the loop by the reput into an in-memory tail; an IO
thread writes tails to the (sparse) files with ``pwrite`` and fdatasyncs them
every ``flush_interval_consume_queue``. Reads come from the tail or from a
read-only mapping of the files, so the loop never waits for the disk.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
from pathlib import Path

from librt.strings import BytesWriter, write_i32_be, write_i64_be

from rocket.store import files
from rocket.store.api import StoreError

log = logging.getLogger("rocket.store")

#: One entry: physical offset, size, tag hash code (``CQ_STORE_UNIT_SIZE`` = 20).
ENTRY = struct.Struct(">qiq")
CQ_UNIT = ENTRY.size
#: Bytes :meth:`ConsumeQueue.load` reads at a time while it looks for a file's first entry.
_HOLE_SCAN_BLOCK = 64 * 1024
#: Entries :meth:`ConsumeQueue.truncate_dirty` reads from a file at a time.
TRUNCATE_BLOCK = 4096


def pack_entries(phys: list[int], sizes: list[int], tags: list[int]) -> bytes:
    """The :data:`ENTRY` bytes of ``len(phys)`` entries, ``(phys[i], sizes[i], tags[i])`` in
    order (a batch dispatches its n entries at once), written field by field into one
    ``librt.strings.BytesWriter`` (native big-endian stores when compiled). Raises ``struct.error``
    for a value out of range, as ``ENTRY.pack`` does, and ``ValueError`` when the lists' lengths
    differ."""
    n = len(phys)
    if len(sizes) != n or len(tags) != n:
        raise ValueError(f"{n} physical offsets, {len(sizes)} sizes, {len(tags)} tag codes")
    out = BytesWriter()
    try:
        for i in range(n):
            write_i64_be(out, phys[i])
            write_i32_be(out, sizes[i])
            write_i64_be(out, tags[i])
    except (OverflowError, ValueError) as exc:
        raise struct.error(f"a ConsumeQueue entry field is out of range: {exc}") from None
    return out.getvalue()


def _first_nonzero_byte(fd: int, size: int) -> int | None:
    """Position of the first byte of the first ``size`` bytes of ``fd`` that is not zero (None
    when there is none), read ``_HOLE_SCAN_BLOCK`` bytes at a time."""
    pos = 0
    while pos < size:
        block = os.pread(fd, min(_HOLE_SCAN_BLOCK, size - pos), pos)
        if not block:
            return None
        rest = block.lstrip(b"\0")
        if rest:
            return pos + len(block) - len(rest)
        pos += len(block)
    return None


class CQFile(files.MappedFile):
    """One ConsumeQueue file; ``start`` is the byte position of its first entry."""

    __slots__ = ()


class ConsumeQueue:
    """One logical queue. Loop methods and thread methods are marked; see the module docstring."""

    def __init__(self, root: Path, topic: str, queue_id: int, file_size: int) -> None:
        if file_size < CQ_UNIT or file_size % CQ_UNIT:
            raise StoreError(f"mapped_file_size_consume_queue={file_size} is not a positive multiple of 20")
        self.topic = topic
        self.queue_id = queue_id
        self.dir = root / topic / str(queue_id)
        self.file_size = file_size
        self.units = file_size // CQ_UNIT
        self.files: list[CQFile] = []
        self.min_offset = 0
        self.max_offset = 0
        #: Entries below this are in the files; the rest are in ``tail``.
        self.written = 0
        self.tail = bytearray()
        #: Physical end (offset + size) of the newest entry.
        self.max_phys_end = 0
        self.destroyed = False
        self.generation = 0
        self.lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ConsumeQueue({self.topic}, {self.queue_id}, {self.min_offset}..{self.max_offset})"

    # -- appends (loop, or the recovery thread) ---------------------------------------------

    def append(self, queue_offset: int, entries: bytes | bytearray, count: int, phys_end: int) -> None:
        """Append ``count`` packed entries whose first has ``queue_offset`` (the expected next one)."""
        if queue_offset != self.max_offset:
            for i in range(count):
                phys, size, tags = ENTRY.unpack_from(entries, i * CQ_UNIT)
                self.put(queue_offset + i, phys, size, tags)
            return
        self.tail += entries
        self.max_offset += count
        self.max_phys_end = phys_end

    def put(self, queue_offset: int, phys: int, size: int, tags_code: int) -> bool:
        """Put one entry at ``queue_offset``, tolerating re-dispatch; False when already there.

        An existing identical entry is skipped; a conflicting one truncates the
        queue there first; a gap is filled with empty entries (served as
        OFFSET_FOUND_NULL holes) and logged.
        """
        if queue_offset < self.max_offset:
            if queue_offset < self.min_offset:
                return False
            old = self.entry(queue_offset)
            if old is not None and old[0] == phys and old[1] == size:
                return False
            log.warning("%r: entry %d points to %s, the CommitLog says %d; truncating the queue there",
                        self, queue_offset, old, phys)
            self.truncate_entries(queue_offset)
        if queue_offset > self.max_offset:
            if self.max_offset == self.min_offset and not self.tail:
                # A queue whose entries start later (a new queue after retention or on a fresh slave).
                self.min_offset = self.max_offset = self.written = queue_offset
            else:
                log.warning("%r: hole of %d entries before %d filled with empty entries",
                            self, queue_offset - self.max_offset, queue_offset)
                self.tail += bytes(CQ_UNIT * (queue_offset - self.max_offset))
                self.max_offset = queue_offset
        self.tail += ENTRY.pack(phys, size, tags_code)
        self.max_offset += 1
        self.max_phys_end = phys + size
        return True

    # -- reads (loop) ---------------------------------------------------------------------------

    def _file_index(self, pos: int) -> int:
        return (pos - self.files[0].start) // self.file_size if self.files else -1

    def file_for(self, queue_offset: int) -> CQFile | None:
        """The file holding ``queue_offset``'s entry, if it exists on disk."""
        pos = queue_offset * CQ_UNIT
        fs = self.files
        i = self._file_index(pos)
        if 0 <= i < len(fs) and fs[i].start <= pos < fs[i].start + self.file_size:
            return fs[i]
        return None

    def read(self, queue_offset: int, max_entries: int) -> bytes | None:
        """Packed entries from ``queue_offset``: at most ``max_entries``, never past the file's end.

        None when the entry's file is gone (``OFFSET_FOUND_NULL``). The caller
        checks ``min_offset <= queue_offset < max_offset``.
        """
        file_end = (queue_offset // self.units + 1) * self.units
        stop = min(queue_offset + max_entries, self.max_offset, file_end)
        if stop <= queue_offset:
            return b""
        parts = []
        if queue_offset < self.written:
            f = self.file_for(queue_offset)
            if f is None:
                return None
            upto = min(stop, self.written)
            rel = queue_offset * CQ_UNIT - f.start
            parts.append(f.view()[rel : rel + (upto - queue_offset) * CQ_UNIT])
            queue_offset = upto
        if queue_offset < stop:
            a = (queue_offset - self.written) * CQ_UNIT
            parts.append(bytes(self.tail[a : a + (stop - queue_offset) * CQ_UNIT]))
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def entry(self, queue_offset: int) -> tuple[int, int, int] | None:
        """``(phys, size, tags_code)`` at ``queue_offset``; None if absent or empty."""
        if not (self.min_offset <= queue_offset < self.max_offset):
            return None
        data = self.read(queue_offset, 1)
        if not data:
            return None
        phys, size, tags = ENTRY.unpack(data)
        return (phys, size, tags) if size > 0 else None

    def roll_next_file(self, queue_offset: int) -> int:
        """First queue offset of the file after the one holding ``queue_offset``."""
        return queue_offset + self.units - queue_offset % self.units

    # -- commit and flush ---------------------------------------------------------------------------

    def take_tail(self) -> tuple[int, bytes, int] | None:
        """Loop: ``(first entry, bytes, generation)`` of the unwritten tail, or None."""
        if not self.tail or self.destroyed:
            return None
        return self.written, bytes(self.tail), self.generation

    def write_entries(self, first: int, data: bytes) -> list[CQFile]:
        """IO thread: write entries ``data`` starting at entry ``first``; returns the files touched.

        Creates files as needed (sparse). Raises ``OSError``.
        """
        touched = []
        pos = first * CQ_UNIT
        view = memoryview(data)
        try:
            while view:
                f = self._file_for_write(pos)
                rel = pos - f.start
                n = min(len(view), self.file_size - rel)
                files.pwrite_all(f.fd, view[:n], rel)
                touched.append(f)
                pos += n
                view = view[n:]
        finally:
            view.release()
        return touched

    def _file_for_write(self, pos: int) -> CQFile:
        with self.lock:
            fs = self.files
            if fs and fs[-1].start <= pos < fs[-1].start + self.file_size:
                return fs[-1]
            i = self._file_index(pos)
            if 0 <= i < len(fs) and fs[i].start <= pos < fs[i].start + self.file_size:
                return fs[i]
            if fs and pos < fs[0].start:
                raise OSError(f"{self.dir}: write at byte {pos} before the first file {fs[0].path.name}")
            start = pos - pos % self.file_size
            if fs and start != fs[-1].start + self.file_size:
                # Skipped files (a queue that jumped ahead) would break the file arithmetic: fill them.
                while fs[-1].start + self.file_size < start:
                    s = fs[-1].start + self.file_size
                    fs.append(self._create(s))
            self.dir.mkdir(parents=True, exist_ok=True)
            f = self._create(start)
            fs.append(f)
            return f

    def _create(self, start: int) -> CQFile:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / files.offset_name(start)
        fd = files.create_file(path, self.file_size, False)
        return CQFile(start, self.file_size, path, fd)

    def commit_done(self, first: int, count: int, generation: int) -> None:
        """Loop: ``count`` entries from ``first`` reached the files."""
        if self.destroyed or generation != self.generation or first != self.written:
            return
        self.written += count
        del self.tail[: count * CQ_UNIT]

    def commit_now(self) -> list[CQFile]:
        """Recovery thread: write the tail at once."""
        taken = self.take_tail()
        if taken is None:
            return []
        first, data, gen = taken
        touched = self.write_entries(first, data)
        self.commit_done(first, len(data) // CQ_UNIT, gen)
        return touched

    # -- load and repair (recovery thread) --------------------------------------------------------

    def load(self) -> None:
        """Open the files and find the last entry. Raises :class:`StoreError` for a foreign layout."""
        names = []
        for name in os.listdir(self.dir):
            start = files.parse_offset_name(name)
            if start is None or start % self.file_size:
                log.warning("ignoring %s in %s: not a ConsumeQueue file name", name, self.dir)
                continue
            names.append(start)
        for start in sorted(names):
            path = self.dir / files.offset_name(start)
            fd = os.open(path, os.O_RDWR)
            size = os.fstat(fd).st_size
            if size > self.file_size:
                os.close(fd)
                raise StoreError(f"{path}: {size} bytes, larger than mapped_file_size_consume_queue={self.file_size}")
            if size < self.file_size:
                os.ftruncate(fd, self.file_size)
            f = CQFile(start, self.file_size, path, fd)
            if self.files and self.files[-1].start + self.file_size != start:
                log.warning("%s: gap before %s; dropping the older files", self.dir, path.name)
                for old in self.files:
                    old.close()
                self.files = []
            self.files.append(f)
        self.max_offset = self.written = 0
        while self.files:
            last = self.files[-1]
            n = self._count_entries(last)
            if n == 0 and len(self.files) > 1:
                # An empty last file: the previous one is full.
                self.files.pop().close()
                with contextlib.suppress(OSError):
                    os.unlink(last.path)
                continue
            self.max_offset = self.written = last.start // CQ_UNIT + n
            if n:
                phys, size, _tags = ENTRY.unpack(os.pread(last.fd, CQ_UNIT, (n - 1) * CQ_UNIT))
                self.max_phys_end = phys + size
            break
        self.min_offset = self.files[0].start // CQ_UNIT if self.files else 0
        self._skip_leading_holes()

    def _count_entries(self, f: CQFile) -> int:
        """Valid entries at the head of ``f``: a binary search for the first empty one, then a
        check that nothing follows it (else a full scan); garbage after the last entry is zeroed."""

        def valid(i: int) -> bool:
            data = os.pread(f.fd, CQ_UNIT, i * CQ_UNIT)
            if len(data) < CQ_UNIT:
                return False
            phys: int
            size: int
            phys, size, _ = ENTRY.unpack(data)
            return phys >= 0 and size > 0

        lo, hi = 0, self.units
        # Leading holes (a queue that starts mid-file) are zeros too: find the first valid entry.
        stripped = _first_nonzero_byte(f.fd, self.file_size)
        if stripped is None:
            return 0  # a file of zeros holds no entry, however large
        if stripped >= CQ_UNIT:
            lo = stripped // CQ_UNIT
        while lo < hi:
            mid = (lo + hi) // 2
            if valid(mid):
                lo = mid + 1
            else:
                hi = mid
        n = lo
        after = os.pread(f.fd, 4096, n * CQ_UNIT)
        if after.strip(b"\0"):
            data = os.pread(f.fd, self.file_size, 0)
            used = len(data.rstrip(b"\0"))
            n = (used + CQ_UNIT - 1) // CQ_UNIT
            while n > 0:
                phys, size, _ = ENTRY.unpack_from(data, (n - 1) * CQ_UNIT)
                if phys >= 0 and size > 0:
                    break
                n -= 1
            if n * CQ_UNIT < used:
                log.warning("%s: zeroing %d bytes after the last valid entry", f.path, used - n * CQ_UNIT)
                files.pwrite_all(f.fd, bytes(used - n * CQ_UNIT), n * CQ_UNIT)
        return n

    def _pread_entry(self, queue_offset: int) -> tuple[int, int, int]:
        f = self.file_for(queue_offset)
        if f is None:
            return (-1, 0, 0)
        data = os.pread(f.fd, CQ_UNIT, queue_offset * CQ_UNIT - f.start)
        if len(data) < CQ_UNIT:
            return (-1, 0, 0)
        phys, size, tags = ENTRY.unpack(data)
        return int(phys), int(size), int(tags)

    def _skip_leading_holes(self) -> None:
        """Move ``min_offset`` past the empty entries a queue starting mid-file has."""
        lo, hi = self.min_offset, min(self.max_offset, self.min_offset + self.units)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._pread_entry(mid)[1] > 0:
                hi = mid
            else:
                lo = mid + 1
        self.min_offset = lo

    def truncate_dirty(self, phys_end: int) -> int:
        """Recovery: drop entries whose record does not end by ``phys_end``; returns how many."""
        dropped = 0
        new_max = self.max_offset
        block: bytes = b""
        block_lo = block_hi = 0  # queue offsets held in ``block`` (entries read from a file, newest last)
        while new_max > self.min_offset:
            q = new_max - 1
            if q >= self.written:
                phys, size, _ = ENTRY.unpack_from(self.tail, (q - self.written) * CQ_UNIT)
            else:
                if not block_lo <= q < block_hi:  # read up to TRUNCATE_BLOCK entries back at once
                    f = self.file_for(q)
                    block = b""
                    if f is not None:
                        lo = max(q + 1 - TRUNCATE_BLOCK, f.start // CQ_UNIT, self.min_offset)
                        block = os.pread(f.fd, (q + 1 - lo) * CQ_UNIT, lo * CQ_UNIT - f.start)
                        block_lo = lo
                        block_hi = lo + len(block) // CQ_UNIT
                if block_lo <= q < block_hi:
                    phys, size, _ = ENTRY.unpack_from(block, (q - block_lo) * CQ_UNIT)
                else:
                    phys, size = -1, 0  # no file, or beyond its end
            if size > 0 and phys + size <= phys_end:
                self.max_phys_end = phys + size
                break
            new_max -= 1
            dropped += 1
        if dropped:
            self.truncate_entries(new_max)
            if new_max == self.min_offset:
                self.max_phys_end = 0
        return dropped

    def truncate_entries(self, new_max: int) -> None:
        """Remove entries ``[new_max, max_offset)`` from memory and from the files (zeroed)."""
        self.generation += 1
        if new_max >= self.written:
            del self.tail[(new_max - self.written) * CQ_UNIT :]
        else:
            self.tail = bytearray()
            with self.lock:
                pos = new_max * CQ_UNIT
                end = self.written * CQ_UNIT
                for f in list(self.files):
                    f_end = f.start + self.file_size
                    if f_end <= pos or f.start >= end:
                        continue
                    a = max(pos, f.start) - f.start
                    b = min(end, f_end) - f.start
                    files.pwrite_all(f.fd, bytes(b - a), a)
            self.written = new_max
        self.max_offset = new_max
        self.min_offset = min(self.min_offset, new_max)

    # -- retention (loop decides, IO thread deletes) ---------------------------------------------

    def expired_files(self, min_phys: int) -> list[CQFile]:
        """Full files (never the last) whose newest entry points below ``min_phys``."""
        out = []
        last_written_file = (self.written - 1) // self.units if self.written else -1
        for f in self.files[:-1]:
            if f.start // CQ_UNIT // self.units > last_written_file:
                break
            phys, _size, _ = ENTRY.unpack_from(f.view(), self.file_size - CQ_UNIT)
            if phys >= min_phys:
                break
            out.append(f)
        return out

    def remove_files(self, victims: list[CQFile]) -> None:
        """Loop: take ``victims`` (a prefix) out; their descriptors are closed by the caller's thread."""
        with self.lock:
            for f in victims:
                if self.files and self.files[0] is f and len(self.files) > 1:
                    self.files.pop(0)
                    f.close_view()
        if self.files:
            self.min_offset = max(self.min_offset, self.files[0].start // CQ_UNIT)

    def correct_min_offset(self, min_phys: int) -> None:
        """Loop: move ``min_offset`` to the first entry whose record is still in the CommitLog."""
        lo = self.min_offset
        hi = min(self.max_offset, (lo // self.units + 1) * self.units)
        first = self.entry(lo)
        if first is not None and first[0] >= min_phys:
            return
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and e[0] >= min_phys:
                hi = mid
            else:
                lo = mid + 1
        if lo != self.min_offset:
            self.min_offset = lo

    def close(self) -> None:
        """Close every file."""
        for f in self.files:
            f.close()
