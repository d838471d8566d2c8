"""Compatibility: the real RocketMQ C++ client (PyPI ``rocketmq==0.4.4``) against our servers.

Each test starts its own NameServer(s) and two broker groups (``broker-a``,
``broker-b``) as real processes on loopback, and drives the real client in
subprocesses through ``tests/compat/driver.py`` (see ``realclient.py``). The
client reads routes from the NameServer, sends with request code 10 (batches
too, marked ``batch: "1"``), long-polls with PULL_MESSAGE, commits offsets,
sends failed messages back, and rebalances queues among a group's members.

How fast things must be: the C++ client refreshes routes every 30 s and
rebalances every 20 s, so the tests never wait for those timers. A test that
needs a fresh route starts a *new* client process (it looks routes up at once);
a rebalance after a second consumer joins relies on the broker's
NOTIFY_CONSUMER_IDS_CHANGED (40), which makes the client rebalance at once.
Retries come back quickly because the brokers run with one-second delay levels
(``cluster.SHORT_DELAY_LEVELS``).
"""

from __future__ import annotations

import asyncio
import re
import statistics
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.compat import rawremoting
from tests.compat.cluster import Cluster, flavor
from tests.compat.driver import make_body
from tests.compat.realclient import Driver, DriverProcess
from tests.support import wait_for

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

Events = list[dict[str, Any]]


# -- helpers ------------------------------------------------------------------------------


def of(events: Events, kind: str) -> Events:
    return [e for e in events if e["event"] == kind]


def assert_all_sent(sends: Events, count: int) -> None:
    errors = [e for e in sends if e["event"] == "send_error"]
    log = "".join(e["tail"] for e in sends if e["event"] == "cpp_log")
    assert not errors, f"send failures: {errors}\n{log}"
    sends = [e for e in sends if e["event"] == "send"]
    assert len(sends) == count, f"expected {count} send results, got {len(sends)}: {sends}"
    bad = [e for e in sends if e["status"] != "SEND_OK"]
    assert not bad, f"sends not SEND_OK: {bad}"


def expected_body(prefix: str, i: int, size: int = 0) -> str:
    class _Args:
        body_prefix = prefix
        body_size = size

    return make_body(_Args(), i)  # type: ignore[arg-type]


def bodies(msgs: Events) -> list[str]:
    return [m["body"] for m in msgs]


