""":class:`ToolsAdminProcessor`: the broker side of ``mqadmin``'s operational commands.

Apache RocketMQ keeps these in ``ToolsBrokerProcessor`` (4.9.8 and 5.x); the
request/response headers and bodies follow the classes named on each handler
(``remoting/protocol/header`` and ``remoting/protocol/body`` in 5.x,
``common/protocol`` in 4.9.8). Codes:

* 300 QUERY_TOPIC_CONSUME_BY_WHO, 204 GET_PRODUCER_CONNECTION_LIST,
  328 GET_ALL_PRODUCER_INFO, 317 GET_BROKER_CONSUME_STATS, 351 GET_TOPIC_CONFIG,
  305 GET_SYSTEM_TOPIC_LIST_FROM_BROKER, 315 VIEW_BROKER_STATS_DATA (statsAll's rates);
* 321 QUERY_CONSUME_QUEUE;
* 222 INVOKE_BROKER_TO_RESET_OFFSET (the broker tells the group's online
  members with RESET_CONSUMER_CLIENT_OFFSET, 220), 307 GET_CONSUMER_RUNNING_INFO
  and 309 CONSUME_MESSAGE_DIRECTLY (forwarded to one member, its answer relayed);
* 306 CLEAN_EXPIRED_CONSUMEQUEUE, 316 CLEAN_UNUSED_TOPIC, 329 DELETE_EXPIRED_COMMITLOG;
* 18 UPDATE_AND_CREATE_TOPIC_LIST, 225 UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST (5.x batches).

Maps keyed by a MessageQueue are written in fastjson's own form, the
MessageQueue object itself as the key (as fastjson writes ``ConsumeStats``; :func:`dumps_java`): both
fastjson 1 (mqadmin 4.9.x) and fastjson2 (5.x) read that back into
``Map<MessageQueue, ...>``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from rocket.broker.client_manager import ClientChannelInfo
from rocket.broker.metadata.replication import respond_when_replicated, wait_replicated
from rocket.broker.topics import SYSTEM_TOPICS, is_system_topic, validate_topic
from rocket.message import MessageFormatError, decode_offset_msg_id
from rocket.protocol import MessageQueue, SubscriptionGroupConfig, TopicConfig, loads_lenient
from rocket.remoting import (
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    RemotingCommand,
    RemotingConnection,
    RemotingError,
    RemotingTimeoutError,
    RequestCode,
    ResponseCode,
)

if TYPE_CHECKING:
    from rocket.broker.interfaces import ToolsBroker

log = logging.getLogger("rocket.broker.admin")

#: Seconds a broker waits for a client's answer to 307/309 (``Broker2Client.callClient``: 10 s).
CALL_CLIENT_TIMEOUT = 10.0
#: ``MQVersion.Version.V3_1_8_SNAPSHOT.ordinal()``: clients older than this cannot answer 307/309.
V3_1_8_SNAPSHOT = 50
#: ``MQVersion.Version.V3_0_7_SNAPSHOT.ordinal()``: clients older than this cannot reset offsets.
V3_0_7_SNAPSHOT = 26
#: Most entries one QUERY_CONSUME_QUEUE returns (bounds the answer; mqadmin asks for 10 by default).
MAX_QUERY_CQ_ENTRIES = 1000


def dumps_java(value: Any) -> bytes:
    """JSON as fastjson writes it: like orjson, except that a dict key that is a
    :class:`MessageQueue` is written as the object itself (``{{"brokerName":"b","queueId":0,"topic":"t"}:5}``).

    Raises ``TypeError`` for values orjson cannot write.
    """
    if isinstance(value, Mapping):
        parts = []
        for key, item in value.items():
            name = orjson.dumps(key.to_json()) if isinstance(key, MessageQueue) else orjson.dumps(str(key))
            parts.append(name + b":" + dumps_java(item))
        return b"{" + b",".join(parts) + b"}"
    if isinstance(value, (list, tuple)):
        return b"[" + b",".join(dumps_java(v) for v in value) + b"]"
    return orjson.dumps(value)


def _connection_json(info: ClientChannelInfo) -> dict[str, Any]:
    """A ``Connection`` (clientId, clientAddr, language, version)."""
    return {"clientId": info.client_id, "clientAddr": info.client_addr, "language": info.language,
            "version": info.version}


class ToolsAdminProcessor:
    """Handlers for the codes in the module doc; ``broker`` is the :class:`ToolsBroker`."""

    def __init__(self, broker: ToolsBroker) -> None:
        self.broker = broker

    # -- who uses what ----------------------------------------------------------------------

    def groups_of_topic(self, topic: str) -> list[str]:
        """Groups consuming ``topic``: online subscribers plus groups with offsets on it, sorted."""
        broker = self.broker
        groups = set(broker.consumer_manager.groups_of_topic(topic))
        groups |= {g for (g, t) in broker.offset_table() if t == topic}
        return sorted(groups)

    def query_topic_consume_by_who(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """300, header ``topic``: body GroupList ``{"groupList":[...]}``."""
        topic = request.require("topic")
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"groupList": self.groups_of_topic(topic)}))

    def get_producer_connection_list(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """204, header ``producerGroup``: body ProducerConnection ``{"connectionSet":[Connection]}``;
        SYSTEM_ERROR when no producer of the group is connected (as Java)."""
        group = request.require("producerGroup")
        members = self.broker.producer_manager.groups.get(group)
        if not members:
            return request.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        body = {"connectionSet": [_connection_json(c) for c in members.values()]}
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    def get_all_producer_info(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """328: body ProducerTableInfo ``{"data":{group:[ProducerInfo]}}``; ProducerInfo is
        ``clientId``, ``remoteIP``, ``language``, ``version``, ``lastUpdateTimestamp`` (epoch ms)."""
        now_ms, now_mono = time.time() * 1000, time.monotonic()
        data = {
            group: [
                {"clientId": c.client_id, "remoteIP": c.client_addr, "language": c.language, "version": c.version,
                 "lastUpdateTimestamp": int(now_ms - (now_mono - c.last_update) * 1000)}
                for c in members.values()
            ]
            for group, members in sorted(self.broker.producer_manager.groups.items())
        }
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"data": data}))

    def get_topic_config(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """351 (5.x), header ``topic``: body TopicConfigAndQueueMapping (the TopicConfig's fields;
        no static-topic ``mappingDetail``); TOPIC_NOT_EXIST when the broker has no such topic."""
        topic = request.require("topic")
        tc = self.broker.topics.get(topic)
        if tc is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({**tc.to_json(), "attributes": {}}))

    def get_system_topic_list(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """305 GET_SYSTEM_TOPIC_LIST_FROM_BROKER: body TopicList ``{"topicList":[...]}``, RocketMQ's
        system topic names (``TopicValidator``) plus this broker's cluster and broker-group topics."""
        cfg = self.broker.config
        topics = sorted(SYSTEM_TOPICS | {cfg.broker_cluster_name, cfg.broker_name})
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"topicList": topics}))

    # -- batches of topics and groups (5.x: updateTopicList, updateSubGroupList) ---------------------

    def _check_topic(self, tc: TopicConfig) -> str | None:
        cfg = self.broker.config
        problem = validate_topic(tc.topic_name)
        if problem is not None:
            return problem
        if is_system_topic(tc.topic_name, cfg.broker_cluster_name) or tc.topic_name == cfg.broker_name:
            return f"The topic[{tc.topic_name}] is conflict with system topic."
        read, write = tc.read_queue_nums, tc.write_queue_nums
        if read < 0 or write < 0 or max(read, write) == 0 or max(read, write) > 65535:
            return f"illegal queue numbers for topic[{tc.topic_name}]: readQueueNums={read} writeQueueNums={write}"
        if tc.perm & ~(PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT):
            return f"illegal perm {tc.perm} for topic[{tc.topic_name}]"
        return None

    async def update_and_create_topic_list(self, request: RemotingCommand,
                                           conn: RemotingConnection) -> RemotingCommand:
        """18 UPDATE_AND_CREATE_TOPIC_LIST, body CreateTopicListRequestBody ``{"topicConfigList":[TopicConfig]}``:
        all topics or none (SYSTEM_ERROR naming the first bad one), then one registration."""
        broker = self.broker
        if broker.config.is_slave:
            return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, "a slave does not create topics")
        try:
            obj = loads_lenient(request.body)
            configs = [TopicConfig.from_json(item) for item in obj["topicConfigList"]]
        except (ValueError, KeyError, TypeError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad CreateTopicListRequestBody: {exc}")
        for tc in configs:
            problem = self._check_topic(tc)
            if problem is not None:
                return request.response(ResponseCode.SYSTEM_ERROR, problem)
        broker.metadata.topic_configs.put_many(configs)
        log.info("topics %s created/updated by %s", [tc.topic_name for tc in configs], conn.peer)
        not_replicated = await wait_replicated(broker.metadata_replication)
        await broker.register_broker_all()
        if not_replicated is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, "topics created on the master, but not yet held by "
                                    f"its SyncStateSet: {not_replicated}")
        return request.response(ResponseCode.SUCCESS)

    def update_and_create_subscription_group_list(self, request: RemotingCommand, conn: RemotingConnection
                                                  ) -> RemotingCommand | Any:
        """225 UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, body SubscriptionGroupList
        ``{"groupConfigList":[SubscriptionGroupConfig]}``: all groups or none."""
        try:
            obj = loads_lenient(request.body)
            configs = [SubscriptionGroupConfig.from_json(item) for item in obj["groupConfigList"]]
        except (ValueError, KeyError, TypeError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad SubscriptionGroupList: {exc}")
        if any(not c.group_name for c in configs):
            return request.response(ResponseCode.SYSTEM_ERROR, "subscription group config without groupName")
        self.broker.metadata.subscription_groups.put_many(configs)
        log.info("subscription groups %s created/updated by %s", [c.group_name for c in configs], conn.peer)
        return respond_when_replicated(self.broker.metadata_replication, request, conn,
                                       request.response(ResponseCode.SUCCESS))

    def view_broker_stats_data(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """315, header ``statsName``, ``statsKey``: BrokerStatsData of ``TOPIC_PUT_NUMS`` (key: topic)
        or ``GROUP_GET_NUMS`` (key: ``topic@group``), each of ``statsMinute``/``statsHour``/``statsDay``
        a ``{"sum", "tps", "avgpt"}`` (:meth:`~rocket.broker.stats.BrokerStats.stats_data`);
        SYSTEM_ERROR when there is no such figure (as Java)."""
        name = request.require("statsName")
        key = request.require("statsKey")
        data = self.broker.stats.stats_data(name, key)
        if data is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(data))

    # -- consume stats of every group -------------------------------------------------------

    def get_broker_consume_stats(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """317, header ``isOrder``: body ConsumeStatsList.

        ``{"brokerAddr", "totalDiff", "totalInflightDiff", "consumeStatsList":[{group:[ConsumeStats]}]}``
        with one entry per subscription group and one ConsumeStats per topic the group has offsets
        on (and, when it is online, subscribes to); ``isOrder`` keeps only ordered topics.
        """
        broker = self.broker
        store = broker.store
        only_order = request.get_bool("isOrder", False)
        brokername = broker.config.broker_name
        table = broker.offset_table()
        total_diff = 0
        listing: list[dict[str, list[dict[str, Any]]]] = []
        for group in sorted(broker.metadata.subscription_groups.all()):
            info = broker.consumer_manager.get(group)
            stats: list[dict[str, Any]] = []
            for topic in sorted(t for (g, t) in table if g == group):
                tc = broker.topics.get(topic)
                if tc is None or (only_order and not tc.order):
                    continue
                if info is not None and info.subscriptions and topic not in info.subscriptions:
                    continue
                offsets: dict[MessageQueue, dict[str, int]] = {}
                for queue_id in range(tc.write_queue_nums):
                    broker_offset = max(0, store.get_max_offset_in_queue(topic, queue_id))
                    committed = broker.metadata.consumer_offsets.query(group, topic, queue_id)
                    consumer_offset = max(0, committed if committed is not None else 0)
                    last = store.get_store_timestamp(topic, queue_id, consumer_offset - 1) if consumer_offset else 0
                    offsets[MessageQueue(topic, brokername, queue_id)] = {
                        "brokerOffset": broker_offset, "consumerOffset": consumer_offset,
                        "pullOffset": consumer_offset, "lastTimestamp": max(0, last)}
                    total_diff += broker_offset - consumer_offset
                stats.append({"offsetTable": offsets, "consumeTps": broker.stats.consume_tps(group, topic)})
            listing.append({group: stats})
        body = {"brokerAddr": broker.config.broker_addr, "consumeStatsList": listing, "totalDiff": total_diff,
                "totalInflightDiff": 0}
        return request.response(ResponseCode.SUCCESS, body=dumps_java(body))

    # -- ConsumeQueue -------------------------------------------------------------------------

    def query_consume_queue(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """321, header ``topic``, ``queueId``, ``index``, ``count``, optional ``consumerGroup``.

        Body QueryConsumeQueueResponseBody: ``maxQueueIndex``/``minQueueIndex`` and ``queueData``,
        one ConsumeQueueData (``physicOffset``, ``physicSize``, ``tagsCode``) per entry from
        ``index`` (at most ``count``, capped at :data:`MAX_QUERY_CQ_ENTRIES`); with a group, its
        ``subscriptionData`` and ``filterData`` (``"<group>@<topic> is not online!"`` when it is
        not). SYSTEM_ERROR when the queue does not exist.
        """
        broker = self.broker
        topic = request.require("topic")
        queue_id = request.require_int("queueId")
        index = request.require_int("index")
        count = request.require_int("count")
        group = request.get("consumerGroup")
        cq = broker.store.find_consume_queue(topic, queue_id)
        if cq is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"{queue_id}@{topic} is not exist!")
        body: dict[str, Any] = {"maxQueueIndex": cq.max_offset, "minQueueIndex": cq.min_offset}
        if group:
            sub = broker.consumer_manager.find_subscription(group, topic)
            if sub is None:
                body["filterData"] = f"{group}@{topic} is not online!"
            else:
                body["subscriptionData"] = sub.to_json()
        if not cq.min_offset <= index < cq.max_offset:
            return request.response(ResponseCode.SUCCESS, f"Index {index} of {queue_id}@{topic} is not exist!",
                                    body=orjson.dumps(body))
        entries = []
        for offset in range(index, min(cq.max_offset, index + max(0, min(count, MAX_QUERY_CQ_ENTRIES)))):
            entry = cq.entry(offset)
            if entry is None:
                continue
            phys, size, tags_code = entry
            entries.append({"physicOffset": phys, "physicSize": size, "tagsCode": tags_code, "eval": False})
        body["queueData"] = entries
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    # -- reset offsets (222 → 220) ---------------------------------------------------------

    async def invoke_broker_to_reset_offset(self, request: RemotingCommand,
                                            conn: RemotingConnection) -> RemotingCommand:
        """222, header ResetOffsetRequestHeader: ``topic``, ``group``, ``timestamp`` (ms; -1 = the
        queue's max offset), ``isForce``, and in 5.x ``queueId``/``offset`` (one queue, an explicit
        offset).

        As 4.9.8 ``Broker2Client.resetOffset``: for each write queue the target is the offset of
        ``timestamp``; without ``isForce`` an offset only moves back. When the group has members
        here, each gets RESET_CONSUMER_CLIENT_OFFSET (220, oneway) with a ResetOffsetBody (or
        ResetOffsetBodyForC when the tool's request came as CPP), the broker commits the same
        offsets, and the answer is the ResetOffsetBody. Otherwise CONSUMER_NOT_ONLINE (206): mqadmin
        then resets offline, queue by queue, with UPDATE_CONSUMER_OFFSET. SYSTEM_ERROR on a slave,
        for an unknown topic, or a group without offsets on the topic.
        """
        broker = self.broker
        if broker.config.is_slave:
            return request.response(ResponseCode.SYSTEM_ERROR, "Can not reset offset in slave broker")
        topic = request.require("topic")
        group = request.require("group")
        timestamp = request.require_int("timestamp")
        force = request.get_bool("isForce", False)
        only_queue = request.get_int("queueId", -1)
        explicit = request.get("offset")
        tc = broker.topics.get(topic)
        if tc is None:
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}")
        store = broker.store
        queues = [only_queue] if only_queue >= 0 else list(range(tc.write_queue_nums))
        table: dict[MessageQueue, int] = {}
        for queue_id in queues:
            current = broker.metadata.consumer_offsets.query(group, topic, queue_id)
            if current is None or current < 0:
                return request.response(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist")
            if only_queue >= 0 and explicit not in (None, "", "-1", "null"):
                target = int(str(explicit))
                low = max(0, store.get_min_offset_in_queue(topic, queue_id))
                high = max(0, store.get_max_offset_in_queue(topic, queue_id))
                if target < low or target > high:
                    return request.response(
                        ResponseCode.SYSTEM_ERROR,
                        f"Target offset {target} not in consume queue range [{low}-{high}]")
            elif timestamp == -1:
                target = store.get_max_offset_in_queue(topic, queue_id)
            else:
                target = store.get_offset_in_queue_by_time(topic, queue_id, timestamp)
            target = max(0, target)
            mq = MessageQueue(topic, broker.config.broker_name, queue_id)
            table[mq] = target if force or target < current else current
        info = broker.consumer_manager.get(group)
        if info is None or not info.channels:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} Timestamp: {timestamp}")
        too_old = [c for c in info.channels.values() if c.version < V3_0_7_SNAPSHOT]
        if too_old:
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"the client does not support this feature. version={too_old[0].version}")
        for mq, offset in table.items():
            broker.metadata.consumer_offsets.commit(group, topic, mq.queue_id, offset)
        if request.language == "CPP":
            client_body = orjson.dumps({"offsetTable": [
                {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off}
                for mq, off in table.items()]})
        else:
            client_body = dumps_java({"offsetTable": table})
        for channel in list(info.channels.values()):
            cmd = RemotingCommand(code=RequestCode.RESET_CONSUMER_CLIENT_OFFSET, language="JAVA",
                                  ext_fields={"topic": topic, "group": group, "timestamp": str(timestamp),
                                              "isForce": "true" if force else "false"},
                                  body=client_body)
            try:
                channel.connection.oneway(cmd)
            except RemotingError as exc:
                log.warning("[reset-offset] telling %s of group %s failed: %s", channel.client_id, group, exc)
        log.info("[reset-offset] %s reset group %s on %s to %s (force %s) for %d client(s)", conn.peer, group, topic,
                 {mq.queue_id: off for mq, off in table.items()}, force, len(info.channels))
        return request.response(ResponseCode.SUCCESS, body=dumps_java({"offsetTable": table}))

    # -- calls relayed to one consumer (307, 309) ------------------------------------------------

    async def _call_consumer(self, code: int, request: RemotingCommand, group: str, client_id: str,
                             body: bytes) -> RemotingCommand:
        """Forward ``request`` (same ext fields, ``body``) to ``client_id`` of ``group`` and relay its
        answer (``ToolsBrokerProcessor.callConsumer``)."""
        info = self.broker.consumer_manager.get(group)
        channel = None
        if info is not None:
            channel = next((c for c in info.channels.values() if c.client_id == client_id), None)
        if channel is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        if channel.version < V3_1_8_SNAPSHOT:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{client_id}> Version <{channel.version}> too low to finish, please upgrade it to "
                "V3_1_8_SNAPSHOT")
        forward = RemotingCommand(code=code, ext_fields=dict(request.ext_fields), body=body, language="JAVA")
        try:
            answer = await channel.connection.request(forward, timeout=CALL_CLIENT_TIMEOUT)
        except RemotingTimeoutError as exc:
            return request.response(ResponseCode.CONSUME_MSG_TIMEOUT,
                                    f"consumer <{group}> <{client_id}> Timeout: {exc}")
        except RemotingError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"invoke consumer <{group}> <{client_id}> Exception: {exc}")
        return request.response(answer.code, answer.remark, dict(answer.ext_fields), answer.body)

    async def get_consumer_running_info(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """307, header ``consumerGroup``, ``clientId``, ``jstackEnable``: the client's ConsumerRunningInfo."""
        group = request.require("consumerGroup")
        client_id = request.require("clientId")
        return await self._call_consumer(RequestCode.GET_CONSUMER_RUNNING_INFO, request, group, client_id, b"")

    async def consume_message_directly(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """309, header ``consumerGroup``, ``clientId``, ``msgId`` (an offset message id): the stored
        record goes to the client as the body, with ext ``brokerName`` (and ``topicSysFlag`` /
        ``groupSysFlag``); the answer is the client's ConsumeMessageDirectlyResult."""
        broker = self.broker
        group = request.require("consumerGroup")
        client_id = request.require("clientId")
        msg_id = request.require("msgId")
        try:
            _, offset = decode_offset_msg_id(msg_id)
        except MessageFormatError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad msgId: {exc}")
        record = broker.store.read_record(offset)
        if record is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the msgId {msg_id}")
        request.ext_fields["brokerName"] = broker.config.broker_name
        topic = request.get("topic")
        tc = broker.topics.get(topic) if topic else None
        if tc is not None:
            request.ext_fields["topicSysFlag"] = str(tc.topic_sys_flag)
        if broker.metadata.subscription_groups.get(group) is not None:
            request.ext_fields["groupSysFlag"] = "0"
        return await self._call_consumer(RequestCode.CONSUME_MESSAGE_DIRECTLY, request, group, client_id,
                                         bytes(record))

    # -- store housekeeping on demand ------------------------------------------------------------

    async def clean_expired_consume_queue(self, request: RemotingCommand,
                                          conn: RemotingConnection) -> RemotingCommand:
        """306: drop ConsumeQueue files whose entries all point below the CommitLog's first offset."""
        removed = await self.broker.store.clean_expired_consume_queues()
        log.info("clean expired ConsumeQueues (asked by %s): %d file(s) removed", conn.peer, removed)
        return request.response(ResponseCode.SUCCESS)

    def clean_unused_topic(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """316: drop the ConsumeQueues of topics that have no topic config any more (system topics,
        retry and dead-letter topics are kept)."""
        broker = self.broker
        known = set(broker.metadata.topic_configs.all())
        cluster = broker.config.broker_cluster_name
        unused = [t for t in broker.store.topics()
                  if t not in known and not is_system_topic(t, cluster)
                  and not t.startswith(("%RETRY%", "%DLQ%"))]
        broker.store.delete_topics(unused)
        log.info("clean unused topics (asked by %s): %s", conn.peer, unused or "none")
        return request.response(ResponseCode.SUCCESS)

    async def delete_expired_commitlog(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """329: one retention run now, whatever ``deleteWhen`` says (files older than
        ``fileReservedTime`` go; as ``executeDeleteFilesManually``)."""
        removed = await self.broker.store.clean_once(manual=True)
        log.info("delete expired CommitLog files (asked by %s): %d removed", conn.peer, removed)
        return request.response(ResponseCode.SUCCESS)


__all__ = ["ToolsAdminProcessor", "dumps_java"]
