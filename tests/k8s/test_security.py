"""spec.security and RocketUser on the real API server, with a REAL NameServer and broker with ACL on.

The RocketCluster ``sec`` asks for ACL. The operator makes the admin credentials Secret and the
NameServer and broker ConfigMaps; the test starts a NameServer and a broker process (loopback) from
exactly those files and that Secret, as the pods would mount them (only ports and paths differ).
The test resolver points the operator at them, so:

* the operator's own remoting calls (106 registration, 17 topic creation from ``spec.topics``) are
  signed with the admin keys: unsigned they would be refused, and the group shows registered and
  the topics are created;
* the HTTP admin API needs the credential the operator sends (``http_auth_headers``): 401 without;
* a RocketUser makes a user on the broker with its policies and writes its keys into a Secret the
  RocketUser owns; the real C++ client (compat venv) signing with that Secret's keys may send to
  the allowed topic and is refused on the other; a policy update takes effect; deleting the
  RocketUser deletes the user (the same keys are then refused) and, by garbage collection, the
  Secret.

Also: the rendered pods with ACL and TLS on pass the restricted Pod Security Standard field by field
(the API server here is 1.20, which has no Pod Security admission to ask).
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives import serialization
from kubernetes import client

from rocket.auth import SessionCredentials
from rocket.client import Admin
from rocket_operator.admin import http_auth_headers
from tests import pod_security
from tests.compat import realclient
from tests.k8s.harness import wait_for
from tests.k8s.test_drain_real import Process, _free_block
from tests.k8s.test_operator import GROUP, VERSION, condition, create, rkc, status
from tests.support import free_port, rocket_command

CLUSTER = "sec"
USERS = "rocketusers"


def _secret(api: Any, namespace: str, name: str) -> dict[str, str]:
    secret = client.CoreV1Api(api).read_namespaced_secret(name, namespace)
    return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}


def _configmap(api: Any, namespace: str, name: str) -> dict[str, str]:
    return dict(client.CoreV1Api(api).read_namespaced_config_map(name, namespace).data or {})


def _user(api: Any, namespace: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, USERS, name)


def _gone(call: Any) -> bool:
    try:
        call()
    except client.exceptions.ApiException as exc:
        return exc.status == 404
    return False


@pytest.fixture
def cpp(tmp_path: Path) -> realclient.Driver:
    """The real C++ client (``set_session_credentials`` from ROCKET_ACCESS_KEY/SECRET_KEY)."""
    try:
        python = realclient.ensure_venv()
    except Exception as exc:
        pytest.fail(f"the C++ client's compat venv is not available: {exc}", pytrace=False)
    return realclient.Driver(python, "", tmp_path / "cpp-home")


def _send(driver: realclient.Driver, creds: SessionCredentials, topic: str) -> str:
    """One send by the C++ client signing with ``creds``: "send" or "send_error"."""
    driver.extra_env = {"ROCKET_ACCESS_KEY": creds.access_key, "ROCKET_SECRET_KEY": creds.secret_key}
    events = [e for e in driver.send(topic, 1, "--group", "PID_orders", "--send-timeout-ms", "3000")
              if e["event"] != "cpp_log"]
    assert len(events) == 1, events
    return str(events[0]["event"])


class Servers:
    """The NameServer and broker processes of ``sec``, started from the operator's files."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="rocket-sec-"))
        self.ns_port = free_port()
        self.broker_port = _free_block()
        self.procs: list[Process] = []

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    def start(self, credentials: str, ns_config: str, broker_conf: str) -> None:
        creds = self.folder / "credentials"  # the Secret's key, as mounted at /etc/rocket-auth/credentials
        creds.write_text(credentials)
        creds.chmod(0o600)
        ns_cfg = json.loads(ns_config)
        assert ns_cfg == {"acl_enable": True, "init_authentication_user": "/etc/rocket-auth/credentials"}
        ns_cfg.update(init_authentication_user=str(creds), auth_sync_interval=0.5)
        (self.folder / "nameserver.json").write_text(json.dumps(ns_cfg))
        self.procs.append(Process(rocket_command("nameserver", "--host", "127.0.0.1", "--port", str(self.ns_port),
                                                 "--http-port", "0", "--config", str(self.folder / "nameserver.json")),
                                  self.ns_port, self.folder / "ns.log"))
        (self.folder / "broker.conf").write_text(broker_conf)
        p = self.broker_port
        self.procs.append(Process(rocket_command(
            "broker", "--name", f"{CLUSTER}-broker-0", "--cluster", CLUSTER, "--broker-id", "0", "--port", str(p),
            "--http-port", str(p + 2), "--namesrv", self.namesrv, "--store-dir", str(self.folder / "store"),
            "--ip", "127.0.0.1", "--config", str(self.folder / "broker.conf"),
            "--set", f"haListenPort={p + 1}", "--set", f"initAuthenticationUser={creds}",
            "--set", "registerNameServerPeriod=3000"), p, self.folder / "broker.log"))

    def logs(self) -> str:
        return "\n".join(f"--- {p.log.name}\n{p.tail()}" for p in self.procs)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture
