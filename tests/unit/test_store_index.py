"""IndexFile: layout, lookups with hash collisions and time ranges, rolling, repair."""

from __future__ import annotations

import asyncio
import struct
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from rocket.message import decode_record
from rocket.store.index import INDEX_HEADER_SIZE, IndexFile, IndexService, index_file_size
from rocket.store.record import index_key_hash
from tests.store_helpers import make_request, opened, small_config


def test_layout_header_slots_and_entries(tmp_path: Path) -> None:
    f = IndexFile.create(tmp_path / "20240101000000000", 4, 10, 0, 0)
    h1, h2 = index_key_hash("T", "a"), index_key_hash("T", "b")
    assert f.put_key(h1, 100, 1_000_000)
    assert f.put_key(h2, 200, 1_002_500)
    assert f.put_key(h1, 300, 1_005_000)
    f.write_header()
    raw = (tmp_path / "20240101000000000").read_bytes()
    assert len(raw) == index_file_size(4, 10) == 40 + 4 * 4 + 10 * 20
    begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count = struct.unpack_from(">qqqqii", raw, 0)
    assert (begin_ts, end_ts, begin_phy, end_phy, index_count) == (1_000_000, 1_005_000, 100, 300, 4)
    assert slot_count == len({h1 % 4, h2 % 4})
    (slot,) = struct.unpack_from(">i", raw, INDEX_HEADER_SIZE + (h1 % 4) * 4)
    assert slot == 3  # newest entry of that bucket
    entry3 = struct.unpack_from(">iqii", raw, INDEX_HEADER_SIZE + 16 + 3 * 20)
    assert entry3 == (h1, 300, 5, 1)  # hash, offset, seconds since begin, previous entry
    out: list[int] = []
    f.select(h1, 10, 0, 2**62, out)
    assert out == [300, 100]
    f.close()


def test_full_file_rolls_and_queries_span_files(tmp_path: Path) -> None:
    now = [1_000_000]
    svc = IndexService(tmp_path, 2, 4, lambda: now[0])  # 3 entries per file
    svc.load()
    for i in range(10):
        now[0] += 1
        svc.build("T", 1000 + i, 5_000_000 + i * 1000, f"U{i}", ["same"])
    svc.write_headers()
    assert len(svc.files) == 7 and len({f.path.name for f in svc.files}) == 7
    assert svc.query("T", "same", 64, 0, 2**62) == [1009 - i for i in range(10)]
    assert svc.query("T", "same", 3, 0, 2**62) == [1009, 1008, 1007]
    assert svc.query("T", "U4", 64, 0, 2**62) == [1004]
    assert svc.query("T", "same", 64, 5_004_000, 5_006_000) == [1006, 1005, 1004]
    assert svc.query("Other", "same", 64, 0, 2**62) == []
    svc.close()


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.sampled_from(["Aa", "BB", "k1", "k2", "x", "AaAa", "BBBB", "AaBB"]), min_size=1,
                     max_size=40),
       slots=st.integers(1, 5), window=st.tuples(st.integers(0, 45), st.integers(0, 45)))
def test_lookups_match_a_model_despite_collisions(keys: list[str], slots: int, window: tuple[int, int]) -> None:
    # "Aa"/"BB" (and the 4-character ones) have equal Java hash codes; few slots force bucket sharing.
    with tempfile.TemporaryDirectory() as tmp:
        f = IndexFile.create(Path(tmp) / "i", slots, 64, 0, 0)
        base = 1_700_000_000_000
        for i, k in enumerate(keys):
            assert f.put_key(index_key_hash("T", k), 10 * i, base + i * 1000)
        lo, hi = sorted(window)
        begin, end = base + lo * 1000, base + hi * 1000
        for k in set(keys):
            h = index_key_hash("T", k)
            expected = [10 * i for i in reversed(range(len(keys)))
                        if index_key_hash("T", keys[i]) == h and begin <= base + i * 1000 <= end]
            out: list[int] = []
            f.select(h, 64, begin, end, out)
            assert out == expected
        f.close()


