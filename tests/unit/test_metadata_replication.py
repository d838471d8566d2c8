"""Metadata changes written into the CommitLog (``rocket.broker.metadata.replication``): a master's
topic, group and offset changes become records of ``rmq_sys_broker_metadata`` (offsets coalesced,
one record per turn of the loop), its CommitLog bytes appended to a slave's store are applied there
by the reput, and a copy round's older snapshot never undoes a newer record."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rocket.broker.config import BrokerConfig
from rocket.broker.metadata import BrokerMetadata
from rocket.broker.metadata.replication import (
    METADATA_TOPIC,
    MetadataReplicator,
    decode_record,
    encode_record,
    respond_when_replicated,
)
from rocket.protocol import SubscriptionGroupConfig, TopicConfig
from rocket.remoting import RemotingCommand, ResponseCode
from rocket.remoting.connection import ANSWER_LATER
from rocket.store import DefaultMessageStore
from rocket.store.api import BrokerRole, PutMessageRequest, PutMessageResult, PutMessageStatus


class BusyOnceStore(DefaultMessageStore):
    """A real store that refuses its first put with OS_PAGECACHE_BUSY (a subclass: the store's
    methods are not replaceable on an instance in its compiled form); ``refusals`` lists the
    refused batches' sizes."""

    refusals: list[int]

    def put_messages_nowait(self, reqs: list[PutMessageRequest]) -> Any:
        if not self.refusals:
            self.refusals.append(len(reqs))
            return PutMessageResult(PutMessageStatus.OS_PAGECACHE_BUSY, remark="busy")
        return super().put_messages_nowait(reqs)


async def _broker(root: Path, *, master: bool, replicate: Any = None,
                  store_class: type[DefaultMessageStore] = DefaultMessageStore) -> Any:
    cfg = BrokerConfig(broker_name="g", enable_controller_mode=True, controller_addr="127.0.0.1:1",
                       store_path_root_dir=str(root), broker_role=BrokerRole.SYNC_MASTER if master else
                       BrokerRole.SLAVE, broker_id=0 if master else 1)
    store = store_class(cfg.store_config())
    await store.start()
    metadata = BrokerMetadata(root / "config")
    await metadata.load()
    broker: Any = SimpleNamespace(config=cfg, store=store, metadata=metadata, store_ready=True,
                                  ha=SimpleNamespace(replicate_nowait=replicate or (lambda put: put)))
    broker.metadata_replication = MetadataReplicator(broker)
    broker.metadata_replication.attach()
    return broker


async def _close(*brokers: Any) -> None:
    for b in brokers:
        await b.store.shutdown()
        await b.metadata.close(backup=False)


def _records(broker: Any) -> list[tuple[Any, Any, Any]]:
    cq = broker.store.find_consume_queue(METADATA_TOPIC, 0)
    if cq is None:
        return []
    out = []
    for q in range(cq.min_offset, cq.max_offset):
        phys, _size, _tags = cq.entry(q)
        out.append(decode_record(broker.store.look_message_by_offset(phys).body))
    return out


