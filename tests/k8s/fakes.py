"""A scriptable :class:`ClusterAdmin` for the k8s tests that run without brokers.

It records every call and answers from plain attributes the test sets:
``registered`` (None = every broker group of every cluster is registered),
``pending`` (brokerName -> messages a drain still waits for), ``caught_up``, and for
``failover: Controller`` ``master_ids`` (which pod of a group the fake controllers made master).
:class:`RoutingAdmin` sends fake addresses to a :class:`FakeAdmin` and real ones to the real admin,
so clusters backed by real NameServer/broker processes and fake ones share one operator.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from rocket.auth.signature import SessionCredentials
from rocket.controller.client import ReplicaInfo
from rocket_operator.addresses import AddressResolver, ClusterRef
from rocket_operator.admin import AdminError, ClusterAdmin, DrainProgress, Registration

FAKE_NAMESERVER = "fake-nameserver:9876"


class FakeAdmin(ClusterAdmin):
    """Records calls in ``calls`` as ``(method, args...)`` tuples (thread-safe for reading)."""

    def __init__(self) -> None:
        self.registered: set[str] | None = None
        self.pending: dict[str, int] = {}
        self.caught_up = True
        self.unreachable: set[str] = set()
        #: controller mode: brokerName -> the controller broker id of its master (default 1: the
        #: ``@master`` pod, whose controller id is 1; ``@slave-k`` pods have id k + 1)
        self.master_ids: dict[str, int] = {}
        self.calls: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()

    def _record(self, *call: Any) -> None:
        with self._lock:
            self.calls.append(call)

    def calls_of(self, method: str) -> list[tuple[Any, ...]]:
        """The recorded calls of one method."""
        with self._lock:
            return [c for c in self.calls if c[0] == method]

    def _broker_name(self, addr: str) -> str:
        # the test resolver maps pod <cluster>-broker-master-<i> to "<cluster>-broker-<i>@master"
        return addr.split("@", 1)[0]

    async def registration(self, nameservers: list[str], cluster_name: str) -> Registration:
        """Every group (0..63) of ``cluster_name`` registered, unless ``registered`` says otherwise."""
        table: dict[str, dict[int, str]] = {}
        for i in range(64):
            name = f"{cluster_name}-broker-{i}"
            if self.registered is None or name in self.registered:
                table[name] = {0: f"{name}@master"}
        return Registration(per_nameserver={ns: dict(table) for ns in nameservers})

    async def set_write_permission(self, nameservers: list[str], broker_name: str, broker_addrs: list[str],
                                   writable: bool) -> None:
        """Record; fail for brokers in ``unreachable``."""
        if broker_name in self.unreachable:
            raise AdminError(f"{broker_name} unreachable")
        self._record("set_write_permission", broker_name, writable)

    async def copy_metadata(self, source: str, target: str, exclude_topics: frozenset[str] = frozenset()
                            ) -> tuple[int, int]:
        """Record the source and target broker names."""
        self._record("copy_metadata", self._broker_name(source), self._broker_name(target))
        return 3, 1

    async def create_topics(self, broker: str, topics: Iterable[tuple[str, int, int]]) -> None:
        """Record."""
        self._record("create_topics", self._broker_name(broker), tuple(topics))

    async def drain_progress(self, broker: str, exclude_topics: frozenset[str] = frozenset()) -> DrainProgress:
        """``pending[brokerName]`` messages of lag on one fake topic."""
        name = self._broker_name(broker)
        self._record("drain_progress", name)
        if name in self.unreachable:
            raise AdminError(f"{name} unreachable")
        pending = self.pending.get(name, 0)
        return DrainProgress(lag={"TopicA@group-a": pending} if pending else {})

    async def slave_caught_up(self, master: str, slave: str) -> bool:
        """``caught_up``."""
        return self.caught_up

    async def unregister(self, nameservers: list[str], cluster_name: str, broker_name: str,
                         brokers: Mapping[int, str]) -> None:
        """Record; the group is then no longer registered."""
        self._record("unregister", broker_name)

    async def broker_ha_status(self, broker: str) -> dict[str, Any]:
        """A controller-mode broker: ``<group>@master`` has controller id 1, ``@slave-k`` k + 1; it runs
        as master when that id is ``master_ids[group]`` (default 1)."""
        name, _, slot = broker.partition("@")
        if name in self.unreachable:
            raise AdminError(f"{name} unreachable")
        controller_id = 1 if slot == "master" else int(slot.rpartition("-")[2]) + 1
        role = "SYNC_MASTER" if controller_id == self.master_ids.get(name, 1) else "SLAVE"
        return {"brokerName": name, "brokerRole": role, "controllerMode": {"controllerBrokerId": controller_id}}

    async def replica_info(self, controllers: list[str], broker_name: str) -> ReplicaInfo:
        """Master ``master_ids[group]`` (default 1), every id 1..5 in the SyncStateSet."""
        master = self.master_ids.get(broker_name, 1)
        return ReplicaInfo(master, f"{broker_name}@{master}", master, frozenset(range(1, 6)), master)

    async def switch_master(self, nameservers: list[str], broker_name: str, broker_id: int) -> dict[str, Any]:
        """Record; ``broker_id`` is then the group's master."""
        self._record("switch_master", broker_name, broker_id)
        self.master_ids[broker_name] = broker_id
        return {"brokerName": broker_name, "brokerRole": "SYNC_MASTER"}


