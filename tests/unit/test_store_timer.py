"""Timer messages in the store (``rocket.store.timer``) and the broker's send hook, driven by a fake
clock: the enqueue and dequeue steps are called directly, so days pass in milliseconds."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

import pytest

from rocket.broker.inner import MessageInner
from rocket.broker.timer import transform_timer_message
from rocket.message import decode_record
from rocket.store import DefaultMessageStore, PutMessageStatus
from rocket.store.timer import (
    TIMER_TOPIC,
    TimerCheckpoint,
    TimerMessageStore,
    TimerWheel,
    build_delete_key,
)
from rocket.store.timer.log import BLANK_MAGIC_CODE, UNIT, UNIT_SIZE, TimerLog
from tests.store_helpers import small_config

DAY_MS = 86_400_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


class FakeClock:
    """Seconds since the epoch, moved by hand."""

    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000.0


def timer_config(root: Path, **overrides: Any) -> Any:
    values: dict[str, Any] = dict(mapped_file_size_commit_log=1 << 20, timer_precision_ms=1000,
                                  mapped_file_size_timer_log=64 * UNIT_SIZE + 16)
    values.update(overrides)
    return small_config(root, **values)


async def send(store: DefaultMessageStore, timer: TimerMessageStore, topic: str, body: bytes,
               **props: str) -> Any:
    """Send through the broker's hook as the send path does; returns the put result."""
    props.setdefault("UNIQ_KEY", f"U-{body.decode()}")
    inner = MessageInner(topic=topic, queue_id=1, body=body, properties=dict(props), born_timestamp=timer.now_ms())
    out = transform_timer_message(inner, store.config, timer.now_ms(), timer)
    if not isinstance(out, MessageInner):
        return out
    return await store.put_message(out.to_request())


async def settle(timer: TimerMessageStore) -> None:
    """Enqueue everything stored, then deliver every due slot."""
    while await timer.enqueue_batch():
        pass
    timer._move_write_time()
    while timer.curr_read_time_ms < timer.curr_write_time_ms:
        await timer.dequeue_once()
    while await timer.enqueue_batch():  # rolled timers re-put to the timer topic
        pass


def delivered(store: DefaultMessageStore, topic: str, queue_id: int = 1) -> list[Any]:
    out = []
    for off in range(store.get_max_offset_in_queue(topic, queue_id)):
        res = store.get_message(topic, queue_id, off, 1)
        out.extend(decode_record(r) for r in res.records)
    return out


@pytest.fixture
async def env(tmp_path: Path) -> Any:
    clock = FakeClock()
    store = DefaultMessageStore(timer_config(tmp_path, timer_max_delay_sec=45 * 86400), clock=clock)
    await store.start()
    timer = TimerMessageStore(store)
    timer.load()
    timer.should_run_dequeue = True
    timer._running = True
    timer._stopping = asyncio.Event()
    try:
        yield store, timer, clock
    finally:
        await timer.shutdown()
        await store.shutdown()


async def test_formats_match_rocketmq() -> None:
    assert UNIT_SIZE == 52 and UNIT.size == 52
    assert BLANK_MAGIC_CODE == struct.unpack(">i", struct.pack(">I", (0xBBCCDDEE ^ 1880681594) & 0xFFFFFFFF))[0]
    ck = TimerCheckpoint(last_read_time_ms=5, last_timer_log_flush_pos=6, last_timer_queue_offset=7,
                         master_timer_queue_offset=8, state_version=1, timestamp=2, counter=3)
    assert len(ck.encode()) == 56 and TimerCheckpoint.decode(ck.encode()).encode() == ck.encode()
    with pytest.raises(ValueError, match="timer checkpoint of 5 bytes"):
        TimerCheckpoint.decode(b"short")


async def test_wheel_slots_and_wrong_length(tmp_path: Path) -> None:
    wheel = TimerWheel(tmp_path / "w", 100, 1000)
    assert (tmp_path / "w").stat().st_size == 100 * 2 * 32
    wheel.put_slot(T0 + 1500, 10, 20, 2)
    assert wheel.get_slot(T0 + 1000).last_pos == 20 and wheel.get_slot(T0 + 1999).num == 2
    assert wheel.get_slot(T0 + 1000 + 200_000).time_ms == -1  # same index, other time
    assert wheel.next_used_time(T0 - 50_000, T0 + 90_000) == T0 + 1000
    assert wheel.next_used_time(T0 + 2000, T0 + 90_000) == T0 + 90_000
    wheel.close()
    with pytest.raises(ValueError, match="timer wheel length"):
        TimerWheel(tmp_path / "w", 200, 1000)


