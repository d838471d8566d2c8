"""Copying users and ACLs from a broker (slaves, NameServers, controllers).

Uses AUTH_LIST_USER (3005) and AUTH_LIST_ACL (3010): their answers carry every ``UserInfo``
(with its password, as RocketMQ's ``UserConverter`` does) and every ``AclInfo``, which is all a
copy needs. The requests are signed by the copier's client (a Super user's credentials).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from rocket.auth.model import User
from rocket.auth.store import AuthMetadataStore
from rocket.protocol import loads_lenient
from rocket.remoting import RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode

log = logging.getLogger("rocket.auth")


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


async def copy_from_brokers(client: RemotingClient, addrs: Iterable[str], store: AuthMetadataStore,
                            keep: Iterable[User] = (), timeout: float = 3.0) -> str | None:
    """Replace ``store``'s users and ACLs with those of the first broker of ``addrs`` that
    answers (:func:`fetch_auth_metadata`); the users of ``keep`` (the server's own initial and
    inner Super users) are added when the copy lacks them, so the server never locks itself out.
    Returns the address copied from, None when no broker answered (each failure is logged).
    Used by NameServers (their registered masters) and controllers (their registered brokers)."""
    for addr in addrs:
        try:
            metadata = await fetch_auth_metadata(client, addr, timeout)
            names = {u.get("username") for u in metadata["users"] if isinstance(u, dict)}
            for user in keep:
                if user.username not in names:
                    metadata["users"].append(user.to_json())
                    names.add(user.username)
            store.replace_all(metadata)
        except (RemotingError, OSError, ValueError) as exc:  # AuthError is a ValueError
            log.warning("copying users and ACLs from broker %s failed: %s", addr, exc)
            continue
        return addr
    return None


class PeriodicCopy:
    """Copies users and ACLs from brokers every ``interval`` seconds (NameServers and controllers
    with ACL on, as RocketMQ's auth metadata lives on the brokers).

    ``addresses()`` gives the brokers to try, in order (none: that round is skipped); ``keep`` are
    the server's own Super users (:func:`copy_from_brokers`); ``client`` signs the requests and is
    closed by :meth:`stop`. A failed round is logged and the next one runs ``interval`` s later.
    """

    def __init__(self, client: RemotingClient, addresses: Callable[[], list[str]], store: AuthMetadataStore,
                 keep: Iterable[User], interval: float, name: str) -> None:
        self.client = client
        self.addresses = addresses
        self.store = store
        self.keep = list(keep)
        self.interval = interval
        self.name = name
        self._task: asyncio.Task[None] | None = None

    async def once(self) -> str | None:
        """One copy now: the address copied from, None when no broker answered or none is known."""
        return await copy_from_brokers(self.client, self.addresses(), self.store, self.keep)

    def start(self) -> None:
        """Start the periodic copy (in the running event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=self.name)

    async def stop(self) -> None:
        """Stop copying and close the client."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.client.close()

    async def _loop(self) -> None:
        while True:
            try:
                if self.addresses():
                    await self.once()
            except Exception:
                log.exception("copying users and ACLs failed")
            await asyncio.sleep(self.interval)
