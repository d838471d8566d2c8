"""format("rocket-commitlog") with real Spark: on a store written by rocket.store (several segments,
blank marker, zeroed tail) and on hand-built segment files (encode_record), torn tail included."""

from __future__ import annotations

import asyncio
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from rocket.analytics.commitlog import CommitLogSourceError, ScanResult, find_segments, scan_segment
from rocket.message import BLANK_MAGIC_CODE, encode_properties, encode_record, patch_offsets, tags_hash_code


def _write_store(root: Path, n: int) -> None:
    from rocket.store.api import MessageStoreConfig, PutMessageRequest
    from rocket.store.message_store import DefaultMessageStore

    async def main() -> None:
        cfg = MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024,
                                 mapped_file_size_consume_queue=6000)
        store = DefaultMessageStore(cfg)
        await store.start()
        try:
            for i in range(n):
                tag = f"tag{i % 3}"
                await store.put_message(PutMessageRequest(
                    topic="A" if i % 2 else "B", queue_id=i % 4, body=f"message {i} ".encode() * 10,
                    properties=encode_properties({"TAGS": tag, "KEYS": f"k{i}"}),
                    born_timestamp=int(time.time() * 1000), born_host="127.0.0.1:5555",
                    tags_code=tags_hash_code(tag), keys=[f"k{i}"]))
        finally:
            await store.shutdown()

    asyncio.run(main())


def test_store_written_by_rocket_store(spark: Any, tmp_path: Path) -> None:
    _write_store(tmp_path, 500)
    segments = find_segments(tmp_path)
    assert len(segments) >= 2, "expected several 64 KiB segments"
    first = ScanResult()
    assert len(list(scan_segment(segments[0], result=first))) > 0
    assert first.reason == "blank"
    df = spark.read.format("rocket-commitlog").option("path", str(tmp_path)).option("brokerName", "b1").load()
    rows = df.orderBy("physical_offset").collect()
    assert len(rows) == 500
    assert {r["segment"] for r in rows} == {p.name for p in segments}
    by_topic = {r["topic"]: r["count"] for r in df.groupBy("topic").count().collect()}
    assert by_topic == {"A": 250, "B": 250}
    r0 = rows[0]
    assert (r0["topic"], r0["queue_id"], r0["queue_offset"], r0["keys"], r0["tags"]) == ("B", 0, 0, "k0", "tag0")
    assert r0["body"] == b"message 0 " * 10
    assert r0["properties"]["KEYS"] == "k0"
    assert r0["broker_name"] == "b1" and r0["born_host"] == "127.0.0.1:5555"
    assert r0["store_timestamp"] is not None
    # queue offsets per (topic, queue) are dense 0..n-1
    for r in df.groupBy("topic", "queue_id").agg({"queue_offset": "max", "*": "count"}).collect():
        assert r["max(queue_offset)"] == r["count(1)"] - 1
    # the commitlog dir itself works too, and the topic filter
    only_a = spark.read.format("rocket-commitlog").option("path", str(tmp_path / "commitlog")).option(
        "topic", "A").load()
    assert only_a.count() == 250


def _segment(records: list[bytearray], base: int, size: int, tail: bytes = b"") -> bytes:
    buf = bytearray()
    for rec in records:
        patch_offsets(rec, 0, 0, base + len(buf))
        buf += rec
    buf += tail
    return bytes(buf) + b"\x00" * (size - len(buf) - len(tail) if size > len(buf) else 0)


def test_hand_built_segments_blank_zeroed_and_torn(spark: Any, tmp_path: Path) -> None:
    log = tmp_path / "commitlog"
    log.mkdir()
    size = 4096
    recs1 = [encode_record(topic="T", queue_id=0, body=f"one-{i}".encode(), properties="TAGS\x01x",
                           born_timestamp=1_000 + i, store_timestamp=2_000 + i, queue_offset=i) for i in range(3)]
    used = sum(len(r) for r in recs1)
    blank = struct.pack(">ii", size - used, BLANK_MAGIC_CODE)
    (log / f"{0:020d}").write_bytes(_segment(recs1, 0, size, blank))
    recs2 = [encode_record(topic="T", queue_id=1, body=b"two", born_timestamp=5, store_timestamp=9)]
    torn = encode_record(topic="T", queue_id=1, body=b"torn record" * 5)[:40]  # a crash mid-write
    seg2 = bytearray(_segment(recs2, size, size))
    seg2[len(recs2[0]):len(recs2[0]) + 40] = torn
    (log / f"{size:020d}").write_bytes(bytes(seg2))
    (log / f"{2 * size:020d}").write_bytes(b"\x00" * size)  # a fresh, zeroed segment
    (log / "not-a-segment.tmp").write_bytes(b"junk")
    results = [ScanResult() for _ in range(3)]
    counts = [len(list(scan_segment(p, result=r))) for p, r in zip(find_segments(tmp_path), results, strict=True)]
    assert counts == [3, 1, 0]
    assert [r.reason for r in results] == ["blank", "corrupt", "zeroed"]
    df = spark.read.format("rocket-commitlog").option("path", str(tmp_path)).load()
    rows = df.orderBy("physical_offset").collect()
    assert [r["body"] for r in rows] == [b"one-0", b"one-1", b"one-2", b"two"]
    assert [r["physical_offset"] for r in rows][:2] == [0, len(recs1[0])]
    assert rows[0]["tags"] == "x"
    assert rows[3]["segment"] == f"{size:020d}"


def test_missing_path_is_a_clear_error(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(CommitLogSourceError, match="no CommitLog segment"):
        find_segments(tmp_path)
    with pytest.raises(Exception, match="no CommitLog segment"):
        spark.read.format("rocket-commitlog").option("path", str(tmp_path)).load().count()