def per_broker_pull(events: Events) -> dict[str, list[dict[str, Any]]]:
    """Messages of a pull-consume run grouped by broker name, in pull order."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    broker = None
    for e in events:
        if e["event"] == "pull":
            broker = e["broker"]
        elif e["event"] == "msg":
            assert broker is not None
            out[broker].append(e)
    return out


def pull_all(driver: Driver, topic: str, expect: int, group: str, timeout: float = 20.0) -> Events:
    events = driver.run("pull-consume", "--topic", topic, "--group", group, "--expect", str(expect),
                        "--timeout", str(timeout - 5), timeout=timeout)
    done = of(events, "done")[-1]
    assert done["received"] >= expect, f"pulled {done['received']} of {expect}: {events[-20:]}"
    return events


def wait_consumed(procs: list[DriverProcess], total: set[str], timeout: float) -> None:
    """Wait until the drivers together consumed every body of ``total``; fail after ``timeout`` s."""
    def all_seen() -> bool:
        return {m["body"] for p in procs for m in of(p.events(), "msg") if m["result"] == "ok"} >= total

    wait_for(all_seen, timeout, what=f"{len(total)} messages consumed by the drivers")


# -- route lookup and send -----------------------------------------------------------------


def test_route_lookup_and_sync_send(cluster_factory: Callable[..., Cluster],
                                    driver_for: Callable[[Cluster], Driver]) -> None:
    """Two NameServers in the client's list; sync sends (code 10) get SEND_OK, ids and rising offsets."""
    cluster = cluster_factory(namesrvs=2)
    driver = driver_for(cluster)
    # A one-queue topic on broker-a: queue offsets must be 0, 1, 2, ...
    cluster.create_topic("CompatOneQueue", queues=1, brokers=["broker-a"])
    route = cluster.route("CompatOneQueue", cluster.namesrvs[1].addr)
    assert route is not None
    (queue_data,) = route["queueDatas"]  # type: ignore[misc]
    assert (queue_data["brokerName"], queue_data["readQueueNums"], queue_data["writeQueueNums"],
            queue_data["perm"]) == ("broker-a", 1, 1, 6), route
    brokers = {b["brokerName"]: b["brokerAddrs"] for b in route["brokerDatas"]}  # type: ignore[attr-defined]
    assert brokers == {"broker-a": {"0": cluster.broker_addr("broker-a")}}, route

    sends = driver.send("CompatOneQueue", 10, "--tags", "TagA", "--keys", "key", "--property", "myprop=v1")
    assert_all_sent(sends, 10)
    assert [e["offset"] for e in sends] == list(range(10)), sends
    ids = [e["msg_id"] for e in sends]
    assert len(set(ids)) == 10, ids
    assert all(re.fullmatch(r"[0-9A-F]{32}", i) for i in ids), ids

    # Consume them back: same ids (UNIQ_KEY), bodies, tags, keys and user property.
    events = pull_all(driver, "CompatOneQueue", 10, "CID_ROUTE")
    msgs = of(events, "msg")
    assert bodies(msgs) == [expected_body("msg", i) for i in range(10)]
    assert [m["id"] for m in msgs] == ids
    assert [m["queue_offset"] for m in msgs] == list(range(10))
    assert {m["tags"] for m in msgs} == {"TagA"}
    assert [m["keys"] for m in msgs] == [f"key-{i}" for i in range(10)]
    assert {m["props"].get("myprop") for m in msgs} == {"v1"}

    # A topic on both groups: the producer spreads its sends over both.
    cluster.create_topic("CompatTwoGroups", queues=4)
    sends = driver.send("CompatTwoGroups", 16)
    assert_all_sent(sends, 16)
    by_broker = per_broker_pull(pull_all(driver, "CompatTwoGroups", 16, "CID_ROUTE"))
    assert set(by_broker) == {"broker-a", "broker-b"}, {k: len(v) for k, v in by_broker.items()}
    assert sorted(m["body"] for v in by_broker.values() for m in v) == sorted(
        expected_body("msg", i) for i in range(16))


def test_send_auto_creates_topic(cluster: Cluster, driver: Driver) -> None:
    """An unknown topic: the client falls back to TBW102's route and the broker creates the topic."""
    sends = driver.send("CompatAutoCreated", 4)
    assert_all_sent(sends, 4)
    route = cluster.route("CompatAutoCreated")
    assert route is not None, "the auto-created topic is not routed by the NameServer"
    msgs = of(pull_all(driver, "CompatAutoCreated", 4, "CID_AUTO"), "msg")
    assert sorted(bodies(msgs)) == sorted(expected_body("msg", i) for i in range(4))


def test_batch_send(cluster: Cluster, driver: Driver) -> None:
    """A batch (code 10 with batch "1") is stored as separate messages with consecutive offsets."""
    cluster.create_topic("CompatBatch", queues=2)
    events = driver.run("send-batch", "--topic", "CompatBatch", "--count", "10", "--tags", "TagB",
                        "--keys", "bk", "--body-prefix", "batch")
    assert not of(events, "send_error"), events
    (batch,) = of(events, "batch")
    assert batch["status"] == "SEND_OK", batch
    msgs = of(pull_all(driver, "CompatBatch", 10, "CID_BATCH"), "msg")
    assert bodies(msgs) == [expected_body("batch", i) for i in range(10)], msgs
    assert len({(m["queue_id"]) for m in msgs}) == 1, "a batch goes to one queue"
    offsets = [m["queue_offset"] for m in msgs]
    assert offsets == list(range(offsets[0], offsets[0] + 10)), offsets
    assert offsets[0] == batch["offset"], (offsets, batch)
    assert [m["keys"] for m in msgs] == [f"bk-{i}" for i in range(10)]
    assert {m["tags"] for m in msgs} == {"TagB"}


