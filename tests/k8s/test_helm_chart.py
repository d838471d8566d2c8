"""The Helm charts against the real API server (v1.20.2, tests/k8s/control_plane.sh):
server-side dry-run of everything they render, `helm install` creating the CRD and the operator
Deployment, and the monitors appearing only once the Prometheus Operator's API is served.

Uses the session's ``control_plane`` fixture (tests/k8s/conftest.py). The first test deliberately
asks for nothing that installs the RocketCluster CRD, so that `helm install` is what creates it when
this module runs first (alphabetically it does); run after other k8s tests, the CRD exists already
and the test checks that the served one is the chart's.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

# The control-plane harness and fixtures of tests/k8s (conftest.py, harness.py).
from tests.k8s import harness
from tests.observability.tools import need_helm
from tests.support import unique, wait_for

ROOT = Path(__file__).resolve().parent.parent.parent
CHART = ROOT / "charts" / "rocketcluster-operator"
EXAMPLE = ROOT / "charts" / "rocketcluster-example"
MONITORING_CRDS = ROOT / "tests" / "observability" / "fixtures" / "monitoring-crds.yaml"
CRD_NAME = "rocketclusters.rocket.dev"
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


class Helm:
    """The real helm binary pointed at the test control plane."""

    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.binary = need_helm()
        self.env = {"KUBECONFIG": str(kubeconfig), "HELM_CACHE_HOME": str(home / "cache"),
                    "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data"),
                    "PATH": "/usr/bin:/bin"}

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.binary, *args], capture_output=True, text=True, timeout=180, env=self.env)
        if check:
            assert proc.returncode == 0, f"helm {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
        return proc


@pytest.fixture(scope="module")
def kube(control_plane: harness.ControlPlane) -> Iterator[Any]:
    client = harness.api_client(control_plane.kubeconfig)
    yield client
    client.close()


@pytest.fixture(scope="module")
def helm(control_plane: harness.ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(control_plane.kubeconfig, tmp_path_factory.mktemp("helm-home"))


@dataclass
class Release:
    name: str
    ns: str
    #: The RocketCluster CRD was on the server before `helm install` (another test installed it).
    crd_preexisted: bool
    #: What `helm install` printed (the chart's NOTES).
    output: str


@pytest.fixture(scope="module")
def release(helm: Helm, kube: Any) -> Iterator[Release]:
    """(release, namespace) of the operator chart, installed without the Prometheus Operator's CRDs."""
    from kubernetes import client

    name, ns = unique("rkc"), unique("rocket-system")
    ext = client.ApiextensionsV1Api(kube)
    existing = {c.metadata.name for c in ext.list_custom_resource_definition().items}
    assert not {n for n in existing if n.endswith(".monitoring.coreos.com")}, "monitoring CRDs left over"
    out = helm("install", name, str(CHART), "--namespace", ns, "--create-namespace", "--set", "image.tag=test").stdout
    yield Release(name, ns, CRD_NAME in existing, out)
    helm("uninstall", name, "--namespace", ns, check=False)
    _delete_monitoring_crds(kube)
    client.CoreV1Api(kube).delete_namespace(ns)


def _delete_monitoring_crds(kube: Any) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    ext = client.ApiextensionsV1Api(kube)
    for doc in yaml.safe_load_all(MONITORING_CRDS.read_text()):
        try:
            ext.delete_custom_resource_definition(doc["metadata"]["name"])
        except ApiException as exc:
            if exc.status != 404:
                raise


def _dry_run_create(kube: Any, docs: list[dict[str, Any]], namespace: str) -> dict[str, str]:
    """Create every object with dryRun=All; (kind/name) -> error text for those the server refuses."""
    from kubernetes.client.rest import ApiException
    from kubernetes.dynamic import DynamicClient

    dyn = DynamicClient(kube)
    errors: dict[str, str] = {}
    for doc in docs:
        resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        kwargs: dict[str, Any] = {"body": doc, "dry_run": "All"}
        if resource.namespaced:
            kwargs["namespace"] = doc["metadata"].get("namespace", namespace)
        try:
            resource.create(**kwargs)
        except ApiException as exc:
            if exc.status == 409:  # exists: the server validated it far enough to find the name taken
                continue
            errors[f"{doc['kind']}/{doc['metadata']['name']}"] = f"{exc.status}: {exc.body}"
    return errors


