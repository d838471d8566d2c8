"""PushConsumer against real processes: clustering, rebalance, broadcasting, retry, offsets."""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest

from rocket.client import (
    Admin,
    ConsumeFrom,
    ConsumeStatus,
    MessageExt,
    MessageModel,
    Producer,
    PullConsumer,
    PushConsumer,
    TopicRouteError,
    build_message,
)
from rocket.local import ClusterState
from rocket.message import SYSFLAG_COMPRESSED
from rocket.remoting import RemotingClient, RemotingCommand, RemotingTimeoutError, RequestCode, ResponseCode
from tests.integration.client_support import shared_cluster
from tests.support import eventually, unique

FAST = {"rebalance_interval": 1.0, "persist_interval": 0.5, "heartbeat_interval": 2.0, "suspend_timeout": 2.0}


@pytest.fixture(scope="module")
def cluster() -> ClusterState:
    return shared_cluster()


async def _topic(namesrv: str, queues: int = 4) -> str:
    topic = unique("T")
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, queue_nums=queues)
    return topic


class Collector:
    """A handler that records what it got."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.messages: list[MessageExt] = []

    async def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        self.messages.extend(msgs)
        self.bodies.extend(m.body for m in msgs)
        return ConsumeStatus.SUCCESS


async def _send(namesrv: str, topic: str, bodies: list[str], **kw: str) -> None:
    async with Producer(unique("PID"), namesrv) as producer:
        await asyncio.gather(*(producer.send(build_message(topic, b, **kw)) for b in bodies))


async def test_clustering_shares_queues_and_rebalances_when_one_leaves(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv)  # 4 queues x 2 broker groups
    group = unique("CID")
    c1, c2 = Collector(), Collector()
    p1 = PushConsumer(group, cluster.namesrv, c1, consume_from=ConsumeFrom.FIRST_OFFSET, **FAST)
    p2 = PushConsumer(group, cluster.namesrv, c2, consume_from=ConsumeFrom.FIRST_OFFSET, **FAST)
    for p in (p1, p2):
        p.subscribe(topic)
    await p1.start()
    await p2.start()
    try:
        def split() -> bool:
            a = {q for q in p1.assigned_queues() if q.topic == topic}
            b = {q for q in p2.assigned_queues() if q.topic == topic}
            return len(a) == 4 and len(b) == 4 and not a & b

        await eventually(split, 20, what="8 queues split 4/4 between two consumers")
        await _send(cluster.namesrv, topic, [f"first-{i}" for i in range(200)])
        await eventually(lambda: len(set(c1.bodies) | set(c2.bodies)) == 200, 20, what="200 messages consumed")
        assert c1.bodies and c2.bodies, "both members should have consumed"
        assert not set(c1.bodies) & set(c2.bodies), "a message went to both members of the group"
        await p2.shutdown()
        await eventually(lambda: len([q for q in p1.assigned_queues() if q.topic == topic]) == 8, 20,
                         what="the remaining consumer to take all 8 queues")
        before = len(c2.bodies)
        await _send(cluster.namesrv, topic, [f"second-{i}" for i in range(100)])
        await eventually(lambda: sum(b.startswith(b"second") for b in c1.bodies) >= 100, 20,
                         what="the remaining consumer to get all new messages")
        assert len(c2.bodies) == before
    finally:
        await p1.shutdown()
        await p2.shutdown()


async def test_broadcasting_delivers_everything_to_every_member(cluster: ClusterState, tmp_path: Path) -> None:
    topic = await _topic(cluster.namesrv, queues=2)
    group = unique("CID")
    collectors = [Collector(), Collector()]
    consumers = [
        PushConsumer(group, cluster.namesrv, c, message_model=MessageModel.BROADCASTING,
                     offset_store_dir=tmp_path / f"m{i}", instance_name=f"member{i}", **FAST)
        for i, c in enumerate(collectors)
    ]
    for consumer in consumers:
        consumer.subscribe(topic)
        await consumer.start()
    try:
        for consumer in consumers:
            await eventually(lambda c=consumer: len(c.assigned_queues()) == 4, 10, what="all queues assigned")
        await _send(cluster.namesrv, topic, [f"b{i}" for i in range(50)])
        for c in collectors:
            await eventually(lambda c=c: len(set(c.bodies)) == 50, 20, what="every member to get all 50")
        assert "%RETRY%" not in " ".join(consumers[0].subscriptions)
    finally:
        for consumer in consumers:
            await consumer.shutdown()
    # offsets were kept locally
    assert any((tmp_path / "m0").glob("*.json"))


async def test_failed_messages_come_back_through_the_retry_topic(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv, queues=1)
    group = unique("CID")
    attempts: Counter[str] = Counter()
    deliveries: list[MessageExt] = []

    async def flaky(msgs: list[MessageExt]) -> ConsumeStatus:
        for msg in msgs:
            attempts[msg.body.decode()] += 1
            deliveries.append(msg)
        if any(attempts[m.body.decode()] == 1 and m.body.startswith(b"fail") for m in msgs):
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.SUCCESS

    consumer = PushConsumer(group, cluster.namesrv, flaky, consume_from=ConsumeFrom.FIRST_OFFSET,
                            consume_batch_size=1, retry_delay_level=1, **FAST)
    consumer.subscribe(topic)
    await consumer.start()
    try:
        await _send(cluster.namesrv, topic, ["ok-1", "fail-1", "ok-2"])
        await eventually(lambda: attempts["fail-1"] >= 2, 30, what="the failed message to be redelivered")
        retried = [m for m in deliveries if m.body == b"fail-1"][-1]
        assert retried.reconsume_times >= 1
        assert retried.topic == topic  # the retry topic is hidden from the handler
        assert attempts["ok-1"] == 1 and attempts["ok-2"] == 1
        assert consumer.stats["sent_back"] >= 1
    finally:
        await consumer.shutdown()


async def test_raising_handler_counts_as_reconsume_later(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv, queues=1)
    calls: Counter[str] = Counter()

    async def boom(msgs: list[MessageExt]) -> None:
        for m in msgs:
            calls[m.body.decode()] += 1
        if calls["x"] == 1:
            raise RuntimeError("first time fails")

    consumer = PushConsumer(unique("CID"), cluster.namesrv, boom, consume_from=ConsumeFrom.FIRST_OFFSET,
                            retry_delay_level=1, **FAST)
    consumer.subscribe(topic)
    await consumer.start()
    try:
        await _send(cluster.namesrv, topic, ["x"])
        await eventually(lambda: calls["x"] >= 2, 30, what="redelivery after an exception")
    finally:
        await consumer.shutdown()


async def test_offsets_are_committed_and_a_restarted_consumer_resumes(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv, queues=2)
    group = unique("CID")
    first = Collector()
    consumer = PushConsumer(group, cluster.namesrv, first, consume_from=ConsumeFrom.FIRST_OFFSET, **FAST)
    consumer.subscribe(topic)
    await consumer.start()
    await _send(cluster.namesrv, topic, [f"a{i}" for i in range(30)])
    # distinct bodies: delivery is at least once, so 30 handler calls need not be 30 messages
    await eventually(lambda: len(set(first.bodies)) >= 30, 20, what="first 30 consumed")
    await consumer.shutdown()

    async with Admin(cluster.namesrv) as admin:
        lag = await admin.consumer_lag(group, topic)
    assert lag.total_lag == 0 and sum(q.broker_offset for q in lag.queues) == 30

    await _send(cluster.namesrv, topic, [f"b{i}" for i in range(20)])
    second = Collector()
    again = PushConsumer(group, cluster.namesrv, second, consume_from=ConsumeFrom.FIRST_OFFSET, **FAST)
    again.subscribe(topic)
    await again.start()
    try:
        await eventually(lambda: len(second.bodies) >= 20, 20, what="the 20 new messages")
        await asyncio.sleep(0.5)
        assert sorted(second.bodies) == sorted(f"b{i}".encode() for i in range(20))
    finally:
        await again.shutdown()


#: Long polls (15 s) and rare periodic offset writes: after the last batch, the broker's copy of the
#: offsets is the one the parked pulls carried (older by that batch) until the consumer writes its own.
SLOW_WRITES = {"rebalance_interval": 1.0, "persist_interval": 60.0, "heartbeat_interval": 2.0,
               "suspend_timeout": 15.0}


async def _consume_30(cluster: ClusterState, **options: float) -> tuple[str, str, PushConsumer]:
    """A started consumer of a new topic (2 queues x 2 broker groups) that has consumed 30 messages."""
    topic = await _topic(cluster.namesrv, queues=2)
    group = unique("CID")
    got = Collector()
    consumer = PushConsumer(group, cluster.namesrv, got, consume_from=ConsumeFrom.FIRST_OFFSET, **options)
    consumer.subscribe(topic)
    await consumer.start()
    await eventually(lambda: len([q for q in consumer.assigned_queues() if q.topic == topic]) == 4, 20,
                     what="4 queues assigned")
    await _send(cluster.namesrv, topic, [f"a{i}" for i in range(30)])
    await eventually(lambda: len(set(got.bodies)) >= 30, 20, what="30 consumed")
    return topic, group, consumer


async def _lag(cluster: ClusterState, group: str, topic: str) -> tuple[int, int]:
    async with Admin(cluster.namesrv) as admin:
        lag = await admin.consumer_lag(group, topic)
    return lag.total_lag, sum(q.broker_offset for q in lag.queues)


async def test_shutdown_retries_a_failed_final_offset_write(cluster: ClusterState,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The first UPDATE_CONSUMER_OFFSET of every queue at shutdown fails (a timeout, as on a loaded
    broker): shutdown writes it again, and the broker ends with the final offsets."""
    topic, group, consumer = await _consume_30(cluster, **SLOW_WRITES)
    real = consumer.client.invoke
    failed: set[tuple[str, str]] = set()

    async def first_update_times_out(addr: str, code: int, fields: Mapping[str, str] | None = None,
                                     body: bytes = b"", timeout: float | None = None) -> RemotingCommand:
        if code == RequestCode.UPDATE_CONSUMER_OFFSET and fields and fields["topic"] == topic:
            key = (addr, fields["queueId"])
            if key not in failed:
                failed.add(key)
                raise RemotingTimeoutError(f"injected: the first offset write of {key} timed out")
        return await real(addr, code, fields, body, timeout)

    monkeypatch.setattr(consumer.client, "invoke", first_update_times_out)
    await consumer.shutdown()
    assert len(failed) == 4, f"the injection should have hit the 4 queues once each: {failed}"
    assert await _lag(cluster, group, topic) == (0, 30)


