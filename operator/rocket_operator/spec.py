"""The RocketCluster spec as typed, defaulted values (pure; no I/O).

The CRD (``crds/rocketclusters.yaml``) already defaults and bounds every field
on the API server; :func:`parse_spec` applies the same defaults again so that
the builders never see a missing key (objects stored before a default was
added, unit tests that pass partial specs). It raises :class:`SpecError` for a
value the schema would have refused, which the operator reports in the
``Degraded`` condition instead of building anything from it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rocket_operator.security import SecuritySpec, SecuritySpecError, parse_security

DEFAULT_IMAGE = "rocketcluster/rocket:0.1.0"

#: Remoting and HTTP ports inside the pods (RocketMQ's defaults for remoting).
NAMESERVER_PORT = 9876
NAMESERVER_HTTP_PORT = 9877
BROKER_PORT = 10911
BROKER_HA_PORT = 10912
BROKER_HTTP_PORT = 10913
#: Remoting, HTTP and Raft ports of a controller pod (RocketMQ's controller port 9878; ``rocket controller``).
CONTROLLER_PORT = 9878
CONTROLLER_HTTP_PORT = 9879
CONTROLLER_RAFT_PORT = 9880
#: Controllers per cluster with ``spec.broker.failover: Controller`` (a Raft majority survives one loss).
CONTROLLER_REPLICAS = 3

#: ``metadata.annotations`` key that stops reconciliation while its value is "true".
PAUSED_ANNOTATION = "rocket.dev/paused"

BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER")
FLUSH_DISK_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
ANTI_AFFINITY_MODES = ("Required", "Preferred", "None")
DRAIN_ON_TIMEOUT = ("Hold", "Force")
TOPIC_PERMS = (2, 4, 6)
#: ``spec.broker.failover``: Controller (RocketMQ 5 controller mode: 3 controllers elect each group's
#: master) or Manual (fixed roles by brokerId; a dead master is replaced with ``rocket cluster failover``).
FAILOVER_MODES = ("Controller", "Manual")
#: The analytics jobs a RocketCluster can run (``rocket.analytics.jobs.<job>``).
ANALYTICS_JOBS = ("traffic", "logs")
CONCURRENCY_POLICIES = ("Allow", "Forbid", "Replace")
#: Spark version of the analytics image (images/analytics/Dockerfile).
DEFAULT_SPARK_VERSION = "4.0.1"

#: ``spec.listeners[].type``.
LISTENER_TYPES = ("internal", "nodeport", "loadbalancer")
#: ``addresses[].target`` naming the NameServers' Service of a listener.
NAMESERVER_TARGET = "nameserver"
_LISTENER_ADDR_RE = re.compile(r"^[^\s:]+:([0-9]{1,5})$")
_TOPIC_RE = re.compile(r"^[A-Za-z0-9_%|-]{1,127}$")
_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
#: A DNS-1123 subdomain (the name of a PersistentVolumeClaim), at most 253 characters.
_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
#: Directories of the analytics image (Spark, the ``rocket`` virtualenv, the system) that an output
#: claim mounted at them or at one of their parents would hide.
_IMAGE_DIRS = ("/opt/spark", "/opt/rocket", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/var", "/dev",
               "/proc", "/sys", "/tmp")
#: A JVM memory size as Spark takes it (``spark.driver.memory``): digits and a unit.
_JVM_MEMORY_RE = re.compile(r"^[1-9][0-9]*[kKmMgGtT]$")


class SpecError(ValueError):
    """A spec value outside what the CRD schema allows (message names the field)."""


@dataclass(frozen=True, slots=True)
class Resources:
    """Container resources: ``requests`` and ``limits`` maps (``cpu``, ``memory``) of quantities."""

    requests: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)

    def to_k8s(self) -> dict[str, Any]:
        """The ``resources`` field of a container (empty maps left out)."""
        out: dict[str, Any] = {}
        if self.requests:
            out["requests"] = dict(self.requests)
        if self.limits:
            out["limits"] = dict(self.limits)
        return out


@dataclass(frozen=True, slots=True)
class NameServerSpec:
    """``spec.nameServer``: replicas (1..9) and container resources."""

    replicas: int = 2
    resources: Resources = field(default_factory=Resources)


@dataclass(frozen=True, slots=True)
class DeleteClaim:
    """``spec.broker.storage.deleteClaim``: delete the PVCs on scale-in / when the cluster is deleted."""

    on_scale_in: bool = False
    on_delete: bool = False


@dataclass(frozen=True, slots=True)
class StorageSpec:
    """``spec.broker.storage``: PVC size (quantity), storage class (None = default class), deleteClaim."""

    size: str = "10Gi"
    storage_class_name: str | None = None
    delete_claim: DeleteClaim = field(default_factory=DeleteClaim)


@dataclass(frozen=True, slots=True)
class BrokerSpec:
    """``spec.broker``: groups, slaves per group, roles, storage, extra config, ``failover`` (one of
    :data:`FAILOVER_MODES`) and ``clientRouteRefreshSeconds`` (how often producers re-read routes,
    RocketMQ clients' ``pollNameServerInterval``; a rolling restart with ``failover: Controller``
    waits that long between making one group writable again and the next one read-only)."""

    groups: int = 2
    replicas_per_group: int = 1
    broker_role: str = "ASYNC_MASTER"
    flush_disk_type: str = "ASYNC_FLUSH"
    storage: StorageSpec = field(default_factory=StorageSpec)
    resources: Resources = field(default_factory=Resources)
    config: dict[str, str] = field(default_factory=dict)
    termination_grace_period_seconds: int = 120
    failover: str = "Controller"
    client_route_refresh_seconds: int = 30

    @property
    def controller_mode(self) -> bool:
        """True with ``failover: Controller``: roles come from the controllers, not from brokerId."""
        return self.failover == "Controller"


@dataclass(frozen=True, slots=True)
class Toleration:
    """One pod toleration, as in the core/v1 API (only set fields are emitted)."""

    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None

    def to_k8s(self) -> dict[str, Any]:
        """The core/v1 ``Toleration`` object."""
        out: dict[str, Any] = {}
        for name, value in (("key", self.key), ("operator", self.operator), ("value", self.value),
                            ("effect", self.effect), ("tolerationSeconds", self.toleration_seconds)):
            if value is not None:
                out[name] = value
        return out


@dataclass(frozen=True, slots=True)
class SchedulingSpec:
    """``spec.scheduling``: broker anti-affinity mode, its topology key, tolerations and nodeSelector."""

    anti_affinity: str = "Required"
    topology_key: str = "kubernetes.io/hostname"
    tolerations: tuple[Toleration, ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DrainSpec:
    """``spec.drain``: seconds a scale-in may wait for consumers, and what to do after (Hold or Force)."""

    timeout_seconds: int = 600
    on_timeout: str = "Hold"


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One entry of ``spec.topics``: name, queue count (read = write), perm (2, 4 or 6)."""

    name: str
    queues: int = 8
    perm: int = 6


