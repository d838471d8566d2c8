"""Recovery: clean restarts, crashes with torn tails, ConsumeQueues and index rebuilt from the CommitLog."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rocket.message import decode_record
from rocket.store import GetMessageStatus
from tests.store_helpers import make_request, opened, patch_file, small_config


async def write_some(cfg, n: int = 30) -> list:  # type: ignore[no-untyped-def]
    out = []
    async with opened(cfg) as store:
        for i in range(n):
            res = await store.put_message(make_request("T", i % 3, b"body-%d" % i, tags=f"t{i % 2}",
                                                       keys=[f"key{i}"], uniq=f"U{i:05d}"))
            assert res.ok
            out.append(res.messages[0])
    return out


def segment_path(root: Path, offset: int, size: int) -> tuple[Path, int]:
    start = offset - offset % size
    return root / "commitlog" / f"{start:020d}", offset - start


async def test_clean_restart_is_normal_and_keeps_everything(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    msgs = await write_some(cfg)
    assert not (tmp_path / "abort").exists()
    async with opened(cfg) as store:
        assert not store.stats.last_recovery_abnormal
        assert store.max_phy_offset == msgs[-1].physical_offset + msgs[-1].size
        assert [store.get_max_offset_in_queue("T", q) for q in range(3)] == [10, 10, 10]
        assert (tmp_path / "abort").exists()
        res = await store.put_message(make_request("T", 0, b"more"))
        assert res.messages[0].queue_offset == 10  # queue offsets continue
        assert len(store.query_message("T", "key4", 10, 0, 2**62)) == 1


async def test_torn_last_record_after_a_crash(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    msgs = await write_some(cfg)
    last = msgs[-1]
    path, rel = segment_path(tmp_path, last.physical_offset, cfg.mapped_file_size_commit_log)
    # The second half of the last record never reached the disk.
    patch_file(path, rel + last.size // 2, bytes(last.size - last.size // 2))
    (tmp_path / "abort").touch()  # and the process died
    async with opened(cfg) as store:
        assert store.stats.last_recovery_abnormal
        assert store.max_phy_offset == last.physical_offset
        assert store.read_record(last.physical_offset) is None
        q = 29 % 3
        assert store.get_max_offset_in_queue("T", q) == 9
        g = store.get_message("T", q, 9, 32)
        assert g.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        assert store.query_message("T", "key29", 10, 0, 2**62) == []
        assert len(store.query_message("T", "key28", 10, 0, 2**62)) == 1
        # The torn bytes were cleared: nothing of them can come back.
        assert path.read_bytes()[rel:].strip(b"\0") == b""
        res = await store.put_message(make_request("T", q, b"after"))
        assert (res.messages[0].physical_offset, res.messages[0].queue_offset) == (last.physical_offset, 9)
    async with opened(cfg) as store:
        assert not store.stats.last_recovery_abnormal
        g = store.get_message("T", q, 0, 32)
        assert [decode_record(r, check_crc=True).body for r in g.records][-1] == b"after"


async def test_garbage_after_the_end_is_removed_even_after_a_clean_stop(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    msgs = await write_some(cfg)
    end = msgs[-1].physical_offset + msgs[-1].size
    path, rel = segment_path(tmp_path, end, cfg.mapped_file_size_commit_log)
    patch_file(path, rel, b"\x00\x00\x01\x00\xda\xa3\x20\xa7" + os.urandom(300))  # looks like a record start
    async with opened(cfg) as store:
        assert store.max_phy_offset == end
        assert path.read_bytes()[rel:].strip(b"\0") == b""
        assert (await store.put_message(make_request("T", 0))).messages[0].physical_offset == end


async def test_bad_crc_in_the_middle_truncates_there(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mapped_file_size_commit_log=1 << 20)
    msgs = await write_some(cfg)
    victim = msgs[20]
    path, rel = segment_path(tmp_path, victim.physical_offset, cfg.mapped_file_size_commit_log)
    old = patch_file(path, rel + 90, b"?")  # a body byte (the body starts at 88 with IPv4 hosts)
    assert old != b"?"
    (tmp_path / "checkpoint").unlink()  # no checkpoint: check everything
    (tmp_path / "abort").touch()
    async with opened(cfg) as store:
        assert store.max_phy_offset == victim.physical_offset
        assert sum(store.get_max_offset_in_queue("T", q) for q in range(3)) == 20


async def test_consume_queues_and_index_rebuilt_from_the_commit_log(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    msgs = await write_some(cfg, 40)
    async with opened(cfg) as store:
        before = {q: store.get_message("T", q, 0, 32).records for q in range(3)}
    shutil.rmtree(tmp_path / "consumequeue")
    shutil.rmtree(tmp_path / "index")
    (tmp_path / "checkpoint").unlink()
    async with opened(cfg) as store:
        assert {q: store.get_message("T", q, 0, 32).records for q in range(3)} == before
        assert [decode_record(r).body for r in store.query_message("T", "U00033", 5, 0, 2**62)] == [b"body-33"]
        assert store.max_phy_offset == msgs[-1].physical_offset + msgs[-1].size


async def test_lost_consume_queue_tail_is_redispatched(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mapped_file_size_consume_queue=20 * 1000)
    await write_some(cfg, 30)
    qdir = tmp_path / "consumequeue" / "T" / "1"
    (name,) = os.listdir(qdir)
    patch_file(qdir / name, 6 * 20, bytes(4 * 20))  # the last 4 entries of queue 1 were lost
    from rocket.store.checkpoint import Checkpoint

    data = (tmp_path / "checkpoint").read_bytes()
    cp = Checkpoint.decode(data)
    cp.logics_dispatched_offset = 0  # as if the queues had never been flushed
    (tmp_path / "checkpoint").write_bytes(cp.encode())
    (tmp_path / "abort").touch()
    async with opened(cfg) as store:
        assert store.get_max_offset_in_queue("T", 1) == 10
        g = store.get_message("T", 1, 0, 32)
        assert [decode_record(r).body for r in g.records] == [b"body-%d" % i for i in range(1, 30, 3)]


async def test_consume_queue_entries_past_the_end_are_removed(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    msgs = await write_some(cfg, 30)
    cut = msgs[25].physical_offset
    path, rel = segment_path(tmp_path, cut, cfg.mapped_file_size_commit_log)
    # The CommitLog lost its tail (as after a power cut) ...
    patch_file(path, rel, bytes(cfg.mapped_file_size_commit_log - rel))
    for later in sorted(os.listdir(tmp_path / "commitlog")):
        if int(later) > cut:
            (tmp_path / "commitlog" / later).unlink()
    (tmp_path / "abort").touch()  # ... but the ConsumeQueues and index had been written
    async with opened(cfg) as store:
        assert store.max_phy_offset == cut
        assert [store.get_max_offset_in_queue("T", q) for q in range(3)] == [9, 8, 8]
        for q in range(3):
            g = store.get_message("T", q, 0, 32)
            assert all(decode_record(r, check_crc=True).physical_offset < cut for r in g.records)
        assert store.query_message("T", "key27", 10, 0, 2**62) == []
        assert len(store.query_message("T", "key24", 10, 0, 2**62)) == 1


async def test_rebuilt_schedule_queue_gets_delivery_times(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    async with opened(cfg) as store:
        req = make_request("SCHEDULE_TOPIC_XXXX", 2, b"later", tags="T")
        req.properties += "\x02DELAY\x013\x02REAL_TOPIC\x01Orders"
        req.tags_code = 123  # the broker gives the delivery time; the rebuild recomputes it
        res = await store.put_message(req)
        stored_at = res.messages[0].store_timestamp
        cq = store.find_consume_queue("SCHEDULE_TOPIC_XXXX", 2)
        assert cq is not None and cq.entry(0)[2] == 123  # type: ignore[index]
    shutil.rmtree(tmp_path / "consumequeue")
    (tmp_path / "checkpoint").unlink()
    async with opened(cfg) as store:
        cq = store.find_consume_queue("SCHEDULE_TOPIC_XXXX", 2)
        assert cq is not None and cq.entry(0)[2] == stored_at + 10_000  # type: ignore[index]  # level 3 = 10 s


async def test_rebuild_with_mixed_hosts_transactions_and_a_bad_crc(tmp_path: Path) -> None:
    # Recovery walks runs of IPv4 records on its fast path and everything else (IPv6 hosts,
    # blank markers, transactional records, damage) on the general one; the result is the same.
    from rocket.message import SYSFLAG_TRANSACTION_PREPARED

    cfg = small_config(tmp_path, mapped_file_size_commit_log=1 << 20)
    msgs = []
    async with opened(cfg) as store:
        for i in range(60):
            extra = {"born_host": "[2001:db8::5]:10911"} if i % 7 == 3 else {}
            if i % 11 == 5:
                extra["sys_flag"] = SYSFLAG_TRANSACTION_PREPARED
            res = await store.put_message(make_request("T", i % 3, b"body-%d" % i, tags=f"t{i % 2}",
                                                       keys=[f"key{i}", "shared"], uniq=f"U{i:05d}", **extra))
            assert res.ok
            msgs.append(res.messages[0])
        before = {q: store.get_message("T", q, 0, 64).records for q in range(3)}
        before_keys = store.query_message("T", "shared", 64, 0, 2**62)
    shutil.rmtree(tmp_path / "consumequeue")
    shutil.rmtree(tmp_path / "index")
    (tmp_path / "checkpoint").unlink()
    (tmp_path / "abort").touch()
    async with opened(cfg) as store:
        assert store.stats.last_recovery_records == 60
        assert {q: store.get_message("T", q, 0, 64).records for q in range(3)} == before
        assert store.query_message("T", "shared", 64, 0, 2**62) == before_keys
        assert len(store.query_message("T", "U00005", 64, 0, 2**62)) == 1  # prepared: indexed, not queued
    victim = msgs[40]
    path, rel = segment_path(tmp_path, victim.physical_offset, cfg.mapped_file_size_commit_log)
    patch_file(path, rel + 90, b"?")  # a body byte (IPv4 hosts: the body starts at 88): the body CRC fails
    shutil.rmtree(tmp_path / "consumequeue")
    shutil.rmtree(tmp_path / "index")
    (tmp_path / "checkpoint").unlink()
    (tmp_path / "abort").touch()
    async with opened(cfg) as store:
        assert store.max_phy_offset == victim.physical_offset
        assert store.stats.last_recovery_records == 40


async def test_a_queue_file_never_written_before_a_crash_is_rebuilt(tmp_path: Path) -> None:
    # The kill -9 came after the CommitLog write and the queue file's creation, before the IO thread
    # wrote its entries: a file of zeros (RocketMQ-sized, larger than 64 KiB) and no checkpoint.
    cfg = small_config(tmp_path, mapped_file_size_consume_queue=20 * 6000)
    await write_some(cfg, 30)
    qdir = tmp_path / "consumequeue" / "T" / "1"
    (name,) = os.listdir(qdir)
    (qdir / name).write_bytes(bytes(20 * 6000))
    (tmp_path / "checkpoint").unlink()
    (tmp_path / "abort").touch()
    async with opened(cfg) as store:
        assert store.stats.last_recovery_abnormal
        assert (store.get_min_offset_in_queue("T", 1), store.get_max_offset_in_queue("T", 1)) == (0, 10)
        g = store.get_message("T", 1, 0, 32)
        assert [decode_record(r).body for r in g.records] == [b"body-%d" % i for i in range(1, 30, 3)]
        res = await store.put_message(make_request("T", 1, b"after"))
        assert res.messages[0].queue_offset == 10
