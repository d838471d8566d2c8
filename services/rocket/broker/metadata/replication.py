"""Metadata changes replicated with the data: topic configs, subscription groups and consumer
offsets written as records of the system topic :data:`METADATA_TOPIC` into the master's own
CommitLog (controller mode, ``enableMetadataReplication``, on by default).

Apache RocketMQ 5 copies a master's metadata to its slaves only with ``SlaveSynchronize``
(every 10 s, and at each role change in ``ReplicasManager.changeToMaster`` /
``changeToSlave``), so what a master changed in the seconds before it died is not on the slave
the controllers elect. Here every change also goes into the CommitLog, so it travels the same
replication stream as the messages, in the same order, under the same acknowledgement rule
(``allAckInSyncStateSet`` / ``minInSyncReplicas``) and the same epoch truncation: whatever part
of the log the new master holds, it holds the metadata written before it.

* **Master** (:class:`MetadataReplicator` is active while the broker is a controller-mode
  master): the managers' ``on_change`` hooks name the topics, groups and ``topic@group`` offset
  entries that changed. Topic and group changes are written at once (a topic config reaches the
  CommitLog before the first message sent to it); offset changes are coalesced, one record per
  turn of the event loop however many commits arrived in it. A record holds the *current* value
  of every name it lists (``null``: removed), so records are idempotent and the last one wins.
  :meth:`MetadataReplicator.barrier` gives a request handler a future resolved when every change
  made so far is held by the replicas the send rule requires: UPDATE_AND_CREATE_TOPIC,
  UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, UPDATE_CONSUMER_OFFSET (two-way) and their deletions answer
  only then, so a change acknowledged by a master that dies is on the master elected after it.
  Offsets committed by a pull (``commitOffset`` of PULL_MESSAGE) and by one-way
  UPDATE_CONSUMER_OFFSET are recorded the same way, without holding any answer back.
* **Slave**: a store dispatch listener applies each record of :data:`METADATA_TOPIC` as the
  reput reaches it; a promotion dispatches the whole log first (``ReplicationManager.promote``),
  so the new master serves every replicated change before it registers. The 10 s copy
  (:mod:`rocket.broker.slave_sync`) still runs, for what predates the slave's copy of the log;
  records applied while a copy round is under way are applied again after it
  (:meth:`MetadataReplicator.open_window`), so an older snapshot never undoes a newer record.
  An old master that rejoins as a slave has its unreplicated CommitLog tail cut (epochs), but its
  tables keep what it changed there until its first copy round replaces them.

Record body (JSON, ``v`` 1)::

    {"v": 1, "topics": {"T": {TopicConfig JSON} | null},
     "groups": {"G": {SubscriptionGroupConfig JSON} | null},
     "offsets": {"T@G": {"0": 12, "1": 7} | null}}

A record stays below :data:`MAX_RECORD_BODY` bytes (a larger change is split). Queue 0 only;
the topic has no TopicConfig, is never routed, and its records age out with the CommitLog.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from prometheus_client import Counter

from rocket.protocol import SubscriptionGroupConfig, TopicConfig
from rocket.remoting import RemotingCommand, RemotingConnection, ResponseCode
from rocket.remoting.connection import ANSWER_LATER
from rocket.store.api import PutMessageRequest, PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from rocket.broker.config import BrokerConfig
    from rocket.broker.metadata.lifecycle import BrokerMetadata
    from rocket.store import DefaultMessageStore

log = logging.getLogger("rocket.broker.metadata")

#: The system topic the records go to (``rmq_sys_`` prefix: RocketMQ's ``TopicValidator`` system
#: topics, which clients may not send to).
METADATA_TOPIC = "rmq_sys_broker_metadata"
#: Largest record body written (bytes); a larger change is split over several records.
MAX_RECORD_BODY = 1024 * 1024
#: Records kept for replay while a 10 s copy round runs; past it the window is abandoned.
MAX_WINDOW = 100_000
_VERSION = 1
_KINDS = ("topics", "groups", "offsets")


class ReplicationHost(Protocol):
    """The broker's replication side (``ReplicationManager``): SYNC_MASTER / quorum waits."""

    def replicate_nowait(self, put: PutMessageResult | asyncio.Future[PutMessageResult]
                         ) -> PutMessageResult | asyncio.Future[PutMessageResult]:
        """The put's final result once the required replicas hold it (or why not)."""
        ...


class MetadataBroker(Protocol):
    """What :class:`MetadataReplicator` needs from the broker (``BrokerController``)."""

    config: BrokerConfig
    store: DefaultMessageStore
    metadata: BrokerMetadata
    ha: Any  # ReplicationHost
    store_ready: bool