async def test_shutdown_writes_final_offsets_the_broker_lost_after_the_last_write(cluster: ClusterState) -> None:
    """The consumer's periodic write stored the final offsets; then an older offset lands on the broker
    (as a pull's older ``commitOffset`` applied late does on a busy broker). Shutdown writes the
    final offsets again although they did not change since the consumer's last write."""
    topic, group, consumer = await _consume_30(cluster, **{**SLOW_WRITES, "persist_interval": 0.3})
    try:
        deadline = time.monotonic() + 10
        while await _lag(cluster, group, topic) != (0, 30):
            assert time.monotonic() < deadline, "the periodic write never stored the final offsets"
            await asyncio.sleep(0.2)
        remoting = RemotingClient()
        try:
            for mq in consumer.assigned_queues():
                if mq.topic != topic:
                    continue
                addr = consumer.client.admin_addr(mq.broker_name)
                assert addr is not None
                stale = RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={
                    "consumerGroup": group, "topic": topic, "queueId": str(mq.queue_id), "commitOffset": "1"})
                assert (await remoting.invoke(addr, stale, 5.0)).code == ResponseCode.SUCCESS
        finally:
            await remoting.close()
        assert (await _lag(cluster, group, topic))[0] > 0
    finally:
        await consumer.shutdown()
    assert await _lag(cluster, group, topic) == (0, 30)


