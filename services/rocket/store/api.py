"""The message store's public types: configuration, put and get results, statuses.

This module is the contract between the store (``rocket.store``) and its users
(the broker's request processors, HA, analytics). Names and defaults follow
Apache RocketMQ 4.9.8 ``MessageStoreConfig``, ``PutMessageStatus`` and
``GetMessageStatus``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rocket.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    MessageExt,
    encode_properties,
    tags_hash_code,
)


class FlushDiskType(enum.StrEnum):
    """``flushDiskType`` (``FlushDiskType``)."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(enum.StrEnum):
    """``brokerRole`` (``BrokerRole``)."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@dataclass(slots=True)
class MessageStoreConfig:
    """Store settings; every size is in bytes and every interval in seconds.

    These are the Python API's units. In broker configuration the same settings take RocketMQ's
    keys and units (``flushIntervalCommitLog`` in milliseconds, ``fileReservedTime`` in hours):
    the table is in :mod:`rocket.broker.config`, which converts.

    Defaults are RocketMQ's: 1 GiB CommitLog segments, 300,000-entry
    (6,000,000-byte) ConsumeQueue files, 500 ms async flush once 4 pages are
    dirty, 5 s sync-flush timeout, 72 h retention deleted at 04 o'clock, and
    the issue's 85 % disk high watermark.
    """

    store_path_root_dir: Path
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * 20
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log: float = 0.5
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: float = 10.0
    sync_flush_timeout: float = 5.0
    flush_interval_consume_queue: float = 1.0
    max_message_size: int = 4 * 1024 * 1024
    file_reserved_time_hours: float = 72.0
    delete_when: str = "04"
    disk_max_used_space_ratio: float = 85.0
    clean_resource_interval: float = 10.0
    check_crc_on_recover: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    flush_consumer_offset_interval: float = 5.0
    #: Pending (unflushed) bytes above which puts answer SYSTEM_BUSY instead of queueing.
    max_pending_flush_bytes: int = 256 * 1024 * 1024
    #: ``brokerIP1:listenPort`` written as STOREHOST into every record.
    store_host: str = "127.0.0.1:10911"
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    #: Most messages one get returns (``maxTransferCountOnMessageInMemory``).
    max_transfer_count_on_message_in_memory: int = 32
    #: A consumer further behind than this % of RAM is told to pull from a slave
    #: (``accessMessageInMemoryMaxRatio``).
    access_message_in_memory_max_ratio: int = 40
    #: On a slave, correct a pull's out-of-range offset (``offsetCheckInSlave``, MessageStoreConfig).
    #: Off (RocketMQ's default): a slave answers an offset outside its queue with the requested
    #: offset as ``nextBeginOffset``, since a slave that is behind its master must not move a
    #: consumer's offset.
    offset_check_in_slave: bool = False
    #: Delay levels 1.. (``messageDelayLevel``): a record rebuilt into SCHEDULE_TOPIC_XXXX's
    #: ConsumeQueue gets store time + its level's delay as tag code, as the broker gave it.
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    #: Arbitrary-time delayed messages (``rocket.store.timer``); names and defaults are RocketMQ 5's
    #: ``MessageStoreConfig``: accept timer messages (``timerWheelEnable``), slot length in ms
    #: (``timerPrecisionMs``: 1000, down to 100), the furthest delivery time accepted
    #: (``timerMaxDelaySec``: 3 days), slots after which a timer is rolled (``timerRollWindowSlot``:
    #: 2 days of slots), TimerLog file size (``mappedFileSizeTimerLog``: 100 MiB) and how often the
    #: TimerLog, wheel and checkpoint are flushed (``timerFlushIntervalMs``, ms).
    timer_wheel_enable: bool = True
    timer_precision_ms: int = 1000
    timer_max_delay_sec: int = 3 * 24 * 3600
    timer_roll_window_slot: int = 2 * 24 * 3600
    mapped_file_size_timer_log: int = 100 * 1024 * 1024
    timer_flush_interval_ms: int = 1000

    def __post_init__(self) -> None:
        self.store_path_root_dir = Path(self.store_path_root_dir)
        self.flush_disk_type = FlushDiskType(self.flush_disk_type)
        self.broker_role = BrokerRole(self.broker_role)


class PutMessageStatus(enum.StrEnum):
    """Outcome of a put (``PutMessageStatus``); the broker maps it to a response code.

    PUT_OK → 0; FLUSH_DISK_TIMEOUT → 10; FLUSH_SLAVE_TIMEOUT → 12;
    SLAVE_NOT_AVAILABLE → 11; SERVICE_NOT_AVAILABLE / OS_PAGECACHE_BUSY → 14 / 2;
    CREATE_MAPPED_FILE_FAILED (disk full) → 14; MESSAGE_ILLEGAL and
    PROPERTIES_SIZE_EXCEEDED → 13; UNKNOWN_ERROR → 1.
    """

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    #: A timer message whose delivery time is beyond ``timerMaxDelaySec``, unreadable, or a
    #: delete mark for a time already passed (answered MESSAGE_ILLEGAL, 13).
    WHEEL_TIMER_MSG_ILLEGAL = "WHEEL_TIMER_MSG_ILLEGAL"
    #: A timer message while ``timerWheelEnable`` is false (answered SYSTEM_ERROR, 1).
    WHEEL_TIMER_NOT_ENABLE = "WHEEL_TIMER_NOT_ENABLE"


@dataclass(slots=True, init=False)
class PutMessageRequest:
    """One message to append. The store assigns queue offset, physical offset
    and store timestamp; ``tags_code`` goes to the ConsumeQueue; ``keys`` and
    ``uniq_key`` to the IndexFile. ``properties`` is the encoded properties
    string (``MessageDecoder.messageProperties2String``) exactly as it will be stored.
    """

    topic: str
    queue_id: int
    body: bytes
    properties: str = ""
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    tags_code: int = 0
    keys: list[str] = field(default_factory=list)
    uniq_key: str | None = None
    #: False when the message's WAIT property is "false": no waiting for flush.
    wait_store_msg_ok: bool = True

    def __init__(self, topic: str, queue_id: int, body: bytes, properties: str = "", flag: int = 0,
                 sys_flag: int = 0, born_timestamp: int = 0, born_host: str = "127.0.0.1:0",
                 reconsume_times: int = 0, prepared_transaction_offset: int = 0, tags_code: int = 0,
                 keys: list[str] | None = None, uniq_key: str | None = None, wait_store_msg_ok: bool = True) -> None:
        # Written out (``init=False``): the ``__init__`` that ``dataclass`` generates stays
        # interpreted in the compiled form of this module (rocket.compiled); this one is native.
        self.topic = topic
        self.queue_id = queue_id
        self.body = body
        self.properties = properties
        self.flag = flag
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.tags_code = tags_code
        self.keys = [] if keys is None else keys
        self.uniq_key = uniq_key
        self.wait_store_msg_ok = wait_store_msg_ok


@dataclass(slots=True)
class PutMessageBatch:
    """The messages of one batch send to append to ONE queue (SEND_BATCH_MESSAGE): what all of
    them share once, what differs in parallel lists (index i = message i), so that a batch costs
    no object per message before it is stored.

    ``bodies[i]`` is message i's body, bytes or a view of the request's body (a batch send's,
    :func:`rocket.message.split_batch`); ``properties[i]`` is its encoded properties string in
    UTF-8, exactly as it will be stored; ``tags_codes``, ``keys`` and ``uniq_keys`` are what the
    ConsumeQueue and the IndexFile take from them (as in :class:`PutMessageRequest`; ``keys[i]``
    may be one list object shared by several messages: it is only read). ``wait_store_msg_ok`` is
    False when no message's WAIT property is other than "false" (no waiting for a flush, as for a
    batch of such requests). ``indexed`` is False when no message has KEYS or a UNIQ_KEY (no IndexFile work).
    """

    topic: str
    queue_id: int
    bodies: Sequence[bytes | memoryview]
    properties: list[bytes]
    flags: list[int]
    tags_codes: list[int]
    keys: list[list[str]]
    uniq_keys: list[str | None]
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    reconsume_times: int = 0
    wait_store_msg_ok: bool = True
    indexed: bool = True

    def __len__(self) -> int:
        return len(self.bodies)

    def lengths(self) -> tuple[int, int, int]:
        """``(longest body, longest properties, bytes of all bodies)``, in bytes, in one pass over
        each list (no ``map`` object or call per message when compiled)."""
        longest_body = 0
        body_bytes = 0
        for body in self.bodies:
            n = len(body)
            body_bytes += n
            if n > longest_body:
                longest_body = n
        longest_props = 0
        for props in self.properties:
            if len(props) > longest_props:
                longest_props = len(props)
        return longest_body, longest_props, body_bytes

    def to_requests(self) -> list[PutMessageRequest]:
        """The same messages as one :class:`PutMessageRequest` each (``wait_store_msg_ok`` as
        the batch's)."""
        return [
            PutMessageRequest(self.topic, self.queue_id, bytes(body), props.decode(), flag, self.sys_flag,
                              self.born_timestamp, self.born_host, self.reconsume_times, 0, tags, list(keys),
                              uniq, self.wait_store_msg_ok)
            for body, props, flag, tags, keys, uniq in zip(
                self.bodies, self.properties, self.flags, self.tags_codes, self.keys, self.uniq_keys, strict=True)
        ]


def reput_request(msg: MessageExt, topic: str, queue_id: int, properties: dict[str, str]) -> PutMessageRequest:
    """The put of a stored message ``msg`` again, to ``topic``/``queue_id`` with ``properties`` (the
    delayed-delivery and timer services' re-put: RocketMQ's ``ScheduleMessageService``
    ``messageTimeup`` and ``TimerMessageStore.convertMessage``). Body, flag, sysFlag, born time and
    host and reconsume count are kept; tags code, keys and UNIQ_KEY come from ``properties``; the
    put does not wait for a flush."""
    keys = properties.get(PROPERTY_KEYS)
    return PutMessageRequest(
        topic=topic,
        queue_id=queue_id,
        body=msg.body,
        properties=encode_properties(properties),
        flag=msg.flag,
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        reconsume_times=msg.reconsume_times,
        tags_code=tags_hash_code(properties.get(PROPERTY_TAGS)),
        keys=[k for k in keys.split(" ") if k] if keys else [],
        uniq_key=properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or None,
        wait_store_msg_ok=False,
    )


class AppendedMessage:
    """Where one message landed: physical offset and size of its record, queue offset, store time
    (ms) and ``msg_id``, its offsetMsgId (``MessageDecoder.createMessageId``).

    A plain class, not a dataclass: the store makes one per stored message, and a dataclass's
    generated ``__init__`` stays interpreted Python in the compiled form of this module
    (:mod:`rocket.compiled`)."""

    __slots__ = ("msg_id", "physical_offset", "queue_offset", "size", "store_timestamp")

    def __init__(self, physical_offset: int, size: int, queue_offset: int, store_timestamp: int, msg_id: str) -> None:
        self.physical_offset = physical_offset
        self.size = size
        self.queue_offset = queue_offset
        self.store_timestamp = store_timestamp
        self.msg_id = msg_id

    def _fields(self) -> tuple[int, int, int, int, str]:
        return self.physical_offset, self.size, self.queue_offset, self.store_timestamp, self.msg_id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AppendedMessage):
            return NotImplemented
        return self._fields() == other._fields()

    def __repr__(self) -> str:
        return (f"AppendedMessage(physical_offset={self.physical_offset}, size={self.size}, "
                f"queue_offset={self.queue_offset}, store_timestamp={self.store_timestamp}, msg_id={self.msg_id!r})")


