"""Retention: :class:`CleanCommitLogService` and :class:`CleanConsumeQueueService`.

RocketMQ's ``DefaultMessageStore.CleanCommitLogService`` deletes CommitLog
files older than ``fileReservedTime`` hours at ``deleteWhen`` (local hours,
``"04"`` or ``"04;16"``), and the oldest files regardless of age while the
disk is fuller than ``diskMaxUsedSpaceRatio`` percent; at most
:data:`DELETE_FILES_BATCH_MAX` files per run (``DELETE_FILES_BATCH_MAX``),
never the file being written nor any not yet flushed. RocketMQ 5's
``ConsumeQueueStore.CleanConsumeQueueService`` then drops ConsumeQueue and
index files that only point into deleted CommitLog files and moves every
queue's minimum offset past them. Both run every ``cleanResourceInterval``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

from rocket.store.api import MessageStoreConfig
from rocket.store.commitlog import CommitLog, Segment
from rocket.store.consumequeue import CQFile
from rocket.store.index import IndexFile, IndexService
from rocket.store.queue_store import ConsumeQueueStore

log = logging.getLogger("rocket.store")

#: Most files retention deletes per run (``DELETE_FILES_BATCH_MAX``).
DELETE_FILES_BATCH_MAX = 10


def statvfs_used_ratio(path: Path) -> float:
    """Used fraction (0..1) of the file system holding ``path``. Raises ``OSError``."""
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return 0.0
    return (total - st.f_bfree * st.f_frsize) / total


class CleanConsumeQueueService:
    """Removes ConsumeQueue and index files below the CommitLog's new start; see the module doc."""

    def __init__(self, queues: ConsumeQueueStore, index: IndexService) -> None:
        self.queues = queues
        self.index = index

    def remove_expired(self, min_phys: int) -> tuple[list[CQFile], list[IndexFile]]:
        """Take the files that only point below CommitLog offset ``min_phys`` out of the queues
        and the index; returns them (ConsumeQueue files, index files) for deletion on the IO
        thread."""
        cq_victims = self.queues.remove_expired(min_phys)
        idx_victims = self.index.expired_files(min_phys)
        self.index.remove(idx_victims)
        return cq_victims, idx_victims

    async def clean_expired(self, min_phys: int, io: Executor) -> int:
        """Remove and delete (on ``io``) the files that only point below ``min_phys`` now, without
        deleting CommitLog files (mqadmin's cleanExpiredCQ); returns the ConsumeQueue files removed."""
        cq_victims, idx_victims = self.remove_expired(min_phys)
        if cq_victims or idx_victims:
            await asyncio.get_running_loop().run_in_executor(io, unlink_queue_files, cq_victims, idx_victims)
        return len(cq_victims)


def unlink_queue_files(cq_victims: list[CQFile], idx_victims: list[IndexFile]) -> None:
    """Close and delete ConsumeQueue and index files taken out of the store (IO thread)."""
    for f in cq_victims:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f.path)
    for idx in idx_victims:
        idx.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(idx.path)


class CleanCommitLogService:
    """Deletes expired CommitLog files (and with them ConsumeQueue and index files); see the
    module doc.

    ``clock``: seconds since the epoch (its local hour is matched against ``delete_when``);
    ``disk_usage_ratio()``: used fraction 0..1 of the store's file system; ``io``: the
    store's IO thread (stat and unlink run there).
    """

    def __init__(self, config: MessageStoreConfig, commit_log: CommitLog, clean_queues: CleanConsumeQueueService,
                 io: Executor, *, clock: Callable[[], float], disk_usage_ratio: Callable[[], float]) -> None:
        self.config = config
        self.commit_log = commit_log
        self.clean_queues = clean_queues
        self._io = io
        self.clock = clock
        self.disk_usage_ratio = disk_usage_ratio

    def is_delete_time(self) -> bool:
        """Is the clock's local hour one of ``delete_when`` ("04", "04;16")?"""
        hour = time.localtime(self.clock()).tm_hour
        for part in self.config.delete_when.split(";"):
            part = part.strip()
            if part.isdigit() and int(part) == hour:
                return True
        return False

    async def clean_once(self, *, manual: bool = False) -> int:
        """One retention run; returns the CommitLog files deleted (see the module doc). ``manual``
        (RocketMQ's ``executeDeleteFilesManually``, mqadmin's deleteExpiredCommitLog) deletes
        expired files now instead of waiting for ``delete_when``."""
        cfg = self.config
        cl = self.commit_log
        loop = asyncio.get_running_loop()
        ratio = self.disk_usage_ratio()
        full = ratio > cfg.disk_max_used_space_ratio / 100
        if full:
            log.warning("disk usage %.1f%% of %s above %.1f%%: deleting the oldest CommitLog files",
                        ratio * 100, cfg.store_path_root_dir, cfg.disk_max_used_space_ratio)
        if not (full or manual or self.is_delete_time()):
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

            candidates = await loop.run_in_executor(self._io, expired)
        removed = cl.remove_segments(candidates)
        if not removed:
            return 0
        min_phys = cl.min_offset
        cq_victims, idx_victims = self.clean_queues.remove_expired(min_phys)

        def delete() -> None:
            for seg in removed:
                seg.close()
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(seg.path)
            unlink_queue_files(cq_victims, idx_victims)

        await loop.run_in_executor(self._io, delete)
        log.info("retention deleted %d CommitLog file(s) (%s), %d ConsumeQueue and %d index file(s); "
                 "CommitLog now starts at %d", len(removed), "disk full" if full else "expired",
                 len(cq_victims), len(idx_victims), min_phys)
        return len(removed)

    async def run(self) -> None:
        """:meth:`clean_once` every ``clean_resource_interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.config.clean_resource_interval)
            await self.clean_once()
