"""Transactional messages: half messages, END_TRANSACTION and the check-back service.

The design is Apache RocketMQ's (``TransactionalMessageBridge``,
``TransactionalMessageServiceImpl``, ``TransactionalMessageCheckService``,
``DefaultTransactionalMessageCheckListener``, ``EndTransactionProcessor``):

* A send whose property ``TRAN_MSG`` is ``true`` (or whose sysFlag says
  TRANSACTION_PREPARED) is a **half message**: it is stored to
  ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with the real topic and queue in
  ``REAL_TOPIC``/``REAL_QID`` and the transaction bits of its sysFlag cleared
  (:func:`half_message`), so consumers of the real topic never see it. The
  send answer carries the half topic's queue offset (``tranStateTableOffset``)
  and the stored message's offsetMsgId (its CommitLog offset).
* END_TRANSACTION (37) names the half message by CommitLog offset. Commit
  re-puts it to its real topic and queue (:func:`committed_message`: same body,
  properties, keys and UNIQ_KEY; sysFlag TRANSACTION_COMMIT; REAL_TOPIC/REAL_QID
  dropped, ``TRAN_MSG`` and ``PGROUP`` kept) and then writes an **op message**;
  rollback writes only the op message. An op message goes to
  ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0 with tag ``d`` and, as body, the
  half message's queue offset(s) as decimal text separated by ``,``
  (:func:`op_body`, :func:`parse_op_body`).
* The check-back service runs on masters only, every
  ``transactionCheckInterval`` ms. It keeps two consume offsets of the system
  group ``CID_RMQ_SYS_TRANS`` (in the broker's consumer offsets, so they
  survive restarts and are copied to slaves): how far the half queue is
  settled and how far the op queue is. Each run reads the op messages from the
  op offset (:class:`OpScan`), then walks the half queue: a half message with
  an op is done; one older than ``transactionTimeOut`` ms (or its
  ``CHECK_IMMUNITY_TIME_IN_SECONDS``) without an op is written again at the
  end of the half queue with ``TRANSACTION_CHECK_TIMES`` + 1 and that copy is
  checked: CHECK_TRANSACTION_STATE (39) goes, oneway, to a live connection of
  the message's producer group (``PGROUP``, from producer heartbeats), whose
  producer answers with END_TRANSACTION (``fromTransactionCheck`` true).
  After ``transactionCheckMax`` checks the half message is discarded to
  ``TRANS_CHECK_MAX_TIME_TOPIC``. The walk stops at the first half message that
  is not due yet (or was stored during this run), and both offsets are
  committed (:func:`check_verdict` decides per message).

Differences from Apache, each on purpose:

* One op message per END_TRANSACTION, written at once (RocketMQ 4.9.8; 5.x
  batches them for ``transactionOpBatchInterval``).
* An END_TRANSACTION for a half message that already has an op, or that the
  check service already moved past (an older copy of a checked message), is
  answered SYSTEM_ERROR and changes nothing; Apache would store the message to
  its topic once more. This keeps a commit delivered once when a late commit
  and a check-back answer cross.
* A half message whose ``CHECK_IMMUNITY_TIME_IN_SECONDS`` has not passed stops
  the walk like any message that is not due (Apache re-writes it to the end of
  the half queue).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import random
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter

from rocket.broker.inner import MessageInner
from rocket.broker.tasks import TaskGroup
from rocket.broker.topics import RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC
from rocket.message import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_NOT_TYPE,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    MessageExt,
    MessageFormatError,
    decode_record,
    encode_properties,
    encode_record,
)
from rocket.protocol.codes import PERM_READ, PERM_WRITE, ResponseCode
from rocket.remoting import HeaderFieldError, RemotingCommand, RemotingConnection, RemotingError, RequestCode
from rocket.store.api import GetMessageStatus, PutMessageStatus

if TYPE_CHECKING:
    from rocket.broker.interfaces import TransactionBroker

log = logging.getLogger("rocket.broker.transaction")

#: Half messages wait here (queue 0); ``TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC``.
HALF_TOPIC = RMQ_SYS_TRANS_HALF_TOPIC
#: Op messages (one per finished transaction) go here (queue 0).
OP_TOPIC = RMQ_SYS_TRANS_OP_HALF_TOPIC
#: The system consumer group whose offsets record the check service's progress (``MixAll.CID_SYS_RMQ_TRANS``).
CHECK_GROUP = "CID_RMQ_SYS_TRANS"
#: Tag of op messages that remove half messages (``TransactionalMessageUtil.REMOVE_TAG``).
REMOVE_TAG = "d"
#: Separator of the queue offsets in an op message body (``TransactionalMessageUtil.OFFSET_SEPARATOR``).
OFFSET_SEPARATOR = ","
#: Op messages read per store call.
OP_BATCH = 32
#: Longest time one check run may take (``MAX_PROCESS_TIME_LIMIT``, 60 s), seconds.
MAX_RUN_SECONDS = 60.0
_TRAN_BITS = 0xC
_STORED = {
    PutMessageStatus.PUT_OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
}


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- message rewrites (pure) ----------------------------------------------------------------------


def is_half_message(properties: dict[str, str], sys_flag: int) -> bool:
    """True for a transactional half message: ``TRAN_MSG`` is ``true`` (what Apache's
    SendMessageProcessor tests) or the sysFlag's transaction bits say PREPARED."""
    flag = properties.get(PROPERTY_TRANSACTION_PREPARED)
    return (flag is not None and flag.lower() == "true") or (sys_flag & _TRAN_BITS) == SYSFLAG_TRANSACTION_PREPARED


