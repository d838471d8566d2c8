"""Topic configs and the version of a broker's topic table.

* :class:`DataVersion` (``org.apache.rocketmq.common.DataVersion``): when a
  table last changed and how many changes it has seen; a value, replaced on
  every change.
* :class:`TopicConfig` (``org.apache.rocketmq.common.TopicConfig``): one topic
  of one broker: queue counts, permission, filter type, flags.
* :class:`TopicConfigSerializeWrapper`: a broker's whole topic table plus its
  version: the body of GET_ALL_TOPIC_CONFIG and part of REGISTER_BROKER;
* the topic names both sides derive: the ``TBW102`` template, ``%RETRY%<group>``,
  ``%DLQ%<group>``.

Fields use Python names; ``to_json`` writes the Java field names in fastjson's
(alphabetical) order, and ``from_json`` reads them liberally
(:mod:`rocket.protocol.body`). Every parser raises
:class:`~rocket.protocol.body.BodyError`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rocket.protocol.body import BodyError, as_bool, as_int, json_object
from rocket.protocol.codes import PERM_READ, PERM_WRITE

#: Queue counts of a topic created without explicit ones (``TopicConfig.defaultReadQueueNums``).
DEFAULT_QUEUE_NUMS = 16
#: The auto-create template topic (``TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC``).
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
#: Prefix of a consumer group's retry topic (``MixAll.RETRY_GROUP_TOPIC_PREFIX``).
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
#: Prefix of a consumer group's dead-letter topic (``MixAll.DLQ_GROUP_TOPIC_PREFIX``).
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``: where a consumer group's failed messages go for another try (``MixAll.getRetryTopic``)."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``: where a group's messages go after too many retries (``MixAll.getDLQTopic``)."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def now_ms() -> int:
    """Wall-clock time in milliseconds, as Java's ``System.currentTimeMillis()``."""
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class DataVersion:
    """Version of a config table (``DataVersion``): ``timestamp`` = wall clock in ms of the
    last change, ``counter`` = number of changes.

    Two versions are equal when both fields are: a NameServer rebuilds a
    broker's queue data only when the version it registers differs from the
    one it registered last, and a slave copies its master's table only when
    the versions differ. Immutable: :meth:`next_version` returns a new value.
    """

    timestamp: int = 0
    counter: int = 0

    def to_json(self) -> dict[str, int]:
        """``{"counter": n, "timestamp": ms}``."""
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any]) -> DataVersion:
        """Parse ``{"timestamp":..,"counter":..}``; missing members are 0.

        ``counter`` may also arrive as ``{"value": n}`` (Java's ``AtomicLong``
        written as a bean). Raises :class:`BodyError`.
        """
        obj = json_object(data, "DataVersion")
        return cls(
            timestamp=as_int(obj.get("timestamp"), "timestamp"),
            counter=as_int(obj.get("counter"), "counter"),
        )

    def next_version(self, now: int | None = None) -> DataVersion:
        """The version after one more change at wall-clock ``now`` ms (default: the clock now),
        as ``DataVersion.nextVersion()``."""
        return DataVersion(timestamp=now_ms() if now is None else now, counter=self.counter + 1)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One topic's config on one broker (``TopicConfig``).

    Queue counts default to 16 and ``perm`` to 6 (READ|WRITE, ``PermName``) as
    in Java; ``topic_filter_type`` is ``"SINGLE_TAG"`` or ``"MULTI_TAG"``.
    Immutable: a change replaces the object (``dataclasses.replace``).
    """

    topic_name: str
    read_queue_nums: int = DEFAULT_QUEUE_NUMS
    write_queue_nums: int = DEFAULT_QUEUE_NUMS
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        """The fastjson form: every field, Java names, alphabetical."""
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any], name: str | None = None) -> TopicConfig:
        """Parse a TopicConfig object; ``name`` (its key in a table) fills a missing ``topicName``.

        Numbers may arrive as strings. Raises :class:`BodyError` when there is
        no topic name at all or a number does not parse.
        """
        obj = json_object(data, "TopicConfig")
        topic = obj.get("topicName") or name
        if not topic or not isinstance(topic, str):
            raise BodyError("TopicConfig has no topicName")
        return cls(
            topic_name=topic,
            read_queue_nums=as_int(obj.get("readQueueNums"), "readQueueNums", DEFAULT_QUEUE_NUMS),
            write_queue_nums=as_int(obj.get("writeQueueNums"), "writeQueueNums", DEFAULT_QUEUE_NUMS),
            perm=as_int(obj.get("perm"), "perm", PERM_READ | PERM_WRITE),
            topic_filter_type=str(obj.get("topicFilterType") or "SINGLE_TAG"),
            topic_sys_flag=as_int(obj.get("topicSysFlag"), "topicSysFlag"),
            order=as_bool(obj.get("order", False)),
        )

    def encode_text(self) -> str:
        """Java's ``TopicConfig.encode()``: ``"name read write perm filterType"``.

        This space-separated text (not JSON) is what the compressed
        registration body carries per topic (``RegisterBrokerBody.encode(true)``
        in RocketMQ 4.9.8).
        """
        return (
            f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} {self.perm} "
            f"{self.topic_filter_type}"
        )

    @classmethod
    def decode_text(cls, text: str) -> TopicConfig:
        """Parse :meth:`encode_text` output (RocketMQ 5.x appends a 6th field, ignored); JSON also accepted.

        Raises :class:`BodyError` when the text has fewer than 5 fields or
        non-integer counts.
        """
        stripped = text.strip()
        if stripped.startswith("{"):
            return cls.from_json(stripped)
        parts = stripped.split(" ", 5)
        if len(parts) < 5:
            raise BodyError(f"topic config text has {len(parts)} fields, expected 5: {text[:80]!r}")
        name, read, write, perm, filter_type = parts[:5]
        return cls(
            topic_name=name,
            read_queue_nums=as_int(read, "readQueueNums"),
            write_queue_nums=as_int(write, "writeQueueNums"),
            perm=as_int(perm, "perm"),
            topic_filter_type=filter_type,
        )


@dataclass(slots=True)
class TopicConfigSerializeWrapper:
    """A broker's whole topic table plus its version (``TopicConfigSerializeWrapper``).

    ``topic_config_table`` maps topic name to :class:`TopicConfig`.
    """

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)

    def to_json(self) -> dict[str, Any]:
        """``{"dataVersion": {...}, "topicConfigTable": {name: TopicConfig}}``."""
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {name: tc.to_json() for name, tc in self.topic_config_table.items()},
        }

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any]) -> TopicConfigSerializeWrapper:
        """Parse the wrapper; unknown members (4.9.8 adds some) are ignored. Raises :class:`BodyError`."""
        obj = json_object(data, "TopicConfigSerializeWrapper")
        table_obj = obj.get("topicConfigTable") or {}
        if not isinstance(table_obj, dict):
            raise BodyError("topicConfigTable is not an object")
        table: dict[str, TopicConfig] = {}
        for name, value in table_obj.items():
            if not isinstance(value, dict):
                raise BodyError(f"topic config of {name!r} is not an object")
            tc = TopicConfig.from_json(value, name)
            table[tc.topic_name] = tc
        version_obj = obj.get("dataVersion") or {}
        if not isinstance(version_obj, dict):
            raise BodyError("dataVersion is not an object")
        return cls(topic_config_table=table, data_version=DataVersion.from_json(version_obj))
