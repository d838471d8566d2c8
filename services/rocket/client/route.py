"""The producer's queue selection: the publish view of a route, round robin, brokers to avoid.

Routes themselves (:class:`~rocket.protocol.TopicRouteData` and its parts) are
wire models in :mod:`rocket.protocol.route`; this module adds what a client
keeps per topic: :class:`PublishInfo` (its write queues and a round-robin
index) and :class:`FaultTracker` (brokers that failed a send recently).

The module has no I/O; :mod:`rocket.client.base` fetches routes.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from rocket.protocol import MessageQueue, TopicRouteData

# -- the producer's queue selection ------------------------------------------------------


class FaultTracker:
    """Brokers to avoid for a while after a failed send ("recently failed brokers").

    ``mark(broker, seconds)`` makes ``available(broker)`` false for that many
    seconds. The clock is ``time.monotonic`` unless another is given (tests).
    """

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[str, float] = {}

    def mark(self, broker_name: str, seconds: float) -> None:
        """Avoid ``broker_name`` for ``seconds`` seconds from now."""
        self._until[broker_name] = self._clock() + seconds

    def clear(self, broker_name: str) -> None:
        """Forget a broker's failure (after it answered a send)."""
        self._until.pop(broker_name, None)

    def available(self, broker_name: str) -> bool:
        """False while ``broker_name`` is inside its avoidance window."""
        until = self._until.get(broker_name)
        if until is None:
            return True
        if self._clock() >= until:
            del self._until[broker_name]
            return True
        return False


@dataclass(slots=True)
class PublishInfo:
    """A producer's view of one topic: its write queues and a round-robin index.

    ``from_template`` is true when the queues come from the ``TBW102`` route
    (the topic does not exist yet and the broker will create it on first send).
    """

    topic: str
    route: TopicRouteData
    queues: list[MessageQueue]
    from_template: bool = False
    fetched_at: float = field(default_factory=time.monotonic)
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(0))

    @classmethod
    def build(cls, topic: str, route: TopicRouteData, *, from_template: bool = False,
              default_queue_nums: int = 4) -> PublishInfo:
        """The publish view of ``route`` for ``topic``.

        From a template route, each group offers ``min(default_queue_nums,
        writeQueueNums)`` queues, as Java clients do.
        """
        queues = route.write_queues(topic)
        if from_template:
            queues = [q for q in queues if q.queue_id < default_queue_nums]
        return cls(topic=topic, route=route, queues=queues, from_template=from_template)

    def select(self, faults: FaultTracker | None = None, avoid: str | None = None) -> MessageQueue:
        """The next queue round-robin, skipping avoided and recently failed brokers.

        ``avoid`` is the broker that failed the previous attempt of this send;
        ``faults`` the brokers that failed recently. When every queue is on an
        avoided broker the plain round-robin choice is returned. Raises
        ``LookupError`` when the topic has no writable queue.
        """
        queues = self.queues
        n = len(queues)
        if n == 0:
            raise LookupError(f"topic {self.topic} has no writable queue")
        start = next(self._counter)
        fallback: MessageQueue | None = None
        for i in range(n):
            mq = queues[(start + i) % n]
            ok_fault = faults is None or faults.available(mq.broker_name)
            if mq.broker_name != avoid and ok_fault:
                if i:
                    # keep the round robin moving past the skipped queues
                    self._counter = itertools.count(start + i + 1)
                return mq
            if fallback is None and mq.broker_name != avoid:
                fallback = mq
        return fallback or queues[start % n]
