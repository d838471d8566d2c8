"""Subscriptions (tag expressions) and queue allocation for consumer groups.

Tag expressions (RocketMQ's ``FilterAPI``): ``*`` or an empty string
match every message; otherwise the expression is tags separated by ``||``
(``"TagA || TagB"``), each trimmed. The broker filters by the tags' hash
codes; clients re-check the tag strings, since different tags may share a hash.

Allocation: every consumer of a group sorts the group's client ids and the
topic's queues the same way and takes its own slice with
:func:`allocate_averagely` (Java's ``AllocateMessageQueueAveragely``), so the
queues are shared without any coordination beyond the broker's consumer list.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rocket.message import java_string_hash
from rocket.protocol import MessageQueue

SUB_ALL = "*"


class MessageModel(enum.StrEnum):
    """CLUSTERING: the group shares the queues (each message to one member).
    BROADCASTING: every member gets every message; offsets are kept locally."""

    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeFrom(enum.StrEnum):
    """Where a consumer group starts on a queue for which it has no stored offset.

    Note (``ConsumerManageProcessor.queryConsumerOffset``): on a young queue whose data still starts
    at offset 0 the broker answers offset 0 for a new group, so LAST_OFFSET then
    reads from the beginning too, exactly as Java clients do. TIMESTAMP treats
    that 0 as "no offset" and searches by time.
    """

    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


def parse_tag_expression(expression: str | None) -> frozenset[str]:
    """The tags of ``"TagA || TagB"``; the empty set means "every message" (``*``/empty)."""
    text = (expression or "").strip()
    if not text or text == SUB_ALL:
        return frozenset()
    return frozenset(tag.strip() for tag in text.split("||") if tag.strip())


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """One topic subscription: the expression, its parsed tags and their hash codes.

    ``sub_version``: ms timestamp of the subscription, sent with pulls and heartbeats.
    """

    topic: str
    expression: str = SUB_ALL
    tags: frozenset[str] = frozenset()
    codes: frozenset[int] = frozenset()
    sub_version: int = field(default_factory=lambda: int(time.time() * 1000))

    @classmethod
    def of(cls, topic: str, expression: str | None = SUB_ALL) -> SubscriptionData:
        """Parse ``expression`` (``*``, ``TagA``, ``TagA || TagB``) for ``topic``."""
        tags = parse_tag_expression(expression)
        text = " || ".join(sorted(tags)) if tags else SUB_ALL
        return cls(topic=topic, expression=text, tags=tags, codes=frozenset(java_string_hash(t) for t in tags))

    def matches(self, tags: str | None) -> bool:
        """True when a message with TAGS ``tags`` is selected by this subscription."""
        return not self.tags or (tags is not None and tags in self.tags)

    def to_json(self) -> dict[str, Any]:
        """The heartbeat's ``subscriptionDataSet`` entry (``HeartbeatData``, Java form)."""
        return {
            "classFilterMode": False,
            "codeSet": sorted(self.codes),
            "expressionType": "TAG",
            "subString": self.expression,
            "subVersion": self.sub_version,
            "tagsSet": sorted(self.tags),
            "topic": self.topic,
        }


def allocate_averagely(current_id: str, client_ids: Sequence[str],
                       queues: Sequence[MessageQueue]) -> list[MessageQueue]:
    """The queues ``current_id`` owns when ``client_ids`` share ``queues`` evenly.

    Both lists are sorted first. The first ``len(queues) % len(client_ids)``
    clients get one extra queue; every client gets a contiguous run. A client
    not in ``client_ids`` gets nothing. With more clients than queues, the
    last clients get nothing.
    """
    cids = sorted(set(client_ids))
    mqs = sorted(queues)
    if current_id not in cids or not mqs:
        return []
    index = cids.index(current_id)
    n, c = len(mqs), len(cids)
    mod = n % c
    if n <= c:
        size = 1
    elif mod > 0 and index < mod:
        size = n // c + 1
    else:
        size = n // c
    start = index * size if mod > 0 and index < mod else index * size + mod
    count = min(size, n - start)
    return [mqs[(start + i) % n] for i in range(max(count, 0))]
