"""The transactional producer: :class:`TransactionProducer` (Java's ``TransactionMQProducer``).

Usage::

    def execute(msg, arg):              # the local transaction, run after the half message is stored
        db.insert(arg)
        return LocalTransactionState.COMMIT       # or ROLLBACK, or UNKNOWN (decided by a check later)

    def check(msg):                     # the broker asks about a transaction left UNKNOWN (or unanswered)
        return LocalTransactionState.COMMIT if db.has(msg.keys[0]) else LocalTransactionState.ROLLBACK

    async with TransactionProducer("PID_ORDERS", "127.0.0.1:9876", check_listener=check) as producer:
        result = await producer.send_message_in_transaction(build_message("Orders", b"..."), execute, arg=row)

Both callbacks may be plain functions or coroutine functions; an exception counts as UNKNOWN.

Protocol (Apache RocketMQ ``DefaultMQProducerImpl.sendMessageInTransaction`` / ``endTransaction``
and ``ClientRemotingProcessor.checkTransactionState``):

* the half message is a normal send with properties ``TRAN_MSG=true`` and ``PGROUP=<group>`` and
  sysFlag TRANSACTION_PREPARED (4); ``DELAY`` is removed (transactional messages are not delayed);
* if it was not stored with SEND_OK the local transaction is not run and the state is ROLLBACK;
* END_TRANSACTION (37) then goes **oneway** to the master that stored it, with
  ``tranStateTableOffset`` (the send result's queue offset), ``commitLogOffset`` (from the
  offsetMsgId), ``commitOrRollback`` (8 commit, 12 rollback, 0 unknown), ``msgId``/``transactionId``
  (the UNIQ_KEY) and ``fromTransactionCheck=false``;
* a broker's CHECK_TRANSACTION_STATE (39) carries the half message (a stored record) in its body and
  its offsets in the header; the producer whose group is the message's ``PGROUP`` runs
  ``check_listener`` and answers with a oneway END_TRANSACTION (``fromTransactionCheck=true``) on the
  same connection. The broker sends checks to any live producer of the group, so every instance of
  a group should be able to answer for the others.

The producer heartbeats to the brokers of the topics it used (and of ``check_topics`` from the
start), which is how brokers know where to send checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rocket.client.errors import MQClientError
from rocket.client.producer import Producer, SendResult, SendStatus, _validate_message
from rocket.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_NOT_TYPE,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    Message,
    MessageExt,
    MessageFormatError,
    decode_offset_msg_id,
    decode_record,
)
from rocket.remoting import RemotingCommand, RemotingConnection, RemotingError, RequestCode

log = logging.getLogger("rocket.client.transaction")


class LocalTransactionState(enum.Enum):
    """Outcome of a local transaction (Java's ``LocalTransactionState``; values are Java's names)."""

    COMMIT = "COMMIT_MESSAGE"
    ROLLBACK = "ROLLBACK_MESSAGE"
    UNKNOWN = "UNKNOW"

    @property
    def commit_or_rollback(self) -> int:
        """The END_TRANSACTION ``commitOrRollback`` value (a transaction sysFlag)."""
        return {LocalTransactionState.COMMIT: SYSFLAG_TRANSACTION_COMMIT,
                LocalTransactionState.ROLLBACK: SYSFLAG_TRANSACTION_ROLLBACK}.get(self, SYSFLAG_TRANSACTION_NOT_TYPE)


#: ``execute(message, arg)`` → the local transaction's state (or an awaitable of it).
LocalTransactionExecutor = Callable[[Message, Any], "LocalTransactionState | Awaitable[LocalTransactionState]"]
#: ``check(message)`` → the state of the transaction of a half message the broker asks about.
TransactionCheckListener = Callable[[MessageExt], "LocalTransactionState | Awaitable[LocalTransactionState]"]


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    """A :class:`SendResult` of the half message plus the local transaction's state as sent
    to the broker; ``transaction_id`` is the message's UNIQ_KEY."""

    send_result: SendResult
    local_state: LocalTransactionState
    transaction_id: str

    @property
    def msg_id(self) -> str:
        """The client message id (UNIQ_KEY) consumers see."""
        return self.send_result.msg_id


async def _call(fn: Callable[..., Any], *args: Any) -> LocalTransactionState:
    value = fn(*args)
    if inspect.isawaitable(value):
        value = await value
    if not isinstance(value, LocalTransactionState):
        raise TypeError(f"a transaction callback returned {value!r}, not a LocalTransactionState")
    return value


