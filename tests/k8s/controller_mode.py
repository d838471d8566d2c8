"""Controller-mode RocketClusters on loopback for the Kubernetes tests: REAL processes for fake pods.

Three ``rocket controller`` processes (Raft, ``ROCKET_CONTROLLER_SECRET``), a NameServer and broker
groups of controller-mode brokers (``enableControllerMode``, settings from
``tests.integration.failover_support.CONTROLLER_MODE``) run as local processes standing in for the
pods of one RocketCluster; the operator's test resolver maps the pods ``<cluster>-controller-<i>``
and ``<cluster>-broker-{master,slave-1}-<g>`` to them (:func:`wire`), and :func:`play_kubelet`
stops and starts a pod's broker process as a kubelet would. Used by ``test_failover_operator.py``
(rolling restart by actual role) and ``test_node_drain.py`` (``kubectl drain``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tests.integration.broker_harness import broker_port, broker_process, nameserver_process
from tests.integration.controller_support import SECRET, ControllerCluster
from tests.integration.failover_support import CONTROLLER_MODE
from tests.k8s.harness import environ, wait_for
from tests.k8s.test_operator import pods, status

T = TypeVar("T")

#: controllers per cluster: the operator's controller StatefulSet has 3 replicas
CONTROLLERS = 3


@dataclass
class Broker:
    """One broker process standing in for a pod: restartable on the same port and store.

    ``stack`` is the running process (None while stopped); ``uid`` the pod it runs for;
    ``controller_id`` the brokerId the controllers gave it (set by the test).
    """

    pod: str
    group: int
    port: int
    start: Callable[[], contextlib.ExitStack]
    stack: contextlib.ExitStack | None = None
    uid: str | None = None
    controller_id: int | None = None

    @property
    def addr(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"


@dataclass
class Processes:
    """The cluster's processes; ``deletions`` is ``(pod, its role per the controllers then)`` in the
    order the pods were deleted, ``errors`` what :func:`play_kubelet` ran into."""

    controllers: ControllerCluster
    namesrv: str
    brokers: dict[str, Broker]
    root: Path
    deletions: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``coro`` to completion on a new event loop (the tests' threads have none)."""
    return asyncio.run(coro)


async def ha_status(addr: str) -> dict[str, Any]:
    """The broker's HA status (``GET_BROKER_HA_STATUS``) as the operator's admin reads it."""
    from rocket_operator.admin import RemotingClusterAdmin

    admin = RemotingClusterAdmin()
    try:
        return await admin.broker_ha_status(addr)
    finally:
        await admin.close()


async def replica_info(controllers: list[str], broker_name: str) -> Any:
    """The controllers' ``GET_REPLICA_INFO`` answer for the broker group ``broker_name``."""
    from rocket.controller.client import ControllerClient

    ctl = ControllerClient(controllers)
    try:
        return await ctl.get_replica_info(broker_name)
    finally:
        await ctl.close()


def start(broker: Broker) -> None:
    """Start the broker's process."""
    broker.stack = broker.start()


def stop(broker: Broker) -> None:
    """Stop the broker's process if it runs."""
    if broker.stack is not None:
        broker.stack.close()
        broker.stack = None


def each(brokers: list[Broker], action: Callable[[Broker], None]) -> None:
    """``action`` on every broker at once (process starts and stops take seconds each); the first
    error any of them raised is raised here."""
    errors: list[BaseException] = []

    def one(broker: Broker) -> None:
        try:
            action(broker)
        except BaseException as exc:  # raised below, in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(b,)) for b in brokers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@contextlib.contextmanager
