""":class:`ReplicationManager`: a broker's replication role, epochs and failover (the
broker's side of replication, as RocketMQ's ``broker/controller/ReplicasManager``).

It owns the master side (:class:`~rocket.store.ha.master.HAService`, always
listening on ``haListenPort``), the slave side
(:class:`~rocket.store.ha.slave.HAClient` and the metadata copy
:class:`~rocket.broker.slave_sync.SlaveSynchronize`, running only on a slave),
the epoch file (``rocket.store.ha.epoch``) and the role changes:

**Promotion** (:meth:`promote`: ``rocket cluster failover``, POST
``/api/v1/role``, request 1008): refused while a NameServer still lists a
live master of the group (unless forced); stops replicating, cuts a
replicated record that arrived only in part, starts epoch ``max(known) + 1``
at the store's end, takes brokerId 0 and the promoted
role, rebuilds the queue-offset table from the ConsumeQueues, starts
delayed delivery and re-registers at once — the NameServers put this broker
under id 0 because its epoch is newer.

**Demotion** (:meth:`demote`): a master learns from a NameServer's
REGISTER_BROKER answer that another live master of its group has a newer
(or equal, already registered) epoch — at start-up or when a partition
heals. It stops accepting sends and delayed delivery, drops its slaves,
takes the SLAVE role and the lowest free brokerId ≥ 1 of its group,
replicates from the new master; the HA handshake truncates its divergent
tail first.

Roles chosen at run time survive restarts: ``<storePathRootDir>/config/
haState.json`` (``{"brokerRole", "brokerId"}``) overrides the configured
role and id at start-up (delete it to return to the configuration). Until
its first registration round has answered, a master holds sends back (they
wait up to ``registerBrokerTimeoutMills`` + 1 s, then get code 14), so a
returning old master never stores a send before it learns it was replaced;
the same holds while a role change runs.

Known limit (no consensus service, unlike RocketMQ 5's controller): if the
promoted master fails too and the old master restarts alone, it serves as
master again; when both return, the newer epoch wins and the other one's
writes after the split — acknowledged ones included — are cut. Promote only
when the old master is really gone (the promotion checks the NameServers).
ASYNC_MASTER can lose acknowledged messages on failover by design (they may
not have reached the slave); SYNC_MASTER does not (acknowledged = on a slave).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from rocket.auth.ha import sign_hello, verify_hello
from rocket.auth.hook import ServerAuth
from rocket.auth.signature import SessionCredentials
from rocket.auth.store import AuthMetadataStore
from rocket.broker.config import BrokerConfig
from rocket.broker.controller_mode import ControllerReplicas
from rocket.broker.metadata.replication import METADATA_TOPIC
from rocket.broker.slave_sync import FIRST_DELAY, SlaveSynchronize
from rocket.broker.tasks import write_file_durably
from rocket.protocol import loads_lenient
from rocket.remoting import (
    RemotingCommand,
    RemotingConnection,
    RemotingError,
    RequestCode,
    ResponseCode,
)
from rocket.remoting.tls import ClientTls, ServerTls
from rocket.store.api import BrokerRole, PutMessageResult, PutMessageStatus
from rocket.store.ha.epoch import EPOCH_FILE_NAME, EpochFile
from rocket.store.ha.master import HAService
from rocket.store.ha.metrics import HACollector, HAMetrics, HASnapshot, SlaveRow
from rocket.store.ha.slave import HAClient

if TYPE_CHECKING:
    from rocket.broker.metadata import BrokerMetadata
    from rocket.broker.metrics import BrokerMetrics
    from rocket.broker.registration import BrokerOuterAPI, RegisterResult
    from rocket.broker.schedule import ScheduleMessageService
    from rocket.protocol import TopicConfig
    from rocket.store import DefaultMessageStore
    from rocket.store.timer import TimerMessageStore

log = logging.getLogger("rocket.broker.replicas")
#: Seconds before a controller-mode slave's first metadata copy round (``SlaveSynchronize``).
CONTROLLER_MODE_FIRST_SYNC = 0.2

HA_STATE_FILE = "haState.json"


class RoleChangeError(Exception):
    """A promotion or demotion was refused (the message says why)."""


def ha_state_path(store_path_root_dir: str | Path) -> Path:
    """Where a role chosen at run time is kept: ``<storePathRootDir>/config/haState.json``."""
    return Path(store_path_root_dir) / "config" / HA_STATE_FILE


def apply_persisted_role(config: BrokerConfig) -> bool:
    """Apply a role saved by an earlier promotion or demotion to ``config``; True if applied.

    A malformed file is logged and ignored (the configured role stands).
    """
    if config.enable_controller_mode:
        return False  # the controllers choose roles (rocket.broker.controller_mode)
    path = ha_state_path(config.store_path_root_dir)
    try:
        obj = orjson.loads(path.read_bytes())
        role = BrokerRole(str(obj["brokerRole"]))
        broker_id = int(obj["brokerId"])
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.error("ignoring %s: %s", path, exc)
        return False
    if (role is BrokerRole.SLAVE) != (broker_id > 0):
        log.error("ignoring %s: role %s with brokerId %d", path, role, broker_id)
        return False
    if (config.broker_role, config.broker_id) != (role, broker_id):
        log.warning("role from %s overrides the configuration: %s brokerId %d (configured %s brokerId %d)",
                    path, role, broker_id, config.broker_role, config.broker_id)
    config.broker_role = role
    config.broker_id = broker_id
    return True


class MasterOnlyService(Protocol):
    """A broker service that runs on a master only (delayed delivery, the transaction check): started
    at promotion, stopped at demotion."""

    async def start(self) -> None:
        """Start serving (idempotent)."""
        ...

    async def stop(self) -> None:
        """Stop serving (idempotent)."""
        ...


class ReplicationBroker(Protocol):
    """The broker as the :class:`ReplicationManager` sees it (``BrokerController`` satisfies it):
    its settings, store, metadata, metrics, master-only services, NameServer client and registration."""

    config: BrokerConfig
    store: DefaultMessageStore
    metadata: BrokerMetadata
    metrics: BrokerMetrics
    schedule: ScheduleMessageService
    #: The transaction check service (RocketMQ's TransactionalMessageCheckService).
    transaction: MasterOnlyService
    #: Timer messages: enqueued everywhere, delivered by masters only (``set_should_run_dequeue``).
    timer: TimerMessageStore
    outer_api: BrokerOuterAPI
    #: Users and ACLs (copied from the master by the slave's metadata copy).
    auth_store: AuthMetadataStore
    #: The request check (None when ACL is off) and what this broker signs with.
    auth: ServerAuth | None
    inner_credentials: SessionCredentials | None
    #: TLS of this broker's ports (None: plaintext) and of its own connections (None: plaintext).
    tls: ServerTls | None
    client_tls: ClientTls | None
    #: On a slave: the master's remoting address and HA address from the NameServer's answer.
    master_addr: str | None
    ha_master_addr: str | None
    #: The store has started (recovered) and may be read.
    store_ready: bool

    def trigger_register(self) -> None:
        """Register with every NameServer soon (coalesced)."""
        ...

    async def register_broker_all(self) -> None:
        """Register with every NameServer now."""
        ...

    def new_topic_config(self, topic: str, **fields: Any) -> TopicConfig:
        """A topic config with this broker's defaults and ``fields`` (TopicConfig's field names)."""
        ...


class ReplicationManager:
    """See the module doc. Built by the controller; ``start`` after the store started.

    Satisfies :class:`~rocket.store.ha.host.HAHost` for the HA service and client it owns.
    """

    def __init__(self, broker: ReplicationBroker) -> None:
        self.broker = broker
        self.epoch_file = EpochFile(Path(broker.config.store_path_root_dir) / EPOCH_FILE_NAME)
        self.metrics = HAMetrics(broker.metrics.registry)
        self.service = HAService(self)
        self.client = HAClient(self)
        # Controller mode: a slave may join the SyncStateSet (and be elected) as soon as it has
        # caught up with the log; what predates its copy of the log comes only with a copy round,
        # so the first one runs at once rather than after RocketMQ's 3 s.
        self.sync = SlaveSynchronize(broker, self.master_main_address,
                                     period=broker.config.slave_sync_interval / 1000.0,
                                     first_delay=CONTROLLER_MODE_FIRST_SYNC if broker.config.enable_controller_mode
                                     else FIRST_DELAY)
        #: False until the first registration round told a master it still is one.
        self.role_confirmed = False
        self.changing_role = False
        self._settled = asyncio.Event()
        self._role_lock = asyncio.Lock()
        self._demote_task: asyncio.Task[None] | None = None
        self._retry_task: asyncio.Task[None] | None = None
        self._started = False
        #: Controller mode (``enableControllerMode``): the controllers choose the role.
        self.controller: ControllerReplicas | None = (
            ControllerReplicas(self) if broker.config.enable_controller_mode else None)
        broker.metrics.install_collector(HACollector(self.snapshot))

    # -- shortcuts ------------------------------------------------------------------------------

    @property
    def config(self) -> BrokerConfig:
        """The broker's configuration (role and id change at run time)."""
        return self.broker.config

    @property
    def store(self) -> DefaultMessageStore:
        """The broker's message store."""
        return self.broker.store

    @property
    def is_master(self) -> bool:
        """This broker is its group's master now."""
        return self.config.is_master

    def sign_hello(self, hello: dict[str, Any]) -> dict[str, Any]:
        """The HA hello, signed with the broker's inner credentials when ACL is on."""
        creds = self.broker.inner_credentials
        return sign_hello(hello, creds) if creds is not None else hello

    def check_slave(self, hello: dict[str, Any] | None) -> str | None:
        """With ACL on, only slaves whose hello a Super user signed may replicate."""
        if self.broker.auth is None:
            return None
        return verify_hello(hello, self.broker.auth_store)

    @property
    def server_tls(self) -> ServerTls | None:
        """TLS of the HA port: the broker's (``tlsMode``)."""
        return self.broker.tls

    @property
    def client_tls(self) -> ClientTls | None:
        """TLS of the slave's HA connection: the broker's own (``tls.enable``)."""
        return self.broker.client_tls

    def master_ha_address(self) -> str | None:
        """Where a slave replicates from: ``haMasterAddress``, else the NameServer's answer."""
        return self.config.ha_master_address or self.broker.ha_master_addr

    def master_main_address(self) -> str | None:
        """The master's remoting address (config sync): from the NameServer or the HA handshake."""
        return self.broker.master_addr or self.client.master_addr

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the epoch file, listen for slaves, start the slave side when a slave. Raises
        ``OSError`` when the HA port is taken and :class:`~rocket.store.ha.epoch.EpochFileError`."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.epoch_file.load)
        cfg = self.config
        if self.controller is not None:
            await self.controller.prepare()  # a slave under its controller id until told otherwise
        if cfg.is_master:
            await self._ensure_epoch()
        else:
            self.role_confirmed = True
        await self.service.start(cfg.bind_address, cfg.ha_port)
        self._started = True
        if cfg.is_slave:
            self.client.start()
            self.sync.start()
        if not cfg.namesrv_list():
            self.role_confirmed = True
        self._mark_settled()
        if self.controller is not None:
            self.controller.start()

    async def shutdown(self) -> None:
        """Stop replication in both directions."""
        if self.controller is not None:
            await self.controller.shutdown()
        for task in (self._demote_task, self._retry_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self.client.stop()
        await self.sync.stop()
        await self.service.stop()
        self._started = False

    async def _ensure_epoch(self) -> None:
        """A master with an empty epoch file starts epoch 1 at its log's start."""
        if not self.epoch_file.entries:
            start = self.store.min_phy_offset
            await asyncio.get_running_loop().run_in_executor(None, self.epoch_file.append, 1, start)

    # -- sends ----------------------------------------------------------------------------------

    @property
    def role_pending(self) -> bool:
        """A send arriving now would have to wait for the role to settle."""
        return self.changing_role or (not self.role_confirmed and self.config.is_master)

    async def wait_role_settled(self) -> None:
        """Wait (at most the registration timeout + 1 s) until the role is confirmed and no
        role change runs, so that a send racing the start-up registration is not refused."""
        limit = self.config.register_broker_timeout_mills / 1000.0 + 1.0
        deadline = time.monotonic() + limit
        while self.role_pending and time.monotonic() < deadline:
            self._settled.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self._settled.wait()

    def _mark_settled(self) -> None:
        if not self.role_pending:
            self._settled.set()

    def refuse_writes(self) -> str | None:
        """Why sends must be refused now (code 14), or None."""
        if self.changing_role:
            return "its replication role is changing"
        if not self.role_confirmed and self.config.is_master:
            return "it has not yet confirmed with a NameServer that it is still its group's master"
        if self.controller is not None and self.config.is_master:
            return self.controller.refuse_writes()
        return None

    def _fenced(self) -> bool:
        return self.controller is not None and not self.controller.lease_valid

    def _sync_status(self, result: PutMessageResult) -> PutMessageStatus | asyncio.Future[PutMessageStatus]:
        if self._fenced():
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        status = self.service.sync_status(result.end_offset)
        if status is PutMessageStatus.SLAVE_NOT_AVAILABLE:
            self.metrics.sync_results.labels("slave_not_available").inc()
        return status

    def _sync_result(self, result: PutMessageResult, status: PutMessageStatus) -> PutMessageResult:
        if status is PutMessageStatus.PUT_OK:
            return result
        remark = ("no slave is connected or in sync (haSlaveFallbehindMax)"
                  if status is PutMessageStatus.SLAVE_NOT_AVAILABLE
                  else f"no slave acknowledged it within slaveTimeout={self.config.slave_timeout} ms")
        return result.with_status(status, f"stored on the master, but {remark}")

    async def wait_replicated(self, result: PutMessageResult) -> PutMessageResult:
        """SYNC_MASTER: ``result`` (PUT_OK) once a slave has the last record, else
        FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE with the same (stored) messages."""
        started = time.perf_counter()
        status = self._sync_status(result)
        if not isinstance(status, PutMessageStatus):
            status = await status
            self.metrics.sync_wait.observe(time.perf_counter() - started)
        return self._sync_result(result, status)

    def replicate_nowait(self, put: PutMessageResult | asyncio.Future[PutMessageResult]
                         ) -> PutMessageResult | asyncio.Future[PutMessageResult]:
        """:meth:`wait_replicated` for a put still in flight, without a coroutine: a future of the
        final result (PUT_OK once a slave has it, else the failure status), resolved from the
        store's and the slave's completions; a refused put comes back as it is."""
        if isinstance(put, PutMessageResult):
            return put
        loop = asyncio.get_running_loop()
        out: asyncio.Future[PutMessageResult] = loop.create_future()
        put.add_done_callback(partial(self._store_done, out, time.perf_counter()))
        return out

    def _store_done(self, out: asyncio.Future[PutMessageResult], started: float,
                    fut: asyncio.Future[PutMessageResult]) -> None:
        """The store completed a SYNC_MASTER put: answer now, or when a slave has it."""
        if out.done():
            return
        if fut.cancelled() or fut.exception() is not None:
            out.set_exception(fut.exception() or asyncio.CancelledError())
            return
        result = fut.result()
        if result.status is not PutMessageStatus.PUT_OK:
            out.set_result(result)
            return
        end = result.end_offset
        status = PutMessageStatus.SLAVE_NOT_AVAILABLE if self._fenced() else self.service.sync_now(end)
        if status is not None:
            if status is PutMessageStatus.SLAVE_NOT_AVAILABLE:
                self.metrics.sync_results.labels("slave_not_available").inc()
            out.set_result(self._sync_result(result, status))
            return

        def slave_done(st: PutMessageStatus) -> None:
            self.metrics.sync_wait.observe(time.perf_counter() - started)
            out.set_result(self._sync_result(result, st))

        self.service.wait_callback(end, out, slave_done)

    def suggest_slave(self) -> bool:
        """May a master send slow consumers to a slave? (an in-sync slave is connected)"""
        return self.service.slave_ok()

    @property
    def master_reachable(self) -> bool:
        """On a slave: is the master there (replicating, or lost only moments ago)?"""
        return self.client.master_reachable

    # -- registration -----------------------------------------------------------------------------

    def registration_epoch(self) -> int | None:
        """The epoch a master sends with REGISTER_BROKER (None for a slave)."""
        return self.epoch_file.last_epoch if self.config.is_master else None

    def on_registered(self, results: list[RegisterResult]) -> None:
        """After a registration round: a master told of a newer live master steps down (in
        controller mode it only fences itself: the controllers decide roles)."""
        cfg = self.config
        if self.controller is not None:
            self.role_confirmed = True
            self._mark_settled()
            self.controller.on_registered(results)
            return
        if not cfg.is_master:
            if self.master_ha_address():
                if self.client.state in ("disconnected", "refused"):
                    self.client.wake()
            elif self._retry_task is None or self._retry_task.done():
                # no master registered yet (brokers starting together): ask again soon, not in 30 s
                self._retry_task = asyncio.get_running_loop().create_task(self._register_again(2.0),
                                                                         name="ha-find-master")
            return
        for r in results:
            if r.ok and r.master_addr and r.master_addr != cfg.broker_addr:
                if self._demote_task is None or self._demote_task.done():
                    log.warning("NameServer %s lists %s as master of %s (epoch %s, ours %d): stepping down",
                                r.namesrv_addr, r.master_addr, cfg.broker_name, r.master_epoch,
                                self.epoch_file.last_epoch)
                    self.changing_role = True
                    self._demote_task = asyncio.get_running_loop().create_task(
                        self._demote_guarded(r.master_addr, r.ha_server_addr, r.master_epoch or 0),
                        name="ha-demote")
                return
        if not self.role_confirmed:
            self.role_confirmed = True
            self._mark_settled()
            if any(r.ok for r in results):
                log.info("registration confirmed this broker as master of %s (epoch %d)", cfg.broker_name,
                         self.epoch_file.last_epoch)
            else:
                log.warning("no NameServer answered the first registration: serving as master of %s "
                            "without confirmation (epoch %d)", cfg.broker_name, self.epoch_file.last_epoch)

    async def _register_again(self, delay: float) -> None:
        await asyncio.sleep(delay)
        if self.config.is_slave and not self.master_ha_address():
            self.broker.trigger_register()

    async def _demote_guarded(self, master_addr: str, ha_addr: str | None, master_epoch: int) -> None:
        try:
            await self.demote(master_addr, ha_addr, master_epoch)
        except Exception:
            log.exception("stepping down failed")
            self.changing_role = False
            self._mark_settled()

    # -- role changes -------------------------------------------------------------------------------

    async def _persist_role(self) -> None:
        cfg = self.config
        data = orjson.dumps({"brokerRole": str(cfg.broker_role), "brokerId": cfg.broker_id,
                             "epoch": self.epoch_file.last_epoch, "changedAt": int(time.time() * 1000)})
        await asyncio.get_running_loop().run_in_executor(
            None, write_file_durably, ha_state_path(cfg.store_path_root_dir), data)

    async def _cluster_group(self) -> dict[str, dict[int, str]]:
        """NameServer address → ``{brokerId: addr}`` of this broker's group (GET_BROKER_CLUSTER_INFO)."""
        api = self.broker.outer_api
        out: dict[str, dict[int, str]] = {}
        for ns in await api.addresses():
            try:
                resp = await api.client.invoke(ns, RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO,
                                                                   language="JAVA"), timeout=3.0)
            except RemotingError as exc:
                log.info("cluster info from NameServer %s: %s", ns, exc)
                continue
            if resp.code != ResponseCode.SUCCESS:
                continue
            try:
                obj = loads_lenient(resp.body)
                bd = obj.get("brokerAddrTable", {}).get(self.config.broker_name) or {}
                out[ns] = {int(k): str(v) for k, v in (bd.get("brokerAddrs") or {}).items()}
            except (ValueError, AttributeError, TypeError):
                continue
        return out

    async def promote(self, broker_role: BrokerRole | str | None = None, *, force: bool = False,
                      epoch: int | None = None) -> dict[str, Any]:
        """Make this slave its group's master (see the module doc); returns :meth:`status`.

        Raises :class:`RoleChangeError` when this broker is already master with
        another role, ``broker_role`` is not a master role, or (without
        ``force``) a NameServer still lists another master of the group. ``epoch``: the new
        epoch (controller mode: the controller's ``masterEpoch``); default ``max(known) + 1``.
        """
        cfg = self.config
        role = BrokerRole(str(broker_role)) if broker_role else cfg.promoted_broker_role
        if role is BrokerRole.SLAVE:
            raise RoleChangeError("promotion needs ASYNC_MASTER or SYNC_MASTER")
        async with self._role_lock:
            if cfg.is_master:
                return self.status()
            if not force:
                for ns, addrs in (await self._cluster_group()).items():
                    other = addrs.get(0)
                    if other and other != cfg.broker_addr:
                        raise RoleChangeError(f"NameServer {ns} still lists {other} as the live master of "
                                              f"{cfg.broker_name}; stop it first (or force)")
            self.changing_role = True
            try:
                await self.client.stop()
                await self.sync.stop()
                store = self.store
                await store.commit_log.wait_idle()
                whole = store.dispatch_all()
                if whole < store.max_phy_offset:  # replication stopped inside a record
                    cut = await store.truncate(whole)
                    log.warning("promotion: dropped %d bytes of an incomplete replicated record at %d", cut, whole)
                known = max(self.epoch_file.last_epoch, self.client.master_epoch)
                start = store.max_phy_offset
                if epoch is not None and epoch == self.epoch_file.last_epoch >= self.client.master_epoch:
                    pass  # master again in the epoch it led before a restart: its log continues it
                else:
                    if epoch is None or epoch <= known:
                        if epoch is not None:
                            log.warning("controller epoch %d is not above the known epoch %d: using %d", epoch,
                                        known, known + 1)
                        epoch = known + 1
                    await asyncio.get_running_loop().run_in_executor(None, self.epoch_file.append, epoch, start)
                old_id = cfg.broker_id
                cfg.broker_role = role
                cfg.broker_id = 0
                store.config.broker_role = role
                store.rebuild_queue_offset_table()
                self._adopt_replicated_topics()
                self.broker.master_addr = None
                self.broker.ha_master_addr = None
                await self._persist_role()
                await self.broker.schedule.start()
                await self.broker.transaction.start()
                self.broker.timer.set_should_run_dequeue(True)
                self.role_confirmed = True
            finally:
                self.changing_role = False
                self._mark_settled()
            self.metrics.role_changes.labels("master").inc()
            log.warning("promoted to %s of %s (was slave %d): epoch %d from CommitLog offset %d",
                        role, cfg.broker_name, old_id, epoch, start)
        await self.broker.register_broker_all()
        return self.status()

    def replicated_topic_config(self, topic: str) -> Any:
        """A read-write TopicConfig for a topic that has replicated data but no config yet (one
        queue more than the highest queue id seen); None when there is no data either."""
        ids = self.store.queue_ids(topic)
        if not ids:
            return None
        n = max(ids) + 1
        return self.broker.new_topic_config(topic, read_queue_nums=n, write_queue_nums=n)

    def _adopt_replicated_topics(self) -> None:
        """Give topics that have replicated data but no config yet (created on the old master
        after the last config copy) a config (:meth:`replicated_topic_config`). Without it the
        new master would re-create them from TBW102."""
        store = self.store
        configs = self.broker.metadata.topic_configs
        made = []
        for topic in store.topics():
            if configs.get(topic) is None and topic != METADATA_TOPIC:
                tc = self.replicated_topic_config(topic)
                if tc is not None:
                    made.append(tc)
        if made:
            configs.put_many(made)
            log.warning("topics replicated but never copied from the old master got a config: %s",
                        ", ".join(f"{tc.topic_name} ({tc.read_queue_nums} queues)" for tc in made))

    async def _free_slave_id(self) -> int:
        used: set[int] = set()
        for addrs in (await self._cluster_group()).values():
            used.update(bid for bid, addr in addrs.items() if addr != self.config.broker_addr)
        bid = 1
        while bid in used:
            bid += 1
        return bid

    async def demote(self, master_addr: str, ha_addr: str | None, master_epoch: int = 0, *,
                     broker_id: int | None = None) -> dict[str, Any]:
        """Step down to slave of ``master_addr`` (HA address ``ha_addr``); returns :meth:`status`.
        ``broker_id``: the slave id to take (controller mode: the controller id); default the
        lowest free id the NameServers show."""
        cfg = self.config
        async with self._role_lock:
            if cfg.is_slave:
                return self.status()
            self.changing_role = True
            try:
                store = self.store
                old_role = cfg.broker_role
                cfg.broker_role = BrokerRole.SLAVE  # from here on slaves are refused and puts fail
                store.config.broker_role = BrokerRole.SLAVE
                self.service.drop_all(f"{master_addr} is the master now")
                await self.broker.schedule.stop()
                await self.broker.transaction.stop()
                self.broker.timer.set_should_run_dequeue(False)
                await store.commit_log.wait_idle()
                cfg.broker_id = broker_id if broker_id is not None else await self._free_slave_id()
                await self._persist_role()
                self.broker.master_addr = master_addr
                if ha_addr:
                    self.broker.ha_master_addr = ha_addr
                self.role_confirmed = True
                self.client.start()
                self.sync.start()
            finally:
                self.changing_role = False
                self._mark_settled()
            self.metrics.role_changes.labels("slave").inc()
            log.warning("stepped down from %s to slave %d of %s: master %s (epoch %d, ours %d)", old_role,
                        cfg.broker_id, cfg.broker_name, master_addr, master_epoch, self.epoch_file.last_epoch)
        self.broker.trigger_register()
        return self.status()

    # -- requests -----------------------------------------------------------------------------------

    def epoch_file_bump(self, epoch: int) -> None:
        """A master kept by a new controller election starts ``epoch`` at its log's end (if newer)."""
        if epoch > self.epoch_file.last_epoch:
            self.epoch_file.append(epoch, self.store.max_phy_offset)

    async def process_role_change(self, request: RemotingCommand, conn: RemotingConnection
                                  ) -> RemotingCommand | None:
        """NOTIFY_BROKER_ROLE_CHANGED (1008). Controller mode: RocketMQ's form (oneway; header
        ``masterAddress``, ``masterEpoch``, ``syncStateSetEpoch``, ``masterBrokerId``; body
        SyncStateSet), see :mod:`rocket.broker.controller_mode`. Otherwise RocketCluster's form:
        ext ``role`` = MASTER (promote), optional ``brokerRole`` (ASYNC_MASTER/SYNC_MASTER) and
        ``force``; body = status JSON."""
        if self.controller is not None:
            if request.get("masterEpoch") is None:
                return request.response(ResponseCode.SYSTEM_ERROR, "this broker is in controller mode: "
                                        "elect a master through the controller (ELECT_MASTER)")
            self.controller.process_notify(request, conn)
            return None if request.is_oneway else request.response(ResponseCode.SUCCESS)
        role = (request.get("role") or "MASTER").upper()
        if role != "MASTER":
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    "only promotion (role=MASTER) is supported: a master steps down by itself "
                                    "when a newer master of its group registers")
        try:
            status = await self.promote(request.get("brokerRole") or None, force=request.get_bool("force", False))
        except (RoleChangeError, ValueError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(status))

    def process_ha_status(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """GET_BROKER_HA_STATUS (907): body = RocketMQ 5's HARuntimeInfo (:meth:`ha_runtime_info`,
        what mqadmin's haStatus reads), or :meth:`status` JSON when ext ``format`` is ``rocketcluster``
        (our admin client)."""
        body = self.status() if request.get("format") == "rocketcluster" else self.ha_runtime_info()
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    def ha_runtime_info(self) -> dict[str, Any]:
        """RocketMQ 5's ``HARuntimeInfo``: on a master ``master`` true, ``masterCommitLogMaxOffset``,
        ``inSyncSlaveNums`` and one ``haConnectionInfo`` per slave (``addr``, ``slaveAckOffset``,
        ``diff`` in bytes, ``inSync``, ``transferFromWhere``); on a slave ``haClientRuntimeInfo``
        (``masterAddr``, ``maxOffset`` = its own CommitLog end, ``masterFlushOffset`` = the master's
        end as last told, ``isActivated``). Transfer speeds and read/write times are not kept: 0."""
        svc = self.service
        store = self.store
        if self.config.is_master:
            conns = [{"addr": c.slave_addr, "slaveAckOffset": c.ack_offset, "diff": svc.lag_bytes(c),
                      "inSync": svc.in_sync(c), "transferredByteInSecond": 0, "transferFromWhere": c.transfer_offset}
                     for c in svc.connections]
            return {"master": True, "masterCommitLogMaxOffset": store.max_phy_offset,
                    "inSyncSlaveNums": sum(1 for c in conns if c["inSync"]), "haConnectionInfo": conns,
                    "haClientRuntimeInfo": {}}
        cl = self.client
        return {"master": False, "masterCommitLogMaxOffset": 0, "inSyncSlaveNums": 0, "haConnectionInfo": [],
                "haClientRuntimeInfo": {"masterAddr": cl.master_ha_addr or self.master_ha_address(),
                                        "transferredByteInSecond": 0, "maxOffset": store.max_phy_offset,
                                        "lastReadTimestamp": 0, "lastWriteTimestamp": 0,
                                        "masterFlushOffset": max(0, cl.master_max_offset),
                                        "isActivated": cl.state == "transferring"}}

    def process_epoch_cache(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """GET_BROKER_EPOCH_CACHE (1007): body ``{"epochs": [[epoch, start], ...], "maxOffset": n}``
        plus the fields of RocketMQ 5's ``EpochEntryCache`` (``clusterName``, ``brokerName``,
        ``brokerId``, ``epochList`` of ``{"epoch", "startOffset", "endOffset"}``), which mqadmin's
        getBrokerEpoch prints; an entry ends where the next starts, the last at ``maxOffset``."""
        epochs = self.epoch_file.to_json()
        max_offset = self.store.max_phy_offset
        starts = [int(e[1]) for e in epochs]
        epoch_list = [{"epoch": int(e[0]), "startOffset": int(e[1]),
                       "endOffset": starts[i + 1] if i + 1 < len(starts) else max_offset}
                      for i, e in enumerate(epochs)]
        body = {"epochs": epochs, "maxOffset": max_offset, "clusterName": self.config.broker_cluster_name,
                "brokerName": self.config.broker_name, "brokerId": self.config.broker_id, "epochList": epoch_list}
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    # -- status ---------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Role, epochs and both sides' replication state (HTTP ``/api/v1/ha``, request 907)."""
        cfg = self.config
        svc = self.service
        store = self.store
        cl = self.client
        slaves = [{
            "slaveAddr": c.slave_addr,
            "slaveId": c.slave_id,
            "peer": c.peer,
            "epochHandshake": c.handshake,
            "ackOffset": c.ack_offset,
            "transferOffset": c.transfer_offset,
            "lagBytes": svc.lag_bytes(c),
            "lagSeconds": round(svc.lag_seconds(c), 3),
            "inSync": svc.in_sync(c),
            "connectedSeconds": round(time.monotonic() - c.connected_at, 1),
        } for c in svc.connections]
        return {
            "clusterName": cfg.broker_cluster_name,
            "brokerName": cfg.broker_name,
            "brokerId": cfg.broker_id,
            "brokerRole": str(cfg.broker_role),
            "brokerAddr": cfg.broker_addr,
            "haServerAddr": cfg.ha_server_addr,
            "haListenPort": svc.port,
            "epoch": self.epoch_file.last_epoch,
            "epochs": self.epoch_file.to_json(),
            "maxOffset": store.max_phy_offset,
            "minOffset": store.min_phy_offset,
            "roleConfirmed": self.role_confirmed,
            "controllerMode": None if self.controller is None else self.controller.status(),
            "metadataReplication": self._metadata_replication_status(),
            "slaves": slaves,
            "syncWaiters": len(svc.waiters),
            "master": None if cfg.is_master else {
                "haAddr": cl.master_ha_addr or self.master_ha_address(),
                "addr": self.master_main_address(),
                "state": cl.state,
                "reachable": cl.master_reachable,
                "epoch": cl.master_epoch,
                "lastError": cl.last_error,
                "receivedBytes": cl.received_bytes,
                "masterMaxOffset": cl.master_max_offset,
                "configSyncRounds": self.sync.rounds,
                "configSyncError": self.sync.last_error,
            },
        }

    def _metadata_replication_status(self) -> dict[str, Any] | None:
        replicator = getattr(self.broker, "metadata_replication", None)
        return None if replicator is None else dict(replicator.status())

    def snapshot(self) -> HASnapshot:
        """Scrape-time values for :class:`~rocket.store.ha.metrics.HACollector`."""
        svc = self.service
        rows = [SlaveRow(c.slave_addr, svc.lag_bytes(c), svc.lag_seconds(c), svc.in_sync(c), c.ack_offset)
                for c in svc.connections] if self._started else []
        lag = 0
        if not self.is_master and self.client.master_max_offset >= 0 and self.broker.store_ready:
            lag = max(0, self.client.master_max_offset - self.store.max_phy_offset)
        return HASnapshot(self.is_master, self.epoch_file.last_epoch, rows, self.client.state, lag)
