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

from tests.k8s import controller_mode, harness
from tests.k8s.controller_mode import Processes, ha_status, play_kubelet, run, running_with_masters
from tests.k8s.harness import temporary_namespace, wait_for
from tests.k8s.test_drain_real import Traffic
from tests.k8s.test_operator import create, pods, read_pdb, rkc

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
    with controller_mode.processes(tmp_path_factory.mktemp("ndrain"), CLUSTER, PODS,
                                   [f"{CLUSTER}-broker-master-0", f"{CLUSTER}-broker-master-1"]) as procs:
        yield procs


@pytest.fixture(scope="module")
def drain_namespace(api: Any) -> Iterator[str]:
    with temporary_namespace(api, "nd") as name:
        yield name


@pytest.fixture(scope="module")
def wired(operator: Any, processes: Processes) -> Iterator[Processes]:
    """The test resolver maps the cluster's pods to the processes."""
    with controller_mode.wire(operator, CLUSTER, processes) as procs:
        yield procs


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


def _settled(api: Any, namespace: str) -> dict[str, Any] | None:
    """:func:`running_with_masters` with no rollout under way."""
    st = running_with_masters(api, namespace, CLUSTER)
    return st if st is not None and "rollout" not in st else None


def test_kubectl_drain_of_a_master_node_fails_no_send_and_loses_nothing(
        api: Any, drain_namespace: str, wired: Processes, operator: Any, second_node: harness.FakeKubelet,
        control_plane: harness.ControlPlane) -> None:
    ns = drain_namespace
    procs = wired
    kubectl = _kubectl()
    create(api, ns, rkc(CLUSTER, broker={"groups": 2, "replicasPerGroup": 1, "clientRouteRefreshSeconds": 3,
                                         "config": {"allAckInSyncStateSet": "true"}},
                        topics=[{"name": TOPIC, "queues": 4}]))
    st = wait_for(lambda: _settled(api, ns), 120, what="Running with each group's master known")
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
        broker.controller_id = int(run(ha_status(broker.addr))["controllerMode"]["controllerBrokerId"])
    traffic = Traffic(procs.namesrv, topic=TOPIC, group=GROUP)
    traffic.start()
    stop = threading.Event()
    kubelet = threading.Thread(target=play_kubelet, args=(api, ns, CLUSTER, procs, stop), daemon=True)
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
        st = wait_for(lambda: _settled(api, ns), 120, what="Running again, every broker in sync")
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
