"""TLS for every port: settings, reloading SSL contexts, and a listener that tells TLS from plaintext.

Settings are Apache RocketMQ's (``TlsSystemConfig``, ``TlsHelper``; their names are the keys of
:data:`TLS_KEYS`): the server side takes ``tlsMode`` (RocketMQ's ``tls.server.mode``):

* ``disabled``: plaintext only. A TLS ClientHello is a frame whose length field is out of range:
  the connection is closed.
* ``permissive``: TLS and plaintext on one port. The first byte of a connection tells them apart,
  as RocketMQ's ``NettyRemotingServer.TlsModeHandler`` does: 0x16 (a TLS handshake record) starts
  TLS, anything else is served in plaintext.
* ``enforcing``: TLS only. A connection whose first byte is not 0x16 is logged and closed cleanly
  (its unread bytes are drained first, so the peer sees a FIN, not a reset).

The client side (this process's own outgoing connections, or our client's ``--tls``) takes
``tls.enable``. Certificates, keys and trust stores are PEM files (Python's :mod:`ssl`, i.e.
OpenSSL: nothing cryptographic is written here). They are reloaded when a file changes: every
new connection (server side: every handshake; client side: every connect) compares each file's
modification stamp with the one loaded, and builds a new context when one differs. Connections
already open keep theirs, so a rotation needs no restart and fails no request; a context that
does not build (a certificate and key that do not match yet, half way through a rotation) is
logged and the previous one stays in use until the files agree.

Differences from RocketMQ, on purpose: ``tls.test.mode.enable`` defaults to false (RocketMQ:
true, a throwaway self-signed certificate and clients trusting anything); ``tls.client.authServer``
defaults to true (RocketMQ: false), so a client verifies the server's certificate chain and its
host name or IP address (the trust store is ``tls.client.trustCertPath``, else the system's);
``tls.server.need.client.auth`` other than ``none`` verifies client certificates against
``tls.server.trustCertPath``, which it then needs (``tls.server.authClient`` is implied); an
unknown ``tlsMode`` is an error, not permissive.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import os
import socket
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocket.protocol.body import parse_properties

log = logging.getLogger("rocket.remoting.tls")

#: First byte of a TLS record of type handshake (RFC 8446 ``ContentType.handshake``; RocketMQ's
#: ``TlsModeHandler.HANDSHAKE_MAGIC_CODE``).
HANDSHAKE_MAGIC_CODE = 0x16
#: Seconds a TLS handshake may take (Netty's ``SslHandler`` default, 10 s).
HANDSHAKE_TIMEOUT = 10.0
#: Seconds a new connection may stay silent before its first byte decides TLS or plaintext
#: (RocketMQ's ``serverChannelMaxIdleTimeSeconds``, 120 s, after which an idle channel is closed).
FIRST_BYTE_TIMEOUT = 120.0


class TlsConfigError(ValueError):
    """A TLS setting, certificate or key that cannot be used (the message names it)."""


class TlsMode(enum.Enum):
    """RocketMQ's ``TlsMode``: what a server accepts on its port (see the module doc)."""

    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"

    @classmethod
    def parse(cls, text: str | TlsMode) -> TlsMode:
        """``disabled`` / ``permissive`` / ``enforcing`` in any case. Raises :class:`TlsConfigError`."""
        if isinstance(text, TlsMode):
            return text
        try:
            return cls(str(text).strip().lower())
        except ValueError:
            raise TlsConfigError(f"tlsMode must be disabled, permissive or enforcing, got {text!r}") from None


