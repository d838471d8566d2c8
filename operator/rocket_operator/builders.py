"""Desired state: every child manifest of a RocketCluster as a pure function of its spec.

Nothing here does I/O. Each ``build_*`` function returns a plain ``dict`` ready
for a server-side apply (``apiVersion``, ``kind``, ``metadata`` with
``namespace``, labels and a controller owner reference, and ``spec``).
:func:`desired_children` returns the whole set for one cluster in apply order.

Broker topology (see :mod:`rocket_operator.names`): one StatefulSet of masters
(brokerId 0) and one StatefulSet per slave index k = 1..``replicasPerGroup``;
in every one of them ordinal i is broker group i, so scaling ``groups`` adds or
removes the same ordinal in every StatefulSet, and the highest group goes
first on scale-in. All use ``updateStrategy: OnDelete``: the operator deletes
outdated pods itself, slaves before masters, one at a time
(:mod:`rocket_operator.rollout`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rocket_operator import names, security
from rocket_operator.spec import (
    BROKER_HA_PORT,
    BROKER_HTTP_PORT,
    BROKER_PORT,
    CONTROLLER_PORT,
    CONTROLLER_REPLICAS,
    NAMESERVER_HTTP_PORT,
    NAMESERVER_PORT,
    AnalyticsJobSpec,
    ClusterSpec,
    SparkPodResources,
    output_mount,
)

STORE_MOUNT = "/var/lib/rocket/store"
CONFIG_MOUNT = "/etc/rocket"
CONFIG_FILE = "broker.conf"
#: uid and gid of the ``rocket`` image's user (images/rocket/Dockerfile).
RUN_AS = 10001
#: The only writable paths of a NameServer or broker container besides the broker's store.
TMP_MOUNT = "/tmp"
TMP_VOLUME = "tmp"

Manifest = dict[str, Any]

#: The analytics image (images/analytics/Dockerfile) when neither the spec nor the operator's
#: ``ROCKET_OPERATOR_ANALYTICS_IMAGE`` names one.
DEFAULT_ANALYTICS_IMAGE = "rocketcluster/analytics:0.1.0"
#: Where the analytics image installs the jobs: the ``rocket`` package in the python3.11 virtualenv
#: ``/opt/rocket``; each job module runs under spark-submit as ``__main__`` (``main()`` of the module).
ANALYTICS_JOBS_DIR = "/opt/rocket/lib/python3.11/site-packages/rocket/analytics/jobs"
#: Default ``--out`` of a job: ``<root>/<job name>`` in the driver's working directory (writable in the image).
ANALYTICS_OUTPUT_ROOT = "/opt/spark/work-dir/analytics"
#: Name of the volume (in the SparkApplication) of a job's ``outputVolumeClaim``.
ANALYTICS_OUTPUT_VOLUME = "analytics-output"


@dataclass(frozen=True, slots=True)
class Owner:
    """The RocketCluster that owns the children: namespace, name and uid."""

    namespace: str
    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        """A controller ``ownerReference`` to this RocketCluster (garbage-collects the child with it)."""
        return {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the API server supports, probed once at start (see ``kube.probe_capabilities``).

    ``pdb_api_version``: ``policy/v1`` (k8s >= 1.21) or ``policy/v1beta1`` (1.20).
    ``affinity_match_label_keys``: pod (anti-)affinity ``matchLabelKeys`` with the
    ``apps.kubernetes.io/pod-index`` label (k8s >= 1.31), which lets one
    template keep master i and slave i on different nodes.
    """

    pdb_api_version: str = "policy/v1"
    affinity_match_label_keys: bool = False

    @classmethod
    def for_version(cls, major: int, minor: int) -> Capabilities:
        """The capabilities of a Kubernetes ``major.minor`` server."""
        modern = (major, minor) >= (1, 21)
        return cls(
            pdb_api_version="policy/v1" if modern else "policy/v1beta1",
            affinity_match_label_keys=(major, minor) >= (1, 31),
        )


