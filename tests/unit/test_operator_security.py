"""spec.security of the operator (pure parts): settings, pods, NetworkPolicies, the cluster CA and
server certificates, RocketUser specs and ACL diffs, and the restricted Pod Security Standard."""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl
import tempfile
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from rocket_operator import builders, certs, names, security, users
from rocket_operator.admin import http_auth_headers
from rocket_operator.builders import Owner
from rocket_operator.spec import SpecError, parse_spec
from tests import pod_security

OWNER = Owner(namespace="prod", name="rc", uid="uid-1")
SECURE = {"broker": {"groups": 2, "replicasPerGroup": 1},
          "security": {"acl": {"enabled": True}, "tls": {"mode": "Enforcing"}}}
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _by(children: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(c for c in children if c["kind"] == kind and c["metadata"]["name"] == name)


# -- spec ------------------------------------------------------------------------------------------

def test_security_defaults_are_off_but_network_policies_on() -> None:
    sec = parse_spec({}).security
    assert not sec.acl_enabled and sec.tls.mode == "Disabled" and not sec.any
    assert sec.network_policies.enabled and sec.network_policies.http_from == ()


@pytest.mark.parametrize("raw, field", [
    ({"acl": {"enabled": "yes"}}, "spec.security.acl.enabled"),
    ({"tls": {"mode": "Strict"}}, "spec.security.tls.mode"),
    ({"tls": {"mode": "Enforcing", "issuer": "Vault"}}, "spec.security.tls.issuer"),
    ({"tls": {"mode": "Enforcing", "issuer": "Secret"}}, "spec.security.tls.secretName"),
    ({"networkPolicies": {"httpFrom": ["prometheus"]}}, r"spec.security.networkPolicies.httpFrom\[0\]"),
])
def test_bad_security_specs_are_refused_naming_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=field):
        parse_spec({"security": raw})


# -- servers' settings and pods --------------------------------------------------------------------

def test_acl_and_tls_settings_reach_broker_conf_and_cannot_be_overridden() -> None:
    spec = parse_spec({**SECURE, "broker": {"config": {"aclEnable": "false", "tlsMode": "DISABLED"}}})
    conf = dict(line.split("=", 1) for line in builders.broker_config_text(OWNER, spec).splitlines())
    assert conf["aclEnable"] == "true"
    assert conf["initAuthenticationUser"] == "/etc/rocket-auth/credentials"
    assert conf["tlsMode"] == "ENFORCING" and conf["tls.enable"] == "true"
    assert conf["tls.server.certPath"] == "/etc/rocket-tls/tls.crt"
    assert conf["tls.server.keyPath"] == "/etc/rocket-tls/tls.key"
    assert conf["tls.server.trustCertPath"] == conf["tls.client.trustCertPath"] == "/etc/rocket-tls/ca.crt"
    assert conf["tls.client.authServer"] == "false"  # peers are reached by pod IP (security module doc)
    plain = builders.broker_config_text(OWNER, parse_spec({}))
    assert "aclEnable" not in plain and "tls" not in plain


