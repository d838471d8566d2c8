"""The pull processor's answer for every store status, on a master and on a slave.

Real clients (Java ``DefaultMQPushConsumerImpl``, the C++ client) move to
``nextBeginOffset`` on 19, 20 and 21 alike and commit it, so an answer that is not
0 must never carry an offset past a message the consumer was not given. Each case
runs the real :class:`PullMessageProcessor` of a broker whose store is started, with
the store's read replaced by a result of the given status (as Apache RocketMQ's
``DefaultMessageStore.getMessage`` computes it for that role), and checks the
response code, ``nextBeginOffset`` and ``suggestWhichBrokerId`` against Apache
RocketMQ 4.9.x's PullMessageProcessor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rocket.broker import controller as controller_module
from rocket.broker.config import BrokerConfig
from rocket.broker.controller import BrokerController
from rocket.broker.headers import PULL_FLAG_SUBSCRIPTION
from rocket.broker.processor.pull import pull_answer
from rocket.remoting import RemotingCommand, RequestCode, ResponseCode
from rocket.store import DefaultMessageStore
from rocket.store.api import BrokerRole, GetMessageResult, GetMessageStatus
from tests.store_helpers import make_request, opened, small_config
from tests.support import unconnected_connection

S = GetMessageStatus
R = ResponseCode
#: The consumer asks for offset 100 of a queue holding 40 .. 160 (min .. max, max exclusive).
REQUESTED = 100

# status, the store's nextBeginOffset on a master, expected (code, nextBeginOffset) on a master,
# expected on a slave (offsetCheckInSlave false: the store keeps the requested offset, 21 → 20).
CASES: list[tuple[S, int, tuple[int, int], tuple[int, int]]] = [
    (S.FOUND, 132, (R.SUCCESS, 132), (R.SUCCESS, 132)),
    (S.NO_MATCHED_MESSAGE, 132, (R.PULL_RETRY_IMMEDIATELY, 132), (R.PULL_RETRY_IMMEDIATELY, 132)),
    (S.MESSAGE_WAS_REMOVING, 132, (R.PULL_RETRY_IMMEDIATELY, 132), (R.PULL_RETRY_IMMEDIATELY, 132)),
    (S.OFFSET_OVERFLOW_ONE, REQUESTED, (R.PULL_NOT_FOUND, REQUESTED), (R.PULL_NOT_FOUND, REQUESTED)),
    (S.OFFSET_FOUND_NULL, 300_000, (R.PULL_NOT_FOUND, 300_000), (R.PULL_NOT_FOUND, REQUESTED)),
    (S.OFFSET_OVERFLOW_BADLY, 60, (R.PULL_OFFSET_MOVED, 60), (R.PULL_RETRY_IMMEDIATELY, REQUESTED)),
    (S.OFFSET_TOO_SMALL, 140, (R.PULL_OFFSET_MOVED, 140), (R.PULL_RETRY_IMMEDIATELY, REQUESTED)),
    (S.NO_MESSAGE_IN_QUEUE, 0, (R.PULL_OFFSET_MOVED, 0), (R.PULL_RETRY_IMMEDIATELY, REQUESTED)),
    (S.NO_MATCHED_LOGIC_QUEUE, 0, (R.PULL_OFFSET_MOVED, 0), (R.PULL_RETRY_IMMEDIATELY, REQUESTED)),
]
ROLES = ("master", "slave", "slave-read-enable", "slave-offset-check")


def _slave_keeps_offset(role: str) -> bool:
    return role in ("slave", "slave-read-enable")


def _store_next(role: str, status: S, master_next: int) -> int:
    """What the store itself returns as nextBeginOffset for ``role`` (``nextOffsetCorrection``)."""
    if _slave_keeps_offset(role) and status not in (S.FOUND, S.NO_MATCHED_MESSAGE, S.MESSAGE_WAS_REMOVING):
        return REQUESTED
    return master_next


class ScriptedReadStore(DefaultMessageStore):
    """A real store whose read answers ``scripted`` once that is set (a subclass: the store's
    methods are not replaceable on an instance in its compiled form)."""

    scripted: GetMessageResult | None = None

    def get_message(self, *args: Any, **kwargs: Any) -> GetMessageResult:
        if self.scripted is not None:
            return self.scripted
        return super().get_message(*args, **kwargs)


@pytest.fixture
async def brokers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[dict[str, BrokerController]]:
    monkeypatch.setattr(controller_module, "DefaultMessageStore", ScriptedReadStore)
    out: dict[str, BrokerController] = {}
    for role in ROLES:
        slave = role != "master"
        cfg = BrokerConfig(broker_name="b", store_path_root_dir=str(tmp_path / role),
                           broker_id=1 if slave else 0,
                           broker_role=BrokerRole.SLAVE if slave else BrokerRole.ASYNC_MASTER,
                           slave_read_enable=role == "slave-read-enable")
        if role == "slave-offset-check":
            cfg.store_overrides["offsetCheckInSlave"] = "true"
        b = BrokerController(cfg)
        await b.store.start()
        await b.metadata.load()
        b.topics.init_system_topics(b.schedule.max_level)
        b.topics.create_in_send_back("T", 4, 6)
        out[role] = b
    try:
        yield out
    finally:
        for b in out.values():
            await b.metadata.close(backup=False)
            await b.store.shutdown()


def _pull(offset: int = REQUESTED, queue_id: int = 1) -> RemotingCommand:
    fields = {"consumerGroup": "G", "topic": "T", "queueId": queue_id, "queueOffset": offset, "maxMsgNums": 32,
              "sysFlag": PULL_FLAG_SUBSCRIPTION, "commitOffset": 0, "suspendTimeoutMillis": 0,
              "subscription": "*", "subVersion": 1, "expressionType": "TAG"}
    return RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={k: str(v) for k, v in fields.items()})


def _answer(b: BrokerController, result: GetMessageResult, offset: int = REQUESTED) -> RemotingCommand:
    assert isinstance(b.store, ScriptedReadStore)
    b.store.scripted = result
    response, parked = b.pull_processor.process(_pull(offset), unconnected_connection(), allow_suspend=False)
    assert parked is None
    return response


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("status", "master_next", "on_master", "on_slave"), CASES,
                         ids=[c[0].value for c in CASES])
async def test_pull_answer_for_each_status(brokers: dict[str, BrokerController], role: str, status: S,
                                           master_next: int, on_master: tuple[int, int],
                                           on_slave: tuple[int, int]) -> None:
    b = brokers[role]
    records = [b"x" * 64] if status is S.FOUND else []
    result = GetMessageResult(status, _store_next(role, status, master_next), 40, 160, records=records,
                              queue_offsets=[REQUESTED] if records else [])
    response = _answer(b, result)
    code, next_begin = on_slave if _slave_keeps_offset(role) else on_master
    assert (response.code, int(response.ext_fields["nextBeginOffset"])) == (code, next_begin), response
    assert response.remark == status.value
    if code != R.SUCCESS:
        assert response.body in (b"", None)
        # The one rule real clients rely on: no answer but 0 moves past an unread message, except
        # over entries the read scanned and legitimately skipped (filtered out, or removed).
        if status not in (S.NO_MATCHED_MESSAGE, S.MESSAGE_WAS_REMOVING):
            assert next_begin <= REQUESTED or role in ("master", "slave-offset-check"), response
    # Without slaveReadEnable every answer points the consumer at the master.
    suggest = int(response.ext_fields["suggestWhichBrokerId"])
    assert suggest == 0


async def test_slave_serves_messages_while_it_believes_its_master_reachable(
        brokers: dict[str, BrokerController]) -> None:
    """The defect of issue 19: a slave answered FOUND with 20 and an advanced offset."""
    b = brokers["slave"]
    b.ha.client.state = "transferring"  # replicating now: the master is reachable
    assert b.ha.master_reachable
    result = GetMessageResult(S.FOUND, 132, 40, 160, records=[b"x" * 64] * 32,
                              queue_offsets=list(range(REQUESTED, 132)))
    response = _answer(b, result)
    assert response.code == R.SUCCESS
    assert response.body == b"x" * 64 * 32
    assert response.ext_fields["nextBeginOffset"] == "132"
    assert response.ext_fields["suggestWhichBrokerId"] == "0"


def test_pull_answer_function_keeps_the_requested_offset_on_a_slave() -> None:
    for status, master_next, on_master, on_slave in CASES:
        result = GetMessageResult(status, master_next, 40, 160)
        assert pull_answer(result, REQUESTED, slave_keeps_offset=False) == on_master
        if status in (S.FOUND, S.NO_MATCHED_MESSAGE, S.MESSAGE_WAS_REMOVING):
            assert pull_answer(result, REQUESTED, slave_keeps_offset=True) == on_slave
        else:
            # even if the store corrected it (a role change mid-read), a slave answers the request's offset
            assert pull_answer(result, REQUESTED, slave_keeps_offset=True) == (on_slave[0], REQUESTED)


async def test_real_store_reads_on_master_and_slave(tmp_path: Path) -> None:
    """The store's own statuses and offsets for a queue holding 0 .. 5, master and slave."""
    for role in (BrokerRole.ASYNC_MASTER, BrokerRole.SLAVE):
        async with opened(small_config(tmp_path / role.value, mapped_file_size_commit_log=1 << 20)) as store:
            for i in range(5):
                assert (await store.put_message(make_request("T", 0, f"m{i}".encode(), tags="A"))).ok
            store.config.broker_role = role
            slave = role is BrokerRole.SLAVE
            found = store.get_message("T", 0, 2, 32)
            assert (found.status, found.next_begin_offset, found.message_count) == (S.FOUND, 5, 3)
            one = store.get_message("T", 0, 5, 32)
            assert (one.status, one.next_begin_offset) == (S.OFFSET_OVERFLOW_ONE, 5)
            badly = store.get_message("T", 0, 9, 32)
            assert (badly.status, badly.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 9 if slave else 0)
            empty = store.get_message("T", 1, 7, 32)
            assert empty.status in (S.NO_MATCHED_LOGIC_QUEUE, S.NO_MESSAGE_IN_QUEUE)
            assert empty.next_begin_offset == (7 if slave else 0)
            tagged = store.get_message("T", 0, 0, 32, tags_codes={12345})
            assert (tagged.status, tagged.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 5)
