"""Compatibility: Apache RocketMQ's own ``TransactionMQProducer`` (5.x, from Maven) against our servers.

``tests/compat/TransactionDriver.java`` is compiled like ``bench/compare/Driver.java``
(``bench/compare/java.py``) and run once against one NameServer and one broker of ours whose
check-back service runs every 500 ms with a 1.5 s ``transactionTimeOut``. In that one run:

* a transaction whose local transaction commits is delivered exactly once to a push consumer,
  with its key, tag, user property, UNIQ_KEY (the msgId the send result reported) and
  ``TRAN_MSG``/``PGROUP`` properties, and is never checked back;
* one that rolls back is never delivered and never checked back;
* two that answer UNKNOW are checked back (CHECK_TRANSACTION_STATE) and the answers honoured:
  the one answered COMMIT_MESSAGE delivered once, the one answered ROLLBACK_MESSAGE never;
* a transaction whose producer answered UNKNOW and then shut down is checked with another producer
  instance of the same group, whose COMMIT_MESSAGE is honoured (the message carries
  ``CHECK_IMMUNITY_TIME_IN_SECONDS=5``, so the broker waits 5 s before its first check).

If Maven cannot fetch the client, or javac/java are missing, these tests fail and say why.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat.java_driver import single_broker_run

pytestmark = [pytest.mark.compat, pytest.mark.timeout(900)]  # the first run downloads the client

DRIVER_SOURCE = Path(__file__).resolve().parent / "TransactionDriver.java"
BROKER_SETTINGS = {"transactionCheckInterval": "500", "transactionTimeOut": "1500", "transactionCheckMax": "15"}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The driver's result against a fresh NameServer + broker (with the cluster's logs for messages)."""
    with single_broker_run(tmp_path_factory.mktemp("java-tx"), DRIVER_SOURCE, "TransactionDriver", "TxCompat",
                           BROKER_SETTINGS, "settle=4", "timeout=40") as result:
        yield result


def test_half_messages_are_sent(run: dict[str, Any]) -> None:
    """Every half message gets SEND_OK; the local transaction's state is what the listener said."""
    sends = run["sends"]
    assert {k: v["status"] for k, v in sends.items()} == dict.fromkeys(
        ["commit", "rollback", "unknown-commit", "unknown-rollback", "orphan"], "SEND_OK"), run["_context"]
    assert sends["commit"]["local"] == "COMMIT_MESSAGE" and sends["rollback"]["local"] == "ROLLBACK_MESSAGE"
    assert sends["unknown-commit"]["local"] == "UNKNOW" and sends["orphan"]["local"] == "UNKNOW"


def test_commit_is_delivered_once_and_rollback_never(run: dict[str, Any]) -> None:
    assert run["all_committed_arrived"], run["_context"]
    delivered = run["delivered"]
    assert delivered.get("commit") == 1 and "rollback" not in delivered, f"{delivered}\n{run['_context']}"
    props = run["props"]["commit"]
    assert props["@msgId"] == run["sends"]["commit"]["msgId"]
    assert props["@body"] == "body of commit" and props["TAGS"] == "TagTx" and props["prop"] == "commit"
    assert props["TRAN_MSG"] == "true" and props["PGROUP"] == run["group"]
    assert int(props["@sysFlag"]) & 0xC == 0x8  # TRANSACTION_COMMIT_TYPE
    assert int(props["@queueId"]) == run["sends"]["commit"]["queueId"]
    assert "REAL_TOPIC" not in props
    checked = {k for k in run["checks"] if k.endswith((":commit", ":rollback"))}
    assert not checked, f"finished transactions were checked back: {run['checks']}"


def test_unknown_is_checked_back_and_the_answer_honoured(run: dict[str, Any]) -> None:
    delivered, checks = run["delivered"], run["checks"]
    assert checks.get("main:unknown-commit", 0) >= 1 and checks.get("main:unknown-rollback", 0) >= 1, (
        f"{checks}\n{run['_context']}")
    assert delivered.get("unknown-commit") == 1, f"{delivered}\n{run['_context']}"
    assert "unknown-rollback" not in delivered, delivered
    assert run["props"]["unknown-commit"]["@msgId"] == run["sends"]["unknown-commit"]["msgId"]


def test_check_goes_to_another_producer_when_the_sender_is_gone(run: dict[str, Any]) -> None:
    checks = run["checks"]
    assert not run["orphan_checked_before_sender_gone"], "the check came before the sender shut down"
    assert checks.get("other:orphan", 0) >= 1 and "gone:orphan" not in checks, f"{checks}\n{run['_context']}"
    assert run["delivered"].get("orphan") == 1, f"{run['delivered']}\n{run['_context']}"
