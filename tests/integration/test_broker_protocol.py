"""One real NameServer and one real broker process, driven with raw remoting
requests: every request code the broker serves, long polling, send-back,
delayed delivery, auto-creation, notifications and bad input."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest

from rocket.client.admin import loads_object_keys, parse_consume_stats
from rocket.message import Message, decode_offset_msg_id, decode_records, encode_batch, encode_properties
from rocket.remoting import (
    FrameDecoder,
    RemotingClient,
    RemotingCommand,
    RemotingConnectError,
    RequestCode,
    ResponseCode,
    encode,
)
from tests.integration.broker_harness import (
    BrokerProc,
    NameServerProc,
    RawBroker,
    broker_process,
    cmd,
    nameserver_process,
    records,
    route,
)
from tests.support import eventually, unique

pytestmark = pytest.mark.timeout(60)

@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("broker")


@pytest.fixture(scope="module")
def nameserver(tmp_module: Path) -> Iterator[NameServerProc]:
    with nameserver_process(tmp_module) as ns:
        yield ns


@pytest.fixture(scope="module")
def broker(tmp_module: Path, nameserver: NameServerProc) -> Iterator[BrokerProc]:
    settings = {"maxMessageSize": str(256 * 1024)}
    with broker_process(tmp_module, "broker-a", nameserver.addr, settings=settings) as proc:
        yield proc


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    remoting = RemotingClient()
    yield remoting
    await remoting.close()


@pytest.fixture
def rb(client: RemotingClient, broker: BrokerProc) -> RawBroker:
    return RawBroker(client, broker.addr)


async def new_topic(rb: RawBroker, queues: int = 4, perm: int = 6) -> str:
    topic = unique("T")
    resp = await rb.create_topic(topic, queues, perm)
    assert resp.code == 0, resp.remark
    return topic


# -- registration, routes, topics ------------------------------------------------------------------------


async def test_registered_with_tbw102_route(client: RemotingClient, nameserver: NameServerProc,
                                            broker: BrokerProc) -> None:
    data = await eventually(lambda: route(client, nameserver.addr, "TBW102"))
    (bd,) = data["brokerDatas"]
    assert bd["brokerName"] == "broker-a" and bd["cluster"] == "TestCluster"
    assert bd["brokerAddrs"]["0"] == broker.addr
    (qd,) = data["queueDatas"]
    assert qd["perm"] == 7 and qd["writeQueueNums"] == 8


async def test_create_and_delete_topic_updates_nameserver(rb: RawBroker, client: RemotingClient,
                                                          nameserver: NameServerProc) -> None:
    topic = await new_topic(rb, queues=3)
    # registration happened before the answer
    data = await route(client, nameserver.addr, topic)
    assert data is not None and data["queueDatas"][0]["readQueueNums"] == 3
    all_topics = await rb.call(RequestCode.GET_ALL_TOPIC_CONFIG)
    table = orjson.loads(all_topics.body)["topicConfigTable"]
    assert table[topic]["writeQueueNums"] == 3 and table[topic]["perm"] == 6
    resp = await rb.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
    assert resp.code == 0, resp.remark
    # as in RocketMQ, NameServers keep the route until DELETE_TOPIC_IN_NAMESRV (admin tools send both)
    table = orjson.loads((await rb.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body)["topicConfigTable"]
    assert topic not in table


async def test_create_topic_refusals(rb: RawBroker) -> None:
    bad = await rb.create_topic("bad topic")
    assert bad.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in (bad.remark or "")
    system = await rb.create_topic("SCHEDULE_TOPIC_XXXX")
    assert system.code == ResponseCode.SYSTEM_ERROR and "system topic" in (system.remark or "")


async def test_auto_create_from_tbw102(rb: RawBroker, client: RemotingClient, nameserver: NameServerProc) -> None:
    topic = unique("Auto")
    resp = await rb.send(topic, b"x", queue_nums=3)
    assert resp.code == 0, resp.remark
    table = orjson.loads((await rb.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body)["topicConfigTable"]
    assert table[topic]["readQueueNums"] == 3 and table[topic]["perm"] == 6
    data = await eventually(lambda: route(client, nameserver.addr, topic))
    assert data["queueDatas"][0]["writeQueueNums"] == 3


# -- send and pull -------------------------------------------------------------------------------------------


async def test_send_v1_v2_and_pull(rb: RawBroker, broker: BrokerProc) -> None:
    topic = await new_topic(rb)
    r1 = await rb.send(topic, b"one", tags="A", keys="k1")
    r2 = await rb.send(topic, b"two", code=RequestCode.SEND_MESSAGE_V2)
    for i, r in enumerate((r1, r2)):
        assert r.code == 0, r.remark
        assert r.ext_fields["queueId"] == "0" and r.ext_fields["queueOffset"] == str(i)
        assert r.ext_fields["MSG_REGION"] == "DefaultRegion" and r.ext_fields["TRACE_ON"] == "true"
        host, _ = decode_offset_msg_id(r.ext_fields["msgId"])
        assert host == broker.addr
    pulled = await rb.pull("G_pull", topic)
    assert pulled.code == 0 and pulled.remark == "FOUND"
    assert pulled.ext_fields["nextBeginOffset"] == "2" and pulled.ext_fields["maxOffset"] == "2"
    assert pulled.ext_fields["minOffset"] == "0" and pulled.ext_fields["suggestWhichBrokerId"] == "0"
    msgs = records(pulled)
    assert [m.body for m in msgs] == [b"one", b"two"]
    assert msgs[0].tags == "A" and msgs[0].properties["CLUSTER"] == "TestCluster"
    assert msgs[0].offset_msg_id == r1.ext_fields["msgId"]


async def test_batches_java_and_cpp(rb: RawBroker) -> None:
    topic = await new_topic(rb)
    java = await rb.send_batch(topic, [b"b0", b"b1", b"b2"])
    assert java.code == 0, java.remark
    assert len(java.ext_fields["msgId"].split(",")) == 3 and java.ext_fields["queueOffset"] == "0"
    cpp = await rb.send_batch(topic, [b"c0", b"c1"], cpp_style=True)
    assert cpp.code == 0, cpp.remark
    assert cpp.ext_fields["queueOffset"] == "3"
    msgs = records(await rb.pull("G_batch", topic))
    assert [m.body for m in msgs] == [b"b0", b"b1", b"b2", b"c0", b"c1"]
    assert msgs[1].keys == ["k1"]


async def test_pull_status_codes(rb: RawBroker) -> None:
    topic = await new_topic(rb)
    empty = await rb.pull("G_st", topic, offset=0)
    assert empty.code == ResponseCode.PULL_NOT_FOUND
    moved = await rb.pull("G_st", topic, offset=5)
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED
    for _ in range(2):
        await rb.send(topic, b"m", tags="A")
    caught_up = await rb.pull("G_st", topic, offset=2)
    assert caught_up.code == ResponseCode.PULL_NOT_FOUND and caught_up.remark == "OFFSET_OVERFLOW_ONE"
    assert caught_up.ext_fields["nextBeginOffset"] == "2"
    badly = await rb.pull("G_st", topic, offset=9)
    assert badly.code == ResponseCode.PULL_OFFSET_MOVED and badly.remark == "OFFSET_OVERFLOW_BADLY"
    nomatch = await rb.pull("G_st", topic, offset=0, subscription="B")
    assert nomatch.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert nomatch.ext_fields["nextBeginOffset"] == "2"
    bad_queue = await rb.pull("G_st", topic, queue_id=4)
    assert bad_queue.code == ResponseCode.SYSTEM_ERROR and "queueId[4] is illegal" in (bad_queue.remark or "")
    unknown = await rb.pull("G_st", unique("Nope"))
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    # without an inline subscription the group must be known from heartbeats
    no_sub = await rb.pull("G_st_none", topic, sys_flag=0)
    assert no_sub.code == ResponseCode.SUBSCRIPTION_NOT_EXIST


async def test_long_poll_wakes_on_arrival(rb: RawBroker) -> None:
    topic = await new_topic(rb)
    started = time.monotonic()
    pull = asyncio.create_task(rb.pull("G_lp", topic, sys_flag=2 | 4, suspend_ms=10_000, timeout=15))
    await asyncio.sleep(0.3)
    assert not pull.done()
    sent_at = time.monotonic()
    await rb.send(topic, b"wake up")
    resp = await asyncio.wait_for(pull, 5)
    woke_after = time.monotonic() - sent_at
    assert resp.code == 0 and [m.body for m in records(resp)] == [b"wake up"]
    assert woke_after < 1.0, f"long poll answered {woke_after:.3f} s after the send"
    assert time.monotonic() - started < 5


async def test_long_poll_timeout_answers_not_found(rb: RawBroker) -> None:
    topic = await new_topic(rb)
    started = time.monotonic()
    resp = await rb.pull("G_lpt", topic, sys_flag=2 | 4, suspend_ms=700, timeout=5)
    elapsed = time.monotonic() - started
    assert resp.code == ResponseCode.PULL_NOT_FOUND
    assert 0.6 <= elapsed < 3.0


async def test_long_poll_wakes_only_on_matching_tag(rb: RawBroker) -> None:
    topic = await new_topic(rb)
    pull = asyncio.create_task(rb.pull("G_lpf", topic, sys_flag=2 | 4, suspend_ms=10_000, subscription="A",
                                       timeout=15))
    await asyncio.sleep(0.2)
    await rb.send(topic, b"b", tags="B")
    await asyncio.sleep(0.3)
    assert not pull.done(), "a non-matching message woke the pull"
    await rb.send(topic, b"a", tags="A")
    resp = await asyncio.wait_for(pull, 5)
    assert resp.code == 0 and [m.body for m in records(resp)] == [b"a"]


async def test_parked_pull_dropped_when_client_goes(broker: BrokerProc) -> None:
    c1, c2 = RemotingClient(), RemotingClient()
    try:
        r1, r2 = RawBroker(c1, broker.addr), RawBroker(c2, broker.addr)
        topic = await new_topic(r2)
        task = asyncio.create_task(r1.pull("G_gone", topic, sys_flag=6, suspend_ms=20_000, timeout=30))

        async def parked() -> int:
            info = orjson.loads((await r2.call(RequestCode.GET_BROKER_RUNTIME_INFO)).body)["table"]
            return int(info["parkedPullRequests"])

        async def none_parked() -> bool:
            return await parked() == 0

        await eventually(parked)
        await c1.close()
        with pytest.raises(RemotingConnectError):
            await task
        await eventually(none_parked)
    finally:
        await c1.close()
        await c2.close()


# -- offsets ---------------------------------------------------------------------------------------------------


async def test_consumer_offsets_and_q9(rb: RawBroker) -> None:
    topic = await new_topic(rb)
    group = unique("G_off")
    fresh = await rb.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": 0})
    assert fresh.code == 0 and fresh.ext_fields["offset"] == "0"  # ConsumerManageProcessor.queryConsumerOffset
    upd = await rb.call(RequestCode.UPDATE_CONSUMER_OFFSET,
                        {"consumerGroup": group, "topic": topic, "queueId": 0, "commitOffset": 7})
    assert upd.code == 0
    got = await rb.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": 0})
    assert got.ext_fields["offset"] == "7"
    # a pull with the COMMIT_OFFSET bit stores its commitOffset
    await rb.pull(group, topic, queue_id=1, sys_flag=1 | 4, commit_offset=3)
    got = await rb.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": 1})
    assert got.ext_fields["offset"] == "3"
    all_offsets = orjson.loads((await rb.call(RequestCode.GET_ALL_CONSUMER_OFFSET)).body)
    assert f"{topic}@{group}" in all_offsets["offsetTable"]


async def test_a_later_offset_update_wins_over_an_earlier_pull_commit_in_the_same_read(
        rb: RawBroker, broker: BrokerProc) -> None:
    """A consumer's last pull carries an older ``commitOffset`` (COMMIT_OFFSET bit) and is parked;
    its final UPDATE_CONSUMER_OFFSET follows on the same connection. When both frames arrive in one
    read (a busy broker), they must still take effect in order: the update wins. (The pull used to
    run in a task of its own, after the update, and put the stale offset back: a push consumer's
    final offsets were lost at shutdown.)"""
    topic = await new_topic(rb, queues=1)
    for _ in range(10):
        await rb.send(topic, b"m")
    host, port = broker.addr.split(":")
    for trial in range(5):
        group = unique("G_order")
        pull = cmd(RequestCode.PULL_MESSAGE, {
            "consumerGroup": group, "topic": topic, "queueId": 0, "queueOffset": 10, "maxMsgNums": 32,
            "sysFlag": 1 | 2 | 4, "commitOffset": 4, "suspendTimeoutMillis": 500, "subscription": "*",
            "subVersion": 0,
        })
        update = cmd(RequestCode.UPDATE_CONSUMER_OFFSET,
                     {"consumerGroup": group, "topic": topic, "queueId": 0, "commitOffset": 10})
        pull.opaque, update.opaque = 1, 2
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(encode(pull) + encode(update))  # one write: both frames in one read
            await writer.drain()
            decoder = FrameDecoder()
            answered: dict[int, int] = {}
            async with asyncio.timeout(10):
                while len(answered) < 2:  # the update's answer, then the parked pull's (after 0.5 s)
                    chunk = await reader.read(65536)
                    assert chunk, "the broker closed the connection"
                    for frame in decoder.feed(chunk):
                        answered[frame.opaque] = frame.code
            assert answered == {update.opaque: ResponseCode.SUCCESS, pull.opaque: ResponseCode.PULL_NOT_FOUND}
        finally:
            writer.close()
        got = await rb.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": 0})
        assert got.ext_fields["offset"] == "10", f"trial {trial}: the earlier pull's commitOffset 4 won"


async def test_offset_queries(rb: RawBroker) -> None:
    topic = await new_topic(rb)
    before = int(time.time() * 1000)
    for i in range(3):
        await rb.send(topic, f"m{i}".encode())
        await asyncio.sleep(0.01)
    q = {"topic": topic, "queueId": 0}
    assert (await rb.call(RequestCode.GET_MAX_OFFSET, q)).ext_fields["offset"] == "3"
    assert (await rb.call(RequestCode.GET_MIN_OFFSET, q)).ext_fields["offset"] == "0"
    earliest = int((await rb.call(RequestCode.GET_EARLIEST_MSG_STORETIME, q)).ext_fields["timestamp"])
    assert before - 1000 <= earliest <= int(time.time() * 1000)
    found = await rb.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**q, "timestamp": earliest})
    assert found.ext_fields["offset"] == "0"
    unknown = await rb.call(RequestCode.GET_MAX_OFFSET, {"topic": unique("Nope"), "queueId": 0})
    assert unknown.code == 0 and unknown.ext_fields["offset"] == "0"
    assert int((await rb.call(RequestCode.QUERY_BROKER_OFFSET)).ext_fields["offset"]) > 0


# -- clients ---------------------------------------------------------------------------------------------------


async def test_heartbeat_consumer_list_notify_and_unregister(broker: BrokerProc, client: RemotingClient,
                                                             nameserver: NameServerProc) -> None:
    group = unique("CG")
    topic = unique("HT")
    notices: dict[str, list[str]] = {"a": [], "b": []}

    def recorder(name: str):  # type: ignore[no-untyped-def]
        def handler(request: RemotingCommand, conn: object) -> None:
            notices[name].append(request.ext_fields.get("consumerGroup", ""))

        return handler

    ca, cb = RemotingClient(), RemotingClient()
    ca.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, recorder("a"))
    cb.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, recorder("b"))
    try:
        a, b = RawBroker(ca, broker.addr), RawBroker(cb, broker.addr)
        topics = [topic, f"%RETRY%{group}"]
        assert (await a.heartbeat("client-a", [(group, topics)], ["PID_HB"])).code == 0
        # the heartbeat created the retry topic and was answered once the NameServer had it (as
        # Apache's broker: registerBrokerAll before the answer), so a rebalance now finds its queues
        retry_route = await route(client, nameserver.addr, f"%RETRY%{group}")
        assert retry_route is not None and [q["brokerName"] for q in retry_route["queueDatas"]] == ["broker-a"]
        await eventually(lambda: notices["a"] == [group])
        listing = await a.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
        assert orjson.loads(listing.body) == {"consumerIdList": ["client-a"]}
        # the C++ form joins the group: both members are told
        assert (await b.heartbeat("client-b", [(group, topics)], cpp=True)).code == 0
        await eventually(lambda: len(notices["a"]) == 2 and len(notices["b"]) == 1)
        listing = await a.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
        assert orjson.loads(listing.body)["consumerIdList"] == ["client-a", "client-b"]
        # a repeated heartbeat changes nothing
        await a.heartbeat("client-a", [(group, topics)])
        await asyncio.sleep(0.2)
        assert len(notices["a"]) == 2
        # retry topic created and registered
        table = orjson.loads((await a.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body)["topicConfigTable"]
        assert table[f"%RETRY%{group}"]["readQueueNums"] == 1
        conns = await a.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
        assert {c["clientId"] for c in orjson.loads(conns.body)["connectionSet"]} == {"client-a", "client-b"}
        # unregister b: a is told
        unreg = await b.call(RequestCode.UNREGISTER_CLIENT,
                             {"clientID": "client-b", "consumerGroup": group, "producerGroup": ""})
        assert unreg.code == 0
        await eventually(lambda: len(notices["a"]) == 3)
        # a's connection closes: the group is empty at once
        await ca.close()
        gone = await eventually(lambda: _consumer_list_code(b, group, ResponseCode.SYSTEM_ERROR))
        assert "no consumer for this group" in (gone.remark or "")
    finally:
        await ca.close()
        await cb.close()


async def test_heartbeat_creating_a_retry_topic_is_answered_once_the_nameserver_has_it(
        rb: RawBroker, client: RemotingClient, nameserver: NameServerProc) -> None:
    """As Apache's broker (``createTopicInSendMessageBackMethod`` calls ``registerBrokerAll``
    before the heartbeat is answered): with the NameServer stopped, a heartbeat that creates
    ``%RETRY%<group>`` is not answered; once it runs again, the answer comes and the route is
    there. A heartbeat that creates nothing does not wait for the NameServer, and one that does
    waits at most ``REGISTRATION_WAIT_S`` (1 s) for it, so that a NameServer that does not answer
    does not make the client's heartbeat time out."""
    group = unique("CGreg")
    assert await route(client, nameserver.addr, "TBW102") is not None  # connected before the stop
    nameserver.proc.send_signal(signal.SIGSTOP)
    try:
        beat = asyncio.ensure_future(rb.heartbeat("client-reg", [(group, [f"%RETRY%{group}"])]))
        await asyncio.sleep(0.3)  # (well inside REGISTRATION_WAIT_S, 1 s: before the fix the answer took ms)
        assert not beat.done(), "answered before the new retry topic was registered"
    finally:
        nameserver.proc.send_signal(signal.SIGCONT)
    assert (await beat).code == 0
    retry_route = await route(client, nameserver.addr, f"%RETRY%{group}")
    assert retry_route is not None and [q["brokerName"] for q in retry_route["queueDatas"]] == ["broker-a"]
    nameserver.proc.send_signal(signal.SIGSTOP)
    try:
        again = await asyncio.wait_for(rb.heartbeat("client-reg", [(group, [f"%RETRY%{group}"])]), 2.0)
    finally:
        nameserver.proc.send_signal(signal.SIGCONT)
    assert again.code == 0
    late = unique("CGlate")
    nameserver.proc.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        answered = await asyncio.wait_for(rb.heartbeat("client-reg", [(late, [f"%RETRY%{late}"])]), 2.5)
        waited = time.monotonic() - started
    finally:
        nameserver.proc.send_signal(signal.SIGCONT)
    assert answered.code == 0 and 0.9 <= waited < 2.5, waited
    await eventually(lambda: route(client, nameserver.addr, f"%RETRY%{late}"))