async def test_timerlog_blank_fills_the_end_of_a_file(tmp_path: Path) -> None:
    tl = TimerLog(tmp_path / "tl", 3 * UNIT_SIZE + 20)
    tl.load()
    positions = [tl.append(UNIT.pack(UNIT_SIZE, -1, 1, 0, 0, i, 10, 0, 0)) for i in range(4)]
    assert positions == [0, 52, 104, 3 * UNIT_SIZE + 20]  # the 4th unit starts the second file
    blank = struct.unpack_from(">iqi", (tmp_path / "tl" / f"{0:020d}").read_bytes(), 156)
    assert blank == (20, 0, BLANK_MAGIC_CODE)
    tl.close()


async def test_delivers_at_the_time_with_id_keys_and_properties(env: Any) -> None:
    store, timer, clock = env
    res = await send(store, timer, "Orders", b"a", TIMER_DELAY_SEC="5", KEYS="k1 k2", TAGS="t", color="red")
    assert res.status is PutMessageStatus.PUT_OK
    at = T0 + 7250
    await send(store, timer, "Orders", b"b", TIMER_DELIVER_MS=str(at))
    await send(store, timer, "Orders", b"c", TIMER_DELAY_MS="3000")
    await send(store, timer, "Orders", b"d", __STARTDELIVERTIME=str(T0 + 4000))
    stored = delivered(store, TIMER_TOPIC, 0)
    assert [m.properties["REAL_TOPIC"] for m in stored] == ["Orders"] * 4
    assert stored[0].properties["TIMER_OUT_MS"] == str(T0 + 4000)  # exact multiple: one slot earlier
    assert stored[1].properties["TIMER_OUT_MS"] == str(T0 + 7000)
    got: dict[bytes, int] = {}
    for _ in range(100):  # 100 ms steps for 10 s
        clock.ms += 100
        await settle(timer)
        for m in delivered(store, "Orders"):
            got.setdefault(m.body, clock.ms)
    assert got == {b"d": T0 + 4000, b"c": T0 + 3000, b"a": T0 + 5000, b"b": T0 + 8000}
    a = next(m for m in delivered(store, "Orders") if m.body == b"a")
    assert a.properties["UNIQ_KEY"] == "U-a" and a.properties["KEYS"] == "k1 k2" and a.properties["color"] == "red"
    assert a.properties["REAL_TOPIC"] == "Orders" and a.properties["TIMER_OUT_MS"] == str(T0 + 4000)  # as Apache
    assert int(a.properties["TIMER_DEQUEUE_MS"]) == T0 + 5000 and "TIMER_ENQUEUE_MS" in a.properties
    assert a.queue_id == 1
    assert store.query_message("Orders", "k2", 10, 0, 2**62)
    assert timer.stats.delivered == 4 and timer.pending() == 0


async def test_limits_past_due_and_bad_values(env: Any) -> None:
    store, timer, _clock = env
    store.config.timer_max_delay_sec = 3 * 86400
    res = await send(store, timer, "T", b"far", TIMER_DELAY_SEC=str(3 * 86400 + 1))
    assert res.status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL
    assert "should not be bigger than the max delay 259200000ms" in res.remark
    assert timer.stats.refused_max_delay == 1
    res = await send(store, timer, "T", b"nan", TIMER_DELAY_SEC="soon")
    assert res.status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL and "not a number" in res.remark
    res = await send(store, timer, "T", b"past", TIMER_DELIVER_MS=str(T0 - 60_000))
    assert res.status is PutMessageStatus.PUT_OK and timer.stats.past_due_at_send == 1
    assert [m.body for m in delivered(store, "T")] == [b"past"]
    res = await send(store, timer, "T", b"del", TIMER_DELIVER_MS=str(T0 - 1), TIMER_DEL_UNIQKEY="T+x")
    assert res.status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL
    res = await send(store, timer, "T", b"lvl", TIMER_DELAY_SEC="5", DELAY="1")
    assert res.status is PutMessageStatus.PUT_OK  # a delay level wins
    store.config.timer_wheel_enable = False
    res = await send(store, timer, "T", b"off", TIMER_DELAY_SEC="5")
    assert res.status is PutMessageStatus.WHEEL_TIMER_NOT_ENABLE


async def test_already_due_when_enqueued_is_delivered_at_once(env: Any) -> None:
    store, timer, clock = env
    await send(store, timer, "T", b"x", TIMER_DELAY_SEC="2")
    clock.ms += 10_000  # the broker was busy: enqueued late
    timer._move_write_time()
    await timer.enqueue_batch()
    [m] = delivered(store, "T")
    assert m.properties["TIMER_ENQUEUE_MS"] == str((1 << 63) - 1)
    assert timer.stats.delivered_at_once == 1