async def test_query_message_drops_hash_collisions_and_respects_time(tmp_path: Path) -> None:
    assert index_key_hash("T", "Aa") == index_key_hash("T", "BB")
    now = [1_700_000_000.0]
    async with opened(small_config(tmp_path, max_hash_slot_num=4, max_index_num=16), clock=lambda: now[0]) as s:
        for i in range(30):
            now[0] += 1
            await s.put_message(make_request("T", i % 3, b"%d" % i, keys=["Aa" if i % 2 else "BB", f"k{i}"],
                                             uniq=f"UNIQ{i:04d}"))
        t0 = int(now[0] * 1000)
        got = s.query_message("T", "Aa", 64, 0, 2**62)
        assert [decode_record(r).body for r in got] == [b"%d" % i for i in reversed(range(1, 30, 2))]
        assert [decode_record(r).body for r in s.query_message("T", "BB", 5, 0, 2**62)] == \
            [b"28", b"26", b"24", b"22", b"20"]
        assert [decode_record(r).body for r in s.query_message("T", "UNIQ0007", 32, 0, 2**62)] == [b"7"]
        assert s.query_message("T", "k3", 32, t0 + 1, 2**62) == []
        assert len(s.query_message("T", "k3", 32, t0 - 40_000, t0)) == 1
        assert s.query_message("U", "k3", 32, 0, 2**62) == []
        for _ in range(500):  # tiny files: the newest may still be being created
            if s.index_service.pending_min_phys() < 0:
                break
            await asyncio.sleep(0.01)
        assert s.index_last_update_timestamp == t0
        assert s.index_last_update_phy_offset == s.max_phy_offset - s.commit_log.record_size_at(
            s.index_last_update_phy_offset)
        assert len(s.index_service.files) > 1
    async with opened(small_config(tmp_path, max_hash_slot_num=4, max_index_num=16)) as s:
        assert len(s.query_message("T", "Aa", 64, 0, 2**62)) == 15  # it survives a restart


def test_repair_removes_entries_past_the_end(tmp_path: Path) -> None:
    f = IndexFile.create(tmp_path / "i", 3, 20, 0, 0)
    for i in range(8):
        f.put_key(index_key_hash("T", f"k{i % 4}"), 100 * i, 1_000_000 + i)
    f.write_header()
    removed = f.repair(450, lambda phys: 1_000_000 + phys // 100)
    assert removed == 3 and f.index_count == 6 and f.end_phy_offset == 400 and f.end_timestamp == 1_000_004
    for k in range(4):
        out: list[int] = []
        f.select(index_key_hash("T", f"k{k}"), 64, 0, 2**62, out)
        assert out == [p for p in (100 * (k + 4), 100 * k) if p < 450]
    # New entries chain onto what is left.
    f.put_key(index_key_hash("T", "k1"), 999, 1_000_009)
    out = []
    f.select(index_key_hash("T", "k1"), 64, 0, 2**62, out)
    assert out == [999, 100]
    f.close()


def test_entries_written_past_a_stale_header_are_adopted(tmp_path: Path) -> None:
    f = IndexFile.create(tmp_path / "i", 3, 20, 0, 0)
    f.put_key(index_key_hash("T", "a"), 10, 1_000_000)
    f.write_header()
    f.put_key(index_key_hash("T", "a"), 20, 1_001_000)  # header not written: a crash here
    f.mm.flush()
    f.close()
    import os

    again = IndexFile(tmp_path / "i", 3, 20, os.open(tmp_path / "i", os.O_RDWR))
    assert again.index_count == 3 and again.end_phy_offset == 20
    out: list[int] = []
    again.select(index_key_hash("T", "a"), 64, 0, 2**62, out)
    assert out == [20, 10]
    again.close()


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(st.sampled_from([None, "U1", "U2", "AaBB"]),
                                           st.lists(st.sampled_from(["", "Aa", "BB", "k"]), max_size=3)),
                                 min_size=1, max_size=6), min_size=1, max_size=8),
       index_num=st.integers(2, 12))