async def _consumer_list_code(rb: RawBroker, group: str, code: int) -> RemotingCommand | None:
    resp = await rb.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    return resp if resp.code == code else None


async def test_pull_with_heartbeat_subscription(rb: RawBroker) -> None:
    topic = await new_topic(rb)
    group = unique("CGs")
    await rb.send(topic, b"x")
    assert (await rb.heartbeat("c-sub", [(group, [topic])])).code == 0
    resp = await rb.pull(group, topic, sys_flag=0)
    assert resp.code == 0 and len(records(resp)) == 1


# -- send back, retry, DLQ, delay ---------------------------------------------------------------------------------


async def test_send_back_to_retry_then_dlq(rb: RawBroker) -> None:
    topic = await new_topic(rb)
    group = unique("CGr")
    sent = await rb.send(topic, b"fail me", tags="T1", keys="retry-key")
    (original,) = records(await rb.pull(group, topic))
    back = await rb.call(RequestCode.CONSUMER_SEND_MSG_BACK,
                         {"offset": original.physical_offset, "group": group, "delayLevel": 0})
    assert back.code == 0, back.remark
    retry = f"%RETRY%{group}"
    # level 3 + 0 = 400 ms with the test's delay levels
    started = time.monotonic()
    resp = await eventually(lambda: _found(rb, group, retry), timeout=5)
    assert time.monotonic() - started < 3
    (copy,) = records(resp)
    assert copy.body == b"fail me" and copy.reconsume_times == 1 and copy.tags == "T1"
    assert copy.properties["RETRY_TOPIC"] == topic
    assert copy.properties["ORIGIN_MESSAGE_ID"] == sent.ext_fields["msgId"]
    assert "DELAY" not in copy.properties
    # max one attempt for this group: the next send-back goes to the DLQ at once
    body = orjson.dumps({"groupName": group, "retryMaxTimes": 1, "retryQueueNums": 1, "consumeEnable": True})
    assert (await rb.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)).code == 0
    groups = orjson.loads((await rb.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body)
    assert groups["subscriptionGroupTable"][group]["retryMaxTimes"] == 1
    back = await rb.call(RequestCode.CONSUMER_SEND_MSG_BACK,
                         {"offset": copy.physical_offset, "group": group, "delayLevel": 0})
    assert back.code == 0, back.remark
    dlq = await eventually(lambda: _found(rb, group, f"%DLQ%{group}"), timeout=3)
    (dead,) = records(dlq)
    assert dead.body == b"fail me" and dead.reconsume_times == 2
    assert dead.properties["ORIGIN_MESSAGE_ID"] == sent.ext_fields["msgId"]
    bad = await rb.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": 987654321, "group": group, "delayLevel": 0})
    assert bad.code == ResponseCode.SYSTEM_ERROR and "987654321" in (bad.remark or "")


async def test_send_back_negative_level_goes_to_dlq(rb: RawBroker) -> None:
    topic = await new_topic(rb)
    group = unique("CGd")
    await rb.send(topic, b"dead")
    (msg,) = records(await rb.pull(group, topic))
    back = await rb.call(RequestCode.CONSUMER_SEND_MSG_BACK,
                         {"offset": msg.physical_offset, "group": group, "delayLevel": -1})
    assert back.code == 0
    (dead,) = records(await eventually(lambda: _found(rb, group, f"%DLQ%{group}"), timeout=3))
    assert dead.body == b"dead"


async def test_retry_topic_send_over_max_goes_to_dlq(rb: RawBroker) -> None:
    group = unique("CGs")
    assert (await rb.heartbeat("c-retry", [(group, [f"%RETRY%{group}"])])).code == 0
    resp = await rb.send(f"%RETRY%{group}", b"again", reconsume_times=3, max_reconsume_times=3)
    assert resp.code == 0, resp.remark
    (dead,) = records(await eventually(lambda: _found(rb, group, f"%DLQ%{group}"), timeout=3))
    assert dead.body == b"again"


async def _found(rb: RawBroker, group: str, topic: str) -> RemotingCommand | None:
    resp = await rb.pull(group, topic)
    return resp if resp.code == 0 else None


async def test_delayed_delivery(rb: RawBroker) -> None:
    topic = await new_topic(rb)
    started = time.monotonic()
    resp = await rb.send(topic, b"later", props={"DELAY": "2"})
    assert resp.code == 0, resp.remark
    early = await rb.pull("G_delay", topic)
    assert early.code == ResponseCode.PULL_NOT_FOUND
    delivered = await eventually(lambda: _found(rb, "G_delay", topic), timeout=5)
    elapsed = time.monotonic() - started
    (msg,) = records(delivered)
    assert msg.body == b"later" and msg.properties["REAL_TOPIC"] == topic and "DELAY" not in msg.properties
    assert 0.25 <= elapsed < 3.0
    table = orjson.loads((await rb.call(RequestCode.GET_ALL_DELAY_OFFSET)).body)["offsetTable"]
    assert int(table["2"]) >= 1


# -- queries, stats, config, locks ---------------------------------------------------------------------------


async def test_query_message_and_view_by_id(rb: RawBroker) -> None:
    topic = await new_topic(rb)
    key = unique("key")
    sent = await rb.send(topic, b"findme", keys=key)
    _, phys = decode_offset_msg_id(sent.ext_fields["msgId"])
    now = int(time.time() * 1000)
    query = {"topic": topic, "key": key, "maxNum": 32, "beginTimestamp": 0, "endTimestamp": now + 60_000}
    found = await eventually(lambda: _query(rb, query))
    (msg,) = list(decode_records(found.body))
    assert msg.body == b"findme"
    assert "indexLastUpdateTimestamp" in found.ext_fields and "indexLastUpdatePhyoffset" in found.ext_fields
    missing = await rb.call(RequestCode.QUERY_MESSAGE, {**query, "key": "nope-" + key})
    assert missing.code == ResponseCode.QUERY_NOT_FOUND
    view = await rb.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys})
    assert view.code == 0 and next(iter(decode_records(view.body))).body == b"findme"
    bad = await rb.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": 10**12})
    assert bad.code == ResponseCode.SYSTEM_ERROR and "can not find message by the offset" in (bad.remark or "")


