"""Typed views of the custom headers (``extFields``) of broker requests.

Each ``parse`` reads a :class:`RemotingCommand` whose ext values are already
strings (the remoting layer coerces numbers and booleans) and raises
:class:`HeaderFieldError` for a missing required field or a value of the wrong
type (including a number outside the field's Java ``int``/``long``); the
connection layer answers that with SYSTEM_ERROR (1) and the message. Each
header's ``problem()`` then names a value of the right type outside what the
field allows (``rocket.protocol.validation``; answered INVALID_PARAMETER, 29).

Sources: RocketMQ 4.9.8 ``SendMessageRequestHeader``(V2),
``PullMessageRequestHeader``, ``ConsumerSendMsgBackRequestHeader``.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocket.protocol.validation import (
    INT_MAX,
    LONG_MAX,
    MESSAGE_SYS_FLAG_BITS,
    PULL_SYS_FLAG_BITS,
    first_problem,
    flags_problem,
    out_of_range,
)
from rocket.remoting import HeaderFieldError, RemotingCommand, RequestCode
from rocket.remoting.command import parse_bool

#: PULL_MESSAGE sysFlag bits (``PullSysFlag``).
PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4
PULL_FLAG_CLASS_FILTER = 0x8
PULL_FLAG_LITE_PULL = 0x10

#: SEND_MESSAGE_V2 short names -> V1 names (``SendMessageRequestHeaderV2``).
SEND_V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}
_SEND_V1_TO_V2 = {v1: v2 for v2, v1 in SEND_V2_NAMES.items()}
#: Header fields a..m in order, by their V1 and V2 names.
_SEND_V1_NAMES = tuple(SEND_V2_NAMES[k] for k in "abcdefghijklm")
_SEND_V2_NAMES = tuple("abcdefghijklm")
_BOOLS = {"true": True, "false": False, "1": True, "0": False}
_SEND_MESSAGE = int(RequestCode.SEND_MESSAGE)
_INT_MIN = -INT_MAX - 1
_LONG_MIN = -LONG_MAX - 1
_SEND_BATCH_MESSAGE = int(RequestCode.SEND_BATCH_MESSAGE)


@dataclass(slots=True, init=False)
class SendMessageRequestHeader:
    """Header of SEND_MESSAGE (10, long names), SEND_MESSAGE_V2 (310, ``a``..``n``)
    and SEND_BATCH_MESSAGE (320).

    ``batch`` is true for code 320 or when the batch flag is ``true``/``1``
    (the C++ client sends batches as code 10 with ``batch:"1"``).
    ``max_reconsume_times`` is ``None`` when absent.
    """

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    unit_mode: bool
    max_reconsume_times: int | None
    batch: bool

    def __init__(self, producer_group: str, topic: str, default_topic: str, default_topic_queue_nums: int,
                 queue_id: int, sys_flag: int, born_timestamp: int, flag: int, properties: str,
                 reconsume_times: int, unit_mode: bool, max_reconsume_times: int | None, batch: bool) -> None:
        # Written out (``init=False``): compiled, this is native code; the ``__init__`` that
        # ``dataclass`` generates stays interpreted even in a mypyc build (one per send).
        self.producer_group = producer_group
        self.topic = topic
        self.default_topic = default_topic
        self.default_topic_queue_nums = default_topic_queue_nums
        self.queue_id = queue_id
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.flag = flag
        self.properties = properties
        self.reconsume_times = reconsume_times
        self.unit_mode = unit_mode
        self.max_reconsume_times = max_reconsume_times
        self.batch = batch

    @classmethod
    def parse(cls, cmd: RemotingCommand) -> SendMessageRequestHeader:  # noqa: C901 - hot: per send, bench_broker
        """Read the header of a send request.

        Code 10 is read with the long names, 310/320 with the short ones; a
        request using the other form is read with that form (whichever names
        its ``topic``).
        """
        ext = cmd.ext_fields
        code = cmd.code
        if code != _SEND_MESSAGE:
            # Fast path for SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE as every client sends them (short
            # names, canonical values); anything else (a missing field, ``TRUE``, long names) is
            # read by the general code below, which also words the errors.
            try:
                unit, batch, reconsume, max_times = ext.get("k"), ext.get("m"), ext.get("j"), ext.get("l")
                return cls(
                    ext["a"], ext["b"], ext["c"], int(ext["d"]), int(ext["e"]), int(ext["f"]), int(ext["g"]),
                    int(ext["h"]), ext.get("i") or "",
                    int(reconsume) if reconsume else 0,
                    _BOOLS[unit] if unit else False,
                    int(max_times) if max_times else None,
                    code == _SEND_BATCH_MESSAGE or (_BOOLS[batch] if batch else False),
                )
            except (KeyError, TypeError, ValueError):
                pass
        names = _SEND_V1_NAMES if code == RequestCode.SEND_MESSAGE else _SEND_V2_NAMES
        if names[1] not in ext:
            other = _SEND_V2_NAMES if names is _SEND_V1_NAMES else _SEND_V1_NAMES
            if other[1] in ext:
                names = other
        values = [ext.get(name) for name in names]
        v = values
        if v[0] is not None and v[1] is not None and v[2] is not None:
            # Fast path for well-formed headers; anything odd is re-read below for its error.
            try:
                unit, batch, reconsume, max_times = v[10], v[12], v[9], v[11]
                return cls(
                    v[0], v[1], v[2], int(v[3]), int(v[4]), int(v[5]), int(v[6]), int(v[7]),  # type: ignore[arg-type]
                    v[8] or "",
                    int(reconsume) if reconsume else 0,
                    False if unit is None else (_BOOLS[unit] if unit in _BOOLS else parse_bool(unit)),
                    int(max_times) if max_times else None,
                    cmd.code == RequestCode.SEND_BATCH_MESSAGE
                    or (False if batch is None else (_BOOLS[batch] if batch in _BOOLS else parse_bool(batch))),
                )
            except (TypeError, ValueError):
                pass

        def required(i: int) -> str:
            value = values[i]
            if value is None:
                raise HeaderFieldError(f"the custom field <{_SEND_V1_NAMES[i]}> is null")
            return value

        def integer(i: int, default: int | None = None) -> int:
            value = values[i]
            if value is None or (value == "" and default is not None):
                if default is None:
                    raise HeaderFieldError(f"the custom field <{_SEND_V1_NAMES[i]}> is null")
                return default
            try:
                return int(value)
            except ValueError:
                raise HeaderFieldError(
                    f"the custom field <{_SEND_V1_NAMES[i]}> is not an integer: {value!r}"
                ) from None

        def boolean(i: int) -> bool:
            value = values[i]
            if value is None:
                return False
            try:
                return parse_bool(value)
            except ValueError:
                raise HeaderFieldError(
                    f"the custom field <{_SEND_V1_NAMES[i]}> is not a boolean: {value!r}"
                ) from None

        max_times = values[11]
        return cls(
            producer_group=required(0),
            topic=required(1),
            default_topic=required(2),
            default_topic_queue_nums=integer(3),
            queue_id=integer(4),
            sys_flag=integer(5),
            born_timestamp=integer(6),
            flag=integer(7),
            properties=values[8] or "",
            reconsume_times=integer(9, 0),
            unit_mode=boolean(10),
            max_reconsume_times=integer(11, 0) if max_times else None,
            batch=cmd.code == RequestCode.SEND_BATCH_MESSAGE or boolean(12),
        )

    def problem(self) -> str | None:
        """A remark for a field outside what it allows (INVALID_PARAMETER), else None: ``sysFlag``
        only ``MessageSysFlag`` bits, ``defaultTopicQueueNums`` and ``reconsumeTimes`` not
        negative. A negative ``queueId`` means "any queue" (Java picks one at random); its upper
        bound is checked against the topic.

        Raises :class:`HeaderFieldError` for a Java ``int`` field (``defaultTopicQueueNums``,
        ``queueId``, ``sysFlag``, ``flag``, ``reconsumeTimes``, ``maxReconsumeTimes``) outside an
        int, or ``bornTimestamp`` outside a long (a header decoding error, as in Java).
        """
        mrt = self.max_reconsume_times
        if (0 <= self.sys_flag <= MESSAGE_SYS_FLAG_BITS and 0 <= self.reconsume_times <= INT_MAX
                and _INT_MIN <= self.queue_id <= INT_MAX and 0 <= self.default_topic_queue_nums <= INT_MAX
                and _INT_MIN <= self.flag <= INT_MAX and _LONG_MIN <= self.born_timestamp <= LONG_MAX
                and (mrt is None or _INT_MIN <= mrt <= INT_MAX)):
            return None  # the usual send: one comparison chain
        ints = [("defaultTopicQueueNums", self.default_topic_queue_nums), ("queueId", self.queue_id),
                ("sysFlag", self.sys_flag), ("flag", self.flag), ("reconsumeTimes", self.reconsume_times)]
        if mrt is not None:
            ints.append(("maxReconsumeTimes", mrt))
        for name, value in ints:
            if not _INT_MIN <= value <= INT_MAX:
                raise HeaderFieldError(f"the custom field <{name}> is out of the range of an int: {value}")
        if not _LONG_MIN <= self.born_timestamp <= LONG_MAX:
            raise HeaderFieldError(f"the custom field <bornTimestamp> is out of the range of a long: "
                                   f"{self.born_timestamp}")
        return first_problem(
            out_of_range("defaultTopicQueueNums", self.default_topic_queue_nums, 0, INT_MAX),
            flags_problem("sysFlag", self.sys_flag, MESSAGE_SYS_FLAG_BITS),
            out_of_range("reconsumeTimes", self.reconsume_times, 0, INT_MAX),
        )

    def to_ext_fields(self, v2: bool = True) -> dict[str, str]:
        """The header as ext fields (short names when ``v2``); for clients and tests."""
        values: dict[str, str] = {
            "producerGroup": self.producer_group,
            "topic": self.topic,
            "defaultTopic": self.default_topic,
            "defaultTopicQueueNums": str(self.default_topic_queue_nums),
            "queueId": str(self.queue_id),
            "sysFlag": str(self.sys_flag),
            "bornTimestamp": str(self.born_timestamp),
            "flag": str(self.flag),
            "properties": self.properties,
            "reconsumeTimes": str(self.reconsume_times),
            "unitMode": "true" if self.unit_mode else "false",
            "batch": "true" if self.batch else "false",
        }
        if self.max_reconsume_times is not None:
            values["maxReconsumeTimes"] = str(self.max_reconsume_times)
        if v2:
            return {_SEND_V1_TO_V2[k]: v for k, v in values.items()}
        return values


@dataclass(slots=True, init=False)
class PullMessageRequestHeader:
    """Header of PULL_MESSAGE (11). Offsets are queue offsets; times in ms."""

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    subscription: str | None
    sub_version: int
    expression_type: str

    def __init__(self, consumer_group: str, topic: str, queue_id: int, queue_offset: int, max_msg_nums: int,
                 sys_flag: int, commit_offset: int, suspend_timeout_millis: int, subscription: str | None,
                 sub_version: int, expression_type: str) -> None:
        # Written out (``init=False``): the ``__init__`` that ``dataclass`` generates stays
        # interpreted in the compiled form of this module (rocket.compiled); this one is native.
        self.consumer_group = consumer_group
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.max_msg_nums = max_msg_nums
        self.sys_flag = sys_flag
        self.commit_offset = commit_offset
        self.suspend_timeout_millis = suspend_timeout_millis
        self.subscription = subscription
        self.sub_version = sub_version
        self.expression_type = expression_type

    @classmethod
    def parse(cls, cmd: RemotingCommand) -> PullMessageRequestHeader:
        """Read the header; ``subscription`` and ``expressionType`` are optional."""
        return cls(
            consumer_group=cmd.require("consumerGroup"),
            topic=cmd.require("topic"),
            queue_id=cmd.require_int("queueId", bits=32),
            queue_offset=cmd.require_int("queueOffset"),
            max_msg_nums=cmd.require_int("maxMsgNums", bits=32),
            sys_flag=cmd.require_int("sysFlag", bits=32),
            commit_offset=cmd.require_int("commitOffset"),
            suspend_timeout_millis=cmd.require_int("suspendTimeoutMillis"),
            subscription=cmd.get("subscription"),
            sub_version=cmd.get_int("subVersion", 0),
            expression_type=(cmd.get("expressionType") or "TAG").upper(),
        )

    def problem(self) -> str | None:
        """A remark for a field outside its range (INVALID_PARAMETER), else None: ``maxMsgNums``
        >= 1, known ``PullSysFlag`` bits, ``suspendTimeoutMillis`` 0 .. 2^31-1 ms. The queueId is
        checked against the topic by the processor."""
        return first_problem(
            out_of_range("maxMsgNums", self.max_msg_nums, 1, INT_MAX),
            flags_problem("sysFlag", self.sys_flag, PULL_SYS_FLAG_BITS),
            out_of_range("suspendTimeoutMillis", self.suspend_timeout_millis, 0, INT_MAX),
        )

    @property
    def has_commit_offset(self) -> bool:
        """COMMIT_OFFSET bit: store ``commit_offset`` as a side effect."""
        return bool(self.sys_flag & PULL_FLAG_COMMIT_OFFSET)

    @property
    def has_suspend(self) -> bool:
        """SUSPEND bit: the broker may hold the request (long polling)."""
        return bool(self.sys_flag & PULL_FLAG_SUSPEND)

    @property
    def has_subscription(self) -> bool:
        """SUBSCRIPTION bit: the filter expression is sent inline."""
        return bool(self.sys_flag & PULL_FLAG_SUBSCRIPTION)


@dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader:
    """Header of CONSUMER_SEND_MSG_BACK (36); ``offset`` is a CommitLog physical offset."""

    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None
    origin_topic: str | None
    unit_mode: bool
    max_reconsume_times: int | None

    @classmethod
    def parse(cls, cmd: RemotingCommand) -> ConsumerSendMsgBackRequestHeader:
        """Read the header; the C++ client sends only ``offset``, ``group``, ``delayLevel``."""
        max_text = cmd.get("maxReconsumeTimes")
        return cls(
            offset=cmd.require_int("offset"),
            group=cmd.require("group"),
            delay_level=cmd.get_int("delayLevel", 0, bits=32),
            origin_msg_id=cmd.get("originMsgId") or None,
            origin_topic=cmd.get("originTopic") or None,
            unit_mode=cmd.get_bool("unitMode", False),
            max_reconsume_times=cmd.get_int("maxReconsumeTimes", 0, bits=32) if max_text else None,
        )

    def problem(self) -> str | None:
        """A remark for a field outside its range (INVALID_PARAMETER), else None: ``offset`` (a
        CommitLog offset) >= 0, ``maxReconsumeTimes`` >= 0 when given (``delayLevel`` < 0 means
        "to the dead-letter queue", as Java)."""
        return first_problem(
            out_of_range("offset", self.offset, 0, LONG_MAX),
            None if self.max_reconsume_times is None
            else out_of_range("maxReconsumeTimes", self.max_reconsume_times, 0, INT_MAX),
        )
