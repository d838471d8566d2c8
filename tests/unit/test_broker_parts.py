"""Unit tests of the broker's pure parts: headers, tag filter, delay levels,
heartbeat bodies, config loading, NameServer resolution, long polling, client
bookkeeping, queue locks."""

from __future__ import annotations

import asyncio
import json
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from rocket.broker.client_manager import ClientChannelInfo, ConsumerManager, ProducerManager
from rocket.broker.config import (
    BrokerConfig,
    ConfigError,
    format_properties,
    load_config,
    parse_properties,
    runtime_overrides_path,
)
from rocket.broker.filter import SubscriptionParseError, build_subscription_data
from rocket.broker.headers import PullMessageRequestHeader, SendMessageRequestHeader
from rocket.broker.heartbeat import HeartbeatData, HeartbeatParseError
from rocket.broker.locks import RebalanceLockManager
from rocket.broker.long_polling import PullRequestHoldService, WakeReason
from rocket.broker.main import cli_overrides
from rocket.broker.registration import (
    resolve_namesrv_addrs,
    split_namesrv_list,
)
from rocket.broker.schedule import parse_delay_levels
from rocket.broker.tasks import CoalescingRunner
from rocket.broker.topics import validate_topic
from rocket.message import java_string_hash
from rocket.protocol import (
    DataVersion,
    MessageQueue,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    crc32_masked,
)
from rocket.remoting import HeaderFieldError, RemotingCommand, RequestCode
from rocket.store.api import BrokerRole, FlushDiskType

# -- send / pull headers ---------------------------------------------------------------------------


def _cmd(code: int, ext: dict[str, Any]) -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields={k: str(v) for k, v in ext.items()})


V1 = {
    "producerGroup": "PID",
    "topic": "T",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": 4,
    "queueId": 1,
    "sysFlag": 0,
    "bornTimestamp": 1700000000000,
    "flag": 7,
    "properties": "TAGS\x01A\x02",
    "reconsumeTimes": "0",
    "unitMode": "0",
    "batch": "0",
}


def test_send_header_v1_long_names() -> None:
    h = SendMessageRequestHeader.parse(_cmd(RequestCode.SEND_MESSAGE, V1))
    assert (h.producer_group, h.topic, h.default_topic, h.default_topic_queue_nums) == ("PID", "T", "TBW102", 4)
    assert (h.queue_id, h.sys_flag, h.born_timestamp, h.flag) == (1, 0, 1700000000000, 7)
    assert h.properties == "TAGS\x01A\x02"
    assert h.batch is False and h.unit_mode is False and h.max_reconsume_times is None


def test_send_header_v1_cpp_batch_flag_one() -> None:
    h = SendMessageRequestHeader.parse(_cmd(RequestCode.SEND_MESSAGE, {**V1, "batch": "1"}))
    assert h.batch is True


def test_send_header_v2_short_names_and_roundtrip() -> None:
    ext = {"a": "PID", "b": "T", "c": "TBW102", "d": 4, "e": 3, "f": 0, "g": 17, "h": 0, "i": "", "j": 2,
           "k": "false", "l": 5}
    h = SendMessageRequestHeader.parse(_cmd(RequestCode.SEND_MESSAGE_V2, ext))
    assert (h.topic, h.queue_id, h.reconsume_times, h.max_reconsume_times, h.batch) == ("T", 3, 2, 5, False)
    again = SendMessageRequestHeader.parse(_cmd(RequestCode.SEND_MESSAGE_V2, h.to_ext_fields(v2=True)))
    assert again == h


def test_send_header_batch_code_is_batch_without_flag() -> None:
    ext = {"a": "PID", "b": "T", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 1, "h": 0}
    assert SendMessageRequestHeader.parse(_cmd(RequestCode.SEND_BATCH_MESSAGE, ext)).batch is True


