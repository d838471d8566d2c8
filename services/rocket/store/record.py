"""Fast paths over the stored record layout (``MessageDecoder``) for the store's hot loops.

:func:`rocket.message.encode_record` is the reference encoder; it costs about
16 µs per message (mostly parsing host strings), too much for an append path
that must keep up with the disk. :class:`RecordEncoder` produces the very same
bytes (a property test checks this) with the store host encoded once, born
hosts cached, and each whole record packed by one cached ``struct`` call
straight onto the chunk being written.

:func:`parse_dispatch` is the reverse for the reput/recovery path: it reads
only what a ConsumeQueue or IndexFile entry needs (RocketMQ 4.9.8
``CommitLog.checkMessageAndReturnSize``), optionally checking the body CRC.
:func:`walk_records` is recovery's fast path over runs of records (one
``struct`` call and the CRC per record, rows instead of objects).

:func:`fast_java_hash` equals :func:`rocket.message.java_string_hash` in a few
C-level operations instead of a Python loop per character;
:func:`index_key_hash` folds an ASCII key's bytes in 4 at a time.
"""

from __future__ import annotations

import mmap
import operator
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from librt.strings import BytesWriter, write_i16_be, write_i32_be, write_i64_be
from mypy_extensions import i32, i64

from rocket.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    crc32,
    encode_host,
)
from rocket.store.api import AppendedMessage, PutMessageRequest, StoredBatch

#: Smallest possible record (IPv4 hosts, empty body, 1-byte topic would be 92).
MIN_RECORD_SIZE: Final = 91
_HOST_BITS: Final = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
_TRAN_MASK: Final = 0xC
#: Transaction types whose records take no queue offset (and never reach a ConsumeQueue).
_NO_QUEUE_OFFSET = (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK)
_SHORT: Final = struct.Struct(">h")
_INT: Final = struct.Struct(">i")
_LONG: Final = struct.Struct(">q")
_SIZE_MAGIC: Final = struct.Struct(">ii")
#: totalsize, magic, crc, queueid, flag, queueoffset, physicaloffset, sysflag, borntimestamp
_HEAD: Final = struct.Struct(">iiiiiqqiq")
BLANK_MARKER = struct.Struct(">ii")

_U32: Final = 0xFFFFFFFF
_POW31 = [1]
for _ in range(1, 4096):
    _POW31.append((_POW31[-1] * 31) & _U32)
_POWERS: dict[int, list[int]] = {}
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


def _powers(n: int) -> list[int]:
    """``[31**(n-1), ..., 31, 1]`` mod 2**32 (and ``_POW31`` grown to hold ``31**n``)."""
    p = _POWERS.get(n)
    if p is None:
        if n >= len(_POW31):
            while len(_POW31) <= n:
                _POW31.append((_POW31[-1] * 31) & _U32)
        p = _POW31[n - 1 :: -1] if n else []
        if len(_POWERS) < 512:
            _POWERS[n] = p
    return p


def _units(text: str) -> bytes | memoryview:
    try:
        return text.encode("ascii")
    except UnicodeEncodeError:
        return memoryview(text.encode(_UTF16)).cast("H")


def fast_java_hash(text: str) -> int:
    """Java ``String.hashCode`` (signed 32-bit over UTF-16 units), without a per-character loop."""
    units = _units(text)
    h: int = sum(map(operator.mul, units, _powers(len(units)))) & _U32
    return h - 0x100000000 if h & 0x80000000 else h


_topic_prefix: dict[str, int] = {}


def index_key_hash(topic: str, key: str) -> int:
    """IndexFile key hash: ``abs(hashCode(topic + "#" + key))``, 0 for Integer.MIN_VALUE
    (RocketMQ's ``IndexService.buildKey`` and ``IndexFile.indexKeyHashMethod``; ``hashCode`` is
    Java's ``String.hashCode``, :func:`rocket.message.java_string_hash`).

    The hash of ``topic#`` is cached (:func:`_prefix_hash`); the key goes in by
    :func:`_key_hash`."""
    return _key_hash(_prefix_hash(topic), key)


