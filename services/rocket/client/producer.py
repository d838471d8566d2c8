"""The producer: route-aware, retrying sends of single messages and batches.

Usage::

    async with Producer("PID_ORDERS", "127.0.0.1:9876;127.0.0.1:9877") as producer:
        result = await producer.send(build_message("Orders", b"hello", tags="TagA", keys="order-1"))
        print(result.status, result.msg_id, result.queue, result.queue_offset)

Concurrency: ``send`` is a coroutine and a producer is safe to share between
tasks, so the asyncio form of Java's ``sendAsync`` is simply to start many
sends at once — ``await asyncio.gather(*(producer.send(m) for m in msgs))``
or ``asyncio.create_task(producer.send(m))``. Every send travels over the one
connection per broker, matched to its answer by ``opaque``.

Behaviour (Java's ``DefaultMQProducerImpl``):

* Routes come from the NameServers on first use of a topic and every 30 s
  after (and at once after a failed send). A topic without a route is sent
  through the ``TBW102`` template route with ``defaultTopic=TBW102`` so the
  broker creates it (``autoCreateTopicEnable``).
* A queue is chosen round-robin over the write queues of writable groups that
  have a master (brokerId 0). A failed attempt is retried (``retries``, 2 by
  default) on another broker group, and a group that failed is avoided for
  ``fault_avoid_seconds`` by later sends too.
* Bodies over ``compress_over`` bytes (4 KiB) are zlib-compressed (sysFlag bit 0);
  batches are not compressed (as Java).
* Every message gets a UNIQ_KEY (the ``msg_id`` users see) and ``WAIT=true``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rocket.auth.signature import SessionCredentials
from rocket.client.base import DEFAULT_TIMEOUT, ClientLifecycle, MQClient, heartbeat_data
from rocket.client.errors import MQClientError, NotStartedError, SendFailedError, TopicRouteError
from rocket.client.route import FaultTracker, PublishInfo
from rocket.message import (
    COMPRESS_OVER,
    MAX_MESSAGE_SIZE,
    MAX_TOPIC_LENGTH,
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    Message,
    compress_body,
    encode_batch,
    encode_properties,
    java_string_hash,
    new_uniq_id,
)
from rocket.protocol import AUTO_CREATE_TOPIC_KEY_TOPIC, RETRY_GROUP_TOPIC_PREFIX, MessageQueue, TopicRouteData
from rocket.remoting import (
    RemotingCommand,
    RemotingCommandError,
    RemotingConnectError,
    RemotingTimeoutError,
    RequestCode,
    ResponseCode,
)
from rocket.remoting.tls import ClientTls

log = logging.getLogger("rocket.client.producer")

#: Response codes after which a sync send is retried on another broker (``DefaultMQProducerImpl``).
RETRY_CODES = frozenset({1, 2, 14, 16, 17, 204, 205})
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
#: Producer group of the producer a push consumer uses internally (Java's name).
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"


class SendStatus(enum.StrEnum):
    """Outcome of a stored send. Anything but SEND_OK still means the message is stored
    but a durability promise (flush or replication) was not confirmed in time."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_STATUS_BY_CODE = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True, slots=True)
class SendResult:
    """What a send returns.

    ``msg_id``: the client id(s) (UNIQ_KEY; comma-joined for a batch).
    ``offset_msg_id``: the broker id(s) (store host + CommitLog offset, ``MessageDecoder.createMessageId``).
    ``queue``: where it went; ``queue_offset``: its logical offset there (the
    first one for a batch).
    """

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int

    @property
    def ok(self) -> bool:
        """True for SEND_OK."""
        return self.status is SendStatus.SEND_OK

    @property
    def msg_ids(self) -> list[str]:
        """``msg_id`` split into one id per message."""
        return [m for m in self.msg_id.split(",") if m]