def test_compressed_body_round_trip(cluster: Cluster, driver: Driver) -> None:
    """Bodies over 4 KiB are compressed by the client (sysFlag 1) and restored intact on consume."""
    cluster.create_topic("CompatBig", queues=2)
    sizes = [100, 4000, 5000, 10_000, 120_000]  # the C++ client refuses > 128 KiB
    assert_all_sent(driver.send("CompatBig", len(sizes), "--body-size", ",".join(map(str, sizes)),
                                "--body-prefix", "big"), len(sizes))
    msgs = of(driver.run("push-consume", "--topic", "CompatBig", "--group", "CID_BIG",
                         "--expect", str(len(sizes)), "--timeout", "20", timeout=30), "msg")
    got = {m["body_head"].split("|")[0]: m for m in msgs}
    for i, size in enumerate(sizes):
        want = expected_body("big", i, size).encode()
        m = got[f"big-{i}"]
        assert m["body_len"] == size and m["body_crc"] == zlib.crc32(want), (size, m)
    # The store kept the compressed form: the stored record is much smaller than the body.
    assert got["big-3"]["store_size"] < 10_000 // 2, got["big-3"]
    assert got["big-0"]["store_size"] > 100, got["big-0"]


# -- push consumption ----------------------------------------------------------------------


def test_push_consume_long_polling_latency(cluster: Cluster, driver: Driver) -> None:
    """A push consumer parked in long polling gets new messages within milliseconds; delayed ones on time."""
    cluster.create_topic("CompatLatency", queues=2)
    consumer = driver.start("push-consume", "--topic", "CompatLatency", "--group", "CID_LAT",
                            "--expect", "13", "--timeout", "40", timeout=50)
    try:
        consumer.wait_for("started")
        assert_all_sent(driver.send("CompatLatency", 1, "--body-prefix", "warmup"), 1)
        deadline = time.monotonic() + 15
        while not of(consumer.events(), "msg") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert of(consumer.events(), "msg"), f"the warm-up message never arrived\n{consumer.output()}"
        time.sleep(1.5)  # every queue's pull is now parked at the broker
        assert_all_sent(driver.send("CompatLatency", 10, "--interval-ms", "50"), 10)
        # Delay level 3 is one second on these brokers (10 s with RocketMQ's default levels).
        assert_all_sent(driver.send("CompatLatency", 2, "--delay-level", "3", "--body-prefix", "delayed"), 2)
        events = consumer.wait()
    finally:
        consumer.kill()
    msgs = [m for m in of(events, "msg") if m["body"].startswith("msg-")]
    assert sorted(bodies(msgs)) == sorted(expected_body("msg", i) for i in range(10))
    latencies = [m["latency_ms"] for m in msgs]
    print(f"push delivery latency (ms): {latencies}")
    assert statistics.median(latencies) < 250, f"delivery latency (ms) {latencies}: long polling is not waking up"
    assert max(latencies) < 1000, f"delivery latency (ms) {latencies}"
    delayed = [m for m in of(events, "msg") if m["body"].startswith("delayed-")]
    assert sorted(bodies(delayed)) == ["delayed-0", "delayed-1"], delayed
    waits = [m["latency_ms"] for m in delayed]
    print(f"delay level 3 delivered after (ms): {waits}")
    assert all(900 <= w < 5000 for w in waits), f"delay level 3 (1 s here) delivered after {waits} ms"


def test_send_back_to_retry_topic(cluster: Cluster, driver: Driver) -> None:
    """A message the callback fails is sent back (36) and redelivered from %RETRY%<group>."""
    cluster.create_topic("CompatRetry", queues=2)
    assert_all_sent(driver.send("CompatRetry", 5), 5)
    events = driver.run("push-consume", "--topic", "CompatRetry", "--group", "CID_RETRY", "--expect", "5",
                        "--fail-first", "2", "--linger", "1", "--timeout", "45", timeout=60)
    msgs = of(events, "msg")
    assert of(events, "done")[-1]["reason"] == "expected", events[-5:]
    failed = [m for m in msgs if m["result"] == "later"]
    assert len(failed) == 2, msgs
    for first in failed:
        again = [m for m in msgs if m["body"] == first["body"] and m["result"] == "ok"]
        assert again, f"{first['body']} was never redelivered: {msgs}"
        retry = again[0]
        assert retry["reconsume_times"] == 1, retry
        assert retry["id"] == first["id"], (first, retry)
        assert retry["props"].get("RETRY_TOPIC") == "CompatRetry", retry
        assert retry["topic"] == "CompatRetry", retry  # the client restores the original topic
    assert {m["body"] for m in msgs if m["result"] == "ok"} == {expected_body("msg", i) for i in range(5)}
    assert cluster.route("%RETRY%CID_RETRY") is not None, "the retry topic is not routed"