async def test_delete_by_unique_key(env: Any) -> None:
    store, timer, clock = env
    at = str(T0 + 5000)
    await send(store, timer, "T", b"keep", TIMER_DELIVER_MS=at)
    await send(store, timer, "T", b"gone", TIMER_DELIVER_MS=at)
    await send(store, timer, "T", b"mark", TIMER_DELIVER_MS=at, TIMER_DEL_UNIQKEY=build_delete_key("T", "U-gone"))
    await settle(timer)  # enqueued on arrival, as the running service does
    clock.ms += 6000
    await settle(timer)
    assert [m.body for m in delivered(store, "T")] == [b"keep"]
    assert timer.stats.deleted == 1


async def test_forty_days_with_rolls(env: Any) -> None:
    store, timer, clock = env
    at = T0 + 40 * DAY_MS + 12_345
    await send(store, timer, "T", b"late", TIMER_DELIVER_MS=str(at))
    await send(store, timer, "T", b"soon", TIMER_DELAY_SEC="60")
    seen_at = None
    while clock.ms < at + 5000:
        clock.ms += DAY_MS // 4 if at - clock.ms > DAY_MS else 500
        await settle(timer)
        if seen_at is None and any(m.body == b"late" for m in delivered(store, "T")):
            seen_at = clock.ms
    assert seen_at is not None and at <= seen_at <= at + 1000
    late = next(m for m in delivered(store, "T") if m.body == b"late")
    assert int(late.properties["TIMER_ROLL_TIMES"]) >= 15  # a 2-day roll window over 40 days
    assert timer.stats.rolled >= 15 and timer.stats.delivered == 2


async def test_recovery_after_a_crash_keeps_pending_timers(tmp_path: Path) -> None:
    clock = FakeClock()
    cfg = timer_config(tmp_path)
    store = DefaultMessageStore(cfg, clock=clock)
    await store.start()
    timer = TimerMessageStore(store)
    timer.load()
    timer.should_run_dequeue = True
    for i in range(300):  # 300 units over several TimerLog files
        await send(store, timer, "T", f"m{i}".encode(), TIMER_DELIVER_MS=str(T0 + 2000 + (i % 50) * 1000))
    await settle(timer)
    assert len(timer.timer_log.file_starts()) > 3
    # Crash: nothing of the timer was flushed or checkpointed; the wheel file is lost too.
    timer.timer_log.close()
    assert timer.wheel is not None
    timer.wheel.close()
    (tmp_path / "timerwheel").unlink()
    await store.shutdown()
    store = DefaultMessageStore(cfg, clock=clock)
    await store.start()
    timer = TimerMessageStore(store)
    timer.load()
    timer.should_run_dequeue = True
    timer._running, timer._stopping = True, asyncio.Event()
    assert timer.stats.recovered_units == 300 and timer.curr_queue_offset == 300
    clock.ms += 60_000
    await settle(timer)
    assert sorted(m.body for m in delivered(store, "T")) == sorted(f"m{i}".encode() for i in range(300))
    await timer.shutdown()
    await store.shutdown()


async def test_torn_timerlog_tail_is_cut(tmp_path: Path) -> None:
    clock = FakeClock()
    cfg = timer_config(tmp_path, mapped_file_size_timer_log=1 << 16)
    store = DefaultMessageStore(cfg, clock=clock)
    await store.start()
    timer = TimerMessageStore(store)
    timer.load()
    for i in range(10):
        await send(store, timer, "T", f"m{i}".encode(), TIMER_DELAY_SEC="30")
    await settle(timer)
    timer.timer_log.flush()
    timer.timer_log.close()
    assert timer.wheel is not None
    timer.wheel.close()
    path = tmp_path / "timerlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[9 * UNIT_SIZE + 12: 9 * UNIT_SIZE + 16] = b"\x7f\x7f\x7f\x7f"  # the last unit's magic is garbage
    path.write_bytes(bytes(data))
    timer = TimerMessageStore(store)
    timer.load()
    assert timer.timer_log.end == 9 * UNIT_SIZE and timer.curr_queue_offset == 9  # the 10th is enqueued again
    timer.should_run_dequeue = True
    timer._running, timer._stopping = True, asyncio.Event()
    clock.ms += 40_000
    await settle(timer)
    assert sorted(m.body for m in delivered(store, "T")) == sorted(f"m{i}".encode() for i in range(10))
    await timer.shutdown()
    await store.shutdown()