@dataclass(frozen=True, slots=True)
class SparkPodResources:
    """Cores, memory (JVM size: ``512m``, ``2g``) and, for executors, instances of a Spark driver or executor."""

    cores: int = 1
    memory: str = "1g"
    instances: int = 1


@dataclass(frozen=True, slots=True)
class AnalyticsJobSpec:
    """One entry of ``spec.analytics.jobs``: a Spark job run by the Spark operator.

    ``job`` is one of :data:`ANALYTICS_JOBS`; ``schedule`` a cron expression
    (None = run once, as a SparkApplication; else a ScheduledSparkApplication);
    ``suspend`` and ``concurrency_policy`` apply to scheduled jobs only;
    ``image`` and ``output`` (an absolute path) None = the analytics default and
    ``/opt/spark/work-dir/analytics/<name>``; ``output_volume_claim`` the
    PersistentVolumeClaim mounted at the output's parent directory in the driver
    and executor pods (the job's own, else ``spec.analytics.outputVolumeClaim``;
    None = no volume, the output goes with the pods). ``logs`` jobs only:
    ``log_format`` the header format (``auto``/None = learned per topic, a LogHub
    preset name or loghub notation ``<Date> <Time> <Level> <Component>: <Content>``,
    the job's ``--log-format``); ``events_topic`` where the job publishes its
    events (new templates, error spikes; ``--events-topic``; None = not published);
    ``follow`` keeps the job running on the topics' new messages (``--follow``; not with a schedule).
    """

    name: str
    job: str
    topics: tuple[str, ...] = ()
    log_format: str | None = None
    events_topic: str | None = None
    follow: bool = False
    schedule: str | None = None
    suspend: bool = False
    concurrency_policy: str = "Forbid"
    image: str | None = None
    output: str | None = None
    output_volume_claim: str | None = None
    driver: SparkPodResources = field(default_factory=SparkPodResources)
    executor: SparkPodResources = field(default_factory=SparkPodResources)