async def _send_raw(addr: str, topic: str, body: bytes, sys_flag: int = 0) -> None:
    """SEND_MESSAGE (10) to queue 0 of ``topic`` at broker ``addr``, body and sysFlag as given
    (a peer that compresses, or claims to)."""
    remoting = RemotingClient()
    try:
        request = RemotingCommand(code=RequestCode.SEND_MESSAGE, body=body, ext_fields={
            "producerGroup": "PID_RAW", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
            "queueId": "0", "sysFlag": str(sys_flag), "bornTimestamp": str(int(time.time() * 1000)),
            "flag": "0", "properties": "", "reconsumeTimes": "0"})
        response = await remoting.invoke(addr, request, 10.0)
        assert response.code == ResponseCode.SUCCESS, response.remark
    finally:
        await remoting.close()


async def test_a_body_inflating_too_far_goes_to_the_dead_letter_queue(cluster: ClusterState) -> None:
    """A peer's "zip bomb" (64 MiB of zeros, compressed to about 64 KiB, COMPRESSED sysFlag) between two
    plain messages: the handler gets the plain ones only, the bomb is inflated no further than
    max_body_size and goes to %DLQ%<group> as stored, and the group's offset moves past it."""
    topic = await _topic(cluster.namesrv, queues=1)
    group = unique("CID")
    got = Collector()
    consumer = PushConsumer(group, cluster.namesrv, got, consume_from=ConsumeFrom.FIRST_OFFSET,
                            max_body_size=1 << 20, **FAST)
    consumer.subscribe(topic)
    await consumer.start()
    bomb = zlib.compress(bytes(64 << 20), 9)
    try:
        addr = consumer.client.master_addr("broker-a")
        assert addr is not None
        for body, flag in ((b"before", 0), (bomb, SYSFLAG_COMPRESSED), (b"after", 0)):
            await _send_raw(addr, topic, body, flag)
        await eventually(lambda: consumer.stats["undecodable"] == 1, 20, what="the bomb sent to the DLQ")
        await eventually(lambda: sorted(set(got.bodies)) == [b"after", b"before"], 20, what="the plain messages")
        assert consumer.stats["consumed"] == len(got.bodies)
    finally:
        await consumer.shutdown()
    assert (await _lag(cluster, group, topic)) == (0, 3)
    async with PullConsumer(unique("CID_DLQ"), cluster.namesrv, max_body_size=1 << 20) as reader:
        dlq = f"%DLQ%{group}"
        await eventually(lambda: _has_route(reader, dlq), 20, what="the DLQ topic's route")
        found = [r for mq in await reader.queues(dlq) for r in [await reader.pull(mq, 0)] if r.undecodable]
    assert len(found) == 1 and not found[0].messages
    (msg, reason), = found[0].undecodable
    assert msg.body == bomb and msg.sys_flag & SYSFLAG_COMPRESSED and "inflates to more than 1048576" in reason