def test_send_header_missing_and_bad_fields() -> None:
    bad = dict(V1)
    del bad["topic"]
    with pytest.raises(HeaderFieldError, match="topic"):
        SendMessageRequestHeader.parse(_cmd(RequestCode.SEND_MESSAGE, bad))
    with pytest.raises(HeaderFieldError, match="queueId"):
        SendMessageRequestHeader.parse(_cmd(RequestCode.SEND_MESSAGE, {**V1, "queueId": "x"}))


def test_pull_header_flags() -> None:
    ext = {"consumerGroup": "G", "topic": "T", "queueId": 0, "queueOffset": 1, "maxMsgNums": 32, "sysFlag": 7,
           "commitOffset": 1, "suspendTimeoutMillis": 15000, "subscription": "*", "subVersion": 5}
    h = PullMessageRequestHeader.parse(_cmd(RequestCode.PULL_MESSAGE, ext))
    assert h.has_commit_offset and h.has_suspend and h.has_subscription
    assert (h.queue_offset, h.suspend_timeout_millis, h.expression_type) == (1, 15000, "TAG")
    h2 = PullMessageRequestHeader.parse(_cmd(RequestCode.PULL_MESSAGE, {**ext, "sysFlag": 4}))
    assert not h2.has_suspend and not h2.has_commit_offset


# -- tag filter -----------------------------------------------------------------------------------------


def test_tag_filter_all() -> None:
    for expr in ("*", "", None, " * "):
        sub = build_subscription_data("T", expr)
        assert sub.matches_all and sub.tags_codes() is None
        assert sub.is_matched_by_tags_code(12345)


def test_tag_filter_tags_and_codes() -> None:
    sub = build_subscription_data("T", "TagA || TagB ||TagA")
    assert sub.tags_set == ["TagA", "TagB"]
    assert sub.code_set == {java_string_hash("TagA"), java_string_hash("TagB")}
    assert sub.is_matched_by_tags_code(java_string_hash("TagB"))
    assert not sub.is_matched_by_tags_code(java_string_hash("TagC"))
    assert not sub.is_matched_by_tags_code(0)


def test_tag_filter_errors() -> None:
    with pytest.raises(SubscriptionParseError):
        build_subscription_data("T", "||  ||")
    sql = build_subscription_data("T", "a > 1", "SQL92")
    assert sql.expression_type == "SQL92"


# -- delay levels -------------------------------------------------------------------------------------------


def test_delay_levels_default_and_custom() -> None:
    levels = parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
    assert len(levels) == 18
    assert levels[0] == 1000 and levels[4] == 60_000 and levels[-1] == 7_200_000
    assert parse_delay_levels("200ms 1d") == [200, 86_400_000]
    for bad in ("", "1x", "s", "1.5s"):
        with pytest.raises(ValueError, match=r"no delay levels|bad delay level"):
            parse_delay_levels(bad)


# -- heartbeat bodies ------------------------------------------------------------------------------------------


def test_heartbeat_java_form() -> None:
    body = orjson.dumps(
        {
            "clientID": "10.0.0.9@12345",
            "producerDataSet": [{"groupName": "PID_X"}],
            "consumerDataSet": [
                {
                    "groupName": "CID_X",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "unitMode": False,
                    "subscriptionDataSet": [
                        {"topic": "TopicA", "subString": "TagA||TagB", "classFilterMode": False, "tagsSet": ["TagA"],
                         "codeSet": [1], "subVersion": 1700000000000, "expressionType": "TAG"}
                    ],
                }
            ],
        }
    )
    hb = HeartbeatData.decode(body)
    assert hb.client_id == "10.0.0.9@12345" and hb.producer_groups == ["PID_X"]
    (c,) = hb.consumers
    assert (c.group_name, c.consume_type, c.message_model) == ("CID_X", "CONSUME_PASSIVELY", "CLUSTERING")
    (s,) = c.subscriptions
    assert s.sub_version == 1700000000000
    assert s.code_set == {java_string_hash("TagA"), java_string_hash("TagB")}  # derived from subString


