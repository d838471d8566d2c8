"""``split_batch``: the broker's reading of a SEND_BATCH_MESSAGE body (``MessageDecoder.decodeMessages``
layout: TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLEN, body, PROPERTIESLENGTH as a signed short,
properties), compared with a plain ``struct`` reading of the same layout, on bodies the client
encodes and on damaged ones."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocket.message import Message, MessageFormatError, decode_batch, encode_batch, split_batch

_HEAD = struct.Struct(">iiiii")
_SHORT = struct.Struct(">h")


def _reference(data: bytes) -> tuple[list[int], list[bytes], list[bytes]]:
    """The same checks, field by field with ``struct`` (raises MessageFormatError)."""
    flags: list[int] = []
    bodies: list[bytes] = []
    props: list[bytes] = []
    if not data:
        raise MessageFormatError("empty")
    pos = 0
    while pos < len(data):
        if len(data) - pos < 22:
            raise MessageFormatError("truncated")
        total, _magic, _crc, flag, body_len = _HEAD.unpack_from(data, pos)
        end = pos + total
        if total < 22 or end > len(data):
            raise MessageFormatError("total")
        p = pos + 20 + body_len
        if body_len < 0 or p + 2 > end:
            raise MessageFormatError("body")
        (props_len,) = _SHORT.unpack_from(data, p)
        if props_len < 0 or p + 2 + props_len != end:
            raise MessageFormatError("props")
        raw = data[p + 2:end]
        raw.decode()  # (UnicodeDecodeError: not UTF-8)
        flags.append(flag)
        bodies.append(data[pos + 20:p])
        props.append(raw)
        pos = end
    return flags, bodies, props


def _outcome(read: object, data: bytes) -> object:
    try:
        flags, bodies, props = read(data)  # type: ignore[operator]
    except (MessageFormatError, UnicodeDecodeError):
        return "refused"
    return flags, [bytes(b) for b in bodies], props


messages = st.lists(
    st.builds(Message, st.just("T"), st.binary(max_size=64), st.integers(-2**31, 2**31 - 1),
              st.dictionaries(st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "a"]), st.text(max_size=8), max_size=3)),
    min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(msgs=messages)
def test_split_batch_reads_what_the_client_encodes(msgs: list[Message]) -> None:
    data = encode_batch(msgs)
    flags, bodies, props = split_batch(data)
    assert flags == [m.flag for m in msgs]  # negative flags too: FLAG is a signed int
    assert [bytes(b) for b in bodies] == [m.body for m in msgs]
    assert all(b.obj is data for b in bodies)  # views of the request body, not copies
    assert [i.properties for i in decode_batch(data)] == [p.decode() for p in props]
    assert _outcome(split_batch, data) == _outcome(_reference, data)


@settings(max_examples=400, deadline=None)
@given(msgs=messages, at=st.integers(0, 10_000), value=st.integers(0, 255), cut=st.integers(0, 10_000))
def test_split_batch_refuses_exactly_what_a_struct_reading_refuses(msgs: list[Message], at: int, value: int,
                                                                  cut: int) -> None:
    """One byte changed (a size field, a sign bit, a properties byte) and the body cut short:
    the same items or the same refusal as the reference, never another exception."""
    data = bytearray(encode_batch(msgs))
    data[at % len(data)] = value
    damaged = bytes(data[:len(data) - cut % len(data)])
    assert _outcome(split_batch, damaged) == _outcome(_reference, damaged)


@pytest.mark.parametrize("data, words", [
    (b"", "empty"),
    (b"\x00" * 21, "truncated header"),
    (_HEAD.pack(-1, 0, 0, 0, 0) + b"\x00\x00", "total size -1 out of range"),
    (_HEAD.pack(22, 0, 0, 0, -5) + b"\x00\x00", "body length -5 out of range"),
    (_HEAD.pack(22, 0, 0, 0, 0) + b"\xff\xff", "properties length"),
    (_HEAD.pack(23, 0, 0, 0, 0) + b"\x00\x01\xff", "not UTF-8"),
])
def test_split_batch_names_what_is_wrong(data: bytes, words: str) -> None:
    with pytest.raises(MessageFormatError, match=words):
        split_batch(data)