async def _has_route(consumer: PullConsumer, topic: str) -> bool:
    try:
        await consumer.refresh_route(topic)
    except TopicRouteError:
        return False
    return True


async def test_start_from_timestamp(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv, queues=1)
    await _send(cluster.namesrv, topic, [f"old{i}" for i in range(10)])
    await asyncio.sleep(1.5)
    since = int(time.time() * 1000)
    await _send(cluster.namesrv, topic, [f"new{i}" for i in range(10)])
    got = Collector()
    consumer = PushConsumer(unique("CID"), cluster.namesrv, got, consume_from=ConsumeFrom.TIMESTAMP,
                            consume_timestamp=since, **FAST)
    consumer.subscribe(topic)
    await consumer.start()
    try:
        await eventually(lambda: len(got.bodies) >= 10, 20, what="messages after the timestamp")
        await asyncio.sleep(0.5)
        assert sorted(got.bodies) == sorted(f"new{i}".encode() for i in range(10))
    finally:
        await consumer.shutdown()


async def test_start_from_last_offset_reads_a_queue_that_still_starts_at_0(cluster: ClusterState) -> None:
    """A fresh group with LAST_OFFSET on a queue whose data still starts at 0: the broker answers
    QUERY_CONSUMER_OFFSET with 0, not QUERY_NOT_FOUND (RocketMQ's ConsumerManageProcessor), so the
    consumer reads the messages sent before it started too."""
    topic = await _topic(cluster.namesrv, queues=1)
    await _send(cluster.namesrv, topic, [f"old{i}" for i in range(10)])
    got = Collector()
    consumer = PushConsumer(unique("CID"), cluster.namesrv, got, consume_from=ConsumeFrom.LAST_OFFSET, **FAST)
    consumer.subscribe(topic)
    await consumer.start()
    try:
        await eventually(lambda: len(consumer.assigned_queues()) >= 2, 10, what="queues assigned")
        await _send(cluster.namesrv, topic, ["after-start"])
        await eventually(lambda: b"after-start" in got.bodies, 20, what="a message sent after start")
        await asyncio.sleep(0.5)
        assert sorted(got.bodies) == sorted([b"after-start", *(f"old{i}".encode() for i in range(10))])
    finally:
        await consumer.shutdown()


