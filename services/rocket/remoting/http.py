"""The HTTP port of a NameServer, broker or controller: an aiohttp application on a TLS-aware listener.

The port follows the process's ``tlsMode`` as its remoting port does (:class:`~rocket.remoting.tls.Listener`):
plain HTTP when disabled, HTTPS and HTTP on one port when permissive (told apart by the first
byte), HTTPS only when enforcing; the certificate is reloaded when its files change.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST

from rocket.remoting.tls import Listener, ServerTls

Handler = Callable[[web.Request], Awaitable[web.Response]]


class RequestCheck(Protocol):
    """A credential check of HTTP requests (``rocket.auth.http.HttpAuth``)."""

    def middleware(self) -> Middleware:
        """The aiohttp middleware that refuses requests without an accepted credential."""
        ...


def probe_app(http_auth: RequestCheck | None, readyz: Handler, metrics: Handler) -> web.Application:
    """A new application serving the probes every server process has: ``GET /healthz`` (200
    ``{"status": "ok"}`` while the process serves), ``GET /readyz`` (``readyz``) and
    ``GET /metrics`` (``metrics``); ``http_auth`` (when given) is its middleware
    (:mod:`rocket.auth.http`: ``/api/v1`` needs a credential). The caller adds its own routes."""
    app = web.Application(middlewares=[http_auth.middleware()] if http_auth is not None else [])
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


def prometheus_response(body: bytes) -> web.Response:
    """``body`` (Prometheus text exposition format) with its content type."""
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


class HttpServer:
    """Serves ``app`` on ``host:port``; ``tls`` None = plain HTTP. ``name`` is for the logs."""

    def __init__(self, app: web.Application, tls: ServerTls | None = None, name: str = "http") -> None:
        self.app = app
        self.tls = tls
        self.name = name
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._listener: Listener | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0 = any free port); returns the bound port. Raises ``OSError``."""
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        server = runner.server
        assert server is not None  # set by setup()
        listener = Listener(server, self.tls, self.name)
        try:
            self.port = await listener.start(host, port)
        except BaseException:
            await runner.cleanup()
            raise
        self._runner, self._listener = runner, listener
        return self.port

    async def stop(self) -> None:
        """Stop listening and close the connections."""
        if self._listener is not None:
            self._listener.close()
            await self._listener.wait_closed()
            self._listener = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
