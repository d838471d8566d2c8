"""How the operator reaches NameServers and brokers: a replaceable hook.

The operator speaks the remoting protocol to NameServers (cluster info, write
permission) and to brokers (topics, offsets, config). Where those processes
listen depends on where the operator runs, so address resolution is an object
handed to the reconciler:

* :class:`DnsAddressResolver` (default): in-cluster DNS. NameServers are every
  A record of the headless Service ``<cluster>-nameserver-headless``; a broker
  pod is ``<pod>.<cluster>-broker.<namespace>.svc:10911``; a controller pod
  (``failover: Controller``) ``<pod>.<cluster>-controller.<namespace>.svc:9878``.
* Tests pass a resolver that maps pod names to processes on 127.0.0.1
  (:class:`StaticAddressResolver`).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rocket_operator import names
from rocket_operator.spec import BROKER_PORT, CONTROLLER_PORT, CONTROLLER_REPLICAS, NAMESERVER_PORT


@dataclass(frozen=True, slots=True)
class ClusterRef:
    """Which RocketCluster: its namespace and name."""

    namespace: str
    name: str


class AddressResolver:
    """Interface: remoting ``host:port`` addresses of a cluster's NameServers and broker pods."""

    async def nameservers(self, cluster: ClusterRef) -> list[str]:
        """Every NameServer's ``host:port`` (order irrelevant; empty when none can be found)."""
        raise NotImplementedError

    def broker(self, cluster: ClusterRef, pod: str) -> str:
        """The remoting ``host:port`` of broker pod ``pod``."""
        raise NotImplementedError

    def controller(self, cluster: ClusterRef, pod: str) -> str:
        """The remoting ``host:port`` of controller pod ``pod``."""
        raise NotImplementedError

    def controllers(self, cluster: ClusterRef) -> list[str]:
        """Every controller's remoting ``host:port`` (pods ``<cluster>-controller-0..2``)."""
        return [self.controller(cluster, names.controller_pod(cluster.name, i)) for i in range(CONTROLLER_REPLICAS)]


class DnsAddressResolver(AddressResolver):
    """Kubernetes DNS names: headless-Service A records for NameServers, pod DNS names for brokers.

    ``cluster_domain`` is the cluster's DNS suffix (``svc.cluster.local`` by
    default; broker names use the short ``<ns>.svc`` form which resolves
    through the pod's search path).
    """

    def __init__(self, cluster_domain: str = "cluster.local", lookup_timeout: float = 2.0) -> None:
        self.cluster_domain = cluster_domain
        self.lookup_timeout = lookup_timeout

    async def nameservers(self, cluster: ClusterRef) -> list[str]:
        """A records of ``<cluster>-nameserver-headless.<ns>.svc.<domain>``, each with port 9876."""
        host = f"{names.nameserver_headless(cluster.name)}.{cluster.namespace}.svc.{self.cluster_domain}"
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.lookup_timeout):
                infos = await loop.getaddrinfo(host, NAMESERVER_PORT, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError):
            return []
        return sorted({f"{info[4][0]}:{NAMESERVER_PORT}" for info in infos})

    def broker(self, cluster: ClusterRef, pod: str) -> str:
        """``<pod>.<cluster>-broker.<ns>.svc.<domain>:10911``."""
        return f"{pod}.{names.broker_service(cluster.name)}.{cluster.namespace}.svc.{self.cluster_domain}:{BROKER_PORT}"

    def controller(self, cluster: ClusterRef, pod: str) -> str:
        """``<pod>.<cluster>-controller.<ns>.svc.<domain>:9878``."""
        return (f"{pod}.{names.controller(cluster.name)}.{cluster.namespace}.svc.{self.cluster_domain}:"
                f"{CONTROLLER_PORT}")


class StaticAddressResolver(AddressResolver):
    """Fixed addresses, for tests and for running the operator outside the cluster.

    ``nameserver_addrs`` maps a cluster name (or ``"*"``) to NameServer
    addresses; ``broker_addrs`` (and ``controller_addrs``) map pod names to addresses. A pod
    that is not in the map gets ``unknown_broker(pod)`` (default: an address nothing listens
    on, so calls fail fast with a connection error).
    """

    def __init__(self, nameserver_addrs: Mapping[str, list[str]] | None = None,
                 broker_addrs: Mapping[str, str] | None = None,
                 unknown_broker: Callable[[str], str] | None = None,
                 controller_addrs: Mapping[str, str] | None = None) -> None:
        self.nameserver_addrs: dict[str, list[str]] = {k: list(v) for k, v in (nameserver_addrs or {}).items()}
        self.broker_addrs: dict[str, str] = dict(broker_addrs or {})
        self.controller_addrs: dict[str, str] = dict(controller_addrs or {})
        self.unknown_broker = unknown_broker or (lambda pod: "127.0.0.1:1")

    async def nameservers(self, cluster: ClusterRef) -> list[str]:
        """The listed addresses for ``cluster.name`` (else for ``"*"``, else none)."""
        return list(self.nameserver_addrs.get(cluster.name, self.nameserver_addrs.get("*", [])))

    def broker(self, cluster: ClusterRef, pod: str) -> str:
        """The mapped address of ``pod``."""
        return self.broker_addrs.get(pod) or self.unknown_broker(pod)

    def controller(self, cluster: ClusterRef, pod: str) -> str:
        """The mapped address of controller pod ``pod``."""
        return self.controller_addrs.get(pod) or self.unknown_broker(pod)
