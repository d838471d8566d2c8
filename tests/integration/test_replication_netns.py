"""A network partition between a SYNC_MASTER and its slave, with real network namespaces.

The test creates two namespaces joined by a veth pair (addresses in
10.213.77.0/24 exist only inside them): the NameServer and the master run in
one, the slave in the other (``ip netns exec``). It cuts the link
(``ip link set down`` on both ends): SYNC_MASTER sends must fail fast with
FLUSH_SLAVE_TIMEOUT (12, within ``slaveTimeout``) and, once the master has
dropped the silent connection (``haHousekeepingInterval``), with
SLAVE_NOT_AVAILABLE (11) at once — never SEND_OK for data the slave lacks.
It heals the link: the slave reconnects and catches up to the master's
end, and sends succeed again. Namespaces are removed at the end.

Needs root and ``ip`` (iproute2); the test fails, saying why, when
namespaces cannot be created here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT, terminate, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

SUBNET = "10.213.77"
M_IP, S_IP = f"{SUBNET}.1", f"{SUBNET}.2"
NS_PORT, M_PORT, S_PORT = 19876, 20911, 20921
M_HTTP, S_HTTP = 20915, 20925
HA = {
    "haSendHeartbeatInterval": "1000",
    "haHousekeepingInterval": "4000",
    "slaveTimeout": "1500",
    "slaveSyncInterval": "1000",
    "registerNameServerPeriod": "2000",
    "maxHashSlotNum": "50000",
    "maxIndexNum": "200000",
}


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


class Namespaces:
    """Two namespaces joined by one veth pair; :meth:`cut` / :meth:`heal` the link."""

    def __init__(self, m_ip: str = M_IP, s_ip: str = S_IP, prefix: str = "rk") -> None:
        tag = f"{os.getpid() % 100000}"
        self.m, self.s = f"{prefix}t_m{tag}", f"{prefix}t_s{tag}"
        self.vm, self.vs = f"{prefix}m{tag}", f"{prefix}s{tag}"
        self.m_ip, self.s_ip = m_ip, s_ip

    def create(self) -> None:
        if shutil.which("ip") is None:
            pytest.fail("network namespace test: the 'ip' command (iproute2) is not installed")
        try:
            _ip("netns", "add", self.m)
        except subprocess.CalledProcessError as exc:
            pytest.fail(f"network namespace test: 'ip netns add' does not work here (needs root and "
                        f"CAP_SYS_ADMIN): {exc.stderr.strip()}")
        _ip("netns", "add", self.s)
        _ip("link", "add", self.vm, "type", "veth", "peer", "name", self.vs)
        _ip("link", "set", self.vm, "netns", self.m)
        _ip("link", "set", self.vs, "netns", self.s)
        for ns, dev, ip in ((self.m, self.vm, self.m_ip), (self.s, self.vs, self.s_ip)):
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def cut(self) -> None:
        _ip("-n", self.m, "link", "set", self.vm, "down")
        _ip("-n", self.s, "link", "set", self.vs, "down")

    def heal(self) -> None:
        _ip("-n", self.m, "link", "set", self.vm, "up")
        _ip("-n", self.s, "link", "set", self.vs, "up")

    def delete(self) -> None:
        for ns in (self.m, self.s):
            _ip("netns", "del", ns, check=False)
        _ip("link", "del", self.vm, check=False)  # gone with its namespace; belt and braces


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "services"), str(ROOT)])
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Driver:
    """``tests.integration.netns_driver`` running inside a namespace."""

    def __init__(self, ns: str) -> None:
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "tests.integration.netns_driver"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            cwd=ROOT, env=_env())

    def call(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"driver exited with {self.proc.poll()}")
        return dict(json.loads(line))

    def http(self, url: str, method: str = "GET", body: Any = None) -> dict[str, Any]:
        return self.call(op="http", url=url, method=method, body=body)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@contextlib.contextmanager
def _process(ns: str, argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "rocket.cli", *argv],
                                stdout=out, stderr=subprocess.STDOUT, env=_env(), cwd=ROOT)
        try:
            yield proc
        finally:
            terminate(proc)


def _broker_argv(tmp: Path, name: str, ip: str, port: int, http: int, role: str, broker_id: int) -> list[str]:
    conf = tmp / f"{name}.conf"
    settings = {"brokerRole": role, "brokerId": str(broker_id), "brokerIP1": ip,
                "mappedFileSizeCommitLog": str(8 * 1024 * 1024), **HA}
    conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return ["broker", "--config", str(conf), "--name", "ha-net", "--port", str(port), "--http-port", str(http),
            "--namesrv", f"{M_IP}:{NS_PORT}", "--store-dir", str(tmp / f"store-{name}"), "--log-level", "INFO"]


def test_partition_sync_master_fails_fast_then_slave_catches_up(tmp_path: Path) -> None:
    nets = Namespaces()
    nets.create()
    drivers: list[Driver] = []
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_process(nets.m, ["nameserver", "--host", "0.0.0.0", "--port", str(NS_PORT),
                                                  "--http-port", str(NS_PORT + 10)], tmp_path / "ns.log"))
            stack.enter_context(_process(nets.m, _broker_argv(tmp_path, "m", M_IP, M_PORT, M_HTTP, "SYNC_MASTER", 0),
                                         tmp_path / "master.log"))
            stack.enter_context(_process(nets.s, _broker_argv(tmp_path, "s", S_IP, S_PORT, S_HTTP, "SLAVE", 1),
                                         tmp_path / "slave.log"))
            dm, ds = Driver(nets.m), Driver(nets.s)
            drivers += [dm, ds]
            master_addr = f"{M_IP}:{M_PORT}"
            m_ha, s_ha = f"http://{M_IP}:{M_HTTP}/api/v1/ha", f"http://{S_IP}:{S_HTTP}/api/v1/ha"
            wait_for(lambda: dm.http(f"http://{M_IP}:{M_HTTP}/readyz")["status"] == 200, 30, interval=0.2,
                     what="the master to be ready")
            assert dm.call(op="create_topic", addr=master_addr, topic="NetT", queues=4)["code"] == 0

            def slave_in_sync() -> bool:
                st = dm.http(m_ha)
                return st["status"] == 200 and any(s["inSync"] for s in st["body"]["slaves"])

            wait_for(slave_in_sync, 30, interval=0.2, what="the slave to replicate")
            before = dm.call(op="send", addr=master_addr, topic="NetT", n=30)["results"]
            assert {c for c, _ in before} == {0}, before

            nets.cut()
            cut = dm.call(op="send", addr=master_addr, topic="NetT", n=8, timeout=10)["results"]
            # never acknowledged without the slave, and answered within slaveTimeout (+ slack)
            assert all(c in (11, 12) for c, _ in cut), cut
            assert all(t < 1.5 + 1.0 for _, t in cut), cut
            assert cut[0][0] == 12  # the connection still looks alive: the wait times out

            def connection_dropped() -> bool:
                return dm.http(m_ha)["body"]["slaves"] == []

            wait_for(connection_dropped, 15, interval=0.2, what="the master to drop the silent slave")
            fast = dm.call(op="send", addr=master_addr, topic="NetT", n=5)["results"]
            assert all(c == 11 and t < 0.5 for c, t in fast), fast  # SLAVE_NOT_AVAILABLE at once
            stored_end = dm.http(m_ha)["body"]["maxOffset"]

            nets.heal()

            def caught_up() -> bool:
                st = ds.http(s_ha)
                return (st["status"] == 200 and st["body"]["maxOffset"] >= stored_end
                        and st["body"]["master"]["state"] == "transferring")

            wait_for(caught_up, 40, interval=0.2, what="the slave to reconnect and catch up")
            wait_for(slave_in_sync, 15, interval=0.2, what="the slave to be in sync again")
            after = dm.call(op="send", addr=master_addr, topic="NetT", n=20)["results"]
            assert {c for c, _ in after} == {0}, after
            m_end = dm.http(m_ha)["body"]["maxOffset"]
            wait_for(lambda: ds.http(s_ha)["body"]["maxOffset"] == m_end, 15, interval=0.2,
                     what="the slave to reach the master's end")
            metrics = dm.http(f"http://{M_IP}:{M_HTTP}/metrics")["body"]
            assert f'rocketmq_broker_ha_slave_lag_bytes{{slave="{S_IP}:{S_PORT}"}} 0.0' in metrics
            assert 'rocketmq_broker_ha_sync_results_total{result="timeout"}' in metrics
            slave_metrics = ds.http(f"http://{S_IP}:{S_HTTP}/metrics")["body"]
            assert 'rocketmq_broker_ha_connection_state{state="transferring"} 1.0' in slave_metrics
    finally:
        for d in drivers:
            d.close()
        nets.delete()
    assert not [n for n in _ip("netns", "list").stdout.split() if n in (nets.m, nets.s)]
