"""Test harness for the operator against a real API server (no kubelet).

* :func:`build_control_plane` / :class:`ControlPlane`: ``tests/k8s/control_plane.sh`` builds
  (once, cached) and runs etcd + kube-apiserver + kube-controller-manager + kube-scheduler
  v1.20.2 on loopback ports picked free.
* :class:`FakeKubelet`: a Ready fake Node whose status and Lease it renews, a pool of
  hostPath PVs so PVCs bind, and what a kubelet would do for our pods: scheduled pods
  become Running + Ready (with a pod IP), terminating pods are removed.
* :class:`OperatorRunner`: ``kopf.testing.KopfRunner`` running ``rocket_operator.handlers``
  in this process, restartable, with test hooks (resolver, admin).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.support import free_port
from tests.support import wait_for as support_wait_for

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SCRIPT = HERE / "control_plane.sh"
CRD_FILE = ROOT / "crds" / "rocketclusters.yaml"
USER_CRD_FILE = ROOT / "crds" / "rocketusers.yaml"
#: Our own schema of the Spark operator's SparkApplication and ScheduledSparkApplication (a test fixture).
SPARK_CRDS_FILE = HERE / "fixtures" / "spark-operator-crds.yaml"
NODE = "fake-node-1"


def cache_bin_dir() -> Path:
    """Where control_plane.sh keeps the binaries."""
    out = subprocess.run(["bash", str(SCRIPT), "path"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def binaries_present() -> bool:
    """True when the three binaries of the right version are cached."""
    bin_dir = cache_bin_dir()
    return all((bin_dir / c).exists() for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")) \
        and (bin_dir / "VERSION").exists()


def build_control_plane(log_path: Path, timeout: float = 3600.0) -> str | None:
    """Build the binaries if missing. Returns None on success, else why it failed (with the log tail)."""
    if binaries_present():
        return None
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.run(["bash", str(SCRIPT), "build"], stdout=log, stderr=subprocess.STDOUT,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return f"control_plane.sh build did not finish in {timeout:.0f} s (log: {log_path})"
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-25:]
        return f"control_plane.sh build failed with exit code {proc.returncode} (log: {log_path}):\n" + "\n".join(tail)
    return None


class ControlPlane:
    """A running control plane in ``run_dir``; ``kubeconfig`` is an admin kubeconfig."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.kubeconfig = run_dir / "kubeconfig"
        self.env = {
            **os.environ,
            "ROCKET_K8S_API_PORT": str(free_port()),
            "ROCKET_K8S_ETCD_PORT": str(free_port()),
            "ROCKET_K8S_ETCD_PEER_PORT": str(free_port()),
            "ROCKET_K8S_KCM_PORT": str(free_port()),
            "ROCKET_K8S_SCHED_PORT": str(free_port()),
        }

    def start(self) -> None:
        """Start everything; raises ``RuntimeError`` with the script's output when it fails."""
        proc = subprocess.run(["bash", str(SCRIPT), "start", str(self.run_dir)], env=self.env,
                              capture_output=True, text=True, timeout=180, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"control_plane.sh start failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")

    def stop(self) -> None:
        """Stop what :meth:`start` started."""
        subprocess.run(["bash", str(SCRIPT), "stop", str(self.run_dir)], env=self.env, capture_output=True,
                       timeout=60, check=False)


def api_client(kubeconfig: Path) -> Any:
    """A ``kubernetes.client.ApiClient`` for ``kubeconfig``."""
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return client.ApiClient(cfg)