class StoredBatch:
    """Where the messages of one batch put landed, kept compact: their physical offsets and
    sizes (parallel lists), the first one's queue offset (``queue_step`` 1 per message, or 0 when
    none was taken: all are 0), their store time (ms) and their offsetMsgIds joined by commas
    (``msg_ids``, each ``id_width`` characters). :meth:`messages` makes the
    :class:`AppendedMessage` of each; the answer to a batch send needs only the first queue offset,
    the ids and the end (:class:`PutMessageResult`), so the store makes none on that path."""

    __slots__ = ("id_width", "msg_ids", "physical_offsets", "queue_offset", "queue_step", "sizes",
                 "store_timestamp")

    def __init__(self, physical_offsets: list[int], sizes: list[int], queue_offset: int, queue_step: int,
                 store_timestamp: int, msg_ids: str, id_width: int) -> None:
        self.physical_offsets = physical_offsets
        self.sizes = sizes
        self.queue_offset = queue_offset
        self.queue_step = queue_step
        self.store_timestamp = store_timestamp
        self.msg_ids = msg_ids
        self.id_width = id_width

    def messages(self) -> list[AppendedMessage]:
        """One :class:`AppendedMessage` per message, in order."""
        out: list[AppendedMessage] = []
        width = self.id_width
        ids = self.msg_ids
        o = 0
        qo = self.queue_offset
        step = self.queue_step
        ts = self.store_timestamp
        for ph, size in zip(self.physical_offsets, self.sizes, strict=True):
            out.append(AppendedMessage(ph, size, qo, ts, ids[o:o + width]))
            o += width + 1
            qo += step
        return out


