"""``spec.security`` of a RocketCluster: ACL, TLS and NetworkPolicies as pure functions (no I/O).

The asynchronous part (Secrets with generated keys and certificates) is
:mod:`rocket_operator.security_step`; the certificates themselves are made by
:mod:`rocket_operator.certs`.

=============================================  ==========================================================
``<cluster>-admin-credentials`` (Secret)       with ACL on: the admin (Super) user, ``AccessKey`` /
                                               ``SecretKey`` and ``credentials`` (a RocketMQ key file);
                                               brokers and NameServers create it at start
                                               (``initAuthenticationUser``), the operator signs with it
``<cluster>-cluster-ca`` (Secret)              operator-issued TLS: the newest cluster CA (``ca.crt``,
                                               ``ca.key``); read by the operator only
``<cluster>-cluster-ca-cert`` (Secret)         the CA trust bundle (``ca.crt``) for clients
``<cluster>-tls`` (Secret)                     operator-issued TLS: the server certificate of every
                                               NameServer, broker and controller, cert-manager layout
                                               (``tls.crt``, ``tls.key``, ``ca.crt``)
``<cluster>-nameserver-config`` (ConfigMap)    with ACL or TLS on: ``nameserver.json``
NetworkPolicies ``<cluster>-broker``,         unless disabled (:func:`network_policies`)
``<cluster>-nameserver``, ``-controller``
=============================================  ==========================================================

Settings given to the servers (TLS keys are RocketMQ's ``TlsSystemConfig`` names, as
``rocket.remoting.tls`` reads them; a broker ignores keys it does not know):

* ``broker.conf``: ``aclEnable=true``, ``initAuthenticationUser=<admin credentials file>``;
  ``tlsMode`` (``PERMISSIVE`` / ``ENFORCING``), ``tls.enable``, ``tls.server.certPath``,
  ``tls.server.keyPath``, ``tls.server.trustCertPath``, ``tls.client.trustCertPath``,
  ``tls.client.authServer=false``;
* NameServers: the same in ``nameserver.json`` (``acl_enable``, ``init_authentication_user`` and
  the TLS keys as flat JSON keys).

``tls.client.authServer=false``: servers reach each other by pod IP (brokers register
``$POD_IP``; NameServer addresses are the headless Service's A records), which no certificate
issued before the pod started can name; their connections are encrypted, and NetworkPolicies
keep who may connect (RocketMQ's own default is the same).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rocket_operator import names

#: Where the admin credentials Secret and the TLS Secret are mounted in NameServer and broker pods.
AUTH_MOUNT = "/etc/rocket-auth"
TLS_MOUNT = "/etc/rocket-tls"
AUTH_VOLUME = "admin-credentials"
TLS_VOLUME = "tls"
#: File (Secret key) with the admin user as ``AccessKey=...`` / ``SecretKey=...`` lines.
CREDENTIALS_KEY = "credentials"
ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
ADMIN_CREDENTIALS_FILE = f"{AUTH_MOUNT}/{CREDENTIALS_KEY}"
#: The admin user's name (its password is random, made once by the operator).
ADMIN_USERNAME = "rocket-admin"
#: cert-manager's ``kubernetes.io/tls`` Secret layout.
TLS_CERT_KEY = "tls.crt"
TLS_KEY_KEY = "tls.key"
CA_CERT_KEY = "ca.crt"
CA_KEY_KEY = "ca.key"
#: The NameServer's settings file (ConfigMap key) and where it is mounted.
NAMESERVER_CONFIG_FILE = "nameserver.json"
NAMESERVER_CONFIG_MOUNT = "/etc/rocket"

TLS_MODES = ("Disabled", "Permissive", "Enforcing")
TLS_ISSUERS = ("Operator", "Secret")

#: Ports of a controller pod (``rocket controller``): remoting (brokers, mqadmin), HTTP and Raft.
CONTROLLER_PORT = 9878
CONTROLLER_HTTP_PORT = 9879
CONTROLLER_RAFT_PORT = 9880
#: Component label of controller pods (a controller StatefulSet of the cluster).
COMPONENT_CONTROLLER = "controller"
#: Labels of the operator's pods (charts/rocketcluster-operator), allowed to the admin HTTP ports.
OPERATOR_POD_LABELS = {names.LABEL_COMPONENT: "operator", names.LABEL_PART_OF: "rocketcluster"}


class SecuritySpecError(ValueError):
    """A ``spec.security`` value the CRD schema would refuse (the message names the field)."""


@dataclass(frozen=True, slots=True)
class TlsSpec:
    """``spec.security.tls``: ``mode`` Disabled|Permissive|Enforcing; ``issuer`` Operator (a cluster CA
    per RocketCluster) or Secret (``secret_name``: an existing Secret with ``tls.crt``, ``tls.key``
    and ``ca.crt``, as cert-manager writes them)."""

    mode: str = "Disabled"
    issuer: str = "Operator"
    secret_name: str | None = None

    @property
    def enabled(self) -> bool:
        """Whether the servers run TLS at all."""
        return self.mode != "Disabled"


@dataclass(frozen=True, slots=True)
class NetworkPolicySpec:
    """``spec.security.networkPolicies``: ``enabled`` (default true) and ``http_from``, extra
    NetworkPolicy peers (e.g. Prometheus) allowed to the HTTP ports besides the operator."""

    enabled: bool = True
    http_from: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class SecuritySpec:
    """``spec.security``: ``acl_enabled`` (RocketMQ ACL 2.0 on every NameServer and broker), TLS and
    NetworkPolicies."""

    acl_enabled: bool = False
    tls: TlsSpec = field(default_factory=TlsSpec)
    network_policies: NetworkPolicySpec = field(default_factory=NetworkPolicySpec)

    @property
    def any(self) -> bool:
        """Whether ACL or TLS is on (the servers then get extra settings and volumes)."""
        return self.acl_enabled or self.tls.enabled


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SecuritySpecError(f"{where} must be an object")
    return value


def parse_security(value: Any) -> SecuritySpec:
    """``spec.security`` as a :class:`SecuritySpec`; missing fields take the CRD's defaults.

    Raises :class:`SecuritySpecError` for a wrong type, a TLS mode or issuer outside the enums, an
    ``issuer: Secret`` without ``secretName``, or a ``networkPolicies.httpFrom`` entry that is not an
    object.
    """
    sec = _obj(value, "spec.security")
    acl = _obj(sec.get("acl"), "spec.security.acl")
    enabled = acl.get("enabled", False)
    if not isinstance(enabled, bool):
        raise SecuritySpecError("spec.security.acl.enabled must be a boolean")
    tls_raw = _obj(sec.get("tls"), "spec.security.tls")
    mode = tls_raw.get("mode") or "Disabled"
    if mode not in TLS_MODES:
        raise SecuritySpecError(f"spec.security.tls.mode must be one of {', '.join(TLS_MODES)}, got {mode!r}")
    issuer = tls_raw.get("issuer") or "Operator"
    if issuer not in TLS_ISSUERS:
        raise SecuritySpecError(f"spec.security.tls.issuer must be one of {', '.join(TLS_ISSUERS)}, got {issuer!r}")
    secret_name = tls_raw.get("secretName") or None
    if secret_name is not None and not isinstance(secret_name, str):
        raise SecuritySpecError("spec.security.tls.secretName must be a string")
    if issuer == "Secret" and mode != "Disabled" and not secret_name:
        raise SecuritySpecError("spec.security.tls.secretName is required with issuer: Secret")
    np_raw = _obj(sec.get("networkPolicies"), "spec.security.networkPolicies")
    np_enabled = np_raw.get("enabled", True)
    if not isinstance(np_enabled, bool):
        raise SecuritySpecError("spec.security.networkPolicies.enabled must be a boolean")
    peers = []
    for i, peer in enumerate(np_raw.get("httpFrom") or []):
        if not isinstance(peer, Mapping) or not peer:
            raise SecuritySpecError(f"spec.security.networkPolicies.httpFrom[{i}] must be a NetworkPolicyPeer object")
        peers.append(dict(peer))
    return SecuritySpec(acl_enabled=enabled, tls=TlsSpec(mode=mode, issuer=issuer, secret_name=secret_name),
                        network_policies=NetworkPolicySpec(enabled=np_enabled, http_from=tuple(peers)))


# -- names -----------------------------------------------------------------------------------------

def admin_secret(cluster: str) -> str:
    """The Secret with the admin (Super) user's keys."""
    return f"{cluster}-admin-credentials"


