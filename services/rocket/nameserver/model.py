"""Bodies exchanged with the NameServer: topic configs, data versions, routes.

Every class here mirrors a RocketMQ 4.9.8 Java class of the same name, and
its ``to_json``/``from_json`` use the Java field names (fastjson writes them;
``shared/reference/rocketmq-protocol.md`` A10). ``from_json`` is liberal: it
accepts missing members (Java defaults), numbers sent as strings, and
fastjson's bare integer map keys (quirk Q1, via :func:`loads_lenient`).
``to_json`` always produces standard JSON (quoted keys), which every client
tested accepts (A6 "105", Q1).

Errors: every ``from_json``/``decode`` raises :class:`BodyError` (a
``ValueError``) for a body it cannot understand.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from rocket.remoting.codes import PERM_READ, PERM_WRITE
from rocket.remoting.command import loads_lenient

#: brokerId of a master (``MixAll.MASTER_ID``); slaves have ids > 0 (A6, B7).
MASTER_ID = 0

#: KV namespace holding per-topic order configs (``NamesrvUtil``), A6 "105".
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"

_INT = struct.Struct(">i")


class BodyError(ValueError):
    """A request or response body that cannot be decoded."""


def _as_int(value: Any, name: str, default: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, dict) and "value" in value:  # an AtomicLong written as a bean
        return _as_int(value["value"], name, default)
    try:
        return int(str(value).strip())
    except ValueError:
        raise BodyError(f"{name} is not an integer: {value!r}") from None


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1")
    return bool(value)


def _object(data: bytes | str | Mapping[str, Any], what: str) -> Mapping[str, Any]:
    if isinstance(data, Mapping):
        return data
    try:
        obj = loads_lenient(data)
    except ValueError as exc:
        raise BodyError(f"{what} is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BodyError(f"{what} is not a JSON object")
    return obj


def crc32_masked(data: bytes) -> int:
    """CRC32 of ``data`` masked with 0x7FFFFFFF (Java ``UtilAll.crc32``, quirk Q14).

    Used for REGISTER_BROKER's ``bodyCrc32`` (A6).
    """
    return zlib.crc32(data) & 0x7FFFFFFF


def dumps(obj: Any) -> bytes:
    """Standard JSON bytes of ``obj`` (orjson; non-ASCII written as UTF-8)."""
    return orjson.dumps(obj)


# -- DataVersion / TopicConfig -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DataVersion:
    """Version of a broker's topic-config table (``DataVersion.java``, A10.3).

    ``timestamp`` is the broker's wall clock in ms when the table last
    changed, ``counter`` the number of changes. Two versions are equal when
    both fields are: the NameServer rebuilds a broker's queue data only when
    the version it registers differs from the one it registered last (A6).
    """

    timestamp: int = 0
    counter: int = 0

    def to_json(self) -> dict[str, int]:
        """``{"counter": n, "timestamp": ms}``."""
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any]) -> DataVersion:
        """Parse ``{"timestamp":..,"counter":..}``; missing members are 0.

        ``counter`` may also arrive as ``{"value": n}`` (an AtomicLong bean).
        """
        obj = _object(data, "DataVersion")
        return cls(
            timestamp=_as_int(obj.get("timestamp"), "timestamp"),
            counter=_as_int(obj.get("counter"), "counter"),
        )

    def next_version(self, now_ms: int) -> DataVersion:
        """The version after one more change at wall-clock ``now_ms`` (``nextVersion()``)."""
        return DataVersion(timestamp=now_ms, counter=self.counter + 1)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A broker's config of one topic (``TopicConfig.java``, A10.3).

    Queue counts default to 16 and ``perm`` to 6 (READ|WRITE) as in Java;
    ``topicFilterType`` is ``"SINGLE_TAG"`` or ``"MULTI_TAG"``.
    """

    topicName: str
    readQueueNums: int = 16
    writeQueueNums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        """The fastjson form: every field, Java names."""
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.readQueueNums,
            "topicFilterType": self.topicFilterType,
            "topicName": self.topicName,
            "topicSysFlag": self.topicSysFlag,
            "writeQueueNums": self.writeQueueNums,
        }

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any], name: str | None = None) -> TopicConfig:
        """Parse a TopicConfig object; ``name`` (the map key) fills a missing ``topicName``.

        Raises :class:`BodyError` when there is no topic name at all.
        """
        obj = _object(data, "TopicConfig")
        topic = obj.get("topicName") or name
        if not topic or not isinstance(topic, str):
            raise BodyError("TopicConfig has no topicName")
        return cls(
            topicName=topic,
            readQueueNums=_as_int(obj.get("readQueueNums"), "readQueueNums", 16),
            writeQueueNums=_as_int(obj.get("writeQueueNums"), "writeQueueNums", 16),
            perm=_as_int(obj.get("perm"), "perm", PERM_READ | PERM_WRITE),
            topicFilterType=str(obj.get("topicFilterType") or "SINGLE_TAG"),
            topicSysFlag=_as_int(obj.get("topicSysFlag"), "topicSysFlag"),
            order=_as_bool(obj.get("order", False)),
        )

    def encode_text(self) -> str:
        """Java's ``TopicConfig.encode()``: ``"name read write perm filterType"``.

        This space-separated form (not JSON) is what the compressed
        registration body carries per topic (``RegisterBrokerBody.encode(true)``
        in 4.9.8; the reference's A10.4 calls it JSON, the Java source writes
        this text).
        """
        return (
            f"{self.topicName} {self.readQueueNums} {self.writeQueueNums} {self.perm} {self.topicFilterType}"
        )

    @classmethod
    def decode_text(cls, text: str) -> TopicConfig:
        """Parse :meth:`encode_text` output (5.x appends a 6th field, ignored); JSON also accepted.

        Raises :class:`BodyError` when the text has fewer than 5 fields or
        non-integer counts.
        """
        stripped = text.strip()
        if stripped.startswith("{"):
            return cls.from_json(stripped)
        parts = stripped.split(" ", 5)
        if len(parts) < 5:
            raise BodyError(f"topic config text has {len(parts)} fields, expected 5: {text[:80]!r}")
        name, read, write, perm, filter_type = parts[:5]
        return cls(
            topicName=name,
            readQueueNums=_as_int(read, "readQueueNums"),
            writeQueueNums=_as_int(write, "writeQueueNums"),
            perm=_as_int(perm, "perm"),
            topicFilterType=filter_type,
        )