def encode_record(topics: dict[str, Any], groups: dict[str, Any], offsets: dict[str, Any]) -> bytes:
    """One record body (see the module doc); values are JSON objects or None (removed)."""
    return orjson.dumps({"v": _VERSION, "topics": topics, "groups": groups, "offsets": offsets})


def decode_record(body: bytes) -> tuple[dict[str, TopicConfig | None], dict[str, SubscriptionGroupConfig | None],
                                        dict[str, dict[int, int] | None]]:
    """``(topics, groups, offsets)`` of a record body. Raises ``ValueError`` for a malformed one
    (not JSON, unknown version, wrong shapes)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict) or obj.get("v") != _VERSION:
        raise ValueError(f"not a version-{_VERSION} metadata record")
    parts = [{} if obj.get(k) is None else obj[k] for k in _KINDS]
    if not all(isinstance(p, dict) for p in parts):
        raise ValueError("topics, groups and offsets must be JSON objects")
    try:
        topics = {str(n): None if v is None else TopicConfig.from_json(v) for n, v in parts[0].items()}
        groups = {str(n): None if v is None else SubscriptionGroupConfig.from_json(v) for n, v in parts[1].items()}
        offsets: dict[str, dict[int, int] | None] = {
            str(k): None if v is None else {int(q): int(o) for q, o in v.items()} for k, v in parts[2].items()}
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"malformed entry: {exc}") from None
    return topics, groups, offsets


class MetadataReplicator:
    """Writes the master's metadata changes into the CommitLog and applies them on a slave; see
    the module doc. Built by the broker; :meth:`attach` hooks it to the managers and the store."""

    def __init__(self, broker: MetadataBroker) -> None:
        self.broker = broker
        self._pending: dict[str, set[str]] = {k: set() for k in _KINDS}
        self._scheduled = False
        #: Callbacks waiting for the pending changes to be replicated (see :meth:`when_replicated`).
        self._waiters: list[Callable[[str | None], object]] = []
        #: The final result (replicated, or why not) of the last record written.
        self._last: PutMessageResult | asyncio.Future[PutMessageResult] | None = None
        self._window: list[bytes] | None = None
        self._window_overflow = False
        self._refused_logged = ""
        self._retry_scheduled = False
        #: Records written / records applied / changes recorded (for ``/api/v1/ha`` and tests).
        self.records_written = 0
        self.records_applied = 0
        self.changes_recorded = 0
        registry = getattr(getattr(broker, "metrics", None), "registry", None)
        #: ``rocketmq_broker_ha_metadata_records_total{direction="written"|"applied"}`` (None without
        #: a metrics registry).
        self._metric: Counter | None = None if registry is None else Counter(
            "rocketmq_broker_ha_metadata_records", "Metadata records written into the CommitLog (master) or "
            "applied from it (slave)", ["direction"], registry=registry)

    # -- wiring ------------------------------------------------------------------------------------

    def attach(self) -> None:
        """Hook the managers' ``on_change`` and the store's dispatch listener."""
        md = self.broker.metadata
        md.topic_configs.on_change = lambda names: self._note("topics", names)
        md.subscription_groups.on_change = lambda names: self._note("groups", names)
        md.consumer_offsets.on_change = lambda keys: self._note("offsets", keys)
        self.broker.store.add_dispatch_listener(self.on_dispatch, topic=METADATA_TOPIC)

    @property
    def active(self) -> bool:
        """This broker records its changes now: a controller-mode master with
        ``enableMetadataReplication`` and a running store."""
        cfg = self.broker.config
        return (cfg.enable_controller_mode and cfg.enable_metadata_replication and cfg.is_master
                and self.broker.store_ready and self.broker.store.running)

    # -- master: recording ---------------------------------------------------------------------------

    def _note(self, kind: str, names: list[str]) -> None:
        # hot (every offset commit): a flush already scheduled in this turn means the checks passed;
        # the flush checks again
        if not (self._scheduled or self.active):
            return
        self._pending[kind].update(names)
        self.changes_recorded += len(names)
        if kind != "offsets":
            self.flush()  # before any message sent to the topic / by the group
        elif not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._scheduled = False
        self.flush()

    def _bodies(self, pending: dict[str, set[str]]) -> Iterator[bytes]:
        md = self.broker.metadata
        parts: dict[str, dict[str, Any]] = {k: {} for k in _KINDS}
        size = 0
        for kind in _KINDS:
            for name in sorted(pending[kind]):
                value: Any
                if kind == "topics":
                    tc = md.topic_configs.get(name)
                    value = None if tc is None else tc.to_json()
                elif kind == "groups":
                    sg = md.subscription_groups.get(name)
                    value = None if sg is None else sg.to_json()
                else:
                    entry = md.consumer_offsets.entry(name)
                    value = None if entry is None else {str(q): o for q, o in entry.items()}
                parts[kind][name] = value
                # offsets: ~16 bytes a queue; configs are small objects (a few hundred bytes)
                size += len(name) + (16 * len(value or ()) if kind == "offsets" else 512) + 8
                if size >= MAX_RECORD_BODY // 2:
                    yield encode_record(parts["topics"], parts["groups"], parts["offsets"])
                    parts = {k: {} for k in _KINDS}
                    size = 0
        if any(parts.values()):
            yield encode_record(parts["topics"], parts["groups"], parts["offsets"])

    def flush(self) -> None:
        """Write the pending changes now (one record, or a few for a very large change), and bind
        the barriers waiting for them to that write."""
        pending, waiters = self._pending, self._waiters
        if not any(pending.values()):
            return
        self._pending = {k: set() for k in _KINDS}
        self._waiters = []
        if not self.active:  # switched off (nothing to wait for), or demoted / stopping since the change
            cfg = self.broker.config
            off = not (cfg.enable_controller_mode and cfg.enable_metadata_replication)
            _notify(waiters, None if off else "this broker is no longer the master")
            return
        reqs = [PutMessageRequest(METADATA_TOPIC, 0, body, born_host=self.broker.config.broker_addr)
                for body in self._bodies(pending)]
        put = self.broker.store.put_messages_nowait(reqs)
        if isinstance(put, PutMessageResult) and put.status is not PutMessageStatus.PUT_OK:
            self._refused(put, pending)
            self._last = put
        else:
            self.records_written += len(reqs)
            if self._metric is not None:
                self._metric.labels("written").inc(len(reqs))
            self._last = self.broker.ha.replicate_nowait(put)
            if isinstance(self._last, asyncio.Future):
                self._last.add_done_callback(lambda f: self._written(f, pending))
        if waiters:
            _bind(waiters, self._last)

    def _written(self, fut: asyncio.Future[PutMessageResult], pending: dict[str, set[str]]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        result = fut.result()
        if result.status is not PutMessageStatus.PUT_OK and not result.stored:  # refused, not stored
            self._refused(result, pending)

    def _refused(self, result: PutMessageResult, pending: dict[str, set[str]]) -> None:
        """The store refused a record: keep its names pending, to be written with the next change."""
        for kind in _KINDS:
            self._pending[kind] |= pending[kind]
        text = f"{result.status.name}: {result.remark}"
        if text != self._refused_logged:
            log.warning("metadata record not written (%s); retried in a second", text)
        self._refused_logged = text
        if not self._retry_scheduled:
            self._retry_scheduled = True
            asyncio.get_running_loop().call_later(1.0, self._retry)

    def _retry(self) -> None:
        self._retry_scheduled = False
        self.flush()

    def when_replicated(self, callback: Callable[[str | None], object]) -> bool:
        """After a change: call ``callback(None)`` once every change recorded so far is held by the
        replicas the send rule requires, or ``callback(why)`` when it is not (the change stays on
        this master and reaches the slaves with a later record or the 10 s copy). Pending changes
        are not written early: the callback waits for the coalesced record of this turn of the
        loop, and all callbacks of one record are called from one completion (no future each).
        False (and no call) when there is nothing to wait for: not a recording master, or
        nothing written yet."""
        if self._scheduled:  # offsets pending in this turn (checked by _note; the flush checks again)
            self._waiters.append(callback)
            return True
        if not self.active:
            return False
        if any(self._pending.values()):
            self._waiters.append(callback)
            return True
        if self._last is None:
            return False
        _bind([callback], self._last)
        return True

    def barrier(self) -> asyncio.Future[str | None] | None:
        """:meth:`when_replicated` as a future of None or the reason (None: nothing to wait for)."""
        out: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

        def done(why: str | None) -> None:
            if not out.done():
                out.set_result(why)

        return out if self.when_replicated(done) else None

    # -- slave: applying ------------------------------------------------------------------------------

    def on_dispatch(self, topic: str, queue_id: int, queue_offset: int, tags_code: int) -> None:
        """Store dispatch listener: apply the record at ``queue_offset`` of :data:`METADATA_TOPIC`
        on a slave (a master wrote it itself)."""
        if topic != METADATA_TOPIC or self.broker.config.is_master or not self.broker.store_ready:
            return
        store = self.broker.store
        cq = store.find_consume_queue(METADATA_TOPIC, queue_id)
        entry = cq.entry(queue_offset) if cq is not None else None
        msg = store.look_message_by_offset(entry[0]) if entry is not None else None
        if msg is None:
            log.error("metadata record %d is not readable; the 10 s copy will bring its changes", queue_offset)
            return
        self.apply(msg.body)

    def apply(self, body: bytes) -> bool:
        """Apply one record body to this broker's tables; False (logged) when it is malformed."""
        try:
            topics, groups, offsets = decode_record(body)
        except ValueError as exc:
            log.error("metadata record ignored: %s", exc)
            return False
        md = self.broker.metadata
        for mgr, table in ((md.topic_configs, topics), (md.subscription_groups, groups)):
            put = [cfg for cfg in table.values() if cfg is not None]
            gone = [name for name, cfg in table.items() if cfg is None]
            if put:
                mgr.put_many(put)  # type: ignore[arg-type]
            if gone:
                mgr.delete_many(gone)
        md.consumer_offsets.apply_entries(offsets)
        self.records_applied += 1
        if self._metric is not None:
            self._metric.labels("applied").inc()
        if self._window is not None:
            if len(self._window) < MAX_WINDOW:
                self._window.append(body)
            else:
                self._window_overflow = True
        return True

    def open_window(self) -> None:
        """A 10 s copy round starts: remember the records applied from now on."""
        self._window = []
        self._window_overflow = False

    def close_window(self) -> None:
        """The copy round ended: apply again the records applied during it (they may be newer than
        the snapshot the round took)."""
        window, self._window = self._window, None
        if self._window_overflow:
            log.warning("more than %d metadata records arrived during one copy round; the next round "
                        "corrects what it overwrote", MAX_WINDOW)
        for body in window or ():
            self.apply(body)

    def status(self) -> dict[str, Any]:
        """Counters for ``/api/v1/ha``."""
        return {"active": self.active, "recordsWritten": self.records_written,
                "recordsApplied": self.records_applied, "changesRecorded": self.changes_recorded}


