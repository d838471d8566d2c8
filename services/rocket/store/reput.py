""":class:`ReputMessageService`: dispatch of CommitLog records to ConsumeQueues and the index.

RocketMQ's ``DefaultMessageStore.ReputMessageService`` follows the CommitLog and
hands each record to ``CommitLogDispatcherBuildConsumeQueue`` and
``CommitLogDispatcherBuildIndex``. Here the reput runs inline on the loop each
time the CommitLog's confirmed end advances, so a put that returned is already
visible to ``get_message``. For the store's own appends it takes the
description the put left behind (:class:`~rocket.store.commitlog.DispatchBatch`,
no re-parsing); for everything else (replicated bytes, blank end-of-file
markers) it parses the records from the files, at most
:data:`REPUT_PARSE_SLICE` bytes per turn of the loop. Recovery re-dispatches
through :meth:`ReputMessageService.dispatch_record` and
:meth:`ReputMessageService.dispatch_rows`. Either way every ConsumeQueue and
index entry can be rebuilt from the CommitLog alone.

Transactions (``doDispatch``): a prepared or rolled-back record gets no
ConsumeQueue entry; a rolled-back one no index entry either. A delayed record's
tag code becomes its delivery time (``computeDeliverTimestamp``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from rocket.message import SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_NOT_TYPE, SYSFLAG_TRANSACTION_ROLLBACK
from rocket.store.commitlog import CommitLog, DispatchBatch
from rocket.store.consumequeue import ENTRY, ConsumeQueue, pack_entries
from rocket.store.index import IndexService
from rocket.store.queue_store import ConsumeQueueStore
from rocket.store.record import BLANK, CORRUPT, DispatchRecord, RecordRow, parse_dispatch, walk_records

log = logging.getLogger("rocket.store")

#: ``cb(topic, queue_id, queue_offset, tags_code)``, called after ConsumeQueue appends.
DispatchListener = Callable[[str, int, int, int], None]

#: Bytes the reput parses per turn of the loop when it must read the CommitLog.
REPUT_PARSE_SLICE = 4 * 1024 * 1024
_TRAN_MASK = 0xC


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


class ReputMessageService:
    """Dispatches the CommitLog from :attr:`reput_from_offset` on; see the module doc.

    ``delay_ms``: delay of each level 1.. in ms (``messageDelayLevel``), for the tag code
    of delayed records. Loop-side once :meth:`attach` was called.
    """

    def __init__(self, commit_log: CommitLog, queues: ConsumeQueueStore, index: IndexService,
                 delay_ms: list[int]) -> None:
        self.commit_log = commit_log
        self.queues = queues
        self.index = index
        self.delay_ms = delay_ms
        #: CommitLog offset up to which records are dispatched to ConsumeQueues and the index.
        self.reput_from_offset = 0
        #: Store time (ms) of the newest dispatched record (the checkpoint's logics time).
        self.dispatched_store_ts = 0
        self.listeners: list[DispatchListener] = []
        #: Listeners of one topic each, told of its every entry.
        self.topic_listeners: dict[str, list[DispatchListener]] = {}
        #: Any listener at all.
        self.notifying = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False
        self._error_logged = False

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run later turns of a long reput (:data:`REPUT_PARSE_SLICE`) on ``loop``."""
        self._loop = loop

    def add_listener(self, cb: DispatchListener, topic: str | None = None) -> None:
        """See ``DefaultMessageStore.add_dispatch_listener``."""
        if topic is None:
            self.listeners.append(cb)
        else:
            self.topic_listeners.setdefault(topic, []).append(cb)
        self.notifying = True

    # -- one record, or a run of them ---------------------------------------------------------

    def dispatch_record(self, rec: DispatchRecord) -> ConsumeQueue | None:
        """Put one parsed record into its ConsumeQueue and the index (``doDispatch``); returns
        the ConsumeQueue written, if any.

        A delayed record's tag code becomes its delivery time (``rec.tags_code`` is updated).
        """
        tran = rec.sys_flag & _TRAN_MASK
        cq = None
        if tran in (SYSFLAG_TRANSACTION_NOT_TYPE, SYSFLAG_TRANSACTION_COMMIT):
            cq = self.queues.find_or_create(rec.topic, rec.queue_id)
            if rec.delay_level > 0 and self.delay_ms:  # computeDeliverTimestamp
                rec.tags_code = rec.store_timestamp + self.delay_ms[min(rec.delay_level, len(self.delay_ms)) - 1]
            cq.put(rec.queue_offset, rec.physical_offset, rec.size, rec.tags_code)
        if tran != SYSFLAG_TRANSACTION_ROLLBACK and (rec.keys or rec.uniq_key):
            self.index.build(rec.topic, rec.physical_offset, rec.store_timestamp, rec.uniq_key, rec.keys)
        self.dispatched_store_ts = rec.store_timestamp
        return cq

    def dispatch_rows(self, rows: list[RecordRow], touched: set[ConsumeQueue], notify: bool = False) -> None:
        """:meth:`dispatch_record` for a run of records read from the CommitLog (recovery, and
        replicated bytes on a slave), without an object per record; the ConsumeQueues written
        are added to ``touched``. ``notify``: tell the dispatch listeners about the entries
        (:meth:`_notify`)."""
        delay_ms = self.delay_ms
        pack = ENTRY.pack
        last_cq: ConsumeQueue | None = None
        last_topic = ""
        last_queue = -1
        notify = notify and self.notifying
        # Consecutive entries of one queue are packed together and appended at once.
        run_first = run_next = run_end = 0
        run_entries: list[bytes] = []
        run_tags: list[int] = []
        ts = self.dispatched_store_ts
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
                    if notify:
                        run_tags.append(tags_code)
                else:
                    if run_entries:
                        assert last_cq is not None
                        last_cq.append(run_first, b"".join(run_entries), len(run_entries), run_end)
                        if notify:
                            self._notify(last_topic, last_queue, run_first, run_tags)
                    if queue_id != last_queue or topic != last_topic:
                        last_cq = self.queues.find_or_create(topic, queue_id)
                        last_topic, last_queue = topic, queue_id
                        touched.add(last_cq)
                    run_entries = [pack(phys, size, tags_code)]
                    run_tags = [tags_code]
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
            if notify:
                self._notify(last_topic, last_queue, run_first, run_tags)
        if i_phys:
            self.index.build_many(i_topics, i_phys, i_ts, i_uniq, i_keys)
        self.dispatched_store_ts = ts

    def _dispatch_batch(self, b: DispatchBatch, run: _IndexRun | None = None) -> None:
        """Dispatch what one put appended; with ``run``, the index entries of an ordinary batch
        are only collected there (the caller builds them with the next ones)."""
        cq = self.queues.find_or_create(b.topic, b.queue_id)
        n = len(b.phys)
        if b.sys_flags is None:
            entries = ENTRY.pack(b.phys[0], b.sizes[0], b.tags[0]) if n == 1 else pack_entries(
                b.phys, b.sizes, b.tags)
            cq.append(b.first_queue_offset, entries, n, b.end)
            if b.keys is not None and b.uniq is not None:
                if run is not None:
                    run.add(b)
                else:
                    self.index.build_batch(b.topic, b.phys, b.store_timestamp, b.uniq, b.keys)
                    self.index.write_headers()
            self.queues.dirty.add(cq)
            self.dispatched_store_ts = b.store_timestamp
            if self.notifying:
                self._notify(b.topic, b.queue_id, b.first_queue_offset, b.tags)
            return
        q = b.first_queue_offset
        for i in range(n):
            tran = b.sys_flags[i] & _TRAN_MASK
            if tran in (SYSFLAG_TRANSACTION_NOT_TYPE, SYSFLAG_TRANSACTION_COMMIT):
                cq.put(q, b.phys[i], b.sizes[i], b.tags[i])
                if self.notifying:
                    self._notify(b.topic, b.queue_id, q, b.tags[i : i + 1])
                q += 1
            if tran != SYSFLAG_TRANSACTION_ROLLBACK and b.keys is not None and b.uniq is not None:
                if b.keys[i] or b.uniq[i]:
                    self.index.build(b.topic, b.phys[i], b.store_timestamp, b.uniq[i], b.keys[i])
        self.index.write_headers()
        self.queues.dirty.add(cq)
        self.dispatched_store_ts = b.store_timestamp

    def _notify(self, topic: str, queue_id: int, first_queue_offset: int, tags: list[int]) -> None:
        """Tell the listeners about the entries ``first_queue_offset``, ... with tag codes ``tags``:
        of a run of equal tag codes only the last entry (a waiting pull wants the newest offset);
        the listeners of ``topic`` alone about each of them."""
        each = self.topic_listeners.get(topic) if self.topic_listeners else None
        if each:
            for i, tags_code in enumerate(tags):
                for cb in each:
                    try:
                        cb(topic, queue_id, first_queue_offset + i, tags_code)
                    except Exception:
                        log.exception("dispatch listener %r failed", cb)
        if not self.listeners:
            return
        n = len(tags)
        if n > 1 and tags.count(tags[-1]) == n:  # one tag code for all (a batch's usual case): the last
            tags = tags[-1:]
            first_queue_offset += n - 1
            n = 1
        for i in range(n):
            if i + 1 < n and tags[i + 1] == tags[i]:
                continue
            for cb in self.listeners:
                try:
                    cb(topic, queue_id, first_queue_offset + i, tags[i])
                except Exception:
                    log.exception("dispatch listener %r failed", cb)

    # -- following the CommitLog ----------------------------------------------------------------

    def reput(self) -> None:
        """Dispatch everything between :attr:`reput_from_offset` and the CommitLog's confirmed
        end (the rest on a later turn of the loop when more than :data:`REPUT_PARSE_SLICE` bytes
        must be parsed)."""
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
                            run.flush(self.index)
                            self._dispatch_batch(b)
                        self.reput_from_offset = b.end
                        continue
                    limit = min(b.start, end)
                else:
                    limit = end
                if budget <= 0:
                    if self._loop is not None:  # (without one, dispatch_all calls again)
                        self.schedule()
                    return
                run.flush(self.index)
                parsed = self._parse(pos, limit)
                if parsed <= 0:
                    break
                budget -= parsed
        finally:
            run.flush(self.index)

    def dispatch_all(self) -> int:
        """Dispatch every complete record now (no time slicing); returns :attr:`reput_from_offset`."""
        while self.reput_from_offset < self.commit_log.committed:
            before = self.reput_from_offset
            self.reput()
            if self.reput_from_offset == before:
                break
        return self.reput_from_offset

    def schedule(self) -> None:
        """Run :meth:`reput` once at the end of this loop turn (``call_soon``; one call however
        many times this is called before it runs); with no loop attached, at once."""
        if self._loop is None:
            self.reput()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._run_scheduled)

    def dispatch_pending(self) -> None:
        """Run a reput :meth:`schedule` asked for now instead of at the end of the loop turn: for
        a caller that awaited a write whose job ran inside its own call (``CommitLog.append_raw``:
        a slave's replicated bytes), so it did not yield; it then reads what it stored as
        dispatched, as one that yielded does."""
        if self._scheduled:
            self._scheduled = False
            self.reput()

    def _run_scheduled(self) -> None:
        if self._scheduled:  # (else dispatch_pending ran it)
            self._scheduled = False
            self.reput()

    def _parse(self, pos: int, limit: int) -> int:
        """Parse records from the CommitLog in ``[pos, limit)`` (data the reput has no batch for:
        replicated bytes, or blank markers). Returns the bytes consumed (0 = stuck)."""
        cl = self.commit_log
        data = cl.read_raw(pos, min(limit - pos, REPUT_PARSE_SLICE))
        if not data:
            return 0
        p = 0
        seg = cl.segment_at(pos)
        queues = self.queues
        while p < len(data):
            # The run of ordinary records first, as recovery reads them (no object per record).
            rows: list[RecordRow] = []
            after, n, _ = walk_records(data, p, len(data), pos + p, False, rows)
            if n:
                self.dispatch_rows(rows, queues.dirty, notify=True)
                p = after
                continue
            r = parse_dispatch(data, p, False)  # the record the walk stopped at
            if isinstance(r, DispatchRecord):
                if r.physical_offset != pos + p:
                    self._stuck(pos + p, f"record carries physical offset {r.physical_offset}")
                    break
                cq = self.dispatch_record(r)
                if cq is not None:
                    self.queues.dirty.add(cq)
                    if self.notifying:
                        self._notify(r.topic, r.queue_id, r.queue_offset, [r.tags_code])
                p += r.size
                continue
            if r == BLANK and seg is not None:
                self.index.write_headers()
                self.reput_from_offset = seg.end
                return p + 8
            if r == CORRUPT:
                self._stuck(pos + p, "bad magic code or sizes")
            break  # END_OF_DATA: an incomplete record (replication in progress)
        self.index.write_headers()
        self.reput_from_offset = pos + p
        return p

    def _stuck(self, offset: int, why: str) -> None:
        if not self._error_logged:
            self._error_logged = True
            log.error("reput stopped at CommitLog offset %d: %s", offset, why)
