"""The body of REGISTER_BROKER (``org.apache.rocketmq.remoting.protocol.body.RegisterBrokerBody``).

Two encodings, chosen by the request's ext ``compressed``:

* JSON: ``{"filterServerList": [...], "topicConfigSerializeWrapper":
  {"dataVersion": {...}, "topicConfigTable": {...}}}``;
* compressed (``RegisterBrokerBody.encode(true)``): a zlib stream (level 9) of
  int32 length + DataVersion JSON; int32 topic count; per topic int32 length +
  :meth:`~rocket.protocol.topic.TopicConfig.encode_text`; int32 length +
  filter-server JSON array. All integers big-endian.

The request's ext ``bodyCrc32`` is :func:`~rocket.protocol.body.crc32_masked`
of the body. Parsers raise :class:`~rocket.protocol.body.BodyError`.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

import orjson

from rocket.protocol.body import BodyError, dumps, json_object
from rocket.protocol.topic import DataVersion, TopicConfig, TopicConfigSerializeWrapper

_INT = struct.Struct(">i")
#: Largest inflated size of a compressed registration body: 64 MiB (four 16 MiB frames; about a
#: million topics). Java sets no bound; here a small zlib stream ("zip bomb") must not make the
#: NameServer allocate gigabytes.
MAX_INFLATED_REGISTER_BODY = 64 * 1024 * 1024


@dataclass(slots=True)
class RegisterBrokerBody:
    """A broker's topic table and filter servers, as it registers them with a NameServer."""

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = field(
        default_factory=TopicConfigSerializeWrapper
    )
    filter_server_list: list[str] = field(default_factory=list)

    def encode(self, compressed: bool = False) -> bytes:
        """The body bytes in the chosen form (compressed at zlib level 9, as Java)."""
        if not compressed:
            return dumps(
                {
                    "filterServerList": self.filter_server_list,
                    "topicConfigSerializeWrapper": self.topic_config_serialize_wrapper.to_json(),
                }
            )
        wrapper = self.topic_config_serialize_wrapper
        parts: list[bytes] = []
        version = dumps(wrapper.data_version.to_json())
        parts += [_INT.pack(len(version)), version, _INT.pack(len(wrapper.topic_config_table))]
        for tc in wrapper.topic_config_table.values():
            text = tc.encode_text().encode()
            parts += [_INT.pack(len(text)), text]
        servers = dumps(self.filter_server_list)
        parts += [_INT.pack(len(servers)), servers]
        return zlib.compress(b"".join(parts), 9)

    @classmethod
    def decode(cls, body: bytes, compressed: bool = False) -> RegisterBrokerBody:
        """Parse a registration body in either form.

        An empty body gives an empty table with DataVersion(0, 0), as Java. A compressed body
        may inflate to at most :data:`MAX_INFLATED_REGISTER_BODY` bytes. A JSON body that is a
        bare TopicConfigSerializeWrapper (brokers before RocketMQ 3.0.11) is accepted too. Raises :class:`BodyError`.
        """
        if not body:
            return cls()
        if compressed:
            return cls._decode_compressed(body)
        obj = json_object(body, "RegisterBrokerBody")
        if "topicConfigSerializeWrapper" in obj:
            wrapper_obj = obj.get("topicConfigSerializeWrapper") or {}
        else:
            wrapper_obj = obj
        if not isinstance(wrapper_obj, dict):
            raise BodyError("topicConfigSerializeWrapper is not an object")
        servers = obj.get("filterServerList") or []
        if not isinstance(servers, list):
            raise BodyError("filterServerList is not an array")
        return cls(
            topic_config_serialize_wrapper=TopicConfigSerializeWrapper.from_json(wrapper_obj),
            filter_server_list=[str(s) for s in servers],
        )

    @classmethod
    def _decode_compressed(cls, body: bytes) -> RegisterBrokerBody:
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(body, MAX_INFLATED_REGISTER_BODY)
        except zlib.error as exc:
            raise BodyError(f"compressed register body does not inflate: {exc}") from None
        if inflater.unconsumed_tail:
            raise BodyError(f"compressed register body inflates to more than {MAX_INFLATED_REGISTER_BODY} bytes")
        if not inflater.eof:
            raise BodyError("compressed register body is a truncated zlib stream")
        pos = 0

        def chunk() -> bytes:
            nonlocal pos
            if pos + 4 > len(raw):
                raise BodyError("compressed register body is truncated")
            (length,) = _INT.unpack_from(raw, pos)
            pos += 4
            if length < 0 or pos + length > len(raw):
                raise BodyError("compressed register body has a bad length")
            data = raw[pos : pos + length]
            pos += length
            return data

        version = DataVersion.from_json(chunk())
        if pos + 4 > len(raw):
            raise BodyError("compressed register body is truncated")
        (count,) = _INT.unpack_from(raw, pos)
        pos += 4
        if count < 0:
            raise BodyError("compressed register body has a negative topic count")
        table: dict[str, TopicConfig] = {}
        for _ in range(count):
            try:
                text = chunk().decode()
            except UnicodeDecodeError:
                raise BodyError("topic config is not UTF-8") from None
            tc = TopicConfig.decode_text(text)
            table[tc.topic_name] = tc
        servers: list[str] = []
        if pos < len(raw):
            try:
                parsed = orjson.loads(chunk())
            except orjson.JSONDecodeError as exc:
                raise BodyError(f"filter server list is not JSON: {exc}") from None
            if isinstance(parsed, list):
                servers = [str(s) for s in parsed]
        return cls(TopicConfigSerializeWrapper(table, version), servers)