def cluster_ca_secret(cluster: str) -> str:
    """The Secret with the newest cluster CA's certificate and key (operator-issued TLS)."""
    return f"{cluster}-cluster-ca"


def cluster_ca_cert_secret(cluster: str) -> str:
    """The Secret with the CA trust bundle (``ca.crt``) clients mount."""
    return f"{cluster}-cluster-ca-cert"


def server_tls_secret(cluster: str) -> str:
    """The operator-issued server certificate Secret (cert-manager layout)."""
    return f"{cluster}-tls"


def tls_secret_name(cluster: str, tls: TlsSpec) -> str:
    """The Secret the pods mount: ``spec.security.tls.secretName`` or the operator-issued one."""
    if tls.issuer == "Secret" and tls.secret_name:
        return tls.secret_name
    return server_tls_secret(cluster)


def nameserver_config(cluster: str) -> str:
    """The NameServer ConfigMap (only with ACL or TLS on)."""
    return f"{cluster}-nameserver-config"


def controller_service(cluster: str) -> str:
    """The headless Service of a cluster's controller pods (``<pod>.<cluster>-controller``)."""
    return f"{cluster}-controller"


def server_dns_names(namespace: str, cluster: str, cluster_domain: str = "cluster.local") -> list[str]:
    """Every DNS name a client may use for a NameServer, broker or controller of the cluster: the
    Services and, by wildcard, each pod of a headless Service, short (``.svc``) and fully qualified."""
    out: list[str] = []
    for service in (names.nameserver(cluster), names.nameserver_headless(cluster), names.broker_service(cluster),
                    controller_service(cluster)):
        for suffix in (f"{namespace}.svc", f"{namespace}.svc.{cluster_domain}"):
            out.append(f"{service}.{suffix}")
            out.append(f"*.{service}.{suffix}")
    out.append(names.nameserver(cluster))
    return out


