"""Long polling: :class:`PullRequestHoldService` parks pulls that found nothing.

A PULL_MESSAGE with the SUSPEND bit whose result would be PULL_NOT_FOUND (19)
is not answered; it is parked under its (topic, queueId) until

* a message is dispatched to that queue at or past the requested offset and
  its tag code matches the request's subscription (the store's dispatch
  listener calls :meth:`notify_message_arriving`), or
* its deadline passes (``suspendTimeoutMillis``, or ``shortPollingTimeMills``
  when long polling is disabled), or
* the broker shuts down (:meth:`wake_all`).

The pull processor then runs the pull once more without suspension and
answers whatever it yields. A parked request belongs to its connection's task:
when the client goes away the task is cancelled and the request removed, so an
abandoned pull costs nothing (RocketMQ 4.9.8 ``PullRequestHoldService``, which
instead re-checks every 5 s; here every request has its own timer).
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field

from rocket.broker.filter import SubscriptionData
from rocket.remoting import RemotingConnection


class WakeReason(enum.StrEnum):
    """Why a parked pull was woken."""

    ARRIVED = "ARRIVED"
    TIMEOUT = "TIMEOUT"
    SHUTDOWN = "SHUTDOWN"


@dataclass(eq=False, slots=True)
class PullRequest:
    """A parked pull: where it reads, what it wants, and when it must be answered.

    ``deadline`` is on the loop's clock (seconds); ``future`` gets the wake reason.
    """

    topic: str
    queue_id: int
    offset: int
    subscription: SubscriptionData
    deadline: float
    future: asyncio.Future[WakeReason]
    connection: RemotingConnection | None = None
    parked_at: float = field(default_factory=time.monotonic)
    timer: asyncio.TimerHandle | None = None

    def wake(self, reason: WakeReason) -> None:
        """Resolve the request (once)."""
        if not self.future.done():
            self.future.set_result(reason)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class PullRequestHoldService:
    """Parked pull requests by ``(topic, queueId)``."""

    def __init__(self) -> None:
        self._table: dict[tuple[str, int], list[PullRequest]] = {}
        self.woken_by_arrival = 0
        self.woken_by_timeout = 0

    def park(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        subscription: SubscriptionData,
        timeout: float,
        connection: RemotingConnection | None = None,
    ) -> PullRequest:
        """Park a request for up to ``timeout`` seconds; await ``request.future``, then :meth:`remove` it."""
        loop = asyncio.get_running_loop()
        req = PullRequest(
            topic=topic,
            queue_id=queue_id,
            offset=offset,
            subscription=subscription,
            deadline=loop.time() + max(timeout, 0.0),
            future=loop.create_future(),
            connection=connection,
        )
        self._table.setdefault((topic, queue_id), []).append(req)
        req.timer = loop.call_at(req.deadline, self._expire, req)
        return req

    def _expire(self, req: PullRequest) -> None:
        req.timer = None
        if not req.future.done():
            self.woken_by_timeout += 1
            req.wake(WakeReason.TIMEOUT)
        self.remove(req)

    def remove(self, req: PullRequest) -> None:
        """Forget ``req`` (idempotent); cancels its timer."""
        if req.timer is not None:
            req.timer.cancel()
            req.timer = None
        key = (req.topic, req.queue_id)
        waiting = self._table.get(key)
        if waiting is None:
            return
        try:
            waiting.remove(req)
        except ValueError:
            return
        if not waiting:
            del self._table[key]

    def notify_message_arriving(self, topic: str, queue_id: int, queue_offset: int, tags_code: int | None) -> int:
        """A message was dispatched to ``topic``/``queue_id`` at ``queue_offset``.

        Wakes every request waiting at or before that offset whose subscription
        matches ``tags_code``; returns how many were woken.
        """
        waiting = self._table.get((topic, queue_id))
        if not waiting:
            return 0
        woken = 0
        for req in list(waiting):
            if queue_offset >= req.offset and req.subscription.is_matched_by_tags_code(tags_code):
                req.wake(WakeReason.ARRIVED)
                self.remove(req)
                woken += 1
        self.woken_by_arrival += woken
        return woken

    def wake_all(self, reason: WakeReason = WakeReason.SHUTDOWN) -> int:
        """Wake every parked request (shutdown); returns how many."""
        count = 0
        for waiting in list(self._table.values()):
            for req in list(waiting):
                req.wake(reason)
                self.remove(req)
                count += 1
        return count

    def drop_connection(self, connection: RemotingConnection) -> int:
        """Forget every request of ``connection`` (it closed); returns how many."""
        count = 0
        for waiting in list(self._table.values()):
            for req in list(waiting):
                if req.connection is connection:
                    if not req.future.done():
                        req.future.cancel()
                    self.remove(req)
                    count += 1
        return count

    def __len__(self) -> int:
        return sum(len(v) for v in self._table.values())

    def keys(self) -> list[tuple[str, int]]:
        """Queues with parked requests."""
        return list(self._table)