@dataclass(slots=True)
class TopicConfigSerializeWrapper:
    """A broker's whole topic table plus its version (A10.4).

    ``topicConfigTable`` maps topic name to :class:`TopicConfig`.
    """

    topicConfigTable: dict[str, TopicConfig] = field(default_factory=dict)
    dataVersion: DataVersion = field(default_factory=DataVersion)

    def to_json(self) -> dict[str, Any]:
        """``{"dataVersion": {...}, "topicConfigTable": {name: TopicConfig}}``."""
        return {
            "dataVersion": self.dataVersion.to_json(),
            "topicConfigTable": {name: tc.to_json() for name, tc in self.topicConfigTable.items()},
        }

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any]) -> TopicConfigSerializeWrapper:
        """Parse the wrapper; unknown members (4.9.8 adds some) are ignored."""
        obj = _object(data, "TopicConfigSerializeWrapper")
        table_obj = obj.get("topicConfigTable") or {}
        if not isinstance(table_obj, dict):
            raise BodyError("topicConfigTable is not an object")
        table: dict[str, TopicConfig] = {}
        for name, value in table_obj.items():
            if not isinstance(value, dict):
                raise BodyError(f"topic config of {name!r} is not an object")
            tc = TopicConfig.from_json(value, name)
            table[tc.topicName] = tc
        version_obj = obj.get("dataVersion") or {}
        if not isinstance(version_obj, dict):
            raise BodyError("dataVersion is not an object")
        return cls(topicConfigTable=table, dataVersion=DataVersion.from_json(version_obj))


@dataclass(slots=True)
class RegisterBrokerBody:
    """Body of REGISTER_BROKER (103): topic table + filter servers (A10.4).

    Two encodings: JSON ``{"topicConfigSerializeWrapper": {...},
    "filterServerList": [...]}``, or, with the request's ``compressed=true``,
    a zlib stream of: int32 length + DataVersion JSON; int32 topic count;
    per topic int32 length + :meth:`TopicConfig.encode_text`; int32 length +
    filter-server JSON array (all big-endian, Java ``RegisterBrokerBody``).
    """

    topicConfigSerializeWrapper: TopicConfigSerializeWrapper = field(
        default_factory=TopicConfigSerializeWrapper
    )
    filterServerList: list[str] = field(default_factory=list)

    def encode(self, compressed: bool = False) -> bytes:
        """The body bytes in the chosen form (compressed at zlib level 9, as Java)."""
        if not compressed:
            return dumps(
                {
                    "filterServerList": self.filterServerList,
                    "topicConfigSerializeWrapper": self.topicConfigSerializeWrapper.to_json(),
                }
            )
        wrapper = self.topicConfigSerializeWrapper
        parts: list[bytes] = []
        version = dumps(wrapper.dataVersion.to_json())
        parts += [_INT.pack(len(version)), version, _INT.pack(len(wrapper.topicConfigTable))]
        for tc in wrapper.topicConfigTable.values():
            text = tc.encode_text().encode()
            parts += [_INT.pack(len(text)), text]
        servers = dumps(self.filterServerList)
        parts += [_INT.pack(len(servers)), servers]
        return zlib.compress(b"".join(parts), 9)

    @classmethod
    def decode(cls, body: bytes, compressed: bool = False) -> RegisterBrokerBody:
        """Parse a registration body in either form.

        An empty body gives an empty table with DataVersion(0, 0), as Java.
        A JSON body that is a bare TopicConfigSerializeWrapper (pre-3.0.11
        brokers) is accepted too. Raises :class:`BodyError`.
        """
        if not body:
            return cls()
        if compressed:
            return cls._decode_compressed(body)
        obj = _object(body, "RegisterBrokerBody")
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
            topicConfigSerializeWrapper=TopicConfigSerializeWrapper.from_json(wrapper_obj),
            filterServerList=[str(s) for s in servers],
        )

    @classmethod
    def _decode_compressed(cls, body: bytes) -> RegisterBrokerBody:
        try:
            raw = zlib.decompress(body)
        except zlib.error as exc:
            raise BodyError(f"compressed register body does not inflate: {exc}") from None
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
            table[tc.topicName] = tc
        servers: list[str] = []
        if pos < len(raw):
            try:
                parsed = orjson.loads(chunk())
            except orjson.JSONDecodeError as exc:
                raise BodyError(f"filter server list is not JSON: {exc}") from None
            if isinstance(parsed, list):
                servers = [str(s) for s in parsed]
        return cls(TopicConfigSerializeWrapper(table, version), servers)


