""":class:`StoreRecovery`: what a store does with its files at start-up, before it serves.

RocketMQ's ``DefaultMessageStore.recover(lastExitOK)`` loads the ConsumeQueues,
then lets ``CommitLog.recoverNormally`` (clean stop: check the last files)
or ``CommitLog.recoverAbnormally`` (the ``abort`` file was left behind: start
from the file the checkpoint's times point to, re-dispatch from there) find
the CommitLog's true end, truncates dirty ConsumeQueue entries past it and
rebuilds the queue-offset table (``recoverTopicQueueTable``). Ours follows
the same plan, with offsets from the checkpoint (``checkpoint.py``) when it
has them:

* the re-dispatch point is the checkpoint's ``logicsDispatchedOffset``
  (else, after a clean stop, the furthest ConsumeQueue entry's end; after a
  crash, the start of the file chosen as RocketMQ does);
* whole files are validated from the file holding the scan start
  (``checkCRCOnRecover``), a torn tail is cut (zeroed after a crash);
* ConsumeQueue and index entries at or past the re-dispatch point are dropped
  and rebuilt from the CommitLog (:class:`~rocket.store.reput.ReputMessageService`),
  then everything touched is fdatasync'd and a fresh checkpoint written.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from rocket.store.checkpoint import Checkpoint, StoreCheckpoint
from rocket.store.commitlog import CommitLog, Segment
from rocket.store.consumequeue import ConsumeQueue
from rocket.store.index import IndexService
from rocket.store.queue_store import ConsumeQueueStore
from rocket.store.record import DispatchRecord, RecordRow, pickup_store_timestamp
from rocket.store.reput import ReputMessageService
from rocket.store.stats import StoreStats

log = logging.getLogger("rocket.store")

#: A ConsumeQueue tail larger than this is written to its file during recovery (bytes).
_RECOVERY_COMMIT_BYTES = 4 * 1024 * 1024


def read_store_timestamp(commit_log: CommitLog, phys: int) -> int:
    """Store time (ms) of the record at CommitLog offset ``phys``, read from its file (blocking);
    -1 when there is no such file or the bytes are no record head."""
    seg = commit_log.segment_at(phys)
    if seg is None:
        return -1
    head = os.pread(seg.fd, 128, phys - seg.start)
    try:
        return pickup_store_timestamp(head)
    except Exception:
        return -1


class StoreRecovery:
    """Start-up recovery of one store's files (blocking; the store's IO thread runs it)."""

    def __init__(self, root: Path, commit_log: CommitLog, queues: ConsumeQueueStore, index: IndexService,
                 checkpoint: StoreCheckpoint, reput: ReputMessageService, stats: StoreStats, *,
                 check_crc: bool) -> None:
        self.root = root
        self.commit_log = commit_log
        self.queues = queues
        self.index = index
        self.checkpoint = checkpoint
        self.reput = reput
        self.stats = stats
        self.check_crc = check_crc

    def recover(self, abnormal: bool) -> None:
        """Load and check every file, cut a torn tail, rebuild what the CommitLog implies (see the
        module doc); ``abnormal``: the previous run did not stop cleanly. Raises ``OSError`` and
        :class:`~rocket.store.api.StoreError` when files cannot be read or repaired."""
        cl = self.commit_log
        ck = self.checkpoint.load()
        cl.load()
        self.queues.load()
        self.index.load()
        cqs = self.queues.all()
        scan_from, dispatch_from = self._starting_points(ck, cqs, abnormal)
        # Entries at or past the re-dispatch point are rebuilt from the CommitLog.
        for cq in cqs:
            cq.truncate_dirty(dispatch_from)
        self.index.repair(dispatch_from, lambda p: -1)
        touched: set[ConsumeQueue] = set()
        reput = self.reput

        def redispatch(rec: DispatchRecord) -> None:
            cq = reput.dispatch_record(rec)
            if cq is not None:
                touched.add(cq)
                if len(cq.tail) > _RECOVERY_COMMIT_BYTES:
                    cq.commit_now()

        def redispatch_rows(rows: list[RecordRow]) -> None:
            reput.dispatch_rows(rows, touched)
            for cq in touched:
                if len(cq.tail) > _RECOVERY_COMMIT_BYTES:
                    cq.commit_now()

        result = cl.recover(scan_from, dispatch_from, redispatch, self.check_crc,
                            zero_tail=abnormal, on_rows=redispatch_rows)
        end = result.end
        for cq in self.queues.all():
            if cq.truncate_dirty(end):
                log.warning("recovery: %r had entries past the CommitLog end %d; removed", cq, end)
            touched.add(cq)
        self.index.write_headers()
        self.index.repair(end, lambda phys: read_store_timestamp(cl, phys))
        self._sync(touched)
        reput.reput_from_offset = end
        last_ts = result.last_store_timestamp or ck.physic_msg_timestamp
        reput.dispatched_store_ts = last_ts
        self.checkpoint.flush(Checkpoint(last_ts, last_ts, last_ts, end, end))
        self.stats.last_recovery_abnormal = abnormal
        self.stats.last_recovery_records = result.records
        if abnormal:
            log.warning("abnormal recovery of %s (no clean shutdown): checked %d records from %d, end %d%s",
                        self.root, result.records, scan_from, end, f"; {result.remark}" if result.torn else "")

    def _starting_points(self, ck: Checkpoint, cqs: list[ConsumeQueue], abnormal: bool) -> tuple[int, int]:
        """``(scan_from, dispatch_from)``: where validation and re-dispatch start."""
        cl = self.commit_log
        segs = cl.segments
        if not segs:
            return cl.append_offset, cl.append_offset
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
        return scan_from, dispatch_from

    def _sync(self, touched: set[ConsumeQueue]) -> None:
        """Write the touched ConsumeQueues, rebuild the queue-offset table
        (``recoverTopicQueueTable``), make an index file ready and fdatasync them all."""
        cl = self.commit_log
        fsync_files: set[int] = set()
        for cq in touched:
            for f in cq.commit_now():
                fsync_files.add(f.fd)
        for cq in self.queues.all():
            cq.correct_min_offset(cl.min_offset)
            if cq.max_offset > 0 or cq.files:
                cl.topic_queue_table[(cq.topic, cq.queue_id)] = cq.max_offset
        try:
            self.index.ensure_writable_file()
        except OSError as exc:  # e.g. a full disk: index entries wait in memory until a file can be made
            log.error("cannot create an index file in %s: %s", self.index.dir, exc)
        for idx in self.index.files:
            fsync_files.add(idx.fd)
        for fd in fsync_files:
            os.fdatasync(fd)
        self.index.dirty.clear()

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
