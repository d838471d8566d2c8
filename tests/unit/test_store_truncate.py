"""DefaultMessageStore.truncate: HA's divergent-tail repair (CommitLog, ConsumeQueues, index, restart)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocket.store import BrokerRole, GetMessageStatus
from tests.store_helpers import make_request, opened, small_config

pytestmark = pytest.mark.timeout(60)


async def _fill(store, n: int, *, prefix: str = "m", queues: int = 2) -> list[int]:  # type: ignore[no-untyped-def]
    """Put ``n`` messages round-robin over ``queues`` queues; returns each message's physical end."""
    ends = []
    for i in range(n):
        r = await store.put_message(make_request("TopicT", i % queues, f"{prefix}{i}".encode() * 200,
                                                 tags="A", keys=[f"{prefix}-key-{i}"], uniq=f"{prefix}-u{i}"))
        assert r.ok
        m = r.messages[0]
        ends.append(m.physical_offset + m.size)
    return ends


async def test_truncate_cuts_log_queues_and_index_then_continues(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "s")
    async with opened(cfg) as store:
        ends = await _fill(store, 60)  # rolls several 16 KiB CommitLog files
        cut = ends[29]  # keep messages 0..29
        assert len(store.commit_log.segments) > 2
        removed = await store.truncate(cut)
        assert removed == ends[-1] - cut or store.max_phy_offset == cut
        assert store.max_phy_offset == cut
        # queue 0 held the even messages 0..28 (15), queue 1 the odd ones 1..29 (15)
        assert store.get_max_offset_in_queue("TopicT", 0) == 15
        assert store.get_max_offset_in_queue("TopicT", 1) == 15
        got = store.get_message("TopicT", 1, 14, 32)
        assert got.status is GetMessageStatus.FOUND and len(got.records) == 1
        assert store.get_message("TopicT", 1, 15, 32).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        # the index no longer answers for removed messages, still does for kept ones
        assert store.query_message("TopicT", "m-key-45", 32, 0, 2**62) == []
        assert len(store.query_message("TopicT", "m-key-3", 32, 0, 2**62)) == 1
        # puts continue from the cut with the right queue offsets
        r = await store.put_message(make_request("TopicT", 0, b"after"))
        assert r.ok and r.messages[0].physical_offset == cut and r.messages[0].queue_offset == 15
    # a restart recovers exactly the truncated content plus the new message
    async with opened(cfg) as store:
        assert store.get_max_offset_in_queue("TopicT", 0) == 16
        assert store.get_max_offset_in_queue("TopicT", 1) == 15
        assert store.max_phy_offset > cut
        rec = store.get_message("TopicT", 0, 15, 1).records[0]
        assert b"after" in bytes(rec)


async def test_truncate_as_slave_then_replicate_other_bytes(tmp_path: Path) -> None:
    """A demoted master cuts its tail and replicates the new master's different bytes."""
    async with opened(small_config(tmp_path / "new")) as new_master, opened(small_config(tmp_path / "old")) as old:
        common = await _fill(new_master, 10, prefix="c")
        data = new_master.read_commit_log(0, 1 << 20)
        old.config.broker_role = BrokerRole.SLAVE
        assert await old.append_commit_log_data(0, data)
        old.config.broker_role = BrokerRole.ASYNC_MASTER
        await _fill(old, 5, prefix="old-only")  # divergent tail, never replicated
        await _fill(new_master, 5, prefix="new")  # the new master's own continuation
        old.config.broker_role = BrokerRole.SLAVE
        await old.truncate(common[-1])
        assert old.max_phy_offset == common[-1]
        pos = common[-1]
        while pos < new_master.max_phy_offset:
            chunk = new_master.read_commit_log(pos, 1000)
            assert await old.append_commit_log_data(pos, chunk)
            pos += len(chunk)
        assert old.max_phy_offset == new_master.max_phy_offset
        assert old.read_commit_log(0, 1 << 20) == new_master.read_commit_log(0, 1 << 20)
        for q in (0, 1):
            assert old.get_max_offset_in_queue("TopicT", q) == new_master.get_max_offset_in_queue("TopicT", q)
        assert old.query_message("TopicT", "old-only-key-1", 32, 0, 2**62) == []
        assert len(old.query_message("TopicT", "new-key-1", 32, 0, 2**62)) == 1


async def test_truncate_below_first_file_empties_the_store(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path / "s")) as store:
        await _fill(store, 20)
        await store.truncate(0)
        assert store.max_phy_offset == 0 and store.commit_log.segments == []
        assert store.get_max_offset_in_queue("TopicT", 0) == 0
        store.config.broker_role = BrokerRole.SLAVE
        # an empty log takes replicated data at the start of any file again
        assert not await store.append_commit_log_data(5, b"x")


async def test_truncate_past_the_end_is_a_no_op(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path / "s")) as store:
        ends = await _fill(store, 3)
        assert await store.truncate(ends[-1]) == 0
        assert await store.truncate(ends[-1] + 100) == 0
        assert store.max_phy_offset == ends[-1]


async def test_dispatch_all_finds_the_end_of_whole_records(tmp_path: Path) -> None:
    """A slave whose replication stopped inside a record is cut back to the record boundary."""
    async with opened(small_config(tmp_path / "m")) as master, opened(small_config(tmp_path / "s")) as slave:
        ends = await _fill(master, 4)
        slave.config.broker_role = BrokerRole.SLAVE
        data = master.read_commit_log(0, ends[-1] - 10)  # the last record arrives only in part
        assert await slave.append_commit_log_data(0, data)
        assert slave.max_phy_offset == ends[-1] - 10
        assert slave.dispatch_all() == ends[-2]
        await slave.truncate(ends[-2])
        slave.config.broker_role = BrokerRole.ASYNC_MASTER
        slave.rebuild_queue_offset_table()
        r = await slave.put_message(make_request("TopicT", 1, b"own"))
        assert r.ok and r.messages[0].physical_offset == ends[-2] and r.messages[0].queue_offset == 1
        assert slave.get_max_offset_in_queue("TopicT", 1) == 2
