"""The CommitLog: every topic's records in one append-only log of fixed-size segments.

As RocketMQ's ``CommitLog`` over a ``MappedFileQueue``.

Layout: ``<root>/commitlog/<20-digit start offset>``, each file
``mapped_file_size_commit_log`` bytes (1 GiB by default), preallocated at
creation so that a full disk shows up there (CREATE_MAPPED_FILE_FAILED) and not
in the middle of a record. Records are RocketMQ's stored layout (``MessageDecoder``); a
record never spans two files: when ``record + 8`` bytes do not fit, the rest
of the file is closed by a blank marker (int32 remaining length, int32
``BLANK_MAGIC_CODE``) and the record goes to the next file.

Write path (RocketMQ 4.9.8 ``CommitLog.putMessage`` + ``GroupCommitService``,
reshaped for one event loop):

* On the loop, :meth:`CommitLog.put` assigns queue offsets (table per
  ``(topic, queueId)``) and physical offsets, encodes the records into an
  in-memory chunk (the buffers each record is made of, not joined) and queues a
  :class:`PutOp` per call.
* One *job* at a time writes every chunk queued since the previous job with
  ``pwritev`` (never through a mapping). A job into files that exist already
  is only a copy into the page cache: it runs on the loop at the end of the
  loop turn whose puts it gathers (no thread hand-off per job), unless it
  exceeds ``INLINE_WRITE_MAX`` bytes; others run on the writer thread.
* When a job completes the loop advances ``committed`` (slaves may read the
  new records from now on), resolves the covered puts that do not wait for a
  flush, and has the reput dispatch the records at the end of that loop turn,
  after the answers were written (``on_committed``).
* Under SYNC_FLUSH one ``fdatasync`` at a time runs on the syncer thread and
  covers everything committed when it started (group commit, RocketMQ's
  ``GroupCommitService``); when it ends ``flushed`` advances, the puts it
  covers are answered, and the next one starts if more was committed
  meanwhile. Writing goes on while it runs, so a record is readable before
  its fdatasync as in RocketMQ (its ``ReputMessageService`` dispatches up to
  the written end); its producer hears of it only after.
* A failed write (ENOSPC, EIO ...) fails every put from the failing chunk
  on, zeroes whatever part of the chunk reached the file, and rolls the
  write position and the queue offsets back: nothing partial is ever
  visible, and the next put tries again.

Reads (:meth:`CommitLog.read`) come from read-only mappings of the files and
never go beyond ``committed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import queue
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rocket.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
)
from rocket.store import files
from rocket.store.api import (
    FlushDiskType,
    MessageStoreConfig,
    PutMessageBatch,
    PutMessageRequest,
    PutMessageResult,
    PutMessageStatus,
    StoreError,
)
from rocket.store.record import (
    BLANK,
    BLANK_MARKER,
    CORRUPT,
    MIN_RECORD_SIZE,
    DispatchRecord,
    RecordEncoder,
    RecordRow,
    check_record,
    parse_dispatch,
    pickup_store_timestamp,
    topic_tail,
    walk_records,
)

log = logging.getLogger("rocket.store")

_SIZE_MAGIC = struct.Struct(">ii")
_TRAN_MASK = 0xC
#: Bytes read at a time by recovery scans.
SCAN_CHUNK = 8 * 1024 * 1024
#: Largest ASYNC_FLUSH job written on the loop itself (bigger ones go to the writer thread).
INLINE_WRITE_MAX = 4 * 1024 * 1024


class Segment(files.MappedFile):
    """One CommitLog file: ``[start, start + size)`` of the log.

    ``fd`` is an O_RDWR descriptor once the writer thread created the file
    (``created``); reads go through the read-only mapping.
    """

    __slots__ = ("created",)

    def __init__(self, start: int, size: int, path: Path) -> None:
        super().__init__(start, size, path)
        self.created = False


@dataclass(slots=True, init=False)
class DispatchBatch:
    """What one put appended, kept for the reput so that it need not re-parse its own records.

    All records of a batch share topic, queue and store time; ``queue_offset``
    of record i is ``first_queue_offset + i`` unless it is transactional
    (``sys_flags`` is only set when some record is).
    """

    start: int
    end: int
    topic: str
    queue_id: int
    first_queue_offset: int
    phys: list[int]
    sizes: list[int]
    tags: list[int]
    keys: list[list[str]] | None
    uniq: list[str | None] | None
    store_timestamp: int
    sys_flags: list[int] | None = None

    def __init__(self, start: int, end: int, topic: str, queue_id: int, first_queue_offset: int, phys: list[int],
                 sizes: list[int], tags: list[int], keys: list[list[str]] | None, uniq: list[str | None] | None,
                 store_timestamp: int, sys_flags: list[int] | None = None) -> None:
        # Written out (``init=False``): the ``__init__`` that ``dataclass`` generates stays
        # interpreted in the compiled form of this module (rocket.compiled); this one is native.
        self.start = start
        self.end = end
        self.topic = topic
        self.queue_id = queue_id
        self.first_queue_offset = first_queue_offset
        self.phys = phys
        self.sizes = sizes
        self.tags = tags
        self.keys = keys
        self.uniq = uniq
        self.store_timestamp = store_timestamp
        self.sys_flags = sys_flags


class PutOp:
    """One pending put: resolved once ``end`` is committed, or flushed when ``sync``.

    The outcome goes to ``fut`` (an ``asyncio.Future``, for callers that await it) or, when
    ``fut`` is None, to ``done(result)``, called once on the loop in the call that resolves the
    put (no loop turn in between: the send path answers from it). ``resolved`` is True once
    either happened (or ``fut`` was cancelled by its waiter).
    """

    __slots__ = ("deadline", "done", "end", "first_queue_offset", "fut", "queue_key", "resolved", "result",
                 "store_timestamp", "sync")

    def __init__(self, end: int, fut: asyncio.Future[PutMessageResult] | None, result: PutMessageResult, sync: bool,
                 deadline: float, queue_key: tuple[str, int] | None, first_queue_offset: int,
                 store_timestamp: int, done: Callable[[PutMessageResult], object] | None = None) -> None:
        self.end = end
        self.fut = fut
        self.done = done
        self.resolved = False
        self.result = result
        self.sync = sync
        self.deadline = deadline
        self.queue_key = queue_key
        self.first_queue_offset = first_queue_offset
        self.store_timestamp = store_timestamp

    def resolve(self, result: PutMessageResult) -> None:
        """Deliver ``result`` (once; later calls do nothing). An exception of ``done`` is logged:
        it must not stop the CommitLog from resolving the puts after this one."""
        if self.resolved:
            return
        self.resolved = True
        fut = self.fut
        if fut is not None:
            if not fut.done():
                fut.set_result(result)
            return
        done = self.done
        if done is not None:
            self.done = None
            try:
                done(result)
            except Exception:
                log.exception("put completion callback %r failed", done)


def _out_of_range(exc: struct.error) -> PutMessageResult:
    """MESSAGE_ILLEGAL for a record field the CommitLog format cannot hold (an int field outside
    32 bits, a long outside 64: RocketMQ's ``CommitLog`` record layout), from the encoder's
    ``struct.error``. The broker's header checks refuse such values first; this covers callers
    of the store API."""
    return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"a record field is out of range: {exc}")


class _Chunk:
    """Records appended to ``seg`` from ``start`` on and not yet written: the buffers they were
    made of (``parts``, in order, ``size`` bytes in all), written by one ``pwritev`` without being
    joined first. ``end`` is the log offset after them: past ``start + size`` when a blank marker
    closes the file (its remaining bytes stay as the file has them, zeros)."""

    __slots__ = ("end", "parts", "seg", "size", "start")

    def __init__(self, seg: Segment, start: int) -> None:
        self.seg = seg
        self.start = start
        self.parts: list[files.Buffer] = []
        self.size = 0
        self.end = start


@dataclass(slots=True, init=False)
class _JobResult:
    ok_until: int
    error: OSError | None = None
    phase: str = ""
    path: Path | None = None
    write_seconds: float = 0.0

    def __init__(self, ok_until: int, error: OSError | None = None, phase: str = "", path: Path | None = None,
                 write_seconds: float = 0.0) -> None:
        # Written out (``init=False``): the ``__init__`` that ``dataclass`` generates stays
        # interpreted in the compiled form of this module (rocket.compiled); this one is native.
        self.ok_until = ok_until
        self.error = error
        self.phase = phase
        self.path = path
        self.write_seconds = write_seconds


@dataclass(slots=True)
class CommitLogStats:
    """Cheap counters for ``runtime_info``: flush and write timings in seconds."""

    jobs: int = 0
    fdatasyncs: int = 0
    bytes_written: int = 0
    last_flush_seconds: float = 0.0
    max_flush_seconds: float = 0.0
    last_write_seconds: float = 0.0
    write_errors: int = 0


@dataclass(slots=True)
class RecoveryResult:
    """Outcome of a recovery scan: end of valid data and what was found after it."""

    end: int
    torn: bool
    records: int
    last_store_timestamp: int
    remark: str = ""


class _WriterThread:
    """One thread that runs the submitted calls in order: the CommitLog's writer and syncer.

    ``ThreadPoolExecutor(1)`` without its per-call ``Future``, work item, locks and
    thread-count check: under SYNC_FLUSH one fdatasync (a group commit) is handed over per
    few puts, and the caller never looked at the future (the call answers with
    ``call_soon_threadsafe``). The thread starts at the first call; it is a daemon, so a
    process that exits without :meth:`shutdown` is not held up (what it had not written
    was not acknowledged either).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[tuple[Callable[..., None], tuple[object, ...]] | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._closed = False

    def submit(self, fn: Callable[..., None], *args: object) -> None:
        """Run ``fn(*args)`` on the thread after the calls submitted before it.

        Raises ``RuntimeError`` after :meth:`shutdown`."""
        if self._closed:
            raise RuntimeError(f"{self._name}: cannot run a job after shutdown")
        if self._worker is None:
            self._worker = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._worker.start()
        self._queue.put((fn, args))

    def _run(self) -> None:
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            fn, args = item
            try:
                fn(*args)
            except BaseException:  # the CommitLog's jobs catch their own errors; be safe
                log.exception("%s: job failed", self._name)

    def shutdown(self, wait: bool = True) -> None:
        """Run what was submitted, then stop the thread (``wait``: and wait for it)."""
        self._closed = True
        thread = self._worker
        if thread is not None:
            self._queue.put(None)
            if wait:
                thread.join()


class CommitLog:
    """The log of all records; see the module docstring for the write path.

    ``committed`` is the confirmed end: bytes up to it are whole records in
    the files (page cache); ``flushed`` is the part fdatasync'd. Both are
    physical offsets. Not thread-safe: loop methods must be called on the
    loop, ``load``/``recover`` before the loop uses the log.
    """

    def __init__(self, config: MessageStoreConfig, *, preallocate: bool = True) -> None:
        self.config = config
        self.dir = config.store_path_root_dir / "commitlog"
        self.segment_size = config.mapped_file_size_commit_log
        self.preallocate = preallocate
        self.segments: list[Segment] = []
        #: Next queue offset per (topic, queueId) (``topicQueueTable``).
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.encoder = RecordEncoder(config.store_host)
        self._tails: dict[str, bytes] = {}
        self.sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self.append_offset = 0
        self.committed = 0
        self.flushed = 0
        self.committed_store_timestamp = 0
        self.flushed_store_timestamp = 0
        #: Batches appended but not yet taken by the reput, in log order.
        self.dispatch_batches: deque[DispatchBatch] = deque()
        self.stats = CommitLogStats()
        #: Called on the loop after ``committed`` advanced (the reput).
        self.on_committed: Callable[[], None] = lambda: None
        #: Write function (``os.pwritev``: a chunk's record parts in one call), replaceable in tests to
        #: inject ENOSPC/EIO.
        self.pwritev: Callable[[int, Sequence[files.Buffer], int], int] = os.pwritev
        #: File creation, replaceable in tests.
        self.create_file: Callable[[Path, int, bool], int] = files.create_file
        self._ops: deque[PutOp] = deque()
        self._chunks: list[_Chunk] = []
        self._cur: _Chunk | None = None
        self._job_running = False
        self._start_scheduled = False
        #: Open :meth:`gather` calls: while > 0, puts do not start or schedule a job.
        self._gathering = 0
        self._flush_lock: asyncio.Lock | None = None
        self._writer = _WriterThread("rocket-commitlog-writer")
        #: SYNC_FLUSH: the group commit's fdatasyncs, one at a time (``_syncing``).
        self._syncer = _WriterThread("rocket-commitlog-syncer")
        self._syncing = False
        self._flusher = ThreadPoolExecutor(1, thread_name_prefix="rocket-commitlog-flusher")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: asyncio.Event | None = None
        self._last_error_log = 0.0

    # -- positions ----------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """Start of the oldest file (``getMinOffset``); the append position when there is none."""
        return self.segments[0].start if self.segments else self.append_offset

    @property
    def busy(self) -> bool:
        """A job or flush is in flight, or puts wait."""
        flushing = self._syncing or (self._flush_lock is not None and self._flush_lock.locked())
        return self._job_running or flushing or bool(self._ops) or bool(self._chunks)

    def segment_at(self, offset: int) -> Segment | None:
        """The file holding ``offset``, if any."""
        segs = self.segments
        if not segs:
            return None
        i = (offset - segs[0].start) // self.segment_size
        if 0 <= i < len(segs):
            seg = segs[i]
            if seg.start <= offset < seg.end:
                return seg
        return None

    def _path(self, start: int) -> Path:
        return self.dir / files.offset_name(start)

    # -- load and recovery (blocking; start-up thread) -----------------------------------

    def load(self) -> None:
        """Open every CommitLog file. Raises :class:`StoreError` for a wrong size or a gap."""
        self.dir.mkdir(parents=True, exist_ok=True)
        starts = []
        for name in os.listdir(self.dir):
            start = files.parse_offset_name(name)
            if start is None:
                log.warning("ignoring %s in %s: not a CommitLog file name", name, self.dir)
                continue
            starts.append(start)
        for start in sorted(starts):
            path = self._path(start)
            seg = Segment(start, self.segment_size, path)
            seg.fd = os.open(path, os.O_RDWR)
            size = os.fstat(seg.fd).st_size
            if size > self.segment_size:
                os.close(seg.fd)
                raise StoreError(
                    f"{path}: {size} bytes, larger than mapped_file_size_commit_log={self.segment_size}; "
                    "was the store written with another segment size?"
                )
            if size < self.segment_size:
                log.warning("%s: %d bytes, extending to %d", path, size, self.segment_size)
                files.allocate(seg.fd, self.segment_size, self.preallocate)
            seg.created = True
            if self.segments and self.segments[-1].end != start:
                seg.close()
                raise StoreError(
                    f"{self.dir}: gap between {self.segments[-1].path.name} and {path.name}; "
                    "a CommitLog file is missing"
                )
            self.segments.append(seg)

    def _store_timestamp_blocking(self, offset: int) -> int:
        seg = self.segment_at(offset)
        if seg is None:
            return 0
        return pickup_store_timestamp(os.pread(seg.fd, 128, offset - seg.start))

    def first_store_timestamp(self, seg: Segment) -> int:
        """Store time of the first record of ``seg``; -1 when it has none (blocking read)."""
        head = os.pread(seg.fd, 128, 0)
        if len(head) < MIN_RECORD_SIZE:
            return -1
        _size, magic = _SIZE_MAGIC.unpack_from(head, 0)
        if magic != MESSAGE_MAGIC_CODE:
            return -1
        return pickup_store_timestamp(head, 0)

    def recover(  # noqa: C901 - hot: one pass over every record, timed by bench_store's recovery
        self, scan_from: int, dispatch_from: int, on_record: Callable[[DispatchRecord], None],
        check_crc: bool, zero_tail: bool, on_rows: Callable[[list[RecordRow]], None] | None = None,
    ) -> RecoveryResult:
        """Validate records from ``scan_from`` (a record boundary) to the end of the data.

        Every valid record at or after ``dispatch_from`` is passed to
        ``on_record``; those before it are only validated (a faster walk).
        Checks: magic code, sizes, physical offset field, and the body CRC
        when ``check_crc``. The first bad or incomplete record is
        the end: with ``zero_tail`` (abnormal recovery) or when something
        torn was found, the rest of that file is zeroed (truncate + re-extend)
        and later files are deleted, so nothing past the end can ever be
        served. Sets ``append_offset``/``committed``/``flushed`` to the end.

        Runs of ordinary records are walked by :func:`walk_records` (no object
        per record); with ``on_rows`` the records to dispatch in such a run are
        passed to it as :data:`RecordRow` lists (always before any later record
        goes to ``on_record``), else each as a :class:`DispatchRecord` to ``on_record``.
        """
        segs = self.segments
        if not segs:
            return RecoveryResult(end=self.append_offset, torn=False, records=0, last_store_timestamp=0)
        if not (segs[0].start <= scan_from <= segs[-1].end):
            scan_from = segs[0].start
        pos = scan_from
        torn = False
        remark = ""
        records = 0
        last_ts = 0
        i = (pos - segs[0].start) // self.segment_size
        last_size = 0
        view = memoryview(b"")
        while i < len(segs) and pos < segs[-1].end:
            seg = segs[i]
            buf = b""
            buf_start = pos
            moved_on = False
            while pos < seg.end:
                rel = pos - buf_start
                avail = len(buf) - rel
                need = 8 if avail < 8 else 0
                if not need:
                    total, magic = _SIZE_MAGIC.unpack_from(buf, rel)
                    if magic == MESSAGE_MAGIC_CODE and total > avail and buf_start + len(buf) < seg.end:
                        need = total
                if need:
                    buf = os.pread(seg.fd, min(max(SCAN_CHUNK, need), seg.end - pos), pos - seg.start)
                    view = memoryview(buf)
                    buf_start = pos
                    rel = 0
                    if len(buf) < 8:
                        break
                if pos < dispatch_from:  # only validate: the fast walk
                    new_rel, n, size = walk_records(buf, rel, min(len(buf), dispatch_from - buf_start), pos,
                                                    check_crc, None)
                    if n:
                        records += n
                        pos += new_rel - rel
                        last_size = size
                        continue
                elif on_rows is not None:
                    rows: list[RecordRow] = []
                    new_rel, n, size = walk_records(buf, rel, len(buf), pos, check_crc, rows)
                    if n:
                        on_rows(rows)
                        records += n
                        pos += new_rel - rel
                        last_ts = rows[-1][6]
                        last_size = 0
                        continue
                if pos < dispatch_from:  # a record the fast walk stopped at
                    size = check_record(view, rel, check_crc, pos)
                    if size > 0:
                        records += 1
                        pos += size
                        last_size = size
                        continue
                    r: DispatchRecord | int = CORRUPT if size == CORRUPT else size
                else:
                    r = parse_dispatch(view, rel, check_crc)
                if isinstance(r, DispatchRecord):
                    if r.physical_offset != pos:
                        torn = True
                        remark = f"record at {pos} carries physical offset {r.physical_offset}"
                        break
                    on_record(r)
                    records += 1
                    last_ts = r.store_timestamp
                    last_size = 0
                    pos += r.size
                    continue
                total, magic = _SIZE_MAGIC.unpack_from(buf, rel)
                if r == BLANK:
                    if pos + total != seg.end:
                        torn = True
                        remark = f"blank marker at {pos} of {total} bytes does not end its file"
                        break
                    pos = seg.end
                    moved_on = True
                    break
                if r == CORRUPT:
                    torn = True
                    remark = f"bad record at {pos} (magic, size or body CRC)"
                elif total or magic:  # END_OF_DATA but not zeros: a record cut by the end of the file
                    torn = True
                    remark = f"incomplete record at {pos} ({total} bytes do not fit)"
                break
            if not moved_on:
                break
            i += 1
        end = pos
        if last_size:  # the newest record was only validated: read its store time
            last_ts = self._store_timestamp_blocking(end - last_size)
        self._truncate_after(end, zero=zero_tail or torn)
        self.append_offset = self.committed = self.flushed = end
        self.committed_store_timestamp = self.flushed_store_timestamp = last_ts
        if torn:
            log.warning("CommitLog recovery: %s; truncated the log at %d", remark, end)
        return RecoveryResult(end=end, torn=torn, records=records, last_store_timestamp=last_ts, remark=remark)

    def _truncate_after(self, end: int, zero: bool) -> None:
        """Delete files wholly past ``end`` and (``zero``) clear the rest of the file holding it."""
        keep: list[Segment] = []
        for seg in self.segments:
            if seg.start >= end and not (seg.start == end and seg is self.segments[0]):
                log.warning("CommitLog recovery: deleting %s (past the end of valid data %d)", seg.path, end)
                seg.close()
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(seg.path)
                continue
            if zero and seg.start <= end < seg.end:
                os.ftruncate(seg.fd, end - seg.start)
                files.allocate(seg.fd, seg.size, self.preallocate)
                os.fsync(seg.fd)
            keep.append(seg)
        if len(keep) != len(self.segments):
            files.fsync_dir(self.dir)
        self.segments = keep

    # -- append (loop) -------------------------------------------------------------------

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to the running loop (``start``)."""
        self._loop = loop
        self._idle = asyncio.Event()
        self._idle.set()
        self._flush_lock = asyncio.Lock()

    def _chunk(self, seg: Segment) -> _Chunk:
        cur = self._cur
        if cur is None or cur.seg is not seg:
            cur = self._cur = _Chunk(seg, self.append_offset)
            self._chunks.append(cur)
        return cur

    def _segment_for(self, size: int) -> Segment:
        """The file to append ``size`` bytes to, closing the current one with a blank marker if needed."""
        pos = self.append_offset
        seg = self.segments[-1] if self.segments else None
        if seg is not None and seg.start <= pos < seg.end:
            space = seg.end - pos
            if size + BLANK_MARKER.size <= space:
                return seg
            chunk = self._chunk(seg)
            chunk.parts.append(BLANK_MARKER.pack(space, BLANK_MAGIC_CODE))
            chunk.size += BLANK_MARKER.size
            chunk.end = seg.end
            self.append_offset = seg.end
            pos = seg.end
        start = pos - pos % self.segment_size if not self.segments else pos
        seg = Segment(start, self.segment_size, self._path(start))
        self.segments.append(seg)
        return seg

    def put(self, reqs: Sequence[PutMessageRequest], props: Sequence[bytes], topic: str, queue_id: int,
            store_timestamp: int, sync: bool, deadline: float,
            done: Callable[[PutMessageResult], object] | None = None) -> PutOp | PutMessageResult:
        """Append ``reqs`` (all to ``topic``/``queue_id``; ``props`` their encoded properties)
        contiguously; returns the pending op, whose ``fut`` resolves with the outcome, or, with
        ``done``, which is called with it instead (see :class:`PutOp`; never from inside this call).

        Returns a :class:`PutMessageResult` instead when the batch cannot be
        encoded (MESSAGE_ILLEGAL). The caller checked sizes and state.
        """
        assert self._loop is not None
        enc = self.encoder
        tail = self._tails.get(topic)
        if tail is None:
            tail = self._tails[topic] = topic_tail(topic)
        try:
            if len(reqs) == 1:  # the common single send: no comprehensions
                r = reqs[0]
                born = enc.born_bytes(r.born_host)
                borns = [born]
                total = enc.fixed[len(born)] + len(tail) + len(r.body) + len(props[0])
                sizes = [total]
            else:
                borns = [enc.born_bytes(r.born_host) for r in reqs]
                fixed = enc.fixed
                tl = len(tail)
                sizes = [fixed[len(b)] + tl + len(r.body) + len(p) for r, b, p in zip(reqs, borns, props, strict=True)]
                total = sum(sizes)
        except ValueError as exc:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"bad born host: {exc}")
        chunk = self._chunk_for(total)
        if chunk is None:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                remark=f"{total} bytes do not fit in one CommitLog file of {self.segment_size} bytes",
            )
        start = self.append_offset
        key = (topic, queue_id)
        first_qoff = self.topic_queue_table.get(key, 0)
        try:
            appended, phys_list, qoff, sys_flags = enc.encode_batch_into(
                chunk.parts, reqs, borns, props, sizes, tail, queue_id, first_qoff, start, store_timestamp)
        except struct.error as exc:  # the encoder appended nothing (record.RecordEncoder)
            return _out_of_range(exc)
        phys = start + total
        self.topic_queue_table[key] = qoff
        self.append_offset = chunk.end = phys
        chunk.size += total
        keys: list[list[str]] | None = None
        uniq: list[str | None] | None = None
        if len(reqs) == 1:
            r = reqs[0]
            if r.keys or r.uniq_key:
                keys = [r.keys]
                uniq = [r.uniq_key]
            tags = [r.tags_code]
        else:
            for r in reqs:
                if r.keys or r.uniq_key:
                    keys = [r.keys for r in reqs]
                    uniq = [r.uniq_key for r in reqs]
                    break
            tags = [r.tags_code for r in reqs]
        self.dispatch_batches.append(DispatchBatch(
            start, phys, topic, queue_id, first_qoff, phys_list, sizes, tags, keys, uniq, store_timestamp, sys_flags,
        ))
        return self._queue_op(phys, PutMessageResult(PutMessageStatus.PUT_OK, appended), sync, deadline,
                              key if qoff != first_qoff else None, first_qoff, store_timestamp, done)

    def _chunk_for(self, total: int) -> _Chunk | None:
        """The in-memory chunk the next ``total`` bytes of records go to (in the current file, or
        a new one when they and an end-of-file marker do not fit); None when they would not fit
        even in an empty file."""
        if total + BLANK_MARKER.size > self.segment_size:
            return None
        seg = self.segments[-1] if self.segments else None
        pos = self.append_offset
        if seg is None or not (seg.start <= pos and pos + total + BLANK_MARKER.size <= seg.end):
            seg = self._segment_for(total)
        chunk = self._cur
        if chunk is None or chunk.seg is not seg:
            chunk = self._chunk(seg)
        return chunk

    def _queue_op(self, end: int, result: PutMessageResult, sync: bool, deadline: float,
                  queue_key: tuple[str, int] | None, first_queue_offset: int, store_timestamp: int,
                  done: Callable[[PutMessageResult], object] | None) -> PutOp:
        """The pending op of an append ending at ``end`` (a future, or ``done``), queued; starts
        the job that writes it unless one runs, is scheduled, or a read is gathering puts."""
        assert self._loop is not None
        op = PutOp(end, None if done is not None else self._loop.create_future(), result, sync, deadline,
                   queue_key, first_queue_offset, store_timestamp, done)
        self._ops.append(op)
        if not (self._job_running or self._start_scheduled or self._gathering):
            # written on the loop: gather this turn's puts into one job first
            self._start_scheduled = True
            self._loop.call_soon(self._deferred_start)
        return op

    def put_batch(self, batch: PutMessageBatch, store_timestamp: int, sync: bool, deadline: float,
                  done: Callable[[PutMessageResult], object] | None = None) -> PutOp | PutMessageResult:
        """:meth:`put` for a batch send's :class:`PutMessageBatch` (all to its topic and queue):
        the same records and outcome (a future, or ``done``), without an object per message."""
        assert self._loop is not None
        enc = self.encoder
        topic = batch.topic
        queue_id = batch.queue_id
        tail = self._tails.get(topic)
        if tail is None:
            tail = self._tails[topic] = topic_tail(topic)
        try:
            born = enc.born_bytes(batch.born_host)
        except ValueError as exc:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"bad born host: {exc}")
        fixed = enc.fixed[len(born)] + len(tail)
        sizes = [fixed + len(b) + len(p) for b, p in zip(batch.bodies, batch.properties, strict=True)]
        total = sum(sizes)
        chunk = self._chunk_for(total)
        if chunk is None:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                remark=f"{total} bytes do not fit in one CommitLog file of {self.segment_size} bytes",
            )
        start = self.append_offset
        key = (topic, queue_id)
        first_qoff = self.topic_queue_table.get(key, 0)
        try:
            stored, qoff, sys_flags = enc.encode_message_batch_into(
                chunk.parts, batch.bodies, batch.properties, batch.flags, sizes, born, batch.sys_flag,
                batch.born_timestamp, batch.reconsume_times, tail, queue_id, first_qoff, start, store_timestamp)
        except struct.error as exc:  # the encoder appended nothing (record.RecordEncoder)
            return _out_of_range(exc)
        phys = start + total
        self.topic_queue_table[key] = qoff
        self.append_offset = chunk.end = phys
        chunk.size += total
        self.dispatch_batches.append(DispatchBatch(
            start, phys, topic, queue_id, first_qoff, stored.physical_offsets, sizes, batch.tags_codes,
            batch.keys if batch.indexed else None, batch.uniq_keys if batch.indexed else None, store_timestamp,
            sys_flags,
        ))
        result = PutMessageResult(PutMessageStatus.PUT_OK, None, "", stored.msg_ids, stored)
        return self._queue_op(phys, result, sync, deadline, key if qoff != first_qoff else None, first_qoff,
                              store_timestamp, done)

    def append_raw(self, offset: int, data: bytes | memoryview, deadline: float) -> PutOp | None:
        """Queue raw log bytes at exactly ``offset`` (HA slave); None when ``offset`` is not the end.

        An empty log also accepts the start of any file (a new slave starts
        where the master's last file starts, as ``HAConnection`` sends).
        """
        assert self._loop is not None
        if offset != self.append_offset:
            if self.segments or self._ops or self.append_offset != 0 or offset < 0 or offset % self.segment_size:
                return None
            self.append_offset = self.committed = self.flushed = offset
        pos = offset
        view = memoryview(data)
        while view:
            seg = self.segments[-1] if self.segments else None
            if seg is None or not (seg.start <= pos < seg.end):
                start = pos - pos % self.segment_size
                seg = Segment(start, self.segment_size, self._path(start))
                self.segments.append(seg)
            n = min(len(view), seg.end - pos)
            chunk = self._chunk(seg)
            chunk.parts.append(view[:n])  # a view of the master's transfer until written
            chunk.size += n
            pos += n
            chunk.end = self.append_offset = pos
            view = view[n:]
        op = PutOp(pos, self._loop.create_future(), PutMessageResult(PutMessageStatus.PUT_OK), self.sync_flush,
                   deadline, None, 0, 0)
        self._ops.append(op)
        if not (self._job_running or self._start_scheduled):
            self._start_job()
        return op

    # -- the writer ------------------------------------------------------------------------

    def gather(self) -> None:
        """Hold back the start of a write job until the matching :meth:`release`: the puts in
        between go into one job (the requests of one read, or of one request-queue slice).
        Calls nest."""
        self._gathering += 1

    def release(self) -> None:
        """End a :meth:`gather`: when it was the outermost and puts wait, start their job now (a
        job into existing files runs right here and resolves the puts that wait for no flush
        before this returns; others go to the writer thread). A job already running or scheduled
        takes them when it is done instead."""
        self._gathering -= 1
        if not self._gathering and self._chunks and not (self._job_running or self._start_scheduled):
            self._start_job()

    def _start_job(self) -> None:
        if self._job_running or self._start_scheduled or not self._chunks:
            return
        assert self._loop is not None and self._idle is not None
        chunks = self._chunks
        self._chunks = []
        self._cur = None
        self._job_running = True
        self._idle.clear()
        if (chunks[0].seg.created and chunks[0].size <= INLINE_WRITE_MAX) if len(chunks) == 1 \
                else all(c.seg.created for c in chunks) and sum(c.size for c in chunks) <= INLINE_WRITE_MAX:
            self._finish_job(self._write_job(chunks))
            return
        # The writer thread hands the result back with one call_soon_threadsafe (no asyncio future
        # wrapping a concurrent one).
        self._writer.submit(self._run_job, self._loop, chunks)

    def _write_job(self, chunks: list[_Chunk]) -> _JobResult:
        """Write the chunks in order (on the loop, or the writer thread for a big job or a new file).

        Stops at the first failing chunk.
        """
        t0 = time.perf_counter()
        res = _JobResult(ok_until=chunks[0].start)
        for c in chunks:
            seg = c.seg
            if not seg.created:
                try:
                    seg.fd = self.create_file(seg.path, seg.size, self.preallocate)
                except OSError as exc:
                    res.error, res.phase, res.path = exc, "create", seg.path
                    break
                seg.created = True
            try:
                files.pwritev_all(seg.fd, c.parts, c.start - seg.start, c.size, self.pwritev)
            except files.PartialWriteError as exc:
                self._undo_partial(seg, c.start - seg.start, exc.written)
                res.error, res.phase, res.path = exc.cause, "write", seg.path
                break
            except OSError as exc:  # e.g. EBADF
                res.error, res.phase, res.path = exc, "write", seg.path
                break
            res.ok_until = c.end
        res.write_seconds = time.perf_counter() - t0
        return res

    def _undo_partial(self, seg: Segment, rel: int, written: int) -> None:
        """Writer thread: remove the part of a failed chunk that reached the file."""
        if written <= 0:
            return
        try:
            files.pwritev_all(seg.fd, [bytes(written)], rel, written, self.pwritev)
        except OSError:
            try:
                os.ftruncate(seg.fd, rel)
                files.allocate(seg.fd, seg.size, False)
            except OSError as exc:
                log.error("%s: cannot clear %d bytes of a failed write at %d: %s", seg.path, written, rel, exc)

    def _run_job(self, loop: asyncio.AbstractEventLoop, chunks: list[_Chunk]) -> None:
        """Writer thread: :meth:`_write_job`, then :meth:`_finish_job` on the loop."""
        try:
            res = self._write_job(chunks)
        except BaseException as exc:  # the job itself never raises; be safe
            log.exception("CommitLog writer job crashed")
            res = _JobResult(ok_until=chunks[0].start, error=OSError(errno.EIO, str(exc)), phase="write")
        try:
            loop.call_soon_threadsafe(self._finish_job, res)
        except RuntimeError:  # the loop is closed: nobody waits for this job any more
            log.warning("CommitLog writer job finished after its event loop closed")

    def _finish_job(self, res: _JobResult) -> None:
        """On the loop: account a finished job, tell ``on_committed`` (the commit listeners; the
        reput is scheduled there), resolve the puts it covers that wait for no flush; under
        SYNC_FLUSH start a group commit when none runs."""
        self._job_running = False
        st = self.stats
        st.jobs += 1
        st.last_write_seconds = res.write_seconds
        if res.ok_until > self.committed:
            st.bytes_written += res.ok_until - self.committed
            self.committed = res.ok_until
        ops = self._ops
        for op in ops:  # newest store time at or below the committed end
            if op.end > self.committed:
                break
            if op.store_timestamp:
                self.committed_store_timestamp = op.store_timestamp
        if res.error is not None:
            self._rollback(res)
        self.on_committed()
        self._resolve_ops()
        if self.sync_flush:
            self._start_sync()
        if not self._start_scheduled and self._loop is not None and self._chunks:
            # Start the next job one loop turn later: the puts whose waiters were just
            # resolved run first and their next appends join it (group commit, not ping-pong).
            # (New puts schedule that start themselves.)
            self._start_scheduled = True
            self._loop.call_soon(self._deferred_start)
        if not self._job_running and self._idle is not None and not self._ops:
            self._idle.set()

    def _deferred_start(self) -> None:
        self._start_scheduled = False
        self._start_job()

    # -- the group commit (SYNC_FLUSH) ---------------------------------------------------------------

    def _start_sync(self) -> None:
        """Start an fdatasync of everything committed and not yet flushed, unless one runs."""
        if self._syncing or self.committed <= self.flushed or self._loop is None:
            return
        target = self.committed
        fds = self._unflushed_fds(target)
        self._syncing = True
        try:
            self._syncer.submit(self._run_sync, self._loop, fds, target, self.committed_store_timestamp)
        except RuntimeError:  # shut down: close() flushes what is left
            self._syncing = False

    def _run_sync(self, loop: asyncio.AbstractEventLoop, fds: list[int], target: int, store_timestamp: int) -> None:
        """Syncer thread: fdatasync ``fds``, then :meth:`_finish_sync` on the loop."""
        t0 = time.perf_counter()
        error: OSError | None = None
        try:
            _fdatasync_all(fds)
        except OSError as exc:
            error = exc
        try:
            loop.call_soon_threadsafe(self._finish_sync, target, store_timestamp, time.perf_counter() - t0, error)
        except RuntimeError:  # the loop is closed: nobody waits for this fdatasync any more
            log.warning("CommitLog fdatasync finished after its event loop closed")

    def _finish_sync(self, target: int, store_timestamp: int, seconds: float, error: OSError | None) -> None:
        """On the loop: ``flushed`` moves to ``target`` and the puts up to it are answered (with
        FLUSH_DISK_TIMEOUT when the fdatasync failed); the next fdatasync starts if more was
        committed meanwhile (after a failure only then, so that a failing disk is not retried in
        a loop: the watchdog answers the rest)."""
        self._syncing = False
        if error is None:
            self._flushed_to(target, store_timestamp, seconds)
        else:
            self._log_error(f"CommitLog fdatasync failed: {error}")
        self._resolve_ops(error, target)
        if self.committed > target:
            self._start_sync()
        if not self._job_running and self._idle is not None and not self._ops:
            self._idle.set()

    def _resolve_ops(self, sync_error: OSError | None = None, sync_target: int = 0) -> None:
        """Resolve the puts, in order, up to the first that must still wait: past ``committed``, or
        (a sync put) past ``flushed``; with ``sync_error``, sync puts up to ``sync_target`` are
        answered FLUSH_DISK_TIMEOUT."""
        # Each op leaves the queue before it is resolved: a ``done`` callback may put again (and
        # a job may then run and resolve ops inside it) without seeing it twice.
        ops = self._ops
        committed = self.committed
        flushed = self.flushed
        while ops:
            op = ops[0]
            if op.end > committed:
                break
            if op.sync and op.end > flushed:
                if sync_error is None or op.end > sync_target:
                    break
                ops.popleft()
                op.resolve(op.result.with_status(
                    PutMessageStatus.FLUSH_DISK_TIMEOUT, f"stored, but fdatasync failed: {sync_error}",
                ))
            else:
                ops.popleft()
                op.resolve(op.result)

    def _rollback(self, res: _JobResult) -> None:
        """Fail every put past ``res.ok_until`` and move the write position back there."""
        err = res.error
        assert err is not None
        ok_until = res.ok_until
        self.stats.write_errors += 1
        if res.phase == "create":
            status = PutMessageStatus.CREATE_MAPPED_FILE_FAILED
            what = f"cannot create CommitLog file {res.path}"
        else:
            status = PutMessageStatus.SERVICE_NOT_AVAILABLE
            what = f"cannot write CommitLog file {res.path} at offset {ok_until}"
        full = err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
        remark = f"{'disk full: ' if full else ''}{what}: [Errno {err.errno}] {err.strerror}"
        failed = [op for op in self._ops if op.end > ok_until]
        self._log_error(f"{remark}; {len(failed)} pending put(s) failed, write position back to {ok_until}")
        restored: set[tuple[str, int]] = set()
        for op in failed:
            if op.queue_key is not None and op.queue_key not in restored:
                self.topic_queue_table[op.queue_key] = op.first_queue_offset
                restored.add(op.queue_key)
        # The log is rolled back before anyone hears of the failure (a callback may put again).
        self._ops = deque(op for op in self._ops if op.end <= ok_until)
        self._chunks = []
        self._cur = None
        self.append_offset = ok_until
        batches = self.dispatch_batches
        while batches and batches[-1].start >= ok_until:
            batches.pop()
        while self.segments and self.segments[-1].start >= ok_until and not (
            self.segments[-1].created and self.segments[-1].start == ok_until
        ):
            seg = self.segments.pop()
            seg.close()
        for op in failed:
            op.resolve(PutMessageResult(status, [], remark))

    def _log_error(self, text: str) -> None:
        now = time.monotonic()
        if now - self._last_error_log > 1.0:
            self._last_error_log = now
            log.error(text)

    def expire_ops(self, now: float) -> None:
        """Answer FLUSH_DISK_TIMEOUT to sync puts past their deadline (they stay stored)."""
        for op in list(self._ops):  # (a copy: a callback may put again)
            if op.deadline > now:
                break
            if op.sync and not op.resolved and op.end <= self.committed:
                op.resolve(op.result.with_status(PutMessageStatus.FLUSH_DISK_TIMEOUT,
                                                 "stored, fdatasync not done in time"))
            elif op.sync and not op.resolved:
                op.resolve(op.result.with_status(PutMessageStatus.FLUSH_DISK_TIMEOUT,
                                                 "stored, not yet written in time"))

    async def wait_idle(self) -> None:
        """Wait until no write job runs and no put is pending."""
        while self._job_running or self._ops or self._chunks:
            assert self._idle is not None
            self._idle.clear()
            if not self._job_running:
                self._start_job()
            if self.sync_flush:
                self._start_sync()
            await self._idle.wait()

    # -- flushing ---------------------------------------------------------------------------

    async def flush(self) -> bool:
        """fdatasync everything committed so far (ASYNC_FLUSH's flusher; also used at shutdown).

        Waits for a flush already running, then flushes what it did not cover.
        Returns False when nothing needed flushing or the fdatasync failed.
        """
        assert self._loop is not None and self._flush_lock is not None
        async with self._flush_lock:
            if self.committed <= self.flushed:
                return False
            target = self.committed
            ts = self.committed_store_timestamp
            fds = self._unflushed_fds(target)
            t0 = time.perf_counter()
            try:
                await self._loop.run_in_executor(self._flusher, _fdatasync_all, fds)
            except OSError as exc:
                self._log_error(f"CommitLog fdatasync failed: {exc}")
                return False
            self._flushed_to(target, ts, time.perf_counter() - t0)
            return True

    def _unflushed_fds(self, target: int) -> list[int]:
        """Descriptors of the files holding bytes between ``flushed`` and ``target``."""
        return [s.fd for s in self.segments if s.created and s.end > self.flushed and s.start < target]

    def _flushed_to(self, target: int, store_timestamp: int, seconds: float) -> None:
        """Account an fdatasync of ``seconds`` that covered everything up to ``target``."""
        st = self.stats
        st.fdatasyncs += 1
        st.last_flush_seconds = seconds
        st.max_flush_seconds = max(st.max_flush_seconds, seconds)
        if target > self.flushed:
            self.flushed = target
            self.flushed_store_timestamp = store_timestamp

    # -- reads (loop) --------------------------------------------------------------------------

    def read(self, offset: int, size: int) -> bytes | None:
        """``size`` bytes at ``offset`` if they are committed and within one file, else None."""
        if size <= 0 or offset + size > self.committed:
            return None
        seg = self.segment_at(offset)
        if seg is None or not seg.created or offset + size > seg.end:
            return None
        rel = offset - seg.start
        return seg.view()[rel : rel + size]

    def record_size_at(self, offset: int) -> int:
        """Size of the message record at ``offset``; 0 when there is none."""
        head = self.read(offset, 8)
        if head is None:
            return 0
        size, magic = _SIZE_MAGIC.unpack(head)
        return size if magic == MESSAGE_MAGIC_CODE and size >= MIN_RECORD_SIZE else 0

    def read_record(self, offset: int) -> bytes | None:
        """The whole stored record at ``offset``, or None."""
        size = self.record_size_at(offset)
        return self.read(offset, size) if size else None

    def read_raw(self, offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` committed bytes from ``offset``, within one file (HA transfer)."""
        seg = self.segment_at(offset)
        if seg is None or not seg.created or max_bytes <= 0:
            return b""
        n = min(max_bytes, self.committed - offset, seg.end - offset)
        if n <= 0:
            return b""
        rel = offset - seg.start
        return seg.view()[rel : rel + n]

    # -- truncation (HA: a returning master cuts its divergent tail) ------------------------------

    def truncate_positions(self, offset: int) -> tuple[list[tuple[Segment, int, int]], list[Segment]]:
        """Loop part of cutting the log at ``offset``: positions move back, files wholly past it leave.

        The writer must be idle (no pending put, no flush running). Returns
        ``(ranges, doomed)``: ``(segment, start, end)`` byte ranges of the log
        to zero and files taken out of the log (mappings closed), both for
        :meth:`truncate_files` in a thread. An ``offset`` at or below the
        oldest file's start empties the log completely (it then accepts
        replicated data at the start of any file again).
        """
        assert not self.busy, "truncate with puts or a flush in flight"
        old_end = self.append_offset
        wipe = not self.segments or offset <= self.segments[0].start
        ranges: list[tuple[Segment, int, int]] = []
        keep: list[Segment] = []
        doomed: list[Segment] = []
        for seg in self.segments:
            if wipe or seg.start >= offset:
                seg.close_view()
                doomed.append(seg)
                continue
            keep.append(seg)
            if seg.start < offset < seg.end and seg.created:
                end = min(max(old_end, offset), seg.end)
                if end > offset:
                    ranges.append((seg, offset, end))
        self.segments = keep
        new_end = 0 if wipe else offset
        self.append_offset = self.committed = new_end
        self.flushed = min(self.flushed, new_end)
        batches = self.dispatch_batches
        while batches and batches[-1].end > new_end:
            batches.pop()
        self._cur = None
        return ranges, doomed

    def truncate_files(self, ranges: list[tuple[Segment, int, int]], doomed: list[Segment]) -> None:
        """Thread part of a truncation: zero ``ranges`` (fdatasync'd) and delete ``doomed``.
        Raises ``OSError``."""
        zeros = bytes(1024 * 1024)
        for seg, start, end in ranges:
            pos = start
            while pos < end:
                n = min(len(zeros), end - pos)
                files.pwrite_all(seg.fd, zeros[:n], pos - seg.start)
                pos += n
            os.fdatasync(seg.fd)
        for seg in doomed:
            seg.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(seg.path)
        if doomed:
            files.fsync_dir(self.dir)

    # -- retention (loop decides, a thread deletes) --------------------------------------------

    def deletable_segments(self) -> list[Segment]:
        """Files retention may delete: every file wholly flushed, except the one being written."""
        segs = self.segments
        return [s for s in segs[:-1] if s.end <= self.flushed]

    def remove_segments(self, victims: list[Segment]) -> list[Segment]:
        """Take ``victims`` (a prefix of the files) out of the log; returns those removed."""
        removed = []
        for seg in victims:
            if not self.segments or self.segments[0] is not seg or len(self.segments) == 1:
                break
            self.segments.pop(0)
            seg.close_view()
            removed.append(seg)
        return removed

    # -- shutdown ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Close files and threads (after the last flush)."""
        self._writer.shutdown(wait=True)
        self._syncer.shutdown(wait=True)
        self._flusher.shutdown(wait=True)
        for seg in self.segments:
            seg.close()


def _fdatasync_all(fds: list[int]) -> None:
    for fd in fds:
        os.fdatasync(fd)
