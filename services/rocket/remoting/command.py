"""The remoting command and its frame codec (JSON and RocketMQ binary headers).

Frame layout (RocketMQ's ``RemotingCommand.encode`` / ``NettyDecoder``), all big-endian::

    int32 length            bytes after this field = 4 + headerLen + bodyLen
    int32 headerTag         top 8 bits: serialization type (0 JSON, 1 ROCKETMQ)
                            low 24 bits: headerLen
    headerLen bytes         the header
    the rest                the body

The JSON header is an object with ``code``, ``language``, ``version``,
``opaque``, ``flag``, optional ``remark`` and ``extFields`` (``RemotingSerializable``);
the binary header is laid out as in ``RocketMQSerializable``. Replies use the serialization of the request.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from mypy_extensions import mypyc_attr

from rocket.protocol.codes import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    VERSION_V4_9_8,
    LanguageCode,
    ResponseCode,
    SerializeType,
)
from rocket.protocol.validation import JAVA_INT_RANGE, JAVA_LONG_RANGE

#: Largest frame accepted by default: 16 MiB, as Java's ``frameMaxLength``.
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024

_INT: Final = struct.Struct(">i")
_PREFIX: Final = struct.Struct(">iI")
_TAG: Final = struct.Struct(">I")
_BIN_FIXED: Final = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_LANGUAGE_NAMES = {lc.value: lc.name for lc in LanguageCode}


@mypyc_attr(native_class=False)
class RemotingError(Exception):
    """Base class of every remoting failure."""


@mypyc_attr(native_class=False)
class FrameError(RemotingError, ValueError):
    """A frame that cannot be decoded: bad length, bad header, too large.

    The connection that sent it is closed; nothing else is affected.
    """


@mypyc_attr(native_class=False)
class RemotingTimeoutError(RemotingError, TimeoutError):
    """No response arrived within the request's timeout."""


@mypyc_attr(native_class=False)
class RemotingConnectError(RemotingError, ConnectionError):
    """The peer could not be reached, or the connection closed under a request."""


@mypyc_attr(native_class=False)
class HeaderFieldError(RemotingError, ValueError):
    """A required ext field is missing or not of its type.

    Servers answer it with SYSTEM_ERROR (1) and the message as remark, as Java
    does for ``@CFNotNull`` fields.
    """


@mypyc_attr(native_class=False)
class RemotingCommandError(RemotingError):
    """A response arrived with a code the caller did not accept.

    Attributes: ``code`` (int response code) and ``remark`` (str or None).
    """

    def __init__(self, code: int, remark: str | None, what: str = "") -> None:
        self.code = code
        self.remark = remark
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = str(code)
        prefix = f"{what}: " if what else ""
        super().__init__(f"{prefix}{name} ({code}): {remark or ''}".rstrip(": "))