def test_heartbeat_cpp_form() -> None:
    body = (
        b'{"clientID":"13854-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,'
        b'"groupName":"CID_CPP","messageModel":1,"subscriptionDataSet":[{"subString":"*",'
        b'"subVersion":"1795314901610","topic":"%RETRY%CID_CPP"},{"subString":"*","subVersion":"1795314901610",'
        b'"topic":"TopicCpp"}]}]}'
    )
    hb = HeartbeatData.decode(body)
    (c,) = hb.consumers
    assert (c.consume_type, c.message_model, c.consume_from_where) == (
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_LAST_OFFSET",
    )
    assert [s.topic for s in c.subscriptions] == ["%RETRY%CID_CPP", "TopicCpp"]
    assert c.subscriptions[1].sub_version == 1795314901610 and c.subscriptions[1].matches_all
    assert hb.producer_groups == []
    assert HeartbeatData.decode(orjson.dumps(hb.to_json())).consumers[0].group_name == "CID_CPP"


@pytest.mark.parametrize(
    "body",
    [b"", b"[]", b"{}", b'{"clientID":"x","consumerDataSet":[{"groupName":"g","consumeType":9}]}', b"{oops"],
)
def test_heartbeat_bad_bodies(body: bytes) -> None:
    with pytest.raises(HeartbeatParseError):
        HeartbeatData.decode(body)


# -- config -----------------------------------------------------------------------------------------------------


def test_config_properties_file_and_overrides(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# a RocketMQ broker.conf\n"
        "brokerClusterName = C1\nbrokerName=broker-b\nbrokerId=0\nbrokerIP1=10.1.2.3\n"
        "listenPort: 20911\nautoCreateTopicEnable=false\nflushDiskType=SYNC_FLUSH\n"
        "mappedFileSizeCommitLog=1048576\nflushIntervalCommitLog=200\nunknownThing=1\nfileReservedTime=48\n"
        f"storePathRootDir={tmp_path / 'store'}\n"
    )
    cfg = load_config(conf, {"listenPort": "30911", "namesrvAddr": "a:1;b:2"})
    assert cfg.broker_cluster_name == "C1" and cfg.broker_name == "broker-b" and cfg.broker_ip1 == "10.1.2.3"
    assert cfg.listen_port == 30911 and cfg.fast_port == 30909 and cfg.ha_port == 30912
    assert cfg.auto_create_topic_enable is False and cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert cfg.broker_addr == "10.1.2.3:30911" and cfg.ha_server_addr == "10.1.2.3:30912"
    store = cfg.store_config()
    assert store.mapped_file_size_commit_log == 1048576
    assert store.flush_interval_commit_log == pytest.approx(0.2)  # Java ms -> store seconds
    assert store.file_reserved_time_hours == 48
    assert store.store_host == "10.1.2.3:30911" and store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    props = cfg.to_properties()
    assert props["brokerIP1"] == "10.1.2.3" and props["autoCreateTopicEnable"] == "false"


def test_config_toml_json_and_errors(tmp_path: Path) -> None:
    toml = tmp_path / "b.toml"
    toml.write_text('[broker]\nbroker_name = "bt"\nbroker_id = 1\nbroker_role = "SLAVE"\nlisten_port = 1234\n')
    cfg = load_config(toml, runtime_overrides=False)
    assert (cfg.broker_name, cfg.broker_id, cfg.broker_role, cfg.is_slave) == ("bt", 1, BrokerRole.SLAVE, True)
    js = tmp_path / "b.json"
    js.write_text(json.dumps({"brokerName": "bj", "brokerPermission": 4, "messageDelayLevel": "1s 2s"}))
    assert load_config(js, runtime_overrides=False).broker_permission == 4
    with pytest.raises(ConfigError, match="brokerPermission"):
        load_config(None, {"brokerPermission": "9"}, runtime_overrides=False)
    with pytest.raises(ConfigError, match="listenPort"):
        load_config(None, {"listenPort": "x"}, runtime_overrides=False)
    with pytest.raises(ConfigError, match="messageDelayLevel"):
        load_config(None, {"messageDelayLevel": "1q"}, runtime_overrides=False)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.conf")
    with pytest.raises(ConfigError, match="unknown"):
        BrokerConfig().update({"noSuchKey": "1"}, strict=True)


