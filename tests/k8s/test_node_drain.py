"""``kubectl drain`` of a node hosting broker masters, with the operator's ``pods/eviction`` webhook.

Three REAL controllers, a NameServer and two broker groups of two controller-mode brokers each
(``allAckInSyncStateSet``) run on loopback, standing in for the pods of the RocketCluster
``ndrain`` (the test resolver maps the pods to them; the pods are bound to the fake node
``fake-node-1`` of the session's fake kubelet). The operator runs with its admission webhook
on 127.0.0.1; kopf registers it in a ValidatingWebhookConfiguration with the operator-made CA
as ``caBundle``, and the real API server calls it for every eviction.

A second fake node (``fake-node-2``, with its own fake kubelet) is registered, then, while a
producer sends without pause, the real ``kubectl drain fake-node-1`` evicts the cluster's broker
pods (``--pod-selector``: the node also hosts other tests' pods). The webhook refuses (429) the
masters' evictions and the in-sync slaves' (the operator makes each group read-only in turn,
switches each master to an in-sync slave, deletes the pods itself); ``kubectl drain`` retries
until every pod is gone. As a kubelet would, the test stops a pod's broker when its pod is
deleted and starts it again (same port and store) when the StatefulSet's new pod runs on
fake-node-2. The drain completes; 0 sends fail and every acknowledged message is consumed
afterwards. NameServer and controller pods are left to their PodDisruptionBudgets (shown to exist).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.integration.broker_harness import broker_port, broker_process, nameserver_process
from tests.integration.controller_support import SECRET, ControllerCluster
from tests.integration.failover_support import CONTROLLER_MODE
from tests.k8s import harness
from tests.k8s.harness import wait_for
from tests.k8s.test_drain_real import Traffic
from tests.k8s.test_failover_operator import Broker, Processes, _each, _env, _ha, _start, _stop
from tests.k8s.test_operator import create, pods, read_pdb, rkc, status
from tests.support import unique

pytestmark = pytest.mark.timeout(600)

CLUSTER = "ndrain"
TOPIC = "DrainNodeTopic"
GROUP = "drain-node-consumers"
NODE2 = "fake-node-2"
#: pod -> group; the master StatefulSet's pods start first: the controllers make them the masters
PODS = {f"{CLUSTER}-broker-master-0": 0, f"{CLUSTER}-broker-master-1": 1,
        f"{CLUSTER}-broker-slave-1-0": 0, f"{CLUSTER}-broker-slave-1-1": 1}


def _kubectl() -> str:
    found = shutil.which("kubectl") or next(
        (str(p) for p in (harness.cache_bin_dir() / "kubectl",) if p.exists()), None)
    if found is None:
        pytest.fail("kubectl is needed for `kubectl drain` and is neither on PATH nor in the k8s cache",
                    pytrace=False)
    return found


@pytest.fixture(scope="module")
def processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Processes]:
    root = tmp_path_factory.mktemp("ndrain")
    ctl = ControllerCluster(root / "ctl", 3, extra=["--heartbeat-timeout-ms",
                                                     CONTROLLER_MODE["controllerHeartBeatTimeoutMills"]])
    (root / "ctl").mkdir()
    with contextlib.ExitStack() as outer:
        with _env(ROCKET_CONTROLLER_SECRET=SECRET):
            ctl.start_all()
        outer.callback(ctl.stop)
        ns = outer.enter_context(nameserver_process(root))
        settings = {**CONTROLLER_MODE, "brokerClusterName": CLUSTER, "controllerAddr": ";".join(ctl.addrs)}
        brokers: dict[str, Broker] = {}
        for pod, group in PODS.items():
            port = broker_port()

            def start(group: int = group, port: int = port) -> contextlib.ExitStack:
                stack = contextlib.ExitStack()
                stack.enter_context(broker_process(root, f"{CLUSTER}-broker-{group}", ns.addr, settings=settings,
                                                   port=port))
                return stack

            brokers[pod] = Broker(pod, group, port, start)
        try:
            firsts = [brokers[f"{CLUSTER}-broker-master-0"], brokers[f"{CLUSTER}-broker-master-1"]]
            _each(firsts, _start)
            for broker in firsts:
                wait_for(lambda b=broker: _run(_ha(b.addr)).get("brokerRole") != "SLAVE", 60,
                         what=f"{broker.pod}'s broker elected master")
            _each([b for b in brokers.values() if b not in firsts], _start)
            yield Processes(ctl, ns.addr, brokers, root)
        finally:
            _each(list(brokers.values()), _stop)


def _run(coro: Any) -> Any:
    import asyncio

    return asyncio.run(coro)


@pytest.fixture(scope="module")
def drain_namespace(api: Any) -> Iterator[str]:
    core = client.CoreV1Api(api)
    name = unique("nd")
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    with contextlib.suppress(Exception):
        core.delete_namespace(name)


@pytest.fixture(scope="module")
def wired(operator: Any, processes: Processes) -> Iterator[Processes]:
    resolver = operator.resolver
    resolver.nameserver_addrs[CLUSTER] = [processes.namesrv]
    for pod, broker in processes.brokers.items():
        resolver.broker_addrs[pod] = broker.addr
    for i, addr in enumerate(processes.controllers.addrs):
        resolver.controller_addrs[f"{CLUSTER}-controller-{i}"] = addr
    try:
        yield processes
    finally:
        resolver.nameserver_addrs.pop(CLUSTER, None)
        for pod in processes.brokers:
            resolver.broker_addrs.pop(pod, None)
        for i in range(3):
            resolver.controller_addrs.pop(f"{CLUSTER}-controller-{i}", None)


@pytest.fixture
def second_node(api: Any, drain_namespace: str) -> Iterator[harness.FakeKubelet]:
    """fake-node-2's fake kubelet, registered when the test calls ``start()``; afterwards the test's
    pods are force-deleted and the node removed (other tests schedule on fake-node-1 only)."""
    kubelet = harness.FakeKubelet(api, node=NODE2, pvs=0)
    core = client.CoreV1Api(api)
    try:
        yield kubelet
    finally:
        with contextlib.suppress(Exception):
            core.patch_node(harness.NODE, {"spec": {"unschedulable": False}})
        with contextlib.suppress(Exception):
            core.patch_node(NODE2, {"spec": {"unschedulable": True}})
        with contextlib.suppress(Exception):
            for pod in core.list_namespaced_pod(drain_namespace).items:
                core.delete_namespaced_pod(pod.metadata.name, drain_namespace, grace_period_seconds=0)
        with contextlib.suppress(RuntimeError):  # never started
            kubelet.stop()
        with contextlib.suppress(Exception):
            core.delete_node(NODE2)


async def _replica_info(controllers: list[str], group: int) -> Any:
    from rocket.controller.client import ControllerClient

    ctl = ControllerClient(controllers)
    try:
        return await ctl.get_replica_info(f"{CLUSTER}-broker-{group}")
    finally:
        await ctl.close()


def _play_kubelet(api: Any, namespace: str, procs: Processes, stop: threading.Event) -> None:
    """Stop a pod's broker when its pod is deleted (recording the role the controllers gave it
    then), start it again (same port and store) when the StatefulSet's new pod runs."""
    try:
        while not stop.is_set():
            current = pods(api, namespace)
            for pod, broker in procs.brokers.items():
                obj = current.get(pod)
                alive = obj.metadata.uid if obj is not None and not obj.metadata.deletion_timestamp else None
                if broker.stack is not None:
                    if broker.uid is None and alive is not None:
                        broker.uid = alive  # the first pod: the process already runs for it
                    elif broker.uid is not None and alive != broker.uid:
                        info = _run(_replica_info(procs.controllers.addrs, broker.group))
                        role = "master" if info.master_broker_id == broker.controller_id else "slave"
                        procs.deletions.append((pod, role))
                        broker.stack.close()
                        broker.stack = None
                elif alive is not None and obj.spec.node_name:
                    broker.stack = broker.start()
                    broker.uid = alive
            stop.wait(0.1)
    except Exception as exc:  # reported by the test
        procs.errors.append(repr(exc))