def _key_hash(prefix: i64, key: str) -> int:
    """:func:`index_key_hash` of ``key`` after a topic whose ``topic#`` hashes to ``prefix``
    (:func:`_prefix_hash`). An ASCII key (a UNIQ_KEY is 32 hex digits) is folded in from its
    bytes, 4 at a time, in 64-bit native integers when compiled; others through their UTF-16
    units."""
    h: i64 = prefix
    data = key.encode()
    n: i64 = len(data)
    if n == len(key):  # ASCII: the UTF-8 bytes are the UTF-16 units
        i: i64 = 0
        while i + 4 <= n:
            h = (h * 923521 + data[i] * 29791 + data[i + 1] * 961 + data[i + 2] * 31 + data[i + 3]) & _U32
            i += 4
        while i < n:
            h = (h * 31 + data[i]) & _U32
            i += 1
    else:
        units = _units(key)
        powers = _powers(len(units))  # (grows _POW31 to hold 31**len)
        big: int = h  # (a Python int: the product below passes 64 bits)
        h = (big * _POW31[len(units)] + sum(map(operator.mul, units, powers))) & _U32
    if h > 0x80000000:
        return 0x100000000 - h
    return 0 if h == 0x80000000 else h


def _prefix_hash(topic: str) -> int:
    """``hashCode(topic + "#")`` as an unsigned 32-bit value (cached)."""
    ph = _topic_prefix.get(topic)
    if ph is None:
        ph = fast_java_hash(topic + "#") & _U32
        if len(_topic_prefix) > 65536:
            _topic_prefix.clear()
        _topic_prefix[topic] = ph
    return ph


def index_entries(topics: list[str], phys: list[int], store_timestamps: list[int], uniq_keys: list[str | None],
                  keys: Sequence[Sequence[str] | str], last: int) -> tuple[list[int], list[int], list[int], int]:
    """The IndexFile entries of messages in CommitLog order (``IndexService.buildIndex``, parallel
    lists, one item per message): for each message past physical offset ``last``, its UNIQ_KEY then
    each of its keys (``keys`` items: a KEYS list or the raw space-separated property).
    Returns ``(key hashes, physical offsets, store times, newest indexed offset)``."""
    hashes: list[int] = []
    offsets: list[int] = []
    times: list[int] = []
    topic = ""
    prefix = _prefix_hash(topic)
    for t, p, ts, u, k in zip(topics, phys, store_timestamps, uniq_keys, keys, strict=True):
        if p <= last:
            continue
        if t != topic:  # (a batch's messages share their topic: its prefix hash is looked up once)
            topic = t
            prefix = _prefix_hash(t)
        if u:
            last = p
            hashes.append(_key_hash(prefix, u))
            offsets.append(p)
            times.append(ts)
        if k:
            last = p
            for key in k.split(" ") if isinstance(k, str) else k:
                if key:
                    hashes.append(_key_hash(prefix, key))
                    offsets.append(p)
                    times.append(ts)
    return hashes, offsets, times, last


def put_index_entries(mm: mmap.mmap, slots: memoryview, entries_at: int, begin_timestamp: int, count: int,
                      hashes: list[int], phys: list[int], store_timestamps: list[int]) -> tuple[int, int]:
    """Write IndexFile entries ``count``, ``count + 1``, ... for ``(hashes[i], phys[i],
    store_timestamps[i])`` into ``mm`` (the file's writable mapping: the 40-byte header, the
    int32 hash slots, then 20-byte entries from ``entries_at``), linking each into its hash
    slot's chain as ``IndexFile.putKey`` does (time in seconds since ``begin_timestamp``).
    ``slots`` is the slot region of ``mm`` cast to native-order unsigned 32-bit items (format
    ``"I"``): a slot is read and written as one item, its bytes swapped to and from the file's
    big-endian order on a little-endian machine. The caller checked that the entries fit.
    Returns ``(next entry number, hash slots newly used)``. Raises ``ValueError`` when the three
    lists differ in length.

    The slots are read and written one entry after the other (a later entry of the same slot
    links to the earlier one). The entries, consecutive in the file, are written field by field
    into one ``librt.strings.BytesWriter`` (native big-endian stores when compiled) and go in
    with one slice assignment."""
    n = len(hashes)
    if len(phys) != n or len(store_timestamps) != n:
        raise ValueError(f"{n} key hashes, {len(phys)} offsets and {len(store_timestamps)} times")
    slot_num = len(slots)
    first = count
    new_slots = 0
    last_ts = -1
    diff = 0
    entries = BytesWriter()
    for i in range(n):
        h = hashes[i]
        ts = store_timestamps[i]
        if ts != last_ts:
            last_ts = ts
            diff = 0 if begin_timestamp <= 0 or ts < begin_timestamp else min((ts - begin_timestamp) // 1000,
                                                                                  0x7FFFFFFF)
        slot = h % slot_num
        slot_value: i64 = slots[slot]
        if _SWAP:
            slot_value = _swap32(slot_value)
        if slot_value <= 0 or slot_value > count:  # (a negative int32 reads as more than any count)
            slot_value = 0
            new_slots += 1
        write_i32_be(entries, h)  # keyHash, phyOffset, timeDiff, prevIndex: IndexFile.putKey's 20 bytes
        write_i64_be(entries, phys[i])
        write_i32_be(entries, diff)
        write_i32_be(entries, i32(slot_value))
        slots[slot] = _swap32(count) if _SWAP else count
        count += 1
    mm[entries_at + first * 20:entries_at + count * 20] = entries.getvalue()
    return count, new_slots


