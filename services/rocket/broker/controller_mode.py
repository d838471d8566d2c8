"""A controller-mode broker's side of RocketMQ 5's controller protocol (``enableControllerMode``):
:class:`ControllerReplicas`, modelled on RocketMQ's ``broker/controller/ReplicasManager`` and
``store/ha/autoswitch/AutoSwitchHAService``.

The broker follows the contract in :mod:`rocket.controller` (steps 1-8):

* **Broker id** (once): CONTROLLER_GET_NEXT_BROKER_ID (1012) then CONTROLLER_APPLY_BROKER_ID (1013),
  kept in ``<storePathRootDir>/brokerIdentity`` (JSON ``{"clusterName", "brokerName",
  "brokerId"}``; ``brokerIdentity.tmp`` holds an id being applied with its check code, so a
  crash between the two steps re-applies the same id). RocketMQ keeps the same two files
  (``BrokerMetadata`` / ``TempBrokerMetadata``).
* **Register** (1003) at start, then **elect** (1002, ``designateElect=false``) when the group has
  no master. The broker starts as a slave with its controller id and serves no sends until the
  controller names it master.
* **Heartbeats** (904) to every controller every ``brokerHeartbeatInterval`` (1 s) with its epoch
  and CommitLog max offset.
* **Role changes** from NOTIFY_BROKER_ROLE_CHANGED (1008, RocketMQ's header ``masterAddress``,
  ``masterEpoch``, ``syncStateSetEpoch``, ``masterBrokerId``; body SyncStateSet) and from
  polling GET_REPLICA_INFO (1004): only a ``masterEpoch`` above the known one switches roles
  (master when ``masterBrokerId`` is ours, else slave of ``masterAddress``), through
  :meth:`~rocket.broker.replicas.ReplicationManager.promote` /
  :meth:`~rocket.broker.replicas.ReplicationManager.demote` (the epoch file takes the
  controller's ``masterEpoch``; a slave's HA handshake truncates to the common prefix). The
  NameServers see the master as brokerId 0 and a slave under its controller id.
* **SyncStateSet** (master): a connected slave whose acknowledged offset is within the current
  epoch and close to the end *joins*: from then on sends wait for it too, and once it holds
  everything acknowledged before, ALTER_SYNC_STATE_SET (1001) adds it. A member not caught up
  for ``haMaxTimeSlaveNotCatchup`` (15 s) — or not connected for that long — is removed the same
  way. While a change is in flight, sends need the union of the old and new set (RocketMQ's
  ``isSynchronizingSyncStateSet``). CONTROLLER_FENCED_MASTER_EPOCH (2000) /
  CONTROLLER_INVALID_MASTER (2002) fence the master at once.
* **Quorum writes** (the master's role is SYNC_MASTER, as RocketMQ's ``changeToMaster`` sets):
  with ``allAckInSyncStateSet`` a send is acknowledged once every SyncStateSet member holds it;
  otherwise once ``minInSyncReplicas`` copies (the master's included) exist. A SyncStateSet
  smaller than ``minInSyncReplicas`` refuses sends (code 14).
* **Fencing** (see :attr:`ControllerReplicas.lease_fences`): the master polls the controller
  leader every ``brokerHeartbeatInterval``; an answer from a controller that says it leads and
  names this broker master at its epoch renews a lease of ``controllerHeartBeatTimeoutMills / 2``
  counted from when the question was *sent*. A master that got 2000/2002 from the controllers,
  that learnt of a newer master epoch (from a controller, or from a NameServer that refused its
  registration because a live master with a newer epoch holds the group), refuses sends (code 14)
  and fails sends waiting for replicas. Whether a lease that *ran out* fences it depends on
  ``allAckInSyncStateSet`` (``controllerLeaseFence=auto``, the default), as in RocketMQ 5:

  - **With** ``allAckInSyncStateSet`` the lease adds nothing to safety, so it does not fence: a
    master keeps acknowledging while 2 of 3 controllers are down (no election can happen either).
    Why two masters never both acknowledge, without leases:

    1. the controllers elect (cleanly) only a member of the SyncStateSet they hold for the master
       epoch; an election starts a new epoch whose set is the new master alone;
    2. that set changes only by ALTER_SYNC_STATE_SET from the master *of that epoch* (the
       controllers refuse a stale one with 2000), so a master cut off from the controllers
       cannot shrink it;
    3. the master acknowledges a send only when every member of its *required set* holds it, and
       the required set always contains the controllers' set: a removal counts only once the
       controllers committed it; while a change is in flight, and after one whose outcome is
       unknown (a timeout), the old and new sets are both required until a controller answer
       settles it (``UNSURE_SETTLE_S``: a newer set epoch, a later ALTER at the same epoch
       committed, or the same epoch still 10 s later — the one timing assumption, and only for
       an ALTER whose answer was lost); a joining slave is required before the ALTER that adds it;
    4. a member counts as holding what its HA client reported after appending it to its own
       CommitLog. A member the controllers make master first stops its HA client and waits for its
       store to be idle, then starts the new epoch at its log end: everything it ever acknowledged
       to the old master is in its log; from then on it acknowledges nothing of the old master's
       stream (the HA client runs on slaves only, and a slave refuses, in the HA handshake, a
       master whose newest epoch is below the master epoch the controllers announced to it —
       :attr:`~rocket.store.ha.slave.HAClient.min_master_epoch`).

    So once a member N is elected, the old master M cannot acknowledge anything more (N is in M's
    required set and no longer reports), whether or not M knows it was replaced or can reach any
    controller, and everything M acknowledged before is on N. Bounds: a master cut off from the
    controllers *and* its slaves acknowledges nothing sent after the cut (sends wait
    ``slaveTimeout`` and get FLUSH_SLAVE_TIMEOUT); a master cut off from the controllers only
    keeps acknowledging, with its slaves, until one of them is elected
    (``controllerHeartBeatTimeoutMills`` + the controllers' scan), and nothing after. A master
    without a valid lease refuses sends at once (code 14) when a required member has no
    replication connection (it could not acknowledge anyway, and cannot change its set).
    ``enableElectUncleanMaster`` on the controllers breaks rule 1 (and loses acknowledged data by
    design): set ``controllerLeaseFence=true`` with it.

  - **Without** ``allAckInSyncStateSet`` (``minInSyncReplicas`` copies, or the master's alone) an
    elected member may lack what the old master acknowledged with other copies, and the old master
    can go on acknowledging with them; only time separates the two, so a lease that ran out
    fences: the master acknowledges nothing later than ``controllerHeartBeatTimeoutMills / 2``
    after the last confirmation it sent for, while the controllers elect a replacement only after
    ``controllerHeartBeatTimeoutMills`` without its heartbeats (a leader without a majority steps
    down within ``raftLeaderFallbackTimeout``, 2 s). With the defaults a cut-off master stops at
    least 3 s before a replacement can be elected, assuming clocks that run at about the same
    rate. The price: with 2 of 3 controllers down such masters stop acknowledging.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from rocket.broker.tasks import write_file_durably
from rocket.controller.client import ControllerClient, ReplicaInfo
from rocket.protocol.codes import RequestCode, ResponseCode
from rocket.protocol.controller import parse_sync_state_set
from rocket.remoting import RemotingCommand, RemotingCommandError, RemotingConnection, RemotingError
from rocket.runtime import cancel_and_wait
from rocket.store.api import BrokerRole

if TYPE_CHECKING:
    from rocket.broker.config import BrokerConfig
    from rocket.broker.slave_sync import SlaveSynchronize
    from rocket.store import DefaultMessageStore
    from rocket.store.ha.epoch import EpochFile
    from rocket.store.ha.master import HAConnection, HAService
    from rocket.store.ha.metrics import HAMetrics
    from rocket.store.ha.slave import HAClient

log = logging.getLogger("rocket.broker.controller_mode")

BROKER_IDENTITY_FILE = "brokerIdentity"
#: "No replica is needed": the acknowledged offset when a send needs only the master.
ALL = 1 << 62
#: A slave this close (bytes) to the master's end may join the SyncStateSet (it then holds sends
#: back until it has everything acknowledged before it joined).
JOIN_LAG_BYTES = 4 * 1024 * 1024
#: A joining slave that has not caught up within this many seconds is dropped from the join.
JOIN_TIMEOUT_S = 2.0
#: After an ALTER_SYNC_STATE_SET whose outcome is unknown (no answer), the members it would have
#: added stay required until a controller answer shows a newer SyncStateSet epoch, a later ALTER at
#: the same epoch succeeds (the controllers apply at most one per epoch), or a leader's answer to a
#: poll sent this many seconds after the unknown outcome still shows the old epoch (the request was
#: not committed: a Raft leader commits or drops an entry long before that).
UNSURE_SETTLE_S = 10.0


class ReplicasHost(Protocol):
    """What :class:`ControllerReplicas` drives: the broker's
    :class:`~rocket.broker.replicas.ReplicationManager` (its HA service and client, epoch file,
    promotion and demotion)."""

    broker: Any
    service: HAService
    client: HAClient
    sync: SlaveSynchronize
    epoch_file: EpochFile
    metrics: HAMetrics

    @property
    def config(self) -> BrokerConfig:
        """The broker's configuration."""
        ...

    @property
    def store(self) -> DefaultMessageStore:
        """The broker's message store."""
        ...

    @property
    def is_master(self) -> bool:
        """This broker is master now."""
        ...

    async def promote(self, broker_role: BrokerRole | str | None = None, *, force: bool = False,
                      epoch: int | None = None) -> dict[str, Any]:
        """Become master at ``epoch``."""
        ...

    async def demote(self, master_addr: str, ha_addr: str | None, master_epoch: int = 0, *,
                     broker_id: int | None = None) -> dict[str, Any]:
        """Become a slave of ``master_addr``."""
        ...

    def epoch_file_bump(self, epoch: int) -> None:
        """Start ``epoch`` at the log's end (a master kept by a new election)."""
        ...