class PutMessageResult:
    """Result of :meth:`put_message` / :meth:`put_messages`.

    ``messages`` lists every appended record (one for a single put, all for a
    batch, in order); empty when nothing was appended. ``remark`` explains a
    failure in words fit for a response remark. A batch put's result holds a
    :class:`StoredBatch` (``batch``) and makes ``messages`` from it when first read;
    :attr:`stored`, :attr:`first_queue_offset` and :attr:`end_offset` answer without them.
    """

    __slots__ = ("_messages", "batch", "msg_ids", "remark", "status")

    def __init__(self, status: PutMessageStatus, messages: list[AppendedMessage] | None = None, remark: str = "",
                 msg_ids: str = "", batch: StoredBatch | None = None) -> None:
        self.status = status
        self._messages = messages
        self.remark = remark
        #: The ``msg_id`` of every message, joined by commas (what a batch send answers), when the
        #: store made it at once; "" otherwise (join them from ``messages``).
        self.msg_ids = msg_ids
        self.batch = batch

    @property
    def messages(self) -> list[AppendedMessage]:
        """Every appended record, in order (made from :attr:`batch` on first use)."""
        m = self._messages
        if m is None:
            m = self._messages = self.batch.messages() if self.batch is not None else []
        return m

    @property
    def stored(self) -> bool:
        """True when records were appended (even if the outcome is not PUT_OK)."""
        if self.batch is not None:
            return bool(self.batch.sizes)
        return bool(self._messages)

    @property
    def first_queue_offset(self) -> int:
        """The queue offset of the first appended record (call only when :attr:`stored`)."""
        if self.batch is not None:
            return self.batch.queue_offset
        assert self._messages
        return self._messages[0].queue_offset

    @property
    def end_offset(self) -> int:
        """The physical offset just past the last appended record (call only when :attr:`stored`)."""
        b = self.batch
        if b is not None:
            return b.physical_offsets[-1] + b.sizes[-1]
        assert self._messages
        last = self._messages[-1]
        return last.physical_offset + last.size

    def with_status(self, status: PutMessageStatus, remark: str) -> PutMessageResult:
        """The same appended records (not made here), another outcome."""
        return PutMessageResult(status, self._messages, remark, self.msg_ids, self.batch)

    @property
    def ok(self) -> bool:
        """True for PUT_OK."""
        return self.status is PutMessageStatus.PUT_OK

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PutMessageResult):
            return NotImplemented
        return (self.status, self.messages, self.remark, self.msg_ids) == (
            other.status, other.messages, other.remark, other.msg_ids)

    def __repr__(self) -> str:
        return (f"PutMessageResult(status={self.status!r}, messages={self.messages!r}, remark={self.remark!r}, "
                f"msg_ids={self.msg_ids!r})")


