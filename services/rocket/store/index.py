"""IndexFile (``IndexService``): find messages by key (each KEYS entry, and UNIQ_KEY) within a time range.

Layout of ``<root>/index/<yyyyMMddHHmmssSSS>`` (RocketMQ 4.9.8 ``IndexFile``),
big-endian::

    header (40 bytes): beginTimestamp int64 @0, endTimestamp int64 @8,
                       beginPhyOffset int64 @16, endPhyOffset int64 @24,
                       hashSlotCount int32 @32, indexCount int32 @36 (starts at 1)
    hash slots:        max_hash_slot_num x int32, the newest entry number in that bucket (0 = empty)
    entries:           max_index_num x 20 bytes: keyHash int32, phyOffset int64,
                       timeDiff int32 (seconds since beginTimestamp), prevIndex int32

Key hash = ``abs(hashCode(topic + "#" + key))`` (0 for Integer.MIN_VALUE),
slot = hash mod slot count; entries of a bucket form a linked list walked
backwards from the slot. Entry number 0 is never used, so a file holds
``max_index_num - 1`` entries; a new file starts when one is full.

Files are preallocated (``posix_fallocate``) before they are mapped for
writing, so a write through the mapping never meets an unallocated block.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocket.store import files
from rocket.store.record import index_entries, index_key_hash, put_index_entries

log = logging.getLogger("rocket.store")

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0
_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_INT = struct.Struct(">i")
#: Most offsets one query returns (``maxMsgsNumBatch``).
MAX_MSGS_NUM_BATCH = 64


def index_file_size(slot_num: int, index_num: int) -> int:
    """Bytes of an index file with these counts."""
    return INDEX_HEADER_SIZE + slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


def file_name_for(ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in local time, as RocketMQ names index files."""
    t = time.localtime(ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ms % 1000:03d}"


