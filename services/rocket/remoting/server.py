"""An asyncio remoting server: accepts connections and serves a processor table."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import cast

from rocket.protocol.codes import ResponseCode
from rocket.remoting.command import DEFAULT_MAX_FRAME_SIZE, RemotingCommand
from rocket.remoting.connection import (
    FlowControl,
    Handler,
    HandlerResult,
    Processors,
    RemotingConnection,
    RequestQueue,
)
from rocket.remoting.tls import Listener, ServerTls

log = logging.getLogger("rocket.remoting")

#: A server-side RPC hook (RocketMQ's ``RPCHook.doBeforeRequest`` on the server): called with every
#: request before its processor; returns None to let it through, or the response refusing it.
ServerHook = Callable[[RemotingCommand, RemotingConnection], "RemotingCommand | None"]


class HookedProcessors(Processors):
    """A :class:`Processors` table whose every handler first runs ``hook`` (see :data:`ServerHook`).

    Codes nobody registered also pass the hook first, then get REQUEST_CODE_NOT_SUPPORTED (3).
    Handlers registered on ``inner`` later are hooked too; ``observers`` are ``inner``'s.
    """

    def __init__(self, inner: Processors, hook: ServerHook) -> None:
        super().__init__()
        self.inner = inner
        self.hook = hook
        self.observers = inner.observers
        self.queues = inner.queues
        self._hooked: dict[int, tuple[Handler, bool]] = {}

    def register(self, code: int, handler: Handler, queue: RequestQueue | None = None) -> None:
        """Register on the inner table (and forget its hooked wrapper)."""
        self.inner.register(code, handler, queue)
        self._hooked.pop(int(code), None)

    def codes(self) -> list[int]:
        """The inner table's codes."""
        return self.inner.codes()

    def lookup(self, code: int) -> tuple[Handler, bool] | None:
        """The hooked handler for ``code`` (never None: unknown codes get the refusing one)."""
        entry = self._hooked.get(code)
        if entry is not None:
            return entry
        inner = self.inner.lookup(code)
        if inner is None:
            return (self._unsupported, False)
        entry = self._hooked[code] = self._wrap(*inner)
        return entry

    def _unsupported(self, request: RemotingCommand, conn: RemotingConnection) -> HandlerResult:
        refused = self.hook(request, conn)
        if refused is not None:
            return refused
        return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported")

    def _wrap(self, handler: Handler, is_coroutine: bool) -> tuple[Handler, bool]:
        hook = self.hook
        if is_coroutine:
            async def hooked_async(request: RemotingCommand, conn: RemotingConnection) -> HandlerResult:
                refused = hook(request, conn)
                if refused is not None:
                    return refused
                return await cast(Awaitable[HandlerResult], handler(request, conn))

            return hooked_async, True

        def hooked(request: RemotingCommand, conn: RemotingConnection) -> object:
            refused = hook(request, conn)
            if refused is not None:
                return refused
            return handler(request, conn)

        return hooked, False  # type: ignore[return-value]


class RemotingServer:
    """Listens on ``host:port`` and serves every connection with ``processors``.

    ``port=0`` picks a free port; read the bound one from :attr:`port` after
    :meth:`start`. ``on_connection_closed`` callbacks receive the closed
    :class:`RemotingConnection` (the NameServer uses this to drop a broker's
    routes at once). A malformed frame closes only its own connection.
    ``rpc_hook`` (:data:`ServerHook`) sees every request before its processor
    (authentication and authorization, :mod:`rocket.auth.hook`).
    ``flow_control``: every connection's backpressure bounds (unsent replies,
    pending requests; :class:`~rocket.remoting.connection.FlowControl`,
    defaults when None).
    ``tls``: TLS on this port (:class:`~rocket.remoting.tls.ServerTls`: permissive or enforcing,
    certificates reloaded on change); None = plaintext only.
    """

    def __init__(
        self,
        processors: Processors | None = None,
        *,
        host: str = "0.0.0.0",
        port: int = 0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        name: str = "server",
        rpc_hook: ServerHook | None = None,
        flow_control: FlowControl | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        self.processors = processors or Processors()
        if rpc_hook is not None:
            self.processors = HookedProcessors(self.processors, rpc_hook)
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        self.name = name
        self.flow_control = flow_control or FlowControl()
        self.connections: set[RemotingConnection] = set()
        #: Connections accepted since start (cumulative).
        self.accepted_total = 0
        self.on_connection_closed: list[Callable[[RemotingConnection], None]] = []
        self.tls = tls
        self._listener: Listener | None = None

    def register(self, code: int, handler: Handler, queue: RequestQueue | None = None) -> None:
        """Route requests with ``code`` to ``handler``, through ``queue`` if given (see :class:`Processors`)."""
        self.processors.register(code, handler, queue)

    def _protocol(self) -> RemotingConnection:
        conn = RemotingConnection(
            self.processors,
            max_frame_size=self.max_frame_size,
            on_close=self._closed,
            role=self.name,
            flow_control=self.flow_control,
        )
        self.connections.add(conn)
        self.accepted_total += 1
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
        listener = Listener(self._protocol, self.tls, self.name)
        self.port = await listener.start(self.host, self.port, backlog=1024)
        self._listener = listener

    @property
    def listener(self) -> Listener | None:
        """The accepting side (TLS counters), None before :meth:`start`."""
        return self._listener

    async def stop(self) -> None:
        """Stop accepting and close every connection."""
        if self._listener is not None:
            self._listener.close()
        for conn in list(self.connections):
            conn.close()
        for conn in list(self.connections):
            try:
                async with asyncio.timeout(2.0):
                    await conn.wait_closed()
            except TimeoutError:
                conn.abort()
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None
