"""Property-based: random and out-of-range header values for every request the broker and the
NameServer parse.

Real processes on loopback (a NameServer and a broker, ``rocket nameserver`` / ``rocket broker``);
one raw socket per server with its own frame encoder (independent of ``rocket.remoting``), kept
open across every example. For each request code, hypothesis builds headers whose fields are
omitted, valid, at a Java type's edge, past it (2^31, 2^40, 2^63, -2^63-1, 2^70), or not numbers
at all, and asserts:

* an answer arrives, with a code RocketMQ defines (``ResponseCode``, INVALID_PARAMETER 29
  included), never a remark that is an escaped exception (``TypeError: ...``);
* the same connection then answers an ordinary request (it is still usable);
* nothing out of range was stored: every consumer offset (GET_ALL_CONSUMER_OFFSET) has a queueId
  below its topic's readQueueNums and an offset within 0..2^63-1, every topic config
  (GET_ALL_TOPIC_CONFIG) and subscription group (GET_ALL_SUBSCRIPTIONGROUP_CONFIG) is within
  RocketMQ's ranges, every broker the NameServer lists has an id >= 0 and a ``host:port``
  address, and every route's queue data is within range;
* neither server logged a traceback (an exception that escaped a handler).

Issue 19's case is in it: UPDATE_CONSUMER_OFFSET with queueId 2^40 used to be stored.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocket.protocol.codes import ResponseCode
from tests.integration.broker_harness import BrokerProc, NameServerProc, broker_process, nameserver_process

pytestmark = pytest.mark.timeout(600)

TOPIC = "FuzzT"
QUEUES = 4
GROUP = "FuzzG"
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
KNOWN_CODES = {int(c) for c in ResponseCode} | {29}
#: The remark of a handler exception that escaped (``rocket.remoting.connection._error_response``).
ESCAPED = re.compile(r"^[A-Z][A-Za-z]*(Error|Exception|Interrupt)\b")

# -- values ------------------------------------------------------------------------------------

EDGES = [0, 1, -1, INT_MAX, INT_MIN, INT_MAX + 1, INT_MIN - 1, 2**40, LONG_MAX, LONG_MIN, LONG_MAX + 1,
         LONG_MIN - 1, 2**70, -(2**70)]
NOT_NUMBERS = ["", "abc", " 1", "1.5", "0x10", "1_000", "+-1", "9" * 30, "\u0661\u0662"]
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
HOSTILE_NUMBER = st.one_of(st.sampled_from(EDGES).map(str), st.integers(-(2**72), 2**72).map(str),
                           st.sampled_from(NOT_NUMBERS))


@dataclass(frozen=True)
class F:
    """A header field: the values a client would send, and hostile ones."""

    valid: st.SearchStrategy[str]
    hostile: st.SearchStrategy[str]


def number(low: int, high: int) -> F:
    return F(st.integers(low, high).map(str), HOSTILE_NUMBER)


def one_of_values(*values: str) -> F:
    return F(st.sampled_from(values), text)


INT = number(-2, 70)
LONG = number(-2, 10**6)
BOOL = F(st.sampled_from(["true", "false"]), st.sampled_from(["TRUE", "1", "0", "yes", "", "2"]))
TEXT = one_of_values("a", "b")
TOPIC_F = one_of_values(TOPIC, "TBW102", "%RETRY%" + GROUP)
GROUP_F = one_of_values(GROUP)
OTHER_TOPIC = F(st.sampled_from(["FuzzNew", "FuzzNew2"]), text.filter(lambda t: t != TOPIC))
OTHER_GROUP = F(st.just("FuzzG2"), text.filter(lambda g: g != GROUP))


@st.composite
def headers(draw: st.DrawFn, fields: dict[str, F]) -> dict[str, str]:
    """Every field with a client's value, then up to 3 of them left out or made hostile."""
    ext = {name: draw(f.valid) for name, f in fields.items()}
    if fields:
        for name in draw(st.lists(st.sampled_from(sorted(fields)), max_size=3, unique=True)):
            value = draw(st.one_of(st.none(), fields[name].hostile))
            if value is None:
                del ext[name]
            else:
                ext[name] = value
    return ext


