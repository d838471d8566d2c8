"""``spec.broker.failover: Controller`` with REAL controllers and controller-mode brokers on loopback.

Three ``rocket controller`` processes, a NameServer and two broker groups of two controller-mode
brokers each (``allAckInSyncStateSet``: an acknowledged message is on every SyncStateSet member)
run as local processes standing in for the pods of the RocketCluster ``ctlfo``: the test resolver
maps the pods ``ctlfo-controller-<i>`` and ``ctlfo-broker-{master,slave-1}-<g>`` to them, the pods
themselves are fake (fake kubelet). The broker of pod ``ctlfo-broker-slave-1-0`` starts first, so
the controllers make it group 0's master: the StatefulSet a pod belongs to is not its role.

* the objects: the controllers' StatefulSet (3 replicas), headless Service, PDB and Raft Secret
  exist on the API server, the brokers run controller mode, and the Secret's value was never
  logged;
* ``status.brokerGroups``: each group's master pod, master epoch and SyncStateSet are what the
  controllers hold (Apache's ``mqadmin getSyncStateSet`` is the witness);
* a rolling restart (image change) while two producers send without pause (ours and the real
  RocketMQ C++ client, from the compat venv ``ROCKET_COMPAT_VENV``): the test stops a pod's
  broker process when the operator deletes the pod and starts it again (same port and store) when
  the StatefulSet makes the new pod, as a kubelet would. Pods restart group by group by ACTUAL
  role (in group 0 the master StatefulSet's pod first: it is the slave), a master only after the
  controllers moved its role to the other broker (it is a slave when deleted), each group
  read-only while its brokers restart; 0 sends fail and every acknowledged message is consumed
  afterwards (the C++ client's by the C++ pull consumer).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.compat import mqadmin
from tests.compat.mqadmin import fields, replicas
from tests.compat.realclient import cpp_error_lines
from tests.k8s import controller_mode
from tests.k8s.controller_mode import Processes, ha_status, play_kubelet, replica_info, run, running_with_masters
from tests.k8s.harness import temporary_namespace, wait_for
from tests.k8s.test_drain_real import Traffic
from tests.k8s.test_operator import create, patch, pods, read_pdb, rkc, status

#: 8 processes, a rolling restart and the C++ client's read-back on a shared machine: more than the default 300 s
pytestmark = pytest.mark.timeout(600)

CLUSTER = "ctlfo"
TOPIC = "FailoverTopic"
GROUP = "failover-consumers"
GROUPS = (0, 1)
#: pod -> (group, which process of the group starts first); group 0's slave-StatefulSet pod first
PODS = {f"{CLUSTER}-broker-slave-1-0": 0, f"{CLUSTER}-broker-master-0": 0,
        f"{CLUSTER}-broker-master-1": 1, f"{CLUSTER}-broker-slave-1-1": 1}


@pytest.fixture(scope="module")
def processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Processes]:
    # the first broker of each group (group 0: the slave StatefulSet's pod) is elected its master
    # before the second one starts
    with controller_mode.processes(tmp_path_factory.mktemp("ctlfo"), CLUSTER, PODS,
                                   [f"{CLUSTER}-broker-slave-1-0", f"{CLUSTER}-broker-master-1"]) as procs:
        yield procs


@pytest.fixture(scope="module")
def ctl_namespace(api: Any) -> Iterator[str]:
    with temporary_namespace(api, "fo") as name:
        yield name


@pytest.fixture(scope="module")
def wired(operator: Any, processes: Processes) -> Iterator[Processes]:
    """The test resolver maps the cluster's pods to the processes."""
    with controller_mode.wire(operator, CLUSTER, processes) as procs:
        yield procs


