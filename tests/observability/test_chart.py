"""The Helm chart charts/rocketcluster-operator, offline: `helm lint` and `helm template` with a
real helm, `kubernetes-validate --strict` on what it renders, the pod security baseline, RBAC that
covers exactly what the operator manages, monitors gated on the Prometheus Operator's API, the
dashboards' ConfigMaps, and the chart's CRD kept identical to crds/."""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests import pod_security
from tests.observability.conftest import CHART, DASHBOARDS, RULES
from tests.observability.tools import need_helm, need_venv_tool
from tests.support import ROOT

EXAMPLE_CHART = ROOT / "charts" / "rocketcluster-example"
MONITORING_CRDS = Path(__file__).with_name("fixtures") / "monitoring-crds.yaml"
MONITORING_APIS = ("monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PodMonitor",
                   "monitoring.coreos.com/v1/PrometheusRule")
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
NAMESPACE = "rocket-system"

#: Value sets the chart is rendered with; each must lint, render and validate.
SCENARIOS: dict[str, tuple[list[str], bool]] = {
    # name: (helm --set flags, Prometheus Operator APIs present)
    "defaults": ([], False),
    "with-prometheus-operator": ([], True),
    "namespaced": (["rbac.scope=namespace", "operator.watchNamespaces={team-a,team-b}"], True),
    "monitoring-off": (["monitoring.serviceMonitor.enabled=false", "monitoring.podMonitor.enabled=false",
                        "monitoring.prometheusRule.enabled=false", "monitoring.dashboards.enabled=false"], True),
    "digest-peering-extras": (["image.digest=sha256:" + "a" * 64, "replicaCount=2", "operator.peering=rocket",
                               "operator.verbose=true", "monitoring.podMonitor.namespaces={mq}"], True),
}


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([need_helm(), *args], capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@functools.cache
def render(scenario: str) -> str:
    sets, monitoring = SCENARIOS[scenario]
    args = ["template", "rel", str(CHART), "--namespace", NAMESPACE, "--include-crds"]
    for s in sets:
        args += ["--set", s]
    if monitoring:
        for api in MONITORING_APIS:
            args += ["--api-versions", api]
    return helm(*args).stdout


def objects(scenario: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render(scenario)) if d]


def by_kind(scenario: str, kind: str) -> list[dict[str, Any]]:
    return [o for o in objects(scenario) if o["kind"] == kind]


# ---- lint / template / schema validation ------------------------------------------------------------

def test_helm_lint_strict():
    out = helm("lint", "--strict", str(CHART)).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_helm_lint_namespaced_scope():
    helm("lint", "--strict", str(CHART), "--set", "rbac.scope=namespace")


def test_unknown_scope_is_refused():
    proc = helm("template", "rel", str(CHART), "--set", "rbac.scope=everything", check=False)
    assert proc.returncode != 0 and "rbac.scope must be" in proc.stderr


