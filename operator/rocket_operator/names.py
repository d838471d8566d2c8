"""Names and labels of everything the operator creates for a RocketCluster (pure).

For a RocketCluster ``c``:

=========================================  ====================================================
``c-nameserver``                           NameServer Deployment, its client Service and PDB
``c-nameserver-headless``                  headless Service: one DNS name for every NameServer
``c-broker``                               headless Service of all broker pods, broker PDB
``c-broker-config``                        ConfigMap with ``broker.conf``
``c-broker-master``                        StatefulSet of masters: ordinal i = broker group i
``c-broker-slave-k`` (k = 1..replicas)     StatefulSet of the k-th slave of every group
``c-broker-i``                             ``brokerName`` of group i (RocketMQ's broker group)
``store-<pod>``                            PVC of a broker pod (volumeClaimTemplate ``store``)
``c-controller``                           ``failover: Controller``: the controllers' StatefulSet,
                                           their headless Service and PDB
``c-controller-<i>`` (i = 0..2)            controller pods (``rocket controller``, a Raft peer each)
``c-controller-secret``                    Secret holding the controllers' Raft password
``data-<controller pod>``                  PVC of a controller pod (volumeClaimTemplate ``data``)
``c-<job>``                                SparkApplication / ScheduledSparkApplication of the
                                           analytics job ``<job>`` (shortened with a hash when
                                           too long, see :func:`analytics_application`)
=========================================  ====================================================
"""

from __future__ import annotations

import hashlib
import re

GROUP = "rocket.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "RocketCluster"
PLURAL = "rocketclusters"
#: The RocketUser resource: a user (and its ACL) on a RocketCluster's brokers.
USER_KIND = "RocketUser"
USER_PLURAL = "rocketusers"

#: The field manager of every server-side apply the operator makes.
FIELD_MANAGER = "rocket-operator"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_CLUSTER = "rocket.dev/cluster"
LABEL_BROKER_ID = "rocket.dev/broker-id"
LABEL_ROLE = "rocket.dev/broker-role"
ANNOTATION_CONFIG_HASH = "rocket.dev/config-hash"
#: Label of a SparkApplication / ScheduledSparkApplication (and its pods): the analytics job's name.
LABEL_ANALYTICS_JOB = "rocket.dev/analytics-job"

#: Label the StatefulSet controller puts on every pod it creates (revision of the pod's template).
LABEL_REVISION = "controller-revision-hash"
#: Label the StatefulSet controller (k8s >= 1.28) puts on pods: the ordinal.
LABEL_POD_INDEX = "apps.kubernetes.io/pod-index"

COMPONENT_NAMESERVER = "nameserver"
COMPONENT_BROKER = "broker"
COMPONENT_ANALYTICS = "analytics"
COMPONENT_CONTROLLER = "controller"
#: volumeClaimTemplate of the controller pods (Raft journal and snapshot).
CONTROLLER_DATA_VOLUME = "data"
#: Key of the Raft password in the controller Secret.
CONTROLLER_SECRET_KEY = "raft-secret"

#: The Spark operator's API (kubeflow spark-operator) and the kinds the operator creates there.
SPARK_GROUP = "sparkoperator.k8s.io"
SPARK_VERSION = "v1beta2"
SPARK_API_VERSION = f"{SPARK_GROUP}/{SPARK_VERSION}"
SPARK_APPLICATION = "SparkApplication"
SCHEDULED_SPARK_APPLICATION = "ScheduledSparkApplication"
#: kind -> plural of the Spark operator's kinds.
SPARK_PLURALS = {SPARK_APPLICATION: "sparkapplications", SCHEDULED_SPARK_APPLICATION: "scheduledsparkapplications"}

#: Longest SparkApplication name whose driver UI Service ``<name>-ui-svc`` is a valid DNS-1035 label (63).
MAX_SPARK_APPLICATION_NAME = 56
#: Longest ScheduledSparkApplication name: each run is named ``<name>-<UnixNano, 19 digits>`` and must
#: itself stay within :data:`MAX_SPARK_APPLICATION_NAME`.
MAX_SCHEDULED_APPLICATION_NAME = MAX_SPARK_APPLICATION_NAME - 20

STORE_VOLUME = "store"

_ORDINAL = re.compile(r"-(\d+)$")


def nameserver(cluster: str) -> str:
    """Name of the NameServer Deployment, client Service and PDB."""
    return f"{cluster}-nameserver"


