"""Compatibility: Apache RocketMQ 5's own controller-mode brokers and ``mqadmin`` against our controller.

One NameServer of ours runs the controller embedded (``--enable-controller-in-namesrv``, a
one-peer Raft group; three-peer Raft is covered by tests/integration/test_controller_cluster.py).
Two Apache RocketMQ 5.4.0 brokers of one group start with ``enableControllerMode=true`` and
``controllerAddr`` pointing at it: they get their broker ids from our controller, the first
becomes master, the master adds the slave to the SyncStateSet once it has caught up
(CONTROLLER_ALTER_SYNC_STATE_SET), and both heartbeat. Apache's ``mqadmin`` then reads and
changes the controller's state, and the brokers' own behaviour is the witness that our answers
and notifications are right: after ``electMaster`` and after a kill -9 of the master, the Apache
broker our controller chose switches itself to master and registers as brokerId 0 in the
NameServer (``clusterList``).

Needs Java 17+ and the Apache jars (``bench/compare/java.py`` fetches them with Maven); fails and
says why when they are missing.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
from bench.compare import java

from rocket.protocol.codes import RequestCode
from rocket.protocol.route import ClusterInfo
from rocket.remoting import RemotingClient, RemotingCommand
from tests.compat import mqadmin
from tests.compat.mqadmin import fields, replicas
from tests.support import reserve_ports, rocket_command, terminate, wait_port

pytestmark = [pytest.mark.compat, pytest.mark.timeout(600)]

CLUSTER, GROUP = "DefaultCluster", "broker-a"
SECRET = "compat-controller-secret-0123456789"
BROKER_JVM = ["-Xms256m", "-Xmx512m", "-XX:MaxDirectMemorySize=256m", "-XX:+UseG1GC",
              "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED"]


@dataclass
class Setup:
    root: Path
    lib: Path
    namesrv: str
    brokers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)  # address -> process
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def mqadmin(self, *args: str, timeout: float = 120.0) -> str:
        """Run ``mqadmin <args>``; its stdout (fails the test when it exits non-zero)."""
        return mqadmin.run_ok(self.lib, self.root / "mqadmin-home", *args, timeout=timeout)


def masters_in_cluster_list(out: str) -> set[str]:
    """Addresses listed with BID 0 by ``clusterList``."""
    return {m.group(1) for m in re.finditer(r"^\S+\s+" + GROUP + r"\s+0\s+(\S+)", out, re.M)}


async def _controller(namesrv: str, code: int, body: bytes = b"", **ext: str) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(namesrv, RemotingCommand(code=code, ext_fields=ext, body=body), timeout=5)
    finally:
        await client.close()


def sync_state(namesrv: str) -> dict:
    """Our controller's view of the group (polling only; mqadmin is the witness)."""
    resp = asyncio.run(_controller(namesrv, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, orjson.dumps([GROUP])))
    return orjson.loads(resp.body)["replicasInfoTable"].get(GROUP, {}) if resp.code == 0 else {}


def routed_master(namesrv: str) -> str | None:
    """The group's brokerId-0 address in our NameServer's routes (polling only)."""
    resp = asyncio.run(_controller(namesrv, RequestCode.GET_BROKER_CLUSTER_INFO))
    if resp.code != 0:
        return None
    data = ClusterInfo.from_json(resp.body).broker_addr_table.get(GROUP)
    return data.master_addr if data else None


def wait_for(what: str, check, timeout: float, setup: Setup):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in sorted(setup.root.glob("*.log")))
    raise AssertionError(f"{what}: not after {timeout} s (last: {value})\n{logs}")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    lib = mqadmin.jars()
    root = tmp_path_factory.mktemp("mqadmin-controller")
    base = reserve_ports([0, 2, 10, 11, 20, 21])
    ns_port = base
    s = Setup(root, lib, f"127.0.0.1:{ns_port}")
    env = {**os.environ, "ROCKET_CONTROLLER_SECRET": SECRET}
    try:
        with open(root / "namesrv.log", "wb") as log:
            ns = subprocess.Popen(rocket_command(
                "nameserver", "--host", "127.0.0.1", "--port", str(ns_port), "--http-port", "0",
                "--enable-controller-in-namesrv", "--controller-peers", f"127.0.0.1:{ns_port}/{ns_port + 2}",
                "--controller-data-dir", str(root / "controller")), stdout=log, stderr=subprocess.STDOUT, env=env)
        s.procs.append(ns)
        wait_port(ns_port, timeout=30, proc=ns, log_path=root / "namesrv.log")
        for i, port in enumerate((base + 10, base + 20)):
            conf = root / f"broker{i}.conf"
            conf.write_text("".join(f"{k}={v}\n" for k, v in {
                "brokerClusterName": CLUSTER, "brokerName": GROUP, "listenPort": port, "haListenPort": port + 1,
                "brokerIP1": "127.0.0.1", "namesrvAddr": s.namesrv, "storePathRootDir": root / f"store{i}",
                "enableControllerMode": "true", "controllerAddr": s.namesrv,
                "mappedFileSizeCommitLog": 64 * 1024 * 1024, "mappedFileSizeConsumeQueue": 300_000,
            }.items()))
            home = root / f"home{i}"
            home.mkdir()
            with open(root / f"broker{i}.log", "wb") as log:
                proc = subprocess.Popen(
                    [java.java(), *BROKER_JVM, java.QUIET_LOGBACK, f"-Duser.home={home}", f"-Drocketmq.home.dir={home}",
                     "-cp", java.classpath(lib), "org.apache.rocketmq.broker.BrokerStartup", "-c", str(conf)],
                    stdout=log, stderr=subprocess.STDOUT)
            s.procs.append(proc)
            s.brokers[f"127.0.0.1:{port}"] = proc
        # ready: a master, and the slave caught up and added to the SyncStateSet by the master
        wait_for("two Apache brokers in the SyncStateSet", lambda: len(sync_state(s.namesrv).get("inSyncReplicas", []))
                 == 2, 180, s)
        yield s
    finally:
        for proc in reversed(s.procs):
            terminate(proc, grace=10.0)