async def _query(rb: RawBroker, query: dict[str, object]) -> RemotingCommand | None:
    resp = await rb.call(RequestCode.QUERY_MESSAGE, query)
    return resp if resp.code == 0 else None


async def test_runtime_info_and_consume_stats(rb: RawBroker) -> None:
    topic = await new_topic(rb, queues=2)
    group = unique("CGstats")
    for _ in range(5):
        await rb.send(topic, b"s", queue_id=1)
    await rb.pull(group, topic, queue_id=1, max_nums=2)
    await rb.call(RequestCode.UPDATE_CONSUMER_OFFSET,
                  {"consumerGroup": group, "topic": topic, "queueId": 1, "commitOffset": 2})
    info = orjson.loads((await rb.call(RequestCode.GET_BROKER_RUNTIME_INFO)).body)["table"]
    assert info["brokerVersionDesc"] == "V4_9_8" and int(info["commitLogMaxOffset"]) > 0
    assert all(isinstance(v, str) for v in info.values())
    stats = await rb.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})
    assert stats.code == 0
    queues, tps = parse_consume_stats(stats.body)  # the project's admin client reads it
    by_queue = {q.queue.queue_id: q for q in queues}
    assert by_queue[1].broker_offset == 5 and by_queue[1].consumer_offset == 2 and by_queue[1].lag == 3
    assert by_queue[0].lag == 0 and tps > 0
    listing = loads_object_keys(stats.body)["offsetList"]  # fastjson's object keys in offsetTable
    assert {e["messageQueue"]["queueId"] for e in listing} == {0, 1}
    topic_stats = loads_object_keys((await rb.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})).body)
    assert {e["messageQueue"]["queueId"]: e["maxOffset"] for e in topic_stats["offsetList"]} == {0: 0, 1: 5}


