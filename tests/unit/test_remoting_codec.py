"""The remoting frame codec: both header serializations, flags, coercion, lenient JSON, fuzzing."""

from __future__ import annotations

import struct

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocket.protocol import loads_lenient
from rocket.remoting import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    FrameDecoder,
    FrameError,
    HeaderFieldError,
    RemotingCommand,
    RemotingCommandError,
    SerializeType,
    decode,
    encode,
)


def json_frame(header: dict[str, object] | bytes, body: bytes = b"") -> bytes:
    raw = header if isinstance(header, bytes) else orjson.dumps(header)
    return struct.pack(">iI", 4 + len(raw) + len(body), len(raw)) + raw + body


# -- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_round_trip(serialize_type: int) -> None:
    cmd = RemotingCommand(
        code=105, opaque=42, flag=0, ext_fields={"topic": "TopicA", "empty": "", "ünï": "cödé"},
        body=b"\x00\x01binary\xff", remark="hello", language="JAVA", version=409, serialize_type=serialize_type,
    )
    frame = encode(cmd)
    (length, tag) = struct.unpack_from(">iI", frame)
    assert length == len(frame) - 4
    assert tag >> 24 == serialize_type
    back = decode(frame)
    assert back.ext_fields == cmd.ext_fields
    assert (back.code, back.opaque, back.flag, back.body, back.remark, back.language, back.version) == (
        105, 42, 0, cmd.body, "hello", "JAVA", 409)
    assert back.serialize_type == serialize_type


def test_json_header_layout_matches_java() -> None:
    frame = encode(RemotingCommand(code=0, opaque=7, flag=FLAG_RESPONSE, ext_fields={"a": "1"}, language="JAVA"))
    header = orjson.loads(frame[8:])
    assert header == {"code": 0, "extFields": {"a": "1"}, "flag": 1, "language": "JAVA", "opaque": 7,
                      "serializeTypeCurrentRPC": "JSON", "version": 409}
    assert "remark" not in header


def test_binary_header_layout() -> None:
    frame = encode(RemotingCommand(code=17, opaque=3, flag=1, ext_fields={"k": "vv"}, remark=None,
                                   language="CPP", version=63, serialize_type=SerializeType.ROCKETMQ))
    header = frame[8:]
    code, language, version, opaque, flag = struct.unpack_from(">hbhii", header)
    assert (code, language, version, opaque, flag) == (17, 1, 63, 3, 1)
    remark_len, ext_len = struct.unpack_from(">ii", header, 13)
    assert remark_len == 0 and ext_len == 2 + 1 + 4 + 2
    assert header[21:] == b"\x00\x01k\x00\x00\x00\x02vv"
    back = decode(frame)
    assert back.remark is None and back.language == "CPP"


def test_flags() -> None:
    request = RemotingCommand(code=10, opaque=99, serialize_type=SerializeType.ROCKETMQ)
    assert not request.is_response and not request.is_oneway
    assert RemotingCommand(code=10, flag=FLAG_ONEWAY).is_oneway
    response = request.response(17, "nope", {"n": 5, "b": True, "none": None})
    assert response.is_response and not response.is_oneway
    assert (response.opaque, response.serialize_type, response.language) == (99, SerializeType.ROCKETMQ, "JAVA")
    assert response.ext_fields == {"n": "5", "b": "true"}
    back = decode(encode(response))
    assert back.is_response and back.code == 17 and back.remark == "nope"


# -- tolerant reading ------------------------------------------------------------------------------


def test_ext_values_are_coerced_to_strings() -> None:
    frame = json_frame({"code": 10, "language": 1, "opaque": "5", "flag": 0,
                        "extFields": {"queueId": 3, "batch": True, "unit": False, "ratio": 2.0, "x": 1.5,
                                      "nested": {"a": 1}, "gone": None, "s": "str"}})
    cmd = decode(frame)
    assert cmd.ext_fields == {"queueId": "3", "batch": "true", "unit": "false", "ratio": "2", "x": "1.5",
                              "nested": '{"a":1}', "s": "str"}
    assert cmd.language == "CPP" and cmd.opaque == 5 and cmd.version == 0 and cmd.remark is None
    assert cmd.get_int("queueId", -1) == 3
    assert cmd.get_bool("batch", False) and not cmd.get_bool("unit", True)


def test_typed_field_access_errors() -> None:
    cmd = RemotingCommand(code=1, ext_fields={"n": "x", "b": "maybe", "one": "1", "zero": "0", "alias": "4"})
    with pytest.raises(HeaderFieldError, match="missing"):
        cmd.require("missing")
    with pytest.raises(HeaderFieldError):
        cmd.require_int("n")
    with pytest.raises(HeaderFieldError):
        cmd.get_int("n", 0)
    with pytest.raises(HeaderFieldError):
        cmd.get_bool("b", False)
    assert cmd.get_bool("one", False) and not cmd.get_bool("zero", True)  # C++ booleans
    assert cmd.require_int("q", "alias") == 4 and cmd.get_int("absent", 7) == 7


