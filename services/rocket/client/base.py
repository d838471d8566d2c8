"""What producers, consumers and admin tools share: NameServer access, routes, heartbeats.

:class:`MQClient` owns one :class:`~rocket.remoting.RemotingClient` (one TCP
connection per peer), knows the NameServers (``"host:port;host:port"``), keeps
the latest route of every topic it was asked about, refreshes those routes
every ``poll_namesrv_interval`` seconds (30 by default, as ``MQClientInstance``) and sends
HEART_BEAT to brokers every ``heartbeat_interval`` seconds (30).

NameServers are tried in turn: the client sticks to one until it fails to
answer, then moves to the next (NameServers are independent and eventually
consistent, so any of them will do).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, Self

import orjson

from rocket.auth.signature import SessionCredentials, resolve_credentials
from rocket.client.errors import NameServerUnavailableError, TopicRouteError
from rocket.protocol import MASTER_ID, BrokerData, TopicRouteData
from rocket.remoting import (
    RemotingClient,
    RemotingCommand,
    RemotingCommandError,
    RemotingConnectError,
    RemotingTimeoutError,
    RequestCode,
    ResponseCode,
)
from rocket.remoting.tls import ClientTls, resolve_client_tls

log = logging.getLogger("rocket.client")

#: Default timeout of one request to a NameServer or broker, seconds.
DEFAULT_TIMEOUT = 3.0
_instance_counter = itertools.count(1)


def parse_namesrv_addr(namesrv_addr: str | Iterable[str]) -> list[str]:
    """``"h1:p1;h2:p2"`` (also ``,`` or whitespace separated) or a list → addresses.

    Raises ``ValueError`` when no address is given.
    """
    if isinstance(namesrv_addr, str):
        parts = namesrv_addr.replace(",", ";").replace(" ", ";").split(";")
    else:
        parts = list(namesrv_addr)
    addrs = [p.strip() for p in parts if p and p.strip()]
    if not addrs:
        raise ValueError("no NameServer address given (expected 'host:port;host:port')")
    return addrs


def local_ip() -> str:
    """This host's address as peers probably see it; 127.0.0.1 as a fallback."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("10.255.255.255", 1))
            ip = str(sock.getsockname()[0])
            if ip and not ip.startswith("0."):
                return ip
    except OSError:
        pass
    return "127.0.0.1"


def make_client_id(instance_name: str | None = None) -> str:
    """A client id as Java builds it: ``ip@instanceName``.

    Without an instance name (Java's ``DEFAULT``) it is ``pid#nanos#n``, so that
    two clients in one process are two distinct consumers to the broker.
    """
    name = instance_name or f"{os.getpid()}#{time.time_ns()}#{next(_instance_counter)}"
    return f"{local_ip()}@{name}"


def check_response(response: RemotingCommand, what: str, accept: Iterable[int] = (ResponseCode.SUCCESS,)) -> None:
    """Raise :class:`RemotingCommandError` unless ``response.code`` is accepted."""
    if response.code not in tuple(accept):
        raise RemotingCommandError(response.code, response.remark, what)


def ext(**fields: Any) -> dict[str, str]:
    """Ext fields as strings (``True`` → ``"true"``), dropping ``None`` values."""
    out: dict[str, str] = {}
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = str(value)
    return out


