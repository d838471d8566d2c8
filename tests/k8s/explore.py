"""Exploring RocketCluster spec changes on a real kube-apiserver (hypothesis stateful testing).

:class:`SpecExplorer` is a ``hypothesis.stateful.RuleBasedStateMachine`` whose rules apply one change
to one RocketCluster and then check, with the running operator (kopf, ``tests/k8s/conftest.py``):

* **convergence** within :data:`CONVERGE_SECONDS`: ``status.observedGeneration`` equals
  ``metadata.generation`` and the phase is ``Running`` with ``Ready`` True, or any other phase with a
  ``Degraded`` True condition that names its reason (``Paused`` for a paused cluster);
* **children**: exactly the expected StatefulSets, Deployments, Services, ConfigMaps,
  PodDisruptionBudgets, NetworkPolicies and Spark applications exist in the namespace, each with one
  controller owner reference to the current RocketCluster (none orphaned, duplicated or left over
  from a deleted one); broker ``StatefulSet`` replicas equal ``spec.broker.groups``; ``broker.conf``
  carries every ``spec.broker.config`` entry and the operator's own keys unchanged;
* **claims**: every PVC a broker pod ever had is kept unless ``deleteClaim`` asks otherwise, and is
  owned by the cluster exactly when ``deleteClaim.onDelete`` is true;
* **logs**: the operator logged no error (kopf's "Handler ... failed", an unhandled exception) and no
  failed reconciliation;
* **invalid specs**: refused by the CRD schema (422, the object unchanged) or, when only the
  operator can tell (:data:`SEMANTIC_INVALID`), reported as phase ``Invalid`` with an ``InvalidSpec``
  condition while no child changes.

Strategies come from the CRD's ``openAPIV3Schema`` (:func:`schema_at`): integer bounds, enums, the
quantity pattern and the invalid values (:func:`invalid_edits`). Sizes are capped (:data:`CAPS`) so a
step stays a few seconds on the fake kubelet.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.k8s.harness import CRD_FILE

GROUP, VERSION, PLURAL = "rocket.dev", "v1alpha1", "rocketclusters"
SPARK = ("sparkoperator.k8s.io", "v1beta2")
PAUSED = "rocket.dev/paused"
#: How long one step may take to converge (seconds).
CONVERGE_SECONDS = 90.0
#: Upper bounds the exploration uses below the CRD's own (pods are cheap but not free).
CAPS = {"spec.broker.groups": 3, "spec.broker.replicasPerGroup": 2, "spec.nameServer.replicas": 3}
#: Keys the operator sets in broker.conf itself (builders.broker_config_text).
FIXED_BROKER_KEYS = ("brokerClusterName", "namesrvAddr", "listenPort", "haListenPort", "storePathRootDir")

_CRD = yaml.safe_load(CRD_FILE.read_text())
SCHEMA: dict[str, Any] = _CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def schema_at(path: str) -> dict[str, Any]:
    """The schema node of a dotted path such as ``spec.broker.groups`` (``[]`` steps into array items)."""
    node = SCHEMA
    for part in path.split("."):
        if part == "[]":
            node = node["items"]
        else:
            node = node["properties"][part]
    return node


def ints(path: str) -> st.SearchStrategy[int]:
    """Integers within the schema's ``minimum``/``maximum`` of ``path`` (capped by :data:`CAPS`)."""
    node = schema_at(path)
    hi = min(node.get("maximum", 10**6), CAPS.get(path, 10**6))
    return st.integers(min_value=node.get("minimum", 0), max_value=hi)


def enum(path: str) -> st.SearchStrategy[Any]:
    """One of the schema's ``enum`` values of ``path``."""
    return st.sampled_from(schema_at(path)["enum"])


QUANTITY_RE = re.compile(schema_at("spec.broker.storage.size")["pattern"])


def quantities(unit: str) -> st.SearchStrategy[str]:
    """Kubernetes quantities (matching the CRD's pattern) of cpu (``unit`` "cpu") or memory."""
    if unit == "cpu":
        value = st.one_of(st.integers(1, 4000).map(lambda m: f"{m}m"), st.integers(1, 4).map(str),
                          st.sampled_from(["0.5", "1.5", "250m"]))
    else:
        value = st.one_of(st.integers(64, 4096).map(lambda m: f"{m}Mi"), st.integers(1, 8).map(lambda g: f"{g}Gi"),
                          st.integers(10**8, 4 * 10**9).map(str), st.sampled_from(["512M", "1G", "1e9"]))
    return value.filter(lambda q: QUANTITY_RE.fullmatch(q) is not None)


def _quantity_bytes(text: str) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3}
    for suffix, factor in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