class GetMessageStatus(enum.StrEnum):
    """Outcome of a get (``GetMessageStatus``); ``PullMessageProcessor`` maps it to a code."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True, init=False)
class GetMessageResult:
    """Result of :meth:`get_message`.

    ``records`` are whole stored records in queue order; their
    concatenation is a pull response body. Offsets are queue offsets;
    ``max_offset`` is exclusive (the next offset to be written).
    """

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: list[bytes] = field(default_factory=list)
    #: Queue offset of each record in ``records``.
    queue_offsets: list[int] = field(default_factory=list)
    #: True when the consumer is far behind (the broker may suggest a slave).
    suggest_pulling_from_slave: bool = False

    def __init__(self, status: GetMessageStatus, next_begin_offset: int, min_offset: int, max_offset: int,
                 records: list[bytes] | None = None, queue_offsets: list[int] | None = None,
                 suggest_pulling_from_slave: bool = False) -> None:
        # Written out (``init=False``): the ``__init__`` that ``dataclass`` generates stays
        # interpreted in the compiled form of this module (rocket.compiled); this one is native.
        self.status = status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.records = [] if records is None else records
        self.queue_offsets = [] if queue_offsets is None else queue_offsets
        self.suggest_pulling_from_slave = suggest_pulling_from_slave

    @property
    def body(self) -> bytes:
        """The records concatenated back to back."""
        return b"".join(self.records)

    @property
    def message_count(self) -> int:
        """Number of records returned."""
        return len(self.records)


class StoreError(Exception):
    """A store failure that is not a per-message outcome (start-up, corrupt config)."""


class ConfigCorruptError(StoreError):
    """A config file failed its integrity check; the message names the file."""