def half_message(inner: MessageInner) -> MessageInner:
    """The half message to store for a transactional send (``parseHalfMessageInner``):
    topic ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, ``REAL_TOPIC``/``REAL_QID`` = the
    original topic and queue, ``__transactionId__`` = UNIQ_KEY, transaction bits of the
    sysFlag cleared (so the store indexes it), ``DELAY`` dropped (transactional
    messages are never delayed, as the Java client ensures)."""
    props = dict(inner.properties)
    uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    if uniq:
        props[PROPERTY_TRANSACTION_ID] = uniq
    props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    props[PROPERTY_REAL_TOPIC] = inner.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(inner.queue_id)
    return dataclasses.replace(
        inner,
        topic=HALF_TOPIC,
        queue_id=0,
        properties=props,
        sys_flag=(inner.sys_flag & ~_TRAN_BITS) | SYSFLAG_TRANSACTION_NOT_TYPE,
        encoded=None,
        tags_code=None,
    )


def real_target(msg: MessageExt) -> tuple[str, int]:
    """``(REAL_TOPIC, REAL_QID)`` of a half message. Raises ``ValueError`` when absent or bad."""
    topic = msg.properties.get(PROPERTY_REAL_TOPIC)
    qid = msg.properties.get(PROPERTY_REAL_QUEUE_ID, "")
    if not topic or not qid.isdigit():
        raise ValueError(f"half message at {msg.physical_offset} lacks REAL_TOPIC/REAL_QID")
    return topic, int(qid)


def committed_message(msg: MessageExt) -> MessageInner:
    """The message a commit stores (``EndTransactionProcessor.endMessageTransaction``): the
    half message's body, flag, born time and host, reconsume times and properties (keys,
    tags, UNIQ_KEY, ``TRAN_MSG``, ``PGROUP``) to its real topic and queue, without
    REAL_TOPIC/REAL_QID and the check bookkeeping; sysFlag TRANSACTION_COMMIT.
    Raises ``ValueError`` when the half message has no real topic."""
    topic, queue_id = real_target(msg)
    props = dict(msg.properties)
    for name in (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TRANSACTION_CHECK_TIMES,
                 PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET):
        props.pop(name, None)
    return MessageInner(
        topic=topic,
        queue_id=queue_id,
        body=msg.body,
        properties=props,
        flag=msg.flag,
        sys_flag=(msg.sys_flag & ~_TRAN_BITS) | SYSFLAG_TRANSACTION_COMMIT,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        reconsume_times=msg.reconsume_times,
    )


def renewed_half_message(msg: MessageExt, check_times: int) -> MessageInner:
    """A copy of half message ``msg`` for the end of the half queue (``renewHalfMessageInner``)
    with ``TRANSACTION_CHECK_TIMES`` = ``check_times``."""
    props = dict(msg.properties)
    props[PROPERTY_TRANSACTION_CHECK_TIMES] = str(check_times)
    return MessageInner(
        topic=HALF_TOPIC, queue_id=0, body=msg.body, properties=props, flag=msg.flag, sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp, born_host=msg.born_host, reconsume_times=msg.reconsume_times,
    )


def discarded_message(msg: MessageExt) -> MessageInner:
    """Where a half message checked too often goes (``DefaultTransactionalMessageCheckListener``):
    ``TRANS_CHECK_MAX_TIME_TOPIC`` queue 0, everything else as stored."""
    return MessageInner(
        topic=TRANS_CHECK_MAX_TIME_TOPIC, queue_id=0, body=msg.body, properties=dict(msg.properties),
        flag=msg.flag, sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
        reconsume_times=msg.reconsume_times,
    )


