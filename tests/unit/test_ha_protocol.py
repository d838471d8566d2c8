"""HA framing (reports, transfers, handshake), SYNC_MASTER waiters, and the NameServer's epoch rule."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocket.nameserver.routeinfo import RouteInfoManager
from rocket.protocol import DataVersion, TopicConfigSerializeWrapper
from rocket.store.api import PutMessageStatus
from rocket.store.ha.master import SyncWaiters
from rocket.store.ha.protocol import (
    HANDSHAKE_MAGIC,
    HAProtocolError,
    TransferParser,
    decode_report,
    decode_transfer_header,
    encode_handshake,
    encode_report,
    encode_transfer_header,
    is_handshake,
    read_handshake,
)


def test_report_is_an_8_byte_big_endian_long() -> None:
    assert encode_report(0x0102030405060708) == bytes(range(1, 9))
    assert decode_report(encode_report(12345)) == 12345
    with pytest.raises(HAProtocolError):
        decode_report(encode_report(-1))


def test_transfer_header_layout() -> None:
    assert encode_transfer_header(1 << 32, 5) == b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x05"
    assert decode_transfer_header(encode_transfer_header(77, 32768)) == (77, 32768)
    with pytest.raises(HAProtocolError):
        decode_transfer_header(encode_transfer_header(-5, 1))
    with pytest.raises(HAProtocolError):
        decode_transfer_header(encode_transfer_header(0, -1))


def test_handshake_never_looks_like_a_report() -> None:
    frame = encode_handshake({"brokerName": "b", "epochs": [[1, 0]]})
    assert frame.startswith(HANDSHAKE_MAGIC) and is_handshake(frame[:4])
    # any plausible offset (< 2^62) has different first 4 bytes
    for offset in (0, 1, 1 << 40, (1 << 62) - 1):
        assert not is_handshake(encode_report(offset)[:4])


async def test_read_handshake_round_trip_and_errors() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(encode_handshake({"ok": True, "epochs": [[1, 0], [2, 9]]}))
    assert await read_handshake(reader) == {"ok": True, "epochs": [[1, 0], [2, 9]]}
    bad = asyncio.StreamReader()
    bad.feed_data(HANDSHAKE_MAGIC + b"\x00\x00\x00\x03[1]")
    with pytest.raises(HAProtocolError, match="not a JSON object"):
        await read_handshake(bad)
    wrong = asyncio.StreamReader()
    wrong.feed_data(encode_report(5))
    with pytest.raises(HAProtocolError, match="expected a handshake"):
        await read_handshake(wrong)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=20), st.integers(0, 1 << 40), st.randoms())
def test_transfer_parser_reassembles_any_split(chunks: list[bytes], start: int, rnd: random.Random) -> None:
    stream = bytearray()
    expected = []
    offset = start
    for c in chunks:
        stream += encode_transfer_header(offset, len(c)) + c
        expected.append((offset, c))
        offset += len(c)
    parser = TransferParser()
    got = []
    pos = 0
    while pos < len(stream):
        n = rnd.randint(1, 64) if rnd.random() < 0.5 else rnd.randint(1, len(stream))  # whole transfers too
        got += parser.feed(bytes(stream[pos : pos + n]))
        pos += n
    assert got == expected and parser.buffered == 0


def test_transfer_parser_copies_unless_the_transfers_fill_half_the_chunk() -> None:
    """Transfers that fill at least half of a chunk read with nothing left over come back as views
    of it (no copy); a chunk mostly of headers and a remainder, or bytes completing a remainder,
    give copies, so that a view never holds a chunk more than twice its size alive."""
    body = bytes(range(256)) * 64
    whole = encode_transfer_header(0, len(body)) + body + encode_transfer_header(len(body), 0)
    [(offset, data), (_, beat)] = TransferParser().feed(whole)
    assert (offset, bytes(data), beat) == (0, body, b"") and isinstance(data, memoryview)
    assert data.obj is whole  # a view of the chunk itself
    # one byte of data among a chunk of heartbeats: copied
    beats = encode_transfer_header(0, 0) * 100 + encode_transfer_header(0, 1) + b"x"
    out = TransferParser().feed(beats)
    assert out[-1] == (0, b"x") and all(isinstance(d, bytes) for _, d in out)
    # a transfer cut in two: the remainder is kept, the completed transfer is a copy
    parser = TransferParser()
    assert parser.feed(whole[:100]) == [] and parser.buffered == 100 - 12
    [(offset, data), (_, beat)] = parser.feed(whole[100:])
    assert (offset, data, beat) == (0, body, b"") and isinstance(data, bytes) and parser.buffered == 0


async def test_sync_waiters_ack_expire_and_fail() -> None:
    loop = asyncio.get_running_loop()
    w = SyncWaiters()
    f1 = w.add(100, 10.0, loop)
    f2 = w.add(200, 11.0, loop)
    f3 = w.add(150, 12.0, loop)  # out of order: resolved once the one before it is
    assert w.ack(120) == 1 and f1.result() is PutMessageStatus.PUT_OK and not f2.done()
    assert w.ack(199) == 0 and not f3.done()
    assert w.ack(250) == 2 and f2.result() is PutMessageStatus.PUT_OK and f3.result() is PutMessageStatus.PUT_OK
    f4 = w.add(300, 1.0, loop)
    f5 = w.add(400, 5.0, loop)
    assert w.next_deadline() == 1.0
    assert w.expire(2.0) == 1 and f4.result() is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    assert w.fail_all(PutMessageStatus.SLAVE_NOT_AVAILABLE) == 1
    assert f5.result() is PutMessageStatus.SLAVE_NOT_AVAILABLE and len(w) == 0


def _wrapper() -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(topic_config_table={}, data_version=DataVersion(1, 1))


def test_nameserver_keeps_the_newer_epoch_master() -> None:
    now = [100.0]
    routes = RouteInfoManager(clock=lambda: now[0])
    old, new = "10.0.0.1:10911", "10.0.0.2:10911"
    assert not routes.register_broker("C", old, "b", 0, "10.0.0.1:10912", _wrapper(), epoch=1).superseded
    # the slave is promoted with epoch 2: it replaces the old master
    assert not routes.register_broker("C", new, "b", 0, "10.0.0.2:10912", _wrapper(), epoch=2).superseded
    assert routes.broker_addr_table["b"].broker_addrs == {0: new}
    # the old master comes back with epoch 1: refused, told who the master is, nothing changes
    r = routes.register_broker("C", old, "b", 0, "10.0.0.1:10912", _wrapper(), epoch=1)
    assert r.superseded and (r.master_addr, r.ha_server_addr, r.master_epoch) == (new, "10.0.0.2:10912", 2)
    assert routes.broker_addr_table["b"].broker_addrs == {0: new}
    # equal epoch: the one already registered stays
    assert routes.register_broker("C", old, "b", 0, "x", _wrapper(), epoch=2).superseded
    # as a slave it registers normally and learns its master
    r = routes.register_broker("C", old, "b", 1, "10.0.0.1:10912", _wrapper())
    assert not r.superseded and r.master_addr == new
    assert routes.broker_addr_table["b"].broker_addrs == {0: new, 1: old}
    # brokers without epochs (Java) keep last-writer-wins
    assert not routes.register_broker("C", "10.0.0.3:10911", "b", 0, "y", _wrapper()).superseded
    assert routes.broker_addr_table["b"].broker_addrs[0] == "10.0.0.3:10911"


def test_a_refused_slave_asks_again_soon_then_backs_off() -> None:
    from rocket.store.ha.slave import reconnect_delay

    # a refusal is often the race of a slave told of its new master before that broker has become
    # master: the first retry comes after the usual second, later ones back off to 5 s
    assert [reconnect_delay(n) for n in range(7)] == [1.0, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert reconnect_delay(10_000) == 5.0
