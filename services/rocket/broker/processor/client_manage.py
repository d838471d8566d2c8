"""Client bookkeeping: :class:`ClientManageProcessor` (HEART_BEAT 34,
UNREGISTER_CLIENT 35, CHECK_CLIENT_CONFIG 46) and
:class:`ConsumerManageProcessor` (GET_CONSUMER_LIST_BY_GROUP 38,
QUERY_CONSUMER_OFFSET 14, UPDATE_CONSUMER_OFFSET 15).

As RocketMQ 4.9.8 ``ClientManageProcessor`` and ``ConsumerManageProcessor``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import orjson

from rocket.broker.client_manager import ClientChannelInfo
from rocket.broker.heartbeat import HeartbeatData, HeartbeatParseError
from rocket.broker.metadata.replication import respond_when_replicated
from rocket.protocol import retry_topic
from rocket.protocol.codes import PERM_READ, PERM_WRITE
from rocket.protocol.validation import LONG_MAX, first_problem, out_of_range, queue_id_problem
from rocket.remoting import RemotingCommand, RemotingConnection, ResponseCode

if TYPE_CHECKING:
    from rocket.broker.interfaces import ClientManageBroker

log = logging.getLogger("rocket.broker")

#: Remark of QUERY_CONSUMER_OFFSET when nothing is stored (Java's words).
QUERY_NOT_FOUND_REMARK = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"


#: Longest a heartbeat that created a retry topic waits for the NameServer registration (seconds):
#: a third of the clients' heartbeat timeout (the Java client's ``mqClientApiTimeout``, 3000 ms),
#: so that an unreachable NameServer delays the answer but does not make the client close its
#: channel (``clientCloseSocketIfTimeout``).
REGISTRATION_WAIT_S = 1.0


def _log_registration_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("registration after creating a retry topic failed: %s", task.exception())


class ClientManageProcessor:
    """Heartbeats and unregistration of producers and consumers."""

    def __init__(self, broker: ClientManageBroker) -> None:
        self.broker = broker

    def heartbeat(self, request: RemotingCommand, conn: RemotingConnection,
                  ) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        """Register the client's groups; create subscription groups and retry topics as needed.

        Body: HeartbeatData JSON, Java or C++ form. Bad body → code 1. When it created a retry
        topic, the answer is a future: SUCCESS once the broker re-registered with the NameServers
        (see :meth:`_after_registration`).
        """
        broker = self.broker
        try:
            data = HeartbeatData.decode(request.body)
        except HeartbeatParseError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad heartbeat body: {exc}")
        created = False
        for consumer in data.consumers:
            channel = ClientChannelInfo(
                connection=conn, client_id=data.client_id, language=request.language, version=request.version
            )
            group_config = broker.find_subscription_group(consumer.group_name)
            notify = True
            if group_config is not None:
                notify = bool(group_config.notify_consumer_ids_changed_enable)
                retry = retry_topic(consumer.group_name)
                if (group_config.retry_queue_nums > 0 and not broker.config.is_slave
                        and broker.topics.get(retry) is None):
                    broker.topics.create_in_send_back(retry, group_config.retry_queue_nums, PERM_READ | PERM_WRITE)
                    created = True
            broker.consumer_manager.register_consumer(
                consumer.group_name,
                channel,
                consumer.consume_type,
                consumer.message_model,
                consumer.consume_from_where,
                consumer.subscriptions,
                notify=notify,
            )
        for group in data.producer_groups:
            broker.producer_manager.register_producer(
                group,
                ClientChannelInfo(
                    connection=conn, client_id=data.client_id, language=request.language, version=request.version
                ),
            )
        response = request.response(ResponseCode.SUCCESS)
        if created and not request.is_oneway:
            return asyncio.ensure_future(self._after_registration(response))
        return response

    async def _after_registration(self, response: RemotingCommand) -> RemotingCommand:
        """``response`` once a NameServer registration that includes the topics created so far
        is done, or after :data:`REGISTRATION_WAIT_S` (a failed or late one is logged and
        answered all the same: it goes on, and the next periodic one carries the topics).

        RocketMQ 4.9.8's ``createTopicInSendMessageBackMethod`` calls
        ``registerBrokerAll(false, true, true)`` before the heartbeat is answered, which sends
        the registration (oneway) to every NameServer; here it is also confirmed, so a consumer
        that rebalances after its heartbeat finds its retry topic's queues on every broker it
        greeted."""
        registration = asyncio.ensure_future(self.broker.register_broker_all())
        registration.add_done_callback(_log_registration_failure)
        await asyncio.wait({registration}, timeout=REGISTRATION_WAIT_S)
        if not registration.done():
            log.warning("registration after creating a retry topic took over %.1f s; heartbeat answered before it",
                        REGISTRATION_WAIT_S)
        return response

    def unregister_client(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Remove the connection from the named producer and/or consumer group."""
        broker = self.broker
        request.require("clientID")
        producer_group = request.get("producerGroup") or ""
        consumer_group = request.get("consumerGroup") or ""
        if producer_group:
            broker.producer_manager.unregister_producer(producer_group, conn)
        if consumer_group:
            group_config = broker.metadata.subscription_groups.get(consumer_group)
            notify = True if group_config is None else bool(group_config.notify_consumer_ids_changed_enable)
            broker.consumer_manager.unregister_consumer(consumer_group, conn, notify=notify)
        return request.response(ResponseCode.SUCCESS)

    def check_client_config(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG: only TAG filtering exists here; anything else is refused."""
        try:
            obj = orjson.loads(request.body) if request.body else {}
        except orjson.JSONDecodeError:
            obj = {}
        sub = obj.get("subscriptionData") if isinstance(obj, dict) else None
        if isinstance(sub, dict):
            kind = str(sub.get("expressionType") or "TAG").upper()
            if kind != "TAG":
                return request.response(
                    ResponseCode.SYSTEM_ERROR, f"The broker does not support consumer to filter message by {kind}"
                )
        return request.response(ResponseCode.SUCCESS)


class ConsumerManageProcessor:
    """Consumer group membership and consumer offsets."""

    def __init__(self, broker: ClientManageBroker) -> None:
        self.broker = broker

    def get_consumer_list_by_group(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Body ``{"consumerIdList":[...]}``; code 1 when the group has no live member."""
        group = request.require("consumerGroup")
        info = self.broker.consumer_manager.get(group)
        if info is None or not info.channels:
            return request.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"consumerIdList": info.client_ids()}))

    def update_consumer_offset(self, request: RemotingCommand, conn: RemotingConnection
                               ) -> RemotingCommand | Any:
        """Store ``commitOffset`` for (consumerGroup, topic, queueId).

        Checked first, as ConsumerManageProcessor of RocketMQ 5: the group exists (or may be
        auto-created; else SUBSCRIPTION_GROUP_NOT_EXIST 26), the topic exists (TOPIC_NOT_EXIST
        17), and (ours) ``0 <= queueId < readQueueNums`` and ``commitOffset >= 0``
        (INVALID_PARAMETER 29). On a controller-mode master the answer waits until the commit is
        held by the replicas the send rule requires (``rocket.broker.metadata.replication``;
        coalesced with every other change of the same turn of the loop).
        """
        broker = self.broker
        group = request.require("consumerGroup")
        topic = request.require("topic")
        queue_id = request.require_int("queueId", bits=32)
        offset = request.require_int("commitOffset")
        if broker.find_subscription_group(group) is None:
            return request.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} not exist!")
        topic_config = broker.topics.get(topic)
        if topic_config is None and broker.config.is_slave:
            topic_config = broker.ha.replicated_topic_config(topic)
        if topic_config is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} not exist!")
        problem = first_problem(
            queue_id_problem(queue_id, topic, topic_config.read_queue_nums),
            out_of_range("commitOffset", offset, 0, LONG_MAX),
        )
        if problem is not None:
            return request.response(ResponseCode.INVALID_PARAMETER, problem)
        broker.metadata.consumer_offsets.commit(group, topic, queue_id, offset)
        return respond_when_replicated(broker.metadata_replication, request, conn,
                                       request.response(ResponseCode.SUCCESS))

    def query_consumer_offset(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """The stored offset; 0 for a fresh group on a queue still starting at 0, as
        ``ConsumerManageProcessor.queryConsumerOffset`` does; else 22. A negative queueId is
        INVALID_PARAMETER (29)."""
        store = self.broker.store
        group = request.require("consumerGroup")
        topic = request.require("topic")
        queue_id = request.require_int("queueId", bits=32)
        if queue_id < 0:
            return request.response(ResponseCode.INVALID_PARAMETER, f"queueId[{queue_id}] is illegal, topic:[{topic}]")
        offset = self.broker.metadata.consumer_offsets.query(group, topic, queue_id)
        if offset is not None and offset >= 0:
            return request.response(ResponseCode.SUCCESS, ext_fields={"offset": offset})
        if store.get_min_offset_in_queue(topic, queue_id) <= 0:
            return request.response(ResponseCode.SUCCESS, ext_fields={"offset": 0})
        return request.response(ResponseCode.QUERY_NOT_FOUND, QUERY_NOT_FOUND_REMARK)
