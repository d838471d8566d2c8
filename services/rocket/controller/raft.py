"""The controller's Raft: :class:`~rocket.controller.state.ReplicasInfoManager` replicated with pysyncobj.

pysyncobj (Raft: leader election, log replication, log compaction, a file journal) runs its own
thread; the asyncio side talks to it through :class:`RaftNode`:

* :meth:`RaftNode.propose` appends a list of events (JSON) to the Raft log and resolves once the
  entry is committed by a majority and applied here, with each event's ``(code, remark)``.
  Every peer applies the same entries in the same order (``ControllerStateMachine.apply_events``);
  applying is deterministic.
* :attr:`RaftNode.is_leader` is true only on the Raft leader *after* a barrier entry of its own
  term has been applied: by then every entry committed by an earlier leader is applied here, so
  a decision made from this state sees everything acknowledged before (what RocketMQ's
  ``DLedgerController`` does with its initial empty append).
* Reads take :attr:`RaftNode.lock` and look at the applied state; on a follower it is a prefix
  of the leader's (possibly a little behind), never something uncommitted.

Security: the Raft port carries pickled Python objects, so it is never open: pysyncobj's
``password`` makes every frame a Fernet token (AES-128-CBC + HMAC-SHA256, key from PBKDF2 of the
secret), and ``TcpConnection.__processParseMessage`` verifies the HMAC (``extract_timestamp`` and
``decrypt``) *before* ``pickle.loads``; a frame that fails closes the connection. After connecting
both sides also exchange random keys that every later message must carry (replay protection).
Anyone who can write the data directory can still run code (the journal and dump are pickles):
it is created with mode 0700.

Durability: pysyncobj's journal is a memory-mapped file without fsync. Entries survive a killed
process (the page cache keeps them) but not a power loss of the machine before the kernel wrote
them; the Raft majority (peers on separate machines) covers that case.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj.tcp_connection import TcpConnection

from rocket.controller.config import ControllerConfig, Peer
from rocket.controller.state import ReplicasInfoManager
from rocket.protocol.codes import ResponseCode

log = logging.getLogger("rocket.controller.raft")

#: pysyncobj's ``_RAFT_STATE.LEADER``.
_LEADER = 2
#: Snapshot format version (the dump holds ``{"version": 1, "groups": ...}``).
SNAPSHOT_VERSION = 1


#: Most bytes a Raft connection may buffer (one frame or several). pysyncobj's own frames stay far
#: below (append batches and snapshot chunks are 64 KiB); an unauthenticated peer announcing or
#: streaming more is cut off instead of growing the buffer without bound.
MAX_RAFT_BUFFER = 16 * 1024 * 1024


def _bound_read_buffers() -> None:
    """Make pysyncobj's TCP connections drop a peer whose buffered input exceeds
    :data:`MAX_RAFT_BUFFER` or whose frame announces more (pysyncobj itself buffers any amount
    before it can check the frame's HMAC). Idempotent; logs and does nothing when pysyncobj's
    internals are not the expected ones."""
    read = getattr(TcpConnection, "_TcpConnection__processRead", None)
    if read is None or getattr(read, "_rocket_bounded", False):
        if read is None:
            log.warning("pysyncobj's TcpConnection changed: Raft read buffers are not bounded")
        return

    def bounded_read(self: TcpConnection) -> bool:
        more: bool = read(self)
        buffer = getattr(self, "_TcpConnection__readBuffer", b"")
        if len(buffer) >= 4:
            (length,) = struct.unpack("i", bytes(buffer[:4]))
            if len(buffer) > MAX_RAFT_BUFFER or not 0 <= length <= MAX_RAFT_BUFFER:
                log.warning("Raft connection dropped: frame of %d bytes announced, %d buffered", length, len(buffer))
                self.disconnect()
                return False
        return more

    bounded_read._rocket_bounded = True  # type: ignore[attr-defined]
    setattr(TcpConnection, "_TcpConnection__processRead", bounded_read)  # noqa: B010 - a name-mangled attribute


_bound_read_buffers()


class NotLeaderError(Exception):
    """This controller is not the (ready) Raft leader; the request belongs to the leader."""


class CommitTimeoutError(Exception):
    """The entry was not committed in time (no majority reachable); its outcome is unknown."""


class ControllerStateMachine(SyncObjConsumer):
    """The replicated object: applies committed events to a :class:`ReplicasInfoManager`.

    ``_serialize``/``_deserialize`` give pysyncobj a JSON-able snapshot of the state (log
    compaction and the full dump on disk).
    """

    def __init__(self, manager: ReplicasInfoManager, lock: threading.Lock) -> None:
        # Attributes set before SyncObjConsumer.__init__ are not part of the snapshot.
        self._manager = manager
        self._lock = lock
        super().__init__()

    def _serialize(self) -> dict[str, Any]:
        with self._lock:
            return {"version": SNAPSHOT_VERSION, "groups": self._manager.to_json()}

    def _deserialize(self, data: dict[str, Any]) -> None:
        with self._lock:
            self._manager.load_json(data.get("groups") or {})

    @replicated
    def apply_events(self, payload: bytes) -> list[tuple[int, str | None]]:
        """Apply a JSON list of events in order; stops at the first one refused (its code is the
        last in the returned list). Never raises: a malformed entry is refused on every peer alike."""
        try:
            events = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            log.error("malformed controller log entry: %s", exc)
            return [(int(ResponseCode.SYSTEM_ERROR), f"malformed log entry: {exc}")]
        results: list[tuple[int, str | None]] = []
        with self._lock:
            for event in events:
                try:
                    code, remark = self._manager.apply_event(event)
                except (KeyError, TypeError, ValueError) as exc:
                    log.error("controller event %r refused: %s", event, exc)
                    code, remark = int(ResponseCode.SYSTEM_ERROR), f"bad event: {exc}"
                results.append((int(code), remark))
                if code != ResponseCode.SUCCESS:
                    break
        return results

    @replicated
    def barrier(self, term: int) -> int:
        """A no-op entry; its application tells a new leader that it has applied everything before."""
        return term


class RaftNode:
    """One controller's Raft member. Create and :meth:`start` inside the event loop's thread
    (pysyncobj's tick thread stops when the thread that created it ends).

    ``on_leadership(is_leader)`` is called in the loop when this node becomes a ready leader or
    stops being one.
    """

    def __init__(self, config: ControllerConfig, manager: ReplicasInfoManager, *,
                 on_leadership: Callable[[bool], None] | None = None) -> None:
        self.config = config
        self.lock = threading.Lock()
        self.machine = ControllerStateMachine(manager, self.lock)
        self.on_leadership = on_leadership
        self._syncobj: SyncObj | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready_term: int | None = None
        self._peers_by_raft = {p.raft_address: p for p in config.peers}

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the journal, bind the Raft port and join the cluster.

        Raises ``OSError`` when the Raft port cannot be bound within ~5 s.
        """
        cfg = self.config
        self._loop = asyncio.get_running_loop()
        data = Path(cfg.data_dir)
        await asyncio.to_thread(_private_dir, data)
        me = cfg.self_peer
        bind = f"{cfg.raft_bind_host}:{me.raft_address.rsplit(':', 1)[1]}" if cfg.raft_bind_host else None
        conf = SyncObjConf(
            password=cfg.secret,
            journalFile=str(data / "raft.journal"),
            fullDumpFile=str(data / "raft.dump"),
            useFork=False,  # a threaded asyncio process must not fork to write its snapshot
            appendEntriesUseBatch=False,  # send at once: a controller write is latency-bound
            raftMinTimeout=cfg.raft_min_timeout_s,
            raftMaxTimeout=cfg.raft_max_timeout_s,
            appendEntriesPeriod=min(0.1, cfg.raft_min_timeout_s / 4),
            connectionTimeout=max(3.5, cfg.raft_max_timeout_s),
            leaderFallbackTimeout=cfg.raft_leader_fallback_timeout_s,
            connectionRetryTime=cfg.raft_connection_retry_s,
            bindAddress=bind,
            bindRetryTime=0.5,
            maxBindRetries=10,
            logCompactionMinEntries=2000,
            logCompactionMinTime=60,
            onStateChanged=self._state_changed,
            dynamicMembershipChange=False,
        )
        others = [p.raft_address for p in cfg.peers if p.raft_address != me.raft_address]
        self._syncobj = SyncObj(me.raft_address, others, conf, consumers=[self.machine])
        try:
            await asyncio.to_thread(self._syncobj.waitBinded)
        except Exception as exc:
            await self.stop()
            raise OSError(f"cannot bind the controller Raft port {me.raft_address}: {exc}") from None
        log.info("Raft member %s (%s) started; peers %s", me.id, me.raft_address, others)

    async def stop(self) -> None:
        """Leave: stop the Raft thread and close its port and files."""
        obj, self._syncobj = self._syncobj, None
        self._ready_term = None
        if obj is not None:
            obj.destroy()
            thread = getattr(obj, "_SyncObj__thread", None)
            if thread is not None:
                await asyncio.to_thread(thread.join, 10.0)

    # -- state -------------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """True on the Raft leader once it has applied everything committed before its term."""
        obj = self._syncobj
        return obj is not None and obj._isLeader() and self._ready_term == obj._getTerm()

    @property
    def leader(self) -> Peer | None:
        """The peer this node believes leads (None while there is none, or it is unreachable)."""
        obj = self._syncobj
        node = obj._getLeader() if obj is not None else None
        if obj is None or node is None:
            return None
        # pysyncobj keeps naming a dead leader while it is connected to nobody (it cannot even
        # stand for election then): a leader we have no connection to is no leader.
        if node != obj.selfNode and not obj.isNodeConnected(node):
            return None
        return self._peers_by_raft.get(getattr(node, "id", str(node)))

    def status(self) -> dict[str, Any]:
        """pysyncobj's status (term, commit and applied index, leader, log size ...)."""
        obj = self._syncobj
        return dict(obj.getStatus()) if obj is not None else {}

    def _state_changed(self, old: int, new: int) -> None:
        """pysyncobj thread: a new Raft state. A new leader proposes its barrier."""
        if new == _LEADER:
            obj = self.machine._syncObj
            term = obj._getTerm() if obj is not None else -1
            self.machine.barrier(term, callback=lambda res, err: self._barrier_done(term, res, err))
        elif old == _LEADER:
            self._ready_term = None
            self._tell_loop(False)

    def _barrier_done(self, term: int, result: Any, err: int) -> None:
        obj = self.machine._syncObj
        if err == FAIL_REASON.SUCCESS and obj is not None and obj._isLeader() and obj._getTerm() == term:
            self._ready_term = term
            log.info("controller %s leads (Raft term %d)", self.config.self_peer.id, term)
            self._tell_loop(True)

    def _tell_loop(self, leading: bool) -> None:
        loop, callback = self._loop, self.on_leadership
        if loop is not None and callback is not None and not loop.is_closed():
            loop.call_soon_threadsafe(callback, leading)

    # -- writes ----------------------------------------------------------------------------------

    async def propose(self, events: Sequence[dict[str, Any]],
                      timeout: float | None = None) -> list[tuple[int, str | None]]:
        """Commit ``events`` and return each one's ``(code, remark)`` as applied.

        Raises :class:`NotLeaderError` when this node is not the ready leader or leadership is lost
        before the commit, and :class:`CommitTimeoutError` when no majority commits it within
        ``timeout`` seconds (default ``write_timeout_s``).
        """
        if not self.is_leader:
            raise NotLeaderError("The controller is not in leader state")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[Any, int]] = loop.create_future()

        def done(result: Any, err: int) -> None:  # pysyncobj thread
            def resolve() -> None:
                if not fut.done():
                    fut.set_result((result, err))
            if not loop.is_closed():
                loop.call_soon_threadsafe(resolve)

        self.machine.apply_events(orjson.dumps(list(events)), callback=done)
        try:
            async with asyncio.timeout(self.config.write_timeout_s if timeout is None else timeout):
                result, err = await fut
        except TimeoutError:
            raise CommitTimeoutError("no controller majority committed the change in time; outcome unknown") from None
        if err != FAIL_REASON.SUCCESS:
            raise NotLeaderError(f"the change was not committed (Raft: {_fail_name(err)})")
        return [(int(c), r) for c, r in result]


def _private_dir(path: Path) -> None:
    """Create ``path`` (and parents) and make it readable by its owner only."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def _fail_name(err: int) -> str:
    for name in dir(FAIL_REASON):
        if not name.startswith("_") and getattr(FAIL_REASON, name) == err:
            return name
    return str(err)
