"""Retention: expired files at delete_when, at once when the disk is full; queues follow."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rocket.store import GetMessageStatus
from tests.store_helpers import make_request, opened, small_config


def hour_of(t: float) -> int:
    return time.localtime(t).tm_hour


async def fill(store, n: int = 60) -> None:  # type: ignore[no-untyped-def]
    for i in range(n):
        res = await store.put_message(make_request("T", i % 2, b"m%03d" % i + b"." * 300, keys=[f"k{i}"]))
        assert res.ok
    await store.flush()


async def test_expired_files_go_at_delete_when(tmp_path: Path) -> None:
    now = [time.time()]
    later = now[0] + 3 * 3600
    cfg = small_config(tmp_path, mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=20 * 4,
                       max_index_num=8, file_reserved_time_hours=1, delete_when=f"{(hour_of(later) + 5) % 24:02d};"
                       f"{hour_of(later):02d}")
    async with opened(cfg, clock=lambda: now[0], disk_usage=lambda p: 0.10) as store:
        await fill(store)
        segs = len(store.commit_log.segments)
        assert segs >= 5
        assert await store.clean_once() == 0  # not the hour, not full
        now[0] = later - 3 * 3600 + 60  # (hour may match by chance; files are young anyway)
        assert await store.clean_once() == 0
        now[0] = later
        index_files = len(store.index_service.files)
        deleted = await store.clean_once()
        assert deleted == segs - 1  # everything but the file being written
        assert [s.start for s in store.commit_log.segments] == [4096 * (segs - 1)]
        assert sorted(os.listdir(tmp_path / "commitlog")) == [f"{4096 * (segs - 1):020d}"]
        for q in (0, 1):
            mn = store.get_min_offset_in_queue("T", q)
            assert mn > 0
            g = store.get_message("T", q, 0, 32)
            assert (g.status, g.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, mn)
            g = store.get_message("T", q, mn, 32)
            assert g.status is GetMessageStatus.FOUND
            assert store.get_earliest_message_time("T", q) > 0
            cq = store.find_consume_queue("T", q)
            assert cq is not None and cq.files[0].start // 20 <= mn
            names = sorted(os.listdir(tmp_path / "consumequeue" / "T" / str(q)))
            assert int(names[0]) == cq.files[0].start and len(names) == len(cq.files)
        assert len(store.index_service.files) < index_files
        assert store.query_message("T", "k0", 10, 0, 2**62) == []
        assert len(store.query_message("T", "k59", 10, 0, 2**62)) == 1
        assert store.runtime_info()["commitLogMinOffset"] == str(4096 * (segs - 1))
    async with opened(cfg, clock=lambda: now[0], disk_usage=lambda p: 0.10) as store:  # and after a restart
        assert store.min_phy_offset == 4096 * (segs - 1)
        assert store.get_message("T", 0, 0, 32).status is GetMessageStatus.OFFSET_TOO_SMALL


async def test_full_disk_deletes_oldest_regardless_of_age(tmp_path: Path) -> None:
    ratio = [0.5]
    cfg = small_config(tmp_path, mapped_file_size_commit_log=4096, file_reserved_time_hours=1000, delete_when="99",
                       disk_max_used_space_ratio=85)
    async with opened(cfg, disk_usage=lambda p: ratio[0]) as store:
        await fill(store, 120)
        segs = len(store.commit_log.segments)
        assert segs > 11
        assert store.disk_usage_ratio() == 0.5
        assert await store.clean_once() == 0
        ratio[0] = 0.86
        assert await store.clean_once() == 10  # at most 10 files per run
        assert await store.clean_once() == segs - 11
        assert await store.clean_once() == 0  # never the file being written
        assert len(store.commit_log.segments) == 1
        res = await store.put_message(make_request("T", 0, b"still writable"))
        assert res.ok


async def test_unflushed_files_are_kept(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mapped_file_size_commit_log=4096, flush_interval_commit_log=3600,
                       flush_commit_log_thorough_interval=3600)
    async with opened(cfg, disk_usage=lambda p: 0.99) as store:
        for _ in range(40):
            await store.put_message(make_request("T", 0, b"x" * 300))
        assert store.commit_log.flushed == 0
        assert await store.clean_once() == 0
        await store.flush()
        assert await store.clean_once() > 0


def test_delete_when_accepts_several_hours(tmp_path: Path) -> None:
    from rocket.store import DefaultMessageStore

    t = time.mktime((2024, 5, 1, 16, 30, 0, 0, 0, -1))
    store = DefaultMessageStore(small_config(tmp_path, delete_when="04;16"), clock=lambda: t)
    assert store.is_delete_time()
    store = DefaultMessageStore(small_config(tmp_path, delete_when="04"), clock=lambda: t)
    assert not store.is_delete_time()