def processes(root: Path, cluster: str, groups: dict[str, int], firsts: list[str]) -> Iterator[Processes]:
    """The controllers, a NameServer and a broker per pod of ``groups`` (pod -> group index), all
    stopped on exit. The brokers of the pods ``firsts`` start first and are elected their groups'
    masters (waited for, 60 s each) before the others start."""
    ctl = ControllerCluster(root / "ctl", CONTROLLERS, extra=["--heartbeat-timeout-ms",
                                                              CONTROLLER_MODE["controllerHeartBeatTimeoutMills"]])
    (root / "ctl").mkdir()
    with contextlib.ExitStack() as outer:
        with environ(ROCKET_CONTROLLER_SECRET=SECRET):
            ctl.start_all()
        outer.callback(ctl.stop)
        ns = outer.enter_context(nameserver_process(root))
        settings = {**CONTROLLER_MODE, "brokerClusterName": cluster, "controllerAddr": ";".join(ctl.addrs)}
        brokers: dict[str, Broker] = {}
        for pod, group in groups.items():
            port = broker_port()

            def begin(group: int = group, port: int = port) -> contextlib.ExitStack:
                stack = contextlib.ExitStack()
                stack.enter_context(broker_process(root, f"{cluster}-broker-{group}", ns.addr, settings=settings,
                                                   port=port))
                return stack

            brokers[pod] = Broker(pod, group, port, begin)
        try:
            first = [brokers[pod] for pod in firsts]
            each(first, start)
            for broker in first:
                wait_for(lambda b=broker: run(ha_status(b.addr)).get("brokerRole") != "SLAVE", 60,
                         what=f"{broker.pod}'s broker elected master")
            each([b for b in brokers.values() if b not in first], start)
            yield Processes(ctl, ns.addr, brokers, root)
        finally:
            each(list(brokers.values()), stop)


@contextlib.contextmanager
def wire(operator: Any, cluster: str, procs: Processes) -> Iterator[Processes]:
    """The operator's test resolver maps the cluster's pods to ``procs`` until exit."""
    resolver = operator.resolver
    resolver.nameserver_addrs[cluster] = [procs.namesrv]
    for pod, broker in procs.brokers.items():
        resolver.broker_addrs[pod] = broker.addr
    for i, addr in enumerate(procs.controllers.addrs):
        resolver.controller_addrs[f"{cluster}-controller-{i}"] = addr
    try:
        yield procs
    finally:
        resolver.nameserver_addrs.pop(cluster, None)
        for pod in procs.brokers:
            resolver.broker_addrs.pop(pod, None)
        for i in range(CONTROLLERS):
            resolver.controller_addrs.pop(f"{cluster}-controller-{i}", None)


def running_with_masters(api: Any, namespace: str, cluster: str, groups: int = 2) -> dict[str, Any] | None:
    """The RocketCluster's status once it is Running with ``groups`` broker groups, each with its
    master pod and a SyncStateSet of 2, and all controllers ready; None before."""
    st = status(api, namespace, cluster)
    if st.get("phase") != "Running" or len(st.get("brokerGroups") or []) != groups:
        return None
    if not all(g.get("master", {}).get("pod") and len(g.get("syncStateSet") or []) == 2
               for g in st["brokerGroups"]):
        return None
    return st if st.get("controllersReady") == f"{CONTROLLERS}/{CONTROLLERS}" else None


def play_kubelet(api: Any, namespace: str, cluster: str, procs: Processes, stop_event: threading.Event) -> None:
    """Until ``stop_event``: stop a pod's broker when its pod is deleted (recording in
    ``procs.deletions`` the role the controllers gave it then), start it again (same port and
    store) once the StatefulSet's new pod is scheduled to a node. Errors go to ``procs.errors``."""
    try:
        while not stop_event.is_set():
            current = pods(api, namespace)
            for pod, broker in procs.brokers.items():
                obj = current.get(pod)
                alive = obj.metadata.uid if obj is not None and not obj.metadata.deletion_timestamp else None
                if broker.stack is not None:
                    if broker.uid is None and alive is not None:
                        broker.uid = alive  # the first pod: the process already runs for it
                    elif broker.uid is not None and alive != broker.uid:
                        info = run(replica_info(procs.controllers.addrs, f"{cluster}-broker-{broker.group}"))
                        role = "master" if info.master_broker_id == broker.controller_id else "slave"
                        procs.deletions.append((pod, role))
                        stop(broker)
                elif alive is not None and obj.spec.node_name:
                    broker.stack = broker.start()
                    broker.uid = alive
            stop_event.wait(0.1)
    except Exception as exc:  # reported by the test
        procs.errors.append(repr(exc))