@st.composite
def resources(draw: st.DrawFn) -> dict[str, Any]:
    """``resources`` with requests no larger than limits (what a pod template must have)."""
    out: dict[str, Any] = {}
    for key, unit in (("cpu", "cpu"), ("memory", "memory")):
        if not draw(st.booleans()):
            continue
        request = draw(quantities(unit))
        out.setdefault("requests", {})[key] = request
        if draw(st.booleans()):
            limit = draw(quantities(unit))
            if _quantity_bytes(limit) < _quantity_bytes(request):
                limit = request
            out.setdefault("limits", {})[key] = limit
    return out


#: RocketMQ BrokerConfig / MessageStoreConfig keys an operator user sets.
CONFIG_KEYS = ("deleteWhen", "fileReservedTime", "maxMessageSize", "sendMessageThreadPoolNums",
               "autoCreateTopicEnable", "traceTopicEnable", "msgTraceTopicName", "maxTransferCountOnMessageInMemory")
#: Printable ASCII values the CRD's ``spec.broker.config`` value pattern accepts (no backslash).
config_values = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7e), min_size=1, max_size=12).filter(
    re.compile(schema_at("spec.broker.config")["additionalProperties"]["pattern"]).fullmatch)
broker_config = st.dictionaries(st.sampled_from(CONFIG_KEYS), config_values, max_size=4)

topic_names = st.from_regex(schema_at("spec.topics.[].name")["pattern"], fullmatch=True).filter(
    lambda s: 0 < len(s) <= 40)
topics = st.lists(st.fixed_dictionaries({"name": topic_names, "queues": st.integers(1, 16),
                                         "perm": enum("spec.topics.[].perm")}),
                  max_size=3, unique_by=lambda t: t["name"])


@st.composite
def analytics_jobs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Up to two valid ``spec.analytics.jobs`` entries (a logs job may follow; a scheduled one may not)."""
    jobs = []
    for name in draw(st.lists(st.sampled_from(["daily", "once", "follow-logs"]), max_size=2, unique=True)):
        job = {"name": name, "job": draw(enum("spec.analytics.jobs.[].job")), "topics": ["TopicA"]}
        if draw(st.booleans()):
            job["schedule"] = draw(st.sampled_from(["0 3 * * *", "@hourly", "@every 10m"]))
            job["suspend"] = draw(st.booleans())
        elif job["job"] == "logs" and draw(st.booleans()):
            job["follow"] = True
        jobs.append(job)
    return jobs


def set_path(spec: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``spec`` with the dotted ``path`` (below ``spec.``) set to ``value``."""
    out = copy.deepcopy(spec)
    node = out
    parts = path.split(".")[1:]
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def invalid_edits() -> list[tuple[str, Any]]:
    """``(path, value)`` pairs the CRD schema refuses, derived from every object-reachable leaf with a
    bound, an enum, a pattern or a type: one past each bound, a value outside each enum, a string
    breaking each pattern, and a wrong type."""
    out: list[tuple[str, Any]] = []

    def walk(node: dict[str, Any], path: str) -> None:
        if path.startswith("spec.security.networkPolicies.httpFrom"):
            return
        if "properties" in node and node.get("type") == "object":
            for key, child in node["properties"].items():
                walk(child, f"{path}.{key}")
            return
        if node.get("type") == "array" or "additionalProperties" in node:
            return
        if "enum" in node:
            out.append((path, "NotAnOption" if node.get("type") == "string" else 99))
        if node.get("type") == "integer":
            if "minimum" in node:
                out.append((path, node["minimum"] - 1))
            if "maximum" in node:
                out.append((path, node["maximum"] + 1))
            out.append((path, "seven"))
        if node.get("type") == "boolean":
            out.append((path, "yes"))
        if ("pattern" in node and node.get("type") == "string") or node.get("x-kubernetes-int-or-string"):
            out.append((path, "not valid!"))
        if node.get("minLength"):
            out.append((path, ""))

    walk(schema_at("spec"), "spec")
    # map values: only spec.broker.config's carry a pattern (one broker.conf line, no escapes)
    assert "pattern" in schema_at("spec.broker.config")["additionalProperties"]
    out += [("spec.broker.config", {"deleteWhen": "04\nbrokerClusterName=other"}),
            ("spec.broker.config", {"msgTraceTopicName": "a\\b"})]
    return out


INVALID_EDITS = invalid_edits()

