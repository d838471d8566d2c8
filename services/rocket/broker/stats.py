"""Broker statistics for runtime info and consume stats (RocketMQ's ``BrokerStatsManager``, reduced).

:class:`RateMeter` counts events per second over a sliding window (60 s by
default) and answers the average rate; :class:`BrokerStats` keeps totals and
one meter per (group, topic) for ``consumeTps``.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field


class RateMeter:
    """Events per second over the last ``window`` seconds (one bucket per second)."""

    def __init__(self, window: int = 60) -> None:
        self.window = window
        self._buckets: deque[list[int]] = deque()  # [second, count]

    def add(self, count: int = 1, now: float | None = None) -> None:
        """Count ``count`` events at ``now`` (``time.monotonic()`` seconds)."""
        second = int(time.monotonic() if now is None else now)
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += count
        else:
            self._buckets.append([second, count])
        self._trim(second)

    def _trim(self, second: int) -> None:
        while self._buckets and self._buckets[0][0] <= second - self.window:
            self._buckets.popleft()

    def rate(self, now: float | None = None) -> float:
        """Average events per second over the window."""
        second = int(time.monotonic() if now is None else now)
        self._trim(second)
        return sum(count for _, count in self._buckets) / float(self.window)

    def total(self, now: float | None = None) -> int:
        """Events within the window."""
        second = int(time.monotonic() if now is None else now)
        self._trim(second)
        return sum(count for _, count in self._buckets)


@dataclass(slots=True)
class BrokerStats:
    """Message totals since start and per-(group, topic) pull rates."""

    put_total: int = 0
    get_total: int = 0
    put_bytes: int = 0
    get_bytes: int = 0
    boot_time_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    put_rate: RateMeter = field(default_factory=RateMeter)
    get_rate: RateMeter = field(default_factory=RateMeter)
    group_get: dict[tuple[str, str], RateMeter] = field(default_factory=dict)

    def on_put(self, count: int, nbytes: int) -> None:
        """Messages stored."""
        self.put_total += count
        self.put_bytes += nbytes
        self.put_rate.add(count)

    def on_get(self, group: str, topic: str, count: int, nbytes: int) -> None:
        """Messages returned by a pull of ``group`` on ``topic``."""
        self.get_total += count
        self.get_bytes += nbytes
        self.get_rate.add(count)
        meter = self.group_get.get((group, topic))
        if meter is None:
            meter = self.group_get[(group, topic)] = RateMeter()
        meter.add(count)

    def consume_tps(self, group: str, topic: str) -> float:
        """Messages per second pulled by ``group`` from ``topic`` over the last minute."""
        meter = self.group_get.get((group, topic))
        return meter.rate() if meter else 0.0


@dataclass(slots=True)
class ConsumeStatRow:
    """One queue of a group's consume stats (GET_CONSUME_STATS, /api/v1, metrics)."""

    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def lag(self) -> int:
        """Messages not consumed yet."""
        return max(0, self.broker_offset - self.consumer_offset)