def servers(operator: Any) -> Iterator[Servers]:
    s = Servers()
    operator.resolver.nameserver_addrs[CLUSTER] = [s.namesrv]
    operator.resolver.broker_addrs[f"{CLUSTER}-broker-master-0"] = f"127.0.0.1:{s.broker_port}"
    try:
        yield s
    finally:
        operator.resolver.nameserver_addrs.pop(CLUSTER, None)
        operator.resolver.broker_addrs.pop(f"{CLUSTER}-broker-master-0", None)
        s.stop()


async def _http_status(port: int, headers: dict[str, str]) -> int:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/api/v1/status",
                                                                headers=headers) as resp:
        return resp.status


async def _user_on_broker(namesrv: str, admin: SessionCredentials, username: str) -> dict[str, Any]:
    async with Admin(namesrv, credentials=admin, timeout=3) as a:
        users = await a.list_users(username, cluster=CLUSTER)
        acls = await a.list_acls(f"User:{username}", cluster=CLUSTER)
    return {"users": [u for us in users.values() for u in us if u.get("username") == username],
            "acls": [x for xs in acls.values() for x in xs]}


def test_acl_cluster_and_rocket_user_with_real_broker(api: Any, namespace: str, operator: Any, servers: Servers,
                                                      cpp: realclient.Driver) -> None:
    topics = [{"name": "Orders", "queues": 2}, {"name": "Other", "queues": 2}]
    create(api, namespace, rkc(CLUSTER, broker={"groups": 1, "replicasPerGroup": 0, "failover": "Manual"},
                               topics=topics, security={"acl": {"enabled": True}}))
    core = client.CoreV1Api(api)
    secret = wait_for(lambda: _secret(api, namespace, f"{CLUSTER}-admin-credentials"), 30,
                      what="the admin credentials Secret")
    admin = SessionCredentials(secret["AccessKey"], secret["SecretKey"])
    assert admin.access_key == "rocket-admin" and len(admin.secret_key) >= 24
    assert secret["credentials"] == f"AccessKey={admin.access_key}\nSecretKey={admin.secret_key}\n"
    owner = core.read_namespaced_secret(f"{CLUSTER}-admin-credentials", namespace).metadata.owner_references[0]
    assert (owner.kind, owner.name) == ("RocketCluster", CLUSTER)
    ns_cm = wait_for(lambda: _configmap(api, namespace, f"{CLUSTER}-nameserver-config"), 30,
                     what="the NameServer ConfigMap")
    broker_conf = _configmap(api, namespace, f"{CLUSTER}-broker-config")["broker.conf"]
    assert "aclEnable=true\n" in broker_conf
    servers.start(secret["credentials"], ns_cm["nameserver.json"], broker_conf)
    cpp.namesrv = servers.namesrv

    # the operator's signed remoting calls: registration seen, spec topics created
    def synced() -> bool:
        groups = status(api, namespace, CLUSTER).get("brokerGroups") or []
        return bool(groups) and groups[0]["registered"] and bool(groups[0]["topicsDigest"])

    wait_for(synced, 60, what=f"the operator to see the broker and create the topics\n{servers.logs()}")
    st = status(api, namespace, CLUSTER)
    assert st["security"] == {"aclEnabled": True, "tlsMode": "Disabled",
                              "adminSecretName": f"{CLUSTER}-admin-credentials"}
    assert condition(st, "SecurityReady")["status"] == "True"
    assert _send(cpp, admin, "Orders") == "send", servers.logs()  # the topic exists; admin keys work
    assert _send(cpp, SessionCredentials("nobody", "wrong"), "Orders") == "send_error"

    # the HTTP admin API: 401 without a credential, 200 with the one the operator sends
    http_port = servers.broker_port + 2
    assert asyncio.run(_http_status(http_port, {})) == 401
    assert asyncio.run(_http_status(http_port, http_auth_headers(admin))) == 200

    # a RocketUser
    users = client.CustomObjectsApi(api)
    users.create_namespaced_custom_object(GROUP, VERSION, namespace, USERS, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "RocketUser", "metadata": {"name": "orders-app"},
        "spec": {"cluster": CLUSTER, "policies": [
            {"resources": ["Topic:Orders", "Group:PID_*"], "actions": ["Pub", "Sub"]},
            {"resources": ["Topic:Other"], "actions": ["Get"]}]}})

    def ready() -> bool:
        return condition(_user(api, namespace, "orders-app").get("status") or {}, "Ready").get("status") == "True"

    wait_for(ready, 60, what=f"RocketUser orders-app Ready: {_user(api, namespace, 'orders-app').get('status')}")
    user_status = _user(api, namespace, "orders-app")["status"]
    assert user_status["username"] == "orders-app" and user_status["secretName"] == "orders-app"
    assert user_status["brokers"] == [f"{CLUSTER}-broker-0"]
    keys = _secret(api, namespace, "orders-app")
    app = SessionCredentials(keys["AccessKey"], keys["SecretKey"])
    assert app.access_key == "orders-app" and keys["credentials"].startswith("AccessKey=orders-app\n")
    owned = core.read_namespaced_secret("orders-app", namespace).metadata.owner_references
    assert [(r.kind, r.name) for r in owned] == [("RocketUser", "orders-app")]
    on_broker = asyncio.run(_user_on_broker(servers.namesrv, admin, "orders-app"))
    assert [u["userType"] for u in on_broker["users"]] == ["Normal"]
    entries = {e["resource"]: e["actions"] for a in on_broker["acls"] for p in a["policies"] for e in p["entries"]}
    assert entries == {"Topic:Orders": ["Pub", "Sub"], "Group:PID_*": ["Pub", "Sub"], "Topic:Other": ["Get"]}

    # the real client with the Secret's keys: allowed where the policy allows, refused elsewhere
    wait_for(lambda: _send(cpp, app, "Orders") == "send", 30, what="a signed send of orders-app to Orders")
    assert _send(cpp, app, "Other") == "send_error"

    # a policy change reaches the broker
    users.patch_namespaced_custom_object(GROUP, VERSION, namespace, USERS, "orders-app", {"spec": {"policies": [
        {"resources": ["Topic:Orders", "Topic:Other", "Group:PID_*"], "actions": ["Pub", "Sub"]}]}})
    wait_for(lambda: _send(cpp, app, "Other") == "send", 30, what="the updated policy to allow Other")

    # deleting the RocketUser deletes the user; its keys are refused; the Secret goes with it
    users.delete_namespaced_custom_object(GROUP, VERSION, namespace, USERS, "orders-app")
    wait_for(lambda: _gone(lambda: _user(api, namespace, "orders-app")), 30, what="the RocketUser to go")
    on_broker = asyncio.run(_user_on_broker(servers.namesrv, admin, "orders-app"))
    assert on_broker == {"users": [], "acls": []}
    assert _send(cpp, app, "Orders") == "send_error"
    wait_for(lambda: _gone(lambda: core.read_namespaced_secret("orders-app", namespace)), 60,
             what="the user's Secret to be garbage-collected")


