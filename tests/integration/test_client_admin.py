"""Admin calls against real processes: topics, cluster list, lag, write permission."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from rocket.client import Admin, MQClient, Producer, PullConsumer, TopicRouteError, build_message
from rocket.local import ClusterState
from tests.integration.client_support import shared_cluster
from tests.support import eventually, unique


@pytest.fixture(scope="module")
def cluster() -> ClusterState:
    return shared_cluster()


async def test_create_list_delete_topic(cluster: ClusterState) -> None:
    topic = unique("AdminT")
    async with Admin(cluster.namesrv) as admin:
        brokers = await admin.create_topic(topic, queue_nums=3)
        assert brokers == ["broker-a", "broker-b"]
        route = await admin.topic_route(topic)
        assert sorted((q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas) == [
            ("broker-a", 3, 3, 6), ("broker-b", 3, 3, 6)]
        assert topic in await admin.topic_list()
        assert await admin.delete_topic(topic) == ["broker-a", "broker-b"]
        with pytest.raises(TopicRouteError):
            await admin.topic_route(topic)
        assert topic not in await admin.topic_list()


async def test_create_topic_on_unknown_cluster_fails(cluster: ClusterState) -> None:
    async with Admin(cluster.namesrv) as admin:
        with pytest.raises(KeyError):
            await admin.create_topic(unique("X"), cluster="NoSuchCluster")


async def test_cluster_list(cluster: ClusterState) -> None:
    async with Admin(cluster.namesrv) as admin:
        brokers = await admin.cluster_list()
    assert [(b.cluster, b.broker_name, b.broker_id, b.role) for b in brokers] == [
        ("DefaultCluster", "broker-a", 0, "MASTER"), ("DefaultCluster", "broker-b", 0, "MASTER")]
    for b in brokers:
        assert b.error is None and b.runtime, b
    addrs = {p.name: p.addr for p in cluster.processes}
    assert {b.broker_name: b.addr.rsplit(":", 1)[1] for b in brokers} == {
        n: addrs[n].rsplit(":", 1)[1] for n in ("broker-a", "broker-b")}


async def test_consumer_lag_from_consume_stats_and_from_offsets(cluster: ClusterState) -> None:
    topic = unique("LagT")
    group = unique("CID")
    async with Admin(cluster.namesrv) as admin:
        await admin.create_topic(topic, queue_nums=2)
        async with Producer(unique("PID"), cluster.namesrv) as producer:
            for i in range(40):
                await producer.send(build_message(topic, f"{i}"))
        async with PullConsumer(group, cluster.namesrv) as consumer:
            mqs = await consumer.queues(topic)
            for mq in mqs:
                max_offset = await consumer.max_offset(mq)
                await consumer.commit(mq, max_offset // 2)
        lag = await admin.consumer_lag(group, topic)
        assert len(lag.queues) == 4
        assert sum(q.broker_offset for q in lag.queues) == 40
        assert lag.total_lag == sum(q.broker_offset - q.broker_offset // 2 for q in lag.queues)
        fallback = await admin._lag_from_offsets(group, [topic], None)
        assert sorted((q.queue, q.broker_offset, q.consumer_offset) for q in fallback) == sorted(
            (q.queue, q.broker_offset, q.consumer_offset) for q in lag.queues)


async def test_wipe_write_perm_moves_producers_to_the_other_group(cluster: ClusterState) -> None:
    topic = unique("PermT")
    async with Admin(cluster.namesrv) as admin:
        await admin.create_topic(topic, queue_nums=2)
        async with Producer(unique("PID"), cluster.namesrv, poll_namesrv_interval=0.5) as producer:
            first = Counter([(await producer.send(build_message(topic, "x"))).queue.broker_name for _ in range(8)])
            assert set(first) == {"broker-a", "broker-b"}
            try:
                counts = await admin.wipe_write_perm("broker-a")
                assert all(isinstance(v, int) and v >= 1 for v in counts.values()), counts
                route = await admin.topic_route(topic)
                assert {q.broker_name: q.perm for q in route.queue_datas}["broker-a"] == 4

                async def only_b() -> bool:
                    sent = [(await producer.send(build_message(topic, "y"))).queue.broker_name for _ in range(4)]
                    return set(sent) == {"broker-b"}

                await eventually(only_b, 10, interval=0.3, what="sends to leave broker-a")
            finally:
                await admin.add_write_perm("broker-a")
            await asyncio.sleep(1.2)
            after = Counter([(await producer.send(build_message(topic, "z"))).queue.broker_name for _ in range(8)])
            assert set(after) == {"broker-a", "broker-b"}


async def test_nameserver_failover_with_one_dead_address(cluster: ClusterState) -> None:
    from tests.support import free_port

    client = MQClient(f"127.0.0.1:{free_port()};{cluster.namesrv}")
    client._ns_index = 0
    try:
        with pytest.raises(TopicRouteError):
            await client.fetch_route(unique("missing"))
    finally:
        await client.close()