def test_offset_commit_and_resume(cluster: Cluster, driver: Driver) -> None:
    """A consumer restarted in the same group resumes at its committed offsets: no loss, no replay."""
    cluster.create_topic("CompatResume", queues=2)
    assert_all_sent(driver.send("CompatResume", 20), 20)
    first = driver.run("push-consume", "--topic", "CompatResume", "--group", "CID_RESUME", "--expect", "20",
                       "--linger", "1", "--timeout", "25", timeout=35)
    first_bodies = Counter(m["body"] for m in of(first, "msg"))
    assert set(first_bodies) == {expected_body("msg", i) for i in range(20)}

    # The committed offsets are on the brokers now (QUERY_CONSUMER_OFFSET): 20 in all.
    committed = 0
    for name in cluster.brokers:
        for qid in range(2):
            reply = rawremoting.request(cluster.broker_addr(name), rawremoting.QUERY_CONSUMER_OFFSET,
                                        {"consumerGroup": "CID_RESUME", "topic": "CompatResume", "queueId": qid})
            assert reply.code == 0, (name, qid, reply)
            committed += int(reply.ext["offset"])
    assert committed == 20, f"committed offsets add up to {committed}, expected 20"

    assert_all_sent(driver.send("CompatResume", 10, "--start", "20"), 10)
    second = driver.run("push-consume", "--topic", "CompatResume", "--group", "CID_RESUME", "--expect", "10",
                        "--linger", "2", "--timeout", "25", timeout=35)
    second_bodies = Counter(m["body"] for m in of(second, "msg"))
    new = {expected_body("msg", i) for i in range(20, 30)}
    assert set(second_bodies) >= new, f"lost after restart: {new - set(second_bodies)}"
    replayed = set(second_bodies) - new
    assert not replayed, f"the restarted consumer replayed committed messages: {sorted(replayed)}"


def test_two_consumers_share_queues(cluster: Cluster, driver: Driver, tmp_path: Path) -> None:
    """Two members of one group split the queues: disjoint, non-empty shares whose union is everything."""
    cluster.create_topic("CompatRebalance", queues=4)
    stop = tmp_path / "stop-consumers"
    common = ("push-consume", "--topic", "CompatRebalance", "--group", "CID_SHARE", "--timeout", "40",
              "--stop-file", str(stop))
    one = driver.start(*common, "--instance", "one", timeout=50)
    two = None
    try:
        one.wait_for("started")
        two = driver.start(*common, "--instance", "two", timeout=50)
        two.wait_for("started")
        time.sleep(3)  # NOTIFY_CONSUMER_IDS_CHANGED → both rebalance at once
        assert_all_sent(driver.send("CompatRebalance", 40), 40)
        everything = {expected_body("msg", i) for i in range(40)}
        wait_consumed([one, two], everything, timeout=20)
        time.sleep(0.5)
        stop.write_text("stop")
        ev_one, ev_two = one.wait(), two.wait()
    finally:
        one.kill()
        if two is not None:
            two.kill()
    got_one = {m["body"] for m in of(ev_one, "msg")}
    got_two = {m["body"] for m in of(ev_two, "msg")}
    assert got_one | got_two == everything, f"lost: {everything - got_one - got_two}"
    assert got_one and got_two, f"one consumer got nothing: {len(got_one)} / {len(got_two)} (no rebalance?)"
    assert not got_one & got_two, f"both consumers got {sorted(got_one & got_two)}"


# -- pull consumer -------------------------------------------------------------------------