def test_pods_mount_the_admin_credentials_and_the_tls_secret() -> None:
    spec = parse_spec(SECURE)
    children = builders.desired_children(OWNER, spec)
    sts = _by(children, "StatefulSet", "rc-broker-master")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in sts["volumes"]}
    assert volumes["admin-credentials"]["secret"]["secretName"] == "rc-admin-credentials"
    assert volumes["tls"]["secret"]["secretName"] == "rc-tls"
    mounts = {m["mountPath"]: m for m in sts["containers"][0]["volumeMounts"]}
    assert mounts["/etc/rocket-auth"]["readOnly"] and mounts["/etc/rocket-tls"]["readOnly"]
    dep = _by(children, "Deployment", "rc-nameserver")["spec"]["template"]
    ns_pod = dep["spec"]
    # Enforcing: the HTTP ports take TLS only, so the probes use HTTPS
    for pod in (sts, ns_pod):
        for probe in ("readinessProbe", "livenessProbe"):
            assert pod["containers"][0][probe]["httpGet"]["scheme"] == "HTTPS"
    assert ns_pod["containers"][0]["command"][-2:] == ["--config", "/etc/rocket/nameserver.json"]
    assert ns_pod["securityContext"]["fsGroup"] == builders.RUN_AS  # the Secret files are group-readable
    assert dep["metadata"]["annotations"][names.ANNOTATION_CONFIG_HASH]
    ns_json = json.loads(_by(children, "ConfigMap", "rc-nameserver-config")["data"]["nameserver.json"])
    ca = "/etc/rocket-tls/ca.crt"
    assert ns_json == {"acl_enable": True, "init_authentication_user": "/etc/rocket-auth/credentials",
                       "tlsMode": "ENFORCING", "tls.enable": True, "tls.server.certPath": "/etc/rocket-tls/tls.crt",
                       "tls.server.keyPath": "/etc/rocket-tls/tls.key", "tls.server.trustCertPath": ca,
                       "tls.server.need.client.auth": "none", "tls.client.trustCertPath": ca,
                       "tls.client.authServer": False}
    # the NameServer reads the ACL half as it is (its TLS keys are the tls work's)
    from rocket.nameserver.config import load_config_file
    acl_only = builders.build_nameserver_configmap(OWNER, parse_spec({"security": {"acl": {"enabled": True}}}))
    assert acl_only is not None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nameserver.json"
        path.write_text(acl_only["data"]["nameserver.json"])
        assert load_config_file(path).acl_enable is True
    # a user-given Secret is mounted as it is
    given = parse_spec({"security": {"tls": {"mode": "Permissive", "issuer": "Secret", "secretName": "cm-cert"}}})
    pod = builders.build_broker_statefulset(OWNER, given, 0, 1)["spec"]["template"]["spec"]
    assert "scheme" not in pod["containers"][0]["readinessProbe"]["httpGet"]  # Permissive: plain HTTP works
    assert {"name": "tls", "secret": {"secretName": "cm-cert", "defaultMode": 0o440}} in pod["volumes"]
    assert not any(v["name"] == "admin-credentials" for v in pod["volumes"])


def test_without_security_the_nameserver_is_unchanged() -> None:
    spec = parse_spec({})
    children = builders.desired_children(OWNER, spec)
    assert not any(c["kind"] == "ConfigMap" and c["metadata"]["name"] == "rc-nameserver-config" for c in children)
    dep = _by(children, "Deployment", "rc-nameserver")
    assert "--config" not in dep["spec"]["template"]["spec"]["containers"][0]["command"]


@pytest.mark.parametrize("raw", [{}, SECURE, {"security": {"tls": {"mode": "Permissive", "issuer": "Secret",
                                                                    "secretName": "x"}}}])
def test_every_workload_passes_the_restricted_pod_security_standard(raw: dict[str, Any]) -> None:
    children = builders.desired_children(OWNER, parse_spec(raw))
    pods = pod_security.workload_pods(children)
    assert {p[0] for p in pods} >= {"Deployment/rc-nameserver", "StatefulSet/rc-broker-master",
                                    "StatefulSet/rc-broker-slave-1"}
    for where, pod, pod_annotations in pods:
        assert pod_security.violations(pod, pod_annotations) == [], where


def test_the_checker_refuses_what_restricted_refuses() -> None:
    """The checker itself: each control catches its violation (else the test above proves nothing)."""
    pod = builders.desired_children(OWNER, parse_spec(SECURE))[-1]["spec"]["template"]["spec"]

    def breaks(change: Any) -> list[str]:
        import copy

        bad = copy.deepcopy(pod)
        change(bad)
        return pod_security.violations(bad)

    c = "containers"
    assert breaks(lambda p: p[c][0]["securityContext"].update(allowPrivilegeEscalation=True))
    assert breaks(lambda p: p[c][0]["securityContext"].update(readOnlyRootFilesystem=False))
    assert breaks(lambda p: p[c][0]["securityContext"]["capabilities"].update(drop=[]))
    assert breaks(lambda p: p[c][0]["securityContext"]["capabilities"].update(add=["NET_ADMIN"]))
    assert breaks(lambda p: p[c][0]["securityContext"].update(privileged=True))
    assert breaks(lambda p: (p["securityContext"].pop("runAsNonRoot"), p[c][0]["securityContext"].pop("runAsNonRoot")))
    assert breaks(lambda p: p["securityContext"].pop("seccompProfile"))
    assert breaks(lambda p: p["securityContext"].update(runAsUser=0))
    assert breaks(lambda p: p.update(hostNetwork=True))
    assert breaks(lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}))
    assert breaks(lambda p: p[c][0]["ports"][0].update(hostPort=10911))


# -- network policies ------------------------------------------------------------------------------