def ext_str(value: Any) -> str | None:
    """Coerce an ext-field value to the string form Java would have sent.

    Clients other than Java's (the C++ core, ali-ons) send numbers and booleans: ``True`` becomes
    ``"true"``, ``3`` becomes ``"3"``; ``None`` stays ``None``.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return orjson.dumps(value).decode()




_DECIMAL = re.compile(r"[+-]?[0-9]+")


def _header_int(name: str, text: str | int, bits: int) -> int:
    text = str(text)  # an int when set in-process rather than read from a frame
    shown = text if len(text) <= 40 else text[:40] + "..."
    if not _DECIMAL.fullmatch(text):  # Java's parseInt/parseLong: no spaces, no '_', ASCII digits
        raise HeaderFieldError(f"the custom field <{name}> is not an integer: {shown!r}")
    low, high = JAVA_INT_RANGE if bits == 32 else JAVA_LONG_RANGE
    value = int(text) if len(text) <= 21 else None
    if value is None or not low <= value <= high:
        kind = "an int" if bits == 32 else "a long"
        raise HeaderFieldError(f"the custom field <{name}> is out of the range of {kind}: {shown}")
    return value


def parse_bool(text: str) -> bool:
    """Parse a boolean ext value: ``true``/``false`` (Java) or ``1``/``0`` (C++).

    Raises ``ValueError`` for anything else.
    """
    lowered = text.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


@dataclass(slots=True, init=False)
class RemotingCommand:
    """One request or response.

    ``ext_fields`` always holds strings (input is coerced, see :func:`ext_str`); ``body`` is raw
    bytes. ``serialize_type`` is the header serialization this command was
    read with, and the one its response is written with.
    """

    code: int
    opaque: int = 0
    flag: int = 0
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    remark: str | None = None
    language: str = "PYTHON"
    version: int = VERSION_V4_9_8
    serialize_type: int = SerializeType.JSON

    def __init__(self, code: int, opaque: int = 0, flag: int = 0, ext_fields: dict[str, str] | None = None,
                 body: bytes = b"", remark: str | None = None, language: str = "PYTHON",
                 version: int = VERSION_V4_9_8, serialize_type: int = SerializeType.JSON) -> None:
        # Written out (``init=False``): the ``__init__`` that ``dataclass`` generates stays
        # interpreted in the compiled form of this module (rocket.compiled); this one is native.
        self.code = code
        self.opaque = opaque
        self.flag = flag
        self.ext_fields = {} if ext_fields is None else ext_fields
        self.body = body
        self.remark = remark
        self.language = language
        self.version = version
        self.serialize_type = serialize_type

    @property
    def is_response(self) -> bool:
        """True when the RESPONSE flag bit (1) is set."""
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        """True when the ONEWAY flag bit (2) is set: no response is sent."""
        return bool(self.flag & FLAG_ONEWAY)

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, Any] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """Build the response to this request: same ``opaque`` and serialization.

        ``ext_fields`` values are written as strings (the C++ client reads only
        string-typed response fields).
        """
        fields: dict[str, str] = {}
        if ext_fields:
            for key, value in ext_fields.items():
                text = ext_str(value)
                if text is not None:
                    fields[key] = text
        return RemotingCommand(
            code=int(code),
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            ext_fields=fields,
            body=body,
            remark=remark,
            language="JAVA",
            serialize_type=self.serialize_type,
        )

    # -- typed ext-field access -------------------------------------------------

    def get(self, name: str, default: str | None = None) -> str | None:
        """The ext field ``name`` or ``default``."""
        return self.ext_fields.get(name, default)

    def require(self, name: str, *aliases: str) -> str:
        """The ext field ``name`` (or the first present alias).

        Raises ``HeaderFieldError`` when none is present.
        """
        value = self.ext_fields.get(name)
        if value is None:
            for alias in aliases:
                value = self.ext_fields.get(alias)
                if value is not None:
                    break
        if value is None:
            raise HeaderFieldError(f"the custom field <{name}> is null")
        return value

    def require_int(self, name: str, *aliases: str, bits: int = 64) -> int:
        """The ext field ``name`` parsed as a decimal integer of a Java ``long`` (``bits`` 64)
        or ``int`` (``bits`` 32), as the field is declared in RocketMQ's header class.

        Raises ``HeaderFieldError`` when missing, not an integer, or out of that type's range
        (Java's ``decodeCommandCustomHeader`` fails the same way: SYSTEM_ERROR).
        """
        text = self.require(name, *aliases)
        return _header_int(name, text, bits)

    def get_int(self, name: str, default: int, *aliases: str, bits: int = 64) -> int:
        """The ext field ``name`` as an integer (see :meth:`require_int`), or ``default`` when absent.

        Raises ``HeaderFieldError`` when present but not an integer of that range.
        """
        for key in (name, *aliases):
            text = self.ext_fields.get(key)
            if text is not None and text != "":
                return _header_int(key, text, bits)
        return default

    def get_bool(self, name: str, default: bool, *aliases: str) -> bool:
        """The ext field ``name`` as a boolean (``true/false/1/0``), or ``default``.

        Raises ``HeaderFieldError`` when present but not a boolean.
        """
        for key in (name, *aliases):
            text = self.ext_fields.get(key)
            if text is not None:
                try:
                    return parse_bool(text)
                except ValueError:
                    raise HeaderFieldError(f"the custom field <{key}> is not a boolean: {text!r}") from None
        return default


# -- encoding -------------------------------------------------------------------


def _json_header(cmd: RemotingCommand) -> bytes:
    header: dict[str, Any] = {
        "code": cmd.code,
        "extFields": cmd.ext_fields,
        "flag": cmd.flag,
        "language": cmd.language,
        "opaque": cmd.opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": cmd.version,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    return orjson.dumps(header)


def _binary_header(cmd: RemotingCommand) -> bytes:
    try:
        language = LanguageCode[cmd.language].value
    except KeyError:
        language = LanguageCode.OTHER.value
    parts = [_BIN_FIXED.pack(cmd.code, language, cmd.version, cmd.opaque, cmd.flag)]
    remark = cmd.remark.encode() if cmd.remark else b""
    parts.append(_INT.pack(len(remark)))
    parts.append(remark)
    ext = bytearray()
    for key, value in cmd.ext_fields.items():
        kb, vb = key.encode(), value.encode()
        ext += struct.pack(">h", len(kb)) + kb + _INT.pack(len(vb)) + vb
    parts.append(_INT.pack(len(ext)))
    parts.append(bytes(ext))
    return b"".join(parts)


def encode(cmd: RemotingCommand) -> bytes:
    """Encode ``cmd`` as one frame, with its ``serialize_type`` header.

    Raises ``FrameError`` if the header exceeds 16 MiB - 1 (24-bit length).
    """
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        header = _binary_header(cmd)
    else:
        header = _json_header(cmd)
    header_len = len(header)
    if header_len > 0xFFFFFF:
        raise FrameError(f"header of {header_len} bytes exceeds the 24-bit length field")
    body = cmd.body
    return b"".join(
        (_PREFIX.pack(4 + header_len + len(body), (cmd.serialize_type << 24) | header_len), header, body)
    )


# -- decoding -------------------------------------------------------------------

_I32_MIN: Final = -0x80000000
_I32_MAX: Final = 0x7FFFFFFF
_JSON = SerializeType.JSON


def _decode_json_header(header: bytes, body: bytes) -> RemotingCommand:
    try:
        obj = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"header is not valid JSON: {exc}") from None
    if type(obj) is dict:
        # Fast path: the header as Java, C++ and Python clients write it (int fields in range,
        # string language and remark, string-only ext fields).
        get = obj.get
        code = get("code")
        opaque = get("opaque", 0)
        flag = get("flag", 0)
        version = get("version", 0)
        language = get("language", "OTHER")
        remark = get("remark")
        raw = get("extFields")
        if (
            type(code) is int and type(opaque) is int and type(flag) is int and type(version) is int
            and _I32_MIN <= code <= _I32_MAX and _I32_MIN <= opaque <= _I32_MAX
            and _I32_MIN <= flag <= _I32_MAX and _I32_MIN <= version <= _I32_MAX
            and type(language) is str and (remark is None or type(remark) is str) and type(raw) is dict
        ):
            ext: dict[str, object] = raw
            for value in ext.values():  # (compiled, a loop over the dict's values: no joined copy)
                if type(value) is not str:  # a number or boolean among them: coerced below
                    break
            else:
                return RemotingCommand(code, opaque, flag, raw, body, remark, language, version, _JSON)
    return _decode_json_object(obj, body)


def _decode_json_object(obj: Any, body: bytes) -> RemotingCommand:
    """The general reading of a parsed JSON header: coerces what other clients send, or raises FrameError."""
    if not isinstance(obj, dict):
        raise FrameError("header JSON is not an object")
    get = obj.get
    code = get("code")
    opaque = get("opaque", 0)
    flag = get("flag", 0)
    version = get("version", 0)
    if not (type(code) is int and type(opaque) is int and type(flag) is int and type(version) is int):
        try:  # numbers sent as strings (or floats) by other clients
            code = int(obj["code"])
            opaque = int(opaque)
            flag = int(flag)
            version = int(version)
        except (KeyError, TypeError, ValueError) as exc:
            raise FrameError(f"header field missing or not an integer: {exc}") from None
    # Java reads these as 32-bit ints; larger values could not be echoed back (opaque) or encoded.
    if not (
        -0x80000000 <= code <= 0x7FFFFFFF
        and -0x80000000 <= opaque <= 0x7FFFFFFF
        and -0x80000000 <= flag <= 0x7FFFFFFF
        and -0x80000000 <= version <= 0x7FFFFFFF
    ):
        raise FrameError(f"header field outside the 32-bit range: code {code} opaque {opaque} flag {flag}")
    language = get("language", "OTHER")
    if type(language) is not str:
        if isinstance(language, int):
            language = _LANGUAGE_NAMES.get(language, "OTHER")
        elif not isinstance(language, str):
            language = "OTHER"
    remark = get("remark")
    if remark is not None and not isinstance(remark, str):
        remark = str(remark)
    raw_ext = get("extFields")
    ext: dict[str, str] = {}
    if raw_ext is not None:
        if not isinstance(raw_ext, dict):
            raise FrameError("extFields is not an object")
        for value in raw_ext.values():
            if type(value) is not str:
                for key, value in raw_ext.items():
                    text = ext_str(value)
                    if text is not None:
                        ext[key] = text
                break
        else:  # all strings already (every Java/Python client): keep the parsed dict
            ext = raw_ext
    return RemotingCommand(code, opaque, flag, ext, body, remark, language, version, SerializeType.JSON)


def _decode_binary_header(header: bytes, body: bytes) -> RemotingCommand:
    try:
        code, language, version, opaque, flag = _BIN_FIXED.unpack_from(header, 0)
        pos = _BIN_FIXED.size
        (remark_len,) = _INT.unpack_from(header, pos)
        pos += 4
        if remark_len < 0 or pos + remark_len > len(header):
            raise FrameError("binary header: remark length out of range")
        remark = header[pos : pos + remark_len].decode() if remark_len else None
        pos += remark_len
        (ext_len,) = _INT.unpack_from(header, pos)
        pos += 4
        end = pos + ext_len
        if ext_len < 0 or end > len(header):
            raise FrameError("binary header: ext block length out of range")
        ext: dict[str, str] = {}
        while pos < end:
            (klen,) = struct.unpack_from(">h", header, pos)
            pos += 2
            if klen < 0 or pos + klen > end:
                raise FrameError("binary header: ext key length out of range")
            key = header[pos : pos + klen].decode()
            pos += klen
            (vlen,) = _INT.unpack_from(header, pos)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                raise FrameError("binary header: ext value length out of range")
            ext[key] = header[pos : pos + vlen].decode()
            pos += vlen
    except struct.error as exc:
        raise FrameError(f"binary header truncated: {exc}") from None
    except UnicodeDecodeError as exc:
        raise FrameError(f"binary header has invalid UTF-8: {exc}") from None
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        ext_fields=ext,
        body=body,
        remark=remark,
        language=_LANGUAGE_NAMES.get(language, "OTHER"),
        version=version,
        serialize_type=SerializeType.ROCKETMQ,
    )


def decode_frame_payload(payload: bytes) -> RemotingCommand:
    """Decode one frame without its leading length field.

    ``payload`` is ``headerTag + header + body``. Raises ``FrameError`` on any
    inconsistency.
    """
    if len(payload) < 4:
        raise FrameError(f"frame of {len(payload)} bytes is shorter than its header tag")
    return _decode_at(payload, 0, len(payload))


def _decode_at(buf: bytes | bytearray, start: int, length: int) -> RemotingCommand:
    """Decode the frame payload ``buf[start:start + length]`` (at least 4 bytes), copying
    header and body out of ``buf`` once each (a frame that spanned reads is in a bytearray)."""
    tag: int
    (tag,) = _TAG.unpack_from(buf, start)
    serialize_type = tag >> 24
    header_len = tag & 0xFFFFFF
    if 4 + header_len > length:
        raise FrameError(f"header length {header_len} exceeds the frame ({length - 4} bytes)")
    h = start + 4
    b = h + header_len
    if isinstance(buf, bytes):
        header = buf[h:b]
        body = buf[b : start + length]
    else:  # a bytearray's slice is a bytearray: copy out of a view instead, once
        view = memoryview(buf)
        header = bytes(view[h:b])
        body = bytes(view[b : start + length])
        view.release()
    if serialize_type == SerializeType.JSON:
        return _decode_json_header(header, body)
    if serialize_type == SerializeType.ROCKETMQ:
        return _decode_binary_header(header, body)
    raise FrameError(f"unknown serialization type {serialize_type}")


def decode(frame: bytes) -> RemotingCommand:
    """Decode exactly one whole frame (with its length field).

    Raises ``FrameError`` if the length field disagrees with ``len(frame)``.
    """
    if len(frame) < 4:
        raise FrameError("frame shorter than its length field")
    (length,) = _INT.unpack_from(frame, 0)
    if length != len(frame) - 4:
        raise FrameError(f"length field says {length} bytes, frame has {len(frame) - 4}")
    return decode_frame_payload(frame[4:])


class FrameDecoder:
    """Incremental decoder for a byte stream of frames.

    ``feed(data)`` returns the commands completed by ``data``. It raises
    ``FrameError`` on a negative or too-small length field, on a frame larger
    than ``max_frame_size`` bytes (checked before buffering it), and on a
    malformed header; after an error the stream is unusable.
    """

    __slots__ = ("_buffer", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buffer = bytearray()
        self.max_frame_size = max_frame_size

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a whole frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[RemotingCommand]:
        """Append ``data`` and decode every whole frame now available.

        A frame held over from an earlier call is completed with just the bytes it
        lacks; the frames after it are decoded straight from ``data`` (no copy of
        the whole read into the buffer), and only an incomplete tail is kept.
        """
        commands: list[RemotingCommand] = []
        buffer = self._buffer
        length: int
        pos = 0
        end = len(data)
        if buffer:
            if len(buffer) < 4:  # not even the length field yet
                take = min(4 - len(buffer), end)
                buffer += data[:take]
                pos = take
                if len(buffer) < 4:
                    return commands
            (length,) = _INT.unpack_from(buffer, 0)
            self._check_length(length)
            need = 4 + length - len(buffer)
            if end - pos < need:
                buffer += memoryview(data)[pos:]
                return commands
            buffer += memoryview(data)[pos : pos + need]
            pos += need
            commands.append(_decode_at(buffer, 4, length))
            buffer.clear()
        unpack = _INT.unpack_from
        max_size = self.max_frame_size
        while end - pos >= 4:
            (length,) = unpack(data, pos)
            if length < 4 or length > max_size:
                self._check_length(length)
            if end - pos - 4 < length:
                break
            start = pos + 4
            commands.append(_decode_at(data, start, length))
            pos = start + length
        if pos < end:
            buffer += memoryview(data)[pos:]
        return commands

    def _check_length(self, length: int) -> None:
        """Raise FrameError for a length field below 4 or above ``max_frame_size``."""
        if length < 4:
            raise FrameError(f"length field {length} is smaller than the header tag")
        if length > self.max_frame_size:
            raise FrameError(f"frame of {length} bytes exceeds the maximum of {self.max_frame_size}")
