"""rocket_operator against a real kube-apiserver 1.20 + controllers, with kopf running for real.

No brokers here: NameServers and brokers are reached through the test
resolver and answered by :class:`tests.k8s.fakes.FakeAdmin`; pods become Ready
through the fake kubelet. ``test_drain_real.py`` does the drain with real
processes.
"""

from __future__ import annotations

import re
import time
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.k8s.harness import wait_for

GROUP, VERSION, PLURAL = "rocket.dev", "v1alpha1", "rocketclusters"


def rkc(name: str, **spec: Any) -> dict[str, Any]:
    """A RocketCluster manifest."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RocketCluster", "metadata": {"name": name}, "spec": spec}


def create(api: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def get(api: Any, namespace: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def patch(api: Any, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    return client.CustomObjectsApi(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body)


def status(api: Any, namespace: str, name: str) -> dict[str, Any]:
    return get(api, namespace, name).get("status") or {}


def condition(st: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c["type"] == type_), {})


def sts_replicas(api: Any, namespace: str, name: str) -> int:
    return int(client.AppsV1Api(api).read_namespaced_stateful_set(name, namespace).spec.replicas)


def pods(api: Any, namespace: str, selector: str = "app.kubernetes.io/component=broker") -> dict[str, Any]:
    items = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    return {p.metadata.name: p for p in items}


def read_pdb(api: Any, namespace: str, name: str) -> Any:
    """A PodDisruptionBudget (policy/v1, or policy/v1beta1 on 1.20) as an attribute-style object."""
    objects = client.CustomObjectsApi(api)
    try:
        raw = objects.get_namespaced_custom_object("policy", "v1", namespace, "poddisruptionbudgets", name)
    except ApiException as exc:
        if exc.status != 404:
            raise
        raw = objects.get_namespaced_custom_object("policy", "v1beta1", namespace, "poddisruptionbudgets", name)
    assert raw["spec"]["maxUnavailable"] == 1
    refs = [SimpleNamespace(uid=r["uid"], kind=r["kind"], controller=r.get("controller"))
            for r in raw["metadata"].get("ownerReferences") or []]
    return SimpleNamespace(metadata=SimpleNamespace(owner_references=refs))


# -- CRD validation ----------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, message", [
    ({"broker": {"groups": 0}}, "spec.broker.groups"),
    ({"broker": {"groups": 65}}, "spec.broker.groups"),
    ({"broker": {"replicasPerGroup": -1}}, "spec.broker.replicasPerGroup"),
    ({"broker": {"brokerRole": "SLAVE"}}, "spec.broker.brokerRole"),
    ({"broker": {"flushDiskType": "SOMETIMES"}}, "spec.broker.flushDiskType"),
    ({"broker": {"storage": {"size": "ten gigs"}}}, "spec.broker.storage.size"),
    ({"broker": {"config": {"deleteWhen": 4}}}, "spec.broker.config"),
    ({"nameServer": {"replicas": 0}}, "spec.nameServer.replicas"),
    ({"imagePullPolicy": "Sometimes"}, "spec.imagePullPolicy"),
    ({"drain": {"onTimeout": "Panic"}}, "spec.drain.onTimeout"),
    ({"drain": {"timeoutSeconds": -5}}, "spec.drain.timeoutSeconds"),
    ({"scheduling": {"antiAffinity": "Maybe"}}, "spec.scheduling.antiAffinity"),
    ({"topics": [{"name": "A"}, {"name": "A"}]}, "spec.topics[1]"),
    ({"topics": [{"name": "bad topic!"}]}, "spec.topics*.name"),
    ({"topics": [{"name": "T", "perm": 7}]}, "spec.topics*.perm"),
    ({"topics": [{"name": "T", "queues": 0}]}, "spec.topics*.queues"),
    ({"analytics": {"jobs": [{"name": "j"}]}}, "spec.analytics.jobs*.job"),
    ({"analytics": {"jobs": [{"name": "j", "job": "x", "schedule": "every day"}]}}, "schedule"),
    ({"broker": {"config": {"deleteWhen": "04\nbrokerClusterName=other"}}}, "spec.broker.config.deleteWhen"),
    ({"broker": {"config": {"msgTraceTopicName": "a\\b"}}}, "spec.broker.config.msgTraceTopicName"),
])
def test_crd_refuses_invalid_specs(api: Any, namespace: str, spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiException) as info:
        create(api, namespace, rkc("bad", **spec))
    assert info.value.status == 422
    # list items are reported as "spec.topics.name" (1.20) or "spec.topics[0].name" (newer)
    pattern = re.escape(message).replace(r"\*", r"(\[\d+\])?")
    assert re.search(pattern, info.value.body), info.value.body


def test_crd_refuses_long_names_and_fills_defaults(api: Any, namespace: str) -> None:
    with pytest.raises(ApiException) as info:
        create(api, namespace, rkc("x" * 37))
    assert info.value.status == 422 and "metadata.name" in info.value.body
    body = rkc("defaults")
    body.pop("spec")
    created = create(api, namespace, body)
    spec = created["spec"]
    assert spec["broker"]["groups"] == 2 and spec["broker"]["replicasPerGroup"] == 1
    assert spec["broker"]["storage"] == {"size": "10Gi", "deleteClaim": {"onScaleIn": False, "onDelete": False}}
    assert spec["drain"] == {"timeoutSeconds": 600, "onTimeout": "Hold"}
    assert spec["nameServer"]["replicas"] == 2 and spec["scheduling"]["antiAffinity"] == "Required"
    analytics = create(api, namespace, rkc("jobs", analytics={"jobs": [
        {"name": "daily", "job": "logs", "topics": ["A"], "schedule": "0 3 * * *"},
        {"name": "once", "job": "traffic", "topics": ["A"]}]}))
    assert [j["name"] for j in analytics["spec"]["analytics"]["jobs"]] == ["daily", "once"]


# -- children, status, scale-out ---------------------------------------------------------------------

def test_children_status_and_scale_out(api: Any, namespace: str, operator: Any) -> None:
    started = time.monotonic()
    cr = create(api, namespace, rkc("demo", broker={"groups": 2, "replicasPerGroup": 1, "config": {"a": "1"},
                                                    "failover": "Manual"},
                                    topics=[{"name": "TopicA", "queues": 4}]))
    uid = cr["metadata"]["uid"]
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)

    def children() -> list[Any]:
        return [apps.read_namespaced_deployment("demo-nameserver", namespace),
                core.read_namespaced_service("demo-nameserver", namespace),
                core.read_namespaced_service("demo-nameserver-headless", namespace),
                core.read_namespaced_service("demo-broker", namespace),
                core.read_namespaced_config_map("demo-broker-config", namespace),
                apps.read_namespaced_stateful_set("demo-broker-master", namespace),
                apps.read_namespaced_stateful_set("demo-broker-slave-1", namespace),
                read_pdb(api, namespace, "demo-broker"),
                read_pdb(api, namespace, "demo-nameserver")]

    objs = wait_for(children, 20, what="all children")
    elapsed = time.monotonic() - started
    assert elapsed < 10, f"children took {elapsed:.1f} s"
    for obj in objs:
        refs = obj.metadata.owner_references
        assert refs and refs[0].uid == uid and refs[0].kind == "RocketCluster" and refs[0].controller
    master = objs[5]
    assert master.spec.update_strategy.type == "OnDelete"
    assert master.spec.service_name == "demo-broker" and master.spec.replicas == 2
    assert master.spec.volume_claim_templates[0].spec.resources.requests["storage"] == "10Gi"
    container = master.spec.template.spec.containers[0]
    assert container.readiness_probe.http_get.path == "/readyz"
    assert container.liveness_probe.http_get.path == "/healthz"
    assert 'demo-broker-$ordinal' in container.command[-1] and "--broker-id 0" in container.command[-1]
    assert "--role SLAVE" in objs[6].spec.template.spec.containers[0].command[-1]
    assert "a=1" in objs[4].data["broker.conf"]
    assert objs[2].spec.cluster_ip == "None"

    # pods become Ready (fake kubelet), PVCs bind, groups register (fake admin): Running + Ready
    def running() -> dict[str, Any] | None:
        st = status(api, namespace, "demo")
        return st if st.get("phase") == "Running" else None

    st = wait_for(running, 45, what="phase Running")
    assert condition(st, "Ready")["status"] == "True"
    assert condition(st, "Ready")["observedGeneration"] == cr["metadata"]["generation"]
    assert condition(st, "Progressing")["status"] == "False"
    assert st["nameServersReady"] == "2/2" and st["brokerGroupsReady"] == "2/2"
    assert [g["name"] for g in st["brokerGroups"]] == ["demo-broker-0", "demo-broker-1"]
    assert all(g["registered"] and g["writable"] and g["metadataSynced"] for g in st["brokerGroups"])
    pvcs = core.list_namespaced_persistent_volume_claim(namespace).items
    assert sorted(p.metadata.name for p in pvcs) == [
        "store-demo-broker-master-0", "store-demo-broker-master-1",
        "store-demo-broker-slave-1-0", "store-demo-broker-slave-1-1"]
    wait_for(lambda: all(p.status.phase == "Bound" for p in core.list_namespaced_persistent_volume_claim(
        namespace).items), 20, what="PVCs bound")
    fake = operator.fake
    assert ("create_topics", "demo-broker-0", (("TopicA", 4, 6),)) in fake.calls_of("create_topics")

    # scale out 2 -> 3: a new pod per StatefulSet, new PVCs, metadata copied from an existing master
    kubelet_pods_before = set(pods(api, namespace))
    patch(api, namespace, "demo", {"spec": {"broker": {"groups": 3}}})
    wait_for(lambda: {"demo-broker-master-2", "demo-broker-slave-1-2"} <= set(pods(api, namespace)), 20,
             what="new pods")
    assert kubelet_pods_before < set(pods(api, namespace))
    st = wait_for(lambda: (s := status(api, namespace, "demo")).get("brokerGroupsReady") == "3/3"
                  and s.get("phase") == "Running" and s, 45, what="3 groups ready")
    group2 = st["brokerGroups"][2]
    assert group2["metadataSynced"] and group2["metadataSource"] in ("demo-broker-0", "demo-broker-1")
    assert ("copy_metadata", group2["metadataSource"], "demo-broker-2") in fake.calls_of("copy_metadata")
    wait_for(lambda: {"store-demo-broker-master-2", "store-demo-broker-slave-1-2"}
             <= {p.metadata.name for p in core.list_namespaced_persistent_volume_claim(namespace).items}, 10,
             what="new PVCs")

    # the operator's own endpoint
    import urllib.request

    port = operator.http_port()
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "rocket_operator_reconciles_total" in text
    assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).status == 200


# -- rolling restart -----------------------------------------------------------------------------

def test_rolling_restart_slaves_before_masters_one_at_a_time(api: Any, namespace: str, operator: Any) -> None:
    # failover: Manual keeps roles by brokerId (test_failover_operator.py rolls by actual role)
    create(api, namespace, rkc("roll", broker={"groups": 2, "replicasPerGroup": 1, "failover": "Manual"}))
    wait_for(lambda: status(api, namespace, "roll").get("phase") == "Running", 45, what="Running")
    before = {name: p.metadata.uid for name, p in pods(api, namespace).items()}
    patch(api, namespace, "roll", {"spec": {"image": "rocketcluster/rocket:0.1.1"}})
    order: list[str] = []
    seen_not_ready: list[int] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(order) < 4:
        current = pods(api, namespace)
        for name, uid in before.items():
            pod = current.get(name)
            if name not in order and (pod is None or pod.metadata.uid != uid or pod.metadata.deletion_timestamp):
                order.append(name)
        # never more than one broker pod down at a time
        down = [n for n in before if n not in current or current[n].metadata.deletion_timestamp
                or not any(c.type == "Ready" and c.status == "True" for c in (current[n].status.conditions or []))]
        seen_not_ready.append(len(down))
        time.sleep(0.05)
    assert order == ["roll-broker-slave-1-1", "roll-broker-slave-1-0", "roll-broker-master-1",
                     "roll-broker-master-0"]
    assert max(seen_not_ready) <= 1
    final = wait_for(lambda: (s := status(api, namespace, "roll")).get("phase") == "Running" and s, 30,
                     what="Running after the roll")
    assert "rollout" not in final
    for pod in pods(api, namespace).values():
        assert pod.spec.containers[0].image == "rocketcluster/rocket:0.1.1"


# -- scale-in drain (fake admin): resumable, hold, force ------------------------------------------

def test_scale_in_drain_is_resumable_and_holds_until_empty(api: Any, namespace: str, operator: Any) -> None:
    fake = operator.fake
    create(api, namespace, rkc("shrink", broker={"groups": 3, "replicasPerGroup": 0,
                                                 "storage": {"deleteClaim": {"onScaleIn": True}}},
                               drain={"timeoutSeconds": 3600}))
    wait_for(lambda: status(api, namespace, "shrink").get("phase") == "Running", 45, what="Running")
    fake.pending["shrink-broker-2"] = 7
    patch(api, namespace, "shrink", {"spec": {"broker": {"groups": 2}}})

    def waiting() -> dict[str, Any] | None:
        st = status(api, namespace, "shrink")
        recs = st.get("drain") or []
        return st if recs and recs[0].get("state") == "WaitingForConsumers" and recs[0].get("pendingMessages") == 7 \
            else None

    st = wait_for(waiting, 20, what="drain waiting for consumers")
    assert st["phase"] == "Draining" and condition(st, "Draining")["status"] == "True"
    assert ("set_write_permission", "shrink-broker-2", False) in fake.calls_of("set_write_permission")
    started_at = st["drain"][0]["startedAt"]
    assert sts_replicas(api, namespace, "shrink-broker-master") == 3  # nothing removed while messages are pending

    operator.runner.restart()  # an operator restart mid-drain carries on where it was
    time.sleep(2)
    st = status(api, namespace, "shrink")
    assert st["drain"][0]["state"] == "WaitingForConsumers" and st["drain"][0]["startedAt"] == started_at
    assert sts_replicas(api, namespace, "shrink-broker-master") == 3
    assert len([c for c in fake.calls_of("set_write_permission") if c[1] == "shrink-broker-2"]) == 1

    fake.pending["shrink-broker-2"] = 0  # consumers caught up
    wait_for(lambda: sts_replicas(api, namespace, "shrink-broker-master") == 2, 20, what="StatefulSet shrunk")
    st = wait_for(lambda: (s := status(api, namespace, "shrink")).get("phase") == "Running" and s, 30,
                  what="Running after the scale-in")
    assert "drain" not in st and [g["name"] for g in st["brokerGroups"]] == ["shrink-broker-0", "shrink-broker-1"]
    assert ("unregister", "shrink-broker-2") in fake.calls_of("unregister")
    assert "shrink-broker-master-2" not in pods(api, namespace)
    core = client.CoreV1Api(api)
    wait_for(lambda: "store-shrink-broker-master-2" not in {
        p.metadata.name for p in core.list_namespaced_persistent_volume_claim(namespace).items}, 20,
        what="PVC of the removed group deleted (deleteClaim.onScaleIn)")


def test_drain_timeout_holds_then_force(api: Any, namespace: str, operator: Any) -> None:
    fake = operator.fake
    create(api, namespace, rkc("hold", broker={"groups": 2, "replicasPerGroup": 0}, drain={"timeoutSeconds": 1}))
    wait_for(lambda: status(api, namespace, "hold").get("phase") == "Running", 45, what="Running")
    fake.pending["hold-broker-1"] = 3
    patch(api, namespace, "hold", {"spec": {"broker": {"groups": 1}}})
    st = wait_for(lambda: (s := status(api, namespace, "hold")).get("phase") == "Degraded" and s, 20,
                  what="drain held")
    assert st["drain"][0]["state"] == "Held" and st["drain"][0]["pendingMessages"] == 3
    assert condition(st, "Degraded")["status"] == "True" and condition(st, "Degraded")["reason"] == "DrainHeld"
    time.sleep(1.5)
    assert sts_replicas(api, namespace, "hold-broker-master") == 2  # never loses data silently
    core = client.CoreV1Api(api)
    patch(api, namespace, "hold", {"spec": {"drain": {"onTimeout": "Force"}}})
    wait_for(lambda: sts_replicas(api, namespace, "hold-broker-master") == 1, 20, what="forced removal")
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=hold").items
    assert any(e.reason == "DrainForced" for e in events)
    st = wait_for(lambda: (s := status(api, namespace, "hold")).get("phase") == "Running" and s, 30,
                  what="Running")
    assert condition(st, "Degraded")["status"] == "False"
    # kept by default: the PVC of the removed group stays
    assert "store-hold-broker-master-1" in {p.metadata.name for p in
                                            core.list_namespaced_persistent_volume_claim(namespace).items}


def test_scale_in_cancelled_restores_write_permission(api: Any, namespace: str, operator: Any) -> None:
    fake = operator.fake
    create(api, namespace, rkc("undo", broker={"groups": 2, "replicasPerGroup": 0}))
    wait_for(lambda: status(api, namespace, "undo").get("phase") == "Running", 45, what="Running")
    fake.pending["undo-broker-1"] = 5
    patch(api, namespace, "undo", {"spec": {"broker": {"groups": 1}}})
    wait_for(lambda: (status(api, namespace, "undo").get("drain") or [{}])[0].get("state") == "WaitingForConsumers",
             20, what="draining")
    patch(api, namespace, "undo", {"spec": {"broker": {"groups": 2}}})
    st = wait_for(lambda: (s := status(api, namespace, "undo")).get("phase") == "Running" and s, 20,
                  what="Running again")
    assert "drain" not in st and st["brokerGroups"][1]["writable"]
    assert ("set_write_permission", "undo-broker-1", True) in fake.calls_of("set_write_permission")
    assert sts_replicas(api, namespace, "undo-broker-master") == 2


# -- pause, deletion -----------------------------------------------------------------------------

def test_pause_annotation_stops_reconciliation(api: Any, namespace: str, operator: Any) -> None:
    create(api, namespace, rkc("paused", broker={"groups": 1, "replicasPerGroup": 0}))
    wait_for(lambda: status(api, namespace, "paused").get("phase") == "Running", 45, what="Running")
    patch(api, namespace, "paused", {"metadata": {"annotations": {"rocket.dev/paused": "true"}}})
    wait_for(lambda: status(api, namespace, "paused").get("phase") == "Paused", 20, what="Paused")
    patch(api, namespace, "paused", {"spec": {"broker": {"groups": 2}}})
    time.sleep(2)
    st = status(api, namespace, "paused")
    assert condition(st, "Paused")["status"] == "True"
    assert sts_replicas(api, namespace, "paused-broker-master") == 1
    patch(api, namespace, "paused", {"metadata": {"annotations": {"rocket.dev/paused": None}}})
    wait_for(lambda: sts_replicas(api, namespace, "paused-broker-master") == 2, 20, what="resumed scale-out")
    st = wait_for(lambda: (s := status(api, namespace, "paused")).get("phase") == "Running" and s, 30,
                  what="Running")
    assert condition(st, "Paused")["status"] == "False"


def test_deleting_the_cluster_removes_children_and_owned_claims(api: Any, namespace: str, operator: Any) -> None:
    create(api, namespace, rkc("gone", broker={"groups": 1, "replicasPerGroup": 1,
                                               "storage": {"deleteClaim": {"onDelete": True}}}))
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    wait_for(lambda: status(api, namespace, "gone").get("phase") == "Running", 45, what="Running")
    wait_for(lambda: all(any(r.kind == "RocketCluster" for r in (p.metadata.owner_references or []))
                         for p in core.list_namespaced_persistent_volume_claim(namespace).items), 20,
             what="PVCs owned by the RocketCluster")
    client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gone")

    def all_gone() -> bool:
        return not (apps.list_namespaced_stateful_set(namespace).items
                    or apps.list_namespaced_deployment(namespace).items
                    or core.list_namespaced_service(namespace).items
                    or [c for c in core.list_namespaced_config_map(namespace).items
                        if c.metadata.name != "kube-root-ca.crt"]
                    or core.list_namespaced_pod(namespace).items
                    or core.list_namespaced_persistent_volume_claim(namespace).items)

    wait_for(all_gone, 60, what="garbage collection of every child")
