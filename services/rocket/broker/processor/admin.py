""":class:`AdminBrokerProcessor`: topics, subscription groups, offsets, stats,
broker config, and the queue locks of orderly consumers.

Codes (RocketMQ's ``RequestCode``, ``AdminBrokerProcessor``): 13, 17, 21, 25, 26, 28, 29, 30, 31, 32, 41, 42, 43,
45, 200, 201, 202, 203, 207, 208, 215.

Bodies keyed by MessageQueue objects (GET_CONSUME_STATS, GET_TOPIC_STATS_INFO)
carry the table in two forms at once:

* ``offsetTable``: fastjson's object-keyed map (RocketMQ's ``ConsumeStats`` as fastjson writes it),
  ``{{"brokerName":"b","queueId":0,"topic":"t"}: {...}}``, which Java's tools
  and clients read (fastjson2, in 5.x, reads no other form);
* ``offsetList``: standard JSON for everyone else,
  ``[{"messageQueue": {"brokerName","queueId","topic"}, ...values}]``.

GET_CONSUME_STATS also carries ``consumeTps`` (messages per second pulled by
the group over the last minute), as Java's ConsumeStats does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson

from rocket.broker.config import ConfigError, format_properties, parse_properties
from rocket.broker.metadata.replication import respond_when_replicated, wait_replicated
from rocket.broker.processor.tools import dumps_java
from rocket.broker.topics import is_system_topic, validate_topic
from rocket.protocol import MessageQueue, loads_lenient
from rocket.protocol.validation import (
    INT_MAX,
    LONG_MAX,
    MAX_QUEUE_NUMS,
    first_problem,
    out_of_range,
    topic_counts_problem,
)
from rocket.remoting import RemotingCommand, RemotingConnection, ResponseCode

if TYPE_CHECKING:
    from rocket.broker.interfaces import AdminBroker

log = logging.getLogger("rocket.broker.admin")


def _json_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return orjson.dumps(value)


#: Java BrokerConfig keys with no setting here, shown by GET_BROKER_CONFIG with the value that
#: describes this broker (mqadmin 4.9.8's exportConfigs fails on a missing one).
JAVA_ONLY_BROKER_PROPERTIES = {
    "filterServerNums": "0",
    "msgTraceTopicName": "RMQ_SYS_TRACE_TOPIC",
    "traceOn": "true",
    "traceTopicEnable": "false",
    "useTLS": "false",
}


class AdminBrokerProcessor:
    """Administrative requests of tools, slaves and orderly consumers."""

    def __init__(self, broker: AdminBroker) -> None:
        self.broker = broker

    def _refuse_on_slave(self, request: RemotingCommand) -> RemotingCommand | None:
        cfg = self.broker.config
        if cfg.is_slave:
            return request.response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"the broker[{cfg.broker_name}] is a slave (brokerId {cfg.broker_id}): change it on the master",
            )
        return None

    # -- topics -------------------------------------------------------------------------

    async def update_and_create_topic(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Create or overwrite a topic config, then register with every NameServer at once."""
        broker = self.broker
        refused = self._refuse_on_slave(request)
        if refused is not None:
            return refused
        topic = request.require("topic")
        problem = validate_topic(topic)
        if problem is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, problem)
        if is_system_topic(topic, broker.config.broker_cluster_name) or topic == broker.config.broker_name:
            return request.response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        read = request.require_int("readQueueNums", bits=32)
        write = request.require_int("writeQueueNums", bits=32)
        perm = request.require_int("perm", bits=32)
        topic_sys_flag = request.get_int("topicSysFlag", 0, bits=32)
        filter_type = request.get("topicFilterType") or "SINGLE_TAG"
        problem = first_problem(
            topic_counts_problem(read, write, perm, topic_sys_flag),
            None if filter_type in ("SINGLE_TAG", "MULTI_TAG")
            else f"topicFilterType {filter_type!r} is not SINGLE_TAG or MULTI_TAG",
        )
        if problem is not None:
            return request.response(ResponseCode.INVALID_PARAMETER, f"{problem}, topic[{topic}]")
        try:
            tc = broker.new_topic_config(
                topic,
                read_queue_nums=read,
                write_queue_nums=write,
                perm=perm,
                topic_filter_type=filter_type,
                topic_sys_flag=topic_sys_flag,
                order=request.get_bool("order", False),
            )
        except (TypeError, ValueError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad topic config: {exc}")
        broker.metadata.topic_configs.put(tc)
        log.info("topic %s created/updated by %s: %d/%d queues, perm %d", topic, conn.peer, read, write, perm)
        not_replicated = await wait_replicated(broker.metadata_replication)
        await broker.register_broker_all()
        if not_replicated is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"topic[{topic}] created on the master, but not yet "
                                    f"held by its SyncStateSet: {not_replicated}")
        return request.response(ResponseCode.SUCCESS)

    async def delete_topic(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Drop a topic's config, queues and offsets, then re-register at once."""
        broker = self.broker
        topic = request.require("topic")
        if is_system_topic(topic, broker.config.broker_cluster_name) or topic == broker.config.broker_name:
            return request.response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        await broker.delete_topic(topic)
        log.info("topic %s deleted by %s", topic, conn.peer)
        not_replicated = await wait_replicated(broker.metadata_replication)
        await broker.register_broker_all()
        if not_replicated is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"topic[{topic}] deleted on the master, but not yet "
                                    f"on its SyncStateSet: {not_replicated}")
        return request.response(ResponseCode.SUCCESS)

    def get_all_topic_config(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """TopicConfigSerializeWrapper JSON; code 1 when there is no topic."""
        table = self.broker.metadata.topic_configs
        if not table.all():
            return request.response(ResponseCode.SYSTEM_ERROR, "No topic in this broker")
        return request.response(ResponseCode.SUCCESS, body=_json_bytes(table.wrapper_json()))

    # -- subscription groups -----------------------------------------------------------------

    def update_and_create_subscription_group(
        self, request: RemotingCommand, conn: RemotingConnection
    ) -> RemotingCommand | Any:
        """Body: SubscriptionGroupConfig JSON (Java names)."""
        broker = self.broker
        try:
            cfg = broker.subscription_group_from_json(request.body)
        except (ValueError, TypeError, KeyError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad subscription group config: {exc}")
        if not cfg.group_name:
            return request.response(ResponseCode.SYSTEM_ERROR, "subscription group config without groupName")
        problem = first_problem(
            out_of_range("retryQueueNums", cfg.retry_queue_nums, 0, MAX_QUEUE_NUMS),
            out_of_range("retryMaxTimes", cfg.retry_max_times, -1, INT_MAX),
            out_of_range("brokerId", cfg.broker_id, 0, LONG_MAX),
            out_of_range("whichBrokerWhenConsumeSlowly", cfg.which_broker_when_consume_slowly, 0, LONG_MAX),
        )
        if problem is not None:
            return request.response(ResponseCode.INVALID_PARAMETER, f"{problem}, subscription group [{cfg.group_name}]")
        broker.metadata.subscription_groups.put(cfg)
        log.info("subscription group %s created/updated by %s", cfg.group_name, conn.peer)
        return respond_when_replicated(broker.metadata_replication, request, conn,
                                       request.response(ResponseCode.SUCCESS))

    def get_all_subscription_group(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """``{"subscriptionGroupTable":{...},"dataVersion":{...}}``."""
        return request.response(
            ResponseCode.SUCCESS, body=_json_bytes(self.broker.metadata.subscription_groups.wrapper_json())
        )

    def delete_subscription_group(self, request: RemotingCommand, conn: RemotingConnection
                                  ) -> RemotingCommand | Any:
        """Ext ``groupName`` (and ``cleanOffset``: drop its offsets too)."""
        broker = self.broker
        group = request.require("groupName")
        broker.metadata.subscription_groups.delete(group)
        if request.get_bool("cleanOffset", False):
            broker.metadata.consumer_offsets.remove_group(group)
        return respond_when_replicated(broker.metadata_replication, request, conn,
                                       request.response(ResponseCode.SUCCESS))

    # -- offsets ---------------------------------------------------------------------------------

    def get_max_offset(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Ext ``offset`` = the queue's max offset, exclusive (``ConsumeQueue.getMaxOffsetInQueue``);
        0 for an unknown queue."""
        topic = request.require("topic")
        queue_id = request.require_int("queueId", bits=32)
        if queue_id < 0:
            return request.response(ResponseCode.INVALID_PARAMETER, f"queueId[{queue_id}] is illegal, topic:[{topic}]")
        offset = self.broker.store.get_max_offset_in_queue(topic, queue_id)
        return request.response(ResponseCode.SUCCESS, ext_fields={"offset": max(0, offset)})

    def get_min_offset(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Ext ``offset`` = the queue's first retained offset."""
        topic = request.require("topic")
        queue_id = request.require_int("queueId", bits=32)
        if queue_id < 0:
            return request.response(ResponseCode.INVALID_PARAMETER, f"queueId[{queue_id}] is illegal, topic:[{topic}]")
        offset = self.broker.store.get_min_offset_in_queue(topic, queue_id)
        return request.response(ResponseCode.SUCCESS, ext_fields={"offset": max(0, offset)})

    def get_earliest_msg_storetime(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Ext ``timestamp`` = store time (ms) of the queue's first message, -1 if none."""
        topic = request.require("topic")
        queue_id = request.require_int("queueId", bits=32)
        if queue_id < 0:
            return request.response(ResponseCode.INVALID_PARAMETER, f"queueId[{queue_id}] is illegal, topic:[{topic}]")
        ts = self.broker.store.get_earliest_message_time(topic, queue_id)
        return request.response(ResponseCode.SUCCESS, ext_fields={"timestamp": ts})

    def search_offset_by_timestamp(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Ext ``offset`` = the queue offset whose store time is nearest ``timestamp`` (ms)."""
        topic = request.require("topic")
        queue_id = request.require_int("queueId", bits=32)
        if queue_id < 0:
            return request.response(ResponseCode.INVALID_PARAMETER, f"queueId[{queue_id}] is illegal, topic:[{topic}]")
        ts = request.require_int("timestamp")
        offset = self.broker.store.get_offset_in_queue_by_time(topic, queue_id, ts)
        return request.response(ResponseCode.SUCCESS, ext_fields={"offset": max(0, offset)})

    def query_broker_offset(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Ext ``offset`` = the CommitLog's max physical offset."""
        return request.response(ResponseCode.SUCCESS, ext_fields={"offset": self.broker.store.max_phy_offset})

    def get_all_consumer_offset(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """``{"offsetTable":{"topic@group":{"0":12}}}`` (slaves copy it every 10 s)."""
        return request.response(ResponseCode.SUCCESS, body=_json_bytes(self.broker.metadata.consumer_offsets.to_json()))

    def get_all_delay_offset(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """The delayOffset table ``{"offsetTable":{"1":3}}`` (slaves copy it)."""
        return request.response(ResponseCode.SUCCESS, body=self.broker.schedule.offsets_json())

    # -- stats ------------------------------------------------------------------------------------

    def get_broker_runtime_info(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """KVTable ``{"table":{...}}`` of string values."""
        table = self.broker.runtime_info()
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"table": table}))

    def get_consume_stats(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """ConsumeStats of ``consumerGroup`` (optionally one ``topic``): see the module doc for the form."""
        broker = self.broker
        group = request.require("consumerGroup")
        topic = request.get("topic") or None
        rows, tps = broker.consume_stats(group, topic)
        table: dict[MessageQueue, Any] = {}
        listing: list[dict[str, Any]] = []
        for row in rows:
            mq = MessageQueue(row.topic, broker.config.broker_name, row.queue_id)
            wrapper = {
                "brokerOffset": row.broker_offset,
                "consumerOffset": row.consumer_offset,
                # 5.x: what was pulled; mqadmin prints pullOffset - consumerOffset as "#Inflight".
                "pullOffset": row.consumer_offset,
                "lastTimestamp": row.last_timestamp,
            }
            table[mq] = wrapper
            listing.append({"messageQueue": mq.to_json(), **wrapper, "lag": row.lag})
        body = {"offsetTable": table, "offsetList": listing, "consumeTps": tps}
        return request.response(ResponseCode.SUCCESS, body=dumps_java(body))

    def get_topic_stats_info(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """TopicStatsTable of ``topic``: per queue ``minOffset``, ``maxOffset``, ``lastUpdateTimestamp``."""
        broker = self.broker
        topic = request.require("topic")
        tc = broker.topics.get(topic)
        if tc is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = broker.store
        table: dict[MessageQueue, Any] = {}
        listing: list[dict[str, Any]] = []
        for queue_id in range(tc.write_queue_nums):
            mq = MessageQueue(topic, broker.config.broker_name, queue_id)
            max_offset = max(0, store.get_max_offset_in_queue(topic, queue_id))
            last = store.get_store_timestamp(topic, queue_id, max_offset - 1) if max_offset > 0 else 0
            values = {
                "minOffset": max(0, store.get_min_offset_in_queue(topic, queue_id)),
                "maxOffset": max_offset,
                "lastUpdateTimestamp": max(0, last),
            }
            table[mq] = values
            listing.append({"messageQueue": mq.to_json(), **values})
        return request.response(ResponseCode.SUCCESS, body=dumps_java({"offsetTable": table, "offsetList": listing}))

    def get_consumer_connection_list(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """ConsumerConnection of a live group; 206 when it has no member here."""
        group = request.require("consumerGroup")
        info = self.broker.consumer_manager.get(group)
        if info is None or not info.channels:
            return request.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        body = {
            "connectionSet": [
                {"clientId": c.client_id, "clientAddr": c.client_addr, "language": c.language, "version": c.version}
                for c in info.channels.values()
            ],
            "subscriptionTable": {t: s.to_json() for t, s in info.subscriptions.items()},
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "consumeFromWhere": info.consume_from_where,
        }
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    # -- broker config ----------------------------------------------------------------------------

    def get_broker_config(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Body: every setting as properties text; ext ``version`` = the config's DataVersion JSON."""
        broker = self.broker
        props = broker.config.to_properties()
        props.setdefault("fileReservedTime", f"{broker.store.config.file_reserved_time_hours:g}")
        for key, value in JAVA_ONLY_BROKER_PROPERTIES.items():
            props.setdefault(key, value)
        body = format_properties(props).encode()
        return request.response(
            ResponseCode.SUCCESS, ext_fields={"version": orjson.dumps(broker.config_version).decode()}, body=body
        )

    async def update_broker_config(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Body: properties text. Unknown keys or bad values → code 1, nothing applied.

        Applied settings are kept across restarts; a change of ``brokerPermission``
        or ``namesrvAddr`` re-registers with the NameServers before answering.
        """
        broker = self.broker
        try:
            values = parse_properties(request.body.decode())
        except UnicodeDecodeError:
            return request.response(ResponseCode.SYSTEM_ERROR, "string2Properties error: body is not UTF-8")
        if not values:
            return request.response(ResponseCode.SYSTEM_ERROR, "string2Properties error: no key=value in the body")
        try:
            await broker.update_config(values)
        except ConfigError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"update broker config failed: {exc}")
        log.info("broker config updated by %s: %s", conn.peer, ", ".join(f"{k}={v}" for k, v in values.items()))
        return request.response(ResponseCode.SUCCESS)

    # -- locks ---------------------------------------------------------------------------------------

    @staticmethod
    def _lock_body(request: RemotingCommand) -> tuple[str, str, list[MessageQueue]]:
        obj = loads_lenient(request.body) if request.body else None
        if not isinstance(obj, dict):
            raise ValueError("body is not a JSON object")
        group = obj.get("consumerGroup")
        client_id = obj.get("clientId")
        if not isinstance(group, str) or not isinstance(client_id, str):
            raise ValueError("consumerGroup and clientId are required")
        items = obj.get("mqSet") or []
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ValueError("mqSet is not a list of MessageQueue objects")
        mqs = [MessageQueue.from_json(item) for item in items]
        return group, client_id, mqs

    def lock_batch_mq(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Lock queues for an orderly consumer; body ``{"lockOKMQSet":[...]}`` = queues now held."""
        try:
            group, client_id, mqs = self._lock_body(request)
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad LockBatchRequestBody: {exc}")
        held = self.broker.lock_manager.try_lock_batch(group, mqs, client_id)
        ordered = [mq.to_json() for mq in mqs if mq in held]
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"lockOKMQSet": ordered}))

    def unlock_batch_mq(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Release queues held by the client."""
        try:
            group, client_id, mqs = self._lock_body(request)
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad UnlockBatchRequestBody: {exc}")
        self.broker.lock_manager.unlock_batch(group, mqs, client_id)
        return request.response(ResponseCode.SUCCESS)
