"""Talking to NameServers: :class:`BrokerOuterAPI` (REGISTER_BROKER, UNREGISTER_BROKER).

The NameServer list is ``host:port;host:port`` (``,`` and spaces also
separate). A host that is not an IP literal is resolved with
``loop.getaddrinfo`` to **all** its IPv4 addresses every time the list is
used, so a DNS name such as a Kubernetes headless Service ``ns:9876`` follows
NameServers as they come and go without a broker restart.

Registration (``BrokerOuterAPI.registerBrokerAll``): every NameServer in
parallel, body :class:`~rocket.protocol.RegisterBrokerBody` (JSON) and ext
``bodyCrc32`` = :func:`~rocket.protocol.crc32_masked` of the body; timeout
``registerBrokerTimeoutMills``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rocket.nameserver.listeners import LISTENER_ADDRS_FIELD, format_listener_addrs
from rocket.protocol import crc32_masked
from rocket.remoting import (
    RemotingClient,
    RemotingCommand,
    RemotingError,
    RequestCode,
    ResponseCode,
    parse_addr,
)

log = logging.getLogger("rocket.broker.registration")

Resolver = Callable[[str, int], Awaitable[list[str]]]


def split_namesrv_list(text: str) -> list[str]:
    """Split a NameServer list on ``;``, ``,`` and whitespace; drops empties."""
    out: list[str] = []
    for piece in text.replace(",", ";").replace(" ", ";").split(";"):
        piece = piece.strip()
        if piece and piece not in out:
            out.append(piece)
    return out


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def _getaddrinfo_ipv4(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, family=socket.AF_INET, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for info in infos:
        ip = str(info[4][0])
        if ip not in seen:
            seen.append(ip)
    return seen


async def resolve_namesrv_addrs(text: str, resolver: Resolver | None = None) -> list[str]:
    """Expand a NameServer list into ``ip:port`` addresses (every A record of a name).

    A name that does not resolve is logged and skipped; a malformed entry
    raises ``ValueError``.
    """
    resolver = resolver or _getaddrinfo_ipv4
    addrs: list[str] = []
    for entry in split_namesrv_list(text):
        host, port = parse_addr(entry)
        if _is_ip(host):
            candidates = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
        else:
            try:
                ips = await resolver(host, port)
            except OSError as exc:
                log.warning("cannot resolve NameServer %s: %s", entry, exc)
                continue
            candidates = [f"{ip}:{port}" for ip in ips]
        for addr in candidates:
            if addr not in addrs:
                addrs.append(addr)
    return addrs


@dataclass(slots=True)
class RegisterResult:
    """What one NameServer answered to REGISTER_BROKER.

    ``ha_server_addr``/``master_addr`` are filled for a slave whose master is live, and
    for a master registering with an epoch when a NameServer keeps another live master
    of the group (newer or equal epoch, ``master_epoch``): the registering one must step
    down (RocketCluster extension, ``rocket.broker.ha``).
    """

    namesrv_addr: str
    ok: bool
    error: str = ""
    ha_server_addr: str | None = None
    master_addr: str | None = None
    master_epoch: int | None = None


@dataclass(slots=True)
class BrokerIdentity:
    """The ext fields that identify this broker to NameServers."""

    cluster_name: str
    broker_name: str
    broker_addr: str
    broker_id: int
    ha_server_addr: str
    #: A master's replication epoch (ext ``epoch``; None = not sent).
    epoch: int | None = None
    #: The broker's address per listener (ext ``listenerAddrs``, RocketCluster extension; empty = not sent).
    listener_addrs: dict[str, str] = field(default_factory=dict)


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


@dataclass(slots=True)
class RegistrationState:
    """Outcome of the most recent registration rounds (readiness, status API)."""

    last_success: dict[str, float] = field(default_factory=dict)
    last_error: dict[str, str] = field(default_factory=dict)
    last_round_addrs: list[str] = field(default_factory=list)
    last_round_at: float = 0.0
    rounds: int = 0

    def registered_within(self, seconds: float) -> list[str]:
        """NameServers that accepted a registration in the last ``seconds``."""
        now = time.monotonic()
        return sorted(a for a, t in self.last_success.items() if now - t <= seconds)


class BrokerOuterAPI:
    """Sends REGISTER_BROKER/UNREGISTER_BROKER to every NameServer of a list."""

    def __init__(
        self,
        namesrv_list: Callable[[], str],
        *,
        timeout: float = 6.0,
        resolver: Resolver | None = None,
        client: RemotingClient | None = None,
    ) -> None:
        self._namesrv_list = namesrv_list
        self.timeout = timeout
        self.resolver = resolver
        self.client = client or RemotingClient(connect_timeout=min(timeout, 3.0))
        self.state = RegistrationState()
        self._known: set[str] = set()

    async def addresses(self) -> list[str]:
        """Resolve the NameServer list now; connections to vanished addresses are closed."""
        text = self._namesrv_list()
        if not text:
            return []
        try:
            addrs = await resolve_namesrv_addrs(text, self.resolver)
        except ValueError as exc:
            log.error("bad NameServer list %r: %s", text, exc)
            return []
        for gone in self._known - set(addrs):
            self.client.close_connection(gone)
            self.state.last_success.pop(gone, None)
            self.state.last_error.pop(gone, None)
        self._known = set(addrs)
        return addrs

    async def register_broker_all(self, identity: BrokerIdentity, body: bytes) -> list[RegisterResult]:
        """Register with every NameServer in parallel; never raises for a NameServer's failure."""
        addrs = await self.addresses()
        crc = crc32_masked(body)
        ext = {
            "brokerAddr": identity.broker_addr,
            "brokerId": str(identity.broker_id),
            "brokerName": identity.broker_name,
            "clusterName": identity.cluster_name,
            "haServerAddr": identity.ha_server_addr,
            "compressed": "false",
            "bodyCrc32": str(crc),
        }
        if identity.epoch is not None:
            ext["epoch"] = str(identity.epoch)
        if identity.listener_addrs:
            ext[LISTENER_ADDRS_FIELD] = format_listener_addrs(identity.listener_addrs)
        results = await asyncio.gather(*(self._register_one(addr, ext, body) for addr in addrs))
        self.state.rounds += 1
        self.state.last_round_at = time.monotonic()
        self.state.last_round_addrs = list(addrs)
        return list(results)

    async def _register_one(self, addr: str, ext: dict[str, str], body: bytes) -> RegisterResult:
        cmd = RemotingCommand(code=RequestCode.REGISTER_BROKER, ext_fields=dict(ext), body=body, language="JAVA")
        try:
            resp = await self.client.invoke(addr, cmd, timeout=self.timeout)
        except RemotingError as exc:
            return self._failed(addr, str(exc))
        if resp.code != ResponseCode.SUCCESS:
            return self._failed(addr, f"code {resp.code}: {resp.remark or ''}")
        self.state.last_success[addr] = time.monotonic()
        if self.state.last_error.pop(addr, None) is not None:
            log.info("registered with NameServer %s again", addr)
        return RegisterResult(
            namesrv_addr=addr,
            ok=True,
            ha_server_addr=resp.get("haServerAddr") or None,
            master_addr=resp.get("masterAddr") or None,
            master_epoch=_int_or_none(resp.get("masterEpoch")),
        )

    def _failed(self, addr: str, error: str) -> RegisterResult:
        if self.state.last_error.get(addr) != error:
            log.warning("registering with NameServer %s failed: %s", addr, error)
        self.state.last_error[addr] = error
        return RegisterResult(namesrv_addr=addr, ok=False, error=error)

    async def unregister_broker_all(self, identity: BrokerIdentity, timeout: float = 3.0) -> list[RegisterResult]:
        """Send UNREGISTER_BROKER to every NameServer in parallel."""
        addrs = await self.addresses()
        ext = {
            "brokerAddr": identity.broker_addr,
            "brokerId": str(identity.broker_id),
            "brokerName": identity.broker_name,
            "clusterName": identity.cluster_name,
        }

        async def one(addr: str) -> RegisterResult:
            cmd = RemotingCommand(code=RequestCode.UNREGISTER_BROKER, ext_fields=dict(ext), language="JAVA")
            try:
                resp = await self.client.invoke(addr, cmd, timeout=timeout)
            except RemotingError as exc:
                log.warning("unregistering from NameServer %s failed: %s", addr, exc)
                return RegisterResult(namesrv_addr=addr, ok=False, error=str(exc))
            ok = resp.code == ResponseCode.SUCCESS
            if not ok:
                log.warning("unregistering from NameServer %s: code %d %s", addr, resp.code, resp.remark)
            self.state.last_success.pop(addr, None)
            return RegisterResult(namesrv_addr=addr, ok=ok, error="" if ok else str(resp.remark))

        return list(await asyncio.gather(*(one(a) for a in addrs)))

    async def close(self) -> None:
        """Close NameServer connections."""
        await self.client.close()
