"""Range checks of request header fields and admin bodies, before anything is stored.

Two layers, as in Apache RocketMQ:

* the protocol: a header field is a Java ``int`` or ``long`` (its declaration in
  the ``*RequestHeader`` class); a value outside that type, or not a decimal
  number, fails header decoding, answered SYSTEM_ERROR (1) by the connection
  (:meth:`RemotingCommand.require_int` with ``bits``);
* the meaning: a value of the right type but outside what the field allows
  (a negative offset, a queueId beyond the topic's queues, unknown sysFlag bits,
  a queue count of 0) is answered INVALID_PARAMETER (29, ``ResponseCode`` of
  RocketMQ 5, as its ConsumerManageProcessor and AdminBrokerProcessor do) with
  a remark naming the field, its value and the allowed range (the processors
  answer it; this module, part of the protocol layer, only says what is wrong). Where Apache has
  its own code for a case (TOPIC_NOT_EXIST, SUBSCRIPTION_GROUP_NOT_EXIST, the
  pull's SYSTEM_ERROR for an illegal queueId) that code is kept.

Bounds: sysFlag bits of ``MessageSysFlag`` (0x7FF), ``PullSysFlag`` (0x1F) and
``TopicSysFlag`` (0x3); ``perm`` bits of ``PermName`` (0..15); queue counts
0..65535 for a topic, not both 0 (:data:`MAX_QUEUE_NUMS`, a ceiling of ours: a
ConsumeQueue directory per queue makes larger counts pointless) and 0..65535 for
a group's retry queues.
"""

from __future__ import annotations

#: Ranges of Java's ``int`` and ``long``, the types of RocketMQ's header fields.
JAVA_INT_RANGE = (-(2**31), 2**31 - 1)
JAVA_LONG_RANGE = (-(2**63), 2**63 - 1)
#: Largest read/write queue count of a topic (one of them may be 0, not both), and of a group's retry queues.
MAX_QUEUE_NUMS = 65535
#: Every bit ``MessageSysFlag`` defines (compression type included).
MESSAGE_SYS_FLAG_BITS = 0x7FF
#: Every bit ``PullSysFlag`` defines.
PULL_SYS_FLAG_BITS = 0x1F
#: Every bit ``TopicSysFlag`` defines.
TOPIC_SYS_FLAG_BITS = 0x3
#: Every bit ``PermName`` defines (priority, read, write, inherit).
PERM_BITS = 0xF
INT_MAX = JAVA_INT_RANGE[1]
LONG_MAX = JAVA_LONG_RANGE[1]


def out_of_range(name: str, value: int, low: int, high: int) -> str | None:
    """A remark when ``value`` of field ``name`` is outside ``low..high``, else None."""
    if low <= value <= high:
        return None
    return f"{name} {value} is out of range ({low}..{high})"


def flags_problem(name: str, value: int, bits: int) -> str | None:
    """A remark when ``value`` is negative or has a bit outside ``bits``, else None."""
    if value < 0 or value & ~bits:
        return f"{name} {value} has bits RocketMQ does not define (allowed mask 0x{bits:X})"
    return None


def first_problem(*problems: str | None) -> str | None:
    """The first of ``problems`` that is not None."""
    for problem in problems:
        if problem is not None:
            return problem
    return None


def queue_id_problem(queue_id: int, topic: str, queue_nums: int, what: str = "readQueueNums") -> str | None:
    """A remark when ``queue_id`` is not ``0 <= queueId < queue_nums`` of ``topic``, else None."""
    if 0 <= queue_id < queue_nums:
        return None
    return f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.{what}:[{queue_nums}]"


def topic_counts_problem(read: int, write: int, perm: int, topic_sys_flag: int) -> str | None:
    """A remark when a topic's queue counts, perm or topicSysFlag are outside RocketMQ's ranges."""
    return first_problem(
        out_of_range("readQueueNums", read, 0, MAX_QUEUE_NUMS),
        out_of_range("writeQueueNums", write, 0, MAX_QUEUE_NUMS),
        "readQueueNums and writeQueueNums are both 0" if read == 0 and write == 0 else None,
        flags_problem("perm", perm, PERM_BITS),
        flags_problem("topicSysFlag", topic_sys_flag, TOPIC_SYS_FLAG_BITS),
    )