def json_body(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[bytes]:
    """A JSON object body with each of ``fields`` present or not, numbers as JSON numbers."""
    def encode(values: dict[str, Any]) -> bytes:
        return json.dumps({k: v for k, v in values.items() if v is not None}).encode()
    return st.fixed_dictionaries({k: st.one_of(st.none(), s) for k, s in fields.items()}).map(encode)


JSON_INT = st.one_of(st.integers(-2, 70), st.sampled_from(EDGES), st.integers(-(2**70), 2**70), st.just("x"))


@dataclass
class Spec:
    """One request code: its header fields and body."""

    name: str
    code: int
    fields: dict[str, F]
    body: st.SearchStrategy[bytes] = field(default_factory=lambda: st.just(b""))


def _send_fields(short: bool) -> dict[str, F]:
    long_names = {
        "producerGroup": TEXT, "topic": TOPIC_F, "defaultTopic": one_of_values("TBW102"),
        "defaultTopicQueueNums": number(0, 16), "queueId": number(-1, 5), "sysFlag": number(0, 3),
        "bornTimestamp": LONG, "flag": INT, "properties": one_of_values("TAGS\x01A\x02", ""),
        "reconsumeTimes": number(0, 20), "unitMode": BOOL, "maxReconsumeTimes": number(0, 20), "batch": BOOL,
    }
    if not short:
        return long_names
    return {letter: f for letter, f in zip("abcdefghijklm", long_names.values(), strict=True)}


PULL_FIELDS = {
    "consumerGroup": GROUP_F, "topic": TOPIC_F, "queueId": number(-1, 5), "queueOffset": number(-2, 5),
    "maxMsgNums": number(0, 40), "sysFlag": number(0, 31), "commitOffset": number(-1, 5),
    "suspendTimeoutMillis": number(0, 50), "subscription": one_of_values("*", "A||B", "(("),
    "subVersion": LONG, "expressionType": one_of_values("TAG", "SQL92"),
}
QUEUE_FIELDS = {"topic": TOPIC_F, "queueId": number(-1, 5)}
MQ_JSON = st.fixed_dictionaries({"topic": st.sampled_from([TOPIC, "x"]), "brokerName": text, "queueId": JSON_INT})
LOCK_BODY = st.fixed_dictionaries({"consumerGroup": st.sampled_from([GROUP, ""]), "clientId": text,
                                   "mqSet": st.lists(MQ_JSON, max_size=3)}).map(lambda o: json.dumps(o).encode())
TOPIC_JSON = st.fixed_dictionaries({"topicName": st.just("FuzzRegT"), "readQueueNums": JSON_INT,
                                    "writeQueueNums": JSON_INT, "perm": JSON_INT, "topicSysFlag": JSON_INT})
REGISTER_BODY = st.lists(TOPIC_JSON, max_size=2).map(lambda tcs: json.dumps({
    "topicConfigSerializeWrapper": {"topicConfigTable": {t["topicName"]: t for t in tcs},
                                    "dataVersion": {"timestamp": 1, "counter": 1}},
    "filterServerList": []}).encode())
BROKER_IDENTITY = {
    "brokerName": one_of_values("fuzz-x", "fuzz-y"), "clusterName": one_of_values("FuzzCluster"),
    "brokerAddr": F(st.sampled_from(["127.0.0.1:1", "127.0.0.1:2"]),
                    st.one_of(st.sampled_from(["127.0.0.1:70000", "nohost", ":1", "[::1]:9"]), text)),
    "haServerAddr": F(st.sampled_from(["127.0.0.1:3", ""]), st.sampled_from(["bad", ":", "h:-1"])),
    "brokerId": number(0, 3),
}

BROKER_SPECS = [
    Spec("SEND_MESSAGE", 10, _send_fields(False), st.sampled_from([b"x", b""])),
    Spec("SEND_MESSAGE_V2", 310, _send_fields(True), st.just(b"x")),
    Spec("SEND_BATCH_MESSAGE", 320, _send_fields(True), st.sampled_from([b"x" * 20, b""])),
    Spec("PULL_MESSAGE", 11, PULL_FIELDS),
    Spec("LITE_PULL_MESSAGE", 361, PULL_FIELDS),
    Spec("QUERY_MESSAGE", 12, {"topic": TOPIC_F, "key": TEXT, "maxNum": number(0, 70), "beginTimestamp": LONG,
                               "endTimestamp": LONG, "_UNIQUE_KEY_QUERY": BOOL}),
    Spec("QUERY_CONSUMER_OFFSET", 14, {"consumerGroup": GROUP_F, **QUEUE_FIELDS}),
    Spec("UPDATE_CONSUMER_OFFSET", 15, {"consumerGroup": GROUP_F, **QUEUE_FIELDS, "commitOffset": number(-1, 9)}),
    Spec("UPDATE_AND_CREATE_TOPIC", 17, {
        "topic": OTHER_TOPIC, "defaultTopic": one_of_values("TBW102"), "readQueueNums": number(0, 9),
        "writeQueueNums": number(0, 9), "perm": number(0, 16), "topicFilterType": one_of_values("SINGLE_TAG"),
        "topicSysFlag": number(0, 4), "order": BOOL}),
    Spec("SEARCH_OFFSET_BY_TIMESTAMP", 29, {**QUEUE_FIELDS, "timestamp": LONG}),
    Spec("GET_MAX_OFFSET", 30, QUEUE_FIELDS),
    Spec("GET_MIN_OFFSET", 31, QUEUE_FIELDS),
    Spec("GET_EARLIEST_MSG_STORETIME", 32, QUEUE_FIELDS),
    Spec("VIEW_MESSAGE_BY_ID", 33, {"offset": number(-1, 2000)}),
    Spec("HEART_BEAT", 34, {}, json_body({"clientID": text, "consumerDataSet": st.just([]),
                                           "producerDataSet": st.just([])})),
    Spec("UNREGISTER_CLIENT", 35, {"clientID": TEXT, "producerGroup": TEXT, "consumerGroup": OTHER_GROUP}),
    Spec("CONSUMER_SEND_MSG_BACK", 36, {"offset": number(-1, 2000), "group": GROUP_F, "delayLevel": number(-1, 20),
                                        "originMsgId": TEXT, "originTopic": TOPIC_F, "unitMode": BOOL,
                                        "maxReconsumeTimes": number(-1, 20)}),
    Spec("GET_CONSUMER_LIST_BY_GROUP", 38, {"consumerGroup": GROUP_F}),
    Spec("LOCK_BATCH_MQ", 41, {}, LOCK_BODY),
    Spec("UNLOCK_BATCH_MQ", 42, {}, LOCK_BODY),
    Spec("CHECK_CLIENT_CONFIG", 46, {"clientId": TEXT, "group": GROUP_F}),
    Spec("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP", 200, {}, json_body({
        "groupName": st.one_of(st.just("FuzzG2"), text.filter(lambda g: g != GROUP)),
        "retryQueueNums": JSON_INT, "retryMaxTimes": JSON_INT, "brokerId": JSON_INT,
        "whichBrokerWhenConsumeSlowly": JSON_INT, "consumeEnable": st.sampled_from([True, False, "x"])})),
    Spec("GET_TOPIC_STATS_INFO", 202, {"topic": TOPIC_F}),
    Spec("GET_CONSUMER_CONNECTION_LIST", 203, {"consumerGroup": GROUP_F}),
    Spec("DELETE_SUBSCRIPTIONGROUP", 207, {"groupName": OTHER_GROUP, "cleanOffset": BOOL}),
    Spec("GET_CONSUME_STATS", 208, {"consumerGroup": GROUP_F, "topic": TOPIC_F}),
    Spec("DELETE_TOPIC_IN_BROKER", 215, {"topic": OTHER_TOPIC}),
]
NAMESRV_SPECS = [
    Spec("PUT_KV_CONFIG", 100, {"namespace": TEXT, "key": TEXT, "value": TEXT}),
    Spec("GET_KV_CONFIG", 101, {"namespace": TEXT, "key": TEXT}),
    Spec("DELETE_KV_CONFIG", 102, {"namespace": TEXT, "key": TEXT}),
    Spec("REGISTER_BROKER", 103, {**BROKER_IDENTITY, "compressed": one_of_values("false"),
                                  "bodyCrc32": number(0, 0), "epoch": number(0, 5)}, REGISTER_BODY),
    Spec("UNREGISTER_BROKER", 104, BROKER_IDENTITY),
    Spec("GET_ROUTEINFO_BY_TOPIC", 105, {"topic": TOPIC_F}),
    Spec("WIPE_WRITE_PERM_OF_BROKER", 205, {"brokerName": one_of_values("fuzz-x", "fuzz-y")}),
    Spec("ADD_WRITE_PERM_OF_BROKER", 327, {"brokerName": one_of_values("fuzz-x", "fuzz-y")}),
    Spec("DELETE_TOPIC_IN_NAMESRV", 216, {"topic": OTHER_TOPIC}),
    Spec("GET_TOPICS_BY_CLUSTER", 224, {"cluster": TEXT}),
    Spec("QUERY_DATA_VERSION", 322, dict(BROKER_IDENTITY), json_body({"timestamp": JSON_INT, "counter": JSON_INT})),
]

# -- the raw client --------------------------------------------------------------------------------


class RawConn:
    """One blocking connection with its own codec (JSON headers)."""

    def __init__(self, addr: str) -> None:
        host, port = addr.rsplit(":", 1)
        self.addr = addr
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self.opaque = 0

    def call(self, code: int, ext: dict[str, str], body: bytes = b"") -> dict[str, Any]:
        """Send one request; its response header (``body`` added under ``_body``)."""
        self.opaque += 1
        header = json.dumps({"code": code, "language": "JAVA", "version": 409, "opaque": self.opaque, "flag": 0,
                             "extFields": ext}).encode()
        self.sock.sendall(struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body)
        while True:
            (length,) = struct.unpack(">i", self._read(4))
            payload = self._read(length)
            hlen = struct.unpack_from(">I", payload)[0] & 0xFFFFFF
            reply: dict[str, Any] = json.loads(payload[4 : 4 + hlen])
            if int(reply.get("flag", 0)) & 1 and reply.get("opaque") == self.opaque:
                reply["_body"] = payload[4 + hlen :]
                return reply

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"{self.addr} closed the connection")
            out += chunk
        return bytes(out)

    def json(self, code: int, ext: dict[str, str] | None = None) -> Any:
        reply = self.call(code, ext or {})
        assert reply["code"] == 0, reply
        raw = reply["_body"].decode()
        try:
            return json.loads(raw)
        except ValueError:  # fastjson's bare integer keys
            return json.loads(re.sub(r'([{,]\s*)(-?\d+)(\s*:)', r'\1"\2"\3', raw))


