"""Consumers: the explicit :class:`PullConsumer` and the managed :class:`PushConsumer`.

PullConsumer — you choose queues and offsets::

    async with PullConsumer("CID_AUDIT", "127.0.0.1:9876") as consumer:
        for mq in await consumer.queues("Orders"):
            lo, hi = await consumer.min_offset(mq), await consumer.max_offset(mq)
            result = await consumer.pull(mq, offset=lo, max_nums=32)
            for msg in result.messages: ...
            await consumer.commit(mq, result.next_begin_offset)

and, if you like, which broker of the group serves a pull (the Spark source reads
from slaves this way)::

    slaves = [b for b in consumer.broker_ids(mq.broker_name) if b != MASTER_ID]
    consumer.pull_from(mq, slaves[0] if slaves else MASTER_ID)
    addr, broker_id = consumer.pull_address(mq)   # where it will go
    ... on a connection failure: consumer.mark_broker_down(addr, 10.0); await consumer.refresh_route(mq.topic)

PushConsumer — the group shares the queues, offsets are tracked for you::

    async def handle(msgs: list[MessageExt]) -> ConsumeStatus:
        for msg in msgs: print(msg.topic, msg.tags, msg.body)
        return ConsumeStatus.SUCCESS          # or RECONSUME_LATER, or raise

    consumer = PushConsumer("CID_ORDERS", "127.0.0.1:9876", handle)
    consumer.subscribe("Orders", "TagA || TagB")
    await consumer.start()  ...  await consumer.shutdown()

or, without a handler, iterate (a message counts as consumed once the loop
asks for the next one, or leaves)::

    async with PushConsumer("CID_ORDERS", "127.0.0.1:9876") as consumer:
        consumer.subscribe("Orders")
        async for msg in consumer.messages(): ...

Behaviour (Java's ``DefaultMQPushConsumerImpl``, ``RebalancePushImpl``): long polling (the broker
holds a pull up to 15 s; request timeout 30 s; pull sysFlag SUSPEND |
SUBSCRIPTION | COMMIT_OFFSET), rebalance every 20 s and on
NOTIFY_CONSUMER_IDS_CHANGED (40), offsets persisted every 5 s and on shutdown,
failed messages sent back with CONSUMER_SEND_MSG_BACK (36) and redelivered
through ``%RETRY%<group>`` (subscribed automatically in CLUSTERING mode), pulls
from a slave when the broker suggests it or the master is gone,
PULL_OFFSET_MOVED (21) handled by jumping to ``nextBeginOffset``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from rocket.auth.signature import SessionCredentials
from rocket.client.base import DEFAULT_TIMEOUT, ClientLifecycle, MQClient, check_response, ext, heartbeat_data
from rocket.client.errors import NotStartedError, TopicRouteError
from rocket.client.offsets import LocalOffsetStore, OffsetStore, RemoteOffsetStore
from rocket.client.producer import CLIENT_INNER_PRODUCER_GROUP, Producer
from rocket.client.subscription import (
    ConsumeFrom,
    MessageModel,
    SubscriptionData,
    allocate_averagely,
)
from rocket.message import (
    MAX_MESSAGE_SIZE,
    PROPERTY_MAX_OFFSET,
    PROPERTY_MIN_OFFSET,
    PROPERTY_RETRY_TOPIC,
    SYSFLAG_COMPRESSED,
    SYSFLAG_COMPRESSION_TYPE_MASK,
    Message,
    MessageExt,
    MessageFormatError,
    decode_records,
    decompress_body,
)
from rocket.protocol import MASTER_ID, RETRY_GROUP_TOPIC_PREFIX, MessageQueue, retry_topic
from rocket.remoting import (
    RemotingCommand,
    RemotingCommandError,
    RemotingConnectError,
    RemotingConnection,
    RemotingTimeoutError,
    RequestCode,
    ResponseCode,
)
from rocket.remoting.tls import ClientTls

log = logging.getLogger("rocket.client.consumer")

# Pull request sysFlag bits (``PullSysFlag``).
PULL_COMMIT_OFFSET = 1
PULL_SUSPEND = 2
PULL_SUBSCRIPTION = 4


class PullStatus(enum.StrEnum):
    """FOUND: messages in ``messages``. NO_NEW_MSG: caught up (or the long poll
    expired). NO_MATCHED_MSG: entries scanned, none matched the filter.
    OFFSET_ILLEGAL: the offset is outside the queue; continue from
    ``next_begin_offset``."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(slots=True)
class PullResult:
    """One pull's outcome. Offsets are queue offsets; ``max_offset`` is exclusive.

    ``messages`` are decoded, decompressed and tag-filtered (empty unless FOUND).
    ``suggest_which_broker_id``: where the broker asks the next pull to go
    (0 master, > 0 a slave). ``undecodable``: ``(message, reason)`` for the messages of this
    pull whose body cannot be decompressed (corrupt, or inflating beyond the consumer's
    ``max_body_size``); their ``body`` is left as stored, COMPRESSED bit set, and they are
    not in ``messages``. ``next_begin_offset`` is past them too.
    """

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = MASTER_ID
    undecodable: list[tuple[MessageExt, str]] = field(default_factory=list)