def test_rocket_user_without_its_cluster_is_not_ready(api: Any, namespace: str, operator: Any) -> None:
    users = client.CustomObjectsApi(api)
    users.create_namespaced_custom_object(GROUP, VERSION, namespace, USERS, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "RocketUser", "metadata": {"name": "lost"},
        "spec": {"cluster": "nowhere", "policies": [{"resources": ["Topic:A"], "actions": ["Pub"]}]}})

    def reason() -> str:
        return str(condition(_user(api, namespace, "lost").get("status") or {}, "Ready").get("reason"))

    wait_for(lambda: reason() == "ClusterNotFound", 30, what="Ready=False ClusterNotFound")
    assert condition(_user(api, namespace, "lost")["status"], "Ready")["status"] == "False"
    # the schema refuses what ACL 2.0 cannot hold
    with pytest.raises(client.exceptions.ApiException) as refused:
        users.create_namespaced_custom_object(GROUP, VERSION, namespace, USERS, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "RocketUser", "metadata": {"name": "bad"},
            "spec": {"cluster": CLUSTER, "policies": [{"resources": ["Queue:x"], "actions": ["Fly"]}]}})
    assert refused.value.status == 422
    # there are no Super RocketUsers (they would hold the admin's rights): the field is pruned
    boss = users.create_namespaced_custom_object(GROUP, VERSION, namespace, USERS, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "RocketUser", "metadata": {"name": "boss"},
        "spec": {"cluster": "nowhere", "userType": "Super"}})
    assert boss["spec"] == {"cluster": "nowhere"}
    users.delete_namespaced_custom_object(GROUP, VERSION, namespace, USERS, "boss")
    # deleting it needs no broker
    users.delete_namespaced_custom_object(GROUP, VERSION, namespace, USERS, "lost")
    wait_for(lambda: _gone(lambda: _user(api, namespace, "lost")), 30, what="the RocketUser to go")
    # a cluster without ACL: said so, not retried in a loop
    create(api, namespace, rkc("open", broker={"groups": 1, "replicasPerGroup": 0}))
    users.create_namespaced_custom_object(GROUP, VERSION, namespace, USERS, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "RocketUser", "metadata": {"name": "early"},
        "spec": {"cluster": "open"}})
    wait_for(lambda: condition(_user(api, namespace, "early").get("status") or {}, "Ready").get("reason")
             == "AclDisabled", 30, what="Ready=False AclDisabled")


