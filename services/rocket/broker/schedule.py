"""Delayed delivery: :class:`ScheduleMessageService` and the delay levels.

As in RocketMQ 4.9.8 (``ScheduleMessageService``), a message with property
``DELAY`` = level (1-based) is not stored to its topic: the send path stores it
to ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` with the original topic and
queue in properties ``REAL_TOPIC``/``REAL_QID`` and the delivery time (ms) as
its ConsumeQueue tag code. This service tails each level's queue; once a
message is due (store time + the level's delay) it stores a copy to the real
topic and queue (``DELAY`` removed, ``WAIT`` false) and advances that level's
``delayOffset``. Within a level messages are due in queue order, so only the
head of each queue is ever waited on.

Progress is kept durably in ``<storePathRootDir>/config/delayOffset.json`` as
``{"offsetTable":{"1":12,"3":4}}`` (level → next queue offset; written with
fsync and an atomic rename after each delivered batch), so a restart neither
loses nor (except for the batch in flight) repeats deliveries. Retries use
this service too: CONSUMER_SEND_MSG_BACK stores with delay level
``3 + reconsumeTimes``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from rocket.broker.tasks import CoalescingRunner, TaskGroup, write_file_durably
from rocket.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_WAIT_STORE_MSG_OK,
    MessageExt,
    MessageFormatError,
    decode_record,
)
from rocket.protocol import loads_lenient
from rocket.store.api import GetMessageStatus, PutMessageStatus, reput_request

if TYPE_CHECKING:
    from rocket.store import DefaultMessageStore

log = logging.getLogger("rocket.broker.schedule")

#: The topic delayed messages wait in; queue ``level - 1`` per level.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LEVEL = re.compile(r"^(\d+)(ms|s|m|h|d)$")

#: Put outcomes after which the message is stored (delivery done).
_STORED = {
    PutMessageStatus.PUT_OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
}
#: Put outcomes that will never succeed for this message (skip it).
_HOPELESS = {PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED}


def parse_delay_levels(text: str) -> list[int]:
    """Parse ``messageDelayLevel`` into delays in ms; index 0 is level 1.

    Tokens are ``<n><unit>`` separated by whitespace, units ``ms`` (an
    extension, handy for tests), ``s``, ``m``, ``h``, ``d``. Raises
    ``ValueError`` for an empty list or a bad token.
    """
    levels: list[int] = []
    for token in text.split():
        match = _LEVEL.match(token.strip().lower())
        if not match:
            raise ValueError(f"bad delay level {token!r}: expected <number><ms|s|m|h|d>")
        levels.append(int(match.group(1)) * _UNITS_MS[match.group(2)])
    if not levels:
        raise ValueError("no delay levels")
    return levels


def _now_ms() -> int:
    return int(time.time() * 1000)


class ScheduleMessageService:
    """Delivers due delayed messages from ``SCHEDULE_TOPIC_XXXX`` to their real topics.

    ``delay_levels_ms[i]`` is the delay of level ``i + 1``. Only a master runs
    the delivery tasks (:meth:`start`); a slave just serves its offsets table.
    """

    def __init__(self, store: DefaultMessageStore, delay_levels_ms: list[int], config_dir: Path) -> None:
        self.store = store
        self.delay_levels_ms = list(delay_levels_ms)
        self.path = Path(config_dir) / "delayOffset.json"
        #: level -> next queue offset to look at in queue ``level - 1``.
        self.delay_offsets: dict[int, int] = {}
        self.delivered_total = 0
        self._events: dict[int, asyncio.Event] = {}
        self._stopping: asyncio.Event | None = None
        self._tasks = TaskGroup("schedule")
        self._persist_runner = CoalescingRunner(self._persist_now)
        self._persisted: dict[int, int] = {}

    # -- levels ----------------------------------------------------------------------

    @property
    def max_level(self) -> int:
        """The highest delay level (18 by default)."""
        return len(self.delay_levels_ms)

    def clamp_level(self, level: int) -> int:
        """``level`` limited to 1..:attr:`max_level` (Java clamps too high levels)."""
        return max(1, min(level, self.max_level))

    def delay_ms(self, level: int) -> int:
        """Delay of ``level`` in ms (clamped)."""
        return self.delay_levels_ms[self.clamp_level(level) - 1]

    def deliver_timestamp(self, level: int, store_timestamp_ms: int) -> int:
        """When a message stored at ``store_timestamp_ms`` with ``level`` is due (ms)."""
        return store_timestamp_ms + self.delay_ms(level)

    # -- persistence -----------------------------------------------------------------

    def load(self) -> None:
        """Read ``delayOffset.json`` if present. Raises ``ValueError`` when it is corrupt."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        obj = loads_lenient(data)
        table = obj.get("offsetTable", {}) if isinstance(obj, dict) else {}
        if not isinstance(table, dict):
            raise ValueError(f"{self.path}: offsetTable is not an object")
        self.delay_offsets = {int(k): int(v) for k, v in table.items()}
        self._persisted = dict(self.delay_offsets)

    def offsets_json(self) -> bytes:
        """The offsets table as stored on disk and served by GET_ALL_DELAY_OFFSET (45)."""
        return orjson.dumps({"offsetTable": {str(k): v for k, v in sorted(self.delay_offsets.items())}})

    def update_offsets(self, table: dict[int, int]) -> None:
        """Replace the table (a slave copying its master's); persisted on the next :meth:`persist`."""
        self.delay_offsets = dict(table)

    async def persist(self) -> None:
        """Write the table durably if it changed (concurrent callers share one write)."""
        if self.delay_offsets != self._persisted:
            await self._persist_runner.run()

    async def _persist_now(self) -> None:
        snapshot = dict(self.delay_offsets)
        if snapshot == self._persisted:
            return
        data = orjson.dumps({"offsetTable": {str(k): v for k, v in sorted(snapshot.items())}})
        await asyncio.get_running_loop().run_in_executor(None, write_file_durably, self.path, data)
        self._persisted = snapshot

    # -- delivery --------------------------------------------------------------------

    def on_dispatch(self, topic: str, queue_id: int, queue_offset: int, tags_code: int) -> None:
        """Store dispatch listener: wake the level whose queue got a message."""
        if topic == SCHEDULE_TOPIC:
            event = self._events.get(queue_id + 1)
            if event is not None:
                event.set()

    async def start(self) -> None:
        """Start one delivery task per level."""
        self._stopping = asyncio.Event()
        for level in range(1, self.max_level + 1):
            self._events[level] = asyncio.Event()
            self._tasks.spawn(self._run_level(level), name=f"schedule-level-{level}")

    async def stop(self) -> None:
        """Stop delivering and persist the offsets."""
        if self._stopping is not None:
            self._stopping.set()
        await self._tasks.cancel_all()
        try:
            await self.persist()
        except OSError as exc:
            log.error("cannot persist %s: %s", self.path, exc)

    async def _pause(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; False when the service is stopping."""
        assert self._stopping is not None
        try:
            async with asyncio.timeout(max(seconds, 0.0)):
                await self._stopping.wait()
        except TimeoutError:
            return True
        return False

    async def _wait_event(self, level: int, seconds: float) -> None:
        try:
            async with asyncio.timeout(seconds):
                await self._events[level].wait()
        except TimeoutError:
            pass

    async def _run_level(self, level: int) -> None:
        queue_id = level - 1
        event = self._events[level]
        while self._stopping is not None and not self._stopping.is_set():
            offset = self.delay_offsets.get(level, 0)
            event.clear()
            try:
                result = self.store.get_message(SCHEDULE_TOPIC, queue_id, offset, 32)
            except Exception:
                log.exception("level %d: reading %s queue %d failed", level, SCHEDULE_TOPIC, queue_id)
                if not await self._pause(1.0):
                    return
                continue
            status = result.status
            if status is GetMessageStatus.FOUND:
                wait_s = await self._deliver_batch(level, result.records)
                await self._persist_quietly()
                if wait_s > 0:
                    # The head is not due yet; sleep until it is (or until stop).
                    if not await self._pause(wait_s):
                        return
                continue
            if status in (
                GetMessageStatus.OFFSET_TOO_SMALL,
                GetMessageStatus.OFFSET_OVERFLOW_BADLY,
                GetMessageStatus.NO_MATCHED_MESSAGE,
                GetMessageStatus.MESSAGE_WAS_REMOVING,
                GetMessageStatus.OFFSET_FOUND_NULL,
            ) and result.next_begin_offset != offset:
                log.warning("level %d: offset %d moved to %d (%s)", level, offset, result.next_begin_offset, status)
                self.delay_offsets[level] = result.next_begin_offset
                await self._persist_quietly()
                continue
            # Nothing new: wait for the dispatch listener (with a slow fallback poll).
            await self._wait_event(level, 1.0)

    async def _deliver_batch(self, level: int, records: list[bytes]) -> float:
        """Deliver the due head of ``records``; returns seconds until the next is due (0 = none pending)."""
        for record in records:
            try:
                msg = decode_record(record)
            except MessageFormatError as exc:
                log.error("level %d: skipping an undecodable record: %s", level, exc)
                self.delay_offsets[level] = self.delay_offsets.get(level, 0) + 1
                continue
            due = self.deliver_timestamp(level, msg.store_timestamp)
            now = _now_ms()
            if due > now:
                return (due - now) / 1000.0
            outcome = await self._deliver(msg)
            if outcome is None:
                return 1.0  # store busy or unavailable: retry the same message shortly
            self.delay_offsets[level] = msg.queue_offset + 1
        return 0.0

    async def _deliver(self, msg: MessageExt) -> bool | None:
        """Store ``msg`` to its real topic. True = done, False = skipped, None = retry later."""
        props = dict(msg.properties)
        real_topic = props.get(PROPERTY_REAL_TOPIC)
        try:
            real_qid = int(props.get(PROPERTY_REAL_QUEUE_ID, "0"))
        except ValueError:
            real_qid = 0
        if not real_topic:
            log.error("delayed message at %d has no REAL_TOPIC; skipped", msg.physical_offset)
            return False
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        props[PROPERTY_WAIT_STORE_MSG_OK] = "false"
        req = reput_request(msg, real_topic, real_qid, props)
        try:
            result = await self.store.put_message(req)
        except Exception:
            log.exception("delivering delayed message at %d failed", msg.physical_offset)
            return None
        if result.status in _STORED:
            self.delivered_total += 1
            return True
        if result.status in _HOPELESS:
            log.error(
                "delayed message at %d for %s cannot be stored (%s: %s); skipped",
                msg.physical_offset,
                real_topic,
                result.status,
                result.remark,
            )
            return False
        log.warning("delivering delayed message for %s: %s %s; will retry", real_topic, result.status, result.remark)
        return None

    async def _persist_quietly(self) -> None:
        try:
            await self.persist()
        except OSError as exc:
            log.error("cannot persist %s: %s", self.path, exc)

    def status(self) -> dict[str, Any]:
        """Per-level progress and lag, for the admin API and runtime info."""
        levels = {}
        for level in range(1, self.max_level + 1):
            try:
                max_offset = self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)
            except Exception:
                max_offset = 0
            offset = self.delay_offsets.get(level, 0)
            levels[str(level)] = {
                "delayMillis": self.delay_levels_ms[level - 1],
                "offset": offset,
                "maxOffset": max_offset,
                "pending": max(0, max_offset - offset),
            }
        return levels