def op_body(half_offsets: Iterable[int]) -> bytes:
    """The body of an op message: the half queue offsets, ``,``-separated (``getOpMessage``)."""
    return OFFSET_SEPARATOR.join(str(o) for o in half_offsets).encode()


def parse_op_body(body: bytes) -> list[int]:
    """The half queue offsets in an op message body (4.x ``"12"`` and 5.x ``"12,13,"`` forms);
    pieces that are not non-negative integers are skipped."""
    out: list[int] = []
    for piece in body.decode("utf-8", "replace").split(OFFSET_SEPARATOR):
        piece = piece.strip()
        if piece.isascii() and piece.isdigit():  # str.isdigit is also true for "²", which int() refuses
            out.append(int(piece))
    return out


def check_times(msg: MessageExt) -> int:
    """``TRANSACTION_CHECK_TIMES`` of a half message (0 when never checked or unreadable)."""
    text = msg.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES, "")
    return int(text) if text.isdigit() else 0


def immunity_ms(msg: MessageExt, transaction_timeout_ms: int) -> int:
    """How old (ms since born) a half message must be before it is checked: its
    ``CHECK_IMMUNITY_TIME_IN_SECONDS`` in ms, never less than ``transactionTimeOut``
    (``TransactionalMessageUtil.getImmunityTime``)."""
    text = msg.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
    if text is None:
        return transaction_timeout_ms
    try:
        value = int(text) * 1000
    except ValueError:
        value = 0
    return max(value, transaction_timeout_ms)


# -- check selection (pure) -------------------------------------------------------------------------


class OpScan:
    """The op messages read so far in one check run (``fillOpRemoveMap``).

    ``min_half_offset`` is the half queue's settled offset: ops naming smaller
    offsets are stale. :attr:`remove` maps a half offset to the op queue offset
    that finished it; an op message is *done* once every half offset it names
    was passed (or it named none), and :meth:`next_op_offset` advances the op
    queue's offset over the leading done ones (``calculateOpOffset``).
    """

    def __init__(self, min_half_offset: int) -> None:
        self.min_half_offset = min_half_offset
        self.remove: dict[int, int] = {}
        self._pending: dict[int, set[int]] = {}
        self.done_ops: set[int] = set()

    def add(self, op_offset: int, tags: str | None, body: bytes) -> None:
        """Record the op message at ``op_offset`` (tag ``d`` expected; others are done at once)."""
        names: set[int] = set()
        if tags == REMOVE_TAG:
            for half in parse_op_body(body):
                if half >= self.min_half_offset:
                    self.remove[half] = op_offset
                    names.add(half)
        else:
            log.error("op message at %d has tag %r, not %r; ignored", op_offset, tags, REMOVE_TAG)
        if names:
            self._pending.setdefault(op_offset, set()).update(names)
        else:
            self.done_ops.add(op_offset)

    def finished(self, half_offset: int) -> bool:
        """True when an op names ``half_offset``; it then counts as passed (see :meth:`next_op_offset`)."""
        op = self.remove.pop(half_offset, None)
        if op is None:
            return False
        left = self._pending.get(op)
        if left is not None:
            left.discard(half_offset)
            if not left:
                del self._pending[op]
                self.done_ops.add(op)
        return True

    def next_op_offset(self, old: int) -> int:
        """The op queue offset to commit: ``old`` moved over consecutive done op offsets."""
        offset = old
        while offset in self.done_ops:
            offset += 1
        return offset


class Verdict(enum.Enum):
    """What the check walk does with one half message that has no op."""

    WAIT = "wait"  #: not due yet (or stored during this run): stop the walk here
    CHECK = "check"  #: write a copy and check it back with the producer group
    DISCARD = "discard"  #: checked too often, or older than the store keeps files: give up


def check_verdict(msg: MessageExt, *, now_ms: int, run_started_ms: int, transaction_timeout_ms: int,
                  check_max: int, file_reserved_ms: int) -> Verdict:
    """Decide about a half message without an op (``TransactionalMessageServiceImpl.check``):
    WAIT when it was stored after the run began or is younger than its immunity
    (:func:`immunity_ms`; a born time in the future counts as due, as Apache's
    ``valueOfCurrentMinusBorn <= -1``), DISCARD after ``check_max`` checks or when
    older than ``file_reserved_ms``, else CHECK."""
    if msg.store_timestamp >= run_started_ms:
        return Verdict.WAIT
    age = now_ms - msg.born_timestamp
    if check_times(msg) >= check_max or age > file_reserved_ms:
        return Verdict.DISCARD
    if 0 <= age <= immunity_ms(msg, transaction_timeout_ms):
        return Verdict.WAIT
    return Verdict.CHECK


