"""Route parsing and the producer's queue selection (rocket.client.route)."""

from __future__ import annotations

import pytest

from rocket.client.route import FaultTracker, PublishInfo
from rocket.protocol import BodyError, BrokerData, ClusterInfo, MessageQueue, TopicRouteData

STANDARD = b"""{"queueDatas":[
  {"brokerName":"broker-b","readQueueNums":2,"writeQueueNums":2,"perm":6,"topicSysFlag":0},
  {"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":3,"perm":6,"topicSysFlag":0}],
 "brokerDatas":[
  {"cluster":"DefaultCluster","brokerName":"broker-a","brokerAddrs":{"0":"10.0.0.5:10911","1":"10.0.0.6:10911"}},
  {"cluster":"DefaultCluster","brokerName":"broker-b","brokerAddrs":{"0":"10.0.0.7:10911"}}],
 "filterServerTable":{}}"""

# fastjson's native form: bare integer keys, numbers as strings in places
FASTJSON = b"""{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.5:10911",1:"10.0.0.6:10911"},"brokerName":"broker-a",
 "cluster":"C"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":"6","readQueueNums":"2",
 "topicSynFlag":0,"writeQueueNums":2}]}"""


def test_parse_standard_route() -> None:
    route = TopicRouteData.from_json(STANDARD)
    assert [q.broker_name for q in route.queue_datas] == ["broker-b", "broker-a"]
    bd = route.broker("broker-a")
    assert bd is not None and bd.master_addr == "10.0.0.5:10911"
    assert bd.broker_addrs[1] == "10.0.0.6:10911"
    assert route.master_addrs() == {"10.0.0.5:10911", "10.0.0.7:10911"}
    assert len(route.broker_addrs()) == 3


def test_parse_bare_integer_keys() -> None:
    route = TopicRouteData.from_json(FASTJSON)
    bd = route.broker("broker-a")
    assert bd is not None
    assert dict(bd.broker_addrs) == {0: "10.0.0.5:10911", 1: "10.0.0.6:10911"}
    assert route.queue_datas[0].perm == 6
    assert route.queue_datas[0].read_queue_nums == 2


@pytest.mark.parametrize("body", [b"[]", b"not json", b'{"queueDatas":{"a":1}}', b'{"queueDatas":[{"perm":6}]}'])
def test_bad_routes_raise(body: bytes) -> None:
    with pytest.raises(BodyError):
        TopicRouteData.from_json(body)


def test_write_queues_only_writable_masters_sorted() -> None:
    route = TopicRouteData.from_json(STANDARD)
    queues = route.write_queues("T")
    assert queues == [MessageQueue("T", "broker-a", i) for i in range(3)] + [
        MessageQueue("T", "broker-b", i) for i in range(2)]
    # read view uses readQueueNums and is sorted
    assert route.read_queues("T")[:4] == [MessageQueue("T", "broker-a", i) for i in range(4)]
    assert len(route.read_queues("T")) == 6


def test_write_queues_skip_read_only_and_masterless_groups() -> None:
    body = b"""{"queueDatas":[{"brokerName":"a","readQueueNums":2,"writeQueueNums":2,"perm":4},
      {"brokerName":"b","readQueueNums":2,"writeQueueNums":2,"perm":6},
      {"brokerName":"c","readQueueNums":2,"writeQueueNums":2,"perm":6}],
      "brokerDatas":[{"cluster":"x","brokerName":"a","brokerAddrs":{"0":"h:1"}},
      {"cluster":"x","brokerName":"b","brokerAddrs":{"1":"h:2"}},
      {"cluster":"x","brokerName":"c","brokerAddrs":{"0":"h:3"}}]}"""
    route = TopicRouteData.from_json(body)
    assert {q.broker_name for q in route.write_queues("T")} == {"c"}
    assert {q.broker_name for q in route.read_queues("T")} == {"a", "b", "c"}


def test_order_topic_conf() -> None:
    route = TopicRouteData(order_topic_conf="broker-a:2;broker-b:1")
    assert route.order_queues("T") == [MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1),
                                       MessageQueue("T", "broker-b", 0)]
    assert TopicRouteData().order_queues("T") is None


def test_select_addr_prefers_id_then_master_then_slave() -> None:
    bd = BrokerData("c", "a", {0: "m:1", 1: "s1:1", 2: "s2:1"})
    assert bd.select_addr(1) == "s1:1"
    assert bd.select_addr(7) == "m:1"
    gone = BrokerData("c", "a", {2: "s2:1", 1: "s1:1"})
    assert gone.select_addr(0) == "s1:1"
    assert BrokerData("c", "a", {}).select_addr() is None


def test_cluster_info_bare_keys_and_masters() -> None:
    body = b"""{"brokerAddrTable":{"broker-a":{"cluster":"DefaultCluster","brokerName":"broker-a",
      "brokerAddrs":{0:"10.0.0.5:10911",1:"10.0.0.6:10911"}},
      "broker-b":{"cluster":"DefaultCluster","brokerName":"broker-b","brokerAddrs":{1:"10.0.0.8:10911"}}},
      "clusterAddrTable":{"DefaultCluster":["broker-b","broker-a"]}}"""
    info = ClusterInfo.from_json(body)
    assert info.cluster_addr_table["DefaultCluster"] == ["broker-a", "broker-b"]
    assert info.masters("DefaultCluster") == {"broker-a": "10.0.0.5:10911"}
    with pytest.raises(KeyError):
        info.masters("Nope")


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _info() -> PublishInfo:
    return PublishInfo.build("T", TopicRouteData.from_json(STANDARD))


def test_round_robin_covers_every_queue_evenly() -> None:
    info = _info()
    picks = [info.select() for _ in range(50)]
    counts = {mq: picks.count(mq) for mq in info.queues}
    assert set(counts.values()) == {10}
    assert picks[:5] == info.queues


def test_select_avoids_the_broker_of_the_last_failure() -> None:
    info = _info()
    for _ in range(20):
        assert info.select(avoid="broker-a").broker_name == "broker-b"


def test_select_skips_recently_failed_brokers_until_window_ends() -> None:
    clock = _Clock()
    faults = FaultTracker(clock)
    faults.mark("broker-b", 10)
    info = _info()
    assert {info.select(faults).broker_name for _ in range(20)} == {"broker-a"}
    clock.now += 11
    assert {info.select(faults).broker_name for _ in range(20)} == {"broker-a", "broker-b"}


def test_select_falls_back_when_every_broker_failed() -> None:
    clock = _Clock()
    faults = FaultTracker(clock)
    faults.mark("broker-a", 10)
    faults.mark("broker-b", 10)
    info = _info()
    picks = {info.select(faults, avoid="broker-a").broker_name for _ in range(10)}
    assert picks == {"broker-b"}  # not the one that just failed
    assert info.select(faults) in info.queues


def test_select_empty_raises() -> None:
    with pytest.raises(LookupError):
        PublishInfo("T", TopicRouteData(), []).select()


def test_template_route_limits_queue_count() -> None:
    info = PublishInfo.build("New", TopicRouteData.from_json(STANDARD), from_template=True, default_queue_nums=2)
    assert info.from_template
    assert [(q.topic, q.broker_name, q.queue_id) for q in info.queues] == [
        ("New", "broker-a", 0), ("New", "broker-a", 1), ("New", "broker-b", 0), ("New", "broker-b", 1)]
