"""CommitLog: append/read round trips, segment files and blank markers, batches, limits, HA copy."""

from __future__ import annotations

import asyncio
import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocket.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    SYSFLAG_TRANSACTION_PREPARED,
    create_offset_msg_id,
    decode_record,
    encode_record,
)
from rocket.store import BrokerRole, GetMessageStatus, PutMessageStatus
from tests.store_helpers import make_request, opened, small_config


def walk_segment(path: Path) -> tuple[list[tuple[int, int]], int | None]:
    """Records ``(offset in file, size)`` of a CommitLog file and the blank marker's position."""
    data = path.read_bytes()
    pos, out = 0, []
    while pos + 8 <= len(data):
        size, magic = struct.unpack_from(">ii", data, pos)
        if magic == BLANK_MAGIC_CODE:
            assert pos + size == len(data), "the blank marker must cover the rest of the file"
            return out, pos
        if magic != MESSAGE_MAGIC_CODE:
            assert data[pos:].strip(b"\0") == b"", "only zeros after the last record"
            return out, None
        out.append((pos, size))
        pos += size
    return out, None


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    segment_size=st.sampled_from([1024, 1500, 4096, 10_000]),
    messages=st.lists(
        st.tuples(st.sampled_from(["A", "Topic-B", "%RETRY%g"]), st.integers(0, 3), st.binary(max_size=700),
                  st.one_of(st.none(), st.sampled_from(["t1", "t2"]))),
        min_size=1, max_size=40,
    ),
)
def test_append_read_round_trip_with_rolling_segments(segment_size: int,
                                                      messages: list[tuple[str, int, bytes, str | None]]) -> None:
    async def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            expected: dict[tuple[str, int], list[bytes]] = {}
            async with opened(small_config(root, mapped_file_size_commit_log=segment_size)) as store:
                for topic, qid, body, tags in messages:
                    res = await store.put_message(make_request(topic, qid, body, tags=tags, born_host="10.1.2.3:4567"))
                    assert res.status is PutMessageStatus.PUT_OK
                    (m,) = res.messages
                    q = expected.setdefault((topic, qid), [])
                    assert m.queue_offset == len(q)
                    assert m.msg_id == create_offset_msg_id("127.0.0.1:10911", m.physical_offset)
                    q.append(body)
                    # The stored bytes are the reference encoding.
                    rec = store.read_record(m.physical_offset)
                    assert rec == bytes(encode_record(
                        topic=topic, queue_id=qid, body=body, properties=make_request(tags=tags).properties,
                        born_host="10.1.2.3:4567", store_host="127.0.0.1:10911", store_timestamp=m.store_timestamp,
                        queue_offset=m.queue_offset, physical_offset=m.physical_offset))
                for (topic, qid), bodies in expected.items():
                    got = store.get_message(topic, qid, 0, 1000, max_total_bytes=1 << 30)
                    assert [decode_record(r, check_crc=True).body for r in got.records] == bodies[:32]
                end = store.max_phy_offset
            # Files: 20-digit names = start offsets, all of the segment size, records then a blank marker.
            names = sorted(os.listdir(root / "commitlog"))
            assert all(len(n) == 20 and n.isdigit() for n in names)
            starts = [int(n) for n in names]
            assert starts == [i * segment_size for i in range(len(starts))]
            for i, name in enumerate(names):
                path = root / "commitlog" / name
                assert path.stat().st_size == segment_size
                records, blank = walk_segment(path)
                if i < len(names) - 1:
                    assert blank is not None
                    assert segment_size - blank >= 8
                for off, size in records:
                    assert decode_record(path.read_bytes()[off : off + size], check_crc=True).physical_offset == \
                        starts[i] + off
            # And everything is still there after a restart.
            async with opened(small_config(root, mapped_file_size_commit_log=segment_size)) as store:
                assert store.max_phy_offset == end
                for (topic, qid), bodies in expected.items():
                    assert store.get_max_offset_in_queue(topic, qid) == len(bodies)

    asyncio.run(run())


