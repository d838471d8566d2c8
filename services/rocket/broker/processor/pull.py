""":class:`PullMessageProcessor`: PULL_MESSAGE (11), with long polling.

Checks (as RocketMQ's ``PullMessageProcessor``): broker readable (16), subscription group exists or
may be auto-created (26), group enabled (16), topic exists (17) and readable
(16), ``0 <= queueId < readQueueNums`` (1), the subscription parses (23) or,
when not sent inline, is known from heartbeats and not older than the
request's (24/25).

Store status → response code (``composeResponseHeader`` of Apache RocketMQ's
PullMessageProcessor; :func:`pull_answer`): FOUND → 0 with the records as body;
NO_MATCHED_MESSAGE/MESSAGE_WAS_REMOVING → 20 (PULL_RETRY_IMMEDIATELY);
empty or unknown queue → 19 at offset 0, else 21; OFFSET_OVERFLOW_ONE/
OFFSET_FOUND_NULL → 19; OFFSET_OVERFLOW_BADLY/OFFSET_TOO_SMALL → 21. The remark
is the store status name; ext ``suggestWhichBrokerId``, ``nextBeginOffset``,
``minOffset``, ``maxOffset`` are always present (as strings).

``nextBeginOffset`` never passes a message the consumer has not been given:
real clients (Java ``DefaultMQPushConsumerImpl``, the C++ client) move to it on
19, 20 and 21 alike and commit it. It is past the read records on 0, past the
entries scanned and not matched (or no longer in the CommitLog) on 20, the
corrected offset on a master's 21 (the queue's min or max: nothing readable
lies between), and the requested offset otherwise.

On a slave (``offsetCheckInSlave`` false, the default) the store never
corrects an offset, and a 21 becomes 20 with the requested offset and the
group's ``brokerId`` as suggestion (Apache RocketMQ 4.9.x, "PULL_OFFSET_MOVED:
none correction"): a slave that is behind its master must not move a
consumer. A slave serves the messages it has whether or not ``slaveReadEnable``
is set and whether or not it believes its master alive (Apache 4.9.x sets 20
for a slave without ``slaveReadEnable`` and then overwrites it with the read's
code); without ``slaveReadEnable`` it suggests the master (0) for the next pull.

``suggestWhichBrokerId`` (with ``slaveReadEnable``): the group's
``whichBrokerWhenConsumeSlowly`` (1) when the consumer is far behind — the
store's RAM rule (``accessMessageInMemoryMaxRatio``) or more than
``slaveReadLagBytes`` of CommitLog — and an in-sync slave is connected; else
the group's ``brokerId`` (0). A slave never stores offsets from pulls; a topic
it has replicated data for but no config yet (the 10 s config copy has not
run) is served as one with as many queues as it has.

A 19 with the SUSPEND bit is parked in the
:class:`~rocket.broker.long_polling.PullRequestHoldService` and re-run once,
without suspension, when woken.
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import TYPE_CHECKING

from rocket.broker.filter import EXPRESSION_TYPE_TAG, SubscriptionData, SubscriptionParseError, build_subscription_data
from rocket.broker.headers import PullMessageRequestHeader
from rocket.broker.long_polling import PullRequest
from rocket.broker.topics import is_readable
from rocket.remoting import RemotingCommand, RemotingConnection, ResponseCode
from rocket.store.api import GetMessageResult, GetMessageStatus

if TYPE_CHECKING:
    from rocket.broker.interfaces import PullBroker

MASTER_ID = 0
#: A stored record's physical offset field (CommitLog record layout): int64 at byte 28.
_PHYS = struct.Struct(">q")
_PHYS_AT = 28
#: Store statuses whose ``next_begin_offset`` is past entries the read scanned (and legitimately skipped).
_SCANNED_STATUSES = frozenset({
    GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING,
})


def pull_response_code(result: GetMessageResult, requested_offset: int) -> int:
    """The response code of a pull whose store result is ``result``, on a master
    (``composeResponseHeader`` of Apache RocketMQ's PullMessageProcessor)."""
    status = result.status
    if status is GetMessageStatus.FOUND:
        return ResponseCode.SUCCESS
    if status in (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING):
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
        return ResponseCode.PULL_NOT_FOUND if requested_offset == 0 else ResponseCode.PULL_OFFSET_MOVED
    if status in (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.OFFSET_FOUND_NULL):
        return ResponseCode.PULL_NOT_FOUND
    return ResponseCode.PULL_OFFSET_MOVED  # OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL


def pull_answer(result: GetMessageResult, requested_offset: int, *, slave_keeps_offset: bool) -> tuple[int, int]:
    """``(response code, nextBeginOffset)`` of a pull whose store result is ``result``.

    ``slave_keeps_offset``: the broker is a slave without ``offsetCheckInSlave``.
    Then PULL_OFFSET_MOVED (21) becomes PULL_RETRY_IMMEDIATELY (20), and 19, 20
    and 21 carry ``requested_offset`` unless the read scanned entries (20 after
    NO_MATCHED_MESSAGE / MESSAGE_WAS_REMOVING) — Apache RocketMQ 4.9.x
    PullMessageProcessor ("PULL_OFFSET_MOVED: none correction") and
    ``nextOffsetCorrection`` of its DefaultMessageStore. The caller then
    suggests the group's ``brokerId``.
    """
    code = pull_response_code(result, requested_offset)
    if not slave_keeps_offset or result.status in _SCANNED_STATUSES:
        return code, result.next_begin_offset
    if code == ResponseCode.PULL_OFFSET_MOVED:
        return ResponseCode.PULL_RETRY_IMMEDIATELY, requested_offset
    return code, requested_offset


class PullMessageProcessor:
    """Serves pulls from the store; parks empty long-polling pulls."""

    def __init__(self, broker: PullBroker) -> None:
        self.broker = broker
        #: Pull requests being handled (parked ones included).
        self.active = 0

    def process_request(self, request: RemotingCommand, conn: RemotingConnection
                        ) -> RemotingCommand | asyncio.Task[RemotingCommand]:
        """Answer a pull: the response, or (parked) a task that answers when the pull wakes.

        The first pass runs inline, not in a task of its own, so its side effects (the
        COMMIT_OFFSET commit above all) happen in the order requests arrive on the connection:
        a client's UPDATE_CONSUMER_OFFSET sent after a pull carrying an older ``commitOffset``
        must win, even when both frames arrive in one read (a consumer's last pull followed by
        its final offsets at shutdown). Only the wait of a parked pull runs in a task (the
        connection answers it when done, see ``Processors``).
        """
        broker = self.broker
        self.active += 1
        try:
            started = time.perf_counter()
            response, parked = self.process(request, conn, allow_suspend=True)
            broker.metrics.pull_latency.observe(time.perf_counter() - started)
        except BaseException:
            self.active -= 1
            raise
        if parked is None:
            self.active -= 1
            return response
        task = asyncio.get_running_loop().create_task(self._answer_parked(request, conn, parked))

        def done(_: asyncio.Task[RemotingCommand]) -> None:
            # also when the task is cancelled (connection closed) before it ever ran
            broker.hold_service.remove(parked)
            self.active -= 1

        task.add_done_callback(done)
        return task

    async def _answer_parked(self, request: RemotingCommand, conn: RemotingConnection,
                             parked: PullRequest) -> RemotingCommand:
        """Wait for ``parked`` to wake (a message arrived, or its time is up), then pull again
        without suspending (and without committing: the first pass did)."""
        try:
            await parked.future
        finally:
            self.broker.hold_service.remove(parked)
        started = time.perf_counter()
        response, _ = self.process(request, conn, allow_suspend=False)
        self.broker.metrics.pull_latency.observe(time.perf_counter() - started)
        return response

    def _subscription(
        self, request: RemotingCommand, header: PullMessageRequestHeader
    ) -> SubscriptionData | RemotingCommand:
        if header.has_subscription:
            if header.expression_type != EXPRESSION_TYPE_TAG:
                return request.response(
                    ResponseCode.SYSTEM_ERROR,
                    f"The broker does not support consumer to filter message by {header.expression_type}",
                )
            try:
                return build_subscription_data(header.topic, header.subscription, header.expression_type)
            except SubscriptionParseError as exc:
                return request.response(
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"parse the consumer's subscription failed: {exc}"
                )
        group = self.broker.consumer_manager.get(header.consumer_group)
        if group is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"the consumer's group info not exist (group {header.consumer_group} has no live heartbeat)",
            )
        sub = group.subscriptions.get(header.topic)
        if sub is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"the consumer's subscription not exist (group {header.consumer_group}, topic {header.topic})",
            )
        if sub.sub_version < header.sub_version:
            return request.response(
                ResponseCode.SUBSCRIPTION_NOT_LATEST,
                f"the consumer's subscription not latest ({sub.sub_version} < {header.sub_version})",
            )
        return sub

    def _far_behind(self, result: GetMessageResult) -> bool:
        """Does the pull start more than ``slaveReadLagBytes`` behind the CommitLog's end?"""
        limit = self.broker.config.slave_read_lag_bytes
        if limit <= 0 or not result.records:
            return False
        (phys,) = _PHYS.unpack_from(result.records[0], _PHYS_AT)
        return bool(self.broker.store.max_phy_offset - phys > limit)

    def process(  # noqa: C901 - hot: per pull, RocketMQ's checks in order, bench_broker consume
        self, request: RemotingCommand, conn: RemotingConnection, *, allow_suspend: bool
    ) -> tuple[RemotingCommand, PullRequest | None]:
        """Run one pull synchronously: the response, or a parked request to wait for."""
        broker = self.broker
        cfg = broker.config
        header = PullMessageRequestHeader.parse(request)
        problem = header.problem()
        if problem is not None:
            return request.response(ResponseCode.INVALID_PARAMETER, problem), None
        if not is_readable(cfg.broker_permission):
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the broker[{cfg.broker_ip1}] pulling message is forbidden (brokerPermission={cfg.broker_permission})",
            ), None
        group_config = broker.find_subscription_group(header.consumer_group)
        if group_config is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{header.consumer_group}] does not exist, apply first please!",
            ), None
        if not group_config.consume_enable:
            return request.response(
                ResponseCode.NO_PERMISSION, f"subscription group no permission, {header.consumer_group}"
            ), None
        topic_config = broker.topics.get(header.topic)
        if topic_config is None and cfg.is_slave:
            topic_config = broker.ha.replicated_topic_config(header.topic)
        if topic_config is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist, apply first please!"
            ), None
        if not is_readable(topic_config.perm):
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the topic[{header.topic}] pulling message is forbidden (perm={topic_config.perm})",
            ), None
        if header.queue_id < 0 or header.queue_id >= topic_config.read_queue_nums:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}] consumer:[{conn.peer}]",
            ), None
        sub = self._subscription(request, header)
        if isinstance(sub, RemotingCommand):
            return sub, None

        max_nums = max(1, min(header.max_msg_nums, cfg.max_transfer_count_on_message_in_memory))
        result = broker.store.get_message(
            header.topic,
            header.queue_id,
            header.queue_offset,
            max_nums,
            max_total_bytes=cfg.max_transfer_bytes_on_message_in_memory,
            tags_codes=sub.tags_codes(),
        )
        slave_keeps_offset = cfg.is_slave and not broker.store.config.offset_check_in_slave
        code, next_begin = pull_answer(result, header.queue_offset, slave_keeps_offset=slave_keeps_offset)
        if cfg.slave_read_enable:
            slow = result.suggest_pulling_from_slave or self._far_behind(result)
            if slow and cfg.is_master and not broker.ha.suggest_slave():
                slow = False  # no in-sync slave to send the consumer to
            suggest = group_config.which_broker_when_consume_slowly if slow else group_config.broker_id
        else:
            suggest = MASTER_ID
        if slave_keeps_offset and pull_response_code(result, header.queue_offset) == ResponseCode.PULL_OFFSET_MOVED:
            suggest = group_config.broker_id  # "PULL_OFFSET_MOVED: none correction"
        if allow_suspend and header.has_commit_offset and not cfg.is_slave and header.commit_offset >= 0:
            broker.metadata.consumer_offsets.commit(
                header.consumer_group, header.topic, header.queue_id, header.commit_offset
            )
        if (
            code == ResponseCode.PULL_NOT_FOUND
            and allow_suspend
            and header.has_suspend
            and not broker.shutting_down
            and broker.store.get_max_offset_in_queue(header.topic, header.queue_id) <= header.queue_offset
        ):
            millis = header.suspend_timeout_millis if cfg.long_polling_enable else cfg.short_polling_time_mills
            parked = broker.hold_service.park(
                header.topic, header.queue_id, header.queue_offset, sub, millis / 1000.0, conn
            )
            return request.response(code), parked
        body = b""
        if code == ResponseCode.SUCCESS:
            body = result.body
            broker.record_get(header.consumer_group, header.topic, result.message_count, len(body))
        return request.response(
            code,
            result.status.value,
            {
                "suggestWhichBrokerId": suggest,
                "nextBeginOffset": next_begin,
                "minOffset": result.min_offset,
                "maxOffset": result.max_offset,
            },
            body,
        ), None