def _meta(owner: Owner, name: str, labels: Mapping[str, str], annotations: Mapping[str, str] | None = None
          ) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": owner.namespace,
        "labels": dict(labels),
        "ownerReferences": [owner.reference()],
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def _service(owner: Owner, name: str, component: str, ports: Mapping[str, int], spec: Mapping[str, Any]) -> Manifest:
    """A Service ``name`` selecting ``owner``'s ``component`` pods: the ``spec`` fields given (``type``,
    ``clusterIP``, ``publishNotReadyAddresses``), then one TCP port per ``ports`` item (port name ->
    number), each targeting the container port of the same name."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(owner, name, names.base_labels(owner.name, component)),
        "spec": {
            **spec,
            "selector": names.selector_labels(owner.name, component),
            "ports": [{"name": port_name, "port": number, "targetPort": port_name, "protocol": "TCP"}
                      for port_name, number in ports.items()],
        },
    }


def _http_probe(path: str, port: str, *, initial: int, period: int, failures: int, timeout: int = 3
                ) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port},
        "initialDelaySeconds": initial,
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def _server_container(name: str, spec: ClusterSpec, command: list[str], ports: Mapping[str, int],
                      probes: Mapping[str, dict[str, Any]], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """The container of a server pod (NameServer, broker, controller): ``spec``'s image, ``ports``
    (name -> TCP port, as :func:`_service` takes them), ``probes`` (``readinessProbe`` ...),
    ``mounts`` and :func:`container_security_context`."""
    return {
        "name": name,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": command,
        "ports": [{"name": port_name, "containerPort": number, "protocol": "TCP"}
                  for port_name, number in ports.items()],
        **probes,
        "securityContext": container_security_context(),
        "volumeMounts": mounts,
    }


def _spread_over_nodes(selector: Mapping[str, str], spec: ClusterSpec) -> dict[str, Any]:
    """A pod affinity preferring (weight 100) pods of ``selector`` on different
    ``spec.scheduling.topologyKey`` domains."""
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100,
        "podAffinityTerm": {"labelSelector": {"matchLabels": dict(selector)},
                            "topologyKey": spec.scheduling.topology_key},
    }]}}


def pod_security_context(*, fs_group: bool) -> dict[str, Any]:
    """Pod-level: non-root uid/gid 10001 and the runtime's default seccomp profile. With
    ``fs_group``, volumes (the broker's store PVC) are made group-writable for gid 10001,
    re-walked only when the volume root does not match already (large stores mount fast)."""
    ctx: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if fs_group:
        ctx["fsGroup"] = RUN_AS
        ctx["fsGroupChangePolicy"] = "OnRootMismatch"
    return ctx


def container_security_context() -> dict[str, Any]:
    """Container-level: no privilege escalation, no capabilities, read-only root filesystem
    (the process writes only to its store volume and to an emptyDir on ``/tmp``)."""
    return {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def _tmp_volume() -> dict[str, Any]:
    return {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}}


def _pod_scheduling(spec: ClusterSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if spec.scheduling.tolerations:
        out["tolerations"] = [t.to_k8s() for t in spec.scheduling.tolerations]
    if spec.scheduling.node_selector:
        out["nodeSelector"] = dict(spec.scheduling.node_selector)
    return out


# -- NameServer ---------------------------------------------------------------------------------

def build_nameserver_deployment(owner: Owner, spec: ClusterSpec) -> Manifest:
    """The NameServer Deployment: ``spec.nameServer.replicas`` stateless pods.

    Rolling update never drops below the desired count (maxUnavailable 0,
    maxSurge 1). Probes: readiness ``/readyz``, liveness ``/healthz`` on the
    HTTP port 9877; remoting on 9876. Pods prefer different nodes. Non-root,
    read-only root filesystem, ``/tmp`` an emptyDir (:func:`pod_security_context`).
    """
    cluster = owner.name
    labels = names.base_labels(cluster, names.COMPONENT_NAMESERVER)
    selector = names.selector_labels(cluster, names.COMPONENT_NAMESERVER)
    container = _server_container(
        "nameserver", spec,
        ["python", "-m", "rocket.cli", "nameserver", "--port", str(NAMESERVER_PORT),
         "--http-port", str(NAMESERVER_HTTP_PORT)],
        {"remoting": NAMESERVER_PORT, "http": NAMESERVER_HTTP_PORT},
        {"readinessProbe": _http_probe("/readyz", "http", initial=2, period=5, failures=3),
         "livenessProbe": _http_probe("/healthz", "http", initial=10, period=10, failures=6)},
        [{"name": TMP_VOLUME, "mountPath": TMP_MOUNT}])
    resources = spec.name_server.resources.to_k8s()
    if resources:
        container["resources"] = resources
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 30,
        "securityContext": pod_security_context(fs_group=False),
        "containers": [container],
        "volumes": [_tmp_volume()],
        "affinity": _spread_over_nodes(selector, spec),
        **_pod_scheduling(spec),
    }
    security.add_to_nameserver(pod_spec, container, cluster, spec.security)
    template: dict[str, Any] = {"metadata": {"labels": labels}, "spec": pod_spec}
    ns_config = build_nameserver_configmap(owner, spec)
    if ns_config is not None:  # a settings change rolls the NameServers
        template["metadata"]["annotations"] = {
            names.ANNOTATION_CONFIG_HASH: config_hash(json.dumps(ns_config["data"], sort_keys=True))}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(owner, names.nameserver(cluster), labels),
        "spec": {
            "replicas": spec.name_server.replicas,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": template,
        },
    }


def build_nameserver_service(owner: Owner) -> Manifest:
    """ClusterIP Service for clients: ``<cluster>-nameserver:9876`` (plus ``http`` 9877)."""
    return _service(owner, names.nameserver(owner.name), names.COMPONENT_NAMESERVER,
                    {"remoting": NAMESERVER_PORT, "http": NAMESERVER_HTTP_PORT}, {"type": "ClusterIP"})


def build_nameserver_headless_service(owner: Owner) -> Manifest:
    """Headless Service whose DNS name resolves to every ready NameServer pod.

    Brokers get this one name and register with every address it resolves to,
    so NameServer pods can be replaced without restarting brokers.
    """
    return _service(owner, names.nameserver_headless(owner.name), names.COMPONENT_NAMESERVER,
                    {"remoting": NAMESERVER_PORT}, {"clusterIP": "None"})


def nameserver_dns(namespace: str, cluster: str) -> str:
    """``host:port`` of the headless NameServer Service inside the Kubernetes cluster."""
    return f"{names.nameserver_headless(cluster)}.{namespace}.svc:{NAMESERVER_PORT}"


def controller_dns(namespace: str, cluster: str, index: int) -> str:
    """``host:port`` of controller pod ``index`` (its stable DNS name under the controllers' headless
    Service: ``<cluster>-controller-<i>.<cluster>-controller.<ns>.svc:9878``)."""
    return f"{names.controller_pod(cluster, index)}.{names.controller(cluster)}.{namespace}.svc:{CONTROLLER_PORT}"


def controller_addr(namespace: str, cluster: str) -> str:
    """A broker's ``controllerAddr``: every controller's :func:`controller_dns`, ``;``-separated
    (RocketMQ's ``BrokerConfig.controllerAddr`` format)."""
    return ";".join(controller_dns(namespace, cluster, i) for i in range(CONTROLLER_REPLICAS))


# -- broker ---------------------------------------------------------------------------------

def broker_config_text(owner: Owner, spec: ClusterSpec) -> str:
    """``broker.conf`` (RocketMQ properties format, ``key=value`` lines, sorted).

    Operator-owned keys (cluster name, role, flush type, ports, NameServer
    address) come first in precedence order; ``spec.broker.config`` may add
    keys but cannot override ``brokerClusterName``, ``namesrvAddr`` or ports.
    Per-pod values (``brokerName``, ``brokerId``, ``brokerRole`` of slaves) are
    given on the command line. With ``failover: Controller`` the operator also
    owns ``enableControllerMode=true`` and ``controllerAddr`` (:func:`controller_addr`),
    and writes no ``brokerRole`` (the controllers choose the roles).
    """
    fixed = {
        "brokerClusterName": owner.name,
        "namesrvAddr": nameserver_dns(owner.namespace, owner.name),
        "listenPort": str(BROKER_PORT),
        "haListenPort": str(BROKER_HA_PORT),
        "storePathRootDir": STORE_MOUNT,
        **security.broker_settings(spec.security),
        **listeners.broker_config(spec),
    }
    merged = {
        "brokerRole": spec.broker.broker_role,
        "flushDiskType": spec.broker.flush_disk_type,
        **spec.broker.config,
        **fixed,
    }
    if spec.broker.controller_mode:
        merged.pop("brokerRole", None)
        merged.update({"enableControllerMode": "true", "controllerAddr": controller_addr(owner.namespace, owner.name)})
    return "".join(f"{key}={merged[key]}\n" for key in sorted(merged))


def config_hash(text: str) -> str:
    """First 16 hex digits of the SHA-256 of ``text`` (pod template annotation: config change => roll)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_broker_configmap(owner: Owner, spec: ClusterSpec) -> Manifest:
    """ConfigMap ``<cluster>-broker-config`` with one key, ``broker.conf``."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(owner, names.broker_config(owner.name),
                          names.base_labels(owner.name, names.COMPONENT_BROKER)),
        "data": {CONFIG_FILE: broker_config_text(owner, spec)},
    }