def test_tls_secrets_network_policies_and_restricted_pods(api: Any, namespace: str, operator: Any) -> None:
    """Operator-issued TLS: the cluster CA, the trust bundle and the server certificate Secrets; the
    NetworkPolicies; every workload as stored on the API server passes the restricted profile."""
    from cryptography import x509

    create(api, namespace, rkc("tls", broker={"groups": 1, "replicasPerGroup": 1},
                               security={"acl": {"enabled": True}, "tls": {"mode": "Permissive"}}))
    core = client.CoreV1Api(api)
    server = wait_for(lambda: _secret(api, namespace, "tls-tls"), 30, what="the server certificate Secret")
    assert core.read_namespaced_secret("tls-tls", namespace).type == "kubernetes.io/tls"
    bundle = _secret(api, namespace, "tls-cluster-ca-cert")
    assert set(_secret(api, namespace, "tls-cluster-ca")) == {"ca.crt", "ca.key"}
    assert server["ca.crt"] == bundle["ca.crt"]
    ca = x509.load_pem_x509_certificate(bundle["ca.crt"].encode())
    leaf = x509.load_pem_x509_certificate(server["tls.crt"].encode())
    leaf.verify_directly_issued_by(ca)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert f"*.tls-broker.{namespace}.svc" in names and f"tls-nameserver.{namespace}.svc" in names
    wait_for(lambda: (status(api, namespace, "tls").get("security") or {}).get("tls", {}).get("notAfter"), 30,
             what="status.security.tls")
    st = status(api, namespace, "tls")["security"]["tls"]
    assert st["issuer"] == "Operator" and st["secretName"] == "tls-tls" and st["caSecretName"] == "tls-cluster-ca-cert"
    broker_conf = _configmap(api, namespace, "tls-broker-config")["broker.conf"]
    assert "tlsMode=PERMISSIVE\n" in broker_conf and "tls.server.certPath=/etc/rocket-tls/tls.crt\n" in broker_conf

    policies = {p.metadata.name: p for p in client.NetworkingV1Api(api).list_namespaced_network_policy(namespace).items}
    assert set(policies) == {"tls-broker", "tls-nameserver", "tls-controller"}
    ha = next(r for r in policies["tls-broker"].spec.ingress if r.ports[0].port == 10912)
    assert [p.pod_selector.match_labels for p in ha._from] == [
        {"app.kubernetes.io/instance": "tls", "app.kubernetes.io/component": "broker"},
        {"app.kubernetes.io/instance": "tls", "app.kubernetes.io/component": "controller"}]

    # failover: Controller (the default): broker master and slave StatefulSets, the controllers' StatefulSet
    # and the NameServer Deployment
    apps = client.AppsV1Api(api)
    wait_for(lambda: len(apps.list_namespaced_stateful_set(namespace).items) == 3, 30, what="the StatefulSets")
    stored = [{**api.sanitize_for_serialization(o), "kind": kind}  # list items carry no kind
              for kind, items in (("StatefulSet", apps.list_namespaced_stateful_set(namespace).items),
                                  ("Deployment", apps.list_namespaced_deployment(namespace).items)) for o in items]
    pods = pod_security.workload_pods(stored)
    assert sorted(where for where, _, _ in pods) == sorted(
        ["StatefulSet/tls-broker-master", "StatefulSet/tls-broker-slave-1", "StatefulSet/tls-controller",
         "Deployment/tls-nameserver"]), [where for where, _, _ in pods]
    for where, pod, pod_annotations in pods:
        assert pod_security.violations(pod, pod_annotations) == [], where
        mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert {"/etc/rocket-auth", "/etc/rocket-tls", "/tmp"} <= mounts, where
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["admin-credentials"]["secret"]["secretName"] == "tls-admin-credentials", where
        assert volumes["tls"]["secret"]["secretName"] == "tls-tls", where
    controller = next(pod for where, pod, _ in pods if where == "StatefulSet/tls-controller")
    script = controller["containers"][0]["command"][-1]
    assert "--acl-enable --init-authentication-user /etc/rocket-auth/credentials" in script
    assert "--tls-mode permissive --tls-config /tmp/controller-tls.properties" in script


