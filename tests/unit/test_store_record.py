"""Stored-record fast paths: byte-identical encoding, dispatch parsing, Java hashes."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocket.message import (
    BLANK_MAGIC_CODE,
    CRC32_IMPLEMENTATION,
    crc32,
    decode_record,
    encode_properties,
    encode_record,
    java_string_hash,
    tags_hash_code,
)
from rocket.store.api import PutMessageRequest, PutMessageResult, PutMessageStatus
from rocket.store.record import (
    BLANK,
    CORRUPT,
    END_OF_DATA,
    DispatchRecord,
    RecordEncoder,
    check_record,
    fast_java_hash,
    index_key_hash,
    parse_dispatch,
)

hosts = st.one_of(
    st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 65535))
    .map(lambda t: f"10.{t[0]}.{t[1]}.7:{t[2]}"),
    st.sampled_from(["[::1]:9876", "[fe80::1]:1", "[2001:db8::5]:10911"]),
)
topics = st.text(alphabet="abcXYZ019%|_-", min_size=1, max_size=127)
prop_text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=30)


@st.composite
def requests(draw: st.DrawFn) -> PutMessageRequest:
    props = draw(st.dictionaries(st.text("ABCKEYSTAGUNIQ_", min_size=1, max_size=8), prop_text, max_size=4))
    return PutMessageRequest(
        topic=draw(topics),
        queue_id=draw(st.integers(0, 2**31 - 1)),
        body=draw(st.binary(max_size=300)),
        properties=encode_properties(props),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        sys_flag=draw(st.integers(0, 0xFFFF).map(lambda v: v & ~0x3C)),
        born_timestamp=draw(st.integers(0, 2**62)),
        born_host=draw(hosts),
        reconsume_times=draw(st.integers(0, 1000)),
        prepared_transaction_offset=draw(st.integers(0, 2**62)),
    )


@settings(max_examples=150, deadline=None)
@given(req=requests(), store_host=hosts, qoff=st.integers(0, 2**62), phys=st.integers(0, 2**62),
       ts=st.integers(0, 2**62))
def test_encoder_matches_reference_encode_record(req: PutMessageRequest, store_host: str, qoff: int, phys: int,
                                                 ts: int) -> None:
    enc = RecordEncoder(store_host)
    ours = enc.encode(req, queue_offset=qoff, physical_offset=phys, store_timestamp=ts)
    ref = encode_record(topic=req.topic, queue_id=req.queue_id, body=req.body, properties=req.properties,
                        flag=req.flag, sys_flag=req.sys_flag, born_timestamp=req.born_timestamp,
                        born_host=req.born_host, store_timestamp=ts, store_host=store_host,
                        reconsume_times=req.reconsume_times,
                        prepared_transaction_offset=req.prepared_transaction_offset, queue_offset=qoff,
                        physical_offset=phys)
    assert ours == bytes(ref)
    msg = decode_record(ours, check_crc=True)
    assert (msg.topic, msg.body, msg.store_timestamp) == (req.topic, req.body, ts)
    # Recovery's fast walk accepts it, at its own offset only, and rejects any damage.
    padded = memoryview(b"\0" * 3 + ours + b"\0" * 8)
    assert check_record(padded, 3, True, phys) == len(ours)
    assert check_record(padded, 3, True, phys + 1) == CORRUPT
    assert check_record(memoryview(ours[:-1]), 0, True, phys) == END_OF_DATA
    if req.body:
        damaged = bytearray(ours)
        damaged[len(ours) - len(req.properties.encode()) - 2 - len(req.topic.encode()) - 2] ^= 1  # last body byte
        assert check_record(memoryview(bytes(damaged)), 0, True, phys) == CORRUPT
        assert check_record(memoryview(bytes(damaged)), 0, False, phys) == len(ours)


@settings(max_examples=150, deadline=None)
@given(reqs=st.lists(requests(), min_size=1, max_size=5), store_host=hosts, qoff=st.integers(0, 2**40),
       phys=st.integers(0, 2**40), ts=st.integers(0, 2**62), tran=st.sampled_from([0, 0x4, 0x8, 0xC]))
def test_batch_encoder_matches_the_encoder_of_store_requests(reqs: list[PutMessageRequest], store_host: str,
                                                              qoff: int, phys: int, ts: int, tran: int) -> None:
    """A batch send's records (:class:`PutMessageBatch`: shared topic, queue, born host, sysFlag, born time
    and reconsume times) are byte for byte what the same store requests give, with the same answer (offsets,
    queue offsets, ids), the ids also joined by commas; transactional prepared/rollback ones take no
    queue offset."""
    first = reqs[0]
    same = [PutMessageRequest(first.topic, first.queue_id, r.body, r.properties, r.flag, first.sys_flag | tran,
                              first.born_timestamp, first.born_host, first.reconsume_times, 0) for r in reqs]
    enc = RecordEncoder(store_host)
    born = enc.born_bytes(first.born_host)
    tail = bytes((len(first.topic.encode()),)) + first.topic.encode()
    props = [r.properties.encode() for r in same]
    sizes = [enc.fixed[len(born)] + len(tail) + len(r.body) + len(p) for r, p in zip(same, props, strict=True)]
    ref_parts: list[bytes | bytearray | memoryview] = []
    ref = enc.encode_batch_into(ref_parts, same, [born] * len(same), props, sizes, tail, first.queue_id, qoff, phys,
                                ts)
    assert len(ref_parts) == len(same)  # one bytes object per record
    bodies = [memoryview(r.body) for r in same]  # as split_batch hands them over
    parts: list[bytes | bytearray | memoryview] = [b"x"]
    stored, next_qoff, sys_flags = enc.encode_message_batch_into(
        parts, bodies, props, [r.flag for r in same], sizes, born, first.sys_flag | tran,
        first.born_timestamp, first.reconsume_times, tail, first.queue_id, qoff, phys, ts)
    assert b"".join(parts) == b"x" + b"".join(ref_parts)
    assert all(parts[2 + 2 * i] is body for i, body in enumerate(bodies))  # the bodies themselves: not copied
    assert len(parts) == 1 + 2 * len(bodies) + 1  # and one buffer between two bodies, one before, one after
    appended = stored.messages()
    assert (appended, stored.physical_offsets, next_qoff, sys_flags) == ref
    assert stored.msg_ids == ",".join(m.msg_id for m in appended)
    # what the answer to the send reads, without making the messages
    result = PutMessageResult(PutMessageStatus.PUT_OK, None, "", stored.msg_ids, stored)
    assert result.stored and result.first_queue_offset == appended[0].queue_offset
    assert result.end_offset == appended[-1].physical_offset + appended[-1].size
    assert result.messages == appended
    assert result.with_status(PutMessageStatus.FLUSH_DISK_TIMEOUT, "x").messages == appended


@settings(max_examples=100, deadline=None)
@given(tags=st.one_of(st.none(), prop_text.filter(bool)),
       keys=st.lists(st.text("abcdef0123", min_size=1, max_size=6), max_size=3),
       uniq=st.one_of(st.none(), st.text("0123456789ABCDEF", min_size=32, max_size=32)),
       body=st.binary(max_size=200))
def test_parse_dispatch_reads_what_the_index_and_consume_queue_need(tags: str | None, keys: list[str],
                                                                    uniq: str | None, body: bytes) -> None:
    props: dict[str, str] = {"XTAGS": "decoy"}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = " ".join(keys)
    if uniq:
        props["UNIQ_KEY"] = uniq
    rec = bytes(encode_record(topic="T", queue_id=3, body=body, properties=encode_properties(props),
                              queue_offset=7, physical_offset=100, store_timestamp=1234, sys_flag=8))
    r = parse_dispatch(b"\0" * 5 + rec + b"\0" * 9, 5, True)
    assert isinstance(r, DispatchRecord)
    assert (r.topic, r.queue_id, r.queue_offset, r.physical_offset, r.size) == ("T", 3, 7, 100, len(rec))
    assert r.tags_code == tags_hash_code(tags)
    assert r.keys == " ".join(keys)
    assert r.uniq_key == uniq
    assert (r.store_timestamp, r.sys_flag) == (1234, 8)


def test_parse_dispatch_outcomes() -> None:
    rec = bytes(encode_record(topic="T", queue_id=0, body=b"payload"))
    assert parse_dispatch(b"", 0, True) == END_OF_DATA
    assert parse_dispatch(bytes(64), 0, True) == END_OF_DATA
    assert parse_dispatch(rec[:-1], 0, True) == END_OF_DATA  # cut short: more may follow
    assert parse_dispatch(struct.pack(">ii", 4000, BLANK_MAGIC_CODE), 0, True) == BLANK
    assert parse_dispatch(b"\x00\x00\x01\x00garbage!" + bytes(300), 0, True) == CORRUPT
    bad_body = bytearray(rec)
    bad_body[-8] ^= 0xFF  # inside the body (then topic and properties: 4 bytes)
    assert parse_dispatch(bytes(bad_body), 0, True) == CORRUPT
    assert isinstance(parse_dispatch(bytes(bad_body), 0, False), DispatchRecord)
    bad_size = bytearray(rec)
    struct.pack_into(">i", bad_size, 0, 50)
    assert parse_dispatch(bytes(bad_size), 0, True) == CORRUPT
    assert zlib.crc32(b"payload") & 0x7FFFFFFF == decode_record(rec).body_crc


def test_body_crc_is_zlib_ngs_the_dependency() -> None:
    # zlib-ng is a dependency (pyproject.toml): without it the broker would run on zlib's slower CRC
    assert CRC32_IMPLEMENTATION == "zlib-ng"


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=5000), start=st.integers(0, 64), kind=st.sampled_from([bytes, bytearray, memoryview]))
def test_body_crc_equals_zlibs_for_every_buffer_kind(data: bytes, start: int, kind: type) -> None:
    # java.util.zip.CRC32 is zlib's polynomial: the stored BODYCRC must be what Java clients check
    piece = data[start:]
    assert crc32(kind(piece)) == zlib.crc32(piece)
    assert crc32(memoryview(data)[start:]) == zlib.crc32(piece)  # a slice of a view, as reads hand it


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_fast_java_hash_equals_reference(text: str) -> None:
    assert fast_java_hash(text) == java_string_hash(text)


@settings(max_examples=200, deadline=None)
@given(topic=st.text(max_size=20), key=st.text(max_size=60))
def test_index_key_hash_is_abs_of_java_hash(topic: str, key: str) -> None:
    h = java_string_hash(f"{topic}#{key}")
    assert index_key_hash(topic, key) == (0 if h == -(2**31) else abs(h))


@settings(max_examples=300, deadline=None)
@given(topic=st.text(alphabet="abcXYZ019%|_-", min_size=1, max_size=20),
       keys=st.lists(st.text(alphabet="0123456789ABCDEF-_ xyz", max_size=60), min_size=1, max_size=5),
       prefix=st.sampled_from(["", "7F0000010B93158D7B44", "C0A8000100FF0000"]))
def test_index_key_hash_of_ascii_keys_with_a_shared_prefix(topic: str, keys: list[str], prefix: str) -> None:
    # ASCII keys are folded in 4 bytes at a time, then the 0-3 bytes left one by one: every length
    # from 0 to 80 occurs, and UNIQ_KEY-like prefixes (a producer's 20 fixed digits).
    for key in keys * 2:
        h = java_string_hash(f"{topic}#{prefix}{key}")
        assert index_key_hash(topic, prefix + key) == (0 if h == -(2**31) else abs(h))


@settings(max_examples=100, deadline=None)
@given(reqs=st.lists(requests(), min_size=1, max_size=6), cut=st.integers(0, 2000), check_crc=st.booleans())
def test_walk_records_agrees_with_parse_dispatch(reqs: list[PutMessageRequest], cut: int, check_crc: bool) -> None:
    from rocket.store.record import walk_records

    enc = RecordEncoder("10.0.0.2:10911")
    data = bytearray()
    for i, r in enumerate(reqs):
        data += enc.encode(r, queue_offset=i, physical_offset=1000 + len(data), store_timestamp=77 + i)
    data = data[: max(len(data) - cut, 0)] if cut < len(data) else data
    rows: list = []
    raw = bytes(data)
    view = memoryview(raw)
    pos, n, last = walk_records(raw, 0, len(raw), 1000, check_crc, rows)
    assert len(rows) == n
    expected = []
    p = 0
    while True:
        rec = parse_dispatch(view, p, check_crc)
        if not isinstance(rec, DispatchRecord) or rec.sys_flag & 0x30 or len(expected) == n:
            break  # the walk stops at the first record with an IPv6 host (sysFlag bits 0x10/0x20)
        expected.append((rec.topic, rec.queue_id, rec.queue_offset, rec.physical_offset, rec.size, rec.sys_flag,
                         rec.store_timestamp, rec.tags_code, rec.keys, rec.uniq_key, rec.delay_level))
        assert check_record(view, p, check_crc, 1000 + p) == rec.size
        p += rec.size
    assert rows == expected and pos == p and last == (expected[-1][4] if expected else 0)
    # validation only: same run, no rows
    assert walk_records(raw, 0, len(raw), 1000, check_crc, None) == (pos, n, last)


#: Property values: any text, or hex near the 32 digits of a Java client's UNIQ_KEY (the length
#: :func:`dispatch_properties` checks first).
prop_value = st.one_of(prop_text, st.text(alphabet="0123456789ABCDEF", min_size=30, max_size=34))


@settings(max_examples=300, deadline=None)
@given(props=st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "DELAY", "XUNIQ_KEY", "A"]),
                             prop_value, max_size=5),
       topic=st.sampled_from(["T", "SCHEDULE_TOPIC_XXXX"]))
def test_dispatch_properties_agree_with_the_decoded_properties(props: dict[str, str], topic: str) -> None:
    from rocket.message import decode_properties
    from rocket.store.record import dispatch_properties

    raw = encode_properties(props).encode()
    ref = decode_properties(raw.decode())
    delay = ref.get("DELAY", "")
    expected = (tags_hash_code(ref.get("TAGS") or None) if ref.get("TAGS") else 0, ref.get("KEYS", ""),
                ref.get("UNIQ_KEY") or None,
                int(delay) if topic == "SCHEDULE_TOPIC_XXXX" and delay.isascii() and delay.isdigit() else 0)
    assert dispatch_properties(topic, raw) == expected
    assert dispatch_properties(topic, raw) == expected  # again, from the cache


@pytest.mark.parametrize("raw", [
    b"UNIQ_KEY\x017F00000169953E7EAD90000000000001\x02WAIT\x01true\x02TAGS\x01bench",  # Java's order, 32 digits
    b"UNIQ_KEY\x017F00000169953E7EAD90000000000001",  # alone
    b"UNIQ_KEY\x01ABC\x02KEYS\x01" + b"k" * 23 + b"\x02TAGS\x01t",  # a \x02 32 bytes on, not the value's end
    b"UNIQ_KEY\x01" + b"A" * 31 + b"\x02TAGS\x01t",  # one digit short
    b"UNIQ_KEY\x01" + b"A" * 33 + b"\x02TAGS\x01t",  # one digit more
    b"TAGS\x01t\x02UNIQ_KEY\x017F00000169953E7EAD90000000000001\x02KEYS\x01k",  # not first
])
def test_dispatch_properties_finds_the_end_of_the_uniq_key(raw: bytes) -> None:
    from rocket.message import decode_properties
    from rocket.store.record import dispatch_properties

    ref = decode_properties(raw.decode())
    expected = (tags_hash_code(ref["TAGS"]) if ref.get("TAGS") else 0, ref.get("KEYS", ""), ref["UNIQ_KEY"], 0)
    assert dispatch_properties("T", raw) == expected
    assert dispatch_properties("T", raw) == expected  # from the cache


@pytest.mark.parametrize("flags, props, queue_id", [
    ([0, 2**31], [b"", b""], 0),  # FLAG is an int32
    ([0, 0], [b"", b"a" * 0x8000], 0),  # PROPERTIESLENGTH is an int16
    ([0, 0], [b"", b""], 2**31),  # QUEUEID is an int32
])
def test_batch_encoder_refuses_a_field_out_of_range_and_appends_nothing(flags: list[int], props: list[bytes],
                                                                         queue_id: int) -> None:
    enc = RecordEncoder("127.0.0.1:10911")
    born = enc.born_bytes("127.0.0.1:5000")
    tail = b"\x01T"
    sizes = [enc.fixed[len(born)] + len(tail) + 1 + len(p) for p in props]
    parts: list[bytes | bytearray | memoryview] = [b"x"]
    with pytest.raises(struct.error):
        enc.encode_message_batch_into(parts, [memoryview(b"b")] * 2, props, flags, sizes, born, 0, 0, 0, tail,
                                      queue_id, 0, 0, 0)
    assert parts == [b"x"]