def test_config_runtime_overrides_survive_restart(tmp_path: Path) -> None:
    store = tmp_path / "store"
    path = runtime_overrides_path(store)
    path.parent.mkdir(parents=True)
    path.write_text(format_properties({"brokerPermission": "4"}))
    cfg = load_config(None, {"storePathRootDir": str(store), "brokerName": "x"})
    assert cfg.broker_permission == 4
    cfg = load_config(None, {"storePathRootDir": str(store), "brokerPermission": "6"})
    assert cfg.broker_permission == 6  # flags win


def test_parse_properties_forms() -> None:
    text = "a=1\nb : 2\n# c=3\n! d=4\ne 5\nf=x\\\n  y\ng=\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "e": "5", "f": "xy", "g": ""}


def test_cli_overrides() -> None:
    out = cli_overrides(name="b", port=1, namesrv="ns:9876", settings=["maxInFlightSends=3", "x = y"])
    assert out == {"brokerName": "b", "listenPort": 1, "namesrvAddr": "ns:9876", "maxInFlightSends": "3", "x": "y"}
    with pytest.raises(ConfigError):
        cli_overrides(settings=["novalue"])


def test_topic_validation() -> None:
    assert validate_topic("Topic-A_1%|x") is None
    assert "blank" in (validate_topic("") or "")
    assert "illegal characters" in (validate_topic("a b") or "")
    assert "longer" in (validate_topic("a" * 128) or "")


# -- registration --------------------------------------------------------------------------------------------


async def test_resolve_namesrv_list_and_dns_names() -> None:
    calls: list[tuple[str, int]] = []

    async def resolver(host: str, port: int) -> list[str]:
        calls.append((host, port))
        if host == "gone":
            raise OSError("no such host")
        return ["10.0.0.1", "10.0.0.2", "10.0.0.1"]

    assert split_namesrv_list("a:1; b:2,c:3  a:1") == ["a:1", "b:2", "c:3"]
    addrs = await resolve_namesrv_addrs("127.0.0.1:9876;ns.svc:9876;gone:1;[::1]:9", resolver)
    assert addrs == ["127.0.0.1:9876", "10.0.0.1:9876", "10.0.0.2:9876", "[::1]:9"]
    assert calls == [("ns.svc", 9876), ("gone", 1)]
    with pytest.raises(ValueError, match="bad address 'nocolon'"):
        await resolve_namesrv_addrs("nocolon", resolver)


def test_register_body_and_crc() -> None:
    wrapper = TopicConfigSerializeWrapper({"T": TopicConfig("T", perm=6)}, DataVersion(timestamp=1, counter=2))
    body = RegisterBrokerBody(wrapper).encode()
    obj = json.loads(body)
    assert obj["topicConfigSerializeWrapper"]["topicConfigTable"]["T"]["perm"] == 6
    assert obj["topicConfigSerializeWrapper"]["dataVersion"] == {"timestamp": 1, "counter": 2}
    assert obj["filterServerList"] == []
    assert crc32_masked(body) == zlib.crc32(body) & 0x7FFFFFFF


async def test_coalescing_runner_shares_runs() -> None:
    runs = 0
    gate = asyncio.Event()

    async def action() -> None:
        nonlocal runs
        runs += 1
        await gate.wait()

    runner = CoalescingRunner(action)
    first = asyncio.create_task(runner.run())
    await asyncio.sleep(0)
    others = [asyncio.create_task(runner.run()) for _ in range(5)]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, *others)
    assert runs == 2  # the one in progress, plus one for everyone who asked meanwhile


# -- long polling ---------------------------------------------------------------------------------------------------