class ConsumeStatus(enum.StrEnum):
    """What a push handler returns: SUCCESS, or RECONSUME_LATER to have the
    messages redelivered later through the retry topic."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


#: A push handler: takes the messages (1..consume_batch_size of one queue) and
#: returns a ConsumeStatus (None counts as SUCCESS) or raises (= RECONSUME_LATER).
#: Plain functions are accepted too; they run on the event loop, so keep them short.
MessageHandler = Callable[[list[MessageExt]], Awaitable[ConsumeStatus | None] | ConsumeStatus | None]


def _timestamp_ms(value: int | float | datetime | None) -> int:
    if value is None:
        return int(time.time() * 1000) - 30 * 60 * 1000  # Java's default: half an hour ago
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return int(value)


def decode_pull_body(body: bytes, sub: SubscriptionData | None = None, *,
                     min_offset: int | None = None, max_offset: int | None = None,
                     max_body_size: int = MAX_MESSAGE_SIZE,
                     undecodable: list[tuple[MessageExt, str]] | None = None) -> list[MessageExt]:
    """Decode a pull body: stored records back to back (``MessageDecoder.decodes``).

    Bodies are decompressed (and the COMPRESSED bit cleared), each to at most
    ``max_body_size`` bytes (``decompress_body``); messages whose
    tags ``sub`` does not select are dropped; MIN_OFFSET/MAX_OFFSET
    properties are added when given. Raises ``MessageFormatError`` for a corrupt record, and
    for a body that cannot be decompressed unless ``undecodable`` is given: then such messages
    are appended there as ``(message, reason)``, as stored, and left out of the result.
    """
    messages: list[MessageExt] = []
    for msg in decode_records(body):
        if sub is not None and not sub.matches(msg.tags):
            continue
        if msg.sys_flag & SYSFLAG_COMPRESSED:
            try:
                inflated = decompress_body(msg.body, msg.sys_flag, max_body_size)
            except MessageFormatError as exc:
                reason = f"message {msg.msg_id} of {msg.topic} queue {msg.queue_id} at offset {msg.queue_offset}: {exc}"
                if undecodable is None:
                    raise MessageFormatError(reason) from exc
                undecodable.append((msg, reason))
                continue
            msg.body = inflated
            msg.sys_flag &= ~(SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_TYPE_MASK)
        if min_offset is not None:
            msg.properties[PROPERTY_MIN_OFFSET] = str(min_offset)
        if max_offset is not None:
            msg.properties[PROPERTY_MAX_OFFSET] = str(max_offset)
        messages.append(msg)
    return messages


class _Puller:
    """The pull kernel shared by both consumers: address choice and PULL_MESSAGE (11)."""

    def __init__(self, client: MQClient, group: str, max_body_size: int = MAX_MESSAGE_SIZE) -> None:
        self.client = client
        self.group = group
        #: Largest body a compressed one may inflate to (bytes).
        self.max_body_size = max_body_size
        #: Per queue: the brokerId the last response suggested.
        self.suggested: dict[MessageQueue, int] = {}
        #: Broker address → monotonic time until which it is considered down.
        self.down_until: dict[str, float] = {}

    def address(self, mq: MessageQueue) -> tuple[str, int]:
        """Where to pull ``mq`` from: the suggested broker, else the master, else a
        slave — skipping addresses that failed in the last few seconds.
        Raises ``RemotingConnectError`` when the group has no address at all."""
        bd = self.client.brokers.get(mq.broker_name)
        if bd is None or not bd.broker_addrs:
            raise RemotingConnectError(f"no address known for broker group {mq.broker_name}")
        now = time.monotonic()
        wanted = self.suggested.get(mq, MASTER_ID)
        order = [wanted] + ([MASTER_ID] if wanted != MASTER_ID else []) + sorted(bd.broker_addrs)
        for bid in order:
            addr = bd.broker_addrs.get(bid)
            if addr and self.down_until.get(addr, 0.0) <= now:
                return addr, bid
        for bid in order:
            addr = bd.broker_addrs.get(bid)
            if addr:
                return addr, bid
        raise RemotingConnectError(f"no address known for broker group {mq.broker_name}")

    def mark_down(self, addr: str, seconds: float = 5.0) -> None:
        """Avoid ``addr`` for ``seconds`` after it failed."""
        self.down_until[addr] = time.monotonic() + seconds

    async def pull(
        self,
        mq: MessageQueue,
        sub: SubscriptionData,
        offset: int,
        max_nums: int,
        *,
        commit_offset: int = 0,
        suspend_ms: int = 0,
        timeout: float,
        sys_flag_extra: int = 0,
    ) -> PullResult:
        addr, broker_id = self.address(mq)
        sys_flag = PULL_SUBSCRIPTION | sys_flag_extra
        if suspend_ms > 0:
            sys_flag |= PULL_SUSPEND
        if commit_offset > 0 and broker_id == MASTER_ID:
            sys_flag |= PULL_COMMIT_OFFSET
        fields = ext(
            consumerGroup=self.group,
            topic=mq.topic,
            queueId=mq.queue_id,
            queueOffset=offset,
            maxMsgNums=max_nums,
            sysFlag=sys_flag,
            commitOffset=commit_offset if sys_flag & PULL_COMMIT_OFFSET else 0,
            suspendTimeoutMillis=suspend_ms,
            subscription=sub.expression,
            subVersion=sub.sub_version,
            expressionType="TAG",
        )
        try:
            response = await self.client.invoke(addr, RequestCode.PULL_MESSAGE, fields, timeout=timeout)
        except RemotingConnectError:
            self.mark_down(addr)
            raise
        status = _PULL_STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise RemotingCommandError(response.code, response.remark, f"pull {mq} at {offset}")
        f = response.ext_fields
        suggest = int(f.get("suggestWhichBrokerId", "0") or 0)
        self.suggested[mq] = suggest
        min_offset = int(f.get("minOffset", "0") or 0)
        max_offset = int(f.get("maxOffset", "0") or 0)
        next_begin = int(f.get("nextBeginOffset", str(offset)) or offset)
        messages: list[MessageExt] = []
        undecodable: list[tuple[MessageExt, str]] = []
        if status is PullStatus.FOUND:
            messages = decode_pull_body(response.body, sub, min_offset=min_offset, max_offset=max_offset,
                                        max_body_size=self.max_body_size, undecodable=undecodable)
        return PullResult(status, next_begin, min_offset, max_offset, messages, suggest, undecodable)


def _consumer_client(namesrv_addr: str, heartbeat_body: Callable[[], dict[str, Any] | None], *,
                     instance_name: str | None, timeout: float, poll_namesrv_interval: float,
                     heartbeat_interval: float, credentials: SessionCredentials | None,
                     tls: ClientTls | bool | None) -> MQClient:
    """A consumer's :class:`MQClient`: it heartbeats ``heartbeat_body()`` to slaves as well as masters,
    since a consumer may be told to pull from a slave (``MQClientInstance.sendHeartbeatToAllBroker``)."""
    client = MQClient(namesrv_addr, instance_name=instance_name, timeout=timeout,
                      poll_namesrv_interval=poll_namesrv_interval, heartbeat_interval=heartbeat_interval,
                      credentials=credentials, tls=tls)
    client.heartbeat_body = heartbeat_body
    client.heartbeat_slaves = True
    return client


class _OffsetAPI:
    """Queue offset queries shared by both consumers (codes 29, 30, 31, 14, 15)."""

    client: MQClient
    group: str

    def _addr(self, mq: MessageQueue) -> str:
        addr = self.client.admin_addr(mq.broker_name)
        if addr is None:
            raise RemotingConnectError(f"no address known for broker group {mq.broker_name}")
        return addr

    async def _offset_call(self, code: int, mq: MessageQueue, **more: Any) -> int:
        response = await self.client.invoke(
            self._addr(mq), code, ext(topic=mq.topic, queueId=mq.queue_id, **more))
        check_response(response, f"{RequestCode(code).name} {mq}")
        return int(response.ext_fields.get("offset", "0") or 0)

    async def max_offset(self, mq: MessageQueue) -> int:
        """GET_MAX_OFFSET: the next offset to be written (exclusive end)."""
        return await self._offset_call(RequestCode.GET_MAX_OFFSET, mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        """GET_MIN_OFFSET: the first retained offset."""
        return await self._offset_call(RequestCode.GET_MIN_OFFSET, mq)

    async def search_offset(self, mq: MessageQueue, timestamp: int | float | datetime) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: the offset of the message stored nearest
        ``timestamp`` (ms since the epoch, or a datetime)."""
        return await self._offset_call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq,
                                       timestamp=_timestamp_ms(timestamp))


