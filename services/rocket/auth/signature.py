"""Request signatures as RocketMQ clients compute them.

Format (Apache RocketMQ ``AclClientRPCHook.doBeforeRequest``, ``AclUtils.combineRequestContent``,
``AclSigner.calSignature``; server side ``DefaultAuthenticationContextBuilder``): the client adds
``AccessKey`` (and ``SecurityToken`` when it has one) to the ext fields, then signs

    content = concat(value of every ext field sorted by key, except "Signature") + body

with HmacSHA1 keyed by the SecretKey (UTF-8), base64 encoded, and sends it as the ext field
``Signature``. Keys sort as Java's ``TreeMap<String, String>`` does (UTF-16 code units; the same as
Python's order for the ASCII keys RocketMQ uses). Requests of clients older than 4.9.3 leave the
``_UNIQUE_KEY_QUERY`` field out of the content.

Every request of a signed client is signed on one side and checked on the other, so the hot path
(:func:`_sign_fields`) does the per-request work only: the sorted field order is worked out once
per set of field names (one client sends the same names every time) and the HMAC key schedule
once per SecretKey; the bytes signed are exactly those of :func:`combine_request_content`.
"""

from __future__ import annotations

import binascii
import dataclasses
import hashlib
import hmac
import operator
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rocket.remoting.command import RemotingCommand

#: Ext-field names (``SessionCredentials``).
ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: ``MixAll.UNIQUE_MSG_QUERY_FLAG``, skipped for clients up to ``MQVersion.V4_9_3`` (ordinal 400).
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
_V4_9_3 = 400

#: Environment variables with a client's credentials (``rocket`` CLI, clients, brokers' inner client).
ENV_ACCESS_KEY = "ROCKET_ACCESS_KEY"
ENV_SECRET_KEY = "ROCKET_SECRET_KEY"
ENV_CREDENTIALS_FILE = "ROCKET_CREDENTIALS_FILE"


def _sort_key(key: str) -> bytes:
    # Java String.compareTo compares UTF-16 code units.
    return key.encode("utf-16-be")


def _signed_keys(keys: Iterable[str], skip_unique: bool) -> list[str]:
    """The keys a signature covers, in ``TreeMap`` order (module doc)."""
    signed = sorted(k for k in keys if k != SIGNATURE and not (skip_unique and k == UNIQUE_MSG_QUERY_FLAG))
    if not "".join(signed).isascii():  # code points and UTF-16 units only differ beyond ASCII
        signed.sort(key=_sort_key)
    return signed


def combine_request_content(fields: Mapping[str, str], body: bytes | None, *, version: int | None = None) -> bytes:
    """The bytes a signature covers: ext-field values sorted by key (without ``Signature``), then
    the body (``AclUtils.combineRequestContent``). ``version`` is the request's ``version``; at or
    below V4_9_3 the ``_UNIQUE_KEY_QUERY`` field is left out, as the server side does.

    The reference form; :func:`_content_head` is the fast one used for signing and checking."""
    skip_unique = version is not None and version <= _V4_9_3
    head = "".join([
        value for key in _signed_keys(fields, skip_unique) if (value := fields[key]) is not None
    ]).encode("utf-8")
    return head + body if body else head


#: Requests of one client carry the same field names in the same order (every send of a
#: producer, every pull of a consumer), so the sorted order is worked out once per key tuple:
#: ``(field names in the request's order, skip _UNIQUE_KEY_QUERY) -> values getter``. Bounded.
_GETTERS: dict[tuple[tuple[str, ...], bool], Callable[[Mapping[str, str]], tuple[str, ...]]] = {}
_MAX_GETTERS = 1024