def test_helm_install_creates_crd_and_operator(release: Release, helm: Helm, kube: Any):
    from kubernetes import client

    name, ns = release.name, release.ns
    ext = client.ApiextensionsV1Api(kube)
    crd = wait_for(lambda: ext.read_custom_resource_definition(CRD_NAME), what="the CRD")
    established = wait_for(lambda: any(c.type == "Established" and c.status == "True"
                                    for c in ext.read_custom_resource_definition(CRD_NAME).status.conditions or []),
                        what="the CRD to be Established")
    assert established
    chart_crd = yaml.safe_load((CHART / "crds" / "rocketclusters.yaml").read_text())
    assert crd.spec.names.short_names == chart_crd["spec"]["names"]["shortNames"]
    if not release.crd_preexisted:
        from kubernetes.dynamic import DynamicClient

        crds = DynamicClient(kube).resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
        served = crds.get(name=CRD_NAME).to_dict()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert served == chart_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

    apps = client.AppsV1Api(kube)
    deployments = apps.list_namespaced_deployment(ns).items
    assert [d.metadata.name for d in deployments] == [f"{name}-rocketcluster-operator"]
    pod_spec = deployments[0].spec.template.spec
    assert pod_spec.security_context.run_as_non_root is True
    assert pod_spec.containers[0].security_context.read_only_root_filesystem is True
    # The controller-manager turns the Deployment into a ReplicaSet and a Pod (Pending: no kubelet).
    wait_for(lambda: client.CoreV1Api(kube).list_namespaced_pod(ns).items, what="the operator pod")
    rbac = client.RbacAuthorizationV1Api(kube)
    assert rbac.read_cluster_role(f"{name}-rocketcluster-operator").rules
    dashboards = client.CoreV1Api(kube).list_namespaced_config_map(ns, label_selector="grafana_dashboard=1").items
    assert len(dashboards) == 4
    manifest = helm("get", "manifest", name, "--namespace", ns).stdout
    kinds = {d["kind"] for d in yaml.safe_load_all(manifest) if d}
    assert not kinds & MONITORING_KINDS, "monitors rendered although the Prometheus Operator's API is absent"
    assert f"RocketCluster operator 0.1.0 is installed in namespace {ns}" in release.output
    assert "The Prometheus Operator's CRDs are not installed" in release.output


def test_service_account_may_do_what_the_operator_does(release: Release, kube: Any):
    """SubjectAccessReview as the operator's ServiceAccount: allowed what it needs, nothing more."""
    from kubernetes import client

    name, ns = release.name, release.ns
    user = f"system:serviceaccount:{ns}:{name}-rocketcluster-operator"
    authz = client.AuthorizationV1Api(kube)

    def allowed(verb: str, group: str, resource: str, namespace: str = "team-x", sub: str = "") -> bool:
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
            "user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{ns}"],
            "resourceAttributes": {"verb": verb, "group": group, "resource": resource, "namespace": namespace,
                                   "subresource": sub}}}
        return bool(authz.create_subject_access_review(review).status.allowed)

    assert allowed("watch", "rocket.dev", "rocketclusters")
    assert allowed("patch", "rocket.dev", "rocketclusters", sub="status")
    assert allowed("create", "apps", "statefulsets") and allowed("delete", "apps", "statefulsets")
    assert allowed("patch", "", "persistentvolumeclaims") and allowed("delete", "", "pods")
    assert allowed("create", "", "events")
    # secrets by name only: the controllers' Raft secret (failover: Controller), the admin
    # credentials and TLS Secrets (spec.security); never listed or watched
    assert allowed("get", "", "secrets") and allowed("create", "", "secrets") and allowed("delete", "", "secrets")
    assert allowed("patch", "", "secrets") and allowed("patch", "rocket.dev", "rocketusers", sub="status")
    # first pass of a cluster: lists the kinds an earlier same-named cluster's children may be left in;
    # the NetworkPolicies / NameServer ConfigMap the spec no longer wants are deleted
    for group, resource in (("", "configmaps"), ("", "services"), ("apps", "deployments"), ("apps", "statefulsets"),
                            ("networking.k8s.io", "networkpolicies"), ("policy", "poddisruptionbudgets")):
        assert allowed("list", group, resource), resource
    assert allowed("delete", "", "configmaps") and allowed("delete", "networking.k8s.io", "networkpolicies")
    assert not allowed("list", "", "secrets") and not allowed("watch", "", "secrets")
    # listeners: node addresses, Services of removed listeners
    assert allowed("get", "", "nodes", namespace="") and not allowed("patch", "", "nodes", namespace="")
    assert allowed("delete", "", "services")
    assert not allowed("delete", "", "namespaces")
    assert not allowed("create", "rbac.authorization.k8s.io", "rolebindings")