#: The digits of an offsetMsgId (``UtilAll.bytes2string``: upper-case hex).
_HEX_DIGITS: Final = b"0123456789ABCDEF"
#: Hash slots read through a native-order view need their bytes swapped (the file is big-endian).
_SWAP: Final = sys.byteorder == "little"


def _swap32(v: i64) -> i64:
    """The unsigned 32-bit ``v`` with its 4 bytes in the opposite order."""
    return ((v & 0xFF) << 24) | ((v & 0xFF00) << 8) | ((v >> 8) & 0xFF00) | ((v >> 24) & 0xFF)


class RecordEncoder:
    """Encodes stored records byte-for-byte like :func:`rocket.message.encode_record`.

    ``store_host`` is the broker's ``ip:port`` written as STOREHOST. Host
    sysFlag bits are derived from the hosts (bits given by the caller for the
    hosts are cleared first, so a record always parses).
    """

    def __init__(self, store_host: str) -> None:
        self.store_host = store_host
        self._store = encode_host(store_host)
        self._store_bits = SYSFLAG_STOREHOST_V6 if len(self._store) == 20 else 0
        #: Prefix of every offsetMsgId (``MessageDecoder.createMessageId``): store address and port in upper-case hex.
        self.msg_id_prefix = self._store.hex().upper()
        self._born: dict[str, bytes] = {}
        s = len(self._store)
        #: Packs TOTALSIZE .. BODYLENGTH, per born host size (8 or 20).
        self.heads = {b: struct.Struct(f">iiiiiqqiq{b}sq{s}siqi") for b in (8, 20)}
        #: Packs the rest of a head that a batch's records share, SYSFLAG .. PREPAREDTRANSACTIONOFFSET,
        #: per born host size (:meth:`encode_message_batch_into`).
        self.shared = {b: struct.Struct(f">iq{b}sq{s}siq") for b in (8, 20)}
        #: Bytes of a record besides body, topic (with its length byte) and properties, per born host size.
        self.fixed = {b: 48 + b + 8 + s + 12 + 4 + 2 for b in (8, 20)}
        self._id_format = self.msg_id_prefix + "%016X"
        self._id_prefix = self.msg_id_prefix.encode("ascii")
        #: Whole-record structs by (born host size, body, topic tail and properties lengths).
        self._records: dict[tuple[int, int, int, int], struct.Struct] = {}

    def born_bytes(self, born_host: str) -> bytes:
        """``ip:port`` → address + port bytes (cached). Raises ``ValueError`` when malformed."""
        b = self._born.get(born_host)
        if b is None:
            b = encode_host(born_host)
            if len(self._born) > 4096:
                self._born.clear()
            self._born[born_host] = b
        return b

    def record_struct(self, born_len: int, body_len: int, tail_len: int, props_len: int) -> struct.Struct:
        """The ``struct.Struct`` packing one whole record with these variable parts (cached).

        Fields, in order: TOTALSIZE .. BODYLENGTH as in :attr:`heads`, then the
        body (``body_len`` bytes), topic tail (``tail_len``: length byte and
        topic), PROPERTIESLENGTH (int16) and the properties (``props_len``).
        """
        key = (born_len, body_len, tail_len, props_len)
        s = self._records.get(key)
        if s is None:
            if len(self._records) >= 1024:
                self._records.clear()
            s = self._records[key] = struct.Struct(
                f"{self.heads[born_len].format}{body_len}s{tail_len}sh{props_len}s")
        return s

    def encode_batch_into(
        self,
        out: list[bytes | bytearray | memoryview],
        reqs: Sequence[PutMessageRequest],
        borns: Sequence[bytes],
        props: Sequence[bytes],
        sizes: Sequence[int],
        topic_tail: bytes,
        queue_id: int,
        queue_offset: int,
        physical_offset: int,
        store_timestamp: int,
    ) -> tuple[list[AppendedMessage], list[int], int, list[int] | None]:
        """Append the records of ``reqs`` to ``out``, one bytes object each (``sizes`` from
        :meth:`fixed`), the first at ``physical_offset`` with queue offset ``queue_offset``; all
        of them or, when one fails to pack (raising ``struct.error``), none.

        Prepared and rollback transaction records get queue offset 0 and do not
        advance it (as in ``CommitLog``). Returns ``(appended, physical offsets, next queue
        offset, sysFlags or None when no record is transactional)``. Each
        record is packed by one cached ``struct.Struct`` call (:meth:`record_struct`).
        """
        if len(reqs) == 1 and reqs[0].sys_flag & _TRAN_MASK not in _NO_QUEUE_OFFSET:  # a single send
            r = reqs[0]
            born = borns[0]
            p = props[0]
            body = r.body
            bl = len(born)
            size = sizes[0]
            out.append(self.record_struct(bl, len(body), len(topic_tail), len(p)).pack(
                size, MESSAGE_MAGIC_CODE, crc32(body) & 0x7FFFFFFF, queue_id, r.flag, queue_offset,
                physical_offset,
                (r.sys_flag & ~_HOST_BITS) | self._store_bits | (SYSFLAG_BORNHOST_V6 if bl == 20 else 0),
                r.born_timestamp, born, store_timestamp, self._store, r.reconsume_times, r.prepared_transaction_offset,
                len(body), body, topic_tail, len(p), p))
            return ([AppendedMessage(physical_offset, size, queue_offset, store_timestamp,
                                     self._id_format % physical_offset)], [physical_offset], queue_offset + 1, None)
        store = self._store
        store_bits = self._store_bits
        id_format = self._id_format
        record_struct = self.record_struct
        last_n = last_pl = last_bl = -1
        rs = self.heads[8]  # replaced at the first record
        tl = len(topic_tail)
        appended: list[AppendedMessage] = []
        add = appended.append
        new_message = AppendedMessage
        phys_list: list[int] = []
        add_phys = phys_list.append
        records: list[bytes | bytearray | memoryview] = []  # to ``out`` once all are packed
        sys_flags: list[int] | None = None
        q = queue_offset
        phys = physical_offset
        for r, born, p, size in zip(reqs, borns, props, sizes, strict=True):
            sf = r.sys_flag
            if sf & _TRAN_MASK in _NO_QUEUE_OFFSET:
                qo = 0
                if sys_flags is None:
                    sys_flags = [x.sys_flag for x in reqs]
            else:
                qo = q
                q += 1
            bl = len(born)
            sf = (sf & ~_HOST_BITS) | store_bits | (SYSFLAG_BORNHOST_V6 if bl == 20 else 0)
            body = r.body
            n = len(body)
            pl = len(p)
            if n != last_n or pl != last_pl or bl != last_bl:  # a batch's lengths rarely change
                rs = record_struct(bl, n, tl, pl)
                last_n, last_pl, last_bl = n, pl, bl
            records.append(rs.pack(size, MESSAGE_MAGIC_CODE, crc32(body) & 0x7FFFFFFF, queue_id, r.flag, qo, phys,
                                   sf, r.born_timestamp, born, store_timestamp, store, r.reconsume_times,
                                   r.prepared_transaction_offset, n, body, topic_tail, pl, p))
            add(new_message(phys, size, qo, store_timestamp, id_format % phys))
            add_phys(phys)
            phys += size
        out += records
        return appended, phys_list, q, sys_flags

    def encode_message_batch_into(
        self,
        out: list[bytes | bytearray | memoryview],
        bodies: Sequence[bytes | memoryview],
        props: list[bytes],
        flags: list[int],
        sizes: list[int],
        born: bytes,
        sys_flag: int,
        born_timestamp: int,
        reconsume_times: int,
        topic_tail: bytes,
        queue_id: int,
        queue_offset: int,
        physical_offset: int,
        store_timestamp: int,
    ) -> tuple[StoredBatch, int, list[int] | None]:
        """:meth:`encode_batch_into` for the messages of a batch send (``PutMessageBatch``): they
        share born host (``born``, from :meth:`born_bytes`), sysFlag, born time and reconsume
        times; ``bodies`` (bytes or views), ``props``, ``flags`` and ``sizes`` are per message. Same
        bytes (prepared transaction offset 0, as a batch's store requests had). Returns ``(where the
        messages landed as one StoredBatch (no object per message; its physical offsets and their
        offsetMsgIds, comma-separated, their hex digits written natively), next queue offset, sysFlags or
        None)`` (:meth:`encode_batch_into`'s answer, gathered).

        The bodies go to ``out`` as given (views of the request: the kernel copies each once, into
        the page cache, when the CommitLog writes ``out`` with one ``pwritev``). Everything between
        two bodies is one bytes object, written field by field with mypyc's ``librt.strings``
        (``BytesWriter`` and its big-endian ``write_i32_be`` / ``write_i64_be``, native stores when
        compiled): the topic tail, PROPERTIESLENGTH and properties of one record, then TOTALSIZE ..
        PHYSICALOFFSET of the next, the fields every record of the batch shares (SYSFLAG ..
        PREPAREDTRANSACTIONOFFSET, packed once) and its BODYLENGTH. So ``out`` gets ``2n + 1``
        buffers for ``n`` records: all of them, or none when a field is out of its range
        (``struct.error``, as the whole-record ``struct`` of :meth:`encode_batch_into` raises)."""
        bl = len(born)
        sf = (sys_flag & ~_HOST_BITS) | self._store_bits | (SYSFLAG_BORNHOST_V6 if bl == 20 else 0)
        sys_flags: list[int] | None = None
        if sys_flag & _TRAN_MASK in _NO_QUEUE_OFFSET:  # (queue offset 0 for all, none taken)
            sys_flags = [sys_flag] * len(bodies)
            q = 0
            step = 0
        else:
            q = queue_offset
            step = 1
        store = self._store
        shared = self.shared[bl].pack(sf, born_timestamp, born, store_timestamp, store, reconsume_times, 0)
        _INT.pack(queue_id)  # (struct.error when out of range, before anything is written)
        phys_list: list[int] = []
        parts: list[bytes | bytearray | memoryview] = []  # to ``out`` once every record is written
        phys = physical_offset
        n = len(bodies)
        if len(props) != n or len(flags) != n or len(sizes) != n:
            raise ValueError(f"{n} bodies, {len(props)} properties, {len(flags)} flags, {len(sizes)} sizes")
        crc = crc32  # (compiled, a module global is a dict lookup at each use)
        w = BytesWriter()
        ids = BytesWriter()  # the offsetMsgIds, comma-separated
        id_prefix = self._id_prefix
        try:
            for i in range(n):
                body = bodies[i]
                p = props[i]
                size = sizes[i]
                write_i32_be(w, size)
                write_i32_be(w, MESSAGE_MAGIC_CODE)
                write_i32_be(w, crc(body) & 0x7FFFFFFF)
                write_i32_be(w, queue_id)
                write_i32_be(w, flags[i])
                write_i64_be(w, q)
                write_i64_be(w, phys)
                w.write(shared)
                write_i32_be(w, len(body))
                parts.append(w.getvalue())
                w.truncate(0)
                parts.append(body)
                w.write(topic_tail)
                write_i16_be(w, len(p))
                w.write(p)
                if i:
                    ids.append(44)  # ","
                ids.write(id_prefix)
                digits: i64 = phys
                shift: i64 = 60
                while shift >= 0:  # the offset in 16 upper-case hex digits, as MessageDecoder.createMessageId
                    ids.append(_HEX_DIGITS[(digits >> shift) & 15])
                    shift -= 4
                phys_list.append(phys)
                phys += size
                q += step
        except (OverflowError, ValueError) as exc:  # an int field outside its width
            raise struct.error(f"a record field is out of range: {exc}") from None
        parts.append(w.getvalue())
        out += parts
        # Every offsetMsgId at once: store host + offset, in hex with a comma between ids.
        msg_ids = ids.getvalue().decode("ascii")
        batch = StoredBatch(phys_list, sizes, queue_offset if step else 0, step, store_timestamp, msg_ids,
                            len(id_prefix) + 16)
        return batch, q if step else queue_offset, sys_flags

    def encode(self, req: PutMessageRequest, *, queue_offset: int = 0, physical_offset: int = 0,
               store_timestamp: int = 0) -> bytes:
        """One record for ``req`` (tests and tools). Raises ``ValueError`` for a bad born host."""
        born = self.born_bytes(req.born_host)
        props = req.properties.encode()
        tail = topic_tail(req.topic)
        size = self.fixed[len(born)] + len(tail) + len(req.body) + len(props)
        out: list[bytes | bytearray | memoryview] = []
        self.encode_batch_into(out, [req], [born], [props], [size], tail, req.queue_id, queue_offset,
                               physical_offset, store_timestamp)
        return b"".join(out)


