"""HeartbeatData (body of HEART_BEAT, 34) in its Java and C++ forms.

Java (and ali-ons) write enums by name (``"CONSUME_PASSIVELY"``); the C++
client writes their ordinals (``1``) and ``subVersion`` as a string
(RocketMQ's ``HeartbeatData``). Both are normalised here to enum names and ints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rocket.broker.filter import SubscriptionData, SubscriptionParseError
from rocket.protocol import loads_lenient

#: Java enum constants in ordinal order (the C++ client sends ordinals).
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


class HeartbeatParseError(ValueError):
    """A heartbeat body that is not HeartbeatData JSON (answered with code 1)."""


def _enum_name(value: Any, names: tuple[str, ...], default: str, what: str) -> str:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise HeartbeatParseError(f"{what} is not an enum: {value!r}")
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        index = int(value)
        if 0 <= index < len(names):
            return names[index]
        raise HeartbeatParseError(f"{what} ordinal {index} out of range")
    text = str(value).strip().upper()
    if text in names:
        return text
    short = f"CONSUME_FROM_{text}"
    if short in names:
        return short
    raise HeartbeatParseError(f"unknown {what} {value!r}")


@dataclass(slots=True)
class ConsumerData:
    """One consumer group of a heartbeat, enums as Java names."""

    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    unit_mode: bool = False
    subscriptions: list[SubscriptionData] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The Java form."""
        return {
            "consumeFromWhere": self.consume_from_where,
            "consumeType": self.consume_type,
            "groupName": self.group_name,
            "messageModel": self.message_model,
            "subscriptionDataSet": [s.to_json() for s in self.subscriptions],
            "unitMode": self.unit_mode,
        }


def _array(obj: Mapping[str, Any], name: str) -> list[Any]:
    """Member ``name`` of ``obj`` as a list (absent or null: empty). Raises :class:`HeartbeatParseError`."""
    value = obj.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise HeartbeatParseError(f"{name} is not an array")
    return value


@dataclass(slots=True)
class HeartbeatData:
    """``clientID`` plus the producer group names and consumer groups it belongs to."""

    client_id: str
    producer_groups: list[str] = field(default_factory=list)
    consumers: list[ConsumerData] = field(default_factory=list)

    @classmethod
    def decode(cls, body: bytes | str | Mapping[str, Any]) -> HeartbeatData:
        """Parse a heartbeat body (either form). Raises :class:`HeartbeatParseError`."""
        if isinstance(body, Mapping):
            obj: Any = body
        else:
            try:
                obj = loads_lenient(body)
            except ValueError as exc:
                raise HeartbeatParseError(f"heartbeat body is not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise HeartbeatParseError("heartbeat body is not a JSON object")
        client_id = obj.get("clientID") or obj.get("clientId")
        if not isinstance(client_id, str) or not client_id:
            raise HeartbeatParseError("heartbeat without clientID")
        producers: list[str] = []
        for item in _array(obj, "producerDataSet"):
            if isinstance(item, dict) and isinstance(item.get("groupName"), str):
                producers.append(item["groupName"])
        consumers: list[ConsumerData] = []
        for item in _array(obj, "consumerDataSet"):
            if not isinstance(item, dict) or not isinstance(item.get("groupName"), str):
                raise HeartbeatParseError("consumer data without groupName")
            subs: list[SubscriptionData] = []
            for sub in _array(item, "subscriptionDataSet"):
                if not isinstance(sub, dict):
                    raise HeartbeatParseError("subscription data is not an object")
                try:
                    subs.append(SubscriptionData.from_json(sub))
                except SubscriptionParseError as exc:
                    raise HeartbeatParseError(str(exc)) from None
            unit = item.get("unitMode", False)
            consumers.append(
                ConsumerData(
                    group_name=item["groupName"],
                    consume_type=_enum_name(item.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY", "consumeType"),
                    message_model=_enum_name(item.get("messageModel"), MESSAGE_MODELS, "CLUSTERING", "messageModel"),
                    consume_from_where=_enum_name(
                        item.get("consumeFromWhere"), CONSUME_FROM_WHERE, "CONSUME_FROM_LAST_OFFSET", "consumeFromWhere"
                    ),
                    unit_mode=unit if isinstance(unit, bool) else str(unit).lower() in ("1", "true"),
                    subscriptions=subs,
                )
            )
        return cls(client_id=client_id, producer_groups=producers, consumers=consumers)

    def to_json(self) -> dict[str, Any]:
        """The Java form (for clients and tests)."""
        return {
            "clientID": self.client_id,
            "consumerDataSet": [c.to_json() for c in self.consumers],
            "producerDataSet": [{"groupName": g} for g in self.producer_groups],
        }