class TransactionProducer(Producer):
    """A :class:`Producer` that also sends transactional messages (see the module doc).

    ``check_listener(msg)`` answers the brokers' check-backs (required: without it a
    transaction left UNKNOWN could never be decided). ``check_topics``: topics whose
    brokers are told about this producer from the start (heartbeats), so that it can
    answer checks for other instances of its group before it sends anything itself.
    Other arguments as :class:`Producer`.
    """

    def __init__(self, group: str, namesrv_addr: str = "127.0.0.1:9876", *,
                 check_listener: TransactionCheckListener, check_topics: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(group, namesrv_addr, **kwargs)
        self.check_listener = check_listener
        self.check_topics = list(check_topics)
        self._check_tasks: set[asyncio.Task[None]] = set()
        #: Check-backs answered, by state (monitoring and tests).
        self.checks_answered: dict[LocalTransactionState, int] = dict.fromkeys(LocalTransactionState, 0)
        self.client.remoting.register(RequestCode.CHECK_TRANSACTION_STATE, self._on_check)

    async def start(self) -> TransactionProducer:
        """Start, look up ``check_topics`` and heartbeat to their brokers. Returns ``self``."""
        await super().start()
        for topic in self.check_topics:
            try:
                await self._publish_info(topic)
            except MQClientError as exc:
                log.warning("%s: no route for check topic %s: %s", self.group, topic, exc)
        if self.check_topics:
            await self.client.send_heartbeat()
        return self

    async def shutdown(self) -> None:
        """Stop answering checks, then as :meth:`Producer.shutdown`."""
        for task in list(self._check_tasks):
            task.cancel()
        await super().shutdown()

    # -- sending ---------------------------------------------------------------------------------

    async def send_message_in_transaction(self, msg: Message, execute: LocalTransactionExecutor,
                                          arg: Any = None, *, timeout: float | None = None) -> TransactionSendResult:
        """Send ``msg`` as a half message, run ``execute(msg, arg)``, end the transaction.

        Returns the :class:`TransactionSendResult`. Raises as :meth:`Producer.send` when the half
        message cannot be sent at all (then nothing was stored and ``execute`` did not run).
        """
        self._check_started()
        _validate_message(msg)
        props = dict(msg.properties)
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        props[PROPERTY_PRODUCER_GROUP] = self.group
        half = Message(msg.topic, msg.body, msg.flag, props)
        body, sys_flag, props_text, uniq = self._prepare(half)
        sys_flag |= SYSFLAG_TRANSACTION_PREPARED
        result = await self._send_with_retries(
            msg.topic, body, lambda mq: self._header(msg.topic, mq.queue_id, sys_flag, msg.flag, props_text),
            RequestCode.SEND_MESSAGE_V2, uniq, queue=None, timeout=timeout,
        )
        remark: str | None = None
        if result.status is SendStatus.SEND_OK:
            half.properties[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
            try:
                state = await _call(execute, half, arg)
            except Exception as exc:
                log.warning("%s: local transaction of %s failed: %s", self.group, uniq, exc)
                state, remark = LocalTransactionState.UNKNOWN, f"executeLocalTransactionBranch exception: {exc!r}"
        else:
            state = LocalTransactionState.ROLLBACK
        try:
            await self._end_transaction(result, state, remark)
        except (RemotingError, MQClientError, MessageFormatError) as exc:
            # The broker will check the transaction back: nothing is lost.
            log.warning("%s: END_TRANSACTION for %s failed (%s); the broker will check back", self.group, uniq, exc)
        return TransactionSendResult(result, state, uniq)

    async def _end_transaction(self, result: SendResult, state: LocalTransactionState, remark: str | None) -> None:
        _, commit_log_offset = decode_offset_msg_id(result.offset_msg_id)
        addr = self.client.master_addr(result.queue.broker_name)
        if not addr:
            raise MQClientError(f"broker group {result.queue.broker_name} has no master")
        request = RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields={
            "topic": result.queue.topic,
            "producerGroup": self.group,
            "tranStateTableOffset": str(result.queue_offset),
            "commitLogOffset": str(commit_log_offset),
            "commitOrRollback": str(state.commit_or_rollback),
            "fromTransactionCheck": "false",
            "msgId": result.msg_id,
            "transactionId": result.msg_id,
            "bname": result.queue.broker_name,
        }, remark=remark)
        await self.client.remoting.invoke_oneway(addr, request)

    # -- check-backs -------------------------------------------------------------------------------

    def _on_check(self, request: RemotingCommand, conn: RemotingConnection) -> None:
        """CHECK_TRANSACTION_STATE (39): answered later, from a task (no response to the request)."""
        try:
            msg = decode_record(request.body)
        except MessageFormatError as exc:
            log.warning("%s: undecodable CHECK_TRANSACTION_STATE from %s: %s", self.group, conn.peer, exc)
            return
        group = msg.properties.get(PROPERTY_PRODUCER_GROUP)
        if group != self.group:
            log.debug("%s: check for group %s ignored", self.group, group)
            return
        task = asyncio.get_running_loop().create_task(self._answer_check(request, conn, msg))
        self._check_tasks.add(task)
        task.add_done_callback(self._check_tasks.discard)

    async def _answer_check(self, request: RemotingCommand, conn: RemotingConnection, msg: MessageExt) -> None:
        remark: str | None = None
        try:
            state = await _call(self.check_listener, msg)
        except Exception as exc:
            log.warning("%s: check listener failed for %s: %s", self.group, msg.msg_id, exc)
            state, remark = LocalTransactionState.UNKNOWN, f"checkLocalTransactionState Exception: {exc!r}"
        uniq = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.offset_msg_id
        fields = {
            "topic": request.get("topic") or msg.topic,
            "producerGroup": self.group,
            "tranStateTableOffset": request.get("tranStateTableOffset") or str(msg.queue_offset),
            "commitLogOffset": request.get("commitLogOffset") or str(msg.physical_offset),
            "commitOrRollback": str(state.commit_or_rollback),
            "fromTransactionCheck": "true",
            "msgId": uniq,
            "transactionId": request.get("transactionId") or uniq,
        }
        if request.get("bname"):
            fields["bname"] = request.get("bname") or ""
        self.checks_answered[state] += 1
        with contextlib.suppress(RemotingError):
            conn.oneway(RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=fields, remark=remark))


__all__ = [
    "LocalTransactionExecutor",
    "LocalTransactionState",
    "TransactionCheckListener",
    "TransactionProducer",
    "TransactionSendResult",
]
