""":class:`TimerMessageStore`: arbitrary-time delayed delivery (RocketMQ 5 ``store/timer/TimerMessageStore``,
RIP-43).

The broker's send hook (:mod:`rocket.broker.timer`) stores a message whose delivery
time is in the future to :data:`TIMER_TOPIC` queue 0, with ``TIMER_OUT_MS`` (the slot
time, ms), ``REAL_TOPIC`` and ``REAL_QID`` in its properties. This service then:

* **enqueues**: tails ``rmq_sys_wheel_timer`` queue 0 from ``currQueueOffset`` and, per
  message, appends a 52-byte unit to the :class:`~rocket.store.timer.log.TimerLog`
  linked to the previous unit of its slot and points the
  :class:`~rocket.store.timer.wheel.TimerWheel` slot at it. A time beyond the roll
  window (``timerRollWindowSlot`` slots, 2 days) is parked in a nearer slot with the
  ``ROLL`` magic and re-put to the timer topic when that slot is reached. A master
  delivers a message whose time already passed (below ``currWriteTimeMs``) at once,
  marked ``TIMER_ENQUEUE_MS`` = Long.MAX_VALUE.
* **dequeues** (masters only, :attr:`should_run_dequeue`): for each slot time
  ``currReadTimeMs < currWriteTimeMs`` (the clock floored to the precision) it walks the
  slot's units, first honours delete marks (``TIMER_DEL_UNIQKEY`` =
  ``realTopic + "+" + uniqKey``, or the bare unique key), then re-puts every other message
  to ``REAL_TOPIC``/``REAL_QID`` with its body, flags, properties (so ``UNIQ_KEY``/msgId and
  ``KEYS``; ``REAL_TOPIC``/``REAL_QID`` stay in the stored properties, as Apache's do), born
  time and host kept, and ``TIMER_ENQUEUE_MS``/``TIMER_DEQUEUE_MS`` (and ``TIMER_ROLL_TIMES``
  for rolls) added, as Apache's ``convert``/``convertMessage``.
* **flushes**: every ``timerFlushIntervalMs`` msyncs the TimerLog and wheel, then writes the
  :class:`~rocket.store.timer.checkpoint.TimerCheckpoint` (read time, TimerLog flush
  position, queue offsets).

A slave runs the enqueue side only, over the rmq_sys_wheel_timer queue it replicates
with the CommitLog, and copies the master's read time (:meth:`sync_from_master`); once
promoted (:meth:`set_should_run_dequeue`) it delivers from there, so a timer delivered
by the old master just before the switch may be delivered again (at-least-once), and
none is lost.

Recovery (:meth:`load`, after a kill -9 too) re-links the wheel from the TimerLog from
one file before the checkpoint's flush position (Apache ``recoverAndRevise``), cuts the
TimerLog at the first torn unit, and resumes enqueueing after the queue offset of the
last unit's message.

All work runs on the event loop except msync/fsync (executor); the wheel and log are
memory-mapped files, so a million pending timers cost ~52 MB of TimerLog and the
38.7 MB wheel in page cache, not Python objects.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocket.message import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    MessageExt,
    MessageFormatError,
    decode_properties,
    decode_record,
    java_string_hash,
)
from rocket.store.api import PutMessageRequest, PutMessageResult, PutMessageStatus, reput_request
from rocket.store.consumequeue import ENTRY as _ENTRY
from rocket.store.timer.checkpoint import TimerCheckpoint
from rocket.store.timer.log import (
    BLANK_MAGIC_CODE,
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    MAGIC_ROLL,
    UNIT,
    UNIT_SIZE,
    TimerLog,
    is_magic_ok,
)
from rocket.store.timer.wheel import TimerWheel

if TYPE_CHECKING:
    from rocket.store.message_store import DefaultMessageStore

log = logging.getLogger("rocket.store.timer")

#: The timer system topic (``TimerMessageStore.TIMER_TOPIC``: ``rmq_sys_`` + ``wheel_timer``).
TIMER_TOPIC = "rmq_sys_wheel_timer"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
#: Absolute delivery time (ms) as Alibaba Cloud's and OpenMessaging clients set it.
PROPERTY_START_DELIVER_TIME = "__STARTDELIVERTIME"

#: ``TimerMessageStore.TIMER_WHEEL_TTL_DAY`` and ``DAY_SECS``: the wheel has 7 days of seconds x 2 slots.
TIMER_WHEEL_TTL_DAY = 7
DAY_SECS = 24 * 3600
#: ``TIMER_BLANK_SLOTS``: slots kept free between the read pointer and the wheel's wrap.
TIMER_BLANK_SLOTS = 60
#: Java's Long.MAX_VALUE: ``TIMER_ENQUEUE_MS`` of a message delivered without entering the wheel.
LONG_MAX = (1 << 63) - 1

#: Timer messages taken per enqueue pass, and how long a busy enqueue task waits after a pass that
#: found fewer (seconds; far below the 100 ms minimum precision).
ENQUEUE_BATCH = 512
ENQUEUE_GATHER_S = 0.005

#: Delivery-lag histogram bucket bounds (seconds).
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

_STORED = {PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT, PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
           PutMessageStatus.SLAVE_NOT_AVAILABLE}
_HOPELESS = {PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED}


_SYSFLAG_AT = struct.Struct(">i")
_BODY_LEN = struct.Struct(">i")
_PROPS_LEN = struct.Struct(">h")


def record_properties(rec: bytes | memoryview) -> dict[str, str]:
    """The properties of a stored record (the CommitLog record layout of RocketMQ's MessageDecoder)
    without decoding the rest (the enqueue path reads only these). Raises ``MessageFormatError``
    for a record that does not add up."""
    try:
        (sys_flag,) = _SYSFLAG_AT.unpack_from(rec, 36)
        p = 48 + (20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8) + 8 + (20 if sys_flag & SYSFLAG_STOREHOST_V6 else 8) + 12
        (body_len,) = _BODY_LEN.unpack_from(rec, p)
        p += 4 + body_len
        p += 1 + rec[p]
        (props_len,) = _PROPS_LEN.unpack_from(rec, p)
        p += 2
        if props_len < 0 or p + props_len != len(rec):
            raise MessageFormatError("properties length disagrees with the record size")
        return decode_properties(bytes(rec[p:p + props_len]).decode())
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise MessageFormatError(f"record: {exc}") from None


_OUT_KEY = b"\x02" + PROPERTY_TIMER_OUT_MS.encode() + b"\x01"
_TOPIC_KEY = b"\x02" + PROPERTY_REAL_TOPIC.encode() + b"\x01"
_DEL_KEY = b"\x02" + PROPERTY_TIMER_DEL_UNIQKEY.encode() + b"\x01"


def _property_value(rec: bytes, start: int, end: int, key: bytes) -> bytes | None:
    """The value of the last piece named by ``key`` (``\\x02name\\x01``) in the properties at
    ``rec[start:end]``, as ``decode_properties`` gives it (the last of a repeated name wins);
    None when there is none. A piece starts the string or follows a ``\\x02``, and no value
    holds a ``\\x02``, so a match is always a whole name."""
    i = rec.rfind(key, start, end)
    if i >= 0:
        v = i + len(key)
    elif rec.startswith(key[1:], start, end):
        v = start + len(key) - 1
    else:
        return None
    j = rec.find(b"\x02", v, end)
    return rec[v:end if j < 0 else j]


def timer_fields(rec: bytes) -> tuple[int, int, bool]:
    """(``TIMER_OUT_MS``, the Java hash of ``REAL_TOPIC`` or 0, whether ``TIMER_DEL_UNIQKEY`` is
    set) of a stored timer record, read from its properties bytes without decoding them all
    (the enqueue hot path; same values as :func:`record_properties`). Raises
    ``MessageFormatError`` for a record that does not add up, ``ValueError`` when
    ``TIMER_OUT_MS`` is missing or not a number."""
    try:
        (sys_flag,) = _SYSFLAG_AT.unpack_from(rec, 36)
        p = 48 + (20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8) + 8 + (20 if sys_flag & SYSFLAG_STOREHOST_V6 else 8) + 12
        (body_len,) = _BODY_LEN.unpack_from(rec, p)
        p += 4 + body_len
        p += 1 + rec[p]
        (props_len,) = _PROPS_LEN.unpack_from(rec, p)
        p += 2
    except (struct.error, IndexError) as exc:
        raise MessageFormatError(f"record: {exc}") from None
    end = p + props_len
    if props_len < 0 or end != len(rec):
        raise MessageFormatError("properties length disagrees with the record size")
    out = _property_value(rec, p, end, _OUT_KEY)
    if out is None:
        raise ValueError("no TIMER_OUT_MS property")
    topic = _property_value(rec, p, end, _TOPIC_KEY)
    topic_hash = (_TOPIC_HASHES_BY_BYTES.get(topic) or _hash_topic_bytes(topic)) if topic else 0
    delete = _DEL_KEY[1:] in rec and _property_value(rec, p, end, _DEL_KEY) is not None
    return int(out), topic_hash, delete


_TOPIC_HASHES_BY_BYTES: dict[bytes, int] = {}


def _hash_topic_bytes(topic: bytes) -> int:
    try:
        code = hash_topic_for_metrics(topic.decode())
    except UnicodeDecodeError:
        return 0
    if len(_TOPIC_HASHES_BY_BYTES) >= 4096:
        _TOPIC_HASHES_BY_BYTES.clear()
    _TOPIC_HASHES_BY_BYTES[topic] = code
    return code


def build_delete_key(real_topic: str, uniq_key: str) -> str:
    """``TimerMessageStore.buildDeleteKey``: ``realTopic + "+" + uniqueKey``."""
    return f"{real_topic}+{uniq_key}"


_TOPIC_HASHES: dict[str, int] = {}


def hash_topic_for_metrics(topic: str | None) -> int:
    """The real topic's Java ``hashCode`` (stored in each TimerLog unit), memoised."""
    if not topic:
        return 0
    code = _TOPIC_HASHES.get(topic)
    if code is None:
        if len(_TOPIC_HASHES) >= 4096:
            _TOPIC_HASHES.clear()
        code = _TOPIC_HASHES[topic] = java_string_hash(topic)
    return code


@dataclass(slots=True)
class TimerStats:
    """Counters of the timer service, read at scrape time by the broker's collector."""

    enqueued: int = 0
    delete_marks: int = 0
    delivered: int = 0
    delivered_at_once: int = 0
    deleted: int = 0
    rolled: int = 0
    put_failures: int = 0
    skipped: int = 0
    #: Sends refused because the delivery time is beyond ``timerMaxDelaySec`` (the broker's hook).
    refused_max_delay: int = 0
    #: Sends whose delivery time had already passed: stored to their topic at once (the hook).
    past_due_at_send: int = 0
    #: Units in the wheel not yet dequeued (deletes subtract).
    wheel_pending: int = 0
    lag_counts: list[int] = field(default_factory=lambda: [0] * (len(LAG_BUCKETS) + 1))
    lag_sum: float = 0.0
    recovery_seconds: float = 0.0
    recovered_units: int = 0

    def observe_lag(self, seconds: float) -> None:
        """Count one delivery ``seconds`` after its earliest allowed time."""
        seconds = max(0.0, seconds)
        self.lag_counts[bisect.bisect_left(LAG_BUCKETS, seconds)] += 1
        self.lag_sum += seconds


class TimerMessageStore:
    """The timer wheel service (see the module doc).

    ``store``: the started message store; ``clock``: seconds since the epoch
    (defaults to the store's, so a fake clock drives both). Settings come from
    ``store.config`` (``timer_precision_ms``, ``timer_roll_window_slot``,
    ``mapped_file_size_timer_log``, ``timer_flush_interval_ms``). Raises
    ``ValueError`` from :meth:`load` for an unusable setting or a wheel file of
    another size.
    """

    def __init__(self, store: DefaultMessageStore, *, clock: Callable[[], float] | None = None) -> None:
        cfg = store.config
        self.store = store
        self.clock = clock or store.clock
        self.precision_ms = int(cfg.timer_precision_ms)
        if self.precision_ms <= 0 or 1000 % self.precision_ms != 0 or self.precision_ms < 100:
            raise ValueError(f"timerPrecisionMs {self.precision_ms}: must divide 1000 and be >= 100")
        self.slots_total = TIMER_WHEEL_TTL_DAY * DAY_SECS
        roll = int(cfg.timer_roll_window_slot)
        if roll > self.slots_total - TIMER_BLANK_SLOTS or roll < 2:
            roll = self.slots_total - TIMER_BLANK_SLOTS
        self.roll_window_slots = roll
        root = Path(cfg.store_path_root_dir)
        self.wheel_path = root / "timerwheel"
        self.log_dir = root / "timerlog"
        self.checkpoint_path = root / "config" / "timercheck"
        self.flush_interval = max(0.01, cfg.timer_flush_interval_ms / 1000.0)
        self.wheel: TimerWheel | None = None
        self.timer_log = TimerLog(self.log_dir, cfg.mapped_file_size_timer_log)
        self.checkpoint = TimerCheckpoint(path=self.checkpoint_path)
        self.stats = TimerStats()
        self.should_run_dequeue = False
        self.curr_write_time_ms = 0
        self.curr_read_time_ms = 0
        self.commit_read_time_ms = 0
        self.curr_queue_offset = 0
        self._loaded = False
        self._running = False
        self._tasks: list[asyncio.Task[None]] = []
        self._enqueue_wake: asyncio.Event | None = None
        self._stopping: asyncio.Event | None = None
        #: On a slave: (master read time, master CommitLog offset) adopted once replicated that far.
        self._pending_sync: tuple[int, int] | None = None

    # -- time --------------------------------------------------------------------------------------

    def now_ms(self) -> int:
        """The clock in ms."""
        return int(self.clock() * 1000)

    def format_time(self, ms: int) -> int:
        """``ms`` floored to the precision."""
        return ms // self.precision_ms * self.precision_ms

    def _move_write_time(self) -> None:
        now = self.format_time(self.now_ms())
        if self.curr_write_time_ms < now:
            self.curr_write_time_ms = now

    # -- recovery ---------------------------------------------------------------------------------

    def load(self) -> None:
        """Open and recover the wheel, TimerLog and checkpoint (see the module doc); blocking,
        called once after the message store started. Raises ``ValueError``/``OSError``."""
        started = time.perf_counter()
        self.wheel = TimerWheel(self.wheel_path, self.slots_total, self.precision_ms)
        self.checkpoint = TimerCheckpoint.load(self.checkpoint_path)
        self.timer_log.load()
        begin = max(0, self.checkpoint.last_timer_log_flush_pos - self.timer_log.file_size)
        end, last_unit = self._recover_and_revise(begin)
        self.timer_log.truncate(end)
        self.timer_log.flushed = end
        queue_offset = self._queue_offset_after(last_unit)
        if queue_offset < 0:
            queue_offset = self.checkpoint.last_timer_queue_offset
        cq = self.store.find_consume_queue(TIMER_TOPIC, 0)
        if cq is not None:
            queue_offset = min(max(queue_offset, cq.min_offset), cq.max_offset)
        self.curr_queue_offset = queue_offset
        now = self.format_time(self.now_ms())
        read = self.checkpoint.last_read_time_ms
        oldest = now - self.slots_total * self.precision_ms + TIMER_BLANK_SLOTS * self.precision_ms
        if read <= 0:
            read = now
        self.curr_read_time_ms = self.format_time(max(read, oldest))
        self.commit_read_time_ms = self.curr_read_time_ms
        self.curr_write_time_ms = now
        self.stats.wheel_pending = self.wheel.sum_num(
            self.curr_read_time_ms, self.curr_read_time_ms + 2 * self.slots_total * self.precision_ms,
            limit_slots=2 * self.slots_total)
        self.stats.recovery_seconds = time.perf_counter() - started
        self._loaded = True
        log.info("timer recovered in %.3f s: %d TimerLog units re-linked, TimerLog end %d, read time %d, "
                 "queue offset %d, %d pending in the wheel", self.stats.recovery_seconds,
                 self.stats.recovered_units, end, self.curr_read_time_ms, self.curr_queue_offset,
                 self.stats.wheel_pending)

    def _recover_and_revise(self, begin: int) -> tuple[int, int]:
        """Re-link wheel slots from the units at and after ``begin``'s file; returns (the end of
        the valid units, offset of the last unit or -1)."""
        assert self.wheel is not None
        files, _first = self.timer_log.scan(begin)
        wheel = self.wheel
        size = self.timer_log.file_size
        last_unit = -1
        end = files[0][0] if files else 0
        count = 0
        revise = wheel.revise_slot
        for start, view in files:
            pos = 0
            stop = False
            limit = size - UNIT_SIZE
            while pos <= limit:
                usize, _prev, magic, write_time, delay, _opy, _spy, _h, _r = UNIT.unpack_from(view, pos)
                if magic == BLANK_MAGIC_CODE and usize == size - pos:
                    pos = size  # blank: the file's end
                    break
                if usize != UNIT_SIZE or not is_magic_ok(magic):
                    stop = True
                    break
                revise(write_time + delay, -2, start + pos, True)
                last_unit = start + pos
                count += 1
                pos += UNIT_SIZE
            end = start + pos
            if stop:
                break
        for _start, view in files:
            view.release()
        self.stats.recovered_units = count
        return end, last_unit

    def _queue_offset_after(self, unit_offset: int) -> int:
        """rmq_sys_wheel_timer queue offset after the message of the unit at ``unit_offset``."""
        if unit_offset < 0:
            return -1
        unit = self.timer_log.read_unit(unit_offset)
        if unit is None:
            return -1
        rec = self.store.commit_log.read(unit[5], unit[6])
        if rec is None:
            return -1
        try:
            msg = decode_record(rec)
        except MessageFormatError:
            return -1
        if msg.topic != TIMER_TOPIC:
            return -1
        return msg.queue_offset + 1

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self, should_run_dequeue: bool) -> None:
        """Start enqueueing, flushing and (when ``should_run_dequeue``) delivering."""
        if not self._loaded:
            self.load()
        self.should_run_dequeue = should_run_dequeue
        self._enqueue_wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._running = True
        loop = asyncio.get_running_loop()
        for coro, name in ((self._enqueue_loop(), "timer-enqueue"), (self._dequeue_loop(), "timer-dequeue"),
                           (self._flush_loop(), "timer-flush")):
            self._tasks.append(loop.create_task(coro, name=name))

    def set_should_run_dequeue(self, should: bool) -> None:
        """Role change: a master delivers; a slave only enqueues (Apache ``setShouldRunningDequeue``).
        On becoming master the read time starts from the checkpoint (the master's, as copied)."""
        if should and not self.should_run_dequeue:
            self._adopt_pending_sync(force=True)
            if self.checkpoint.last_read_time_ms:
                self.curr_read_time_ms = self.format_time(self.checkpoint.last_read_time_ms)
            self.commit_read_time_ms = self.curr_read_time_ms
            log.warning("timer: delivering as master from read time %d", self.curr_read_time_ms)
        self.should_run_dequeue = should

    async def shutdown(self) -> None:
        """Stop the tasks, flush everything and close the files."""
        self._running = False
        if self._stopping is not None:
            self._stopping.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        if self._loaded:
            try:
                await self._flush_once()
            except OSError as exc:
                log.error("timer: final flush failed: %s", exc)
            self.timer_log.close()
            if self.wheel is not None:
                self.wheel.close()
            self._loaded = False

    def on_dispatch(self, topic: str, queue_id: int, queue_offset: int, tags_code: int) -> None:
        """Store dispatch listener: wake the enqueue task on new rmq_sys_wheel_timer messages."""
        if topic == TIMER_TOPIC and self._enqueue_wake is not None:
            self._enqueue_wake.set()

    async def _sleep(self, seconds: float) -> bool:
        assert self._stopping is not None
        try:
            async with asyncio.timeout(max(0.0, seconds)):
                await self._stopping.wait()
        except TimeoutError:
            return True
        return False

    # -- enqueue ----------------------------------------------------------------------------------

    async def _enqueue_loop(self) -> None:
        assert self._enqueue_wake is not None
        while self._running:
            self._enqueue_wake.clear()
            try:
                n = await self.enqueue_batch(ENQUEUE_BATCH)
            except Exception:
                log.exception("timer: enqueue failed at queue offset %d", self.curr_queue_offset)
                n = 0
                if not await self._sleep(0.5):
                    return
            if n:
                # Under load, let timer messages gather for a moment rather than waking per
                # dispatch: one pass (and one wheel write per slot) takes many; Apache's enqueue
                # thread polls too. A timer is enqueued at most ENQUEUE_GATHER_S later.
                await asyncio.sleep(0 if n >= ENQUEUE_BATCH else ENQUEUE_GATHER_S)
                continue
            self._move_write_time()
            try:
                async with asyncio.timeout(0.1):
                    await self._enqueue_wake.wait()
            except TimeoutError:
                pass

    async def enqueue_batch(self, max_entries: int = 512) -> int:
        """Enqueue up to ``max_entries`` timer messages from ``currQueueOffset``; returns how many
        were taken (0 = nothing new).

        One pass, no coroutine per message: each message's ``TIMER_OUT_MS``/``REAL_TOPIC``/
        ``TIMER_DEL_UNIQKEY`` are found in its stored properties bytes (:func:`timer_fields`), its
        unit is appended to the TimerLog, and the wheel slots it touched are kept in a dict and
        written once at the end (many timers share a slot); a master's already-due message is
        delivered at once, after the slots so far are written."""
        cq = self.store.find_consume_queue(TIMER_TOPIC, 0)
        if cq is None:
            return 0
        offset = self.curr_queue_offset
        if offset < cq.min_offset:
            log.warning("timer: queue offset %d below the queue's min %d", offset, cq.min_offset)
            offset = self.curr_queue_offset = cq.min_offset
        if offset >= cq.max_offset:
            return 0
        data = cq.read(offset, max_entries)
        if not data:
            return 0
        self._move_write_time()
        commit_log = self.store.commit_log
        read = commit_log.read
        link = self._link
        slots: dict[int, list[int]] = {}
        taken = 0
        try:
            for phys, size, _tags in _ENTRY.iter_unpack(data):
                rec = read(phys, size) if size > 0 else None
                if rec is None:
                    if phys + size > commit_log.committed:
                        break  # not readable yet
                    log.warning("timer: message at %d (queue offset %d) is gone; skipped", phys, offset + taken)
                    self.stats.skipped += 1
                else:
                    try:
                        delayed, topic_hash, delete = timer_fields(rec)
                    except (MessageFormatError, ValueError) as exc:
                        log.error("timer: message at %d has no usable TIMER_OUT_MS (%s); skipped", phys, exc)
                        self.stats.skipped += 1
                    else:
                        if self.should_run_dequeue and delayed < self.curr_write_time_ms:
                            self._write_slots(slots)
                            await self._deliver_due(phys, rec)
                        else:
                            link(phys, size, delayed, topic_hash, delete, slots)
                taken += 1
                self.curr_queue_offset = offset + taken
        finally:
            self._write_slots(slots)
        return taken

    async def _deliver_due(self, phys: int, rec: bytes) -> None:
        """Deliver a message already due when enqueued, without entering the wheel."""
        try:
            msg = decode_record(rec)
        except MessageFormatError as exc:
            log.error("timer: undecodable message at %d: %s; skipped", phys, exc)
            self.stats.skipped += 1
            return
        await self._deliver(msg, LONG_MAX, MAGIC_DEFAULT, immediate=True)

    def do_enqueue(self, offset_py: int, size_py: int, delayed_ms: int, props: dict[str, str]) -> int:
        """Append the unit of one timer message and link it into its slot (``doEnqueue``);
        returns the unit's TimerLog offset. Raises ``OSError`` when the TimerLog cannot grow."""
        slots: dict[int, list[int]] = {}
        try:
            return self._link(offset_py, size_py, delayed_ms, hash_topic_for_metrics(props.get(PROPERTY_REAL_TOPIC)),
                              PROPERTY_TIMER_DEL_UNIQKEY in props, slots)
        finally:
            self._write_slots(slots)

    def _link(self, offset_py: int, size_py: int, delayed_ms: int, topic_hash: int, delete: bool,
              slots: dict[int, list[int]]) -> int:
        """Append one unit linked to its slot's last one; the slot's new state goes to ``slots``
        (slot unit -> [time ms, firstPos, lastPos, num, magic]) for :meth:`_write_slots`."""
        assert self.wheel is not None
        write_time = self.curr_write_time_ms
        p = self.precision_ms
        magic = MAGIC_DEFAULT
        if delayed_ms - write_time >= self.roll_window_slots * p:
            magic |= MAGIC_ROLL
            if delayed_ms - write_time - self.roll_window_slots * p < self.roll_window_slots // 3 * p:
                delayed_ms = write_time + self.roll_window_slots // 2 * p
            else:
                delayed_ms = write_time + self.roll_window_slots * p
        if delete:
            magic |= MAGIC_DELETE
        unit_key = delayed_ms // p
        slot = slots.get(unit_key)
        if slot is None:
            old = self.wheel.get_slot(delayed_ms)
            slot = slots[unit_key] = [delayed_ms, old.first_pos, old.last_pos, old.num, old.magic]
        pos = self.timer_log.append(UNIT.pack(UNIT_SIZE, slot[2], magic, write_time, delayed_ms - write_time,
                                              offset_py, size_py, topic_hash, 0))
        if slot[1] == -1:
            slot[1] = pos
        slot[2] = pos
        counted = delayed_ms >= self.curr_read_time_ms  # a slave may enqueue what its master delivered
        stats = self.stats
        if delete:
            slot[3] -= 1
            stats.delete_marks += 1
            stats.wheel_pending -= counted
        else:
            slot[3] += 1
            stats.enqueued += 1
            stats.wheel_pending += counted
        return pos

    def _write_slots(self, slots: dict[int, list[int]]) -> None:
        """Write the slots :meth:`_link` changed (each once) and forget them."""
        if slots:
            put = self.wheel.put_slot  # type: ignore[union-attr]
            for time_ms, first, last, num, magic in slots.values():
                put(time_ms, first, last, num, magic)
            slots.clear()

    # -- dequeue ----------------------------------------------------------------------------------

    async def _dequeue_loop(self) -> None:
        while self._running:
            if not self.should_run_dequeue:
                self._sync_read_time()
                if not await self._sleep(0.1):
                    return
                continue
            self._move_write_time()
            if self.curr_read_time_ms >= self.curr_write_time_ms:
                wait = (self.curr_read_time_ms + self.precision_ms - self.now_ms()) / 1000.0
                if not await self._sleep(min(max(wait, 0.001), 0.05)):
                    return
                continue
            try:
                await self.dequeue_once()
            except Exception:
                log.exception("timer: dequeue of slot %d failed; retrying", self.curr_read_time_ms)
                if not await self._sleep(0.5):
                    return

    async def dequeue_once(self) -> int:
        """Deliver the slot at ``currReadTimeMs`` (or skip to the next used slot before
        ``currWriteTimeMs``); returns the messages handled."""
        assert self.wheel is not None
        read = self.curr_read_time_ms
        slot = self.wheel.get_slot(read)
        if slot.time_ms == -1:
            nxt = self.wheel.next_used_time(read + self.precision_ms, self.curr_write_time_ms)
            self.curr_read_time_ms = self.commit_read_time_ms = nxt
            return 0
        units: list[tuple[int, int, int, int]] = []  # (magic, enqueue time, offsetPy, sizePy), newest first
        pos = slot.last_pos
        seen = 0
        while pos != -1 and seen < 10_000_000:
            unit = self.timer_log.read_unit(pos)
            if unit is None:
                break
            _size, prev, magic, write_time, _delay, opy, spy, _h, _r = unit
            units.append((magic, write_time, opy, spy))
            pos = prev
            seen += 1
        units.reverse()
        deletes: set[str] = set()
        handled = 0
        for magic, _wt, opy, spy in units:
            if magic & MAGIC_DELETE and not magic & MAGIC_ROLL:
                msg = self._read_message(opy, spy)
                if msg is not None and PROPERTY_TIMER_DEL_UNIQKEY in msg.properties:
                    deletes.add(msg.properties[PROPERTY_TIMER_DEL_UNIQKEY])
                handled += 1
        pending: list[tuple[MessageExt, int, int]] = []
        for magic, write_time, opy, spy in units:
            if magic & MAGIC_DELETE and not magic & MAGIC_ROLL:
                continue
            msg = self._read_message(opy, spy)
            handled += 1
            self.stats.wheel_pending -= 1
            if msg is None:
                self.stats.skipped += 1
                continue
            if deletes:
                uniq = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                real = msg.properties.get(PROPERTY_REAL_TOPIC, "")
                if uniq and (build_delete_key(real, uniq) in deletes or uniq in deletes):
                    self.stats.deleted += 1
                    continue
            pending.append((msg, write_time, magic))
            if len(pending) >= 512:  # puts in flight (and messages decoded) at once, bounded
                await asyncio.gather(*(self._deliver(m, wt, mg) for m, wt, mg in pending))
                pending.clear()
        if pending:
            await asyncio.gather(*(self._deliver(m, wt, mg) for m, wt, mg in pending))
        if self.should_run_dequeue and self.curr_read_time_ms == read:
            self.curr_read_time_ms = self.commit_read_time_ms = read + self.precision_ms
        return handled

    def _read_message(self, offset_py: int, size_py: int) -> MessageExt | None:
        rec = self.store.commit_log.read(offset_py, size_py)
        if rec is None:
            log.warning("timer: no message at CommitLog offset %d (size %d)", offset_py, size_py)
            return None
        try:
            return decode_record(rec)
        except MessageFormatError as exc:
            log.error("timer: undecodable message at %d: %s", offset_py, exc)
            return None

    def convert(self, msg: MessageExt, enqueue_time: int, roll: bool) -> PutMessageRequest:
        """The put of a due (or rolled) timer message (Apache ``convert`` + ``convertMessage``)."""
        props = dict(msg.properties)
        if enqueue_time != -1:
            props[PROPERTY_TIMER_ENQUEUE_MS] = str(enqueue_time)
        if roll:
            try:
                times = int(props.get(PROPERTY_TIMER_ROLL_TIMES, "0")) + 1
            except ValueError:
                times = 1
            props[PROPERTY_TIMER_ROLL_TIMES] = str(times)
        props[PROPERTY_TIMER_DEQUEUE_MS] = str(self.now_ms())
        if roll:
            topic, queue_id = msg.topic, msg.queue_id
        else:
            # Apache clears REAL_TOPIC/REAL_QID only after it has encoded the properties, so the
            # delivered record keeps them (and WAIT as sent): so do we.
            topic = props.get(PROPERTY_REAL_TOPIC, "")
            try:
                queue_id = int(props.get(PROPERTY_REAL_QUEUE_ID, "0"))
            except ValueError:
                queue_id = 0
        return reput_request(msg, topic, queue_id, props)

    async def _deliver(self, msg: MessageExt, enqueue_time: int, magic: int, *, immediate: bool = False) -> None:
        """Put ``msg`` to its real topic (or back to the timer topic for a roll); retries a
        transient failure until it is stored or the service stops (at-least-once)."""
        roll = bool(magic & MAGIC_ROLL)
        if not roll and PROPERTY_TIMER_DEL_UNIQKEY in msg.properties:
            return  # a delete mark is never delivered (Apache doPut: PUT_NO_RETRY)
        req = self.convert(msg, enqueue_time, roll)
        if not req.topic:
            log.error("timer: message at %d has no REAL_TOPIC; skipped", msg.physical_offset)
            self.stats.skipped += 1
            return
        attempts = 0
        while True:
            attempts += 1
            try:
                result: PutMessageResult = await self.store.put_message(req)
            except Exception:
                log.exception("timer: putting the message at %d failed", msg.physical_offset)
                result = PutMessageResult(PutMessageStatus.UNKNOWN_ERROR)
            if result.status in _STORED:
                break
            if result.status in _HOPELESS:
                log.error("timer: message at %d for %s cannot be stored (%s %s); skipped", msg.physical_offset,
                          req.topic, result.status, result.remark)
                self.stats.skipped += 1
                return
            self.stats.put_failures += 1
            if not self.should_run_dequeue:
                return  # stepped down: the new master delivers it (from the copied read time)
            if attempts % 20 == 1:
                log.warning("timer: delivering to %s: %s %s; retrying", req.topic, result.status, result.remark)
            if not self._running or not await self._sleep(0.5 * self.precision_ms / 1000):
                return
        if roll:
            self.stats.rolled += 1
            return
        now = self.now_ms()
        if immediate:
            self.stats.delivered_at_once += 1
            self.stats.observe_lag((now - msg.store_timestamp) / 1000.0)
        else:
            try:
                out = int(msg.properties.get(PROPERTY_TIMER_OUT_MS, "0"))
            except ValueError:
                out = 0
            self.stats.observe_lag((now - (out + self.precision_ms)) / 1000.0)
        self.stats.delivered += 1

    # -- slave ------------------------------------------------------------------------------------

    def _sync_read_time(self) -> None:
        """A slave's read time follows the (copied) checkpoint (Apache ``syncLastReadTimeMs``)."""
        self._adopt_pending_sync(force=False)
        read = self.format_time(self.checkpoint.last_read_time_ms)
        if read and read != self.curr_read_time_ms:
            if read > self.curr_read_time_ms and self.wheel is not None:
                self.stats.wheel_pending -= self.wheel.sum_num(self.curr_read_time_ms, read, limit_slots=200_000)
            self.curr_read_time_ms = self.commit_read_time_ms = read

    def sync_from_master(self, master: TimerCheckpoint, master_commit_log_offset: int) -> None:
        """Take the master's checkpoint (GET_TIMER_CHECK_POINT) on a slave. Its read time is adopted
        once this slave's CommitLog reaches ``master_commit_log_offset`` (the master's end when
        it answered), so the deliveries it stands for are replicated here before they count."""
        if self.should_run_dequeue:
            return
        self.checkpoint.master_timer_queue_offset = master.master_timer_queue_offset
        self.checkpoint.state_version = master.state_version
        self.checkpoint.timestamp = master.timestamp
        self.checkpoint.counter = master.counter
        self._pending_sync = (master.last_read_time_ms, master_commit_log_offset)
        self._adopt_pending_sync(force=False)

    def _adopt_pending_sync(self, force: bool) -> None:
        pending = self._pending_sync
        if pending is None:
            return
        read, need = pending
        if self.store.commit_log.committed >= need:
            if read > self.checkpoint.last_read_time_ms:
                self.checkpoint.last_read_time_ms = read
            self._pending_sync = None
        elif force:
            self._pending_sync = None  # never replicated that far: keep the older read time

    # -- flush ------------------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        cleaned_at = time.monotonic()
        while self._running:
            if not await self._sleep(self.flush_interval):
                return
            try:
                await self._flush_once()
                if time.monotonic() - cleaned_at >= 30.0:  # Apache: every 30 s
                    cleaned_at = time.monotonic()
                    self.clean_expired_files()
            except OSError as exc:
                log.error("timer: flush failed: %s", exc)

    def clean_expired_files(self) -> int:
        """Delete TimerLog files whose messages are all gone from the CommitLog (retention)."""
        n = self.timer_log.delete_expired(self.store.min_phy_offset)
        if n:
            log.info("timer: deleted %d TimerLog file(s) below CommitLog offset %d", n, self.store.min_phy_offset)
        return n

    async def _flush_once(self) -> None:
        loop = asyncio.get_running_loop()
        queue_offset = self.curr_queue_offset
        read_time = self.commit_read_time_ms
        flush_pos = await loop.run_in_executor(None, self.timer_log.flush)
        if self.wheel is not None:
            await loop.run_in_executor(None, self.wheel.flush)
        ck = self.checkpoint
        ck.last_timer_log_flush_pos = flush_pos
        if self.should_run_dequeue:
            ck.last_read_time_ms = read_time
            if queue_offset != ck.master_timer_queue_offset:
                ck.counter += 1
                ck.timestamp = self.now_ms()
            ck.master_timer_queue_offset = queue_offset
        ck.last_timer_queue_offset = queue_offset
        await loop.run_in_executor(None, ck.flush)

    # -- figures ----------------------------------------------------------------------------------

    def enqueue_backlog(self) -> int:
        """Timer messages stored but not yet in the wheel."""
        return max(0, self.store.get_max_offset_in_queue(TIMER_TOPIC, 0) - self.curr_queue_offset)

    def pending(self) -> int:
        """Timers not yet delivered: in the wheel plus not yet enqueued."""
        return max(0, self.stats.wheel_pending) + self.enqueue_backlog()

    def due_undelivered(self, limit_slots: int = 200_000) -> int:
        """Timers whose slot time passed but which are not delivered yet (masters; slaves: 0)."""
        if not self.should_run_dequeue or self.wheel is None:
            return 0
        now = self.format_time(self.now_ms())
        return self.wheel.sum_num(self.curr_read_time_ms, now, limit_slots=limit_slots)

    def status(self) -> dict[str, Any]:
        """Figures for the admin API and runtime info."""
        s = self.stats
        return {
            "precisionMs": self.precision_ms,
            "dequeue": self.should_run_dequeue,
            "currReadTimeMs": self.curr_read_time_ms,
            "currWriteTimeMs": self.curr_write_time_ms,
            "currQueueOffset": self.curr_queue_offset,
            "timerLogEnd": self.timer_log.end,
            "pending": self.pending(),
            "enqueueBacklog": self.enqueue_backlog(),
            "dueUndelivered": self.due_undelivered(),
            "enqueued": s.enqueued,
            "delivered": s.delivered,
            "deliveredAtOnce": s.delivered_at_once,
            "deleted": s.deleted,
            "rolled": s.rolled,
            "refusedMaxDelay": s.refused_max_delay,
            "pastDueAtSend": s.past_due_at_send,
            "recoverySeconds": round(s.recovery_seconds, 3),
        }
