"""Messages: the model, the properties string, the stored record, ids and batches.

Formats as in Apache RocketMQ 4.9.8 (``MessageDecoder``, ``CommitLog``,
``MessageSysFlag``, ``MessageClientIDSetter``), restated, not copied:

Stored record (big-endian; host fields 8 bytes for IPv4, 20 for IPv6)::

    0  TOTALSIZE int32        4  MAGICCODE int32      8  BODYCRC int32
    12 QUEUEID int32          16 FLAG int32           20 QUEUEOFFSET int64
    28 PHYSICALOFFSET int64   36 SYSFLAG int32        40 BORNTIMESTAMP int64
    48 BORNHOST (ip, int32 port)   STORETIMESTAMP int64   STOREHOST (ip, port)
       RECONSUMETIMES int32   PREPAREDTRANSACTIONOFFSET int64
       BODYLENGTH int32 + body     TOPICLENGTH int8 + topic
       PROPERTIESLENGTH int16 + properties

Properties: ``name \\x01 value \\x02 ...`` (Java writes no trailing ``\\x02``,
the C++ client does; both are read).
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from mypy_extensions import i64

# -- constants ----------------------------------------------------------------------

#: Magic code of a message record (0xDAA320A7 as a signed int32).
MESSAGE_MAGIC_CODE: Final = -626843481
#: Magic code of the end-of-file blank marker (0xCBD43194 as a signed int32).
BLANK_MAGIC_CODE: Final = -875286124
#: Size of the end-of-file blank marker: int32 length + int32 magic.
BLANK_MARKER_SIZE = 8

#: Default largest message body a broker accepts: 4 MiB (``maxMessageSize``).
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
#: Largest properties string: 32767 bytes (signed short length).
MAX_PROPERTIES_SIZE = 32767
#: Largest topic name: 127 bytes (signed byte length).
MAX_TOPIC_LENGTH = 127
#: Bodies larger than this are compressed by clients (4 KiB, Java and C++ default).
COMPRESS_OVER = 4 * 1024

# Message sysFlag bits (RocketMQ's ``MessageSysFlag``).
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_NOT_TYPE = 0x0
SYSFLAG_TRANSACTION_PREPARED: Final = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK: Final = 0xC
SYSFLAG_BORNHOST_V6: Final = 0x10
SYSFLAG_STOREHOST_V6: Final = 0x20
SYSFLAG_COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_ZLIB = 3 << 8

# Property names (``MessageConst``).
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

_HEAD: Final = struct.Struct(">iiiiiqqiq")  # totalsize..borntimestamp: 48 bytes
_INT: Final = struct.Struct(">i")
_LONG: Final = struct.Struct(">q")
_SHORT: Final = struct.Struct(">h")
_TAIL: Final = struct.Struct(">iq")  # reconsumetimes, preparedTransactionOffset
#: bornhost .. bodylength of a record with IPv4 born and store hosts.
_V4_MIDDLE: Final = struct.Struct(">8sq8siqi")

OFFSET_QUEUE_OFFSET = 20
OFFSET_PHYSICAL_OFFSET = 28
OFFSET_SYSFLAG = 36
OFFSET_BORN_TIMESTAMP = 40
OFFSET_BORN_HOST = 48


class MessageFormatError(ValueError):
    """Bytes that are not a valid stored record, batch or properties string."""


class BodyTooLargeError(MessageFormatError):
    """A compressed body that inflates to more than the limit allowed (``max_size`` of
    :func:`decompress_body`): a corrupt message, or a "zip bomb" from a peer."""


# -- helpers ------------------------------------------------------------------------


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: signed 32-bit, over UTF-16 code units.

    Used for tag codes in the ConsumeQueue and key hashes in the IndexFile (RocketMQ's
    ``ConsumeQueue`` and ``IndexService``).
    """
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def tags_hash_code(tags: str | None) -> int:
    """The ConsumeQueue tag code of ``tags``: its Java hash, 0 when empty."""
    if not tags:
        return 0
    return java_string_hash(tags)


