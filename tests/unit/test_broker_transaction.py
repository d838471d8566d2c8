"""The pure pieces of ``rocket.broker.transaction``: half-message and commit rewrites, op message
bodies and bookkeeping (:class:`OpScan`), and the check selection (:func:`check_verdict`)."""

from __future__ import annotations

import pytest

from rocket.broker.inner import MessageInner
from rocket.broker.transaction import (
    HALF_TOPIC,
    REMOVE_TAG,
    OpScan,
    Verdict,
    check_verdict,
    committed_message,
    discarded_message,
    half_message,
    immunity_ms,
    is_half_message,
    op_body,
    parse_op_body,
    renewed_half_message,
)
from rocket.message import MessageExt, decode_record, encode_properties, encode_record

NOW = 1_800_000_000_000


def stored(props: dict[str, str], *, born: int = NOW - 10_000, stored_at: int = NOW - 9_000, sys_flag: int = 0,
           queue_offset: int = 5, topic: str = HALF_TOPIC) -> MessageExt:
    """A half message as the store gives it back."""
    record = encode_record(topic=topic, queue_id=0, body=b"payload", properties=encode_properties(props),
                           flag=3, sys_flag=sys_flag, born_timestamp=born, born_host="10.0.0.1:1234",
                           store_timestamp=stored_at, store_host="127.0.0.1:10911", reconsume_times=0,
                           queue_offset=queue_offset, physical_offset=4096)
    return decode_record(record)


HALF_PROPS = {"KEYS": "k1 k2", "TAGS": "TagA", "UNIQ_KEY": "U1", "TRAN_MSG": "true", "PGROUP": "PID",
              "WAIT": "true", "REAL_TOPIC": "Orders", "REAL_QID": "3", "__transactionId__": "U1"}


def test_is_half_message() -> None:
    assert is_half_message({"TRAN_MSG": "true"}, 0)
    assert is_half_message({"TRAN_MSG": "TRUE"}, 0)
    assert is_half_message({}, 0x4)  # TRANSACTION_PREPARED_TYPE without the property
    assert not is_half_message({"TRAN_MSG": "false"}, 0)
    assert not is_half_message({}, 0x8) and not is_half_message({}, 0xC) and not is_half_message({}, 0x1)


def test_half_message_goes_to_the_half_topic_with_its_real_target() -> None:
    inner = MessageInner(topic="Orders", queue_id=3, body=b"x", sys_flag=0x4 | 0x1, born_timestamp=7,
                         properties={"TRAN_MSG": "true", "PGROUP": "PID", "UNIQ_KEY": "U1", "DELAY": "3"},
                         encoded="stale", tags_code=99)
    half = half_message(inner)
    assert (half.topic, half.queue_id) == (HALF_TOPIC, 0)
    assert half.sys_flag == 0x1  # transaction bits cleared, compression kept
    assert half.properties == {"TRAN_MSG": "true", "PGROUP": "PID", "UNIQ_KEY": "U1", "__transactionId__": "U1",
                               "REAL_TOPIC": "Orders", "REAL_QID": "3"}
    assert half.encoded is None and half.tags_code is None  # re-encoded from the new properties
    assert inner.topic == "Orders" and "REAL_TOPIC" not in inner.properties  # the original is untouched
    request = half.to_request()
    assert request.topic == HALF_TOPIC and request.uniq_key == "U1"


def test_committed_message_keeps_ids_keys_and_transaction_properties() -> None:
    msg = stored({**HALF_PROPS, "TRANSACTION_CHECK_TIMES": "2", "TRAN_PREPARED_QUEUE_OFFSET": "1"}, sys_flag=0x1)
    inner = committed_message(msg)
    assert (inner.topic, inner.queue_id, inner.body, inner.flag) == ("Orders", 3, b"payload", 3)
    assert inner.sys_flag == 0x8 | 0x1  # TRANSACTION_COMMIT_TYPE, compression bit kept
    assert inner.born_timestamp == msg.born_timestamp and inner.born_host == "10.0.0.1:1234"
    assert inner.properties == {"KEYS": "k1 k2", "TAGS": "TagA", "UNIQ_KEY": "U1", "TRAN_MSG": "true",
                                "PGROUP": "PID", "WAIT": "true", "__transactionId__": "U1"}
    request = inner.to_request()
    assert request.keys == ["k1", "k2"] and request.uniq_key == "U1" and request.tags_code != 0


def test_committed_message_needs_a_real_topic() -> None:
    with pytest.raises(ValueError, match="REAL_TOPIC"):
        committed_message(stored({"TRAN_MSG": "true"}))
    with pytest.raises(ValueError, match="lacks REAL_TOPIC/REAL_QID"):
        committed_message(stored({"REAL_TOPIC": "T", "REAL_QID": "x"}))


