""":class:`BrokerController`: one broker process — the store, the request
processors on the main and VIP ports, long polling, delayed delivery, client
bookkeeping, NameServer registration and the HTTP side.

Lifecycle (RocketMQ 4.9.8 ``BrokerController``):

``start()``: open and recover the store; create the system topics; load the
delay offsets; listen on ``listenPort`` and (unless disabled) the VIP port
``listenPort - 2``, which serves everything but PULL_MESSAGE (RocketMQ's
``BrokerController`` registers no pull processor on its fastRemotingServer); start
delayed delivery (masters only), HTTP, the client-expiry scan; register with
every NameServer, then again every ``registerNameServerPeriod`` and
immediately after topic changes.

``shutdown()`` (SIGTERM): stop accepting connections; unregister from every
NameServer; answer every parked pull; let in-flight sends finish (≤ 5 s);
stop delayed delivery (persisting its offsets); close connections and HTTP;
shut the store down (flush, checkpoint).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocket.auth import AuthConfig, AuthMetadataStore, ServerAuth, inner_credentials
from rocket.auth.http import HttpAuth
from rocket.auth.processor import AuthAdminProcessor
from rocket.broker.client_manager import ConsumerManager, ProducerManager
from rocket.broker.config import (
    BrokerConfig,
    ConfigError,
    changed_keys,
    format_properties,
    parse_properties,
    runtime_overrides_path,
)
from rocket.broker.inner import MessageInner
from rocket.broker.listeners import ListenerAddresses, listener_ports
from rocket.broker.locks import RebalanceLockManager
from rocket.broker.long_polling import PullRequestHoldService, WakeReason
from rocket.broker.metadata import BrokerMetadata
from rocket.broker.metadata.replication import MetadataReplicator
from rocket.broker.metrics import BrokerCollector, BrokerMetrics, GaugeSnapshot, LagRow
from rocket.broker.processor.admin import AdminBrokerProcessor
from rocket.broker.processor.client_manage import ClientManageProcessor, ConsumerManageProcessor
from rocket.broker.processor.pull import PullMessageProcessor
from rocket.broker.processor.query import QueryMessageProcessor
from rocket.broker.processor.send import SendMessageProcessor
from rocket.broker.processor.tools import ToolsAdminProcessor
from rocket.broker.registration import BrokerIdentity, BrokerOuterAPI, Resolver
from rocket.broker.replicas import ReplicationManager, apply_persisted_role
from rocket.broker.schedule import SCHEDULE_TOPIC, ScheduleMessageService, parse_delay_levels
from rocket.broker.stats import BrokerStats, ConsumeStatRow
from rocket.broker.tasks import CoalescingRunner, TaskGroup, write_file_durably
from rocket.broker.timer import REWRITE_TRIGGERS, TIMER_PROPERTY_KEYS, TimerCollector, transform_timer_message
from rocket.broker.topics import TopicManager, is_readable, is_writeable
from rocket.broker.transaction import TransactionalMessageService
from rocket.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_NOT_TYPE,
)
from rocket.protocol import (
    DataVersion,
    RegisterBrokerBody,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicConfigSerializeWrapper,
    loads_lenient,
)
from rocket.remoting import (
    Processors,
    RemotingCommand,
    RemotingConnection,
    RemotingError,
    RemotingServer,
    RequestCode,
    ResponseCode,
)
from rocket.remoting.connection import RequestQueue
from rocket.remoting.tls import is_tls_key
from rocket.store import DefaultMessageStore
from rocket.store.api import BrokerRole, PutMessageBatch, PutMessageRequest, PutMessageResult, PutMessageStatus
from rocket.store.timer import TIMER_TOPIC, TimerMessageStore

if TYPE_CHECKING:
    from rocket.broker.interfaces import PutDone

log = logging.getLogger("rocket.broker")
#: The properties that make a send a timer message (``rocket.broker.timer``).
_TIMER_NAMES = frozenset(TIMER_PROPERTY_KEYS)

#: Consumer groups RocketMQ treats as its own (subscription groups auto-created for them).
SYSTEM_CONSUMER_GROUPS = frozenset({"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "__MONITOR_CONSUMER", "SELF_TEST_C_GROUP"})
#: Subscription groups every broker has from its first start (``SubscriptionGroupManager.init``
#: of RocketMQ 5.x; 4.9.8 has all but the last), with the default settings.
INITIAL_SUBSCRIPTION_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_SYS_RMQ_TRANS",
)
#: Lag rows are only computed this often for /metrics (seconds).
_READY_WINDOW = 120.0


def _now_ms() -> int:
    return int(time.time() * 1000)


def _is_system_consumer_group(group: str) -> bool:
    return group in SYSTEM_CONSUMER_GROUPS or group.startswith("CID_RMQ_SYS_")


class BrokerController:
    """A broker: build it with a :class:`BrokerConfig`, then ``await start()``.

    ``resolver`` replaces DNS resolution of NameServer names (tests).
    Raises ``OSError`` from :meth:`start` when a port is taken, and whatever
    the store raises when its files cannot be recovered.
    """

    def __init__(self, config: BrokerConfig, *, resolver: Resolver | None = None) -> None:
        apply_persisted_role(config)
        config.validate()
        self.config = config
        self.store = DefaultMessageStore(config.store_config())
        self.metadata = BrokerMetadata(Path(config.store_path_root_dir) / "config")
        self.metrics = BrokerMetrics()
        tls = config.tls_config()
        #: TLS of the remoting, VIP, HA and HTTP ports (None: plaintext; ``tlsMode``).
        self.tls = tls.server()
        #: TLS of this broker's own connections: NameServers, its master, controllers (``tls.enable``).
        self.client_tls = tls.client()
        #: Replication: roles, epochs, the HA listener and client (``rocket.broker.replicas``).
        self.ha = ReplicationManager(self)
        #: Metadata changes written into the CommitLog for the slaves (controller mode;
        #: ``rocket.broker.metadata.replication``).
        self.metadata_replication = MetadataReplicator(self)
        self.stats = BrokerStats()
        self.consumer_manager = ConsumerManager(
            self._notify_consumer_ids_changed, config.channel_expired_timeout / 1000.0
        )
        self.producer_manager = ProducerManager(config.channel_expired_timeout / 1000.0)
        self.hold_service = PullRequestHoldService()
        self.lock_manager = RebalanceLockManager(config.rebalance_lock_max_live_time / 1000.0)
        self.schedule = ScheduleMessageService(
            self.store,
            parse_delay_levels(config.message_delay_level),
            Path(config.store_path_root_dir) / "config",
        )
        #: Arbitrary-time delayed messages (``rocket.store.timer``): enqueues everywhere, delivers on masters.
        self.timer = TimerMessageStore(self.store)
        self.topics = TopicManager(lambda: self.metadata.topic_configs, config, TopicConfig, self.trigger_register)
        self.outer_api = BrokerOuterAPI(
            config.namesrv_list, timeout=config.register_broker_timeout_mills / 1000.0, resolver=resolver
        )
        #: Transactional messages: END_TRANSACTION and the check-back service (masters only).
        self.transaction = TransactionalMessageService(self)
        self.send_processor = SendMessageProcessor(self)
        #: The queue sends wait in before they are handled, shared by every port (Apache RocketMQ's
        #: send thread pool queue, cleaned by ``BrokerFastFailure``; see ``rocket.remoting.connection``).
        self.send_queue = RequestQueue(
            "send", max_wait=self._send_queue_max_wait,
            capacity=lambda: self.config.send_thread_pool_queue_capacity,
            max_bytes=lambda: self.config.max_in_flight_send_bytes,
            on_busy=lambda reason: self.metrics.send_rejected.labels(f"queue_{reason}").inc(),
            gather=(self.store.commit_log.gather, self.store.commit_log.release),
        )
        self.pull_processor = PullMessageProcessor(self)
        self.client_processor = ClientManageProcessor(self)
        self.consumer_processor = ConsumerManageProcessor(self)
        self.admin_processor = AdminBrokerProcessor(self)
        self.query_processor = QueryMessageProcessor(self)
        self.tools_processor = ToolsAdminProcessor(self)
        #: Users and ACLs (``<storePathRootDir>/config/auth.json``), served by the AUTH_* codes.
        self.auth_config = auth_config(config)
        self.auth_store = AuthMetadataStore(self.auth_config.metadata_path)
        self.auth_processor = AuthAdminProcessor(self.auth_store, read_only=lambda: self.config.is_slave)
        #: The request check on every remoting port (None when ACL is off).
        self.auth: ServerAuth | None = (
            ServerAuth(self.auth_config, self.auth_store) if self.auth_config.enabled else None
        )
        #: Credentials this broker signs its own requests with (registration, slave copies, controllers).
        self.inner_credentials = inner_credentials(self.auth_config) if self.auth_config.enabled else None
        #: Credential check of the HTTP ``/api/v1`` routes (None: open, ACL off and no token file).
        self.http_auth = HttpAuth.configured(config.http_auth_token_file,
                                             self.auth_store if self.auth_config.enabled else None,
                                             config.http_auth_probes)
        self.remoting = RemotingServer(
            self._processors(vip=False), host=config.bind_address, port=config.listen_port, name="broker",
            rpc_hook=self.auth,
            flow_control=config.flow_control(),
            tls=self.tls,
        )
        self.vip_remoting: RemotingServer | None = None
        if config.vip_channel_enable:
            self.vip_remoting = RemotingServer(
                self._processors(vip=True), host=config.bind_address, port=config.fast_port, name="broker-vip",
                rpc_hook=self.auth,
                flow_control=config.flow_control(),
                tls=self.tls,
            )
        #: One more remoting server per ``listenerPorts`` entry (:mod:`rocket.broker.listeners`).
        self.listener_remoting: dict[str, RemotingServer] = {
            name: RemotingServer(
                self._processors(vip=False), host=config.bind_address, port=port, name=f"broker-{name}",
                rpc_hook=self.auth, flow_control=config.flow_control(), tls=self.tls)
            for name, port in listener_ports(config.listener_ports).items()
        }
        self.listener_addresses = ListenerAddresses(config.broker_name, config.broker_id, config.broker_ip1,
                                                    config.listener_addrs_file)
        for server in self._servers():
            server.on_connection_closed.append(self._connection_closed)
        self.outer_api.client.tls = self.ha.sync.client.tls = self.client_tls
        if self.ha.controller is not None:
            self.ha.controller.client.client.tls = self.client_tls
        if self.inner_credentials is not None:
            self.outer_api.client.rpc_hook = self.inner_credentials.sign
            self.ha.sync.client.rpc_hook = self.inner_credentials.sign
            if self.ha.controller is not None:  # heartbeats, registration, elections, SyncStateSet changes
                self.ha.controller.client.client.rpc_hook = self.inner_credentials.sign
        #: Sends being handled right now (overload protection).
        self.in_flight_sends = 0
        #: Body bytes of those sends.
        self.in_flight_send_bytes = 0
        self.shutting_down = False
        self.store_ready = False
        self.started = False
        #: Where a slave replicates from, as told by a NameServer (None for masters).
        self.master_addr: str | None = None
        self.ha_master_addr: str | None = None
        #: DataVersion of the broker config, bumped by UPDATE_BROKER_CONFIG.
        self.config_version: dict[str, int] = {"timestamp": _now_ms(), "counter": 0}
        self.http_port: int | None = None
        self._perm_changes = 0
        self._perm_changed_at = 0
        self._tasks = TaskGroup("broker")
        self._register_runner = CoalescingRunner(self._register_once)
        self._http: Any = None
        self._stopped = asyncio.Event()
        self.metrics.install_collector(
            BrokerCollector(
                self._gauge_snapshot, lambda: self.config.broker_cluster_name, lambda: self.config.broker_name,
                self.metrics,
            )
        )
        self.metrics.install_collector(TimerCollector(self.timer, lambda: self.store_ready))

    # -- wiring ------------------------------------------------------------------------------

    def _servers(self) -> list[RemotingServer]:
        return [s for s in (self.remoting, self.vip_remoting, *self.listener_remoting.values()) if s is not None]

    def _send_queue_max_wait(self) -> float | None:
        """Seconds a send may wait in :attr:`send_queue` (None: fast failure is off)."""
        cfg = self.config
        return cfg.wait_time_mills_in_send_queue / 1000.0 if cfg.broker_fast_failure_enable else None

    def _processors(self, *, vip: bool) -> Processors:
        p = Processors()
        # The appends of one read's sends become one CommitLog job, run (ASYNC_FLUSH) at the end of
        # the read, so that their answers leave with the read's write in the same loop turn.
        p.gather = (self.store.commit_log.gather, self.store.commit_log.release)
        send = self.send_processor
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            p.register(code, send.process_send, self.send_queue)
        p.register(RequestCode.CONSUMER_SEND_MSG_BACK, send.process_send_back)
        p.register(RequestCode.END_TRANSACTION, self.transaction.end_transaction)
        if not vip:
            p.register(RequestCode.PULL_MESSAGE, self.pull_processor.process_request)
            p.register(RequestCode.LITE_PULL_MESSAGE, self.pull_processor.process_request)
        c = self.client_processor
        p.register(RequestCode.HEART_BEAT, c.heartbeat)
        p.register(RequestCode.UNREGISTER_CLIENT, c.unregister_client)
        p.register(RequestCode.CHECK_CLIENT_CONFIG, c.check_client_config)
        m = self.consumer_processor
        p.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, m.get_consumer_list_by_group)
        p.register(RequestCode.UPDATE_CONSUMER_OFFSET, m.update_consumer_offset)
        p.register(RequestCode.QUERY_CONSUMER_OFFSET, m.query_consumer_offset)
        q = self.query_processor
        p.register(RequestCode.QUERY_MESSAGE, q.query_message)
        p.register(RequestCode.VIEW_MESSAGE_BY_ID, q.view_message_by_id)
        a = self.admin_processor
        t = self.tools_processor
        for code, handler in (
            (RequestCode.UPDATE_AND_CREATE_TOPIC, a.update_and_create_topic),
            (RequestCode.DELETE_TOPIC_IN_BROKER, a.delete_topic),
            (RequestCode.GET_ALL_TOPIC_CONFIG, a.get_all_topic_config),
            (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, a.update_and_create_subscription_group),
            (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, a.get_all_subscription_group),
            (RequestCode.DELETE_SUBSCRIPTIONGROUP, a.delete_subscription_group),
            (RequestCode.GET_MAX_OFFSET, a.get_max_offset),
            (RequestCode.GET_MIN_OFFSET, a.get_min_offset),
            (RequestCode.GET_EARLIEST_MSG_STORETIME, a.get_earliest_msg_storetime),
            (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, a.search_offset_by_timestamp),
            (RequestCode.QUERY_BROKER_OFFSET, a.query_broker_offset),
            (RequestCode.GET_ALL_CONSUMER_OFFSET, a.get_all_consumer_offset),
            (RequestCode.GET_ALL_DELAY_OFFSET, a.get_all_delay_offset),
            (RequestCode.GET_TIMER_CHECK_POINT, self.get_timer_check_point),
            (RequestCode.GET_BROKER_RUNTIME_INFO, a.get_broker_runtime_info),
            (RequestCode.GET_CONSUME_STATS, a.get_consume_stats),
            (RequestCode.GET_TOPIC_STATS_INFO, a.get_topic_stats_info),
            (RequestCode.GET_CONSUMER_CONNECTION_LIST, a.get_consumer_connection_list),
            (RequestCode.GET_BROKER_CONFIG, a.get_broker_config),
            (RequestCode.UPDATE_BROKER_CONFIG, a.update_broker_config),
            (RequestCode.LOCK_BATCH_MQ, a.lock_batch_mq),
            (RequestCode.UNLOCK_BATCH_MQ, a.unlock_batch_mq),
            (RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, t.update_and_create_topic_list),
            (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, t.update_and_create_subscription_group_list),
            (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, t.query_topic_consume_by_who),
            (RequestCode.GET_PRODUCER_CONNECTION_LIST, t.get_producer_connection_list),
            (RequestCode.GET_ALL_PRODUCER_INFO, t.get_all_producer_info),
            (RequestCode.GET_TOPIC_CONFIG, t.get_topic_config),
            (RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER, t.get_system_topic_list),
            (RequestCode.VIEW_BROKER_STATS_DATA, t.view_broker_stats_data),
            (RequestCode.GET_BROKER_CONSUME_STATS, t.get_broker_consume_stats),
            (RequestCode.QUERY_CONSUME_QUEUE, t.query_consume_queue),
            (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, t.invoke_broker_to_reset_offset),
            (RequestCode.GET_CONSUMER_RUNNING_INFO, t.get_consumer_running_info),
            (RequestCode.CONSUME_MESSAGE_DIRECTLY, t.consume_message_directly),
            (RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, t.clean_expired_consume_queue),
            (RequestCode.CLEAN_UNUSED_TOPIC, t.clean_unused_topic),
            (RequestCode.DELETE_EXPIRED_COMMITLOG, t.delete_expired_commitlog),
            (RequestCode.GET_BROKER_HA_STATUS, self.ha.process_ha_status),
            (RequestCode.GET_BROKER_EPOCH_CACHE, self.ha.process_epoch_cache),
            (RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self.ha.process_role_change),
        ):
            p.register(code, handler)
        for auth_code, auth_handler in self.auth_processor.handlers().items():
            p.register(auth_code, auth_handler)  # type: ignore[arg-type]
        p.observers.append(self.metrics.observe_request)
        return p

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Recover the store, listen, register; see the module doc for the order."""
        cfg = self.config
        await self.store.start()
        try:
            await self.metadata.load()
        except BaseException:
            await self.store.shutdown()
            await self.metadata.close(backup=False)
            raise
        self.store_ready = True
        self.topics.init_system_topics(self.schedule.max_level)
        self._init_system_groups()
        self.schedule.load()
        self.store.add_dispatch_listener(self._on_dispatch)
        self.metadata_replication.attach()
        self.timer.load()
        # controller mode: every broker starts as a slave (ControllerReplicas.prepare, run by ha.start
        # below) and a promotion turns delivery on; before prepare() cfg still reads ASYNC_MASTER
        await self.timer.start(should_run_dequeue=cfg.is_master and not cfg.enable_controller_mode)
        started: list[RemotingServer] = []
        try:
            for server in self._servers():
                await server.start()
                started.append(server)
            await self.ha.start()
            if cfg.http_port:
                from rocket.broker.http import BrokerHttpServer

                self._http = BrokerHttpServer(self, self.tls)
                self.http_port = await self._http.start(cfg.bind_address, cfg.http_port)
        except BaseException:
            for server in started:
                await server.stop()
            await self.ha.shutdown()
            await self.timer.shutdown()
            await self.store.shutdown()
            await self.metadata.close(backup=False)
            raise
        if cfg.is_master:
            await self.schedule.start()
            await self.transaction.start()
        self.started = True
        log.info(
            "broker %s (cluster %s, id %d, %s) listening on %s:%d%s%s",
            cfg.broker_name,
            cfg.broker_cluster_name,
            cfg.broker_id,
            cfg.broker_role,
            cfg.bind_address,
            self.remoting.port,
            f", vip {self.vip_remoting.port}" if self.vip_remoting else "",
            f", http {self.http_port}" if self.http_port else "",
        )
        await self.register_broker_all()
        self._tasks.spawn(self._register_loop(), name="broker-register")
        self._tasks.spawn(self.metadata.run_offset_persist(self.store.config.flush_consumer_offset_interval),
                          name="broker-persist-consumer-offsets")
        self._tasks.spawn(self._client_scan_loop(), name="broker-client-scan")
        self._tasks.spawn(self._flush_sample_loop(), name="broker-flush-sample")

    async def shutdown(self) -> None:
        """Stop cleanly (idempotent): see the module doc for the order."""
        if self.shutting_down:
            await self._stopped.wait()
            return
        self.shutting_down = True
        try:
            await self._shutdown()
        finally:
            self._stopped.set()

    async def _shutdown(self) -> None:
        cfg = self.config
        for server in self._servers():
            _stop_listening(server)
        await self._tasks.cancel_all()
        if self.started:
            try:
                results = await self.outer_api.unregister_broker_all(self._identity())
                log.info("unregistered from %d of %d NameServers", sum(r.ok for r in results), len(results))
            except Exception:
                log.exception("unregistering from NameServers failed")
        woken = self.hold_service.wake_all(WakeReason.SHUTDOWN)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        # A bounded poll: parked pulls and sends finish within milliseconds here.
        while (self.pull_processor.active or self.in_flight_sends) and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        if woken:
            log.info("answered %d parked pulls", woken)
        await self.schedule.stop()
        await self.transaction.stop()
        await self.timer.shutdown()
        await self.ha.shutdown()
        for server in self._servers():
            await server.stop()
        if self._http is not None:
            await self._http.stop()
            self._http = None
        await self.outer_api.close()
        if self.store_ready:
            await self.store.shutdown()
            await self.metadata.close(backup=self.store.last_shutdown_clean)
            self.store_ready = False
        log.info("broker %s stopped", cfg.broker_name)

    # -- registration ------------------------------------------------------------------------

    def _identity(self) -> BrokerIdentity:
        cfg = self.config
        return BrokerIdentity(
            cluster_name=cfg.broker_cluster_name,
            broker_name=cfg.broker_name,
            broker_addr=cfg.broker_addr,
            broker_id=cfg.broker_id,
            ha_server_addr=cfg.ha_server_addr,
            epoch=self.ha.registration_epoch(),
            listener_addrs=self.listener_addresses.current(
                {name: server.port for name, server in self.listener_remoting.items()}),
        )

    def registration_body(self) -> bytes:
        """The RegisterBrokerBody of this broker now (topic perms rewritten when not RW)."""
        perm = self.config.broker_permission
        rewrite = not (is_readable(perm) and is_writeable(perm))
        table = {
            name: dataclasses.replace(tc, perm=perm) if rewrite else tc
            for name, tc in self.metadata.topic_configs.all().items()
        }
        dv = self.metadata.topic_configs.data_version
        version = DataVersion(
            timestamp=max(dv.timestamp, self._perm_changed_at), counter=dv.counter + self._perm_changes
        )
        return RegisterBrokerBody(TopicConfigSerializeWrapper(table, version)).encode()

    async def _register_once(self) -> None:
        results = await self.outer_api.register_broker_all(self._identity(), self.registration_body())
        for result in results:
            if result.ok and result.master_addr and self.config.is_slave and not self.config.enable_controller_mode:
                if result.master_addr != self.master_addr:
                    log.info("master of %s is %s (HA %s)", self.config.broker_name, result.master_addr,
                             result.ha_server_addr)
                self.master_addr = result.master_addr
                self.ha_master_addr = result.ha_server_addr
        self.ha.on_registered(results)

    async def register_broker_all(self) -> None:
        """Register with every NameServer now (concurrent callers share one round)."""
        await self._register_runner.run()

    def trigger_register(self) -> None:
        """Register soon, in the background (after an automatic topic creation)."""
        if self.started and not self.shutting_down:
            self._tasks.spawn(self.register_broker_all(), name="broker-register-now")

    async def _register_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.register_period_seconds())
            try:
                await self.register_broker_all()
            except Exception:
                log.exception("periodic registration failed")

    @property
    def registered_namesrvs(self) -> list[str]:
        """NameServers that accepted a registration within the last 120 s."""
        return self.outer_api.state.registered_within(_READY_WINDOW)

    def readiness(self) -> tuple[bool, list[str]]:
        """``(ready, reasons not ready)``: store recovered and registered with ≥ 1 NameServer."""
        reasons = []
        if not self.store_ready:
            reasons.append("store not recovered")
        if self.shutting_down:
            reasons.append("shutting down")
        if not self.config.namesrv_list():
            reasons.append("no NameServer configured")
        elif not self.registered_namesrvs:
            reasons.append("not registered with any NameServer")
        return not reasons, reasons

    # -- clients -----------------------------------------------------------------------------

    def _connection_closed(self, conn: RemotingConnection) -> None:
        self.consumer_manager.channel_closed(conn)
        self.producer_manager.channel_closed(conn)
        self.hold_service.drop_connection(conn)

    def _notify_consumer_ids_changed(self, group: str, conns: list[RemotingConnection]) -> None:
        group_config = self.metadata.subscription_groups.get(group)
        if group_config is not None and not group_config.notify_consumer_ids_changed_enable:
            return
        for conn in conns:
            if conn.closed:
                continue
            cmd = RemotingCommand(
                code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields={"consumerGroup": group}, language="JAVA"
            )
            try:
                conn.oneway(cmd)
            except RemotingError as exc:
                log.debug("notify %s of group %s failed: %s", conn.peer, group, exc)
                continue
            self.metrics.notify_sent.inc()

    async def _client_scan_loop(self) -> None:
        while True:
            await asyncio.sleep(max(self.config.client_channel_scan_interval, 100) / 1000.0)
            try:
                dropped = self.consumer_manager.scan_not_active() + self.producer_manager.scan_not_active()
                for _, channel in dropped:
                    if not channel.connection.closed:
                        channel.connection.close()
            except Exception:
                log.exception("client channel scan failed")

    async def _flush_sample_loop(self, interval: float = 0.5) -> None:
        """Feed the flush-latency histogram from the store's counters.

        The store keeps only the duration of its latest fdatasync, so this
        samples it: at most one observation per ``interval``, taken when at
        least one flush happened since the previous sample.
        """
        seen = -1
        while True:
            await asyncio.sleep(interval)
            stats = self.store.stats.commit_log
            if stats.fdatasyncs != seen:
                if seen >= 0:
                    self.metrics.flush_latency.observe(stats.last_flush_seconds)
                seen = stats.fdatasyncs

    def _init_system_groups(self) -> None:
        """Create the :data:`INITIAL_SUBSCRIPTION_GROUPS` that are missing (existing ones are kept)."""
        table = self.metadata.subscription_groups
        for name in INITIAL_SUBSCRIPTION_GROUPS:
            if table.get(name) is None:
                table.put(SubscriptionGroupConfig(group_name=name))

    def find_subscription_group(self, group: str, auto_create: bool = True) -> SubscriptionGroupConfig | None:
        """The group's config, auto-created when ``autoCreateSubscriptionGroup`` (or a system group)."""
        table = self.metadata.subscription_groups
        cfg = table.get(group)
        may_create = self.config.auto_create_subscription_group or _is_system_consumer_group(group)
        if cfg is None and auto_create and may_create:
            cfg = SubscriptionGroupConfig(group_name=group)
            table.put(cfg)
            log.info("auto-created subscription group %s", group)
        return cfg

    @staticmethod
    def subscription_group_from_json(body: bytes) -> SubscriptionGroupConfig:
        """A SubscriptionGroupConfig from its Java JSON. Raises ``ValueError``."""
        obj = loads_lenient(body)
        if not isinstance(obj, dict):
            raise ValueError("body is not a JSON object")
        return SubscriptionGroupConfig.from_json(obj)

    @staticmethod
    def new_topic_config(topic: str, **fields: Any) -> TopicConfig:
        """A TopicConfig (store type)."""
        return TopicConfig(topic, **fields)

    # -- the write path ------------------------------------------------------------------------

    def _timer_hook(self, inner: MessageInner) -> MessageInner | PutMessageResult:
        """The timer rewrite (``rocket.broker.timer``) for messages that are not half messages:
        a timer message goes to rmq_sys_wheel_timer, or is refused (the result to answer)."""
        if inner.sys_flag & 0xC not in (SYSFLAG_TRANSACTION_NOT_TYPE, SYSFLAG_TRANSACTION_COMMIT) or (
                _TIMER_NAMES.isdisjoint(inner.properties)):  # every plain send: no clock, no call
            return inner
        return transform_timer_message(inner, self.store.config, self.timer.now_ms(), self.timer)

    def _store_request(self, inner: MessageInner) -> MessageInner | PutMessageResult:
        """Apply the timer rewrite (:meth:`_timer_hook`), then the delay rewrite: DELAY > 0 goes
        to SCHEDULE_TOPIC_XXXX queue level-1. A refused timer message yields its result.
        :meth:`put_nowait` (and the send processor's usual case) call this only for a message with
        one of ``rocket.broker.timer.REWRITE_TRIGGERS``: a rewrite triggered by anything else must
        be added there too."""
        hooked = self._timer_hook(inner)
        if not isinstance(hooked, MessageInner):
            return hooked
        inner = hooked
        if PROPERTY_DELAY_TIME_LEVEL not in inner.properties:  # the usual send: nothing to rewrite
            return inner
        level = inner.delay_level
        tran = inner.sys_flag & 0xC
        if level <= 0 or tran not in (SYSFLAG_TRANSACTION_NOT_TYPE, SYSFLAG_TRANSACTION_COMMIT):
            return inner
        level = self.schedule.clamp_level(level)
        props = dict(inner.properties)
        props[PROPERTY_REAL_TOPIC] = inner.topic
        props[PROPERTY_REAL_QUEUE_ID] = str(inner.queue_id)
        props[PROPERTY_DELAY_TIME_LEVEL] = str(level)
        return dataclasses.replace(
            inner,
            topic=SCHEDULE_TOPIC,
            queue_id=level - 1,
            properties=props,
            tags_code=_now_ms() + self.schedule.delay_ms(level),
            encoded=None,
        )

    async def put_message(self, inner: MessageInner) -> PutMessageResult:
        """Store one message (delayed ones to SCHEDULE_TOPIC_XXXX); on a SYNC_MASTER a message
        whose WAIT property is not false is acknowledged once a slave has it (``rocket.store.ha``)."""
        rewritten = self._store_request(inner)
        if isinstance(rewritten, PutMessageResult):
            return rewritten
        req = rewritten.to_request()
        result = await self.store.put_message(req)
        if (self.config.broker_role is BrokerRole.SYNC_MASTER and req.wait_store_msg_ok
                and result.status is PutMessageStatus.PUT_OK):
            return await self.ha.wait_replicated(result)
        return result

    async def put_messages(self, reqs: list[PutMessageRequest]) -> PutMessageResult:
        """Store a batch (store requests, as the send path builds them, all to one queue; no
        delays); SYNC_MASTER waits as :meth:`put_message`."""
        result = await self.store.put_messages(reqs)
        if (self.config.broker_role is BrokerRole.SYNC_MASTER and any(r.wait_store_msg_ok for r in reqs)
                and result.status is PutMessageStatus.PUT_OK):
            return await self.ha.wait_replicated(result)
        return result

    def put_nowait(self, inners: list[MessageInner], done: PutDone | None = None,
                   ) -> PutMessageResult | asyncio.Future[PutMessageResult] | None:
        """:meth:`put_message` (one message) or :meth:`put_messages` (a batch) without a coroutine,
        for the send path; see :meth:`put_batch_nowait` for ``done`` and what comes back."""
        if len(inners) == 1:
            inner = inners[0]
            if not REWRITE_TRIGGERS.isdisjoint(inner.properties):
                rewritten = self._store_request(inner)
                if isinstance(rewritten, PutMessageResult):
                    return rewritten
                inner = rewritten
            reqs = [inner.to_request()]  # (the usual send: no rewrite, no call to find that out)
            if done is not None and self.config.broker_role is not BrokerRole.SYNC_MASTER:
                return self.store.put_messages_callback(reqs, done)
        else:
            reqs = [i.to_request() for i in inners]
        return self.put_batch_nowait(reqs, done)

    def put_batch_nowait(self, reqs: list[PutMessageRequest], done: PutDone | None = None,
                         ) -> PutMessageResult | asyncio.Future[PutMessageResult] | None:
        """:meth:`put_messages` without a coroutine (the send path's batches, already store
        requests: no delay or timer rewrite applies to them): the store's refusal, or a future
        of the result (on a SYNC_MASTER once a slave has them, as :meth:`put_messages`).

        With ``done``: the refusal, or None, and ``done`` is called once on the loop with the
        outcome: the result itself, as soon as the store resolves the put (the same call as the
        write that stored it: no future, no loop turn in between), or, on a SYNC_MASTER, the
        finished future of the final result (after the slave's acknowledgement)."""
        if self.config.broker_role is BrokerRole.SYNC_MASTER and any(r.wait_store_msg_ok for r in reqs):
            out = self.ha.replicate_nowait(self.store.put_messages_nowait(reqs))
            if done is None or isinstance(out, PutMessageResult):
                return out
            out.add_done_callback(done)
            return None
        if done is not None:
            return self.store.put_messages_callback(reqs, done)
        return self.store.put_messages_nowait(reqs)

    def put_message_batch_nowait(self, batch: PutMessageBatch, done: PutDone | None = None,
                                 ) -> PutMessageResult | asyncio.Future[PutMessageResult] | None:
        """:meth:`put_batch_nowait` for a batch send's :class:`PutMessageBatch` (no object per
        message): the store's refusal, or a future of the result (on a SYNC_MASTER, once a slave
        has them); with ``done``, None and ``done`` gets the outcome, as :meth:`put_batch_nowait`."""
        if self.config.broker_role is BrokerRole.SYNC_MASTER and batch.wait_store_msg_ok:
            put = self.store.put_batch_nowait(batch)
            assert put is not None
            out = self.ha.replicate_nowait(put)
            if done is None or isinstance(out, PutMessageResult):
                return out
            out.add_done_callback(done)
            return None
        return self.store.put_batch_nowait(batch, done)

    def record_put(self, topic: str, count: int, nbytes: int) -> None:
        """Account messages stored to ``topic``."""
        self.metrics.count_in(topic, count, nbytes)
        self.stats.on_put(count, nbytes, topic)

    def record_get(self, group: str, topic: str, count: int, nbytes: int) -> None:
        """Account messages returned to ``group`` from ``topic``."""
        self.metrics.count_out(topic, group, count, nbytes)
        self.stats.on_get(group, topic, count, nbytes)

    def _on_dispatch(self, topic: str, queue_id: int, queue_offset: int, tags_code: int) -> None:
        try:
            self.hold_service.notify_message_arriving(topic, queue_id, queue_offset, tags_code)
            if topic == SCHEDULE_TOPIC:  # (the two services' own filters, without a call per message)
                self.schedule.on_dispatch(topic, queue_id, queue_offset, tags_code)
            elif topic == TIMER_TOPIC:
                self.timer.on_dispatch(topic, queue_id, queue_offset, tags_code)
        except Exception:
            log.exception("dispatch listener failed for %s/%d", topic, queue_id)

    def get_timer_check_point(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """GET_TIMER_CHECK_POINT (60): the 56-byte timer checkpoint (``TimerCheckpoint.encode``) with the
        live read time and enqueue offset; extField ``commitLogMaxOffset`` is this broker's CommitLog end,
        which a slave must have replicated before it trusts the read time."""
        if not self.store_ready:
            return request.response(ResponseCode.SYSTEM_ERROR, "the store is not ready")
        timer = self.timer
        ck = dataclasses.replace(timer.checkpoint, path=None)
        if timer.should_run_dequeue:
            ck.last_read_time_ms = timer.commit_read_time_ms
            ck.master_timer_queue_offset = timer.curr_queue_offset
        resp = request.response(ResponseCode.SUCCESS, body=ck.encode())
        resp.ext_fields["commitLogMaxOffset"] = str(self.store.max_phy_offset)
        return resp

    # -- topics ----------------------------------------------------------------------------------

    async def delete_topic(self, topic: str) -> None:
        """Forget ``topic``: config, consume queues, consumer offsets."""
        self.metadata.topic_configs.delete(topic)
        self.store.delete_topics([topic])
        self.metadata.consumer_offsets.remove_topic(topic)

    async def create_topic(self, tc: TopicConfig) -> None:
        """Create or overwrite a topic and register at once (HTTP API)."""
        self.metadata.topic_configs.put(tc)
        await self.register_broker_all()

    # -- config ------------------------------------------------------------------------------------

    async def update_config(self, values: dict[str, str]) -> None:
        """Apply settings at run time, keep them across restarts, re-register when needed.

        All or nothing: raises :class:`~rocket.broker.config.ConfigError` for an
        unknown key or a bad value without applying any. Settings read only at
        start-up (ports, store path, delay levels) take effect on restart. The TLS settings
        (``tlsMode``, ``tls.*``) are refused: they come from the broker's own files only, so that
        no request can turn TLS off or swap its certificates (as RocketMQ's ``configBlackList``).
        """
        tls_keys = sorted(k for k in values if is_tls_key(k))
        if tls_keys:
            raise ConfigError(f"{', '.join(tls_keys)}: TLS settings are read at start from the broker's config "
                              "file and cannot be changed by a request")
        cfg = self.config
        candidate = dataclasses.replace(cfg, store_overrides=dict(cfg.store_overrides))
        candidate.update(values, strict=True)
        old_perm, old_namesrv = cfg.broker_permission, cfg.namesrv_list()
        for f in dataclasses.fields(cfg):
            setattr(cfg, f.name, getattr(candidate, f.name))
        await self._persist_overrides(values)
        self.config_version = {"timestamp": _now_ms(), "counter": self.config_version["counter"] + 1}
        changed = changed_keys(values)
        if "channel_expired_timeout" in changed:
            self.consumer_manager.channel_expired_timeout = cfg.channel_expired_timeout / 1000.0
            self.producer_manager.channel_expired_timeout = cfg.channel_expired_timeout / 1000.0
        if "rebalance_lock_max_live_time" in changed:
            self.lock_manager.max_live_time = cfg.rebalance_lock_max_live_time / 1000.0
        if "register_broker_timeout_mills" in changed:
            self.outer_api.timeout = cfg.register_broker_timeout_mills / 1000.0
        if cfg.broker_permission != old_perm:
            self._perm_changes += 1
            self._perm_changed_at = max(_now_ms(), self._perm_changed_at + 1)
            log.warning("brokerPermission changed from %d to %d", old_perm, cfg.broker_permission)
        if cfg.broker_permission != old_perm or cfg.namesrv_list() != old_namesrv:
            await self.register_broker_all()

    async def _persist_overrides(self, values: dict[str, str]) -> None:
        path = runtime_overrides_path(self.config.store_path_root_dir)
        try:
            saved = parse_properties(path.read_text()) if path.exists() else {}
        except (OSError, UnicodeDecodeError):
            saved = {}
        saved.update(values)
        data = format_properties(saved).encode()
        await asyncio.get_running_loop().run_in_executor(None, write_file_durably, path, data)

    # -- stats -----------------------------------------------------------------------------------

    def offset_table(self) -> dict[tuple[str, str], dict[int, int]]:
        """Committed offsets: ``(group, topic) -> {queueId: offset}``."""
        raw = self.metadata.consumer_offsets.to_json()
        obj = raw if isinstance(raw, dict) else loads_lenient(raw)
        table = obj.get("offsetTable", {}) if isinstance(obj, dict) else {}
        out: dict[tuple[str, str], dict[int, int]] = {}
        for key, queues in table.items():
            topic, sep, group = str(key).partition("@")
            if not sep or not isinstance(queues, dict):
                continue
            out[(group, topic)] = {int(q): int(o) for q, o in queues.items()}
        return out

    def consume_stats(self, group: str, topic: str | None = None) -> tuple[list[ConsumeStatRow], float]:
        """Per-queue progress of ``group`` (on ``topic`` or every topic it uses) and its consume TPS.

        Topics: those with committed offsets plus those subscribed by live
        members; when members are online, only their subscribed topics count.
        """
        store = self.store
        info = self.consumer_manager.get(group)
        if topic is not None:
            topics: Iterable[str] = [topic]
        else:
            known = {t for (g, t) in self.offset_table() if g == group}
            if info is not None:
                known |= set(info.subscriptions)
            topics = sorted(known)
        rows: list[ConsumeStatRow] = []
        tps = 0.0
        for name in topics:
            tc = self.topics.get(name)
            if tc is None:
                continue
            if topic is None and info is not None and info.subscriptions and name not in info.subscriptions:
                continue
            for queue_id in range(tc.read_queue_nums):
                broker_offset = max(0, store.get_max_offset_in_queue(name, queue_id))
                committed = self.metadata.consumer_offsets.query(group, name, queue_id)
                consumer_offset = max(0, committed if committed is not None else 0)
                last = store.get_store_timestamp(name, queue_id, consumer_offset - 1) if consumer_offset > 0 else 0
                rows.append(ConsumeStatRow(name, queue_id, broker_offset, consumer_offset, max(0, last)))
            tps += self.stats.consume_tps(group, name)
        return rows, tps

    def consumer_groups(self) -> list[str]:
        """Groups with committed offsets or live members here, sorted."""
        groups = {g for (g, _) in self.offset_table()} | set(self.consumer_manager.groups)
        return sorted(groups)

    def _gauge_snapshot(self) -> GaugeSnapshot:
        store = self.store
        lag: list[LagRow] = []
        groups: dict[str, tuple[int, str]] = {}
        topic_offsets: dict[str, int] = {}
        # A slave's offsets are copies of its master's: only masters export the per-group and
        # per-topic series (as the RocketMQ exporter, which asks masters), so sums do not double.
        if self.store_ready and self.config.is_master:
            for group in self.consumer_groups():
                rows, _ = self.consume_stats(group)
                for r in rows:
                    oldest = 0
                    if r.lag:
                        # The first unconsumed message still retained: its store time (-1 when unreadable).
                        at = max(r.consumer_offset, store.get_min_offset_in_queue(r.topic, r.queue_id))
                        if at < r.broker_offset:
                            oldest = max(0, store.get_store_timestamp(r.topic, r.queue_id, at))
                    lag.append(LagRow(group, r.topic, r.queue_id, r.broker_offset, r.consumer_offset, oldest))
                info = self.consumer_manager.get(group)
                groups[group] = (len(info.channels), info.message_model) if info else (0, "")
            for name, tc in self.metadata.topic_configs.all().items():
                topic_offsets[name] = sum(
                    max(0, store.get_max_offset_in_queue(name, q)) for q in range(tc.read_queue_nums))
        connections = sum(len(s.connections) for s in self._servers())
        return GaugeSnapshot(
            commitlog_max_offset=store.max_phy_offset if self.store_ready else 0,
            commitlog_min_offset=store.min_phy_offset if self.store_ready else 0,
            disk_usage_ratio=store.disk_usage_ratio() if self.store_ready else 0.0,
            parked_pulls=len(self.hold_service),
            in_flight_sends=self.in_flight_sends,
            client_connections=connections,
            lag=lag,
            groups=groups,
            topic_offsets=topic_offsets,
        )

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table: store figures plus RocketMQ's usual keys."""
        store = self.store
        cfg = self.config
        table: dict[str, str] = {}
        try:
            table.update({str(k): str(v) for k, v in store.runtime_info().items()})
        except Exception:
            log.exception("store runtime info failed")
        uptime = max(0, _now_ms() - self.stats.boot_time_ms) // 1000
        days, rest = divmod(uptime, 86400)
        hours, rest = divmod(rest, 3600)
        minutes, seconds = divmod(rest, 60)
        table.update(
            {
                "brokerVersionDesc": "V4_9_8",
                "brokerVersion": "409",
                "brokerName": cfg.broker_name,
                "brokerId": str(cfg.broker_id),
                "brokerRole": str(cfg.broker_role),
                "clusterName": cfg.broker_cluster_name,
                "brokerAddr": cfg.broker_addr,
                "brokerPermission": str(cfg.broker_permission),
                "msgPutTotalTodayNow": str(self.stats.put_total),
                "msgGetTotalTodayNow": str(self.stats.get_total),
                "msgPutTotalTodayMorning": "0",
                "msgGetTotalTodayMorning": "0",
                "msgPutTotalYesterdayMorning": "0",
                "msgGetTotalYesterdayMorning": "0",
                "putTps": f"{self.stats.put_rate.rate():.2f}",
                "getTransferedTps": f"{self.stats.get_rate.rate():.2f}",
                # 5.x spelling of the same figure.
                "getTransferredTps": f"{self.stats.get_rate.rate():.2f}",
                "commitLogMaxOffset": str(store.max_phy_offset),
                "commitLogMinOffset": str(store.min_phy_offset),
                "commitLogDiskRatio": f"{store.disk_usage_ratio():.4f}",
                "bootTimestamp": str(self.stats.boot_time_ms),
                "runtime": f"[ {days} days, {hours} hours, {minutes} minutes, {seconds} seconds ]",
                "sendThreadPoolQueueSize": str(self.in_flight_sends),
                "sendThreadPoolQueueCapacity": str(cfg.max_in_flight_sends),
                "pullThreadPoolQueueSize": str(len(self.hold_service)),
                # Java's request thread pools queue requests before a thread runs them; here each
                # request runs on the event loop as soon as it is read, so nothing waits in a queue.
                "sendThreadPoolQueueHeadWaitTimeMills": "0",
                "pullThreadPoolQueueHeadWaitTimeMills": "0",
                "queryThreadPoolQueueHeadWaitTimeMills": "0",
                "brokerActive": "true" if cfg.is_master else "false",
                "parkedPullRequests": str(len(self.hold_service)),
                "registeredNameServers": ";".join(self.registered_namesrvs),
            }
        )
        for level, info in self.schedule.status().items():
            table[f"scheduleMessageOffset_{level}"] = f"{info['offset']},{info['maxOffset']}"
        # RocketMQ 5's timer keys: how far the read pointer is behind the clock (ms) and the enqueue backlog.
        timer = self.timer
        table["timerReadBehind"] = str(max(0, timer.now_ms() - timer.curr_read_time_ms)
                                       if timer.should_run_dequeue else 0)
        table["timerOffsetBehind"] = str(timer.enqueue_backlog())
        return table

    def status(self) -> dict[str, Any]:
        """The /api/v1/status document."""
        cfg = self.config
        ready, reasons = self.readiness()
        return {
            "brokerName": cfg.broker_name,
            "brokerClusterName": cfg.broker_cluster_name,
            "brokerId": cfg.broker_id,
            "brokerRole": str(cfg.broker_role),
            "brokerAddr": cfg.broker_addr,
            "haServerAddr": cfg.ha_server_addr,
            "brokerPermission": cfg.broker_permission,
            "listenPort": self.remoting.port,
            "vipPort": self.vip_remoting.port if self.vip_remoting else None,
            "listenPortConnectionsAccepted": self.remoting.accepted_total,
            "listeners": {name: {"port": server.port, "connectionsAccepted": server.accepted_total,
                                 "address": self._identity().listener_addrs.get(name)}
                          for name, server in self.listener_remoting.items()},
            "listenerAddrs": self._identity().listener_addrs,
            "ready": ready,
            "notReadyReasons": reasons,
            "registeredNameServers": self.registered_namesrvs,
            "nameServerErrors": dict(self.outer_api.state.last_error),
            "masterAddr": self.master_addr,
            "topics": len(self.metadata.topic_configs.all()) if self.store_ready else 0,
            "parkedPulls": len(self.hold_service),
            "inFlightSends": self.in_flight_sends,
            "consumerGroupsOnline": sorted(self.consumer_manager.groups),
            "producerGroupsOnline": sorted(self.producer_manager.groups),
            "delayLevels": self.schedule.status() if self.store_ready else {},
            "ha": self.ha.status() if self.store_ready else {},
            "transactions": self.transaction.status() if self.store_ready else {},
            "timer": self.timer.status() if self.store_ready else {},
            "runtime": self.runtime_info() if self.store_ready else {},
        }


def auth_config(config: BrokerConfig) -> AuthConfig:
    """The :class:`AuthConfig` of a broker: ``aclEnable`` turns on both checks; users and ACLs
    live in ``<storePathRootDir>/config/auth.json``."""
    return AuthConfig(
        cluster_name=config.broker_cluster_name,
        authentication_enabled=config.authentication_enabled or config.acl_enable,
        authorization_enabled=config.authorization_enabled or config.acl_enable,
        init_authentication_user=config.init_authentication_user,
        inner_client_authentication_credentials=config.inner_client_authentication_credentials,
        authentication_whitelist=config.authentication_whitelist,
        authentication_strategy=config.authentication_strategy,
        stateful_authentication_cache_expired_second=config.stateful_authentication_cache_expired_second,
        metadata_path=str(Path(config.store_path_root_dir) / "config" / "auth.json"),
    )


def _stop_listening(server: RemotingServer) -> None:
    """Close ``server``'s listening sockets but keep its connections (RemotingServer.stop closes both)."""
    listener = getattr(server, "_server", None)
    if listener is not None:
        listener.close()


__all__ = ["BrokerController", "ConsumeStatRow"]