class IndexFile:
    """One index file, mapped read-write (it is preallocated)."""

    #: The 40-byte header, in memory (:meth:`write_header` writes it back).
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int

    def __init__(self, path: Path, slot_num: int, index_num: int, fd: int) -> None:
        self.path = path
        self.slot_num = slot_num
        self.index_num = index_num
        self.fd = fd
        self.size = index_file_size(slot_num, index_num)
        self.mm = mmap.mmap(fd, self.size)
        (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
         self.hash_slot_count, self.index_count) = _HEADER.unpack_from(self.mm, 0)
        if self.index_count <= 0:
            self.index_count = 1
        self._entries_at = INDEX_HEADER_SIZE + slot_num * HASH_SLOT_SIZE
        #: The hash slots as native-order unsigned 32-bit items (:func:`put_index_entries` swaps the
        #: bytes); released by :meth:`close`, before the mapping is.
        self.slots = memoryview(self.mm)[INDEX_HEADER_SIZE:self._entries_at].cast("I")
        # The header is written once per dispatched batch: a crash can leave written entries
        # past indexCount. Entries are written in order, so adopt them up to the first empty one.
        while self.index_count < index_num and any(self.entry(self.index_count)):
            _h, phys, diff, _p = self.entry(self.index_count)
            self.index_count += 1
            self.end_phy_offset = max(self.end_phy_offset, phys)
            self.end_timestamp = max(self.end_timestamp, self.begin_timestamp + diff * 1000)

    @classmethod
    def create(cls, path: Path, slot_num: int, index_num: int, prev_end_phy: int, prev_end_ts: int) -> IndexFile:
        """Create a file (blocking) whose range starts where the previous file's ended."""
        fd = files.create_file(path, index_file_size(slot_num, index_num), True, for_mapping=True)
        f = cls(path, slot_num, index_num, fd)
        if prev_end_phy > 0:
            f.begin_phy_offset = f.end_phy_offset = prev_end_phy
        if prev_end_ts > 0:
            f.begin_timestamp = f.end_timestamp = prev_end_ts
        f.index_count = 1
        f.write_header()
        return f

    def write_header(self) -> None:
        """Write the in-memory header fields to the mapping."""
        _HEADER.pack_into(self.mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                          self.end_phy_offset, self.hash_slot_count, self.index_count)

    @property
    def is_full(self) -> bool:
        """No entry number left."""
        return self.index_count >= self.index_num

    def put_key(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """Add one entry (``IndexFile.putKey``); False when the file is full.

        The header fields change in memory only: call :meth:`write_header` after a batch.
        """
        count = self.index_count
        if count >= self.index_num:
            return False
        mm = self.mm
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.slot_num) * HASH_SLOT_SIZE
        (slot_value,) = _INT.unpack_from(mm, slot_pos)
        if slot_value <= INVALID_INDEX or slot_value > count:
            slot_value = INVALID_INDEX
        begin = self.begin_timestamp
        if begin <= 0:
            diff = 0
        else:
            diff = (store_timestamp - begin) // 1000 if store_timestamp >= begin else 0
            diff = min(diff, 0x7FFFFFFF)
        _ENTRY.pack_into(mm, self._entries_at + count * INDEX_SIZE, key_hash, phy_offset, diff, slot_value)
        _INT.pack_into(mm, slot_pos, count)
        if count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        if slot_value == INVALID_INDEX:
            self.hash_slot_count += 1
        self.index_count = count + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        return True

    def put_keys(self, hashes: list[int], phys: list[int], store_timestamps: list[int]) -> int:
        """Add entries ``(hashes[i], phys[i], store_timestamps[i] ms)`` in order, as
        :meth:`put_key` one after the other would; returns how many fit (the rest: file full).

        The header fields change in memory only: call :meth:`write_header` after a batch.
        """
        count = self.index_count
        room = self.index_num - count
        if room <= 0 or not hashes:
            return 0
        n = min(room, len(hashes))
        if count <= 1:  # the first entry sets the file's begin fields
            if not self.put_key(hashes[0], phys[0], store_timestamps[0]):
                return 0
            if n == 1:
                return 1
            return 1 + self.put_keys(hashes[1:n], phys[1:n], store_timestamps[1:n])
        if n < len(hashes):
            hashes, phys, store_timestamps = hashes[:n], phys[:n], store_timestamps[:n]
        count, new_slots = put_index_entries(self.mm, self.slots, self._entries_at, self.begin_timestamp, count,
                                             hashes, phys, store_timestamps)
        self.hash_slot_count += new_slots
        self.index_count = count
        self.end_phy_offset = phys[n - 1]
        self.end_timestamp = store_timestamps[n - 1]
        return n

    def entry(self, number: int) -> tuple[int, int, int, int]:
        """``(keyHash, phyOffset, timeDiff, prevIndex)`` of entry ``number``."""
        h, phys, diff, prev = _ENTRY.unpack_from(self.mm, self._entries_at + number * INDEX_SIZE)
        return int(h), int(phys), int(diff), int(prev)

    def is_time_matched(self, begin: int, end: int) -> bool:
        """Does ``[begin, end]`` overlap this file's time range (``isTimeMatched``)?"""
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def select(self, key_hash: int, max_num: int, begin: int, end: int, out: list[int]) -> None:
        """Append to ``out`` the offsets of entries with ``key_hash`` stored in ``[begin, end]`` ms."""
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.slot_num) * HASH_SLOT_SIZE
        (slot_value,) = _INT.unpack_from(self.mm, slot_pos)
        count = self.index_count
        if slot_value <= INVALID_INDEX or slot_value > count or count <= 1:
            return
        nxt = slot_value
        seen = 0
        while len(out) < max_num and seen < count:
            seen += 1
            h, phys, diff, prev = self.entry(nxt)
            if diff < 0:
                break
            time_read = self.begin_timestamp + diff * 1000
            if h == key_hash and begin <= time_read <= end:
                out.append(phys)
            if prev <= INVALID_INDEX or prev > count or prev == nxt or time_read < begin:
                break
            nxt = prev

    def repair(self, phys_end: int, read_store_ts: Callable[[int], int]) -> int:
        """Recovery: drop the entries at or past ``phys_end`` (the reput re-adds the valid ones).

        Returns the number of entries removed.
        """
        count = self.index_count
        mm = self.mm
        entries_at = self._entries_at
        unpack_entry = _ENTRY.unpack_from
        # Entries are in CommitLog order: find the first one to remove by bisection.
        lo, hi = 1, count
        while lo < hi:
            mid = (lo + hi) // 2
            if unpack_entry(mm, entries_at + mid * INDEX_SIZE)[1] < phys_end:
                lo = mid + 1
            else:
                hi = mid
        removed = count - lo
        if removed > 0:
            slot_num = self.slot_num
            unpack_int = _INT.unpack_from
            pack_int = _INT.pack_into
            for n in range(count - 1, lo - 1, -1):  # newest first: each bucket falls back to its previous entry
                h, _phys, _d, prev = unpack_entry(mm, entries_at + n * INDEX_SIZE)
                slot_pos = INDEX_HEADER_SIZE + (h % slot_num) * HASH_SLOT_SIZE
                if unpack_int(mm, slot_pos)[0] == n:
                    pack_int(mm, slot_pos, prev if 0 < prev < n else INVALID_INDEX)
            mm[entries_at + lo * INDEX_SIZE : entries_at + count * INDEX_SIZE] = bytes(removed * INDEX_SIZE)
            count = lo
        if removed:
            self.index_count = count
            if count > 1:
                _h, phys, diff, _p = self.entry(count - 1)
                self.end_phy_offset = phys
                ts = read_store_ts(phys)
                self.end_timestamp = ts if ts > 0 else self.begin_timestamp + diff * 1000
            else:
                self.end_phy_offset = self.begin_phy_offset
                self.end_timestamp = self.begin_timestamp
            self.write_header()
        return removed

    def close(self) -> None:
        """Unmap and close."""
        self.slots.release()
        with contextlib.suppress(BufferError, ValueError):
            self.mm.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