def _notify(callbacks: list[Callable[[str | None], object]], why: str | None) -> None:
    for cb in callbacks:
        try:
            cb(why)
        except Exception:
            log.exception("metadata replication callback %r failed", cb)


def _bind(callbacks: list[Callable[[str | None], object]],
          final: PutMessageResult | asyncio.Future[PutMessageResult]) -> None:
    """Call ``callbacks`` with the failure text of ``final`` (None: replicated) once it is known."""
    if isinstance(final, PutMessageResult):
        _notify(callbacks, _failure(final))
        return

    def done(f: asyncio.Future[PutMessageResult]) -> None:
        if f.cancelled():
            why: str | None = "cancelled"
        elif f.exception() is not None:
            why = f"{type(f.exception()).__name__}: {f.exception()}"
        else:
            why = _failure(f.result())
        _notify(callbacks, why)

    final.add_done_callback(done)


def _failure(result: PutMessageResult) -> str | None:
    if result.status is PutMessageStatus.PUT_OK:
        return None
    return f"{result.status.name}: {result.remark or ''}".rstrip(": ")


def respond_when_replicated(replicator: MetadataReplicator, request: RemotingCommand, conn: RemotingConnection,
                            response: RemotingCommand) -> RemotingCommand | Any:
    """For a request handler: ``response`` at once for a one-way request or when nothing is to be
    waited for, else :data:`~rocket.remoting.connection.ANSWER_LATER` and ``response`` sent on
    ``conn`` once the changes made so far are replicated (:meth:`MetadataReplicator.when_replicated`);
    when replication fails, SYSTEM_ERROR saying the change is on this master only."""
    if request.is_oneway:
        return response  # recorded all the same (coalesced), nobody to answer
    started = time.perf_counter()

    def done(why: str | None) -> None:
        conn.answer(request, response if why is None else request.response(
            ResponseCode.SYSTEM_ERROR, f"changed on the master, but not yet held by its SyncStateSet: {why}"),
            started)

    return ANSWER_LATER if replicator.when_replicated(done) else response


async def wait_replicated(replicator: MetadataReplicator) -> str | None:
    """Await :meth:`MetadataReplicator.barrier`: None when replicated (or nothing to wait for),
    else why not."""
    barrier = replicator.barrier()
    return None if barrier is None else await barrier
