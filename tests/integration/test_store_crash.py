"""kill -9 a SYNC_FLUSH writer at random moments; nothing acknowledged is lost, nothing torn is served."""

from __future__ import annotations

import os
import random
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocket.message import decode_record
from rocket.store import GetMessageStatus
from tests.integration.store_crash_writer import TOPICS, crash_config
from tests.store_helpers import body_hash, opened, patch_file
from tests.support import ROOT

pytestmark = pytest.mark.slow

Acked = dict[tuple[str, int, int], tuple[int, str]]


def run_and_kill(root: Path, seed: int, rng: random.Random, acked: Acked) -> int:
    """Start the writer, let it acknowledge a random number of messages, SIGKILL it; returns how many."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.integration.store_crash_writer", str(root), str(seed)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    target = rng.randint(20, 600)
    got = 0
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 60
    buf = b""
    ready = False
    try:
        while time.monotonic() < deadline and (not ready or got < target):
            if not sel.select(timeout=1.0):
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line == b"ready":
                    ready = True
                    continue
                topic, qid, qoff, phys, h = line.decode().split()
                acked[(topic, int(qid), int(qoff))] = (int(phys), h)
                got += 1
        assert ready, "the writer never started"
        if rng.random() < 0.5:
            time.sleep(rng.random() * 0.05)  # kill between acknowledgements, too
        proc.send_signal(signal.SIGKILL)
        rest = proc.stdout.read()  # lines printed before the kill: acknowledged as well
        for line in (buf + rest).split(b"\n"):
            if line.strip() and line != b"ready":
                topic, qid, qoff, phys, h = line.decode().split()
                acked[(topic, int(qid), int(qoff))] = (int(phys), h)
                got += 1
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        sel.close()
    assert proc.returncode == -signal.SIGKILL
    return got


async def verify(root: Path, acked: Acked) -> None:
    assert (root / "abort").exists(), "a killed store leaves its abort file"
    async with opened(crash_config(root)) as store:
        assert store.stats.last_recovery_abnormal
        for (topic, qid, qoff), (phys, h) in acked.items():
            g = store.get_message(topic, qid, qoff, 1)
            assert g.status is GetMessageStatus.FOUND, (topic, qid, qoff, g.status)
            msg = decode_record(g.records[0], check_crc=True)
            assert (msg.physical_offset, msg.queue_offset, msg.topic, msg.queue_id) == (phys, qoff, topic, qid)
            assert body_hash(msg.body) == h
        # Nothing torn is visible: every entry of every queue is a whole, CRC-valid record of that queue.
        for topic in TOPICS:
            for qid in store.queue_ids(topic):
                off = store.get_min_offset_in_queue(topic, qid)
                end = store.get_max_offset_in_queue(topic, qid)
                while off < end:
                    g = store.get_message(topic, qid, off, 32, max_total_bytes=1 << 30)
                    assert g.status is GetMessageStatus.FOUND, (topic, qid, off, g.status)
                    for q, rec in zip(g.queue_offsets, g.records, strict=True):
                        m = decode_record(rec, check_crc=True)
                        assert (m.topic, m.queue_id, m.queue_offset) == (topic, qid, q)
                        assert m.physical_offset + m.store_size <= store.max_phy_offset
                    off = g.next_begin_offset
        assert store.read_record(store.max_phy_offset) is None


async def test_kill_minus_nine_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(20240611)
    acked: Acked = {}
    rounds = 6
    for r in range(rounds):
        n = run_and_kill(tmp_path, 1000 + r, rng, acked)
        assert n > 0
        if r % 3 == 1:
            continue  # the next writer starts from a crashed store itself
        await verify(tmp_path, acked)
        (tmp_path / "abort").touch()  # verify() stopped cleanly; make the next check see a crash again
    if not (tmp_path / "abort").exists():
        (tmp_path / "abort").touch()
    await verify(tmp_path, acked)
    assert len(acked) > 100


async def test_torn_tail_after_kill_is_cut_and_never_served(tmp_path: Path) -> None:
    rng = random.Random(7)
    acked: Acked = {}
    run_and_kill(tmp_path, 7, rng, acked)
    async with opened(crash_config(tmp_path)) as store:
        end = store.max_phy_offset
        seg_size = store.commit_log.segment_size
    # Garbage past the end, shaped like a record header, as a torn write would leave it.
    seg = tmp_path / "commitlog" / f"{end - end % seg_size:020d}"
    junk = b"\x00\x00\x02\x00\xda\xa3\x20\xa7" + random.Random(1).randbytes(400)
    patch_file(seg, end % seg_size, junk[: seg_size - end % seg_size])
    (tmp_path / "abort").touch()
    await verify(tmp_path, acked)
    async with opened(crash_config(tmp_path)) as store:
        assert store.max_phy_offset == end
        data = seg.read_bytes()
        assert data[end % seg_size :].strip(b"\0") == b""