def test_build_batch_writes_what_build_writes(batches: list[list[tuple[str | None, list[str]]]],
                                               index_num: int) -> None:
    # The batched path (one put's messages at once) leaves byte-identical files, across file rolls.
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        images = []
        for batched in (False, True):
            now = [1_000_000]
            svc = IndexService(root / str(batched), 3, index_num, lambda: now[0])  # noqa: B023
            svc.load()
            phys = 100
            for i, batch in enumerate(batches):
                now[0] += 1
                ts = 5_000_000 + i * 1500
                offsets = list(range(phys, phys + 10 * len(batch), 10))
                phys += 10 * len(batch)
                if batched:
                    svc.build_batch("T", offsets, ts, [u for u, _ in batch], [k for _, k in batch])
                else:
                    for p, (u, k) in zip(offsets, batch, strict=True):
                        if u or k:
                            svc.build("T", p, ts, u, k)
                svc.write_headers()
            images.append([f.path.read_bytes() for f in svc.files])
            assert svc.query("T", "BB", 64, 0, 2**62) == sorted(svc.query("T", "BB", 64, 0, 2**62), reverse=True)
            svc.close()
        assert images[0] == images[1]


def test_a_batch_of_many_entries_writes_what_build_writes(tmp_path: Path) -> None:
    # 700 entries in one put on 7 slots: chains link many entries of the same put, through the
    # byte-swapped slot view of put_index_entries.
    count = 350
    uniq = [f"U{i % 50}" for i in range(count)]
    keys = [["Aa"] if i % 2 else ["BB"] for i in range(count)]
    offsets = list(range(100, 100 + 10 * count, 10))
    images = []
    for batched in (False, True):
        svc = IndexService(tmp_path / str(batched), 7, 1000, lambda: 1_000_000)
        svc.load()
        if batched:
            svc.build_batch("T", offsets, 5_000_000, list(uniq), keys)
        else:
            for p, u, k in zip(offsets, uniq, keys, strict=True):
                svc.build("T", p, 5_000_000, u, k)
        svc.write_headers()
        images.append([f.path.read_bytes() for f in svc.files])
        assert svc.query("T", "U7", 64, 0, 2**62) == [p for p, u in zip(offsets, uniq, strict=True) if u == "U7"][::-1]
        svc.close()
    assert images[0] == images[1]


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.sampled_from(["Aa", "BB", "k1", "k2", "x", "AaAa", "BBBB"]), min_size=1, max_size=60),
       cut=st.integers(0, 70))
def test_repair_leaves_exactly_the_entries_before_the_cut(keys: list[str], cut: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        f = IndexFile.create(Path(d) / "20240101000000000", 5, 100, 0, 0)
        for i, k in enumerate(keys):
            assert f.put_key(index_key_hash("T", k), 1000 + i * 10, 1_000_000 + i)
        f.write_header()
        phys_end = 1000 + cut * 10
        removed = f.repair(phys_end, lambda p: 1_000_000 + (p - 1000) // 10)
        kept = min(cut, len(keys))
        assert removed == len(keys) - kept and f.index_count == kept + 1
        for k in set(keys):  # "Aa" and "BB" collide: a lookup returns every entry of the hash
            h = index_key_hash("T", k)
            out: list[int] = []
            f.select(h, 100, 0, 2**62, out)
            assert out == [1000 + i * 10 for i in reversed(range(kept)) if index_key_hash("T", keys[i]) == h]
        raw = (Path(d) / "20240101000000000").read_bytes()
        assert raw[INDEX_HEADER_SIZE + 5 * 4 + (kept + 1) * 20:].strip(b"\0") == b""
        f.close()


def test_close_unmaps_every_file_though_its_slots_are_viewed(tmp_path: Path) -> None:
    # put_index_entries reads and writes the hash slots through a memoryview of the mapping: an
    # mmap with a view exported refuses to close (BufferError), so close must release it first.
    svc = IndexService(tmp_path, 7, 1000, lambda: 1_000_000)
    svc.load()
    svc.build_batch("T", [100, 110, 120], 5_000_000, ["U1", "U2", "U1"], [[], ["K"], []])
    files = list(svc.files)
    assert files and svc.query("T", "U1", 64, 0, 2**62) == [120, 100]
    svc.close()
    assert all(f.mm.closed for f in files)
