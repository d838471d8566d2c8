"""Credentials on the HTTP side (broker and NameServer ``/api/v1``): an aiohttp middleware.

Accepted credentials (either):

* ``Authorization: Bearer <token>`` where the token is the content of the configured token file
  (``httpAuthTokenFile``; surrounding whitespace ignored);
* ``Authorization: Basic base64(<AccessKey>:<SecretKey>)`` of an enabled Super user of the
  server's ACL store (the same keys as on the remoting ports).

Protected: every path under ``/api/``; ``/healthz``, ``/readyz`` and ``/metrics`` too when
``protect_probes``. Missing or wrong credentials get 401 ``{"error": ...}`` with a
``WWW-Authenticate`` header. Comparisons are constant-time.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Middleware

from rocket.auth.model import UserStatus, UserType
from rocket.auth.store import AuthMetadataStore

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})


class HttpAuthError(ValueError):
    """The token file cannot be read or is empty."""


def read_token(path: str | Path) -> str:
    """The bearer token in ``path`` (stripped). Raises :class:`HttpAuthError`."""
    try:
        token = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise HttpAuthError(f"cannot read the HTTP token file {path}: {exc}") from None
    if not token:
        raise HttpAuthError(f"the HTTP token file {path} is empty")
    return token


class HttpAuth:
    """Checks requests (module doc). ``token``: the bearer token or None; ``store``: users whose
    Super keys are accepted with Basic auth, or None."""

    def __init__(self, token: str | None, store: AuthMetadataStore | None, *, protect_probes: bool = False) -> None:
        self.token = token
        self.store = store
        self.protect_probes = protect_probes

    @classmethod
    def configured(cls, token_file: str | None, store: AuthMetadataStore | None,
                   protect_probes: bool = False) -> HttpAuth | None:
        """The check a server's settings ask for (``httpAuthTokenFile``, and ``store`` = its users
        when ACL is on, else None); None when neither is set (the HTTP API is open). Raises
        :class:`HttpAuthError` for an unreadable or empty token file."""
        if store is None and not token_file:
            return None
        return cls(read_token(token_file) if token_file else None, store, protect_probes=protect_probes)

    def protects(self, path: str) -> bool:
        """Whether ``path`` needs a credential."""
        return path.startswith("/api/") or (self.protect_probes and path in PROBES)

    def allowed(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header value carries an accepted credential."""
        if not header:
            return False
        scheme, _, value = header.strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and self.token is not None:
            return hmac.compare_digest(value.encode(), self.token.encode())
        if scheme.lower() == "basic" and self.store is not None:
            try:
                ak, sep, sk = base64.b64decode(value, validate=True).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            user = self.store.get_user(ak)
            if not sep or user is None or user.user_type is not UserType.SUPER:
                return False
            if user.user_status is UserStatus.DISABLE:
                return False
            return hmac.compare_digest(sk.encode(), user.password.encode())
        return False

    def middleware(self) -> Middleware:
        """The aiohttp middleware enforcing this."""
        @web.middleware
        async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
            if self.protects(request.path) and not self.allowed(request.headers.get("Authorization")):
                return web.json_response(
                    {"error": "a credential is required: Authorization: Bearer <token> or Basic <AccessKey:SecretKey>"},
                    status=401, headers={"WWW-Authenticate": 'Bearer realm="rocket", Basic realm="rocket"'})
            return await handler(request)
        return check