def test_lenient_json() -> None:
    assert loads_lenient(b'{"brokerAddrs":{0:"a:1",1:"b:2"}}') == {"brokerAddrs": {"0": "a:1", "1": "b:2"}}
    assert loads_lenient('{"t":{"x@g":{0:12, -1:7}}}') == {"t": {"x@g": {"0": 12, "-1": 7}}}
    # Text inside strings is never rewritten.
    assert loads_lenient(b'{"s":"{0:1}",3:"q\\",4:"}') == {"s": "{0:1}", "3": 'q",4:'}
    assert loads_lenient(b'{"a":[1,2]}') == {"a": [1, 2]}
    with pytest.raises(orjson.JSONDecodeError):
        loads_lenient(b"{nope}")


def test_remoting_command_error_message() -> None:
    exc = RemotingCommandError(17, "no route", "GET_ROUTEINFO_BY_TOPIC")
    assert exc.code == 17 and "TOPIC_NOT_EXIST (17)" in str(exc) and "no route" in str(exc)
    assert "999" in str(RemotingCommandError(999, None))


# -- frame errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("frame", [
    struct.pack(">i", -1) + b"\x00" * 8,
    struct.pack(">i", 3) + b"\x00" * 8,
    json_frame(b"not json"),
    json_frame(b'"a string"'),
    json_frame({"opaque": 1}),
    json_frame({"code": "abc"}),
    json_frame({"code": 1, "extFields": [1]}),
    json_frame({"code": 1, "opaque": 1 << 40}),
    struct.pack(">iI", 8, 100) + b"\x00" * 4,
    struct.pack(">iI", 6, (9 << 24) | 2) + b"{}",
    struct.pack(">iI", 4 + 5, (1 << 24) | 5) + b"\x00" * 5,
], ids=["negative", "too-small", "non-json", "json-string", "no-code", "code-text", "ext-list", "opaque-64bit",
        "header-overflows", "bad-type", "binary-truncated"])
def test_bad_frames_raise_frame_error(frame: bytes) -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(frame)


def test_decode_checks_length_field() -> None:
    frame = encode(RemotingCommand(code=1))
    with pytest.raises(FrameError):
        decode(frame + b"x")
    with pytest.raises(FrameError):
        decode(frame[:3])


def test_decoder_reassembles_split_and_joined_frames() -> None:
    frames = [encode(RemotingCommand(code=i, opaque=i, body=b"x" * i)) for i in range(1, 6)]
    stream = b"".join(frames)
    decoder = FrameDecoder()
    got = []
    for byte in stream:
        got += decoder.feed(bytes([byte]))
    assert [c.opaque for c in got] == [1, 2, 3, 4, 5]
    assert [c.body for c in got] == [b"x" * i for i in range(1, 6)]
    assert all(type(c.body) is bytes for c in got)  # copied out of the reassembly buffer, which is reused
    assert decoder.buffered == 0
    assert [c.code for c in FrameDecoder().feed(stream)] == [1, 2, 3, 4, 5]


def test_max_frame_size_is_configurable_and_checked_before_buffering() -> None:
    frame = encode(RemotingCommand(code=1, body=b"x" * 200))
    assert len(FrameDecoder(max_frame_size=1024).feed(frame)) == 1
    decoder = FrameDecoder(max_frame_size=100)
    with pytest.raises(FrameError, match="exceeds the maximum"):
        decoder.feed(frame[:4])  # the length field alone is enough to refuse it


# -- properties ------------------------------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    ext_fields=st.dictionaries(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=10),
                               _text, max_size=5),
    body=st.binary(max_size=64),
    remark=st.one_of(st.none(), st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)),
    language=st.sampled_from(["JAVA", "CPP", "PYTHON", "GO", "OTHER"]),
    version=st.integers(0, 2**15 - 1),
    serialize_type=st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]),
)


@given(commands)
def test_property_round_trip(cmd: RemotingCommand) -> None:
    back = decode(encode(cmd))
    assert back == cmd


def _feed_all(data: bytes, cuts: list[int]) -> None:
    decoder = FrameDecoder(max_frame_size=4096)
    pos = 0
    try:
        for cut in [*sorted(cuts), len(data)]:
            decoder.feed(data[pos:cut])
            pos = max(pos, cut)
    except FrameError:
        pass  # the only exception allowed to escape


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=5))
def test_property_random_bytes_only_frame_error(data: bytes, cuts: list[int]) -> None:
    _feed_all(data, cuts)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(commands, st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
       st.lists(st.integers(0, 300), max_size=3))
def test_property_mutated_frames_only_frame_error(cmd: RemotingCommand, flips: list[tuple[int, int]],
                                                  cuts: list[int]) -> None:
    frame = bytearray(encode(cmd))
    for pos, value in flips:
        frame[pos % len(frame)] = value
    _feed_all(bytes(frame), cuts)


@settings(max_examples=200)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
                    max_leaves=8))
def test_property_arbitrary_json_headers_only_frame_error(value: object) -> None:
    try:
        raw = orjson.dumps({"code": 1, "extFields": value, "language": value, "remark": value, "opaque": 1})
        raw_other = orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return
    for header in (raw, raw_other):
        try:
            FrameDecoder().feed(json_frame(header))
        except FrameError:
            pass