async def test_a_slave_enqueues_but_does_not_deliver(env: Any) -> None:
    store, timer, clock = env
    timer.should_run_dequeue = False
    await send(store, timer, "T", b"x", TIMER_DELAY_SEC="2")
    await timer.enqueue_batch()
    clock.ms += 5000
    timer._sync_read_time()
    assert delivered(store, "T") == [] and timer.pending() == 1
    master = TimerCheckpoint(last_read_time_ms=T0 + 1000, master_timer_queue_offset=1)
    timer.sync_from_master(master, store.commit_log.committed + 1)  # not replicated that far yet
    assert timer.checkpoint.last_read_time_ms == 0
    timer.sync_from_master(master, store.commit_log.committed)
    assert timer.checkpoint.last_read_time_ms == T0 + 1000
    timer.set_should_run_dequeue(True)
    assert timer.curr_read_time_ms == T0 + 1000
    await settle(timer)
    assert [m.body for m in delivered(store, "T")] == [b"x"]


async def test_timerlog_files_whose_messages_left_the_commitlog_are_deleted(tmp_path: Path) -> None:
    tl = TimerLog(tmp_path / "tl", 3 * UNIT_SIZE + 20)
    tl.load()
    for i in range(7):  # files 0 and 1 full (3 units each), file 2 holds one
        tl.append(UNIT.pack(UNIT_SIZE, -1, 1, 0, 0, 1000 * i, 10, 0, 0))
    assert tl.last_unit_offset_in_file() == 2 * UNIT_SIZE
    assert tl.delete_expired(2000) == 0  # file 0's last unit points at 2000: still there
    assert tl.delete_expired(2001) == 1 and len(tl.file_starts()) == 2
    assert tl.delete_expired(10**9) == 1 and len(tl.file_starts()) == 1  # never the last file
    tl.close()


async def test_fast_property_reads_equal_decoding_them(env: Any) -> None:
    """The enqueue path's ``timer_fields`` (a search in the stored properties bytes) gives what
    decoding every property gives, for repeated names, names that end another name, values that
    look like names, and the first or last place; the send hook's appended properties string
    equals ``encode_properties`` of its dict."""
    from rocket.message import encode_properties
    from rocket.store import PutMessageRequest
    from rocket.store.timer.timer_message_store import record_properties, timer_fields

    store, timer, _clock = env
    cases = [
        "TIMER_OUT_MS\x011000\x02REAL_TOPIC\x01t",
        "REAL_TOPIC\x01t\x02TIMER_OUT_MS\x011000",
        "XTIMER_OUT_MS\x019\x02TIMER_OUT_MS\x012000\x02A\x01REAL_TOPIC\x01no",
        "TIMER_OUT_MS\x011\x02REAL_TOPIC\x01a\x02TIMER_OUT_MS\x013000\x02REAL_TOPIC\x01b",
        "TIMER_OUT_MS\x014000\x02TIMER_DEL_UNIQKEY\x01t+U",
        "TIMER_OUT_MS\x015000\x02K\x01TIMER_DEL_UNIQKEY\x01x",  # a value, not a name
        "TIMER_OUT_MS\x016000\x02REAL_TOPIC\x01\u4e2d\u6587",
        "\x02TIMER_OUT_MS\x017000\x02",
    ]
    for props in cases:
        result = await store.put_message(PutMessageRequest(TIMER_TOPIC, 0, b"b", props, wait_store_msg_ok=False))
        rec = store.commit_log.read(result.messages[0].physical_offset, result.messages[0].size)
        decoded = record_properties(rec)
        out, topic_hash, delete = timer_fields(rec)
        assert out == int(decoded["TIMER_OUT_MS"]), props
        assert topic_hash == hash_topic(decoded.get("REAL_TOPIC")), props
        assert delete == ("TIMER_DEL_UNIQKEY" in decoded), props
    result = await store.put_message(PutMessageRequest(TIMER_TOPIC, 0, b"b", "REAL_TOPIC\x01t",
                                                       wait_store_msg_ok=False))
    with pytest.raises(ValueError, match="no TIMER_OUT_MS"):
        timer_fields(store.commit_log.read(result.messages[0].physical_offset, result.messages[0].size))
    # the hook appends to the encoded string exactly what encoding the dict gives
    for text in ("UNIQ_KEY\x01U1\x02TIMER_DELIVER_MS\x01" + str(timer.now_ms() + 60_000),
                 "TIMER_DELAY_SEC\x0130\x02DELAY\x010\x02CLUSTER\x01c"):
        props = dict(p.split("\x01") for p in text.split("\x02"))
        inner = MessageInner(topic="t", queue_id=2, body=b"x", properties=props, encoded=text)
        out_inner = transform_timer_message(inner, store.config, timer.now_ms(), timer)
        assert isinstance(out_inner, MessageInner) and out_inner.topic == TIMER_TOPIC
        assert out_inner.to_request().properties == encode_properties(out_inner.properties)
        assert out_inner.properties["REAL_TOPIC"] == "t" and out_inner.properties["REAL_QID"] == "2"


def hash_topic(topic: str | None) -> int:
    from rocket.store.timer.timer_message_store import hash_topic_for_metrics

    return hash_topic_for_metrics(topic)
