"""The standalone controller process (``rocket controller``): a remoting port serving
:class:`~rocket.controller.manager.ControllerManager`, like RocketMQ's ``ControllerStartup``."""

from __future__ import annotations

import logging

from rocket.controller.config import ControllerConfig
from rocket.controller.http import build_app, controller_registry
from rocket.controller.manager import ControllerManager
from rocket.remoting import Processors, RemotingServer
from rocket.remoting.http import HttpServer
from rocket.runtime import until_stopped

log = logging.getLogger("rocket.controller")


class ControllerServer:
    """A controller on its own remoting port (``config.host``:``config.port``; 0 picks one), and
    HTTP on ``config.http_port`` when set (:mod:`rocket.controller.http`).

    ``await start()`` joins Raft, then listens; raises ``OSError`` when a port is taken.
    """

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.manager = ControllerManager(config)
        processors = Processors()
        self.manager.register(processors)
        #: TLS of the remoting and HTTP ports (None: plaintext).
        self.tls = config.tls.server()
        self.remoting = RemotingServer(processors, host=config.host, port=config.port,
                                       max_frame_size=config.max_frame_size, name="controller", tls=self.tls)
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
                self._http = HttpServer(build_app(self.manager, self.registry, lambda: self.ready), self.tls,
                                        name="controller-http")
                self.http_port = await self._http.start(self.config.host, self.config.http_port)
        except BaseException:
            await self.stop()
            raise
        self.ready = True

    async def stop(self) -> None:
        """Close the ports and leave Raft. The broker connections closed here do not count as
        brokers dying (a stopping leader must not elect new masters on its way out)."""
        self.ready = False
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
    await server.start()
    me = config.self_peer
    http = f", http {server.http_port}" if server.http_port else ""
    log.info("controller %s listening on %s:%d (Raft %s, data %s%s)", me.id, config.host, server.port,
             me.raft_address, config.data_dir, http)
    name = await until_stopped(server.stop)
    log.info("controller stopped (%s)", name)
