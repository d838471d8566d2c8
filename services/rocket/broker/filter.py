"""Tag filtering: subscription expressions and their ConsumeQueue tag codes.

A subscription ``"TagA || TagB"`` becomes the tag set ``{"TagA", "TagB"}`` and
the code set of their Java ``String.hashCode`` values; ``"*"`` or empty means
"everything". A ConsumeQueue entry matches when its tag code is in the code
set (RocketMQ 4.9.8 ``FilterAPI`` and
``DefaultMessageFilter``). Clients re-check the tag strings themselves, so a
hash collision only costs a wasted transfer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rocket.message import java_string_hash

#: The "subscribe to everything" expression.
SUB_ALL = "*"
#: Expression types; only TAG is evaluated by this broker.
EXPRESSION_TYPE_TAG = "TAG"
EXPRESSION_TYPE_SQL92 = "SQL92"


class SubscriptionParseError(ValueError):
    """A subscription expression that cannot be parsed (answered with code 23)."""


@dataclass(slots=True)
class SubscriptionData:
    """One topic subscription: expression, tags, their hash codes, version (ms).

    ``code_set`` empty with ``sub_string == "*"`` matches everything.
    """

    topic: str
    sub_string: str = SUB_ALL
    tags_set: list[str] = field(default_factory=list)
    code_set: set[int] = field(default_factory=set)
    sub_version: int = 0
    expression_type: str = EXPRESSION_TYPE_TAG
    class_filter_mode: bool = False

    @property
    def matches_all(self) -> bool:
        """True for ``*`` (or an empty expression)."""
        return self.sub_string == SUB_ALL

    def tags_codes(self) -> set[int] | None:
        """The code set to hand to the store, ``None`` for "everything"."""
        return None if self.matches_all else set(self.code_set)

    def is_matched_by_tags_code(self, tags_code: int | None) -> bool:
        """Does a ConsumeQueue entry with ``tags_code`` match? (``None`` = unknown: yes)."""
        if tags_code is None or self.matches_all:
            return True
        return tags_code in self.code_set

    def to_json(self) -> dict[str, Any]:
        """Java ``SubscriptionData`` field names."""
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": sorted(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": list(self.tags_set),
            "topic": self.topic,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SubscriptionData:
        """Read the Java or C++ heartbeat form (C++ sends only topic, subString
        and a string subVersion; tags and codes are then derived here).

        Raises :class:`SubscriptionParseError` for a missing topic or a bad expression.
        """
        topic = obj.get("topic")
        if not isinstance(topic, str) or not topic:
            raise SubscriptionParseError("subscription without a topic")
        try:
            version = int(str(obj.get("subVersion", 0) or 0))
        except ValueError:
            raise SubscriptionParseError(f"subVersion is not an integer: {obj.get('subVersion')!r}") from None
        expr_type = str(obj.get("expressionType") or EXPRESSION_TYPE_TAG).upper()
        data = build_subscription_data(topic, str(obj.get("subString") or ""), expr_type)
        data.sub_version = version
        data.class_filter_mode = bool(obj.get("classFilterMode", False))
        return data


def build_subscription_data(topic: str, expression: str | None, expression_type: str = EXPRESSION_TYPE_TAG) -> (
    SubscriptionData
):
    """Parse ``expression`` for ``topic``.

    TAG: ``*``/empty → everything; otherwise tags separated by ``||`` (spaces
    around them ignored). SQL92 expressions are kept verbatim (not
    evaluated; the pull processor refuses them). Raises
    :class:`SubscriptionParseError` when a TAG expression has no tag.
    """
    expression_type = (expression_type or EXPRESSION_TYPE_TAG).upper()
    text = (expression or "").strip()
    if expression_type != EXPRESSION_TYPE_TAG:
        return SubscriptionData(topic=topic, sub_string=text, expression_type=expression_type)
    if not text or text == SUB_ALL:
        return SubscriptionData(topic=topic, sub_string=SUB_ALL)
    tags: list[str] = []
    for piece in text.split("||"):
        tag = piece.strip()
        if tag and tag not in tags:
            tags.append(tag)
    if not tags:
        raise SubscriptionParseError(f"subscription expression {expression!r} has no tag")
    if SUB_ALL in tags:
        return SubscriptionData(topic=topic, sub_string=SUB_ALL)
    return SubscriptionData(
        topic=topic,
        sub_string=text,
        tags_set=tags,
        code_set={java_string_hash(tag) for tag in tags},
    )
