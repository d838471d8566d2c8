"""Transactional messages with our own client (:class:`rocket.client.TransactionProducer`) against a
real NameServer and broker process: commit, rollback, UNKNOWN decided by a check-back, the check going
to another producer of the group when the sender is gone, a broker restart between the half message
and its check, and the raw END_TRANSACTION answers. The broker checks every 300 ms and considers a
transaction due after ``transactionTimeOut`` (1 s here, 3 s in the restart test)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocket.client import LocalTransactionState, MessageQueue, PullConsumer, TransactionProducer, build_message
from rocket.client.consumer import PullStatus
from rocket.client.errors import TopicRouteError
from rocket.message import MessageExt, decode_offset_msg_id
from rocket.remoting import RemotingClient, RemotingTimeoutError, RequestCode
from tests.integration.broker_harness import BrokerProc, RawBroker, broker_process, nameserver_process
from tests.support import eventually, unique

pytestmark = pytest.mark.timeout(120)

TX_SETTINGS = {"transactionCheckInterval": "300", "transactionTimeOut": "1000", "transactionCheckMax": "15",
               "autoCreateTopicEnable": "true"}
COMMIT, ROLLBACK, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, BrokerProc]]:
    tmp = tmp_path_factory.mktemp("tx")
    with nameserver_process(tmp) as ns, broker_process(tmp, "broker-tx", ns.addr, settings=TX_SETTINGS) as broker:
        yield ns.addr, broker


async def routed_queues(consumer: PullConsumer, topic: str, timeout: float = 10.0) -> list[MessageQueue]:
    """The queues of ``topic`` once the NameServer routes it: a topic the send auto-created reaches
    the NameServer with the broker's next registration, which may land after the send's answer
    (as Apache's ``createTopicInSendMessageMethod`` registers asynchronously)."""
    queues: list[MessageQueue] = await eventually(lambda: consumer.queues(topic), timeout,
                                                  what=f"a route for {topic}", retry_on=(TopicRouteError,))
    return queues


async def delivered(namesrv: str, topic: str) -> list[MessageExt]:
    """Every message of ``topic``, read from offset 0 of each queue."""
    consumer = await PullConsumer(unique("CID_TX"), namesrv).start()
    try:
        out: list[MessageExt] = []
        for mq in await routed_queues(consumer, topic):
            offset = 0
            while True:
                result = await consumer.pull(mq, offset)
                if result.status is not PullStatus.FOUND:
                    break
                out.extend(result.messages)
                offset = result.next_begin_offset
        return out
    finally:
        await consumer.shutdown()


def ids(msgs: list[MessageExt]) -> Counter[str]:
    return Counter(m.msg_id for m in msgs)


async def wait_delivered(namesrv: str, topic: str, msg_id: str, timeout: float = 15.0) -> list[MessageExt]:
    found: list[MessageExt] = []

    async def check() -> bool:
        nonlocal found
        found = [m for m in await delivered(namesrv, topic) if m.msg_id == msg_id]
        return bool(found)

    await eventually(check, timeout=timeout, interval=0.3, what=f"{msg_id} delivered to {topic}")
    return found


def producer(namesrv: str, group: str, check: LocalTransactionState | None, topic: str = "") -> TransactionProducer:
    def listener(msg: MessageExt) -> LocalTransactionState:
        if check is None:
            raise AssertionError(f"unexpected check of {msg.msg_id}")
        return check

    return TransactionProducer(group, namesrv, check_listener=listener, heartbeat_interval=0.5,
                               check_topics=[topic] if topic else [])


async def test_commit_is_delivered_once_and_rollback_never(cluster: tuple[str, BrokerProc]) -> None:
    namesrv, _ = cluster
    topic = unique("TxCommit")
    async with producer(namesrv, unique("PID_TX"), None) as p:
        seen: list[tuple[str, object]] = []

        def commit(msg: object, arg: object) -> LocalTransactionState:
            seen.append(("commit", arg))
            return COMMIT

        async def rollback(msg: object, arg: object) -> LocalTransactionState:
            return ROLLBACK

        committed = await p.send_message_in_transaction(build_message(topic, b"yes", keys="k1", tags="T"),
                                                        commit, arg=7)
        rolled = await p.send_message_in_transaction(build_message(topic, b"no"), rollback)
        assert seen == [("commit", 7)]
        assert committed.local_state is COMMIT and rolled.local_state is ROLLBACK
        msgs = await wait_delivered(namesrv, topic, committed.msg_id)
        await asyncio.sleep(2.5)  # past transactionTimeOut + a few check runs: no check-back, no second copy
        everything = await delivered(namesrv, topic)
        assert ids(everything) == {committed.msg_id: 1}, ids(everything)
        m = msgs[0]
        assert m.body == b"yes" and m.keys == ["k1"] and m.tags == "T"
        assert m.properties["TRAN_MSG"] == "true" and m.properties["PGROUP"] == p.group
        assert "REAL_TOPIC" not in m.properties and m.sys_flag & 0xC == 0x8
        assert m.queue_id == committed.send_result.queue.queue_id
        assert sum(p.checks_answered.values()) == 0


@pytest.mark.parametrize("answer", [COMMIT, ROLLBACK])
async def test_unknown_is_decided_by_check_back(cluster: tuple[str, BrokerProc], answer: LocalTransactionState
                                                ) -> None:
    namesrv, _ = cluster
    topic = unique("TxCheck")
    async with producer(namesrv, unique("PID_TX"), answer) as p:
        sent = time.monotonic()
        result = await p.send_message_in_transaction(build_message(topic, b"maybe"), lambda m, a: UNKNOWN)
        assert result.local_state is UNKNOWN
        assert await delivered(namesrv, topic) == []  # the half message is not visible
        await eventually(lambda: p.checks_answered[answer] >= 1, timeout=15, what="a check-back")
        assert time.monotonic() - sent >= 0.9  # not before transactionTimeOut
        if answer is COMMIT:
            await wait_delivered(namesrv, topic, result.msg_id)
        await asyncio.sleep(2.0)
        assert ids(await delivered(namesrv, topic)) == ({result.msg_id: 1} if answer is COMMIT else {})
        assert p.checks_answered[answer] == 1, p.checks_answered  # decided: never checked again


async def test_check_goes_to_another_producer_of_the_group(cluster: tuple[str, BrokerProc]) -> None:
    namesrv, _ = cluster
    topic, group = unique("TxOther"), unique("PID_TX")
    other = await producer(namesrv, group, COMMIT, topic=topic).start()
    try:
        async with producer(namesrv, group, None) as sender:
            result = await sender.send_message_in_transaction(build_message(topic, b"orphan"), lambda m, a: UNKNOWN)
        # the sender is gone (unregistered, connection closed): the other instance answers
        await eventually(lambda: other.checks_answered[COMMIT] >= 1, timeout=15, what="a check-back to the other")
        await wait_delivered(namesrv, topic, result.msg_id)
        await asyncio.sleep(1.5)
        assert ids(await delivered(namesrv, topic)) == {result.msg_id: 1}
        assert sum(sender.checks_answered.values()) == 0  # never asked once it was gone
    finally:
        await other.shutdown()


async def test_end_transaction_answers(cluster: tuple[str, BrokerProc]) -> None:
    """Raw END_TRANSACTION: unknown offset, wrong group, wrong table offset, a second commit, unknown state."""
    namesrv, broker = cluster
    topic = unique("TxRaw")
    async with producer(namesrv, unique("PID_TX"), None) as p:
        result = await p.send_message_in_transaction(build_message(topic, b"raw"), lambda m, a: UNKNOWN)
    _, offset = decode_offset_msg_id(result.send_result.offset_msg_id)
    client = RemotingClient()
    raw = RawBroker(client, broker.addr)
    try:
        def header(**over: object) -> dict[str, object]:
            return {"producerGroup": p.group, "tranStateTableOffset": result.send_result.queue_offset,
                    "commitLogOffset": offset, "commitOrRollback": 8, "fromTransactionCheck": "false",
                    "msgId": result.msg_id, **over}

        reply = await raw.call(RequestCode.END_TRANSACTION, header(commitLogOffset=offset + 1))
        assert (reply.code, reply.remark) == (1, "Find prepared transaction message failed")
        reply = await raw.call(RequestCode.END_TRANSACTION, header(producerGroup="PID_OTHER"))
        assert (reply.code, reply.remark) == (1, "The producer group wrong")
        reply = await raw.call(RequestCode.END_TRANSACTION, header(tranStateTableOffset=10**9))
        assert (reply.code, reply.remark) == (1, "The transaction state table offset wrong")
        # State 0 (unknown) gets no answer at all, as Apache's: the call times out.
        with pytest.raises(RemotingTimeoutError, match="timed out"):
            await raw.call(RequestCode.END_TRANSACTION, header(commitOrRollback=0), timeout=1.0)
        assert (await raw.call(RequestCode.END_TRANSACTION, header())).code == 0
        again = await raw.call(RequestCode.END_TRANSACTION, header())
        assert again.code == 1 and "already ended" in (again.remark or "")
        rollback = await raw.call(RequestCode.END_TRANSACTION, header(commitOrRollback=12))
        assert rollback.code == 1
        assert ids(await delivered(namesrv, topic)) == {result.msg_id: 1}
        missing = await raw.call(RequestCode.END_TRANSACTION, {"producerGroup": p.group})
        assert missing.code == 1 and "tranStateTableOffset" in (missing.remark or "")
    finally:
        await client.close()


async def test_check_back_survives_a_broker_restart(tmp_path: Path) -> None:
    """Half message stored, broker killed -9 and restarted before the check: the check still comes
    (state rebuilt from the half and op topics), and the commit is delivered once."""
    settings = {**TX_SETTINGS, "transactionTimeOut": "3000"}
    with nameserver_process(tmp_path) as ns:
        topic, group = unique("TxRestart"), unique("PID_TX")
        with broker_process(tmp_path, "broker-r", ns.addr, settings=settings) as broker:
            port = broker.port
            p = await producer(ns.addr, group, COMMIT).start()
            committed = await p.send_message_in_transaction(build_message(topic, b"first"), lambda m, a: COMMIT)
            pending = await p.send_message_in_transaction(build_message(topic, b"second"), lambda m, a: UNKNOWN)
            await wait_delivered(ns.addr, topic, committed.msg_id)
            assert p.checks_answered[COMMIT] == 0
            broker.proc.kill()
            broker.proc.wait()
        try:
            with broker_process(tmp_path, "broker-r", ns.addr, settings=settings, port=port) as again:
                # a repeated commit of the transaction finished before the crash is refused (state from the op topic)
                client = RemotingClient()
                try:
                    _, offset = decode_offset_msg_id(committed.send_result.offset_msg_id)
                    reply = await RawBroker(client, again.addr).call(RequestCode.END_TRANSACTION, {
                        "producerGroup": group, "tranStateTableOffset": committed.send_result.queue_offset,
                        "commitLogOffset": offset, "commitOrRollback": 8, "msgId": committed.msg_id})
                    assert reply.code == 1 and "already ended" in (reply.remark or ""), reply
                finally:
                    await client.close()
                await eventually(lambda: p.checks_answered[COMMIT] >= 1, timeout=30, what="a check after restart")
                await wait_delivered(ns.addr, topic, pending.msg_id)
                await asyncio.sleep(1.5)
                assert ids(await delivered(ns.addr, topic)) == {committed.msg_id: 1, pending.msg_id: 1}
                assert p.checks_answered[COMMIT] == 1
        finally:
            await p.shutdown()
