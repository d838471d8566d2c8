"""Compatibility: timer messages from Apache RocketMQ's own Java client 5.x (remoting API:
``Message.setDeliverTimeMs``, ``setDelayTimeSec``, ``setDelayTimeMs``) against our servers.

``tests/compat/TimerDriver.java`` is compiled like ``bench/compare/Driver.java``
(``bench/compare/java.py``) and run once against one NameServer and one broker of ours with
``timerPrecisionMs=100``. A Java push consumer times each arrival: every timer message arrives
at its time or up to one precision (plus scheduling slack) later, never before; one due already
arrives at once; a delay beyond ``timerMaxDelaySec`` is refused with MESSAGE_ILLEGAL (13) and
Apache's remark; msgId, key and tag are kept; a batch (``send(Collection)``) of timer messages is
refused with MESSAGE_ILLEGAL, as a batch of delayed ones (Apache 5.4 would store its messages to
their topic and deliver them at once: ``rocket.broker.timer.batch_timer_refusal``).

If Maven cannot fetch the client, or javac/java are missing, these tests fail and say why.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat.java_driver import single_broker_run

pytestmark = [pytest.mark.compat, pytest.mark.timeout(900)]

DRIVER_SOURCE = Path(__file__).resolve().parent / "TimerDriver.java"
PRECISION_MS = 100
#: Lateness allowed beyond one slot on a loaded 2-core machine (the bench measures the real figures).
SLACK_MS = 700


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with single_broker_run(tmp_path_factory.mktemp("java-timer"), DRIVER_SOURCE, "TimerDriver", "TimerCompat",
                           {"timerPrecisionMs": str(PRECISION_MS)}, "timeout=30", "settle=2") as result:
        yield result


@pytest.mark.parametrize("key", ["deliver", "delaysec", "delayms"])
def test_arrives_on_time_never_before(run: dict[str, Any], key: str) -> None:
    send = run["sends"][key]
    assert send["status"] == "SEND_OK", run["_context"]
    arrived = run["arrived"].get(key)
    assert arrived and len(arrived) == 1, f"{key}: {arrived}\n{run['_context']}"
    earliest = send["earliest"]
    # a relative delay counts from the broker's arrival: between the send's start and its end
    bound = earliest if key == "deliver" else send["sentEnd"] + _delay(key)
    assert arrived[0] >= earliest, f"{key} arrived {earliest - arrived[0]} ms early"
    assert arrived[0] <= bound + PRECISION_MS + SLACK_MS, f"{key} arrived {arrived[0] - bound} ms late"
    props = run["props"][key]
    assert props["@msgId"] == send["msgId"] and props["KEYS"] == key and props["TAGS"] == "TagTimer"
    assert props["@topic"] == "TimerCompat" and "TIMER_OUT_MS" in props and "TIMER_DEQUEUE_MS" in props
    assert props["REAL_TOPIC"] == "TimerCompat"  # Apache's delivered record keeps REAL_TOPIC/REAL_QID too


def _delay(key: str) -> int:
    return {"delaysec": 2000, "delayms": 1500}[key]


def test_past_time_is_delivered_at_once(run: dict[str, Any]) -> None:
    send = run["sends"]["past"]
    assert send["status"] == "SEND_OK", run["_context"]
    arrived = run["arrived"].get("past")
    assert arrived and arrived[0] - send["sentEnd"] < 1000, f"{arrived}\n{run['_context']}"


def test_beyond_max_delay_is_refused(run: dict[str, Any]) -> None:
    send = run["sends"]["far"]
    assert send["status"] == "ERROR" and send["code"] == 13, send
    assert "should not be bigger than the max delay 259200000ms" in send["error"], send
    assert "far" not in run["arrived"]


def test_batch_of_timer_messages_is_refused(run: dict[str, Any]) -> None:
    send = run["sends"]["batch"]
    assert send["status"] == "ERROR" and send["code"] == 13, send
    assert "cannot be timer messages (TIMER_DELIVER_MS is set)" in send["error"], send
    assert "batch1" not in run["arrived"] and "batch2" not in run["arrived"], run["arrived"]