def test_controller_objects_and_status_show_the_real_masters(api: Any, ctl_namespace: str, wired: Processes,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    ns = ctl_namespace
    # the test's producers re-read routes every second (ours) and every 30 s (the C++ client)
    create(api, ns, rkc(CLUSTER, broker={"groups": 2, "replicasPerGroup": 1, "clientRouteRefreshSeconds": 31,
                                         "config": {"allAckInSyncStateSet": "true"}},
                        topics=[{"name": TOPIC, "queues": 4}]))
    st = wait_for(lambda: running_with_masters(api, ns, CLUSTER), 90, what="Running with each group's master known")

    # the controllers' objects on the API server
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    sts = apps.read_namespaced_stateful_set(f"{CLUSTER}-controller", ns)
    assert sts.spec.replicas == 3 and sts.spec.service_name == f"{CLUSTER}-controller"
    assert sts.spec.volume_claim_templates[0].metadata.name == "data"
    svc = core.read_namespaced_service(f"{CLUSTER}-controller", ns)
    assert svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses
    read_pdb(api, ns, f"{CLUSTER}-controller")  # maxUnavailable 1
    secret = core.read_namespaced_secret(f"{CLUSTER}-controller-secret", ns)
    import base64

    password = base64.b64decode(secret.data["raft-secret"]).decode()
    assert len(password) >= 40 and secret.metadata.owner_references[0].kind == "RocketCluster"
    assert password not in caplog.text and secret.data["raft-secret"] not in caplog.text
    conf = core.read_namespaced_config_map(f"{CLUSTER}-broker-config", ns).data["broker.conf"]
    assert "enableControllerMode=true" in conf and "brokerRole" not in conf
    assert f"controllerAddr={CLUSTER}-controller-0.{CLUSTER}-controller.{ns}.svc:9878;" in conf
    master_sts = apps.read_namespaced_stateful_set(f"{CLUSTER}-broker-master", ns)
    assert "--broker-id" not in master_sts.spec.template.spec.containers[0].command[-1]
    assert st["controllersReady"] == "3/3"

    # status.brokerGroups: what the controllers hold, read by Apache's mqadmin
    lib = mqadmin.jars()
    for group in GROUPS:
        entry = st["brokerGroups"][group]
        info = run(replica_info(wired.controllers.addrs, f"{CLUSTER}-broker-{group}"))
        leader = run(_leader(wired.controllers.addrs))
        out = mqadmin.run_ok(lib, wired.root / "mqadmin-home", "getSyncStateSet", "-a", leader,
                             "-b", f"{CLUSTER}-broker-{group}", attempts=3)
        head, rows = fields(out), replicas(out)
        assert entry["master"]["brokerId"] == int(head["MasterBrokerId"]) == info.master_broker_id
        assert entry["master"]["address"] == head["MasterAddr"]
        assert entry["masterEpoch"] == int(head["MasterEpoch"]) == info.master_epoch
        assert entry["syncStateSet"] == sorted(bid for kind, bid, _, _ in rows if kind == "InSyncReplica")
        assert entry["syncStateSetEpoch"] == info.sync_state_set_epoch
        master_pod = entry["master"]["pod"]
        assert wired.brokers[master_pod].addr == head["MasterAddr"]
        assert entry["roles"][master_pod] == "master"
    # group 0's master is the pod of the slave StatefulSet: roles are the controllers', not the ordinals'
    assert st["brokerGroups"][0]["master"]["pod"] == f"{CLUSTER}-broker-slave-1-0"
    assert st["brokerGroups"][0]["roles"] == {f"{CLUSTER}-broker-master-0": "slave",
                                              f"{CLUSTER}-broker-slave-1-0": "master"}
    assert st["brokerGroups"][1]["master"]["pod"] == f"{CLUSTER}-broker-master-1"


def cpp_failure_report(failed: list[dict[str, Any]], home: Path, events: list[Any]) -> str:
    """The C++ client's failed sends (with wall-clock ``at``), its ERROR/WARN log lines and the
    cluster's events (write fences, master switches, restarts) with their times, to tell which
    broker refused and what the rollout was doing then."""
    timeline = sorted((str(e.last_timestamp or e.event_time or e.first_timestamp), e.reason, e.message)
                      for e in events)
    return "\n".join([f"failed sends: {failed[:5]}", "cluster events:",
                      *(f"  {at} {reason}: {message}" for at, reason, message in timeline),
                      cpp_error_lines(home)])


def test_rolling_restart_by_actual_role_fails_no_send_and_loses_nothing(api: Any, ctl_namespace: str,
                                                                       wired: Processes) -> None:
    from tests.compat.realclient import CompatVenvError, Driver, ensure_venv

    try:
        cpp_python = ensure_venv()
    except CompatVenvError as exc:
        pytest.fail(f"the real RocketMQ C++ client is not available: {exc}", pytrace=False)
    ns = ctl_namespace
    procs = wired
    wait_for(lambda: running_with_masters(api, ns, CLUSTER), 60, what="Running with each group's master known")
    for broker in procs.brokers.values():
        broker.controller_id = int(run(ha_status(broker.addr))["controllerMode"]["controllerBrokerId"])
    traffic = Traffic(procs.namesrv, topic=TOPIC, group=GROUP)
    traffic.start()
    # the real C++ client sends too (it re-reads routes every 30 s: the cluster's clientRouteRefreshSeconds)
    cpp = Driver(cpp_python, procs.namesrv, procs.root / "cpp-home")
    cpp_sender = cpp.start("send", "--topic", TOPIC, "--group", "PID_FO_CPP", "--count", "100000",
                           "--interval-ms", "20", "--body-prefix", "cpp", "--send-timeout-ms", "3000", timeout=900)
    stop = threading.Event()
    kubelet = threading.Thread(target=play_kubelet, args=(api, ns, CLUSTER, procs, stop), daemon=True)
    try:
        wait_for(lambda: len(traffic.per_broker) == 2 and min(traffic.per_broker.values()) >= 20, 30,
                 what="messages on both groups")
        wait_for(lambda: sum(1 for e in cpp_sender.events() if e.get("status") == "SEND_OK") >= 50, 60,
                 what="the C++ client's first acknowledged sends")
        kubelet.start()
        started = time.monotonic()
        patch(api, ns, CLUSTER, {"spec": {"image": "rocketcluster/rocket:0.1.1"}})
        wait_for(lambda: len(procs.deletions) == 4, 240, what=f"4 broker pods restarted (so far {procs.deletions})")
        st = wait_for(lambda: (s := running_with_masters(api, ns, CLUSTER)) and "rollout" not in s and s, 90,
                      what="Running after the rolling restart")
        took = time.monotonic() - started
        time.sleep(1.0)
        cpp_sender.kill()
        traffic.stop_sending()
        traffic.start_consumer()
        wait_for(lambda: set(traffic.sent) <= traffic.received, 90,
                 what=f"every acknowledged message consumed (missing {len(set(traffic.sent) - traffic.received)})")
    finally:
        stop.set()
        cpp_sender.kill()
        traffic.stop()
        if kubelet.is_alive():
            kubelet.join(30)
    cpp_events = cpp_sender.events()
    cpp_acked = {e["body"] for e in cpp_events if e["event"] == "send" and e.get("status") == "SEND_OK"}
    cpp_failed = [e for e in cpp_events if e["event"] == "send_error"
                  or (e["event"] == "send" and e.get("status") != "SEND_OK")]
    pulled = cpp.run("pull-consume", "--topic", TOPIC, "--group", "CG_FO_CPP",
                     "--expect", str(len(cpp_acked) + len(traffic.sent)), "--timeout", "90", timeout=120)
    cpp_lost = cpp_acked - {e["body"] for e in pulled if e["event"] == "msg"}
    import sys

    print(f"rolling restart of 4 brokers took {took:.1f} s; order {procs.deletions}; sent {len(traffic.sent)} "
          f"(per group {traffic.per_broker}), received {len(traffic.received)}, duplicates {traffic.duplicates}, "
          f"failed {len(traffic.failed)}; C++ client: {len(cpp_acked)} acknowledged, {len(cpp_failed)} failed, "
          f"{len(cpp_lost)} lost", file=sys.__stderr__)
    assert procs.errors == [], procs.errors
    # group by group, actual slave first (in group 0 the master StatefulSet's pod), each master only
    # once the controllers had moved its role away: every pod was a slave when deleted
    assert [pod for pod, _ in procs.deletions] == [
        f"{CLUSTER}-broker-slave-1-1", f"{CLUSTER}-broker-master-1",
        f"{CLUSTER}-broker-master-0", f"{CLUSTER}-broker-slave-1-0"]
    assert all(role == "slave" for _, role in procs.deletions), procs.deletions
    # the masters moved: group 1's to its slave-StatefulSet pod, group 0's to its master-StatefulSet pod
    assert st["brokerGroups"][0]["master"]["pod"] == f"{CLUSTER}-broker-master-0"
    assert st["brokerGroups"][1]["master"]["pod"] == f"{CLUSTER}-broker-slave-1-1"
    events = client.CoreV1Api(api).list_namespaced_event(ns, field_selector=f"involvedObject.name={CLUSTER}").items
    assert sum(1 for e in events if e.reason == "MasterSwitched") >= 2
    for pod in pods(api, ns).values():
        assert pod.spec.containers[0].image == "rocketcluster/rocket:0.1.1"
    assert traffic.error is None, traffic.error
    assert traffic.failed == [], traffic.failed[:5]
    assert set(traffic.sent) <= traffic.received
    assert len(traffic.sent) > 200
    assert cpp_failed == [], cpp_failure_report(cpp_failed, cpp.home, events)
    assert not cpp_lost, sorted(cpp_lost)[:5]
    assert len(cpp_acked) > 200


async def _leader(addrs: list[str]) -> str:
    from rocket.controller.client import ControllerClient

    ctl = ControllerClient(addrs)
    try:
        return await ctl.find_leader()
    finally:
        await ctl.close()


def test_manual_has_no_controllers_and_switching_adds_then_removes_them(api: Any, namespace: str,
                                                                         operator: Any) -> None:
    """Fake brokers (FakeAdmin): the objects of each mode on the real API server, both ways."""
    from kubernetes.client.rest import ApiException

    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    name = "modes"

    def controller_objects() -> set[str]:
        found = set()
        for kind, read in (("StatefulSet", apps.read_namespaced_stateful_set),
                           ("Service", core.read_namespaced_service),
                           ("Secret", lambda n, ns: core.read_namespaced_secret(f"{n}-secret", ns))):
            try:
                read(f"{name}-controller", namespace)
                found.add(kind)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return found

    create(api, namespace, rkc(name, broker={"groups": 1, "replicasPerGroup": 1, "failover": "Manual"}))
    wait_for(lambda: status(api, namespace, name).get("phase") == "Running", 45, what="Running (Manual)")
    assert controller_objects() == set()
    conf = core.read_namespaced_config_map(f"{name}-broker-config", namespace).data["broker.conf"]
    assert "enableControllerMode" not in conf and "brokerRole=ASYNC_MASTER" in conf
    assert "controllersReady" not in status(api, namespace, name)

    patch(api, namespace, name, {"spec": {"broker": {"failover": "Controller"}}})
    wait_for(lambda: controller_objects() == {"StatefulSet", "Service", "Secret"}, 30, what="controllers created")
    password = core.read_namespaced_secret(f"{name}-controller-secret", namespace).data["raft-secret"]
    # the brokers' template changed (controller mode): they roll, the master moved away first by the
    # (fake) controllers, so either pod may be master at the end: the status says which
    st = wait_for(lambda: (s := status(api, namespace, name)).get("controllersReady") == "3/3"
                  and s.get("phase") == "Running" and "rollout" not in s
                  and (s.get("brokerGroups") or [{}])[0].get("master") and s, 90,
                  what="controllers ready, the brokers rolled, the (fake) controllers' master in the status")
    master_id = operator.fake.master_ids.get(f"{name}-broker-0", 1)
    master = f"{name}-broker-master-0" if master_id == 1 else f"{name}-broker-slave-1-0"
    slave = f"{name}-broker-slave-1-0" if master_id == 1 else f"{name}-broker-master-0"
    assert st["brokerGroups"][0]["master"] == {"brokerId": master_id, "address": f"{name}-broker-0@{master_id}",
                                               "pod": master}
    assert st["brokerGroups"][0]["roles"] == {master: "master", slave: "slave"}
    assert ("switch_master", f"{name}-broker-0", 2) in operator.fake.calls_of("switch_master")
    conf = core.read_namespaced_config_map(f"{name}-broker-config", namespace).data["broker.conf"]
    assert "enableControllerMode=true" in conf and "brokerRole" not in conf
    operator.runner.restart()  # the Secret is made once: a new operator keeps the password
    time.sleep(2)
    assert core.read_namespaced_secret(f"{name}-controller-secret", namespace).data["raft-secret"] == password

    patch(api, namespace, name, {"spec": {"broker": {"failover": "Manual"}}})
    wait_for(lambda: controller_objects() == set(), 30, what="controllers removed")
    wait_for(lambda: "controllersReady" not in status(api, namespace, name), 30, what="controllersReady dropped")