def build_nameserver_configmap(owner: Owner, spec: ClusterSpec) -> Manifest | None:
    """ConfigMap ``<cluster>-nameserver-config`` (``nameserver.json``, the ACL and TLS settings) when
    ACL or TLS is on, else None (the NameServer then runs on its defaults)."""
    if not spec.security.any:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(owner, security.nameserver_config(owner.name),
                          names.base_labels(owner.name, names.COMPONENT_NAMESERVER)),
        "data": {security.NAMESERVER_CONFIG_FILE: security.nameserver_config_json(spec.security)},
    }


def build_network_policies(owner: Owner, spec: ClusterSpec) -> list[Manifest]:
    """The cluster's NetworkPolicies (:func:`rocket_operator.security.network_policies`)."""
    return security.network_policies(
        lambda name, component: _meta(owner, name, names.base_labels(owner.name, component)), owner.name,
        spec.security, nameserver_port=NAMESERVER_PORT, nameserver_http_port=NAMESERVER_HTTP_PORT,
        broker_port=BROKER_PORT, broker_ha_port=BROKER_HA_PORT, broker_http_port=BROKER_HTTP_PORT)


def build_broker_headless_service(owner: Owner) -> Manifest:
    """Headless Service governing every broker StatefulSet: pod DNS ``<pod>.<cluster>-broker.<ns>.svc``.

    ``publishNotReadyAddresses`` so that a recovering broker is reachable by the
    operator and its slaves before it reports ready.
    """
    return _service(owner, names.broker_service(owner.name), names.COMPONENT_BROKER,
                    {"remoting": BROKER_PORT, "ha": BROKER_HA_PORT, "http": BROKER_HTTP_PORT},
                    {"clusterIP": "None", "publishNotReadyAddresses": True})