#: Specs the schema accepts but the operator must refuse (``rocket_operator.spec.parse_spec``).
SEMANTIC_INVALID: list[tuple[str, Any]] = [
    ("spec.analytics", {"jobs": [{"name": "t", "job": "traffic", "topics": ["A"], "logFormat": "HDFS"}]}),
    ("spec.analytics", {"jobs": [{"name": "f", "job": "logs", "topics": ["A"], "follow": True,
                                  "schedule": "@hourly"}]}),
    ("spec.analytics", {"outputVolumeClaim": "out", "jobs": [{"name": "o", "job": "traffic", "topics": ["A"],
                                                              "output": "/data/elsewhere"}]}),
    ("spec.security", {"tls": {"mode": "Permissive", "issuer": "Secret"}}),
    ("spec.broker.config", {"listenPort 1": "x"}),  # keys have no schema pattern (no CEL before 1.25)
]


def say(text: str) -> None:
    """Print to the real stdout (kopf's CliRunner swaps ``sys.stdout`` while the operator runs)."""
    out = sys.__stdout__
    if out is not None:
        out.write(text + "\n")
        out.flush()


class OperatorLog(logging.Handler):
    """Collects the operator's error records (and failed-reconciliation warnings) from kopf's loggers."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.levelno >= logging.ERROR or record.exc_info or "reconciliation failed" in message:
            text = f"{record.levelname} {record.name}: {message}"
            if record.exc_info and record.exc_info[1] is not None:
                text += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
            with self._lock:
                self.records.append(text)

    def take(self) -> list[str]:
        """The records since the last call."""
        with self._lock:
            out, self.records = self.records, []
        return out

    @classmethod
    @contextlib.contextmanager
    def installed(cls) -> Iterator[OperatorLog]:
        """The handler on the root logger while the ``with`` block runs."""
        handler = cls()
        logging.getLogger().addHandler(handler)
        try:
            yield handler
        finally:
            logging.getLogger().removeHandler(handler)


#: The StorageClass of the explored cluster's PVCs: no provisioner, expansion allowed, so that a larger
#: ``spec.broker.storage.size`` can expand the PVCs (the API server's PersistentVolumeClaimResize check).
STORAGE_CLASS = "explore-expandable"


def ensure_storage(api: Any, available: int = 12) -> None:
    """The :data:`STORAGE_CLASS` and at least ``available`` Available 10Gi hostPath PVs of it."""
    storage = client.StorageV1Api(api)
    try:
        storage.create_storage_class({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                      "metadata": {"name": STORAGE_CLASS},
                                      "provisioner": "kubernetes.io/no-provisioner",
                                      "allowVolumeExpansion": True, "volumeBindingMode": "Immediate"})
    except ApiException as exc:
        if exc.status != 409:
            raise
    core = client.CoreV1Api(api)
    pvs = core.list_persistent_volume().items
    free = sum(1 for pv in pvs if pv.spec.storage_class_name == STORAGE_CLASS and pv.spec.claim_ref is None)
    for _ in range(max(0, available - free)):
        name = f"explore-pv-{uuid.uuid4().hex[:10]}"
        core.create_persistent_volume({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": STORAGE_CLASS, "persistentVolumeReclaimPolicy": "Retain",
                     "hostPath": {"path": f"/tmp/{name}"}}})


@dataclass
class Env:
    """What the machine works with: the API client, namespace, the operator's log, a step journal."""

    api: Any
    namespace: str
    log: OperatorLog
    journal: list[str] = field(default_factory=list)
    steps: int = 0