#: A broker whose retention deletes every CommitLog file but the one being written, at once: 64 KiB
#: files, kept 0 hours, deleted at any hour, checked every 200 ms.
RETENTION_ARGS = ["--set", "mappedFileSizeCommitLog=65536", "--set", "fileReservedTime=0",
                  "--set", "deleteWhen=" + ";".join(f"{h:02d}" for h in range(24)),
                  "--set", "cleanResourceInterval=200"]


async def test_start_from_last_offset_skips_old_messages_when_the_broker_says_so(tmp_path: Path) -> None:
    """A fresh group with LAST_OFFSET on a queue whose first messages retention deleted: the broker
    answers QUERY_CONSUMER_OFFSET with QUERY_NOT_FOUND, and the consumer starts at the queue's end,
    skipping the old messages still stored there."""
    from rocket.client import PullConsumer
    from rocket.local import running_cluster

    stack = contextlib.ExitStack()  # running_cluster waits with asyncio.run: start and stop it in a thread
    state = await asyncio.to_thread(stack.enter_context, running_cluster(
        tmp_path / "c", nameservers=1, brokers=1, slaves=False, extra_broker_args=RETENTION_ARGS))
    try:
        ns = state.namesrv
        topic = await _topic(ns, queues=1)
        old = [f"old{i:03d}-".ljust(4000, "x") for i in range(60)]  # ~240 KiB: 4 CommitLog files
        async with Producer(unique("PID"), ns) as producer:
            for body in old:  # one at a time: the queue holds them in this order
                await producer.send(build_message(topic, body))
        async with PullConsumer(unique("CID"), ns) as puller:
            (mq,) = await puller.queues(topic)
            assert await puller.max_offset(mq) == len(old)
            first = await eventually(lambda: puller.min_offset(mq), 20, what="retention to delete old files")
            assert 0 < first < len(old) - 1  # old messages from `first` on are still stored
            kept = (await puller.pull(mq, first, 1)).messages
            assert [m.body.decode() for m in kept] == [old[first]]

        got = Collector()
        consumer = PushConsumer(unique("CID"), ns, got, consume_from=ConsumeFrom.LAST_OFFSET, **FAST)
        consumer.subscribe(topic)
        await consumer.start()
        try:
            await eventually(lambda: any(q.topic == topic for q in consumer.assigned_queues()), 10,
                             what="the queue assigned")
            await _send(ns, topic, ["after-start"])
            await eventually(lambda: b"after-start" in got.bodies, 20, what="a message sent after start")
            await asyncio.sleep(0.5)
            assert got.bodies == [b"after-start"]
        finally:
            await consumer.shutdown()
    finally:
        await asyncio.to_thread(stack.close)


async def test_async_iterator_and_tag_filter(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv, queues=2)
    await _send(cluster.namesrv, topic, [f"a{i}" for i in range(5)], tags="TagA")
    await _send(cluster.namesrv, topic, [f"b{i}" for i in range(5)], tags="TagB")
    consumer = PushConsumer(unique("CID"), cluster.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, **FAST)
    consumer.subscribe(topic, "TagB")
    seen: list[bytes] = []

    async def read() -> None:
        async for msg in consumer.messages():
            assert msg.tags == "TagB"
            seen.append(msg.body)
            if len(seen) == 5:
                break

    try:
        await asyncio.wait_for(read(), 20)
    finally:
        await consumer.shutdown()
    assert sorted(seen) == sorted(f"b{i}".encode() for i in range(5))


