"""The controllers of ``spec.broker.failover: Controller`` as manifests (pure; no I/O).

RocketMQ 5's controller mode (RIP-44): three ``rocket controller`` peers keep every broker
group's master, master epoch and SyncStateSet in Raft (pysyncobj) and elect a new master
when one dies; brokers run with ``enableControllerMode=true`` and ``controllerAddr``
(:func:`rocket_operator.builders.controller_addr`). For a RocketCluster ``c``:

* ``c-controller``: a headless Service (``publishNotReadyAddresses``, so that peers find each
  other before any of them is Ready) giving each pod the stable name
  ``c-controller-<i>.c-controller.<ns>.svc``; its Raft peers are those names;
* ``c-controller``: a StatefulSet of :data:`~rocket_operator.spec.CONTROLLER_REPLICAS` pods
  (parallel start, so that a majority forms; rolling updates one pod at a time, waiting for it
  to be Ready) with a ``data`` PVC per pod for the Raft journal and snapshot;
* ``c-controller``: a PodDisruptionBudget of ``maxUnavailable: 1`` (a majority stays up);
* ``c-controller-secret``: the Raft password (:func:`build_controller_secret`), created once
  by the operator with a random value and mounted as a file (``--secret-file``), never put on
  a command line, in the environment or in a log.

With ``spec.security`` (:mod:`rocket_operator.security`) the controllers get what brokers and
NameServers get: with ACL on, ``--acl-enable`` with the admin (Super) user of
``<cluster>-admin-credentials`` as initial user and inner credentials (the file mounted by
:func:`rocket_operator.security.add_to_pod`) and ``--cluster <cluster>`` (the brokers'
``brokerClusterName``); with TLS on, ``--tls-mode`` and ``--tls-config``, a properties file of the
same ``TlsSystemConfig`` keys as ``broker.conf`` (:func:`rocket_operator.security.tls_settings`),
written to ``/tmp`` at start from the command line (no key material in it: only paths into the
mounted ``<cluster>-tls`` Secret). With ``tls.mode: Enforcing`` the HTTP probes use HTTPS.
"""

from __future__ import annotations

import base64
import secrets
import shlex
from typing import Any

from rocket_operator import names, security
from rocket_operator.builders import (
    TMP_MOUNT,
    TMP_VOLUME,
    Capabilities,
    Manifest,
    Owner,
    _http_probe,
    _meta,
    _pod_scheduling,
    _server_container,
    _service,
    _spread_over_nodes,
    _tmp_volume,
    pod_security_context,
)
from rocket_operator.spec import (
    CONTROLLER_HTTP_PORT,
    CONTROLLER_PORT,
    CONTROLLER_RAFT_PORT,
    CONTROLLER_REPLICAS,
    ClusterSpec,
)

#: Where the controller's PVC is mounted; the Raft files go to a subdirectory it creates (0700).
CONTROLLER_DATA_MOUNT = "/var/lib/rocket/controller"
CONTROLLER_DATA_DIR = f"{CONTROLLER_DATA_MOUNT}/raft"
#: Where the Secret is mounted (read-only) and the file ``--secret-file`` reads.
CONTROLLER_SECRET_MOUNT = "/etc/rocket/controller"
CONTROLLER_SECRET_FILE = f"{CONTROLLER_SECRET_MOUNT}/{names.CONTROLLER_SECRET_KEY}"
#: Size of each controller's PVC (the state is a few KB per broker group; the journal is compacted).
CONTROLLER_STORAGE = "1Gi"
#: Random bytes of a new Raft password (URL-safe base64: 43 characters, above the controller's 16).
SECRET_BYTES = 32
#: The TLS properties file a controller pod writes at start (``--tls-config``; /tmp is an emptyDir).
CONTROLLER_TLS_CONFIG_FILE = f"{TMP_MOUNT}/controller-tls.properties"


def controller_peer(namespace: str, cluster: str, index: int) -> str:
    """One ``--controller-peers`` entry: ``<pod dns>:9878/9880`` (remoting port / Raft port)."""
    return (f"{names.controller_pod(cluster, index)}.{names.controller(cluster)}.{namespace}.svc:"
            f"{CONTROLLER_PORT}/{CONTROLLER_RAFT_PORT}")