def nameserver_headless(cluster: str) -> str:
    """Name of the headless NameServer Service (DNS name resolving to every NameServer pod)."""
    return f"{cluster}-nameserver-headless"


def broker_service(cluster: str) -> str:
    """Name of the headless Service governing the broker StatefulSets (and of the broker PDB)."""
    return f"{cluster}-broker"


def broker_config(cluster: str) -> str:
    """Name of the ConfigMap holding ``broker.conf``."""
    return f"{cluster}-broker-config"


def broker_statefulset(cluster: str, broker_id: int) -> str:
    """StatefulSet of brokerId ``broker_id``: 0 = the masters, k >= 1 = the k-th slave of every group."""
    if broker_id < 0:
        raise ValueError(f"brokerId must be >= 0, got {broker_id}")
    return f"{cluster}-broker-master" if broker_id == 0 else f"{cluster}-broker-slave-{broker_id}"


def broker_pod(cluster: str, broker_id: int, group: int) -> str:
    """Pod name of brokerId ``broker_id`` in broker group ``group`` (StatefulSet ordinal = group)."""
    return f"{broker_statefulset(cluster, broker_id)}-{group}"


def controller(cluster: str) -> str:
    """Name of the controllers' StatefulSet, headless Service and PDB (``failover: Controller``)."""
    return f"{cluster}-controller"


def controller_pod(cluster: str, index: int) -> str:
    """Pod name of controller ``index`` (StatefulSet ordinal)."""
    return f"{controller(cluster)}-{index}"


def controller_secret(cluster: str) -> str:
    """Name of the Secret holding the controllers' Raft password (key :data:`CONTROLLER_SECRET_KEY`)."""
    return f"{cluster}-controller-secret"


def broker_name(cluster: str, group: int) -> str:
    """RocketMQ ``brokerName`` of broker group ``group``."""
    return f"{cluster}-broker-{group}"


def analytics_application(cluster: str, job: str, scheduled: bool) -> str:
    """Name of the SparkApplication (``scheduled`` False) or ScheduledSparkApplication of analytics job ``job``.

    ``<cluster>-<job>`` when it fits (56 characters for a SparkApplication, 36
    for a ScheduledSparkApplication, whose runs append 20); otherwise its first
    characters, a dash and 8 hex digits of its SHA-256, so that names stay
    unique and stable.
    """
    full = f"{cluster}-{job}"
    limit = MAX_SCHEDULED_APPLICATION_NAME if scheduled else MAX_SPARK_APPLICATION_NAME
    if len(full) <= limit:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    return f"{full[:limit - 9].rstrip('-')}-{digest}"


def pvc_name(pod: str) -> str:
    """The PVC a StatefulSet creates for ``pod`` from the ``store`` volumeClaimTemplate."""
    return f"{STORE_VOLUME}-{pod}"


def ordinal(pod: str) -> int:
    """The StatefulSet ordinal at the end of a pod name. Raises ``ValueError`` if there is none."""
    match = _ORDINAL.search(pod)
    if not match:
        raise ValueError(f"no ordinal in pod name {pod!r}")
    return int(match.group(1))


def base_labels(cluster: str, component: str) -> dict[str, str]:
    """Labels on every child of ``cluster`` of one component (also the selector base)."""
    return {
        LABEL_NAME: f"rocket-{component}",
        LABEL_INSTANCE: cluster,
        LABEL_COMPONENT: component,
        LABEL_MANAGED_BY: FIELD_MANAGER,
        LABEL_PART_OF: "rocketcluster",
        LABEL_CLUSTER: cluster,
    }


def selector_labels(cluster: str, component: str) -> dict[str, str]:
    """The immutable subset of labels used in selectors."""
    return {LABEL_INSTANCE: cluster, LABEL_COMPONENT: component}


def broker_selector(cluster: str, broker_id: int) -> dict[str, str]:
    """Selector of one broker StatefulSet's pods."""
    return {**selector_labels(cluster, COMPONENT_BROKER), LABEL_BROKER_ID: str(broker_id)}


def cluster_selector(cluster: str) -> str:
    """A label selector string matching every labelled child (pods and PVCs included) of ``cluster``."""
    return f"{LABEL_INSTANCE}={cluster},{LABEL_MANAGED_BY}={FIELD_MANAGER}"