def heartbeat_data(client_id: str, producer_groups: Iterable[str] = (),
                   consumer_data: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """A HEART_BEAT body as RocketMQ's ``HeartbeatData`` serializes it: ``clientID``, ``producerDataSet``
    (one ``{"groupName": ...}`` per producer group) and ``consumerDataSet`` (``ConsumerData`` objects,
    Java field names)."""
    return {
        "clientID": client_id,
        "producerDataSet": [{"groupName": group} for group in producer_groups],
        "consumerDataSet": list(consumer_data),
    }


class ClientLifecycle:
    """``async with`` for a producer or consumer: entering awaits :meth:`start` and gives the
    client, leaving awaits :meth:`shutdown` (also when the block raised)."""

    async def start(self) -> object:
        """Start the client (route refresh, heartbeats); a subclass implements it."""
        raise NotImplementedError

    async def shutdown(self) -> None:
        """Stop the client and close its connections; a subclass implements it."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()


class MQClient:
    """A connection hub for one producer, consumer or admin tool.

    ``namesrv_addr``: ``"host:port;host:port"``. ``timeout``: default request
    timeout in seconds. Start background route refresh and heartbeats with
    :meth:`start`; :meth:`close` stops them and closes connections.

    ``credentials`` (:class:`rocket.auth.SessionCredentials`): every request is signed with
    them, as ``AclClientRPCHook`` does; default: ``ROCKET_ACCESS_KEY``/``ROCKET_SECRET_KEY``
    (or ``ROCKET_CREDENTIALS_FILE``) when set, else unsigned. Change with :meth:`set_credentials`.

    ``tls``: connect to NameServers and brokers with TLS (RocketMQ's ``useTLS``): a
    :class:`~rocket.remoting.tls.ClientTls`, True (verify servers against the system's CAs) or False;
    None (default): ``ROCKET_TLS`` / ``ROCKET_TLS_CA`` (:func:`~rocket.remoting.tls.client_tls_from_env`).
    Raises :class:`~rocket.remoting.tls.TlsConfigError` when the CA or client certificate does not load.
    """

    def __init__(
        self,
        namesrv_addr: str | Iterable[str],
        *,
        instance_name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        poll_namesrv_interval: float = 30.0,
        heartbeat_interval: float = 30.0,
        credentials: SessionCredentials | None = None,
        tls: ClientTls | bool | None = None,
    ) -> None:
        self.namesrv_addrs = parse_namesrv_addr(namesrv_addr)
        self._ns_index = random.randrange(len(self.namesrv_addrs))
        self.client_id = make_client_id(instance_name)
        self.timeout = timeout
        self.poll_namesrv_interval = poll_namesrv_interval
        self.heartbeat_interval = heartbeat_interval
        self.remoting = RemotingClient(tls=resolve_client_tls(tls))
        self.credentials: SessionCredentials | None = None
        self.set_credentials(credentials if credentials is not None else resolve_credentials())
        #: Latest route of each topic this client uses (refreshed in the background).
        self.routes: dict[str, TopicRouteData] = {}
        #: Broker name → latest BrokerData seen in any route.
        self.brokers: dict[str, BrokerData] = {}
        #: Called with (topic, route) whenever a fetched route differs from the cached one.
        self.route_listeners: list[Callable[[str, TopicRouteData], None]] = []
        #: Returns the heartbeat body, or None to skip heartbeats.
        self.heartbeat_body: Callable[[], dict[str, Any] | None] | None = None
        #: Whether heartbeats go to slaves too (consumers) or masters only (producers).
        self.heartbeat_slaves = False
        self._tasks: list[asyncio.Task[None]] = []
        self._heartbeat_sent: set[str] = set()
        self._heartbeat_pending = False
        self._greeting: set[asyncio.Task[None]] = set()
        self._closed = False

    def set_credentials(self, credentials: SessionCredentials | None) -> None:
        """Sign every later request with ``credentials`` (None: send unsigned)."""
        self.credentials = credentials
        self.remoting.rpc_hook = credentials.sign if credentials is not None else None

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Start the route-refresh and heartbeat loops (call inside a running loop)."""
        if self._tasks:
            return
        self._tasks.append(asyncio.create_task(self._every(self.poll_namesrv_interval, self.refresh_routes)))
        self._tasks.append(asyncio.create_task(self._every(self.heartbeat_interval, self.send_heartbeat)))

    async def close(self) -> None:
        """Stop the loops and close every connection."""
        self._closed = True
        for task in self._greeting:
            task.cancel()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        await self.remoting.close()

    def spawn_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``coro`` in a task that :meth:`close` cancels (the caller may cancel it sooner)."""
        task = asyncio.create_task(coro)
        self._tasks.append(task)
        return task

    def spawn(self, interval: float, action: Callable[[], Awaitable[Any]]) -> asyncio.Task[None]:
        """Run ``action`` every ``interval`` seconds until :meth:`close` (errors are logged);
        returns the task (the caller may cancel it sooner)."""
        return self.spawn_task(self._every(interval, action))

    async def _every(self, interval: float, action: Callable[[], Awaitable[Any]]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await action()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s: periodic %s failed: %s", self.client_id, getattr(action, "__name__", action), exc)

    # -- NameServers -------------------------------------------------------------------

    async def namesrv_invoke(
        self, code: int, fields: Mapping[str, str] | None = None, body: bytes = b"", timeout: float | None = None
    ) -> RemotingCommand:
        """Send one request to a NameServer, moving to the next one when it does not answer.

        Returns the response whatever its code. Raises
        :class:`NameServerUnavailableError` when none answered.
        """
        errors: list[str] = []
        n = len(self.namesrv_addrs)
        for i in range(n):
            index = (self._ns_index + i) % n
            addr = self.namesrv_addrs[index]
            request = RemotingCommand(code=int(code), ext_fields=dict(fields or {}), body=body)
            try:
                response = await self.remoting.invoke(addr, request, timeout or self.timeout)
            except (RemotingConnectError, RemotingTimeoutError) as exc:
                errors.append(f"{addr}: {exc}")
                continue
            self._ns_index = index
            return response
        raise NameServerUnavailableError("no NameServer answered: " + "; ".join(errors))

    async def namesrv_invoke_all(
        self, code: int, fields: Mapping[str, str] | None = None, body: bytes = b"", timeout: float | None = None
    ) -> dict[str, RemotingCommand | BaseException]:
        """Send one request to every NameServer in parallel; address → response or error."""

        async def one(addr: str) -> RemotingCommand:
            request = RemotingCommand(code=int(code), ext_fields=dict(fields or {}), body=body)
            return await self.remoting.invoke(addr, request, timeout or self.timeout)

        results = await asyncio.gather(*(one(a) for a in self.namesrv_addrs), return_exceptions=True)
        return dict(zip(self.namesrv_addrs, results, strict=True))

    async def fetch_route(self, topic: str, *, cache: bool = True) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC (105) for ``topic``.

        Raises :class:`TopicRouteError` when the NameServer answers TOPIC_NOT_EXIST
        (17), :class:`RemotingCommandError` for other codes and
        :class:`NameServerUnavailableError` when none answers. With ``cache`` the
        route is remembered and refreshed in the background from then on.
        """
        response = await self.namesrv_invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            raise TopicRouteError(topic, response.remark or "")
        check_response(response, f"route of {topic}")
        route = TopicRouteData.from_json(response.body)
        if cache:
            self._store_route(topic, route)
        return route

    def _store_route(self, topic: str, route: TopicRouteData) -> None:
        old = self.routes.get(topic)
        self.routes[topic] = route
        for bd in route.broker_datas:
            self.brokers[bd.broker_name] = bd
        if self._tasks and not self._closed and not self._heartbeat_pending and (
                self._heartbeat_targets() - self._heartbeat_sent):
            # a broker we have not greeted yet: heartbeat now rather than in up to 30 s
            self._heartbeat_pending = True
            task = asyncio.create_task(self._greet())
            self._greeting.add(task)
            task.add_done_callback(self._greeting.discard)
        if old != route:
            for listener in self.route_listeners:
                try:
                    listener(topic, route)
                except Exception:
                    log.exception("route listener failed for %s", topic)

    async def route(self, topic: str) -> TopicRouteData:
        """The cached route of ``topic``, fetching it on first use (see :meth:`fetch_route`)."""
        route = self.routes.get(topic)
        if route is None:
            route = await self.fetch_route(topic)
        return route

    async def refresh_routes(self) -> None:
        """Re-fetch the route of every cached topic; then heartbeat any broker not greeted yet."""
        for topic in list(self.routes):
            try:
                await self.fetch_route(topic)
            except TopicRouteError:
                log.info("%s: topic %s has no route any more", self.client_id, topic)
            except Exception as exc:
                log.warning("%s: route refresh of %s failed: %s", self.client_id, topic, exc)
        if self._heartbeat_targets() - self._heartbeat_sent:
            await self.send_heartbeat()

    async def _greet(self) -> None:
        try:
            await self.send_heartbeat()
        finally:
            self._heartbeat_pending = False

    # -- brokers -------------------------------------------------------------------------

    def master_addr(self, broker_name: str) -> str | None:
        """The master address of a broker group, from the routes seen so far."""
        bd = self.brokers.get(broker_name)
        return bd.master_addr if bd else None

    def subscribe_addr(self, broker_name: str, broker_id: int = MASTER_ID) -> tuple[str, int] | None:
        """Where to pull from: ``(addr, brokerId)`` for ``broker_id`` if known, else
        the master, else the lowest-id slave (the master is gone)."""
        bd = self.brokers.get(broker_name)
        if bd is None:
            return None
        if broker_id in bd.broker_addrs:
            return bd.broker_addrs[broker_id], broker_id
        if MASTER_ID in bd.broker_addrs:
            return bd.broker_addrs[MASTER_ID], MASTER_ID
        for bid in sorted(bd.broker_addrs):
            return bd.broker_addrs[bid], bid
        return None

    def admin_addr(self, broker_name: str) -> str | None:
        """The master of a group, or any slave when it has no master."""
        found = self.subscribe_addr(broker_name)
        return found[0] if found else None

    async def invoke(
        self, addr: str, code: int, fields: Mapping[str, str] | None = None, body: bytes = b"",
        timeout: float | None = None,
    ) -> RemotingCommand:
        """One request to a broker; returns the response whatever its code.

        Raises ``RemotingConnectError``/``RemotingTimeoutError``.
        """
        request = RemotingCommand(code=int(code), ext_fields=dict(fields or {}), body=body)
        return await self.remoting.invoke(addr, request, timeout or self.timeout)

    async def invoke_oneway(
        self, addr: str, code: int, fields: Mapping[str, str] | None = None, body: bytes = b""
    ) -> None:
        """A oneway request to a broker. Raises ``RemotingConnectError``."""
        request = RemotingCommand(code=int(code), ext_fields=dict(fields or {}), body=body)
        await self.remoting.invoke_oneway(addr, request)

    def _heartbeat_targets(self) -> set[str]:
        addrs: set[str] = set()
        for bd in self.brokers.values():
            if self.heartbeat_slaves:
                addrs.update(bd.broker_addrs.values())
            elif bd.master_addr:
                addrs.add(bd.master_addr)
        return addrs

    async def send_heartbeat(self) -> None:
        """HEART_BEAT (34) with the owner's body to every known broker, in parallel.

        Failures are logged, not raised (the broker may be down; the next round retries).
        """
        if self.heartbeat_body is None:
            return
        data = self.heartbeat_body()
        if data is None:
            return
        body = orjson.dumps(data)
        targets = sorted(self._heartbeat_targets())

        async def one(addr: str) -> None:
            try:
                response = await self.invoke(addr, RequestCode.HEART_BEAT, body=body)
                check_response(response, "heartbeat")
                self._heartbeat_sent.add(addr)
            except Exception as exc:
                self._heartbeat_sent.discard(addr)
                log.info("%s: heartbeat to %s failed: %s", self.client_id, addr, exc)

        await asyncio.gather(*(one(a) for a in targets))

    async def unregister(self, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        """UNREGISTER_CLIENT (35) to every broker heartbeated so far (errors ignored)."""
        fields = ext(clientID=self.client_id, producerGroup=producer_group, consumerGroup=consumer_group)
        targets = sorted(self._heartbeat_sent | self._heartbeat_targets())

        async def one(addr: str) -> None:
            with contextlib.suppress(Exception):
                await self.invoke(addr, RequestCode.UNREGISTER_CLIENT, fields, timeout=min(self.timeout, 2.0))

        await asyncio.gather(*(one(a) for a in targets))