async def test_broker_config_get_and_update(rb: RawBroker, client: RemotingClient,
                                            nameserver: NameServerProc) -> None:
    topic = await new_topic(rb)
    got = await rb.call(RequestCode.GET_BROKER_CONFIG)
    text = got.body.decode()
    assert "brokerName=broker-a" in text and "brokerClusterName=TestCluster" in text
    assert "counter" in got.ext_fields["version"]
    try:
        upd = await rb.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=4\n")
        assert upd.code == 0, upd.remark
        data = await route(client, nameserver.addr, topic)
        assert data is not None and data["queueDatas"][0]["perm"] == 4  # re-registered before answering
        refused = await rb.send(topic, b"x")
        assert refused.code == ResponseCode.NO_PERMISSION and "forbidden" in (refused.remark or "")
        assert "brokerPermission=4" in (await rb.call(RequestCode.GET_BROKER_CONFIG)).body.decode()
    finally:
        restore = await rb.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=6\n")
        assert restore.code == 0
    data = await route(client, nameserver.addr, topic)
    assert data is not None and data["queueDatas"][0]["perm"] == 6
    assert (await rb.send(topic, b"x")).code == 0
    unknown = await rb.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"noSuchSetting=1\n")
    assert unknown.code == ResponseCode.SYSTEM_ERROR and "noSuchSetting" in (unknown.remark or "")
    bad = await rb.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=banana\n")
    assert bad.code == ResponseCode.SYSTEM_ERROR


