"""Copying users and ACLs from a master broker (slaves, NameServers).

Uses AUTH_LIST_USER (3005) and AUTH_LIST_ACL (3010): their answers carry every ``UserInfo``
(with its password, as RocketMQ's ``UserConverter`` does) and every ``AclInfo``, which is all a
copy needs. The requests are signed by the copier's client (a Super user's credentials).
"""

from __future__ import annotations

from typing import Any

from rocket.protocol import loads_lenient
from rocket.remoting import RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode


async def fetch_auth_metadata(client: RemotingClient, addr: str, timeout: float = 3.0) -> dict[str, Any]:
    """``{"users": [UserInfo...], "acls": [AclInfo...]}`` of the broker at ``addr``.
    Raises ``RemotingError`` (also for a refusal, e.g. NO_PERMISSION) or ``ValueError``."""
    out: dict[str, Any] = {}
    for key, code in (("users", RequestCode.AUTH_LIST_USER), ("acls", RequestCode.AUTH_LIST_ACL)):
        resp = await client.invoke(addr, RemotingCommand(code=code, language="JAVA"), timeout=timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise RemotingError(f"{RequestCode(code).name} answered code {resp.code}: {resp.remark or ''}")
        items = loads_lenient(resp.body) if resp.body else []
        if not isinstance(items, list):
            raise ValueError(f"{RequestCode(code).name}: the answer is not a JSON list")
        out[key] = items
    return out