def topic_tail(topic: str) -> bytes:
    """The TOPICLENGTH byte followed by the topic's UTF-8 bytes."""
    t = topic.encode()
    return bytes((len(t),)) + t


# -- parsing for dispatch ------------------------------------------------------------

#: :func:`parse_dispatch` / :func:`check_record` outcomes other than a record.
END_OF_DATA: Final = 0  # zeros / not enough bytes yet: the log ends here (or the record is incomplete)
BLANK: Final = -1  # end-of-segment blank marker
CORRUPT: Final = -2  # bad magic, sizes or CRC
_CHECK: Final = struct.Struct(">iiiiiqqi")  # totalsize .. sysflag


@dataclass(slots=True, init=False)
class DispatchRecord:
    """What the reput needs from one stored record (``DispatchRequest``)."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    sys_flag: int
    keys: str
    uniq_key: str | None
    #: DELAY property of a SCHEDULE_TOPIC_XXXX record (0 otherwise): its tag code is a delivery time.
    delay_level: int = 0

    def __init__(self, topic: str, queue_id: int, queue_offset: int, physical_offset: int, size: int,
                 tags_code: int, store_timestamp: int, sys_flag: int, keys: str, uniq_key: str | None,
                 delay_level: int = 0) -> None:
        # Written out (``init=False``): the ``__init__`` that ``dataclass`` generates stays
        # interpreted in the compiled form of this module (rocket.compiled); this one is native.
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.physical_offset = physical_offset
        self.size = size
        self.tags_code = tags_code
        self.store_timestamp = store_timestamp
        self.sys_flag = sys_flag
        self.keys = keys
        self.uniq_key = uniq_key
        self.delay_level = delay_level


#: Where delayed messages wait (``TopicValidator.RMQ_SYS_SCHEDULE_TOPIC``).
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
#: Decoded topics by their UTF-8 bytes.
_topics: dict[bytes, str] = {}
_tag_codes: dict[bytes, int] = {}


def _tag_code(tags: bytes) -> int:
    code = fast_java_hash(tags.decode())
    if len(_tag_codes) > 65536:
        _tag_codes.clear()
    _tag_codes[tags] = code
    return code


def check_record(data: bytes | memoryview, pos: int, check_crc: bool, phys: int) -> int:
    """Validate the record at ``pos`` without decoding it (recovery's fast walk).

    Returns its size, or ``END_OF_DATA`` (zeros, or a record running past
    ``data``), ``BLANK`` or ``CORRUPT`` (bad magic, sizes, body CRC, or a
    PHYSICALOFFSET other than ``phys``). Pass a memoryview to avoid copies.
    """
    end = len(data)
    if end - pos < 8:
        return END_OF_DATA
    total, magic = _SIZE_MAGIC.unpack_from(data, pos)
    if magic != MESSAGE_MAGIC_CODE:
        if magic == BLANK_MAGIC_CODE:
            return BLANK
        return END_OF_DATA if total == 0 and magic == 0 else CORRUPT
    if total < MIN_RECORD_SIZE:
        return CORRUPT
    rec_end = pos + total
    if rec_end > end:
        return END_OF_DATA
    _t, _m, crc, _q, _f, _qo, rphys, sys_flag = _CHECK.unpack_from(data, pos)
    if rphys != phys:
        return CORRUPT
    p = pos + (76 if sys_flag & SYSFLAG_BORNHOST_V6 else 64) + (32 if sys_flag & SYSFLAG_STOREHOST_V6 else 20)
    (body_len,) = _INT.unpack_from(data, p)
    p += 4
    if body_len < 0 or p + body_len + 3 > rec_end:
        return CORRUPT
    if check_crc and crc32(data[p : p + body_len]) & 0x7FFFFFFF != crc:
        return CORRUPT
    p += body_len
    p += 1 + data[p]
    if p + 2 > rec_end:
        return CORRUPT
    (props_len,) = _SHORT.unpack_from(data, p)
    if props_len < 0 or p + 2 + props_len != rec_end:
        return CORRUPT
    return int(total)


def _prop(props: bytes, name: bytes) -> bytes | None:
    """Value of property ``name`` (given with its trailing ``\\x01``) in a properties string."""
    start = 0
    while True:
        i = props.find(name, start)
        if i < 0:
            return None
        if i == 0 or props[i - 1] == 2:
            j = i + len(name)
            k = props.find(b"\x02", j)
            return props[j:] if k < 0 else props[j:k]
        start = i + 1


def parse_dispatch(data: bytes | memoryview, pos: int, check_crc: bool) -> DispatchRecord | int:
    """Parse the record at ``pos`` of ``data`` for dispatch.

    Returns a :class:`DispatchRecord`, or ``END_OF_DATA`` (fewer than a header's
    bytes left, a zero size, or a record running past ``data``: the caller
    decides whether more data may follow), ``BLANK`` (end-of-segment marker;
    its size is at ``pos``), or ``CORRUPT``.
    """
    end = len(data)
    if end - pos < 8:
        return END_OF_DATA
    total: int
    magic: int
    queue_id: int
    queue_offset: int
    phys: int
    sys_flag: int
    store_ts: int
    body_len: int
    props_len: int
    total, magic = _SIZE_MAGIC.unpack_from(data, pos)
    if magic == BLANK_MAGIC_CODE:
        return BLANK
    if magic != MESSAGE_MAGIC_CODE:
        return END_OF_DATA if total == 0 and magic == 0 else CORRUPT
    if total < MIN_RECORD_SIZE:
        return CORRUPT
    if pos + total > end:
        return END_OF_DATA
    try:
        (_t, _m, crc, queue_id, _flag, queue_offset, phys, sys_flag, _born_ts) = _HEAD.unpack_from(data, pos)
        p = pos + 48 + (20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8)
        (store_ts,) = _LONG.unpack_from(data, p)
        p += 8 + (20 if sys_flag & SYSFLAG_STOREHOST_V6 else 8) + 12
        (body_len,) = _INT.unpack_from(data, p)
        p += 4
        rec_end = pos + total
        if body_len < 0 or p + body_len + 3 > rec_end:
            return CORRUPT
        if check_crc and crc32(data[p : p + body_len]) & 0x7FFFFFFF != crc:
            return CORRUPT
        p += body_len
        topic_len = data[p]
        p += 1
        raw_topic = bytes(data[p : p + topic_len])
        p += topic_len
        if p + 2 > rec_end:
            return CORRUPT
        (props_len,) = _SHORT.unpack_from(data, p)
        p += 2
        if props_len < 0 or p + props_len != rec_end:
            return CORRUPT
        topic = topic_of(raw_topic)
        props = bytes(data[p:rec_end]) if props_len else b""
        tags_code, keys, uniq, delay_level = dispatch_properties(topic, props)
    except (struct.error, IndexError, UnicodeDecodeError):
        return CORRUPT
    return DispatchRecord(
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=phys,
        size=total,
        tags_code=tags_code,
        store_timestamp=store_ts,
        sys_flag=sys_flag,
        keys=keys,
        uniq_key=uniq,
        delay_level=delay_level,
    )


#: The fixed part of a record with IPv4 born and store hosts, hosts skipped: totalsize, magic,
#: body CRC, queueId, flag, queue offset, physical offset, sysFlag, born time, store time,
#: reconsume times, prepared transaction offset, body length (the body starts at byte 88).
_HEAD4: Final = struct.Struct(">iiiiiqqiq8xq8xiqi")
_HEAD4_SIZE: Final = _HEAD4.size
#: :data:`_HEAD4` with only what the walk reads (body CRC, flag, born time, reconsume times and
#: prepared transaction offset skipped): totalsize, magic, queueId, queue offset, physical
#: offset, sysFlag, store time, body length.
_WALK4: Final = struct.Struct(">ii4xi4xqqi8x8xq8x4x8xi")

#: One record as :func:`walk_records` reports it: (topic, queueId, queue offset, physical offset,
#: size, sysFlag, store timestamp, tag hash code, KEYS, UNIQ_KEY or None, DELAY level), the
#: fields of a :class:`DispatchRecord`.
RecordRow = tuple[str, int, int, int, int, int, int, int, str, str | None, int]


def walk_records(data: bytes, pos: int, end: int, phys: int, check_crc: bool,
                 out: list[RecordRow] | None) -> tuple[int, int, int]:
    """Recovery's fast path: walk the run of well-formed records in ``data[pos:end]``, the
    first at CommitLog offset ``phys``.

    Applies :func:`check_record`'s checks (magic, sizes, PHYSICALOFFSET, body
    CRC when ``check_crc``) to records with IPv4 hosts and stops *before* the
    first record it cannot accept whole: one running past ``end``, a blank
    marker, zeros, anything corrupt (a topic or property that is not UTF-8
    too, with ``out``), or a record with an IPv6 host. The caller classifies
    that record with the general functions. With ``out``, appends a
    :data:`RecordRow` per record. Returns ``(position after the run, records
    walked, size of the last one or 0)``.
    """
    total: int
    magic: int
    queue_id: int
    queue_offset: int
    rphys: int
    sys_flag: int
    store_ts: int
    body_len: int
    props_len: int
    unpack = _WALK4.unpack_from
    read_int = _INT.unpack_from
    topics = _topics
    count = 0
    last = 0
    head = _HEAD4_SIZE
    while pos + head <= end:
        (total, magic, queue_id, queue_offset, rphys, sys_flag, store_ts, body_len) = unpack(data, pos)
        if magic != MESSAGE_MAGIC_CODE or rphys != phys or sys_flag & _HOST_BITS or total < MIN_RECORD_SIZE:
            break
        rec_end = pos + total
        b = pos + head
        t = b + body_len
        if rec_end > end or body_len < 0 or t + 3 > rec_end:
            break
        if check_crc and crc32(data[b:t]) & 0x7FFFFFFF != read_int(data, pos + 8)[0]:
            break
        pp = t + 1 + data[t]
        if pp + 2 > rec_end:
            break
        props_len = (data[pp] << 8) | data[pp + 1]  # the big-endian short, unsigned: negative when >= 0x8000
        if props_len >= 0x8000 or pp + 2 + props_len != rec_end:
            break
        if out is not None:
            try:
                raw = data[t + 1 : pp]
                topic = topics.get(raw) or topic_of(raw)
                tags_code, keys, uniq, delay_level = dispatch_properties(
                    topic, data[pp + 2 : rec_end] if props_len else b"")
            except UnicodeDecodeError:
                break
            out.append((topic, queue_id, queue_offset, phys, total, sys_flag, store_ts, tags_code, keys, uniq,
                        delay_level))
        count += 1
        pos = rec_end
        phys += total
        last = total
    return pos, count, last


def topic_of(raw: bytes) -> str:
    """Decode a topic's UTF-8 bytes (cached). Raises ``UnicodeDecodeError``."""
    topic = _topics.get(raw)
    if topic is None:
        topic = raw.decode()
        if len(_topics) > 65536:
            _topics.clear()
        _topics[raw] = topic
    return topic