async def test_lock_and_unlock_batch_mq(rb: RawBroker) -> None:
    mqs = [{"topic": "TL", "brokerName": "broker-a", "queueId": q} for q in range(2)]
    body = orjson.dumps({"consumerGroup": "GL", "clientId": "c1", "mqSet": mqs})
    locked = await rb.call(RequestCode.LOCK_BATCH_MQ, body=body)
    assert locked.code == 0 and len(orjson.loads(locked.body)["lockOKMQSet"]) == 2
    other = await rb.call(RequestCode.LOCK_BATCH_MQ,
                          body=orjson.dumps({"consumerGroup": "GL", "clientId": "c2", "mqSet": mqs[:1]}))
    assert orjson.loads(other.body)["lockOKMQSet"] == []
    assert (await rb.call(RequestCode.UNLOCK_BATCH_MQ, body=body)).code == 0
    other = await rb.call(RequestCode.LOCK_BATCH_MQ,
                          body=orjson.dumps({"consumerGroup": "GL", "clientId": "c2", "mqSet": mqs[:1]}))
    assert len(orjson.loads(other.body)["lockOKMQSet"]) == 1
    bad = await rb.call(RequestCode.LOCK_BATCH_MQ, body=b"[]")
    assert bad.code == ResponseCode.SYSTEM_ERROR


