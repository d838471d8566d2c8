"""Authentication of the replication (HA) connection: a slave signs its handshake hello with
the same keys as its remoting requests.

The hello (``rocket.store.ha.protocol``) gains ``AccessKey``, ``Timestamp`` (ms) and
``Signature`` = base64 HmacSHA1, keyed by the SecretKey, over the hello's JSON with sorted keys
and without ``Signature`` (the AclSigner algorithm over this protocol's own content). A master
with ACL on accepts only hellos signed by an enabled Super user within
:data:`MAX_CLOCK_SKEW_MS` of its clock, and refuses plain (4.x-style, unsigned) slaves.
"""

from __future__ import annotations

import hmac
import time
from typing import Any

import orjson

from rocket.auth.model import UserStatus, UserType
from rocket.auth.signature import ACCESS_KEY, SIGNATURE, SessionCredentials, cal_signature
from rocket.auth.store import AuthMetadataStore

TIMESTAMP = "Timestamp"
#: How far a hello's Timestamp may be from the master's clock (replays older than this fail).
MAX_CLOCK_SKEW_MS = 300_000


def _content(hello: dict[str, Any]) -> bytes:
    return orjson.dumps({k: v for k, v in hello.items() if k != SIGNATURE}, option=orjson.OPT_SORT_KEYS)


def sign_hello(hello: dict[str, Any], credentials: SessionCredentials, now_ms: int | None = None) -> dict[str, Any]:
    """A copy of ``hello`` with AccessKey, Timestamp and Signature (module doc)."""
    signed = dict(hello)
    signed[ACCESS_KEY] = credentials.access_key
    signed[TIMESTAMP] = int(time.time() * 1000) if now_ms is None else now_ms
    signed[SIGNATURE] = cal_signature(_content(signed), credentials.secret_key)
    return signed


def verify_hello(hello: dict[str, Any] | None, store: AuthMetadataStore, now_ms: int | None = None) -> str | None:
    """None when ``hello`` (None: a plain slave without handshake) may replicate, else why not."""
    if hello is None:
        return "ACL is on: a slave must open with a signed handshake (plain 4.x replication is refused)"
    ak, sig = hello.get(ACCESS_KEY), hello.get(SIGNATURE)
    if not isinstance(ak, str) or not isinstance(sig, str):
        return "the replication handshake is not signed (no AccessKey/Signature)"
    user = store.get_user(ak)
    if user is None or user.user_status is UserStatus.DISABLE:
        return f"User:{ak} is not found or disabled"
    if user.user_type is not UserType.SUPER:
        return f"User:{ak} is not a Super user; replication needs one"
    expected = cal_signature(_content(hello), user.password)
    if not hmac.compare_digest(expected.encode(), sig.encode()):
        return "check signature failed for the replication handshake"
    now = int(time.time() * 1000) if now_ms is None else now_ms
    stamp = hello.get(TIMESTAMP)
    if not isinstance(stamp, int) or abs(now - stamp) > MAX_CLOCK_SKEW_MS:
        return "the replication handshake's Timestamp is missing or too far from the master's clock"
    return None