class ClientAuth(enum.Enum):
    """``tls.server.need.client.auth`` (Netty's ``ClientAuth``): whether a server asks for client certificates."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


#: RocketMQ key -> :class:`TlsConfig` field. ``tlsMode`` is ours (RocketMQ's is the system
#: property ``tls.server.mode``, also accepted).
TLS_KEYS: dict[str, str] = {
    "tlsMode": "mode",
    "tls.server.mode": "mode",
    "tls.enable": "enable",
    "tls.test.mode.enable": "test_mode_enable",
    "tls.config.file": "config_file",
    "tls.server.need.client.auth": "server_need_client_auth",
    "tls.server.keyPath": "server_key_path",
    "tls.server.keyPassword": "server_key_password",
    "tls.server.certPath": "server_cert_path",
    "tls.server.authClient": "server_auth_client",
    "tls.server.trustCertPath": "server_trust_cert_path",
    "tls.client.keyPath": "client_key_path",
    "tls.client.keyPassword": "client_key_password",
    "tls.client.certPath": "client_cert_path",
    "tls.client.authServer": "client_auth_server",
    "tls.client.trustCertPath": "client_trust_cert_path",
}


def norm_key(key: str) -> str:
    """A setting's key compared without case, dots, dashes or underscores (``tls.server.certPath`` ==
    ``tls_server_cert_path`` == ``TLS-SERVER-CERTPATH``)."""
    return key.replace(".", "").replace("_", "").replace("-", "").lower()


_BY_NORM = {norm_key(k): v for k, v in TLS_KEYS.items()}


def is_tls_key(key: str) -> bool:
    """True when ``key`` is one of :data:`TLS_KEYS` (in any spelling, see :func:`norm_key`)."""
    return norm_key(key) in _BY_NORM


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """A process's TLS settings (RocketMQ's names in :data:`TLS_KEYS`); paths are PEM files.

    ``mode``: the server side (:class:`TlsMode`). ``enable``: this process's own outgoing
    connections use TLS. ``test_mode_enable``: a server without ``server_cert_path`` makes a
    throwaway self-signed certificate, and clients trust any server (tests only).
    ``config_file``: a Java properties file of these keys (RocketMQ's ``tls.config.file``); its
    values win over the others, as in RocketMQ's ``TlsHelper``.
    """

    mode: TlsMode = TlsMode.DISABLED
    enable: bool = False
    test_mode_enable: bool = False
    config_file: str = ""
    server_need_client_auth: ClientAuth = ClientAuth.NONE
    server_key_path: str = ""
    server_key_password: str = dataclasses.field(default="", repr=False)
    server_cert_path: str = ""
    server_auth_client: bool = False
    server_trust_cert_path: str = ""
    client_key_path: str = ""
    client_key_password: str = dataclasses.field(default="", repr=False)
    client_cert_path: str = ""
    client_auth_server: bool = True
    client_trust_cert_path: str = ""

    @classmethod
    def from_properties(cls, values: Mapping[str, Any], *, base: TlsConfig | None = None) -> TlsConfig:
        """The settings among ``values`` (keys of :data:`TLS_KEYS` in any spelling; others are
        ignored) over ``base`` (default: the defaults), then those of ``tls.config.file`` when set.

        Raises :class:`TlsConfigError` for a value that does not parse or an unreadable file.
        """
        config = _apply(base or cls(), values, "")
        if config.config_file:
            path = Path(config.config_file)
            try:
                text = path.read_text()
            except OSError as exc:
                raise TlsConfigError(f"tls.config.file {path}: {exc.strerror or exc}") from None
            config = _apply(config, parse_properties(text), f"{path}: ")
        config.validate()
        return config

    def to_properties(self) -> dict[str, str]:
        """Every setting under its RocketMQ name as text (``tlsMode`` for the mode; passwords ``******``)."""
        out: dict[str, str] = {}
        for key, name in TLS_KEYS.items():
            if key == "tls.server.mode":
                continue
            value = getattr(self, name)
            if isinstance(value, enum.Enum):
                text = str(value.value)
            elif isinstance(value, bool):
                text = "true" if value else "false"
            else:
                text = str(value)
            out[key] = "******" if name.endswith("password") and text else text
        return out

    def validate(self) -> None:
        """Check that the settings fit together. Raises :class:`TlsConfigError`."""
        if self.mode is not TlsMode.DISABLED and not self.test_mode_enable:
            if not self.server_cert_path or not self.server_key_path:
                raise TlsConfigError(
                    f"tlsMode={self.mode.value} needs tls.server.certPath and tls.server.keyPath "
                    "(or tls.test.mode.enable=true for a throwaway self-signed certificate)")
        if self.server_need_client_auth is not ClientAuth.NONE and not self.server_trust_cert_path \
                and self.mode is not TlsMode.DISABLED:
            raise TlsConfigError(f"tls.server.need.client.auth={self.server_need_client_auth.value} needs "
                                 "tls.server.trustCertPath (the CA that signs client certificates)")
        if bool(self.client_cert_path) != bool(self.client_key_path):
            raise TlsConfigError("tls.client.certPath and tls.client.keyPath go together")

    def server(self) -> ServerTls | None:
        """The server side (None when ``mode`` is disabled). Raises :class:`TlsConfigError` when
        the certificate or key cannot be loaded."""
        if self.mode is TlsMode.DISABLED:
            return None
        return ServerTls(self)

    def client(self) -> ClientTls | None:
        """This process's outgoing TLS (None unless ``enable``). Raises :class:`TlsConfigError`."""
        return ClientTls(self) if self.enable else None


def flatten_tables(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables as dotted keys: TOML's ``tls.server.certPath = "x"`` (``{"tls": {"server":
    {"certPath": "x"}}}``) becomes ``{"tls.server.certPath": "x"}``; other values stay as they are."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_tables(value, f"{name}."))
        else:
            out[name] = value
    return out