async def test_batch_is_contiguous_with_consecutive_queue_offsets(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path, mapped_file_size_commit_log=4096)) as store:
        await store.put_message(make_request("T", 1, b"first"))
        res = await store.put_messages([make_request("T", 1, b"m%d" % i * 50) for i in range(12)])
        assert res.ok
        assert [m.queue_offset for m in res.messages] == list(range(1, 13))
        for a, b in zip(res.messages, res.messages[1:], strict=False):
            assert b.physical_offset == a.physical_offset + a.size
        # The batch did not fit after the first record: it starts a new segment as a whole.
        first_seg = res.messages[0].physical_offset // 4096
        assert all(m.physical_offset // 4096 == first_seg for m in res.messages)
        got = store.get_message("T", 1, 0, 32)
        assert got.message_count == 13 and got.next_begin_offset == 13


async def test_batch_rejections(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path, mapped_file_size_commit_log=4096, max_message_size=1000)) as store:
        mixed = await store.put_messages([make_request("T", 0), make_request("T", 1)])
        assert mixed.status is PutMessageStatus.MESSAGE_ILLEGAL and "one topic and queue" in mixed.remark
        big = await store.put_message(make_request("T", 0, b"x" * 1001))
        assert big.status is PutMessageStatus.MESSAGE_ILLEGAL and "max_message_size" in big.remark
        too_long = await store.put_messages([make_request("T", 0, b"x" * 900) for _ in range(5)])
        assert too_long.status is PutMessageStatus.MESSAGE_ILLEGAL and "do not fit" in too_long.remark
        props = make_request("T", 0)
        props.properties = "K\x01" + "v" * 40000
        assert (await store.put_message(props)).status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
        assert (await store.put_messages([])).status is PutMessageStatus.MESSAGE_ILLEGAL
        assert (await store.put_message(make_request("T" * 128))).status is PutMessageStatus.MESSAGE_ILLEGAL
        assert (await store.put_message(make_request("T", 0, born_host="nonsense"))).status is \
            PutMessageStatus.MESSAGE_ILLEGAL
        # Nothing was appended by the rejected calls.
        assert store.max_phy_offset == 0 and store.get_max_offset_in_queue("T", 0) == 0
        assert (await store.put_message(make_request("T", 0))).ok
        assert store.stats.put_rejected == 7


async def test_prepared_transaction_takes_no_queue_offset(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path)) as store:
        await store.put_message(make_request("T", 0, b"a"))
        half = await store.put_message(make_request("T", 0, b"half", sys_flag=SYSFLAG_TRANSACTION_PREPARED,
                                                    keys=["k1"]))
        assert half.ok and half.messages[0].queue_offset == 0
        await store.put_message(make_request("T", 0, b"b"))
        got = store.get_message("T", 0, 0, 10)
        assert [decode_record(r).body for r in got.records] == [b"a", b"b"]
        assert store.look_message_by_offset(half.messages[0].physical_offset).body == b"half"  # type: ignore[union-attr]
        assert len(store.query_message("T", "k1", 10, 0, 2**62)) == 1  # prepared messages are indexed


async def test_reads_never_pass_the_confirmed_end(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path)) as store:
        res = await store.put_message(make_request("T", 0, b"abc"))
        m = res.messages[0]
        assert store.read_record(m.physical_offset + 1) is None
        assert store.read_record(m.physical_offset + m.size) is None
        assert store.look_message_by_offset(-5) is None
        assert store.read_commit_log(0, 1 << 20) == store.read_record(0)
        assert store.read_commit_log(m.size, 100) == b""


