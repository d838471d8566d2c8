"""Hypothesis strategies of hostile input: JSON values, near-valid mutations of valid seeds, frames.

The generators are structure-aware: most inputs start from a valid object (a body or header as a
real client writes it) and change a few of its parts, so that they get past the first check of a
parser and reach its deeper code; the rest are random bytes and byte-level mutations of valid
encodings. Everything here is independent of ``rocket`` (the product is what is tested).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

INT_EDGES = [0, 1, -1, 2**31 - 1, -(2**31), 2**31, -(2**31) - 1, 2**32, 2**53, 2**63 - 1, -(2**63), 2**63,
             -(2**63) - 1, 2**64, 10**30, -(10**30)]
TEXT_EDGES = ["", " ", "0", "-1", "1.5", "1e309", "NaN", "true", "null", "{}", "[]", "x" * 300, "\u0661\u0662",
              "\x00", "\x01\x02", "\ud7ff", "9" * 40, "²", "٣"]

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from(INT_EDGES),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(TEXT_EDGES),
)
#: Any JSON value, nested up to a few levels.
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12,
)


def deep(depth: int, objects_only: bool = False) -> bytes:
    """JSON text nested ``depth`` levels: objects ``{"value": ...}``, alternating with arrays unless
    ``objects_only``."""
    opens = "".join('{"value":' if objects_only or i % 2 == 0 else "[" for i in range(depth))
    closes = "".join("}" if objects_only or i % 2 == 0 else "]" for i in reversed(range(depth)))
    return f"{opens}1{closes}".encode()


@st.composite
def mutated(draw: st.DrawFn, template: Any, depth: int = 0) -> Any:
    """``template`` with some of its parts replaced by any JSON value, removed, or added to.

    Each node is kept (and its children mutated) or replaced; an object may also lose members or
    gain one; an array may lose or repeat items.
    """
    choice = draw(st.integers(0, 9))
    if choice == 0 or depth > 6:
        return draw(json_values)
    if choice == 1 and isinstance(template, (dict, list)):
        return draw(json_values)  # a different type where a container was expected
    if isinstance(template, dict):
        out: dict[str, Any] = {}
        for key, value in template.items():
            if draw(st.integers(0, 7)) == 0:
                continue  # member dropped
            out[key] = draw(mutated(value, depth + 1))
        if draw(st.integers(0, 5)) == 0:
            out[draw(st.sampled_from([*template, "x", ""]) if template else st.text(max_size=8))] = draw(json_values)
        return out
    if isinstance(template, list):
        items = [draw(mutated(item, depth + 1)) for item in template]
        if items and draw(st.integers(0, 5)) == 0:
            items = items * draw(st.integers(2, 4))
        if draw(st.integers(0, 5)) == 0:
            items.append(draw(json_values))
        return items
    if choice <= 6:
        return template  # this leaf kept as the valid one
    if isinstance(template, bool):
        return draw(st.one_of(st.booleans(), st.sampled_from(["true", "false", "1", "0", "yes", 2])))
    if isinstance(template, int):
        return draw(st.one_of(st.sampled_from(INT_EDGES), st.integers(-(2**70), 2**70),
                              st.sampled_from(INT_EDGES).map(str), st.floats(), st.sampled_from(TEXT_EDGES)))
    if isinstance(template, str):
        return draw(st.one_of(st.text(max_size=30), st.sampled_from(TEXT_EDGES), json_scalars))
    return draw(json_values)


def _fastjson(obj: Any) -> bytes:
    """``obj`` as fastjson writes a map with integer keys: bare (unquoted) keys where they are decimal."""
    text = json.dumps(obj, separators=(",", ":"))
    for key in {k for k in _keys(obj) if k.lstrip("-").isdigit() and k.isascii()}:
        text = text.replace(f'"{key}":', f"{key}:")
    return text.encode()


def _keys(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return [str(k) for k in obj] + [k for v in obj.values() for k in _keys(v)]
    if isinstance(obj, list):
        return [k for v in obj for k in _keys(v)]
    return []


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def byte_mutation(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` truncated, with bytes flipped, inserted or deleted, or repeated."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.integers(0, 4))
        pos = draw(st.integers(0, len(buf))) if buf else 0
        if op == 0:
            del buf[pos:]
        elif op == 1 and pos < len(buf):
            buf[pos] = draw(st.integers(0, 255))
        elif op == 2:
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == 3:
            del buf[pos : pos + draw(st.integers(1, 16))]
        else:
            buf += buf[pos:]
    return bytes(buf)


def json_body(templates: list[Any], *, extra: list[st.SearchStrategy[bytes]] | None = None) -> st.SearchStrategy[bytes]:
    """Bodies for a JSON parser: mutated ``templates`` as standard or fastjson JSON, byte-level
    mutations of a valid one, deep nesting, any JSON value, random bytes."""
    valid = st.sampled_from(templates)
    encoded = st.sampled_from([_dumps(t) for t in templates] + [_fastjson(t) for t in templates])
    parts = [
        valid.flatmap(mutated).map(_dumps),
        valid.flatmap(mutated).map(_fastjson),
        encoded.flatmap(byte_mutation),
        json_values.map(_dumps),
        st.binary(max_size=64),
        st.tuples(st.integers(900, 1100), st.booleans()).map(lambda t: deep(*t)),
        *(extra or []),
    ]
    return st.one_of(*parts)


def zlib_of(inner: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """zlib streams (as Java's ``Deflater``) of ``inner``, sometimes cut short."""
    return st.tuples(inner, st.booleans()).map(lambda t: zlib.compress(t[0], 9)[: None if t[1] else -3])


#: A zlib stream of 80 KiB that inflates to 80 MiB of zeros (a decompression bomb).
ZLIB_BOMB = zlib.compress(bytes(80 << 20), 9)


def rarely(value: bytes, one_in: int = 64) -> st.SearchStrategy[bytes]:
    """``value`` in about one of ``one_in`` draws, else an empty bytes (for costly inputs)."""
    return st.integers(1, one_in).map(lambda n: value if n == 1 else b"")


# -- remoting frames -----------------------------------------------------------------------------

JSON_HEADER_TEMPLATE = {"code": 105, "language": "JAVA", "version": 453, "opaque": 7, "flag": 0,
                        "remark": None, "extFields": {"topic": "T", "queueId": "0"},
                        "serializeTypeCurrentRPC": "JSON"}


def frame(tag_type: int, header: bytes, body: bytes = b"", *, length: int | None = None,
          header_len: int | None = None) -> bytes:
    """A frame: int32 length, int32 (type << 24 | headerLen), header, body; lengths overridable."""
    hl = len(header) if header_len is None else header_len
    total = 4 + len(header) + len(body) if length is None else length
    return struct.pack(">iI", total, ((tag_type & 0xFF) << 24) | (hl & 0xFFFFFF)) + header + body


@st.composite
def binary_header(draw: st.DrawFn) -> bytes:
    """A RocketMQ binary header (``RocketMQSerializable``) with random, sometimes wrong, lengths."""
    code, lang, version, opaque, flag = (draw(st.integers(-(2**15), 2**15 - 1)), draw(st.integers(-128, 127)),
                                         draw(st.integers(-(2**15), 2**15 - 1)), draw(st.integers(-(2**31), 2**31 - 1)),
                                         draw(st.integers(-(2**31), 2**31 - 1)))
    out = bytearray(struct.pack(">hbhii", code, lang, version, opaque, flag))
    remark = draw(st.one_of(st.text(max_size=10).map(lambda s: s.encode()), st.binary(max_size=10)))
    out += struct.pack(">i", draw(st.one_of(st.just(len(remark)), st.integers(-(2**31), 2**31 - 1)))) + remark
    ext = bytearray()
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.one_of(st.text(max_size=6).map(lambda s: s.encode()), st.binary(max_size=6)))
        value = draw(st.one_of(st.text(max_size=6).map(lambda s: s.encode()), st.binary(max_size=6)))
        ext += struct.pack(">h", draw(st.one_of(st.just(len(key)), st.integers(-(2**15), 2**15 - 1)))) + key
        ext += struct.pack(">i", draw(st.one_of(st.just(len(value)), st.integers(-(2**31), 2**31 - 1)))) + value
    out += struct.pack(">i", draw(st.one_of(st.just(len(ext)), st.integers(-(2**31), 2**31 - 1)))) + ext
    return bytes(out)


