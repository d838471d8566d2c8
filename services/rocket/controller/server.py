"""The standalone controller process (``rocket controller``): a remoting port serving
:class:`~rocket.controller.manager.ControllerManager`, like RocketMQ's ``ControllerStartup``."""

from __future__ import annotations

import logging

from rocket.controller.config import ControllerConfig
from rocket.controller.manager import ControllerManager
from rocket.remoting import Processors, RemotingServer
from rocket.runtime import stop_signals

log = logging.getLogger("rocket.controller")


class ControllerServer:
    """A controller on its own remoting port (``config.host``:``config.port``; 0 picks one).

    ``await start()`` joins Raft, then listens; raises ``OSError`` when a port is taken.
    """

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.manager = ControllerManager(config)
        processors = Processors()
        self.manager.register(processors)
        self.remoting = RemotingServer(processors, host=config.host, port=config.port,
                                       max_frame_size=config.max_frame_size, name="controller")
        self.remoting.on_connection_closed.append(self.manager.connection_closed)

    @property
    def port(self) -> int:
        """The remoting port (the bound one after :meth:`start`)."""
        return self.remoting.port

    async def start(self) -> None:
        """Join the Raft cluster and listen."""
        await self.manager.start()
        try:
            await self.remoting.start()
        except BaseException:
            await self.manager.stop()
            raise

    async def stop(self) -> None:
        """Close the port and leave Raft."""
        await self.remoting.stop()
        await self.manager.stop()


async def serve(config: ControllerConfig) -> None:
    """Run a controller until SIGTERM or SIGINT. Raises ``OSError`` when a port is taken."""
    server = ControllerServer(config)
    await server.start()
    me = config.self_peer
    log.info("controller %s listening on %s:%d (Raft %s, data %s)", me.id, config.host, server.port,
             me.raft_address, config.data_dir)
    async with stop_signals() as received:
        try:
            name = await received
        finally:
            await server.stop()
    log.info("controller stopped (%s)", name)