@dataclass
class Servers:
    ns: NameServerProc
    broker: BrokerProc
    ns_conn: RawConn
    broker_conn: RawConn


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    tmp = tmp_path_factory.mktemp("validation")
    settings_ = {"longPollingEnable": "false", "shortPollingTimeMills": "10"}
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(nameserver_process(tmp))
        broker = stack.enter_context(broker_process(tmp, "fuzz-b", ns.addr, settings=settings_))
        bc = RawConn(broker.addr)
        created = bc.call(17, {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES),
                               "writeQueueNums": str(QUEUES), "perm": "6", "topicFilterType": "SINGLE_TAG",
                               "topicSysFlag": "0", "order": "false"})
        assert created["code"] == 0, created
        for q in range(QUEUES):
            sent = bc.call(10, {"producerGroup": "P", "topic": TOPIC, "defaultTopic": "TBW102",
                                "defaultTopicQueueNums": "4", "queueId": str(q), "sysFlag": "0",
                                "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
                                "properties": "TAGS\x01A\x02"}, b"seed")
            assert sent["code"] == 0, sent
        yield Servers(ns, broker, RawConn(ns.addr), bc)
        _assert_no_traceback(ns.log, broker.log)


def _assert_no_traceback(*logs: Path) -> None:
    for log in logs:
        content = log.read_text(errors="replace")
        at = content.find("Traceback")
        assert at < 0, f"{log} has a traceback:\n{content[max(0, at - 2000):at + 4000]}"