async def _records_when(broker: Any, done: Any, timeout: float = 10.0) -> list[tuple[Any, Any, Any]]:
    """The broker's records once ``done(records)`` holds, or those there after ``timeout`` seconds
    (the caller's assertions then fail): records are written on the loop (a refused one a second
    later) and reach the ConsumeQueue through the reput, whose pace follows the machine's load."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        records = _records(broker)
        if done(records) or asyncio.get_running_loop().time() > deadline:
            return records
        await asyncio.sleep(0.05)


def test_record_round_trip_and_malformed_records() -> None:
    body = encode_record({"T": TopicConfig("T", read_queue_nums=2, write_queue_nums=2).to_json(), "Gone": None},
                         {"G": SubscriptionGroupConfig(group_name="G", retry_max_times=5).to_json()},
                         {"T@G": {"0": 12, "1": 7}, "X@G": None})
    topics, groups, offsets = decode_record(body)
    assert topics["T"] is not None and topics["T"].read_queue_nums == 2 and topics["Gone"] is None
    assert groups["G"] is not None and groups["G"].retry_max_times == 5
    assert offsets == {"T@G": {0: 12, 1: 7}, "X@G": None}
    for bad, why in ((b"not json", "not JSON"), (b'{"v": 99}', "version-1"),
                     (b'{"v": 1, "topics": []}', "JSON objects"), (b'{"v": 1, "offsets": {"a@b": {"x": 1}}}',
                                                                   "malformed")):
        with pytest.raises(ValueError, match=why):
            decode_record(bad)


async def test_master_records_changes_coalesces_offsets_and_a_slave_applies_them(tmp_path: Path) -> None:
    master = await _broker(tmp_path / "m", master=True)
    slave = await _broker(tmp_path / "s", master=False)
    try:
        md = master.metadata
        rep = master.metadata_replication
        md.topic_configs.put(TopicConfig("Orders", read_queue_nums=4, write_queue_nums=4))
        assert rep.records_written == 1  # a topic is written at once, before any message to it
        md.subscription_groups.put(SubscriptionGroupConfig(group_name="CG", retry_max_times=3))
        for q in range(4):
            for off in range(1, 101):
                md.consumer_offsets.commit("CG", "Orders", q, off)
        assert rep.records_written == 2  # offsets wait for the end of this turn of the loop
        await asyncio.sleep(0)
        assert rep.records_written == 3, "400 commits in one turn of the loop make one record"
        md.consumer_offsets.commit("CG", "Orders", 0, 100)  # no change: nothing written
        await asyncio.sleep(0)
        assert rep.records_written == 3
        md.subscription_groups.delete("CG")
        md.consumer_offsets.remove_group("CG")
        records = await _records_when(master, lambda r: len(r) >= 5)
        assert len(records) == 5
        assert records[2][2] == {"Orders@CG": {0: 100, 1: 100, 2: 100, 3: 100}}
        assert records[3][1] == {"CG": None} and records[4][2] == {"Orders@CG": None}

        # the master's log, appended to the slave's store byte for byte (what HA does)
        data = master.store.read_commit_log(0, 1 << 20)
        assert await slave.store.append_commit_log_data(0, data)
        slave.store.dispatch_all()
        sm = slave.metadata
        assert sm.topic_configs.get("Orders") is not None and sm.topic_configs.get("Orders").write_queue_nums == 4
        assert sm.subscription_groups.get("CG") is None  # created, then deleted
        assert sm.consumer_offsets.entry("Orders@CG") is None
        assert slave.metadata_replication.records_applied == 5
        assert master.metadata_replication.records_applied == 0  # a master never applies its own
        assert slave.metadata_replication.records_written == 0  # a slave records nothing
    finally:
        await _close(master, slave)


async def test_a_copy_round_snapshot_does_not_undo_newer_records(tmp_path: Path) -> None:
    slave = await _broker(tmp_path / "s", master=False)
    try:
        rep = slave.metadata_replication
        rep.open_window()
        rep.apply(encode_record({}, {}, {"T@G": {"0": 50}}))  # arrives while the round runs
        slave.metadata.consumer_offsets.replace_all({"offsetTable": {"T@G": {"0": 40}}})  # the older snapshot
        assert slave.metadata.consumer_offsets.query("G", "T", 0) == 40
        rep.close_window()
        assert slave.metadata.consumer_offsets.query("G", "T", 0) == 50
    finally:
        await _close(slave)


class _Conn:
    """A connection that keeps what it was asked to answer later."""

    def __init__(self) -> None:
        self.answers: list[RemotingCommand] = []

    def answer(self, request: RemotingCommand, response: RemotingCommand, started: float = 0.0) -> None:
        self.answers.append(response)


async def test_answers_wait_for_replication_and_say_when_it_failed(tmp_path: Path) -> None:
    pending: list[asyncio.Future[PutMessageResult]] = []

    def replicate(put: Any) -> asyncio.Future[PutMessageResult]:
        fut: asyncio.Future[PutMessageResult] = asyncio.get_running_loop().create_future()
        pending.append(fut)
        return fut

    master = await _broker(tmp_path / "m", master=True, replicate=replicate)
    rep = master.metadata_replication
    conn: Any = _Conn()
    try:
        request = RemotingCommand(code=15)
        for off in (1, 2, 3):  # three commits in one turn of the loop: one record, three answers
            master.metadata.consumer_offsets.commit("CG", "T", 0, off)
            assert respond_when_replicated(rep, request, conn, request.response()) is ANSWER_LATER
        assert not pending  # the answers wait for the record of this turn of the loop ...
        await asyncio.sleep(0)
        assert len(pending) == 1 and not conn.answers  # ... written at its end, not yet replicated
        pending[0].set_result(PutMessageResult(PutMessageStatus.PUT_OK))
        await asyncio.sleep(0)
        assert [a.code for a in conn.answers] == [ResponseCode.SUCCESS] * 3

        master.metadata.consumer_offsets.commit("CG", "T", 0, 6)
        assert respond_when_replicated(rep, request, conn, request.response()) is ANSWER_LATER
        barrier = rep.barrier()
        await asyncio.sleep(0)
        pending[1].set_result(PutMessageResult(PutMessageStatus.FLUSH_SLAVE_TIMEOUT, [object()]))  # type: ignore[list-item]
        assert barrier is not None and "FLUSH_SLAVE_TIMEOUT" in (await barrier or "")
        failed = conn.answers[-1]
        assert failed.code == ResponseCode.SYSTEM_ERROR and "FLUSH_SLAVE_TIMEOUT" in (failed.remark or "")

        oneway = RemotingCommand(code=15, flag=2)
        master.metadata.consumer_offsets.commit("CG", "T", 0, 7)
        assert isinstance(respond_when_replicated(rep, oneway, conn, oneway.response()), RemotingCommand)
        await asyncio.sleep(0)
        assert len(pending) == 3  # recorded all the same

        master.config.broker_role = BrokerRole.SLAVE  # demoted: nothing recorded, nothing to wait for
        master.metadata.consumer_offsets.commit("CG", "T", 0, 8)
        assert respond_when_replicated(rep, request, conn, request.response()).code == 0
        await asyncio.sleep(0)
        assert len(pending) == 3
    finally:
        await _close(master)


async def test_a_large_change_is_split_over_records_a_slave_applies_in_full(tmp_path: Path) -> None:
    master = await _broker(tmp_path / "m", master=True)
    slave = await _broker(tmp_path / "s", master=False)
    try:
        master.metadata.topic_configs.put_many(
            [TopicConfig(f"Many{i}", read_queue_nums=2, write_queue_nums=2) for i in range(3000)])
        records = await _records_when(master, lambda r: sum(len(t) for t, _, _ in r) >= 3000)
        assert len(records) > 1, "3,000 topics (~1.5 MB estimated) make more than one record"
        assert sum(len(t) for t, _, _ in records) == 3000
        data = master.store.read_commit_log(0, 64 << 20)
        assert await slave.store.append_commit_log_data(0, data)
        slave.store.dispatch_all()
        assert all(slave.metadata.topic_configs.get(f"Many{i}") is not None for i in range(3000))
    finally:
        await _close(master, slave)


async def test_a_record_the_store_refuses_is_written_again_a_second_later(tmp_path: Path) -> None:
    master = await _broker(tmp_path / "m", master=True, store_class=BusyOnceStore)
    rep = master.metadata_replication
    refusals = master.store.refusals = []
    conn: Any = _Conn()
    try:
        request = RemotingCommand(code=15)
        master.metadata.consumer_offsets.commit("CG", "T", 0, 9)
        assert respond_when_replicated(rep, request, conn, request.response()) is ANSWER_LATER
        await asyncio.sleep(0)
        assert refusals == [1] and rep.records_written == 0
        assert conn.answers[0].code == ResponseCode.SYSTEM_ERROR and "OS_PAGECACHE_BUSY" in conn.answers[0].remark
        await asyncio.sleep(1.3)
        assert rep.records_written == 1
        assert _records(master)[-1][2] == {"T@CG": {0: 9}}
    finally:
        await _close(master)