def test_get_controller_metadata(setup: Setup) -> None:
    out = fields(setup.mqadmin("getControllerMetaData", "-a", setup.namesrv))
    assert out["ControllerGroup"] == "RocketController"
    assert out["ControllerLeaderId"] == "n0" and out["ControllerLeaderAddress"] == setup.namesrv
    assert out["Peer"] == f"n0:{setup.namesrv}"


def test_get_sync_state_set_shows_the_apache_brokers_registered_and_in_sync(setup: Setup) -> None:
    out = setup.mqadmin("getSyncStateSet", "-a", setup.namesrv, "-b", GROUP)
    head = fields(out)
    assert head["brokerName"] == GROUP and head["MasterEpoch"] == "1" and head["SyncStateSetNums"] == "2"
    rows = replicas(out)
    assert [(kind, bid, alive) for kind, bid, _, alive in rows] == [("InSyncReplica", 1, True),
                                                                    ("InSyncReplica", 2, True)]
    assert {addr for _, _, addr, _ in rows} == set(setup.brokers)
    master_addr = head["MasterAddr"]
    assert head["MasterBrokerId"] == str(next(bid for _, bid, addr, _ in rows if addr == master_addr))
    # the Apache master registered itself with the NameServer as brokerId 0
    assert masters_in_cluster_list(setup.mqadmin("clusterList", "-n", setup.namesrv)) == {master_addr}


def test_get_broker_epoch_shows_the_epoch_our_controller_gave(setup: Setup) -> None:
    out = setup.mqadmin("getBrokerEpoch", "-n", setup.namesrv, "-b", GROUP)
    assert sorted(re.findall(r"#brokerAddr\t(\S+)", out)) == sorted(setup.brokers)
    assert re.findall(r"#Epoch: EpochEntry\{epoch=(\d+)", out) == ["1", "1"]


def test_get_and_update_controller_config(setup: Setup) -> None:
    setup.mqadmin("updateControllerConfig", "-a", setup.namesrv, "-k", "scanInactiveMasterInterval", "-v", "3000")
    out = setup.mqadmin("getControllerConfig", "-a", setup.namesrv)
    assert re.search(r"^scanInactiveMasterInterval\s+=\s+3000$", out, re.M), out
    assert re.search(r"^enableElectUncleanMaster\s+=\s+false$", out, re.M), out
    assert SECRET not in out


def test_elect_master_makes_the_apache_slave_switch_to_master(setup: Setup) -> None:
    state = sync_state(setup.namesrv)
    slave = next(r for r in state["inSyncReplicas"] if r["brokerId"] != state["masterBrokerId"])
    out = fields(setup.mqadmin("electMaster", "-a", setup.namesrv, "-c", CLUSTER, "-bn", GROUP,
                               "-b", str(slave["brokerId"])))
    assert out["BrokerMasterAddr"] == slave["brokerAddress"] and out["MasterEpoch"] == "2"
    # the Apache broker acted on NOTIFY_BROKER_ROLE_CHANGED: it registers as brokerId 0 now
    wait_for("the elected Apache broker registered as master",
             lambda: routed_master(setup.namesrv) == slave["brokerAddress"], 60, setup)
    assert masters_in_cluster_list(setup.mqadmin("clusterList", "-n", setup.namesrv)) == {slave["brokerAddress"]}


def test_kill_9_of_the_apache_master_fails_over_to_the_in_sync_slave(setup: Setup) -> None:
    state = wait_for("the slave back in the SyncStateSet",
                     lambda: (lambda st: st if len(st.get("inSyncReplicas", [])) == 2 else None)(
                         sync_state(setup.namesrv)), 60, setup)
    master_addr = state["masterAddress"]
    survivor = next(r for r in state["inSyncReplicas"] if r["brokerAddress"] != master_addr)
    proc = setup.brokers[master_addr]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed = time.monotonic()
    wait_for("a new master", lambda: sync_state(setup.namesrv).get("masterBrokerId") == survivor["brokerId"],
             30, setup)
    took = time.monotonic() - killed
    assert took < 5, f"the controller took {took:.1f} s to elect after the master's connection closed"
    out = setup.mqadmin("getSyncStateSet", "-a", setup.namesrv, "-b", GROUP)
    head = fields(out)
    assert head["MasterAddr"] == survivor["brokerAddress"] and head["MasterEpoch"] == "3"
    assert ("NotInSyncReplica", state["masterBrokerId"], master_addr, False) in replicas(out)
    wait_for("the surviving Apache broker registered as master",
             lambda: routed_master(setup.namesrv) == survivor["brokerAddress"], 60, setup)
    assert masters_in_cluster_list(setup.mqadmin("clusterList", "-n", setup.namesrv)) == {survivor["brokerAddress"]}