def broker_command(owner: Owner, broker_id: int, controller_mode: bool = False) -> list[str]:
    """The broker container's command: brokerName from the pod's ordinal (``${HOSTNAME##*-}``).

    A StatefulSet pod's hostname is its name, ``<sts>-<ordinal>``; ordinal i is
    broker group i, so the pod runs ``rocket broker --name <cluster>-broker-<i>``.
    Manual failover: ``--broker-id`` of the StatefulSet, slaves with ``brokerRole=SLAVE``.
    ``controller_mode``: neither (the broker applies for an id and learns its role from the
    controllers, ``enableControllerMode`` in ``broker.conf``).
    """
    role = "" if broker_id == 0 or controller_mode else " --role SLAVE"
    identity = "" if controller_mode else f"--broker-id {broker_id} "
    script = (
        'ordinal="${HOSTNAME##*-}"; '
        f'exec python -m rocket.cli broker --name "{owner.name}-broker-$ordinal" --cluster {owner.name} '
        f"{identity}--port {BROKER_PORT} --http-port {BROKER_HTTP_PORT} "
        f"--namesrv {nameserver_dns(owner.namespace, owner.name)} --store-dir {STORE_MOUNT} "
        f'--ip "$POD_IP" --config {CONFIG_MOUNT}/{CONFIG_FILE}{role}'
    )
    return ["/bin/sh", "-c", script]