# -- settings --------------------------------------------------------------------------------------

def tls_settings(tls: TlsSpec) -> dict[str, str]:
    """The TLS keys (RocketMQ ``TlsSystemConfig`` names, ``tlsMode`` for ``tls.server.mode``) for
    ``tls``; empty when off. See the module doc for ``tls.client.authServer``."""
    if not tls.enabled:
        return {}
    return {
        "tlsMode": tls.mode.upper(),
        "tls.enable": "true",
        "tls.server.certPath": f"{TLS_MOUNT}/{TLS_CERT_KEY}",
        "tls.server.keyPath": f"{TLS_MOUNT}/{TLS_KEY_KEY}",
        "tls.server.trustCertPath": f"{TLS_MOUNT}/{CA_CERT_KEY}",
        "tls.server.need.client.auth": "none",
        "tls.client.trustCertPath": f"{TLS_MOUNT}/{CA_CERT_KEY}",
        "tls.client.authServer": "false",
    }


def broker_settings(sec: SecuritySpec) -> dict[str, str]:
    """Keys the operator adds to ``broker.conf`` (not overridable by ``spec.broker.config``)."""
    out: dict[str, str] = {}
    if sec.acl_enabled:
        out["aclEnable"] = "true"
        out["initAuthenticationUser"] = ADMIN_CREDENTIALS_FILE
    out.update(tls_settings(sec.tls))
    return out


def nameserver_config_json(sec: SecuritySpec) -> str:
    """``nameserver.json``: the NameServer's ACL settings (``rocket.nameserver.config`` names) and the
    TLS keys of :func:`tls_settings` (booleans as JSON booleans)."""
    obj: dict[str, Any] = {}
    if sec.acl_enabled:
        obj = {"acl_enable": True, "init_authentication_user": ADMIN_CREDENTIALS_FILE}
    for key, value in tls_settings(sec.tls).items():
        obj[key] = {"true": True, "false": False}.get(value, value)
    return json.dumps(obj, sort_keys=True)


# -- pods ------------------------------------------------------------------------------------------

def pod_volumes(cluster: str, sec: SecuritySpec) -> list[dict[str, Any]]:
    """Volumes of the admin credentials (ACL) and TLS Secrets, read-only files (mode 0400 for the
    key material; the pods' fsGroup/uid read them)."""
    out: list[dict[str, Any]] = []
    if sec.acl_enabled:
        out.append({"name": AUTH_VOLUME, "secret": {"secretName": admin_secret(cluster), "defaultMode": 0o440,
                                                    "items": [{"key": CREDENTIALS_KEY, "path": CREDENTIALS_KEY}]}})
    if sec.tls.enabled:
        out.append({"name": TLS_VOLUME, "secret": {"secretName": tls_secret_name(cluster, sec.tls),
                                                   "defaultMode": 0o440}})
    return out


def pod_mounts(sec: SecuritySpec) -> list[dict[str, Any]]:
    """The container mounts of :func:`pod_volumes` (a directory each: a Secret update reaches the
    files, which ``subPath`` mounts would not)."""
    out: list[dict[str, Any]] = []
    if sec.acl_enabled:
        out.append({"name": AUTH_VOLUME, "mountPath": AUTH_MOUNT, "readOnly": True})
    if sec.tls.enabled:
        out.append({"name": TLS_VOLUME, "mountPath": TLS_MOUNT, "readOnly": True})
    return out