def _values_getter(keys: tuple[str, ...], skip_unique: bool) -> Callable[[Mapping[str, str]], tuple[str, ...]]:
    cache_key = (keys, skip_unique)
    getter = _GETTERS.get(cache_key)
    if getter is None:
        signed = _signed_keys(keys, skip_unique)
        if len(signed) >= 2:
            getter = operator.itemgetter(*signed)
        elif signed:
            only = signed[0]

            def getter(fields: Mapping[str, str]) -> tuple[str, ...]:
                return (fields[only],)
        else:
            def getter(fields: Mapping[str, str]) -> tuple[str, ...]:
                return ()
        if len(_GETTERS) >= _MAX_GETTERS:
            _GETTERS.clear()
        _GETTERS[cache_key] = getter
    return getter


def _content_head(fields: Mapping[str, str], skip_unique: bool) -> bytes:
    """:func:`combine_request_content` without the body, in a few C calls: the sorted order
    comes from :data:`_GETTERS`; a ``None`` value (only possible in a hand-built command) takes
    the reference path."""
    try:
        return "".join(_values_getter(tuple(fields), skip_unique)(fields)).encode("utf-8")
    except TypeError:
        return "".join([
            value for key in _signed_keys(fields, skip_unique) if (value := fields[key]) is not None
        ]).encode("utf-8")


#: HmacSHA1 (RFC 2104, as ``javax.crypto.Mac`` "HmacSHA1") keyed by a SecretKey, with the key
#: schedule done once: ``secret -> (inner, outer)`` SHA-1 states after the padded key, copied per
#: use (all in C: ``hmac.HMAC.copy``/``update`` add Python calls). Bounded; a changed password is
#: a new key. Equal to ``hmac.digest(key, msg, "sha1")`` (tests/unit/test_auth.py checks).
_KEYS: dict[str, tuple[Any, Any]] = {}
_MAX_KEYS = 1024
_SHA1_BLOCK = 64
_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


def _keyed(secret_key: str) -> tuple[Any, Any]:
    pads = _KEYS.get(secret_key)
    if pads is None:
        key = secret_key.encode("utf-8")
        if len(key) > _SHA1_BLOCK:
            key = hashlib.sha1(key).digest()
        key = key.ljust(_SHA1_BLOCK, b"\0")
        pads = (hashlib.sha1(key.translate(_IPAD)), hashlib.sha1(key.translate(_OPAD)))
        if len(_KEYS) >= _MAX_KEYS:
            _KEYS.clear()
        _KEYS[secret_key] = pads
    return pads


def _signature(secret_key: str, head: bytes, body: bytes | None) -> bytes:
    """Base64 (ASCII bytes) of HmacSHA1(``head + body``) keyed by ``secret_key``."""
    inner_pad, outer_pad = _keyed(secret_key)
    inner = inner_pad.copy()
    inner.update(head)
    if body:
        inner.update(body)
    outer = outer_pad.copy()
    outer.update(inner.digest())
    return binascii.b2a_base64(outer.digest(), newline=False)


def _sign_fields(fields: Mapping[str, str], body: bytes | None, skip_unique: bool, secret_key: str) -> bytes:
    """Base64 (ASCII bytes) of HmacSHA1 over :func:`combine_request_content` of ``fields`` and
    ``body``: the signing and checking hot path, :func:`_content_head` and :func:`_signature`
    in one call (every request of a signed client passes here on both sides)."""
    getter = _GETTERS.get((tuple(fields), skip_unique))
    try:
        if getter is None:
            getter = _values_getter(tuple(fields), skip_unique)
        head = "".join(getter(fields)).encode("utf-8")
    except TypeError:  # a None value: the reference path
        head = _content_head(fields, skip_unique)
    pads = _KEYS.get(secret_key) or _keyed(secret_key)
    inner = pads[0].copy()
    inner.update(head)
    if body:
        inner.update(body)
    outer = pads[1].copy()
    outer.update(inner.digest())
    return binascii.b2a_base64(outer.digest(), newline=False)


def cal_signature(content: bytes, secret_key: str) -> str:
    """Base64 of HmacSHA1(``content``) keyed by ``secret_key`` in UTF-8 (``AclSigner.calSignature``)."""
    return _signature(secret_key, content, None).decode("ascii")