def _broker_affinity(owner: Owner, spec: ClusterSpec, caps: Capabilities) -> dict[str, Any] | None:
    mode = spec.scheduling.anti_affinity
    if mode == "None":
        return None
    all_brokers = {"matchLabels": names.selector_labels(owner.name, names.COMPONENT_BROKER)}
    spread = {"weight": 50, "podAffinityTerm": {"labelSelector": all_brokers,
                                                "topologyKey": spec.scheduling.topology_key}}
    if caps.affinity_match_label_keys:
        # Pods of the same ordinal (= the same broker group) across the master and slave StatefulSets.
        same_group = {"labelSelector": all_brokers, "matchLabelKeys": [names.LABEL_POD_INDEX],
                      "topologyKey": spec.scheduling.topology_key}
        if mode == "Required":
            return {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [same_group],
                "preferredDuringSchedulingIgnoredDuringExecution": [spread],
            }}
        return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": same_group}, spread]}}
    # Older servers cannot tell one group's pods apart in a shared template: spread all brokers (soft).
    return _spread_over_nodes(all_brokers["matchLabels"], spec)


def build_broker_statefulset(owner: Owner, spec: ClusterSpec, broker_id: int, replicas: int,
                             caps: Capabilities | None = None) -> Manifest:
    """StatefulSet of brokerId ``broker_id`` with ``replicas`` pods (= broker groups incl. draining ones).

    Parallel pod management (scale-out starts every new group at once),
    ``OnDelete`` updates (the operator restarts pods in a safe order), a
    ``store`` volumeClaimTemplate of ``spec.broker.storage.size``, probes on the
    HTTP port (readiness ``/readyz``, liveness ``/healthz``, a startup probe
    allowing 10 min of store recovery), ``terminationGracePeriodSeconds`` from
    the spec so that a stopping broker can flush, and a config-hash annotation
    so that a ``broker.conf`` change rolls the pods. Non-root (uid/gid and
    fsGroup 10001, so the store PVC is writable), read-only root filesystem,
    ``/tmp`` an emptyDir.
    """
    caps = caps or Capabilities()
    cluster = owner.name
    role = "master" if broker_id == 0 else "slave"
    labels = {**names.base_labels(cluster, names.COMPONENT_BROKER),
              names.LABEL_BROKER_ID: str(broker_id), names.LABEL_ROLE: role}
    # with failover: Controller the StatefulSet is a replica slot, not a role: pods carry no role label
    pod_labels = {k: v for k, v in labels.items() if k != names.LABEL_ROLE} if spec.broker.controller_mode \
        else labels
    selector = names.broker_selector(cluster, broker_id)
    container = _server_container(
        "broker", spec, broker_command(owner, broker_id, spec.broker.controller_mode),
        {"remoting": BROKER_PORT, "ha": BROKER_HA_PORT, "http": BROKER_HTTP_PORT},
        {"readinessProbe": _http_probe("/readyz", "http", initial=5, period=5, failures=3),
         "livenessProbe": _http_probe("/healthz", "http", initial=0, period=10, failures=6),
         "startupProbe": _http_probe("/healthz", "http", initial=5, period=5, failures=120)},
        [{"name": names.STORE_VOLUME, "mountPath": STORE_MOUNT},
         {"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
         {"name": TMP_VOLUME, "mountPath": TMP_MOUNT}])
    container["env"] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    resources = spec.broker.resources.to_k8s()
    if resources:
        container["resources"] = resources
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": spec.broker.termination_grace_period_seconds,
        "securityContext": pod_security_context(fs_group=True),
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": names.broker_config(cluster)}}, _tmp_volume()],
        **_pod_scheduling(spec),
    }
    security.add_to_pod(pod_spec, container, cluster, spec.security)
    affinity = _broker_affinity(owner, spec, caps)
    if affinity:
        pod_spec["affinity"] = affinity
    claim_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": spec.broker.storage.size}},
    }
    if spec.broker.storage.storage_class_name is not None:
        claim_spec["storageClassName"] = spec.broker.storage.storage_class_name
    conf_hash = config_hash(broker_config_text(owner, spec))
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(owner, names.broker_statefulset(cluster, broker_id), labels),
        "spec": {
            "replicas": replicas,
            "serviceName": names.broker_service(cluster),
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": {names.ANNOTATION_CONFIG_HASH: conf_hash}},
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [{
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": names.STORE_VOLUME, "labels": labels},
                "spec": claim_spec,
            }],
        },
    }


