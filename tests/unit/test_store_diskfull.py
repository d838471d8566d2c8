"""A CommitLog write that fails (ENOSPC, EIO) leaves the store consistent and recoverable."""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from rocket.message import decode_record
from rocket.store import GetMessageStatus, PutMessageStatus
from tests.store_helpers import make_request, opened, small_config


class FailingWrites:
    """A ``pwritev`` that, while armed, first makes one short write of ``partial`` bytes (as a
    filling disk does) and then fails with ``err``. Writes of zeros (the clean-up) go through."""

    def __init__(self, err: int = errno.ENOSPC, partial: int = 0) -> None:
        self.err = err
        self.partial = partial
        self.armed = False
        self.failures = 0

    def __call__(self, fd: int, buffers: Sequence[bytes | bytearray | memoryview], offset: int) -> int:
        data = b"".join(buffers)
        if self.armed and any(data):
            if self.partial:
                n, self.partial = self.partial, 0
                return os.pwrite(fd, data[:n], offset)
            self.failures += 1
            raise OSError(self.err, os.strerror(self.err))
        return os.pwritev(fd, buffers, offset)


async def test_enospc_rolls_back_and_recovers(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mapped_file_size_commit_log=1 << 16)
    async with opened(cfg) as store:
        before = [await store.put_message(make_request("T", 0, b"ok-%d" % i, keys=[f"k{i}"])) for i in range(5)]
        end = store.max_phy_offset
        writes = FailingWrites(errno.ENOSPC, partial=37)
        store.commit_log.pwritev = writes
        writes.armed = True
        failed = await store.put_messages([make_request("T", 0, b"lost-%d" % i, keys=["lost"]) for i in range(3)])
        assert failed.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert failed.remark.startswith("disk full: cannot write CommitLog file") and "No space left" in failed.remark
        assert not failed.messages
        # Consistent: nothing advanced, nothing partial visible, the partial bytes were zeroed.
        assert store.max_phy_offset == end
        assert store.get_max_offset_in_queue("T", 0) == 5
        g = store.get_message("T", 0, 5, 32)
        assert g.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        assert store.read_record(end) is None
        seg = store.commit_log.segments[-1]
        assert os.pread(seg.fd, 200, end - seg.start) == bytes(200)
        assert store.query_message("T", "lost", 10, 0, 2**62) == []
        # Space returns: the next put takes the same offsets.
        writes.armed = False
        again = await store.put_message(make_request("T", 0, b"again"))
        assert again.ok
        assert again.messages[0].physical_offset == end and again.messages[0].queue_offset == 5
        assert writes.failures == 1
        assert before[0].ok
    async with opened(cfg) as store:
        g = store.get_message("T", 0, 0, 32)
        assert [decode_record(r, check_crc=True).body for r in g.records] == [b"ok-%d" % i for i in range(5)] + \
            [b"again"]


async def test_every_pending_put_after_the_failure_fails(tmp_path: Path) -> None:
    import asyncio

    cfg = small_config(tmp_path, mapped_file_size_commit_log=1 << 16)
    async with opened(cfg) as store:
        await store.put_message(make_request("A", 0, b"first"))
        writes = FailingWrites(errno.EIO)
        store.commit_log.pwritev = writes
        writes.armed = True
        results = await asyncio.gather(*(store.put_message(make_request("AB"[i % 2], 0, b"%d" % i))
                                         for i in range(20)))
        assert {r.status for r in results} == {PutMessageStatus.SERVICE_NOT_AVAILABLE}
        assert all("Input/output error" in r.remark for r in results)
        writes.armed = False
        ok = await store.put_message(make_request("A", 0))
        assert ok.messages[0].queue_offset == 1
        ok_b = await store.put_message(make_request("B", 0))
        assert ok_b.messages[0].queue_offset == 0


async def test_segment_creation_failure(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mapped_file_size_commit_log=4096)
    async with opened(cfg) as store:
        cl = store.commit_log
        real_create = cl.create_file
        calls = []

        def no_space(path: Path, size: int, preallocate: bool) -> int:
            calls.append(path)
            raise OSError(errno.ENOSPC, "No space left on device")

        while store.max_phy_offset < 3000:
            assert (await store.put_message(make_request("T", 0, b"x" * 200))).ok
        end = store.max_phy_offset
        cl.create_file = no_space
        res = await store.put_message(make_request("T", 0, b"y" * 2000))  # needs the next file
        assert res.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
        assert res.remark.startswith("disk full: cannot create CommitLog file") and calls
        assert len(cl.segments) == 1
        assert store.max_phy_offset == 4096  # the blank marker closing the first file is in place
        assert store.get_max_offset_in_queue("T", 0) == store.get_message("T", 0, 0, 32).message_count
        assert end < 4096
        cl.create_file = real_create
        res = await store.put_message(make_request("T", 0, b"y" * 2000))
        assert res.ok and res.messages[0].physical_offset == 4096
        assert (tmp_path / "commitlog" / f"{4096:020d}").exists()


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO])
async def test_failed_sync_answers_flush_disk_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      err: int) -> None:
    import threading

    from rocket.store import FlushDiskType
    from rocket.store import commitlog as commitlog_module

    real = os.fdatasync
    fail = [True]

    def fdatasync(fd: int) -> None:
        if fail[0] and threading.current_thread().name.startswith("rocket-commitlog"):
            raise OSError(err, os.strerror(err))
        real(fd)

    monkeypatch.setattr(commitlog_module.os, "fdatasync", fdatasync)
    async with opened(small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)) as store:
        res = await store.put_message(make_request("T", 0, b"maybe"))
        assert res.status is PutMessageStatus.FLUSH_DISK_TIMEOUT and "fdatasync failed" in res.remark
        fail[0] = False
        assert (await store.put_message(make_request("T", 0, b"sure"))).ok
        assert store.commit_log.flushed == store.max_phy_offset
