"""Offset stores and pull-body decoding (decompression, tag re-check)."""

from __future__ import annotations

import tracemalloc
import zlib
from pathlib import Path

import pytest

from rocket.client.consumer import decode_pull_body
from rocket.client.offsets import LocalOffsetStore
from rocket.client.subscription import SubscriptionData
from rocket.message import (
    MAX_MESSAGE_SIZE,
    SYSFLAG_COMPRESSED,
    BodyTooLargeError,
    MessageExt,
    MessageFormatError,
    compress_body,
    decompress_body,
    encode_properties,
    encode_record,
)
from rocket.protocol import MessageQueue


async def test_local_offset_store_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "g.json"
    mq1, mq2 = MessageQueue("T", "a", 0), MessageQueue("T", "b", 3)
    store = LocalOffsetStore(path, "g")
    await store.load()
    assert await store.read(mq1) == -1
    store.update(mq1, 5)
    store.update(mq1, 3, increase_only=True)
    assert store.get(mq1) == 5
    store.update(mq1, 4)
    store.update(mq2, 9)
    await store.persist_all()
    again = LocalOffsetStore(path, "g")
    await again.load()
    assert await again.read(mq1) == 4 and await again.read(mq2) == 9
    assert again.get(mq2) == 9
    # persisting one queue keeps the others
    again.update(mq1, 7)
    await again.persist(mq1)
    third = LocalOffsetStore(path, "g")
    await third.load()
    assert await third.read(mq1) == 7 and await third.read(mq2) == 9


async def test_local_offset_store_ignores_a_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_text("{not json")
    store = LocalOffsetStore(path, "g")
    await store.load()
    assert await store.read(MessageQueue("T", "a", 0)) == -1


def test_compress_threshold_and_round_trip() -> None:
    small, flag = compress_body(b"a" * 4096)
    assert flag == 0 and small == b"a" * 4096
    big, flag = compress_body(b"a" * 4097)
    assert flag & SYSFLAG_COMPRESSED and zlib.decompress(big) == b"a" * 4097
    assert decompress_body(big, flag) == b"a" * 4097


def _record(offset: int, body: bytes, tags: str | None, sys_flag: int = 0) -> bytes:
    props = {"UNIQ_KEY": f"ID{offset}"}
    if tags:
        props["TAGS"] = tags
    return bytes(encode_record(topic="T", queue_id=0, body=body, properties=encode_properties(props),
                               sys_flag=sys_flag, queue_offset=offset, physical_offset=offset * 100,
                               born_timestamp=1, store_timestamp=2, store_host="127.0.0.1:10911"))


def test_decode_pull_body_decompresses_and_filters() -> None:
    payload = b"z" * 10_000
    compressed, flag = compress_body(payload)
    body = _record(0, compressed, "TagA", flag) + _record(1, b"plain", "TagB") + _record(2, b"none", None)
    msgs = decode_pull_body(body, SubscriptionData.of("T", "TagA || TagC"), min_offset=0, max_offset=3)
    assert len(msgs) == 1
    assert msgs[0].body == payload and not msgs[0].sys_flag & SYSFLAG_COMPRESSED
    assert msgs[0].payload() == payload
    assert msgs[0].properties["MIN_OFFSET"] == "0" and msgs[0].properties["MAX_OFFSET"] == "3"
    everything = decode_pull_body(body, SubscriptionData.of("T", "*"))
    assert [m.queue_offset for m in everything] == [0, 1, 2]
    assert everything[0].msg_id == "ID0"


def test_decompress_body_is_bounded() -> None:
    """A "zip bomb" (64 MiB of zeros in about 64 KiB) stops at max_size bytes, with a clear error
    and memory near max_size; a body of exactly max_size inflates; a truncated stream is an error."""
    bomb = zlib.compress(bytes(64 << 20), 9)
    assert len(bomb) < 100_000
    tracemalloc.start()
    try:
        with pytest.raises(BodyTooLargeError, match=f"inflates to more than {MAX_MESSAGE_SIZE} bytes"):
            decompress_body(bomb, SYSFLAG_COMPRESSED)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_MESSAGE_SIZE, f"inflating the bomb peaked at {peak} bytes"
    exact = bytes(range(256)) * 4096  # 1 MiB
    assert decompress_body(zlib.compress(exact), SYSFLAG_COMPRESSED, max_size=len(exact)) == exact
    with pytest.raises(BodyTooLargeError):
        decompress_body(zlib.compress(exact + b"!"), SYSFLAG_COMPRESSED, max_size=len(exact))
    with pytest.raises(MessageFormatError, match="truncated"):
        decompress_body(zlib.compress(exact)[:-10], SYSFLAG_COMPRESSED)
    with pytest.raises(MessageFormatError, match="corrupt"):
        decompress_body(b"not zlib at all", SYSFLAG_COMPRESSED)


def test_decode_pull_body_sets_undecodable_bodies_aside() -> None:
    bomb = zlib.compress(b"\0" * (8 << 20), 9)
    body = _record(0, b"first", "TagA") + _record(1, bomb, "TagA", SYSFLAG_COMPRESSED) + _record(2, b"last", "TagA")
    with pytest.raises(MessageFormatError, match="ID1 of T queue 0 at offset 1: compressed body of"):
        decode_pull_body(body, SubscriptionData.of("T", "*"))
    undecodable: list[tuple[MessageExt, str]] = []
    msgs = decode_pull_body(body, SubscriptionData.of("T", "*"), undecodable=undecodable)
    assert [m.body for m in msgs] == [b"first", b"last"]
    assert [(m.queue_offset, m.body, m.sys_flag & SYSFLAG_COMPRESSED) for m, _ in undecodable] == [(1, bomb, 1)]
    assert "inflates to more than 4194304 bytes" in undecodable[0][1]
    # a larger limit lets it through
    big = decode_pull_body(body, SubscriptionData.of("T", "*"), max_body_size=8 << 20)
    assert len(big) == 3 and big[1].body == b"\0" * (8 << 20)


def test_pull_address_follows_suggestion_and_falls_back_to_slaves() -> None:
    from rocket.client.base import MQClient
    from rocket.client.consumer import _Puller
    from rocket.protocol import BrokerData

    client = MQClient("127.0.0.1:9876")
    puller = _Puller(client, "g")
    mq = MessageQueue("T", "a", 0)
    client.brokers["a"] = BrokerData("c", "a", {0: "m:1", 1: "s1:1", 2: "s2:1"})
    assert puller.address(mq) == ("m:1", 0)
    puller.suggested[mq] = 1  # the broker said: read from the slave
    assert puller.address(mq) == ("s1:1", 1)
    puller.suggested[mq] = 5  # unknown id: back to the master
    assert puller.address(mq) == ("m:1", 0)
    puller.suggested[mq] = 0
    puller.mark_down("m:1")  # master failed a moment ago: a slave serves
    assert puller.address(mq) == ("s1:1", 1)
    client.brokers["a"] = BrokerData("c", "a", {2: "s2:1"})  # the master is gone from the route
    assert puller.address(mq) == ("s2:1", 2)