_shapes: dict[bytes, tuple[int, str, int]] = {}
_UNIQ_NAME: Final = b"UNIQ_KEY\x01"
#: Length of the UNIQ_KEY Apache RocketMQ's Java client writes (``MessageClientIDSetter``: 16
#: bytes as hex, IPv4 producer): checked before searching for the value's end.
_UNIQ_HEX: Final = 32


def dispatch_properties(topic: str, props: bytes) -> tuple[int, str, str | None, int]:
    """What the dispatch needs from a record's properties: ``(tag hash code, KEYS, UNIQ_KEY or
    None, DELAY level of a SCHEDULE_TOPIC_XXXX record or 0)``, as :func:`_prop` finds them.

    A producer's messages differ mostly in their UNIQ_KEY: it is cut out, and what the rest
    gives is cached by the rest's bytes. Raises ``UnicodeDecodeError``.
    """
    if not props:
        return 0, "", None, 0
    n = len(_UNIQ_NAME)
    # (slices and indexes, not bytes.find, where they can answer: a method call costs more here)
    i = 0 if props[:n] == _UNIQ_NAME else props.find(_UNIQ_NAME)
    if i < 0 or (i and props[i - 1] != 2) or topic == SCHEDULE_TOPIC:
        return _dispatch_properties(topic, props)
    j = i + n
    k = j + _UNIQ_HEX
    if k >= len(props) or props[k] != 2 or 2 in props[j:k]:
        k = props.find(b"\x02", j)
    # ``rest``: the properties but UNIQ_KEY's value, the cache's key (what it maps to is parsed
    # from the key alone, so any cut that keeps the other properties whole will do).
    if k < 0:
        uniq, rest = props[j:], props[:j]
    elif i == 0:  # first, as Apache's Java client writes it: one slice
        uniq, rest = props[j:k], props[k:]
    else:
        uniq, rest = props[j:k], props[:j] + props[k:]
    shape = _shapes.get(rest)
    if shape is None:
        tags_code, keys, _u, _d = _dispatch_properties(topic, rest)
        shape = (tags_code, keys, 0)
        if len(_shapes) >= 4096:
            _shapes.clear()
        _shapes[rest] = shape
    return shape[0], shape[1], uniq.decode() if uniq else None, 0


