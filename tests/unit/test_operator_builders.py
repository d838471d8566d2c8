"""The operator's pure parts: spec parsing, child manifests, rollout order, drain arithmetic, conditions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from rocket_operator import builders, conditions, drain, names, rollout
from rocket_operator.builders import Capabilities, Owner
from rocket_operator.reconcile import merge_patch_diff
from rocket_operator.spec import SpecError, is_paused, parse_spec

OWNER = Owner(namespace="prod", name="rc", uid="uid-1")
CRD = Path(__file__).resolve().parents[2] / "crds" / "rocketclusters.yaml"


def by_kind(children: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(c["kind"], c["metadata"]["name"]): c for c in children}


# -- spec ------------------------------------------------------------------------------------------

def test_parse_spec_defaults_match_the_crd() -> None:
    spec = parse_spec({})
    assert spec.broker.groups == 2 and spec.broker.replicas_per_group == 1
    assert spec.broker.broker_role == "ASYNC_MASTER" and spec.broker.flush_disk_type == "ASYNC_FLUSH"
    assert spec.broker.storage.size == "10Gi" and not spec.broker.storage.delete_claim.on_delete
    assert spec.name_server.replicas == 2 and spec.drain.on_timeout == "Hold" and spec.drain.timeout_seconds == 600
    crd = yaml.safe_load(CRD.read_text())
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    broker = props["broker"]["properties"]
    assert broker["groups"]["default"] == spec.broker.groups
    assert broker["replicasPerGroup"]["default"] == spec.broker.replicas_per_group
    assert broker["terminationGracePeriodSeconds"]["default"] == spec.broker.termination_grace_period_seconds
    assert props["nameServer"]["properties"]["replicas"]["default"] == spec.name_server.replicas
    assert props["drain"]["properties"]["timeoutSeconds"]["default"] == spec.drain.timeout_seconds
    assert props["image"]["default"] == spec.image


def test_crd_names_and_printer_columns() -> None:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["spec"]["group"] == "rocket.dev" and crd["spec"]["names"]["shortNames"] == ["rkc"]
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[:3] == ["NameServers", "Groups", "Phase"] and "Age" in columns
    assert "x-kubernetes-validations" not in CRD.read_text()  # no CEL: must work on 1.20


@pytest.mark.parametrize("raw, field", [
    ({"broker": {"groups": 0}}, "spec.broker.groups"),
    ({"broker": {"groups": "2"}}, "spec.broker.groups"),
    ({"broker": {"brokerRole": "SLAVE"}}, "spec.broker.brokerRole"),
    ({"broker": {"config": {"a": 1}}}, "spec.broker.config.a"),
    ({"drain": {"onTimeout": "Panic"}}, "spec.drain.onTimeout"),
    ({"topics": [{"name": "A"}, {"name": "A"}]}, "spec.topics[1].name"),
    ({"topics": [{"name": "a b"}]}, "spec.topics[0].name"),
    ({"analytics": {"jobs": [{"name": "Bad_Name", "job": "x"}]}}, "spec.analytics.jobs[0].name"),
])
def test_parse_spec_refuses_what_the_schema_refuses(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_spec(raw)


def test_pause_annotation() -> None:
    assert is_paused({"rocket.dev/paused": "true"}) and is_paused({"rocket.dev/paused": "True"})
    assert not is_paused({"rocket.dev/paused": "false"}) and not is_paused(None)


# -- children ----------------------------------------------------------------------------------------

def test_desired_children_names_kinds_and_owner_refs() -> None:
    spec = parse_spec({"broker": {"groups": 3, "replicasPerGroup": 2}})
    children = builders.desired_children(OWNER, spec)
    assert set(by_kind(children)) == {
        ("ConfigMap", "rc-broker-config"), ("Service", "rc-nameserver"), ("Service", "rc-nameserver-headless"),
        ("Service", "rc-broker"), ("Deployment", "rc-nameserver"), ("PodDisruptionBudget", "rc-nameserver"),
        ("PodDisruptionBudget", "rc-broker"), ("StatefulSet", "rc-broker-master"),
        ("StatefulSet", "rc-broker-slave-1"), ("StatefulSet", "rc-broker-slave-2"),
        ("NetworkPolicy", "rc-broker"), ("NetworkPolicy", "rc-nameserver"), ("NetworkPolicy", "rc-controller"),
    }
    for child in children:
        meta = child["metadata"]
        assert meta["namespace"] == "prod"
        assert meta["ownerReferences"] == [{"apiVersion": "rocket.dev/v1alpha1", "kind": "RocketCluster",
                                            "name": "rc", "uid": "uid-1", "controller": True,
                                            "blockOwnerDeletion": True}]
        assert meta["labels"][names.LABEL_INSTANCE] == "rc"
        assert meta["labels"][names.LABEL_MANAGED_BY] == "rocket-operator"
    # ConfigMap and Services come before the workloads that use them
    kinds = [c["kind"] for c in children]
    assert kinds.index("ConfigMap") < kinds.index("StatefulSet") and kinds.index("Service") < kinds.index("Deployment")


def test_broker_statefulsets_one_per_broker_id_ordinal_is_group() -> None:
    spec = parse_spec({"broker": {"groups": 3, "replicasPerGroup": 1, "terminationGracePeriodSeconds": 300,
                                  "storage": {"size": "50Gi", "storageClassName": "fast"}, "failover": "Manual"}})
    master = builders.build_broker_statefulset(OWNER, spec, 0, 3)
    slave = builders.build_broker_statefulset(OWNER, spec, 1, 3)
    for sts, broker_id in ((master, 0), (slave, 1)):
        s = sts["spec"]
        assert s["replicas"] == 3 and s["serviceName"] == "rc-broker"
        assert s["updateStrategy"] == {"type": "OnDelete"} and s["podManagementPolicy"] == "Parallel"
        assert s["selector"]["matchLabels"][names.LABEL_BROKER_ID] == str(broker_id)
        assert s["template"]["metadata"]["labels"][names.LABEL_BROKER_ID] == str(broker_id)
        pod = s["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] == 300
        claim = s["volumeClaimTemplates"][0]
        assert claim["metadata"]["name"] == "store" and claim["spec"]["storageClassName"] == "fast"
        assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
        container = pod["containers"][0]
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
        assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
            "remoting": 10911, "ha": 10912, "http": 10913}
        script = container["command"][-1]
        assert 'ordinal="${HOSTNAME##*-}"' in script and '--name "rc-broker-$ordinal"' in script
        assert f"--broker-id {broker_id}" in script and "--cluster rc" in script
        assert "--namesrv rc-nameserver-headless.prod.svc:9876" in script
        assert ("--role SLAVE" in script) == (broker_id == 1)
    assert master["metadata"]["name"] == "rc-broker-master" and slave["metadata"]["name"] == "rc-broker-slave-1"


def test_broker_name_from_ordinal_matches_names_module() -> None:
    # what the pod's shell computes from its hostname is what the operator calls the group
    for group in (0, 7):
        pod = names.broker_pod("rc", 1, group)
        assert pod == f"rc-broker-slave-1-{group}"
        assert f"rc-broker-{pod.rsplit('-', 1)[1]}" == names.broker_name("rc", group)
    assert names.ordinal("rc-broker-master-12") == 12
    with pytest.raises(ValueError, match="no ordinal in pod name"):
        names.ordinal("rc-nameserver")


def test_config_map_and_config_hash_roll_pods() -> None:
    spec = parse_spec({"broker": {"config": {"deleteWhen": "04", "brokerClusterName": "evil"},
                                  "flushDiskType": "SYNC_FLUSH"}})
    text = builders.build_broker_configmap(OWNER, spec)["data"]["broker.conf"]
    lines = dict(line.split("=", 1) for line in text.splitlines())
    assert lines["deleteWhen"] == "04" and lines["flushDiskType"] == "SYNC_FLUSH"
    assert lines["brokerClusterName"] == "rc"  # operator-owned keys win
    assert lines["namesrvAddr"] == "rc-nameserver-headless.prod.svc:9876"
    before = builders.build_broker_statefulset(OWNER, spec, 0, 2)
    changed = parse_spec({"broker": {"config": {"deleteWhen": "05"}, "flushDiskType": "SYNC_FLUSH"}})
    after = builders.build_broker_statefulset(OWNER, changed, 0, 2)
    key = names.ANNOTATION_CONFIG_HASH
    assert before["spec"]["template"]["metadata"]["annotations"][key] != \
        after["spec"]["template"]["metadata"]["annotations"][key]


def test_anti_affinity_per_group_on_new_servers_soft_spread_on_old() -> None:
    spec = parse_spec({})
    modern = builders.build_broker_statefulset(OWNER, spec, 1, 2, Capabilities.for_version(1, 31))
    required = modern["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert required == [{"labelSelector": {"matchLabels": {names.LABEL_INSTANCE: "rc",
                                                           names.LABEL_COMPONENT: "broker"}},
                         "matchLabelKeys": ["apps.kubernetes.io/pod-index"],
                         "topologyKey": "kubernetes.io/hostname"}]
    old = builders.build_broker_statefulset(OWNER, spec, 1, 2, Capabilities.for_version(1, 20))
    anti = old["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"] == \
        "kubernetes.io/hostname"
    none = builders.build_broker_statefulset(OWNER, parse_spec({"scheduling": {"antiAffinity": "None"}}), 0, 2)
    assert "affinity" not in none["spec"]["template"]["spec"]


def test_tolerations_node_selector_resources() -> None:
    spec = parse_spec({
        "scheduling": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "mq",
                                        "effect": "NoSchedule"}], "nodeSelector": {"pool": "mq"}},
        "broker": {"resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}},
        "nameServer": {"resources": {"requests": {"cpu": "100m"}}},
    })
    sts = builders.build_broker_statefulset(OWNER, spec, 0, 1)["spec"]["template"]["spec"]
    assert sts["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "mq", "effect": "NoSchedule"}]
    assert sts["nodeSelector"] == {"pool": "mq"}
    assert sts["containers"][0]["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"},
                                                 "limits": {"memory": "4Gi"}}
    dep = builders.build_nameserver_deployment(OWNER, spec)["spec"]["template"]["spec"]
    assert dep["containers"][0]["resources"] == {"requests": {"cpu": "100m"}}
    assert dep["nodeSelector"] == {"pool": "mq"}


def test_nameserver_deployment_and_services() -> None:
    spec = parse_spec({"nameServer": {"replicas": 3}})
    dep = builders.build_nameserver_deployment(OWNER, spec)
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][-4:] == ["--port", "9876", "--http-port", "9877"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    headless = builders.build_nameserver_headless_service(OWNER)
    client_svc = builders.build_nameserver_service(OWNER)
    assert headless["spec"]["clusterIP"] == "None" and "clusterIP" not in client_svc["spec"]
    assert headless["spec"]["selector"] == client_svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    brokers = builders.build_broker_headless_service(OWNER)
    assert brokers["spec"]["clusterIP"] == "None" and brokers["spec"]["publishNotReadyAddresses"] is True


def _assert_hardened(pod: dict[str, Any]) -> dict[str, Any]:
    """Non-root 10001, RuntimeDefault seccomp, no escalation or capabilities, read-only root
    filesystem with an emptyDir on /tmp; returns the container's mounts by path."""
    ctx = pod["securityContext"]
    assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == 10001 and ctx["runAsGroup"] == 10001
    assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    c = container["securityContext"]
    assert c["allowPrivilegeEscalation"] is False and c["readOnlyRootFilesystem"] is True
    assert c["capabilities"] == {"drop": ["ALL"]} and c["runAsNonRoot"] is True
    assert "privileged" not in c and "add" not in c["capabilities"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert set(mounts) <= {"/tmp", builders.STORE_MOUNT, builders.CONFIG_MOUNT}
    return mounts


def test_pods_run_as_non_root_with_a_read_only_root_filesystem() -> None:
    spec = parse_spec({"broker": {"groups": 2, "replicasPerGroup": 1}})
    dep = builders.build_nameserver_deployment(OWNER, spec)
    ns_pod = dep["spec"]["template"]["spec"]
    assert set(_assert_hardened(ns_pod)) == {"/tmp"}
    assert "fsGroup" not in ns_pod["securityContext"]  # no volume of its own to own
    for broker_id in (0, 1):
        sts = builders.build_broker_statefulset(OWNER, spec, broker_id, 2)
        pod = sts["spec"]["template"]["spec"]
        mounts = _assert_hardened(pod)
        # The store is the PVC of the volumeClaimTemplate, writable through fsGroup 10001.
        store = mounts[builders.STORE_MOUNT]
        assert store["name"] == sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == names.STORE_VOLUME
        assert not store.get("readOnly") and mounts[builders.CONFIG_MOUNT]["readOnly"] is True
        assert pod["securityContext"]["fsGroup"] == 10001
        assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    assert builders.STORE_MOUNT == "/var/lib/rocket/store"


def test_pdb_api_version_follows_server() -> None:
    assert builders.build_pdb(OWNER, "broker", Capabilities.for_version(1, 20))["apiVersion"] == "policy/v1beta1"
    pdb = builders.build_pdb(OWNER, "broker", Capabilities.for_version(1, 30))
    assert pdb["apiVersion"] == "policy/v1" and pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == {names.LABEL_INSTANCE: "rc", names.LABEL_COMPONENT: "broker"}


def test_builders_are_pure_and_stable() -> None:
    spec = parse_spec({"broker": {"groups": 2}})
    a = builders.desired_children(OWNER, spec)
    b = builders.desired_children(OWNER, spec)
    assert [builders.manifest_digest(x) for x in a] == [builders.manifest_digest(x) for x in b]
    shrinking = builders.desired_children(OWNER, spec, statefulset_replicas=4)
    assert by_kind(shrinking)[("StatefulSet", "rc-broker-master")]["spec"]["replicas"] == 4


# -- rollout order ---------------------------------------------------------------------------------

def view(name: str, broker_id: int, group: int, revision: str = "new", ready: bool = True) -> rollout.PodView:
    return rollout.PodView(name=name, broker_id=broker_id, group=group, revision=revision, ready=ready,
                           terminating=False)


def test_rollout_slaves_first_then_masters_one_at_a_time() -> None:
    pods = [view("m-0", 0, 0, "old"), view("m-1", 0, 1, "old"), view("s1-0", 1, 0, "old"),
            view("s1-1", 1, 1, "old"), view("s2-0", 2, 0, "old")]
    revs = {0: "new", 1: "new", 2: "new"}
    expected = {0: 2, 1: 2, 2: 1}
    decision = rollout.next_restart(pods, revs, expected, True)
    assert decision.outdated == ("s2-0", "s1-1", "s1-0", "m-1", "m-0")
    assert decision.delete is not None and decision.delete.name == "s2-0"
    # a pod not ready (e.g. the one just restarted) blocks the next deletion
    pods[4] = view("s2-0", 2, 0, "new", ready=False)
    waiting = rollout.next_restart(pods, revs, expected, True)
    assert waiting.delete is None and "s2-0" in waiting.waiting
    # slaves behind their master block it too
    pods[4] = view("s2-0", 2, 0, "new")
    assert rollout.next_restart(pods, revs, expected, False).delete is None
    # a missing pod blocks it
    assert rollout.next_restart(pods[:-1], revs, expected, True).delete is None
    # nothing outdated: nothing to do
    fresh = [view(p.name, p.broker_id, p.group) for p in pods]
    assert rollout.next_restart(fresh, revs, expected, True) == rollout.RolloutDecision((), None, "")


def test_pod_view_and_ready() -> None:
    pod = {"metadata": {"name": "rc-broker-slave-1-3", "uid": "u",
                        "labels": {names.LABEL_COMPONENT: "broker", names.LABEL_BROKER_ID: "1",
                                   names.LABEL_REVISION: "rev-1"}},
           "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    v = rollout.pod_view(pod)
    assert v == rollout.PodView("rc-broker-slave-1-3", 1, 3, "rev-1", True, False, "u")
    pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    assert not rollout.pod_ready(pod)
    assert rollout.pod_view({"metadata": {"name": "x", "labels": {names.LABEL_COMPONENT: "nameserver"}}}) is None


# -- drain arithmetic ------------------------------------------------------------------------------

def test_statefulsets_shrink_only_past_drained_groups_from_the_top() -> None:
    assert drain.statefulset_replicas(0, 3, {}) == 3  # creation
    assert drain.statefulset_replicas(2, 4, {}) == 4  # scale-out is immediate
    waiting = {3: {"state": drain.WAITING}, 2: {"state": drain.DRAINED}}
    assert drain.statefulset_replicas(4, 2, waiting) == 4  # the top one still drains: nothing shrinks
    top_done = {3: {"state": drain.DRAINED}, 2: {"state": drain.WAITING}}
    assert drain.statefulset_replicas(4, 2, top_done) == 3
    both = {3: {"state": drain.REMOVING}, 2: {"state": drain.DRAINED}}
    assert drain.statefulset_replicas(4, 2, both) == 2
    held = {1: {"state": drain.HELD}}
    assert drain.statefulset_replicas(2, 1, held) == 2
    assert drain.leaving_groups(4, 2) == [3, 2]
    assert drain.by_index([{"index": 2, "state": "Held"}, {"bogus": 1}]) == {2: {"index": 2, "state": "Held"}}
    assert drain.summarize_lag({"a@g": 1, "b@g": 5, "c@g": 3}, limit=2) == {"b@g": 5, "c@g": 3}


# -- conditions and status patches -----------------------------------------------------------------

def test_conditions_keep_transition_time_while_status_is_unchanged() -> None:
    first = conditions.merge_conditions(None, [conditions.condition("Ready", False, "NotReady", "x")], 1,
                                        now="2024-01-01T00:00:00Z")
    assert first[0]["lastTransitionTime"] == "2024-01-01T00:00:00Z" and first[0]["observedGeneration"] == 1
    same = conditions.merge_conditions(first, [conditions.condition("Ready", False, "NotReady", "y")], 2,
                                       now="2024-01-02T00:00:00Z")
    assert same[0]["lastTransitionTime"] == "2024-01-01T00:00:00Z" and same[0]["observedGeneration"] == 2
    flipped = conditions.merge_conditions(same, [conditions.condition("Ready", True, "ClusterReady")], 2,
                                          now="2024-01-03T00:00:00Z")
    assert flipped[0]["status"] == "True" and flipped[0]["lastTransitionTime"] == "2024-01-03T00:00:00Z"
    assert conditions.condition("Paused", None, "Unknown")["status"] == "Unknown"


def test_merge_patch_diff() -> None:
    old = {"phase": "Running", "rollout": {"restarting": "a", "outdatedPods": ["a"]}, "drain": [{"index": 1}]}
    new = {"phase": "Running", "rollout": {"outdatedPods": ["b"]}}
    assert merge_patch_diff(old, new) == {"rollout": {"restarting": None, "outdatedPods": ["b"]}, "drain": None}
    assert merge_patch_diff(new, new) == {}


# -- the manifests against current Kubernetes schemas (offline) ------------------------------------

@pytest.mark.parametrize("version", ["1.25.0", "1.37.0"])
def test_children_and_crd_validate_against_current_kubernetes(version: str) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    minor = int(version.split(".")[1])
    caps = Capabilities.for_version(1, minor)
    spec = parse_spec({
        "broker": {"groups": 2, "replicasPerGroup": 2, "resources": {"requests": {"cpu": "1"}},
                   "storage": {"storageClassName": "fast"}},
        "scheduling": {"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                       "nodeSelector": {"pool": "mq"}},
    })
    for child in builders.desired_children(OWNER, spec, caps=caps):
        kv.validate(child, version, strict=True)
    kv.validate(yaml.safe_load(CRD.read_text()), version, strict=True)


@pytest.mark.parametrize("config", [
    {"deleteWhen": "04\nbrokerClusterName=other"},  # a second line would override an operator key
    {"deleteWhen": "04\rlistenPort=1"},
    {"msgTraceTopicName": "a\\b"},  # a Properties escape
    {"listenPort 1": "x"},  # a space ends the key in broker.conf
    {"x=y": "1"},
])
def test_broker_config_entries_cannot_inject_lines(config: dict[str, str]) -> None:
    """Found while deriving the exploration test's config strategy from the CRD (any string is allowed):
    spec.broker.config entries went into broker.conf verbatim, so a line break in a value added or
    overrode any key, the operator's own ones included."""
    with pytest.raises(SpecError, match=r"spec\.broker\.config"):
        parse_spec({"broker": {"config": config}})
    assert parse_spec({"broker": {"config": {"deleteWhen": "04", "fileReservedTime": "48"}}}).broker.config == {
        "deleteWhen": "04", "fileReservedTime": "48"}


@pytest.mark.parametrize("value", ["04", "a=b:c d", "", "a\\b", "04\nx=1", "04\rx", "a\fb", "\\"])
def test_crd_refuses_the_broker_config_values_the_operator_refuses(value: str) -> None:
    """The CRD's value pattern for spec.broker.config (enforced by the API server, a 422 at apply time)
    and parse_spec (for a cluster still serving an older CRD) refuse the same values. Found when the
    exploration test drew a backslash the schema let through and the cluster settled Invalid."""
    schema = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    pattern = schema["properties"]["spec"]["properties"]["broker"]["properties"]["config"][
        "additionalProperties"]["pattern"]
    by_schema = re.fullmatch(pattern, value) is not None
    try:
        parse_spec({"broker": {"config": {"deleteWhen": value}}})
        by_operator = True
    except SpecError:
        by_operator = False
    assert by_schema == by_operator, f"{value!r}: schema accepts {by_schema}, operator accepts {by_operator}"
    assert by_schema == (value in ("04", "a=b:c d", ""))
