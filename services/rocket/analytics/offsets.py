"""Offset options of the ``rocket`` source: ``startingOffsets`` / ``endingOffsets``.

Accepted forms (as Spark's Kafka source, with RocketMQ's queue names):

* ``earliest`` — each queue's min offset; ``latest`` — each queue's max offset
  (exclusive: the next offset to be written);
* a timestamp — milliseconds since the epoch (``1718000000000``) or an ISO-8601
  date-time (``2024-06-10T06:13:20Z``, UTC when no zone is given): per queue,
  the offset of the message whose store time is nearest (the broker's
  SEARCH_OFFSET_BY_TIMESTAMP, code 29);
* JSON per queue: ``{"<topic>": {"<brokerName>:<queueId>": <offset>, ...}, ...}``
  where ``-2`` means earliest and ``-1`` latest. Queues the JSON does not name
  take the option's default (earliest for starting, latest for ending).

Offsets are clamped to ``[min, max]`` of their queue when resolved. The same
JSON shape is the streaming reader's offset (kept in Spark's checkpoint).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

EARLIEST = -2
LATEST = -1


class OffsetSpecError(ValueError):
    """An offsets option that is none of the accepted forms (the message says which)."""


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """A parsed offsets option.

    ``kind`` is ``"earliest"``, ``"latest"``, ``"timestamp"`` (``timestamp_ms``
    set) or ``"json"`` (``per_queue`` maps topic → ``"broker:queueId"`` → offset).
    ``default`` is the kind used for queues that a JSON spec does not name.
    """

    kind: str
    timestamp_ms: int | None = None
    per_queue: dict[str, dict[str, int]] = field(default_factory=dict)
    default: str = "earliest"

    def lookup(self, topic: str, broker_name: str, queue_id: int) -> int | None:
        """The JSON offset given for a queue, ``None`` when not named (or not JSON)."""
        return self.per_queue.get(topic, {}).get(queue_key(broker_name, queue_id))


def queue_key(broker_name: str, queue_id: int) -> str:
    """``"broker-a:3"``: how a queue is named inside one topic of the offsets JSON."""
    return f"{broker_name}:{queue_id}"


def split_queue_key(key: str) -> tuple[str, int]:
    """Inverse of :func:`queue_key`. Raises :class:`OffsetSpecError` when malformed."""
    broker, sep, qid = key.rpartition(":")
    if not sep or not broker or not qid.lstrip("-").isdigit():
        raise OffsetSpecError(f"queue {key!r} is not '<brokerName>:<queueId>'")
    return broker, int(qid)


def parse_timestamp(text: str) -> int | None:
    """Milliseconds since the epoch from ``text`` (digits or ISO-8601), ``None`` when neither."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def parse_offsets(value: str | None, *, default: str, option: str = "offsets") -> OffsetSpec:
    """Parse an offsets option; ``None`` or empty gives ``default`` (``earliest``/``latest``).

    Raises :class:`OffsetSpecError` naming ``option`` for anything else that
    does not parse (bad JSON, an offset that is not an integer, …).
    """
    if value is None or not value.strip():
        return OffsetSpec(kind=default, default=default)
    text = value.strip()
    low = text.lower()
    if low in ("earliest", "latest"):
        return OffsetSpec(kind=low, default=default)
    if text.startswith("{"):
        try:
            obj: Any = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OffsetSpecError(f"{option}: not valid JSON ({exc})") from None
        return OffsetSpec(kind="json", per_queue=_per_queue(obj, option), default=default)
    ts = parse_timestamp(text)
    if ts is not None:
        return OffsetSpec(kind="timestamp", timestamp_ms=ts, default=default)
    raise OffsetSpecError(
        f"{option}={value!r}: expected 'earliest', 'latest', a timestamp (ms or ISO-8601) or "
        '\'{"<topic>": {"<brokerName>:<queueId>": <offset>}}\''
    )


def _per_queue(obj: Any, option: str) -> dict[str, dict[str, int]]:
    if not isinstance(obj, dict):
        raise OffsetSpecError(f"{option}: the JSON must be an object of topics")
    out: dict[str, dict[str, int]] = {}
    for topic, queues in obj.items():
        if not isinstance(queues, dict):
            raise OffsetSpecError(f"{option}: topic {topic!r} must map '<brokerName>:<queueId>' to offsets")
        per: dict[str, int] = {}
        for key, off in queues.items():
            try:
                broker, qid = split_queue_key(str(key))
            except OffsetSpecError as exc:
                raise OffsetSpecError(f"{option}: {exc}") from None
            if isinstance(off, bool) or not isinstance(off, int) or off < EARLIEST:
                raise OffsetSpecError(f"{option}: offset of {topic} {key} must be an integer >= -2, not {off!r}")
            per[queue_key(broker, qid)] = off
        out[str(topic)] = per
    return out


def clamp(offset: int, min_offset: int, max_offset: int) -> int:
    """``offset`` with -2/-1 resolved to ``min_offset``/``max_offset`` and then clamped to that range."""
    if offset == EARLIEST:
        return min_offset
    if offset == LATEST:
        return max_offset
    return max(min_offset, min(offset, max_offset))