def _running_with_masters(api: Any, namespace: str) -> dict[str, Any] | None:
    st = status(api, namespace, CLUSTER)
    if st.get("phase") != "Running" or len(st.get("brokerGroups") or []) != 2 or "rollout" in st:
        return None
    groups = st["brokerGroups"]
    if not all(g.get("master", {}).get("pod") and len(g.get("syncStateSet") or []) == 2 for g in groups):
        return None
    return st if st.get("controllersReady") == "3/3" else None


def test_kubectl_drain_of_a_master_node_fails_no_send_and_loses_nothing(
        api: Any, drain_namespace: str, wired: Processes, operator: Any, second_node: harness.FakeKubelet,
        control_plane: harness.ControlPlane) -> None:
    ns = drain_namespace
    procs = wired
    kubectl = _kubectl()
    create(api, ns, rkc(CLUSTER, broker={"groups": 2, "replicasPerGroup": 1, "clientRouteRefreshSeconds": 3,
                                         "config": {"allAckInSyncStateSet": "true"}},
                        topics=[{"name": TOPIC, "queues": 4}]))
    st = wait_for(lambda: _running_with_masters(api, ns), 120, what="Running with each group's master known")
    core = client.CoreV1Api(api)
    # every pod of the cluster runs on fake-node-1; the masters are the master StatefulSet's pods
    assert {p.spec.node_name for p in core.list_namespaced_pod(ns).items} == {harness.NODE}
    assert [g["master"]["pod"] for g in st["brokerGroups"]] == [f"{CLUSTER}-broker-master-0",
                                                                 f"{CLUSTER}-broker-master-1"]
    # NameServer and controller pods are left to their PodDisruptionBudgets
    for pdb in (f"{CLUSTER}-nameserver", f"{CLUSTER}-controller"):
        read_pdb(api, ns, pdb)  # asserts maxUnavailable: 1
    # the webhook as the API server knows it: pods/eviction, on loopback, with the operator's CA
    hooks = client.AdmissionregistrationV1Api(api).read_validating_webhook_configuration(
        "rocketcluster-operator.rocket.dev").webhooks
    hook = next(h for h in hooks if any("pods/eviction" in r.resources for r in h.rules))
    assert hook.client_config.url.startswith(f"https://127.0.0.1:{operator.webhook_port}/")
    assert hook.client_config.ca_bundle and hook.failure_policy == "Fail"

    second_node.start()  # where the StatefulSets' new pods go once fake-node-1 is cordoned
    for broker in procs.brokers.values():
        broker.controller_id = int(_run(_ha(broker.addr))["controllerMode"]["controllerBrokerId"])
    traffic = Traffic(procs.namesrv, topic=TOPIC, group=GROUP)
    traffic.start()
    stop = threading.Event()
    kubelet = threading.Thread(target=_play_kubelet, args=(api, ns, procs, stop), daemon=True)
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    try:
        wait_for(lambda: len(traffic.per_broker) == 2 and min(traffic.per_broker.values()) >= 20, 30,
                 what="messages on both groups")
        kubelet.start()
        started = time.monotonic()
        drained = subprocess.run(
            [kubectl, "drain", harness.NODE, "--pod-selector",
             f"app.kubernetes.io/instance={CLUSTER},app.kubernetes.io/component=broker",
             "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=400s"],
            env=env, capture_output=True, text=True, timeout=420)
        took = time.monotonic() - started
        print(f"kubectl drain took {took:.1f} s:\n{drained.stdout}\n{drained.stderr}", file=sys.__stderr__)
        assert drained.returncode == 0, drained.stdout + drained.stderr
        assert f"node/{harness.NODE} drained" in drained.stdout
        # the refusals kubectl retried: the masters' (and the in-sync slaves') with the operator's message
        assert "is the master of" in drained.stderr + drained.stdout
        st = wait_for(lambda: _running_with_masters(api, ns), 120, what="Running again, every broker in sync")
        time.sleep(1.0)
        traffic.stop_sending()
        traffic.start_consumer()
        wait_for(lambda: set(traffic.sent) <= traffic.received, 90,
                 what=f"every acknowledged message consumed (missing {len(set(traffic.sent) - traffic.received)})")
    finally:
        stop.set()
        traffic.stop()
        if kubelet.is_alive():
            kubelet.join(30)
        subprocess.run([kubectl, "uncordon", harness.NODE], env=env, capture_output=True, timeout=60)
    print(f"drain: order {procs.deletions}; sent {len(traffic.sent)} (per group {traffic.per_broker}), "
          f"received {len(traffic.received)}, duplicates {traffic.duplicates}, failed {len(traffic.failed)}",
          file=sys.__stderr__)
    assert procs.errors == [], procs.errors
    # every broker pod left fake-node-1; each was a slave when deleted (masters were switched first)
    assert sorted(pod for pod, _ in procs.deletions) == sorted(PODS)
    assert all(role == "slave" for _, role in procs.deletions), procs.deletions
    broker_nodes = {p.metadata.name: p.spec.node_name for p in pods(api, ns).values()
                    if p.metadata.labels.get("app.kubernetes.io/component") == "broker"}
    assert set(broker_nodes.values()) == {NODE2}, broker_nodes
    assert {g["master"]["pod"] for g in st["brokerGroups"]} <= set(PODS)
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={CLUSTER}").items
    reasons = [e.reason for e in events]
    assert reasons.count("MasterSwitched") >= 2 and "PodEvicted" in reasons
    assert traffic.error is None, traffic.error
    assert traffic.failed == [], traffic.failed[:5]
    assert set(traffic.sent) <= traffic.received
    assert len(traffic.sent) > 200
