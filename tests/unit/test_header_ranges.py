"""Header fields against their Java types and allowed ranges (``rocket.protocol.validation``)."""

from __future__ import annotations

import pytest

from rocket.broker.headers import ConsumerSendMsgBackRequestHeader, PullMessageRequestHeader, SendMessageRequestHeader
from rocket.protocol.validation import topic_counts_problem
from rocket.remoting import HeaderFieldError, RemotingCommand, RequestCode


def _cmd(code: int, **ext: object) -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields={k: str(v) for k, v in ext.items()})


@pytest.mark.parametrize(("text", "bits", "expected"), [
    ("2147483647", 32, 2147483647), ("-2147483648", 32, -2147483648), ("+7", 32, 7),
    ("9223372036854775807", 64, 2**63 - 1), ("-9223372036854775808", 64, -(2**63)),
])
def test_require_int_accepts_the_java_range(text: str, bits: int, expected: int) -> None:
    assert _cmd(1, f=text).require_int("f", bits=bits) == expected


@pytest.mark.parametrize(("text", "bits", "message"), [
    ("2147483648", 32, "out of the range of an int"), (str(2**40), 32, "out of the range of an int"),
    ("9223372036854775808", 64, "out of the range of a long"), ("9" * 5000, 64, "out of the range of a long"),
    (" 1", 32, "not an integer"), ("1_0", 32, "not an integer"), ("0x10", 32, "not an integer"),
    ("\u0661", 32, "not an integer"), ("", 32, "not an integer"),
])
def test_require_int_refuses_what_java_would_not_decode(text: str, bits: int, message: str) -> None:
    with pytest.raises(HeaderFieldError, match=message):
        _cmd(1, f=text).require_int("f", bits=bits)


PULL = dict(consumerGroup="G", topic="T", queueId=0, queueOffset=0, maxMsgNums=32, sysFlag=6, commitOffset=0,
            suspendTimeoutMillis=15000)


def test_pull_header_ranges() -> None:
    assert PullMessageRequestHeader.parse(_cmd(11, **PULL)).problem() is None
    for field, value, word in (("maxMsgNums", 0, "maxMsgNums"), ("sysFlag", 0x20, "sysFlag"),
                               ("sysFlag", -1, "sysFlag"), ("suspendTimeoutMillis", -1, "suspendTimeoutMillis"),
                               ("suspendTimeoutMillis", 2**31, "suspendTimeoutMillis")):
        problem = PullMessageRequestHeader.parse(_cmd(11, **{**PULL, field: value})).problem()
        assert problem is not None and word in problem
    with pytest.raises(HeaderFieldError, match="queueId"):
        PullMessageRequestHeader.parse(_cmd(11, **{**PULL, "queueId": 2**40}))


SEND = dict(a="P", b="T", c="TBW102", d=4, e=1, f=0, g=1700000000000, h=0, i="", j=0)


def test_send_header_ranges() -> None:
    assert SendMessageRequestHeader.parse(_cmd(RequestCode.SEND_MESSAGE_V2, **SEND)).problem() is None
    assert SendMessageRequestHeader.parse(_cmd(RequestCode.SEND_MESSAGE_V2, **{**SEND, "e": -1})).problem() is None
    for field, value, word in (("f", 0x800, "sysFlag"), ("f", -4, "sysFlag"), ("j", -1, "reconsumeTimes"),
                               ("d", -1, "defaultTopicQueueNums")):
        problem = SendMessageRequestHeader.parse(_cmd(RequestCode.SEND_MESSAGE_V2, **{**SEND, field: value})).problem()
        assert problem is not None and word in problem
    for field, value in (("e", 2**40), ("h", 2**31), ("g", 2**63)):
        with pytest.raises(HeaderFieldError, match="out of the range"):
            SendMessageRequestHeader.parse(_cmd(RequestCode.SEND_MESSAGE_V2, **{**SEND, field: value})).problem()


def test_send_back_header_ranges() -> None:
    ok = ConsumerSendMsgBackRequestHeader.parse(_cmd(36, offset=100, group="G", delayLevel=-1))
    assert ok.problem() is None  # -1: straight to the dead-letter queue, as Java
    assert "offset" in (ConsumerSendMsgBackRequestHeader.parse(_cmd(36, offset=-1, group="G")).problem() or "")
    with pytest.raises(HeaderFieldError, match="delayLevel"):
        ConsumerSendMsgBackRequestHeader.parse(_cmd(36, offset=1, group="G", delayLevel=2**31))


def test_topic_counts() -> None:
    assert topic_counts_problem(8, 8, 6, 0) is None
    assert topic_counts_problem(0, 8, 6, 0) is None  # one side may be 0 (draining)
    for args in ((0, 0, 6, 0), (70000, 8, 6, 0), (8, -1, 6, 0), (8, 8, 16, 0), (8, 8, 6, 4), (8, 8, -1, 0)):
        assert topic_counts_problem(*args) is not None, args
