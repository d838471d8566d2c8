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
                 for s in apps.list_namespaced_stateful_set(namespace).items}
        claims = {p.metadata.name: p.spec.resources.requests["storage"]
                  for p in core.list_namespaced_persistent_volume_claim(namespace).items}
        return (st.get("observedGeneration") == cr["metadata"]["generation"] and st.get("phase") == "Running"
                and sizes == {"grow-broker-master": "2Gi", "grow-broker-slave-1": "2Gi"}
                and claims == {"store-grow-broker-master-0": "2Gi", "store-grow-broker-slave-1-0": "2Gi"})

    wait_for(grown, 60, what="StatefulSets re-created with 2Gi and the PVCs expanded")
    assert {n: p.metadata.uid for n, p in pods(api, namespace).items()} == before, "broker pods were restarted"