def test_renewed_and_discarded_copies() -> None:
    msg = stored(HALF_PROPS)
    copy = renewed_half_message(msg, 4)
    assert (copy.topic, copy.queue_id, copy.born_timestamp) == (HALF_TOPIC, 0, msg.born_timestamp)
    assert copy.properties["TRANSACTION_CHECK_TIMES"] == "4" and copy.properties["REAL_TOPIC"] == "Orders"
    gone = discarded_message(msg)
    assert (gone.topic, gone.queue_id) == ("TRANS_CHECK_MAX_TIME_TOPIC", 0)
    assert gone.properties == msg.properties and gone.body == msg.body


def test_op_bodies() -> None:
    assert op_body([12]) == b"12" and op_body([1, 2, 30]) == b"1,2,30"
    assert parse_op_body(b"12") == [12]  # RocketMQ 4.x: one offset
    assert parse_op_body(b"12,13,") == [12, 13]  # 5.x batches: trailing separator
    assert parse_op_body(b" 7 ,x,-1,,8") == [7, 8]  # junk skipped
    assert parse_op_body(b"") == []


def test_op_scan_bookkeeping() -> None:
    scan = OpScan(min_half_offset=10)
    scan.add(0, REMOVE_TAG, b"3")  # names a half offset already settled: done at once
    scan.add(1, REMOVE_TAG, b"10,11,")
    scan.add(2, REMOVE_TAG, b"12")
    scan.add(3, "x", b"13")  # wrong tag: ignored, done
    assert scan.remove == {10: 1, 11: 1, 12: 2}
    assert scan.next_op_offset(0) == 1  # op 1 still names unsettled half messages
    assert scan.finished(10) and not scan.finished(10)  # taken once
    assert scan.next_op_offset(0) == 1
    assert scan.finished(11)
    assert scan.next_op_offset(0) == 2  # op 1 fully passed
    assert not scan.finished(13) and scan.finished(12)
    assert scan.next_op_offset(0) == 4
    assert scan.next_op_offset(5) == 5


def test_op_scan_gap_stops_the_op_offset() -> None:
    scan = OpScan(min_half_offset=0)
    scan.add(0, REMOVE_TAG, b"0")
    scan.add(1, REMOVE_TAG, b"5")
    scan.add(2, REMOVE_TAG, b"1")
    assert scan.finished(0) and scan.finished(1)
    assert scan.next_op_offset(0) == 1  # op 1 (half offset 5) not passed yet


def verdict(msg: MessageExt, *, started: int = NOW, timeout: int = 6_000, check_max: int = 15,
            reserved: int = 72 * 3_600_000) -> Verdict:
    return check_verdict(msg, now_ms=NOW, run_started_ms=started, transaction_timeout_ms=timeout,
                         check_max=check_max, file_reserved_ms=reserved)


def test_check_selection() -> None:
    assert verdict(stored(HALF_PROPS, born=NOW - 10_000)) is Verdict.CHECK
    assert verdict(stored(HALF_PROPS, born=NOW - 5_000)) is Verdict.WAIT  # younger than transactionTimeOut
    assert verdict(stored(HALF_PROPS, born=NOW - 6_000)) is Verdict.WAIT  # exactly the timeout: not yet
    assert verdict(stored(HALF_PROPS, born=NOW + 50_000)) is Verdict.CHECK  # born in the future: check
    # stored during this run (a copy written for a check a moment ago): next run
    assert verdict(stored(HALF_PROPS, born=NOW - 60_000, stored_at=NOW)) is Verdict.WAIT
    checked = {**HALF_PROPS, "TRANSACTION_CHECK_TIMES": "14"}
    assert verdict(stored(checked)) is Verdict.CHECK
    assert verdict(stored({**checked, "TRANSACTION_CHECK_TIMES": "15"})) is Verdict.DISCARD
    assert verdict(stored(checked), check_max=3) is Verdict.DISCARD
    assert verdict(stored(HALF_PROPS, born=NOW - 10_000), reserved=5_000) is Verdict.DISCARD


def test_check_immunity() -> None:
    msg = stored({**HALF_PROPS, "CHECK_IMMUNITY_TIME_IN_SECONDS": "30"}, born=NOW - 10_000)
    assert immunity_ms(msg, 6_000) == 30_000
    assert verdict(msg) is Verdict.WAIT
    assert verdict(stored({**HALF_PROPS, "CHECK_IMMUNITY_TIME_IN_SECONDS": "30"}, born=NOW - 31_000)) is Verdict.CHECK
    # never shorter than transactionTimeOut; junk means transactionTimeOut
    assert immunity_ms(stored({"CHECK_IMMUNITY_TIME_IN_SECONDS": "1"}), 6_000) == 6_000
    assert immunity_ms(stored({"CHECK_IMMUNITY_TIME_IN_SECONDS": "soon"}), 6_000) == 6_000
    assert immunity_ms(stored({}), 6_000) == 6_000
