"""A real full disk (a small tmpfs): clear errors, a consistent store, writes resume when space returns.

Needs root to mount a tmpfs; where that is impossible the test says so and
skips (``tests/unit/test_store_diskfull.py`` injects ENOSPC without a mount).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocket.message import decode_record
from rocket.store import PutMessageStatus
from tests.store_helpers import make_request, opened, small_config


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the injected-ENOSPC unit tests cover this path")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); the injected-ENOSPC unit tests cover this")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


async def test_full_tmpfs(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "mnt", "1536k") as mnt:
        cfg = small_config(mnt / "store", mapped_file_size_commit_log=128 * 1024,
                           mapped_file_size_consume_queue=20 * 1024, max_hash_slot_num=64, max_index_num=256)
        acked: list[tuple[int, bytes]] = []
        async with opened(cfg) as store:
            st = os.statvfs(mnt)
            free = st.f_bavail * st.f_frsize
            filler = mnt / "filler"
            filler.write_bytes(bytes(max(free - 200 * 1024, 0)))  # leave room for one more CommitLog file
            failure = None
            for i in range(2000):
                body = b"%05d" % i + b"." * 1500
                res = await store.put_message(make_request("T", 0, body, keys=[f"k{i}"]))
                if res.ok:
                    acked.append((res.messages[0].queue_offset, body))
                    continue
                failure = res
                break
            assert failure is not None, "the disk never filled up"
            assert failure.status in (PutMessageStatus.CREATE_MAPPED_FILE_FAILED,
                                      PutMessageStatus.SERVICE_NOT_AVAILABLE)
            assert failure.remark.startswith("disk full: ") and "No space left on device" in failure.remark
            end = store.max_phy_offset
            assert store.get_max_offset_in_queue("T", 0) == len(acked)
            again = await store.put_message(make_request("T", 0, b"still full"))
            assert not again.ok and store.max_phy_offset == end
            # Space returns: writes go on where they stopped.
            filler.unlink()
            res = await store.put_message(make_request("T", 0, b"after"))
            assert res.ok and res.messages[0].queue_offset == len(acked)
            acked.append((res.messages[0].queue_offset, b"after"))
        async with opened(cfg) as store:
            got = []
            off = 0
            while off < store.get_max_offset_in_queue("T", 0):
                g = store.get_message("T", 0, off, 32, max_total_bytes=1 << 30)
                got += [(q, decode_record(r, check_crc=True).body) for q, r in zip(g.queue_offsets, g.records,
                                                                                   strict=True)]
                off = g.next_begin_offset
            assert got == acked
            assert len(store.query_message("T", "k3", 5, 0, 2**62)) == 1
