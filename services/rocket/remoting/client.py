"""An asyncio remoting client: one connection per peer address, reused."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from rocket.remoting.command import (
    DEFAULT_MAX_FRAME_SIZE,
    RemotingCommand,
    RemotingConnectError,
    RemotingTimeoutError,
)
from rocket.remoting.connection import Handler, Processors, RemotingConnection, parse_addr
from rocket.remoting.tls import ClientTls

log = logging.getLogger("rocket.remoting")


class RemotingClient:
    """Sends requests to peers by address (``"host:port"``).

    Connections are opened on first use and kept; a closed one is reopened on
    the next request. ``processors`` answers requests the peer sends to us
    (e.g. NOTIFY_CONSUMER_IDS_CHANGED from a broker). ``rpc_hook`` is called with
    every request sent over these connections just before it is encoded (RocketMQ's
    ``RPCHook.doBeforeRequest``; e.g. ``SessionCredentials.sign``); set it any time.
    ``tls``: connect with TLS (:class:`~rocket.remoting.tls.ClientTls`, RocketMQ's ``useTLS``;
    the context is re-read for every new connection, so a rotated trust store is picked up);
    None = plaintext. A failed handshake raises ``RemotingConnectError`` saying why.
    """

    def __init__(
        self,
        processors: Processors | None = None,
        *,
        connect_timeout: float = 3.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        rpc_hook: Callable[[RemotingCommand], None] | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        self.processors = processors or Processors()
        self.tls = tls
        self._rpc_hook = rpc_hook
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        self._connections: dict[str, RemotingConnection] = {}
        self._connecting: dict[str, asyncio.Lock] = {}

    @property
    def rpc_hook(self) -> Callable[[RemotingCommand], None] | None:
        """The request hook (see the class doc)."""
        return self._rpc_hook

    @rpc_hook.setter
    def rpc_hook(self, hook: Callable[[RemotingCommand], None] | None) -> None:
        self._rpc_hook = hook
        for conn in self._connections.values():
            conn.rpc_hook = hook

    def register(self, code: int, handler: Handler) -> None:
        """Answer requests with ``code`` sent to us by peers with ``handler``."""
        self.processors.register(code, handler)

    async def connection(self, addr: str) -> RemotingConnection:
        """The open connection to ``addr``, opening one if needed.

        Raises ``RemotingConnectError`` when the peer cannot be reached within
        ``connect_timeout`` seconds, and ``ValueError`` for a malformed address.
        """
        conn = self._connections.get(addr)
        if conn is not None and not conn.closed:
            return conn
        lock = self._connecting.setdefault(addr, asyncio.Lock())
        async with lock:
            conn = self._connections.get(addr)
            if conn is not None and not conn.closed:
                return conn
            host, port = parse_addr(addr)
            loop = asyncio.get_running_loop()
            tls_args = self.tls.connect_args(host) if self.tls is not None else {}
            try:
                async with asyncio.timeout(self.connect_timeout):
                    _, protocol = await loop.create_connection(
                        lambda: RemotingConnection(
                            self.processors,
                            max_frame_size=self.max_frame_size,
                            on_close=self._forget,
                            role="client",
                        ),
                        host,
                        port,
                        **tls_args,
                    )
            except (OSError, TimeoutError) as exc:
                raise RemotingConnectError(f"cannot connect to {addr}: {exc or type(exc).__name__}") from exc
            protocol.rpc_hook = self._rpc_hook
            self._connections[addr] = protocol
            return protocol

    def _forget(self, conn: RemotingConnection) -> None:
        for addr, known in list(self._connections.items()):
            if known is conn:
                del self._connections[addr]

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send ``cmd`` to ``addr`` and return its response.

        Raises ``RemotingConnectError`` or ``RemotingTimeoutError``.
        """
        conn = self._connections.get(addr)
        if conn is not None and not conn.closed:  # the usual case: no connect, the whole timeout left
            return await conn.request(cmd, timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        conn = await self.connection(addr)
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise RemotingTimeoutError(f"request {cmd.code} to {addr}: connect used the whole timeout")
        return await conn.request(cmd, remaining)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        """Send ``cmd`` to ``addr`` as a oneway request. Raises ``RemotingConnectError``."""
        conn = await self.connection(addr)
        conn.oneway(cmd)

    def close_connection(self, addr: str) -> None:
        """Close the connection to ``addr`` if one is open."""
        conn = self._connections.pop(addr, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        """Close every connection and wait for them to go."""
        conns = list(self._connections.values())
        self._connections.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            try:
                async with asyncio.timeout(2.0):
                    await conn.wait_closed()
            except TimeoutError:
                conn.abort()