async def test_ha_copy_between_stores(tmp_path: Path) -> None:
    cfg_m = small_config(tmp_path / "master", mapped_file_size_commit_log=2048)
    cfg_s = small_config(tmp_path / "slave", mapped_file_size_commit_log=2048, broker_role=BrokerRole.SLAVE)
    async with opened(cfg_m) as master, opened(cfg_s) as slave:
        for i in range(40):
            assert (await master.put_message(make_request("T", i % 2, b"body-%d" % i, keys=[f"k{i}"]))).ok
        assert (await slave.put_message(make_request("T", 0))).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert not await slave.append_commit_log_data(5, b"x")  # not a file start on an empty log
        offset = 0
        while offset < master.max_phy_offset:
            chunk = master.read_commit_log(offset, 333)  # cuts records anywhere
            assert chunk
            assert await slave.append_commit_log_data(offset, chunk)
            offset += len(chunk)
        assert not await slave.append_commit_log_data(offset + 1, b"zz")
        assert slave.max_phy_offset == master.max_phy_offset
        for q in (0, 1):
            a = master.get_message("T", q, 0, 32)
            b = slave.get_message("T", q, 0, 32)
            assert a.records == b.records and b.status is GetMessageStatus.FOUND
        assert len(slave.query_message("T", "k7", 4, 0, 2**62)) == 1


async def test_ha_slave_starting_at_a_later_file(tmp_path: Path) -> None:
    cfg_m = small_config(tmp_path / "master", mapped_file_size_commit_log=2048)
    cfg_s = small_config(tmp_path / "slave", mapped_file_size_commit_log=2048, broker_role=BrokerRole.SLAVE)
    async with opened(cfg_m) as master:
        for _ in range(60):
            await master.put_message(make_request("T", 0, b"b" * 40))
        start = master.commit_log.segments[-1].start
        assert start > 0
        data = master.read_commit_log(start, 1 << 20)
        qmax = master.get_max_offset_in_queue("T", 0)
    async with opened(cfg_s) as slave:
        assert await slave.append_commit_log_data(start, data)
        assert slave.min_phy_offset == start and slave.max_phy_offset == start + len(data)
        assert slave.get_max_offset_in_queue("T", 0) == qmax
        first = slave.get_min_offset_in_queue("T", 0)
        assert 0 < first < qmax
        assert slave.get_message("T", 0, first, 1).status is GetMessageStatus.FOUND
    async with opened(cfg_s) as slave:  # and it recovers
        assert slave.get_max_offset_in_queue("T", 0) == qmax
        assert slave.get_min_offset_in_queue("T", 0) == first


async def test_second_store_on_same_path_is_refused(tmp_path: Path) -> None:
    from rocket.store import DefaultMessageStore, StoreError

    async with opened(small_config(tmp_path)):
        other = DefaultMessageStore(small_config(tmp_path))
        with pytest.raises(StoreError, match="in use"):
            await other.start()
    async with opened(small_config(tmp_path)) as again:  # the lock is released at shutdown
        assert again.running


async def test_runtime_info_and_positions(tmp_path: Path) -> None:
    # ASYNC_FLUSH whose flush service waits an hour: only the explicit flush below writes to disk
    async with opened(small_config(tmp_path, flush_interval_commit_log=3600.0)) as store:
        first = await store.put_message(make_request("T", 0, b"x"))
        await store.put_message(make_request("T", 0, b"y", keys=["k"]))
        info = store.runtime_info()
        assert all(isinstance(v, str) for v in info.values())
        assert info["commitLogMaxOffset"] == str(store.max_phy_offset) and info["commitLogMinOffset"] == "0"
        assert info["dispatchBehindBytes"] == "0"
        assert info["earliestMessageTimeStamp"] == str(first.messages[0].store_timestamp)
        assert 0.0 < float(info["commitLogDiskRatio"]) < 1.0
        assert 0.0 < store.disk_usage_ratio() < 1.0
        assert info["remainHowManyDataToFlush"] == str(store.max_phy_offset)  # nothing flushed yet
        assert info["putMessageTimesTotal"] == "2"
        assert store.index_last_update_phy_offset == first.messages[0].size
        assert await store.commit_log.flush()
        assert store.runtime_info()["remainHowManyDataToFlush"] == "0"


