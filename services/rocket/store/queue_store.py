""":class:`ConsumeQueueStore`: every ConsumeQueue of a store, and their writes to disk.

RocketMQ 5 keeps the table of ConsumeQueues (``findOrCreateConsumeQueue``) and
their flushing in ``store/queue/ConsumeQueueStore``; this is that room. The
reput appends entries to the in-memory tails and marks the queues dirty;
:meth:`ConsumeQueueStore.commit` writes the tails to their files on the IO
thread (often), and the files written since the last flush are handed to the
flush service (:meth:`ConsumeQueueStore.take_files_to_sync`), which fdatasyncs
them before it writes the checkpoint. Files live under
``<storePathRootDir>/consumequeue/<topic>/<queueId>/`` (``consumequeue.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import Iterable
from concurrent.futures import Executor
from pathlib import Path

from rocket.store.consumequeue import CQ_UNIT, ConsumeQueue, CQFile

log = logging.getLogger("rocket.store")


class ConsumeQueueStore:
    """The ConsumeQueues of one store by topic and queue id; loop-side unless noted.

    ``root``: the ``consumequeue`` directory; ``file_size``: bytes per file
    (``mappedFileSizeConsumeQueue``); ``io``: the store's single IO thread, where
    file writes and removals run.
    """

    def __init__(self, root: Path, file_size: int, io: Executor) -> None:
        self.root = root
        self.file_size = file_size
        self._io = io
        #: topic → queue id → ConsumeQueue.
        self.table: dict[str, dict[int, ConsumeQueue]] = {}
        #: Queues whose in-memory tail waits to be written.
        self.dirty: set[ConsumeQueue] = set()
        #: Files written since the last flush (to be fdatasync'd).
        self.dirty_files: set[CQFile] = set()
        #: Set while the store truncates (commits wait for it).
        self.truncating = False
        self._write_failed = False

    # -- the table --------------------------------------------------------------------------------

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The ConsumeQueue of ``(topic, queue_id)``, if it exists."""
        q = self.table.get(topic)
        return None if q is None else q.get(queue_id)

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The ConsumeQueue of ``(topic, queue_id)``, made (empty, no file yet) when missing
        (``findOrCreateConsumeQueue``)."""
        qs = self.table.get(topic)
        if qs is None:
            qs = self.table[topic] = {}
        cq = qs.get(queue_id)
        if cq is None:
            cq = qs[queue_id] = ConsumeQueue(self.root, topic, queue_id, self.file_size)
        return cq

    def all(self) -> list[ConsumeQueue]:
        """Every ConsumeQueue (a new list)."""
        return [cq for qs in self.table.values() for cq in qs.values()]

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of ``topic`` that have a ConsumeQueue, sorted."""
        return sorted(self.table.get(topic, ()))

    def topics(self) -> list[str]:
        """Topics that have ConsumeQueues."""
        return list(self.table)

    def count(self) -> int:
        """How many ConsumeQueues there are."""
        return sum(len(q) for q in self.table.values())

    def load(self) -> None:
        """Open every ConsumeQueue found under :attr:`root` (blocking; start-up)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for topic in os.listdir(self.root):
            tdir = self.root / topic
            if not tdir.is_dir():
                continue
            for qname in os.listdir(tdir):
                if not qname.isdigit() or not (tdir / qname).is_dir():
                    continue
                cq = self.find_or_create(topic, int(qname))
                cq.load()

    def drop_topics(self, topics: Iterable[str]) -> None:
        """Forget the ConsumeQueues of ``topics``; their files are removed on the IO thread."""
        doomed: list[ConsumeQueue] = []
        for topic in topics:
            qs = self.table.pop(topic, None)
            if not qs:
                continue
            for cq in qs.values():
                cq.destroyed = True
                for f in cq.files:
                    f.close_view()
                self.dirty.discard(cq)
                doomed.append(cq)
        if not doomed:
            return
        self.dirty_files = {f for f in self.dirty_files if not any(f in cq.files for cq in doomed)}

        def remove() -> None:
            for cq in doomed:
                cq.close()
                with contextlib.suppress(FileNotFoundError):
                    shutil.rmtree(cq.dir)
            for topic_dir in {cq.dir.parent for cq in doomed}:
                with contextlib.suppress(OSError):
                    topic_dir.rmdir()

        self._io.submit(remove)

    # -- writing ------------------------------------------------------------------------------------

    async def commit(self, everything: bool = False) -> bool:
        """Write ConsumeQueue tails to their files (IO thread); False if some write failed
        (the queue stays dirty and is retried; the first failure of a run is logged).

        ``everything`` looks at every queue, not only those marked dirty. Does nothing
        while the store truncates.
        """
        if self.truncating:  # truncate() owns the ConsumeQueues for a moment
            return True
        taken = []
        for cq in self.all() if everything else self.dirty:
            t = cq.take_tail()
            if t is not None:
                taken.append((cq, *t))
        self.dirty = set()
        if not taken:
            return True

        def write() -> list[tuple[ConsumeQueue, int, int, int, list[CQFile], OSError | None]]:
            out: list[tuple[ConsumeQueue, int, int, int, list[CQFile], OSError | None]] = []
            for cq, first, data, gen in taken:
                try:
                    out.append((cq, first, len(data) // CQ_UNIT, gen, cq.write_entries(first, data), None))
                except OSError as exc:
                    out.append((cq, first, 0, gen, [], exc))
            return out

        ok = True
        for cq, first, n, gen, touched, err in await asyncio.get_running_loop().run_in_executor(self._io, write):
            if err is not None:
                ok = False
                self.dirty.add(cq)
                if not self._write_failed:
                    log.error("cannot write ConsumeQueue %s/%d: %s; will retry", cq.topic, cq.queue_id, err)
                continue
            cq.commit_done(first, n, gen)
            if cq.tail:
                self.dirty.add(cq)
            self.dirty_files.update(touched)
        self._write_failed = not ok
        return ok

    def take_files_to_sync(self) -> list[int]:
        """File descriptors of the files written since the last call (for fdatasync); resets the set."""
        fds = [f.fd for f in self.dirty_files if f.fd >= 0]
        self.dirty_files = set()
        return fds

    def truncate(self, end: int) -> None:
        """Remove entries of records at or past CommitLog offset ``end`` from every queue (HA's
        divergent-tail repair; ``ConsumeQueueStore.truncateDirty``). Files changed are marked
        for the next flush, tails for the next commit."""
        for cq in self.all():
            if cq.max_phys_end > end or cq.tail:
                if cq.truncate_dirty(end):
                    self.dirty_files.update(
                        f for f in cq.files if f.start + cq.file_size > cq.written * CQ_UNIT)
                if cq.tail:
                    self.dirty.add(cq)

    def remove_expired(self, min_phys: int) -> list[CQFile]:
        """Take out of every queue the files that only point below CommitLog offset ``min_phys``
        and move each queue's min offset past them (``CleanConsumeQueueService``); returns the
        files, for the caller to close and delete on the IO thread."""
        victims_all: list[CQFile] = []
        for cq in self.all():
            victims = cq.expired_files(min_phys)
            if victims:
                cq.remove_files(victims)
                victims_all.extend(victims)
                self.dirty_files.difference_update(victims)
            cq.correct_min_offset(min_phys)
        return victims_all

    def close(self) -> None:
        """Close every queue's files (blocking)."""
        for cq in self.all():
            cq.close()