def _apply(config: TlsConfig, values: Mapping[str, Any], where: str) -> TlsConfig:
    changes: dict[str, Any] = {}
    for key, raw in values.items():
        name = _BY_NORM.get(norm_key(str(key)))
        if name is None:
            continue
        changes[name] = _convert(name, raw, f"{where}{key}")
    return dataclasses.replace(config, **changes) if changes else config


def _convert(name: str, raw: Any, key: str) -> Any:
    if name == "mode":
        try:
            return TlsMode.parse(raw)
        except TlsConfigError as exc:
            raise TlsConfigError(f"{key}: {exc}") from None
    if name == "server_need_client_auth":
        try:
            return ClientAuth(str(raw).strip().lower() or "none")
        except ValueError:
            raise TlsConfigError(f"{key} must be none, optional or require, got {raw!r}") from None
    kind = type(getattr(TlsConfig(), name))
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise TlsConfigError(f"{key} must be true or false, got {raw!r}")
        return text == "true"
    return str(raw).strip()


# -- contexts that reload ---------------------------------------------------------------------------

def _stamp(paths: tuple[str, ...]) -> tuple[tuple[int, int, int], ...]:
    """Each file's (mtime ns, size, inode); zeros for a missing file."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((0, 0, 0))
        else:
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


class _Reloading:
    """An SSL context built from files, rebuilt when one of them changes (see the module doc)."""

    def __init__(self, paths: tuple[str, ...], build: Callable[[], ssl.SSLContext], what: str) -> None:
        self._paths = tuple(p for p in paths if p)
        self._build = build
        self._what = what
        self._loaded_stamp = _stamp(self._paths)
        self._failed_stamp: tuple[tuple[int, int, int], ...] | None = None
        try:
            self._context = build()
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise TlsConfigError(f"{what}: {_reason(exc)}") from None
        #: How often the context was rebuilt after a file changed.
        self.reloads = 0

    def context(self) -> ssl.SSLContext:
        """The current context, rebuilt first when a file changed since it was loaded."""
        if self._paths:
            stamp = _stamp(self._paths)
            if stamp != self._loaded_stamp and stamp != self._failed_stamp:
                self._reload(stamp)
        return self._context

    def _reload(self, stamp: tuple[tuple[int, int, int], ...]) -> None:
        try:
            context = self._build()
        except (OSError, ssl.SSLError, ValueError) as exc:
            self._failed_stamp = stamp
            log.warning("%s changed but does not load yet (%s); still using the previous one", self._what, _reason(exc))
            return
        self._context = context
        self._loaded_stamp = stamp
        self._failed_stamp = None
        self.reloads += 1
        log.info("%s reloaded from %s", self._what, ", ".join(self._paths))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return f"{exc.reason} ({exc.library or 'ssl'})"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename or ''}".rstrip(": ")
    return str(exc) or type(exc).__name__


class ServerTls:
    """The server side of :class:`TlsConfig`: its mode and a reloading server context.

    Raises :class:`TlsConfigError` when the certificate, key or trust store does not load.
    """

    def __init__(self, config: TlsConfig) -> None:
        self.config = config
        self.mode = config.mode
        self._self_signed: tuple[bytes, bytes] | None = None
        if config.test_mode_enable and not config.server_cert_path:
            from rocket.remoting.certs import self_signed

            self._self_signed = self_signed(["127.0.0.1", "localhost", socket.gethostname()])
            paths: tuple[str, ...] = (config.server_trust_cert_path,)
        else:
            paths = (config.server_cert_path, config.server_key_path, config.server_trust_cert_path)
        self._ctx = _Reloading(paths, self._build, "TLS server certificate")

    def context(self) -> ssl.SSLContext:
        """The context for the next handshake (reloaded first when a file changed)."""
        return self._ctx.context()

    @property
    def reloads(self) -> int:
        """How often the certificate was reloaded."""
        return self._ctx.reloads

    def _build(self) -> ssl.SSLContext:
        cfg = self.config
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self._self_signed is not None:
            _load_pem_pair(ctx, *self._self_signed)
        else:
            ctx.load_cert_chain(cfg.server_cert_path, cfg.server_key_path, cfg.server_key_password or None)
        if cfg.server_need_client_auth is not ClientAuth.NONE:
            ctx.load_verify_locations(cfg.server_trust_cert_path)
            ctx.verify_mode = (ssl.CERT_REQUIRED if cfg.server_need_client_auth is ClientAuth.REQUIRE
                               else ssl.CERT_OPTIONAL)
        return ctx


def _load_pem_pair(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """``load_cert_chain`` from memory (it reads files only): through a private temporary file."""
    with tempfile.NamedTemporaryFile("wb", suffix=".pem") as tmp:
        os.chmod(tmp.name, 0o600)
        tmp.write(cert_pem + key_pem)
        tmp.flush()
        ctx.load_cert_chain(tmp.name)


class ClientTls:
    """The client side of :class:`TlsConfig`: a reloading client context and the host-name check.

    Raises :class:`TlsConfigError` when the trust store or client certificate does not load.
    """

    def __init__(self, config: TlsConfig) -> None:
        self.config = config
        self.verify = config.client_auth_server and not config.test_mode_enable
        self._ctx = _Reloading((config.client_cert_path, config.client_key_path, config.client_trust_cert_path),
                               self._build, "TLS client context")

    @classmethod
    def trusting(cls, ca_file: str | Path | None = None, *, verify: bool = True,
                 cert_file: str = "", key_file: str = "") -> ClientTls:
        """A client trusting ``ca_file`` (None: the system's CAs), verifying the server unless
        ``verify`` is false. Raises :class:`TlsConfigError`."""
        return cls(TlsConfig(enable=True, client_trust_cert_path=str(ca_file or ""), client_auth_server=verify,
                             client_cert_path=cert_file, client_key_path=key_file))

    def context(self) -> ssl.SSLContext:
        """The context for the next connection (reloaded first when a file changed)."""
        return self._ctx.context()

    def _build(self) -> ssl.SSLContext:
        cfg = self.config
        if self.verify:
            ctx = ssl.create_default_context(cafile=cfg.client_trust_cert_path or None)
        else:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if cfg.client_cert_path:
            ctx.load_cert_chain(cfg.client_cert_path, cfg.client_key_path, cfg.client_key_password or None)
        return ctx

    def connect_args(self, host: str) -> dict[str, Any]:
        """Keyword arguments of ``loop.create_connection`` / ``asyncio.open_connection`` for ``host``."""
        return {"ssl": self.context(), "server_hostname": host, "ssl_handshake_timeout": HANDSHAKE_TIMEOUT}


#: Environment of our client and CLI: ``ROCKET_TLS=true`` turns TLS on; ``ROCKET_TLS_CA`` (a PEM
#: file of trusted CAs) turns it on too; ``ROCKET_TLS_CERT`` / ``ROCKET_TLS_KEY``: a client
#: certificate for servers that ask for one; ``ROCKET_TLS_VERIFY=false`` trusts any server
#: (RocketMQ's ``tls.client.authServer=false``).
ENV_TLS, ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY, ENV_TLS_VERIFY = (
    "ROCKET_TLS", "ROCKET_TLS_CA", "ROCKET_TLS_CERT", "ROCKET_TLS_KEY", "ROCKET_TLS_VERIFY")


def client_tls_from_env(environ: Mapping[str, str] | None = None) -> ClientTls | None:
    """Our client's TLS from the environment (:data:`ENV_TLS` ...); None when it asks for none.

    Raises :class:`TlsConfigError` for a value that is not a boolean or a file that does not load.
    """
    env = os.environ if environ is None else environ

    def flag(name: str, default: bool) -> bool:
        text = env.get(name, "").strip().lower()
        if not text:
            return default
        if text not in ("true", "false", "1", "0", "yes", "no"):
            raise TlsConfigError(f"${name} must be true or false, got {env[name]!r}")
        return text in ("true", "1", "yes")

    ca = env.get(ENV_TLS_CA, "").strip()
    if not flag(ENV_TLS, bool(ca)):
        return None
    return ClientTls.trusting(ca or None, verify=flag(ENV_TLS_VERIFY, True),
                              cert_file=env.get(ENV_TLS_CERT, "").strip(), key_file=env.get(ENV_TLS_KEY, "").strip())


def resolve_client_tls(tls: ClientTls | bool | None) -> ClientTls | None:
    """A client's ``tls`` argument: a :class:`ClientTls` as given, True = verify against the system's
    CAs, False = plaintext, None = the environment (:func:`client_tls_from_env`). Raises :class:`TlsConfigError`."""
    if tls is None:
        return client_tls_from_env()
    if tls is True:
        return ClientTls.trusting(None)
    if tls is False:
        return None
    return tls


# -- the listener ------------------------------------------------------------------------------------

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class Listener:
    """Accepts connections on one port and hands each to ``protocol_factory``, in plaintext or TLS.

    ``tls`` None (or mode disabled): a plain ``loop.create_server``. Otherwise each accepted
    socket waits (up to :data:`FIRST_BYTE_TIMEOUT`) for its first byte, peeked without reading
    it: 0x16 gets a TLS handshake with the context of that moment (:meth:`ServerTls.context`);
    anything else is served in plaintext (permissive) or closed (enforcing). ``name`` is for the
    logs. Counters: :attr:`tls_accepted`, :attr:`plain_accepted`, :attr:`refused`,
    :attr:`handshake_failures`.
    """

    def __init__(self, protocol_factory: ProtocolFactory, tls: ServerTls | None, name: str = "server") -> None:
        self.protocol_factory = protocol_factory
        self.tls = tls if tls is not None and tls.mode is not TlsMode.DISABLED else None
        self.name = name
        self.port = 0
        self.tls_accepted = 0
        self.plain_accepted = 0
        self.refused = 0
        self.handshake_failures = 0
        self._server: asyncio.AbstractServer | None = None
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._admitting: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int, *, backlog: int = 1024) -> int:
        """Bind ``host:port`` (0 = a free port) and accept; returns the bound port. Raises ``OSError``."""
        loop = asyncio.get_running_loop()
        if self.tls is None:
            self._server = await loop.create_server(self.protocol_factory, host, port,
                                                    reuse_address=True, backlog=backlog)
            sockets = self._server.sockets or ()
            self.port = int(sockets[0].getsockname()[1]) if sockets else port
            return self.port
        infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, addr = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self.port = int(sock.getsockname()[1])
        self._accept_task = loop.create_task(self._accept_loop(sock), name=f"{self.name}-accept")
        log.info("%s listening on port %d, TLS %s", self.name, self.port, self.tls.mode.value)
        return self.port

    def close(self) -> None:
        """Stop accepting; connections not yet admitted are dropped (open ones stay with their owner)."""
        if self._server is not None:
            self._server.close()
        if self._accept_task is not None:
            self._accept_task.cancel()
        for task in list(self._admitting):
            task.cancel()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def wait_closed(self) -> None:
        """Wait until the listening socket is closed."""
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        tasks = [t for t in (self._accept_task, *self._admitting) if t is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._accept_task = None

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except asyncio.CancelledError:
                raise
            except OSError as exc:  # EMFILE and the like: wait, as Netty's accept loop does
                log.warning("%s: accept failed: %s", self.name, exc)
                await asyncio.sleep(0.1)
                continue
            task = loop.create_task(self._admit(conn))
            self._admitting.add(task)
            task.add_done_callback(self._admitting.discard)

    async def _admit(self, conn: socket.socket) -> None:
        assert self.tls is not None
        peer = _peer(conn)
        loop = asyncio.get_running_loop()
        try:
            conn.setblocking(False)
            first = await _peek_first_byte(loop, conn)
        except (TimeoutError, OSError, asyncio.CancelledError) as exc:
            conn.close()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        if not first:  # closed before saying anything
            conn.close()
            return
        if first[0] == HANDSHAKE_MAGIC_CODE:
            try:
                await loop.connect_accepted_socket(self.protocol_factory, conn, ssl=self.tls.context(),
                                                   ssl_handshake_timeout=HANDSHAKE_TIMEOUT)
            except (OSError, TimeoutError, ssl.SSLError) as exc:
                self.handshake_failures += 1
                log.warning("%s: TLS handshake with %s failed: %s", self.name, peer, _reason(exc))
                conn.close()
                return
            self.tls_accepted += 1
            return
        if self.tls.mode is TlsMode.ENFORCING:
            self.refused += 1
            log.warning("%s: %s intends to establish an insecure connection while this server is running "
                        "in TLS enforcing mode: closed", self.name, peer)
            _close_cleanly(conn)
            return
        try:
            await loop.connect_accepted_socket(self.protocol_factory, conn)
        except OSError as exc:
            log.warning("%s: plaintext connection from %s failed: %s", self.name, peer, exc)
            conn.close()
            return
        self.plain_accepted += 1


async def _peek_first_byte(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> bytes:
    """The first byte the peer sent, left unread (``MSG_PEEK``); b"" when it closed first."""
    while True:
        try:
            return conn.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            pass
        readable: asyncio.Future[None] = loop.create_future()
        fd = conn.fileno()
        loop.add_reader(fd, _set_once, readable)
        try:
            async with asyncio.timeout(FIRST_BYTE_TIMEOUT):
                await readable
        finally:
            loop.remove_reader(fd)


def _set_once(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _close_cleanly(conn: socket.socket) -> None:
    """Read what the peer already sent, then close with a FIN (unread bytes would make it a reset)."""
    deadline = time.monotonic() + 0.05
    with contextlib.suppress(OSError):
        while time.monotonic() < deadline:
            try:
                if not conn.recv(65536):
                    break
            except BlockingIOError:
                break
        conn.shutdown(socket.SHUT_RDWR)
    conn.close()


def _peer(conn: socket.socket) -> str:
    try:
        host, port = conn.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"


async def start_server(protocol_factory: ProtocolFactory, host: str, port: int, tls: ServerTls | None, *,
                       name: str = "server", backlog: int = 1024) -> Listener:
    """A started :class:`Listener` on ``host:port``. Raises ``OSError`` when the port is taken."""
    listener = Listener(protocol_factory, tls, name)
    await listener.start(host, port, backlog=backlog)
    return listener