def controller_security_args(cluster: str, sec: security.SecuritySpec) -> list[str]:
    """The ``rocket controller`` flags of ``spec.security`` (module doc): ACL
    (``--acl-enable --init-authentication-user F --inner-credentials F --cluster <cluster>``, F the
    mounted admin credentials file) and TLS (``--tls-mode <mode> --tls-config``
    :data:`CONTROLLER_TLS_CONFIG_FILE`); empty when both are off."""
    out: list[str] = []
    if sec.acl_enabled:
        out += ["--acl-enable", "--init-authentication-user", security.ADMIN_CREDENTIALS_FILE,
                "--inner-credentials", security.ADMIN_CREDENTIALS_FILE, "--cluster", cluster]
    if sec.tls.enabled:
        out += ["--tls-mode", sec.tls.mode.lower(), "--tls-config", CONTROLLER_TLS_CONFIG_FILE]
    return out


def controller_tls_properties(sec: security.SecuritySpec) -> str:
    """The ``--tls-config`` file's text: :func:`rocket_operator.security.tls_settings` as Java
    properties lines, without ``tlsMode`` (given as ``--tls-mode``); "" with TLS off."""
    keys = {k: v for k, v in security.tls_settings(sec.tls).items() if k != "tlsMode"}
    return "".join(f"{k}={v}\n" for k, v in sorted(keys.items()))


def controller_command(owner: Owner, sec: security.SecuritySpec | None = None) -> list[str]:
    """The controller container's command: ``rocket controller`` with every peer's stable DNS name,
    this pod's own entry (``--self-addr``, from its hostname), Raft bound on every interface
    (the pod's DNS name may not resolve yet when it starts), the secret from the mounted file, and
    :func:`controller_security_args` (with TLS on, the script first writes
    :func:`controller_tls_properties` to :data:`CONTROLLER_TLS_CONFIG_FILE`)."""
    sec = sec or security.SecuritySpec()
    peers = ",".join(controller_peer(owner.namespace, owner.name, i) for i in range(CONTROLLER_REPLICAS))
    svc = f"{names.controller(owner.name)}.{owner.namespace}.svc"
    script = (
        f"exec python -m rocket.cli controller --controller-peers {peers} "
        f'--self-addr "$HOSTNAME.{svc}:{CONTROLLER_PORT}" --port {CONTROLLER_PORT} '
        f"--http-port {CONTROLLER_HTTP_PORT} --raft-bind-host 0.0.0.0 --data-dir {CONTROLLER_DATA_DIR} "
        f"--secret-file {CONTROLLER_SECRET_FILE}"
    )
    extra = controller_security_args(owner.name, sec)
    if extra:
        script += " " + " ".join(shlex.quote(a) for a in extra)
    if sec.tls.enabled:
        props = controller_tls_properties(sec)
        script = f"printf %s {shlex.quote(props)} > {CONTROLLER_TLS_CONFIG_FILE} && {script}"
    return ["/bin/sh", "-c", script]


def build_controller_service(owner: Owner) -> Manifest:
    """Headless Service ``<cluster>-controller`` governing the controller StatefulSet (remoting,
    Raft and HTTP ports), publishing not-ready pods so that Raft peers resolve during start."""
    return _service(owner, names.controller(owner.name), names.COMPONENT_CONTROLLER,
                    {"remoting": CONTROLLER_PORT, "raft": CONTROLLER_RAFT_PORT, "http": CONTROLLER_HTTP_PORT},
                    {"clusterIP": "None", "publishNotReadyAddresses": True})