class PullConsumer(_OffsetAPI, ClientLifecycle):
    """Pull messages from queues you choose, at offsets you choose.

    ``group``: consumer group (offsets committed with :meth:`commit` are kept
    per group by the brokers). ``namesrv_addr``: ``"host:port;host:port"``.
    ``max_body_size``: the most bytes a compressed body may inflate to (default 4 MiB,
    RocketMQ's default ``maxMessageSize``); larger ones come back in
    :attr:`PullResult.undecodable`, not in ``messages``.
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str = "127.0.0.1:9876",
        *,
        timeout: float = DEFAULT_TIMEOUT,
        instance_name: str | None = None,
        poll_namesrv_interval: float = 30.0,
        heartbeat_interval: float = 30.0,
        credentials: SessionCredentials | None = None,
        tls: ClientTls | bool | None = None,
        max_body_size: int = MAX_MESSAGE_SIZE,
    ) -> None:
        self.group = group
        self.timeout = timeout
        self.client = _consumer_client(namesrv_addr, self._heartbeat_body, instance_name=instance_name,
                                       timeout=timeout, poll_namesrv_interval=poll_namesrv_interval,
                                       heartbeat_interval=heartbeat_interval, credentials=credentials,
                                       tls=tls)
        self._puller = _Puller(self.client, group, max_body_size)
        self._subs: dict[str, SubscriptionData] = {}
        self._started = False

    async def start(self) -> PullConsumer:
        """Start route refresh and heartbeats. Returns ``self``."""
        if not self._started:
            self.client.start()
            self._started = True
        return self

    async def shutdown(self) -> None:
        """UNREGISTER_CLIENT and close connections."""
        if self._started:
            self._started = False
            await self.client.unregister(consumer_group=self.group)
            await self.client.close()

    def _heartbeat_body(self) -> dict[str, Any]:
        return heartbeat_data(self.client.client_id, consumer_data=[{
            "groupName": self.group,
            "consumeType": "CONSUME_ACTIVELY",
            "messageModel": MessageModel.CLUSTERING.value,
            "consumeFromWhere": ConsumeFrom.LAST_OFFSET.value,
            "unitMode": False,
            "subscriptionDataSet": [s.to_json() for s in self._subs.values()],
        }])

    def _check(self) -> None:
        if not self._started:
            raise NotStartedError("consumer is not started (use 'async with' or await start())")

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues, sorted. Raises :class:`TopicRouteError`."""
        self._check()
        route = await self.client.fetch_route(topic)
        return route.read_queues(topic)

    async def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, *, expression: str = "*",
                   suspend: float = 0.0, timeout: float | None = None) -> PullResult:
        """Read up to ``max_nums`` messages of ``mq`` from queue offset ``offset``.

        ``expression``: tag filter (``*``, ``TagA || TagB``). ``suspend``:
        seconds the broker may hold the request when there is nothing new
        (long polling; 0 answers at once). ``timeout`` defaults to
        ``suspend + timeout``. Raises ``RemotingCommandError`` for error codes
        (e.g. 17 topic not exist), remoting errors when the broker is unreachable. Messages whose
        body cannot be decompressed are in ``undecodable`` (each logged as a warning).
        """
        self._check()
        if mq.broker_name not in self.client.brokers:
            await self.client.route(mq.topic)
        sub = self._subs.get(f"{mq.topic}\x00{expression}")
        if sub is None:
            sub = SubscriptionData.of(mq.topic, expression)
            self._subs[f"{mq.topic}\x00{expression}"] = sub
        result = await self._puller.pull(
            mq, sub, offset, max_nums, suspend_ms=int(suspend * 1000),
            timeout=timeout if timeout is not None else suspend + self.timeout,
        )
        for _, reason in result.undecodable:
            log.warning("%s: %s (in PullResult.undecodable)", self.group, reason)
        return result

    # -- choosing the broker a pull goes to ------------------------------------------------

    async def refresh_route(self, topic: str) -> None:
        """Fetch ``topic``'s route from a NameServer now (a broker failed, or the group gained a
        slave). Raises :class:`TopicRouteError` (no such topic) and
        ``NameServerUnavailableError``."""
        await self.client.fetch_route(topic)

    async def ensure_route(self, topic: str) -> None:
        """Fetch ``topic``'s route unless this consumer already has it (the cached route is
        refreshed every ``poll_namesrv_interval``). Raises as :meth:`refresh_route`."""
        await self.client.route(topic)

    def broker_ids(self, broker_name: str) -> list[int]:
        """Ids of the brokers of group ``broker_name`` in the routes seen so far, sorted
        (0 = master, > 0 = slaves); empty when the group is unknown."""
        bd = self.client.brokers.get(broker_name)
        return sorted(bd.broker_addrs) if bd else []

    def pull_from(self, mq: MessageQueue, broker_id: int) -> None:
        """Send the next pull of ``mq`` to broker ``broker_id`` of its group (RocketMQ's
        ``PullAPIWrapper.updatePullFromWhichNode``).

        Each pull answer also sets it (``suggestWhichBrokerId``: a master asks a slow consumer
        to move to a slave, a slave sends it back), so call this before every pull whose
        broker you choose. An id the group lacks, or a broker marked down
        (:meth:`mark_broker_down`), falls back as :meth:`pull_address` says.
        """
        self._puller.suggested[mq] = broker_id

    def pull_address(self, mq: MessageQueue) -> tuple[str, int]:
        """``(address, brokerId)`` the next pull of ``mq`` goes to: the chosen broker
        (:meth:`pull_from`, else the last suggestion, else the master), else the master, else
        the lowest-id slave, skipping brokers marked down while another is up (RocketMQ's
        ``recalculatePullFromWhichNode`` + ``findBrokerAddressInSubscribe``). Raises
        ``RemotingConnectError`` when the group has no address at all (fetch the route first)."""
        return self._puller.address(mq)

    def mark_broker_down(self, addr: str, seconds: float = 5.0) -> None:
        """Avoid broker ``addr`` for pulls during the next ``seconds`` (it failed); a failed
        connection marks it for 5 s by itself."""
        self._puller.mark_down(addr, seconds)

    async def fetch_offset(self, mq: MessageQueue) -> int:
        """QUERY_CONSUMER_OFFSET: the group's committed offset of ``mq``; -1 when none."""
        self._check()
        if mq.broker_name not in self.client.brokers:
            await self.client.route(mq.topic)
        return await RemoteOffsetStore(self.client, self.group).read(mq)

    async def commit(self, mq: MessageQueue, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET: record ``offset`` (the next one to consume) for the group."""
        self._check()
        if mq.broker_name not in self.client.brokers:
            await self.client.route(mq.topic)
        store = RemoteOffsetStore(self.client, self.group)
        store.update(mq, offset)
        await store.persist(mq)


@dataclass(eq=False)
class _ProcessQueue:
    """A queue this consumer owns: pull position and messages in flight."""

    mq: MessageQueue
    sub: SubscriptionData
    next_offset: int
    inflight: dict[int, MessageExt] = field(default_factory=dict)
    dropped: bool = False
    task: asyncio.Task[None] | None = None

    def commit_offset(self) -> int:
        """Everything below this offset is consumed: the lowest in flight, else the pull position."""
        return min(self.inflight) if self.inflight else self.next_offset


class PushConsumer(_OffsetAPI):
    """A managed consumer of a consumer group (see the module docs).

    Parameters (times in seconds unless noted):

    * ``group``, ``namesrv_addr`` (``"host:port;host:port"``), ``handler``
      (see :data:`MessageHandler`; omit it to use :meth:`messages`).
    * ``message_model``: CLUSTERING (default) or BROADCASTING.
    * ``consume_from``: LAST_OFFSET (default), FIRST_OFFSET or TIMESTAMP with
      ``consume_timestamp`` (ms since the epoch or datetime; default 30 min ago).
    * ``pull_batch_size`` (32), ``consume_batch_size`` (messages per handler
      call, 32), ``consume_concurrency`` (handler calls in flight, 16),
      ``pull_threshold_per_queue`` (messages in flight per queue before pulls pause, 1000).
    * ``orderly``: consume each queue's messages strictly in order, one batch
      at a time (failures are retried in place after ``orderly_retry_delay``,
      then sent to the dead-letter queue after ``max_reconsume_times``).
      No broker locks are taken, so during a rebalance two members may briefly
      overlap on a queue.
    * ``max_reconsume_times`` (16): deliveries before a message goes to
      ``%DLQ%<group>``. ``retry_delay_level``: delay level of redelivery
      (0 lets the broker choose 3 + reconsume times, i.e. 10 s first).
    * ``suspend_timeout`` (15): long-poll hold; the request timeout is twice it.
    * ``rebalance_interval`` (20), ``persist_interval`` (5),
      ``poll_namesrv_interval`` (30), ``heartbeat_interval`` (30).
    * ``offset_store_dir``: BROADCASTING offsets file folder (default
      ``~/.rocket/offsets/<instance_name or client id>``); set ``instance_name``
      to resume across restarts.
    * ``max_body_size``: the most bytes a compressed body may inflate to (default 4 MiB,
      RocketMQ's default ``maxMessageSize``). A message whose body is larger (a "zip bomb") or
      cannot be decompressed never reaches the handler: it is logged as an error and sent to
      the group's dead-letter queue ``%DLQ%<group>`` as stored (CONSUMER_SEND_MSG_BACK with
      delay level -1; retried every 5 s while that fails, holding the queue's offset).
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str = "127.0.0.1:9876",
        handler: MessageHandler | None = None,
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from: ConsumeFrom = ConsumeFrom.LAST_OFFSET,
        consume_timestamp: int | float | datetime | None = None,
        pull_batch_size: int = 32,
        consume_batch_size: int = 32,
        consume_concurrency: int = 16,
        pull_threshold_per_queue: int = 1000,
        orderly: bool = False,
        orderly_retry_delay: float = 1.0,
        max_reconsume_times: int = 16,
        retry_delay_level: int = 0,
        suspend_timeout: float = 15.0,
        rebalance_interval: float = 20.0,
        persist_interval: float = 5.0,
        poll_namesrv_interval: float = 30.0,
        heartbeat_interval: float = 30.0,
        timeout: float = DEFAULT_TIMEOUT,
        offset_store_dir: Path | str | None = None,
        instance_name: str | None = None,
        credentials: SessionCredentials | None = None,
        tls: ClientTls | bool | None = None,
        max_body_size: int = MAX_MESSAGE_SIZE,
    ) -> None:
        self.group = group
        self.handler = handler
        self.message_model = MessageModel(message_model)
        self.consume_from = ConsumeFrom(consume_from)
        self.consume_timestamp = _timestamp_ms(consume_timestamp)
        self.pull_batch_size = pull_batch_size
        self.consume_batch_size = max(1, consume_batch_size)
        self.consume_concurrency = max(1, consume_concurrency)
        self.pull_threshold_per_queue = pull_threshold_per_queue
        self.orderly = orderly
        self.orderly_retry_delay = orderly_retry_delay
        self.max_reconsume_times = max_reconsume_times
        self.retry_delay_level = retry_delay_level
        self.suspend_timeout = suspend_timeout
        self.rebalance_interval = rebalance_interval
        self.persist_interval = persist_interval
        self.timeout = timeout
        self.client = _consumer_client(namesrv_addr, self._heartbeat_body, instance_name=instance_name,
                                       timeout=timeout, poll_namesrv_interval=poll_namesrv_interval,
                                       heartbeat_interval=heartbeat_interval, credentials=credentials,
                                       tls=tls)
        self.client.remoting.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_ids_changed)
        self._puller = _Puller(self.client, group, max_body_size)
        self._subs: dict[str, SubscriptionData] = {}
        self._pqs: dict[MessageQueue, _ProcessQueue] = {}
        self._offsets: OffsetStore
        if self.message_model is MessageModel.BROADCASTING:
            folder = Path(offset_store_dir) if offset_store_dir else (
                Path.home() / ".rocket" / "offsets" / (instance_name or self.client.client_id.replace("@", "_")))
            self._offsets = LocalOffsetStore(folder / f"{group}.json", group)
        else:
            self._offsets = RemoteOffsetStore(self.client, group)
        self._producer = Producer(CLIENT_INNER_PRODUCER_GROUP, client=self.client, send_timeout=timeout)
        self._semaphore = asyncio.Semaphore(self.consume_concurrency)
        self._consume_tasks: set[asyncio.Task[None]] = set()
        self._rebalance_wanted = asyncio.Event()
        self._rebalance_lock = asyncio.Lock()
        self._inbox: asyncio.Queue[tuple[MessageExt, asyncio.Future[bool]]] | None = None
        self._iter_current: asyncio.Future[bool] | None = None
        self._started = False
        self._stopping = False
        #: The periodic offset writes and the rebalance loop (stopped first at shutdown).
        self._loops: list[asyncio.Task[None]] = []
        #: Counters for monitoring: messages handed to the handler, failed, sent back, and sent to
        #: the dead-letter queue because their body could not be decompressed.
        self.stats = {"consumed": 0, "failed": 0, "sent_back": 0, "undecodable": 0}

    # -- configuration -----------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume ``topic`` messages whose tags match ``expression`` (``*``, ``TagA || TagB``).

        May be called before or after :meth:`start` (takes effect at the next rebalance).
        """
        self._subs[topic] = SubscriptionData.of(topic, expression)
        if self.message_model is MessageModel.CLUSTERING and not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            rt = retry_topic(self.group)
            self._subs.setdefault(rt, SubscriptionData.of(rt, "*"))
        if self._started:
            self._rebalance_wanted.set()

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (at the next rebalance)."""
        self._subs.pop(topic, None)
        if self._started:
            self._rebalance_wanted.set()

    @property
    def subscriptions(self) -> dict[str, str]:
        """Topic → tag expression, including the retry topic."""
        return {t: s.expression for t, s in self._subs.items()}

    def assigned_queues(self) -> list[MessageQueue]:
        """The queues this member currently consumes, sorted."""
        return sorted(mq for mq, pq in self._pqs.items() if not pq.dropped)

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> PushConsumer:
        """Fetch routes, heartbeat, rebalance, and start pulling. Returns ``self``.

        Raises ``ValueError`` without subscriptions. Topics without a route are
        retried at every rebalance.
        """
        if self._started:
            return self
        if not self._subs:
            raise ValueError("subscribe to at least one topic before start()")
        self._started = True
        self._stopping = False
        await self._offsets.load()
        await self._producer.start()
        for topic in list(self._subs):
            try:
                await self.client.fetch_route(topic)
            except TopicRouteError as exc:
                log.info("%s: %s (will retry at the next rebalance)", self.group, exc)
        await self.client.send_heartbeat()
        self.client.start()
        self._loops = [self.client.spawn(self.persist_interval, self._persist_offsets),
                       self.client.spawn_task(self._rebalance_loop())]
        await self.rebalance()
        return self

    async def shutdown(self, drain_timeout: float = 5.0, persist_timeout: float = 5.0) -> None:
        """Shut down in ``DefaultMQPushConsumerImpl.shutdown``'s order; times in seconds.

        1. Stop rebalancing and the periodic offset writes (waiting for a rebalance under way),
           and stop pulling.
        2. Let in-flight handler calls finish, up to ``drain_timeout``
           (``ConsumeMessageConcurrentlyService.shutdown(awaitTerminateMillis)``); those still
           running are cancelled and their messages will be consumed again.
        3. Write every queue's final offset, unconditionally (the broker's copy may be older
           than our last write: a pull's ``commitOffset`` applied after it), retrying failed
           writes until ``persist_timeout`` has passed; what still fails is logged as an error
           (those messages will be consumed again, nothing is lost).
        4. UNREGISTER_CLIENT, then close the connections.
        """
        if not self._started:
            return
        self._stopping = True
        loops, self._loops = self._loops, []
        for task in loops:
            task.cancel()
        for task in loops:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        async with self._rebalance_lock:  # a rebalance() called by hand ends first
            pull_tasks = [pq.task for pq in self._pqs.values() if pq.task is not None]
            for task in pull_tasks:
                task.cancel()
            for task in pull_tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if self._iter_current is not None and not self._iter_current.done():
                self._iter_current.set_result(True)  # the iterator's last message was handed out: done
            if self._inbox is not None:
                while not self._inbox.empty():  # never handed out: cancel, they will be redelivered
                    _, fut = self._inbox.get_nowait()
                    fut.cancel()
            if self._consume_tasks:
                _, pending = await asyncio.wait(set(self._consume_tasks), timeout=drain_timeout)
                for task in pending:
                    task.cancel()
                for task in pending:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            for pq in self._pqs.values():
                self._offsets.update(pq.mq, pq.commit_offset(), increase_only=True)
            await self._persist_final(persist_timeout)
        self._started = False
        await self.client.unregister(consumer_group=self.group)
        await self._producer.shutdown()
        await self.client.close()
        self._pqs.clear()

    async def _persist_final(self, timeout: float) -> None:
        """Write every known offset, retrying the failed ones (backing off 0.1 s .. 1 s) until
        ``timeout`` seconds have passed; logs an error naming what could not be written."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pending: list[MessageQueue] | None = None  # None: every queue
        delay = 0.1
        while True:
            each = max(0.5, min(self.timeout, deadline - loop.time()))
            failed = await self._offsets.persist_all(pending, force=True, timeout=each)
            if not failed:
                return
            pending = failed
            if deadline - loop.time() <= delay:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        log.error("%s: the final offsets of %s could not be written within %.1f s; the messages after the "
                  "offsets last stored will be consumed again", self.group,
                  ", ".join(f"{mq} ({self._offsets.get(mq)})" for mq in pending), timeout)

    async def __aenter__(self) -> PushConsumer:
        if self._subs and (self.handler is not None):
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _heartbeat_body(self) -> dict[str, Any]:
        return heartbeat_data(self.client.client_id, [CLIENT_INNER_PRODUCER_GROUP], [{
            "groupName": self.group,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from.value,
            "unitMode": False,
            "subscriptionDataSet": [s.to_json() for s in self._subs.values()],
        }])

    # -- the async-iterator API --------------------------------------------------------

    async def messages(self) -> AsyncIterator[MessageExt]:
        """Iterate over messages (starting the consumer if needed).

        A message counts as consumed when the loop asks for the next one or
        ends (``break``, exception, cancellation). Only one iterator at a time;
        requires ``handler=None``.
        """
        if self.handler is not None:
            raise ValueError("messages() needs a consumer created without a handler")
        if self._inbox is None:
            self._inbox = asyncio.Queue()
        inbox = self._inbox
        if not self._started:
            await self.start()
        previous: asyncio.Future[bool] | None = None
        try:
            while True:
                if previous is not None and not previous.done():
                    previous.set_result(True)
                msg, previous = await inbox.get()
                self._iter_current = previous
                yield msg
        finally:
            if previous is not None and not previous.done():
                previous.set_result(True)

    async def _inbox_handler(self, msgs: list[MessageExt]) -> ConsumeStatus:
        if self._inbox is None:
            self._inbox = asyncio.Queue()
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[bool]] = []
        for msg in msgs:
            fut: asyncio.Future[bool] = loop.create_future()
            futures.append(fut)
            await self._inbox.put((msg, fut))
        results = await asyncio.gather(*futures)
        return ConsumeStatus.SUCCESS if all(results) else ConsumeStatus.RECONSUME_LATER

    # -- rebalance ---------------------------------------------------------------------

    def _on_ids_changed(self, request: RemotingCommand, conn: RemotingConnection) -> None:
        log.debug("%s: consumer ids changed (from %s)", self.group, conn.peer)
        self._rebalance_wanted.set()

    async def _rebalance_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.rebalance_interval):
                    await self._rebalance_wanted.wait()
            self._rebalance_wanted.clear()
            try:
                await self.rebalance()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s: rebalance failed: %s", self.group, exc)

    async def _consumer_ids(self, topic: str) -> list[str] | None:
        route = self.client.routes.get(topic)
        if route is None:
            return None
        addrs = sorted(route.master_addrs()) or sorted(route.broker_addrs())
        for addr in addrs:
            try:
                response = await self.client.invoke(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                    ext(consumerGroup=self.group))
            except (RemotingConnectError, RemotingTimeoutError):
                continue
            if response.code != ResponseCode.SUCCESS:
                continue
            try:
                ids = orjson.loads(response.body).get("consumerIdList") or []
            except (orjson.JSONDecodeError, AttributeError):
                continue
            return [str(i) for i in ids]
        return None

    async def rebalance(self) -> None:
        """Recompute which queues this member owns and start/stop pulling accordingly.

        Runs every ``rebalance_interval`` seconds and when a broker says the
        group's members changed; call it to force one.
        """
        if self._stopping or not self._started:
            return
        async with self._rebalance_lock:
            for topic, sub in list(self._subs.items()):
                try:
                    route = await self.client.route(topic)
                except TopicRouteError:
                    continue
                mqs = route.read_queues(topic)
                if self.message_model is MessageModel.BROADCASTING:
                    wanted = set(mqs)
                else:
                    ids = await self._consumer_ids(topic)
                    if ids is None:
                        continue  # no broker answered: keep what we have
                    if self.client.client_id not in ids:
                        await self.client.send_heartbeat()
                        ids = await self._consumer_ids(topic) or []
                    wanted = set(allocate_averagely(self.client.client_id, ids, mqs))
                await self._apply_allocation(topic, sub, wanted)

    async def _apply_allocation(self, topic: str, sub: SubscriptionData, wanted: set[MessageQueue]) -> None:
        current = {mq for mq in self._pqs if mq.topic == topic}
        for mq in sorted(current - wanted):
            await self._drop(mq)
        for mq in sorted(wanted):
            pq = self._pqs.get(mq)
            if pq is not None:
                pq.sub = sub
                continue
            try:
                start = await self._start_offset(mq)
            except Exception as exc:
                log.warning("%s: cannot compute the start offset of %s, will retry: %s", self.group, mq, exc)
                continue
            if self._stopping:
                return
            pq = _ProcessQueue(mq=mq, sub=sub, next_offset=start)
            self._offsets.update(mq, start)
            self._pqs[mq] = pq
            pq.task = asyncio.create_task(self._pull_loop(pq))
            log.info("%s: %s now consumes %s from offset %d", self.group, self.client.client_id, mq, start)

    async def _drop(self, mq: MessageQueue) -> None:
        pq = self._pqs.pop(mq, None)
        if pq is None:
            return
        pq.dropped = True
        if pq.task is not None:
            pq.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pq.task
        self._offsets.update(mq, pq.commit_offset(), increase_only=True)
        try:
            await self._offsets.persist(mq, force=True)  # as RebalancePushImpl.removeUnnecessaryMessageQueue
        except Exception as exc:
            log.warning("%s: persisting the offset of dropped %s failed: %s", self.group, mq, exc)
        self._offsets.remove(mq)
        log.info("%s: %s released %s", self.group, self.client.client_id, mq)

    async def _start_offset(self, mq: MessageQueue) -> int:
        """As ``RebalancePushImpl.computePullFromWhere``: stored offset, else per ``consume_from``."""
        stored = await self._offsets.read(mq)
        is_retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        if self.consume_from is ConsumeFrom.TIMESTAMP and stored <= 0 and not is_retry:
            return await self.search_offset(mq, self.consume_timestamp)
        if stored >= 0:
            return stored
        if self.consume_from is ConsumeFrom.FIRST_OFFSET or is_retry:
            return 0
        return await self.max_offset(mq)

    # -- pulling -----------------------------------------------------------------------

    async def _pull_loop(self, pq: _ProcessQueue) -> None:
        suspend_ms = int(self.suspend_timeout * 1000)
        request_timeout = max(self.suspend_timeout * 2, self.timeout)
        broadcast = self.message_model is MessageModel.BROADCASTING
        while not pq.dropped and not self._stopping:
            if len(pq.inflight) >= self.pull_threshold_per_queue:
                await asyncio.sleep(0.05)
                continue
            commit = 0 if broadcast else max(self._offsets.get(pq.mq), 0)
            try:
                result = await self._puller.pull(
                    pq.mq, pq.sub, pq.next_offset, self.pull_batch_size,
                    commit_offset=commit, suspend_ms=suspend_ms, timeout=request_timeout,
                )
            except asyncio.CancelledError:
                raise
            except (RemotingConnectError, RemotingTimeoutError) as exc:
                log.info("%s: pull %s failed: %s; refreshing the route", self.group, pq.mq, exc)
                with contextlib.suppress(Exception):
                    await self.client.fetch_route(pq.mq.topic)
                await asyncio.sleep(1.0)
                continue
            except (RemotingCommandError, MessageFormatError) as exc:
                log.warning("%s: pull %s failed: %s", self.group, pq.mq, exc)
                await asyncio.sleep(1.0)
                continue
            if pq.dropped:
                return
            if result.status is PullStatus.OFFSET_ILLEGAL:
                # As DefaultMQPushConsumerImpl (OFFSET_ILLEGAL): the broker's corrected offset replaces
                # the group's, also downwards, and is persisted at once; what was in flight no longer
                # moves it (Java drops the process queue; this one carries on from the new offset).
                log.warning("%s: offset %d of %s is illegal, moving to %d", self.group, pq.next_offset,
                            pq.mq, result.next_begin_offset)
                pq.next_offset = result.next_begin_offset
                pq.inflight.clear()
                self._offsets.update(pq.mq, pq.next_offset)
                with contextlib.suppress(Exception):
                    await self._offsets.persist(pq.mq)
                continue
            # FOUND, NO_NEW_MSG (19), NO_MATCHED_MSG (20): continue from nextBeginOffset, as the Java
            # client does; with nothing in flight it is also the group's offset (correctTagsOffset).
            pq.next_offset = result.next_begin_offset
            if result.undecodable:
                self._start_dead_letter(pq, result.undecodable)
            if not result.messages:
                if not pq.inflight:
                    self._offsets.update(pq.mq, pq.next_offset, increase_only=True)
                continue
            for msg in result.messages:
                pq.inflight[msg.queue_offset] = msg
            chunks = [result.messages[i:i + self.consume_batch_size]
                      for i in range(0, len(result.messages), self.consume_batch_size)]
            if self.orderly:
                for chunk in chunks:
                    await self._consume_orderly(pq, chunk)
            else:
                for chunk in chunks:
                    task = asyncio.create_task(self._consume(pq, chunk))
                    self._consume_tasks.add(task)
                    task.add_done_callback(self._consume_tasks.discard)

    # -- consuming ---------------------------------------------------------------------

    async def _call_handler(self, msgs: list[MessageExt]) -> ConsumeStatus:
        for msg in msgs:
            real = msg.properties.get(PROPERTY_RETRY_TOPIC)
            if real and msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                msg.topic = real
        handler = self.handler or self._inbox_handler
        try:
            result = handler(msgs)
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: handler failed on %d message(s); they will be redelivered", self.group, len(msgs))
            return ConsumeStatus.RECONSUME_LATER
        self.stats["consumed"] += len(msgs)
        if result is None:
            return ConsumeStatus.SUCCESS
        return ConsumeStatus(result)

    def _finish(self, pq: _ProcessQueue, msgs: Iterable[MessageExt]) -> None:
        for msg in msgs:
            pq.inflight.pop(msg.queue_offset, None)
        if not pq.dropped:
            self._offsets.update(pq.mq, pq.commit_offset(), increase_only=True)

    async def _consume(self, pq: _ProcessQueue, msgs: list[MessageExt]) -> None:
        async with self._semaphore:
            if pq.dropped:
                return
            status = await self._call_handler(msgs)
            if pq.dropped:
                return  # the queue moved to another member, which will redeliver
            if status is ConsumeStatus.RECONSUME_LATER:
                self.stats["failed"] += len(msgs)
                if self.message_model is MessageModel.BROADCASTING:
                    log.warning("%s: broadcasting does not retry; dropping %d failed message(s)",
                                self.group, len(msgs))
                else:
                    kept = [m for m in msgs if not await self._send_back(pq.mq, m, self.retry_delay_level)]
                    if kept:
                        # could not hand them to the broker: consume them again here later
                        kept_ids = {id(m) for m in kept}
                        done = [m for m in msgs if id(m) not in kept_ids]
                        self._finish(pq, done)
                        self._later(pq, kept)
                        return
        self._finish(pq, msgs)

    def _later(self, pq: _ProcessQueue, msgs: list[MessageExt]) -> None:
        async def again() -> None:
            await asyncio.sleep(5.0)
            if not pq.dropped and not self._stopping:
                await self._consume(pq, msgs)

        task = asyncio.create_task(again())
        self._consume_tasks.add(task)
        task.add_done_callback(self._consume_tasks.discard)

    async def _consume_orderly(self, pq: _ProcessQueue, msgs: list[MessageExt]) -> None:
        attempts = 0
        while not pq.dropped and not self._stopping:
            async with self._semaphore:
                status = await self._call_handler(msgs)
            if status is ConsumeStatus.SUCCESS:
                break
            attempts += 1
            self.stats["failed"] += len(msgs)
            if attempts >= self.max_reconsume_times and self.message_model is MessageModel.CLUSTERING:
                for msg in msgs:
                    await self._send_back(pq.mq, msg, -1)  # straight to the dead-letter queue
                break
            await asyncio.sleep(self.orderly_retry_delay)
        if not pq.dropped:
            self._finish(pq, msgs)

    def _start_dead_letter(self, pq: _ProcessQueue, undecodable: list[tuple[MessageExt, str]]) -> None:
        for msg, reason in undecodable:
            log.error("%s: %s; sending it to the dead-letter queue %%DLQ%%%s", self.group, reason, self.group)
            pq.inflight[msg.queue_offset] = msg
        coro = self._dead_letter(pq, [m for m, _ in undecodable])
        task = asyncio.create_task(coro)
        self._consume_tasks.add(task)
        task.add_done_callback(self._consume_tasks.discard)

    async def _dead_letter(self, pq: _ProcessQueue, msgs: list[MessageExt]) -> None:
        """Hand messages no handler can get (undecodable bodies) to ``%DLQ%<group>`` as stored:
        CONSUMER_SEND_MSG_BACK with delay level -1 (the broker copies the stored record). No
        re-send fallback (it would need the body decoded); until the broker takes them, they stay
        in flight (the offset stays below them) and are tried again every 5 s."""
        left = list(msgs)
        while left and not pq.dropped and not self._stopping:
            left = [m for m in left if not await self._send_back(pq.mq, m, -1, fallback=False)]
            if left:
                await asyncio.sleep(5.0)
        done = [m for m in msgs if not any(m is x for x in left)]
        self.stats["undecodable"] += len(done)
        self._finish(pq, done)

    async def _send_back(self, mq: MessageQueue, msg: MessageExt, delay_level: int, *,
                         fallback: bool = True) -> bool:
        """CONSUMER_SEND_MSG_BACK, or (``fallback``) a re-send to the retry topic; False if
        both failed."""
        addr = self.client.master_addr(mq.broker_name) or msg.store_host
        fields = ext(
            offset=msg.physical_offset,
            group=self.group,
            delayLevel=delay_level,
            originMsgId=msg.msg_id,
            originTopic=msg.topic,
            unitMode=False,
            maxReconsumeTimes=self.max_reconsume_times,
        )
        try:
            response = await self.client.invoke(addr, RequestCode.CONSUMER_SEND_MSG_BACK, fields)
            check_response(response, f"send back {msg.msg_id}")
            self.stats["sent_back"] += 1
            return True
        except Exception as exc:
            if not fallback:
                log.warning("%s: send-back of %s failed (%s)", self.group, msg.msg_id, exc)
                return False
            log.warning("%s: send-back of %s failed (%s); re-sending to the retry topic", self.group,
                        msg.msg_id, exc)
        props = dict(msg.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        props.setdefault("ORIGIN_MESSAGE_ID", msg.msg_id)
        props["RECONSUME_TIME"] = str(msg.reconsume_times + 1)
        props["MAX_RECONSUME_TIMES"] = str(self.max_reconsume_times)
        props.pop("UNIQ_KEY", None)
        try:
            await self._producer.send_to_retry(
                Message(msg.topic, msg.body, msg.flag, props), self.group,
                reconsume_times=msg.reconsume_times + 1, max_reconsume_times=self.max_reconsume_times,
                delay_level=delay_level if delay_level > 0 else 3 + msg.reconsume_times,
            )
            self.stats["sent_back"] += 1
            return True
        except Exception as exc:
            log.warning("%s: re-sending %s to the retry topic failed: %s", self.group, msg.msg_id, exc)
            return False

    async def _persist_offsets(self) -> None:
        for pq in list(self._pqs.values()):
            if not pq.dropped:
                self._offsets.update(pq.mq, pq.commit_offset(), increase_only=True)
        await self._offsets.persist_all([mq for mq, pq in self._pqs.items() if not pq.dropped])