def _check_reply(spec: Spec, ext: dict[str, str], reply: dict[str, Any]) -> None:
    code = int(reply["code"])
    remark = reply.get("remark") or ""
    assert code in KNOWN_CODES, f"{spec.name} {ext}: unknown code {code} {remark!r}"
    assert not ESCAPED.match(remark), f"{spec.name} {ext}: an exception escaped: {remark!r}"


def _check_broker_state(conn: RawConn) -> None:
    topics = conn.json(21)["topicConfigTable"]
    for name, tc in topics.items():
        assert 0 <= int(tc["readQueueNums"]) <= 65535 and 0 <= int(tc["writeQueueNums"]) <= 65535, (name, tc)
        assert 0 <= int(tc["perm"]) <= 15 and 0 <= int(tc.get("topicSysFlag", 0)) <= 3, (name, tc)
    assert int(topics[TOPIC]["readQueueNums"]) == QUEUES
    offsets = conn.json(43)["offsetTable"]
    for key, table in offsets.items():
        topic = key.split("@", 1)[0]
        for qid, offset in table.items():
            assert 0 <= int(qid) <= 65534 and 0 <= int(offset) <= LONG_MAX, (key, qid, offset)
            if topic == TOPIC:
                assert int(qid) < QUEUES, (key, qid, offset)
    groups = conn.json(201)["subscriptionGroupTable"]
    for name, g in groups.items():
        assert 0 <= int(g.get("retryQueueNums", 1)) <= 65535, (name, g)
        assert int(g.get("brokerId", 0)) >= 0 and int(g.get("whichBrokerWhenConsumeSlowly", 1)) >= 0, (name, g)