# -- the restricted profile enforced by an API server ----------------------------------------------

#: Kubernetes' own "restricted" example PodSecurityPolicy (the 1.20 API server's enforcement of the
#: restricted profile; Pod Security admission only exists from 1.22), with no defaults to mutate in:
#: a pod that does not set every field itself is changed by it, which the test then sees.
RESTRICTED_PSP = {
    "apiVersion": "policy/v1beta1", "kind": "PodSecurityPolicy",
    "metadata": {"name": "restricted", "annotations": {
        "seccomp.security.alpha.kubernetes.io/allowedProfileNames": "runtime/default"}},
    "spec": {
        "privileged": False, "allowPrivilegeEscalation": False, "requiredDropCapabilities": ["ALL"],
        "volumes": ["configMap", "emptyDir", "projected", "secret", "downwardAPI", "csi", "persistentVolumeClaim",
                    "ephemeral"],
        "hostNetwork": False, "hostIPC": False, "hostPID": False,
        "runAsUser": {"rule": "MustRunAsNonRoot"}, "seLinux": {"rule": "RunAsAny"},
        # the restricted profile constrains neither (PSP's MustRunAs would default them: a mutation)
        "supplementalGroups": {"rule": "RunAsAny"}, "fsGroup": {"rule": "RunAsAny"},
        "readOnlyRootFilesystem": True,
    },
}


