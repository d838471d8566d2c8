"""Broker configuration: :class:`BrokerConfig`, loaded from a file plus overrides.

Names follow Apache RocketMQ 4.9.8 ``BrokerConfig``/``NettyServerConfig``; in
files and in UPDATE_BROKER_CONFIG bodies both the Java names
(``brokerClusterName``, ``brokerIP1``) and the Python names
(``broker_cluster_name``, ``broker_ip1``) are accepted: keys are matched with
case and underscores ignored. Unknown keys are logged and ignored, as Java does.

File formats (by extension): ``.properties``/``.conf`` (``key=value``, ``#``
comments, as a RocketMQ ``broker.conf``), ``.toml`` and ``.json`` (flat
objects; a TOML ``[broker]`` table is also accepted).

Keys of the message store (:class:`rocket.store.api.MessageStoreConfig`, e.g.
``mappedFileSizeCommitLog``, ``fileReservedTime``, ``diskMaxUsedSpaceRatio``)
may appear in the same file; they go to :attr:`BrokerConfig.store_overrides`.

Units. A key has one unit, RocketMQ's, whatever its spelling (``flushIntervalCommitLog``,
``flush_interval_commit_log`` and ``flush-interval-commit-log`` are one key). Sizes are
bytes; durations are milliseconds unless the table says otherwise:

==================================  =======  ===========================================
key (RocketMQ name)                 unit     default
==================================  =======  ===========================================
registerNameServerPeriod            ms       30000 (clamped to 1000..60000)
registerBrokerTimeoutMills          ms       6000
channelExpiredTimeout               ms       120000
clientChannelScanInterval           ms       10000 (ours)
rebalanceLockMaxLiveTime            ms       60000
shortPollingTimeMills               ms       1000
haSendHeartbeatInterval             ms       5000
haHousekeepingInterval              ms       20000
slaveTimeout                        ms       3000
slaveSyncInterval                   ms       10000 (ours; RocketMQ's fixed 10 s)
transactionTimeOut                  ms       6000
transactionCheckInterval            ms       60000
messageDelayLevel                   text     ``1s 5s ... 2h`` (each level ``<n><ms|s|m|h|d>``)
flushIntervalCommitLog              ms       500 (store)
flushCommitLogThoroughInterval      ms       10000 (store)
syncFlushTimeout                    ms       5000 (store)
flushIntervalConsumeQueue           ms       1000 (store)
flushConsumerOffsetInterval         ms       5000 (store)
cleanResourceInterval               ms       10000 (store)
fileReservedTime                    hours    72 (store; ``file_reserved_time_hours`` too)
deleteWhen                          hour     ``04`` (store; hours of the day, ``;``-separated)
==================================  =======  ===========================================

TLS: ``tlsMode`` (``disabled`` / ``permissive`` / ``enforcing``; RocketMQ's ``tls.server.mode``) and
RocketMQ's ``tls.*`` keys written as RocketMQ writes them (``tls.server.certPath``, ``tls.enable``,
``tls.client.trustCertPath``, ``tls.config.file`` ...; :data:`rocket.remoting.tls.TLS_KEYS`); in a
TOML file ``tls.server.certPath = "..."`` is a dotted key and works as is. They are read at start
and refused by UPDATE_BROKER_CONFIG.

A millisecond value must be an integer, as in Java (``flushIntervalCommitLog=0.5`` is an
error, not half a millisecond). The store keeps its intervals in seconds
(:class:`~rocket.store.api.MessageStoreConfig`); :meth:`BrokerConfig.store_config` converts.
Deprecated: the six store intervals above spelled exactly in snake_case
(``flush_interval_commit_log`` ...) used to be read in seconds; they still are, with a
warning, so that an existing file keeps its meaning (:data:`LEGACY_SECONDS_KEYS`).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
import socket
import tomllib
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocket.protocol.body import format_properties as format_properties
from rocket.protocol.body import parse_properties as parse_properties
from rocket.protocol.codes import PERM_READ, PERM_WRITE
from rocket.remoting.connection import DEFAULT_MAX_PENDING_REQUESTS, FlowControl
from rocket.remoting.tls import TlsConfig, TlsConfigError, flatten_tables, norm_key
from rocket.store.api import BrokerRole, FlushDiskType, MessageStoreConfig

log = logging.getLogger("rocket.broker")

#: RocketMQ's default delay levels (``messageDelayLevel``), level 1 first.
DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


class ConfigError(ValueError):
    """A configuration value or file that cannot be understood (the message says which)."""


def _java(name: str) -> dict[str, str]:
    return {"java": name}


@dataclass(slots=True)
class BrokerConfig:
    """Everything a broker process needs to know. Times are in milliseconds
    unless a field name says otherwise; sizes are in bytes.

    Defaults are RocketMQ 4.9.8's, except where noted: ``brokerIP1`` is
    127.0.0.1 (Java: the first site-local address), ``httpPort`` 0 disables
    HTTP, and the NameServer list may also be a DNS name resolved at every
    heartbeat.
    """

    broker_cluster_name: str = "DefaultCluster"
    #: Broker group name; Java defaults to the host name.
    broker_name: str = field(default_factory=socket.gethostname)
    #: 0 = master, > 0 = slave.
    broker_id: int = 0
    broker_ip1: str = field(default="127.0.0.1", metadata=_java("brokerIP1"))
    #: Address slaves use for replication; empty = ``broker_ip1``.
    broker_ip2: str = field(default="", metadata=_java("brokerIP2"))
    #: Address to bind the listeners to.
    bind_address: str = "0.0.0.0"
    listen_port: int = 10911
    #: VIP ("fast") listener port; 0 = ``listen_port - 2``.
    fast_listen_port: int = 0
    #: Serve the VIP listener (everything except PULL_MESSAGE, as in ``BrokerController``).
    vip_channel_enable: bool = True
    #: Replication listener port; 0 = ``listen_port + 1``.
    ha_listen_port: int = 0
    #: Extra remoting ports, one per listener, ``name:port,name:port`` (:mod:`rocket.broker.listeners`).
    listener_ports: str = ""
    #: Properties file of this broker's address per listener, re-read at each registration
    #: (``<brokerName>.<brokerId>.<listener>=host:port``; :mod:`rocket.broker.listeners`).
    listener_addrs_file: str = ""
    #: ``host:port;host:port`` or a DNS name ``host:port`` resolving to several
    #: NameServers; empty = the NAMESRV_ADDR environment variable.
    namesrv_addr: str = ""
    #: HTTP port for /healthz, /readyz, /metrics and /api/v1; 0 = no HTTP.
    http_port: int = 0
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    #: Queues of the TBW102 auto-create template.
    default_topic_queue_nums: int = 8
    #: 6 = read + write, 4 = read only, 2 = write only.
    broker_permission: int = PERM_READ | PERM_WRITE
    max_message_size: int = 4 * 1024 * 1024
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    #: Re-registration period (Java clamps to 10-60 s; we allow 1-60 s for tests).
    register_name_server_period: int = 30_000
    register_broker_timeout_mills: int = 6000
    #: Client channels not heard from for this long are dropped.
    channel_expired_timeout: int = 120_000
    #: How often expired client channels are looked for.
    client_channel_scan_interval: int = 10_000
    #: Orderly-consumer queue locks expire after this long without renewal.
    rebalance_lock_max_live_time: int = 60_000
    store_path_root_dir: str = field(default_factory=lambda: str(Path.home() / "store"))
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    slave_read_enable: bool = False
    #: With ``slaveReadEnable``, a consumer whose pull starts more than this many CommitLog
    #: bytes behind the master's end is told to pull from a slave
    #: (``whichBrokerWhenConsumeSlowly``); 0 = only the store's RAM rule
    #: (``accessMessageInMemoryMaxRatio``).
    slave_read_lag_bytes: int = 0
    #: ``host:port`` of the master's replication listener; empty = the address a
    #: NameServer returns on registration (``HAService``).
    ha_master_address: str = ""
    #: A slave reports its offset at least this often (ms); a master sends an empty
    #: transfer after this long without data.
    ha_send_heartbeat_interval: int = 5000
    #: A replication connection silent for this long is dropped (ms).
    ha_housekeeping_interval: int = 20_000
    #: Largest CommitLog chunk per transfer (bytes).
    ha_transfer_batch_size: int = 32 * 1024
    #: A slave further behind than this many bytes is out of sync: SYNC_MASTER sends
    #: answer SLAVE_NOT_AVAILABLE (11) at once.
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    #: How long a SYNC_MASTER send waits for a slave before FLUSH_SLAVE_TIMEOUT (12), ms.
    slave_timeout: int = 3000
    #: How often a slave copies topics, subscription groups, consumer and delay offsets from
    #: its master (ms; RocketMQ: 10 s, first copy after 3 s).
    slave_sync_interval: int = 10_000
    #: Role a slave takes when promoted without an explicit one (ASYNC_MASTER or SYNC_MASTER).
    promoted_broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    #: Controller mode (RocketMQ 5 ``enableControllerMode``, RIP-44): roles and broker ids come from
    #: the controllers at ``controllerAddr``, not from ``brokerRole``/``brokerId``
    #: (``rocket.broker.controller_mode``).
    enable_controller_mode: bool = False
    #: Every controller's ``host:port``, ``;`` separated (RocketMQ ``controllerAddr``).
    controller_addr: str = ""
    #: The controllers count this broker dead after this long without a heartbeat (ms; RocketMQ
    #: ``controllerHeartBeatTimeoutMills``, 10 s). With ``controllerLeaseFence`` in effect a master
    #: fences itself (stops acknowledging writes) after half of it without a confirmation from the
    #: controller leader.
    controller_heart_beat_timeout_mills: int = 10_000
    #: BROKER_HEARTBEAT period to every controller (ms; RocketMQ ``brokerHeartbeatInterval``, 1 s).
    broker_heartbeat_interval: int = 1_000
    #: GET_REPLICA_INFO poll period (ms; RocketMQ ``syncBrokerMetadataPeriod``, 5 s). The master
    #: polls every ``brokerHeartbeatInterval``: each answer renews its lease.
    sync_broker_metadata_period: int = 5_000
    #: A SyncStateSet member not caught up for this long leaves the set (ms; RocketMQ
    #: ``haMaxTimeSlaveNotCatchup``, 15 s).
    ha_max_time_slave_not_catchup: int = 15_000
    #: Controller mode: acknowledge a send only when every SyncStateSet member holds it (RocketMQ
    #: ``allAckInSyncStateSet``, default false).
    all_ack_in_sync_state_set: bool = False
    #: Controller mode: copies (the master included) a send needs before it is acknowledged, and
    #: the smallest SyncStateSet that accepts sends (RocketMQ ``minInSyncReplicas``, 1).
    min_in_sync_replicas: int = 1
    #: Controller mode: does a master whose lease from the controller leader ran out (no
    #: confirmation for ``controllerHeartBeatTimeoutMills / 2``) fence itself? ``auto`` (default):
    #: only when ``allAckInSyncStateSet`` is false; with it the quorum acknowledgements keep two
    #: masters from both acknowledging, so a master keeps serving while the controllers have no
    #: majority (RocketMQ 5's behaviour). ``true`` / ``false`` force it (RocketCluster setting;
    #: the argument is in ``rocket.broker.controller_mode``).
    controller_lease_fence: str = "auto"
    #: Controller mode: write every topic, subscription-group and consumer-offset change into the
    #: CommitLog (system topic ``rmq_sys_broker_metadata``) so it reaches the slaves with the data,
    #: and answer such changes once they are replicated (``rocket.broker.metadata.replication``;
    #: ours, default true). False: slaves learn metadata only from the ``slaveSyncInterval`` copy.
    enable_metadata_replication: bool = True
    #: Largest number of messages one pull returns.
    max_transfer_count_on_message_in_memory: int = 32
    #: Largest body of one pull response.
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    #: Sends being processed at once above which new sends get SYSTEM_BUSY (2).
    max_in_flight_sends: int = 10_000
    #: Body bytes of sends being processed above which new sends get SYSTEM_BUSY (2).
    max_in_flight_send_bytes: int = 512 * 1024 * 1024
    #: Sends waiting to be handled above which new sends get SYSTEM_BUSY (2) ``[OVERLOAD]`` at once
    #: (RocketMQ ``sendThreadPoolQueueCapacity``, 10,000).
    send_thread_pool_queue_capacity: int = 10_000
    #: A send that waited this long (ms) before being handled is answered SYSTEM_BUSY (2)
    #: ``[TIMEOUT_CLEAN_QUEUE]broker busy`` instead (RocketMQ ``waitTimeMillsInSendQueue``, 200).
    wait_time_mills_in_send_queue: int = 200
    #: Answer sends that waited too long with SYSTEM_BUSY (RocketMQ ``brokerFastFailureEnable``).
    broker_fast_failure_enable: bool = True
    #: Bytes of unsent replies at which a client connection stops being read, and below which it is
    #: read again (NettyServerConfig; 0 = Netty's 64 KiB / 32 KiB). See ``rocket.remoting.connection``.
    write_buffer_high_water_mark: int = 0
    write_buffer_low_water_mark: int = 0
    #: Requests of one connection being handled (not yet answered, long-polled pulls included) at which
    #: it stops being read.
    server_channel_max_pending_requests: int = DEFAULT_MAX_PENDING_REQUESTS
    #: Delay levels, 1-based: ``<n><ms|s|m|h|d>`` separated by spaces.
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    #: Answer sends of transactional half messages with NO_PERMISSION (16).
    reject_transaction_message: bool = False
    #: Age (ms since the half message was born) after which an unfinished transaction is checked
    #: back with its producer group (``transactionTimeOut``; RocketMQ: 6 s).
    transaction_time_out: int = field(default=6_000, metadata=_java("transactionTimeOut"))
    #: Check-backs of one transaction before its half message is discarded to
    #: TRANS_CHECK_MAX_TIME_TOPIC (``transactionCheckMax``; RocketMQ: 15).
    transaction_check_max: int = 15
    #: Period of the transaction check-back scan in ms (``transactionCheckInterval``; RocketMQ 4.9.8: 60 s).
    transaction_check_interval: int = 60_000
    #: maxNum used for QUERY_MESSAGE by unique key.
    default_query_max_num: int = 32
    #: Upper bound on QUERY_MESSAGE's maxNum.
    max_msgs_num_batch: int = 64
    #: RocketMQ 4.x switch: turns on both authentication and authorization (ACL 2.0 here).
    acl_enable: bool = False
    #: Requests must be signed by a known, enabled user (``authenticationEnabled``).
    authentication_enabled: bool = False
    #: Signed-in users need an ACL allowing each request (``authorizationEnabled``).
    authorization_enabled: bool = False
    #: The initial Super user: JSON ``{"username","password"}`` or a file with it
    #: (``initAuthenticationUser``); also ``ROCKET_INIT_AUTH_USER``.
    init_authentication_user: str = field(default="", metadata={"secret": "1"})
    #: What the broker signs its own requests with: JSON ``{"accessKey","secretKey"}`` or a
    #: file (``innerClientAuthenticationCredentials``); default the initial user.
    inner_client_authentication_credentials: str = field(default="", metadata={"secret": "1"})
    #: Request codes never checked, comma separated (``authenticationWhitelist``).
    authentication_whitelist: str = ""
    #: ``stateless`` (verify every signature) or ``stateful`` (verify once per connection and user,
    #: then for ``statefulAuthenticationCacheExpiredSecond``; ``authenticationStrategy``).
    authentication_strategy: str = "stateless"
    stateful_authentication_cache_expired_second: int = 60
    #: Bearer token file for the HTTP admin API (``/api/v1``); empty = the inner credentials'
    #: SecretKey when authentication is on, else the API is open.
    http_auth_token_file: str = ""
    #: Also require the credential for /healthz, /readyz and /metrics.
    http_auth_probes: bool = False
    #: TLS (RocketMQ's ``TlsSystemConfig`` keys, :mod:`rocket.remoting.tls`). ``tlsMode`` (RocketMQ's
    #: ``tls.server.mode``): ``disabled``, ``permissive`` or ``enforcing``, for the remoting, VIP, HA and
    #: HTTP ports; read at start.
    tls_mode: str = field(default="disabled", metadata=_java("tlsMode"))
    #: This broker's own connections (NameServers, the master's HA port, controllers) use TLS.
    tls_enable: bool = field(default=False, metadata=_java("tls.enable"))
    #: A throwaway self-signed certificate when no ``tls.server.certPath``; clients trust any server.
    tls_test_mode_enable: bool = field(default=False, metadata=_java("tls.test.mode.enable"))
    #: A properties file of these ``tls.*`` keys; its values win (RocketMQ's ``tls.config.file``).
    tls_config_file: str = field(default="", metadata=_java("tls.config.file"))
    #: ``none``, ``optional`` or ``require``: ask for client certificates (verified against trustCertPath).
    tls_server_need_client_auth: str = field(default="none", metadata=_java("tls.server.need.client.auth"))
    #: PEM files of the server's certificate chain, private key (PKCS#8/PKCS#1) and trusted client CAs.
    tls_server_cert_path: str = field(default="", metadata=_java("tls.server.certPath"))
    tls_server_key_path: str = field(default="", metadata=_java("tls.server.keyPath"))
    tls_server_key_password: str = field(default="", metadata={"java": "tls.server.keyPassword", "secret": "always"})
    tls_server_auth_client: bool = field(default=False, metadata=_java("tls.server.authClient"))
    tls_server_trust_cert_path: str = field(default="", metadata=_java("tls.server.trustCertPath"))
    #: This broker's client certificate and key (when servers ask for one), and the CAs it trusts.
    tls_client_cert_path: str = field(default="", metadata=_java("tls.client.certPath"))
    tls_client_key_path: str = field(default="", metadata=_java("tls.client.keyPath"))
    tls_client_key_password: str = field(default="", metadata={"java": "tls.client.keyPassword", "secret": "always"})
    #: Verify the server's certificate and address (RocketMQ's default: false; ours: true).
    tls_client_auth_server: bool = field(default=True, metadata=_java("tls.client.authServer"))
    tls_client_trust_cert_path: str = field(default="", metadata=_java("tls.client.trustCertPath"))
    #: Store keys (see module doc), as given.
    store_overrides: dict[str, str] = field(default_factory=dict, metadata={"internal": "1"})

    # -- derived values -------------------------------------------------------------

    @property
    def broker_addr(self) -> str:
        """``brokerIP1:listenPort``: the address registered with NameServers."""
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def fast_port(self) -> int:
        """The VIP listener port."""
        return self.fast_listen_port or self.listen_port - 2

    @property
    def ha_port(self) -> int:
        """The replication listener port."""
        return self.ha_listen_port or self.listen_port + 1

    @property
    def ha_server_addr(self) -> str:
        """``brokerIP2:haListenPort``, as registered with NameServers."""
        return f"{self.broker_ip2 or self.broker_ip1}:{self.ha_port}"

    @property
    def is_master(self) -> bool:
        """True for brokerId 0 not configured as SLAVE."""
        return self.broker_id == 0 and self.broker_role is not BrokerRole.SLAVE

    @property
    def is_slave(self) -> bool:
        """True when the role is SLAVE (or brokerId > 0)."""
        return self.broker_role is BrokerRole.SLAVE or self.broker_id > 0

    def flow_control(self) -> FlowControl:
        """The remoting connections' backpressure bounds. Raises ``ValueError`` for inconsistent ones."""
        return FlowControl(self.write_buffer_high_water_mark, self.write_buffer_low_water_mark,
                           self.server_channel_max_pending_requests)

    def tls_config(self) -> TlsConfig:
        """The ``tls*`` settings as a :class:`~rocket.remoting.tls.TlsConfig` (``tls.config.file`` read
        now). Raises :class:`~rocket.remoting.tls.TlsConfigError` for settings that do not fit together."""
        return TlsConfig.from_properties({key: getattr(self, name) for key, name in _TLS_FIELDS.items()})

    def namesrv_list(self) -> str:
        """The configured NameServer list, falling back to ``$NAMESRV_ADDR``."""
        return self.namesrv_addr or os.environ.get("NAMESRV_ADDR", "")

    def register_period_seconds(self) -> float:
        """The re-registration period in seconds, clamped to 1-60 s."""
        return min(max(self.register_name_server_period, 1000), 60_000) / 1000.0

    def store_config(self) -> MessageStoreConfig:
        """The :class:`MessageStoreConfig` for this broker.

        Raises :class:`ConfigError` for a store override that does not parse.
        """
        cfg = MessageStoreConfig(
            store_path_root_dir=Path(self.store_path_root_dir),
            flush_disk_type=self.flush_disk_type,
            max_message_size=self.max_message_size,
            store_host=self.broker_addr,
            broker_role=BrokerRole.SLAVE if self.is_slave else self.broker_role,
        )
        if hasattr(cfg, "max_transfer_count_on_message_in_memory"):
            cfg.max_transfer_count_on_message_in_memory = self.max_transfer_count_on_message_in_memory
        fields = _store_fields()
        hints = typing.get_type_hints(MessageStoreConfig)
        for key, raw in self.store_overrides.items():
            f = fields[_norm(key)]
            setattr(cfg, f.name, _store_value(key, raw, hints[f.name]))
        return cfg

    # -- updates ----------------------------------------------------------------------

    def update(self, values: Mapping[str, Any], *, strict: bool = False) -> dict[str, Any]:
        """Apply ``values`` (Java or Python names, strings or typed values).

        Returns the applied ``{python_name: value}``. Unknown keys raise
        :class:`ConfigError` when ``strict``, else are logged and skipped. A
        value that does not parse always raises :class:`ConfigError`.
        """
        applied: dict[str, Any] = {}
        own = _own_fields()
        store_fields = _store_fields()
        hints = _hints()
        for key, raw in values.items():
            norm = _norm(key)
            if norm in own:
                name = own[norm]
                value = _convert(hints[name], raw, key)
                setattr(self, name, value)
                applied[name] = value
            elif norm in store_fields:
                text = _to_text(raw)
                self.store_overrides[key] = text
                applied[key] = text
            elif strict:
                raise ConfigError(f"unknown configuration key {key!r}")
            else:
                log.warning("ignoring unknown configuration key %r", key)
        self.validate()
        return applied

    def validate(self) -> None:
        """Check value ranges. Raises :class:`ConfigError`."""
        if not self.broker_name:
            raise ConfigError("brokerName must not be empty")
        if self.broker_id < 0:
            raise ConfigError(f"brokerId must be >= 0, got {self.broker_id}")
        if not 0 <= self.broker_permission <= 7:
            raise ConfigError(f"brokerPermission must be within 0..7, got {self.broker_permission}")
        for name in ("listen_port", "http_port", "fast_listen_port", "ha_listen_port"):
            port = getattr(self, name)
            if not 0 <= port <= 65535:
                raise ConfigError(f"{_java_name(name)} must be within 0..65535, got {port}")
        _check_listener_ports(self.listener_ports)
        if self.promoted_broker_role is BrokerRole.SLAVE:
            raise ConfigError("promotedBrokerRole must be ASYNC_MASTER or SYNC_MASTER")
        for name in _POSITIVE_FIELDS:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{_java_name(name)} must be > 0")
        self._validate_controller_mode()
        for name in ("slave_read_lag_bytes", "transaction_time_out"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{_java_name(name)} must be >= 0")
        try:
            self.flow_control()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        try:
            self.tls_config()
        except TlsConfigError as exc:
            raise ConfigError(str(exc)) from None
        from rocket.broker.schedule import parse_delay_levels

        try:
            parse_delay_levels(self.message_delay_level)
        except ValueError as exc:
            raise ConfigError(f"messageDelayLevel: {exc}") from None

    def _validate_controller_mode(self) -> None:
        self.controller_lease_fence = self.controller_lease_fence.strip().lower()
        if self.controller_lease_fence not in ("auto", "true", "false"):
            raise ConfigError(f"controllerLeaseFence must be auto, true or false, got {self.controller_lease_fence!r}")
        if self.enable_controller_mode and not self.controller_addr.strip(" ;,"):
            raise ConfigError("enableControllerMode needs controllerAddr (host:port;host:port;...)")

    def to_properties(self) -> dict[str, str]:
        """Every setting as ``{javaName: text}`` (GET_BROKER_CONFIG, persistence). Secrets given
        inline (JSON credentials rather than a file path) read ``******``."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            if f.metadata.get("internal"):
                continue
            text = _to_text(getattr(self, f.name))
            if (f.metadata.get("secret") == "always" and text) or \
                    (f.metadata.get("secret") and text.lstrip().startswith("{")):
                text = "******"
            out[_java_name(f.name)] = text
        out.update(self.store_overrides)
        return out


# -- helpers ---------------------------------------------------------------------------

#: RocketMQ's TLS key -> our field (``tlsMode`` is ``tls.server.mode``).
_TLS_FIELDS = {
    "tlsMode": "tls_mode", "tls.enable": "tls_enable", "tls.test.mode.enable": "tls_test_mode_enable",
    "tls.config.file": "tls_config_file", "tls.server.need.client.auth": "tls_server_need_client_auth",
    "tls.server.certPath": "tls_server_cert_path", "tls.server.keyPath": "tls_server_key_path",
    "tls.server.keyPassword": "tls_server_key_password", "tls.server.authClient": "tls_server_auth_client",
    "tls.server.trustCertPath": "tls_server_trust_cert_path", "tls.client.certPath": "tls_client_cert_path",
    "tls.client.keyPath": "tls_client_key_path", "tls.client.keyPassword": "tls_client_key_password",
    "tls.client.authServer": "tls_client_auth_server", "tls.client.trustCertPath": "tls_client_trust_cert_path",
}

#: Settings that must be > 0 (:meth:`BrokerConfig.validate`).
_POSITIVE_FIELDS = (
    "controller_heart_beat_timeout_mills", "broker_heartbeat_interval", "sync_broker_metadata_period",
    "ha_max_time_slave_not_catchup", "min_in_sync_replicas",
    "default_topic_queue_nums", "max_in_flight_sends", "max_in_flight_send_bytes", "max_message_size",
    "send_thread_pool_queue_capacity", "wait_time_mills_in_send_queue",
    "ha_send_heartbeat_interval", "ha_housekeeping_interval", "ha_transfer_batch_size",
    "ha_slave_fallbehind_max", "slave_timeout", "slave_sync_interval",
    "transaction_check_interval", "transaction_check_max",
)

#: Store intervals whose key is in milliseconds (RocketMQ's ``MessageStoreConfig``) while the
#: store keeps seconds: normalised key -> RocketMQ's name.
STORE_MILLISECOND_KEYS = {
    "flushintervalcommitlog": "flushIntervalCommitLog",
    "flushcommitlogthoroughinterval": "flushCommitLogThoroughInterval",
    "syncflushtimeout": "syncFlushTimeout",
    "flushintervalconsumequeue": "flushIntervalConsumeQueue",
    "flushconsumeroffsetinterval": "flushConsumerOffsetInterval",
    "cleanresourceinterval": "cleanResourceInterval",
}

#: Deprecated spellings read in seconds (their meaning before units were settled): exactly
#: these snake_case names, compared without case.
LEGACY_SECONDS_KEYS = frozenset({
    "flush_interval_commit_log",
    "flush_commit_log_thorough_interval",
    "sync_flush_timeout",
    "flush_interval_consume_queue",
    "flush_consumer_offset_interval",
    "clean_resource_interval",
})


def _store_value(key: str, raw: Any, kind: Any) -> Any:
    """The store's value for ``key=raw``: milliseconds keys become seconds (see the module's table).

    Raises :class:`ConfigError` for a value that does not parse, or a fractional millisecond count.
    """
    norm = _norm(key)
    if norm not in STORE_MILLISECOND_KEYS:
        return _convert(kind, raw, key)
    if key.lower() in LEGACY_SECONDS_KEYS:
        seconds = _convert(float, raw, key)
        log.warning("%s=%s is read in seconds (deprecated spelling); write %s=%d (milliseconds)",
                    key, raw, STORE_MILLISECOND_KEYS[norm], round(seconds * 1000))
        return seconds
    text = str(raw).strip()
    try:
        millis = int(text)
    except ValueError:
        raise ConfigError(f"{key} is in milliseconds and takes an integer, got {text!r}") from None
    return millis / 1000.0


#: Java names of settings that differ from ours (beyond case, dots, dashes and underscores).
_STORE_ALIASES = {"filereservedtime": "filereservedtimehours", "tlsservermode": "tlsmode"}


def _check_listener_ports(text: str) -> None:
    """Raise :class:`ConfigError` for a malformed ``listenerPorts``."""
    from rocket.broker.listeners import listener_ports

    try:
        listener_ports(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _norm(key: str) -> str:
    norm = norm_key(key)
    return _STORE_ALIASES.get(norm, norm)


def _store_fields() -> dict[str, dataclasses.Field[Any]]:
    return {_norm(f.name): f for f in dataclasses.fields(MessageStoreConfig)}


def _java_name(name: str) -> str:
    for f in dataclasses.fields(BrokerConfig):
        if f.name == name and "java" in f.metadata:
            return str(f.metadata["java"])
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _own_fields() -> dict[str, str]:
    return {_norm(f.name): f.name for f in dataclasses.fields(BrokerConfig) if not f.metadata.get("internal")}


def _hints() -> dict[str, Any]:
    return typing.get_type_hints(BrokerConfig)


def _to_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def _convert(kind: Any, raw: Any, key: str) -> Any:
    """Convert ``raw`` (text or typed) to ``kind``; raise ConfigError naming ``key``."""
    try:
        if kind is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("true", "1", "yes", "on"):
                return True
            if text in ("false", "0", "no", "off", ""):
                return False
            raise ValueError(f"not a boolean: {raw!r}")
        if kind is int:
            if isinstance(raw, bool):
                raise ValueError(f"not an integer: {raw!r}")
            return int(str(raw).strip())
        if kind is float:
            return float(str(raw).strip())
        if kind is Path:
            return Path(str(raw).strip())
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            return kind(str(raw).strip().upper())
        if kind is str:
            return str(raw).strip()
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    return raw


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read a config file into a flat ``{key: value}`` mapping.

    Raises :class:`ConfigError` when the file is missing or does not parse.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror or exc}") from None
    suffix = p.suffix.lower()
    try:
        if suffix == ".toml":
            obj: Any = tomllib.loads(data.decode())
            if isinstance(obj.get("broker"), dict):
                obj = {**{k: v for k, v in obj.items() if not isinstance(v, dict)}, **obj["broker"]}
        elif suffix == ".json":
            obj = json.loads(data)
        else:
            obj = parse_properties(data.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {p} does not parse: {exc}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"config file {p} must hold a flat object of settings")
    return {str(k): v for k, v in flatten_tables(obj).items() if not isinstance(v, list)}


def runtime_overrides_path(store_path_root_dir: str | Path) -> Path:
    """Where settings changed by UPDATE_BROKER_CONFIG are kept across restarts."""
    return Path(store_path_root_dir) / "config" / "broker.properties"


def load_config(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    runtime_overrides: bool = True,
) -> BrokerConfig:
    """Build a :class:`BrokerConfig`.

    Precedence, lowest first: defaults, the file at ``path``, settings saved by
    UPDATE_BROKER_CONFIG under ``<storePathRootDir>/config/broker.properties``
    (when ``runtime_overrides``), then ``overrides`` (command-line flags).
    Raises :class:`ConfigError`.
    """
    cfg = BrokerConfig()
    if path is not None:
        cfg.update(read_config_file(path))
    if overrides:
        cfg.update(overrides)
    if runtime_overrides:
        saved = runtime_overrides_path(cfg.store_path_root_dir)
        if saved.exists():
            try:
                persisted = parse_properties(saved.read_text())
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read {saved}: {exc}") from None
            cfg.update(persisted)
            if overrides:
                cfg.update(overrides)
    cfg.validate()
    return cfg


def changed_keys(values: Iterable[str]) -> set[str]:
    """Normalized Python names of the keys in ``values`` that are broker settings."""
    own = _own_fields()
    return {own[_norm(k)] for k in values if _norm(k) in own}
