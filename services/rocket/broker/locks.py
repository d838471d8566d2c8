"""Queue locks for orderly consumers: :class:`RebalanceLockManager` (LOCK_BATCH_MQ 41,
UNLOCK_BATCH_MQ 42).

An orderly consumer locks the queues it was allocated so that, during a
rebalance, two members never consume one queue at once. A lock belongs to a
client id within a consumer group and expires ``max_live_time`` seconds (60 s)
after its last renewal; clients renew every 20 s (RocketMQ 4.9.8
``RebalanceLockManager``). Locks live in memory only.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from rocket.protocol import MessageQueue


@dataclass(slots=True)
class LockEntry:
    """Who holds a queue and since when it was last renewed (``time.monotonic()`` seconds)."""

    client_id: str
    last_update: float = field(default_factory=time.monotonic)


class RebalanceLockManager:
    """In-memory queue locks per consumer group."""

    def __init__(self, max_live_time: float = 60.0) -> None:
        self.max_live_time = max_live_time
        self._table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def _expired(self, entry: LockEntry, now: float) -> bool:
        return now - entry.last_update > self.max_live_time

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """Lock or renew each queue for ``client_id``; returns the queues it now holds."""
        now = time.monotonic()
        locks = self._table.setdefault(group, {})
        held: set[MessageQueue] = set()
        for mq in mqs:
            entry = locks.get(mq)
            if entry is None or entry.client_id == client_id or self._expired(entry, now):
                locks[mq] = LockEntry(client_id, now)
                held.add(mq)
        return held

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues of ``mqs`` held by ``client_id``."""
        locks = self._table.get(group)
        if not locks:
            return
        for mq in mqs:
            entry = locks.get(mq)
            if entry is not None and entry.client_id == client_id:
                del locks[mq]
        if not locks:
            del self._table[group]

    def is_locked(self, group: str, mq: MessageQueue, client_id: str) -> bool:
        """True when ``client_id`` holds a live lock on ``mq``."""
        entry = self._table.get(group, {}).get(mq)
        return entry is not None and entry.client_id == client_id and not self._expired(entry, time.monotonic())

    def holders(self, group: str) -> dict[MessageQueue, str]:
        """Live locks of ``group``: queue → client id."""
        now = time.monotonic()
        return {mq: e.client_id for mq, e in self._table.get(group, {}).items() if not self._expired(e, now)}