def test_network_policies_open_client_ports_and_close_ha_controller_and_admin_ports() -> None:
    prometheus = {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}
    spec = parse_spec({"security": {"networkPolicies": {"httpFrom": [prometheus]}}})
    children = builders.desired_children(OWNER, spec)
    broker = _by(children, "NetworkPolicy", "rc-broker")["spec"]
    assert broker["podSelector"]["matchLabels"] == names.selector_labels("rc", "broker")
    assert broker["policyTypes"] == ["Ingress"]
    rules = {tuple(p["port"] for p in r["ports"]): r.get("from") for r in broker["ingress"]}
    assert rules[(10911, 10909)] is None  # remoting and VIP: anyone
    assert rules[(10912,)] == [{"podSelector": {"matchLabels": names.selector_labels("rc", "broker")}},
                               {"podSelector": {"matchLabels": names.selector_labels("rc", "controller")}}]
    assert rules[(10913,)] == [security.operator_peer(), prometheus]
    assert security.operator_peer()["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/component": "operator", "app.kubernetes.io/part-of": "rocketcluster"}
    ns = _by(children, "NetworkPolicy", "rc-nameserver")["spec"]
    ns_rules = {tuple(p["port"] for p in r["ports"]): r.get("from") for r in ns["ingress"]}
    assert ns_rules[(9876,)] is None and ns_rules[(9877,)] == [security.operator_peer(), prometheus]
    ctl = _by(children, "NetworkPolicy", "rc-controller")["spec"]
    ctl_rules = {tuple(p["port"] for p in r["ports"]): r.get("from") for r in ctl["ingress"]}
    assert security.operator_peer() in ctl_rules[(9878,)]
    assert ctl_rules[(9879,)] == [security.operator_peer(), prometheus]
    assert ctl_rules[(9880,)] == [{"podSelector": {"matchLabels": names.selector_labels("rc", "controller")}}]
    off = builders.desired_children(OWNER, parse_spec({"security": {"networkPolicies": {"enabled": False}}}))
    assert not any(c["kind"] == "NetworkPolicy" for c in off)


# -- certificates ----------------------------------------------------------------------------------

DNS = security.server_dns_names("prod", "rc")


def _apply(plan: certs.TlsPlan, ca: dict[str, bytes] | None, bundle: dict[str, bytes] | None,
           server: dict[str, bytes] | None) -> tuple[Any, Any, Any]:
    return plan.ca or ca, plan.ca_cert or bundle, plan.server or server


def test_cluster_ca_and_server_certificate_lifecycle() -> None:
    first = certs.plan("rc", None, None, None, DNS, T0)
    assert first.ca and first.ca_cert and first.server
    assert [e[0] for e in first.events] == ["ClusterCaCreated", "ServerCertificateCreated"]
    ca, bundle, server = _apply(first, None, None, None)
    ca_cert = certs.load_certs(ca["ca.crt"])[0]
    assert (certs.not_after(ca_cert) - T0).days == 365
    ext = ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert ext.ca is True
    leaf = certs.load_certs(server["tls.crt"])[0]
    assert certs.issued_by(leaf, ca_cert)
    assert "*.rc-broker.prod.svc" in certs.dns_names_of(leaf) and "rc-nameserver.prod.svc.cluster.local" in \
        certs.dns_names_of(leaf)
    assert server["ca.crt"] == bundle["ca.crt"] == ca["ca.crt"]

    # nothing to do until 30 days before the CA expires
    steady = certs.plan("rc", ca, bundle, server, DNS, T0 + datetime.timedelta(days=334))
    assert steady.ca is None and steady.ca_cert is None and steady.server is None and not steady.events

    # CA renewal: a new CA joins the bundle; the server certificate stays (signed by the old CA)
    renew_at = T0 + datetime.timedelta(days=336)
    renewed = certs.plan("rc", ca, bundle, server, DNS, renew_at)
    assert [e[0] for e in renewed.events] == ["ClusterCaRenewed"]
    assert renewed.ca and renewed.ca_cert and renewed.server is not None  # only its ca.crt bundle changes
    assert renewed.server["tls.crt"] == server["tls.crt"]
    ca2, bundle2, server2 = _apply(renewed, ca, bundle, server)
    trusted = certs.load_certs(bundle2["ca.crt"])
    new_ca = certs.load_certs(ca2["ca.crt"])[0]
    assert trusted == [new_ca, ca_cert] and server2["ca.crt"] == bundle2["ca.crt"]

    # a week later (23 days before the old one expires) the server certificate moves to the new CA
    moved = certs.plan("rc", ca2, bundle2, server2, DNS, T0 + datetime.timedelta(days=343))
    assert [e[0] for e in moved.events] == ["ServerCertificateRenewed"]
    assert moved.server is not None and certs.issued_by(certs.load_certs(moved.server["tls.crt"])[0], new_ca)

    # the old CA leaves the bundle once it has expired
    later = certs.plan("rc", ca2, bundle2, moved.server, DNS, T0 + datetime.timedelta(days=366))
    assert later.ca_cert is not None and certs.load_certs(later.ca_cert["ca.crt"]) == [new_ca]