# -- the service ------------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class CheckReport:
    """What one check run did (counts), and the offsets it committed."""

    half_offset: int = 0
    op_offset: int = 0
    finished: int = 0
    checked: int = 0
    no_producer: int = 0
    discarded: int = 0


class TransactionMetrics:
    """Prometheus counters of transactions, labelled by the real topic (Apache's
    ``rocketmq_half_messages``, ``_commit_messages_total``, ``_rollback_messages_total``
    as counters, plus checks and discards), prefix ``rocketmq_broker_transaction_``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        prefix = "rocketmq_broker_transaction_"
        self.half_messages = Counter(prefix + "half_messages", "Half (prepared) messages stored",
                                     ["topic"], registry=registry)
        self.commits = Counter(prefix + "commits", "Transactions committed (message stored to its topic)",
                               ["topic"], registry=registry)
        self.rollbacks = Counter(prefix + "rollbacks", "Transactions rolled back", ["topic"], registry=registry)
        self.checks = Counter(prefix + "checks", "CHECK_TRANSACTION_STATE requests sent to producers "
                              "(result=sent) or not sent for want of a live producer (result=no_producer)",
                              ["topic", "result"], registry=registry)
        self.discarded = Counter(prefix + "discarded", "Half messages given up after transactionCheckMax checks "
                                 "(moved to TRANS_CHECK_MAX_TIME_TOPIC)", ["topic"], registry=registry)
        self.end_refused = Counter(prefix + "end_refused", "END_TRANSACTION requests refused (unknown, already "
                                   "finished or mismatching half message)", registry=registry)


class TransactionalMessageService:
    """The broker's transaction state: prepare, end (commit/rollback), check back.

    State lives in the store (half and op topics, the ``CID_RMQ_SYS_TRANS``
    offsets); :attr:`finished` caches the half offsets at or after the settled
    offset that have an op (rebuilt from the op queue by :meth:`start`).
    """

    def __init__(self, broker: TransactionBroker) -> None:
        self.broker = broker
        self.metrics = TransactionMetrics(broker.metrics.registry)
        #: Half queue offsets (>= the settled offset) already committed or rolled back.
        self.finished: set[int] = set()
        self._tasks = TaskGroup("transaction")
        self._wakeup: asyncio.Event | None = None
        self._running = False
        self._lock = asyncio.Lock()
        #: During a check run: half offsets below this were passed (copied for a check, or discarded).
        self._passed = 0
        #: Committed half offsets whose op message could not be stored yet (retried by each check run).
        self._unwritten_ops: set[int] = set()
        self.runs = 0

    # -- offsets ------------------------------------------------------------------------------

    def _offset(self, topic: str) -> int:
        store = self.broker.store
        offset = self.broker.metadata.consumer_offsets.query(CHECK_GROUP, topic, 0)
        if offset is None or offset < 0:
            offset = max(0, store.get_min_offset_in_queue(topic, 0))
        return offset

    @property
    def half_offset(self) -> int:
        """The settled offset of the half queue: every half message before it is finished or moved."""
        return self._offset(HALF_TOPIC)

    @property
    def op_offset(self) -> int:
        """The op queue offset the next check run reads from."""
        return self._offset(OP_TOPIC)

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True while the check service runs (masters only)."""
        return self._running

    async def start(self) -> None:
        """Start checking back (a master, or a slave just promoted); rebuilds :attr:`finished`."""
        if self._running:
            return
        self._running = True
        try:
            scan = self.scan_ops(self.half_offset, self.op_offset, limit=None)
            self.finished = set(scan.remove) | self._unwritten_ops
        except Exception:
            log.exception("reading the op queue failed; a duplicate END_TRANSACTION may be re-applied")
        self._wakeup = asyncio.Event()
        self._tasks.spawn(self._loop(), name="transaction-check")
        log.info("transaction check service started (every %d ms, timeout %d ms, max %d checks)",
                 self.broker.config.transaction_check_interval, self.broker.config.transaction_time_out,
                 self.broker.config.transaction_check_max)

    async def stop(self) -> None:
        """Stop checking back (shutdown or demotion to slave)."""
        if not self._running:
            return
        self._running = False
        await self._tasks.cancel_all()
        log.info("transaction check service stopped")

    def wakeup(self) -> None:
        """Run a check now (tests, admin)."""
        if self._wakeup is not None:
            self._wakeup.set()

    async def _loop(self) -> None:
        assert self._wakeup is not None
        while True:
            interval = max(self.broker.config.transaction_check_interval, 10) / 1000.0
            try:
                async with asyncio.timeout(interval):
                    await self._wakeup.wait()
            except TimeoutError:
                pass
            self._wakeup.clear()
            if not self.broker.config.is_master or self.broker.ha.refuse_writes() is not None:
                continue
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction check failed")

    def status(self) -> dict[str, object]:
        """The /api/v1/status ``transactions`` document: whether checks run here, the half and op
        queues' settled offsets (``CID_RMQ_SYS_TRANS``) and ends, and check runs so far."""
        store = self.broker.store
        return {
            "checkServiceRunning": self._running,
            "halfOffset": self.half_offset,
            "halfMaxOffset": max(0, store.get_max_offset_in_queue(HALF_TOPIC, 0)),
            "opOffset": self.op_offset,
            "opMaxOffset": max(0, store.get_max_offset_in_queue(OP_TOPIC, 0)),
            "checkRuns": self.runs,
        }

    # -- store access ------------------------------------------------------------------------------

    def _read(self, topic: str, offset: int, count: int) -> tuple[list[MessageExt], int, int]:
        """``(messages, next offset, max offset)`` of queue 0 of ``topic`` from ``offset``."""
        result = self.broker.store.get_message(topic, 0, offset, count)
        if result.status is not GetMessageStatus.FOUND:
            nxt = offset
            if offset < result.min_offset:
                nxt = result.min_offset
            return [], nxt, result.max_offset
        msgs: list[MessageExt] = []
        for record in result.records:
            try:
                msgs.append(decode_record(record))
            except MessageFormatError as exc:
                log.error("undecodable record in %s: %s", topic, exc)
        return msgs, result.next_begin_offset, result.max_offset

    def scan_ops(self, half_offset: int, op_offset: int, limit: int | None = OP_BATCH) -> OpScan:
        """An :class:`OpScan` of the op queue from ``op_offset`` (``limit`` ops at most; None: all)."""
        scan = OpScan(half_offset)
        self._scan_more(scan, op_offset, limit)
        return scan

    def _scan_more(self, scan: OpScan, offset: int, limit: int | None) -> int:
        """Add up to ``limit`` op messages from ``offset``; the next offset to read."""
        read = 0
        while limit is None or read < limit:
            msgs, nxt, _ = self._read(OP_TOPIC, offset, OP_BATCH)
            if not msgs:
                return nxt
            for msg in msgs:
                scan.add(msg.queue_offset, msg.tags, msg.body)
            read += len(msgs)
            offset = nxt
        return offset

    # -- prepare and end ------------------------------------------------------------------------

    def on_half_stored(self, inner: MessageInner) -> None:
        """Account a stored half message (its REAL_TOPIC)."""
        self.metrics.half_messages.labels(inner.properties.get(PROPERTY_REAL_TOPIC, "")).inc()

    def ensure_topics(self) -> None:
        """Create the half and op topics (one queue, read-write) if missing, as Apache's bridge does."""
        topics = self.broker.topics
        for topic in (HALF_TOPIC, OP_TOPIC):
            topics.create_in_send_back(topic, 1, PERM_READ | PERM_WRITE)

    async def end_transaction(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand | None:
        """END_TRANSACTION (37), ``EndTransactionProcessor``: see the module doc.

        Header: ``producerGroup``, ``tranStateTableOffset`` (the half queue offset),
        ``commitLogOffset``, ``commitOrRollback`` (0 unknown, 8 commit, 12 rollback),
        ``fromTransactionCheck``, ``msgId``, ``transactionId``. Answers (nothing for
        ``commitOrRollback`` 0 or another value, as Apache): SLAVE_NOT_AVAILABLE on a
        slave; SYSTEM_ERROR "Find prepared transaction message failed" for an offset
        that holds no half message, "The producer group wrong" / "The transaction state
        table offset wrong" / "The commit log offset wrong" for a mismatching header, or
        that the transaction already ended; ILLEGAL_OPERATION (604) for a producer's own
        commit/rollback after its CHECK_IMMUNITY_TIME_IN_SECONDS; else the outcome of
        storing the committed message (SUCCESS).
        """
        broker = self.broker
        try:
            group = request.require("producerGroup")
            table_offset = request.require_int("tranStateTableOffset")
            commit_log_offset = request.require_int("commitLogOffset")
            action = request.require_int("commitOrRollback")
            from_check = request.get_bool("fromTransactionCheck", False)
        except HeaderFieldError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        refused = await self._role_refusal(request)
        if refused is not None:
            return refused
        what = "commit" if action == SYSFLAG_TRANSACTION_COMMIT else "rollback"
        if action not in (SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_ROLLBACK):
            if action == SYSFLAG_TRANSACTION_NOT_TYPE:
                log.info("producer %s (group %s) does not know the state of transaction %s yet%s%s", conn.peer,
                         group, request.get("msgId"), " (check-back answer)" if from_check else "",
                         f": {request.remark}" if request.remark else "")
            return None
        if from_check:
            log.info("check-back answer from %s (group %s): %s %s", conn.peer, group, what, request.get("msgId"))
        msg = broker.store.look_message_by_offset(commit_log_offset)
        if msg is None or msg.topic != HALF_TOPIC or msg.physical_offset != commit_log_offset:
            return self._refuse(request, "Find prepared transaction message failed")
        refusal = self._refusal(request, msg, group, table_offset, from_check, what)
        if refusal is not None:
            return refusal
        try:
            topic, _ = real_target(msg)
        except ValueError as exc:
            return self._refuse(request, str(exc))
        self.finished.add(msg.queue_offset)  # claimed: a concurrent duplicate is refused
        ok = False
        try:
            if action == SYSFLAG_TRANSACTION_COMMIT:
                inner = committed_message(msg)
                result = await broker.put_message(inner)
                if result.status not in _STORED or not result.messages:
                    code = ResponseCode.SERVICE_NOT_AVAILABLE if result.status in (
                        PutMessageStatus.SERVICE_NOT_AVAILABLE, PutMessageStatus.CREATE_MAPPED_FILE_FAILED
                    ) else ResponseCode.SYSTEM_ERROR
                    return request.response(code, f"storing the committed message failed: {result.status.value}"
                                            f"{': ' + result.remark if result.remark else ''}")
                broker.record_put(inner.topic, 1, len(inner.body))
            if not await self._write_op([msg.queue_offset]):
                if action == SYSFLAG_TRANSACTION_COMMIT:
                    # Delivered: keep it finished, and write its op from the next check run on.
                    ok = True
                    self._unwritten_ops.add(msg.queue_offset)
                    log.error("op message for half offset %d not stored; retried by the check service",
                              msg.queue_offset)
                    self.metrics.commits.labels(topic).inc()
                    return request.response(ResponseCode.SUCCESS)
                return request.response(ResponseCode.SYSTEM_ERROR, "storing the op message failed")
            ok = True
        finally:
            if not ok:
                self.finished.discard(msg.queue_offset)
        if action == SYSFLAG_TRANSACTION_COMMIT:
            self.metrics.commits.labels(topic).inc()
        else:
            self.metrics.rollbacks.labels(topic).inc()
        return request.response(ResponseCode.SUCCESS)

    async def _role_refusal(self, request: RemotingCommand) -> RemotingCommand | None:
        """The answer when this broker may not end transactions (a slave, a role change, shutting
        down), after waiting for a pending role change to settle; None when it may."""
        broker = self.broker
        if broker.config.is_slave:
            return request.response(ResponseCode.SLAVE_NOT_AVAILABLE,
                                    "the broker is a slave: end transaction is forbidden")
        if broker.ha.role_pending:
            await broker.ha.wait_role_settled()
        refused = "shutting down" if broker.shutting_down else broker.ha.refuse_writes()
        if refused is not None or broker.config.is_slave:
            return request.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                                    f"the broker cannot end transactions now: {refused or 'it is a slave now'}")
        return None

    def _refusal(self, request: RemotingCommand, msg: MessageExt, group: str, table_offset: int,
                 from_check: bool, what: str) -> RemotingCommand | None:
        """The answer refusing to end the transaction of half message ``msg``, or None to go on."""
        if not from_check and self._immunity_passed(msg):
            self.metrics.end_refused.inc()
            return request.response(
                ResponseCode.ILLEGAL_OPERATION,
                f"{what} refused: older than its CHECK_IMMUNITY_TIME_IN_SECONDS; the broker will check it back")
        if msg.properties.get(PROPERTY_PRODUCER_GROUP) != group:
            return self._refuse(request, "The producer group wrong")
        if msg.queue_offset != table_offset:
            return self._refuse(request, "The transaction state table offset wrong")
        if msg.queue_offset in self.finished or msg.queue_offset < max(self.half_offset, self._passed):
            return self._refuse(request, f"the transaction of half message {msg.queue_offset} "
                                f"(msgId {msg.msg_id}) already ended (committed, rolled back, or checked again "
                                "under a newer copy)")
        return None

    def _refuse(self, request: RemotingCommand, remark: str) -> RemotingCommand:
        self.metrics.end_refused.inc()
        log.warning("END_TRANSACTION %s refused: %s", dict(request.ext_fields), remark)
        return request.response(ResponseCode.SYSTEM_ERROR, remark)

    def _immunity_passed(self, msg: MessageExt) -> bool:
        """``rejectCommitOrRollback``: a custom immunity time is set and has passed."""
        if msg.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS) is None:
            return False
        return _now_ms() - msg.born_timestamp > immunity_ms(msg, self.broker.config.transaction_time_out)

    async def _write_op(self, half_offsets: list[int]) -> bool:
        inner = MessageInner(
            topic=OP_TOPIC, queue_id=0, body=op_body(half_offsets), properties={PROPERTY_TAGS: REMOVE_TAG},
            born_timestamp=_now_ms(), born_host=self.broker.store.config.store_host,
        )
        self.ensure_topics()
        result = await self.broker.put_message(inner)
        return result.status in _STORED and bool(result.messages)

    # -- check back ----------------------------------------------------------------------------------

    async def check(self) -> CheckReport:
        """One check run over the half queue (see the module doc); runs are serialised."""
        async with self._lock:
            self.runs += 1
            return await self._check()

    async def _retry_unwritten_ops(self) -> None:
        """Write the op message of committed transactions whose op could not be stored earlier."""
        if self._unwritten_ops:
            pending = sorted(self._unwritten_ops)
            if await self._write_op(pending):
                self._unwritten_ops.difference_update(pending)

    async def _act(self, msg: MessageExt, verdict: Verdict, report: CheckReport) -> bool:
        """Discard ``msg`` or check it back with its producer group, counting it in ``report``.

        False when the discarded message or the half message's new copy could not be stored.
        """
        if verdict is Verdict.DISCARD:
            if not await self._discard(msg):
                return False
            report.discarded += 1
            return True
        sent = await self._check_back(msg)
        if sent is None:
            return False
        report.checked += 1
        if not sent:
            report.no_producer += 1
        return True

    async def _check(self) -> CheckReport:
        broker = self.broker
        cfg = broker.config
        store = broker.store
        report = CheckReport()
        if store.find_consume_queue(HALF_TOPIC, 0) is None:
            return report
        await self._retry_unwritten_ops()
        started = time.monotonic()
        run_started_ms = _now_ms()
        half_offset = self.half_offset
        op_offset = self.op_offset
        scan = OpScan(half_offset)
        next_op = self._scan_more(scan, op_offset, OP_BATCH)
        ops_exhausted = False
        reserved_ms = int(getattr(store.config, "file_reserved_time_hours", 72.0) * 3_600_000)
        i = half_offset
        while time.monotonic() - started < MAX_RUN_SECONDS and self._running_or_called():
            if scan.finished(i):
                report.finished += 1
                i += 1
                continue
            if i in self.finished:
                break  # an END_TRANSACTION for it is being stored right now: look again next run
            msgs, nxt, max_offset = self._read(HALF_TOPIC, i, 1)
            if not msgs:
                if i < nxt <= max_offset:  # expired, removed or undecodable: move on
                    i = nxt
                    continue
                break
            msg = msgs[0]
            verdict = check_verdict(msg, now_ms=_now_ms(), run_started_ms=run_started_ms,
                                    transaction_timeout_ms=cfg.transaction_time_out,
                                    check_max=cfg.transaction_check_max, file_reserved_ms=reserved_ms)
            if verdict is Verdict.WAIT:
                break
            if not ops_exhausted:
                # Before acting on a half message without an op, read every op written so far.
                before = next_op
                next_op = self._scan_more(scan, next_op, None)
                ops_exhausted = True
                if next_op != before:
                    continue
            # Passed from here on: an END_TRANSACTION for this copy that arrives while the copy
            # (or the discarded message) is being stored is refused, the producer answers the check.
            self._passed = i + 1
            if not await self._act(msg, verdict, report):
                self._passed = i
                break  # the copy or the discarded message could not be stored: try again next run
            i += 1
        new_op = scan.next_op_offset(op_offset)
        if i != half_offset:
            self.broker.metadata.consumer_offsets.commit(CHECK_GROUP, HALF_TOPIC, 0, i)
        if new_op != op_offset:
            self.broker.metadata.consumer_offsets.commit(CHECK_GROUP, OP_TOPIC, 0, new_op)
        self.finished = {o for o in self.finished if o >= i} | set(scan.remove)
        self._passed = 0
        report.half_offset, report.op_offset = i, new_op
        if report.checked or report.discarded or report.finished:
            log.info("transaction check: %d finished, %d checked back (%d without a live producer), %d discarded; "
                     "half offset %d -> %d, op offset %d -> %d", report.finished, report.checked,
                     report.no_producer, report.discarded, half_offset, i, op_offset, new_op)
        return report

    def _running_or_called(self) -> bool:
        return self.broker.config.is_master and not self.broker.shutting_down

    async def _discard(self, msg: MessageExt) -> bool:
        topic = msg.properties.get(PROPERTY_REAL_TOPIC, "")
        log.error("half message %s (offset %d, real topic %s) was checked %d times: moved to %s",
                  msg.msg_id, msg.queue_offset, topic, check_times(msg), TRANS_CHECK_MAX_TIME_TOPIC)
        self.broker.topics.create_in_send_back(TRANS_CHECK_MAX_TIME_TOPIC, 1, PERM_READ | PERM_WRITE)
        result = await self.broker.put_message(discarded_message(msg))
        if result.status not in _STORED:
            log.error("moving half message %d to %s failed: %s", msg.queue_offset, TRANS_CHECK_MAX_TIME_TOPIC,
                      result.status)
            return False
        self.metrics.discarded.labels(topic).inc()
        return True

    async def _check_back(self, msg: MessageExt) -> bool | None:
        """Write the copy of ``msg`` and send CHECK_TRANSACTION_STATE for it. None when the copy was
        not stored; else whether a producer of its group was found."""
        broker = self.broker
        copy = renewed_half_message(msg, check_times(msg) + 1)
        result = await broker.put_message(copy)
        if result.status not in _STORED or not result.messages:
            log.error("re-writing half message %d for its check failed: %s", msg.queue_offset, result.status)
            return None
        put = result.messages[0]
        topic, queue_id = real_target_or_half(msg)
        group = msg.properties.get(PROPERTY_PRODUCER_GROUP, "")
        conn = self.producer_channel(group)
        if conn is None:
            log.warning("no live producer of group %s to check transaction %s (half offset %d)", group,
                        msg.msg_id, put.queue_offset)
            self.metrics.checks.labels(topic, "no_producer").inc()
            return False
        uniq = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")
        body = encode_record(
            topic=topic, queue_id=queue_id, body=copy.body, properties=encode_properties(copy.properties),
            flag=copy.flag, sys_flag=copy.sys_flag, born_timestamp=copy.born_timestamp, born_host=copy.born_host,
            store_timestamp=put.store_timestamp, store_host=broker.store.config.store_host,
            reconsume_times=copy.reconsume_times, queue_offset=put.queue_offset,
            physical_offset=put.physical_offset,
        )
        fields = {
            "topic": topic,
            "tranStateTableOffset": str(put.queue_offset),
            "commitLogOffset": str(put.physical_offset),
            "msgId": uniq,
            "transactionId": msg.properties.get(PROPERTY_TRANSACTION_ID, uniq),
            "offsetMsgId": put.msg_id,
            "bname": broker.config.broker_name,
        }
        request = RemotingCommand(code=RequestCode.CHECK_TRANSACTION_STATE, ext_fields=fields, body=bytes(body),
                                  language="JAVA")
        try:
            conn.oneway(request)
        except RemotingError as exc:
            log.warning("checking transaction %s with %s failed: %s", uniq, conn.peer, exc)
            self.metrics.checks.labels(topic, "no_producer").inc()
            return False
        log.info("checking transaction %s (half offset %d, check %d) with producer %s of group %s", uniq,
                 put.queue_offset, check_times(msg) + 1, conn.peer, group)
        self.metrics.checks.labels(topic, "sent").inc()
        return True

    def producer_channel(self, group: str) -> RemotingConnection | None:
        """A live connection of producer group ``group`` (random among them, as
        ``ProducerManager.getAvailableChannel``), or None."""
        members = self.broker.producer_manager.groups.get(group, {})
        live = [conn for conn in members if not conn.closed]
        return random.choice(live) if live else None


def real_target_or_half(msg: MessageExt) -> tuple[str, int]:
    """:func:`real_target`, or the half topic's own queue when the properties lack it."""
    try:
        return real_target(msg)
    except ValueError:
        return msg.topic, msg.queue_id


__all__ = [
    "CHECK_GROUP",
    "HALF_TOPIC",
    "OP_TOPIC",
    "REMOVE_TAG",
    "CheckReport",
    "OpScan",
    "TransactionMetrics",
    "TransactionalMessageService",
    "Verdict",
    "check_verdict",
    "committed_message",
    "half_message",
    "is_half_message",
    "op_body",
    "parse_op_body",
    "renewed_half_message",
]