@pytest.mark.parametrize("version", ["1.25.0", "latest"])
def test_kubernetes_validate_strict(version: str, tmp_path: Path):
    """Every built-in kind of every scenario against the Kubernetes OpenAPI schemas (1.25, the
    oldest kubernetes-validate knows, and its newest), unknown fields refused. One run per version:
    loading the schemas is what costs."""
    validate = need_venv_tool("kubernetes-validate")
    files = []
    for scenario in SCENARIOS:
        path = tmp_path / f"{scenario}.yaml"
        path.write_text(yaml.safe_dump_all([o for o in objects(scenario) if o["kind"] not in MONITORING_KINDS]))
        files.append(str(path))
    argv = [validate, "--strict", "--quiet"]
    if version != "latest":
        argv += ["--kubernetes-version", version]
    proc = subprocess.run([*argv, *files], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"kubernetes-validate {version}:\n{proc.stdout}\n{proc.stderr}"


def _strict(schema: Any) -> Any:
    """The CRD schema with unknown properties refused (as `kubernetes-validate --strict` does)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes")}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.cache
def monitoring_schemas() -> dict[str, Any]:
    crds = yaml.safe_load_all(MONITORING_CRDS.read_text())
    return {c["spec"]["names"]["kind"]: _strict(c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]) for c in crds}


@pytest.mark.parametrize("scenario", [s for s, (_, mon) in SCENARIOS.items() if mon])
def test_monitoring_objects_match_their_schema(scenario: str):
    for obj in objects(scenario):
        if obj["kind"] in MONITORING_KINDS:
            jsonschema.validate(obj, monitoring_schemas()[obj["kind"]])


# ---- pod security --------------------------------------------------------------------------------

def pod_specs(scenario: str) -> list[tuple[str, dict[str, Any]]]:
    return [(o["metadata"]["name"], o["spec"]["template"]["spec"]) for o in objects(scenario)
            if o["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job"}]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_pods_run_restricted(scenario: str):
    specs = pod_specs(scenario)
    assert specs
    for where, pod, pod_annotations in pod_security.workload_pods(objects(scenario)):
        assert pod_security.violations(pod, pod_annotations) == [], where  # every control of "restricted"
    for name, spec in specs:
        psc = spec.get("securityContext", {})
        assert psc.get("runAsNonRoot") is True, name
        assert psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", name
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC"), name
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c.get("securityContext", {})
            where = f"{name}/{c['name']}"
            assert sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True, where
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("privileged") in (None, False), where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not sc.get("capabilities", {}).get("add"), where
            assert sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type") == "RuntimeDefault", where
            assert c.get("resources", {}).get("requests"), f"{where}: no resource requests"
            image = c["image"]
            assert not image.endswith(":latest") and (":" in image or "@" in image), where


# ---- RBAC ------------------------------------------------------------------------------------------

#: Kind -> (API group, resource) of every kind the operator reads or writes.
KIND_RESOURCES = {
    "RocketCluster": ("rocket.dev", "rocketclusters"),
    "Deployment": ("apps", "deployments"),
    "StatefulSet": ("apps", "statefulsets"),
    "Service": ("", "services"),
    "ConfigMap": ("", "configmaps"),
    "Pod": ("", "pods"),
    "PersistentVolumeClaim": ("", "persistentvolumeclaims"),
    "PodDisruptionBudget": ("policy", "poddisruptionbudgets"),
    "Event": ("", "events"),
    "SparkApplication": ("sparkoperator.k8s.io", "sparkapplications"),
    "ScheduledSparkApplication": ("sparkoperator.k8s.io", "scheduledsparkapplications"),
    "Secret": ("", "secrets"),
    "NetworkPolicy": ("networking.k8s.io", "networkpolicies"),
    "RocketUser": ("rocket.dev", "rocketusers"),
    "Node": ("", "nodes"),
}
#: Kinds the operator reads and writes by name only: it needs no list or watch of them.
BY_NAME_ONLY = {"Secret", "Node"}
#: Cluster-scoped kinds: granted by a ClusterRole in every scope (nodes: the listeners' node addresses).
CLUSTER_SCOPED = {"Node"}
OPERATOR_SRC = ROOT / "operator" / "rocket_operator"


def granted(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def operator_kinds() -> set[str]:
    """Kinds named in the operator's manifests and API calls (``"kind": "X"`` and ``kind="X"``)."""
    kinds: set[str] = set()
    for path in OPERATOR_SRC.glob("**/*.py"):
        text = path.read_text()
        kinds.update(re.findall(r"""["']kind["']\s*:\s*["']([A-Z]\w+)["']""", text))
        kinds.update(re.findall(r"""\bkind\s*=\s*["']([A-Z]\w+)["']""", text))
    return kinds - {"CustomResourceDefinition", "Status", "List", "DeleteOptions"}


#: Verbs each call of the operator's Kubernetes client (rocket_operator.kube.Kube) needs.
CALL_VERBS = {"get": {"get"}, "list": {"list"}, "delete": {"delete"}, "merge_patch": {"patch"}}


def operator_calls() -> dict[str, set[str]]:
    """Kind -> verbs, from ``kube.<call>("<apiVersion>", "<Kind>", ...)`` in the operator's code,
    plus server-side apply (create + patch) of every kind its builders emit, and kopf's own needs."""
    needed: dict[str, set[str]] = {}
    for path in OPERATOR_SRC.glob("**/*.py"):
        text = path.read_text()
        for call, kind in re.findall(r"""kube\.(\w+)\(\s*["'][\w./]+["']\s*,\s*["']([A-Z]\w+)["']""", text):
            needed.setdefault(kind, set()).update(CALL_VERBS.get(call, {call}))
    builders = OPERATOR_SRC / "builders.py"
    if builders.exists():
        for kind in re.findall(r"""["']kind["']\s*:\s*["']([A-Z]\w+)["']""", builders.read_text()):
            if kind != "PersistentVolumeClaim":  # a volumeClaimTemplate, created by the StatefulSet controller
                needed.setdefault(kind, set()).update({"create", "patch", "get"})
    if needed:
        # kopf: watch the resource, patch it (finalizers, progress annotations) and its status, post events.
        needed.setdefault("RocketCluster", set()).update({"get", "list", "watch", "patch"})
        needed.setdefault("Event", set()).update({"create"})
    return needed


def test_rbac_covers_every_kind_the_operator_manages():
    kinds = operator_kinds()
    assert kinds, "found no Kubernetes kinds in operator/rocket_operator"
    unknown = kinds - KIND_RESOURCES.keys()
    assert not unknown, f"the operator uses kinds this chart grants nothing for: {sorted(unknown)}"
    rules = granted(by_kind("with-prometheus-operator", "ClusterRole")[0]["rules"])
    for kind in kinds:
        verbs = rules.get(KIND_RESOURCES[kind], set())
        needed = {"create", "patch"} if kind == "Event" else {"get"} if kind in BY_NAME_ONLY else {
            "get", "list", "watch"}
        assert needed <= verbs, f"{kind}: {sorted(needed - verbs)} missing"


def test_rbac_grants_every_verb_the_operator_uses():
    needed = operator_calls()
    assert needed, "found no Kubernetes API calls in operator/rocket_operator"
    for scenario, kind_ in (("with-prometheus-operator", "ClusterRole"), ("namespaced", "Role")):
        rules = granted(by_kind(scenario, kind_)[0]["rules"])
        cluster_rules = granted([r for role in by_kind(scenario, "ClusterRole") for r in role["rules"]])
        missing = {kind: sorted(verbs - (cluster_rules if kind in CLUSTER_SCOPED else rules).get(
            KIND_RESOURCES[kind], set())) for kind, verbs in needed.items()}
        missing = {k: v for k, v in missing.items() if v}
        assert not missing, f"{scenario}: verbs the operator uses but is not granted: {missing}"
        status = rules.get(("rocket.dev", "rocketclusters/status"), set())
        assert {"get", "patch"} <= status, f"{scenario}: status subresource"


def test_rbac_least_privilege():
    for scenario in ("with-prometheus-operator", "namespaced"):
        for role in by_kind(scenario, "ClusterRole") + by_kind(scenario, "Role"):
            for rule in role["rules"]:
                where = f"{scenario} {role['kind']} {role['metadata']['name']}: {rule}"
                assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], where
                # Secrets by name only: listing or watching them would expose every Secret of a namespace
                assert "secrets" not in rule["resources"] or set(rule["verbs"]) <= {
                    "get", "create", "patch", "delete"}, where
                assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), where
                assert "rolebindings" not in rule["resources"] and "clusterroles" not in rule["resources"], where