async def test_vip_port_serves_all_but_pull(client: RemotingClient, broker: BrokerProc, rb: RawBroker) -> None:
    topic = await new_topic(rb)
    vip = RawBroker(client, broker.vip_addr)
    assert (await vip.send(topic, b"via vip")).code == 0
    pulled = await vip.pull("G_vip", topic)
    assert pulled.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert records(await rb.pull("G_vip", topic))[0].body == b"via vip"


# -- bad input ------------------------------------------------------------------------------------------------------


async def test_bad_inputs_get_codes_and_the_connection_survives(rb: RawBroker) -> None:
    topic = await new_topic(rb)
    conn = await rb.connection()

    unknown = await rb.send(unique("Missing"), b"x", default_topic="NoTemplate")
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    missing = unknown.remark or ""
    assert missing.startswith("topic[Missing") and missing.endswith("not exist, apply first please!")

    too_big = await rb.send(topic, b"x" * (256 * 1024 + 1))
    assert too_big.code == ResponseCode.MESSAGE_ILLEGAL and "body size over max value" in (too_big.remark or "")

    long_props = await rb.send(topic, b"x", props={"big": "p" * 40_000})
    assert long_props.code == ResponseCode.MESSAGE_ILLEGAL and "properties" in (long_props.remark or "")

    wrong_queue = await rb.send(topic, b"x", queue_id=99)
    assert wrong_queue.code == ResponseCode.SYSTEM_ERROR and "queueId[99] is illegal" in (wrong_queue.remark or "")

    corrupt = await rb.send_batch(topic, [], raw_body=b"\x00\x00\x00\x30garbage")
    assert corrupt.code == ResponseCode.MESSAGE_ILLEGAL and "batch body is corrupt" in (corrupt.remark or "")

    # batches of timer messages are refused (rocket.broker.timer.batch_timer_refusal), items or the
    # batch's own properties, Java (320) and C++ style (10 + batch flag); nothing is stored
    before = (await rb.send(topic, b"mark")).ext_fields["queueOffset"]
    due = str(int(time.time() * 1000) + 60_000)
    item = encode_batch([Message(topic, b"t0", properties={"TIMER_DELIVER_MS": due}), Message(topic, b"t1")])
    for cpp_style in (False, True):
        refused = await rb.send_batch(topic, [], raw_body=item, cpp_style=cpp_style)
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL, refused
        assert "batch message 0 cannot be timer messages (TIMER_DELIVER_MS is set)" in (refused.remark or "")
    plain = encode_batch([Message(topic, b"p0")])
    for key in ("TIMER_DELAY_SEC", "TIMER_DELAY_MS", "__STARTDELIVERTIME"):
        refused = await rb.send_batch(topic, [], raw_body=plain, properties=f"{key}\x0130")
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL and f"({key} is set)" in (refused.remark or ""), refused
    after = (await rb.send(topic, b"mark")).ext_fields["queueOffset"]
    assert int(after) == int(before) + 1

    read_only = await new_topic(rb, perm=4)
    no_perm = await rb.send(read_only, b"x")
    assert no_perm.code == ResponseCode.NO_PERMISSION and "forbidden" in (no_perm.remark or "")

    forbidden = await rb.send("SCHEDULE_TOPIC_XXXX", b"x")
    assert forbidden.code == ResponseCode.NO_PERMISSION

    illegal_name = await rb.send("bad topic!", b"x")
    assert illegal_name.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in (illegal_name.remark or "")

    missing_field = await rb.call(RequestCode.SEND_MESSAGE, {"producerGroup": "P", "topic": topic})
    assert missing_field.code == ResponseCode.SYSTEM_ERROR and "defaultTopic" in (missing_field.remark or "")

    bad_heartbeat = await rb.call(RequestCode.HEART_BEAT, body=b"{not json")
    assert bad_heartbeat.code == ResponseCode.SYSTEM_ERROR and "heartbeat" in (bad_heartbeat.remark or "")

    unsupported = await rb.call(999)
    assert unsupported.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED

    bad_sub = await rb.pull("G_bad", topic, subscription="|| ||")
    assert bad_sub.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED

    sql = await rb.call(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "G_bad", "topic": topic, "queueId": 0, "queueOffset": 0, "maxMsgNums": 1, "sysFlag": 4,
        "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "a > 1", "subVersion": 0,
        "expressionType": "SQL92",
    })
    assert sql.code == ResponseCode.SYSTEM_ERROR and "SQL92" in (sql.remark or "")

    # the same connection still works
    assert (await rb.connection()) is conn and not conn.closed
    ok = await rb.send(topic, b"still fine")
    assert ok.code == 0