@dataclass(frozen=True, slots=True)
class AnalyticsSpec:
    """``spec.analytics``: the jobs and what they share (image, pull policy, driver service account,
    Spark version, output claim). ``image`` None = the operator's default analytics image;
    ``image_pull_policy`` None = ``spec.imagePullPolicy``; ``service_account`` None = the namespace's
    default account; ``output_volume_claim`` the jobs' default claim (each job's
    :attr:`AnalyticsJobSpec.output_volume_claim` already has it applied)."""

    image: str | None = None
    image_pull_policy: str | None = None
    service_account: str | None = None
    output_volume_claim: str | None = None
    spark_version: str = DEFAULT_SPARK_VERSION
    jobs: tuple[AnalyticsJobSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One entry of ``spec.listeners``: how clients reach the cluster.

    ``type`` is one of :data:`LISTENER_TYPES`: ``internal`` (the in-cluster Services; ``port`` is
    the NameServer's 9876), ``nodeport`` or ``loadbalancer`` (a Service per broker pod and one for
    the NameServers; ``port`` is the NameServer's extra remoting port for this listener and the
    Services' port). ``addresses``: target (``nameserver`` or a broker pod name) -> ``host:port``
    advertised instead of the learned address.
    """

    name: str
    type: str
    port: int
    addresses: dict[str, str] = field(default_factory=dict)

    @property
    def external(self) -> bool:
        """True for ``nodeport`` and ``loadbalancer``."""
        return self.type != "internal"


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """The whole ``RocketCluster.spec``, defaulted."""

    image: str = DEFAULT_IMAGE
    image_pull_policy: str = "IfNotPresent"
    name_server: NameServerSpec = field(default_factory=NameServerSpec)
    broker: BrokerSpec = field(default_factory=BrokerSpec)
    scheduling: SchedulingSpec = field(default_factory=SchedulingSpec)
    drain: DrainSpec = field(default_factory=DrainSpec)
    topics: tuple[TopicSpec, ...] = ()
    analytics: AnalyticsSpec = field(default_factory=AnalyticsSpec)
    listeners: tuple[ListenerSpec, ...] = ()
    security: SecuritySpec = field(default_factory=SecuritySpec)


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{where} must be an object")
    return value


def _int(obj: Mapping[str, Any], key: str, default: int, lo: int, hi: int, where: str) -> int:
    value = obj.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where}.{key} must be an integer")
    if not lo <= value <= hi:
        raise SpecError(f"{where}.{key} must be between {lo} and {hi}, got {value}")
    return value


def _enum(obj: Mapping[str, Any], key: str, default: Any, allowed: tuple[Any, ...], where: str) -> Any:
    value = obj.get(key, default)
    if value is None:
        value = default
    if value not in allowed:
        raise SpecError(f"{where}.{key} must be one of {', '.join(map(str, allowed))}, got {value!r}")
    return value


def _bool(obj: Mapping[str, Any], key: str, default: bool, where: str) -> bool:
    value = obj.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise SpecError(f"{where}.{key} must be a boolean")
    return value


def _str_map(value: Any, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, item in _obj(value, where).items():
        if not isinstance(item, str):
            raise SpecError(f"{where}.{key} must be a string")
        out[str(key)] = item
    return out


_CONFIG_KEY_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


def _broker_config(value: Any) -> dict[str, str]:
    """``spec.broker.config``: keys are broker.conf property names (letters, digits, ``_.-``) and values
    are one line, so that no entry can add or override another line of ``broker.conf`` (a
    java.util.Properties file: a line break ends the value, ``=``/``:``/spaces end the key).
    Raises :class:`SpecError` naming the entry."""
    out = _str_map(value, "spec.broker.config")
    for key, item in out.items():
        if not _CONFIG_KEY_RE.match(key):
            raise SpecError(f"spec.broker.config key {key!r} must be a property name matching {_CONFIG_KEY_RE.pattern}")
        if any(c in item for c in "\r\n\f\\"):
            raise SpecError(f"spec.broker.config.{key} must be one line without backslashes, got {item!r}")
    return out


def _resources(value: Any, where: str) -> Resources:
    obj = _obj(value, where)

    def quantities(name: str) -> dict[str, str]:
        return {str(k): str(v) for k, v in _obj(obj.get(name), f"{where}.{name}").items()}

    return Resources(requests=quantities("requests"), limits=quantities("limits"))


def _spark_pod(value: Any, where: str, executor: bool) -> SparkPodResources:
    obj = _obj(value, where)
    memory = obj.get("memory", "1g")
    if not isinstance(memory, str) or not _JVM_MEMORY_RE.match(memory):
        raise SpecError(f"{where}.memory must be a JVM size such as 512m or 2g, got {memory!r}")
    return SparkPodResources(cores=_int(obj, "cores", 1, 1, 64, where), memory=memory,
                             instances=_int(obj, "instances", 1, 1, 100, where) if executor else 1)


def _optional_str(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise SpecError(f"{where}.{key} must be a string")
    return value


def _output(obj: Mapping[str, Any], where: str) -> str | None:
    value = _optional_str(obj, "output", where)
    if value is not None and not value.startswith("/"):
        raise SpecError(f"{where}.output must be an absolute path, got {value!r}")
    return value


def _claim_name(obj: Mapping[str, Any], where: str) -> str | None:
    """``outputVolumeClaim`` of ``obj``: None when absent, else a DNS-1123 subdomain (:class:`SpecError`)."""
    value = _optional_str(obj, "outputVolumeClaim", where)
    if value is not None and (len(value) > 253 or not _SUBDOMAIN_RE.match(value)):
        raise SpecError(f"{where}.outputVolumeClaim must be a PersistentVolumeClaim name (a DNS-1123 subdomain: "
                        f"lowercase letters, digits, '-' and '.', at most 253 characters), got {value!r}")
    return value


def output_mount(output: str, where: str = "output") -> str:
    """The directory an output claim is mounted at for the job output path ``output``: its parent.

    ``output`` is an absolute path (``/opt/spark/work-dir/analytics/nightly`` gives
    ``/opt/spark/work-dir/analytics``). Raises :class:`SpecError` (naming ``where``) when the
    path has ``.`` or ``..`` parts, or when its parent is ``/`` or would hide a directory the
    analytics image needs (``/opt/spark``, ``/opt/rocket``, ``/usr``, ``/etc``, ``/tmp`` ... or one
    of their parents).
    """
    parts = [p for p in output.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise SpecError(f"{where} must not have '.' or '..' parts with an outputVolumeClaim, got {output!r}")
    mount = posixpath.dirname("/" + "/".join(parts))
    if mount == "/" or any(d == mount or d.startswith(mount + "/") for d in _IMAGE_DIRS):
        raise SpecError(f"{where} {output!r}: the outputVolumeClaim would be mounted at {mount!r}, "
                        "which hides a directory of the analytics image; use a path such as "
                        "/opt/spark/work-dir/analytics/<job name> or /data/<job name>")
    return mount


def _analytics(an: Mapping[str, Any]) -> AnalyticsSpec:
    """``spec.analytics``: raises :class:`SpecError` for a bad type, an unknown job, a job without
    topics, a topic name the ``--topics`` argument cannot carry, a name listed twice, an
    ``outputVolumeClaim`` that is not a DNS-1123 subdomain, or, for a job with a claim, an
    ``output`` whose last part is not the job's name (jobs sharing a claim each write under
    ``<mount>/<job name>``) or whose parent cannot be a mount point (:func:`output_mount`). A cron
    expression is only checked for shape here (the CRD's pattern); its fields are checked when
    the job is built, so that one bad schedule does not stop the rest of the cluster."""
    pull = an.get("imagePullPolicy")
    if pull is not None and pull not in PULL_POLICIES:
        raise SpecError(f"spec.analytics.imagePullPolicy must be one of {', '.join(PULL_POLICIES)}, got {pull!r}")
    spark_version = an.get("sparkVersion") or DEFAULT_SPARK_VERSION
    if not isinstance(spark_version, str):
        raise SpecError("spec.analytics.sparkVersion must be a string")
    default_claim = _claim_name(an, "spec.analytics")
    jobs: list[AnalyticsJobSpec] = []
    job_names: set[str] = set()
    for i, raw in enumerate(an.get("jobs") or []):
        where = f"spec.analytics.jobs[{i}]"
        jobs.append(_analytics_job(_obj(raw, where), where, default_claim, job_names))
    return AnalyticsSpec(image=_optional_str(an, "image", "spec.analytics"), image_pull_policy=pull,
                         service_account=_optional_str(an, "serviceAccount", "spec.analytics"),
                         output_volume_claim=default_claim, spark_version=spark_version, jobs=tuple(jobs))


def _analytics_job(j: Mapping[str, Any], where: str, default_claim: str | None, job_names: set[str]
                   ) -> AnalyticsJobSpec:
    """One entry of ``spec.analytics.jobs`` (at ``where``); ``default_claim``: ``spec.analytics``'s
    ``outputVolumeClaim``; ``job_names``: the names of the entries before it (this one's is added).
    Raises :class:`SpecError` as :func:`_analytics` says."""
    name = j.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name) or len(name) > 40:
        raise SpecError(f"{where}.name must be a DNS-1035 label of at most 40 characters")
    if name in job_names:
        raise SpecError(f"{where}.name {name!r} is listed twice")
    job_names.add(name)
    job = _enum(j, "job", None, ANALYTICS_JOBS, where)
    topics = j.get("topics") or []
    if not isinstance(topics, list) or not topics:
        raise SpecError(f"{where}.topics must list at least one topic")
    for k, topic in enumerate(topics):
        if not isinstance(topic, str) or not _TOPIC_RE.match(topic):
            raise SpecError(f"{where}.topics[{k}] must match {_TOPIC_RE.pattern}")
    schedule = _optional_str(j, "schedule", where)
    output = _output(j, where)
    claim = _claim_name(j, where) or default_claim
    if claim is not None and output is not None:
        if posixpath.basename(output.rstrip("/")) != name:
            raise SpecError(f"{where}.output must end in /{name} (the job's name) with an outputVolumeClaim, "
                            f"so that jobs sharing the claim do not write to one directory; got {output!r}")
        output_mount(output, f"{where}.output")
    log_format = _optional_str(j, "logFormat", where)
    events_topic = _optional_str(j, "eventsTopic", where)
    follow = _bool(j, "follow", False, where)
    if (log_format or events_topic or follow) and job != "logs":
        raise SpecError(f"{where}: logFormat, eventsTopic and follow are options of the logs job, not of {job}")
    if follow and schedule:
        raise SpecError(f"{where}: a follow job keeps running; it takes no schedule")
    if log_format is not None and (not log_format.strip() or len(log_format) > 500
                                   or ("<" in log_format and not log_format.rstrip().endswith("<Content>"))):
        raise SpecError(f"{where}.logFormat must be auto, a preset name or loghub notation ending in <Content>")
    if events_topic is not None and not _TOPIC_RE.match(events_topic):
        raise SpecError(f"{where}.eventsTopic must match {_TOPIC_RE.pattern}")
    res = _obj(j.get("resources"), f"{where}.resources")
    return AnalyticsJobSpec(
        name=name, job=job, topics=tuple(topics), log_format=log_format.strip() if log_format else None,
        events_topic=events_topic, follow=follow, schedule=schedule.strip() if schedule else None,
        suspend=_bool(j, "suspend", False, where),
        concurrency_policy=_enum(j, "concurrencyPolicy", "Forbid", CONCURRENCY_POLICIES, where),
        image=_optional_str(j, "image", where), output=output, output_volume_claim=claim,
        driver=_spark_pod(res.get("driver"), f"{where}.resources.driver", executor=False),
        executor=_spark_pod(res.get("executor"), f"{where}.resources.executor", executor=True),
    )


def parse_spec(spec: Mapping[str, Any] | None) -> ClusterSpec:
    """Turn a ``RocketCluster.spec`` mapping into a :class:`ClusterSpec`.

    Missing fields take the CRD's defaults. Raises :class:`SpecError` naming
    the field for a wrong type, an out-of-range number, a value outside an
    enum, or a duplicate topic/job name.
    """
    root = _obj(spec, "spec")
    image = root.get("image") or DEFAULT_IMAGE
    if not isinstance(image, str):
        raise SpecError("spec.image must be a string")
    pull = _enum(root, "imagePullPolicy", "IfNotPresent", PULL_POLICIES, "spec")

    ns = _obj(root.get("nameServer"), "spec.nameServer")
    name_server = NameServerSpec(
        replicas=_int(ns, "replicas", 2, 1, 9, "spec.nameServer"),
        resources=_resources(ns.get("resources"), "spec.nameServer.resources"),
    )

    br = _obj(root.get("broker"), "spec.broker")
    st = _obj(br.get("storage"), "spec.broker.storage")
    dc = _obj(st.get("deleteClaim"), "spec.broker.storage.deleteClaim")
    storage_class = st.get("storageClassName")
    if storage_class is not None and not isinstance(storage_class, str):
        raise SpecError("spec.broker.storage.storageClassName must be a string")
    storage = StorageSpec(
        size=str(st.get("size") or "10Gi"),
        storage_class_name=storage_class,
        delete_claim=DeleteClaim(
            on_scale_in=_bool(dc, "onScaleIn", False, "spec.broker.storage.deleteClaim"),
            on_delete=_bool(dc, "onDelete", False, "spec.broker.storage.deleteClaim"),
        ),
    )
    broker = BrokerSpec(
        groups=_int(br, "groups", 2, 1, 64, "spec.broker"),
        replicas_per_group=_int(br, "replicasPerGroup", 1, 0, 4, "spec.broker"),
        broker_role=_enum(br, "brokerRole", "ASYNC_MASTER", BROKER_ROLES, "spec.broker"),
        flush_disk_type=_enum(br, "flushDiskType", "ASYNC_FLUSH", FLUSH_DISK_TYPES, "spec.broker"),
        storage=storage,
        resources=_resources(br.get("resources"), "spec.broker.resources"),
        config=_broker_config(br.get("config")),
        termination_grace_period_seconds=_int(br, "terminationGracePeriodSeconds", 120, 10, 3600, "spec.broker"),
        failover=_enum(br, "failover", "Controller", FAILOVER_MODES, "spec.broker"),
        client_route_refresh_seconds=_int(br, "clientRouteRefreshSeconds", 30, 0, 600, "spec.broker"),
    )

    sc = _obj(root.get("scheduling"), "spec.scheduling")
    tolerations = []
    for i, raw in enumerate(sc.get("tolerations") or []):
        t = _obj(raw, f"spec.scheduling.tolerations[{i}]")
        tolerations.append(Toleration(key=t.get("key"), operator=t.get("operator"), value=t.get("value"),
                                      effect=t.get("effect"), toleration_seconds=t.get("tolerationSeconds")))
    scheduling = SchedulingSpec(
        anti_affinity=_enum(sc, "antiAffinity", "Required", ANTI_AFFINITY_MODES, "spec.scheduling"),
        topology_key=str(sc.get("topologyKey") or "kubernetes.io/hostname"),
        tolerations=tuple(tolerations),
        node_selector=_str_map(sc.get("nodeSelector"), "spec.scheduling.nodeSelector"),
    )

    dr = _obj(root.get("drain"), "spec.drain")
    drain = DrainSpec(
        timeout_seconds=_int(dr, "timeoutSeconds", 600, 0, 7 * 24 * 3600, "spec.drain"),
        on_timeout=_enum(dr, "onTimeout", "Hold", DRAIN_ON_TIMEOUT, "spec.drain"),
    )

    topics: list[TopicSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(root.get("topics") or []):
        t = _obj(raw, f"spec.topics[{i}]")
        name = t.get("name")
        if not isinstance(name, str) or not _TOPIC_RE.match(name):
            raise SpecError(f"spec.topics[{i}].name must match {_TOPIC_RE.pattern}")
        if name in seen:
            raise SpecError(f"spec.topics[{i}].name {name!r} is listed twice")
        seen.add(name)
        topics.append(TopicSpec(name=name, queues=_int(t, "queues", 8, 1, 1024, f"spec.topics[{i}]"),
                                perm=_enum(t, "perm", 6, TOPIC_PERMS, f"spec.topics[{i}]")))

    analytics = _analytics(_obj(root.get("analytics"), "spec.analytics"))
    try:
        security = parse_security(root.get("security"))
    except SecuritySpecError as exc:
        raise SpecError(str(exc)) from None
    return ClusterSpec(image=image, image_pull_policy=pull, name_server=name_server, broker=broker,
                       scheduling=scheduling, drain=drain, topics=tuple(topics), analytics=analytics,
                       security=security, listeners=parse_listeners(root.get("listeners")))


def is_paused(annotations: Mapping[str, str] | None) -> bool:
    """True when the ``rocket.dev/paused`` annotation is "true" (case-insensitive)."""
    return str((annotations or {}).get(PAUSED_ANNOTATION, "")).strip().lower() == "true"


def parse_listeners(value: Any) -> tuple[ListenerSpec, ...]:
    """``spec.listeners`` -> listeners (empty when absent: the internal Services only).

    Raises :class:`SpecError` for a name that is not a DNS-1035 label of at most 20 characters or is
    listed twice, an unknown type, more than one ``internal`` listener, an ``internal`` port other
    than the NameServer's 9876, an external port outside 1024..65535, equal to 9876/9877 or used by
    another listener, an address that is not ``host:port``, or a target listed twice.
    """
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SpecError("spec.listeners must be a list")
    out: list[ListenerSpec] = []
    names: set[str] = set()
    ports: set[int] = set()
    for i, raw in enumerate(value):
        where = f"spec.listeners[{i}]"
        obj = _obj(raw, where)
        name = obj.get("name")
        if not isinstance(name, str) or not _NAME_RE.match(name) or len(name) > 20:
            raise SpecError(f"{where}.name must be a DNS-1035 label of at most 20 characters")
        if name in names:
            raise SpecError(f"{where}.name {name!r} is listed twice")
        names.add(name)
        kind = _enum(obj, "type", None, LISTENER_TYPES, where)
        if kind == "internal":
            if any(not x.external for x in out):
                raise SpecError(f"{where}: only one listener can be internal")
            port = _int(obj, "port", NAMESERVER_PORT, 1, 65535, where)
            if port != NAMESERVER_PORT:
                raise SpecError(f"{where}.port: the internal listener is the NameServer's port {NAMESERVER_PORT}")
        else:
            port = _int(obj, "port", 0, 1024, 65535, where)
            if port in (NAMESERVER_PORT, NAMESERVER_HTTP_PORT) or port in ports:
                raise SpecError(f"{where}.port {port} is taken (9876, 9877 and each listener's port are distinct)")
        ports.add(port)
        addresses: dict[str, str] = {}
        for k, entry in enumerate(obj.get("addresses") or []):
            e = _obj(entry, f"{where}.addresses[{k}]")
            target, address = e.get("target"), e.get("address")
            match = _LISTENER_ADDR_RE.match(address) if isinstance(address, str) else None
            if not isinstance(target, str) or not target or match is None or not 0 < int(match.group(1)) < 65536:
                raise SpecError(f"{where}.addresses[{k}] needs a target and an address host:port")
            if target in addresses:
                raise SpecError(f"{where}.addresses[{k}].target {target!r} is listed twice")
            addresses[target] = match.group(0)
        out.append(ListenerSpec(name=name, type=kind, port=port, addresses=addresses))
    return tuple(out)