# -- routes ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueData:
    """Queues of one topic on one broker group (``QueueData.java``, A10.1).

    Immutable: a permission change replaces the object (:meth:`with_perm`).
    """

    brokerName: str
    readQueueNums: int
    writeQueueNums: int
    perm: int
    topicSysFlag: int = 0

    @classmethod
    def from_topic_config(cls, broker_name: str, tc: TopicConfig) -> QueueData:
        """The queue data a master's topic config announces (``createAndUpdateQueueData``)."""
        return cls(broker_name, tc.readQueueNums, tc.writeQueueNums, tc.perm, tc.topicSysFlag)

    def with_perm(self, perm: int) -> QueueData:
        """A copy with ``perm`` replaced."""
        return replace(self, perm=perm)

    def to_json(self) -> dict[str, Any]:
        """Java field names, alphabetical."""
        return {
            "brokerName": self.brokerName,
            "perm": self.perm,
            "readQueueNums": self.readQueueNums,
            "topicSysFlag": self.topicSysFlag,
            "writeQueueNums": self.writeQueueNums,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> QueueData:
        """Parse one queueDatas entry (``topicSynFlag``, the pre-4.x spelling, accepted)."""
        name = obj.get("brokerName")
        if not isinstance(name, str):
            raise BodyError("QueueData has no brokerName")
        return cls(
            brokerName=name,
            readQueueNums=_as_int(obj.get("readQueueNums"), "readQueueNums"),
            writeQueueNums=_as_int(obj.get("writeQueueNums"), "writeQueueNums"),
            perm=_as_int(obj.get("perm"), "perm"),
            topicSysFlag=_as_int(obj.get("topicSysFlag", obj.get("topicSynFlag")), "topicSysFlag"),
        )


@dataclass(slots=True)
class BrokerData:
    """One broker group (``BrokerData.java``, A10.1).

    ``brokerAddrs`` maps brokerId (0 = master, > 0 = slaves) to ``"ip:port"``.
    """

    cluster: str
    brokerName: str
    brokerAddrs: dict[int, str] = field(default_factory=dict)

    def master_addr(self) -> str | None:
        """The master's address (id 0), or None when the group has no live master."""
        return self.brokerAddrs.get(MASTER_ID)

    def copy(self) -> BrokerData:
        """A copy whose ``brokerAddrs`` can be changed independently."""
        return BrokerData(self.cluster, self.brokerName, dict(self.brokerAddrs))

    def to_json(self) -> dict[str, Any]:
        """Standard JSON: brokerId keys as quoted decimal strings, ascending."""
        return {
            "brokerAddrs": {str(bid): addr for bid, addr in sorted(self.brokerAddrs.items())},
            "brokerName": self.brokerName,
            "cluster": self.cluster,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> BrokerData:
        """Parse one brokerDatas entry; keys of ``brokerAddrs`` become ints."""
        name = obj.get("brokerName")
        if not isinstance(name, str):
            raise BodyError("BrokerData has no brokerName")
        addrs_obj = obj.get("brokerAddrs") or {}
        if not isinstance(addrs_obj, dict):
            raise BodyError("brokerAddrs is not an object")
        addrs = {_as_int(k, "brokerId"): str(v) for k, v in addrs_obj.items()}
        return cls(cluster=str(obj.get("cluster") or ""), brokerName=name, brokerAddrs=addrs)


@dataclass(slots=True)
class TopicRouteData:
    """Route of one topic: body of GET_ROUTEINFO_BY_TOPIC (``TopicRouteData.java``, A10.1).

    ``queueDatas`` has one entry per broker group hosting the topic;
    ``brokerDatas`` the addresses of exactly those groups;
    ``filterServerTable`` maps a broker address to its filter servers;
    ``orderTopicConf`` (e.g. ``"broker-a:4;broker-b:4"``) is present only
    when order messages are enabled on the NameServer.
    """

    queueDatas: list[QueueData] = field(default_factory=list)
    brokerDatas: list[BrokerData] = field(default_factory=list)
    filterServerTable: dict[str, list[str]] = field(default_factory=dict)
    orderTopicConf: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Standard JSON form (quoted brokerId keys); ``orderTopicConf`` omitted when None."""
        obj: dict[str, Any] = {
            "brokerDatas": [bd.to_json() for bd in self.brokerDatas],
            "filterServerTable": self.filterServerTable,
        }
        if self.orderTopicConf is not None:
            obj["orderTopicConf"] = self.orderTopicConf
        obj["queueDatas"] = [qd.to_json() for qd in self.queueDatas]
        return obj

    def encode(self) -> bytes:
        """The response body bytes."""
        return dumps(self.to_json())

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any]) -> TopicRouteData:
        """Parse a route body in either standard or fastjson (bare-key) form."""
        obj = _object(data, "TopicRouteData")
        queue_datas = obj.get("queueDatas") or []
        broker_datas = obj.get("brokerDatas") or []
        if not isinstance(queue_datas, list) or not isinstance(broker_datas, list):
            raise BodyError("queueDatas/brokerDatas are not arrays")
        filters = obj.get("filterServerTable") or {}
        order = obj.get("orderTopicConf")
        return cls(
            queueDatas=[QueueData.from_json(q) for q in queue_datas],
            brokerDatas=[BrokerData.from_json(b) for b in broker_datas],
            filterServerTable={str(k): [str(s) for s in v] for k, v in filters.items()}
            if isinstance(filters, dict)
            else {},
            orderTopicConf=order if isinstance(order, str) else None,
        )


@dataclass(slots=True)
class ClusterInfo:
    """Body of GET_BROKER_CLUSTER_INFO (``ClusterInfo.java``, A10.2).

    ``brokerAddrTable`` maps brokerName to :class:`BrokerData`;
    ``clusterAddrTable`` maps clusterName to its brokerNames.
    """

    brokerAddrTable: dict[str, BrokerData] = field(default_factory=dict)
    clusterAddrTable: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Standard JSON (quoted brokerId keys; Java writes them bare, A10.2 / Q1)."""
        return {
            "brokerAddrTable": {name: bd.to_json() for name, bd in self.brokerAddrTable.items()},
            "clusterAddrTable": {name: sorted(names) for name, names in self.clusterAddrTable.items()},
        }

    def encode(self) -> bytes:
        """The response body bytes."""
        return dumps(self.to_json())

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any]) -> ClusterInfo:
        """Parse either form (bare integer keys accepted)."""
        obj = _object(data, "ClusterInfo")
        brokers = obj.get("brokerAddrTable") or {}
        clusters = obj.get("clusterAddrTable") or {}
        if not isinstance(brokers, dict) or not isinstance(clusters, dict):
            raise BodyError("brokerAddrTable/clusterAddrTable are not objects")
        return cls(
            brokerAddrTable={str(k): BrokerData.from_json(v) for k, v in brokers.items()},
            clusterAddrTable={str(k): [str(n) for n in v] for k, v in clusters.items()},
        )