def build_pdb(owner: Owner, component: str, caps: Capabilities | None = None) -> Manifest:
    """PodDisruptionBudget allowing one voluntary disruption at a time among ``component``'s pods.

    Brokers: at most one broker pod of the cluster evicted at once (a group
    keeps its master or its slave). Uses ``policy/v1`` or, on 1.20,
    ``policy/v1beta1`` (same fields).
    """
    caps = caps or Capabilities()
    name = names.broker_service(owner.name) if component == names.COMPONENT_BROKER else names.nameserver(owner.name)
    return {
        "apiVersion": caps.pdb_api_version,
        "kind": "PodDisruptionBudget",
        "metadata": _meta(owner, name, names.base_labels(owner.name, component)),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": names.selector_labels(owner.name, component)}},
    }


# -- analytics (Spark operator) ----------------------------------------------------------------

def nameserver_service_address(namespace: str, cluster: str) -> str:
    """``host:port`` of the NameServer client Service (ClusterIP) inside the Kubernetes cluster."""
    return f"{names.nameserver(cluster)}.{namespace}.svc:{NAMESERVER_PORT}"


def analytics_output(job: AnalyticsJobSpec) -> str:
    """The job's ``--out``: ``job.output``, default ``/opt/spark/work-dir/analytics/<job name>``."""
    return job.output or f"{ANALYTICS_OUTPUT_ROOT}/{job.name}"


def analytics_arguments(owner: Owner, job: AnalyticsJobSpec) -> list[str]:
    """Command-line arguments of the job module: ``--namesrv`` (the NameServer Service), ``--topics``
    (comma-separated) and ``--out`` (:func:`analytics_output`); for a logs job ``--log-format``,
    ``--events-topic`` and ``--follow`` when the spec sets them."""
    args = ["--namesrv", nameserver_service_address(owner.namespace, owner.name),
            "--topics", ",".join(job.topics),
            "--out", analytics_output(job)]
    if job.log_format:
        args += ["--log-format", job.log_format]
    if job.events_topic:
        args += ["--events-topic", job.events_topic]
    if job.follow:
        args.append("--follow")
    return args