def _check_namesrv_state(conn: RawConn) -> None:
    info = conn.json(106)
    for name, bd in info.get("brokerAddrTable", {}).items():
        for bid, addr in bd.get("brokerAddrs", {}).items():
            assert int(bid) >= 0, (name, bd)
            host, _, port = str(addr).rpartition(":")
            assert host and port.isdigit() and 0 <= int(port) <= 65535, (name, bd)
    reply = conn.call(105, {"topic": "FuzzRegT"})
    if reply["code"] == 0:
        route = json.loads(reply["_body"])
        for qd in route["queueDatas"]:
            assert 0 <= int(qd["readQueueNums"]) <= 65535 and 0 <= int(qd["writeQueueNums"]) <= 65535, qd
            assert 0 <= int(qd["perm"]) <= 15, qd


def _fuzz(spec: Spec, conn: RawConn, probe: Callable[[RawConn], None], check_state: Callable[[RawConn], None],
          examples: int) -> None:
    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(headers(spec.fields), spec.body)
    def run(ext: dict[str, str], body: bytes) -> None:
        reply = conn.call(spec.code, ext, body)
        _check_reply(spec, ext, reply)
        probe(conn)

    run()
    check_state(conn)


def _broker_probe(conn: RawConn) -> None:
    assert conn.call(13, {})["code"] == 0  # QUERY_BROKER_OFFSET


def _namesrv_probe(conn: RawConn) -> None:
    assert conn.call(106, {})["code"] == 0  # GET_BROKER_CLUSTER_INFO


@pytest.mark.parametrize("spec", BROKER_SPECS, ids=[s.name for s in BROKER_SPECS])
def test_broker_headers(servers: Servers, spec: Spec) -> None:
    _fuzz(spec, servers.broker_conn, _broker_probe, _check_broker_state, 60)


@pytest.mark.parametrize("spec", NAMESRV_SPECS, ids=[s.name for s in NAMESRV_SPECS])
def test_nameserver_headers(servers: Servers, spec: Spec) -> None:
    _fuzz(spec, servers.ns_conn, _namesrv_probe, _check_namesrv_state, 60)


def test_update_consumer_offset_queue_id_2_pow_40_is_refused(servers: Servers) -> None:
    """Issue 19: queueId 2^40 was accepted and saved."""
    conn = servers.broker_conn
    reply = conn.call(15, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(2**40), "commitOffset": "1"})
    assert reply["code"] == 1 and "out of the range of an int" in reply["remark"], reply
    for qid, code in ((QUEUES, 29), (-1, 29), (QUEUES - 1, 0)):
        reply = conn.call(15, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(qid), "commitOffset": "1"})
        assert reply["code"] == code, (qid, reply)
    negative = conn.call(15, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "commitOffset": "-5"})
    assert negative["code"] == 29, negative
    unknown = conn.call(15, {"consumerGroup": GROUP, "topic": "NoSuchT", "queueId": "0", "commitOffset": "1"})
    assert unknown["code"] == 17, unknown
    table = servers.broker_conn.json(43)["offsetTable"].get(f"{TOPIC}@{GROUP}", {})
    assert set(table) <= {str(q) for q in range(QUEUES)}, table