@pytest.mark.parametrize("sets", [[], ["rbac.scope=namespace"]], ids=["cluster-scope", "namespace-scope"])
def test_rendered_chart_passes_server_side_dry_run(release: Release, helm: Helm, kube: Any,
                                                  sets: list[str]):
    ns = release.ns
    args = ["template", unique("dry"), str(CHART), "--namespace", ns, "--include-crds"]
    for s in sets:
        args += ["--set", s]
    for api in ("monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PodMonitor",
                "monitoring.coreos.com/v1/PrometheusRule"):
        args += ["--api-versions", api]
    docs = [d for d in yaml.safe_load_all(helm(*args).stdout) if d]
    # The monitors need their CRDs: dry-run them in the next test, once those are served.
    errors = _dry_run_create(kube, [d for d in docs if d["kind"] not in MONITORING_KINDS], ns)
    assert not errors, errors


def test_example_cluster_passes_server_side_dry_run(release: Release, helm: Helm, kube: Any):
    ns = release.ns
    docs = [d for d in yaml.safe_load_all(helm("template", "demo", str(EXAMPLE), "--namespace", ns).stdout) if d]
    assert [d["kind"] for d in docs] == ["RocketCluster"]
    assert not _dry_run_create(kube, docs, ns)
    bad = {**docs[0], "spec": {**docs[0]["spec"], "broker": {**docs[0]["spec"]["broker"], "groups": "two"}}}
    assert _dry_run_create(kube, [bad], ns), "the CRD schema accepted broker.groups='two'"


def test_monitors_appear_with_the_prometheus_operator_api(release: Release, helm: Helm, kube: Any):
    from kubernetes import client
    from kubernetes.dynamic import DynamicClient

    name, ns = release.name, release.ns
    ext = client.ApiextensionsV1Api(kube)
    for doc in yaml.safe_load_all(MONITORING_CRDS.read_text()):
        ext.create_custom_resource_definition(doc)
    for doc in yaml.safe_load_all(MONITORING_CRDS.read_text()):
        wait_for(lambda n=doc["metadata"]["name"]: any(
            c.type == "Established" and c.status == "True"
            for c in ext.read_custom_resource_definition(n).status.conditions or []), what=doc["metadata"]["name"])
    # helm reads the served APIs afresh: an upgrade now renders the monitors.
    wait_for(lambda: helm("upgrade", name, str(CHART), "--namespace", ns, "--set", "image.tag=test",
                       check=False).returncode == 0, what="helm upgrade")
    dyn = DynamicClient(kube)
    found = {}
    for kind in MONITORING_KINDS:
        res = dyn.resources.get(api_version="monitoring.coreos.com/v1", kind=kind)
        found[kind] = sorted(o.metadata.name for o in res.get(namespace=ns).items)
    assert found == {
        "ServiceMonitor": [f"{name}-rocketcluster-operator"],
        "PodMonitor": [f"{name}-rocketcluster-operator-broker", f"{name}-rocketcluster-operator-nameserver"],
        "PrometheusRule": [f"{name}-rocketcluster-operator"],
    }
