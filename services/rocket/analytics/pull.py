"""Reading queue offset ranges from the brokers with the project's client (``rocket.client``).

Spark calls data sources synchronously, the client is asyncio: :class:`SyncPuller`
owns a private event loop and a :class:`rocket.client.PullConsumer` and offers
blocking calls (queues, offsets, :meth:`SyncPuller.read_range`).

Reading a range ``[start, end)`` of one queue:

* pulls go to a **slave** of the broker group when the route lists one and
  ``prefer_slave`` is set (the master's load is left to producers and live
  consumers), else to the master. A slave that has not replicated the range
  yet (answers "no new message") or does not know the topic yet (it copies
  topic configs from its master every 10 s) is left for the master;
* up to ``window`` pulls of ``batch_size`` messages are in flight at once
  (offsets ``o, o+n, o+2n …``); a pull that returns fewer messages (the
  broker's 256 KiB / 32 message transfer limits) leaves a gap that is pulled
  again before moving on, so every offset is read exactly once and in order;
* a broker that fails (connection refused or closed, timeout) is avoided for a
  few seconds, the route is refreshed, and the pull is retried on the other
  broker of the group (master ↔ slave) up to ``max_attempts`` times; then
  :class:`RocketReadError` names the queue and the offset.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
from collections import deque
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from rocket.analytics.offsets import OffsetSpec, clamp, queue_key
from rocket.client import PullConsumer, PullResult, PullStatus, TopicRouteError
from rocket.client.errors import NameServerUnavailableError
from rocket.message import MessageExt
from rocket.protocol import MASTER_ID, MessageQueue
from rocket.remoting import RemotingCommandError, RemotingConnectError, RemotingTimeoutError

log = logging.getLogger("rocket.analytics.pull")

T = TypeVar("T")

#: Consumer group the readers use (no offsets are committed under it).
DEFAULT_GROUP = "rocket-analytics"
#: Pull batch: the broker's in-memory transfer limit (32 messages).
DEFAULT_BATCH = 32
#: Pulls in flight per queue.
DEFAULT_WINDOW = 8
DEFAULT_ATTEMPTS = 4
DEFAULT_TIMEOUT = 10.0


class RocketSourceError(ValueError):
    """A read that cannot be planned: unknown topic, no queues, no NameServer answers."""


class RocketReadError(RuntimeError):
    """A queue range could not be read; the message names the queue and offset.

    Attributes: ``queue`` (``"topic@broker:queueId"``) and ``offset``.
    """

    def __init__(self, queue: str, offset: int, detail: str) -> None:
        self.queue = queue
        self.offset = offset
        super().__init__(f"reading queue {queue} failed at offset {offset}: {detail}")


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Offsets ``[start, end)`` of one queue (``end`` exclusive)."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int

    @property
    def mq(self) -> MessageQueue:
        """The client's queue object."""
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}[{self.start},{self.end})"


_RETRYABLE = (RemotingConnectError, RemotingTimeoutError, ConnectionError, TimeoutError, OSError)