def test_pull_consumer(cluster: Cluster, driver: Driver) -> None:
    """The pull consumer lists the queues of both groups and reads each from offset 0 to the end."""
    cluster.create_topic("CompatPull", queues=3)
    assert_all_sent(driver.send("CompatPull", 24, "--tags", "TagP"), 24)
    events = pull_all(driver, "CompatPull", 24, "CID_PULL")
    (queues,) = of(events, "queues")
    assert sorted((q["broker"], q["queue_id"]) for q in queues["queues"]) == [
        (b, q) for b in ("broker-a", "broker-b") for q in range(3)]
    msgs = of(events, "msg")
    assert sorted(bodies(msgs)) == sorted(expected_body("msg", i) for i in range(24))
    per_queue: dict[tuple[str, int], list[int]] = defaultdict(list)
    for broker, items in per_broker_pull(events).items():
        for m in items:
            per_queue[(broker, m["queue_id"])].append(m["queue_offset"])
    for key, offsets in per_queue.items():
        assert offsets == list(range(len(offsets))), (key, offsets)
    # Once drained, a pull at the end answers NO_NEW_MSG with nextBeginOffset = maxOffset.
    ends = [e for e in of(events, "pull") if e["status"] == "NO_NEW_MSG" and e["offset"] > 0]
    assert ends and all(e["next"] == e["offset"] == e["max"] for e in ends), ends


# -- write permission wiped ----------------------------------------------------------------


def test_wiped_write_permission_moves_sends(cluster_factory: Callable[..., Cluster],
                                            driver_for: Callable[[Cluster], Driver]) -> None:
    """After WIPE_WRITE_PERM_OF_BROKER (205) on broker-a, a producer's fresh route sends only to broker-b.

    The C++ producer refreshes routes every 30 s; instead of waiting, a new
    producer process is started after the wipe (it looks the route up at
    once). Brokers re-register every 2 s here, so the test also checks that
    re-registration does not give the permission back.
    """
    cluster = cluster_factory(namesrvs=2, broker_config={"registerNameServerPeriod": "2000"})
    driver = driver_for(cluster)
    cluster.create_topic("CompatWipe", queues=4)
    assert_all_sent(driver.send("CompatWipe", 8), 8)

    if flavor() == "java":
        counts = {ns.addr: int(rawremoting.wipe_write_perm(ns.addr, "broker-a").ext["wipeTopicCount"])
                  for ns in cluster.namesrvs}
    else:
        from rocket.client import Admin

        async def wipe() -> dict[str, int | str]:
            async with Admin(cluster.namesrv) as admin:
                return await admin.wipe_write_perm("broker-a")

        counts = asyncio.run(wipe())  # our admin client: WIPE_WRITE_PERM_OF_BROKER on every NameServer
    assert set(counts) == {ns.addr for ns in cluster.namesrvs}, counts
    assert all(isinstance(c, int) and c >= 1 for c in counts.values()), counts

    def perms(namesrv: str) -> dict[str, int]:
        route = cluster.route("CompatWipe", namesrv)
        assert route is not None
        return {q["brokerName"]: q["perm"] for q in route["queueDatas"]}  # type: ignore[attr-defined]

    for ns in cluster.namesrvs:
        assert perms(ns.addr) == {"broker-a": 4, "broker-b": 6}, ns.addr
    time.sleep(2.5)  # at least one re-registration of broker-a
    for ns in cluster.namesrvs:
        assert perms(ns.addr) == {"broker-a": 4, "broker-b": 6}, f"re-registration restored write on {ns.addr}"

    assert_all_sent(driver.send("CompatWipe", 12, "--start", "8"), 12)
    by_broker = per_broker_pull(pull_all(driver, "CompatWipe", 20, "CID_WIPE"))
    after = {expected_body("msg", i) for i in range(8, 20)}
    on_a = {m["body"] for m in by_broker.get("broker-a", [])}
    on_b = {m["body"] for m in by_broker.get("broker-b", [])}
    assert not on_a & after, f"sent to broker-a after its write permission was wiped: {sorted(on_a & after)}"
    assert after <= on_b
    # Consumers still read broker-a (perm 4 = read).
    assert on_a, "nothing was read back from broker-a"


# -- cross-compatibility with our own Python client ----------------------------------------