def topic_list_body(topics: Iterable[str], broker_addr: str | None = None) -> bytes:
    """TopicList JSON (A10.6): ``{"topicList": [...]}`` plus optional ``brokerAddr``."""
    obj: dict[str, Any] = {"topicList": list(topics)}
    if broker_addr is not None:
        obj["brokerAddr"] = broker_addr
    return dumps(obj)


def parse_topic_list(body: bytes) -> list[str]:
    """The ``topicList`` of a TopicList body. Raises :class:`BodyError`."""
    obj = _object(body, "TopicList")
    topics = obj.get("topicList") or []
    if not isinstance(topics, list):
        raise BodyError("topicList is not an array")
    return [str(t) for t in topics]


def kv_table_body(table: Mapping[str, str]) -> bytes:
    """KVTable JSON (A10.6): ``{"table": {"k": "v"}}``."""
    return dumps({"table": dict(table)})


def parse_kv_table(body: bytes) -> dict[str, str]:
    """The ``table`` of a KVTable body (empty for an empty body). Raises :class:`BodyError`."""
    if not body:
        return {}
    obj = _object(body, "KVTable")
    table = obj.get("table") or {}
    if not isinstance(table, dict):
        raise BodyError("table is not an object")
    return {str(k): str(v) for k, v in table.items()}