#: ``crc32(data) -> int``: CRC-32 (unsigned) of a bytes-like ``data`` with zlib's polynomial
#: (``java.util.zip.CRC32``, which RocketMQ's ``UtilAll.crc32`` masks with 0x7FFFFFFF for BODYCRC).
#: zlib-ng's (the ``zlib-ng`` package: folding with carry-less multiplication, about 5 times
#: zlib's speed on a 1 KiB body on x86-64, and compiled code that clears the upper vector state
#: with ``vzeroupper`` before it returns) when it is installed, else :func:`zlib.crc32`; both give
#: the same value. The broker computes one per stored message. ISA-L's (``isal``), faster alone,
#: returns with the AVX-512 upper state dirty: in the broker the SSE code after it then stalls,
#: and ``perf`` put most of its cost on its first instruction (README, Performance).
crc32: Callable[[bytes | bytearray | memoryview], int]
#: Which implementation :data:`crc32` is: ``"zlib-ng"`` or ``"zlib"``.
CRC32_IMPLEMENTATION: str
try:
    from zlib_ng import zlib_ng
except ImportError:  # pragma: no cover - zlib-ng is a dependency; zlib is the fallback without a wheel
    crc32 = zlib.crc32
    CRC32_IMPLEMENTATION = "zlib"
else:
    crc32 = zlib_ng.crc32
    CRC32_IMPLEMENTATION = "zlib-ng"


def body_crc(body: bytes) -> int:
    """CRC32 of ``body`` masked with 0x7FFFFFFF, as stored in BODYCRC (RocketMQ's ``UtilAll.crc32``)."""
    return crc32(body) & 0x7FFFFFFF


def encode_properties(properties: Mapping[str, str]) -> str:
    """``name\\x01value\\x02...`` without a trailing separator (Java's form)."""
    return PROPERTY_SEPARATOR.join([f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in properties.items()])


def decode_properties(text: str | None) -> dict[str, str]:
    """Parse a properties string; malformed pieces (no ``\\x01``) are skipped."""
    result: dict[str, str] = {}
    if not text:
        return result
    for piece in text.split(PROPERTY_SEPARATOR):
        name, sep, value = piece.partition(NAME_VALUE_SEPARATOR)
        if sep and name:
            result[name] = value
    return result


def encode_host(addr: str) -> bytes:
    """``"ip:port"`` → address bytes (4 or 16) + int32 port.

    Raises ``ValueError`` when ``addr`` is not an IP address with a port.
    """
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    ip = ipaddress.ip_address(host)
    return ip.packed + _INT.pack(int(port))


_HOSTS: dict[bytes, str] = {}


def decode_host(data: bytes) -> str:
    """Address bytes (4 or 16) + int32 port → ``"ip:port"`` (``"[v6]:port"``); memoised
    (records repeat a few hosts, and ``ipaddress`` is slow)."""
    key = data if type(data) is bytes else bytes(data)
    text = _HOSTS.get(key)
    if text is None:
        ip = ipaddress.ip_address(key[:-4])
        (port,) = _INT.unpack(key[-4:])
        text = f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"
        if len(_HOSTS) >= 4096:
            _HOSTS.clear()
        _HOSTS[key] = text
    return text


def _host_is_v6(addr: str) -> bool:
    return ":" in addr.rpartition(":")[0]


# -- message ids (MessageClientIDSetter, MessageDecoder.createMessageId) ------------


