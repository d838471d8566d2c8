"""Broker processes under particular settings: overload, SIGTERM, HTTP, slave,
NameServers that come later, auto-create disabled, client expiry."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rocket.remoting import RemotingClient, RequestCode, ResponseCode
from tests.integration.broker_harness import (
    NameServerProc,
    RawBroker,
    broker_process,
    nameserver_process,
    records,
    route,
)
from tests.support import eventually, free_port

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]


@pytest.fixture(scope="module")
def ns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NameServerProc]:
    with nameserver_process(tmp_path_factory.mktemp("ns")) as proc:
        yield proc


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    remoting = RemotingClient()
    yield remoting
    await remoting.close()


async def test_overload_answers_system_busy_at_once(tmp_path: Path, client: RemotingClient, ns: NameServerProc) -> None:
    settings = {"maxInFlightSends": "2", "maxInFlightSendBytes": "100000", "flushDiskType": "SYNC_FLUSH"}
    with broker_process(tmp_path, "busy", ns.addr, settings=settings) as b:
        rb = RawBroker(client, b.addr)
        assert (await rb.create_topic("Busy", 1)).code == 0
        started = time.monotonic()
        results = await asyncio.gather(*(rb.send("Busy", b"x" * 1024) for _ in range(200)))
        elapsed = time.monotonic() - started
        codes = [r.code for r in results]
        busy = [r for r in results if r.code == ResponseCode.SYSTEM_BUSY]
        assert busy, f"no SYSTEM_BUSY among {set(codes)}"
        assert all((r.remark or "").startswith("[REJECTREQUEST]system busy") for r in busy)
        assert codes.count(0) >= 1 and set(codes) <= {0, ResponseCode.SYSTEM_BUSY}
        assert elapsed < 10
        # bytes in flight count too: two 60 KB bodies exceed 100 KB
        big = await asyncio.gather(*(rb.send("Busy", b"y" * 60_000) for _ in range(20)))
        assert {r.code for r in big} == {0, ResponseCode.SYSTEM_BUSY}
        assert any("maxInFlightSendBytes" in (r.remark or "") for r in big)
        # the connection and the broker carry on
        assert (await rb.send("Busy", b"after")).code == 0
        async with aiohttp.ClientSession() as http:
            text = await (await http.get(f"{b.http}/metrics")).text()
        assert 'rocketmq_broker_send_rejected_total{reason="in_flight"}' in text
        assert 'rocketmq_broker_send_rejected_total{reason="in_flight_bytes"}' in text


async def test_sigterm_unregisters_answers_parked_pulls_and_exits(
    tmp_path: Path, client: RemotingClient, ns: NameServerProc
) -> None:
    delays = {"messageDelayLevel": "200ms 3s"}
    with broker_process(tmp_path, "term", ns.addr, settings=delays) as b:
        rb = RawBroker(client, b.addr)
        assert (await rb.create_topic("TermT", 1)).code == 0
        assert (await rb.send("TermT", b"persisted")).code == 0
        assert await route(client, ns.addr, "TermT") is not None
        # one delayed message delivered before the restart, one still waiting at shutdown
        assert (await rb.send("TermD", b"early", props={"DELAY": "1"})).code == 0
        await eventually(lambda: _found(rb, "TermD"), timeout=5)
        assert (await rb.send("TermD", b"late", queue_id=1, props={"DELAY": "2"})).code == 0
        offsets_before = orjson.loads((await rb.call(RequestCode.GET_ALL_DELAY_OFFSET)).body)["offsetTable"]
        assert offsets_before["1"] == 1
        parked = asyncio.create_task(rb.pull("G", "TermT", offset=1, sys_flag=6, suspend_ms=20_000, timeout=30))
        await asyncio.sleep(0.3)
        assert not parked.done()
        started = time.monotonic()
        b.proc.send_signal(signal.SIGTERM)
        resp = await asyncio.wait_for(parked, 10)
        assert resp.code == ResponseCode.PULL_NOT_FOUND
        rc = await asyncio.get_running_loop().run_in_executor(None, b.proc.wait, 15)
        assert rc == 0, b.log_text()[-3000:]
        assert time.monotonic() - started < 10
        assert await route(client, ns.addr, "TermT") is None  # unregistered, not merely expired
        log = b.log_text()
        assert "unregistered from 1 of 1 NameServers" in log and "Traceback" not in log
        assert "start-up objects frozen (gc.freeze), generation-0 threshold 10000" in log  # tune_garbage_collector
    # the store was shut down cleanly: a restart finds the message, and delayed delivery resumes
    # where it stopped: the early message is not delivered again, the late one arrives once
    with broker_process(tmp_path, "term", ns.addr, port=b.port, settings=delays) as b2:
        rb = RawBroker(client, b2.addr)
        client.close_connection(b2.addr)
        pulled = await rb.pull("G2", "TermT")
        assert pulled.code == 0
        offsets_after = orjson.loads((await rb.call(RequestCode.GET_ALL_DELAY_OFFSET)).body)["offsetTable"]
        assert offsets_after["1"] == offsets_before["1"]
        late = await eventually(lambda: _found(rb, "TermD", queue_id=1), timeout=8)
        assert [m.body for m in records(late)] == [b"late"]
        await asyncio.sleep(0.5)
        assert [m.body for m in records(await rb.pull("G2", "TermD"))] == [b"early"]
        assert [m.body for m in records(await rb.pull("G2", "TermD", queue_id=1))] == [b"late"]


async def _found(rb: RawBroker, topic: str, queue_id: int = 0) -> object:
    resp = await rb.pull("G_found", topic, queue_id=queue_id)
    return resp if resp.code == 0 else None


async def test_http_endpoints(tmp_path: Path, client: RemotingClient, ns: NameServerProc) -> None:
    with broker_process(tmp_path, "web", ns.addr) as b:
        rb = RawBroker(client, b.addr)
        async with aiohttp.ClientSession() as http:
            assert (await (await http.get(f"{b.http}/healthz")).json())["status"] == "ok"
            ready = await eventually(lambda: _status(http, f"{b.http}/readyz", 200))
            assert ready["nameServers"] == [ns.addr]
            created = await http.post(f"{b.http}/api/v1/topics", json={"topic": "WebT", "readQueueNums": 2,
                                                                         "writeQueueNums": 2})
            assert created.status == 201 and (await created.json())["topicName"] == "WebT"
            assert await route(client, ns.addr, "WebT") is not None
            bad = await http.post(f"{b.http}/api/v1/topics", json={"topic": "bad name"})
            assert bad.status == 400
            for _ in range(3):
                assert (await rb.send("WebT", b"h", queue_id=1)).code == 0
            await rb.call(RequestCode.UPDATE_CONSUMER_OFFSET,
                          {"consumerGroup": "WebG", "topic": "WebT", "queueId": 1, "commitOffset": 1})
            topics = (await (await http.get(f"{b.http}/api/v1/topics")).json())["topics"]
            web_t = next(t for t in topics if t["topicName"] == "WebT")
            assert web_t["queues"][1]["maxOffset"] == 3
            group = await (await http.get(f"{b.http}/api/v1/consumer-groups/WebG")).json()
            assert group["lag"] == 2 and group["topics"][0]["topic"] == "WebT"
            groups = (await (await http.get(f"{b.http}/api/v1/consumer-groups")).json())["groups"]
            assert any(g["group"] == "WebG" for g in groups)
            assert (await http.get(f"{b.http}/api/v1/consumer-groups/nobody")).status == 404
            status = await (await http.get(f"{b.http}/api/v1/status")).json()
            assert status["brokerName"] == "web" and status["ready"] is True and status["listenPort"] == b.port
            metrics = await (await http.get(f"{b.http}/metrics")).text()
            for needle in (
                'rocketmq_broker_messages_in_total{topic="WebT"} 3.0',
                "rocketmq_broker_in_bytes_total",
                "rocketmq_broker_send_latency_seconds_bucket",
                "rocketmq_broker_pull_latency_seconds",
                "rocketmq_broker_commitlog_max_offset_bytes",
                "rocketmq_broker_disk_usage_ratio",
                'rocketmq_broker_consumer_lag{group="WebG",queue_id="1",topic="WebT"} 2.0',
                "rocketmq_group_diff{",
                "rocketmq_broker_flush_latency_seconds",
                # The RocketMQ exporter's names and labels.
                'rocketmq_producer_offset{broker="web",cluster="TestCluster",topic="WebT"} 3.0',
                'rocketmq_consumer_offset{broker="web",cluster="TestCluster",group="WebG",topic="WebT"} 1.0',
                'rocketmq_producer_tps{broker="web",cluster="TestCluster",topic="WebT"}',
                'rocketmq_broker_tps{broker="web",cluster="TestCluster"}',
                'rocketmq_broker_qps{broker="web",cluster="TestCluster"}',
                "process_cpu_seconds_total",
            ):
                assert needle in metrics, needle
            families = {f.name: f for f in text_string_to_metric_families(metrics)}
            (tps,) = [s for s in families["rocketmq_producer_tps"].samples if s.labels["topic"] == "WebT"]
            assert tps.value > 0
            (behind,) = [s for s in families["rocketmq_group_get_latency_by_storetime"].samples
                         if s.labels["group"] == "WebG"]
            assert 0 < behind.value < 600_000  # ms since the 2nd message of queue 1 was stored
            deleted = await http.delete(f"{b.http}/api/v1/topics/WebT")
            assert deleted.status == 200
            assert (await http.delete(f"{b.http}/api/v1/topics/WebT")).status == 404


async def _status(http: aiohttp.ClientSession, url: str, status: int) -> dict[str, object] | None:
    resp = await http.get(url)
    body: dict[str, object] = await resp.json()
    return body if resp.status == status else None


async def test_slave_refuses_sends(tmp_path: Path, client: RemotingClient, ns: NameServerProc) -> None:
    settings = {"brokerId": "1", "brokerRole": "SLAVE"}
    with broker_process(tmp_path, "slave", ns.addr, settings=settings) as b:
        rb = RawBroker(client, b.addr)
        resp = await rb.send("SELF_TEST_TOPIC", b"x")
        assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in (resp.remark or "")
        created = await rb.create_topic("SlaveT")
        assert created.code == ResponseCode.SERVICE_NOT_AVAILABLE
        pulled = await rb.pull("G", "SELF_TEST_TOPIC")
        # an empty queue on a slave: PULL_NOT_FOUND at the requested offset, the master suggested
        assert pulled.code == ResponseCode.PULL_NOT_FOUND and pulled.ext_fields["suggestWhichBrokerId"] == "0"
        assert pulled.ext_fields["nextBeginOffset"] == "0"
        moved = await rb.pull("G", "SELF_TEST_TOPIC", offset=7)
        # on a master this is PULL_OFFSET_MOVED to 0; a slave never moves a consumer (offsetCheckInSlave)
        assert moved.code == ResponseCode.PULL_RETRY_IMMEDIATELY and moved.ext_fields["nextBeginOffset"] == "7"


async def test_nameserver_started_after_the_broker(tmp_path: Path, client: RemotingClient) -> None:
    ns_port = free_port()
    with broker_process(tmp_path, "early", f"localhost:{ns_port}") as b:
        async with aiohttp.ClientSession() as http:
            not_ready = await http.get(f"{b.http}/readyz")
            assert not_ready.status == 503
            assert "not registered" in str((await not_ready.json())["reasons"])
            with nameserver_process(tmp_path, port=ns_port) as ns:
                # re-resolved and re-registered at the next heartbeat (period 2 s in tests)
                await eventually(lambda: route(client, ns.addr, "TBW102"), timeout=10)
                await eventually(lambda: _status(http, f"{b.http}/readyz", 200), timeout=5)


async def test_auto_create_disabled(tmp_path: Path, client: RemotingClient, ns: NameServerProc) -> None:
    settings = {"autoCreateTopicEnable": "false"}
    with broker_process(tmp_path, "noauto", ns.addr, settings=settings) as b:
        rb = RawBroker(client, b.addr)
        resp = await rb.send("NewTopic", b"x")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        assert resp.remark == "topic[NewTopic] not exist, apply first please!"
        table = orjson.loads((await rb.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body)["topicConfigTable"]
        assert "TBW102" not in table and "SCHEDULE_TOPIC_XXXX" in table


async def test_clients_expire_without_heartbeats(tmp_path: Path, ns: NameServerProc) -> None:
    settings = {"channelExpiredTimeout": "800", "clientChannelScanInterval": "200"}
    with broker_process(tmp_path, "expiry", ns.addr, settings=settings) as b:
        watcher, member = RemotingClient(), RemotingClient()
        try:
            notices: list[str] = []
            watcher.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                             lambda req, conn: notices.append(req.ext_fields["consumerGroup"]))
            w, m = RawBroker(watcher, b.addr), RawBroker(member, b.addr)
            assert (await m.heartbeat("member", [("EG", ["SELF_TEST_TOPIC"])])).code == 0
            member_conn = await m.connection()
            started = time.monotonic()
            # the watcher keeps heartbeating; the member goes silent
            while time.monotonic() - started < 3:
                await w.heartbeat("watcher", [("EG", ["SELF_TEST_TOPIC"])])
                listing = await w.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "EG"})
                if orjson.loads(listing.body)["consumerIdList"] == ["watcher"]:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the silent member never expired")
            assert notices and notices[-1] == "EG"
            await eventually(lambda: member_conn.closed, timeout=3)  # its connection was closed
        finally:
            await watcher.close()
            await member.close()