def build_controller_statefulset(owner: Owner, spec: ClusterSpec) -> Manifest:
    """StatefulSet ``<cluster>-controller``: 3 pods of ``rocket controller`` (see the module doc).

    Probes on the HTTP port 9879: readiness ``/readyz`` (joined Raft and listening), liveness
    ``/healthz``. The Secret is a read-only volume (mode 0440, group 10001 through fsGroup);
    the ``data`` PVC (1 Gi, the broker storage class) holds the Raft files. Pods prefer
    different nodes. Non-root, read-only root filesystem, ``/tmp`` an emptyDir.
    """
    cluster = owner.name
    labels = names.base_labels(cluster, names.COMPONENT_CONTROLLER)
    selector = names.selector_labels(cluster, names.COMPONENT_CONTROLLER)
    container = _server_container(
        "controller", spec, controller_command(owner, spec.security),
        {"remoting": CONTROLLER_PORT, "raft": CONTROLLER_RAFT_PORT, "http": CONTROLLER_HTTP_PORT},
        {"readinessProbe": _http_probe("/readyz", "http", initial=2, period=5, failures=3),
         "livenessProbe": _http_probe("/healthz", "http", initial=10, period=10, failures=6)},
        [{"name": names.CONTROLLER_DATA_VOLUME, "mountPath": CONTROLLER_DATA_MOUNT},
         {"name": "raft-secret", "mountPath": CONTROLLER_SECRET_MOUNT, "readOnly": True},
         {"name": TMP_VOLUME, "mountPath": TMP_MOUNT}])
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 30,
        "securityContext": pod_security_context(fs_group=True),
        "containers": [container],
        "volumes": [
            {"name": "raft-secret", "secret": {"secretName": names.controller_secret(cluster), "defaultMode": 0o440}},
            _tmp_volume(),
        ],
        "affinity": _spread_over_nodes(selector, spec),
        **_pod_scheduling(spec),
    }
    security.add_to_pod(pod_spec, container, cluster, spec.security)  # with Enforcing also HTTPS probes
    claim_spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                                  "resources": {"requests": {"storage": CONTROLLER_STORAGE}}}
    if spec.broker.storage.storage_class_name is not None:
        claim_spec["storageClassName"] = spec.broker.storage.storage_class_name
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(owner, names.controller(cluster), labels),
        "spec": {
            "replicas": CONTROLLER_REPLICAS,
            "serviceName": names.controller(cluster),
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
            "volumeClaimTemplates": [{
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": names.CONTROLLER_DATA_VOLUME, "labels": labels},
                "spec": claim_spec,
            }],
        },
    }


def build_controller_pdb(owner: Owner, caps: Capabilities | None = None) -> Manifest:
    """PodDisruptionBudget ``<cluster>-controller``: at most one controller evicted at a time, so a
    Raft majority (2 of 3) stays. ``policy/v1`` or, on 1.20, ``policy/v1beta1``."""
    caps = caps or Capabilities()
    return {
        "apiVersion": caps.pdb_api_version,
        "kind": "PodDisruptionBudget",
        "metadata": _meta(owner, names.controller(owner.name),
                          names.base_labels(owner.name, names.COMPONENT_CONTROLLER)),
        "spec": {"maxUnavailable": 1,
                 "selector": {"matchLabels": names.selector_labels(owner.name, names.COMPONENT_CONTROLLER)}},
    }


def controller_children(owner: Owner, spec: ClusterSpec, caps: Capabilities | None = None) -> list[Manifest]:
    """What ``failover: Controller`` adds to the children (Service before the StatefulSet); empty
    with ``failover: Manual``. The Secret is not among them (:func:`build_controller_secret`)."""
    if not spec.broker.controller_mode:
        return []
    return [build_controller_service(owner), build_controller_statefulset(owner, spec),
            build_controller_pdb(owner, caps)]


def new_raft_secret() -> str:
    """A fresh random Raft password: :data:`SECRET_BYTES` bytes from :mod:`secrets`, URL-safe base64."""
    return secrets.token_urlsafe(SECRET_BYTES)


def build_controller_secret(owner: Owner, password: str) -> Manifest:
    """The Secret ``<cluster>-controller-secret`` (type Opaque) with ``password`` under
    :data:`~rocket_operator.names.CONTROLLER_SECRET_KEY`, owned by the RocketCluster (deleted with
    it). Created once (POST) and never applied again, so the password never changes under
    running controllers; never log this manifest."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _meta(owner, names.controller_secret(owner.name),
                          names.base_labels(owner.name, names.COMPONENT_CONTROLLER)),
        "data": {names.CONTROLLER_SECRET_KEY: base64.b64encode(password.encode()).decode()},
    }


__all__ = [
    "CONTROLLER_DATA_DIR",
    "CONTROLLER_SECRET_FILE",
    "CONTROLLER_TLS_CONFIG_FILE",
    "build_controller_pdb",
    "build_controller_secret",
    "build_controller_service",
    "build_controller_statefulset",
    "controller_children",
    "controller_command",
    "controller_peer",
    "controller_security_args",
    "controller_tls_properties",
    "new_raft_secret",
]