def _install(ext: Any, body: dict[str, Any]) -> None:
    from kubernetes.client.rest import ApiException

    try:
        ext.create_custom_resource_definition(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        current = ext.read_custom_resource_definition(body["metadata"]["name"])
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        ext.replace_custom_resource_definition(body["metadata"]["name"], body)


def _wait_established(ext: Any, name: str, timeout: float) -> None:
    def established() -> bool:
        crd = ext.read_custom_resource_definition(name)
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

    support_wait_for(established, timeout, interval=0.2, what=f"the CRD {name} to become Established")


def install_crd(api: Any, timeout: float = 30.0) -> None:
    """Create (or replace) the RocketCluster and RocketUser CRDs and wait until they are Established."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api)
    for path in (CRD_FILE, USER_CRD_FILE):
        body = yaml.safe_load(path.read_text())
        _install(ext, body)
        _wait_established(ext, body["metadata"]["name"], timeout)


def spark_crd_names() -> list[str]:
    """Names of the CRDs in :data:`SPARK_CRDS_FILE`."""
    return [c["metadata"]["name"] for c in yaml.safe_load(SPARK_CRDS_FILE.read_text())["items"]]


def install_spark_crds(api: Any, timeout: float = 30.0) -> None:
    """Create (or replace) our SparkApplication / ScheduledSparkApplication CRDs; wait until they are
    Established and the API server's discovery lists both kinds."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api)
    for body in yaml.safe_load(SPARK_CRDS_FILE.read_text())["items"]:
        _install(ext, body)
    for name in spark_crd_names():
        _wait_established(ext, name, timeout)
    wait_for(lambda: set(spark_served(api)) >= {"sparkapplications", "scheduledsparkapplications"}, timeout,
             what="sparkoperator.k8s.io/v1beta2 in discovery")


def spark_served(api: Any) -> list[str]:
    """Resources served under ``sparkoperator.k8s.io/v1beta2`` (empty when the group is not served)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        out = client.CustomObjectsApi(api).get_api_resources("sparkoperator.k8s.io", "v1beta2")
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise
    return [r.name for r in out.resources or []]


def remove_spark_crds(api: Any, timeout: float = 60.0) -> None:
    """Delete our Spark CRDs (and with them every object of those kinds); wait until the API server
    no longer serves ``sparkoperator.k8s.io/v1beta2``."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    ext = client.ApiextensionsV1Api(api)
    for name in spark_crd_names():
        try:
            ext.delete_custom_resource_definition(name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def gone() -> bool:
        for name in spark_crd_names():
            try:
                ext.read_custom_resource_definition(name)
                return False
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return not spark_served(api)

    wait_for(gone, timeout, what="the Spark CRDs to be deleted")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeKubelet:
    """A fake Ready node plus the kubelet duties our tests need, in a background thread.

    Every ``period`` seconds: renew the node's Ready condition and Lease; mark
    scheduled, not-ready pods of namespaces in ``namespaces`` (all when empty)
    Running and Ready with a pod IP (unless ``auto_ready`` is False or the pod
    name is in ``hold``); force-delete terminating pods. ``ensure_pvs(n)``
    keeps ``n`` Available hostPath PVs.
    """

    def __init__(self, api: Any, period: float = 0.3, node: str = NODE, pvs: int = 120) -> None:
        from kubernetes import client

        self.node = node
        self.pvs = pvs
        self.api = api
        self.core = client.CoreV1Api(api)
        self.coord = client.CoordinationV1Api(api)
        self.period = period
        self.auto_ready = True
        self.hold: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"fake-kubelet-{node}", daemon=True)
        self._pv_counter = 0
        self._ip_counter = 10
        self._last_heartbeat = 0.0
        self.errors: list[str] = []

    def start(self) -> None:
        """Register the node and start the loop."""
        from kubernetes.client.rest import ApiException

        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.node, "labels": {"kubernetes.io/hostname": self.node,
                                                           "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}}
        try:
            self.core.create_node(node)
        except ApiException as exc:
            if exc.status != 409:
                raise
        self._heartbeat()
        if self.pvs:
            self.ensure_pvs(self.pvs)  # failover: Controller adds 3 controller PVCs per cluster
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop."""
        self._stop.set()
        self._thread.join(5)

    def ensure_pvs(self, available: int) -> None:
        """Create hostPath PVs until ``available`` are Available (10Gi, RWO, no class)."""
        pvs = self.core.list_persistent_volume().items
        free = sum(1 for pv in pvs if pv.status and pv.status.phase in (None, "Pending", "Available")
                   and pv.spec.claim_ref is None)
        for _ in range(max(0, available - free)):
            self._pv_counter += 1
            name = f"fake-pv-{os.getpid()}-{self._pv_counter}"
            self.core.create_persistent_volume({
                "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
                "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                         "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/{name}"}},
            })

    def _heartbeat(self) -> None:
        now = _now()
        self.core.patch_node_status(self.node, {"status": {
            "capacity": {"cpu": "64", "memory": "256Gi", "pods": "500"},
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "500"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake kubelet",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
        }})
        from kubernetes.client.rest import ApiException

        micro = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": self.node, "namespace": "kube-node-lease"},
                 "spec": {"holderIdentity": self.node, "leaseDurationSeconds": 40, "renewTime": micro}}
        try:
            self.coord.patch_namespaced_lease(self.node, "kube-node-lease", {"spec": lease["spec"]})
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.coord.create_namespaced_lease("kube-node-lease", lease)
        self._last_heartbeat = time.monotonic()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if time.monotonic() - self._last_heartbeat > 5:
                    self._heartbeat()
                self._pods()
            except Exception as exc:  # keep going; tests read .errors when puzzled
                self.errors.append(repr(exc))
            self._stop.wait(self.period)

    def _pods(self) -> None:
        from kubernetes.client.rest import ApiException

        for pod in self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}").items:
            meta = pod.metadata
            try:
                if meta.deletion_timestamp is not None:
                    self.core.delete_namespaced_pod(meta.name, meta.namespace, grace_period_seconds=0)
                    continue
                ready = any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
                if ready or not self.auto_ready or meta.name in self.hold:
                    continue
                self._ip_counter += 1
                now = _now()
                ip = f"10.244.{(self._ip_counter // 250) % 250}.{self._ip_counter % 250 + 1}"
                self.core.patch_namespaced_pod_status(meta.name, meta.namespace, {"status": {
                    "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "10.0.0.10",
                    "startTime": now,
                    "conditions": [
                        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                        {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                        {"type": "Ready", "status": "True", "lastTransitionTime": now},
                        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                    ],
                }})
            except ApiException as exc:
                if exc.status not in (404, 409):
                    raise


class OperatorRunner:
    """``rocket_operator`` under ``kopf.testing.KopfRunner`` in this process; restartable."""

    def __init__(self, configure: Callable[[], None]) -> None:
        self._configure = configure
        self._runner: Any = None
        self._cm: contextlib.ExitStack | None = None

    def start(self) -> None:
        """Configure the hooks and start kopf (returns once kopf's thread runs)."""
        from kopf.testing import KopfRunner

        self._configure()
        self._cm = contextlib.ExitStack()
        self._runner = self._cm.enter_context(
            KopfRunner(["run", "--standalone", "--all-namespaces", "-m", "rocket_operator.handlers"], timeout=60))
        time.sleep(1.0)

    def stop(self) -> None:
        """Stop kopf; raises if the operator crashed."""
        if self._cm is not None:
            cm, self._cm = self._cm, None
            cm.close()
            if self._runner.exception is not None and not isinstance(self._runner.exception, SystemExit):
                raise self._runner.exception

    def alive(self) -> bool:
        """kopf is running (it has not ended, by a crash or otherwise)."""
        return self._runner is not None and self._cm is not None and not self._runner.future.done()

    def restart(self) -> None:
        """Stop and start again (a new kopf, in-memory state lost, like a pod restart)."""
        self.stop()
        self.start()


#: The shared poll (``tests.support.wait_for``) as the Kubernetes tests use it: an API error while
#: things start (404 before a CRD is served, a refused connection while the API server restarts)
#: counts as "not yet".
wait_for = functools.partial(support_wait_for, interval=0.2, retry_on=(Exception,))


@contextlib.contextmanager
def environ(**values: str) -> Iterator[None]:
    """Temporarily set environment variables."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def temporary_namespace(api: Any, prefix: str) -> Iterator[str]:
    """A new namespace named ``<prefix>-<unique suffix>`` (``tests.support.unique``), deleted on exit
    (a failed delete is ignored: the session's API server goes away anyway)."""
    from kubernetes import client

    from tests.support import unique

    core = client.CoreV1Api(api)
    name = unique(prefix)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        with contextlib.suppress(Exception):
            core.delete_namespace(name)
