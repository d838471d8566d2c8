"""DefaultMessageStore: CommitLog + ConsumeQueues + IndexFile + checkpoint, recovery, retention.

The broker's storage engine as a library (RocketMQ 4.9.8 ``DefaultMessageStore``),
on one asyncio loop. Files under ``store_path_root_dir``::

    commitlog/<20 digits>                    CommitLog segments (commitlog.py)
    consumequeue/<topic>/<queueId>/<20 digits>   ConsumeQueue files (consumequeue.py)
    index/<yyyyMMddHHmmssSSS>                IndexFiles (index.py)
    checkpoint                               4 KiB, checkpoint.py
    abort                                    present while running: its presence at start = crash
    lock                                     flock'd while running: a second store on the same path fails
    config/topics.db, subscriptionGroup.db, consumerOffset.json   (config.py)

Background tasks once started: the CommitLog flusher (ASYNC_FLUSH) or the
sync-flush timeout watchdog (SYNC_FLUSH), the ConsumeQueue/index committer
and flusher that also writes the checkpoint, retention ("clean"), and the
consumer-offset persister. The reput runs inline each time the CommitLog's
confirmed end advances, so a put that returned is already visible to
:meth:`DefaultMessageStore.get_message`. It follows the CommitLog: for the
store's own appends it takes the description the put left behind (no
re-parsing), for everything else (replicated bytes, blank markers, recovery)
it parses the records from the files; either way every ConsumeQueue and index
entry can be rebuilt from the CommitLog alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocket.message import (
    MAX_PROPERTIES_SIZE,
    MAX_TOPIC_LENGTH,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_NOT_TYPE,
    SYSFLAG_TRANSACTION_ROLLBACK,
    MessageExt,
    MessageFormatError,
    decode_record,
)
from rocket.store import files
from rocket.store.api import (
    BrokerRole,
    GetMessageResult,
    GetMessageStatus,
    MessageStoreConfig,
    PutMessageRequest,
    PutMessageResult,
    PutMessageStatus,
    StoreError,
)
from rocket.store.checkpoint import Checkpoint, StoreCheckpoint
from rocket.store.commitlog import CommitLog, CommitLogStats, DispatchBatch, Segment
from rocket.store.config import ConsumerOffsetManager, SubscriptionGroupManager, TopicConfigManager
from rocket.store.consumequeue import CQ_UNIT, ENTRY, ConsumeQueue, CQFile
from rocket.store.index import MAX_MSGS_NUM_BATCH, IndexFile, IndexService
from rocket.store.record import (
    BLANK,
    CORRUPT,
    DispatchRecord,
    RecordRow,
    parse_delay_levels,
    parse_dispatch,
    pickup_store_timestamp,
)

log = logging.getLogger("rocket.store")

DispatchListener = Callable[[str, int, int, int], None]

#: Most files retention deletes per run (``DELETE_FILES_BATCH_MAX``).
DELETE_FILES_BATCH_MAX = 10
#: How often ConsumeQueue tails are written to their files (seconds).
CQ_COMMIT_INTERVAL = 0.05
#: Bytes the reput parses per turn of the loop when it must read the CommitLog.
REPUT_PARSE_SLICE = 4 * 1024 * 1024
_TRAN_MASK = 0xC


def statvfs_used_ratio(path: Path) -> float:
    """Used fraction (0..1) of the file system holding ``path``."""
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return 0.0
    return (total - st.f_bfree * st.f_frsize) / total


@dataclass(slots=True)
class StoreStats:
    """Cheap counters; ``commit_log`` holds write/flush timings (seconds) and fdatasync counts."""

    put_calls: int = 0
    put_messages: int = 0
    put_rejected: int = 0
    commit_log: CommitLogStats = field(default_factory=CommitLogStats)
    last_recovery_seconds: float = 0.0
    last_recovery_abnormal: bool = False
    last_recovery_records: int = 0
    cq_flush_seconds: float = 0.0


class _IndexRun:
    """Index entries of consecutive dispatched batches, collected for one
    :meth:`IndexService.build_many` (parallel lists, one item per message)."""

    __slots__ = ("keys", "phys", "times", "topics", "uniq")

    def __init__(self) -> None:
        self.topics: list[str] = []
        self.phys: list[int] = []
        self.times: list[int] = []
        self.uniq: list[str | None] = []
        self.keys: list[list[str]] = []

    def add(self, b: DispatchBatch) -> None:
        """Collect the messages of ``b`` (which has keys or UNIQ_KEYs)."""
        assert b.keys is not None and b.uniq is not None
        n = len(b.phys)
        if n == 1:
            self.topics.append(b.topic)
            self.phys.append(b.phys[0])
            self.times.append(b.store_timestamp)
            self.uniq.append(b.uniq[0])
            self.keys.append(b.keys[0])
        else:
            self.topics += [b.topic] * n
            self.phys += b.phys
            self.times += [b.store_timestamp] * n
            self.uniq += b.uniq
            self.keys += b.keys

    def flush(self, svc: IndexService) -> None:
        """Build the collected entries (in order) and write the index headers."""
        if self.phys:
            svc.build_many(self.topics, self.phys, self.times, self.uniq, self.keys)
            svc.write_headers()
            self.topics, self.phys, self.times, self.uniq, self.keys = [], [], [], [], []


class DefaultMessageStore:
    """The message store; see the module docstring.

    ``clock`` (seconds since the epoch) and ``disk_usage`` (used fraction of
    the store's file system) can be injected for tests. Loop-side methods
    must be called on the loop that ran :meth:`start`; a store object is
    started once (make a new one to open the files again). Raises
    :class:`StoreError` from :meth:`start` when the store is locked by
    another process or its files are inconsistent beyond repair, and
    :class:`~rocket.store.api.ConfigCorruptError` when a config file and its
    last good copy are both unreadable.
    """

    def __init__(self, config: MessageStoreConfig, *, clock: Callable[[], float] = time.time,
                 disk_usage: Callable[[Path], float] | None = None) -> None:
        self.config = config
        self.clock = clock
        self._disk_usage = disk_usage or statvfs_used_ratio
        root = config.store_path_root_dir
        self.root = root
        self.commit_log = CommitLog(config)
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        self.index_service = IndexService(root / "index", config.max_hash_slot_num, config.max_index_num,
                                          self._now_ms)
        self.checkpoint = StoreCheckpoint(root / "checkpoint")
        config_dir = root / "config"
        self.topic_configs = TopicConfigManager(config_dir / "topics.db")
        self.subscription_groups = SubscriptionGroupManager(config_dir / "subscriptionGroup.db")
        self.consumer_offsets = ConsumerOffsetManager(config_dir / "consumerOffset.json")
        self.stats = StoreStats(commit_log=self.commit_log.stats)
        #: CommitLog offset up to which records are dispatched to ConsumeQueues and the index.
        self.reput_from_offset = 0
        self._dispatched_store_ts = 0
        self._listeners: list[DispatchListener] = []
        try:
            self._delay_ms = parse_delay_levels(config.message_delay_level)
        except ValueError as exc:
            raise StoreError(f"message_delay_level: {exc}") from None
        self._commit_listeners: list[Callable[[int], None]] = []
        self._truncating = False
        self._io = ThreadPoolExecutor(1, thread_name_prefix="rocket-store-io")
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = False
        self._started = False
        self._lock_fd: int | None = None
        self._dirty_cq_files: set[CQFile] = set()
        self._dirty_cqs: set[ConsumeQueue] = set()
        self._flush_wakeup: asyncio.Event | None = None
        self._logics_lock: asyncio.Lock | None = None
        self._reput_scheduled = False
        self._reput_error_logged = False
        self._cq_write_failed = False

    # -- helpers ----------------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    @property
    def max_phy_offset(self) -> int:
        """Confirmed end of the CommitLog: every byte below it is a whole, written record."""
        return self.commit_log.committed

    @property
    def min_phy_offset(self) -> int:
        """Start of the oldest CommitLog file still kept."""
        return self.commit_log.min_offset

    @property
    def index_last_update_timestamp(self) -> int:
        """Store time (ms) of the newest indexed message (``indexLastUpdateTimestamp``)."""
        return self.index_service.last_update_timestamp

    @property
    def index_last_update_phy_offset(self) -> int:
        """Physical offset of the newest indexed message (``indexLastUpdatePhyoffset``)."""
        return self.index_service.last_update_phy_offset

    @property
    def running(self) -> bool:
        """Started and not shut down."""
        return self._running

    def add_dispatch_listener(self, cb: DispatchListener) -> None:
        """Call ``cb(topic, queue_id, queue_offset, tags_code)`` on the loop after ConsumeQueue appends.

        ``queue_offset`` is that of the message just dispatched (the queue's
        max offset is now ``queue_offset + 1``). For a run of consecutive
        messages with the same tag code in one batch, ``cb`` is called once,
        for the last of them. Exceptions are logged and ignored.
        """
        self._listeners.append(cb)

    def add_commit_listener(self, cb: Callable[[int], None]) -> None:
        """Call ``cb(max_phy_offset)`` on the loop each time the CommitLog's confirmed end moved
        (after the reput dispatched the new records): HA wakes its senders with it. Exceptions
        are logged and ignored."""
        self._commit_listeners.append(cb)

    def _on_committed(self) -> None:
        self._reput()
        if self._commit_listeners:
            end = self.commit_log.committed
            for cb in self._commit_listeners:
                try:
                    cb(end)
                except Exception:
                    log.exception("commit listener %r failed", cb)

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The ConsumeQueue of ``(topic, queue_id)``, if it exists."""
        q = self.consume_queue_table.get(topic)
        return None if q is None else q.get(queue_id)

    def _cq(self, topic: str, queue_id: int) -> ConsumeQueue:
        qs = self.consume_queue_table.get(topic)
        if qs is None:
            qs = self.consume_queue_table[topic] = {}
        cq = qs.get(queue_id)
        if cq is None:
            cq = qs[queue_id] = ConsumeQueue(self.root / "consumequeue", topic, queue_id,
                                             self.config.mapped_file_size_consume_queue)
        return cq

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of ``topic`` that have a ConsumeQueue, sorted."""
        return sorted(self.consume_queue_table.get(topic, ()))

    def topics(self) -> list[str]:
        """Topics that have ConsumeQueues."""
        return list(self.consume_queue_table)

    def disk_usage_ratio(self) -> float:
        """Used fraction (0..1) of the store's file system."""
        try:
            return float(self._disk_usage(self.root))
        except OSError:
            return 0.0

    # -- start ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Lock, load, recover (normal, or abnormal when ``abort`` exists), start background tasks.

        Raises :class:`StoreError` / :class:`ConfigCorruptError`.
        """
        if self._started:
            return
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        try:
            await loop.run_in_executor(self._io, self._start_blocking)
        except BaseException:
            await loop.run_in_executor(self._io, self._close_blocking, False)
            raise
        self.stats.last_recovery_seconds = time.perf_counter() - t0
        self._loop = loop
        self.commit_log.attach(loop)
        self.commit_log.on_committed = self._on_committed
        self.index_service.set_async_creator(self._create_index_file)
        self._flush_wakeup = asyncio.Event()
        self._logics_lock = asyncio.Lock()
        self._started = self._running = True
        if self.commit_log.sync_flush:
            self._spawn(self._sync_flush_watchdog(), "sync-flush-watchdog")
        else:
            self._spawn(self._flush_commit_log_service(), "flush-commitlog")
        self._spawn(self._logics_service(), "flush-consumequeue")
        self._spawn(self._clean_service(), "clean")
        self._spawn(self._offset_persist_service(), "persist-consumer-offsets")
        log.info("store %s started: CommitLog %d..%d, %d queues, recovery %.3f s (%s)", self.root,
                 self.min_phy_offset, self.max_phy_offset, sum(len(q) for q in self.consume_queue_table.values()),
                 self.stats.last_recovery_seconds, "abnormal" if self.stats.last_recovery_abnormal else "normal")

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coro`` as a background task until shutdown; a failure is logged with its traceback.

        The coroutine is the task itself (not awaited inside a wrapper), so a task
        cancelled before its first step closes it without a "never awaited" warning.
        """
        def failed(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and (exc := task.exception()) is not None:
                log.error("store task %s failed", name, exc_info=exc)

        task = asyncio.get_running_loop().create_task(coro, name=f"store-{name}")
        task.add_done_callback(failed)
        self._tasks.append(task)

    def _start_blocking(self) -> None:
        root = self.root
        root.mkdir(parents=True, exist_ok=True)
        lock_path = root / "lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StoreError(f"store {root} is in use: another process holds {lock_path}") from None
            raise
        self._lock_fd = fd
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        abort = root / "abort"
        abnormal = abort.exists()
        self.topic_configs.load()
        self.subscription_groups.load()
        self.consumer_offsets.load()
        for table in (self.topic_configs.store, self.subscription_groups.store):
            try:
                table.backup()  # the last good copy, for a corrupt file next time
            except (OSError, sqlite3.Error) as exc:
                log.error("cannot back up %s to %s: %s", table.path, table.bak, exc)
        self._recover(abnormal)
        abort.touch()
        files.fsync_dir(root)

    def _load_consume_queues(self) -> None:
        cq_root = self.root / "consumequeue"
        cq_root.mkdir(parents=True, exist_ok=True)
        for topic in os.listdir(cq_root):
            tdir = cq_root / topic
            if not tdir.is_dir():
                continue
            for qname in os.listdir(tdir):
                if not qname.isdigit() or not (tdir / qname).is_dir():
                    continue
                cq = self._cq(topic, int(qname))
                cq.load()

    def _all_cqs(self) -> list[ConsumeQueue]:
        return [cq for qs in self.consume_queue_table.values() for cq in qs.values()]

    def _recover(self, abnormal: bool) -> None:
        """Start-up recovery (blocking; B5). See the checkpoint module for the offsets used."""
        cl = self.commit_log
        ck = self.checkpoint.load()
        cl.load()
        self._load_consume_queues()
        self.index_service.load()
        cqs = self._all_cqs()
        segs = cl.segments
        if segs:
            lo, hi = segs[0].start, segs[-1].end
            if ck.logics_dispatched_offset >= 0 and ck.physic_flushed_offset >= 0:
                dispatch_from = ck.logics_dispatched_offset
                scan_from = min(ck.physic_flushed_offset, dispatch_from)
            elif not abnormal:
                dispatch_from = max([cq.max_phys_end for cq in cqs] + [lo])
                scan_from = dispatch_from
            else:
                scan_from = dispatch_from = self._segment_by_checkpoint_time(ck).start
            dispatch_from = min(max(dispatch_from, lo), hi)
            # Validate whole files, as RocketMQ does: from the start of the file holding the
            # checkpoint (crash), or the last file (clean stop).
            scan_from = min(max(scan_from, lo), dispatch_from, segs[-1].start)
            scan_from -= (scan_from - lo) % cl.segment_size
        else:
            scan_from = dispatch_from = cl.append_offset
        # Entries at or past the re-dispatch point are rebuilt from the CommitLog.
        for cq in cqs:
            cq.truncate_dirty(dispatch_from)
        self.index_service.repair(dispatch_from, lambda p: -1)
        touched: set[ConsumeQueue] = set()

        def redispatch(rec: DispatchRecord) -> None:
            cq = self._dispatch_record(rec)
            if cq is not None:
                touched.add(cq)
                if len(cq.tail) > 4 * 1024 * 1024:
                    cq.commit_now()

        def redispatch_rows(rows: list[RecordRow]) -> None:
            self._dispatch_rows(rows, touched)
            for cq in touched:
                if len(cq.tail) > 4 * 1024 * 1024:
                    cq.commit_now()

        result = cl.recover(scan_from, dispatch_from, redispatch, self.config.check_crc_on_recover,
                            zero_tail=abnormal, on_rows=redispatch_rows)
        end = result.end
        for cq in self._all_cqs():
            if cq.truncate_dirty(end):
                log.warning("recovery: %r had entries past the CommitLog end %d; removed", cq, end)
            touched.add(cq)
        self.index_service.write_headers()
        self.index_service.repair(end, self._store_ts_blocking)
        fsync_files: set[int] = set()
        for cq in touched:
            for f in cq.commit_now():
                fsync_files.add(f.fd)
        for cq in self._all_cqs():
            cq.correct_min_offset(cl.min_offset)
            if cq.max_offset > 0 or cq.files:
                cl.topic_queue_table[(cq.topic, cq.queue_id)] = cq.max_offset
        try:
            self.index_service.ensure_writable_file()
        except OSError as exc:  # e.g. a full disk: index entries wait in memory until a file can be made
            log.error("cannot create an index file in %s: %s", self.index_service.dir, exc)
        for idx in self.index_service.files:
            fsync_files.add(idx.fd)
        for fd in fsync_files:
            os.fdatasync(fd)
        self.index_service.dirty.clear()
        self.reput_from_offset = end
        last_ts = result.last_store_timestamp or ck.physic_msg_timestamp
        self._dispatched_store_ts = last_ts
        self.checkpoint.flush(Checkpoint(last_ts, last_ts, last_ts, end, end))
        self.stats.last_recovery_abnormal = abnormal
        self.stats.last_recovery_records = result.records
        if abnormal:
            log.warning("abnormal recovery of %s (no clean shutdown): checked %d records from %d, end %d%s",
                        self.root, result.records, scan_from, end, f"; {result.remark}" if result.torn else "")

    def _segment_by_checkpoint_time(self, ck: Checkpoint) -> Segment:
        """RocketMQ's abnormal recovery start: the newest file whose first record is not after the
        checkpoint's minimum time (minus 3 s)."""
        cl = self.commit_log
        limit = min(ck.min_timestamp(), max(ck.index_msg_timestamp - 3000, 0))
        for seg in reversed(cl.segments):
            ts = cl.first_store_timestamp(seg)
            if 0 <= ts <= limit:
                return seg
        return cl.segments[0]

    def _store_ts_blocking(self, phys: int) -> int:
        seg = self.commit_log.segment_at(phys)
        if seg is None:
            return -1
        head = os.pread(seg.fd, 128, phys - seg.start)
        try:
            return pickup_store_timestamp(head)
        except Exception:
            return -1

    # -- dispatch (the reput) ---------------------------------------------------------------------

    def _dispatch_record(self, rec: DispatchRecord) -> ConsumeQueue | None:
        """Put one parsed record into its ConsumeQueue and the index (``doDispatch``).

        A delayed record's tag code becomes its delivery time (``rec.tags_code`` is updated).
        """
        tran = rec.sys_flag & _TRAN_MASK
        cq = None
        if tran in (SYSFLAG_TRANSACTION_NOT_TYPE, SYSFLAG_TRANSACTION_COMMIT):
            cq = self._cq(rec.topic, rec.queue_id)
            if rec.delay_level > 0 and self._delay_ms:  # computeDeliverTimestamp
                rec.tags_code = rec.store_timestamp + self._delay_ms[min(rec.delay_level, len(self._delay_ms)) - 1]
            cq.put(rec.queue_offset, rec.physical_offset, rec.size, rec.tags_code)
        if tran != SYSFLAG_TRANSACTION_ROLLBACK and (rec.keys or rec.uniq_key):
            self.index_service.build(rec.topic, rec.physical_offset, rec.store_timestamp, rec.uniq_key, rec.keys)
        self._dispatched_store_ts = rec.store_timestamp
        return cq

    def _dispatch_rows(self, rows: list[RecordRow], touched: set[ConsumeQueue]) -> None:
        """:meth:`_dispatch_record` for a run of records read from the CommitLog (recovery),
        without an object per record; the ConsumeQueues written are added to ``touched``."""
        delay_ms = self._delay_ms
        pack = ENTRY.pack
        last_cq: ConsumeQueue | None = None
        last_topic = ""
        last_queue = -1
        # Consecutive entries of one queue are packed together and appended at once.
        run_first = run_next = run_end = 0
        run_entries: list[bytes] = []
        ts = self._dispatched_store_ts
        i_topics: list[str] = []
        i_phys: list[int] = []
        i_ts: list[int] = []
        i_uniq: list[str | None] = []
        i_keys: list[str] = []
        for topic, queue_id, queue_offset, phys, size, sys_flag, ts, tags_code, keys, uniq, delay_level in rows:
            tran = sys_flag & _TRAN_MASK
            if tran == SYSFLAG_TRANSACTION_NOT_TYPE or tran == SYSFLAG_TRANSACTION_COMMIT:
                if delay_level > 0 and delay_ms:  # computeDeliverTimestamp
                    tags_code = ts + delay_ms[min(delay_level, len(delay_ms)) - 1]
                if queue_offset == run_next and queue_id == last_queue and topic == last_topic:
                    run_entries.append(pack(phys, size, tags_code))
                    run_next += 1
                    run_end = phys + size
                else:
                    if run_entries:
                        assert last_cq is not None
                        last_cq.append(run_first, b"".join(run_entries), len(run_entries), run_end)
                    if queue_id != last_queue or topic != last_topic:
                        last_cq = self._cq(topic, queue_id)
                        last_topic, last_queue = topic, queue_id
                        touched.add(last_cq)
                    run_entries = [pack(phys, size, tags_code)]
                    run_first = queue_offset
                    run_next = queue_offset + 1
                    run_end = phys + size
            if (keys or uniq) and tran != SYSFLAG_TRANSACTION_ROLLBACK:
                i_topics.append(topic)
                i_phys.append(phys)
                i_ts.append(ts)
                i_uniq.append(uniq)
                i_keys.append(keys)
        if run_entries:
            assert last_cq is not None
            last_cq.append(run_first, b"".join(run_entries), len(run_entries), run_end)
        if i_phys:
            self.index_service.build_many(i_topics, i_phys, i_ts, i_uniq, i_keys)
        self._dispatched_store_ts = ts

    def _dispatch_batch(self, b: DispatchBatch, run: _IndexRun | None = None) -> None:
        """Dispatch what one put appended; with ``run``, the index entries of an ordinary batch
        are only collected there (the caller builds them with the next ones)."""
        cq = self._cq(b.topic, b.queue_id)
        n = len(b.phys)
        if b.sys_flags is None:
            entries = ENTRY.pack(b.phys[0], b.sizes[0], b.tags[0]) if n == 1 else b"".join(
                map(ENTRY.pack, b.phys, b.sizes, b.tags))
            cq.append(b.first_queue_offset, entries, n, b.end)
            if b.keys is not None and b.uniq is not None:
                if run is not None:
                    run.add(b)
                else:
                    self.index_service.build_batch(b.topic, b.phys, b.store_timestamp, b.uniq, b.keys)
                    self.index_service.write_headers()
            self._dirty_cqs.add(cq)
            self._dispatched_store_ts = b.store_timestamp
            if self._listeners:
                self._notify(b.topic, b.queue_id, b.first_queue_offset, b.tags)
            return
        q = b.first_queue_offset
        for i in range(n):
            tran = b.sys_flags[i] & _TRAN_MASK
            if tran in (SYSFLAG_TRANSACTION_NOT_TYPE, SYSFLAG_TRANSACTION_COMMIT):
                cq.put(q, b.phys[i], b.sizes[i], b.tags[i])
                if self._listeners:
                    self._notify(b.topic, b.queue_id, q, b.tags[i : i + 1])
                q += 1
            if tran != SYSFLAG_TRANSACTION_ROLLBACK and b.keys is not None and b.uniq is not None:
                if b.keys[i] or b.uniq[i]:
                    self.index_service.build(b.topic, b.phys[i], b.store_timestamp, b.uniq[i], b.keys[i])
        self.index_service.write_headers()
        self._dirty_cqs.add(cq)
        self._dispatched_store_ts = b.store_timestamp

    def _notify(self, topic: str, queue_id: int, first_queue_offset: int, tags: list[int]) -> None:
        n = len(tags)
        for i in range(n):
            if i + 1 < n and tags[i + 1] == tags[i]:
                continue
            for cb in self._listeners:
                try:
                    cb(topic, queue_id, first_queue_offset + i, tags[i])
                except Exception:
                    log.exception("dispatch listener %r failed", cb)

    def _reput(self) -> None:
        """Dispatch everything between ``reput_from_offset`` and the CommitLog's confirmed end."""
        cl = self.commit_log
        end = cl.committed
        batches = cl.dispatch_batches
        budget = REPUT_PARSE_SLICE
        # The index entries of consecutive ordinary batches are built together (one file
        # write run instead of one per put: many single-message puts per SYNC_FLUSH group).
        run = _IndexRun()
        try:
            while self.reput_from_offset < end:
                pos = self.reput_from_offset
                if batches:
                    b = batches[0]
                    if b.end <= pos:
                        batches.popleft()
                        continue
                    if b.start == pos:
                        if b.end > end:
                            break
                        batches.popleft()
                        if b.sys_flags is None:
                            self._dispatch_batch(b, run)
                        else:
                            run.flush(self.index_service)
                            self._dispatch_batch(b)
                        self.reput_from_offset = b.end
                        continue
                    limit = min(b.start, end)
                else:
                    limit = end
                if budget <= 0:
                    self._schedule_reput()
                    return
                run.flush(self.index_service)
                parsed = self._reput_parse(pos, limit)
                if parsed <= 0:
                    break
                budget -= parsed
        finally:
            run.flush(self.index_service)

    def _schedule_reput(self) -> None:
        if not self._reput_scheduled and self._loop is not None:
            self._reput_scheduled = True

            def run() -> None:
                self._reput_scheduled = False
                self._reput()

            self._loop.call_soon(run)

    def _reput_parse(self, pos: int, limit: int) -> int:
        """Parse records from the CommitLog in ``[pos, limit)`` (data the reput has no batch for:
        replicated bytes, or blank markers). Returns the bytes consumed (0 = stuck)."""
        cl = self.commit_log
        data = cl.read_raw(pos, min(limit - pos, REPUT_PARSE_SLICE))
        if not data:
            return 0
        p = 0
        seg = cl.segment_at(pos)
        while p < len(data):
            r = parse_dispatch(data, p, False)
            if isinstance(r, DispatchRecord):
                if r.physical_offset != pos + p:
                    self._reput_stuck(pos + p, f"record carries physical offset {r.physical_offset}")
                    break
                cq = self._dispatch_record(r)
                if cq is not None:
                    self._dirty_cqs.add(cq)
                    if self._listeners:
                        self._notify(r.topic, r.queue_id, r.queue_offset, [r.tags_code])
                p += r.size
                continue
            if r == BLANK and seg is not None:
                self.index_service.write_headers()
                self.reput_from_offset = seg.end
                return p + 8
            if r == CORRUPT:
                self._reput_stuck(pos + p, "bad magic code or sizes")
            break  # END_OF_DATA: an incomplete record (replication in progress)
        self.index_service.write_headers()
        self.reput_from_offset = pos + p
        return p

    def _reput_stuck(self, offset: int, why: str) -> None:
        if not self._reput_error_logged:
            self._reput_error_logged = True
            log.error("reput stopped at CommitLog offset %d: %s", offset, why)

    # -- put ---------------------------------------------------------------------------------------------

    def _reject(self, status: PutMessageStatus, remark: str) -> PutMessageResult:
        self.stats.put_rejected += 1
        return PutMessageResult(status, remark=remark)

    def _put(self, reqs: list[PutMessageRequest]) -> PutMessageResult | asyncio.Future[PutMessageResult]:
        if not self._running:
            return self._reject(PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store is not running")
        cfg = self.config
        if cfg.broker_role is BrokerRole.SLAVE:
            return self._reject(PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store is a slave: it is not writable")
        if not reqs:
            return self._reject(PutMessageStatus.MESSAGE_ILLEGAL, "empty batch")
        first = reqs[0]
        topic, queue_id = first.topic, first.queue_id
        if not topic or (
            (len(topic) > MAX_TOPIC_LENGTH or not topic.isascii()) and len(topic.encode()) > MAX_TOPIC_LENGTH
        ):
            return self._reject(PutMessageStatus.MESSAGE_ILLEGAL, f"topic length not in 1..{MAX_TOPIC_LENGTH} bytes")
        if queue_id < 0:
            return self._reject(PutMessageStatus.MESSAGE_ILLEGAL, f"queueId {queue_id} < 0")
        cl = self.commit_log
        unflushed = cl.append_offset - cl.flushed
        if unflushed > cfg.max_pending_flush_bytes:
            if self._flush_wakeup is not None:
                self._flush_wakeup.set()
            return self._reject(
                PutMessageStatus.OS_PAGECACHE_BUSY,
                f"[PC_SYNCHRONIZED]broker busy: {unflushed} bytes wait for flush "
                f"(max_pending_flush_bytes={cfg.max_pending_flush_bytes})",
            )
        props = []
        sync = False
        max_body = cfg.max_message_size
        for r in reqs:
            if r.topic != topic or r.queue_id != queue_id:
                return self._reject(PutMessageStatus.MESSAGE_ILLEGAL, "a batch must target one topic and queue")
            if len(r.body) > max_body:
                return self._reject(PutMessageStatus.MESSAGE_ILLEGAL,
                                    f"message body of {len(r.body)} bytes exceeds max_message_size={max_body}")
            p = r.properties.encode()
            if len(p) > MAX_PROPERTIES_SIZE:
                return self._reject(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                                    f"properties of {len(p)} bytes exceed {MAX_PROPERTIES_SIZE}")
            props.append(p)
            sync = sync or r.wait_store_msg_ok
        sync = sync and cl.sync_flush
        op = cl.put(reqs, props, topic, queue_id, int(self.clock() * 1000), sync,
                    time.monotonic() + cfg.sync_flush_timeout)
        if isinstance(op, PutMessageResult):
            self.stats.put_rejected += 1
            return op
        st = self.stats
        st.put_calls += 1
        st.put_messages += len(reqs)
        if unflushed > cfg.max_pending_flush_bytes // 4 and not cl.sync_flush:
            assert self._flush_wakeup is not None
            self._flush_wakeup.set()
        return op.fut

    async def put_message(self, req: PutMessageRequest) -> PutMessageResult:
        """Append one message; resolves once written (ASYNC_FLUSH) or fdatasync'd (SYNC_FLUSH and
        ``wait_store_msg_ok``). Failures come back as a status, never as an exception."""
        r = self._put([req])
        if isinstance(r, PutMessageResult):
            return r
        return await r

    async def put_messages(self, reqs: list[PutMessageRequest]) -> PutMessageResult:
        """Append a batch to ONE (topic, queue): consecutive queue offsets, contiguous records,
        one flush wait. ``messages`` of the result lists them in order."""
        r = self._put(reqs)
        if isinstance(r, PutMessageResult):
            return r
        return await r

    def put_messages_nowait(self, reqs: list[PutMessageRequest]
                            ) -> PutMessageResult | asyncio.Future[PutMessageResult]:
        """:meth:`put_messages` (or :meth:`put_message` for one request) without a coroutine:
        the result at once when the put is refused, else a future of it (for callers on the
        loop that answer from a callback)."""
        return self._put(reqs)

    # -- get ---------------------------------------------------------------------------------------------

    def _next_offset_correction(self, old: int, new: int) -> int:
        """``nextOffsetCorrection`` of DefaultMessageStore: a slave keeps the requested offset
        unless ``offsetCheckInSlave``."""
        if self.config.broker_role is BrokerRole.SLAVE and not self.config.offset_check_in_slave:
            return old
        return new

    def get_message(self, topic: str, queue_id: int, offset: int, max_msg_nums: int, *,
                    max_total_bytes: int = 256 * 1024, tags_codes: set[int] | None = None) -> GetMessageResult:
        """Read up to ``max_msg_nums`` messages of a queue from ``offset`` (``getMessage``).

        At most ``max_transfer_count_on_message_in_memory`` messages and
        about ``max_total_bytes`` (the first message always). ``tags_codes``
        filters by ConsumeQueue tag code (None = all). Statuses and
        ``next_begin_offset`` follow the A7 PULL_MESSAGE table.
        """
        corr = self._next_offset_correction
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, corr(offset, 0), 0, 0)
        min_off, max_off = cq.min_offset, cq.max_offset
        if max_off == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, corr(offset, 0), min_off, max_off)
        if offset < min_off:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, corr(offset, min_off), min_off, max_off)
        if offset == max_off:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, corr(offset, offset), min_off, max_off)
        if offset > max_off:
            nxt = min_off if min_off == 0 else max_off
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, corr(offset, nxt), min_off, max_off)
        scan = max(800, max_msg_nums)
        data = cq.read(offset, scan)
        if data is None:
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, corr(offset, cq.roll_next_file(offset)),
                                    min_off, max_off)
        cl = self.commit_log
        result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_off, max_off)
        records = result.records
        offsets = result.queue_offsets
        max_count = min(max_msg_nums, self.config.max_transfer_count_on_message_in_memory)
        total = 0
        next_phy_file_start = -1
        i = 0
        max_phy_pulling = 0
        committed = cl.committed
        for phys, size, tags in ENTRY.iter_unpack(data):
            if records and (len(records) >= max_count or total + size > max_total_bytes):
                break
            if phys + size > committed:
                # Not readable yet (never the case after the reput; possible only mid-truncation):
                # stop here rather than count it removed, so ``next_begin_offset`` stays on it.
                break
            i += 1
            max_phy_pulling = phys
            if next_phy_file_start >= 0 and phys < next_phy_file_start:
                continue
            if size <= 0:
                continue
            if tags_codes is not None and tags not in tags_codes:
                continue
            rec = cl.read(phys, size)
            if rec is None:
                if not records:
                    result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                seg_size = cl.segment_size
                next_phy_file_start = phys + seg_size - phys % seg_size
                continue
            records.append(rec)
            offsets.append(offset + i - 1)
            total += size
            result.status = GetMessageStatus.FOUND
            next_phy_file_start = -1
        result.next_begin_offset = offset + i
        behind = cl.committed - max_phy_pulling
        result.suggest_pulling_from_slave = (
            behind > _memory_bytes() * self.config.access_message_in_memory_max_ratio / 100
        )
        return result

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Next queue offset to be written (exclusive); 0 for an unknown queue."""
        cq = self.find_consume_queue(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """First retained queue offset; 0 for an unknown queue."""
        cq = self.find_consume_queue(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def _cq_store_ts(self, cq: ConsumeQueue, queue_offset: int) -> int:
        e = cq.entry(queue_offset)
        if e is None:
            return -1
        head = self.commit_log.read(e[0], min(e[1], 128))
        if head is None:
            return -1
        return pickup_store_timestamp(head)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time (ms) of the queue's oldest retained message; -1 when none."""
        cq = self.find_consume_queue(topic, queue_id)
        return -1 if cq is None else self._cq_store_ts(cq, cq.min_offset)

    def get_store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """Store time (ms) of the message at ``queue_offset``; -1 when none."""
        cq = self.find_consume_queue(topic, queue_id)
        return -1 if cq is None else self._cq_store_ts(cq, queue_offset)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """Queue offset of the message stored at ``timestamp_ms`` (``getOffsetInQueueByTime``, A7 29).

        Binary search by store time: an exact match wins, else the nearer of
        the two neighbours (the left one on a tie); 0 for an empty queue.
        """
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None or cq.max_offset <= cq.min_offset:
            return 0
        low, high = cq.min_offset, cq.max_offset - 1
        min_phys = self.commit_log.min_offset
        left = right = -1
        left_ts = right_ts = -1
        while high >= low:
            mid = (low + high) // 2
            e = cq.entry(mid)
            if e is None or e[0] < min_phys:
                low = mid + 1
                left = mid
                continue
            ts = self._cq_store_ts(cq, mid)
            if ts < 0:
                return 0
            if ts == timestamp_ms:
                return mid
            if ts > timestamp_ms:
                high = mid - 1
                right, right_ts = mid, ts
            else:
                low = mid + 1
                left, left_ts = mid, ts
        if left_ts == -1:
            return right if right >= 0 else left
        if right_ts == -1:
            return left
        return right if abs(timestamp_ms - left_ts) > abs(timestamp_ms - right_ts) else left

    def read_record(self, physical_offset: int) -> bytes | None:
        """The stored record (A9.1) at ``physical_offset``; None when there is none."""
        return self.commit_log.read_record(physical_offset)

    def look_message_by_offset(self, physical_offset: int) -> MessageExt | None:
        """The decoded message at ``physical_offset``; None when there is none."""
        rec = self.read_record(physical_offset)
        if rec is None:
            return None
        try:
            return decode_record(rec)
        except MessageFormatError:
            return None

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[bytes]:
        """Stored records of ``topic`` whose KEYS contain ``key`` or whose UNIQ_KEY is ``key``,
        stored within ``[begin_ms, end_ms]``, newest first, at most ``min(max_num, 64)``.

        Index hits whose record does not carry the key (hash collisions) are dropped before
        ``max_num`` is applied.
        """
        out: list[bytes] = []
        max_num = min(max_num, MAX_MSGS_NUM_BATCH)
        if max_num <= 0:
            return out
        for phys in self.index_service.query(topic, key, MAX_MSGS_NUM_BATCH, begin_ms, end_ms):
            if len(out) >= max_num:
                break
            rec = self.read_record(phys)
            if rec is None:
                continue
            try:
                msg = decode_record(rec)
            except MessageFormatError:
                continue
            if msg.topic == topic and (key in msg.keys or msg.properties.get("UNIQ_KEY") == key):
                out.append(rec)
        return out

    # -- HA -------------------------------------------------------------------------------------------------

    def read_commit_log(self, offset: int, max_bytes: int) -> bytes:
        """Raw CommitLog bytes from ``offset`` (at most ``max_bytes``, within one file, never past
        the confirmed end); empty when there are none. Master side of replication (B7)."""
        return self.commit_log.read_raw(offset, max_bytes)

    async def append_commit_log_data(self, offset: int, data: bytes) -> bool:
        """Append replicated bytes at exactly ``offset`` (slave side, B7).

        False when ``offset`` is not this log's end (an empty log accepts the
        start of any file), the store is not running, or the write failed.
        The reput dispatches the complete records among them.
        """
        if not self._running or not data:
            return self._running and offset == self.commit_log.append_offset
        cl = self.commit_log
        fresh = not cl.segments and cl.append_offset == 0
        op = cl.append_raw(offset, data, time.monotonic() + self.config.sync_flush_timeout)
        if op is None:
            return False
        if fresh and offset:
            self.reput_from_offset = offset
        res = await op.fut
        return res.status in (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT)

    def rebuild_queue_offset_table(self) -> None:
        """Reset the next queue offset of every (topic, queueId) from its ConsumeQueue.

        Replicated records reach the ConsumeQueues without passing through the
        put path, so a slave that becomes master calls this before its first
        put (and :meth:`truncate` calls it after cutting the log).
        """
        table = self.commit_log.topic_queue_table
        table.clear()
        for cq in self._all_cqs():
            if cq.max_offset > 0 or cq.files or cq.tail:
                table[(cq.topic, cq.queue_id)] = cq.max_offset

    def dispatch_all(self) -> int:
        """Dispatch every complete record now (no time slicing); returns the CommitLog offset up to
        which the log holds whole records (``reput_from_offset``).

        Replicated bytes may end inside a record; a slave about to be promoted
        truncates there so that its first own record follows a whole one.
        """
        while self.reput_from_offset < self.commit_log.committed:
            before = self.reput_from_offset
            self._reput()
            if self.reput_from_offset == before:
                break
        return self.reput_from_offset

    async def truncate(self, offset: int) -> int:
        """Cut the log at ``offset`` (a record boundary): HA's divergent-tail repair.

        A broker that comes back as the slave of a new master drops every byte
        the new master does not have (``rocket.store.epoch``): CommitLog bytes
        from ``offset`` on are zeroed (files wholly past it deleted),
        ConsumeQueue entries and index entries of records past it removed,
        queue offsets rewound, and the checkpoint moved back first, so a crash
        half-way leaves at worst the old tail (which the next HA handshake cuts
        again), never a gap. An ``offset`` at or below the oldest file's start
        empties the store (CommitLog, ConsumeQueues, index). Waits for pending
        writes and flushes first; only the HA client may append meanwhile (it
        calls this between sessions). Returns the bytes removed. Raises
        :class:`StoreError` when the store is not running and ``OSError`` when
        a file cannot be written (the store is then unusable: restart it).
        """
        if not self._running or self._loop is None:
            raise StoreError("message store is not running")
        cl = self.commit_log
        if offset >= cl.append_offset:
            return 0
        await cl.wait_idle()
        assert self._logics_lock is not None
        loop = self._loop
        removed = cl.append_offset - max(offset, 0)
        async with self._logics_lock:
            self._truncating = True
            try:
                await loop.run_in_executor(self._io, lambda: None)  # ConsumeQueue writes in flight are done
                ck = self.checkpoint.values
                back = Checkpoint(ck.physic_msg_timestamp, ck.logics_msg_timestamp, ck.index_msg_timestamp,
                                  min(ck.physic_flushed_offset, offset, cl.flushed),
                                  min(ck.logics_dispatched_offset, offset, self.reput_from_offset))
                await loop.run_in_executor(self._io, self.checkpoint.flush, back)
                while cl.busy:  # noqa: ASYNC110 -- a flush in flight; nothing may start between here and the cut
                    await asyncio.sleep(0.005)
                wipe = not cl.segments or offset <= cl.segments[0].start
                ranges, doomed = cl.truncate_positions(offset)
                end = cl.append_offset
                self.reput_from_offset = min(self.reput_from_offset, end)
                if wipe:
                    self.delete_topics(self.topics())
                else:
                    for cq in self._all_cqs():
                        if cq.max_phys_end > end or cq.tail:
                            if cq.truncate_dirty(end):
                                self._dirty_cq_files.update(
                                    f for f in cq.files if f.start + cq.file_size > cq.written * CQ_UNIT)
                            if cq.tail:
                                self._dirty_cqs.add(cq)
                svc = self.index_service
                svc._pending = [p for p in svc._pending if p.phys < end]
                before = list(svc.files)
                svc.repair(end, self._store_ts_blocking)
                gone = [f for f in before if f not in svc.files]
                svc.dirty.difference_update(gone)
                svc._header_dirty.difference_update(gone)
                svc.dirty.update(svc.files[-1:])
                self.rebuild_queue_offset_table()
                await loop.run_in_executor(self._io, cl.truncate_files, ranges, doomed)
            finally:
                self._truncating = False
        await self.flush_logics(everything=True)
        log.warning("store %s truncated at CommitLog offset %d: %d bytes removed", self.root, end, removed)
        return removed

    # -- topics ------------------------------------------------------------------------------------------------

    def delete_topics(self, topics: Iterable[str]) -> None:
        """Drop the ConsumeQueues of ``topics`` (files removed in the background) and their
        queue offsets. The CommitLog keeps the records until retention removes them."""
        doomed: list[ConsumeQueue] = []
        for topic in topics:
            qs = self.consume_queue_table.pop(topic, None)
            for key in [k for k in self.commit_log.topic_queue_table if k[0] == topic]:
                del self.commit_log.topic_queue_table[key]
            if not qs:
                continue
            for cq in qs.values():
                cq.destroyed = True
                for f in cq.files:
                    f.close_view()
                self._dirty_cqs.discard(cq)
                doomed.append(cq)
        if not doomed:
            return
        self._dirty_cq_files = {f for f in self._dirty_cq_files if not any(f in cq.files for cq in doomed)}

        def remove() -> None:
            for cq in doomed:
                cq.close()
                with contextlib.suppress(FileNotFoundError):
                    shutil.rmtree(cq.dir)
            for topic_dir in {cq.dir.parent for cq in doomed}:
                with contextlib.suppress(OSError):
                    topic_dir.rmdir()

        self._io.submit(remove)

    # -- background services ------------------------------------------------------------------------------------

    async def _sleep_or_wakeup(self, seconds: float) -> bool:
        ev = self._flush_wakeup
        assert ev is not None
        try:
            async with asyncio.timeout(seconds):
                await ev.wait()
        except TimeoutError:
            return False
        ev.clear()
        return True

    async def _flush_commit_log_service(self) -> None:
        """ASYNC_FLUSH (``FlushRealTimeService``): every interval flush when enough pages are dirty,
        and everything at least every ``flush_commit_log_thorough_interval``."""
        cfg = self.config
        cl = self.commit_log
        least = cfg.flush_commit_log_least_pages * 4096
        last_thorough = time.monotonic()
        while True:
            woken = await self._sleep_or_wakeup(cfg.flush_interval_commit_log)
            now = time.monotonic()
            dirty = cl.committed - cl.flushed
            thorough = now - last_thorough >= cfg.flush_commit_log_thorough_interval
            if dirty > 0 and (woken or thorough or dirty >= least):
                await cl.flush()
                if thorough:
                    last_thorough = now

    async def _sync_flush_watchdog(self) -> None:
        """SYNC_FLUSH: answer FLUSH_DISK_TIMEOUT to puts whose fdatasync takes too long."""
        period = max(min(self.config.sync_flush_timeout / 10, 0.1), 0.005)
        while True:
            await asyncio.sleep(period)
            self.commit_log.expire_ops(time.monotonic())

    async def commit_consume_queues(self, everything: bool = False) -> bool:
        """Write ConsumeQueue tails to their files (IO thread); False if some write failed.

        ``everything`` looks at every queue, not only those marked dirty.
        """
        if self._truncating:  # truncate() owns the ConsumeQueues for a moment
            return True
        taken = []
        for cq in self._all_cqs() if everything else self._dirty_cqs:
            t = cq.take_tail()
            if t is not None:
                taken.append((cq, *t))
        self._dirty_cqs = set()
        if not taken:
            return True
        assert self._loop is not None

        def write() -> list[tuple[ConsumeQueue, int, int, int, list[CQFile], OSError | None]]:
            out: list[tuple[ConsumeQueue, int, int, int, list[CQFile], OSError | None]] = []
            for cq, first, data, gen in taken:
                try:
                    out.append((cq, first, len(data) // CQ_UNIT, gen, cq.write_entries(first, data), None))
                except OSError as exc:
                    out.append((cq, first, 0, gen, [], exc))
            return out

        ok = True
        for cq, first, n, gen, touched, err in await self._loop.run_in_executor(self._io, write):
            if err is not None:
                ok = False
                self._dirty_cqs.add(cq)
                if not self._cq_write_failed:
                    log.error("cannot write ConsumeQueue %s/%d: %s; will retry", cq.topic, cq.queue_id, err)
                continue
            cq.commit_done(first, n, gen)
            if cq.tail:
                self._dirty_cqs.add(cq)
            self._dirty_cq_files.update(touched)
        self._cq_write_failed = not ok
        return ok

    async def flush_logics(self, everything: bool = False) -> None:
        """Commit and fdatasync ConsumeQueues and index, then write the checkpoint."""
        assert self._logics_lock is not None and self._loop is not None
        async with self._logics_lock:
            reput = self.reput_from_offset
            pending = self.index_service.pending_min_phys()
            if pending >= 0:
                reput = min(reput, pending)
            ts = self._dispatched_store_ts
            self.index_service.write_headers()
            ok = await self.commit_consume_queues(everything)
            fds = [f.fd for f in self._dirty_cq_files if f.fd >= 0]
            fds += [f.fd for f in self.index_service.dirty]
            self._dirty_cq_files = set()
            self.index_service.dirty = set()
            t0 = time.perf_counter()
            cl = self.commit_log
            values = self.checkpoint.values
            values = Checkpoint(
                cl.flushed_store_timestamp or values.physic_msg_timestamp,
                ts if ok else values.logics_msg_timestamp,
                ts if ok else values.index_msg_timestamp,
                cl.flushed,
                reput if ok else values.logics_dispatched_offset,
            )

            def flush() -> None:
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.fdatasync(fd)
                self.checkpoint.flush(values)

            try:
                await self._loop.run_in_executor(self._io, flush)
            except OSError as exc:
                log.error("cannot write the checkpoint %s: %s", self.checkpoint.path, exc)
            self.stats.cq_flush_seconds = time.perf_counter() - t0

    async def flush(self) -> None:
        """fdatasync the CommitLog, ConsumeQueues and index now and write the checkpoint."""
        await self.commit_log.flush()
        await self.flush_logics()

    async def _logics_service(self) -> None:
        """Commit ConsumeQueue tails often; flush them, the index and the checkpoint every
        ``flush_interval_consume_queue``."""
        last_flush = time.monotonic()
        while True:
            await asyncio.sleep(CQ_COMMIT_INTERVAL)
            self.index_service.retry_pending()
            if time.monotonic() - last_flush >= self.config.flush_interval_consume_queue:
                last_flush = time.monotonic()
                await self.flush_logics()
            elif self._dirty_cqs:
                await self.commit_consume_queues()

    def _create_index_file(self, path: Path, prev_phy: int, prev_ts: int) -> None:
        assert self._loop is not None
        svc = self.index_service

        def done(fut: asyncio.Future[IndexFile]) -> None:
            try:
                svc.file_created(fut.result())
            except OSError as exc:
                log.error("cannot create index file %s: %s; index entries wait in memory", path, exc)
                svc.file_created(None)

        fut = self._loop.run_in_executor(self._io, IndexFile.create, path, svc.slot_num, svc.index_num,
                                         prev_phy, prev_ts)
        fut.add_done_callback(done)

    def is_delete_time(self) -> bool:
        """Is the clock's local hour one of ``delete_when`` ("04", "04;16")?"""
        hour = time.localtime(self.clock()).tm_hour
        for part in self.config.delete_when.split(";"):
            part = part.strip()
            if part.isdigit() and int(part) == hour:
                return True
        return False

    async def clean_once(self) -> int:
        """One retention run (``CleanCommitLogService``): returns the CommitLog files deleted.

        Deletes files older than ``file_reserved_time_hours`` at ``delete_when``,
        and the oldest files regardless of age while disk usage is above
        ``disk_max_used_space_ratio`` percent; at most 10 per run, never the
        file being written nor any not yet flushed. ConsumeQueue and index
        files that only point into deleted files go too, and queue minimum
        offsets move past them.
        """
        assert self._loop is not None
        cfg = self.config
        cl = self.commit_log
        ratio = self.disk_usage_ratio()
        full = ratio > cfg.disk_max_used_space_ratio / 100
        if full:
            log.warning("disk usage %.1f%% of %s above %.1f%%: deleting the oldest CommitLog files",
                        ratio * 100, self.root, cfg.disk_max_used_space_ratio)
        if not (full or self.is_delete_time()):
            return 0
        candidates = cl.deletable_segments()[:DELETE_FILES_BATCH_MAX]
        if not candidates:
            return 0
        if not full:
            limit = self.clock() - cfg.file_reserved_time_hours * 3600

            def expired() -> list[Segment]:
                out = []
                for seg in candidates:
                    try:
                        mtime = os.stat(seg.path).st_mtime
                    except OSError:
                        mtime = 0.0
                    if mtime > limit:
                        break
                    out.append(seg)
                return out

            candidates = await self._loop.run_in_executor(self._io, expired)
        removed = cl.remove_segments(candidates)
        if not removed:
            return 0
        min_phys = cl.min_offset
        cq_victims: list[CQFile] = []
        for cq in self._all_cqs():
            victims = cq.expired_files(min_phys)
            if victims:
                cq.remove_files(victims)
                cq_victims.extend(victims)
                self._dirty_cq_files.difference_update(victims)
            cq.correct_min_offset(min_phys)
        idx_victims = self.index_service.expired_files(min_phys)
        self.index_service.remove(idx_victims)

        def delete() -> None:
            for seg in removed:
                seg.close()
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(seg.path)
            for f in cq_victims:
                f.close()
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f.path)
            for idx in idx_victims:
                idx.close()
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(idx.path)

        await self._loop.run_in_executor(self._io, delete)
        log.info("retention deleted %d CommitLog file(s) (%s), %d ConsumeQueue and %d index file(s); "
                 "CommitLog now starts at %d", len(removed), "disk full" if full else "expired",
                 len(cq_victims), len(idx_victims), min_phys)
        return len(removed)

    async def _clean_service(self) -> None:
        while True:
            await asyncio.sleep(self.config.clean_resource_interval)
            await self.clean_once()

    async def persist_consumer_offsets(self) -> None:
        """Write ``consumerOffset.json`` now if it changed (IO thread)."""
        assert self._loop is not None
        co = self.consumer_offsets
        if not co.dirty and co.path.exists():
            return
        version, data = co.snapshot()
        try:
            await self._loop.run_in_executor(self._io, co.write, version, data)
        except OSError as exc:
            log.error("cannot persist %s: %s", co.path, exc)

    async def _offset_persist_service(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_consumer_offset_interval)
            await self.persist_consumer_offsets()

    # -- runtime info ----------------------------------------------------------------------------------------------

    def runtime_info(self) -> dict[str, str]:
        """``GET_BROKER_RUNTIME_INFO`` store figures, all strings (A7 28)."""
        cl = self.commit_log
        head = cl.read(cl.min_offset, 128) if cl.record_size_at(cl.min_offset) else None
        earliest = pickup_store_timestamp(head) if head else -1
        st = self.stats
        ratio = self.disk_usage_ratio()
        return {
            "commitLogMaxOffset": str(cl.committed),
            "commitLogMinOffset": str(cl.min_offset),
            "commitLogDiskRatio": f"{ratio:.4f}",
            "consumeQueueDiskRatio": f"{ratio:.4f}",
            "dispatchBehindBytes": str(max(cl.committed - self.reput_from_offset, 0)),
            "remainHowManyDataToFlush": str(max(cl.append_offset - cl.flushed, 0)),
            "earliestMessageTimeStamp": str(earliest),
            "pageCacheLockTimeMills": "0",
            "putMessageTimesTotal": str(st.put_messages),
            "putMessageEntireTimeMax": "0",
            "commitLogFlushLastSeconds": f"{st.commit_log.last_flush_seconds:.6f}",
            "commitLogFlushMaxSeconds": f"{st.commit_log.max_flush_seconds:.6f}",
            "commitLogFdatasyncTotal": str(st.commit_log.fdatasyncs),
            "commitLogWriteErrors": str(st.commit_log.write_errors),
            "storeRecoverySeconds": f"{st.last_recovery_seconds:.3f}",
            "storeRecoveryAbnormal": str(st.last_recovery_abnormal).lower(),
            "indexLastUpdateTimestamp": str(self.index_last_update_timestamp),
            "indexLastUpdatePhyoffset": str(self.index_last_update_phy_offset),
        }

    # -- shutdown ----------------------------------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Stop tasks, flush everything, write the checkpoint, persist configs and offsets,
        delete ``abort``, unlock. Idempotent."""
        if not self._started:
            return
        self._running = False
        self._started = False
        loop = asyncio.get_running_loop()
        cl = self.commit_log
        with contextlib.suppress(Exception):
            async with asyncio.timeout(30):
                await cl.wait_idle()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []
        clean = True
        if not cl.sync_flush or cl.flushed < cl.committed:
            await cl.flush()
        self._reput()
        if cl.flushed < cl.committed:
            clean = False
            log.error("shutdown: CommitLog not fully flushed (%d < %d); next start recovers abnormally",
                      cl.flushed, cl.committed)
        self.index_service.retry_pending()
        await self.flush_logics(everything=True)
        if any(cq.tail for cq in self._all_cqs()):
            clean = False
        if self.reput_from_offset < cl.committed or self.index_service.pending_min_phys() >= 0:
            clean = False
        await self.persist_consumer_offsets()
        await loop.run_in_executor(self._io, self._close_blocking, clean)

    def _close_blocking(self, clean: bool) -> None:
        for table in (self.topic_configs.store, self.subscription_groups.store):
            try:
                if clean:
                    table.backup()
                table.close()
            except Exception as exc:
                log.error("closing %s: %s", table.path, exc)
        self.commit_log.close()
        for cq in self._all_cqs():
            cq.close()
        self.index_service.close()
        self.checkpoint.close()
        if clean:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.root / "abort")
            with contextlib.suppress(OSError):
                files.fsync_dir(self.root)
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None
        self._io.shutdown(wait=False)


_MEMORY: int | None = None


def _memory_bytes() -> int:
    global _MEMORY
    if _MEMORY is None:
        try:
            _MEMORY = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            _MEMORY = 8 << 30
    return _MEMORY