async def test_orderly_consumer_sees_each_key_in_send_order(cluster: ClusterState) -> None:
    topic = await _topic(cluster.namesrv, queues=2)
    async with Producer(unique("PID"), cluster.namesrv) as producer:
        for i in range(60):
            key = f"k{i % 3}"
            await producer.send_orderly(build_message(topic, f"{key}:{i}"), key)
    seen: dict[str, list[int]] = {}

    async def handle(msgs: list[MessageExt]) -> None:
        for msg in msgs:
            key, n = msg.body.decode().split(":")
            seen.setdefault(key, []).append(int(n))
        await asyncio.sleep(0.001)

    consumer = PushConsumer(unique("CID"), cluster.namesrv, handle, consume_from=ConsumeFrom.FIRST_OFFSET,
                            orderly=True, consume_batch_size=4, **FAST)
    consumer.subscribe(topic)
    await consumer.start()
    try:
        await eventually(lambda: sum(len(v) for v in seen.values()) >= 60, 20, what="60 ordered messages")
    finally:
        await consumer.shutdown()
    for values in seen.values():
        assert values == sorted(values)


@pytest.mark.slow
async def test_committed_offsets_survive_a_cluster_restart(tmp_path: Path) -> None:
    from rocket.local import LocalCluster, find_free_base_port

    base = find_free_base_port()
    cluster = LocalCluster(tmp_path / "c", base, nameservers=1, brokers=1)
    state = await asyncio.to_thread(cluster.start, detach=False)
    topic, group = unique("T"), unique("CID")
    try:
        async with Admin(state.namesrv) as admin:
            await admin.create_topic(topic, queue_nums=2)
        await _send(state.namesrv, topic, [f"a{i}" for i in range(20)])
        first = Collector()
        consumer = PushConsumer(group, state.namesrv, first, consume_from=ConsumeFrom.FIRST_OFFSET, **FAST)
        consumer.subscribe(topic)
        await consumer.start()
        await eventually(lambda: len(first.bodies) >= 20, 20, what="20 consumed")
        await consumer.shutdown()
    finally:
        await asyncio.to_thread(cluster.stop)
    cluster = LocalCluster(tmp_path / "c", base, nameservers=1, brokers=1)
    state = await asyncio.to_thread(cluster.start, detach=False)
    try:
        await _send(state.namesrv, topic, [f"b{i}" for i in range(10)])
        second = Collector()
        again = PushConsumer(group, state.namesrv, second, consume_from=ConsumeFrom.FIRST_OFFSET, **FAST)
        again.subscribe(topic)
        await again.start()
        try:
            await eventually(lambda: len(second.bodies) >= 10, 20, what="the 10 new messages")
            await asyncio.sleep(0.5)
        finally:
            await again.shutdown()
        assert sorted(second.bodies) == sorted(f"b{i}".encode() for i in range(10))
    finally:
        await asyncio.to_thread(cluster.stop)


async def test_messages_failing_too_often_go_to_the_dead_letter_queue(cluster: ClusterState) -> None:
    from rocket.client import PullConsumer, PullStatus

    topic = await _topic(cluster.namesrv, queues=1)
    group = unique("CID")
    deliveries: list[int] = []

    async def always_fails(msgs: list[MessageExt]) -> ConsumeStatus:
        deliveries.extend(m.reconsume_times for m in msgs)
        return ConsumeStatus.RECONSUME_LATER

    consumer = PushConsumer(group, cluster.namesrv, always_fails, consume_from=ConsumeFrom.FIRST_OFFSET,
                            max_reconsume_times=1, retry_delay_level=1, **FAST)
    consumer.subscribe(topic)
    await consumer.start()
    try:
        await _send(cluster.namesrv, topic, ["doomed"])

        async def in_dlq() -> bool:
            async with PullConsumer(unique("CID"), cluster.namesrv) as puller:
                try:
                    mqs = await puller.queues(f"%DLQ%{group}")
                except Exception:
                    return False
                for mq in mqs:
                    result = await puller.pull(mq, 0, 32)
                    if result.status is PullStatus.FOUND and result.messages[0].body == b"doomed":
                        return True
            return False

        await eventually(in_dlq, 30, interval=0.5, what="the message in %DLQ%<group>")
        assert deliveries[:2] == [0, 1]
    finally:
        await consumer.shutdown()