def test_names_change_or_garbage_reissue_the_certificate() -> None:
    first = certs.plan("rc", None, None, None, DNS, T0)
    ca, bundle, server = _apply(first, None, None, None)
    more = [*DNS, "extra.example"]
    changed = certs.plan("rc", ca, bundle, server, more, T0)
    assert [e[0] for e in changed.events] == ["ServerCertificateNamesChanged"] and changed.ca is None
    broken = certs.plan("rc", ca, bundle, {"tls.crt": b"junk", "tls.key": b"junk"}, DNS, T0)
    assert [e[0] for e in broken.events] == ["ServerCertificateCreated"]


def test_issued_certificate_serves_tls_to_a_client_trusting_the_bundle(tmp_path: Path) -> None:
    """A real TLS handshake (Python's ssl, OpenSSL) on loopback: the client checks the pod's DNS name
    against the certificate and the chain against the trust bundle."""
    from tests.support import free_port

    first = certs.plan("rc", None, None, None, DNS, datetime.datetime.now(datetime.UTC))
    assert first.server is not None
    for key, value in first.server.items():
        (tmp_path / key).write_bytes(value)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    port = free_port()

    async def run() -> tuple[bytes, str]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.readexactly(4))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", port, ssl=server_ctx)
        async with server:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_ctx, server_hostname="rc-broker-master-0.rc-broker.prod.svc")
            writer.write(b"ping")
            echoed = await reader.readexactly(4)
            version = writer.get_extra_info("ssl_object").version()
            writer.close()
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="evil.example")
            return echoed, version

    echoed, version = asyncio.run(run())
    assert echoed == b"ping" and version.startswith("TLSv1.")


# -- RocketUser ------------------------------------------------------------------------------------

def test_user_spec_turns_into_an_acl() -> None:
    user = users.parse_user_spec("orders", {"cluster": "rc", "policies": [
        {"resources": ["Topic:Orders", "Group:orders-*"], "actions": ["Pub", "Sub"], "sourceIps": ["10.0.0.0/8"]},
        {"resources": ["Topic:Secret"], "actions": ["All"], "decision": "Deny"}]})
    assert (user.username, user.secret_name) == ("orders", "orders")
    acl = user.acl_json()
    assert acl is not None and acl["subject"] == "User:orders"
    entries = {e["resource"]: e for e in acl["policies"][0]["entries"]}
    assert entries["Group:orders-*"] == {"resource": "Group:orders-*", "actions": ["Pub", "Sub"],
                                         "sourceIps": ["10.0.0.0/8"], "decision": "Allow"}
    assert entries["Topic:Secret"]["decision"] == "Deny"
    assert users.parse_user_spec("x", {"cluster": "rc"}).acl is None