def add_to_pod(pod_spec: dict[str, Any], container: dict[str, Any], cluster: str, sec: SecuritySpec) -> None:
    """Add the security volumes and mounts to a NameServer, broker or controller pod template (in
    place). With any Secret mounted, the pod's ``fsGroup`` (its ``runAsGroup``) makes the files
    group-readable. With ``tls.mode: Enforcing`` the container's HTTP probes use HTTPS (the servers'
    HTTP ports then take TLS only; the kubelet does not verify the certificate)."""
    if sec.tls.mode == "Enforcing":
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            http_get = (container.get(probe) or {}).get("httpGet")
            if http_get is not None:
                http_get["scheme"] = "HTTPS"
    if sec.any:
        ctx = pod_spec.setdefault("securityContext", {})
        if "fsGroup" not in ctx and "runAsGroup" in ctx:
            ctx["fsGroup"] = ctx["runAsGroup"]
    pod_spec["volumes"] = [*pod_spec.get("volumes", []), *pod_volumes(cluster, sec)]
    container["volumeMounts"] = [*container.get("volumeMounts", []), *pod_mounts(sec)]


def add_to_nameserver(pod_spec: dict[str, Any], container: dict[str, Any], cluster: str, sec: SecuritySpec) -> None:
    """With ACL or TLS on: the NameServer reads ``/etc/rocket/nameserver.json`` (``--config``) and gets
    the security volumes (in place; nothing changes when both are off)."""
    if not sec.any:
        return
    container["command"] = [*container["command"], "--config", f"{NAMESERVER_CONFIG_MOUNT}/{NAMESERVER_CONFIG_FILE}"]
    pod_spec["volumes"] = [*pod_spec.get("volumes", []),
                           {"name": "config", "configMap": {"name": nameserver_config(cluster)}}]
    container["volumeMounts"] = [*container.get("volumeMounts", []),
                                 {"name": "config", "mountPath": NAMESERVER_CONFIG_MOUNT, "readOnly": True}]
    add_to_pod(pod_spec, container, cluster, sec)


# -- network policies ------------------------------------------------------------------------------

def _peers_of(cluster: str, *components: str) -> list[dict[str, Any]]:
    return [{"podSelector": {"matchLabels": names.selector_labels(cluster, c)}} for c in components]


def operator_peer() -> dict[str, Any]:
    """The operator's pods, in any namespace (:data:`OPERATOR_POD_LABELS`)."""
    return {"namespaceSelector": {}, "podSelector": {"matchLabels": dict(OPERATOR_POD_LABELS)}}


def _port(number: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": number}]


def network_policies(owner_meta: Any, cluster: str, sec: SecuritySpec, *, nameserver_port: int,
                     nameserver_http_port: int, broker_port: int, broker_ha_port: int,
                     broker_http_port: int) -> list[dict[str, Any]]:
    """The cluster's NetworkPolicies (networking.k8s.io/v1, ingress only), none when disabled.

    * brokers: remoting (and its VIP port, ``listenPort - 2``) from anywhere; HA only from the
      cluster's broker and controller pods; HTTP (admin API, probes, metrics) only from the
      operator and ``httpFrom``;
    * NameServers: remoting from anywhere; HTTP from the operator and ``httpFrom``;
    * controllers: the controller port from the cluster's brokers, controllers and the operator;
      HTTP from the operator and ``httpFrom``; Raft only from controllers.

    ``owner_meta(name, component)`` gives each policy's ``metadata`` (labels, owner reference).
    Kubelet probes come from the node and are not subject to these rules on common CNIs.
    """
    if not sec.network_policies.enabled:
        return []
    http_peers = [operator_peer(), *sec.network_policies.http_from]
    brokers_and_controllers = _peers_of(cluster, names.COMPONENT_BROKER, COMPONENT_CONTROLLER)

    def policy(name: str, component: str, ingress: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": owner_meta(name, component),
            "spec": {"podSelector": {"matchLabels": names.selector_labels(cluster, component)},
                     "policyTypes": ["Ingress"], "ingress": ingress},
        }

    return [
        policy(names.broker_service(cluster), names.COMPONENT_BROKER, [
            {"ports": [*_port(broker_port), *_port(broker_port - 2)]},
            {"from": brokers_and_controllers, "ports": _port(broker_ha_port)},
            {"from": http_peers, "ports": _port(broker_http_port)},
        ]),
        policy(names.nameserver(cluster), names.COMPONENT_NAMESERVER, [
            {"ports": _port(nameserver_port)},
            {"from": http_peers, "ports": _port(nameserver_http_port)},
        ]),
        policy(controller_service(cluster), COMPONENT_CONTROLLER, [
            {"from": [*brokers_and_controllers, operator_peer()], "ports": _port(CONTROLLER_PORT)},
            {"from": http_peers, "ports": _port(CONTROLLER_HTTP_PORT)},
            {"from": _peers_of(cluster, COMPONENT_CONTROLLER), "ports": _port(CONTROLLER_RAFT_PORT)},
        ]),
    ]
