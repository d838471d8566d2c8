"""Operator benchmark on a real local API server (``tests/k8s/control_plane.sh``, v1.20.2).

1. Time to children: from the create call of a 2-group RocketCluster (one slave
   per group) returning to all nine children existing (Deployment, three
   Services, ConfigMap, two StatefulSets, two PDBs). Target <= 2 s.
2. Memory: the operator's resident set (``VmRSS``) idle, then serving 50
   RocketClusters once every one has reported a phase. Target <= 150 MB.

The operator runs as its own process (``python -m rocket_operator``) with the
static resolver (no DNS queries; brokers unreachable, so clusters stay Pending,
which is the steady state being measured). The control plane is built first if
the cache lacks it (~10 min, once).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 2.0
TARGET_RSS_MB = 150.0


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS")


def _cluster(name: str) -> dict[str, Any]:
    return {"apiVersion": "rocket.dev/v1alpha1", "kind": "RocketCluster", "metadata": {"name": name},
            "spec": {"broker": {"groups": 2, "replicasPerGroup": 1}, "topics": [{"name": "BenchTopic"}]}}


def _children_exist(api: Any, namespace: str, name: str, pool: ThreadPoolExecutor) -> bool:
    """One round of the five list calls, concurrently (keeps the measurement's own delay small)."""
    from kubernetes import client

    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    selector = f"app.kubernetes.io/instance={name}"
    calls = {
        "sts": lambda: apps.list_namespaced_stateful_set(namespace, label_selector=selector).items,
        "deploy": lambda: apps.list_namespaced_deployment(namespace, label_selector=selector).items,
        "svc": lambda: core.list_namespaced_service(namespace, label_selector=selector).items,
        "cm": lambda: core.list_namespaced_config_map(namespace, label_selector=selector).items,
        "pdb": lambda: client.CustomObjectsApi(api).list_namespaced_custom_object(
            "policy", "v1beta1", namespace, "poddisruptionbudgets", label_selector=selector)["items"],
    }
    futures = {k: pool.submit(fn) for k, fn in calls.items()}
    counts = {k: len(f.result()) for k, f in futures.items()}
    return counts == {"sts": 2, "deploy": 1, "svc": 3, "cm": 1, "pdb": 2}


def run(short: bool) -> None:
    """Print time-to-children (median, max) and operator RSS (idle, with 50 clusters)."""
    sys.path.insert(0, str(ROOT))
    from kubernetes import client
    from tests.k8s import harness

    failure = harness.build_control_plane(Path(tempfile.gettempdir()) / "rocketcluster-k8s-build.log")
    if failure:
        raise RuntimeError(failure)
    with tempfile.TemporaryDirectory(prefix="bench-operator-") as tmp:
        cp = harness.ControlPlane(Path(tmp) / "k8s")
        (Path(tmp) / "k8s").mkdir()
        cp.start()
        operator: subprocess.Popen[bytes] | None = None
        try:
            api = harness.api_client(cp.kubeconfig)
            harness.install_crd(api)
            env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig), "ROCKET_OPERATOR_HTTP_PORT": "-1",
                   "ROCKET_OPERATOR_RESOLVER": "static", "ROCKET_OPERATOR_RECHECK_SECONDS": "5",
                   "ROCKET_OPERATOR_RESYNC_SECONDS": "60",
                   "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), str(ROOT / "services")])}
            log = open(Path(tmp) / "operator.log", "wb")
            operator = subprocess.Popen([sys.executable, "-m", "rocket_operator"], env=env, stdout=log,
                                        stderr=subprocess.STDOUT)
            core, objects = client.CoreV1Api(api), client.CustomObjectsApi(api)
            core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
            time.sleep(4.0)  # kopf startup
            idle_rss = _rss_mb(operator.pid)

            # 1. time to children
            samples = []
            pool = ThreadPoolExecutor(5)
            for i in range(3 if short else 10):
                name = f"ttc-{i}"
                started = time.monotonic()
                objects.create_namespaced_custom_object("rocket.dev", "v1alpha1", "bench", "rocketclusters",
                                                        _cluster(name))
                while not _children_exist(api, "bench", name, pool):
                    if time.monotonic() - started > 30:
                        raise RuntimeError(f"children of {name} not created after 30 s")
                    time.sleep(0.01)
                samples.append(time.monotonic() - started)
                time.sleep(0.3)
            pool.shutdown()
            median, worst = statistics.median(samples), max(samples)
            verdict = "OK" if worst <= TARGET_SECONDS else "OVER TARGET"
            print(f"time to all 9 children of a 2-group RocketCluster: median {median * 1000:.0f} ms, "
                  f"max {worst * 1000:.0f} ms over {len(samples)} runs (target <= {TARGET_SECONDS:.0f} s: {verdict})")

            # 2. memory with 50 clusters
            total = 50
            started = time.monotonic()
            for i in range(len(samples), total):
                objects.create_namespaced_custom_object("rocket.dev", "v1alpha1", "bench", "rocketclusters",
                                                        _cluster(f"mem-{i}"))
            while True:
                items = objects.list_namespaced_custom_object("rocket.dev", "v1alpha1", "bench",
                                                              "rocketclusters")["items"]
                done = sum(1 for o in items if (o.get("status") or {}).get("phase"))
                if done >= total:
                    break
                if time.monotonic() - started > 300:
                    raise RuntimeError(f"only {done}/{total} RocketClusters reconciled after 300 s")
                time.sleep(0.5)
            all_reconciled = time.monotonic() - started
            time.sleep(5.0 if short else 20.0)  # steady state: daemons rechecking waiting clusters
            rss = _rss_mb(operator.pid)
            verdict = "OK" if rss <= TARGET_RSS_MB else "OVER TARGET"
            print(f"{total} RocketClusters reconciled (phase reported) {all_reconciled:.1f} s after the first create")
            print(f"(machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
            print(f"operator RSS: idle {idle_rss:.0f} MB, serving {total} RocketClusters {rss:.0f} MB "
                  f"(target <= {TARGET_RSS_MB:.0f} MB: {verdict})")
        finally:
            if operator is not None:
                operator.terminate()
                try:
                    operator.wait(15)
                except subprocess.TimeoutExpired:
                    operator.kill()
            cp.stop()


if __name__ == "__main__":
    run(short="--short" in sys.argv)