@dataclasses.dataclass(frozen=True, slots=True)
class SessionCredentials:
    """A client's AccessKey/SecretKey and optional SecurityToken (``SessionCredentials``).

    ``__repr__`` hides the secret."""

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __repr__(self) -> str:
        return f"SessionCredentials(access_key={self.access_key!r}, secret_key='***')"

    def sign(self, cmd: RemotingCommand) -> None:
        """Add ``AccessKey`` (and ``SecurityToken``) and ``Signature`` to ``cmd``'s ext fields, as
        ``AclClientRPCHook.doBeforeRequest`` does. A stale ``Signature`` is replaced."""
        fields = cmd.ext_fields
        fields.pop(SIGNATURE, None)
        fields[ACCESS_KEY] = self.access_key
        if self.security_token is not None:
            fields[SECURITY_TOKEN] = self.security_token
        fields[SIGNATURE] = _sign_fields(fields, cmd.body, False, self.secret_key).decode("ascii")


def verify_signature(cmd: RemotingCommand, secret_key: str) -> bool:
    """True when ``cmd``'s ``Signature`` is the one ``secret_key`` gives its content (constant-time
    comparison, as ``DefaultAuthenticationHandler``)."""
    given = cmd.ext_fields.get(SIGNATURE)
    if not given:
        return False
    version = cmd.version
    expected = _sign_fields(cmd.ext_fields, cmd.body, version is not None and version <= _V4_9_3, secret_key)
    return hmac.compare_digest(expected, given.encode("utf-8"))


class CredentialsError(ValueError):
    """Credentials given half (an AccessKey without a SecretKey) or a credentials file that cannot be read."""


def parse_credentials_file(path: str | Path) -> SessionCredentials:
    """Read a credentials file: Java properties style ``AccessKey=...`` / ``SecretKey=...`` lines
    (RocketMQ's ``rocketmq.client.keyFile``), also accepting ``accessKey``/``secretKey`` and a JSON
    object with those keys. Raises :class:`CredentialsError`."""
    import json

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CredentialsError(f"cannot read credentials file {path}: {exc}") from None
    values: dict[str, str] = {}
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(stripped)
        except ValueError as exc:
            raise CredentialsError(f"credentials file {path} is not valid JSON: {exc}") from None
        if isinstance(obj, dict):
            values = {str(k).lower(): str(v) for k, v in obj.items() if v is not None}
    else:
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, _, value = line.partition("=")
            values[key.strip().lower()] = value.strip()
    ak = values.get("accesskey") or values.get("username")
    sk = values.get("secretkey") or values.get("password")
    if not ak or not sk:
        raise CredentialsError(f"credentials file {path} needs AccessKey and SecretKey")
    return SessionCredentials(ak, sk, values.get("securitytoken") or None)


def resolve_credentials(access_key: str | None = None, secret_key: str | None = None,
                        credentials_file: str | None = None,
                        environ: Mapping[str, str] | None = None) -> SessionCredentials | None:
    """Credentials from explicit values, else a file, else ``ROCKET_ACCESS_KEY`` /
    ``ROCKET_SECRET_KEY`` (or ``ROCKET_CREDENTIALS_FILE``); None when none are given.
    Raises :class:`CredentialsError` when only one half is given."""
    env = os.environ if environ is None else environ
    if access_key or secret_key:
        if not (access_key and secret_key):
            raise CredentialsError("both an AccessKey and a SecretKey are needed")
        return SessionCredentials(access_key, secret_key)
    if credentials_file:
        return parse_credentials_file(credentials_file)
    ak, sk = env.get(ENV_ACCESS_KEY), env.get(ENV_SECRET_KEY)
    if ak or sk:
        if not (ak and sk):
            raise CredentialsError(f"both {ENV_ACCESS_KEY} and {ENV_SECRET_KEY} are needed")
        return SessionCredentials(ak, sk)
    if env.get(ENV_CREDENTIALS_FILE):
        return parse_credentials_file(env[ENV_CREDENTIALS_FILE])
    return None