async def test_hold_service_wakes_on_matching_arrival_only() -> None:
    hold = PullRequestHoldService()
    tag_a = build_subscription_data("T", "A")
    req = hold.park("T", 0, 5, tag_a, 10.0)
    assert len(hold) == 1
    assert hold.notify_message_arriving("T", 1, 9, java_string_hash("A")) == 0  # other queue
    assert hold.notify_message_arriving("T", 0, 4, java_string_hash("A")) == 0  # before the offset
    assert hold.notify_message_arriving("T", 0, 5, java_string_hash("B")) == 0  # tag does not match
    assert hold.notify_message_arriving("T", 0, 5, java_string_hash("A")) == 1
    assert await req.future is WakeReason.ARRIVED
    assert len(hold) == 0


async def test_hold_service_timeout_and_shutdown() -> None:
    hold = PullRequestHoldService()
    everything = build_subscription_data("T", "*")
    req = hold.park("T", 0, 0, everything, 0.05)
    assert await asyncio.wait_for(req.future, 1.0) is WakeReason.TIMEOUT
    assert len(hold) == 0
    reqs = [hold.park("T", q, 0, everything, 30.0) for q in range(3)]
    assert hold.wake_all() == 3
    assert all(r.future.result() is WakeReason.SHUTDOWN for r in reqs)


# -- client bookkeeping ------------------------------------------------------------------------------------------------


class FakeConn:
    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.closed = False


async def test_consumer_manager_membership_and_notify() -> None:
    notified: list[tuple[str, int]] = []
    mgr = ConsumerManager(lambda g, conns: notified.append((g, len(conns))), channel_expired_timeout=10.0)
    a, b = FakeConn("1.1.1.1:1"), FakeConn("1.1.1.1:2")
    subs = [build_subscription_data("T", "*")]
    chan_a = ClientChannelInfo(a, "ca")  # type: ignore[arg-type]
    assert mgr.register_consumer("G", chan_a, "CONSUME_PASSIVELY", "CLUSTERING", "X", subs)
    assert notified == [("G", 1)]
    # the same member again: no change, no notification
    assert not mgr.register_consumer("G", ClientChannelInfo(a, "ca"), "CONSUME_PASSIVELY", "CLUSTERING", "X", subs)  # type: ignore[arg-type]
    mgr.register_consumer("G", ClientChannelInfo(b, "cb"), "CONSUME_PASSIVELY", "CLUSTERING", "X", subs)  # type: ignore[arg-type]
    assert notified[-1] == ("G", 2)
    assert mgr.get("G").client_ids() == ["ca", "cb"]  # type: ignore[union-attr]
    assert mgr.channel_closed(a) == ["G"]  # type: ignore[arg-type]
    assert notified[-1] == ("G", 1)
    # expiry
    mgr.groups["G"].channels[b].last_update -= 11  # type: ignore[index]
    dropped = mgr.scan_not_active()
    assert [(g, c.client_id) for g, c in dropped] == [("G", "cb")]
    assert mgr.get("G") is None and notified[-1] == ("G", 0)


def test_producer_manager_expiry() -> None:
    mgr = ProducerManager(channel_expired_timeout=5.0)
    conn = FakeConn("x:1")
    mgr.register_producer("P", ClientChannelInfo(conn, "p1"))  # type: ignore[arg-type]
    assert mgr.scan_not_active() == []
    mgr.groups["P"][conn].last_update -= 6  # type: ignore[index]
    assert len(mgr.scan_not_active()) == 1 and "P" not in mgr.groups


def test_rebalance_locks() -> None:
    locks = RebalanceLockManager(max_live_time=60.0)
    q0, q1 = MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)
    assert locks.try_lock_batch("G", [q0, q1], "c1") == {q0, q1}
    assert locks.try_lock_batch("G", [q0], "c2") == set()
    assert locks.try_lock_batch("G", [q0], "c1") == {q0}  # renewal
    locks.unlock_batch("G", [q0], "c2")  # not the holder: no effect
    assert locks.is_locked("G", q0, "c1")
    locks.unlock_batch("G", [q0], "c1")
    assert locks.try_lock_batch("G", [q0], "c2") == {q0}
    locks._table["G"][q1].last_update -= 61
    assert locks.try_lock_batch("G", [q1], "c2") == {q1}  # expired lock taken over
    assert MessageQueue.from_json(q1.to_json()) == q1