async def test_c_plus_plus_send_shape(rb: RawBroker) -> None:
    """Numbers as JSON numbers and string booleans, extra keys, a trailing property separator."""
    topic = await new_topic(rb)
    ext = {
        "producerGroup": "PID_CPP", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": 1, "sysFlag": 0, "bornTimestamp": str(int(time.time() * 1000)), "flag": 0,
        "properties": encode_properties({"KEYS": "key1", "TAGS": "TagA", "WAIT": "true"}) + "\x02",
        "reconsumeTimes": "0", "unitMode": "0", "batch": "0", "OnsChannel": "ALIYUN", "AccessKey": "",
        "Signature": "abc",
    }
    resp = await rb.client.invoke(rb.addr, RemotingCommand(code=10, ext_fields=ext, body=b"cpp", language="CPP",
                                                          version=63), 5)
    assert resp.code == 0 and resp.ext_fields["queueId"] == "1"
    (msg,) = records(await rb.pull("G_cpp", topic, queue_id=1))
    assert msg.tags == "TagA" and msg.keys == ["key1"]



async def test_delete_subscription_group_and_check_client_config(rb: RawBroker) -> None:
    group = unique("CGdel")
    body = orjson.dumps({"groupName": group, "retryMaxTimes": 3})
    assert (await rb.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)).code == 0
    await rb.call(RequestCode.UPDATE_CONSUMER_OFFSET,
                  {"consumerGroup": group, "topic": "SELF_TEST_TOPIC", "queueId": 0, "commitOffset": 1})
    gone = await rb.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": group, "cleanOffset": "true"})
    assert gone.code == 0
    table = orjson.loads((await rb.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body)
    assert group not in table["subscriptionGroupTable"]
    offsets = orjson.loads((await rb.call(RequestCode.GET_ALL_CONSUMER_OFFSET)).body)["offsetTable"]
    assert f"SELF_TEST_TOPIC@{group}" not in offsets
    bad = await rb.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b"{}")
    assert bad.code == ResponseCode.SYSTEM_ERROR
    tag = orjson.dumps({"group": group, "subscriptionData": {"topic": "T", "subString": "*", "expressionType": "TAG"}})
    assert (await rb.call(RequestCode.CHECK_CLIENT_CONFIG, body=tag)).code == 0
    sql = orjson.dumps({"group": group, "subscriptionData": {"topic": "T", "subString": "a>1",
                                                             "expressionType": "SQL92"}})
    assert (await rb.call(RequestCode.CHECK_CLIENT_CONFIG, body=sql)).code == ResponseCode.SYSTEM_ERROR