@pytest.fixture(scope="module")
def enforcing_api(control_plane: Any) -> Iterator[Any]:
    """A second kube-apiserver (same binary, same etcd under its own prefix) with the
    PodSecurityPolicy admission plugin and only :data:`RESTRICTED_PSP`; a client for it."""
    import subprocess

    from kubernetes import client as k8s

    from tests.k8s import harness

    pki = control_plane.run_dir / "pki"
    port = free_port()
    log = control_plane.run_dir / "logs" / f"psp-apiserver-{port}.log"
    argv = [str(harness.cache_bin_dir() / "kube-apiserver"),
            "--etcd-servers", f"http://127.0.0.1:{control_plane.env['ROCKET_K8S_ETCD_PORT']}",
            "--etcd-prefix", f"/rocket-psp-{port}",
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(port),
            "--insecure-port", "0", "--tls-cert-file", str(pki / "apiserver.crt"),
            "--tls-private-key-file", str(pki / "apiserver.key"), "--client-ca-file", str(pki / "ca.crt"),
            "--token-auth-file", str(pki / "tokens.csv"), "--authorization-mode", "RBAC",
            "--service-account-key-file", str(pki / "sa.pub"),
            "--service-account-signing-key-file", str(pki / "sa.key"),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--api-audiences", "https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range", "10.96.0.0/24", "--endpoint-reconciler-type", "none",
            "--enable-admission-plugins", "NamespaceLifecycle,PodSecurityPolicy",
            "--disable-admission-plugins", "ServiceAccount,DefaultStorageClass",
            "--allow-privileged=true", "--cert-dir", str(control_plane.run_dir / f"psp-certs-{port}"), "--v", "1"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    cfg = k8s.Configuration()
    cfg.host = f"https://127.0.0.1:{port}"
    cfg.ssl_ca_cert = str(pki / "ca.crt")
    cfg.api_key = {"authorization": "Bearer rocket-test-admin-token"}
    api_client = k8s.ApiClient(cfg)
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"kube-apiserver exited {proc.returncode}: {log.read_text()[-3000:]}")
            k8s.CoreV1Api(api_client).list_namespace()
            return True

        wait_for(ready, 120, what=f"the PodSecurityPolicy API server (log {log})")
        def create_psp() -> bool:
            from kubernetes.dynamic import DynamicClient

            psp = DynamicClient(api_client).resources.get(api_version="policy/v1beta1", kind="PodSecurityPolicy")
            try:
                psp.create(body=RESTRICTED_PSP)
            except k8s.exceptions.ApiException as exc:
                if exc.status != 409:
                    raise
            return True

        wait_for(create_psp, 30, what="the restricted PodSecurityPolicy")
        yield api_client
    finally:
        api_client.close()
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _rendered_workloads() -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    """Every pod template the operator renders (ACL + operator TLS, and a cert-manager Secret) and the
    chart's operator Deployment (``helm template``)."""
    import subprocess

    import yaml

    from rocket_operator import builders
    from rocket_operator.spec import parse_spec
    from tests.observability.tools import need_helm

    owner = builders.Owner("ns", "rc", "uid")
    objects: list[dict[str, Any]] = []
    for security in ({"acl": {"enabled": True}, "tls": {"mode": "Enforcing"}},
                     {"tls": {"mode": "Permissive", "issuer": "Secret", "secretName": "cert"}}):
        objects += builders.desired_children(owner, parse_spec({"broker": {"replicasPerGroup": 1},
                                                                "security": security}))
    chart = Path(__file__).resolve().parents[2] / "charts" / "rocketcluster-operator"
    out = subprocess.run([need_helm(), "template", "op", str(chart), "--namespace", "ops"], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    objects += [d for d in yaml.safe_load_all(out) if d and d.get("kind") == "Deployment"]
    # the claims' volumes, as the StatefulSet controller adds them
    for sts in (o for o in objects if o["kind"] == "StatefulSet"):
        pod = sts["spec"]["template"]["spec"]
        pod["volumes"] = [*pod.get("volumes", []), *(
            {"name": t["metadata"]["name"], "persistentVolumeClaim": {
                "claimName": f"{t['metadata']['name']}-{sts['metadata']['name']}-0"}}
            for t in sts["spec"].get("volumeClaimTemplates", []))]
    return pod_security.workload_pods(objects)


def _dry_run_pod(api_client: Any, namespace: str, name: str, spec: dict[str, Any],
                 annotations: dict[str, str]) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations)}, "spec": spec}
    created = client.CoreV1Api(api_client).create_namespaced_pod(namespace, body, dry_run="All")
    return dict(api_client.sanitize_for_serialization(created))


