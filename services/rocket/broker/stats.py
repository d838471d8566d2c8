"""Broker statistics for runtime info and consume stats (RocketMQ's ``BrokerStatsManager``, reduced).

:class:`RateMeter` counts events per second over a sliding window (60 s by
default) and answers the average rate; :class:`MinuteCounter` keeps per-minute
sums for a day; :class:`BrokerStats` keeps totals, one meter per (group, topic)
for ``consumeTps``, and the per-topic / per-(topic, group) minute, hour and day
figures of VIEW_BROKER_STATS_DATA (``TOPIC_PUT_NUMS``, ``GROUP_GET_NUMS``).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Final


class RateMeter:
    """Events per second over the last ``window`` seconds (one bucket per second)."""

    def __init__(self, window: int = 60) -> None:
        self.window = window
        self._buckets: deque[list[int]] = deque()  # [second, count]

    def add(self, count: int = 1, now: float | None = None) -> None:
        """Count ``count`` events at ``now`` (``time.monotonic()`` seconds)."""
        second = int(time.monotonic() if now is None else now)
        buckets = self._buckets
        if buckets:
            last = buckets[-1]
            if last[0] == second:  # the usual case: nothing can have left the window since the last add
                last[1] += count
                return
        buckets.append([second, count])
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


class MinuteCounter:
    """Event counts per minute over the last day (at most 1440 buckets) plus per second over the
    last minute (a :class:`RateMeter`): sums over the last minute, hour and day, as the
    minute/hour/day snapshots of RocketMQ's ``StatsItem``."""

    DAY: Final = 1440

    def __init__(self, now: float | None = None) -> None:
        self._buckets: deque[list[int]] = deque()  # [minute, count]
        self._recent = RateMeter(60)
        #: When counting began (``time.monotonic()`` seconds).
        self.started = time.monotonic() if now is None else now

    def add(self, count: int, now: float | None = None) -> None:
        """Count ``count`` events at ``now`` (``time.monotonic()`` seconds)."""
        at = time.monotonic() if now is None else now
        self._recent.add(count, at)
        minute = int(at // 60)
        buckets = self._buckets
        if buckets:
            last = buckets[-1]
            if last[0] == minute:  # the usual case: nothing can have left the day since the last add
                last[1] += count
                return
        buckets.append([minute, count])
        while buckets and buckets[0][0] <= minute - self.DAY:
            buckets.popleft()

    def sum(self, minutes: int, now: float | None = None) -> int:
        """Events within the last ``minutes`` minutes: the last 60 s for 1, else whole minute
        buckets (the current one included)."""
        at = time.monotonic() if now is None else now
        if minutes == 1:
            return self._recent.total(at)
        minute = int(at // 60)
        return sum(c for m, c in self._buckets if m > minute - minutes)

    def snapshot(self, minutes: int, now: float | None = None) -> dict[str, float]:
        """``{"sum", "tps", "avgpt"}`` over the last ``minutes``: tps over the part of that span this
        counter has existed; ``avgpt`` (Java's average per add) is not kept: 0."""
        at = time.monotonic() if now is None else now
        total = self.sum(minutes, at)
        span = max(1.0, min(minutes * 60.0, at - self.started))
        return {"sum": total, "tps": round(total / span, 2), "avgpt": 0.0}


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
    #: Per topic: messages stored (``TOPIC_PUT_NUMS``).
    topic_put_minutes: dict[str, MinuteCounter] = field(default_factory=dict)
    #: Per (group, topic): messages pulled (``GROUP_GET_NUMS``).
    group_get_minutes: dict[tuple[str, str], MinuteCounter] = field(default_factory=dict)

    def on_put(self, count: int, nbytes: int, topic: str | None = None) -> None:
        """Messages stored (to ``topic``, when given)."""
        self.put_total += count
        self.put_bytes += nbytes
        now = time.monotonic()
        self.put_rate.add(count, now)
        if topic is not None:
            counter = self.topic_put_minutes.get(topic)
            if counter is None:
                counter = self.topic_put_minutes[topic] = MinuteCounter(now)
            counter.add(count, now)

    def on_get(self, group: str, topic: str, count: int, nbytes: int) -> None:
        """Messages returned by a pull of ``group`` on ``topic``."""
        self.get_total += count
        self.get_bytes += nbytes
        now = time.monotonic()
        self.get_rate.add(count, now)
        key = (group, topic)
        meter = self.group_get.get(key)
        if meter is None:
            meter = self.group_get[key] = RateMeter()
        meter.add(count, now)
        counter = self.group_get_minutes.get(key)
        if counter is None:
            counter = self.group_get_minutes[key] = MinuteCounter(now)
        counter.add(count, now)

    def stats_data(self, name: str, key: str) -> dict[str, dict[str, float]] | None:
        """VIEW_BROKER_STATS_DATA's BrokerStatsData (``statsMinute``, ``statsHour``, ``statsDay``) of
        ``TOPIC_PUT_NUMS`` (key: topic) or ``GROUP_GET_NUMS`` (key: ``topic@group``); None when
        nothing was counted under that name and key."""
        counter: MinuteCounter | None = None
        if name == "TOPIC_PUT_NUMS":
            counter = self.topic_put_minutes.get(key)
        elif name == "GROUP_GET_NUMS":
            topic, _, group = key.partition("@")
            counter = self.group_get_minutes.get((group, topic))
        if counter is None:
            return None
        return {"statsMinute": counter.snapshot(1), "statsHour": counter.snapshot(60),
                "statsDay": counter.snapshot(MinuteCounter.DAY)}

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
