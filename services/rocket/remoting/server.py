"""An asyncio remoting server: accepts connections and serves a processor table."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from rocket.remoting.command import DEFAULT_MAX_FRAME_SIZE
from rocket.remoting.connection import FlowControl, Handler, Processors, RemotingConnection

log = logging.getLogger("rocket.remoting")


class RemotingServer:
    """Listens on ``host:port`` and serves every connection with ``processors``.

    ``port=0`` picks a free port; read the bound one from :attr:`port` after
    :meth:`start`. ``on_connection_closed`` callbacks receive the closed
    :class:`RemotingConnection` (the NameServer uses this to drop a broker's
    routes at once). A malformed frame closes only its own connection.
    ``flow_control``: every connection's backpressure bounds (unsent replies,
    pending requests; :class:`~rocket.remoting.connection.FlowControl`,
    defaults when None).
    """

    def __init__(
        self,
        processors: Processors | None = None,
        *,
        host: str = "0.0.0.0",
        port: int = 0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        name: str = "server",
        flow_control: FlowControl | None = None,
    ) -> None:
        self.processors = processors or Processors()
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        self.name = name
        self.flow_control = flow_control or FlowControl()
        self.connections: set[RemotingConnection] = set()
        self.on_connection_closed: list[Callable[[RemotingConnection], None]] = []
        self._server: asyncio.AbstractServer | None = None

    def register(self, code: int, handler: Handler) -> None:
        """Route requests with ``code`` to ``handler`` (see :class:`Processors`)."""
        self.processors.register(code, handler)

    def _protocol(self) -> RemotingConnection:
        conn = RemotingConnection(
            self.processors,
            max_frame_size=self.max_frame_size,
            on_close=self._closed,
            role=self.name,
            flow_control=self.flow_control,
        )
        self.connections.add(conn)
        return conn

    def _closed(self, conn: RemotingConnection) -> None:
        self.connections.discard(conn)
        for callback in self.on_connection_closed:
            try:
                callback(conn)
            except Exception:
                log.exception("%s: connection-closed callback failed", self.name)

    async def start(self) -> None:
        """Bind and start accepting. Raises ``OSError`` if the port is taken."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._protocol, self.host, self.port, reuse_address=True, backlog=1024
        )
        sockets = self._server.sockets or ()
        if sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop accepting and close every connection."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        for conn in list(self.connections):
            try:
                async with asyncio.timeout(2.0):
                    await conn.wait_closed()
            except TimeoutError:
                conn.abort()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
