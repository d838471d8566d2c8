"""ConsumeQueue files and the get_message status table (PullMessageProcessor)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocket.message import decode_record, tags_hash_code
from rocket.store import BrokerRole, GetMessageStatus
from rocket.store.consumequeue import CQ_UNIT, ENTRY, ConsumeQueue, pack_entries
from tests.store_helpers import make_request, opened, small_config


def read_cq_files(root: Path, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    d = root / "consumequeue" / topic / str(queue_id)
    data = b"".join((d / n).read_bytes() for n in sorted(os.listdir(d)))
    entries = [struct.unpack_from(">qiq", data, i) for i in range(0, len(data), CQ_UNIT)]
    while entries and entries[-1] == (0, 0, 0):
        entries.pop()
    return entries


async def test_entries_on_disk_are_20_bytes_per_message(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mapped_file_size_consume_queue=20 * 8)
    async with opened(cfg) as store:
        appended = []
        for i in range(21):
            res = await store.put_message(make_request("T", 2, b"x" * i, tags="A" if i % 2 else "B"))
            appended.append(res.messages[0])
        await store.flush_logics()
        entries = read_cq_files(tmp_path, "T", 2)
        assert entries == [(m.physical_offset, m.size, tags_hash_code("A" if i % 2 else "B"))
                           for i, m in enumerate(appended)]
        names = sorted(os.listdir(tmp_path / "consumequeue" / "T" / "2"))
        assert names == [f"{i * 160:020d}" for i in range(3)]
        assert all((tmp_path / "consumequeue" / "T" / "2" / n).stat().st_size == 160 for n in names)


@settings(max_examples=30, deadline=None)
@given(entries=st.lists(st.tuples(st.integers(0, 2**40), st.integers(1, 5000), st.integers(-(2**63), 2**63 - 1)),
                        max_size=60),
       units=st.integers(1, 9))
def test_consume_queue_write_reload_round_trip(entries: list[tuple[int, int, int]], units: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cq = ConsumeQueue(root, "T", 0, units * CQ_UNIT)
        for i, (phys, size, tags) in enumerate(entries):
            cq.put(i, phys, size, tags)
        cq.commit_now()
        for i, e in enumerate(entries):
            assert cq.entry(i) == e
        cq.close()
        again = ConsumeQueue(root, "T", 0, units * CQ_UNIT)
        if entries:
            again.load()
        assert again.max_offset == len(entries)
        assert [again.entry(i) for i in range(len(entries))] == entries
        again.close()


async def test_status_table(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mapped_file_size_consume_queue=20 * 4, mapped_file_size_commit_log=1024)
    async with opened(cfg) as store:
        g = store.get_message("Nope", 0, 5, 32)
        assert (g.status, g.next_begin_offset) == (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0)
        store.consume_queues.find_or_create("Empty", 0)
        g = store.get_message("Empty", 0, 3, 32)
        assert (g.status, g.next_begin_offset) == (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0)
        for i in range(10):
            await store.put_message(make_request("T", 0, b"m%d" % i + b"." * 150, tags="even" if i % 2 == 0 else "odd"))
        g = store.get_message("T", 0, 0, 3)
        assert (g.status, g.next_begin_offset, g.min_offset, g.max_offset) == (GetMessageStatus.FOUND, 3, 0, 10)
        assert g.queue_offsets == [0, 1, 2]
        assert [decode_record(r).queue_offset for r in g.records] == [0, 1, 2]
        # Reads stop at the end of the ConsumeQueue file (4 entries per file here).
        g = store.get_message("T", 0, 2, 32)
        assert (g.status, g.next_begin_offset, g.message_count) == (GetMessageStatus.FOUND, 4, 2)
        g = store.get_message("T", 0, 10, 32)
        assert (g.status, g.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, 10)
        g = store.get_message("T", 0, 12, 32)  # min offset is 0: back to 0
        assert (g.status, g.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0)
        odd = {tags_hash_code("odd")}
        g = store.get_message("T", 0, 4, 32, tags_codes=odd)
        assert g.status is GetMessageStatus.FOUND and g.queue_offsets == [5, 7] and g.next_begin_offset == 8
        g = store.get_message("T", 0, 8, 1, tags_codes={tags_hash_code("none")})
        assert (g.status, g.next_begin_offset) == (GetMessageStatus.NO_MATCHED_MESSAGE, 10)
        # Size limit: always at least one message, then stop before exceeding.
        g = store.get_message("T", 0, 0, 32, max_total_bytes=1)
        assert g.message_count == 1 and g.next_begin_offset == 1
        # Retention moves the minimum: older offsets are "too small".
        cq = store.find_consume_queue("T", 0)
        assert cq is not None
        cl = store.commit_log
        await store.flush()
        removed = cl.remove_segments(cl.deletable_segments()[:1])
        assert removed
        g = store.get_message("T", 0, 0, 32)  # the CommitLog file is gone, the queue not yet corrected
        assert g.status is GetMessageStatus.MESSAGE_WAS_REMOVING and g.message_count == 0
        assert g.next_begin_offset > 0
        cq.correct_min_offset(cl.min_offset)
        new_min = cq.min_offset
        assert new_min > 0
        g = store.get_message("T", 0, 0, 32)
        assert (g.status, g.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, new_min)
        g = store.get_message("T", 0, 99, 32)  # min offset > 0: to max
        assert (g.status, g.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 10)
        # A ConsumeQueue file that is gone: skip to the next file.
        first = cq.files.pop(0)
        saved_min, cq.min_offset = cq.min_offset, first.start // 20
        g = store.get_message("T", 0, cq.min_offset, 32)
        assert (g.status, g.next_begin_offset) == (GetMessageStatus.OFFSET_FOUND_NULL, first.start // 20 + 4)
        cq.files.insert(0, first)
        cq.min_offset = saved_min


async def test_slave_keeps_the_requested_offset(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path / "m")) as master:
        await master.put_message(make_request("T", 0))
        data = master.read_commit_log(0, 1 << 20)
    async with opened(small_config(tmp_path / "s", broker_role=BrokerRole.SLAVE)) as slave:
        await slave.append_commit_log_data(0, data)
        g = slave.get_message("T", 0, 7, 32)
        assert (g.status, g.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 7)


async def test_store_time_queries(tmp_path: Path) -> None:
    now = [1_700_000_000.0]
    async with opened(small_config(tmp_path), clock=lambda: now[0]) as store:
        assert store.get_offset_in_queue_by_time("T", 0, 0) == 0
        assert store.get_earliest_message_time("T", 0) == -1
        times = []
        for i in range(20):
            now[0] += 1.0 if i != 10 else 5.0
            res = await store.put_message(make_request("T", 0, b"x"))
            times.append(res.messages[0].store_timestamp)
        assert store.get_earliest_message_time("T", 0) == times[0]
        assert store.get_store_timestamp("T", 0, 7) == times[7]
        assert store.get_store_timestamp("T", 0, 70) == -1
        for i, t in enumerate(times):
            assert store.get_offset_in_queue_by_time("T", 0, t) == i
        assert store.get_offset_in_queue_by_time("T", 0, times[9] + 1000) == 9  # nearer the left (tie: left)
        assert store.get_offset_in_queue_by_time("T", 0, times[9] + 3000) == 10
        assert store.get_offset_in_queue_by_time("T", 0, 0) == 0
        assert store.get_offset_in_queue_by_time("T", 0, times[-1] + 10**6) == 19


async def test_dispatch_listener_and_queue_listing(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path)) as store:
        seen: list[tuple[str, int, int, int]] = []
        store.add_dispatch_listener(lambda *a: seen.append(a))
        store.add_dispatch_listener(lambda *a: 1 / 0)  # a failing listener does not stop dispatch
        await store.put_message(make_request("T", 3, tags="A"))
        await store.put_messages([make_request("T", 3, tags="B"), make_request("T", 3, tags="B"),
                                  make_request("T", 3, tags="A")])
        assert seen == [("T", 3, 0, tags_hash_code("A")), ("T", 3, 2, tags_hash_code("B")),
                        ("T", 3, 3, tags_hash_code("A"))]
        await store.put_messages([make_request("T", 3, tags="C") for _ in range(3)])  # one tag code: the last only
        assert seen[3:] == [("T", 3, 6, tags_hash_code("C"))]
        await store.put_message(make_request("U", 1))
        assert store.queue_ids("T") == [3] and store.queue_ids("nope") == []
        store.delete_topics(["T"])
        assert store.queue_ids("T") == [] and store.get_max_offset_in_queue("T", 3) == 0
        res = await store.put_message(make_request("T", 3))
        assert res.messages[0].queue_offset == 0
    assert read_cq_files(tmp_path, "T", 3) == [(res.messages[0].physical_offset, res.messages[0].size, 0)]


def test_a_file_of_zeros_larger_than_the_hole_scan_block_holds_no_entry(tmp_path: Path) -> None:
    # RocketMQ's default file is 300,000 entries (6,000,000 bytes); a crash can leave one created
    # but never written. It once loaded as 3,276 entries (the first 64 KiB were taken for holes).
    units = 6000
    qdir = tmp_path / "T" / "0"
    qdir.mkdir(parents=True)
    (qdir / f"{0:020d}").write_bytes(bytes(units * CQ_UNIT))
    cq = ConsumeQueue(tmp_path, "T", 0, units * CQ_UNIT)
    cq.load()
    assert (cq.min_offset, cq.max_offset, cq.max_phys_end) == (0, 0, 0)
    cq.put(0, 100, 50, 7)
    assert cq.entry(0) == (100, 50, 7)
    cq.close()


def test_a_queue_starting_past_the_hole_scan_block_keeps_its_offsets(tmp_path: Path) -> None:
    units = 6000
    cq = ConsumeQueue(tmp_path, "T", 0, units * CQ_UNIT)
    first = 4000  # 80,000 bytes of leading zeros
    for i in range(5):
        cq.put(first + i, 1000 + 10 * i, 10, i)
    cq.commit_now()
    cq.close()
    again = ConsumeQueue(tmp_path, "T", 0, units * CQ_UNIT)
    again.load()
    assert (again.min_offset, again.max_offset, again.max_phys_end) == (first, first + 5, 1050)
    assert [again.entry(first + i) for i in range(5)] == [(1000 + 10 * i, 10, i) for i in range(5)]
    again.close()


@given(st.lists(st.tuples(st.integers(0, 2**63 - 1), st.integers(-(2**31), 2**31 - 1),
                          st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=40))
def test_entries_packed_at_once_are_the_entries_packed_one_by_one(entries: list[tuple[int, int, int]]) -> None:
    phys, sizes, tags = (list(column) for column in zip(*entries, strict=True))
    assert pack_entries(phys, sizes, tags) == b"".join(ENTRY.pack(*e) for e in entries)


def test_entries_packed_at_once_refuse_lists_of_other_lengths_and_values_out_of_range() -> None:
    with pytest.raises(ValueError, match="2 physical offsets, 1 sizes"):
        pack_entries([0, 20], [20], [0, 0])
    with pytest.raises(struct.error):
        pack_entries([0, 20], [20, 2**31], [0, 0])