class SyncPuller:
    """A :class:`PullConsumer` on a private event loop, with blocking methods.

    ``namesrv``: ``"host:port;host:port"``. Use as a context manager or call
    :meth:`close`. Not thread-safe.
    """

    def __init__(self, namesrv: str, *, group: str = DEFAULT_GROUP, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.namesrv = namesrv
        self.timeout = timeout
        self.loop = asyncio.new_event_loop()
        self.consumer = PullConsumer(group, namesrv, timeout=timeout, heartbeat_interval=3600.0,
                                     poll_namesrv_interval=3600.0)
        self.run(self.consumer.start())

    def run(self, coro: Coroutine[Any, Any, T] | asyncio.Future[T]) -> T:
        """Run ``coro`` (or a task/future of this loop) on the private loop until done."""
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        """Shut the consumer down (best effort) and close the loop."""
        if self.loop.is_closed():
            return
        async def shutdown() -> None:
            async with asyncio.timeout(5.0):
                await self.consumer.shutdown()

        with contextlib.suppress(Exception):
            self.run(shutdown())
        with contextlib.suppress(Exception):
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    def __enter__(self) -> SyncPuller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- planning ------------------------------------------------------------------------

    def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues, sorted.

        Raises :class:`RocketSourceError` when the topic does not exist, has no
        readable queue, or no NameServer answers.
        """
        try:
            queues = self.run(self.consumer.queues(topic))
        except TopicRouteError as exc:
            raise RocketSourceError(f"topic {topic!r} does not exist (NameServers {self.namesrv}): {exc}") from None
        except NameServerUnavailableError as exc:
            raise RocketSourceError(f"cannot plan the read of {topic!r}: {exc}") from None
        if not queues:
            raise RocketSourceError(f"topic {topic!r} has no readable queue (NameServers {self.namesrv})")
        return queues

    def bounds(self, mq: MessageQueue) -> tuple[int, int]:
        """``(min offset, max offset)`` of a queue (max exclusive). Raises :class:`RocketReadError`."""
        try:
            return (self.run(self.consumer.min_offset(mq)), self.run(self.consumer.max_offset(mq)))
        except (*_RETRYABLE, RemotingCommandError) as exc:
            raise RocketReadError(str(mq), -1, f"offsets query failed: {exc}") from exc

    def resolve(self, spec: OffsetSpec, mq: MessageQueue, lo: int, hi: int, *, kind: str | None = None) -> int:
        """The offset ``spec`` names for ``mq`` whose bounds are ``[lo, hi]``."""
        kind = kind or spec.kind
        if kind == "json":
            given = spec.lookup(mq.topic, mq.broker_name, mq.queue_id)
            return self.resolve(spec, mq, lo, hi, kind=spec.default) if given is None else clamp(given, lo, hi)
        if kind == "earliest":
            return lo
        if kind == "latest":
            return hi
        if kind == "timestamp" and spec.timestamp_ms is not None:
            try:
                found = self.run(self.consumer.search_offset(mq, spec.timestamp_ms))
            except (*_RETRYABLE, RemotingCommandError) as exc:
                raise RocketReadError(str(mq), -1, f"search by timestamp failed: {exc}") from exc
            return clamp(found, lo, hi)
        raise ValueError(f"unknown offset kind {kind!r}")

    def plan(self, topics: list[str], starting: OffsetSpec, ending: OffsetSpec,
             max_per_range: int | None = None, *, skip_missing: bool = False) -> list[QueueRange]:
        """Non-empty ranges of every queue of ``topics``, split every ``max_per_range`` offsets.

        ``skip_missing``: a topic that does not exist (any more) has no range
        instead of raising :class:`RocketSourceError`.
        """
        ranges: list[QueueRange] = []
        for topic in topics:
            try:
                queues = self.queues(topic)
            except RocketSourceError:
                if not skip_missing:
                    raise
                log.warning("topic %s does not exist (any more): nothing to read", topic)
                continue
            for mq in queues:
                lo, hi = self.bounds(mq)
                start = self.resolve(starting, mq, lo, hi)
                end = self.resolve(ending, mq, lo, hi)
                ranges.extend(split_range(QueueRange(topic, mq.broker_name, mq.queue_id, start, end), max_per_range))
        return ranges

    def latest(self, topics: list[str]) -> dict[str, dict[str, int]]:
        """Max offset of every queue: ``{topic: {"broker:queueId": offset}}``."""
        out: dict[str, dict[str, int]] = {}
        for topic in topics:
            out[topic] = {}
            for mq in self.queues(topic):
                out[topic][queue_key(mq.broker_name, mq.queue_id)] = self.bounds(mq)[1]
        return out

    # -- reading -----------------------------------------------------------------------

    def _choose(self, mq: MessageQueue, prefer_slave: bool, avoid_slave: bool) -> None:
        """Point the consumer's next pull of ``mq`` at a slave (or back at the master).

        The consumer pulls from the broker id last chosen or suggested for the queue
        (:meth:`PullConsumer.pull_from`, ``suggestWhichBrokerId``).
        """
        slaves = [b for b in self.consumer.broker_ids(mq.broker_name) if b != MASTER_ID]
        wanted = slaves[0] if (prefer_slave and slaves and not avoid_slave) else MASTER_ID
        self.consumer.pull_from(mq, wanted)

    async def _pull(self, rng: QueueRange, offset: int, count: int, *, prefer_slave: bool,
                    max_attempts: int) -> PullResult:
        mq = rng.mq
        avoid_slave = False
        last: BaseException | None = None
        for attempt in range(max_attempts):
            self._choose(mq, prefer_slave, avoid_slave)
            addr, broker_id = self.consumer.pull_address(mq)
            try:
                result = await self.consumer.pull(mq, offset, count, timeout=self.timeout)
            except _RETRYABLE as exc:
                last = exc
                self.consumer.mark_broker_down(addr, 10.0)
                log.warning("pull of %s at %d from %s failed (%s); retrying", mq, offset, addr, exc)
                await asyncio.sleep(min(0.2 * (attempt + 1), 1.0))
                with contextlib.suppress(Exception):
                    await self.consumer.refresh_route(mq.topic)
                continue
            except RemotingCommandError as exc:
                if broker_id != MASTER_ID and not avoid_slave:
                    # a slave copies topic configs from its master every slaveSyncInterval (10 s):
                    # a topic created since then is unknown to it (TOPIC_NOT_EXIST); ask the master
                    avoid_slave = True
                    last = exc
                    log.info("slave %s refused pull of %s at %d (%s); asking the master", addr, mq, offset, exc)
                    continue
                raise RocketReadError(str(mq), offset, f"broker {addr} answered {exc}") from exc
            if result.status is not PullStatus.FOUND and broker_id != MASTER_ID:
                # the slave has not replicated this offset yet: ask the master
                avoid_slave = True
                last = RuntimeError(f"slave {addr} answered {result.status}")
                continue
            return result
        raise RocketReadError(str(mq), offset, f"{max_attempts} attempts failed, last: {last}") from last

    def _result(self, task: asyncio.Task[PullResult], rng: QueueRange, cursor: int,
                fail_on_data_loss: bool) -> PullResult | None:
        """The pull's result; ``None`` when the topic is gone and ``fail_on_data_loss`` is off (logged)."""
        try:
            return self.run(task)
        except RocketReadError as exc:
            if fail_on_data_loss or not topic_gone(exc):
                raise
            log.warning("%s: the topic was deleted, offsets %d..%d skipped", rng.mq, cursor, rng.end)
            return None

    def read_range(self, rng: QueueRange, *, batch_size: int = DEFAULT_BATCH, window: int = DEFAULT_WINDOW,
                   prefer_slave: bool = True, max_attempts: int = DEFAULT_ATTEMPTS,
                   fail_on_data_loss: bool = True) -> Iterator[list[MessageExt]]:
        """Yield the messages of ``rng`` in offset order, one list per pull.

        Raises :class:`RocketReadError` when a pull keeps failing, when offsets
        of the range are gone (below the queue's min offset) and
        ``fail_on_data_loss``, or when the queue ends before ``rng.end``. Without
        ``fail_on_data_loss`` a topic deleted during the read ends the range
        early (logged), as offsets that are gone do.
        """
        if rng.start >= rng.end:
            return
        try:
            self.run(self.consumer.ensure_route(rng.topic))
        except TopicRouteError:
            if fail_on_data_loss:
                raise
            log.warning("%s: the topic is gone, offsets %d..%d skipped", rng.mq, rng.start, rng.end)
            return
        pending: deque[tuple[int, asyncio.Task[PullResult]]] = deque()
        cursor = rng.start
        next_req = rng.start
        kw: dict[str, Any] = {"prefer_slave": prefer_slave, "max_attempts": max_attempts}
        try:
            while cursor < rng.end:
                while len(pending) < max(1, window) and next_req < rng.end:
                    n = min(batch_size, rng.end - next_req)
                    pending.append((next_req, self.loop.create_task(self._pull(rng, next_req, n, **kw))))
                    next_req += n
                req_off, task = pending[0]
                if req_off > cursor:  # an earlier pull returned less than asked: fill the gap first
                    n = min(batch_size, req_off - cursor)
                    req_off, task = cursor, self.loop.create_task(self._pull(rng, cursor, n, **kw))
                else:
                    pending.popleft()
                result = self._result(task, rng, cursor, fail_on_data_loss)
                if result is None:  # the topic was deleted, and that is no failure here
                    return
                if result.status is PullStatus.OFFSET_ILLEGAL and result.next_begin_offset > cursor:
                    if fail_on_data_loss:
                        raise RocketReadError(str(rng.mq), cursor,
                                              f"offsets [{cursor}, {min(result.next_begin_offset, rng.end)}) are "
                                              f"no longer stored (queue min offset {result.min_offset}); set "
                                              "failOnDataLoss=false to skip them")
                    log.warning("%s: offsets %d..%d are gone, skipped", rng.mq, cursor, result.next_begin_offset)
                    cursor = result.next_begin_offset
                    continue
                msgs = [m for m in result.messages if cursor <= m.queue_offset < rng.end]
                advance = result.next_begin_offset if result.status is not PullStatus.NO_NEW_MSG else req_off
                if msgs:
                    advance = max(advance, msgs[-1].queue_offset + 1)
                if advance <= cursor and req_off <= cursor:
                    raise RocketReadError(str(rng.mq), cursor,
                                          f"the queue ends before offset {rng.end} (pull status {result.status}, "
                                          f"max offset {result.max_offset})")
                cursor = max(cursor, advance)
                if msgs:
                    yield msgs
        finally:
            for _, task in pending:
                task.cancel()
            if pending:
                with contextlib.suppress(BaseException):
                    self.run(asyncio.gather(*(t for _, t in pending), return_exceptions=True))


def topic_gone(exc: BaseException) -> bool:
    """Whether a read failed because its topic no longer exists (the master answered TOPIC_NOT_EXIST (17),
    as ``ResponseCode.TOPIC_NOT_EXIST`` in RocketMQ's ``ResponseCode``, or the route is gone)."""
    cause = exc.__cause__
    if isinstance(cause, TopicRouteError):
        return True
    return isinstance(cause, RemotingCommandError) and cause.code == 17


def split_range(rng: QueueRange, max_per_range: int | None) -> list[QueueRange]:
    """``rng`` cut into pieces of at most ``max_per_range`` offsets; empty ranges are dropped."""
    if rng.end <= rng.start:
        return []
    if not max_per_range or max_per_range <= 0:
        return [rng]
    out: list[QueueRange] = []
    s = rng.start
    while s < rng.end:
        e = min(rng.end, s + max_per_range)
        out.append(QueueRange(rng.topic, rng.broker_name, rng.queue_id, s, e))
        s = e
    return out



_SHARED: dict[tuple[str, str, float, int], SyncPuller] = {}


def shared_puller(namesrv: str, *, group: str = DEFAULT_GROUP, timeout: float = DEFAULT_TIMEOUT) -> SyncPuller:
    """A :class:`SyncPuller` kept for the life of this process (one per NameServers/group/timeout).

    Spark reuses its Python workers across tasks; sharing the client saves a
    connect, route fetch and unregister per partition. Closed at exit.
    """
    key = (namesrv, group, timeout, os.getpid())
    puller = _SHARED.get(key)
    if puller is None or puller.loop.is_closed():
        puller = SyncPuller(namesrv, group=group, timeout=timeout)
        _SHARED[key] = puller
    return puller


@atexit.register
def _close_shared() -> None:
    for puller in list(_SHARED.values()):
        with contextlib.suppress(Exception):
            puller.close()
    _SHARED.clear()
