"""Config stores: JSON shapes, persistence, corrupt-file fallback; and the checkpoint file."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocket.broker.metadata import (
    BrokerMetadata,
    ConsumerOffsetManager,
    SubscriptionGroupManager,
    TopicConfigManager,
)
from rocket.protocol import DataVersion, SubscriptionGroupConfig, TopicConfig
from rocket.store import ConfigCorruptError
from rocket.store.checkpoint import CHECKPOINT_SIZE, Checkpoint, StoreCheckpoint


def test_topic_config_java_json() -> None:
    tc = TopicConfig("TopicA", read_queue_nums=4, write_queue_nums=4)
    assert tc.to_json() == {"topicName": "TopicA", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                            "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
    assert TopicConfig.from_json(tc.to_json()) == tc
    assert TopicConfig.from_json(orjson.dumps(tc.to_json())) == tc
    assert TopicConfig.from_json({"topicName": "X", "readQueueNums": "8", "order": "true"}) == \
        TopicConfig("X", read_queue_nums=8, order=True)
    assert TopicConfig("d") == TopicConfig("d", 16, 16, 6, "SINGLE_TAG", 0, False)


def test_subscription_group_java_json() -> None:
    g = SubscriptionGroupConfig("cg", retry_max_times=3)
    obj = g.to_json()
    assert obj == {"groupName": "cg", "consumeEnable": True, "consumeFromMinEnable": True,
                   "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 3, "brokerId": 0,
                   "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True}
    assert SubscriptionGroupConfig.from_json(obj) == g
    assert SubscriptionGroupConfig.from_json({"groupName": "x", "consumeEnable": "false"}).consume_enable is False


def test_data_version_bumps() -> None:
    dv = DataVersion(timestamp=5, counter=2)
    dv = dv.next_version()
    assert dv.counter == 3 and dv.timestamp >= int(time.time() * 1000) - 5000
    assert DataVersion.from_json(dv.to_json()) == dv
    assert set(dv.to_json()) == {"timestamp", "counter"}


def test_topic_manager_persists_incrementally(tmp_path: Path) -> None:
    path = tmp_path / "topics.db"
    m = TopicConfigManager(path)
    m.load()
    m.put(TopicConfig("A", 4, 4))
    m.put_many([TopicConfig(f"B{i}") for i in range(5)])
    assert m.data_version.counter == 2
    assert m.delete("B3") and not m.delete("missing")
    m.put(TopicConfig("A", 8, 8))
    wrapper = m.wrapper_json()
    assert set(wrapper) == {"topicConfigTable", "dataVersion"}
    assert wrapper["topicConfigTable"]["A"]["readQueueNums"] == 8
    version = m.data_version.to_json()
    m.store.close()
    again = TopicConfigManager(path)
    again.load()
    assert sorted(again.all()) == ["A", "B0", "B1", "B2", "B4"]
    assert again.get("A") == TopicConfig("A", 8, 8)
    assert again.data_version.to_json() == version
    again.store.close()


def test_ten_thousand_topics_one_at_a_time_are_fast(tmp_path: Path) -> None:
    m = TopicConfigManager(tmp_path / "topics.db")
    m.load()
    t0 = time.perf_counter()
    for i in range(10_000):
        m.put(TopicConfig(f"Topic{i}"))
    m.flush()
    elapsed = time.perf_counter() - t0
    assert elapsed < 10.0, f"{elapsed:.1f} s for 10,000 topics"
    assert m.data_version.counter == 10_000
    m.store.close()
    again = TopicConfigManager(tmp_path / "topics.db")
    again.load()
    assert len(again) == 10_000 and again.data_version.counter == 10_000
    again.store.close()


def test_corrupt_database_falls_back_to_last_good_copy(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "topics.db"
    m = TopicConfigManager(path)
    m.load()
    m.put(TopicConfig("Good"))
    m.store.backup()  # the last good copy (taken at every start and clean stop)
    m.put(TopicConfig("After"))
    m.store.close()
    with open(path, "r+b") as fh:  # truncate it to half and scribble over the header
        size = os.fstat(fh.fileno()).st_size
        fh.truncate(size // 2)
        fh.seek(0)
        fh.write(b"this is not sqlite" * 8)
    for side in ("-wal", "-shm"):
        Path(str(path) + side).unlink(missing_ok=True)
    again = TopicConfigManager(path)
    with caplog.at_level(logging.ERROR, logger="rocket.broker.metadata"):
        again.load()
    assert "topics.db: corrupt or truncated" in caplog.text and "last good copy" in caplog.text
    assert sorted(again.all()) == ["Good"]
    assert list(tmp_path.glob("topics.db.corrupt-*"))
    again.store.close()


def test_corrupt_database_without_a_good_copy_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "subscriptionGroup.db"
    path.write_bytes(b"garbage" * 1000)
    with pytest.raises(ConfigCorruptError, match=r"subscriptionGroup\.db"):
        SubscriptionGroupManager(path).load()


def test_consumer_offsets(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    co = ConsumerOffsetManager(path)
    co.load()
    co.commit("g1", "T", 0, 12)
    co.commit("g1", "T", 1, 7)
    co.commit("g2", "T", 0, 3)
    co.commit("g1", "U", 0, 1)
    assert co.query("g1", "T", 1) == 7 and co.query("g1", "T", 5) is None and co.query("x", "T", 0) is None
    assert co.offsets_of("g1", "T") == {0: 12, 1: 7}
    assert co.to_json() == {"offsetTable": {"T@g1": {"0": 12, "1": 7}, "T@g2": {"0": 3}, "U@g1": {"0": 1}}}
    co.persist()
    assert orjson.loads(path.read_bytes()) == co.to_json()
    assert not co.dirty
    assert co.remove_group("g2") == 1 and co.remove_topic("U") == 1
    co.persist()
    assert Path(str(path) + ".bak").exists()
    again = ConsumerOffsetManager(path)
    again.load()
    assert again.table == {"T@g1": {0: 12, 1: 7}}


def test_consumer_offsets_fallback_and_fastjson_keys(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "consumerOffset.json"
    bak = tmp_path / "consumerOffset.json.bak"
    bak.write_bytes(b'{"offsetTable":{"T@g":{0:5,1:6}}}')  # fastjson's bare integer keys
    path.write_bytes(b'{"offsetTable":{"T@g":{"0":9')  # truncated
    co = ConsumerOffsetManager(path)
    with caplog.at_level(logging.ERROR, logger="rocket.broker.metadata"):
        co.load()
    assert co.table == {"T@g": {0: 5, 1: 6}}
    assert "consumerOffset.json: corrupt or truncated" in caplog.text
    bad = ConsumerOffsetManager(tmp_path / "x.json")
    (tmp_path / "x.json").write_bytes(b"[1,2]")
    with pytest.raises(ConfigCorruptError, match=r"x\.json"):
        bad.load()


async def test_broker_metadata_wires_config_stores_and_persists_offsets_at_close(tmp_path: Path) -> None:
    metadata = BrokerMetadata(tmp_path / "config")
    await metadata.load()
    metadata.topic_configs.put(TopicConfig("T1", 2, 2))
    metadata.subscription_groups.put(SubscriptionGroupConfig("G1"))
    metadata.consumer_offsets.commit("G1", "T1", 1, 42)
    await metadata.close(backup=True)
    again = BrokerMetadata(tmp_path / "config")
    await again.load()
    try:
        assert again.topic_configs.get("T1") == TopicConfig("T1", 2, 2)
        assert again.subscription_groups.get("G1") == SubscriptionGroupConfig("G1")
        assert again.consumer_offsets.query("G1", "T1", 1) == 42
    finally:
        await again.close(backup=True)
    assert (tmp_path / "config" / "topics.db.bak").exists()


async def test_offsets_are_persisted_periodically(tmp_path: Path) -> None:
    import asyncio

    metadata = BrokerMetadata(tmp_path / "config")
    await metadata.load()
    persister = asyncio.create_task(metadata.run_offset_persist(0.05))
    try:
        metadata.consumer_offsets.commit("G", "T", 0, 1)
        for _ in range(100):
            await asyncio.sleep(0.02)
            if (tmp_path / "config" / "consumerOffset.json").exists():
                break
        assert orjson.loads((tmp_path / "config" / "consumerOffset.json").read_bytes()) == \
            {"offsetTable": {"T@G": {"0": 1}}}
    finally:
        persister.cancel()
        await metadata.close(backup=False)


@given(st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**62),
       st.integers(0, 2**62))
def test_checkpoint_round_trip(a: int, b: int, c: int, d: int, e: int) -> None:
    cp = Checkpoint(a, b, c, d, e)
    data = cp.encode()
    assert len(data) == CHECKPOINT_SIZE
    assert Checkpoint.decode(data) == cp
    assert data[:24] == a.to_bytes(8, "big") + b.to_bytes(8, "big") + c.to_bytes(8, "big")


def test_checkpoint_without_valid_extension(tmp_path: Path) -> None:
    java_style = (1).to_bytes(8, "big") + (2).to_bytes(8, "big") + (3).to_bytes(8, "big") + bytes(4072)
    cp = Checkpoint.decode(java_style)
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (1, 2, 3)
    assert cp.physic_flushed_offset == cp.logics_dispatched_offset == -1
    damaged = bytearray(Checkpoint(1, 2, 3, 4, 5).encode())
    damaged[30] ^= 1
    assert Checkpoint.decode(bytes(damaged)).physic_flushed_offset == -1
    assert Checkpoint.decode(b"short") == Checkpoint()
    assert Checkpoint(10_000, 5_000, 0).min_timestamp() == 2_000
    sc = StoreCheckpoint(tmp_path / "checkpoint")
    assert sc.load() == Checkpoint()
    sc.flush(Checkpoint(7, 8, 9, 10, 11))
    sc.close()
    assert (tmp_path / "checkpoint").stat().st_size == CHECKPOINT_SIZE
    assert StoreCheckpoint(tmp_path / "checkpoint").load() == Checkpoint(7, 8, 9, 10, 11)


def test_a_write_finished_before_its_callback_is_registered_does_not_deadlock(tmp_path: Path) -> None:
    """The writer may finish a batch before ``add_done_callback`` runs; the callback then runs at
    once in the staging thread, which still holds the table's lock (seen as a hang of
    ``put`` under load)."""
    from concurrent.futures import Future

    m = TopicConfigManager(tmp_path / "topics.db")
    m.load()
    table = m.store
    real_submit = table._executor.submit

    def finished_submit(fn, *args):  # type: ignore[no-untyped-def]
        fut: Future[None] = Future()
        real_submit(fn, *args).result()  # the write is done before the caller sees the future
        fut.set_result(None)
        return fut

    table._executor.submit = finished_submit  # type: ignore[method-assign]
    done = threading.Event()

    def put() -> None:
        m.put(TopicConfig("A", 4, 4))
        m.put(TopicConfig("B", 4, 4))
        done.set()

    threading.Thread(target=put, daemon=True).start()
    assert done.wait(10), "put() deadlocked on the table's lock"
    table._executor.submit = real_submit  # type: ignore[method-assign]
    m.flush()
    again = TopicConfigManager(tmp_path / "topics.db")
    m.store.close()
    again.load()
    assert sorted(again.all()) == ["A", "B"]
    again.store.close()
