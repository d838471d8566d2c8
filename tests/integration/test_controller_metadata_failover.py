"""Metadata survives a controller-mode failover (``rocket.broker.metadata.replication``), worst case,
with real processes: 3 controllers, a NameServer, 1 master + 2 slaves (``allAckInSyncStateSet``,
SYNC_FLUSH) and a 60 s ``slaveSyncInterval``, so that nothing reaches the slaves through the
periodic copy. On the master, as fast as the answers come: create a topic, create a subscription
group with settings of its own, send with SYNC_MASTER, commit consumer offsets
(UPDATE_CONSUMER_OFFSET, two-way), delete another group with its offsets; then kill -9 the master
at once. The master the controllers elect must serve the topic's route, the group's config and
the committed offsets (and not the deleted group), and a push consumer of the same group must
resume at them: nothing below a committed offset is delivered again, nothing above it is
missing."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from pathlib import Path

import aiohttp
import orjson
import pytest

from rocket.client import ConsumeFrom, ConsumeStatus, MessageExt, PushConsumer
from rocket.protocol import RequestCode
from rocket.remoting import RemotingClient, ResponseCode
from tests.integration.broker_harness import RawBroker, route
from tests.integration.failover_support import controller_group, wait_group_ready
from tests.integration.replication_support import TRANSIENT, ha_status
from tests.support import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TOPIC = "MetaT"
GROUP = "CG_META"
#: A group that commits offsets and is then deleted with them, just before the kill.
GONE = "CG_META_GONE"
QUEUES = 4
PER_QUEUE = 10
#: The offsets committed per queue just before the kill (the next message each queue would deliver).
COMMITTED = {0: 4, 1: 7, 2: 10, 3: 0}


async def test_topic_group_and_offsets_acknowledged_just_before_a_kill_9_are_on_the_new_master(
        tmp_path: Path) -> None:
    client = RemotingClient()
    try:
        with controller_group(tmp_path, extra={"slaveSyncInterval": "60000"}) as g:
            m = await wait_group_ready(g, "Warmup", client)
            raw = RawBroker(client, g.brokers[m].addr)
            started = time.monotonic()
            assert (await raw.create_topic(TOPIC, queues=QUEUES)).code == ResponseCode.SUCCESS
            resp = await raw.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps({
                "groupName": GROUP, "retryQueueNums": 1, "retryMaxTimes": 7, "consumeBroadcastEnable": True,
                "consumeEnable": True, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1}))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            bodies: dict[tuple[int, int], bytes] = {}
            for i in range(QUEUES * PER_QUEUE):
                q = i % QUEUES
                body = f"meta-{q}-{i // QUEUES}".encode()
                resp = await raw.send(TOPIC, body, queue_id=q)
                assert resp.code == ResponseCode.SUCCESS, resp.remark
                bodies[(q, int(resp.ext_fields["queueOffset"]))] = body
            for q, offset in COMMITTED.items():
                resp = await raw.call(RequestCode.UPDATE_CONSUMER_OFFSET, {
                    "consumerGroup": GROUP, "topic": TOPIC, "queueId": q, "commitOffset": offset})
                assert resp.code == ResponseCode.SUCCESS, resp.remark
                resp = await raw.call(RequestCode.UPDATE_CONSUMER_OFFSET, {
                    "consumerGroup": GONE, "topic": TOPIC, "queueId": q, "commitOffset": 1})
                assert resp.code == ResponseCode.SUCCESS, resp.remark
            # a group deleted (with its offsets) just before the kill stays deleted
            resp = await raw.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": GONE, "cleanOffset": "true"})
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            g.brokers[m].proc.send_signal(signal.SIGKILL)
            print(f"created, sent {len(bodies)}, committed {len(COMMITTED)} offsets and killed the master "
                  f"{time.monotonic() - started:.2f} s after the first request")
            g.brokers[m].proc.wait(10)

            (new,) = await eventually(lambda: g.master_box(not_index=m), 30, what="a new master",
                                      retry_on=TRANSIENT)
            nraw = RawBroker(client, g.brokers[new].addr)

            async def routed() -> bool:
                rt = await route(client, g.namesrv, TOPIC)
                return bool(rt) and any(bd["brokerAddrs"].get("0") == g.brokers[new].addr for bd in rt["brokerDatas"])

            await eventually(routed, 20, what="the topic's route to the new master", retry_on=TRANSIENT)
            rt = await route(client, g.namesrv, TOPIC)
            assert rt is not None and {qd["readQueueNums"] for qd in rt["queueDatas"]} == {QUEUES}, rt

            # it learnt them from the records it applied as a slave (the copy runs every 60 s)
            st = await ha_status(g.brokers[new])
            assert st["metadataReplication"]["recordsApplied"] > 0 and st["metadataReplication"]["active"], st
            async with aiohttp.ClientSession() as http, http.get(f"{g.brokers[new].http}/metrics") as r:
                metrics = await r.text()
            applied = re.search(r'^rocketmq_broker_ha_metadata_records_total\{direction="applied"\} (\S+)$',
                                metrics, re.M)
            assert applied is not None and float(applied.group(1)) > 0, metrics[-2000:]

            resp = await nraw.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            groups = orjson.loads(resp.body)["subscriptionGroupTable"]
            assert GROUP in groups and GONE not in groups, sorted(groups)
            assert groups[GROUP]["retryMaxTimes"] == 7 and groups[GROUP]["consumeBroadcastEnable"] is True

            for q, offset in COMMITTED.items():
                resp = await nraw.call(RequestCode.QUERY_CONSUMER_OFFSET,
                                       {"consumerGroup": GROUP, "topic": TOPIC, "queueId": q})
                assert resp.code == ResponseCode.SUCCESS and int(resp.ext_fields["offset"]) == offset, (q, resp)
                resp = await nraw.call(RequestCode.QUERY_CONSUMER_OFFSET,
                                       {"consumerGroup": GONE, "topic": TOPIC, "queueId": q})
                assert resp.code != ResponseCode.SUCCESS or int(resp.ext_fields["offset"]) != 1, (q, resp)

            # a consumer of the same group resumes where the group committed
            got: list[MessageExt] = []

            async def handler(msgs: list[MessageExt]) -> ConsumeStatus:
                got.extend(msgs)
                return ConsumeStatus.SUCCESS

            expected = {b for (q, off), b in bodies.items() if off >= COMMITTED[q]}
            consumer = PushConsumer(GROUP, g.namesrv, handler, consume_from=ConsumeFrom.FIRST_OFFSET,
                                    rebalance_interval=1.0, persist_interval=0.5, suspend_timeout=2.0)
            consumer.subscribe(TOPIC)
            await consumer.start()
            try:
                await eventually(lambda: {m.body for m in got} >= expected, 30,
                                 what="the messages above the committed offsets")
                await asyncio.sleep(1.0)  # anything delivered again would arrive by now
            finally:
                await consumer.shutdown()
            delivered = [m.body for m in got]
            again = {b for (q, off), b in bodies.items() if off < COMMITTED[q]} & set(delivered)
            print(f"new master {g.brokers[new].addr}: {len(delivered)} delivered, {len(expected)} expected, "
                  f"{len(again)} below the committed offsets")
            assert not again, sorted(again)
            assert sorted(delivered) == sorted(expected)
    finally:
        await client.close()