@pytest.mark.parametrize("spec, field", [
    ({}, "spec.cluster"),
    ({"cluster": "rc", "username": "a:b"}, "spec.username"),
    ({"cluster": "rc", "policies": [{"resources": ["Queue:x"], "actions": ["Pub"]}]}, r"spec.policies\[0\]"),
    ({"cluster": "rc", "policies": [{"resources": ["Topic:x"], "actions": ["Fly"]}]}, r"spec.policies\[0\]"),
    ({"cluster": "rc", "policies": [{"resources": ["Topic:x"], "actions": ["Pub"], "sourceIps": ["nope"]}]},
     r"spec.policies\[0\]"),
    ({"cluster": "rc", "policies": [{"resources": ["Topic:x"], "actions": ["Pub"], "decision": "Maybe"}]},
     r"spec.policies\[0\]"),
])
def test_bad_user_specs_are_refused(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(users.UserSpecError, match=field):
        users.parse_user_spec("x", spec)


def test_acl_changes_delete_stale_entries_and_write_only_when_different() -> None:
    def acl(*entries: tuple[str, list[str]]) -> dict[str, Any]:
        return {"subject": "User:u", "policies": [{"policyType": "Custom", "entries": [
            {"resource": r, "actions": a, "decision": "Allow"} for r, a in entries]}]}

    assert users.acl_changes(acl(("Topic:a", ["Pub", "Sub"])), acl(("Topic:a", ["Sub", "Pub"]))) == ([], False)
    assert users.acl_changes(None, acl(("Topic:a", ["Pub"]))) == ([], True)
    assert users.acl_changes(acl(("Topic:a", ["Pub"]), ("Topic:b", ["Pub"])), acl(("Topic:a", ["Pub"]))) == (
        [("Custom", "Topic:b")], False)
    assert users.acl_changes(acl(("Topic:a", ["Pub"])), acl(("Topic:a", ["Sub"]))) == ([], True)
    assert users.acl_changes(acl(("Topic:a", ["Pub"])), None) == ([("Custom", "Topic:a")], False)


def test_masters_of_the_nameservers_tables() -> None:
    tables = {"ns1": {"rc-broker-0": {0: "a:1", 1: "b:1"}, "rc-broker-1": {1: "c:1"}},
              "ns2": {"rc-broker-1": {0: "d:1"}}}
    assert users.masters_of(tables) == {"rc-broker-0": "a:1", "rc-broker-1": "d:1"}


def test_http_credential_of_the_admin_keys() -> None:
    from rocket.auth import SessionCredentials

    assert http_auth_headers(None) == {}
    assert http_auth_headers(SessionCredentials("rocket-admin", "s3cret")) == {
        "Authorization": "Basic cm9ja2V0LWFkbWluOnMzY3JldA=="}


def test_spark_driver_and_executor_pods_are_restricted() -> None:
    """The analytics jobs' pods (made by the Spark operator from our SparkApplication): restricted,
    with a writable root filesystem (Spark's scratch space)."""
    spec = parse_spec({"analytics": {"jobs": [{"name": "t", "job": "traffic", "topics": ["T"]}]}})
    app = builders.build_analytics_application(OWNER, spec, spec.analytics.jobs[0])
    for role in ("driver", "executor"):
        pod = app["spec"][role]
        as_pod = {"securityContext": pod["podSecurityContext"],
                  "containers": [{"name": f"spark-{role}", "securityContext": pod["securityContext"]}]}
        assert pod_security.violations(as_pod, read_only_root=False) == [], role


def test_enforcing_tls_makes_the_pass_admin_use_tls_trusting_the_written_bundle(tmp_path: Path) -> None:
    """``SecurityResult.signed``: with a CA file the admin view connects with TLS trusting it (one
    client per file, shared by every view; plaintext view unchanged); the bundle file is rewritten only
    when its content changes."""
    import os

    from rocket.auth import SessionCredentials
    from rocket_operator.admin import RemotingClusterAdmin
    from rocket_operator.security_step import SecurityResult, write_ca_bundle
    from rocket_operator.steps import Context

    ca_cert, _ = certs.new_ca("t", datetime.datetime.now(datetime.UTC))
    path = write_ca_bundle("ns", "rc", ca_cert, str(tmp_path))
    assert Path(path).read_bytes() == ca_cert and path == str(tmp_path / "ns.rc.ca.crt")
    before = os.stat(path).st_mtime_ns, os.stat(path).st_ino
    assert write_ca_bundle("ns", "rc", ca_cert, str(tmp_path)) == path
    assert (os.stat(path).st_mtime_ns, os.stat(path).st_ino) == before  # unchanged: not rewritten

    admin = RemotingClusterAdmin()
    ctx = Context(kube=None, resolver=None, admin=admin)  # type: ignore[arg-type]
    creds = SessionCredentials("rocket-admin", "s" * 24)
    view = SecurityResult(credentials=creds, ca_file=path).signed(ctx).admin
    again = SecurityResult(credentials=creds, ca_file=path).signed(ctx).admin
    assert isinstance(view, RemotingClusterAdmin) and isinstance(again, RemotingClusterAdmin)
    assert view.credentials == creds and view.tls is not None and view.tls.verify is False
    assert view.tls.config.client_trust_cert_path == path and view.client is again.client
    assert view.client is not admin.client and admin.tls is None
    plain = SecurityResult(credentials=creds).signed(ctx).admin
    assert isinstance(plain, RemotingClusterAdmin) and plain.client is admin.client and plain.tls is None
    asyncio.run(admin.close())
