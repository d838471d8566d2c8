"""The store's flush services: the CommitLog's and the ConsumeQueues' (with the checkpoint).

* :class:`FlushCommitLogService` — ASYNC_FLUSH: RocketMQ's ``CommitLog.FlushRealTimeService``
  (flush every ``flushIntervalCommitLog`` when at least ``flushCommitLogLeastPages`` pages are
  dirty, everything every ``flushCommitLogThoroughInterval``, at once when a put finds too
  much unflushed data); SYNC_FLUSH: the group commit runs inside the CommitLog, and this
  service only answers FLUSH_DISK_TIMEOUT to puts whose fdatasync takes too long
  (``GroupCommitService``'s timeout).
* :class:`FlushConsumeQueueService` — RocketMQ 5's ``ConsumeQueueStore.FlushConsumeQueueService``:
  ConsumeQueue tails are written to their files every :data:`CQ_COMMIT_INTERVAL`; every
  ``flushIntervalConsumeQueue`` they and the index are fdatasync'd and the checkpoint
  (``checkpoint.py``) is written, recording how far the CommitLog is flushed and dispatched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from concurrent.futures import Executor

from rocket.store.api import MessageStoreConfig
from rocket.store.checkpoint import Checkpoint, StoreCheckpoint
from rocket.store.commitlog import CommitLog
from rocket.store.index import IndexService
from rocket.store.queue_store import ConsumeQueueStore
from rocket.store.reput import ReputMessageService
from rocket.store.stats import StoreStats

log = logging.getLogger("rocket.store")

#: How often ConsumeQueue tails are written to their files (seconds).
CQ_COMMIT_INTERVAL = 0.05


class FlushCommitLogService:
    """Flushes the CommitLog in the background; see the module doc. ``wake`` is loop-side."""

    def __init__(self, config: MessageStoreConfig, commit_log: CommitLog) -> None:
        self.config = config
        self.commit_log = commit_log
        self._wakeup: asyncio.Event | None = None

    def attach(self) -> None:
        """Create the wake-up event on the running loop (store start)."""
        self._wakeup = asyncio.Event()

    def wake(self) -> None:
        """Flush now instead of at the next interval (a put found much unflushed data)."""
        if self._wakeup is not None:
            self._wakeup.set()

    async def _sleep_or_wakeup(self, seconds: float) -> bool:
        ev = self._wakeup
        assert ev is not None
        try:
            async with asyncio.timeout(seconds):
                await ev.wait()
        except TimeoutError:
            return False
        ev.clear()
        return True

    async def run_async_flush(self) -> None:
        """ASYNC_FLUSH (``FlushRealTimeService``): every interval flush when enough pages are dirty,
        and everything at least every ``flush_commit_log_thorough_interval``. Runs until cancelled."""
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

    async def run_sync_flush_watchdog(self) -> None:
        """SYNC_FLUSH: answer FLUSH_DISK_TIMEOUT to puts whose fdatasync takes too long. Runs until
        cancelled."""
        period = max(min(self.config.sync_flush_timeout / 10, 0.1), 0.005)
        while True:
            await asyncio.sleep(period)
            self.commit_log.expire_ops(time.monotonic())


class FlushConsumeQueueService:
    """Writes and flushes ConsumeQueues and index, then the checkpoint; see the module doc.

    ``io``: the store's IO thread; ``stats.cq_flush_seconds`` gets the duration of each flush.
    :attr:`lock` is held while flushing; the store's truncation holds it too.
    """

    def __init__(self, config: MessageStoreConfig, commit_log: CommitLog, queues: ConsumeQueueStore,
                 index: IndexService, reput: ReputMessageService, checkpoint: StoreCheckpoint,
                 io: Executor, stats: StoreStats) -> None:
        self.config = config
        self.commit_log = commit_log
        self.queues = queues
        self.index = index
        self.reput = reput
        self.checkpoint = checkpoint
        self._io = io
        self.stats = stats
        self.lock: asyncio.Lock | None = None

    def attach(self) -> None:
        """Create the lock on the running loop (store start)."""
        self.lock = asyncio.Lock()

    async def flush(self, everything: bool = False) -> None:
        """Commit and fdatasync ConsumeQueues and index, then write the checkpoint.

        ``everything`` commits every queue, not only the dirty ones. A checkpoint that cannot
        be written is logged (the next flush tries again).
        """
        assert self.lock is not None
        async with self.lock:
            reput = self.reput.reput_from_offset
            pending = self.index.pending_min_phys()
            if pending >= 0:
                reput = min(reput, pending)
            ts = self.reput.dispatched_store_ts
            self.index.write_headers()
            ok = await self.queues.commit(everything)
            fds = self.queues.take_files_to_sync()
            fds += [f.fd for f in self.index.dirty]
            self.index.dirty = set()
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
                await asyncio.get_running_loop().run_in_executor(self._io, flush)
            except OSError as exc:
                log.error("cannot write the checkpoint %s: %s", self.checkpoint.path, exc)
            self.stats.cq_flush_seconds = time.perf_counter() - t0

    async def run(self) -> None:
        """Commit ConsumeQueue tails often; flush them, the index and the checkpoint every
        ``flush_interval_consume_queue``. Runs until cancelled."""
        last_flush = time.monotonic()
        while True:
            await asyncio.sleep(CQ_COMMIT_INTERVAL)
            self.index.retry_pending()
            if time.monotonic() - last_flush >= self.config.flush_interval_consume_queue:
                last_flush = time.monotonic()
                await self.flush()
            elif self.queues.dirty:
                await self.queues.commit()