def _dispatch_properties(topic: str, props: bytes) -> tuple[int, str, str | None, int]:
    """:func:`dispatch_properties` without the cache."""
    tags = _prop(props, b"TAGS\x01")
    keys = _prop(props, b"KEYS\x01")
    uniq = _prop(props, b"UNIQ_KEY\x01")
    delay_level = 0
    if topic == SCHEDULE_TOPIC:
        delay = _prop(props, b"DELAY\x01")
        delay_level = int(delay) if delay and delay.isdigit() else 0
    tags_code = (_tag_codes.get(tags, 0) or _tag_code(tags)) if tags else 0
    return tags_code, keys.decode() if keys else "", uniq.decode() if uniq else None, delay_level


_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    """``"1s 5s 10s 30s 1m ... 2h"`` → delays in ms, level 1 first. Raises ``ValueError``."""
    out = []
    for item in text.split():
        unit = item[-1]
        if unit not in _DELAY_UNITS_MS or not item[:-1].isdigit():
            raise ValueError(f"bad delay level {item!r} in {text!r}")
        out.append(int(item[:-1]) * _DELAY_UNITS_MS[unit])
    return out


def pickup_store_timestamp(data: bytes | memoryview, pos: int = 0) -> int:
    """STORETIMESTAMP of the record at ``pos`` (its position depends on the born host's size)."""
    (sys_flag,) = _INT.unpack_from(data, pos + 36)
    (ts,) = _LONG.unpack_from(data, pos + 48 + (20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8))
    return int(ts)