class SpecExplorer(RuleBasedStateMachine):
    """One RocketCluster named ``explore`` (deleted and re-created by a rule) in ``ENV.namespace``."""

    ENV: Env | None = None
    NAME = "explore"

    def __init__(self) -> None:
        super().__init__()
        assert self.ENV is not None, "SpecExplorer.ENV must be set"
        self.env = self.ENV
        self.objects = client.CustomObjectsApi(self.env.api)
        self.core = client.CoreV1Api(self.env.api)
        self.apps = client.AppsV1Api(self.env.api)
        self.spec: dict[str, Any] = {}
        self.paused = False
        self.uid = ""
        self.keep_claims: set[str] = set()

    # -- journal ----------------------------------------------------------------------------------

    def note(self, text: str) -> None:
        self.env.steps += 1
        line = f"step {self.env.steps}: {text}"
        self.env.journal.append(line)
        say(line)

    # -- API helpers -----------------------------------------------------------------------------

    def get(self) -> dict[str, Any] | None:
        try:
            return self.objects.get_namespaced_custom_object(GROUP, VERSION, self.env.namespace, PLURAL, self.NAME)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def replace_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """PUT the object with ``spec`` (retried on a 409 from a concurrent status write)."""
        for _ in range(20):
            cr = self.get()
            assert cr is not None
            cr["spec"] = spec
            try:
                return self.objects.replace_namespaced_custom_object(GROUP, VERSION, self.env.namespace, PLURAL,
                                                                     self.NAME, cr)
            except ApiException as exc:
                if exc.status != 409:
                    raise
        raise AssertionError("could not replace the RocketCluster: 20 conflicts")

    def create(self, spec: dict[str, Any]) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RocketCluster", "metadata": {"name": self.NAME},
                "spec": spec}
        created = self.objects.create_namespaced_custom_object(GROUP, VERSION, self.env.namespace, PLURAL, body)
        self.uid = created["metadata"]["uid"]
        self.spec = created["spec"]

    # -- what should exist -----------------------------------------------------------------------

    def expected_children(self, spec: dict[str, Any]) -> dict[str, set[str]]:
        n = self.NAME
        broker = spec.get("broker") or {}
        slaves = int(broker.get("replicasPerGroup", 1))
        security = spec.get("security") or {}
        acl = bool((security.get("acl") or {}).get("enabled"))
        tls = (security.get("tls") or {}).get("mode", "Disabled") != "Disabled"
        policies = (security.get("networkPolicies") or {}).get("enabled", True)
        jobs = (spec.get("analytics") or {}).get("jobs") or []
        # failover: Controller (the default) adds the controllers' StatefulSet, headless Service and
        # PDB (rocket_operator.controllers.controller_children); their Raft Secret is not listed here
        controller = [f"{n}-controller"] if broker.get("failover", "Controller") == "Controller" else []
        from rocket_operator import names

        return {
            "StatefulSet": {f"{n}-broker-master", *(f"{n}-broker-slave-{i}" for i in range(1, slaves + 1)),
                            *controller},
            "Deployment": {f"{n}-nameserver"},
            "Service": {f"{n}-nameserver", f"{n}-nameserver-headless", f"{n}-broker", *controller},
            "ConfigMap": {f"{n}-broker-config", *([f"{n}-nameserver-config"] if acl or tls else [])},
            "PodDisruptionBudget": {f"{n}-broker", f"{n}-nameserver", *controller},
            "NetworkPolicy": {f"{n}-broker", f"{n}-nameserver", f"{n}-controller"} if policies else set(),
            "SparkApplication": {names.analytics_application(n, j["name"], False) for j in jobs
                                 if not j.get("schedule")},
            "ScheduledSparkApplication": {names.analytics_application(n, j["name"], True) for j in jobs
                                          if j.get("schedule")},
        }

    def children(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Every object of the child kinds in the namespace (kind -> name -> object as a dict)."""
        ns, api = self.env.namespace, self.env.api
        sanitize = api.sanitize_for_serialization
        out: dict[str, dict[str, dict[str, Any]]] = {}
        out["StatefulSet"] = {o.metadata.name: sanitize(o) for o in self.apps.list_namespaced_stateful_set(ns).items}
        out["Deployment"] = {o.metadata.name: sanitize(o) for o in self.apps.list_namespaced_deployment(ns).items}
        out["Service"] = {o.metadata.name: sanitize(o) for o in self.core.list_namespaced_service(ns).items}
        out["ConfigMap"] = {o.metadata.name: sanitize(o) for o in self.core.list_namespaced_config_map(ns).items
                            if o.metadata.name != "kube-root-ca.crt"}
        pdbs = self.objects.list_namespaced_custom_object("policy", "v1beta1", ns, "poddisruptionbudgets")["items"]
        out["PodDisruptionBudget"] = {o["metadata"]["name"]: o for o in pdbs}
        nps = client.NetworkingV1Api(api).list_namespaced_network_policy(ns).items
        out["NetworkPolicy"] = {o.metadata.name: sanitize(o) for o in nps}
        for kind, plural in (("SparkApplication", "sparkapplications"),
                             ("ScheduledSparkApplication", "scheduledsparkapplications")):
            try:
                items = self.objects.list_namespaced_custom_object(*SPARK, ns, plural)["items"]
            except ApiException as exc:
                if exc.status != 404:
                    raise
                items = []
            # runs of a ScheduledSparkApplication are owned by it, not by the cluster
            out[kind] = {o["metadata"]["name"]: o for o in items
                         if not any(r.get("kind") == "ScheduledSparkApplication"
                                    for r in o["metadata"].get("ownerReferences") or [])}
        return out

    def children_problems(self, spec: dict[str, Any]) -> list[str]:
        problems = []
        found = self.children()
        for kind, want in self.expected_children(spec).items():
            have = found.get(kind, {})
            if set(have) != want:
                problems.append(f"{kind}: expected {sorted(want)}, found {sorted(have)}")
            for name, obj in have.items():
                refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")]
                if len(refs) != 1 or refs[0].get("uid") != self.uid:
                    problems.append(f"{kind} {name}: controller owners {refs}, want the cluster {self.uid}")
        groups = int((spec.get("broker") or {}).get("groups", 2))
        size = str(((spec.get("broker") or {}).get("storage") or {}).get("size", "10Gi"))
        for name, sts in found["StatefulSet"].items():
            if not name.startswith(f"{self.NAME}-broker-"):
                continue  # the controllers' StatefulSet: fixed replicas and claim size
            if sts["spec"]["replicas"] != groups:
                problems.append(f"StatefulSet {name}: {sts['spec']['replicas']} replicas, want {groups}")
            claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
            if claim != size:
                problems.append(f"StatefulSet {name}: volumeClaimTemplate of {claim}, spec says {size}")
        conf = found["ConfigMap"].get(f"{self.NAME}-broker-config")
        if conf is not None:
            problems.extend(self.broker_conf_problems(spec, (conf.get("data") or {}).get("broker.conf", "")))
        return problems

    def broker_conf_problems(self, spec: dict[str, Any], text: str) -> list[str]:
        """``broker.conf`` read as java.util.Properties reads it (last key wins): every
        ``spec.broker.config`` entry present unless it names an operator-owned key, those unchanged."""
        props: dict[str, str] = {}
        for line in text.splitlines():
            line = line.lstrip()
            if not line or line[0] in "#!":
                continue
            match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
            key, value = (match.group(1), match.group(2)) if match else (line, "")
            props[key] = value
        problems = []
        if props.get("brokerClusterName") != self.NAME:
            problems.append(f"broker.conf: brokerClusterName is {props.get('brokerClusterName')!r}")
        for key in ("listenPort", "haListenPort"):
            if not props.get(key, "").isdigit():
                problems.append(f"broker.conf: {key} is {props.get(key)!r}")
        for key, value in ((spec.get("broker") or {}).get("config") or {}).items():
            if key not in FIXED_BROKER_KEYS and props.get(key) != value:
                problems.append(f"broker.conf: {key} is {props.get(key)!r}, spec says {value!r}")
        return problems

    def claims(self) -> dict[str, dict[str, Any]]:
        """The brokers' PVCs (``store-<StatefulSet>-<i>``; not the controllers' Raft ones)."""
        return {p.metadata.name: self.env.api.sanitize_for_serialization(p)
                for p in self.core.list_namespaced_persistent_volume_claim(self.env.namespace).items
                if p.metadata.name.startswith(f"store-{self.NAME}-broker-")}

    def claim_problems(self, spec: dict[str, Any]) -> list[str]:
        found = self.claims()
        problems = [f"PVC {c} is gone although deleteClaim did not ask for it"
                    for c in sorted(self.keep_claims - set(found))]
        on_delete = bool((((spec.get("broker") or {}).get("storage") or {}).get("deleteClaim") or {}).get("onDelete"))
        size = str(((spec.get("broker") or {}).get("storage") or {}).get("size", "10Gi"))
        for name, pvc in found.items():
            if pvc["metadata"].get("deletionTimestamp"):
                continue
            request = pvc["spec"]["resources"]["requests"]["storage"]
            if _quantity_bytes(request) < _quantity_bytes(size):
                problems.append(f"PVC {name}: requests {request}, spec.broker.storage.size is {size}")
            owned = any(r.get("uid") == self.uid for r in pvc["metadata"].get("ownerReferences") or [])
            if owned != on_delete:
                problems.append(f"PVC {name}: owned by the cluster is {owned}, deleteClaim.onDelete is {on_delete}")
        return problems

    def remember_claims(self) -> None:
        self.keep_claims |= {n for n, p in self.claims().items() if not p["metadata"].get("deletionTimestamp")}

    # -- convergence -----------------------------------------------------------------------------

    def status_problems(self) -> list[str]:
        cr = self.get()
        if cr is None:
            return ["the RocketCluster is gone"]
        st_ = cr.get("status") or {}
        conds = {c["type"]: c for c in st_.get("conditions") or []}
        phase = st_.get("phase")
        if self.paused:
            paused = conds.get("Paused", {})
            return [] if phase == "Paused" and paused.get("status") == "True" else [f"phase {phase}, not Paused"]
        generation = cr["metadata"]["generation"]
        if st_.get("observedGeneration") != generation:
            return [f"observedGeneration {st_.get('observedGeneration')} != generation {generation} (phase {phase})"]
        if phase == "Running" and conds.get("Ready", {}).get("status") == "True":
            return []
        degraded = conds.get("Degraded", {})
        if phase != "Running" and degraded.get("status") == "True" and degraded.get("reason") \
                and degraded.get("message"):
            return [f"settled Degraded: {degraded['reason']}: {degraded['message']}"]
        return [f"phase {phase}, Ready {conds.get('Ready', {}).get('status')}: {conds.get('Ready', {}).get('message')}"]

    def converge(self, what: str, *, expect_degraded: bool = False) -> None:
        """Wait until status and children satisfy the invariants (or fail after CONVERGE_SECONDS)."""
        ensure_storage(self.env.api)
        deadline = time.monotonic() + CONVERGE_SECONDS
        started = time.monotonic()
        last: list[str] = []
        while True:
            try:
                last = self.status_problems()
                settled_degraded = bool(last) and last[0].startswith("settled Degraded")
                if settled_degraded and expect_degraded:
                    last = []
                if not last and not self.paused:
                    last = self.children_problems(self.spec) + self.claim_problems(self.spec)
            except ApiException as exc:
                last = [f"API error {exc.status}: {exc.reason}"]
            if not last:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not converged in {CONVERGE_SECONDS:.0f} s: " + "; ".join(last))
            time.sleep(0.3)
        self.remember_claims()
        self.check_log(what)
        self.env.journal[-1] += f" -> converged in {time.monotonic() - started:.1f} s"

    def check_log(self, what: str) -> None:
        errors = self.env.log.take()
        assert not errors, f"{what}: the operator logged errors:\n" + "\n".join(errors)

    def change(self, what: str, spec: dict[str, Any]) -> None:
        self.note(what)
        self.replace_spec(spec)
        self.spec = spec
        if self.paused:
            return
        self.converge(what)

    # -- rules -----------------------------------------------------------------------------------

    @initialize(groups=ints("spec.broker.groups"), slaves=ints("spec.broker.replicasPerGroup"),
                nameservers=ints("spec.nameServer.replicas"), on_scale_in=st.booleans(),
                failover=enum("spec.broker.failover"), nonce=st.integers(0, 2**32))
    def start(self, groups: int, slaves: int, nameservers: int, on_scale_in: bool, failover: str,
              nonce: int) -> None:
        # hypothesis tries the all-minimal sequence first (the same rule with the same arguments):
        # skip it, it explores nothing
        assume(nonce != 0)
        spec = {"broker": {"groups": groups, "replicasPerGroup": slaves, "failover": failover,
                           "storage": {"size": "1Gi", "storageClassName": STORAGE_CLASS,
                                       "deleteClaim": {"onScaleIn": on_scale_in}}},
                "nameServer": {"replicas": nameservers}, "topics": [{"name": "TopicA", "queues": 4}]}
        self.note(f"create {spec}")
        # a RocketCluster of an earlier example may still be deleting
        wait = time.monotonic() + CONVERGE_SECONDS
        while self.get() is not None and time.monotonic() < wait:
            time.sleep(0.3)
        self.keep_claims = set()
        self.create(spec)
        self.converge("create")

    @rule(groups=ints("spec.broker.groups"))
    def scale_brokers(self, groups: int) -> None:
        before = int(self.spec["broker"]["groups"])
        spec = set_path(self.spec, "spec.broker.groups", groups)
        self.forget_scaled_in_claims(groups)
        self.change(f"broker groups {before} -> {groups}", spec)

    def forget_scaled_in_claims(self, groups: int) -> None:
        """With ``deleteClaim.onScaleIn`` the PVCs of groups at or above ``groups`` may go."""
        broker = self.spec["broker"]
        if groups < int(broker["groups"]) and broker["storage"]["deleteClaim"].get("onScaleIn"):
            self.keep_claims = {c for c in self.keep_claims if int(c.rsplit("-", 1)[1]) < groups}

    @rule(slaves=ints("spec.broker.replicasPerGroup"))
    def scale_slaves(self, slaves: int) -> None:
        self.change(f"replicasPerGroup {self.spec['broker']['replicasPerGroup']} -> {slaves}",
                    set_path(self.spec, "spec.broker.replicasPerGroup", slaves))

    @rule(replicas=ints("spec.nameServer.replicas"))
    def scale_nameservers(self, replicas: int) -> None:
        self.change(f"nameServer.replicas -> {replicas}", set_path(self.spec, "spec.nameServer.replicas", replicas))

    @precondition(lambda self: int(str(self.spec["broker"]["storage"]["size"]).removesuffix("Gi")) < 9)
    @rule(more=st.integers(1, 3))
    def storage_up(self, more: int) -> None:
        size = str(self.spec["broker"]["storage"]["size"])
        new = f"{min(9, int(size.removesuffix('Gi')) + more)}Gi"
        self.change(f"storage {size} -> {new}", set_path(self.spec, "spec.broker.storage.size", new))

    @rule(where=st.sampled_from(["spec.broker.resources", "spec.nameServer.resources"]), value=resources())
    def set_resources(self, where: str, value: dict[str, Any]) -> None:
        self.change(f"{where} = {value}", set_path(self.spec, where, value))

    @rule(config=broker_config)
    def set_config(self, config: dict[str, str]) -> None:
        self.change(f"broker.config = {config}", set_path(self.spec, "spec.broker.config", config))

    @rule(value=topics)
    def set_topics(self, value: list[dict[str, Any]]) -> None:
        self.change(f"topics = {[t['name'] for t in value]}", set_path(self.spec, "spec.topics", value))

    @rule(jobs=analytics_jobs())
    def set_analytics(self, jobs: list[dict[str, Any]]) -> None:
        self.change(f"analytics.jobs = {jobs}", set_path(self.spec, "spec.analytics", {"jobs": jobs}))

    @rule(on_scale_in=st.booleans(), on_delete=st.booleans())
    def set_delete_claim(self, on_scale_in: bool, on_delete: bool) -> None:
        self.change(f"deleteClaim onScaleIn={on_scale_in} onDelete={on_delete}",
                    set_path(self.spec, "spec.broker.storage.deleteClaim",
                             {"onScaleIn": on_scale_in, "onDelete": on_delete}))

    @rule(role=enum("spec.broker.brokerRole"), flush=enum("spec.broker.flushDiskType"),
          grace=ints("spec.broker.terminationGracePeriodSeconds"), pull=enum("spec.imagePullPolicy"),
          anti=enum("spec.scheduling.antiAffinity"), image=st.sampled_from(["rocketcluster/rocket:0.1.0",
                                                                            "rocketcluster/rocket:0.1.1"]))
    def set_pod_settings(self, role: str, flush: str, grace: int, pull: str, anti: str, image: str) -> None:
        """Settings that change the pod templates (the brokers roll one at a time)."""
        spec = set_path(self.spec, "spec.broker.brokerRole", role)
        spec = set_path(spec, "spec.broker.flushDiskType", flush)
        spec = set_path(spec, "spec.broker.terminationGracePeriodSeconds", grace)
        spec = set_path(spec, "spec.imagePullPolicy", pull)
        spec = set_path(spec, "spec.scheduling.antiAffinity", anti)
        spec = set_path(spec, "spec.image", image)
        self.change(f"pods: {role} {flush} grace={grace} {pull} antiAffinity={anti} {image}", spec)

    @rule(acl=st.booleans(), tls=enum("spec.security.tls.mode"))
    def set_security(self, acl: bool, tls: str) -> None:
        security = dict(self.spec.get("security") or {})
        security.update({"acl": {"enabled": acl}, "tls": {"mode": tls, "issuer": "Operator"}})
        self.change(f"security acl={acl} tls={tls}", set_path(self.spec, "spec.security", security))

    @rule(enabled=st.booleans())
    def set_network_policies(self, enabled: bool) -> None:
        security = {**(self.spec.get("security") or {}), "networkPolicies": {"enabled": enabled}}
        self.change(f"networkPolicies.enabled = {enabled}", set_path(self.spec, "spec.security", security))

    @precondition(lambda self: not self.paused)
    @rule(groups=ints("spec.broker.groups"))
    def pause_then_change(self, groups: int) -> None:
        """Pause; a spec change while paused changes no child; resume converges to it."""
        self.note("pause")
        self.set_paused(True)
        self.converge("pause")
        before = self.child_specs()
        spec = set_path(self.spec, "spec.broker.groups", groups)
        self.forget_scaled_in_claims(groups)
        self.note(f"while paused: broker groups -> {groups}")
        self.replace_spec(spec)
        self.spec = spec
        time.sleep(2.0)
        assert self.child_specs() == before, "a child changed while the cluster was paused"
        self.note("resume")
        self.set_paused(False)
        self.converge("resume")

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        self.objects.patch_namespaced_custom_object(GROUP, VERSION, self.env.namespace, PLURAL, self.NAME,
                                                    {"metadata": {"annotations": {PAUSED: "true" if paused
                                                                                  else None}}})

    def child_specs(self) -> dict[str, Any]:
        """Each child's spec/data (what the operator writes), to compare before and after."""
        return {(kind, name): obj.get("spec") or obj.get("data")
                for kind, objs in self.children().items() for name, obj in objs.items()}

    @rule(edit=st.sampled_from(INVALID_EDITS))
    def invalid_by_schema(self, edit: tuple[str, Any]) -> None:
        path, value = edit
        self.note(f"invalid (schema): {path} = {value!r}")
        before = self.get()
        assert before is not None
        try:
            self.replace_spec(set_path(self.spec, path, value))
        except ApiException as exc:
            assert exc.status == 422, f"{path}={value!r}: status {exc.status}, not 422: {exc.body}"
        else:
            raise AssertionError(f"the API server accepted {path} = {value!r}")
        after = self.get()
        assert after is not None
        assert after["metadata"]["generation"] == before["metadata"]["generation"] and after["spec"] == before["spec"]
        self.check_log("invalid spec")

    @precondition(lambda self: not self.paused)
    @rule(edit=st.sampled_from(SEMANTIC_INVALID))
    def invalid_for_operator(self, edit: tuple[str, Any]) -> None:
        path, value = edit
        self.note(f"invalid (operator): {path} = {value!r}")
        before = self.child_specs()
        self.replace_spec(set_path(self.spec, path, value))
        deadline = time.monotonic() + CONVERGE_SECONDS

        def reported() -> bool:
            cr = self.get()
            assert cr is not None
            st_ = cr.get("status") or {}
            conds = {c["type"]: c for c in st_.get("conditions") or []}
            return (st_.get("phase") == "Invalid" and st_.get("observedGeneration") == cr["metadata"]["generation"]
                    and conds.get("Degraded", {}).get("reason") == "InvalidSpec"
                    and bool(conds.get("Degraded", {}).get("message")))

        while not reported():
            assert time.monotonic() < deadline, f"{path}: no InvalidSpec condition in {CONVERGE_SECONDS:.0f} s"
            time.sleep(0.3)
        assert self.child_specs() == before, f"{path}: a child changed for an invalid spec (half-applied)"
        self.check_log("invalid spec (operator)")
        self.change("back to the last valid spec", self.spec)

    @precondition(lambda self: not self.paused)
    @rule(groups=ints("spec.broker.groups"), on_delete=st.booleans(), at_once=st.booleans())
    def delete_and_recreate(self, groups: int, on_delete: bool, at_once: bool) -> None:
        """Delete the cluster (children garbage-collected, PVCs kept unless onDelete) and create it again:
        after the garbage collector is done, or (``at_once``, PVCs kept) as soon as the object is gone."""
        at_once = at_once and not self.on_delete()
        self.note(f"delete (deleteClaim.onDelete={self.on_delete()}){' and re-create at once' if at_once else ''}")
        self.objects.delete_namespaced_custom_object(GROUP, VERSION, self.env.namespace, PLURAL, self.NAME)
        deadline = time.monotonic() + CONVERGE_SECONDS
        while self.get() is not None:
            assert time.monotonic() < deadline, "the RocketCluster was not deleted (finalizer kept?)"
            time.sleep(0.3)
        if self.on_delete():
            self.keep_claims = set()
        while not at_once:
            left = {k: sorted(v) for k, v in self.children().items() if v}
            claims_left = [c for c, p in self.claims().items() if not p["metadata"].get("deletionTimestamp")]
            if not left and (not self.on_delete() or not claims_left):
                break
            assert time.monotonic() < deadline, f"children left after the deletion: {left}, PVCs {claims_left}"
            time.sleep(0.3)
        missing = self.keep_claims - set(self.claims())
        assert not missing, f"PVCs deleted with the cluster although onDelete is false: {sorted(missing)}"
        self.check_log("delete")
        spec = set_path(self.spec, "spec.broker.groups", groups)
        spec = set_path(spec, "spec.broker.storage.deleteClaim",
                        {**spec["broker"]["storage"].get("deleteClaim", {}), "onDelete": on_delete})
        self.note(f"re-create with groups={groups} onDelete={on_delete}")
        self.create(spec)
        self.converge("re-create")

    def on_delete(self) -> bool:
        return bool(((self.spec.get("broker") or {}).get("storage") or {}).get("deleteClaim", {}).get("onDelete"))

    def teardown(self) -> None:
        if self.get() is not None:
            try:
                self.objects.delete_namespaced_custom_object(GROUP, VERSION, self.env.namespace, PLURAL, self.NAME)
            except ApiException:
                pass


def run(env: Env, steps: int, seed: int, examples: int = 1,
        runner: Callable[..., None] | None = None) -> None:
    """Run the machine: ``examples`` sequences of up to ``steps`` rules each, from ``seed``
    (hypothesis' generate phase only: replay with the same seed, no shrinking against the cluster)."""
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis import seed as hseed
    from hypothesis.stateful import run_state_machine_as_test

    SpecExplorer.ENV = env
    machine = hseed(seed)(type("SeededExplorer", (SpecExplorer,), {}))
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
        phases=[Phase.generate], suppress_health_check=list(HealthCheck)))
