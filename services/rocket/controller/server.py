"""The standalone controller process (``rocket controller``): a remoting port serving
:class:`~rocket.controller.manager.ControllerManager`, like RocketMQ's ``ControllerStartup``.

With ACL on (``authenticationEnabled`` / ``authorizationEnabled``) the remoting port checks every
request with the same hook as brokers and NameServers (:class:`rocket.auth.ServerAuth`, the
controller's codes classified by :data:`rocket.auth.classify.CONTROLLER_CLASSIFIERS`, any other
code denied to non-Super users). Its users and ACLs are those of the brokers, copied the way a
NameServer copies them (AUTH_LIST_USER/ACL, :func:`rocket.auth.sync.copy_from_brokers`) from a
broker the controller knows (alive masters first) every ``auth_sync_interval_s``, plus its own
initial Super user (``initAuthenticationUser``), which is how brokers get in before any copy:
they sign with their ``innerClientAuthenticationCredentials``, by default that same user. The
controller signs what it sends (NOTIFY_BROKER_ROLE_CHANGED, the copies) with its inner
credentials, and its HTTP ``/api/v1`` needs a credential (:mod:`rocket.auth.http`).
"""

from __future__ import annotations

import logging

from rocket.auth import AuthMetadataStore, ServerAuth, initial_user, inner_credentials
from rocket.auth.classify import CONTROLLER_CLASSIFIERS
from rocket.auth.http import HttpAuth, read_token
from rocket.auth.model import AuthError, User, UserStatus, UserType
from rocket.auth.sync import PeriodicCopy
from rocket.controller.config import ControllerConfig
from rocket.controller.http import build_app, controller_registry
from rocket.controller.manager import ControllerManager
from rocket.remoting import Processors, RemotingClient, RemotingServer
from rocket.remoting.http import HttpServer
from rocket.runtime import until_stopped

log = logging.getLogger("rocket.controller")


def check_auth_settings(config: ControllerConfig) -> None:
    """Raise :class:`~rocket.auth.AuthError` (or ``HttpAuthError``) when the ACL settings of
    ``config`` cannot be used: ACL on without an initial user or inner credentials (nobody could
    sign in), an unreadable credentials or token file."""
    auth_config = config.auth_config()
    if config.acl_enabled and inner_credentials(auth_config) is None:
        raise AuthError("ACL is on but there is no initAuthenticationUser nor "
                        "innerClientAuthenticationCredentials: nobody could sign in")
    if config.http_auth_token_file:
        read_token(config.http_auth_token_file)


