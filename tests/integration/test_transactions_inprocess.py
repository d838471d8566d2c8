"""Transactions with brokers on one event loop (a NameServer, a master, a slave; no subprocesses):
after ``transactionCheckMax`` checks a half message goes to TRANS_CHECK_MAX_TIME_TOPIC (and the
metrics count it all); a slave never checks back, and after its promotion the new master does,
from the replicated half and op topics."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from rocket.broker.config import BrokerConfig
from rocket.broker.controller import BrokerController
from rocket.broker.transaction import HALF_TOPIC, OP_TOPIC
from rocket.client import LocalTransactionState, TransactionProducer, build_message
from rocket.message import MessageExt, decode_record
from rocket.nameserver.config import NameServerConfig
from rocket.nameserver.server import NameServer
from rocket.store.api import BrokerRole, GetMessageStatus
from tests.integration.broker_harness import broker_port
from tests.support import eventually

pytestmark = pytest.mark.timeout(90)


def _config(root: Path, name: str, namesrv: str, **fields: Any) -> BrokerConfig:
    cfg = BrokerConfig(broker_name="txgrp", listen_port=broker_port(), namesrv_addr=namesrv,
                       store_path_root_dir=str(root / name), bind_address="127.0.0.1", vip_channel_enable=False,
                       register_name_server_period=1000, ha_send_heartbeat_interval=500,
                       slave_sync_interval=300, **fields)
    cfg.store_overrides.update({"mappedFileSizeCommitLog": str(1 << 20), "maxHashSlotNum": "1000",
                                "maxIndexNum": "4000"})
    return cfg


@contextlib.asynccontextmanager
async def _nameserver() -> AsyncIterator[str]:
    ns = NameServer(NameServerConfig(host="127.0.0.1", port=0, http_port=0))
    await ns.start()
    try:
        yield f"127.0.0.1:{ns.port}"
    finally:
        await ns.stop()


@contextlib.asynccontextmanager
async def _broker(cfg: BrokerConfig) -> AsyncIterator[BrokerController]:
    b = BrokerController(cfg)
    await b.start()
    try:
        yield b
    finally:
        await b.shutdown()


def _messages(broker: BrokerController, topic: str) -> list[MessageExt]:
    out: list[MessageExt] = []
    for queue_id in broker.store.queue_ids(topic):
        result = broker.store.get_message(topic, queue_id, 0, 64)
        if result.status is GetMessageStatus.FOUND:
            out.extend(decode_record(r) for r in result.records)
    return out


def _metric(broker: BrokerController, line_start: str) -> float:
    for line in generate_latest(broker.metrics.registry).decode().splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _producer(namesrv: str, group: str, answer: LocalTransactionState, topic: str) -> TransactionProducer:
    return TransactionProducer(group, namesrv, check_listener=lambda msg: answer, heartbeat_interval=0.3,
                               poll_namesrv_interval=0.3, check_topics=[topic])


async def test_check_max_discards_to_trans_check_max_time_topic(tmp_path: Path) -> None:
    async with _nameserver() as ns, _broker(_config(tmp_path, "m", ns, transaction_check_interval=150,
                                                    transaction_time_out=400, transaction_check_max=2)) as master:
        topic = "TxDiscard"
        async with _producer(ns, "PID_DISCARD", LocalTransactionState.UNKNOWN, topic) as p:
            result = await p.send_message_in_transaction(build_message(topic, b"never decided", keys="kd"),
                                                         lambda m, a: LocalTransactionState.UNKNOWN)
            await eventually(lambda: _messages(master, "TRANS_CHECK_MAX_TIME_TOPIC"),
                             15, interval=0.05, what="the discard")
            await asyncio.sleep(0.5)
            assert p.checks_answered[LocalTransactionState.UNKNOWN] == 2
        [gone] = _messages(master, "TRANS_CHECK_MAX_TIME_TOPIC")
        assert gone.body == b"never decided" and gone.msg_id == result.msg_id
        assert gone.properties["TRANSACTION_CHECK_TIMES"] == "2" and gone.properties["REAL_TOPIC"] == topic
        assert _messages(master, topic) == []
        # the half queue is settled past every copy: nothing is checked any more
        assert master.transaction.half_offset == master.store.get_max_offset_in_queue(HALF_TOPIC, 0) == 3
        assert _metric(master, f'rocketmq_broker_transaction_half_messages_total{{topic="{topic}"}}') == 1
        assert _metric(master, f'rocketmq_broker_transaction_checks_total{{result="sent",topic="{topic}"}}') == 2
        assert _metric(master, f'rocketmq_broker_transaction_discarded_total{{topic="{topic}"}}') == 1
        assert _metric(master, f'rocketmq_broker_transaction_commits_total{{topic="{topic}"}}') == 0


async def test_slave_does_not_check_and_the_promoted_slave_does(tmp_path: Path) -> None:
    topic = "TxFailover"
    fast = {"transaction_check_interval": 150, "transaction_time_out": 600}
    async with _nameserver() as ns:
        master = BrokerController(_config(tmp_path, "m", ns, transaction_check_interval=3_600_000))
        await master.start()
        try:
            async with _broker(_config(tmp_path, "s", ns, broker_role=BrokerRole.SLAVE, broker_id=1,
                                       **fast)) as slave:
                async with _producer(ns, "PID_FAILOVER", LocalTransactionState.COMMIT, topic) as p:
                    done = await p.send_message_in_transaction(build_message(topic, b"done"),
                                                               lambda m, a: LocalTransactionState.COMMIT)
                    pending = await p.send_message_in_transaction(build_message(topic, b"pending"),
                                                                  lambda m, a: LocalTransactionState.UNKNOWN)
                    await eventually(lambda: slave.store.max_phy_offset == master.store.max_phy_offset > 0
                                     and len(_messages(slave, topic)) == 1, 15, interval=0.05, what="replication")
                    # the slave holds the half message (and the op of the finished one) but never checks
                    assert not slave.transaction.running and master.transaction.running
                    assert slave.status()["transactions"]["checkServiceRunning"] is False
                    assert slave.status()["transactions"]["halfMaxOffset"] == 2
                    assert len(_messages(slave, HALF_TOPIC)) == 2 and len(_messages(slave, OP_TOPIC)) == 1
                    await asyncio.sleep(1.5)
                    assert sum(p.checks_answered.values()) == 0
                    # failover: the master goes away, the slave is promoted and takes over the checks
                    await master.shutdown()
                    await slave.ha.promote(force=True)
                    assert slave.transaction.running
                    await eventually(lambda: p.checks_answered[LocalTransactionState.COMMIT] >= 1,
                                     15, interval=0.05, what="a check")
                    await eventually(lambda: len(_messages(slave, topic)) == 2,
                                     15, interval=0.05, what="the commit on the new master")
                    await asyncio.sleep(0.6)
                    got = sorted(m.msg_id for m in _messages(slave, topic))
                    assert got == sorted([done.msg_id, pending.msg_id])
                    assert p.checks_answered[LocalTransactionState.COMMIT] == 1
                    tx = slave.status()["transactions"]
                    assert tx["checkServiceRunning"] is True and tx["opMaxOffset"] == 2 and tx["checkRuns"] >= 1
        finally:
            await master.shutdown()
