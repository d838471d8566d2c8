"""Flushing: SYNC_FLUSH group commit and timeouts, ASYNC_FLUSH thresholds, overload answers."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from rocket.store import FlushDiskType, PutMessageStatus
from rocket.store import commitlog as commitlog_module
from tests.store_helpers import make_request, opened, small_config


class SlowSync:
    """Replaces ``os.fdatasync`` (as the CommitLog writer calls it): records calls, optionally slow or blocked."""

    def __init__(self, delay: float = 0.0) -> None:
        self.real = os.fdatasync
        self.delay = delay
        self.calls: list[float] = []
        self.done: list[float] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, fd: int) -> None:
        if not threading.current_thread().name.startswith("rocket-commitlog"):
            self.real(fd)  # ConsumeQueue, index, checkpoint, config: not under test
            return
        self.calls.append(time.monotonic())
        self.gate.wait(30)
        time.sleep(self.delay)
        self.real(fd)
        self.done.append(time.monotonic())


@pytest.fixture
def slow_sync(monkeypatch: pytest.MonkeyPatch) -> SlowSync:
    s = SlowSync()
    monkeypatch.setattr(commitlog_module.os, "fdatasync", s)
    return s


async def test_sync_flush_group_commit(tmp_path: Path, slow_sync: SlowSync) -> None:
    slow_sync.delay = 0.05
    async with opened(small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                                   mapped_file_size_commit_log=1 << 20)) as store:
        resolved: list[float] = []

        async def put(i: int) -> None:
            res = await store.put_message(make_request("T", i % 4, b"%d" % i))
            assert res.status is PutMessageStatus.PUT_OK
            resolved.append(time.monotonic())

        await asyncio.gather(*(put(i) for i in range(200)))
        # One fdatasync covers every append queued before it: far fewer syncs than puts.
        assert 1 <= len(slow_sync.calls) <= 6, slow_sync.calls
        # No put resolved before an fdatasync had completed.
        assert min(resolved) >= slow_sync.done[0]
        assert store.commit_log.flushed == store.max_phy_offset
        assert store.stats.commit_log.fdatasyncs == len(slow_sync.calls)


async def test_sync_flush_timeout_answers_flush_disk_timeout(tmp_path: Path, slow_sync: SlowSync) -> None:
    async with opened(small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                                   sync_flush_timeout=0.2)) as store:
        slow_sync.gate.clear()  # the disk hangs
        t0 = time.monotonic()
        res = await store.put_message(make_request("T", 0, b"stuck"))
        assert res.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert 0.15 <= time.monotonic() - t0 < 5
        assert res.messages and res.messages[0].queue_offset == 0  # stored all the same
        not_waiting = make_request("T", 0, b"nowait", wait_store_msg_ok=False)
        pending = asyncio.ensure_future(store.put_message(not_waiting))
        slow_sync.gate.set()
        assert (await pending).ok
        assert store.get_message("T", 0, 0, 32).message_count == 2


async def test_sync_flush_record_is_readable_before_its_fdatasync(tmp_path: Path, slow_sync: SlowSync) -> None:
    # As RocketMQ's ReputMessageService: consumers read up to the written end; the producer's
    # answer still waits for the fdatasync that covers its record.
    async with opened(small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                                   sync_flush_timeout=10)) as store:
        slow_sync.gate.clear()  # the fdatasync hangs
        put = asyncio.ensure_future(store.put_message(make_request("T", 0, b"early")))
        for _ in range(200):
            if store.get_message("T", 0, 0, 32).message_count:
                break
            await asyncio.sleep(0.01)
        assert store.get_message("T", 0, 0, 32).message_count == 1
        assert slow_sync.calls and not slow_sync.done
        assert not put.done() and store.commit_log.flushed == 0
        second = asyncio.ensure_future(store.put_message(make_request("T", 0, b"meanwhile")))
        await asyncio.sleep(0.05)
        assert store.get_message("T", 0, 0, 32).message_count == 2  # written while the first syncs
        slow_sync.gate.set()
        assert (await put).status is PutMessageStatus.PUT_OK
        assert (await second).status is PutMessageStatus.PUT_OK
        assert store.commit_log.flushed == store.max_phy_offset
        assert len(slow_sync.calls) == 2  # the second waited for a group commit of its own


async def test_async_flush_thresholds(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, flush_interval_commit_log=0.05, flush_commit_log_least_pages=4,
                       flush_commit_log_thorough_interval=0.5, mapped_file_size_commit_log=1 << 20)
    async with opened(cfg) as store:
        cl = store.commit_log
        await store.put_message(make_request("T", 0, b"small"))  # far below 4 pages
        await asyncio.sleep(0.2)
        assert cl.flushed == 0, "flushed although fewer than 4 pages were dirty"
        await asyncio.sleep(0.6)  # the thorough flush takes everything
        assert cl.flushed == store.max_phy_offset
        await store.put_messages([make_request("T", 0, b"x" * 1000) for _ in range(20)])  # > 16 KiB
        await asyncio.sleep(0.3)
        assert cl.flushed == store.max_phy_offset


async def test_overload_answers_os_pagecache_busy(tmp_path: Path, slow_sync: SlowSync) -> None:
    cfg = small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, max_pending_flush_bytes=4000,
                       sync_flush_timeout=10, mapped_file_size_commit_log=1 << 20)
    async with opened(cfg) as store:
        slow_sync.gate.clear()
        waiting = [asyncio.ensure_future(store.put_message(make_request("T", 0, b"x" * 500))) for _ in range(12)]
        await asyncio.sleep(0.05)
        busy = await store.put_message(make_request("T", 0, b"y"))
        assert busy.status is PutMessageStatus.OS_PAGECACHE_BUSY
        assert "max_pending_flush_bytes" in busy.remark
        slow_sync.gate.set()
        statuses = [r.status for r in await asyncio.gather(*waiting)]
        assert statuses.count(PutMessageStatus.PUT_OK) >= 7
        assert PutMessageStatus.OS_PAGECACHE_BUSY in statuses  # those past the limit were refused at once
        assert (await store.put_message(make_request("T", 0, b"z"))).ok


async def test_puts_after_shutdown_are_refused(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path)) as store:
        pass
    res = await store.put_message(make_request())
    assert res.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