def fake_broker_addr(pod: str) -> str:
    """``<cluster>-broker-master-3`` -> ``<cluster>-broker-3@master`` (what :class:`FakeAdmin` understands)."""
    cluster, _, rest = pod.rpartition("-broker-")
    role, _, ordinal = rest.rpartition("-")
    return f"{cluster}-broker-{ordinal}@{role}"


class TestResolver(AddressResolver):
    """NameServers: ``nameserver_addrs[cluster]`` or the fake one; brokers: ``broker_addrs[pod]`` or a fake
    address (see :func:`fake_broker_addr`). Tests fill the maps for clusters backed by real processes."""

    __test__ = False  # not a pytest class

    def __init__(self) -> None:
        self.nameserver_addrs: dict[str, list[str]] = {}
        self.broker_addrs: dict[str, str] = {}
        self.controller_addrs: dict[str, str] = {}

    async def nameservers(self, cluster: ClusterRef) -> list[str]:
        return list(self.nameserver_addrs.get(cluster.name, [FAKE_NAMESERVER]))

    def broker(self, cluster: ClusterRef, pod: str) -> str:
        return self.broker_addrs.get(pod) or fake_broker_addr(pod)

    def controller(self, cluster: ClusterRef, pod: str) -> str:
        return self.controller_addrs.get(pod) or f"{pod}@controller"


def _is_fake(addr: str) -> bool:
    return addr == FAKE_NAMESERVER or "@" in addr


class RoutingAdmin(ClusterAdmin):
    """Fake addresses go to ``fake``, real ``host:port`` ones to ``real`` (a :class:`RemotingClusterAdmin`)."""

    def __init__(self, fake: FakeAdmin, real: ClusterAdmin) -> None:
        self.fake = fake
        self.real = real

    def _pick(self, *addrs: str) -> ClusterAdmin:
        return self.fake if any(_is_fake(a) for a in addrs) else self.real

    def with_credentials(self, credentials: SessionCredentials | None) -> ClusterAdmin:
        """Real calls signed with ``credentials`` (the fake ignores them)."""
        return RoutingAdmin(self.fake, self.real.with_credentials(credentials))

    def with_tls(self, ca_file: str | None) -> ClusterAdmin:
        """Real calls over TLS trusting ``ca_file`` (the fake ignores it)."""
        return RoutingAdmin(self.fake, self.real.with_tls(ca_file))

    async def registration(self, nameservers: list[str], cluster_name: str) -> Registration:
        return await self._pick(*nameservers).registration(nameservers, cluster_name)

    async def set_write_permission(self, nameservers: list[str], broker_name: str, broker_addrs: list[str],
                                   writable: bool) -> None:
        await self._pick(*nameservers, *broker_addrs).set_write_permission(
            nameservers, broker_name, broker_addrs, writable)

    async def copy_metadata(self, source: str, target: str, exclude_topics: frozenset[str] = frozenset()
                            ) -> tuple[int, int]:
        return await self._pick(source, target).copy_metadata(source, target, exclude_topics)

    async def create_topics(self, broker: str, topics: Iterable[tuple[str, int, int]]) -> None:
        await self._pick(broker).create_topics(broker, topics)

    async def drain_progress(self, broker: str, exclude_topics: frozenset[str] = frozenset()) -> DrainProgress:
        return await self._pick(broker).drain_progress(broker, exclude_topics)

    async def slave_caught_up(self, master: str, slave: str) -> bool:
        return await self._pick(master, slave).slave_caught_up(master, slave)

    async def unregister(self, nameservers: list[str], cluster_name: str, broker_name: str,
                         brokers: Mapping[int, str]) -> None:
        await self._pick(*nameservers).unregister(nameservers, cluster_name, broker_name, brokers)

    async def broker_ha_status(self, broker: str) -> dict[str, Any]:
        return await self._pick(broker).broker_ha_status(broker)

    async def replica_info(self, controllers: list[str], broker_name: str) -> ReplicaInfo:
        return await self._pick(*controllers).replica_info(controllers, broker_name)

    async def switch_master(self, nameservers: list[str], broker_name: str, broker_id: int) -> dict[str, Any]:
        return await self._pick(*nameservers).switch_master(nameservers, broker_name, broker_id)

    async def close(self) -> None:
        await self.real.close()
