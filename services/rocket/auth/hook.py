"""Authentication and authorization of remoting requests: the server-side RPC hook.

:class:`ServerAuth` is installed as the ``rpc_hook`` of a :class:`~rocket.remoting.RemotingServer`
(the one place every request passes before its processor). For each request it

1. authenticates (``authenticationEnabled``): the ``AccessKey`` names an enabled user whose
   SecretKey gives the request's ``Signature`` (``DefaultAuthenticationHandler``);
2. authorizes (``authorizationEnabled``): Super users pass; for others every check of
   :func:`rocket.auth.classify.classify` must be allowed by the user's ACL
   (``AclAuthorizationHandler``); an unclassified code is denied.

A refusal is answered with NO_PERMISSION (16) and a remark saying why; the connection stays
open and the processor never runs, so nothing is stored.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from rocket.auth.classify import CLASSIFIERS, Classifier, ClassifyError
from rocket.auth.model import Action, AuthError, Decision, Resource, User, UserStatus, UserType
from rocket.auth.signature import ACCESS_KEY, SIGNATURE, SessionCredentials, resolve_credentials, verify_signature
from rocket.auth.store import AuthMetadataStore
from rocket.remoting import RemotingCommand, RemotingConnection, ResponseCode

log = logging.getLogger("rocket.auth")

#: Connection attribute of stateful authentication: (user, store version, valid until).
_SESSION_KEY = "auth.session"
#: Authorization decisions remembered per store version (RocketMQ caches them too, ``aclCacheMaxNum``).
_MAX_CACHED_DECISIONS = 10_000
#: Environment variables naming the initial Super user (``initAuthenticationUser``).
ENV_INIT_USER = "ROCKET_INIT_AUTH_USER"
_SUPER = UserType.SUPER
_DISABLE = UserStatus.DISABLE


@dataclasses.dataclass(slots=True)
class AuthConfig:
    """Authentication/authorization settings (Apache RocketMQ 5.x ``AuthConfig`` names).

    ``init_authentication_user``: JSON ``{"username": ..., "password": ...}`` or the path of a file
    holding it (or credentials in ``AccessKey=``/``SecretKey=`` form); created as a Super user at
    start unless a user of that name exists. ``inner_client_authentication_credentials``: JSON
    ``{"accessKey", "secretKey"}`` or a file, what this server signs its own requests with
    (registration, slave copies; also created as a Super user); defaults to the initial user.
    ``authentication_whitelist``: comma-separated request codes not checked.
    """

    cluster_name: str = "DefaultCluster"
    authentication_enabled: bool = False
    authorization_enabled: bool = False
    init_authentication_user: str = ""
    inner_client_authentication_credentials: str = ""
    authentication_whitelist: str = ""
    #: Where users and ACLs are kept; None = memory only.
    metadata_path: str | None = None
    #: ``stateless`` (every request's signature is verified, RocketMQ's default
    #: ``StatelessAuthenticationStrategy``) or ``stateful`` (``StatefulAuthenticationStrategy``: once a
    #: connection proved a user's signature, later requests of that user on that connection skip
    #: the HMAC for ``stateful_authentication_cache_expired_second`` s or until users change).
    authentication_strategy: str = "stateless"
    stateful_authentication_cache_expired_second: float = 60.0

    @property
    def stateful(self) -> bool:
        """Whether authentication is stateful (see ``authentication_strategy``). Raises
        :class:`AuthError` for an unknown strategy."""
        name = self.authentication_strategy.strip().lower().removesuffix("authenticationstrategy")
        if name not in ("stateless", "stateful", ""):
            raise AuthError(f"authenticationStrategy {self.authentication_strategy!r}: stateless or stateful")
        return name == "stateful"

    @property
    def enabled(self) -> bool:
        """Whether requests are checked at all."""
        return self.authentication_enabled or self.authorization_enabled


def _load_json_or_file(text: str, what: str) -> dict[str, Any]:
    text = text.strip()
    if not text:
        return {}
    if not text.startswith("{"):
        path = Path(text).expanduser()
        try:
            raw = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise AuthError(f"{what}: cannot read {path}: {exc}") from None
        if not raw.startswith("{"):
            from rocket.auth.signature import parse_credentials_file

            creds = parse_credentials_file(path)
            return {"username": creds.access_key, "password": creds.secret_key}
        text = raw
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise AuthError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise AuthError(f"{what} must be a JSON object")
    return obj


def initial_user(config: AuthConfig) -> User | None:
    """The Super user of ``initAuthenticationUser`` (or ``ROCKET_INIT_AUTH_USER``), None if unset.
    Raises :class:`AuthError`."""
    text = config.init_authentication_user or os.environ.get(ENV_INIT_USER, "")
    obj = _load_json_or_file(text, "initAuthenticationUser")
    if not obj:
        return None
    name = obj.get("username") or obj.get("accessKey")
    password = obj.get("password") or obj.get("secretKey")
    if not name or not password:
        raise AuthError("initAuthenticationUser needs a username and a password")
    return User(str(name), str(password), UserType.SUPER, UserStatus.ENABLE)


def inner_credentials(config: AuthConfig) -> SessionCredentials | None:
    """What the server signs its own requests with (see :class:`AuthConfig`), else the
    ``ROCKET_ACCESS_KEY``/``ROCKET_SECRET_KEY`` environment, else None. Raises :class:`AuthError`."""
    obj = _load_json_or_file(config.inner_client_authentication_credentials, "innerClientAuthenticationCredentials")
    if obj:
        ak = obj.get("accessKey") or obj.get("username")
        sk = obj.get("secretKey") or obj.get("password")
        if not ak or not sk:
            raise AuthError("innerClientAuthenticationCredentials needs accessKey and secretKey")
        return SessionCredentials(str(ak), str(sk))
    user = initial_user(config)
    if user is not None:
        return SessionCredentials(user.username, user.password)
    return resolve_credentials()


class ServerAuth:
    """The server-side hook (module doc). ``store`` holds the users and ACLs.

    Call it as ``hook(request, connection)``: None lets the request through, a response
    command refuses it. Counters: :attr:`denied` (refusals), :attr:`checked`. ``classifiers``:
    the request codes this server classifies (default every code of
    :data:`rocket.auth.classify.CLASSIFIERS`; a controller passes
    :data:`~rocket.auth.classify.CONTROLLER_CLASSIFIERS`, so any other code is denied to
    non-Super users)."""

    def __init__(self, config: AuthConfig, store: AuthMetadataStore | None = None, *,
                 classifiers: dict[int, Classifier] | None = None) -> None:
        self.config = config
        self.classifiers = classifiers
        self.store = store if store is not None else AuthMetadataStore(config.metadata_path)
        self.whitelist = {int(c) for c in config.authentication_whitelist.replace(" ", "").split(",") if c}
        self.stateful = config.stateful
        self.session_ttl = config.stateful_authentication_cache_expired_second
        self.checked = 0
        self.denied = 0
        # (user, resource, actions, source IP) -> refusal detail or "" (allowed), valid for one
        # version of the store; bounded (cleared when full).
        self._decisions: dict[tuple[str, Any, tuple[Any, ...], str], str] = {}
        self._decisions_version = -1
        user = initial_user(config)
        if user is not None and self.store.ensure_user(user):
            log.info("initial Super user %s created", user.username)
        if config.inner_client_authentication_credentials:  # RocketMQ creates this one as Super too
            inner = inner_credentials(config)
            if inner is not None and self.store.ensure_user(
                    User(inner.access_key, inner.secret_key, UserType.SUPER, UserStatus.ENABLE)):
                log.info("inner client Super user %s created", inner.access_key)

    def __call__(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand | None:
        self.checked += 1
        if request.code in self.whitelist:
            return None
        try:
            self.check(request, conn.peer, conn.attributes if self.stateful else None)
        except AuthError as exc:
            self.denied += 1
            # a few lines per connection, then every 1000th: a misconfigured client cannot flood the log
            attrs = conn.attributes
            count = attrs["auth.denied"] = attrs.get("auth.denied", 0) + 1
            if count <= 3 or count % 1000 == 0:
                log.info("denied request %d from %s (%d on this connection): %s", request.code, conn.peer, count, exc)
            return request.response(ResponseCode.NO_PERMISSION, str(exc))
        return None

    def check(self, request: RemotingCommand, peer: str, session: dict[str, Any] | None = None) -> None:
        """Raise :class:`AuthError` (the remark) unless ``request`` from ``peer`` (``host:port``)
        may be served. ``session``: the connection's attributes, with stateful authentication."""
        fields = request.ext_fields
        username = fields.get(ACCESS_KEY)
        if not username:
            raise AuthError(
                f"request code {request.code} has no AccessKey: this server requires signed requests "
                "(AccessKey/Signature, see AclClientRPCHook)")
        store = self.store
        user = store.users.get(username)
        config = self.config
        if config.authentication_enabled:
            self._authenticate(request, username, user, session)
        if not config.authorization_enabled:
            return
        if user is None:
            raise AuthError(f"User:{username} not found.")
        if user.user_type is _SUPER:
            return
        classifier = (CLASSIFIERS if self.classifiers is None else self.classifiers).get(request.code)
        if classifier is None:
            raise AuthError(f"User:{username}: request code {request.code} is not classified for authorization "
                            "on this server; only Super users may send it")
        try:
            checks = classifier(request, config.cluster_name)
        except ClassifyError as exc:
            raise AuthError(f"User:{username}: {exc}") from None
        if not checks:
            return
        # The decision per (user, resource, actions, source IP) is remembered for one version
        # of the store (any change of users or ACLs bumps it); bounded (cleared when full).
        decisions = self._decisions
        if self._decisions_version != store.version or len(decisions) > _MAX_CACHED_DECISIONS:
            decisions.clear()
            self._decisions_version = store.version
        source_ip = _host(peer)
        for resource, actions in checks:
            key = (username, resource, actions, source_ip)
            detail = decisions.get(key)
            if detail is None:
                detail = decisions[key] = self._decide(username, resource, actions, source_ip)
            if detail:
                wanted = ",".join(a.value for a in actions)
                raise AuthError(f"User:{username} has no permission to access {resource.key} ({wanted}) "
                                f"from {source_ip}, {detail}")

    def _authenticate(self, request: RemotingCommand, username: str, user: User | None,
                      session: dict[str, Any] | None) -> None:
        """The signature check (``DefaultAuthenticationHandler``), skipped on a connection that
        already proved this user's signature when authentication is stateful."""
        if user is None:
            raise AuthError(f"User:{username} is not found.")
        if user.user_status is _DISABLE:
            raise AuthError(f"User:{username} is disabled.")
        if SIGNATURE not in request.ext_fields:
            raise AuthError(f"request code {request.code} from User:{username} has no Signature")
        if session is not None:
            proven = session.get(_SESSION_KEY)
            now = time.monotonic()
            if (proven is not None and proven[0] == username and proven[1] == self.store.version
                    and proven[2] >= now):
                return
        if not verify_signature(request, user.password):
            raise AuthError(f"check signature failed: the Signature of User:{username} does not match "
                            "(wrong SecretKey?)")
        if session is not None:
            session[_SESSION_KEY] = (username, self.store.version, now + self.session_ttl)

    def _decide(self, username: str, resource: Resource, actions: tuple[Action, ...], source_ip: str) -> str:
        """The user's ACL on one check (``AclAuthorizationHandler``): "" when allowed, else why not."""
        acl = self.store.acls.get(f"User:{username}")
        entry = acl.decide(resource, actions, source_ip) if acl is not None else None
        if entry is None:
            return "no matched policies."
        return "the decision is deny." if entry.decision is Decision.DENY else ""


@functools.lru_cache(maxsize=4096)
def _host(peer: str) -> str:
    if peer.startswith("["):
        return peer[1:].partition("]")[0]
    host, sep, _ = peer.rpartition(":")
    return host if sep else peer
