"""Request signatures as RocketMQ clients compute them.

Format (Apache RocketMQ ``AclClientRPCHook.doBeforeRequest``, ``AclUtils.combineRequestContent``,
``AclSigner.calSignature``; server side ``DefaultAuthenticationContextBuilder``): the client adds
``AccessKey`` (and ``SecurityToken`` when it has one) to the ext fields, then signs

    content = concat(value of every ext field sorted by key, except "Signature") + body

with HmacSHA1 keyed by the SecretKey (UTF-8), base64 encoded, and sends it as the ext field
``Signature``. Keys sort as Java's ``TreeMap<String, String>`` does (UTF-16 code units; the same as
Python's order for the ASCII keys RocketMQ uses). Requests of clients older than 4.9.3 leave the
``_UNIQUE_KEY_QUERY`` field out of the content.
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
import os
from collections.abc import Mapping
from pathlib import Path

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


def combine_request_content(fields: Mapping[str, str], body: bytes | None, *, version: int | None = None) -> bytes:
    """The bytes a signature covers: ext-field values sorted by key (without ``Signature``), then
    the body (``AclUtils.combineRequestContent``). ``version`` is the request's ``version``; at or
    below V4_9_3 the ``_UNIQUE_KEY_QUERY`` field is left out, as the server side does."""
    skip_unique = version is not None and version <= _V4_9_3
    keys = sorted(fields)
    if not "".join(keys).isascii():  # code points and UTF-16 units only differ beyond ASCII
        keys.sort(key=_sort_key)
    head = "".join([
        value for key in keys
        if (value := fields[key]) is not None and key != SIGNATURE
        and not (skip_unique and key == UNIQUE_MSG_QUERY_FLAG)
    ]).encode("utf-8")
    return head + body if body else head


def cal_signature(content: bytes, secret_key: str) -> str:
    """Base64 of HmacSHA1(``content``) keyed by ``secret_key`` in UTF-8 (``AclSigner.calSignature``)."""
    return base64.b64encode(hmac.digest(secret_key.encode("utf-8"), content, "sha1")).decode("ascii")


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
        fields[SIGNATURE] = cal_signature(combine_request_content(fields, cmd.body), self.secret_key)


def verify_signature(cmd: RemotingCommand, secret_key: str) -> bool:
    """True when ``cmd``'s ``Signature`` is the one ``secret_key`` gives its content (constant-time
    comparison, as ``DefaultAuthenticationHandler``)."""
    given = cmd.ext_fields.get(SIGNATURE)
    if not given:
        return False
    expected = cal_signature(combine_request_content(cmd.ext_fields, cmd.body, version=cmd.version), secret_key)
    return hmac.compare_digest(expected.encode("utf-8"), given.encode("utf-8"))


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