@dataclass(slots=True)
class _Pending:
    key_hash: int
    phys: int
    store_timestamp: int


class IndexService:
    """All index files of a store: build (``buildIndex``) and query (``queryOffset``).

    ``create_file`` makes a new file; on the loop the store passes a function
    that defers creation to a thread (:meth:`set_async_creator`) — entries
    arriving meanwhile wait in memory.
    """

    def __init__(self, dir: Path, slot_num: int, index_num: int, clock_ms: Callable[[], int]) -> None:
        self.dir = dir
        self.slot_num = slot_num
        self.index_num = max(index_num, 2)
        self.clock_ms = clock_ms
        self.files: list[IndexFile] = []
        self._pending: list[_Pending] = []
        self._creating = False
        self._async_create: Callable[[Path, int, int], None] | None = None
        #: Files written since their last flush.
        self.dirty: set[IndexFile] = set()
        self._header_dirty: set[IndexFile] = set()
        self._spare: IndexFile | None = None
        #: Entry count at which the next file is created in advance.
        self._spare_at = self.index_num - max(self.index_num // 4, 1)
        #: Physical offset of the newest message indexed (or waiting for a file); -1 when none.
        self.indexed_phys = -1

    # -- load (recovery thread) ----------------------------------------------------------------

    def load(self) -> None:
        """Open the index files (oldest first); files of another size are set aside with a warning."""
        self.dir.mkdir(parents=True, exist_ok=True)
        expected = index_file_size(self.slot_num, self.index_num)
        for name in sorted(os.listdir(self.dir)):
            path = self.dir / name
            if not (len(name) == 17 and name.isdigit()):
                continue
            if path.stat().st_size != expected:
                log.warning("%s: %d bytes, expected %d for max_hash_slot_num/max_index_num; not used",
                            path, path.stat().st_size, expected)
                continue
            fd = os.open(path, os.O_RDWR)
            self.files.append(IndexFile(path, self.slot_num, self.index_num, fd))
        self.indexed_phys = self.end_phy_offset

    def repair(self, phys_end: int, read_store_ts: Callable[[int], int]) -> None:
        """Recovery: drop files wholly past ``phys_end``, remove later entries from the newest one."""
        while len(self.files) > 1 and self.files[-1].begin_phy_offset >= phys_end:
            f = self.files.pop()
            log.warning("index recovery: deleting %s (it starts past the end of the CommitLog)", f.path)
            f.close()
            with contextlib.suppress(OSError):
                os.unlink(f.path)
        if self.files:
            n = self.files[-1].repair(phys_end, read_store_ts)
            if n:
                log.info("index recovery: removed %d entries of %s", n, self.files[-1].path.name)
        self.indexed_phys = self.end_phy_offset

    def truncate(self, phys_end: int, read_store_ts: Callable[[int], int]) -> None:
        """Forget every entry of a message at or past ``phys_end``: HA's divergent-tail repair,
        after the CommitLog was cut there (``DefaultMessageStore.truncateDirtyFiles`` in
        RocketMQ 5 cuts the CommitLog and ConsumeQueues only; we cut the index too, so a
        query never returns a record that is gone).

        Entries still waiting for a file are dropped, files wholly past the cut are deleted
        and the newest remaining one is repaired as in :meth:`repair`; the deleted files
        leave the dirty sets and the newest file is marked for the next fdatasync.
        ``read_store_ts(phys)`` gives the store time (ms) of the record at ``phys``, -1 when
        unknown. Blocking (file writes); raises ``OSError`` when a file cannot be written.
        """
        self._pending = [p for p in self._pending if p.phys < phys_end]
        before = list(self.files)
        self.repair(phys_end, read_store_ts)
        gone = [f for f in before if f not in self.files]
        self.dirty.difference_update(gone)
        self._header_dirty.difference_update(gone)
        self.dirty.update(self.files[-1:])

    @property
    def end_phy_offset(self) -> int:
        """Physical offset of the newest indexed message; -1 when none."""
        for f in reversed(self.files):
            if f.index_count > 1:
                return f.end_phy_offset
        return -1

    @property
    def last_update_timestamp(self) -> int:
        """``indexLastUpdateTimestamp``: end time of the newest file."""
        return self.files[-1].end_timestamp if self.files else 0

    @property
    def last_update_phy_offset(self) -> int:
        """``indexLastUpdatePhyoffset``: end physical offset of the newest file."""
        return self.files[-1].end_phy_offset if self.files else 0

    # -- build ----------------------------------------------------------------------------------------

    def set_async_creator(self, create: Callable[[Path, int, int], None] | None) -> None:
        """On the loop: ``create(path, prev_end_phy, prev_end_ts)`` starts a creation in a thread
        and must call :meth:`file_created` on the loop when done."""
        self._async_create = create

    def new_path(self) -> Path:
        """A fresh file name from the clock (bumped by 1 ms on a clash)."""
        ms = self.clock_ms()
        while True:
            path = self.dir / file_name_for(ms)
            if not path.exists() and all(f.path != path for f in self.files) and not (
                self._spare is not None and self._spare.path == path
            ):
                return path
            ms += 1

    def _writable(self) -> IndexFile | None:
        if self.files and not self.files[-1].is_full:
            return self.files[-1]
        prev_phy = self.files[-1].end_phy_offset if self.files else 0
        prev_ts = self.files[-1].end_timestamp if self.files else 0
        spare = self._spare
        if spare is not None:
            self._spare = None
            spare.begin_phy_offset = spare.end_phy_offset = prev_phy
            spare.begin_timestamp = spare.end_timestamp = prev_ts
            self.files.append(spare)
            self._header_dirty.add(spare)
            return spare
        if self._creating:
            return None
        path = self.new_path()
        if self._async_create is not None:
            self._creating = True
            self._async_create(path, prev_phy, prev_ts)
            return None
        f = IndexFile.create(path, self.slot_num, self.index_num, prev_phy, prev_ts)
        self.files.append(f)
        return f

    def _prepare_spare(self) -> None:
        """Ask for the next file before the current one is full, so entries rarely wait."""
        if self._spare is None and not self._creating and self._async_create is not None:
            self._creating = True
            self._async_create(self.new_path(), 0, 0)

    def ensure_writable_file(self) -> None:
        """Create a file now (blocking) unless the newest one has room (start-up)."""
        if not self.files or self.files[-1].is_full:
            async_create, self._async_create = self._async_create, None
            try:
                self._writable()
            finally:
                self._async_create = async_create

    def write_headers(self) -> None:
        """Write the headers of the files changed since the last call (after each dispatched batch)."""
        if self._header_dirty:
            for f in self._header_dirty:
                f.write_header()
            self._header_dirty.clear()

    def pending_min_phys(self) -> int:
        """Offset of the oldest message whose entries wait for a file; -1 when none."""
        return self._pending[0].phys if self._pending else -1

    def retry_pending(self) -> None:
        """Ask again for a file when entries wait and no creation is under way."""
        if self._pending and not self._creating:
            self.file_created(None)

    def file_created(self, f: IndexFile | None) -> None:
        """Loop: a file requested from the thread exists (None: creation failed, retry later)."""
        self._creating = False
        if f is not None:
            self._spare = f
        if not self._pending:
            return
        if self._writable() is None:
            return
        pending, self._pending = self._pending, []
        for p in pending:
            self._put(p.key_hash, p.phys, p.store_timestamp)

    def _put(self, key_hash: int, phys: int, store_timestamp: int) -> None:
        if not self._pending:
            f = self.files[-1] if self.files else None
            if f is not None and f.put_key(key_hash, phys, store_timestamp):
                self.dirty.add(f)
                self._header_dirty.add(f)
                if f.index_count == self._spare_at:
                    self._prepare_spare()
                return
        if self._pending:
            self._pending.append(_Pending(key_hash, phys, store_timestamp))
            return
        while True:
            f = self._writable()
            if f is None:
                self._pending.append(_Pending(key_hash, phys, store_timestamp))
                return
            if f.put_key(key_hash, phys, store_timestamp):
                self.dirty.add(f)
                self._header_dirty.add(f)
                return
            self._header_dirty.add(f)

    def build(self, topic: str, phys: int, store_timestamp: int, uniq_key: str | None,
              keys: Sequence[str] | str) -> None:
        """Index one message's UNIQ_KEY and each of its keys (``IndexService.buildIndex``).

        ``keys`` is the KEYS list or the raw space-separated property. Messages
        at or below the newest indexed offset are skipped (re-dispatch).
        """
        if phys <= self.indexed_phys:
            return
        self.indexed_phys = phys
        if uniq_key:
            self._put(index_key_hash(topic, uniq_key), phys, store_timestamp)
        if isinstance(keys, str):
            keys = keys.split(" ")
        for k in keys:
            if k:
                self._put(index_key_hash(topic, k), phys, store_timestamp)

    def build_batch(self, topic: str, phys: list[int], store_timestamp: int, uniq_keys: list[str | None],
                    keys: list[list[str]]) -> None:
        """:meth:`build` for the messages of one put (same topic and store time), in order.

        ``phys``, ``uniq_keys`` and ``keys`` are parallel lists (one item per message).
        """
        n = len(phys)
        self.build_many([topic] * n, phys, [store_timestamp] * n, uniq_keys, keys)

    def build_many(self, topics: list[str], phys: list[int], store_timestamps: list[int],
                   uniq_keys: list[str | None], keys: Sequence[Sequence[str] | str]) -> None:
        """:meth:`build` for many messages in CommitLog order: parallel lists, one item per
        message (``keys`` items as in :meth:`build`). The entries go to the newest file by
        one :meth:`IndexFile.put_keys`, byte for byte what :meth:`build` would write."""
        if self._pending or not self.files or self.files[-1].is_full:
            for t, p, ts, u, k in zip(topics, phys, store_timestamps, uniq_keys, keys, strict=True):
                if u or k:
                    self.build(t, p, ts, u, k)
            return
        hashes, offsets, times, last = index_entries(topics, phys, store_timestamps, uniq_keys, keys,
                                                     self.indexed_phys)
        self.indexed_phys = last
        if not hashes:
            return
        f = self.files[-1]
        done = f.put_keys(hashes, offsets, times)
        self.dirty.add(f)
        self._header_dirty.add(f)
        if f.index_count >= self._spare_at and self._spare is None:
            self._prepare_spare()
        for i in range(done, len(hashes)):
            self._put(hashes[i], offsets[i], times[i])

    # -- query ---------------------------------------------------------------------------------------------

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Physical offsets of messages indexed under ``topic#key`` stored in ``[begin, end]`` ms,
        newest first (``queryOffset``); at most ``min(max_num, 64)``."""
        max_num = min(max_num, MAX_MSGS_NUM_BATCH)
        out: list[int] = []
        if max_num <= 0:
            return out
        h = index_key_hash(topic, key)
        for p in reversed(self._pending):  # entries waiting for a new file are the newest
            if p.key_hash == h and begin <= p.store_timestamp <= end:
                out.append(p.phys)
                if len(out) >= max_num:
                    return out
        for f in reversed(self.files):
            if f.is_time_matched(begin, end):
                f.select(h, max_num, begin, end, out)
            if f.begin_timestamp < begin or len(out) >= max_num:
                break
        return out

    # -- retention ----------------------------------------------------------------------------------------------

    def expired_files(self, min_phys: int) -> list[IndexFile]:
        """Files (never the newest) whose newest entry is below ``min_phys`` (``deleteExpiredFile``)."""
        out = []
        for f in self.files[:-1]:
            if f.end_phy_offset < min_phys:
                out.append(f)
            else:
                break
        return out

    def remove(self, victims: list[IndexFile]) -> None:
        """Take ``victims`` out of the list (the caller deletes them in a thread)."""
        for f in victims:
            if f in self.files:
                self.files.remove(f)
                self.dirty.discard(f)
                self._header_dirty.discard(f)

    def close(self) -> None:
        """Write headers and close every file (an unused spare file is removed)."""
        self.write_headers()
        for f in self.files:
            f.close()
        self.files = []
        if self._spare is not None:
            self._spare.close()
            with contextlib.suppress(OSError):
                os.unlink(self._spare.path)
            self._spare = None