async def _python_pull_all(namesrv: str, topic: str, group: str, expect: int, timeout: float = 15.0) -> list[Any]:
    """Every message of ``topic`` read with our PullConsumer from offset 0 of each queue."""
    from rocket.client import PullConsumer, PullStatus

    got: list[Any] = []
    async with PullConsumer(group, namesrv) as consumer:
        queues = await consumer.queues(topic)
        offsets = dict.fromkeys(queues, 0)
        deadline = time.monotonic() + timeout
        while len(got) < expect and time.monotonic() < deadline:
            for mq in queues:
                result = await consumer.pull(mq, offsets[mq], 32)
                if result.status is PullStatus.FOUND:
                    got.extend(result.messages)
                offsets[mq] = result.next_begin_offset
            if len(got) < expect:
                await asyncio.sleep(0.1)
    return got


async def test_real_producer_to_python_consumer(cluster: Cluster, driver: Driver) -> None:
    """Messages sent by the real client are read intact by our PullConsumer (ids, tags, keys, properties)."""
    cluster.create_topic("CompatCrossIn", queues=2)
    sends = await asyncio.to_thread(driver.send, "CompatCrossIn", 6, "--tags", "TagX", "--keys", "ck",
                                    "--property", "myprop=v1")
    assert_all_sent(sends, 6)
    big = await asyncio.to_thread(driver.send, "CompatCrossIn", 1, "--start", "6", "--body-size", "10000",
                                  "--body-prefix", "big")
    assert_all_sent(big, 1)
    msgs = await _python_pull_all(cluster.namesrv, "CompatCrossIn", "CID_PY_IN", 7)
    by_body = {m.body.decode(): m for m in msgs}
    for e in sends:
        m = by_body[e["body"]]
        assert m.msg_id == e["msg_id"], (m, e)
        assert m.tags == "TagX" and m.keys == [f"ck-{e['i']}"] and m.properties.get("myprop") == "v1", m
    want = expected_body("big", 6, 10_000)
    assert want in by_body, "the compressed 10 000-byte body was not restored by our consumer"
    assert by_body[want].msg_id == big[0]["msg_id"]


async def test_python_producer_to_real_consumer(cluster: Cluster, driver: Driver) -> None:
    """Messages sent by our Producer (single, compressed, batch) are consumed by the real push consumer."""
    from rocket.client import Producer, build_message

    cluster.create_topic("CompatCrossOut", queues=2)
    sent: dict[str, str] = {}
    async with Producer("PID_PY_OUT", cluster.namesrv) as producer:
        for i in range(5):
            body = expected_body("py", i)
            result = await producer.send(build_message("CompatCrossOut", body, tags="TagY", keys=f"pk-{i}",
                                                       properties={"myprop": "v2"}))
            assert result.ok, result
            sent[body] = result.msg_id
        big = expected_body("pybig", 5, 10_000)
        result = await producer.send(build_message("CompatCrossOut", big, tags="TagY"))
        assert result.ok, result
        sent[big] = result.msg_id
        batch = [expected_body("pybatch", i) for i in range(6, 10)]
        result = await producer.send_batch([build_message("CompatCrossOut", b, tags="TagY") for b in batch])
        assert result.ok, result
        sent.update(zip(batch, result.msg_ids, strict=True))
    events = await asyncio.to_thread(driver.run, "push-consume", "--topic", "CompatCrossOut", "--group",
                                     "CID_CPP_IN", "--expect", str(len(sent)), "--timeout", "20", timeout=30)
    msgs = of(events, "msg")
    by_head = {m["body_head"]: m for m in msgs}
    for body, msg_id in sent.items():
        m = by_head.get(body[:40])
        assert m is not None, f"{body[:40]!r} not consumed by the real client: {[x['body_head'] for x in msgs]}"
        assert m["body_len"] == len(body) and m["body_crc"] == zlib.crc32(body.encode()), m
        assert m["id"] == msg_id, (m, msg_id)
        assert m["tags"] == "TagY", m
    for i in range(5):
        m = by_head[expected_body("py", i)]
        assert m["keys"] == f"pk-{i}" and m["props"].get("myprop") == "v2", m