def build_message(
    topic: str,
    body: bytes | str,
    *,
    tags: str | None = None,
    keys: str | Sequence[str] | None = None,
    properties: Mapping[str, str] | None = None,
    flag: int = 0,
    delay_level: int = 0,
    deliver_time_ms: int | None = None,
    delay_ms: int | None = None,
) -> Message:
    """A :class:`~rocket.message.Message` with the usual fields set.

    ``body`` text is UTF-8 encoded; ``keys`` is one key or several (stored
    space-separated, each indexed by the broker); ``delay_level`` 1..18 delays
    delivery (1 s … 2 h). Timer messages (RocketMQ 5): ``deliver_time_ms``
    delivers at that absolute time (ms since the epoch, property
    ``TIMER_DELIVER_MS``, as Java's ``Message.setDeliverTimeMs``); ``delay_ms``
    that many ms after the broker receives it (``TIMER_DELAY_MS``, as
    ``setDelayTimeMs``). The broker refuses (MESSAGE_ILLEGAL, 13) a time beyond
    its ``timerMaxDelaySec`` (3 days by default) and delivers a past time at once.
    Raises ``ValueError`` when both are given or ``delay_ms`` is negative.
    """
    msg = Message(topic=topic, body=body.encode() if isinstance(body, str) else bytes(body), flag=flag,
                  properties=dict(properties or {}))
    if tags:
        msg.properties[PROPERTY_TAGS] = tags
    if keys:
        msg.properties[PROPERTY_KEYS] = keys if isinstance(keys, str) else " ".join(keys)
    if delay_level:
        msg.properties[PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
    if deliver_time_ms is not None and delay_ms is not None:
        raise ValueError("give deliver_time_ms or delay_ms, not both")
    if deliver_time_ms is not None:
        msg.properties["TIMER_DELIVER_MS"] = str(int(deliver_time_ms))
    if delay_ms is not None:
        if delay_ms < 0:
            raise ValueError(f"delay_ms {delay_ms} is negative")
        msg.properties["TIMER_DELAY_MS"] = str(int(delay_ms))
    return msg


def build_timer_delete(topic: str, msg_id: str, deliver_time_ms: int) -> Message:
    """A message that cancels the pending timer message ``msg_id`` (its UNIQ_KEY) of ``topic``
    due at ``deliver_time_ms``: RocketMQ 5's delete mark, property ``TIMER_DEL_UNIQKEY`` =
    ``topic + "+" + msgId`` with the same ``TIMER_DELIVER_MS``, so it lands in the same slot
    of the broker's timer wheel. Send it to ``topic`` (the broker holding the timer)."""
    return Message(topic=topic, body=b"0", properties={"TIMER_DEL_UNIQKEY": f"{topic}+{msg_id}",
                                                       "TIMER_DELIVER_MS": str(int(deliver_time_ms))})


def validate_topic(topic: str) -> None:
    """Raise ``ValueError`` unless ``topic`` is 1..127 chars of ``[%|a-zA-Z0-9_-]`` and not TBW102."""
    if not topic or len(topic.encode()) > MAX_TOPIC_LENGTH:
        raise ValueError(f"topic {topic!r}: length must be 1..{MAX_TOPIC_LENGTH}")
    if not _TOPIC_RE.match(topic):
        raise ValueError(f"topic {topic!r}: only letters, digits and %|_- are allowed")
    if topic == AUTO_CREATE_TOPIC_KEY_TOPIC:
        raise ValueError(f"topic {topic!r} is the auto-create template and cannot take messages")


_VALID_TOPICS: set[str] = set()
#: ``str(i)`` for small ints (queue ids, flags): header fields without a conversion each.
_SMALL_INTS = tuple(str(i) for i in range(256))


def _int_text(value: int) -> str:
    """``str(value)``, from a table for 0..255."""
    return _SMALL_INTS[value] if 0 <= value < 256 else str(value)


#: What :meth:`Producer._prepare` appends to a message's properties: UNIQ_KEY, then WAIT=true.
_UNIQ_WAIT_PREFIX = PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX + NAME_VALUE_SEPARATOR
_WAIT_TRUE = PROPERTY_SEPARATOR + PROPERTY_WAIT_STORE_MSG_OK + NAME_VALUE_SEPARATOR + "true"


def _validate_message(msg: Message) -> None:
    if msg.topic not in _VALID_TOPICS:
        validate_topic(msg.topic)
        if len(_VALID_TOPICS) < 10_000:
            _VALID_TOPICS.add(msg.topic)
    if not msg.body:
        raise ValueError("message body is empty")
    if len(msg.body) > MAX_MESSAGE_SIZE:
        raise ValueError(f"message body of {len(msg.body)} bytes exceeds {MAX_MESSAGE_SIZE}")


class Producer(ClientLifecycle):
    """Sends messages to the masters of a topic's broker groups.

    ``group``: producer group name. ``namesrv_addr``: ``"host:port;host:port"``.
    ``retries``: extra attempts of a failed send, each on another broker group
    when there is one (default 2). ``send_timeout``: seconds per attempt.
    ``compress_over``: compress larger bodies (bytes). ``fault_avoid_seconds``:
    how long a broker group that failed a send is skipped.
    ``poll_namesrv_interval`` / ``heartbeat_interval``: seconds (30 / 30).

    Use as ``async with Producer(...) as p:`` or call :meth:`start` and
    :meth:`shutdown`.
    """

    def __init__(
        self,
        group: str = "DEFAULT_PRODUCER",
        namesrv_addr: str = "127.0.0.1:9876",
        *,
        retries: int = 2,
        send_timeout: float = DEFAULT_TIMEOUT,
        compress_over: int = COMPRESS_OVER,
        default_topic_queue_nums: int = 4,
        fault_avoid_seconds: float = 30.0,
        poll_namesrv_interval: float = 30.0,
        heartbeat_interval: float = 30.0,
        instance_name: str | None = None,
        client: MQClient | None = None,
        credentials: SessionCredentials | None = None,
        tls: ClientTls | bool | None = None,
    ) -> None:
        self.group = group
        self.retries = max(0, retries)
        self.send_timeout = send_timeout
        self.compress_over = compress_over
        self.default_topic_queue_nums = default_topic_queue_nums
        self.fault_avoid_seconds = fault_avoid_seconds
        self._own_client = client is None
        self.client = client or MQClient(
            namesrv_addr,
            instance_name=instance_name,
            timeout=send_timeout,
            poll_namesrv_interval=poll_namesrv_interval,
            heartbeat_interval=heartbeat_interval,
            credentials=credentials,
            tls=tls,
        )
        self.faults = FaultTracker()
        self._publish: dict[str, PublishInfo] = {}
        self._route_fetch: dict[str, asyncio.Future[PublishInfo]] = {}
        self._started = False
        self._refresh_tasks: set[asyncio.Task[Any]] = set()

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> Producer:
        """Start background route refresh and heartbeats. Returns ``self``."""
        if self._started:
            return self
        if self._own_client:
            self.client.heartbeat_body = self._heartbeat_body
            self.client.start()
            self.client.spawn(self.client.poll_namesrv_interval, self._refresh_template_routes)
        self.client.route_listeners.append(self._on_route)
        self._started = True
        return self

    async def shutdown(self) -> None:
        """UNREGISTER_CLIENT with every broker, then close connections."""
        if not self._started:
            return
        self._started = False
        for task in list(self._refresh_tasks):
            task.cancel()
        if self._own_client:
            await self.client.unregister(producer_group=self.group)
            await self.client.close()

    def _heartbeat_body(self) -> dict[str, Any]:
        return heartbeat_data(self.client.client_id, [self.group, CLIENT_INNER_PRODUCER_GROUP])

    # -- routes ------------------------------------------------------------------------

    def _on_route(self, topic: str, route: TopicRouteData) -> None:
        if topic in self._publish:
            self._publish[topic] = PublishInfo.build(topic, route)

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The write queues a send to ``topic`` may choose from (publish view).

        Raises :class:`TopicRouteError` when the topic and the template are unknown.
        """
        return list((await self._publish_info(topic)).queues)

    async def _publish_info(self, topic: str) -> PublishInfo:
        info = self._publish.get(topic)
        if info is not None and not (info.from_template and time.monotonic() - info.fetched_at > 1.0):
            return info
        pending = self._route_fetch.get(topic)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._route_fetch[topic] = pending
            try:
                fetched = await self._load_publish_info(topic, info)
                pending.set_result(fetched)
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # retrieved: waiters re-raise it themselves
                raise
            finally:
                del self._route_fetch[topic]
        return await asyncio.shield(pending)

    async def _load_publish_info(self, topic: str, current: PublishInfo | None) -> PublishInfo:
        try:
            route = await self.client.fetch_route(topic)
            info = PublishInfo.build(topic, route)
            if not info.queues and current is not None and current.from_template:
                info = current  # the broker has not registered the new topic yet
                info.fetched_at = time.monotonic()
        except TopicRouteError:
            if current is not None and current.from_template:
                current.fetched_at = time.monotonic()
                return current
            try:
                template = await self.client.fetch_route(AUTO_CREATE_TOPIC_KEY_TOPIC, cache=False)
            except TopicRouteError:
                raise TopicRouteError(topic, "not found on the NameServers, and no TBW102 template "
                                      "(is autoCreateTopicEnable off?)") from None
            for bd in template.broker_datas:
                self.client.brokers.setdefault(bd.broker_name, bd)
            info = PublishInfo.build(topic, template, from_template=True,
                                     default_queue_nums=self.default_topic_queue_nums)
        self._publish[topic] = info
        return info

    async def _refresh_template_routes(self) -> None:
        """Look up again the topics still sent through the TBW102 template (with the route poll,
        as Java polls every topic it publishes to): once the broker registered the new topic its
        own route is used, and heartbeats follow its brokers (a new master after a failover)."""
        for topic, info in list(self._publish.items()):
            if info.from_template:
                with contextlib.suppress(Exception):
                    await self._load_publish_info(topic, info)

    def _refresh_later(self, topic: str) -> None:
        async def refresh() -> None:
            with contextlib.suppress(Exception):
                await self._load_publish_info(topic, self._publish.get(topic))

        task = asyncio.create_task(refresh())
        self._refresh_tasks.add(task)
        task.add_done_callback(self._refresh_tasks.discard)

    # -- sending -----------------------------------------------------------------------

    def _check_started(self) -> None:
        if not self._started:
            raise NotStartedError("producer is not started (use 'async with' or await start())")

    def _prepare(self, msg: Message, compress: bool = True) -> tuple[bytes, int, str, str]:
        """(body, sysFlag, properties string, uniq id) of a single message.

        The message's properties plus UNIQ_KEY (a new id unless it has one) and
        ``WAIT=true`` (unless set), in that order; ``msg`` itself is not changed.
        """
        props = msg.properties
        uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        body = msg.body
        if compress and len(body) > self.compress_over:
            body, sys_flag = compress_body(body, 0, self.compress_over)
        else:
            sys_flag = 0
        if not uniq:
            uniq = new_uniq_id()
            if PROPERTY_WAIT_STORE_MSG_OK not in props and PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in props:
                # the usual case: append both to the encoded properties, no dict copy
                head = encode_properties(props) if props else ""
                tail = _UNIQ_WAIT_PREFIX + uniq + _WAIT_TRUE
                return body, sys_flag, (head + PROPERTY_SEPARATOR + tail) if head else tail, uniq
            props = dict(props)
            props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
        elif PROPERTY_WAIT_STORE_MSG_OK not in props:
            props = dict(props)
        props.setdefault(PROPERTY_WAIT_STORE_MSG_OK, "true")
        return body, sys_flag, encode_properties(props), uniq

    def _header(self, topic: str, queue_id: int, sys_flag: int, flag: int, properties: str, *,
                batch: bool = False, reconsume_times: int = 0, max_reconsume_times: int | None = None
                ) -> dict[str, str]:
        """The SEND_MESSAGE_V2 ext fields (short names ``a``..``m``, all strings)."""
        fields = {
            "a": self.group,
            "b": topic,
            "c": AUTO_CREATE_TOPIC_KEY_TOPIC,
            "d": _int_text(self.default_topic_queue_nums),
            "e": _int_text(queue_id),
            "f": _int_text(sys_flag),
            "g": str(int(time.time() * 1000)),
            "h": _int_text(flag),
            "i": properties,
            "j": _int_text(reconsume_times),
            "k": "false",
            "m": "true" if batch else "false",
        }
        if max_reconsume_times is not None:
            fields["l"] = str(max_reconsume_times)
        return fields

    async def send(self, msg: Message, *, queue: MessageQueue | None = None,
                   timeout: float | None = None) -> SendResult:
        """Send one message and wait for the broker's answer.

        ``queue`` pins the target queue (no retry elsewhere). ``timeout``:
        seconds per attempt (default ``send_timeout``).

        Returns a :class:`SendResult` (status SEND_OK, or a flush/slave status
        when the message was stored without its durability promise met).
        Raises ``ValueError`` for an invalid message, :class:`TopicRouteError`
        when the topic cannot be routed, :class:`SendFailedError` when every
        attempt failed, and :class:`RemotingCommandError` at once for answers
        that retrying cannot fix (e.g. 13 MESSAGE_ILLEGAL).
        """
        self._check_started()
        _validate_message(msg)
        body, sys_flag, props, uniq = self._prepare(msg)
        return await self._send_with_retries(
            msg.topic, body, lambda mq: self._header(msg.topic, mq.queue_id, sys_flag, msg.flag, props),
            RequestCode.SEND_MESSAGE_V2, uniq, queue=queue, timeout=timeout,
        )

    async def send_batch(self, msgs: Sequence[Message], *, queue: MessageQueue | None = None,
                         timeout: float | None = None) -> SendResult:
        """Send messages of one topic as one SEND_BATCH_MESSAGE (320) to one queue.

        They get consecutive queue offsets from ``result.queue_offset``;
        ``result.msg_ids`` lists their ids in order. Bodies are not compressed.
        Raises ``ValueError`` for an empty batch, mixed topics, delayed or
        retry-topic messages, or a batch body over 4 MiB; else as :meth:`send`.
        """
        self._check_started()
        if not msgs:
            raise ValueError("empty batch")
        topic = msgs[0].topic
        items: list[Message] = []
        uniqs: list[str] = []
        for msg in msgs:
            _validate_message(msg)
            if msg.topic != topic:
                raise ValueError(f"a batch goes to one topic: {msg.topic!r} != {topic!r}")
            if msg.delay_level > 0:
                raise ValueError("delayed messages cannot be batched")
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                raise ValueError("retry-topic messages cannot be batched")
            props = dict(msg.properties)
            uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or new_uniq_id()
            props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
            props.pop(PROPERTY_WAIT_STORE_MSG_OK, None)  # the batch header carries WAIT for all
            uniqs.append(uniq)
            items.append(Message(topic=topic, body=msg.body, flag=msg.flag, properties=props))
        body = encode_batch(items)
        if len(body) > MAX_MESSAGE_SIZE:
            raise ValueError(f"batch body of {len(body)} bytes exceeds {MAX_MESSAGE_SIZE}; split it")
        header_props = encode_properties({PROPERTY_WAIT_STORE_MSG_OK: "true"})
        return await self._send_with_retries(
            topic, body, lambda mq: self._header(topic, mq.queue_id, 0, 0, header_props, batch=True),
            RequestCode.SEND_BATCH_MESSAGE, ",".join(uniqs), queue=queue, timeout=timeout,
        )

    async def send_orderly(self, msg: Message, sharding_key: str, *, timeout: float | None = None) -> SendResult:
        """Send to the queue chosen by hashing ``sharding_key``.

        Messages with the same key go to the same queue, so they are stored — and
        consumed by an orderly consumer — in send order, as long as the topic's
        queues do not change. The queue is ``abs(javaHash(key)) % len(queues)``
        over the write queues (or ``orderTopicConf`` queues when the NameServer
        has one), as Java's ``SelectMessageQueueByHash``. Retries stay on that queue.
        """
        self._check_started()
        _validate_message(msg)
        info = await self._publish_info(msg.topic)
        queues = info.route.order_queues(msg.topic) or info.queues
        if not queues:
            raise MQClientError(f"topic {msg.topic!r} has no writable queue")
        mq = queues[abs(java_string_hash(sharding_key)) % len(queues)]
        return await self.send(msg, queue=mq, timeout=timeout)

    async def send_oneway(self, msg: Message) -> None:
        """Send without waiting for (or getting) an answer: fastest, no delivery guarantee.

        Raises ``ValueError``/:class:`TopicRouteError` like :meth:`send`, and
        ``RemotingConnectError`` when the broker cannot be reached.
        """
        self._check_started()
        _validate_message(msg)
        body, sys_flag, props, _ = self._prepare(msg)
        info = await self._publish_info(msg.topic)
        try:
            mq = info.select(self.faults)
        except LookupError as exc:
            raise MQClientError(str(exc)) from None
        addr = self._addr(info, mq)
        await self.client.invoke_oneway(addr, RequestCode.SEND_MESSAGE_V2,
                                        self._header(msg.topic, mq.queue_id, sys_flag, msg.flag, props), body)

    def _addr(self, info: PublishInfo, mq: MessageQueue) -> str:
        bd = info.route.broker(mq.broker_name)
        addr = bd.master_addr if bd is not None else self.client.master_addr(mq.broker_name)
        if not addr:
            raise RemotingConnectError(f"broker group {mq.broker_name} has no master")
        return addr

    async def _send_with_retries(
        self,
        topic: str,
        body: bytes,
        header: Any,
        code: int,
        msg_id: str,
        *,
        queue: MessageQueue | None,
        timeout: float | None,
    ) -> SendResult:
        info = self._publish.get(topic)  # (the checks of _publish_info, without a coroutine)
        if info is None or (info.from_template and time.monotonic() - info.fetched_at > 1.0):
            info = await self._publish_info(topic)
        attempts: list[tuple[str, BaseException]] = []
        last_broker: str | None = None
        for _ in range(1 + self.retries):
            if queue is not None:
                mq = queue
            else:
                try:
                    mq = info.select(self.faults, avoid=last_broker)
                except LookupError as exc:
                    raise MQClientError(str(exc)) from None
            try:
                addr = self._addr(info, mq)
                request = RemotingCommand(code=int(code), ext_fields=header(mq), body=body)
                response = await self.client.remoting.invoke(addr, request, timeout or self.send_timeout)
            except (RemotingConnectError, RemotingTimeoutError) as exc:
                attempts.append((mq.broker_name, exc))
                self.faults.mark(mq.broker_name, self.fault_avoid_seconds)
                last_broker = mq.broker_name
                self._refresh_later(topic)
                info = self._publish.get(topic, info)
                continue
            status = _STATUS_BY_CODE.get(response.code)  # type: ignore[call-overload]
            if status is None:
                error = RemotingCommandError(response.code, response.remark, f"send to {mq}")
                if response.code not in RETRY_CODES:
                    raise error
                attempts.append((mq.broker_name, error))
                self.faults.mark(mq.broker_name, min(self.fault_avoid_seconds, 5.0)
                                 if response.code == ResponseCode.SYSTEM_BUSY else self.fault_avoid_seconds)
                last_broker = mq.broker_name
                if response.code in (ResponseCode.TOPIC_NOT_EXIST, ResponseCode.NO_PERMISSION):
                    self._refresh_later(topic)
                continue
            self.faults.clear(mq.broker_name)
            fields = response.ext_fields
            queue_id = int(fields.get("queueId", mq.queue_id))
            return SendResult(
                status=status,
                msg_id=msg_id,
                offset_msg_id=fields.get("msgId", ""),
                queue=mq if queue_id == mq.queue_id and mq.topic == topic
                else MessageQueue(topic, mq.broker_name, queue_id),
                queue_offset=int(fields.get("queueOffset", -1)),
            )
        raise SendFailedError(topic, attempts) from attempts[-1][1]

    async def send_to_retry(self, msg: Message, group: str, *, reconsume_times: int,
                            max_reconsume_times: int, delay_level: int) -> SendResult:
        """Re-send a message a consumer could not send back to ``%RETRY%<group>``
        (the client-side fallback of CONSUMER_SEND_MSG_BACK, as ``DefaultMQPushConsumerImpl.sendMessageBack``)."""
        self._check_started()
        topic = RETRY_GROUP_TOPIC_PREFIX + group
        props = dict(msg.properties)
        props[PROPERTY_DELAY_TIME_LEVEL] = str(max(delay_level, 0))
        body, sys_flag, props_text, uniq = self._prepare(Message(topic, msg.body, msg.flag, props))
        return await self._send_with_retries(
            topic, body,
            lambda mq: self._header(topic, mq.queue_id, sys_flag, msg.flag, props_text,
                                    reconsume_times=reconsume_times, max_reconsume_times=max_reconsume_times),
            RequestCode.SEND_MESSAGE_V2, uniq, queue=None, timeout=None,
        )