def test_namespaced_scope_grants_writes_only_per_namespace():
    cluster_roles = by_kind("namespaced", "ClusterRole")
    assert len(cluster_roles) == 1
    for rule in cluster_roles[0]["rules"]:
        if rule["apiGroups"] == ["admissionregistration.k8s.io"]:
            # the drain webhook's configuration is cluster-scoped whatever the operator watches
            assert set(rule["verbs"]) <= {"get", "list", "watch", "create", "patch"}, rule
            continue
        assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
    roles = by_kind("namespaced", "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert len(by_kind("namespaced", "RoleBinding")) == 2
    args = by_kind("namespaced", "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["--namespace=team-a", "--namespace=team-b"]


def test_cluster_scope_watches_all_namespaces():
    """`python -m rocket_operator` without --namespace serves every namespace."""
    args = by_kind("defaults", "Deployment")[0]["spec"]["template"]["spec"]["containers"][0].get("args") or []
    assert not [a for a in args if a.startswith("--namespace")]
    assert not by_kind("defaults", "Role")


def test_replicas_need_peering():
    proc = helm("template", "rel", str(CHART), "--set", "replicaCount=2", check=False)
    assert proc.returncode != 0 and "operator.peering" in proc.stderr
    container = by_kind("digest-peering-extras", "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["--peering=rocket", "--verbose"]
    assert container["image"] == "rocketcluster/operator@sha256:" + "a" * 64
    rules = granted(by_kind("digest-peering-extras", "ClusterRole")[0]["rules"])
    assert {"get", "list", "watch", "patch"} <= rules[("kopf.dev", "clusterkopfpeerings")]


def test_operator_http_port_and_probes():
    container = by_kind("defaults", "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ROCKET_OPERATOR_HTTP_PORT"] == "8080"
    assert container["ports"][0] == {"name": "metrics", "containerPort": 8080, "protocol": "TCP"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}


def test_drain_webhook_is_served_through_its_service():
    """Node drains: the operator's pods/eviction webhook is on by default; the API server reaches
    it through the Service named in ROCKET_OPERATOR_WEBHOOK_HOST (the host kopf writes into the
    webhook configuration's URL and the certificate), and kopf may manage the configuration."""
    from rocket_operator.settings import OperatorSettings

    container = by_kind("defaults", "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    settings = OperatorSettings.from_env({k: v for k, v in env.items() if k.startswith("ROCKET_OPERATOR_") and v})
    assert settings.webhook_port == 9443
    service = next(s for s in by_kind("defaults", "Service") if s["metadata"]["name"].endswith("-webhook"))
    assert settings.webhook_host == f"{service['metadata']['name']}.{NAMESPACE}.svc"
    assert service["spec"]["ports"] == [{"name": "webhook", "port": 9443, "targetPort": "webhook", "protocol": "TCP"}]
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in container["ports"]
    rules = [r for r in by_kind("defaults", "ClusterRole")[0]["rules"]
             if "validatingwebhookconfigurations" in r["resources"]]
    assert rules and {"create", "patch", "watch"} <= set(rules[0]["verbs"])
    off = helm("template", "rel", str(CHART), "--namespace", NAMESPACE, "--set", "drainWebhook.enabled=false").stdout
    assert "-webhook" not in off and "ROCKET_OPERATOR_WEBHOOK_PORT" not in off


def test_service_account_is_bound():
    sa = by_kind("defaults", "ServiceAccount")[0]["metadata"]["name"]
    binding = by_kind("defaults", "ClusterRoleBinding")[0]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    deploy = by_kind("defaults", "Deployment")[0]
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == sa


# ---- monitoring --------------------------------------------------------------------------------------

def test_monitors_skipped_without_the_prometheus_operator():
    kinds = {o["kind"] for o in objects("defaults")}
    assert not kinds & MONITORING_KINDS


def test_monitors_rendered_with_the_prometheus_operator():
    kinds = [o["kind"] for o in objects("with-prometheus-operator")]
    assert kinds.count("ServiceMonitor") == 1 and kinds.count("PodMonitor") == 2 and kinds.count("PrometheusRule") == 1


def test_monitors_toggled_by_values():
    kinds = {o["kind"] for o in objects("monitoring-off")}
    assert not kinds & MONITORING_KINDS
    assert not [o for o in by_kind("monitoring-off", "ConfigMap") if "grafana_dashboard" in o["metadata"]["labels"]]


def test_prometheus_rule_is_the_tested_rule_file():
    rule = by_kind("with-prometheus-operator", "PrometheusRule")[0]
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


def test_pod_monitors_set_the_jobs_the_alerts_use():
    jobs = {}
    for pm in by_kind("with-prometheus-operator", "PodMonitor"):
        component = pm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
        endpoint = pm["spec"]["podMetricsEndpoints"][0]
        job = next(r for r in endpoint["relabelings"] if r.get("targetLabel") == "job")["replacement"]
        jobs[component] = job
        assert endpoint["port"] == "http" and endpoint["honorLabels"] is True
    assert jobs == {"nameserver": "rocketmq-nameserver", "broker": "rocketmq-broker"}
    rules = RULES.read_text()
    for job in [*jobs.values(), "rocketcluster-operator"]:
        assert f'job="{job}"' in rules


def test_broker_relabeling_derives_the_broker_name():
    """The regex the broker PodMonitor uses (RE2, anchored as Prometheus anchors it)."""
    pm = next(p for p in by_kind("with-prometheus-operator", "PodMonitor") if p["metadata"]["name"].endswith("-broker"))
    rule = next(r for r in pm["spec"]["podMetricsEndpoints"][0]["relabelings"] if r.get("targetLabel") == "broker")
    pattern = re.compile(f"^(?:{rule['regex']})$")
    replacement = rule["replacement"].replace("${1}", r"\1").replace("${2}", r"\2")
    cases = {"demo-broker-master-0": "demo-broker-0", "demo-broker-slave-1-2": "demo-broker-2",
             "my-broker-broker-master-11": "my-broker-broker-11"}
    for pod, broker in cases.items():
        assert pattern.sub(replacement, pod) == broker, pod


def test_dashboards_shipped_as_sidecar_configmaps():
    cms = [o for o in by_kind("defaults", "ConfigMap") if o["metadata"]["labels"].get("grafana_dashboard") == "1"]
    shipped = {}
    for cm in cms:
        (key, text), = cm["data"].items()
        shipped[key] = json.loads(text)
    files = {p.name: json.loads(p.read_text()) for p in DASHBOARDS.glob("*.json")}
    assert shipped == files


# ---- CRDs -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("file", ["rocketclusters.yaml", "rocketusers.yaml"])
def test_chart_crd_identical_to_top_level(file: str):
    top = ROOT / "crds" / file
    copy = CHART / "crds" / file
    assert copy.exists(), f"{copy} is missing: copy {top} into the chart"
    assert copy.read_bytes() == top.read_bytes(), f"{copy} differs from {top}: copy it again"


def test_crd_rendered_with_include_crds():
    crds = by_kind("defaults", "CustomResourceDefinition")
    assert sorted(c["metadata"]["name"] for c in crds) == ["rocketclusters.rocket.dev", "rocketusers.rocket.dev"]


# ---- the example chart ----------------------------------------------------------------------------

def test_example_chart_lints():
    helm("lint", "--strict", str(EXAMPLE_CHART))


def example_cluster() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(helm("template", "demo", str(EXAMPLE_CHART), "-n", "mq").stdout) if d]
    assert [d["kind"] for d in docs] == ["RocketCluster"]
    return docs[0]


def test_example_cluster_is_accepted_by_the_operator():
    cluster = example_cluster()
    assert cluster["apiVersion"] == "rocket.dev/v1alpha1" and cluster["metadata"]["name"] == "demo"
    from rocket_operator.spec import parse_spec

    spec = parse_spec(cluster["spec"])
    assert spec.broker.groups == 2 and spec.broker.replicas_per_group == 1


def test_example_cluster_matches_the_crd_schema():
    crd_path = ROOT / "crds" / "rocketclusters.yaml"
    crd = next(d for d in yaml.safe_load_all(crd_path.read_text()) if d)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    schema = _strict(version["schema"]["openAPIV3Schema"]["properties"]["spec"])
    jsonschema.validate(example_cluster()["spec"], schema)