def create_offset_msg_id(store_host: str, physical_offset: int) -> str:
    """The broker-assigned id: hex(store address + port + physical offset), upper case.

    Example: ``127.0.0.1:10911`` at offset 0x234 gives
    ``7F00000100002A9F0000000000000234``.
    """
    return (encode_host(store_host) + _LONG.pack(physical_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """An offsetMsgId → ``(store host "ip:port", physical offset)``.

    Raises ``MessageFormatError`` unless it is 32 (IPv4) or 56 (IPv6) hex digits.
    """
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise MessageFormatError(f"message id {msg_id!r} is not hex") from None
    if len(raw) not in (16, 28):
        raise MessageFormatError(f"message id {msg_id!r} has {len(raw)} bytes, expected 16 or 28")
    (offset,) = _LONG.unpack(raw[-8:])
    return decode_host(raw[:-8]), offset


def _local_ip_bytes() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return b"\x7f\x00\x00\x01"


_UNIQ_PREFIX = (_local_ip_bytes() + struct.pack(">H", os.getpid() & 0xFFFF) + os.urandom(4)).hex().upper()
_uniq_counter = itertools.count(int.from_bytes(os.urandom(2), "big"))


def _month_start_ms() -> int:
    now = time.localtime()
    return int(time.mktime((now.tm_year, now.tm_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000)


_MONTH_START = _month_start_ms()


def new_uniq_id() -> str:
    """A client message id (UNIQ_KEY): 32 upper-case hex digits.

    Layout as Java's ``MessageClientIDSetter``: IP (4) + pid (2) + random
    instance (4) + ms since the start of the month (4) + counter (2).
    """
    elapsed = (int(time.time() * 1000) - _MONTH_START) & 0xFFFFFFFF
    counter = next(_uniq_counter) & 0xFFFF
    return _UNIQ_PREFIX + f"{elapsed:08X}{counter:04X}"


# -- the model ----------------------------------------------------------------------


@dataclass(slots=True)
class Message:
    """A message to send: topic, body bytes, application flag and properties."""

    topic: str
    body: bytes = b""
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def tags(self) -> str | None:
        """The TAGS property."""
        return self.properties.get(PROPERTY_TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        if value:
            self.properties[PROPERTY_TAGS] = value
        else:
            self.properties.pop(PROPERTY_TAGS, None)

    @property
    def keys(self) -> list[str]:
        """The KEYS property split on spaces."""
        return [k for k in self.properties.get(PROPERTY_KEYS, "").split(" ") if k]

    @keys.setter
    def keys(self, value: str | list[str] | None) -> None:
        text = " ".join(value) if isinstance(value, list) else (value or "")
        if text:
            self.properties[PROPERTY_KEYS] = text
        else:
            self.properties.pop(PROPERTY_KEYS, None)

    @property
    def delay_level(self) -> int:
        """The DELAY property (1..18), 0 when not delayed."""
        try:
            return int(self.properties.get(PROPERTY_DELAY_TIME_LEVEL, "0"))
        except ValueError:
            return 0


@dataclass(slots=True)
class MessageExt:
    """A stored message as read back from the CommitLog (every field of the stored record).

    ``body`` is as stored (possibly compressed, see ``sys_flag``); use
    :meth:`payload` for the decompressed bytes. Timestamps are ms since the epoch.
    """

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_size: int
    body: bytes
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body_crc: int
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        """The TAGS property."""
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        """The KEYS property split on spaces."""
        return [k for k in self.properties.get(PROPERTY_KEYS, "").split(" ") if k]

    @property
    def offset_msg_id(self) -> str:
        """The broker-assigned id (store host + physical offset)."""
        return create_offset_msg_id(self.store_host, self.physical_offset)

    @property
    def msg_id(self) -> str:
        """The id users see: UNIQ_KEY when present, else the offsetMsgId (``MessageClientExt.getMsgId``)."""
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or self.offset_msg_id

    def payload(self) -> bytes:
        """The body, decompressed when the COMPRESSED sysFlag bit is set.

        Raises ``MessageFormatError`` for an unknown compression type or a
        corrupt compressed body, ``BodyTooLargeError`` for one inflating beyond
        :data:`MAX_MESSAGE_SIZE` (call :func:`decompress_body` for another limit).
        """
        return decompress_body(self.body, self.sys_flag)


def compress_body(body: bytes, sys_flag: int = 0, threshold: int = COMPRESS_OVER) -> tuple[bytes, int]:
    """Zlib-compress ``body`` when it is longer than ``threshold`` bytes.

    Returns ``(body, sys_flag)`` with the COMPRESSED bit set when compressed.
    """
    if len(body) <= threshold:
        return body, sys_flag
    return zlib.compress(body, 5), sys_flag | SYSFLAG_COMPRESSED


def decompress_body(body: bytes, sys_flag: int, max_size: int = MAX_MESSAGE_SIZE) -> bytes:
    """Inverse of :func:`compress_body`; zlib unless bits 8-10 name another type.

    Inflates at most ``max_size`` bytes (default :data:`MAX_MESSAGE_SIZE`, RocketMQ's default
    ``maxMessageSize``, which producers check against the body before compressing it,
    ``Validators.checkMessage``): a body that would inflate to more raises
    :class:`BodyTooLargeError` after ``max_size`` bytes, whatever it claims. Raises
    ``MessageFormatError`` for LZ4/ZSTD (not supported) or corrupt or truncated data.
    """
    if not sys_flag & SYSFLAG_COMPRESSED:
        return body
    kind = sys_flag & SYSFLAG_COMPRESSION_TYPE_MASK
    if kind not in (0, COMPRESSION_ZLIB):
        raise MessageFormatError(f"compression type {kind >> 8} is not supported (zlib only)")
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(body, max_size + 1)  # one byte more than allowed says "too large"
    except zlib.error as exc:
        raise MessageFormatError(f"corrupt compressed body: {exc}") from None
    if len(out) > max_size:
        raise BodyTooLargeError(f"compressed body of {len(body)} bytes inflates to more than {max_size} bytes "
                                f"(the consumer's max_body_size)")
    if not inflater.eof:
        raise MessageFormatError("corrupt compressed body: a truncated zlib stream")
    return out


# -- stored records (CommitLog.DefaultAppendMessageCallback) ------------------------


def encode_record(
    *,
    topic: str,
    queue_id: int,
    body: bytes,
    properties: str | bytes = b"",
    flag: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: str = "127.0.0.1:0",
    store_timestamp: int = 0,
    store_host: str = "127.0.0.1:0",
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    crc: int | None = None,
) -> bytearray:
    """Encode one stored record.

    Queue and physical offsets are usually patched in at append time with
    :func:`patch_offsets`. IPv6 hosts set the sysFlag host bits. Raises
    ``MessageFormatError`` for a topic over 127 bytes or properties over
    32767 bytes, ``ValueError`` for a host that is not ``ip:port``.
    """
    topic_b = topic.encode()
    if not topic_b or len(topic_b) > MAX_TOPIC_LENGTH:
        raise MessageFormatError(f"topic length {len(topic_b)} not in 1..{MAX_TOPIC_LENGTH}")
    props_b = properties.encode() if isinstance(properties, str) else properties
    if len(props_b) > MAX_PROPERTIES_SIZE:
        raise MessageFormatError(f"properties of {len(props_b)} bytes exceed {MAX_PROPERTIES_SIZE}")
    born = encode_host(born_host)
    store = encode_host(store_host)
    if len(born) == 20:
        sys_flag |= SYSFLAG_BORNHOST_V6
    if len(store) == 20:
        sys_flag |= SYSFLAG_STOREHOST_V6
    total = 84 - 16 + len(born) + len(store) + 4 + len(body) + 1 + len(topic_b) + 2 + len(props_b)
    buf = bytearray(total)
    _HEAD.pack_into(
        buf,
        0,
        total,
        MESSAGE_MAGIC_CODE,
        body_crc(body) if crc is None else crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
    )
    pos = 48
    buf[pos : pos + len(born)] = born
    pos += len(born)
    _LONG.pack_into(buf, pos, store_timestamp)
    pos += 8
    buf[pos : pos + len(store)] = store
    pos += len(store)
    _TAIL.pack_into(buf, pos, reconsume_times, prepared_transaction_offset)
    pos += 12
    _INT.pack_into(buf, pos, len(body))
    pos += 4
    buf[pos : pos + len(body)] = body
    pos += len(body)
    buf[pos] = len(topic_b)
    pos += 1
    buf[pos : pos + len(topic_b)] = topic_b
    pos += len(topic_b)
    _SHORT.pack_into(buf, pos, len(props_b))
    pos += 2
    buf[pos : pos + len(props_b)] = props_b
    return buf


def patch_offsets(buf: bytearray | memoryview, pos: int, queue_offset: int, physical_offset: int) -> None:
    """Write QUEUEOFFSET and PHYSICALOFFSET into the record starting at ``pos``."""
    _LONG.pack_into(buf, pos + OFFSET_QUEUE_OFFSET, queue_offset)
    _LONG.pack_into(buf, pos + OFFSET_PHYSICAL_OFFSET, physical_offset)


def patch_store_timestamp(buf: bytearray | memoryview, pos: int, store_timestamp: int) -> None:
    """Write STORETIMESTAMP into the record starting at ``pos`` (after BORNHOST)."""
    (sys_flag,) = _INT.unpack_from(buf, pos + OFFSET_SYSFLAG)
    born_len = 20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8
    _LONG.pack_into(buf, pos + OFFSET_BORN_HOST + born_len, store_timestamp)


def decode_record(data: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = False) -> MessageExt:
    """Decode the record at ``pos``.

    Raises ``MessageFormatError`` when the magic code is wrong, the sizes are
    inconsistent or run past ``data``, or (with ``check_crc``) the body CRC
    does not match.
    """
    end_of_data = len(data)
    if end_of_data - pos < 4 + 4:
        raise MessageFormatError(f"record at {pos}: fewer than 8 bytes left")
    try:
        (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts) = _HEAD.unpack_from(data, pos)
        if magic != MESSAGE_MAGIC_CODE:
            raise MessageFormatError(f"record at {pos}: bad magic code {magic:#x}")
        if total < 91 or pos + total > end_of_data:
            raise MessageFormatError(f"record at {pos}: total size {total} out of range")
        end = pos + total
        if not sys_flag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6):  # IPv4 hosts: one unpack
            born, store_ts, store, reconsume, prepared, body_len = _V4_MIDDLE.unpack_from(data, pos + 48)
            born_host = decode_host(born)
            store_host = decode_host(store)
            p = pos + 48 + _V4_MIDDLE.size
        else:
            p = pos + 48
            born_len = 20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8
            store_len = 20 if sys_flag & SYSFLAG_STOREHOST_V6 else 8
            born_host = decode_host(bytes(data[p : p + born_len]))
            p += born_len
            (store_ts,) = _LONG.unpack_from(data, p)
            p += 8
            store_host = decode_host(bytes(data[p : p + store_len]))
            p += store_len
            reconsume, prepared = _TAIL.unpack_from(data, p)
            p += 12
            (body_len,) = _INT.unpack_from(data, p)
            p += 4
        if body_len < 0 or p + body_len > end:
            raise MessageFormatError(f"record at {pos}: body length {body_len} out of range")
        body = bytes(data[p : p + body_len])
        p += body_len
        topic_len = data[p]
        p += 1
        if p + topic_len > end:
            raise MessageFormatError(f"record at {pos}: topic length {topic_len} out of range")
        topic = bytes(data[p : p + topic_len]).decode()
        p += topic_len
        (props_len,) = _SHORT.unpack_from(data, p)
        p += 2
        if props_len < 0 or p + props_len != end:
            raise MessageFormatError(f"record at {pos}: properties length {props_len} disagrees with total size")
        props = bytes(data[p : p + props_len]).decode()
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise MessageFormatError(f"record at {pos}: {exc}") from None
    if check_crc and body_crc(body) != crc:
        raise MessageFormatError(f"record at {pos}: body CRC mismatch")
    return MessageExt(
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=phys,
        store_size=total,
        body=body,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=born_host,
        store_timestamp=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body_crc=crc,
        properties=decode_properties(props),
    )


def decode_records(data: bytes | bytearray | memoryview) -> Iterator[MessageExt]:
    """Decode back-to-back records (a pull or query response body).

    Raises ``MessageFormatError`` at the first bad record.
    """
    pos = 0
    end = len(data)
    while pos < end:
        msg = decode_record(data, pos)
        pos += msg.store_size
        yield msg


# -- batches (MessageDecoder.encodeMessages) ----------------------------------------

_BATCH_ITEM_HEAD: Final = struct.Struct(">iiiii")  # total, magic, crc, flag, bodylen


@dataclass(slots=True)
class BatchItem:
    """One message of a batch body: application flag, body, properties string."""

    flag: int
    body: bytes
    properties: str


def encode_batch(messages: list[Message]) -> bytes:
    """Encode messages as a SEND_BATCH_MESSAGE body (``MessageDecoder.encodeMessages``).

    Raises ``MessageFormatError`` if a properties string exceeds 32767 bytes.
    """
    parts: list[bytes] = []
    for msg in messages:
        props = encode_properties(msg.properties).encode()
        if len(props) > MAX_PROPERTIES_SIZE:
            raise MessageFormatError(f"properties of {len(props)} bytes exceed {MAX_PROPERTIES_SIZE}")
        total = 20 + len(msg.body) + 2 + len(props)
        parts.append(_BATCH_ITEM_HEAD.pack(total, 0, 0, msg.flag, len(msg.body)))
        parts.append(msg.body)
        parts.append(_SHORT.pack(len(props)))
        parts.append(props)
    return b"".join(parts)


def decode_batch(data: bytes) -> list[BatchItem]:
    """Decode a batch body into items (:func:`split_batch`, one :class:`BatchItem` each).

    Raises ``MessageFormatError`` when an item's sizes are inconsistent or
    run past the body, its properties are not UTF-8, or the body is empty.
    """
    flags, bodies, props = split_batch(data)
    return [BatchItem(f, bytes(b), p.decode()) for f, b, p in zip(flags, bodies, props, strict=True)]


def split_batch(data: bytes) -> tuple[list[int], list[memoryview], list[bytes]]:
    """:func:`decode_batch` as parallel lists ``(flags, bodies, properties)``, the properties
    strings left as their UTF-8 bytes (checked to be UTF-8), no object per item. The bodies are
    views of ``data`` (no copy: the broker copies each body once, into its stored record).

    The item fields are read byte by byte (:func:`_int32_at`): compiled, that is native integer
    arithmetic, with no tuple or int object per field as ``struct.unpack_from`` makes. Raises
    ``MessageFormatError`` as :func:`decode_batch` does.
    """
    flags: list[int] = []
    bodies: list[memoryview] = []
    props: list[bytes] = []
    view = memoryview(data)
    pos: i64 = 0
    end: i64 = len(data)
    if end == 0:
        raise MessageFormatError("batch body is empty")
    while pos < end:
        if end - pos < 22:
            raise MessageFormatError(f"batch item at {pos}: truncated header")
        total = _int32_at(data, pos)  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLEN (4 bytes each)
        item_end = pos + total
        if total < 22 or item_end > end:
            raise MessageFormatError(f"batch item at {pos}: total size {total} out of range")
        body_len = _int32_at(data, pos + 16)
        p = pos + 20 + body_len
        if body_len < 0 or p + 2 > item_end:
            raise MessageFormatError(f"batch item at {pos}: body length {body_len} out of range")
        props_len: i64 = (data[p] << 8) | data[p + 1]  # PROPERTIESLENGTH, a signed short
        if props_len >= 0x8000 or p + 2 + props_len != item_end:
            raise MessageFormatError(f"batch item at {pos}: properties length {props_len} out of range")
        raw = data[p + 2 : item_end]
        if not raw.isascii():
            try:
                raw.decode()
            except UnicodeDecodeError:
                raise MessageFormatError(f"batch item at {pos}: properties are not UTF-8") from None
        flags.append(_int32_at(data, pos + 12))
        bodies.append(view[pos + 20 : p])
        props.append(raw)
        pos = item_end
    return flags, bodies, props


def _int32_at(data: bytes, pos: i64) -> i64:
    """The big-endian signed 32-bit integer at ``data[pos : pos + 4]`` (Java's ``ByteBuffer.getInt``);
    the caller checked that the 4 bytes are there."""
    v: i64 = (data[pos] << 24) | (data[pos + 1] << 16) | (data[pos + 2] << 8) | data[pos + 3]
    return v - 0x100000000 if v >= 0x80000000 else v