class ControllerServer:
    """A controller on its own remoting port (``config.host``:``config.port``; 0 picks one), and
    HTTP on ``config.http_port`` when set (:mod:`rocket.controller.http`).

    ``await start()`` joins Raft, then listens; raises ``OSError`` when a port is taken. The
    constructor raises :class:`~rocket.auth.AuthError` for unusable ACL settings (e.g. ACL on
    without an initial user or inner credentials: nothing could ever sign in).
    """

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.manager = ControllerManager(config)
        processors = Processors()
        self.manager.register(processors)
        #: TLS of the remoting and HTTP ports (None: plaintext).
        self.tls = config.tls.server()
        #: Users and ACLs: the brokers' (copied) plus this controller's own Super users.
        self.auth_store = AuthMetadataStore()
        auth_config = config.auth_config()
        #: The request check of the remoting port (None when ACL is off).
        self.auth: ServerAuth | None = None
        #: The Super users this controller keeps whatever the copies say (initial, inner).
        self.own_users: list[User] = []
        #: ACL on: the periodic copy of users and ACLs from the brokers (:meth:`broker_addresses`).
        self.auth_copy: PeriodicCopy | None = None
        if config.acl_enabled:
            self.auth = ServerAuth(auth_config, self.auth_store, classifiers=CONTROLLER_CLASSIFIERS)
            check_auth_settings(config)
            creds = inner_credentials(auth_config)
            assert creds is not None
            first = initial_user(auth_config)
            self.own_users = [first] if first is not None else []
            if config.inner_client_authentication_credentials:  # a Super user too, as ServerAuth makes it
                self.own_users.append(User(creds.access_key, creds.secret_key, UserType.SUPER, UserStatus.ENABLE))
            self.manager.client.rpc_hook = creds.sign  # NOTIFY_BROKER_ROLE_CHANGED is signed
            self.auth_copy = PeriodicCopy(RemotingClient(connect_timeout=3.0, rpc_hook=creds.sign,
                                                         tls=config.tls.client()),
                                          self.broker_addresses, self.auth_store, self.own_users,
                                          config.auth_sync_interval_s, "controller-auth")
        #: Credential check of the HTTP ``/api/v1`` routes (None: open).
        self.http_auth = HttpAuth.configured(config.http_auth_token_file,
                                             self.auth_store if self.auth is not None else None,
                                             config.http_auth_probes)
        self.remoting = RemotingServer(processors, host=config.host, port=config.port,
                                       max_frame_size=config.max_frame_size, name="controller", tls=self.tls,
                                       rpc_hook=self.auth)
        self.remoting.on_connection_closed.append(self.manager.connection_closed)
        self.registry = controller_registry(self.manager)
        self._http: HttpServer | None = None
        self.http_port: int | None = None
        self.ready = False

    @property
    def port(self) -> int:
        """The remoting port (the bound one after :meth:`start`)."""
        return self.remoting.port

    async def start(self) -> None:
        """Join the Raft cluster and listen."""
        await self.manager.start()
        try:
            await self.remoting.start()
            if self.config.http_port is not None:
                app = build_app(self.manager, self.registry, lambda: self.ready, self.http_auth)
                self._http = HttpServer(app, self.tls, name="controller-http")
                self.http_port = await self._http.start(self.config.host, self.config.http_port)
        except BaseException:
            await self.stop()
            raise
        if self.auth_copy is not None:
            self.auth_copy.start()
        self.ready = True

    def broker_addresses(self) -> list[str]:
        """Every broker address the controller holds: alive masters, then other alive brokers,
        then the rest (a controller restarted before the brokers knows them from Raft)."""
        manager = self.manager
        ranked: dict[str, int] = {}
        with manager.raft.lock:
            for name, group in manager.replicas.groups.items():
                for bid, addr in group.broker_addrs().items():
                    alive = manager.heartbeats.is_active(group.cluster_name, name, bid)
                    rank = (0 if bid == group.master_broker_id else 1) if alive else 2
                    ranked[addr] = min(rank, ranked.get(addr, rank))
        return sorted(ranked, key=lambda a: (ranked[a], a))

    async def stop(self) -> None:
        """Close the ports and leave Raft. The broker connections closed here do not count as
        brokers dying (a stopping leader must not elect new masters on its way out)."""
        self.ready = False
        if self.auth_copy is not None:
            await self.auth_copy.stop()
        if self.manager.connection_closed in self.remoting.on_connection_closed:
            self.remoting.on_connection_closed.remove(self.manager.connection_closed)
        self.manager.quiesce()
        await self.remoting.stop()
        if self._http is not None:
            await self._http.stop()
            self._http = None
        await self.manager.stop()


async def serve(config: ControllerConfig) -> None:
    """Run a controller until SIGTERM or SIGINT. Raises ``OSError`` when a port is taken."""
    server = ControllerServer(config)

    def listening() -> None:
        me = config.self_peer
        http = f", http {server.http_port}" if server.http_port else ""
        acl = ", ACL on" if server.auth is not None else ""
        log.info("controller %s listening on %s:%d (Raft %s, data %s%s%s)", me.id, config.host, server.port,
                 me.raft_address, config.data_dir, http, acl)

    name = await until_stopped(server.start, server.stop, listening)
    log.info("controller stopped (%s)", name)
