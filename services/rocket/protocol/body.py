"""JSON-body helpers shared by every wire model: lenient parsing, strict writing, one error type.

RocketMQ's Java side writes bodies with fastjson (``RemotingSerializable.encode``),
which sorts an object's members by name and writes integer map keys bare
(``{0:"10.0.0.5:10911"}``), which is not standard JSON. Parsing here is liberal:
bare integer keys, numbers sent as strings, an ``AtomicLong`` written as a bean
(``{"value": n}``) and missing members (Java's defaults) are all accepted.
Writing always produces standard JSON (quoted keys), which every RocketMQ
client accepts.

Errors: every parser in :mod:`rocket.protocol` raises :class:`BodyError` (a
``ValueError``) for a body it cannot understand.
"""

from __future__ import annotations

import re
import reprlib
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson


class BodyError(ValueError):
    """A request or response body that cannot be decoded (malformed JSON, missing or mistyped member)."""


# A bare integer map key outside string literals, as fastjson writes map keys of type Long/Integer.
_BARE_INT_KEY = re.compile(rb'([{,]\s*)(-?\d+)(\s*:)')
_STRING_LITERAL = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)


#: Deepest nesting of arrays and objects accepted in a body. RocketMQ's bodies nest 6 levels at
#: most; orjson reads up to 1024, deeper than Python's recursion limit lets ``str``/``repr`` (and
#: the parsers) walk a value.
MAX_JSON_DEPTH = 64


def check_depth(obj: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise ``ValueError`` when ``obj`` nests arrays/objects more than ``limit`` levels deep."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            raise ValueError(f"JSON nested more than {limit} levels deep")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, (dict, list)))


def loads_lenient(data: bytes | str) -> Any:
    """Parse JSON, also accepting fastjson's bare integer map keys (``{0:"a"}``).

    Returns whatever the JSON holds (dict, list, scalar). Raises ``ValueError``
    (``orjson.JSONDecodeError``) when the text is not JSON even after quoting
    such keys, or nests deeper than :data:`MAX_JSON_DEPTH`.
    """
    raw = data.encode() if isinstance(data, str) else bytes(data)
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    else:
        if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH:  # cheap: only then can it be too deep
            check_depth(obj)
        return obj
    # Quote bare integer keys outside string literals only.
    out: list[bytes] = []
    pos = 0
    for match in _STRING_LITERAL.finditer(raw):
        out.append(_BARE_INT_KEY.sub(rb'\1"\2"\3', raw[pos : match.start()]))
        out.append(match.group(0))
        pos = match.end()
    out.append(_BARE_INT_KEY.sub(rb'\1"\2"\3', raw[pos:]))
    obj = orjson.loads(b"".join(out))
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH:
        check_depth(obj)
    return obj


def json_object(data: bytes | str | Mapping[str, Any], what: str) -> Mapping[str, Any]:
    """``data`` as a JSON object: a mapping is returned as is, bytes or text are parsed leniently.

    ``what`` names the body in the error. Raises :class:`BodyError` when the
    text is not JSON or not an object.
    """
    if isinstance(data, Mapping):
        return data
    try:
        obj = loads_lenient(data)
    except ValueError as exc:
        raise BodyError(f"{what} is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BodyError(f"{what} is not a JSON object")
    return obj


def as_int(value: Any, name: str, default: int = 0) -> int:
    """A JSON member as an int: ``None`` gives ``default``; bools, decimal strings and
    ``{"value": n}`` (an ``AtomicLong`` bean) are accepted.

    Raises :class:`BodyError` naming member ``name`` otherwise.
    """
    if isinstance(value, dict) and "value" in value:
        value = value["value"]  # one level only: a nested bean is not an AtomicLong (and must not recurse)
    if value is None:
        return default
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, (dict, list)):
        raise BodyError(f"{name} is not an integer: {reprlib.repr(value)}")
    try:
        return int(str(value).strip())
    except ValueError:
        raise BodyError(f"{name} is not an integer: {reprlib.repr(value)}") from None


def as_bool(value: Any) -> bool:
    """A JSON member as a bool: the strings ``"true"``/``"1"`` (any case) are true."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1")
    return bool(value)


def dumps(obj: Any) -> bytes:
    """Standard JSON bytes of ``obj`` (orjson; non-ASCII written as UTF-8)."""
    return orjson.dumps(obj)


def crc32_masked(data: bytes) -> int:
    """CRC32 of ``data`` masked with 0x7FFFFFFF, as Java's ``UtilAll.crc32``.

    REGISTER_BROKER carries it as ext ``bodyCrc32`` (``BrokerOuterAPI.registerBrokerAll``).
    """
    return zlib.crc32(data) & 0x7FFFFFFF


def topic_list_body(topics: Iterable[str], broker_addr: str | None = None) -> bytes:
    """``TopicList`` JSON: ``{"topicList": [...]}`` plus ``brokerAddr`` when given."""
    obj: dict[str, Any] = {"topicList": list(topics)}
    if broker_addr is not None:
        obj["brokerAddr"] = broker_addr
    return dumps(obj)


def parse_topic_list(body: bytes) -> list[str]:
    """The ``topicList`` of a ``TopicList`` body. Raises :class:`BodyError`."""
    obj = json_object(body, "TopicList")
    topics = obj.get("topicList") or []
    if not isinstance(topics, list):
        raise BodyError("topicList is not an array")
    return [str(t) for t in topics]


def kv_table_body(table: Mapping[str, str]) -> bytes:
    """``KVTable`` JSON: ``{"table": {"k": "v"}}``."""
    return dumps({"table": dict(table)})


def parse_kv_table(body: bytes) -> dict[str, str]:
    """The ``table`` of a ``KVTable`` body (empty for an empty body). Raises :class:`BodyError`."""
    if not body:
        return {}
    obj = json_object(body, "KVTable")
    table = obj.get("table") or {}
    if not isinstance(table, dict):
        raise BodyError("table is not an object")
    return {str(k): str(v) for k, v in table.items()}


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java properties text (``java.util.Properties.load``, the bodies of GET/UPDATE_BROKER_CONFIG,
    UPDATE_NAMESRV_CONFIG and UPDATE_CONTROLLER_CONFIG, ``broker.conf``, RocketMQ's ``tls.config.file``):
    ``key=value``, ``key: value`` or ``key value``; ``#``/``!`` comments; a key alone maps to "".

    Line continuations (trailing backslash) are joined; other escapes are kept
    as written (RocketMQ's files and bodies do not use them).
    """
    result: dict[str, str] = {}
    pending = ""
    for raw_line in text.splitlines():
        line = pending + raw_line.strip()
        pending = ""
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        if not line or line[0] in "#!":
            continue
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if match:
            result[match.group(1)] = match.group(2).strip()
        else:
            result[line] = ""
    if pending:
        result.setdefault(pending, "")
    return result


def format_properties(values: Mapping[str, str]) -> str:
    """``key=value`` lines, sorted by key (GET_BROKER_CONFIG body, persisted overrides)."""
    return "".join(f"{key}={value}\n" for key, value in sorted(values.items()))
