"""The fuzz targets: every decoder and parser of untrusted bytes, with the errors each may raise.

A target is a function of one generated input and the exception types that are its defined
answers to bad input (``FrameError``, ``BodyError``, ``MessageFormatError``...). Anything else
escaping it is a crash, and so is a parser that accepts input and returns a value outside its
documented shape (``check``). Each target's docstring-like ``what`` names the RocketMQ format.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import strategies as st

from rocket.auth.model import Acl, User
from rocket.broker.config import parse_properties as broker_properties
from rocket.broker.headers import ConsumerSendMsgBackRequestHeader, PullMessageRequestHeader, SendMessageRequestHeader
from rocket.broker.heartbeat import HeartbeatData, HeartbeatParseError
from rocket.broker.transaction import parse_op_body
from rocket.controller.config import parse_properties as controller_properties
from rocket.message import (
    MessageFormatError,
    decode_batch,
    decode_offset_msg_id,
    decode_properties,
    decode_records,
    decompress_body,
)
from rocket.nameserver.config import parse_java_properties
from rocket.protocol import (
    BodyError,
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from rocket.protocol.body import json_object, loads_lenient, parse_kv_table, parse_topic_list
from rocket.protocol.controller import parse_sync_state_set
from rocket.protocol.route import MessageQueue
from rocket.remoting.command import FrameDecoder, FrameError, HeaderFieldError, RemotingCommand, decode
from rocket.store.ha.epoch import EpochEntry
from rocket.store.ha.protocol import HAProtocolError, decode_report, decode_transfer_header
from rocket.store.timer.checkpoint import TimerCheckpoint
from tests.fuzz import strategies as S

#: Every error type of the product that means "this input is bad" (all are ValueError subclasses).
DEFINED = (BodyError, FrameError, HeaderFieldError, MessageFormatError, HeartbeatParseError, HAProtocolError)


@dataclass(frozen=True)
class Target:
    """One fuzz target: ``run(input)`` may raise only ``allowed``; ``weight`` is its share of a run.

    ``kind`` says how an input is written as bytes for libFuzzer (:func:`to_bytes`/:func:`from_bytes`):
    ``bytes``, ``text`` (UTF-8), ``ext`` (a JSON object of ext fields), ``stream`` (TCP reads),
    ``flagged`` (a 2-byte sysFlag, then the body).
    """

    name: str
    what: str
    inputs: st.SearchStrategy[Any]
    run: Callable[[Any], object]
    allowed: tuple[type[BaseException], ...] = DEFINED
    weight: int = 1
    kind: str = "bytes"


# -- frames -------------------------------------------------------------------------------------


def _feed_stream(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(max_frame_size=1 << 20)
    for chunk in chunks:
        for cmd in decoder.feed(chunk):
            _check_command(cmd)


def _check_command(cmd: RemotingCommand) -> None:
    """A decoded command has the shape the rest of the server relies on."""
    assert type(cmd.code) is int and -(2**31) <= cmd.code < 2**31, cmd.code
    assert type(cmd.opaque) is int and -(2**31) <= cmd.opaque < 2**31, cmd.opaque
    assert type(cmd.flag) is int and type(cmd.version) is int
    assert isinstance(cmd.language, str)
    assert cmd.remark is None or isinstance(cmd.remark, str)
    assert all(type(k) is str and type(v) is str for k, v in cmd.ext_fields.items()), cmd.ext_fields
    assert isinstance(cmd.body, bytes)


def _decode_one(data: bytes) -> None:
    _check_command(decode(data))


#: Streams of frames cut at random places (the decoder sees them as TCP reads).
frame_streams = st.lists(S.frames(), min_size=1, max_size=4).flatmap(
    lambda fs: st.lists(st.integers(0, max(1, sum(map(len, fs)))), max_size=4).map(
        lambda cuts: _cut(b"".join(fs), cuts)))


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    return [data[a:b] for a, b in itertools.pairwise(points)] or [data]


# -- headers ------------------------------------------------------------------------------------

SEND_EXT = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1700000000000", "h": "0",
            "i": "TAGS\x01A\x02", "j": "0", "k": "false", "l": "16", "m": "false"}
PULL_EXT = {"consumerGroup": "G", "topic": "T", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
            "sysFlag": "3", "commitOffset": "0", "suspendTimeoutMillis": "15000", "subscription": "*",
            "subVersion": "0", "expressionType": "TAG"}
BACK_EXT = {"offset": "100", "group": "G", "delayLevel": "3", "originMsgId": "0A", "originTopic": "T",
            "unitMode": "false", "maxReconsumeTimes": "16"}


def _ext_values(template: dict[str, str]) -> st.SearchStrategy[dict[str, str]]:
    def text(v: Any) -> str:
        return v if isinstance(v, str) else str(v)
    return S.mutated(template).map(lambda o: {str(k): text(v) for k, v in o.items()} if isinstance(o, dict) else {})


def _header(parse: Callable[[RemotingCommand], object], code: int) -> Callable[[dict[str, str]], object]:
    def run(ext: dict[str, str]) -> object:
        return parse(RemotingCommand(code=code, ext_fields=ext))
    return run


def _typed_access(ext: dict[str, str]) -> None:
    cmd = RemotingCommand(code=0, ext_fields=ext)
    for name in ext:
        for bits in (32, 64):
            try:
                value = cmd.require_int(name, bits=bits)
            except HeaderFieldError:
                continue
            assert -(2 ** (bits - 1)) <= value < 2 ** (bits - 1)
        try:
            cmd.get_bool(name, False)
        except HeaderFieldError:
            pass


# -- message encodings ----------------------------------------------------------------------------

def _batch_item(flag: int, body: bytes, props: bytes) -> bytes:
    return struct.pack(">iiiii", 20 + len(body) + 2 + len(props), 0, 0, flag, len(body)) + body + \
        struct.pack(">h", len(props)) + props


batch_bodies = st.one_of(
    st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=8),
                       st.text(max_size=12).map(lambda s: s.encode())), min_size=1, max_size=3).map(
        lambda items: b"".join(_batch_item(*i) for i in items)).flatmap(
        lambda b: st.one_of(st.just(b), S.byte_mutation(b))),
    st.binary(max_size=64),
)


def _records(data: bytes) -> None:
    for msg in decode_records(data):
        assert isinstance(msg.properties, dict)


def _properties(text: str) -> None:
    props = decode_properties(text)
    assert all(isinstance(k, str) and k and isinstance(v, str) for k, v in props.items())


property_strings = st.one_of(
    st.text(max_size=40),
    st.lists(st.tuples(st.text(max_size=6), st.text(max_size=6)), max_size=4).map(
        lambda kv: "\x02".join(f"{k}\x01{v}" for k, v in kv)),
    st.text(alphabet="\x01\x02ab=", max_size=20),
)

# -- JSON bodies (templates are what real clients and brokers send) -------------------------------

TOPIC_CONFIG = {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
DATA_VERSION = {"timestamp": 1700000000000, "counter": {"value": 3}, "stateVersion": 0}
WRAPPER = {"topicConfigTable": {"T": TOPIC_CONFIG, "U": {**TOPIC_CONFIG, "topicName": "U"}},
           "dataVersion": DATA_VERSION}
REGISTER = {"topicConfigSerializeWrapper": WRAPPER, "filterServerList": ["10.0.0.1:1"]}
GROUP = {"groupName": "G", "consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
         "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
         "notifyConsumerIdsChangedEnable": True}
BROKER_DATA = {"cluster": "C", "brokerName": "b", "brokerAddrs": {"0": "127.0.0.1:10911", "1": "127.0.0.1:10921"}}
QUEUE_DATA = {"brokerName": "b", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}
ROUTE = {"queueDatas": [QUEUE_DATA], "brokerDatas": [BROKER_DATA], "filterServerTable": {"a": ["b"]},
         "orderTopicConf": "b:4"}
CLUSTER = {"brokerAddrTable": {"b": BROKER_DATA}, "clusterAddrTable": {"C": ["b"]}}
HEARTBEAT = {"clientID": "127.0.0.1@1", "producerDataSet": [{"groupName": "PG"}],
             "consumerDataSet": [{"groupName": "G", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                                  "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
                                  "subscriptionDataSet": [{"topic": "T", "subString": "A || B", "subVersion": 1,
                                                           "expressionType": "TAG", "tagsSet": ["A", "B"],
                                                           "codeSet": [65, 66], "classFilterMode": False}]}]}
SYNC_STATE = {"syncStateSet": [1, 2], "syncStateSetEpoch": 3}
MQ = {"topic": "T", "brokerName": "b", "queueId": 1}
USER = {"username": "u", "password": "p", "userType": "Normal", "userStatus": "enable"}
ACL = {"subject": "User:u", "policies": [{"policyType": "Custom", "entries": [
    {"resource": "Topic:T", "actions": ["Pub", "Sub"], "sourceIps": ["10.0.0.0/8"], "decision": "Allow"}]}]}


def _compressed_register_raw(version: bytes, topics: list[str], servers: bytes) -> bytes:
    parts = [struct.pack(">i", len(version)), version, struct.pack(">i", len(topics))]
    for t in topics:
        raw = t.encode()
        parts += [struct.pack(">i", len(raw)), raw]
    parts += [struct.pack(">i", len(servers)), servers]
    return b"".join(parts)


compressed_register = st.one_of(
    S.zlib_of(st.tuples(S.json_body([DATA_VERSION]), st.lists(st.one_of(
        st.just("T 4 4 6 SINGLE_TAG"), st.text(max_size=20), st.just('{"topicName":"T"}')), max_size=3),
        S.json_body([["a:1"]])).map(lambda t: _compressed_register_raw(*t))),
    S.zlib_of(st.binary(max_size=40)).flatmap(S.byte_mutation),
    st.binary(max_size=40),
    S.rarely(S.ZLIB_BOMB),
)


def _returns(kind: type) -> Callable[[Callable[[Any], object]], Callable[[Any], object]]:
    def wrap(fn: Callable[[Any], object]) -> Callable[[Any], object]:
        def run(data: Any) -> object:
            result = fn(data)
            assert isinstance(result, kind), type(result)
            return result
        return run
    return wrap


def _mq(body: bytes) -> object:
    return MessageQueue.from_json(json_object(body, "MessageQueue"))


def _epochs(body: bytes) -> object:
    try:
        obj = loads_lenient(body)
    except ValueError:
        return None
    return EpochEntry.from_json(obj)


def _ha_header(data: bytes) -> object:
    """The HA reader hands exactly 12 bytes to the transfer-header decoder, 8 to the report decoder."""
    if len(data) >= 12:
        return decode_transfer_header(data[:12])
    return decode_report(data[:8]) if len(data) >= 8 else None


def _parsed(data: bytes) -> Any:
    """The JSON value of ``data`` (as the AUTH_* processors hand it to the model), or ``data`` itself."""
    try:
        return loads_lenient(data)
    except ValueError:
        return data


TARGETS: list[Target] = [
    Target("frame-stream", "NettyDecoder: a TCP byte stream of frames, cut anywhere", frame_streams, _feed_stream,
           weight=4, kind="stream"),
    Target("frame", "RemotingCommand.decode: one whole frame (JSON and ROCKETMQ headers)", S.frames(), _decode_one,
           weight=4),
    Target("header-typed", "ext fields read as Java int/long/boolean", _ext_values(PULL_EXT), _typed_access,
           kind="ext"),
    Target("header-send", "SendMessageRequestHeader(V2)", _ext_values(SEND_EXT),
           _header(SendMessageRequestHeader.parse, 310), weight=2, kind="ext"),
    Target("header-send-v1", "SendMessageRequestHeader (long names)",
           _ext_values({"producerGroup": "PG", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                        "queueId": "0", "sysFlag": "0", "bornTimestamp": "1", "flag": "0", "properties": ""}),
           _header(SendMessageRequestHeader.parse, 10), kind="ext"),
    Target("header-pull", "PullMessageRequestHeader", _ext_values(PULL_EXT),
           _header(PullMessageRequestHeader.parse, 11), weight=2, kind="ext"),
    Target("header-send-back", "ConsumerSendMsgBackRequestHeader", _ext_values(BACK_EXT),
           _header(ConsumerSendMsgBackRequestHeader.parse, 36), kind="ext"),
    Target("batch", "MessageDecoder.decodeMessages: SEND_BATCH_MESSAGE body", batch_bodies, decode_batch, weight=2),
    Target("records", "MessageDecoder.decode: stored records of a pull body", st.binary(max_size=300).flatmap(
        lambda b: st.one_of(st.just(b), st.just(b"\x00\x00\x00\x64" + b[4:]))), _records),
    Target("properties", "MessageDecoder.string2messageProperties", property_strings, _properties, weight=2,
           kind="text"),
    Target("decompress", "a message body's zlib (sysFlag COMPRESSED)",
           st.tuples(st.one_of(S.zlib_of(st.binary(max_size=30)), st.binary(max_size=30)),
                     st.integers(0, 0x7FF)), lambda t: decompress_body(*t), kind="flagged"),
    Target("offset-msg-id", "MessageDecoder.decodeMessageId", st.one_of(st.text(max_size=40), st.text(
        alphabet="0123456789ABCDEFabcdef", max_size=40)), decode_offset_msg_id, allowed=(*DEFINED, ValueError),
           kind="text"),
    Target("register-body", "RegisterBrokerBody (JSON)", S.json_body([REGISTER, WRAPPER]),
           _returns(RegisterBrokerBody)(RegisterBrokerBody.decode), weight=2),
    Target("register-body-compressed", "RegisterBrokerBody.decode(compressed=true)", compressed_register,
           _returns(RegisterBrokerBody)(lambda b: RegisterBrokerBody.decode(b, compressed=True)), weight=2),
    Target("topic-config", "TopicConfig", S.json_body([TOPIC_CONFIG]), _returns(TopicConfig)(TopicConfig.from_json)),
    Target("topic-config-text", "TopicConfig.decode (space separated)", st.one_of(
        st.text(max_size=40),
        st.lists(st.one_of(st.text(max_size=6), st.integers().map(str)), max_size=7).map(" ".join)),
        _returns(TopicConfig)(TopicConfig.decode_text), kind="text"),
    Target("topic-config-wrapper", "TopicConfigSerializeWrapper (GET_ALL_TOPIC_CONFIG)", S.json_body([WRAPPER]),
           _returns(TopicConfigSerializeWrapper)(TopicConfigSerializeWrapper.from_json)),
    Target("data-version", "DataVersion", S.json_body([DATA_VERSION]), _returns(DataVersion)(DataVersion.from_json)),
    Target("subscription-group", "SubscriptionGroupConfig", S.json_body([GROUP]),
           _returns(SubscriptionGroupConfig)(SubscriptionGroupConfig.from_json)),
    Target("topic-route", "TopicRouteData (GET_ROUTEINFO_BY_TOPIC answer)", S.json_body([ROUTE]),
           _returns(TopicRouteData)(TopicRouteData.from_json)),
    Target("cluster-info", "ClusterInfo (GET_BROKER_CLUSTER_INFO answer)", S.json_body([CLUSTER]),
           _returns(ClusterInfo)(ClusterInfo.from_json)),
    Target("topic-list", "TopicList", S.json_body([{"topicList": ["a", "b"], "brokerAddr": "x"}]), parse_topic_list),
    Target("kv-table", "KVTable", S.json_body([{"table": {"a": "b"}}]), parse_kv_table),
    Target("sync-state-set", "SyncStateSet (controller bodies)", S.json_body([SYNC_STATE]), parse_sync_state_set),
    Target("message-queue", "MessageQueue (lock/unlock, offset bodies)", S.json_body([MQ]), _mq),
    Target("heartbeat", "HeartbeatData", S.json_body([HEARTBEAT]), _returns(HeartbeatData)(HeartbeatData.decode),
           weight=2),
    Target("user", "UserInfo (AUTH_CREATE_USER / AUTH_UPDATE_USER)", S.json_body([USER]),
           _returns(User)(lambda b: User.from_json(_parsed(b))),
        allowed=(*DEFINED, ValueError)),
    Target("acl", "AclInfo (AUTH_CREATE_ACL / AUTH_UPDATE_ACL)", S.json_body([ACL]),
           _returns(Acl)(lambda b: Acl.from_json(_parsed(b))), allowed=(*DEFINED, ValueError)),
    Target("op-body", "transaction op message body", st.one_of(st.text(max_size=20).map(str.encode), st.binary(
        max_size=20)), parse_op_body),
    Target("epoch-entry", "HA epoch entry", S.json_body([[1, 0], {"epoch": 1, "startOffset": 0}]), _epochs,
           allowed=(*DEFINED, ValueError)),
    Target("ha-report", "HA slave report / transfer header", st.binary(min_size=8, max_size=12),
           _ha_header),
    Target("timer-checkpoint", "TimerCheckpoint", st.binary(max_size=64), TimerCheckpoint.decode,
           allowed=(*DEFINED, ValueError)),
    Target("broker-properties", "UPDATE_BROKER_CONFIG body (Java properties)", st.text(max_size=60),
           broker_properties, kind="text"),
    Target("controller-properties", "UPDATE_CONTROLLER_CONFIG body", st.text(max_size=60), controller_properties,
           kind="text"),
    Target("namesrv-properties", "UPDATE_NAMESRV_CONFIG body", st.text(max_size=60), parse_java_properties,
           kind="text"),
]


def to_bytes(kind: str, value: Any) -> bytes:
    """An input of a target of ``kind`` written as bytes (the inverse of :func:`from_bytes`)."""
    if kind == "text":
        return str(value).encode("utf-8", "surrogatepass")
    if kind == "ext":
        return orjson.dumps(value)
    if kind == "stream":
        return b"".join(value)
    if kind == "flagged":
        body, flag = value
        return struct.pack(">H", flag & 0xFFFF) + body
    return bytes(value)


def from_bytes(kind: str, data: bytes) -> Any:
    """The input of a target of ``kind`` that ``data`` stands for (any bytes give some input)."""
    if kind == "text":
        return data.decode("utf-8", "replace")
    if kind == "ext":
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return {}
        return {str(k): v if isinstance(v, str) else orjson.dumps(v).decode() for k, v in obj.items()} \
            if isinstance(obj, dict) else {}
    if kind == "stream":  # two reads, cut at a place the first byte chooses
        cut = data[0] % (len(data) + 1) if data else 0
        return [data[:cut], data[cut:]]
    if kind == "flagged":
        flag = struct.unpack(">H", data[:2])[0] if len(data) >= 2 else 0
        return data[2:], flag & 0x7FF
    return data


def by_name(name: str) -> Target:
    """The target called ``name``. Raises ``KeyError``."""
    for target in TARGETS:
        if target.name == name:
            return target
    raise KeyError(name)