def json_header() -> st.SearchStrategy[bytes]:
    """JSON headers: the template mutated, or any JSON value, or broken text."""
    return st.one_of(mutated(JSON_HEADER_TEMPLATE).map(_dumps), json_values.map(_dumps), st.binary(max_size=40),
                     st.just(_dumps(JSON_HEADER_TEMPLATE)).flatmap(byte_mutation))


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """One frame of a random kind: well-formed lengths around a bad header, or wrong lengths."""
    kind = draw(st.integers(0, 9))
    body = draw(st.binary(max_size=16))
    if kind <= 3:
        return frame(0, draw(json_header()), body)
    if kind <= 5:
        return frame(1, draw(binary_header()), body)
    if kind == 6:  # header length past the frame, or an unknown serialize type
        header = draw(json_header())
        return frame(draw(st.integers(0, 255)), header, body,
                     header_len=draw(st.one_of(st.just(len(header)), st.integers(0, 0xFFFFFF))))
    if kind == 7:  # a length prefix that lies
        return frame(0, draw(json_header()), body, length=draw(st.one_of(st.sampled_from(
            [-(2**31), -1, 0, 3, 2**31 - 1, 16 * 1024 * 1024 + 1]), st.integers(-(2**31), 2**31 - 1))))
    if kind == 8:
        return draw(st.binary(max_size=48))
    return frame(0, _dumps(JSON_HEADER_TEMPLATE), body) + draw(st.binary(max_size=12))


def mapped(fn: Callable[[Any], bytes], inner: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """``inner`` mapped through ``fn`` (named for readability of target tables)."""
    return inner.map(fn)
