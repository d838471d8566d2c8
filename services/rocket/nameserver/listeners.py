"""Listeners: one extra remoting port per listener, whose routes carry that listener's broker addresses.

A RocketMQ route (``TopicRouteData``) carries one address per broker, so one
NameServer answer cannot suit clients inside a Kubernetes cluster (pod
addresses) and clients outside it (a node's address and a NodePort, or a load
balancer's). RocketCluster's answer (a RocketCluster extension, not in Apache
RocketMQ):

* a broker registers its address on each listener with REGISTER_BROKER's
  extra ext field ``listenerAddrs`` = ``name=host:port;name=host:port``
  (:data:`LISTENER_ADDRS_FIELD`; Apache RocketMQ's NameServer ignores unknown
  ext fields, so such a broker still registers with it);
* the NameServer serves one extra remoting port per listener
  (``NameServerConfig.listeners`` = ``name:port,name:port``). On that port
  GET_ROUTEINFO_BY_TOPIC (105) and GET_BROKER_CLUSTER_INFO (106) answer with
  every broker address replaced by the broker's address on that listener (a
  broker that registered none for it keeps its registered address); every
  other request code is served as on the default port, which keeps answering
  the registered (internal) addresses.

Real clients stay unchanged: they are only pointed at the listener's port.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from rocket.nameserver.routeinfo import RouteInfoManager
from rocket.protocol import BrokerData, ClusterInfo
from rocket.protocol.codes import RequestCode, ResponseCode
from rocket.remoting.command import RemotingCommand
from rocket.remoting.connection import Processors, RemotingConnection, parse_addr

#: REGISTER_BROKER ext field with the broker's address per listener (RocketCluster extension).
LISTENER_ADDRS_FIELD = "listenerAddrs"

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: At most this many listeners per broker registration (bounds the table).
MAX_LISTENERS = 16


class ListenerError(ValueError):
    """A listener list or a ``listenerAddrs`` value that cannot be used (the message says why)."""


def parse_listener_ports(text: str) -> dict[str, int]:
    """``name:port,name:port`` (``;`` or spaces also separate) -> {name: port}.

    A name is a DNS-1123 label (lowercase letters, digits, ``-``); a port 0..65535
    (0 = any free port). Raises :class:`ListenerError` for a malformed entry, a
    name listed twice or more than :data:`MAX_LISTENERS` entries.
    """
    out: dict[str, int] = {}
    for piece in text.replace(";", ",").replace(" ", ",").split(","):
        piece = piece.strip()
        if not piece:
            continue
        name, sep, port_text = piece.rpartition(":")
        if not sep or not _NAME_RE.match(name):
            raise ListenerError(f"listener {piece!r} must be name:port with a lowercase DNS label as name")
        try:
            port = int(port_text)
        except ValueError:
            raise ListenerError(f"listener {piece!r}: port {port_text!r} is not a number") from None
        if not 0 <= port <= 65535:
            raise ListenerError(f"listener {piece!r}: port {port} is not a TCP port")
        if name in out:
            raise ListenerError(f"listener {name!r} is listed twice")
        out[name] = port
    if len(out) > MAX_LISTENERS:
        raise ListenerError(f"at most {MAX_LISTENERS} listeners, got {len(out)}")
    return out


def format_listener_addrs(addrs: Mapping[str, str]) -> str:
    """{listener: host:port} -> the ``listenerAddrs`` ext value ``name=host:port;...`` (sorted)."""
    return ";".join(f"{name}={addrs[name]}" for name in sorted(addrs))


def parse_listener_addrs(text: str) -> dict[str, str]:
    """The ``listenerAddrs`` ext value -> {listener: host:port}.

    Raises :class:`ListenerError` for an entry that is not ``name=host:port``, a
    name listed twice or more than :data:`MAX_LISTENERS` entries.
    """
    out: dict[str, str] = {}
    for piece in text.split(";"):
        piece = piece.strip()
        if not piece:
            continue
        name, sep, addr = piece.partition("=")
        if not sep or not _NAME_RE.match(name.strip()):
            raise ListenerError(f"listenerAddrs entry {piece!r} must be name=host:port")
        name, addr = name.strip(), addr.strip()
        try:
            host, _ = parse_addr(addr)
        except ValueError as exc:
            raise ListenerError(f"listenerAddrs entry {piece!r}: {exc}") from None
        if not host:
            raise ListenerError(f"listenerAddrs entry {piece!r} has no host")
        if name in out:
            raise ListenerError(f"listener {name!r} is listed twice in listenerAddrs")
        out[name] = addr
    if len(out) > MAX_LISTENERS:
        raise ListenerError(f"at most {MAX_LISTENERS} listener addresses, got {len(out)}")
    return out


class ListenerAddressBook:
    """Registered broker address -> {listener: that broker's address on the listener}.

    Filled from REGISTER_BROKER (:meth:`update`); entries of brokers no longer
    registered are dropped by :meth:`prune` (called with the live addresses at
    each registration), so the table stays as large as the broker table.
    """

    def __init__(self) -> None:
        self.table: dict[str, dict[str, str]] = {}

    def update(self, broker_addr: str, addrs: Mapping[str, str]) -> None:
        """Record ``addrs`` ({listener: host:port}) of ``broker_addr`` (an empty map forgets it)."""
        if addrs:
            self.table[broker_addr] = dict(addrs)
        else:
            self.table.pop(broker_addr, None)

    def prune(self, live: Mapping[str, object]) -> None:
        """Forget brokers whose registered address is not a key of ``live``."""
        for addr in [a for a in self.table if a not in live]:
            del self.table[addr]

    def translate(self, listener: str, broker_addr: str) -> str:
        """``broker_addr``'s address on ``listener`` (itself when it registered none)."""
        return self.table.get(broker_addr, {}).get(listener, broker_addr)

    def broker_data(self, listener: str, bd: BrokerData) -> BrokerData:
        """A copy of ``bd`` with every address translated to ``listener``'s."""
        copy = bd.copy()
        copy.broker_addrs = {bid: self.translate(listener, addr) for bid, addr in bd.broker_addrs.items()}
        return copy


def listener_processors(base: Processors, listener: str, routes: RouteInfoManager, book: ListenerAddressBook,
                        no_route_remark: Callable[[str], str]) -> Processors:
    """The request table of listener ``listener``'s port: ``base``'s handlers, with
    GET_ROUTEINFO_BY_TOPIC and GET_BROKER_CLUSTER_INFO answering the listener's addresses.

    ``routes``: the NameServer's route table; ``book``: its listener addresses. Observers
    (metrics) are shared with ``base``. An unknown topic is answered TOPIC_NOT_EXIST (17) with
    ``no_route_remark(topic)``, as on the default port.
    """
    out = Processors()
    for code in base.codes():
        entry = base.lookup(code)
        assert entry is not None
        out.register(code, entry[0])
    out.observers = base.observers

    def route(request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        topic = request.require("topic")
        data = routes.pickup_topic_route_data(topic)
        if data is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, no_route_remark(topic))
        data.broker_datas = [book.broker_data(listener, bd) for bd in data.broker_datas]
        data.filter_server_table = {}
        return request.response(body=data.encode())

    def cluster_info(request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        info = routes.get_all_cluster_info()
        translated = ClusterInfo(
            broker_addr_table={name: book.broker_data(listener, bd) for name, bd in info.broker_addr_table.items()},
            cluster_addr_table=info.cluster_addr_table)
        return request.response(body=translated.encode())

    out.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, route)
    out.register(RequestCode.GET_BROKER_CLUSTER_INFO, cluster_info)
    return out