# -- the requests of mqadmin's operational commands (the tools themselves: tests/compat/test_mqadmin.py) --


async def test_admin_tool_requests_refuse_clearly(rb: RawBroker) -> None:
    """Error paths of the mqadmin requests: each answers a code and a remark naming what is missing."""
    topic = await new_topic(rb, 2)
    running = await rb.call(RequestCode.GET_CONSUMER_RUNNING_INFO,
                            {"consumerGroup": "G_none", "clientId": "10.0.0.1@x", "jstackEnable": "false"})
    assert running.code == ResponseCode.SYSTEM_ERROR and "not online" in (running.remark or "")
    direct = await rb.call(RequestCode.CONSUME_MESSAGE_DIRECTLY,
                           {"consumerGroup": "G_none", "clientId": "c", "msgId": "not-hex"})
    assert direct.code == ResponseCode.SYSTEM_ERROR and "msgId" in (direct.remark or "")
    cq = await rb.call(RequestCode.QUERY_CONSUME_QUEUE, {"topic": topic, "queueId": 7, "index": 0, "count": 5})
    assert cq.code == ResponseCode.SYSTEM_ERROR and f"7@{topic}" in (cq.remark or "")
    no_topic = await rb.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                             {"topic": unique("nope"), "group": "G", "timestamp": 0, "isForce": "true"})
    assert no_topic.code == ResponseCode.SYSTEM_ERROR and "no topic in this broker" in (no_topic.remark or "")
    no_group = await rb.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                             {"topic": topic, "group": unique("G"), "timestamp": 0, "isForce": "true"})
    assert no_group.code == ResponseCode.SYSTEM_ERROR and "not exist" in (no_group.remark or "")
    group = unique("G")
    for q in range(2):
        ok = await rb.call(RequestCode.UPDATE_CONSUMER_OFFSET,
                           {"consumerGroup": group, "topic": topic, "queueId": q, "commitOffset": 0})
        assert ok.code == 0
    offline = await rb.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                            {"topic": topic, "group": group, "timestamp": -1, "isForce": "true"})
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE, offline.remark
    producers = await rb.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": unique("PG")})
    assert producers.code == ResponseCode.SYSTEM_ERROR and "not exist" in (producers.remark or "")
    missing = await rb.call(RequestCode.GET_TOPIC_CONFIG, {"topic": unique("nope")})
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST
    found = orjson.loads((await rb.call(RequestCode.GET_TOPIC_CONFIG, {"topic": topic})).body)
    assert found["topicName"] == topic and found["readQueueNums"] == 2
    who = orjson.loads((await rb.call(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})).body)
    assert who == {"groupList": [group]}
    first = unique("ok")
    bad_list = await rb.call(RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=orjson.dumps(
        {"topicConfigList": [{"topicName": first}, {"topicName": "bad name"}]}))
    assert bad_list.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in (bad_list.remark or "")
    none_made = await rb.call(RequestCode.GET_TOPIC_CONFIG, {"topic": first})
    assert none_made.code == ResponseCode.TOPIC_NOT_EXIST  # all or nothing
    stats = await rb.call(RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": topic})
    assert stats.code == ResponseCode.SYSTEM_ERROR and "not exist" in (stats.remark or "")