async def test_ha_slave_dispatches_like_its_master(tmp_path: Path) -> None:
    # A slave's reput walks runs of ordinary IPv4 records without an object per record and takes
    # everything else (IPv6 hosts, prepared transactions, delayed messages, file ends) one by one;
    # queues, index and what the dispatch listeners hear come out as on the master. A second slave
    # has a listener of topic T alone, which hears of its every entry (as metadata replication's).
    from rocket.message import SYSFLAG_TRANSACTION_PREPARED

    cfg_m = small_config(tmp_path / "master", mapped_file_size_commit_log=4096)
    cfg_s = small_config(tmp_path / "slave", mapped_file_size_commit_log=4096, broker_role=BrokerRole.SLAVE)
    cfg_e = small_config(tmp_path / "every", mapped_file_size_commit_log=4096, broker_role=BrokerRole.SLAVE)
    heard: dict[str, list[tuple[str, int, int, int]]] = {"master": [], "slave": [], "every": []}
    async with opened(cfg_m) as master, opened(cfg_s) as slave, opened(cfg_e) as every:
        master.add_dispatch_listener(lambda *a: heard["master"].append(a))
        slave.add_dispatch_listener(lambda *a: heard["slave"].append(a))
        every.add_dispatch_listener(lambda *a: heard["every"].append(a), topic="T")
        for i in range(50):
            extra: dict[str, object] = {"born_host": "[2001:db8::5]:10911"} if i % 7 == 3 else {}
            if i % 11 == 5:
                extra["sys_flag"] = SYSFLAG_TRANSACTION_PREPARED
            req = make_request("T", i % 2, b"body-%d" % i, tags=f"t{i % 3}", keys=[f"k{i}"], uniq=f"U{i:05d}",
                               **extra)
            if i % 13 == 4:
                req = make_request("SCHEDULE_TOPIC_XXXX", 2, b"later", tags="D")
                req.properties += "\x02DELAY\x013\x02REAL_TOPIC\x01T"
            if i % 5 == 0 and req.topic == "T":  # a batch of 4 to the same queue
                more = [make_request(req.topic, req.queue_id, b"b", tags="t0") for _ in range(3)]
                assert (await master.put_messages([req, *more])).ok
            else:
                assert (await master.put_message(req)).ok
        offset = 0
        while offset < master.max_phy_offset:
            chunk = master.read_commit_log(offset, 700)  # cuts records anywhere
            assert await slave.append_commit_log_data(offset, chunk)
            assert await every.append_commit_log_data(offset, chunk)
            offset += len(chunk)
        for topic, q in (("T", 0), ("T", 1)):
            assert slave.get_message(topic, q, 0, 64).records == master.get_message(topic, q, 0, 64).records
        cq = slave.find_consume_queue("SCHEDULE_TOPIC_XXXX", 2)
        assert cq is not None and all(cq.entry(i)[2] > 10_000 for i in range(cq.max_offset))  # type: ignore[index]
        for key in ("k9", "U00009", "k3", "U00005"):  # an IPv4 and an IPv6 record; a prepared one
            assert len(slave.query_message("T", key, 4, 0, 2**62)) == 1, key

    def newest(events: list[tuple[str, int, int, int]]) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for topic, queue_id, offset, _tags in events:
            out[(topic, queue_id)] = max(offset, out.get((topic, queue_id), -1))
        return out

    # the master and a slave tell their listeners of the last of a run of equal tag codes, the
    # other slave its listener of T of every entry of T: the newest offsets agree
    entries = {(t, q, o) for (t, q), n in newest(heard["master"]).items() for o in range(n + 1)}
    assert len(newest(heard["slave"])) == 3 and newest(heard["slave"]) == newest(heard["master"])
    assert newest(heard["every"]) == {k: n for k, n in newest(heard["master"]).items() if k[0] == "T"}
    assert {(t, q, o) for t, q, o, _ in heard["slave"]} < entries  # runs of one tag code: their last
    assert sorted((t, q, o) for t, q, o, _ in heard["every"]) == sorted(e for e in entries if e[0] == "T")
