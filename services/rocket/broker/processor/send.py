""":class:`SendMessageProcessor`: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310),
SEND_BATCH_MESSAGE (320) and CONSUMER_SEND_MSG_BACK (36).

Checks, in order (RocketMQ 4.9.8
``AbstractSendMessageProcessor.msgCheck`` and ``SendMessageProcessor``), each
answered with RocketMQ's code and a remark that says what is wrong:

==========================================  ====  ========================================
condition                                   code  remark starts with
==========================================  ====  ========================================
too many sends (or bytes) in flight, or       2   ``[REJECTREQUEST]system busy``
the store's write path is behind
broker is a slave, or shutting down, or      14   ``the broker[...] is a slave`` / ``... shutting down``
its replication role is not settled                / ``... cannot store messages now: ...``
broker or topic without WRITE permission     16   ``the broker[...] sending message is forbidden``
illegal topic name                            1   ``The specified topic[...] contains illegal characters``
system topic producers may not use           16   ``Sending message to topic[...] is forbidden.``
unknown topic, no auto-create                17   ``topic[x] not exist, apply first please!``
queueId >= the topic's queue count            1   ``request queueId[n] is illegal``
body > maxMessageSize, properties > 32 KiB   13   ``the message body size over max value`` (or properties)
corrupt batch body                           13   ``the batch body is corrupt: ...``
delayed or timer message in a batch          13   ``batch message(s) ... cannot be delayed`` / ``... cannot
                                                   be timer messages (TIMER_DELIVER_MS is set) ...``
retry topic of an unknown group              26   ``subscription group not exist, g``
==========================================  ====  ========================================

A batch is recognised by code 320 **or** the batch flag ``true``/``1`` (the
C++ client sends batches as code 10 with ``batch:"1"``; Java 4.9.8 would
misread those with ``Boolean.parseBoolean``, we accept them).
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
import time
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from rocket.broker.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader
from rocket.broker.inner import ItemForm, MessageInner, apply_item_forms, cached_tags_code
from rocket.broker.timer import REWRITE_TRIGGERS, TIMER_PROPERTY_KEYS, batch_timer_refusal
from rocket.broker.topics import NOT_ALLOWED_SEND_TOPICS, is_writeable, validate_topic
from rocket.broker.transaction import HALF_TOPIC, half_message, is_half_message
from rocket.message import (
    MAX_PROPERTIES_SIZE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_CLUSTER,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    MessageFormatError,
    decode_properties,
    encode_properties,
    split_batch,
)
from rocket.protocol import RETRY_GROUP_TOPIC_PREFIX, dlq_topic, retry_topic
from rocket.protocol.codes import FLAG_ONEWAY, FLAG_RESPONSE, PERM_READ, PERM_WRITE, VERSION_V4_9_8, SerializeType
from rocket.remoting import RemotingCommand, RemotingConnection, ResponseCode
from rocket.remoting.connection import ANSWER_LATER
from rocket.store.api import BrokerRole, PutMessageBatch, PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from rocket.broker.interfaces import PutDone, SendBroker
    from rocket.protocol import TopicConfig

log = logging.getLogger("rocket.broker.send")

#: Remark of SYSTEM_BUSY answers (the prefix Java clients look for).
SYSTEM_BUSY_REMARK = "[REJECTREQUEST]system busy, start flow control for a while"

#: Store outcomes after which the message is stored (the response carries its id).
_STORED = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}


_TOPIC_PROBLEMS: dict[str, str | None] = {}


def _topic_problem(topic: str) -> str | None:
    """:func:`validate_topic`, memoised (a broker sees few topic names, and every send names one)."""
    try:
        return _TOPIC_PROBLEMS[topic]
    except KeyError:
        pass
    problem = validate_topic(topic)
    if len(_TOPIC_PROBLEMS) >= 10_000:
        _TOPIC_PROBLEMS.clear()
    _TOPIC_PROBLEMS[topic] = problem
    return problem


def with_cluster(text: str, count: int, cluster: str) -> str | None:
    """The stored properties string of a sent properties string ``text`` plus ``CLUSTER=cluster``,
    made by appending, when that equals ``encode_properties`` of the decoded dict plus CLUSTER.

    ``count`` is the number of properties ``decode_properties(text)`` found, without a
    CLUSTER among them. That is the case when every ``\\x02``-separated piece of ``text``
    (Java's trailing separator aside) is a distinct ``name\\x01value``: then the count
    of pieces equals ``count``. Answers None otherwise (empty or duplicate names, stray
    separators): the caller encodes the dict.
    """
    base = text[:-1] if text.endswith(PROPERTY_SEPARATOR) else text
    if not base:
        return f"{PROPERTY_CLUSTER}{NAME_VALUE_SEPARATOR}{cluster}" if count == 0 else None
    if base.count(PROPERTY_SEPARATOR) + 1 != count:
        return None
    return f"{base}{PROPERTY_SEPARATOR}{PROPERTY_CLUSTER}{NAME_VALUE_SEPARATOR}{cluster}"


def send_ok_frame(opaque: int, msg_id: str, queue_id: int, queue_offset: int, store_ids: bool = False
                  ) -> bytes | None:
    """The whole JSON-header frame of a SUCCESS answer to a send: the bytes
    ``encode(request.response(...))`` gives for the response :meth:`SendMessageProcessor._answer`
    builds (ext fields msgId, queueId, queueOffset, MSG_REGION, TRACE_ON; flag RESPONSE;
    language JAVA), written as one string built from the header's fixed parts and the four
    values (no format string to parse per answer). ``opaque`` is the request's.

    Answers None when ``msg_id`` holds a character JSON would escape (never for the
    store's hex ids); the caller then takes the general path. ``store_ids``: ``msg_id`` is the
    store's own offsetMsgId, or a batch put's ids as the store joined them
    (:class:`~rocket.store.api.StoredBatch`), hex digits and commas only: not looked at again
    (``isprintable`` over a batch's ~1 KiB of ids costs more than the rest of the answer).
    """
    if not store_ids and (not msg_id.isascii() or '"' in msg_id or "\\" in msg_id or not msg_id.isprintable()):
        return None
    header = (f"{_OK_0}{msg_id}{_OK_1}{queue_id}{_OK_2}{queue_offset}{_OK_3}{opaque}{_OK_4}").encode()
    n = len(header)
    return _FRAME_PREFIX.pack(4 + n, n) + header


#: The JSON header of :func:`send_ok_frame`, key for key as ``remoting.command`` writes one
#: (its fixed parts, ``_OK_0`` .. ``_OK_4``, go around msgId, queueId, queueOffset and opaque).
_SEND_OK_HEADER = (
    '{"code":0,"extFields":{"msgId":"%s","queueId":"%d","queueOffset":"%d","MSG_REGION":"DefaultRegion",'
    '"TRACE_ON":"true"},"flag":' + str(FLAG_RESPONSE) + ',"language":"JAVA","opaque":%d,'
    '"serializeTypeCurrentRPC":"JSON","version":' + str(VERSION_V4_9_8) + "}"
)
_OK_PARTS = _SEND_OK_HEADER.replace("%d", "%s").split("%s")
_OK_0: Final[str] = _OK_PARTS[0]
_OK_1: Final[str] = _OK_PARTS[1]
_OK_2: Final[str] = _OK_PARTS[2]
_OK_3: Final[str] = _OK_PARTS[3]
_OK_4: Final[str] = _OK_PARTS[4]
_FRAME_PREFIX: Final = struct.Struct(">iI")


#: What a send stores once its checks passed: one message, or a batch's messages (to one queue).
Prepared = MessageInner | PutMessageBatch


def _reply_queue_id(prepared: Prepared) -> int:
    """The queueId a send answer names: the producer's queue, also for a half message (stored
    to the half topic's queue 0 with the real queue in REAL_QID), as Apache's SendMessageProcessor."""
    if isinstance(prepared, PutMessageBatch):
        return prepared.queue_id
    inner = prepared
    if inner.topic == HALF_TOPIC:
        real = inner.properties.get(PROPERTY_REAL_QUEUE_ID, "")
        if real.isdigit():
            return int(real)
    return inner.queue_id


#: Properties whose presence in a batch item needs a closer look (:func:`_batch_item_refusal`).
_BATCH_CHECKED_NAMES = frozenset((PROPERTY_TRANSACTION_PREPARED, PROPERTY_DELAY_TIME_LEVEL, *TIMER_PROPERTY_KEYS))


def _batch_item_refusal(props: dict[str, str], index: int) -> str | None:
    """Why batch item ``index`` (its merged properties ``props``) cannot be stored: a transactional
    (``TRAN_MSG``), delayed (``DELAY``) or timer message; None when it can."""
    if PROPERTY_TRANSACTION_PREPARED in props and is_half_message(props, 0):
        return f"batch message {index} cannot be transactional (TRAN_MSG)"
    delay = props.get(PROPERTY_DELAY_TIME_LEVEL)
    if delay is not None and delay not in ("", "0"):
        return f"batch message {index} cannot be delayed (DELAY is set)"
    return batch_timer_refusal(props, index)


def _merged_item(batch_props: dict[str, str], item_text: str, cluster: str) -> dict[str, str]:
    """The properties a batch item is stored with: the batch header's, then the item's own
    (the item's value wins for a name both have, e.g. UNIQ_KEY or WAIT from the Java client),
    then ``CLUSTER=cluster`` (replacing any sent)."""
    props = {**batch_props, **decode_properties(item_text)} if batch_props else decode_properties(item_text)
    props[PROPERTY_CLUSTER] = cluster
    return props


def _item_values(props: dict[str, str]) -> tuple[int, list[str], str | None, bool]:
    """``(tags code, KEYS list, UNIQ_KEY or None, wait for the store)`` of a stored item's properties."""
    keys = props.get(PROPERTY_KEYS)
    tags = props.get(PROPERTY_TAGS)
    wait = props.get(PROPERTY_WAIT_STORE_MSG_OK)
    return (
        cached_tags_code(tags) if tags else 0,
        [k for k in keys.split(" ") if k] if keys else [],
        props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or None,
        wait is None or wait.lower() != "false",
    )


def _batch_refusal(batch_props: dict[str, str], sys_flag: int) -> str | None:
    """Why a batch whose header carries ``batch_props`` and ``sys_flag`` cannot be stored as a
    whole (transactional, delayed or timer batch); None when it can."""
    if is_half_message(batch_props, sys_flag):
        return "batch messages cannot be transactional"
    if batch_props.get(PROPERTY_DELAY_TIME_LEVEL, "0") not in ("", "0"):
        return "batch messages cannot be delayed (DELAY is set)"
    return batch_timer_refusal(batch_props)


def _general_item(batch_props: dict[str, str], raw: bytes, cluster: str,
                  index: int) -> str | tuple[bytes, int, list[str], str | None, bool]:
    """Batch item ``index`` (properties ``raw``) the general way: the remark refusing it, or
    ``(stored properties, tags code, KEYS list, UNIQ_KEY or None, wait)``."""
    merged = _merged_item(batch_props, raw.decode(), cluster)
    if not _BATCH_CHECKED_NAMES.isdisjoint(merged):
        refusal = _batch_item_refusal(merged, index)
        if refusal is not None:
            return refusal
    encoded = encode_properties(merged).encode()
    if len(encoded) > MAX_PROPERTIES_SIZE:
        return f"the properties of batch message {index} exceed the max value, MAX: {MAX_PROPERTIES_SIZE}"
    return (encoded, *_item_values(merged))


#: Stands for an item's UNIQ_KEY value while :func:`_item_form` works out the stored string
#: around it (a value with no separator in it; checked to occur in neither string).
_SENTINEL = "\x00uniq-value\x00"
#: Distinct item forms worked out per batch; past them, items take the general way.
_MAX_FORMS = 8
#: Batch header properties strings whose item forms a send processor keeps, and forms per string.
_MAX_CACHED_HEADERS = 64
_MAX_CACHED_FORMS = 32
_UNIQ_KEY_PIECE = PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX + NAME_VALUE_SEPARATOR


def _item_form(batch_text: str, batch_props: dict[str, str], rest: bytes, cut: int,
               cluster: str) -> ItemForm | None:
    """The stored form (:data:`rocket.broker.inner.ItemForm`) of batch items whose properties are ``rest`` with a
    UNIQ_KEY value at byte ``cut`` (``cut`` < 0: no value cut out), with the batch header's
    ``batch_props`` (string ``batch_text``) merged in as :func:`_merged_item` does.

    Worked out by merging with a stand-in value and finding it in the encoded string: the
    merge never looks into a value, so any item of this form is stored as the form with its
    value in the stand-in's place. None when that does not hold (the stand-in not found once: a
    second UNIQ_KEY of the item wins, or the stand-in occurs in the strings) or when the merged
    properties carry a name an item is refused for (those items take the general way, which
    refuses them with their index)."""
    if cut >= 0:
        if _SENTINEL in batch_text or _SENTINEL.encode() in rest:
            return None
        text = rest[:cut].decode() + _SENTINEL + rest[cut:].decode()
    else:
        text = rest.decode()
    merged = _merged_item(batch_props, text, cluster)
    if not _BATCH_CHECKED_NAMES.isdisjoint(merged):
        return None
    encoded = encode_properties(merged)
    tags_code, keys, uniq, wait = _item_values(merged)
    if cut < 0:
        before = encoded.encode()
        return before, b"", MAX_PROPERTIES_SIZE - len(before), tags_code, keys, uniq, wait
    parts = encoded.split(_SENTINEL)
    if len(parts) != 2:
        return None
    before, after = parts[0].encode(), parts[1].encode()
    return before, after, MAX_PROPERTIES_SIZE - len(before) - len(after), tags_code, keys, None, wait


def put_result_response(request: RemotingCommand, result: PutMessageResult) -> tuple[int, str | None]:
    """Response code and remark for a store outcome (mapping in ``store/api.py``)."""
    status = result.status
    detail = f": {result.remark}" if result.remark else ""
    if status in _STORED:
        return _STORED[status], None if status is PutMessageStatus.PUT_OK else f"{status.value}{detail}"
    if status is PutMessageStatus.OS_PAGECACHE_BUSY:
        return ResponseCode.SYSTEM_BUSY, f"{SYSTEM_BUSY_REMARK} (the write path is behind{detail})"
    if status in (PutMessageStatus.SERVICE_NOT_AVAILABLE, PutMessageStatus.CREATE_MAPPED_FILE_FAILED):
        return (
            ResponseCode.SERVICE_NOT_AVAILABLE,
            f"service not available now ({status.value}{detail}); the disk may be full or the store shut down",
        )
    if status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL:  # refused by the timer hook (rocket.broker.timer)
        return ResponseCode.MESSAGE_ILLEGAL, result.remark
    if status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED):
        return ResponseCode.MESSAGE_ILLEGAL, f"the message is illegal ({status.value}{detail})"
    return ResponseCode.SYSTEM_ERROR, f"{status.value}{detail}"


class SendMessageProcessor:
    """Stores messages from producers and consumers' send-backs."""

    def __init__(self, broker: SendBroker) -> None:
        self.broker = broker
        #: Batch item forms already worked out (:func:`_item_form`), by batch header properties
        #: string, then by item properties without their UNIQ_KEY value; for ``_forms_cluster``.
        self._forms: dict[str, dict[bytes, ItemForm | None]] = {}
        self._forms_cluster = ""

    # -- entry points ------------------------------------------------------------------

    def process_send(
        self, request: RemotingCommand, conn: RemotingConnection
    ) -> RemotingCommand | asyncio.Future[RemotingCommand] | Any:
        """Codes 10, 310, 320. Overload is refused before anything else is done.

        A plain function, so that a send needs neither a task nor a future of its
        own: the checks and the store's append run inline, and the send is answered
        (:meth:`RemotingConnection.answer`) from the completion callback of
        :meth:`BrokerController.put_nowait` (on a SYNC_MASTER, once a slave has
        the messages), which the store calls in the same loop turn as the write that
        stored them. While the broker's role is settling, the send runs in a task.
        """
        broker = self.broker
        if broker.in_flight_sends >= broker.config.max_in_flight_sends:
            broker.metrics.send_rejected.labels("in_flight").inc()
            return request.response(
                ResponseCode.SYSTEM_BUSY,
                f"{SYSTEM_BUSY_REMARK} ({broker.in_flight_sends} sends in flight, "
                f"limit maxInFlightSends={broker.config.max_in_flight_sends})",
            )
        size = len(request.body)
        if broker.in_flight_send_bytes + size > broker.config.max_in_flight_send_bytes and broker.in_flight_sends:
            broker.metrics.send_rejected.labels("in_flight_bytes").inc()
            return request.response(
                ResponseCode.SYSTEM_BUSY,
                f"{SYSTEM_BUSY_REMARK} ({broker.in_flight_send_bytes} bytes of sends in flight, "
                f"limit maxInFlightSendBytes={broker.config.max_in_flight_send_bytes})",
            )
        broker.in_flight_sends += 1
        broker.in_flight_send_bytes += size
        started = time.perf_counter()
        if broker.ha.role_pending:  # a start-up registration or a role change is under way
            return asyncio.get_running_loop().create_task(self._send_task(request, conn, size, started, None))
        try:
            header = SendMessageRequestHeader.parse(request)
            prepared = self._prepare(request, conn, header)
            if isinstance(prepared, RemotingCommand):
                self._done(size, started)
                return prepared
            done = partial(self._put_done, conn, request, prepared, size, started)
            put = (broker.put_message_batch_nowait(prepared, done) if isinstance(prepared, PutMessageBatch)
                   else self._put_single(prepared, done))
        except BaseException:
            self._done(size, started)
            raise
        if put is None:  # accepted: ``done`` answers
            return ANSWER_LATER
        if isinstance(put, PutMessageResult):  # refused by the store
            self._done(size, started)
            return self._answer(request, prepared, put)
        put.add_done_callback(done)
        return ANSWER_LATER

    def _put_single(self, inner: MessageInner, done: PutDone,
                    ) -> PutMessageResult | asyncio.Future[PutMessageResult] | None:
        """``BrokerController.put_nowait([inner], done)``, its usual case (no delay level or timer
        property to rewrite, not a SYNC_MASTER) taken here: the store's put at once, compiled code
        from the request to the CommitLog (the controller's method is interpreted)."""
        broker = self.broker
        if broker.config.broker_role is not BrokerRole.SYNC_MASTER and REWRITE_TRIGGERS.isdisjoint(inner.properties):
            return broker.store.put_messages_callback([inner.to_request()], done)
        return broker.put_nowait([inner], done)

    async def _send_task(
        self, request: RemotingCommand, conn: RemotingConnection, size: int, started: float,
        prepared: tuple[SendMessageRequestHeader, Prepared] | None,
    ) -> RemotingCommand:
        """The send as a coroutine: after the role settled (or when ``put_nowait`` declines)."""
        broker = self.broker
        try:
            if prepared is None:
                if broker.ha.role_pending:
                    await broker.ha.wait_role_settled()
                header = SendMessageRequestHeader.parse(request)
                checked = self._prepare(request, conn, header)
                if isinstance(checked, RemotingCommand):
                    return checked
                ready = checked
            else:
                header, ready = prepared
            if isinstance(ready, PutMessageBatch):
                put = broker.put_message_batch_nowait(ready)
                assert put is not None  # (no ``done``: a result or a future)
                result = put if isinstance(put, PutMessageResult) else await put
            else:
                result = await broker.put_message(ready)
            return self._answer(request, ready, result)
        finally:
            self._done(size, started)

    def _done(self, size: int, started: float) -> None:
        broker = self.broker
        broker.in_flight_sends -= 1
        broker.in_flight_send_bytes -= size
        broker.metrics.send_latency.observe(time.perf_counter() - started)

    def _put_done(
        self, conn: RemotingConnection, request: RemotingCommand, prepared: Prepared, size: int, started: float,
        put: PutMessageResult | asyncio.Future[PutMessageResult],
    ) -> None:
        """The store confirmed (or failed) the append: answer the send. ``put`` is the outcome
        (from the store's completion callback), or the finished future of it (SYNC_MASTER)."""
        self._done(size, started)
        if not isinstance(put, PutMessageResult) and put.cancelled():
            # the store shut down under it: no answer, as a cancelled task gives none
            conn.answer(request, None, started)  # (None: nothing is sent; the request is no longer pending)
            return
        try:
            result = put if isinstance(put, PutMessageResult) else put.result()
            if (result.status is PutMessageStatus.PUT_OK and result.stored
                    and request.serialize_type == SerializeType.JSON and not request.flag & FLAG_ONEWAY):
                # The usual answer, written straight into its frame (no RemotingCommand, no dict).
                msg_id = self._record_stored(prepared, result)
                queue_id = _reply_queue_id(prepared)
                # (msg_id is the store's: hex offsetMsgIds, comma-joined for a batch)
                frame = send_ok_frame(request.opaque, msg_id, queue_id, result.first_queue_offset, True)
                if frame is not None:
                    conn.answer_frame(request, ResponseCode.SUCCESS, frame, started)
                    return
                response = self._response(request, ResponseCode.SUCCESS, None, msg_id, queue_id,
                                          result.first_queue_offset)
            else:
                response = self._answer(request, prepared, result)
        except Exception as exc:
            log.exception("send %d from %s failed", request.code, conn.peer)
            response = request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        conn.answer(request, response, started)

    def _answer(self, request: RemotingCommand, prepared: Prepared, result: PutMessageResult) -> RemotingCommand:
        """The response to a send whose store outcome is ``result``."""
        broker = self.broker
        code, remark = put_result_response(request, result)
        if code == ResponseCode.SYSTEM_BUSY:
            broker.metrics.send_rejected.labels("store_busy").inc()
        if not result.stored:
            what = "the batch" if isinstance(prepared, PutMessageBatch) else "the message"
            return request.response(code, remark or f"{what} was not stored")
        msg_id = self._record_stored(prepared, result)
        return self._response(request, code, remark, msg_id, _reply_queue_id(prepared), result.first_queue_offset)

    def _record_stored(self, prepared: Prepared, result: PutMessageResult) -> str:
        """Count the stored messages in the broker's put statistics; the answer's msgId
        (the stored messages' ids, comma-separated for a batch). ``result`` is :attr:`~PutMessageResult.stored`."""
        broker = self.broker
        if isinstance(prepared, PutMessageBatch):
            count, nbytes = len(prepared.bodies), prepared.lengths()[2]
        else:
            count, nbytes = 1, len(prepared.body)
        # BrokerController.record_put, inline: from compiled code to compiled code.
        broker.metrics.count_in(prepared.topic, count, nbytes)
        broker.stats.on_put(count, nbytes, prepared.topic)
        if isinstance(prepared, PutMessageBatch):
            return result.msg_ids or ",".join([m.msg_id for m in result.messages])
        if prepared.topic == HALF_TOPIC:
            broker.transaction.on_half_stored(prepared)
        return result.messages[0].msg_id

    @staticmethod
    def _response(request: RemotingCommand, code: int, remark: str | None, msg_id: str, queue_id: int,
                  queue_offset: int) -> RemotingCommand:
        """The response to a stored send (the fields of :func:`send_ok_frame`)."""
        return RemotingCommand(
            code=int(code),
            opaque=request.opaque,
            flag=FLAG_RESPONSE,
            ext_fields={
                "msgId": msg_id,
                "queueId": str(queue_id),
                "queueOffset": str(queue_offset),
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
            remark=remark,
            language="JAVA",
            serialize_type=request.serialize_type,
        )

    # -- checks --------------------------------------------------------------------------

    def _check(
        self, request: RemotingCommand, conn: RemotingConnection, header: SendMessageRequestHeader
    ) -> RemotingCommand | TopicConfig:
        broker = self.broker
        cfg = broker.config
        if broker.shutting_down:
            return request.response(
                ResponseCode.SERVICE_NOT_AVAILABLE, f"the broker[{cfg.broker_name}] is shutting down, try another"
            )
        if cfg.is_slave:
            return request.response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"the broker[{cfg.broker_name}] is a slave (brokerId {cfg.broker_id}, brokerRole "
                f"{cfg.broker_role}): sending message is forbidden, send to the master",
            )
        refused = broker.ha.refuse_writes()
        if refused is not None:
            return request.response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"the broker[{cfg.broker_name}] cannot store messages now: {refused}",
            )
        if not is_writeable(cfg.broker_permission):
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the broker[{cfg.broker_ip1}] sending message is forbidden "
                f"(brokerPermission={cfg.broker_permission})",
            )
        problem = header.problem()
        if problem is not None:
            return request.response(ResponseCode.INVALID_PARAMETER, problem)
        problem = _topic_problem(header.topic)
        if problem is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, problem)
        if header.topic in NOT_ALLOWED_SEND_TOPICS:
            return request.response(
                ResponseCode.NO_PERMISSION, f"Sending message to topic[{header.topic}] is forbidden."
            )
        topic_config = broker.topics.create_in_send(
            header.topic, header.default_topic, header.default_topic_queue_nums, 0
        )
        if topic_config is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist, apply first please!"
            )
        if not is_writeable(topic_config.perm):
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the topic[{header.topic}] sending message is forbidden (perm={topic_config.perm})",
            )
        valid = max(topic_config.write_queue_nums, topic_config.read_queue_nums)
        if header.queue_id >= valid:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{header.queue_id}] is illegal, topic:{header.topic} "
                f"topicConfig.writeQueueNums:{topic_config.write_queue_nums} "
                f"topicConfig.readQueueNums:{topic_config.read_queue_nums} Producer:{conn.peer}",
            )
        return topic_config

    @staticmethod
    def _pick_queue(header: SendMessageRequestHeader, topic_config: TopicConfig) -> int:
        if header.queue_id >= 0:
            return header.queue_id
        return random.randrange(max(1, topic_config.write_queue_nums))

    def _retry_or_dlq(
        self, request: RemotingCommand, header: SendMessageRequestHeader, inner: MessageInner
    ) -> RemotingCommand | None:
        """For sends to ``%RETRY%<group>``: re-target to the DLQ after too many attempts."""
        if not header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return None
        group = header.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        group_config = self.broker.metadata.subscription_groups.get(group)
        if group_config is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}"
            )
        max_times = (
            header.max_reconsume_times if header.max_reconsume_times is not None else group_config.retry_max_times
        )
        if header.reconsume_times >= max_times:
            dlq = dlq_topic(group)
            dlq_config = self.broker.topics.create_in_send_back(dlq, 1, PERM_READ | PERM_WRITE)
            if not is_writeable(dlq_config.perm):
                return request.response(ResponseCode.NO_PERMISSION, f"the topic[{dlq}] sending message is forbidden")
            inner.topic = dlq
            inner.queue_id = 0
            inner.properties.pop(PROPERTY_DELAY_TIME_LEVEL, None)
            inner.encoded = None
            log.info("message for %s exceeded %d reconsume times: moved to %s", header.topic, max_times, dlq)
        return None

    def _body_too_large(self, request: RemotingCommand, what: str) -> RemotingCommand | None:
        """MESSAGE_ILLEGAL when the request body (one message, or a whole batch) is over ``maxMessageSize``
        bytes (``AbstractSendMessageProcessor.msgCheck``); ``what`` words the size in the remark."""
        limit = self.broker.config.max_message_size
        if len(request.body) <= limit:
            return None
        return request.response(
            ResponseCode.MESSAGE_ILLEGAL,
            f"the message body size over max value, MAX: {limit} ({what} {len(request.body)} bytes)",
        )

    # -- single ----------------------------------------------------------------------------

    def _prepare(
        self, request: RemotingCommand, conn: RemotingConnection, header: SendMessageRequestHeader
    ) -> RemotingCommand | Prepared:
        """Check a send, single or batch: the refusal, or the message(s) to store."""
        checked = self._check(request, conn, header)
        if isinstance(checked, RemotingCommand):
            return checked
        if header.batch:
            return self._prepare_batch(request, conn, header, checked)
        return self._prepare_single(request, conn, header, checked)

    def _prepare_single(
        self, request: RemotingCommand, conn: RemotingConnection, header: SendMessageRequestHeader,
        topic_config: TopicConfig,
    ) -> RemotingCommand | MessageInner:
        """Check a single send to ``topic_config`` (which passed :meth:`_check`): the refusal, or the
        message to store."""
        broker = self.broker
        too_large = self._body_too_large(request, "got")
        if too_large is not None:
            return too_large
        body = request.body
        text = header.properties
        props_size = len(text) if text.isascii() else len(text.encode())
        if props_size > MAX_PROPERTIES_SIZE:
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message properties size over max value, MAX: {MAX_PROPERTIES_SIZE} (got {props_size} bytes)",
            )
        properties = decode_properties(text)
        half = is_half_message(properties, header.sys_flag)
        if half and broker.config.reject_transaction_message:
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker.config.broker_ip1}] sending transaction message is forbidden",
            )
        cluster = broker.config.broker_cluster_name
        encoded = None if PROPERTY_CLUSTER in properties else with_cluster(text, len(properties), cluster)
        properties[PROPERTY_CLUSTER] = cluster
        queue_id = header.queue_id if header.queue_id >= 0 else self._pick_queue(header, topic_config)
        inner = MessageInner(  # positional: a compiled MessageInner parses keywords far more slowly
            header.topic, queue_id, body, properties, header.flag, header.sys_flag, header.born_timestamp,
            conn.peer, header.reconsume_times, None, encoded,
        )
        refused = self._retry_or_dlq(request, header, inner)
        if refused is not None:
            return refused
        if half and not (header.reconsume_times > 0 and inner.delay_level > 0):  # (Apache: clients < 4.6.1)
            # A transactional half message: stored to RMQ_SYS_TRANS_HALF_TOPIC (rocket.broker.transaction).
            broker.transaction.ensure_topics()
            inner = half_message(inner)
        # Only the broker's CLUSTER property was added: re-measure only when that could matter.
        margin = 64 + len(broker.config.broker_cluster_name)
        if props_size + margin > MAX_PROPERTIES_SIZE and inner.properties_too_long():
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message properties size over max value, MAX: {MAX_PROPERTIES_SIZE}",
            )
        return inner

    # -- batch -------------------------------------------------------------------------------

    def _prepare_batch(
        self, request: RemotingCommand, conn: RemotingConnection, header: SendMessageRequestHeader,
        topic_config: TopicConfig,
    ) -> RemotingCommand | PutMessageBatch:
        """Check a batch send to ``topic_config`` (which passed :meth:`_check`): the refusal, or the
        store batch of its messages (built here, without a :class:`MessageInner` or store request
        each: no delay, timer or transaction rewrite applies to a batch, whose items carrying those
        are refused).

        Each item is stored with the batch header's properties merged with its own (the item's
        value wins for a name both have), plus CLUSTER: what :func:`_merged_item` gives. Items
        differ mostly in their UNIQ_KEY, so the stored form of an item's other properties is
        worked out once per form (:func:`_item_form`, at most :data:`_MAX_FORMS` per batch, kept
        for the next batches with the same header properties) and each item's string is that
        form with its UNIQ_KEY value put in (bytes, no dict per item)."""
        broker = self.broker
        if header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL, f"batch request does not support retry group {header.topic}"
            )
        too_large = self._body_too_large(request, "batch of")
        if too_large is not None:
            return too_large
        try:
            flags, bodies, raw_props = split_batch(request.body)
        except MessageFormatError as exc:
            return request.response(ResponseCode.MESSAGE_ILLEGAL, f"the batch body is corrupt: {exc}")
        batch_text = header.properties
        batch_props = decode_properties(batch_text)
        refusal = _batch_refusal(batch_props, header.sys_flag)
        if refusal is not None:
            return request.response(ResponseCode.MESSAGE_ILLEGAL, refusal)
        cluster = broker.config.broker_cluster_name
        props: list[bytes] = []
        tags_codes: list[int] = []
        keys: list[list[str]] = []
        uniq_keys: list[str | None] = []
        batch_key, forms, volatile = self._kept_forms(batch_text, cluster)
        worked_out = 0

        def form_of(rest: bytes, cut: int) -> ItemForm | None:
            nonlocal worked_out
            worked_out += 1
            if worked_out > _MAX_FORMS:
                return None
            form = _item_form(batch_text, batch_props, rest, cut, cluster)
            if volatile is not None and (cut < 0 or form is None):  # (None: the header's value may be why)
                volatile.append(rest)
            return form

        wait = indexed = False
        index = 0
        count = len(raw_props)
        try:
            while True:
                index, some_wait, some_indexed = apply_item_forms(raw_props, index, forms, form_of, props,
                                                                  tags_codes, keys, uniq_keys)
                wait = wait or some_wait
                indexed = indexed or some_indexed
                if index >= count:
                    break
                # The general way (odd strings, a refusal, or too long): merge the dicts for this item.
                general = _general_item(batch_props, raw_props[index], cluster, index)
                if isinstance(general, str):
                    return request.response(ResponseCode.MESSAGE_ILLEGAL, general)
                encoded, tags_code, item_keys, uniq, item_wait = general
                props.append(encoded)
                tags_codes.append(tags_code)
                keys.append(item_keys)
                uniq_keys.append(uniq)
                wait = wait or item_wait
                indexed = indexed or uniq is not None or bool(item_keys)
                index += 1
        finally:
            if worked_out > _MAX_FORMS:  # (None stands for "too many forms" too: not for the next batch)
                self._forms.pop(batch_key, None)
            elif volatile:
                for rest in volatile:
                    forms.pop(rest, None)
        return PutMessageBatch(
            header.topic, self._pick_queue(header, topic_config), bodies, props, flags, tags_codes, keys, uniq_keys,
            header.sys_flag, header.born_timestamp, conn.peer, header.reconsume_times, wait, indexed,
        )

    def _kept_forms(
        self, batch_text: str, cluster: str,
    ) -> tuple[str, dict[bytes, ItemForm | None], list[bytes] | None]:
        """The item forms kept for batches whose header properties are ``batch_text``, stored for
        ``cluster``: ``(key they are kept under, forms, list to gather the forms to drop after the
        batch, or None)``.

        A producer's batches look alike but for the header's own UNIQ_KEY (the Java client gives
        each batch one). An item with a UNIQ_KEY of its own overrides it, so its form is kept under
        the header without that value; the forms of items without one carry the header's value, so
        they go in the list and are dropped after the batch. A new cluster name starts afresh."""
        if cluster != self._forms_cluster or len(self._forms) >= _MAX_CACHED_HEADERS:
            self._forms.clear()
            self._forms_cluster = cluster
        batch_key = batch_text
        volatile: list[bytes] | None = None
        i = batch_text.find(_UNIQ_KEY_PIECE)
        if i >= 0 and (i == 0 or batch_text[i - 1] == PROPERTY_SEPARATOR):
            j = i + len(_UNIQ_KEY_PIECE)
            k = batch_text.find(PROPERTY_SEPARATOR, j)
            batch_key = batch_text[:j] + batch_text[k:] if k >= 0 else batch_text[:j]
            volatile = []
        forms = self._forms.get(batch_key)
        if forms is None or len(forms) >= _MAX_CACHED_FORMS:
            forms = self._forms[batch_key] = {}
        return batch_key, forms, volatile

    # -- send back -----------------------------------------------------------------------------

    async def process_send_back(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """CONSUMER_SEND_MSG_BACK: re-store a message a consumer failed on, to the
        retry topic with a delay (level ``3 + reconsumeTimes`` unless given), or to
        the dead-letter topic after ``maxReconsumeTimes`` attempts (or ``delayLevel < 0``).
        """
        broker = self.broker
        cfg = broker.config
        header = ConsumerSendMsgBackRequestHeader.parse(request)
        problem = header.problem()
        if problem is not None:
            return request.response(ResponseCode.INVALID_PARAMETER, problem)
        group_config = broker.find_subscription_group(header.group)
        if group_config is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {header.group}"
            )
        if cfg.is_slave or broker.shutting_down or broker.ha.refuse_writes() is not None:
            return request.response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"the broker[{cfg.broker_name}] cannot store messages now (slave or shutting down)",
            )
        if not is_writeable(cfg.broker_permission):
            return request.response(
                ResponseCode.NO_PERMISSION, f"the broker[{cfg.broker_ip1}] sending message is forbidden"
            )
        if group_config.retry_queue_nums <= 0:
            return request.response(ResponseCode.SUCCESS)
        new_topic = retry_topic(header.group)
        topic_config = broker.topics.create_in_send_back(
            new_topic, group_config.retry_queue_nums, PERM_READ | PERM_WRITE
        )
        if not is_writeable(topic_config.perm):
            return request.response(ResponseCode.NO_PERMISSION, f"the topic[{new_topic}] sending message is forbidden")
        msg = broker.store.look_message_by_offset(header.offset)
        if msg is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}")
        properties = dict(msg.properties)
        properties.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        delay_level = header.delay_level
        max_times = group_config.retry_max_times
        if header.max_reconsume_times is not None:
            max_times = header.max_reconsume_times
        queue_id = random.randrange(max(1, topic_config.write_queue_nums))
        if msg.reconsume_times >= max_times or delay_level < 0:
            new_topic = dlq_topic(header.group)
            dlq_config = broker.topics.create_in_send_back(new_topic, 1, PERM_READ | PERM_WRITE)
            if not is_writeable(dlq_config.perm):
                return request.response(
                    ResponseCode.NO_PERMISSION, f"the topic[{new_topic}] sending message is forbidden"
                )
            queue_id = 0
            properties.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        else:
            if delay_level == 0:
                delay_level = 3 + msg.reconsume_times
            properties[PROPERTY_DELAY_TIME_LEVEL] = str(broker.schedule.clamp_level(delay_level))
        origin = header.origin_msg_id or properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or msg.msg_id
        properties[PROPERTY_ORIGIN_MESSAGE_ID] = origin
        properties[PROPERTY_CLUSTER] = cfg.broker_cluster_name
        inner = MessageInner(
            topic=new_topic,
            queue_id=queue_id,
            body=msg.body,
            properties=properties,
            flag=msg.flag,
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            reconsume_times=msg.reconsume_times + 1,
        )
        result = await broker.put_message(inner)
        code, remark = put_result_response(request, result)
        if code in (
            ResponseCode.SUCCESS,
            ResponseCode.FLUSH_DISK_TIMEOUT,
            ResponseCode.FLUSH_SLAVE_TIMEOUT,
            ResponseCode.SLAVE_NOT_AVAILABLE,
        ):
            broker.record_put(new_topic, 1, len(msg.body))
            return request.response(ResponseCode.SUCCESS)
        return request.response(code, remark)
