"""Producer behaviour against in-process fake NameServer and brokers (no real servers)."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson
import pytest

from rocket.client import Producer, SendFailedError, SendStatus, build_message
from rocket.message import COMPRESS_OVER, SYSFLAG_COMPRESSED, decode_batch, decode_properties
from rocket.protocol import MessageQueue
from rocket.remoting import RemotingCommand, RemotingConnection, RemotingServer, RequestCode, ResponseCode


@dataclass
class FakeBroker:
    name: str
    server: RemotingServer = field(default_factory=lambda: RemotingServer(host="127.0.0.1"))
    requests: list[RemotingCommand] = field(default_factory=list)
    client_requests: list[RemotingCommand] = field(default_factory=list)
    answer: int = ResponseCode.SUCCESS
    offset: int = 0

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def start(self) -> None:
        for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            self.server.register(code, self._send)
        self.server.register(RequestCode.HEART_BEAT, self._record)
        self.server.register(RequestCode.UNREGISTER_CLIENT, self._record)
        await self.server.start()

    def _record(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        self.client_requests.append(request)
        return request.response()

    def _send(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        self.requests.append(request)
        if self.answer != ResponseCode.SUCCESS:
            return request.response(self.answer, "refused by test")
        offset = self.offset
        self.offset += 1
        return request.response(ext_fields={"msgId": f"{self.name}-{offset}", "queueId": request.ext_fields["e"],
                                            "queueOffset": offset})


@dataclass
class FakeNameServer:
    brokers: list[FakeBroker]
    topics: set[str]
    server: RemotingServer = field(default_factory=lambda: RemotingServer(host="127.0.0.1"))
    route_requests: list[str] = field(default_factory=list)
    queue_nums: int = 2

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def start(self) -> None:
        self.server.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._route)
        await self.server.start()

    def _route(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        topic = request.ext_fields["topic"]
        self.route_requests.append(topic)
        if topic not in self.topics:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for {topic}")
        perm = 7 if topic == "TBW102" else 6
        route = {
            "queueDatas": [{"brokerName": b.name, "readQueueNums": self.queue_nums,
                            "writeQueueNums": self.queue_nums if topic != "TBW102" else 8,
                            "perm": perm, "topicSysFlag": 0} for b in self.brokers],
            "brokerDatas": [{"cluster": "C", "brokerName": b.name, "brokerAddrs": {"0": b.addr}}
                            for b in self.brokers],
        }
        return request.response(body=orjson.dumps(route))


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[FakeNameServer, FakeBroker, FakeBroker]]:
    a, b = FakeBroker("broker-a"), FakeBroker("broker-b")
    await a.start()
    await b.start()
    ns = FakeNameServer([a, b], {"T", "TBW102"})
    await ns.start()
    yield ns, a, b
    for server in (ns.server, a.server, b.server):
        await server.stop()


async def test_send_uses_v2_short_headers_and_properties(cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]
                                                         ) -> None:
    ns, a, b = cluster
    async with Producer("PID", ns.addr) as producer:
        result = await producer.send(build_message("T", b"hello", tags="TagA", keys=["k1", "k2"],
                                                   properties={"color": "red"}))
    assert result.status is SendStatus.SEND_OK and result.ok
    request = (a.requests + b.requests)[0]
    assert request.code == RequestCode.SEND_MESSAGE_V2
    f = request.ext_fields
    assert f["a"] == "PID" and f["b"] == "T" and f["c"] == "TBW102" and f["f"] == "0" and f["m"] == "false"
    props = decode_properties(f["i"])
    assert props["TAGS"] == "TagA" and props["KEYS"] == "k1 k2" and props["color"] == "red"
    assert props["WAIT"] == "true" and props["UNIQ_KEY"] == result.msg_id and len(result.msg_id) == 32
    assert request.body == b"hello"
    assert result.queue.topic == "T" and result.queue_offset == 0
    assert result.offset_msg_id.startswith(result.queue.broker_name)


async def test_large_bodies_are_compressed(cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]) -> None:
    ns, a, b = cluster
    body = b"x" * (COMPRESS_OVER + 1)
    async with Producer("PID", ns.addr) as producer:
        await producer.send(build_message("T", body))
        await producer.send(build_message("T", b"y" * COMPRESS_OVER))
    sent = a.requests + b.requests
    big = next(r for r in sent if r.ext_fields["f"] == str(SYSFLAG_COMPRESSED))
    assert zlib.decompress(big.body) == body and len(big.body) < 100
    assert any(r.ext_fields["f"] == "0" and len(r.body) == COMPRESS_OVER for r in sent)


async def test_round_robin_over_both_brokers(cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]) -> None:
    ns, a, b = cluster
    async with Producer("PID", ns.addr) as producer:
        results = [await producer.send(build_message("T", b"m")) for _ in range(8)]
    assert len(a.requests) == 4 and len(b.requests) == 4
    assert {r.queue for r in results} == {MessageQueue("T", n, q) for n in ("broker-a", "broker-b") for q in (0, 1)}


async def test_retry_moves_to_the_other_broker_and_avoids_the_failed_one(
        cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]) -> None:
    ns, a, b = cluster
    a.answer = ResponseCode.SERVICE_NOT_AVAILABLE
    async with Producer("PID", ns.addr) as producer:
        results = [await producer.send(build_message("T", b"m")) for _ in range(6)]
    assert {r.queue.broker_name for r in results} == {"broker-b"}
    assert len(a.requests) == 1  # tried once, then avoided
    assert len(b.requests) == 6


async def test_unreachable_broker_is_retried_elsewhere(cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]
                                                       ) -> None:
    ns, a, _b = cluster
    await a.server.stop()
    async with Producer("PID", ns.addr, send_timeout=1.0) as producer:
        results = [await producer.send(build_message("T", b"m")) for _ in range(4)]
    assert {r.queue.broker_name for r in results} == {"broker-b"}


async def test_all_attempts_failing_raises_send_failed(cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]
                                                       ) -> None:
    ns, a, b = cluster
    a.answer = b.answer = ResponseCode.SYSTEM_ERROR
    async with Producer("PID", ns.addr, retries=2) as producer:
        with pytest.raises(SendFailedError) as info:
            await producer.send(build_message("T", b"m"))
    assert len(info.value.attempts) == 3


async def test_non_retryable_code_raises_at_once(cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]) -> None:
    from rocket.remoting import RemotingCommandError

    ns, a, b = cluster
    a.answer = b.answer = ResponseCode.MESSAGE_ILLEGAL
    async with Producer("PID", ns.addr) as producer:
        with pytest.raises(RemotingCommandError) as info:
            await producer.send(build_message("T", b"m"))
    assert info.value.code == ResponseCode.MESSAGE_ILLEGAL
    assert len(a.requests) + len(b.requests) == 1


async def test_flush_timeout_is_a_status_not_an_error(cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]
                                                      ) -> None:
    ns, a, b = cluster
    a.answer = b.answer = ResponseCode.FLUSH_DISK_TIMEOUT
    async with Producer("PID", ns.addr) as producer:
        result = await producer.send(build_message("T", b"m"))
    assert result.status is SendStatus.FLUSH_DISK_TIMEOUT and not result.ok


async def test_unknown_topic_goes_through_the_tbw102_template(
        cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]) -> None:
    ns, a, b = cluster
    async with Producer("PID", ns.addr, default_topic_queue_nums=3) as producer:
        results = [await producer.send(build_message("Fresh", b"m")) for _ in range(6)]
    assert "Fresh" in ns.route_requests and "TBW102" in ns.route_requests
    assert {r.queue.queue_id for r in results} == {0, 1, 2}  # min(3, 8) queues per group
    for request in a.requests + b.requests:
        assert request.ext_fields["b"] == "Fresh" and request.ext_fields["c"] == "TBW102"
        assert request.ext_fields["d"] == "3"


async def test_no_route_and_no_template_raises(cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]) -> None:
    from rocket.client import TopicRouteError

    ns, _a, _b = cluster
    ns.topics.discard("TBW102")
    async with Producer("PID", ns.addr) as producer:
        with pytest.raises(TopicRouteError):
            await producer.send(build_message("Fresh", b"m"))


async def test_batch_goes_to_one_queue_as_code_320(cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]) -> None:
    ns, a, b = cluster
    msgs = [build_message("T", f"m{i}", tags="TagB", keys=f"k{i}") for i in range(5)]
    async with Producer("PID", ns.addr) as producer:
        result = await producer.send_batch(msgs)
    (request,) = a.requests + b.requests
    assert request.code == RequestCode.SEND_BATCH_MESSAGE and request.ext_fields["m"] == "true"
    items = decode_batch(request.body)
    assert [i.body for i in items] == [f"m{i}".encode() for i in range(5)]
    uniqs = [decode_properties(i.properties)["UNIQ_KEY"] for i in items]
    assert result.msg_ids == uniqs and len(set(uniqs)) == 5
    assert decode_properties(items[2].properties)["KEYS"] == "k2"


async def test_batch_validation(cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]) -> None:
    ns, _, _ = cluster
    async with Producer("PID", ns.addr) as producer:
        with pytest.raises(ValueError, match="empty batch"):
            await producer.send_batch([])
        with pytest.raises(ValueError, match="a batch goes to one topic"):
            await producer.send_batch([build_message("T", b"a"), build_message("U", b"b")])
        with pytest.raises(ValueError, match="delayed messages cannot be batched"):
            await producer.send_batch([build_message("T", b"a", delay_level=2)])


async def test_orderly_send_same_key_same_queue(cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]) -> None:
    ns, _, _ = cluster
    async with Producer("PID", ns.addr) as producer:
        by_key: dict[str, set[MessageQueue]] = {}
        for i in range(40):
            key = f"order-{i % 5}"
            result = await producer.send_orderly(build_message("T", f"{i}"), key)
            by_key.setdefault(key, set()).add(result.queue)
    assert all(len(queues) == 1 for queues in by_key.values())
    assert len({next(iter(q)) for q in by_key.values()}) > 1


async def test_invalid_messages_are_refused(cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]) -> None:
    ns, _, _ = cluster
    async with Producer("PID", ns.addr) as producer:
        for bad, why in ((build_message("T", b""), "body is empty"),
                         (build_message("bad topic", b"x"), "only letters, digits"),
                         (build_message("TBW102", b"x"), "auto-create template"),
                         (build_message("T" * 128, b"x"), "length must be")):
            with pytest.raises(ValueError, match=why):
                await producer.send(bad)


async def test_nameserver_failover(cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]) -> None:
    ns, _a, _b = cluster
    from tests.support import free_port

    dead = f"127.0.0.1:{free_port()}"
    async with Producer("PID", f"{dead};{ns.addr}") as producer:
        producer.client._ns_index = 0  # start with the dead one
        result = await producer.send(build_message("T", b"m"))
    assert result.ok


async def test_send_before_start_raises() -> None:
    from rocket.client import NotStartedError

    producer = Producer("PID", "127.0.0.1:1")
    with pytest.raises(NotStartedError):
        await producer.send(build_message("T", b"m"))


async def test_heartbeat_on_first_route_and_unregister_on_shutdown(
        cluster: tuple[FakeNameServer, FakeBroker, FakeBroker]) -> None:
    import asyncio

    ns, a, b = cluster
    async with Producer("PID_HB", ns.addr) as producer:
        await producer.send(build_message("T", b"m"))
        for _ in range(50):
            if a.client_requests and b.client_requests:
                break
            await asyncio.sleep(0.02)
        client_id = producer.client.client_id
    for broker in (a, b):
        codes = [r.code for r in broker.client_requests]
        assert codes == [RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT], codes
        beat = orjson.loads(broker.client_requests[0].body)
        assert beat["clientID"] == client_id
        assert {"groupName": "PID_HB"} in beat["producerDataSet"] and beat["consumerDataSet"] == []
        unreg = broker.client_requests[1].ext_fields
        assert unreg["clientID"] == client_id and unreg["producerGroup"] == "PID_HB"
