"""Unit tests of the NameServer route table, bodies and request processors (no sockets)."""

from __future__ import annotations

import zlib
from typing import Any

import orjson
import pytest

from rocket.nameserver.kvconfig import KVConfigManager
from rocket.nameserver.processor import CONN_BROKER_ADDRS, DefaultRequestProcessor
from rocket.nameserver.routeinfo import RouteInfoManager
from rocket.protocol import (
    BodyError,
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
    crc32_masked,
)
from rocket.protocol.codes import RequestCode, ResponseCode
from rocket.remoting.command import HeaderFieldError, RemotingCommand
from rocket.remoting.connection import Processors

MASTER_A = "10.0.0.1:10911"
SLAVE_A = "10.0.0.2:10911"
MASTER_B = "10.0.0.3:10911"


class FakeClock:
    """A settable clock (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def wrapper(*topics: str, version: int = 1, queues: int = 4, perm: int = 6) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(
        {t: TopicConfig(t, queues, queues, perm) for t in topics}, DataVersion(1_700_000_000_000, version)
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def routes(clock: FakeClock) -> RouteInfoManager:
    return RouteInfoManager(clock=clock, broker_timeout=120.0)


def register(routes: RouteInfoManager, addr: str, name: str = "broker-a", broker_id: int = 0,
             wrap: TopicConfigSerializeWrapper | None = None, cluster: str = "DefaultCluster",
             channel: Any = None) -> Any:
    return routes.register_broker(cluster, addr, name, broker_id, addr.replace("10911", "10912"),
                                  wrap if wrap is not None else wrapper("TopicA"), [], channel)


def route_json(routes: RouteInfoManager, topic: str) -> dict[str, Any]:
    body = routes.route_body(topic)
    assert body is not None
    return orjson.loads(body)  # standard JSON: must parse without the lenient parser


# -- registration -----------------------------------------------------------------------


def test_master_registration_builds_route(routes: RouteInfoManager) -> None:
    result = register(routes, MASTER_A, wrap=wrapper("TopicA", "TopicB"))
    assert result.queue_data_updated
    assert result.master_addr is None and result.ha_server_addr is None
    obj = route_json(routes, "TopicA")
    assert obj["queueDatas"] == [
        {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}
    ]
    assert obj["brokerDatas"] == [
        {"brokerAddrs": {"0": MASTER_A}, "brokerName": "broker-a", "cluster": "DefaultCluster"}
    ]
    assert obj["filterServerTable"] == {}
    assert "orderTopicConf" not in obj
    assert sorted(routes.get_all_topic_list()) == ["TopicA", "TopicB"]
    assert routes.broker_count == 1 and routes.topic_count == 2


def test_unknown_topic_has_no_route(routes: RouteInfoManager) -> None:
    register(routes, MASTER_A)
    assert routes.route_body("Nope") is None
    assert routes.pickup_topic_route_data("Nope") is None


def test_two_groups_share_a_topic(routes: RouteInfoManager) -> None:
    register(routes, MASTER_A, "broker-a", wrap=wrapper("TopicA"))
    register(routes, MASTER_B, "broker-b", wrap=wrapper("TopicA", queues=8))
    route = TopicRouteData.from_json(routes.route_body("TopicA") or b"")
    assert {q.broker_name: q.write_queue_nums for q in route.queue_datas} == {"broker-a": 4, "broker-b": 8}
    assert {b.broker_name for b in route.broker_datas} == {"broker-a", "broker-b"}


def test_slave_is_listed_beside_master_and_learns_master(routes: RouteInfoManager) -> None:
    register(routes, MASTER_A)
    result = register(routes, SLAVE_A, broker_id=1, wrap=wrapper("TopicA", "SlaveOnly", version=9))
    assert result.master_addr == MASTER_A
    assert result.ha_server_addr == "10.0.0.1:10912"
    assert not result.queue_data_updated  # slaves never change queue data
    assert route_json(routes, "TopicA")["brokerDatas"][0]["brokerAddrs"] == {"0": MASTER_A, "1": SLAVE_A}
    assert routes.route_body("SlaveOnly") is None


def test_slave_without_live_master_gets_no_master_addr(routes: RouteInfoManager) -> None:
    result = register(routes, SLAVE_A, broker_id=1)
    assert result.master_addr is None and result.ha_server_addr is None
    # A slave alone creates the group but no queue data: no route yet.
    assert routes.route_body("TopicA") is None
    assert routes.get_all_cluster_info().broker_addr_table["broker-a"].broker_addrs == {1: SLAVE_A}


def test_promotion_moves_address_to_new_id(routes: RouteInfoManager) -> None:
    register(routes, MASTER_A)
    register(routes, SLAVE_A, broker_id=1)
    routes.on_channel_destroy(MASTER_A)  # master dies
    assert route_json(routes, "TopicA")["brokerDatas"][0]["brokerAddrs"] == {"1": SLAVE_A}
    # The slave is reconfigured with brokerId 0 and re-registers: it must not stay listed under 1.
    result = register(routes, SLAVE_A, broker_id=0, wrap=wrapper("TopicA", version=5))
    assert result.queue_data_updated
    assert route_json(routes, "TopicA")["brokerDatas"][0]["brokerAddrs"] == {"0": SLAVE_A}


# -- data version ----------------------------------------------------------------------------


def test_queue_data_rebuilt_only_when_data_version_changes(routes: RouteInfoManager) -> None:
    register(routes, MASTER_A, wrap=wrapper("TopicA", version=1))
    # Same version, different content: ignored (Java compares the version only).
    result = register(routes, MASTER_A, wrap=wrapper("TopicA", "TopicNew", version=1, queues=16))
    assert not result.queue_data_updated
    assert routes.route_body("TopicNew") is None
    assert route_json(routes, "TopicA")["queueDatas"][0]["writeQueueNums"] == 4
    # A new version: applied.
    result = register(routes, MASTER_A, wrap=wrapper("TopicA", "TopicNew", version=2, queues=16))
    assert result.queue_data_updated
    assert route_json(routes, "TopicA")["queueDatas"][0]["writeQueueNums"] == 16
    assert routes.route_body("TopicNew") is not None


def test_data_version_equality_uses_timestamp_and_counter() -> None:
    assert DataVersion(1, 2) == DataVersion(1, 2)
    assert DataVersion(1, 2) != DataVersion(3, 2)
    assert DataVersion.from_json(b'{"timestamp":5,"counter":{"value":7}}') == DataVersion(5, 7)
    assert DataVersion(5, 7).next_version(9) == DataVersion(9, 8)


def test_query_data_version(routes: RouteInfoManager, clock: FakeClock) -> None:
    register(routes, MASTER_A, wrap=wrapper("TopicA", version=3))
    version = wrapper(version=3).data_version
    assert not routes.is_broker_topic_config_changed(MASTER_A, version)
    assert routes.is_broker_topic_config_changed(MASTER_A, DataVersion(0, 4))
    assert routes.is_broker_topic_config_changed("1.2.3.4:1", version)
    assert routes.query_broker_topic_config(MASTER_A) == version
    clock.now += 100
    routes.update_broker_info_update_timestamp(MASTER_A)
    clock.now += 100
    assert routes.scan_not_active_brokers() == []


# -- permissions -----------------------------------------------------------------------------


def test_wipe_and_add_write_perm_survive_reregistration(routes: RouteInfoManager) -> None:
    register(routes, MASTER_A, wrap=wrapper("TopicA", "TopicB", version=1))
    register(routes, MASTER_B, "broker-b", wrap=wrapper("TopicA", version=1))
    assert routes.wipe_write_perm_of_broker("broker-a") == 2
    perms = {q["brokerName"]: q["perm"] for q in route_json(routes, "TopicA")["queueDatas"]}
    assert perms == {"broker-a": 4, "broker-b": 6}
    # Heartbeat with the same data version: the wipe stays.
    register(routes, MASTER_A, wrap=wrapper("TopicA", "TopicB", version=1))
    assert route_json(routes, "TopicB")["queueDatas"][0]["perm"] == 4
    assert routes.add_write_perm_of_broker("broker-a") == 2
    assert route_json(routes, "TopicB")["queueDatas"][0]["perm"] == 6
    routes.wipe_write_perm_of_broker("broker-a")
    # A changed data version rebuilds queue data from the broker's own config.
    register(routes, MASTER_A, wrap=wrapper("TopicA", "TopicB", version=2))
    assert route_json(routes, "TopicB")["queueDatas"][0]["perm"] == 6
    assert routes.wipe_write_perm_of_broker("unknown") == 0


# -- removal -----------------------------------------------------------------------------------


def test_unregister_slave_keeps_group(routes: RouteInfoManager) -> None:
    register(routes, MASTER_A)
    register(routes, SLAVE_A, broker_id=1)
    routes.unregister_broker("DefaultCluster", SLAVE_A, "broker-a", 1)
    assert route_json(routes, "TopicA")["brokerDatas"][0]["brokerAddrs"] == {"0": MASTER_A}
    assert routes.broker_count == 1


def test_unregister_last_address_drops_group_cluster_and_topics(routes: RouteInfoManager) -> None:
    register(routes, MASTER_A, wrap=wrapper("TopicA", "OnlyA"))
    register(routes, MASTER_B, "broker-b", wrap=wrapper("TopicA"))
    routes.unregister_broker("DefaultCluster", MASTER_A, "broker-a", 0)
    assert routes.route_body("OnlyA") is None
    obj = route_json(routes, "TopicA")
    assert [q["brokerName"] for q in obj["queueDatas"]] == ["broker-b"]
    info = routes.get_all_cluster_info()
    assert list(info.broker_addr_table) == ["broker-b"]
    assert info.cluster_addr_table == {"DefaultCluster": ["broker-b"]}
    routes.unregister_broker("DefaultCluster", MASTER_B, "broker-b", 0)
    assert routes.get_all_cluster_info().cluster_addr_table == {}
    assert routes.get_all_topic_list() == []


def test_unregister_with_stale_id_does_not_remove_new_owner(routes: RouteInfoManager) -> None:
    register(routes, MASTER_A)
    routes.unregister_broker("DefaultCluster", "10.9.9.9:10911", "broker-a", 0)
    assert route_json(routes, "TopicA")["brokerDatas"][0]["brokerAddrs"] == {"0": MASTER_A}


def test_eviction_after_timeout(routes: RouteInfoManager, clock: FakeClock) -> None:
    channel = object()
    register(routes, MASTER_A, channel=channel)
    register(routes, MASTER_B, "broker-b", wrap=wrapper("TopicB"))
    clock.now += 100
    register(routes, MASTER_B, "broker-b", wrap=wrapper("TopicB"))  # B keeps heartbeating
    clock.now += 20.5  # A silent for 120.5 s, B for 20.5 s
    evicted = routes.scan_not_active_brokers()
    assert [(e.broker_addr, e.channel) for e in evicted] == [(MASTER_A, channel)]
    assert evicted[0].silent_for == pytest.approx(120.5)
    assert routes.route_body("TopicA") is None
    assert routes.route_body("TopicB") is not None
    assert routes.scan_not_active_brokers() == []


def test_not_evicted_at_exactly_timeout(routes: RouteInfoManager, clock: FakeClock) -> None:
    register(routes, MASTER_A)
    clock.now += 120.0
    assert routes.scan_not_active_brokers() == []


def test_channel_destroy_ignores_reregistration_over_new_channel(routes: RouteInfoManager) -> None:
    old, new = object(), object()
    register(routes, MASTER_A, channel=old)
    register(routes, MASTER_A, channel=new)
    assert not routes.on_channel_destroy(MASTER_A, old)
    assert routes.route_body("TopicA") is not None
    assert routes.on_channel_destroy(MASTER_A, new)
    assert routes.route_body("TopicA") is None


# -- topics -------------------------------------------------------------------------------------


def test_delete_topic(routes: RouteInfoManager) -> None:
    register(routes, MASTER_A, wrap=wrapper("TopicA", "TopicB"))
    assert routes.delete_topic("TopicA")
    assert not routes.delete_topic("TopicA")
    assert routes.route_body("TopicA") is None
    assert routes.get_all_topic_list() == ["TopicB"]
    # Deleted topics stay deleted across heartbeats with an unchanged version (Java 4.9.8).
    register(routes, MASTER_A, wrap=wrapper("TopicA", "TopicB"))
    assert routes.route_body("TopicA") is None


def test_delete_topic_in_one_cluster(routes: RouteInfoManager) -> None:
    register(routes, MASTER_A, "broker-a", wrap=wrapper("TopicA"), cluster="c1")
    register(routes, MASTER_B, "broker-b", wrap=wrapper("TopicA"), cluster="c2")
    assert routes.delete_topic("TopicA", "c1")
    assert [q["brokerName"] for q in route_json(routes, "TopicA")["queueDatas"]] == ["broker-b"]
    assert routes.delete_topic("TopicA", "c2")
    assert routes.get_all_topic_list() == []


def test_topics_by_cluster(routes: RouteInfoManager) -> None:
    register(routes, MASTER_A, "broker-a", wrap=wrapper("T1", "Shared"), cluster="c1")
    register(routes, MASTER_B, "broker-b", wrap=wrapper("T2", "Shared"), cluster="c2")
    assert sorted(routes.get_topics_by_cluster("c1")) == ["Shared", "T1"]
    assert sorted(routes.get_topics_by_cluster("c2")) == ["Shared", "T2"]
    assert routes.get_topics_by_cluster("none") == []


# -- cache ----------------------------------------------------------------------------------------


def test_route_cache_is_reused_and_invalidated(routes: RouteInfoManager) -> None:
    register(routes, MASTER_A, wrap=wrapper("TopicA", "TopicB"))
    first = routes.route_body("TopicA")
    assert routes.route_body("TopicA") is first  # cached object
    register(routes, MASTER_A, wrap=wrapper("TopicA", "TopicB"))  # heartbeat: nothing changed
    assert routes.route_body("TopicA") is first
    register(routes, SLAVE_A, broker_id=1)  # the group's addresses change
    second = routes.route_body("TopicA")
    assert second is not first and SLAVE_A.encode() in (second or b"")
    other = routes.route_body("TopicB")
    routes.wipe_write_perm_of_broker("broker-a")
    assert routes.route_body("TopicB") is not other


def test_route_lookup_returns_copies(routes: RouteInfoManager) -> None:
    register(routes, MASTER_A)
    route = routes.pickup_topic_route_data("TopicA")
    assert route is not None
    route.broker_datas[0].broker_addrs[7] = "x:1"
    assert route_json(routes, "TopicA")["brokerDatas"][0]["brokerAddrs"] == {"0": MASTER_A}


def test_order_topic_conf_in_route(clock: FakeClock) -> None:
    routes = RouteInfoManager(clock=clock, order_topic_conf=lambda t: "broker-a:4" if t == "TopicA" else None)
    register(routes, MASTER_A)
    assert route_json(routes, "TopicA")["orderTopicConf"] == "broker-a:4"


# -- bodies ---------------------------------------------------------------------------------------


def test_register_body_json_round_trip() -> None:
    body = RegisterBrokerBody(wrapper("A", "%RETRY%g", version=7), ["f:1"])
    decoded = RegisterBrokerBody.decode(body.encode())
    assert decoded == body


def test_register_body_compressed_round_trip_and_java_layout() -> None:
    body = RegisterBrokerBody(wrapper("A", "B", version=7))
    data = body.encode(compressed=True)
    raw = zlib.decompress(data)
    # int32 length + DataVersion JSON first, then the topic count.
    length = int.from_bytes(raw[:4], "big")
    assert orjson.loads(raw[4 : 4 + length]) == {"counter": 7, "timestamp": 1_700_000_000_000}
    assert int.from_bytes(raw[4 + length : 8 + length], "big") == 2
    first_len = int.from_bytes(raw[8 + length : 12 + length], "big")
    assert raw[12 + length : 12 + length + first_len] == b"A 4 4 6 SINGLE_TAG"
    decoded = RegisterBrokerBody.decode(data, compressed=True)
    assert decoded.topic_config_serialize_wrapper.data_version == DataVersion(1_700_000_000_000, 7)
    assert set(decoded.topic_config_serialize_wrapper.topic_config_table) == {"A", "B"}


def test_register_body_accepts_fastjson_and_rejects_garbage() -> None:
    text = (b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"topicName":"T","readQueueNums":"2",'
            b'"writeQueueNums":2,"perm":6}},"dataVersion":{"timestamp":1,"counter":2}},"filterServerList":[]}')
    decoded = RegisterBrokerBody.decode(text)
    assert decoded.topic_config_serialize_wrapper.topic_config_table["T"].read_queue_nums == 2
    assert RegisterBrokerBody.decode(b"").topic_config_serialize_wrapper.data_version == DataVersion(0, 0)
    for bad in (b"not json", b"[1,2]", b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":3}}}'):
        with pytest.raises(BodyError):
            RegisterBrokerBody.decode(bad)
    for bad in (b"junk", zlib.compress(b"\x00\x00"), zlib.compress(b"\x00\x00\x00\x02{}\x00\x00\x00\x01")):
        with pytest.raises(BodyError):
            RegisterBrokerBody.decode(bad, compressed=True)


def test_cluster_info_accepts_bare_integer_keys() -> None:
    text = (b'{"brokerAddrTable":{"broker-a":{"cluster":"C","brokerName":"broker-a",'
            b'"brokerAddrs":{0:"10.0.0.5:10911",1:"10.0.0.6:10911"}}},"clusterAddrTable":{"C":["broker-a"]}}')
    info = ClusterInfo.from_json(text)
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.5:10911", 1: "10.0.0.6:10911"}
    assert orjson.loads(info.encode())["brokerAddrTable"]["broker-a"]["brokerAddrs"]["0"] == "10.0.0.5:10911"


# -- processors (no sockets) -----------------------------------------------------------------------


class FakeConnection:
    def __init__(self) -> None:
        self.attributes: dict[str, Any] = {}
        self.peer = "127.0.0.1:5555"


def call(processors: Processors, code: int, ext: dict[str, str] | None = None, body: bytes = b"",
         conn: FakeConnection | None = None) -> RemotingCommand:
    entry = processors.lookup(code)
    assert entry is not None and not entry[1], "NameServer handlers must be plain functions (inline)"
    request = RemotingCommand(code=code, ext_fields=ext or {}, body=body)
    response = entry[0](request, conn or FakeConnection())  # type: ignore[arg-type]
    assert isinstance(response, RemotingCommand)
    return response


@pytest.fixture
def processors(routes: RouteInfoManager) -> Processors:
    table = Processors()
    DefaultRequestProcessor(routes, KVConfigManager()).register(table)
    return table


def register_ext(addr: str = MASTER_A, broker_id: int = 0, body: bytes = b"", crc: bool = True,
                 compressed: bool = False) -> dict[str, str]:
    ext = {"brokerName": "broker-a", "brokerAddr": addr, "clusterName": "DefaultCluster",
           "haServerAddr": addr.replace("10911", "10912"), "brokerId": str(broker_id),
           "compressed": "true" if compressed else "false"}
    if crc:
        ext["bodyCrc32"] = str(crc32_masked(body))
    return ext


def test_processor_register_checks_crc(processors: Processors) -> None:
    body = RegisterBrokerBody(wrapper("TopicA")).encode()
    bad = register_ext(body=body)
    bad["bodyCrc32"] = str(int(bad["bodyCrc32"]) ^ 1)
    response = call(processors, RequestCode.REGISTER_BROKER, bad, body)
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    conn = FakeConnection()
    response = call(processors, RequestCode.REGISTER_BROKER, register_ext(body=body), body, conn)
    assert response.code == ResponseCode.SUCCESS and response.body == b""
    assert conn.attributes[CONN_BROKER_ADDRS] == {MASTER_A}
    # bodyCrc32 0 / absent: not checked.
    response = call(processors, RequestCode.REGISTER_BROKER, register_ext(body=body, crc=False), body)
    assert response.code == ResponseCode.SUCCESS


def test_processor_register_compressed_and_slave_ext(processors: Processors) -> None:
    body = RegisterBrokerBody(wrapper("TopicA")).encode(compressed=True)
    response = call(processors, RequestCode.REGISTER_BROKER, register_ext(body=body, compressed=True), body)
    assert response.code == ResponseCode.SUCCESS and "masterAddr" not in response.ext_fields
    response = call(processors, RequestCode.REGISTER_BROKER, register_ext(SLAVE_A, 1))
    assert response.ext_fields == {"haServerAddr": "10.0.0.1:10912", "masterAddr": MASTER_A}
    route = call(processors, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"})
    assert orjson.loads(route.body)["brokerDatas"][0]["brokerAddrs"] == {"0": MASTER_A, "1": SLAVE_A}


def test_processor_missing_field_and_bad_body(processors: Processors) -> None:
    ext = register_ext()
    del ext["brokerAddr"]
    entry = processors.lookup(RequestCode.REGISTER_BROKER)
    assert entry is not None
    with pytest.raises(HeaderFieldError, match="brokerAddr"):
        entry[0](RemotingCommand(code=103, ext_fields=ext), FakeConnection())  # type: ignore[arg-type]
    response = call(processors, RequestCode.REGISTER_BROKER, register_ext(body=b"{oops", crc=False), b"{oops")
    assert response.code == ResponseCode.SYSTEM_ERROR


def test_processor_route_not_found_remark(processors: Processors) -> None:
    response = call(processors, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Missing"})
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert response.remark is not None
    assert response.remark.startswith("No topic route info in name server for the topic: Missing")


def test_processor_perm_counts_and_topic_lists(processors: Processors) -> None:
    body = RegisterBrokerBody(wrapper("T1", "T2")).encode()
    call(processors, RequestCode.REGISTER_BROKER, register_ext(body=body), body)
    wipe = call(processors, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert wipe.ext_fields == {"wipeTopicCount": "2"}
    add = call(processors, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert add.ext_fields == {"addTopicCount": "2"}
    all_topics = call(processors, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert sorted(orjson.loads(all_topics.body)["topicList"]) == ["T1", "T2"]
    by_cluster = call(processors, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"})
    assert sorted(orjson.loads(by_cluster.body)["topicList"]) == ["T1", "T2"]
    call(processors, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T1"})
    all_topics = call(processors, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert orjson.loads(all_topics.body)["topicList"] == ["T2"]


def test_processor_kv_config_and_order_conf_in_register_response(processors: Processors) -> None:
    missing = call(processors, RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"})
    assert missing.code == ResponseCode.QUERY_NOT_FOUND
    call(processors, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"})
    assert call(processors, RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}).ext_fields == {"value": "v"}
    call(processors, RequestCode.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k"})
    assert call(processors, RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}).code == 22
    call(processors, RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "a:4"})
    response = call(processors, RequestCode.REGISTER_BROKER, register_ext())
    assert orjson.loads(response.body) == {"table": {"T": "a:4"}}


def test_processor_query_data_version(processors: Processors) -> None:
    body = RegisterBrokerBody(wrapper("T1", version=4)).encode()
    call(processors, RequestCode.REGISTER_BROKER, register_ext(body=body), body)
    ext = {"brokerAddr": MASTER_A, "brokerName": "broker-a", "clusterName": "DefaultCluster", "brokerId": "0"}
    same = call(processors, RequestCode.QUERY_DATA_VERSION, ext, orjson.dumps({"timestamp": 1_700_000_000_000,
                                                                               "counter": 4}))
    assert same.ext_fields["changed"] == "false"
    assert DataVersion.from_json(same.body) == DataVersion(1_700_000_000_000, 4)
    other = call(processors, RequestCode.QUERY_DATA_VERSION, ext, orjson.dumps({"timestamp": 1, "counter": 5}))
    assert other.ext_fields["changed"] == "true"


def test_processor_connection_closed_drops_its_brokers(routes: RouteInfoManager) -> None:
    table = Processors()
    processor = DefaultRequestProcessor(routes, KVConfigManager())
    processor.register(table)
    conn, other = FakeConnection(), FakeConnection()
    body = RegisterBrokerBody(wrapper("TopicA")).encode()
    call(table, RequestCode.REGISTER_BROKER, register_ext(body=body), body, conn)
    call(table, RequestCode.REGISTER_BROKER, register_ext(SLAVE_A, 1), b"", other)
    assert processor.connection_closed(conn) == [MASTER_A]  # type: ignore[arg-type]
    assert routes.get_all_cluster_info().broker_addr_table["broker-a"].broker_addrs == {1: SLAVE_A}
    assert processor.connection_closed(conn) == []  # type: ignore[arg-type]


def test_kv_config_persists(tmp_path: Any) -> None:
    path = tmp_path / "kv.json"
    seen: list[tuple[str, str]] = []
    kv = KVConfigManager(path, on_change=lambda ns, k: seen.append((ns, k)))
    kv.put("ns", "a", "1")
    kv.put("ns", "b", "2")
    kv.delete("ns", "a")
    assert seen == [("ns", "a"), ("ns", "b"), ("ns", "a")]
    assert KVConfigManager(path).namespace("ns") == {"b": "2"}
