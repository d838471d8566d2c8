"""DefaultMessageStore: the store's façade over CommitLog, ConsumeQueues, IndexFile and checkpoint.

The broker's storage engine as a library (RocketMQ 4.9.8 ``DefaultMessageStore``),
on one asyncio loop. Files under ``store_path_root_dir``::

    commitlog/<20 digits>                    CommitLog segments (commitlog.py)
    consumequeue/<topic>/<queueId>/<20 digits>   ConsumeQueue files (consumequeue.py)
    index/<yyyyMMddHHmmssSSS>                IndexFiles (index.py)
    checkpoint                               4 KiB, checkpoint.py
    abort                                    present while running: its presence at start = crash
    lock                                     flock'd while running: a second store on the same path fails
    config/                                  the broker's metadata (rocket.broker.metadata), not the store's

The work is done by named services, each in a module of its own (RocketMQ's names):

* ``queue_store`` — :class:`~rocket.store.queue_store.ConsumeQueueStore`: the ConsumeQueue table
  and its writes;
* ``reput`` — :class:`~rocket.store.reput.ReputMessageService`: dispatch of CommitLog records
  to ConsumeQueues and the index, inline each time the CommitLog's confirmed end advances, so
  a put that returned is already visible to :meth:`DefaultMessageStore.get_message`;
* ``flush`` — the CommitLog's flush (``FlushRealTimeService``, or the SYNC_FLUSH timeout
  watchdog) and ``FlushConsumeQueueService`` (ConsumeQueues, index, checkpoint);
* ``retention`` — ``CleanCommitLogService`` and ``CleanConsumeQueueService``;
* ``recovery`` — start-up recovery (``recover``, ``recoverNormally``/``recoverAbnormally``).

This class owns their lifecycle (lock, load, recover, background tasks, shutdown), the put
and get paths, the queries, and what replication asks of the store (read and append
CommitLog bytes, truncate a divergent tail).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import mmap
import os
import time
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mypy_extensions import mypyc_attr

from rocket.message import (
    MAX_PROPERTIES_SIZE,
    MAX_TOPIC_LENGTH,
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
    PutMessageBatch,
    PutMessageRequest,
    PutMessageResult,
    PutMessageStatus,
    StoreError,
)
from rocket.store.checkpoint import Checkpoint, StoreCheckpoint
from rocket.store.commitlog import CommitLog, PutOp
from rocket.store.consumequeue import ENTRY, ConsumeQueue
from rocket.store.flush import FlushCommitLogService, FlushConsumeQueueService
from rocket.store.index import MAX_MSGS_NUM_BATCH, IndexFile, IndexService
from rocket.store.queue_store import ConsumeQueueStore
from rocket.store.record import parse_delay_levels, pickup_store_timestamp
from rocket.store.recovery import StoreRecovery, read_store_timestamp
from rocket.store.reput import DispatchListener, ReputMessageService
from rocket.store.retention import CleanCommitLogService, CleanConsumeQueueService, statvfs_used_ratio
from rocket.store.stats import StoreStats

__all__ = ["DefaultMessageStore", "DispatchListener", "StoreStats", "statvfs_used_ratio"]

log = logging.getLogger("rocket.store")


@mypyc_attr(allow_interpreted_subclasses=True)  # tests script a read or a refusal in a subclass
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
        try:
            delay_ms = parse_delay_levels(config.message_delay_level)
        except ValueError as exc:
            raise StoreError(f"message_delay_level: {exc}") from None
        self._io = ThreadPoolExecutor(1, thread_name_prefix="rocket-store-io")
        self.commit_log = CommitLog(config)
        self.consume_queues = ConsumeQueueStore(root / "consumequeue", config.mapped_file_size_consume_queue, self._io)
        self.index_service = IndexService(root / "index", config.max_hash_slot_num, config.max_index_num,
                                          self._now_ms)
        self.checkpoint = StoreCheckpoint(root / "checkpoint")
        self.stats = StoreStats(commit_log=self.commit_log.stats)
        self.reput_service = ReputMessageService(self.commit_log, self.consume_queues, self.index_service, delay_ms)
        self.flush_commit_log_service = FlushCommitLogService(config, self.commit_log)
        self.flush_consume_queue_service = FlushConsumeQueueService(
            config, self.commit_log, self.consume_queues, self.index_service, self.reput_service, self.checkpoint,
            self._io, self.stats)
        self.clean_consume_queue_service = CleanConsumeQueueService(self.consume_queues, self.index_service)
        self.clean_commit_log_service = CleanCommitLogService(
            config, self.commit_log, self.clean_consume_queue_service, self._io,
            clock=lambda: self.clock(), disk_usage_ratio=self.disk_usage_ratio)
        self._commit_listeners: list[Callable[[int], None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = False
        self._started = False
        #: The last :meth:`shutdown` left everything flushed and deleted ``abort``.
        self.last_shutdown_clean = False
        self._lock_fd: int | None = None

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

    @property
    def reput_from_offset(self) -> int:
        """CommitLog offset up to which records are dispatched to ConsumeQueues and the index."""
        return self.reput_service.reput_from_offset

    @reput_from_offset.setter
    def reput_from_offset(self, offset: int) -> None:
        self.reput_service.reput_from_offset = offset

    def add_dispatch_listener(self, cb: DispatchListener, topic: str | None = None) -> None:
        """Call ``cb(topic, queue_id, queue_offset, tags_code)`` on the loop after ConsumeQueue appends.

        ``queue_offset`` is that of the message just dispatched (the queue's
        max offset is now ``queue_offset + 1``). For a run of consecutive
        messages with the same tag code in one batch or replicated chunk, ``cb``
        is called once, for the last of them. With ``topic``, ``cb`` hears of
        that topic only, and of its every entry. Exceptions are logged and
        ignored.
        """
        self.reput_service.add_listener(cb, topic)

    def add_commit_listener(self, cb: Callable[[int], None]) -> None:
        """Call ``cb(max_phy_offset)`` on the loop each time the CommitLog's confirmed end moved,
        before the puts it covers are answered and before the reput dispatches the new records
        (HA writes them to its slaves there, and a SYNC_MASTER send waits for the slave, not for
        the dispatch). Exceptions are logged and ignored."""
        self._commit_listeners.append(cb)

    def _on_committed(self) -> None:
        if self._commit_listeners:
            end = self.commit_log.committed
            for cb in self._commit_listeners:
                try:
                    cb(end)
                except Exception:
                    log.exception("commit listener %r failed", cb)
        # The reput runs at the end of this loop turn, after the puts just written were answered
        # (their answer frames leave first), as RocketMQ's ReputMessageService dispatches behind
        # the CommitLog's writes. No request read after those answers finds the records
        # undispatched: the loop runs its ready callbacks before it polls the sockets again.
        self.reput_service.schedule()

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The ConsumeQueue of ``(topic, queue_id)``, if it exists."""
        return self.consume_queues.find(topic, queue_id)

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of ``topic`` that have a ConsumeQueue, sorted."""
        return self.consume_queues.queue_ids(topic)

    def topics(self) -> list[str]:
        """Topics that have ConsumeQueues."""
        return self.consume_queues.topics()

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
        self.reput_service.attach(loop)
        self.flush_commit_log_service.attach()
        self.flush_consume_queue_service.attach()
        self._started = self._running = True
        if self.commit_log.sync_flush:
            self._spawn(self.flush_commit_log_service.run_sync_flush_watchdog(), "sync-flush-watchdog")
        else:
            self._spawn(self.flush_commit_log_service.run_async_flush(), "flush-commitlog")
        self._spawn(self.flush_consume_queue_service.run(), "flush-consumequeue")
        self._spawn(self.clean_commit_log_service.run(), "clean")
        log.info("store %s started: CommitLog %d..%d, %d queues, recovery %.3f s (%s)", self.root,
                 self.min_phy_offset, self.max_phy_offset, self.consume_queues.count(),
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
        StoreRecovery(root, self.commit_log, self.consume_queues, self.index_service, self.checkpoint,
                      self.reput_service, self.stats, check_crc=self.config.check_crc_on_recover).recover(abnormal)
        abort.touch()
        files.fsync_dir(root)

    # -- put ---------------------------------------------------------------------------------------------

    def _reject(self, status: PutMessageStatus, remark: str) -> PutMessageResult:
        self.stats.put_rejected += 1
        return PutMessageResult(status, remark=remark)

    def _refuse_put(self, topic: str, queue_id: int, count: int) -> PutMessageResult | int:
        """The checks every put passes first (store running and writable, a non-empty batch to a
        valid topic and queue, the flush not too far behind): the refusal, or the bytes appended
        but not yet flushed."""
        if not self._running:
            return self._reject(PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store is not running")
        cfg = self.config
        if cfg.broker_role is BrokerRole.SLAVE:
            return self._reject(PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store is a slave: it is not writable")
        if not count:
            return self._reject(PutMessageStatus.MESSAGE_ILLEGAL, "empty batch")
        if not topic or (
            (len(topic) > MAX_TOPIC_LENGTH or not topic.isascii()) and len(topic.encode()) > MAX_TOPIC_LENGTH
        ):
            return self._reject(PutMessageStatus.MESSAGE_ILLEGAL, f"topic length not in 1..{MAX_TOPIC_LENGTH} bytes")
        if queue_id < 0:
            return self._reject(PutMessageStatus.MESSAGE_ILLEGAL, f"queueId {queue_id} < 0")
        cl = self.commit_log
        unflushed = cl.append_offset - cl.flushed
        if unflushed > cfg.max_pending_flush_bytes:
            self.flush_commit_log_service.wake()
            return self._reject(
                PutMessageStatus.OS_PAGECACHE_BUSY,
                f"[PC_SYNCHRONIZED]broker busy: {unflushed} bytes wait for flush "
                f"(max_pending_flush_bytes={cfg.max_pending_flush_bytes})",
            )
        return unflushed

    def _put_done(self, op: PutOp | PutMessageResult, count: int, unflushed: int
                  ) -> PutMessageResult | asyncio.Future[PutMessageResult] | None:
        """Account an append of ``count`` messages (or its refusal by the CommitLog): the refusal,
        or the future of the outcome (None when the put was given a ``done`` callback)."""
        if isinstance(op, PutMessageResult):
            self.stats.put_rejected += 1
            return op
        st = self.stats
        st.put_calls += 1
        st.put_messages += count
        cl = self.commit_log
        if unflushed > self.config.max_pending_flush_bytes // 4 and not cl.sync_flush:
            self.flush_commit_log_service.wake()
        # A put's write job starts on a later loop turn or at ``release()``, never inside this
        # call, so its future is not done here: its waiter yields and wakes after the reput that
        # the job's end scheduled (test_store_put_callback: an awaited put reads its records
        # dispatched). ``append_commit_log_data``, whose job can run at once, dispatches itself.
        return op.fut  # (None with ``done``)

    def _put(self, reqs: list[PutMessageRequest], done: Callable[[PutMessageResult], object] | None = None,
             ) -> PutMessageResult | asyncio.Future[PutMessageResult] | None:
        """The refusal, or (accepted) the future of the outcome, or None when ``done`` gets it."""
        first = reqs[0] if reqs else None
        topic, queue_id = (first.topic, first.queue_id) if first is not None else ("", 0)
        unflushed = self._refuse_put(topic, queue_id, len(reqs))
        if isinstance(unflushed, PutMessageResult):
            return unflushed
        cfg = self.config
        cl = self.commit_log
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
                    time.monotonic() + cfg.sync_flush_timeout, done)
        return self._put_done(op, len(reqs), unflushed)

    def put_batch_nowait(self, batch: PutMessageBatch, done: Callable[[PutMessageResult], object] | None = None,
                         ) -> PutMessageResult | asyncio.Future[PutMessageResult] | None:
        """:meth:`put_messages_nowait` for a :class:`PutMessageBatch` (a batch send's messages, to
        one queue): the same checks and outcome, without an object per message. With ``done``, as
        :meth:`put_messages_callback`: None when accepted, and ``done(result)`` gets the outcome."""
        unflushed = self._refuse_put(batch.topic, batch.queue_id, len(batch.bodies))
        if isinstance(unflushed, PutMessageResult):
            return unflushed
        cfg = self.config
        max_body = cfg.max_message_size
        longest, longest_props, _ = batch.lengths()
        if longest > max_body:
            return self._reject(PutMessageStatus.MESSAGE_ILLEGAL,
                                f"message body of {longest} bytes exceeds max_message_size={max_body}")
        if longest_props > MAX_PROPERTIES_SIZE:
            return self._reject(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                                f"properties of {longest_props} bytes exceed {MAX_PROPERTIES_SIZE}")
        cl = self.commit_log
        op = cl.put_batch(batch, int(self.clock() * 1000), batch.wait_store_msg_ok and cl.sync_flush,
                          time.monotonic() + cfg.sync_flush_timeout, done)
        return self._put_done(op, len(batch.bodies), unflushed)

    async def put_message(self, req: PutMessageRequest) -> PutMessageResult:
        """Append one message; resolves once written (ASYNC_FLUSH) or fdatasync'd (SYNC_FLUSH and
        ``wait_store_msg_ok``). Failures come back as a status, never as an exception."""
        r = self._put([req])
        if isinstance(r, PutMessageResult):
            return r
        assert r is not None
        return await r

    async def put_messages(self, reqs: list[PutMessageRequest]) -> PutMessageResult:
        """Append a batch to ONE (topic, queue): consecutive queue offsets, contiguous records,
        one flush wait. ``messages`` of the result lists them in order."""
        r = self._put(reqs)
        if isinstance(r, PutMessageResult):
            return r
        assert r is not None
        return await r

    def put_messages_nowait(self, reqs: list[PutMessageRequest]
                            ) -> PutMessageResult | asyncio.Future[PutMessageResult]:
        """:meth:`put_messages` (or :meth:`put_message` for one request) without a coroutine:
        the result at once when the put is refused, else a future of it (for callers on the
        loop that answer from a callback)."""
        r = self._put(reqs)
        assert r is not None
        return r

    def put_messages_callback(self, reqs: list[PutMessageRequest], done: Callable[[PutMessageResult], object]
                              ) -> PutMessageResult | None:
        """:meth:`put_messages_nowait` without a future: the result at once when the put is
        refused; else None, and ``done(result)`` is called once on the loop when the put is
        resolved, with what the future would have held (never from inside this call). The send
        path answers from ``done``, in the same loop turn as the write that stored the messages."""
        r = self._put(reqs, done)
        return r if isinstance(r, PutMessageResult) else None

    # -- get ---------------------------------------------------------------------------------------------

    def _next_offset_correction(self, old: int, new: int) -> int:
        """``nextOffsetCorrection`` of DefaultMessageStore: a slave keeps the requested offset
        unless ``offsetCheckInSlave``."""
        if self.config.broker_role is BrokerRole.SLAVE and not self.config.offset_check_in_slave:
            return old
        return new

    def get_message(self, topic: str, queue_id: int, offset: int, max_msg_nums: int, *,  # noqa: C901 - hot: per pull
                    max_total_bytes: int = 256 * 1024, tags_codes: set[int] | None = None) -> GetMessageResult:
        """Read up to ``max_msg_nums`` messages of a queue from ``offset`` (``getMessage``).

        At most ``max_transfer_count_on_message_in_memory`` messages and
        about ``max_total_bytes`` (the first message always). ``tags_codes``
        filters by ConsumeQueue tag code (None = all). Statuses and
        ``next_begin_offset`` follow RocketMQ's ``DefaultMessageStore.getMessage``.
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
        # The file of the last record read, with its bounds and mapping: consecutive records
        # are mostly in one file, so CommitLog.read's look-up runs once per file, not per record.
        seg_start = seg_end = 0
        view: mmap.mmap | None = None
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
            if view is not None and seg_start <= phys and phys + size <= seg_end:
                rec: bytes | None = view[phys - seg_start : phys - seg_start + size]
            else:
                rec = cl.read(phys, size)  # (the same bounds checks, and None past them)
                seg = cl.segment_at(phys) if rec is not None else None
                if seg is not None:
                    seg_start, seg_end, view = seg.start, seg.start + seg.size, seg.view()
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
        """Queue offset of the message stored at ``timestamp_ms`` (``getOffsetInQueueByTime``).

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
        """The stored record at ``physical_offset``; None when there is none."""
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
        the confirmed end); empty when there are none. Master side of replication (``HAConnection``)."""
        return self.commit_log.read_raw(offset, max_bytes)

    async def append_commit_log_data(self, offset: int, data: bytes | memoryview) -> bool:
        """Append replicated bytes at exactly ``offset`` (slave side, ``HAService``'s client).

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
        assert op.fut is not None
        res = await op.fut
        self.reput_service.dispatch_pending()
        return res.status in (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT)

    def rebuild_queue_offset_table(self) -> None:
        """Reset the next queue offset of every (topic, queueId) from its ConsumeQueue.

        Replicated records reach the ConsumeQueues without passing through the
        put path, so a slave that becomes master calls this before its first
        put (and :meth:`truncate` calls it after cutting the log).
        """
        table = self.commit_log.topic_queue_table
        table.clear()
        for cq in self.consume_queues.all():
            if cq.max_offset > 0 or cq.files or cq.tail:
                table[(cq.topic, cq.queue_id)] = cq.max_offset

    def dispatch_all(self) -> int:
        """Dispatch every complete record now (no time slicing); returns the CommitLog offset up to
        which the log holds whole records (``reput_from_offset``).

        Replicated bytes may end inside a record; a slave about to be promoted
        truncates there so that its first own record follows a whole one.
        """
        return self.reput_service.dispatch_all()

    async def truncate(self, offset: int) -> int:
        """Cut the log at ``offset`` (a record boundary): HA's divergent-tail repair.

        A broker that comes back as the slave of a new master drops every byte
        the new master does not have (``rocket.store.ha.epoch``): CommitLog bytes
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
        lock = self.flush_consume_queue_service.lock
        assert lock is not None
        loop = self._loop
        removed = cl.append_offset - max(offset, 0)
        queues = self.consume_queues
        async with lock:
            queues.truncating = True
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
                    queues.truncate(end)
                self.index_service.truncate(end, lambda phys: read_store_timestamp(cl, phys))
                self.rebuild_queue_offset_table()
                await loop.run_in_executor(self._io, cl.truncate_files, ranges, doomed)
            finally:
                queues.truncating = False
        await self.flush_logics(everything=True)
        log.warning("store %s truncated at CommitLog offset %d: %d bytes removed", self.root, end, removed)
        return removed

    # -- topics ------------------------------------------------------------------------------------------------

    def delete_topics(self, topics: Iterable[str]) -> None:
        """Drop the ConsumeQueues of ``topics`` (files removed in the background) and their
        queue offsets. The CommitLog keeps the records until retention removes them."""
        topics = list(topics)
        for topic in topics:
            for key in [k for k in self.commit_log.topic_queue_table if k[0] == topic]:
                del self.commit_log.topic_queue_table[key]
        self.consume_queues.drop_topics(topics)

    # -- background services ------------------------------------------------------------------------------------

    async def commit_consume_queues(self, everything: bool = False) -> bool:
        """Write ConsumeQueue tails to their files (IO thread); False if some write failed.

        ``everything`` looks at every queue, not only those marked dirty.
        """
        return await self.consume_queues.commit(everything)

    async def flush_logics(self, everything: bool = False) -> None:
        """Commit and fdatasync ConsumeQueues and index, then write the checkpoint."""
        await self.flush_consume_queue_service.flush(everything)

    async def flush(self) -> None:
        """fdatasync the CommitLog, ConsumeQueues and index now and write the checkpoint."""
        await self.commit_log.flush()
        await self.flush_logics()

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
        return self.clean_commit_log_service.is_delete_time()

    async def clean_once(self, *, manual: bool = False) -> int:
        """One retention run (``CleanCommitLogService``): returns the CommitLog files deleted.

        Deletes files older than ``file_reserved_time_hours`` at ``delete_when``
        (or now, when ``manual``: ``executeDeleteFilesManually``, mqadmin's deleteExpiredCommitLog),
        and the oldest files regardless of age while disk usage is above
        ``disk_max_used_space_ratio`` percent; at most 10 per run, never the
        file being written nor any not yet flushed. ConsumeQueue and index
        files that only point into deleted files go too, and queue minimum
        offsets move past them (``rocket.store.retention``).
        """
        assert self._loop is not None
        return await self.clean_commit_log_service.clean_once(manual=manual)

    async def clean_expired_consume_queues(self) -> int:
        """Remove the ConsumeQueue (and index) files whose entries all point below the CommitLog's
        first offset (mqadmin's cleanExpiredCQ, ``cleanExpiredConsumerQueue``); returns how many
        ConsumeQueue files went. Unlike Java, a queue keeps its offsets: its minimum offset moves
        up, its maximum stays, so consumer offsets stay meaningful."""
        return await self.clean_consume_queue_service.clean_expired(self.commit_log.min_offset, self._io)

    # -- runtime info ----------------------------------------------------------------------------------------------

    def runtime_info(self) -> dict[str, str]:
        """``GET_BROKER_RUNTIME_INFO`` store figures, all strings (``AdminBrokerProcessor``)."""
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
        """Stop tasks, flush everything, write the checkpoint, delete ``abort`` (a clean shutdown:
        :attr:`last_shutdown_clean`), unlock. Idempotent."""
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
        self.reput_service.reput()
        if cl.flushed < cl.committed:
            clean = False
            log.error("shutdown: CommitLog not fully flushed (%d < %d); next start recovers abnormally",
                      cl.flushed, cl.committed)
        self.index_service.retry_pending()
        await self.flush_logics(everything=True)
        if any(cq.tail for cq in self.consume_queues.all()):
            clean = False
        if self.reput_from_offset < cl.committed or self.index_service.pending_min_phys() >= 0:
            clean = False
        self.last_shutdown_clean = clean
        await loop.run_in_executor(self._io, self._close_blocking, clean)

    def _close_blocking(self, clean: bool) -> None:
        self.commit_log.close()
        self.consume_queues.close()
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
