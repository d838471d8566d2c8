"""The CommitLog's completion callbacks and read gathering (``CommitLog.gather`` / ``release``,
``DefaultMessageStore.put_messages_callback``): what the send path answers from.

Covered: a callback is never called inside the put; gathered puts share one write job, which
``release`` runs at once under ASYNC_FLUSH (resolving them before it returns) and hands to the
writer thread under SYNC_FLUSH, resolving them only after fdatasync; a callback that puts
again sees no put resolved twice; a failed write reports the failure through the callbacks
after the log was rolled back (nothing acknowledged that is not stored); the reput dispatches
what a job wrote after its callbacks ran (the answers leave first), before the loop's next poll,
and at once for a caller whose awaited put was already resolved.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Sequence
from pathlib import Path

from rocket.store import FlushDiskType, PutMessageStatus
from rocket.store.api import PutMessageResult
from tests.store_helpers import make_request, opened, small_config
from tests.support import eventually


async def test_gathered_async_flush_puts_are_one_job_resolved_inside_release(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path, mapped_file_size_commit_log=1024 * 1024)) as store:
        cl = store.commit_log
        assert (await store.put_message(make_request("T", 0, b"first"))).status is PutMessageStatus.PUT_OK
        jobs = cl.stats.jobs
        got: list[PutMessageResult] = []
        cl.gather()
        for i in range(5):
            assert store.put_messages_callback([make_request("T", i % 2, b"x%d" % i)], got.append) is None
        assert got == [] and cl.stats.jobs == jobs  # nothing written or answered inside the gathering
        cl.release()
        assert cl.stats.jobs == jobs + 1  # one job for the five, run in release
        assert [r.status for r in got] == [PutMessageStatus.PUT_OK] * 5
        assert [r.messages[0].queue_offset for r in got] == [1, 0, 2, 1, 3]
        assert cl.committed == cl.append_offset
        for r in got:  # acknowledged = stored and readable
            m = r.messages[0]
            assert store.read_record(m.physical_offset) is not None


async def test_callbacks_run_before_the_dispatch_which_ends_the_loop_turn(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path, mapped_file_size_commit_log=1024 * 1024)) as store:
        await store.put_message(make_request("T", 0, b"first"))
        cq = store.find_consume_queue("T", 0)
        assert cq is not None and cq.max_offset == 1
        dispatched_at_answer: list[int] = []
        polled = asyncio.Event()

        def done(result: PutMessageResult) -> None:
            assert result.status is PutMessageStatus.PUT_OK
            dispatched_at_answer.append(cq.max_offset)
            # a callback of the next poll (what a request read after this answer would be):
            asyncio.get_running_loop().call_soon(polled.set)

        store.commit_log.gather()
        assert store.put_messages_callback([make_request("T", 0, b"x")], done) is None
        store.commit_log.release()
        assert dispatched_at_answer == [1]  # answered before the reput: the ConsumeQueue had not moved
        assert store.reput_from_offset < store.commit_log.committed
        await polled.wait()
        assert cq.max_offset == 2 and store.reput_from_offset == store.commit_log.committed


async def test_an_awaited_put_reads_its_records_dispatched(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path, mapped_file_size_commit_log=1024 * 1024)) as store:
        for i in range(3):  # the file exists after the first: the jobs run inside the put
            r = await store.put_message(make_request("T", 0, b"m%d" % i))
            assert r.status is PutMessageStatus.PUT_OK
            cq = store.find_consume_queue("T", 0)
            assert cq is not None and cq.max_offset == i + 1  # no loop turn in between
        fut = store.put_messages_nowait([make_request("T", 0, b"later")])
        assert not isinstance(fut, PutMessageResult) and not fut.done()  # its job starts next turn
        assert (await fut).status is PutMessageStatus.PUT_OK
        assert cq.max_offset == 4  # the reput was scheduled before the future's waiter woke


async def test_callback_never_runs_inside_the_put(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path, mapped_file_size_commit_log=1024 * 1024)) as store:
        await store.put_message(make_request("T", 0, b"first"))  # the file exists: the job runs on the loop
        got: list[PutMessageResult] = []
        assert store.put_messages_callback([make_request("T", 0, b"x")], got.append) is None
        assert got == []  # ungathered: the job starts in the next loop turn
        await eventually(lambda: len(got) == 1, 5, interval=0.001)
        assert got[0].status is PutMessageStatus.PUT_OK


async def test_sync_flush_callbacks_come_after_fdatasync(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=1024 * 1024)
    async with opened(cfg) as store:
        cl = store.commit_log
        seen: list[tuple[PutMessageStatus, int, int]] = []

        def done(result: PutMessageResult) -> None:
            m = result.messages[0]
            seen.append((result.status, m.physical_offset + m.size, cl.flushed))

        syncs = cl.stats.fdatasyncs
        cl.gather()
        for i in range(3):
            store.put_messages_callback([make_request("T", 0, b"s%d" % i, wait_store_msg_ok=True)], done)
        cl.release()
        assert seen == []  # on the writer thread: answered only once fdatasync returned
        await eventually(lambda: len(seen) == 3, 10, interval=0.001)
        assert cl.stats.fdatasyncs == syncs + 1  # one group commit for the gathered three
        for status, end, flushed in seen:
            assert status is PutMessageStatus.PUT_OK and flushed >= end


async def test_a_callback_that_puts_again_resolves_nothing_twice(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path, mapped_file_size_commit_log=1024 * 1024)) as store:
        cl = store.commit_log
        await store.put_message(make_request("T", 0, b"first"))
        calls: list[int] = []

        def again(result: PutMessageResult) -> None:
            calls.append(result.messages[0].queue_offset)
            if len(calls) == 1:  # put from inside the resolution, and flush it at once
                cl.gather()
                store.put_messages_callback([make_request("T", 0, b"inner")], again)
                cl.release()

        cl.gather()
        store.put_messages_callback([make_request("T", 0, b"a")], again)
        store.put_messages_callback([make_request("T", 0, b"b")], again)
        cl.release()
        await eventually(lambda: len(calls) == 3, 5, interval=0.001)
        assert sorted(calls) == [1, 2, 3] and len(set(calls)) == 3
        assert not cl._ops


async def test_a_failed_write_fails_the_gathered_puts_after_the_rollback(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path, mapped_file_size_commit_log=1024 * 1024)) as store:
        cl = store.commit_log
        await store.put_message(make_request("T", 0, b"first"))
        end = cl.append_offset
        real = cl.pwritev

        def enospc(fd: int, buffers: Sequence[bytes | bytearray | memoryview], offset: int) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        cl.pwritev = enospc
        seen: list[tuple[PutMessageStatus, int, int]] = []
        cl.gather()
        for i in range(3):
            store.put_messages_callback(
                [make_request("T", 0, b"f%d" % i)],
                lambda r: seen.append((r.status, len(r.messages), cl.append_offset)),
            )
        cl.release()
        assert [s for s, _, _ in seen] == [PutMessageStatus.SERVICE_NOT_AVAILABLE] * 3
        assert all(n == 0 and pos == end for _, n, pos in seen)  # rolled back before anyone heard
        assert cl.committed == end
        cl.pwritev = real
        ok = await store.put_message(make_request("T", 0, b"after"))
        assert ok.status is PutMessageStatus.PUT_OK and ok.messages[0].queue_offset == 1
