"""The exploring test of RocketCluster spec changes (:mod:`tests.k8s.explore`).

``make test`` runs one short sequence (``EXPLORE_STEPS``, default 4 rules after the create);
``make explore`` a long one (``EXPLORE_STEPS`` rules per sequence, ``EXPLORE_EXAMPLES`` sequences).
The seed (``EXPLORE_SEED``, random by default) is printed first: run again with it to replay.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

from tests.k8s import explore, harness


def test_explore_spec_changes(api: Any, operator: Any, namespace: str) -> None:
    steps = int(os.environ.get("EXPLORE_STEPS", "4"))
    examples = int(os.environ.get("EXPLORE_EXAMPLES", "1"))
    seed = int(os.environ.get("EXPLORE_SEED") or random.randrange(2**32))
    explore.say(f"\nexplore: EXPLORE_SEED={seed} EXPLORE_STEPS={steps} EXPLORE_EXAMPLES={examples}")
    harness.install_spark_crds(api)
    started = time.monotonic()
    with explore.OperatorLog.installed() as log:
        env = explore.Env(api=api, namespace=namespace, log=log)
        try:
            explore.run(env, steps=steps, seed=seed, examples=examples)
        except BaseException:
            explore.say(f"explore: FAILED after {env.steps} steps; replay with EXPLORE_SEED={seed} "
                  f"EXPLORE_STEPS={steps} EXPLORE_EXAMPLES={examples}")
            raise
    explore.say(f"explore: {env.steps} steps in {time.monotonic() - started:.0f} s, seed {seed}")
    assert env.steps >= 1


# -- regressions of failures the exploration found ----------------------------------------------------

def delete_and_wait(api: Any, namespace: str, name: str, timeout: float = 30) -> None:
    """Delete RocketCluster ``name`` and wait until it is gone (its finalizer done; its children may
    still be waiting for the garbage collector). Raises ``AssertionError`` after ``timeout`` s."""
    from kubernetes import client

    from tests.k8s.harness import wait_for
    from tests.k8s.test_operator import get

    client.CustomObjectsApi(api).delete_namespaced_custom_object(explore.GROUP, explore.VERSION, namespace,
                                                                 explore.PLURAL, name)

    def gone() -> bool:
        try:
            get(api, namespace, name)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout, what=f"the RocketCluster {name} deleted")


def test_storage_size_up_recreates_statefulsets_and_expands_claims(api: Any, operator: Any, namespace: str) -> None:
    """Found by the exploration (seed 20261125, step 2): a larger spec.broker.storage.size made every
    pass fail with 422 (volumeClaimTemplates are immutable) and the status never caught up."""
    from kubernetes import client

    from tests.k8s.harness import wait_for
    from tests.k8s.test_operator import create, patch, pods, rkc, status

    explore.ensure_storage(api)
    create(api, namespace, rkc("grow", broker={"groups": 1, "replicasPerGroup": 1, "storage": {
        "size": "1Gi", "storageClassName": explore.STORAGE_CLASS}}, nameServer={"replicas": 1}))
    wait_for(lambda: status(api, namespace, "grow").get("phase") == "Running", 45, what="Running")
    before = {n: p.metadata.uid for n, p in pods(api, namespace).items()}
    cr = patch(api, namespace, "grow", {"spec": {"broker": {"storage": {"size": "2Gi"}}}})
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)

    def grown() -> bool:
        st = status(api, namespace, "grow")
        sizes = {s.metadata.name: s.spec.volume_claim_templates[0].spec.resources.requests["storage"]
                 for s in apps.list_namespaced_stateful_set(namespace).items if "-broker-" in s.metadata.name}
        # the brokers' claims (failover: Controller adds the controllers' own, which keep their size)
        claims = {p.metadata.name: p.spec.resources.requests["storage"]
                  for p in core.list_namespaced_persistent_volume_claim(namespace).items
                  if p.metadata.name.startswith("store-")}
        return (st.get("observedGeneration") == cr["metadata"]["generation"] and st.get("phase") == "Running"
                and sizes == {"grow-broker-master": "2Gi", "grow-broker-slave-1": "2Gi"}
                and claims == {"store-grow-broker-master-0": "2Gi", "store-grow-broker-slave-1-0": "2Gi"})

    wait_for(grown, 60, what="StatefulSets re-created with 2Gi and the PVCs expanded")
    assert {n: p.metadata.uid for n, p in pods(api, namespace).items()} == before, "broker pods were restarted"


def test_recreate_at_once_under_the_same_name_gets_every_child(api: Any, operator: Any, namespace: str) -> None:
    """Found by the exploration (a sequence re-creating the cluster as soon as the old object was gone):
    the new cluster's first apply took over old children the garbage collector was deleting, the
    deletion then completed (broker ConfigMap, broker PDB gone), and the operator's apply cache kept
    the new cluster without them for REAPPLY_SECONDS (120 s). Made deterministic here: a finalizer
    holds the old broker ConfigMap in deletion until the new cluster exists."""
    from kubernetes import client

    from tests.k8s.harness import wait_for
    from tests.k8s.test_operator import create, get, rkc, status

    core = client.CoreV1Api(api)
    spec = {"broker": {"groups": 1, "replicasPerGroup": 0}, "nameServer": {"replicas": 1}}
    create(api, namespace, rkc("again", **spec))
    wait_for(lambda: status(api, namespace, "again").get("phase") == "Running", 45, what="Running")
    hold = {"metadata": {"finalizers": ["test.rocket.dev/hold"]}}
    core.patch_namespaced_config_map("again-broker-config", namespace, hold)
    delete_and_wait(api, namespace, "again")
    wait_for(lambda: core.read_namespaced_config_map("again-broker-config", namespace).metadata.deletion_timestamp,
             30, what="the garbage collector deleting the old broker ConfigMap")
    uid = create(api, namespace, rkc("again", **spec))["metadata"]["uid"]
    time.sleep(3.0)  # the new cluster's first passes run while the old ConfigMap is still there
    core.patch_namespaced_config_map("again-broker-config", namespace, {"metadata": {"finalizers": None}})
    env = explore.Env(api=api, namespace=namespace, log=explore.OperatorLog())
    explore.SpecExplorer.ENV = env
    machine = explore.SpecExplorer()
    machine.NAME, machine.uid, machine.spec = "again", uid, get(api, namespace, "again")["spec"]
    wait_for(lambda: status(api, namespace, "again").get("phase") == "Running"
             and not machine.children_problems(machine.spec), 30, what="every child of the new cluster")


def test_recreate_while_owned_claims_are_still_being_deleted(api: Any, operator: Any, namespace: str) -> None:
    """Found by the exploration (seed 2100862766, step 5): deleted with deleteClaim.onDelete and
    re-created under the same name while a PVC of the old cluster was still in deletion, every pass
    failed: the operator added its controller reference beside the old one and the API server
    refused it (422 "Only one reference can have Controller set to true"). Made deterministic here:
    a finalizer holds the old PVC in deletion until the new cluster is Running."""
    from kubernetes import client

    from tests.k8s.harness import wait_for
    from tests.k8s.test_operator import condition, create, rkc, status

    core = client.CoreV1Api(api)
    spec = {"broker": {"groups": 1, "replicasPerGroup": 0, "storage": {"deleteClaim": {"onDelete": True}}},
            "nameServer": {"replicas": 1}}
    claim = "store-held-broker-master-0"
    with explore.OperatorLog.installed() as log:
        old = create(api, namespace, rkc("held", **spec))["metadata"]["uid"]
        wait_for(lambda: any(r.uid == old for r in core.read_namespaced_persistent_volume_claim(
            claim, namespace).metadata.owner_references or []), 45, what="the PVC owned by the cluster")
        core.patch_namespaced_persistent_volume_claim(claim, namespace,
                                                      {"metadata": {"finalizers": ["test.rocket.dev/hold"]}})
        delete_and_wait(api, namespace, "held")
        wait_for(lambda: core.read_namespaced_persistent_volume_claim(claim, namespace).metadata.deletion_timestamp,
                 30, what="the garbage collector deleting the old PVC")
        new = create(api, namespace, rkc("held", **spec))["metadata"]["uid"]
        time.sleep(5.0)  # passes over the held PVC (the StatefulSet makes no pod while its PVC is going)
        errors = log.take()
        held = core.read_namespaced_persistent_volume_claim(claim, namespace)
        assert [r.uid for r in held.metadata.owner_references or []] == [old], "a PVC in deletion was re-owned"
        core.patch_namespaced_persistent_volume_claim(claim, namespace, {"metadata": {"finalizers": None}})
        st = wait_for(lambda: (s := status(api, namespace, "held")).get("phase") == "Running" and s, 60,
                      what="Running")
        # failover: Controller (the default): its Raft PVCs (1Gi) are not expanded to the brokers' 10Gi
        assert condition(st, "Progressing")["status"] == "False", condition(st, "Progressing")
        wait_for(lambda: [r.uid for r in core.read_namespaced_persistent_volume_claim(
            claim, namespace).metadata.owner_references or []] == [new], 30,
                 what="the new PVC owned by the new cluster")
        errors += log.take()
    assert not errors, "the operator logged errors:\n" + "\n".join(errors)


def test_network_policies_off_removes_them(api: Any, operator: Any, namespace: str) -> None:
    """Found by the exploration (seed 20261125, second sequence): with
    spec.security.networkPolicies.enabled set to false the operator stopped applying the three
    NetworkPolicies but left them in place, still restricting the pods."""
    from kubernetes import client

    from tests.k8s.harness import wait_for
    from tests.k8s.test_operator import create, patch, rkc, status

    net = client.NetworkingV1Api(api)
    create(api, namespace, rkc("open", broker={"groups": 1, "replicasPerGroup": 0}, nameServer={"replicas": 1}))
    wait_for(lambda: status(api, namespace, "open").get("phase") == "Running", 45, what="Running")
    assert sorted(p.metadata.name for p in net.list_namespaced_network_policy(namespace).items) == [
        "open-broker", "open-controller", "open-nameserver"]
    patch(api, namespace, "open", {"spec": {"security": {"networkPolicies": {"enabled": False}}}})
    wait_for(lambda: not net.list_namespaced_network_policy(namespace).items, 20, what="the NetworkPolicies removed")
    patch(api, namespace, "open", {"spec": {"security": {"networkPolicies": {"enabled": True}}}})
    wait_for(lambda: len(net.list_namespaced_network_policy(namespace).items) == 3, 20,
             what="the NetworkPolicies back")