def test_restricted_namespace_admits_every_workload_unchanged(enforcing_api: Any) -> None:
    """A namespace labelled ``pod-security.kubernetes.io/enforce=restricted`` (honoured by 1.25+ servers)
    on an API server that enforces the restricted profile with a PodSecurityPolicy: every pod the
    operator and the chart make is admitted without a field changed; a privileged variant is refused."""
    import copy

    ns = "restricted"
    client.CoreV1Api(enforcing_api).create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": ns, "labels": {"pod-security.kubernetes.io/enforce": "restricted",
                               "pod-security.kubernetes.io/enforce-version": "latest"}}})
    workloads = _rendered_workloads()
    # the admission plugin sees the policy once its informer has it
    first = workloads[0]
    wait_for(lambda: _dry_run_pod(enforcing_api, ns, "probe", copy.deepcopy(first[1]), first[2]), 30,
             what="the PodSecurityPolicy admission to know the policy")
    assert any(w[0].startswith("Deployment/op-") for w in workloads), [w[0] for w in workloads]
    for i, (where, spec, pod_annotations) in enumerate(workloads):
        created = _dry_run_pod(enforcing_api, ns, f"pod-{i}", copy.deepcopy(spec), pod_annotations)
        assert created["metadata"]["annotations"].get("kubernetes.io/psp") == "restricted", where
        sent = [c.get("securityContext") for c in spec["containers"]]
        got = [c.get("securityContext") for c in created["spec"]["containers"]]
        assert got == sent, f"{where}: mutated: {got}"
        assert created["spec"]["securityContext"] == spec["securityContext"], (
            f"{where}: mutated: {created['spec']['securityContext']}")
    where, spec, pod_annotations = workloads[0]
    for breaking in ({"privileged": True}, {"allowPrivilegeEscalation": True}, {"runAsUser": 0}):
        bad = copy.deepcopy(spec)
        bad["containers"][0]["securityContext"].update(breaking)
        with pytest.raises(client.exceptions.ApiException) as refused:
            _dry_run_pod(enforcing_api, ns, "bad", bad, pod_annotations)
        assert refused.value.status == 403 and "PodSecurityPolicy" in refused.value.body, breaking


def test_cluster_ca_near_its_end_is_renewed_and_both_are_trusted(api: Any, namespace: str, operator: Any) -> None:
    """A cluster CA (and its server certificate) 10 days from expiry: the operator makes a new CA,
    trusts old and new in the bundle, and moves the server certificate to the new CA."""
    import datetime

    from cryptography import x509

    from rocket_operator import certs, security

    long_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=355)
    old_ca, old_key = certs.new_ca("old CA", long_ago)
    old_cert, old_cert_key = certs.new_server_cert(old_ca, old_key, security.server_dns_names(namespace, "rot"),
                                                   long_ago)
    core = client.CoreV1Api(api)

    def seed(name: str, data: dict[str, bytes]) -> None:
        core.create_namespaced_secret(namespace, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                                                  "data": {k: base64.b64encode(v).decode() for k, v in data.items()}})

    seed("rot-cluster-ca", {"ca.crt": old_ca, "ca.key": old_key})
    seed("rot-cluster-ca-cert", {"ca.crt": old_ca})
    seed("rot-tls", {"tls.crt": old_cert, "tls.key": old_cert_key, "ca.crt": old_ca})
    create(api, namespace, rkc("rot", broker={"groups": 1, "replicasPerGroup": 0},
                               security={"tls": {"mode": "Permissive"}}))

    def bundle() -> list[x509.Certificate]:
        return x509.load_pem_x509_certificates(_secret(api, namespace, "rot-cluster-ca-cert")["ca.crt"].encode())

    wait_for(lambda: len(bundle()) == 2, 30, what="the renewed CA in the trust bundle")
    new, old = bundle()
    assert old.public_bytes(serialization.Encoding.PEM) == old_ca and new.not_valid_after_utc > old.not_valid_after_utc
    assert _secret(api, namespace, "rot-cluster-ca")["ca.crt"].encode() == new.public_bytes(serialization.Encoding.PEM)

    def moved() -> bool:  # the bundle is written first, the certificate last (a client trusts it before)
        leaf = x509.load_pem_x509_certificate(_secret(api, namespace, "rot-tls")["tls.crt"].encode())
        return certs.issued_by(leaf, new)

    wait_for(moved, 30, what="the server certificate issued by the new CA")
    server = _secret(api, namespace, "rot-tls")
    assert server["ca.crt"] == _secret(api, namespace, "rot-cluster-ca-cert")["ca.crt"]
    ca_secret = core.read_namespaced_secret("rot-cluster-ca", namespace)
    assert [r.name for r in ca_secret.metadata.owner_references] == ["rot"]

    def reasons() -> set[str]:
        return {e.reason for e in core.list_namespaced_event(namespace).items if e.involved_object.name == "rot"}

    # the renewals are told as events (and posted before the namespace goes)
    wait_for(lambda: {"ClusterCaRenewed", "ServerCertificateRenewed"} <= reasons(), 30, what="the renewal events")
    wait_for(lambda: (status(api, namespace, "rot").get("security") or {}).get("tls", {}).get("caNotAfter")
             == f"{new.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}", 30, what="status.security.tls of the new CA")