def analytics_output_volume(job: AnalyticsJobSpec) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(volume, volumeMount)`` of the job's ``outputVolumeClaim``, or None when it has none.

    The volume is a core/v1 ``Volume`` named ``analytics-output`` of
    ``persistentVolumeClaim: {claimName: <claim>}``; the mount (a core/v1
    ``VolumeMount``, read-write) puts the claim's root at the parent directory of
    :func:`analytics_output` (``/opt/spark/work-dir/analytics`` by default), so
    the job writes to ``<claim>/<job name>``. Raises
    :class:`~rocket_operator.spec.SpecError` for an output path that
    :func:`~rocket_operator.spec.output_mount` refuses (parse_spec already did).
    """
    if job.output_volume_claim is None:
        return None
    volume = {"name": ANALYTICS_OUTPUT_VOLUME, "persistentVolumeClaim": {"claimName": job.output_volume_claim}}
    mount = {"name": ANALYTICS_OUTPUT_VOLUME, "mountPath": output_mount(analytics_output(job))}
    return volume, mount


#: uid/gid of the analytics image's ``spark`` user (images/analytics/Dockerfile).
SPARK_RUN_AS = 185


def spark_pod_security() -> dict[str, Any]:
    """``podSecurityContext`` and ``securityContext`` of the Spark driver and executor pods: the
    restricted Pod Security Standard (non-root uid 185, RuntimeDefault seccomp, no privilege
    escalation, no capabilities). The root filesystem stays writable: Spark writes its scratch
    space and ``work-dir`` there."""
    return {
        "podSecurityContext": {"runAsNonRoot": True, "runAsUser": SPARK_RUN_AS, "runAsGroup": SPARK_RUN_AS,
                               "seccompProfile": {"type": "RuntimeDefault"}},
        "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
    }


def _spark_pod(resources: SparkPodResources, labels: Mapping[str, str], *, executor: bool,
               service_account: str | None) -> dict[str, Any]:
    pod: dict[str, Any] = {"cores": resources.cores, "memory": resources.memory, "labels": dict(labels),
                           **spark_pod_security()}
    if executor:
        pod["instances"] = resources.instances
    if service_account:
        pod["serviceAccount"] = service_account
    return pod


def spark_application_spec(owner: Owner, spec: ClusterSpec, job: AnalyticsJobSpec,
                           default_image: str = DEFAULT_ANALYTICS_IMAGE) -> dict[str, Any]:
    """The ``SparkApplicationSpec`` (sparkoperator.k8s.io/v1beta2) of one analytics job.

    A Python application in cluster mode: ``local://`` path of the job's module
    in the image, arguments from :func:`analytics_arguments`, image from
    ``job.image``, else ``spec.analytics.image``, else ``default_image``; pull
    policy from ``spec.analytics.imagePullPolicy``, else ``spec.imagePullPolicy``.
    One-off jobs are retried twice on failure (60 s apart); the runs of a
    scheduled job never are (the next run is the retry). Driver and executor
    pods carry the job's labels; the driver runs as ``spec.analytics.serviceAccount``
    (it creates the executor pods) when one is given. With an ``outputVolumeClaim``
    (:func:`analytics_output_volume`) the spec has ``volumes`` and both pods the
    ``volumeMounts`` of that claim. ``sparkConf`` sets
    ``spark.sql.sources.partitionOverwriteMode=dynamic`` for every job: a run
    replaces the date/topic Parquet partitions it wrote and keeps the others
    (older dates the brokers no longer hold), where Spark's default would empty
    the whole dataset first. (Always set, never only with a claim: server-side
    apply on Kubernetes 1.20 turns a map whose last key is removed into ``null``,
    which the Spark operator's schema refuses.)
    """
    an = spec.analytics
    labels = {**names.base_labels(owner.name, names.COMPONENT_ANALYTICS), names.LABEL_ANALYTICS_JOB: job.name}
    restart: dict[str, Any] = {"type": "Never"}
    if job.schedule is None:
        restart = {"type": "OnFailure", "onFailureRetries": 2, "onFailureRetryInterval": 60,
                   "onSubmissionFailureRetries": 2, "onSubmissionFailureRetryInterval": 60}
    app: dict[str, Any] = {
        "type": "Python",
        "mode": "cluster",
        "image": job.image or an.image or default_image,
        "imagePullPolicy": an.image_pull_policy or spec.image_pull_policy,
        "mainApplicationFile": f"local://{ANALYTICS_JOBS_DIR}/{job.job}.py",
        "arguments": analytics_arguments(owner, job),
        "sparkVersion": an.spark_version,
        "sparkConf": {"spark.sql.sources.partitionOverwriteMode": "dynamic"},
        "restartPolicy": restart,
        "driver": _spark_pod(job.driver, labels, executor=False, service_account=an.service_account),
        "executor": _spark_pod(job.executor, labels, executor=True, service_account=None),
    }
    output_volume = analytics_output_volume(job)
    if output_volume is not None:
        volume, mount = output_volume
        app["volumes"] = [volume]
        app["driver"]["volumeMounts"] = [dict(mount)]
        app["executor"]["volumeMounts"] = [dict(mount)]
    return app


def build_analytics_application(owner: Owner, spec: ClusterSpec, job: AnalyticsJobSpec,
                                default_image: str = DEFAULT_ANALYTICS_IMAGE) -> Manifest:
    """The SparkApplication (no ``job.schedule``) or ScheduledSparkApplication of one analytics job.

    Named by :func:`rocket_operator.names.analytics_application`, labelled with
    the cluster, the ``analytics`` component and the job name, owned by the
    RocketCluster (controller reference: deleting the cluster deletes it). A
    ScheduledSparkApplication carries the schedule, ``suspend``, the concurrency
    policy, keeps 3 successful and 3 failed runs, and the
    :func:`spark_application_spec` as its template. The schedule is not checked
    here (see :func:`rocket_operator.analytics.cron_error`).
    """
    scheduled = job.schedule is not None
    labels = {**names.base_labels(owner.name, names.COMPONENT_ANALYTICS), names.LABEL_ANALYTICS_JOB: job.name}
    app_spec = spark_application_spec(owner, spec, job, default_image)
    meta = _meta(owner, names.analytics_application(owner.name, job.name, scheduled), labels)
    if not scheduled:
        return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication", "metadata": meta,
                "spec": app_spec}
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "ScheduledSparkApplication",
        "metadata": meta,
        "spec": {
            "schedule": job.schedule,
            "suspend": job.suspend,
            "concurrencyPolicy": job.concurrency_policy,
            "successfulRunHistoryLimit": 3,
            "failedRunHistoryLimit": 3,
            "template": app_spec,
        },
    }


def desired_children(owner: Owner, spec: ClusterSpec, statefulset_replicas: int | None = None,
                     caps: Capabilities | None = None) -> list[Manifest]:
    """Every child of the cluster, in apply order (ConfigMap and Services before workloads).

    ``statefulset_replicas`` is the broker StatefulSets' size; it differs from
    ``spec.broker.groups`` while a scale-in drains (the draining groups stay
    until they are empty). Default: ``spec.broker.groups``.
    """
    caps = caps or Capabilities()
    replicas = spec.broker.groups if statefulset_replicas is None else statefulset_replicas
    ns_config = build_nameserver_configmap(owner, spec)
    children = [
        *([ns_config] if ns_config else []),
        *listeners.open_listener_ports(build_network_policies(owner, spec), owner.name, spec),
        build_broker_configmap(owner, spec),
        build_nameserver_service(owner),
        build_nameserver_headless_service(owner),
        build_broker_headless_service(owner),
        listeners.add_nameserver_listeners(build_nameserver_deployment(owner, spec), spec),
        build_pdb(owner, names.COMPONENT_NAMESERVER, caps),
        build_pdb(owner, names.COMPONENT_BROKER, caps),
    ]
    for broker_id in range(spec.broker.replicas_per_group + 1):
        children.append(listeners.add_broker_listeners_volume(
            build_broker_statefulset(owner, spec, broker_id, replicas, caps), owner.name, spec))
    return children


from rocket_operator import listeners  # noqa: E402  (it builds on this module)


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """A stable digest of a manifest (to skip re-applying what was applied unchanged)."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