class ControllerReplicas:
    """A controller-mode broker's replicas manager (see the module doc). Built and driven by
    :class:`~rocket.broker.replicas.ReplicationManager` when ``enableControllerMode`` is set."""

    def __init__(self, ha: ReplicasHost) -> None:
        self.ha = ha
        cfg = ha.config
        self.client = ControllerClient.from_controller_addr(cfg.controller_addr, timeout=2.0, redirect_timeout=5.0)
        self.controller_id: int | None = None
        self.master_broker_id: int | None = None
        self.master_address: str | None = None
        self.master_epoch = 0
        self.sync_state_set: frozenset[int] = frozenset()
        self.sync_state_set_epoch = 0
        #: The set being committed by an ALTER_SYNC_STATE_SET (sends need the union meanwhile).
        self.pending_set: frozenset[int] | None = None
        #: Slaves holding sends back while they catch up to join: id -> (join mark offset, since).
        self.joining: dict[int, tuple[int, float]] = {}
        #: Slave id -> time.monotonic() it was last caught up.
        self.caught_up: dict[int, float] = {}
        self.lease_until = 0.0
        self.fenced_reason: str | None = None
        #: An ALTER_SYNC_STATE_SET with no answer: (SyncStateSet epoch it was sent at, members it
        #: would add, time.monotonic() of the unknown outcome); those members stay required.
        self.unsure: tuple[int, frozenset[int], float] | None = None
        #: The lease ran out while it does not fence (``lease_fences`` false): logged once.
        self._lease_lost_noted = False
        self.last_error = ""
        self._switch_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._electing = False
        # set on a promotion: the poll loop confirms the new master's lease at once instead of
        # after the slave's polling period (which can outlast the lease a promotion grants)
        self._poll_now = asyncio.Event()

    # -- settings --------------------------------------------------------------------------------------

    @property
    def fence_timeout(self) -> float:
        """The lease: seconds after its last confirmation by the controller leader (counted from
        when it asked) until a master fences itself, when :attr:`lease_fences`:
        ``controllerHeartBeatTimeoutMills / 2``."""
        return self.ha.config.controller_heart_beat_timeout_mills / 2000.0

    @property
    def lease_fences(self) -> bool:
        """Does a lease that ran out fence this master? ``controllerLeaseFence``: ``auto`` (the
        default) means only without ``allAckInSyncStateSet`` (see the module doc for why)."""
        mode = self.ha.config.controller_lease_fence
        if mode == "auto":
            return not self.ha.config.all_ack_in_sync_state_set
        return mode == "true"

    @property
    def identity_path(self) -> Path:
        """``<storePathRootDir>/brokerIdentity``."""
        return Path(self.ha.config.store_path_root_dir) / BROKER_IDENTITY_FILE

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- lifecycle ------------------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Before the broker serves: get (or load) the controller id and start as a slave under it.
        Retries until a controller leader answers (logging every failure)."""
        cfg = self.ha.config
        while True:
            try:
                self.controller_id = await self._broker_id()
                break
            except (RemotingError, OSError) as exc:
                log.warning("no broker id from the controllers %s yet: %s", cfg.controller_addr, exc)
                await asyncio.sleep(1.0)
        cfg.broker_role = BrokerRole.SLAVE
        cfg.broker_id = self.controller_id
        self.ha.store.config.broker_role = BrokerRole.SLAVE
        log.info("controller mode: %s of %s has controller id %d", cfg.broker_addr, cfg.broker_name,
                 self.controller_id)

    def start(self) -> None:
        """Register, elect if needed, and run the heartbeat, poll and SyncStateSet loops."""
        self._spawn(self._heartbeat_loop(), "controller-heartbeat")
        self._spawn(self._poll_loop(), "controller-poll")
        self._spawn(self._sync_state_set_loop(), "sync-state-set")

    async def shutdown(self) -> None:
        """Stop the loops and close the controller connections."""
        await cancel_and_wait(self._tasks)
        await self.client.close()

    # -- broker id ------------------------------------------------------------------------------------

    async def _broker_id(self) -> int:
        cfg = self.ha.config
        loop = asyncio.get_running_loop()
        try:
            obj = orjson.loads(self.identity_path.read_bytes())
            if obj.get("clusterName") == cfg.broker_cluster_name and obj.get("brokerName") == cfg.broker_name:
                return int(obj["brokerId"])
            log.error("%s belongs to %s/%s, not %s/%s: asking for a new id", self.identity_path,
                      obj.get("clusterName"), obj.get("brokerName"), cfg.broker_cluster_name, cfg.broker_name)
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("ignoring unreadable %s: %s", self.identity_path, exc)
        tmp = self.identity_path.with_suffix(".tmp")
        pending: dict[str, Any] | None = None
        with contextlib.suppress(FileNotFoundError, OSError, ValueError):
            pending = orjson.loads(tmp.read_bytes())
        for _ in range(100):
            if pending and pending.get("brokerName") == cfg.broker_name:
                bid, code = int(pending["brokerId"]), str(pending["registerCheckCode"])
            else:
                bid = await self.client.get_next_broker_id(cfg.broker_cluster_name, cfg.broker_name)
                code = f"{cfg.broker_addr};{int(time.time() * 1000)}"
                pending = {"clusterName": cfg.broker_cluster_name, "brokerName": cfg.broker_name,
                           "brokerId": bid, "registerCheckCode": code}
                await loop.run_in_executor(None, write_file_durably, tmp, orjson.dumps(pending))
            try:
                await self.client.apply_broker_id(cfg.broker_cluster_name, cfg.broker_name, bid, code)
            except RemotingCommandError as exc:
                if exc.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID:
                    log.info("broker id %d of %s was taken; asking again", bid, cfg.broker_name)
                    pending = None
                    continue
                raise
            final = {"clusterName": cfg.broker_cluster_name, "brokerName": cfg.broker_name, "brokerId": bid}
            await loop.run_in_executor(None, write_file_durably, self.identity_path, orjson.dumps(final))
            with contextlib.suppress(OSError):
                tmp.unlink()
            return bid
        raise RemotingError("could not apply for a broker id 100 times")

    # -- heartbeats and polling -------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        cfg = self.ha.config
        every = cfg.broker_heartbeat_interval / 1000.0
        while True:
            try:
                store = self.ha.store
                await self.client.heartbeat(
                    cfg.broker_cluster_name, cfg.broker_name, cfg.broker_addr, self.controller_id or 0,
                    epoch=self.ha.epoch_file.last_epoch, max_offset=store.max_phy_offset,
                    confirm_offset=self.confirm_offset(), timeout_ms=cfg.controller_heart_beat_timeout_mills)
            except Exception:
                log.exception("controller heartbeat failed")
            await asyncio.sleep(every)

    async def _poll_loop(self) -> None:
        cfg = self.ha.config
        registered = False
        while True:
            try:
                if not registered:
                    info = await self.client.register_broker(cfg.broker_cluster_name, cfg.broker_name,
                                                             self.controller_id or 0, cfg.broker_addr)
                    registered = True
                    log.info("registered with the controller %s: master %s epoch %d, SyncStateSet %s",
                             self.client.leader_addr, info.master_broker_id, info.master_epoch,
                             sorted(info.sync_state_set))
                    await self.apply(info, lease_from=None)
                else:
                    await self.poll_once()
            except RemotingCommandError as exc:
                self.last_error = str(exc)
                if exc.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
                    registered = False
                else:
                    log.warning("controller: %s", exc)
            except (RemotingError, OSError) as exc:
                self.last_error = str(exc)
                log.info("controller unreachable: %s", exc)
            self.check_lease()
            period = cfg.broker_heartbeat_interval if self.ha.is_master else cfg.sync_broker_metadata_period
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poll_now.wait(),
                                       min(period, cfg.broker_heartbeat_interval * 5) / 1000.0 if registered else 1.0)
            self._poll_now.clear()

    async def _metadata_or_none(self, addr: str) -> dict[str, str] | None:
        try:
            return await asyncio.wait_for(self.client.metadata(addr), 1.0)
        except (RemotingError, OSError, TimeoutError):
            return None

    async def confirmed_leader(self) -> str:
        """Ask every controller at once (GET_METADATA_INFO, 1 s each) and return one that says it
        leads; a stopped or cut-off controller costs no more than that second. Raises
        :class:`RemotingError` when none does."""
        addrs = list(self.client.addrs)
        metas = await asyncio.gather(*(self._metadata_or_none(a) for a in addrs))
        leaders = [a for a, m in zip(addrs, metas, strict=True)
                   if m is not None and str(m.get("isLeader")).lower() == "true"]
        if not leaders:
            self.client.leader_addr = None
            raise RemotingError(f"no controller of {addrs} says it leads")
        self.client.leader_addr = leaders[0]
        return leaders[0]

    async def poll_once(self) -> None:
        """Ask the leader (a controller that says it leads, GET_METADATA_INFO) for the group's
        replica info (GET_REPLICA_INFO) and apply it; an answer naming this broker master at
        its epoch renews the lease from the moment the question was sent."""
        sent = time.monotonic()
        leader = await self.confirmed_leader()
        info = await self.client.get_replica_info_at(leader, self.ha.config.broker_name)
        await self.apply(info, lease_from=sent)

    def check_lease(self) -> None:
        """Fence a master whose lease ran out when :attr:`lease_fences` (see the module doc);
        otherwise only log, once per loss, that it keeps serving without a controller majority."""
        if not self.ha.is_master or self.fenced_reason is not None or time.monotonic() <= self.lease_until:
            self._lease_lost_noted = False
            return
        if self.lease_fences:
            self.fence(f"no confirmation from a controller leader for more than {self.fence_timeout:.1f} s")
        elif not self._lease_lost_noted:
            self._lease_lost_noted = True
            log.warning("no confirmation from a controller leader for more than %.1f s: still serving "
                        "(allAckInSyncStateSet: only the SyncStateSet %s can acknowledge, and it cannot "
                        "change without the controllers)", self.fence_timeout, sorted(self.required_set()))

    def fence(self, why: str) -> None:
        """Stop acknowledging writes: refuse sends, fail the sends waiting for replicas."""
        if self.fenced_reason is None:
            log.warning("fenced: %s; this master refuses writes until the controller confirms it", why)
            self.ha.metrics.role_changes.labels("fenced").inc()
        self.fenced_reason = why
        from rocket.store.api import PutMessageStatus

        self.ha.service.waiters.fail_all(PutMessageStatus.SLAVE_NOT_AVAILABLE)

    @property
    def lease_valid(self) -> bool:
        """The master may acknowledge writes now: not fenced, and its lease runs or does not
        fence (:attr:`lease_fences`)."""
        return self.fenced_reason is None and (time.monotonic() <= self.lease_until or not self.lease_fences)

    def on_registered(self, results: list[Any]) -> None:
        """After a NameServer registration round (:class:`~rocket.broker.registration.RegisterResult`
        list): a master whose registration a NameServer refused because a live master with a newer
        epoch holds the group has been replaced; it fences itself (the controllers, when it can
        reach them again, make it a slave)."""
        if not self.ha.is_master:
            return
        mine = self.ha.epoch_file.last_epoch
        for r in results:
            epoch = getattr(r, "master_epoch", None)
            addr = getattr(r, "master_addr", None)
            if epoch is not None and addr and addr != self.ha.config.broker_addr and epoch > mine:
                self.fence(f"NameServer {r.namesrv_addr} lists {addr} as master at the newer epoch {epoch}")
                self._spawn(self.poll_once_quietly(), "controller-reread")
                return

    async def poll_once_quietly(self) -> None:
        """:meth:`poll_once`, logging instead of raising when no controller leader answers."""
        try:
            await self.poll_once()
        except (RemotingError, OSError) as exc:
            log.info("controller unreachable: %s", exc)

    # -- role changes -----------------------------------------------------------------------------------

    async def apply(self, info: ReplicaInfo, *, lease_from: float | None) -> None:
        """Act on the controller's view of the group (a register/poll answer or a notification)."""
        if info.master_broker_id is None:
            self._spawn(self._elect(), "controller-elect")
            return
        async with self._switch_lock:
            me = self.controller_id
            if info.master_epoch > self.master_epoch:
                if info.master_broker_id == me:
                    await self._change_to_master(info)
                else:
                    await self._change_to_slave(info)
            elif info.master_epoch < self.master_epoch:
                return
            elif info.sync_state_set_epoch > self.sync_state_set_epoch and info.master_broker_id == me:
                self.sync_state_set = info.sync_state_set
                self.sync_state_set_epoch = info.sync_state_set_epoch
                self.ha.service.recheck_quorum()
            if info.master_broker_id == me and info.master_epoch == self.master_epoch:
                self._settle_unsure(info.sync_state_set_epoch, lease_from)
            if (lease_from is not None and info.master_broker_id == me and info.master_epoch == self.master_epoch
                    and self.ha.is_master):
                self.lease_until = max(self.lease_until, lease_from + self.fence_timeout)
                if self.fenced_reason is not None:
                    # the leader names this broker master at its epoch: whatever fenced it has passed
                    log.warning("the controller leader confirmed this master again (epoch %d): unfenced (was: %s)",
                                self.master_epoch, self.fenced_reason)
                    self.fenced_reason = None

    def _settle_unsure(self, set_epoch: int, asked_at: float | None) -> None:
        """Forget an ALTER of unknown outcome once a controller answer settles it (see
        ``UNSURE_SETTLE_S``): ``set_epoch`` is the answer's SyncStateSet epoch, ``asked_at`` when
        the question was sent (None: a notification)."""
        if self.unsure is None:
            return
        sent_at, members, since = self.unsure
        if set_epoch > sent_at:
            why = f"the SyncStateSet epoch is now {set_epoch}"
        elif asked_at is not None and asked_at > since + UNSURE_SETTLE_S:
            why = f"the controllers still hold epoch {set_epoch} {UNSURE_SETTLE_S:.0f} s later: it was not committed"
        else:
            return
        log.info("ALTER_SYNC_STATE_SET adding %s settled: %s", sorted(members), why)
        self.unsure = None
        self.ha.service.recheck_quorum()

    async def _elect(self) -> None:
        if self._electing:
            return
        self._electing = True
        try:
            cfg = self.ha.config
            info = await self.client.elect_master(cfg.broker_cluster_name, cfg.broker_name, self.controller_id)
            log.info("election for %s: master %s (epoch %d)", cfg.broker_name, info.master_broker_id,
                     info.master_epoch)
            if info.master_broker_id is not None:
                await self.apply(info, lease_from=None)
        except (RemotingError, OSError) as exc:
            log.info("asking for an election failed: %s", exc)
        finally:
            self._electing = False

    async def _change_to_master(self, info: ReplicaInfo) -> None:
        ha = self.ha
        log.warning("the controller made this broker (id %s) master of %s at epoch %d", self.controller_id,
                    ha.config.broker_name, info.master_epoch)
        self.master_broker_id, self.master_address = info.master_broker_id, info.master_address
        self.master_epoch = info.master_epoch
        self.sync_state_set, self.sync_state_set_epoch = info.sync_state_set, info.sync_state_set_epoch
        self.pending_set = None
        self.unsure = None
        self.joining.clear()
        now = time.monotonic()
        self.caught_up = {i: now for i in info.sync_state_set}
        self.lease_until = now + self.fence_timeout
        self.fenced_reason = None
        self._poll_now.set()  # confirm the lease from the leader now (see __init__)
        ha.service.quorum = self.acked_offset
        if ha.is_master:
            ha.epoch_file_bump(info.master_epoch)
            return
        await ha.promote(BrokerRole.SYNC_MASTER, force=True, epoch=info.master_epoch)

    async def _change_to_slave(self, info: ReplicaInfo) -> None:
        ha = self.ha
        addr = info.master_address or ""
        log.warning("the controller names %s (id %s) master of %s at epoch %d; this broker (id %s) is a slave",
                    addr, info.master_broker_id, ha.config.broker_name, info.master_epoch, self.controller_id)
        was_master = ha.is_master
        if was_master:
            self.fence(f"{addr} is the master at epoch {info.master_epoch}")
        self.master_broker_id, self.master_address = info.master_broker_id, addr
        self.master_epoch = info.master_epoch
        self.sync_state_set, self.sync_state_set_epoch = info.sync_state_set, info.sync_state_set_epoch
        self.pending_set = None
        self.unsure = None
        self.joining.clear()
        ha.service.quorum = None
        # the HA client refuses a master older than this one (module doc, rule 4)
        ha.client.min_master_epoch = max(ha.client.min_master_epoch, info.master_epoch)
        ha_addr = await self._master_ha_address(addr)
        if was_master:
            await ha.demote(addr, ha_addr, info.master_epoch, broker_id=self.controller_id)
        else:
            ha.broker.master_addr = addr
            ha.broker.ha_master_addr = ha_addr
            await ha.client.stop()
            ha.client.start()
            ha.sync.start()
            ha.broker.trigger_register()
        self.fenced_reason = None

    async def _master_ha_address(self, addr: str) -> str | None:
        """The master's HA address, from its GET_BROKER_HA_STATUS (907) answer."""
        for _ in range(3):
            try:
                resp = await self.client.client.invoke(addr, RemotingCommand(
                    code=RequestCode.GET_BROKER_HA_STATUS, ext_fields={"format": "rocketcluster"}), timeout=2.0)
                if resp.code == ResponseCode.SUCCESS:
                    return str(orjson.loads(resp.body).get("haServerAddr") or "") or None
            except (RemotingError, OSError, ValueError) as exc:
                log.info("HA address of %s: %s", addr, exc)
            await asyncio.sleep(0.3)
        return None

    def process_notify(self, request: RemotingCommand, conn: RemotingConnection) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED (1008) in RocketMQ's form; acted on in the background."""
        h = request.ext_fields
        try:
            ids, set_epoch = parse_sync_state_set(request.body) if request.body else (set(), 0)
            mid = h.get("masterBrokerId")
            info = ReplicaInfo(int(mid) if mid not in (None, "", "null") else None, h.get("masterAddress"),
                               int(h.get("masterEpoch") or 0), frozenset(ids),
                               int(h.get("syncStateSetEpoch") or set_epoch))
        except (ValueError, TypeError) as exc:
            log.warning("bad NOTIFY_BROKER_ROLE_CHANGED from %s: %s", conn.peer if hasattr(conn, "peer") else "?", exc)
            return
        self._spawn(self.apply(info, lease_from=None), "controller-role-change")

    # -- quorum writes -----------------------------------------------------------------------------------

    def required_set(self) -> frozenset[int]:
        """Members whose copies count now: the set, the set being committed, joining slaves, and
        members an ALTER of unknown outcome would have added."""
        s = (self.sync_state_set | (self.pending_set or frozenset()) | frozenset(self.joining)
             | (self.unsure[1] if self.unsure else frozenset()))
        return s - {self.controller_id} if self.controller_id is not None else s

    def acked_offset(self) -> int:
        """The CommitLog offset up to which a send is acknowledged (``ALL``: no replica needed;
        -1: none yet). For :attr:`~rocket.store.ha.master.HAService.quorum`."""
        cfg = self.ha.config
        if not self.lease_valid:
            return -1  # fenced: nothing more is acknowledged
        acks: dict[int, int] = {}
        for c in self.ha.service.connections:
            acks[c.slave_id] = max(acks.get(c.slave_id, -1), c.ack_offset)
        if cfg.all_ack_in_sync_state_set:
            members = self.required_set()
            return min((acks.get(i, -1) for i in members), default=ALL)
        need = cfg.min_in_sync_replicas - 1
        joiners = [acks.get(i, -1) for i in self.joining if i != self.controller_id]
        floor = min(joiners, default=ALL)
        if need <= 0:
            return floor
        got = sorted((acks.get(i, -1) for i in self.sync_state_set | (self.pending_set or frozenset())
                      if i != self.controller_id), reverse=True)
        return min(floor, got[need - 1]) if len(got) >= need else -1

    def confirm_offset(self) -> int:
        """The offset every acknowledged send ends at or before (RocketMQ's ``confirmOffset``)."""
        end = self.ha.store.max_phy_offset
        if not self.ha.is_master:
            return end
        return min(end, max(self.acked_offset(), 0))

    def refuse_writes(self) -> str | None:
        """Why a controller-mode master must refuse a send now, or None."""
        if self.fenced_reason is not None:
            return f"it is fenced ({self.fenced_reason})"
        if time.monotonic() > self.lease_until:
            self.check_lease()
            if self.fenced_reason is not None:
                return f"it is fenced ({self.fenced_reason})"
            # no controller majority (allAckInSyncStateSet keeps it serving): a member that is not
            # even connected could not acknowledge, and the set cannot change: refuse at once
            connected = {c.slave_id for c in self.ha.service.connections}
            missing = sorted(self.required_set() - connected)
            if missing:
                return (f"no controller leader confirmed it for {self.fence_timeout:.1f} s and SyncStateSet "
                        f"member(s) {missing} are not connected")
        if len(self.sync_state_set) < self.ha.config.min_in_sync_replicas:
            return (f"its SyncStateSet {sorted(self.sync_state_set)} is smaller than minInSyncReplicas="
                    f"{self.ha.config.min_in_sync_replicas}")
        return None

    # -- the SyncStateSet ---------------------------------------------------------------------------------

    async def _sync_state_set_loop(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            if not self.ha.is_master or self.fenced_reason is not None or self.pending_set is not None:
                continue
            try:
                await self.check_sync_state_set()
            except Exception:
                log.exception("SyncStateSet check failed")

    def _conn_of(self, slave_id: int) -> HAConnection | None:
        best: HAConnection | None = None
        for c in self.ha.service.connections:
            if c.slave_id == slave_id and (best is None or c.ack_offset > best.ack_offset):
                best = c
        return best

    async def check_sync_state_set(self) -> None:
        """Grow or shrink the SyncStateSet (see the module doc); one change at a time."""
        ha = self.ha
        svc = ha.service
        now = time.monotonic()
        end = ha.store.max_phy_offset
        epoch_start = ha.epoch_file.entries[-1].start if ha.epoch_file.entries else 0
        max_lag = ha.config.ha_max_time_slave_not_catchup / 1000.0
        for c in svc.connections:
            if c.slave_id >= 0 and c.ack_offset >= 0 and (c.ack_offset >= end or svc.lag_seconds(c) < 1.0):
                self.caught_up[c.slave_id] = now
        # shrink
        for sid in sorted(self.sync_state_set - {self.controller_id}):
            if now - self.caught_up.get(sid, 0.0) > max_lag:
                await self._alter(self.sync_state_set - {sid}, f"slave {sid} has not caught up for {max_lag:.0f} s")
                return
        # joins under way
        for sid, (mark, since) in list(self.joining.items()):
            member = self._conn_of(sid)
            if member is not None and member.ack_offset >= mark:
                del self.joining[sid]
                await self._alter(self.sync_state_set | {sid},
                                  f"slave {sid} caught up (offset {member.ack_offset})", joining=sid)
                return
            if member is None or now - since > JOIN_TIMEOUT_S:
                del self.joining[sid]
                svc.recheck_quorum()
        # new joins
        for c in svc.connections:
            sid = c.slave_id
            if (sid < 0 or sid == self.controller_id or sid in self.sync_state_set or sid in self.joining
                    or c.ack_offset < epoch_start or end - c.ack_offset > JOIN_LAG_BYTES):
                continue
            mark = self.confirm_offset() if self.acked_offset() != ALL else end
            self.joining[sid] = (mark, now)
            log.info("slave %d is catching up to join the SyncStateSet (holding sends until it has offset %d)",
                     sid, mark)

    async def _alter(self, new_set: frozenset[int], why: str, *, joining: int | None = None) -> None:
        cfg = self.ha.config
        old = self.sync_state_set
        self.pending_set = new_set
        if joining is not None:
            self.joining[joining] = (0, time.monotonic())  # keep counting it until committed
        try:
            sent_epoch = self.sync_state_set_epoch
            ids, epoch = await self.client.alter_sync_state_set(cfg.broker_name, self.controller_id or 0,
                                                                self.master_epoch, new_set, sent_epoch)
            if epoch > self.sync_state_set_epoch:
                self.sync_state_set, self.sync_state_set_epoch = ids, epoch
            if self.unsure is not None and self.unsure[0] <= sent_epoch:
                # committed at the epoch of the unknown one: that one never was (one per epoch)
                log.info("ALTER_SYNC_STATE_SET adding %s settled: a later change committed", sorted(self.unsure[1]))
                self.unsure = None
            log.info("SyncStateSet of %s: %s -> %s (epoch %d): %s", cfg.broker_name, sorted(old), sorted(ids),
                     epoch, why)
        except RemotingCommandError as exc:
            if exc.code in (ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH, ResponseCode.CONTROLLER_INVALID_MASTER):
                self.fence(f"the controller answered {exc.code} to ALTER_SYNC_STATE_SET: replaced")
                self._spawn(self.poll_once(), "controller-reread")
            else:
                log.warning("ALTER_SYNC_STATE_SET %s -> %s: %s", sorted(old), sorted(new_set), exc)
                if exc.code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH:
                    self._spawn(self.poll_once(), "controller-reread")
        except (RemotingError, OSError) as exc:
            added = new_set - old
            log.warning("ALTER_SYNC_STATE_SET %s -> %s: %s; outcome unknown%s", sorted(old), sorted(new_set), exc,
                        f": {sorted(added)} stay required until the controllers tell" if added else "")
            if added:
                prev = self.unsure[1] if self.unsure else frozenset()
                self.unsure = (self.sync_state_set_epoch, prev | added, time.monotonic())
        finally:
            self.pending_set = None
            if joining is not None:
                self.joining.pop(joining, None)
            self.ha.service.recheck_quorum()

    def status(self) -> dict[str, Any]:
        """The controller-mode part of ``/api/v1/ha``."""
        return {
            "controllerAddr": self.ha.config.controller_addr,
            "controllerLeader": self.client.leader_addr,
            "controllerBrokerId": self.controller_id,
            "masterBrokerId": self.master_broker_id,
            "masterAddress": self.master_address,
            "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "joining": sorted(self.joining),
            "fenced": self.fenced_reason,
            "leaseFences": self.lease_fences,
            "unsureMembers": sorted(self.unsure[1]) if self.unsure else [],
            "leaseSeconds": round(max(0.0, self.lease_until - time.monotonic()), 3) if self.ha.is_master else None,
            "lastError": self.last_error,
        }
