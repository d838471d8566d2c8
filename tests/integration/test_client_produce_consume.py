"""Producer and PullConsumer against real NameServer and broker processes."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

import pytest

from rocket.client import (
    Admin,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    SendStatus,
    build_message,
)
from rocket.local import ClusterState
from rocket.message import decode_offset_msg_id
from tests.integration.client_support import shared_cluster
from tests.support import unique


@pytest.fixture(scope="module")
def cluster() -> ClusterState:
    return shared_cluster()


async def _topic(namesrv: str, queues: int = 4) -> str:
    topic = unique("T")
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, queue_nums=queues)
    return topic


async def _pull_all(consumer: PullConsumer, topic: str, expression: str = "*") -> list:
    out = []
    for mq in await consumer.queues(topic):
        offset = 0
        while True:
            result = await consumer.pull(mq, offset, 32, expression=expression)
            out.extend(result.messages)
            if result.status in (PullStatus.NO_NEW_MSG, PullStatus.OFFSET_ILLEGAL):
                break
            offset = result.next_begin_offset
    return out


async def test_round_trip_with_tags_keys_properties(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv)
    sent = {}
    born_floor = int(time.time() * 1000) - 1
    broker_addr = {p.name: p.addr for p in cluster.processes if p.kind == "broker"}
    last_phys: dict[str, int] = {}
    async with Producer(unique("PID"), cluster.namesrv) as producer:
        for i in range(40):
            msg = build_message(topic, f"body-{i}", tags="TagA" if i % 2 else "TagB", keys=[f"k{i}", "all"],
                                properties={"n": str(i)})
            result = await producer.send(msg)
            assert result.status is SendStatus.SEND_OK
            store_host, phys = decode_offset_msg_id(result.offset_msg_id)
            # offsetMsgId = the storing broker's address + the record's CommitLog offset, rising per broker
            broker = result.queue.broker_name
            assert store_host == broker_addr[broker], (store_host, broker_addr)
            assert phys > last_phys.get(broker, -1)
            last_phys[broker] = phys
            sent[result.msg_id] = (i, result)
    # round robin over both broker groups
    assert {r.queue.broker_name for _, r in sent.values()} == {"broker-a", "broker-b"}
    async with PullConsumer(unique("CID"), cluster.namesrv) as consumer:
        got = await _pull_all(consumer, topic)
    assert len(got) == 40
    for msg in got:
        i, result = sent[msg.msg_id]
        assert msg.body == f"body-{i}".encode()
        assert msg.tags == ("TagA" if i % 2 else "TagB")
        assert msg.keys == [f"k{i}", "all"]
        assert msg.properties["n"] == str(i)
        assert msg.topic == topic
        assert (msg.queue_id, msg.queue_offset) == (result.queue.queue_id, result.queue_offset)
        assert msg.offset_msg_id == result.offset_msg_id
        assert msg.born_timestamp >= born_floor and msg.store_timestamp >= msg.born_timestamp - 1000


async def test_auto_create_through_tbw102(cluster: ClusterState) -> None:
    topic = unique("Auto")
    async with Producer(unique("PID"), cluster.namesrv) as producer:
        results = [await producer.send(build_message(topic, f"m{i}")) for i in range(10)]
    assert all(r.ok for r in results)
    async with PullConsumer(unique("CID"), cluster.namesrv) as consumer:
        async def routed() -> bool:
            try:
                return bool(await consumer.queues(topic))
            except Exception:
                return False
        deadline = time.monotonic() + 15
        while not await routed():
            assert time.monotonic() < deadline, "auto-created topic never got a route"
            await asyncio.sleep(0.2)
        got = await _pull_all(consumer, topic)
    assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(10))


async def test_batch_send(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv)
    msgs = [build_message(topic, f"b{i}", tags="Batch", keys=f"k{i}") for i in range(32)]
    async with Producer(unique("PID"), cluster.namesrv) as producer:
        result = await producer.send_batch(msgs)
    assert result.ok and len(result.msg_ids) == 32
    assert len(result.offset_msg_id.split(",")) == 32
    async with PullConsumer(unique("CID"), cluster.namesrv) as consumer:
        got = await _pull_all(consumer, topic)
    assert [m.body for m in got] == [f"b{i}".encode() for i in range(32)]
    assert [m.queue_offset for m in got] == list(range(result.queue_offset, result.queue_offset + 32))
    assert {m.queue_id for m in got} == {result.queue.queue_id}
    assert [m.msg_id for m in got] == result.msg_ids
    assert got[5].keys == ["k5"] and got[5].tags == "Batch"


async def test_compressed_body_round_trip(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv)
    body = b"".join(f"line {i}: the quick brown fox\n".encode() for i in range(2000))  # ~60 KB
    async with Producer(unique("PID"), cluster.namesrv) as producer:
        await producer.send(build_message(topic, body))
    async with PullConsumer(unique("CID"), cluster.namesrv) as consumer:
        (msg,) = await _pull_all(consumer, topic)
    assert msg.body == body and msg.payload() == body


async def test_ordered_send_keeps_per_key_order_in_one_queue(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv)
    async with Producer(unique("PID"), cluster.namesrv) as producer:
        for i in range(100):
            key = f"order-{i % 5}"
            await producer.send_orderly(build_message(topic, f"{key}:{i}", keys=key), key)
    async with PullConsumer(unique("CID"), cluster.namesrv) as consumer:
        got = await _pull_all(consumer, topic)
    queues: dict[str, set[MessageQueue]] = defaultdict(set)
    sequences: dict[str, list[int]] = defaultdict(list)
    for msg in sorted(got, key=lambda m: (m.store_host, m.queue_id, m.queue_offset)):
        key, n = msg.body.decode().split(":")
        queues[key].add((msg.store_host, msg.queue_id))  # type: ignore[arg-type]
        sequences[key].append(int(n))
    assert len(got) == 100
    for key in sequences:
        assert len(queues[key]) == 1
        assert sequences[key] == sorted(sequences[key])


async def test_tag_filter_and_offset_moved(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv, queues=1)
    async with Producer(unique("PID"), cluster.namesrv) as producer:
        for i in range(30):
            await producer.send(build_message(topic, f"{i}", tags=("TagA", "TagB", "TagC")[i % 3]))
    async with PullConsumer(unique("CID"), cluster.namesrv) as consumer:
        got = await _pull_all(consumer, topic, "TagA || TagC")
        assert {m.tags for m in got} == {"TagA", "TagC"} and len(got) == 20
        mq = (await consumer.queues(topic))[0]
        moved = await consumer.pull(mq, 10**6, 32)
        assert moved.status is PullStatus.OFFSET_ILLEGAL
        # Java: OFFSET_OVERFLOW_BADLY corrects to minOffset when that is 0, else to maxOffset
        assert moved.next_begin_offset == (0 if moved.min_offset == 0 else moved.max_offset)
        caught_up = await consumer.pull(mq, moved.max_offset, 32)
        assert caught_up.status is PullStatus.NO_NEW_MSG


async def test_pull_consumer_commit_and_offsets(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv, queues=1)
    group = unique("CID")
    async with Producer(unique("PID"), cluster.namesrv) as producer:
        for i in range(5):
            await producer.send(build_message(topic, f"{i}"))
    async with PullConsumer(group, cluster.namesrv) as consumer:
        mqs = await consumer.queues(topic)
        for mq in mqs:
            assert await consumer.fetch_offset(mq) in (-1, 0)
            await consumer.commit(mq, 2)
            assert await consumer.fetch_offset(mq) == 2
            assert await consumer.min_offset(mq) == 0
        total = sum([await consumer.max_offset(mq) for mq in mqs])
        assert total == 5


async def test_long_poll_returns_when_a_message_arrives(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv, queues=1)
    async with PullConsumer(unique("CID"), cluster.namesrv) as consumer, \
            Producer(unique("PID"), cluster.namesrv) as producer:
        mqs = await consumer.queues(topic)
        polls = [asyncio.create_task(consumer.pull(mq, 0, 32, suspend=10.0)) for mq in mqs]
        await asyncio.sleep(0.3)
        started = time.perf_counter()
        await producer.send(build_message(topic, b"wake up"))
        done, _ = await asyncio.wait(polls, timeout=8, return_when=asyncio.FIRST_COMPLETED)
        waited = time.perf_counter() - started
        assert done, "no long poll returned"
        result = done.pop().result()
        assert result.status is PullStatus.FOUND and result.messages[0].body == b"wake up"
        assert waited < 2.0
        for task in polls:
            task.cancel()


async def test_send_oneway_and_concurrent_sends(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv, queues=2)
    async with Producer(unique("PID"), cluster.namesrv) as producer:
        for i in range(5):
            await producer.send_oneway(build_message(topic, f"oneway-{i}"))
        results = await asyncio.gather(*(producer.send(build_message(topic, f"async-{i}")) for i in range(100)))
    assert all(r.ok for r in results) and len({r.msg_id for r in results}) == 100
    async with PullConsumer(unique("CID"), cluster.namesrv) as consumer:
        deadline = time.monotonic() + 10
        while True:
            bodies = {m.body for m in await _pull_all(consumer, topic)}
            if len(bodies) == 105 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
    assert {f"oneway-{i}".encode() for i in range(5)} <= bodies
    assert len(bodies) == 105
