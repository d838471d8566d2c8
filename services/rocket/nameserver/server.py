"""The NameServer process: remoting server, housekeeping, HTTP, metrics.

Ties :class:`~rocket.nameserver.routeinfo.RouteInfoManager` (the route table),
:class:`~rocket.nameserver.processor.DefaultRequestProcessor` (request
handlers), a :class:`~rocket.remoting.RemotingServer` and an aiohttp site
together, the way ``NamesrvController`` does in RocketMQ 4.9.8.

With ``controller`` settings it also runs a controller (RocketMQ 5's
``enableControllerInNamesrv``), whose requests (904, 1001-1013) are served on
the NameServer's own remoting port.

Housekeeping (``RouteInfoManager.scanNotActiveBroker``): every
``scan_interval`` seconds brokers silent for ``broker_timeout`` seconds are
evicted and their connections closed; a broker whose connection closes is
removed at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from rocket.auth import AuthConfig, AuthMetadataStore, ServerAuth, initial_user, inner_credentials
from rocket.auth.http import HttpAuth
from rocket.auth.sync import PeriodicCopy
from rocket.controller.config import ControllerConfig
from rocket.controller.http import ControllerCollector, add_controller_routes
from rocket.controller.manager import ControllerManager
from rocket.nameserver.config import (
    ConfigError,
    NameServerConfig,
    parse_java_properties,
    runtime_update,
    to_java_properties,
)
from rocket.nameserver.http import build_app
from rocket.nameserver.kvconfig import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from rocket.nameserver.listeners import listener_processors, parse_listener_ports
from rocket.nameserver.metrics import NameServerMetrics
from rocket.nameserver.processor import DefaultRequestProcessor, no_route_remark
from rocket.nameserver.routeinfo import RouteInfoManager
from rocket.protocol.codes import RequestCode, ResponseCode
from rocket.remoting import RemotingClient
from rocket.remoting.command import RemotingCommand
from rocket.remoting.connection import Processors, RemotingConnection
from rocket.remoting.http import HttpServer
from rocket.remoting.server import RemotingServer
from rocket.runtime import until_stopped

log = logging.getLogger("rocket.nameserver")


class NameServer:
    """One NameServer instance, startable inside any running event loop.

    ``await start()`` binds the remoting port (then :attr:`port` holds the
    bound one) and the HTTP port (:attr:`http_port`), and starts the scan
    task; ``await stop()`` undoes it. Raises ``OSError`` when a port is taken.
    """

    def __init__(self, config: NameServerConfig | None = None, controller: ControllerConfig | None = None) -> None:
        self.config = config or NameServerConfig()
        cfg = self.config
        self.routes = RouteInfoManager(broker_timeout=cfg.broker_timeout)
        self.kv_config = KVConfigManager(
            Path(cfg.kv_config_path) if cfg.kv_config_path else None, on_change=self._kv_changed
        )
        processors = Processors()
        self.processor = DefaultRequestProcessor(
            self.routes,
            self.kv_config,
            order_message_enable=cfg.order_message_enable,
            enable_all_topic_list=cfg.enable_all_topic_list,
            enable_topic_list=cfg.enable_topic_list,
        )
        self.processor.register(processors)
        processors.register(RequestCode.GET_NAMESRV_CONFIG, self.get_namesrv_config)
        processors.register(RequestCode.UPDATE_NAMESRV_CONFIG, self.update_namesrv_config)
        self.routes.order_topic_conf = self.processor.order_topic_conf if cfg.order_message_enable else None
        self.metrics = NameServerMetrics(self.routes, set(processors.codes()))
        self.processor.metrics = self.metrics
        processors.observers.append(self.metrics.observe_request)
        self.auth_config = AuthConfig(
            cluster_name=cfg.cluster_name,
            authentication_enabled=cfg.authentication_enabled or cfg.acl_enable,
            authorization_enabled=cfg.authorization_enabled or cfg.acl_enable,
            init_authentication_user=cfg.init_authentication_user,
            inner_client_authentication_credentials=cfg.inner_client_authentication_credentials,
        )
        #: Users and ACLs (a copy of a master broker's, plus the initial Super user).
        self.auth_store = AuthMetadataStore()
        self.auth: ServerAuth | None = (
            ServerAuth(self.auth_config, self.auth_store) if self.auth_config.enabled else None
        )
        #: TLS of the remoting and HTTP ports (None: plaintext) and of our own connections to brokers.
        self.tls = cfg.tls.server()
        self.client_tls = cfg.tls.client()
        #: ACL on: the periodic copy of users and ACLs from the registered masters.
        self.auth_copy: PeriodicCopy | None = None
        if self.auth is not None:
            creds = inner_credentials(self.auth_config)
            own = initial_user(self.auth_config)
            self.auth_copy = PeriodicCopy(RemotingClient(rpc_hook=creds.sign if creds else None, tls=self.client_tls),
                                          self._master_addresses, self.auth_store, [own] if own is not None else [],
                                          max(0.2, cfg.auth_sync_interval), "nameserver-auth")
        #: Credential check of the HTTP ``/api/v1`` routes (None: open).
        self.http_auth = HttpAuth.configured(cfg.http_auth_token_file,
                                             self.auth_store if self.auth is not None else None,
                                             cfg.http_auth_probes)
        self.remoting = RemotingServer(
            processors, host=cfg.host, port=cfg.port, max_frame_size=cfg.max_frame_size, name="nameserver",
            rpc_hook=self.auth,
            flow_control=cfg.flow_control(),
            tls=self.tls,
        )
        self.remoting.on_connection_closed.append(self._connection_closed)
        #: One remoting server per listener (``config.listeners``), answering that listener's addresses.
        self.listener_remoting: dict[str, RemotingServer] = {}
        for listener, listener_port in parse_listener_ports(cfg.listeners).items():
            server = RemotingServer(
                listener_processors(processors, listener, self.routes, self.processor.listener_book,
                                    no_route_remark),
                host=cfg.host, port=listener_port, max_frame_size=cfg.max_frame_size, name=f"nameserver-{listener}",
                rpc_hook=self.auth, flow_control=cfg.flow_control(), tls=self.tls)
            server.on_connection_closed.append(self._connection_closed)
            self.listener_remoting[listener] = server
        #: The embedded controller (RocketMQ's ``enableControllerInNamesrv``), served on this port.
        self.controller: ControllerManager | None = None
        if controller is not None:
            self.controller = ControllerManager(controller)
            self.controller.register(processors)
            if self.auth_copy is not None:  # its requests to brokers are signed like ours
                self.controller.client.rpc_hook = self.auth_copy.client.rpc_hook
            self.controller.client.tls = self.client_tls
            self.remoting.on_connection_closed.append(self.controller.connection_closed)
            self.metrics.registry.register(ControllerCollector(self.controller))
        self._http: HttpServer | None = None
        self._scan_task: asyncio.Task[None] | None = None
        self.http_port: int | None = None
        self.ready = False

    @property
    def port(self) -> int:
        """The remoting port (the bound one after :meth:`start`)."""
        return self.remoting.port

    @property
    def listener_ports(self) -> dict[str, int]:
        """Listener name -> its remoting port (the bound ones after :meth:`start`)."""
        return {name: server.port for name, server in self.listener_remoting.items()}

    def _kv_changed(self, namespace: str, key: str) -> None:
        if namespace == NAMESPACE_ORDER_TOPIC_CONFIG:
            self.routes.invalidate_topic(key)

    def _connection_closed(self, conn: RemotingConnection) -> None:
        removed = self.processor.connection_closed(conn)
        if removed:
            self.metrics.evictions_closed.inc(len(removed))

    async def start(self) -> None:
        """Listen on the remoting and HTTP ports and start housekeeping."""
        cfg = self.config
        if self.controller is not None:
            await self.controller.start()
        started: list[RemotingServer] = []
        try:
            for server in (self.remoting, *self.listener_remoting.values()):
                await server.start()
                started.append(server)
        except BaseException:
            for server in started:
                await server.stop()
            if self.controller is not None:
                await self.controller.stop()
            raise
        if cfg.http_port is not None:
            app = build_app(self)
            if self.controller is not None:
                add_controller_routes(app, self.controller)
            http = HttpServer(app, self.tls, name="nameserver-http")
            try:
                self.http_port = await http.start(cfg.http_host or cfg.host, cfg.http_port)
            except BaseException:
                for server in started:
                    await server.stop()
                raise
            self._http = http
        self._scan_task = asyncio.get_running_loop().create_task(self._scan_loop(), name="nameserver-scan")
        if self.auth_copy is not None:
            self.auth_copy.start()
        self.ready = True

    async def stop(self) -> None:
        """Stop scanning, close every connection and the HTTP site.

        Routes are not updated for the connections closed here (nothing is
        served any more), so shutdown logs no per-broker removals.
        """
        self.ready = False
        if self.controller is not None:
            self.controller.quiesce()
        for callback in (self._connection_closed, self.controller.connection_closed if self.controller else None):
            for server in (self.remoting, *self.listener_remoting.values()):
                if callback in server.on_connection_closed:  # shutting down is not brokers dying
                    server.on_connection_closed.remove(callback)
        if self._scan_task is not None:
            self._scan_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan_task
            self._scan_task = None
        if self.auth_copy is not None:
            await self.auth_copy.stop()
        for server in (self.remoting, *self.listener_remoting.values()):
            await server.stop()
        if self.controller is not None:
            await self.controller.stop()
        if self._http is not None:
            await self._http.stop()
            self._http = None

    def get_namesrv_config(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """GET_NAMESRV_CONFIG (319): body = the settings as ``key=value`` lines (Java names,
        :func:`~rocket.nameserver.config.to_java_properties`)."""
        values = to_java_properties(self.config)
        body = "".join(f"{k}={v}\n" for k, v in sorted(values.items())).encode()
        return request.response(ResponseCode.SUCCESS, body=body)

    def update_namesrv_config(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """UPDATE_NAMESRV_CONFIG (318): body ``key=value`` lines; applied at once, all or nothing,
        until the NameServer restarts. SYSTEM_ERROR naming the key for an unknown key, a bad value
        or a setting read only at start (:func:`~rocket.nameserver.config.runtime_update`)."""
        try:
            values = parse_java_properties(request.body.decode())
        except UnicodeDecodeError:
            return request.response(ResponseCode.SYSTEM_ERROR, "string2Properties error: body is not UTF-8")
        if not values:
            return request.response(ResponseCode.SYSTEM_ERROR, "string2Properties error: no key=value in the body")
        try:
            changes = runtime_update(self.config, values)
        except ConfigError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"update NameServer config failed: {exc}")
        for field, value in changes.items():
            setattr(self.config, field, value)
        cfg = self.config
        self.processor.order_message_enable = cfg.order_message_enable
        self.processor.enable_all_topic_list = cfg.enable_all_topic_list
        self.processor.enable_topic_list = cfg.enable_topic_list
        self.routes.order_topic_conf = self.processor.order_topic_conf if cfg.order_message_enable else None
        self.routes.broker_timeout = cfg.broker_timeout
        log.info("NameServer config updated by %s: %s", conn.peer, ", ".join(f"{k}={v}" for k, v in values.items()))
        return request.response(ResponseCode.SUCCESS)

    def scan_not_active_brokers(self) -> int:
        """One housekeeping pass: evict silent brokers, close their connections.

        Returns the number of broker addresses evicted.
        """
        evicted = self.routes.scan_not_active_brokers()
        for broker in evicted:
            channel = broker.channel
            if isinstance(channel, RemotingConnection) and not channel.closed:
                channel.close()
        if evicted:
            self.metrics.evictions_timeout.inc(len(evicted))
        return len(evicted)

    def _master_addresses(self) -> list[str]:
        """The registered masters' addresses, sorted (where users and ACLs are copied from)."""
        return sorted(addr for bd in self.routes.broker_addr_table.values() if (addr := bd.master_addr) is not None)

    async def _scan_loop(self) -> None:
        cfg = self.config
        await asyncio.sleep(min(cfg.scan_initial_delay, cfg.scan_interval))
        while True:
            try:
                self.scan_not_active_brokers()
            except Exception:
                log.exception("broker scan failed")
            await asyncio.sleep(cfg.scan_interval)


async def serve(config: NameServerConfig, controller: ControllerConfig | None = None) -> None:
    """Run a NameServer (with an embedded controller when ``controller`` is given) until SIGTERM
    or SIGINT, then stop it cleanly.

    Logs one line when listening and one when stopped. Raises ``OSError``
    when a port is taken.
    """
    server = NameServer(config, controller)

    def listening() -> None:
        http = f", http {config.http_host or config.host}:{server.http_port}" if server.http_port else ""
        extra = "".join(f", listener {name} {port}" for name, port in server.listener_ports.items())
        log.info("NameServer listening on %s:%d%s%s", config.host, server.port, http, extra)

    name = await until_stopped(server.start, server.stop, listening)
    log.info("NameServer stopped (%s)", name)
