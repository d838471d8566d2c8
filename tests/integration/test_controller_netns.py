"""A network partition of a controller-mode master, with real network namespaces.

Two namespaces joined by a veth pair (addresses in 10.213.78.0/24 exist only inside them): the
master alone in one; the NameServer, the 3 controllers and the 2 slaves in the other. Cutting the
link must (1) make the master fence itself — it refuses sends with code 14 "fenced" within its
lease (``controllerHeartBeatTimeoutMills / 2``) plus a poll period, and it acknowledges nothing
after the cut (``allAckInSyncStateSet``: the slaves are out of reach); (2) let the majority side
elect one of the slaves, which takes sends. Healing the link makes the old master a slave of the
new one, with the new master's epochs and CommitLog end. Namespaces are removed at the end.

Needs root and ``ip`` (iproute2); fails, saying why, when namespaces cannot be created here.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.controller_support import SECRET
from tests.integration.test_replication_netns import Driver, Namespaces, _ip
from tests.support import ROOT, terminate, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SUBNET = "10.213.78"
M_IP, S_IP = f"{SUBNET}.1", f"{SUBNET}.2"
NS_PORT = 19976
CTL_PORTS = (19978, 19988, 19998)
M_PORT, S1_PORT, S2_PORT = 21911, 21921, 21931
HB_TIMEOUT_MS = 4000


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "services"), str(ROOT)])
    env["PYTHONUNBUFFERED"] = "1"
    env["ROCKET_CONTROLLER_SECRET"] = SECRET
    return env


@contextlib.contextmanager
def _process(ns: str, argv: list[str], log: Path) -> Iterator[None]:
    import subprocess
    import sys

    with open(log, "wb") as out:
        proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "rocket.cli", *argv],
                                stdout=out, stderr=subprocess.STDOUT, env=_env(), cwd=ROOT)
        try:
            yield
        finally:
            terminate(proc)


def _broker(tmp: Path, name: str, ip: str, port: int) -> list[str]:
    conf = tmp / f"{name}.conf"
    settings = {
        "brokerIP1": ip, "mappedFileSizeCommitLog": str(8 * 1024 * 1024), "maxHashSlotNum": "50000",
        "maxIndexNum": "200000", "registerNameServerPeriod": "2000", "haSendHeartbeatInterval": "1000",
        "haHousekeepingInterval": "4000", "slaveTimeout": "1500", "enableControllerMode": "true",
        "controllerAddr": ";".join(f"{S_IP}:{p}" for p in CTL_PORTS), "allAckInSyncStateSet": "true",
        "controllerHeartBeatTimeoutMills": str(HB_TIMEOUT_MS), "brokerHeartbeatInterval": "500",
        "syncBrokerMetadataPeriod": "1000", "haMaxTimeSlaveNotCatchup": "3000", "flushDiskType": "SYNC_FLUSH",
    }
    conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return ["broker", "--config", str(conf), "--name", "cm-net", "--port", str(port), "--http-port", str(port + 4),
            "--namesrv", f"{S_IP}:{NS_PORT}", "--store-dir", str(tmp / f"store-{name}"), "--log-level", "INFO"]


def test_partitioned_master_fences_itself_majority_elects_old_master_rejoins(tmp_path: Path) -> None:
    nets = Namespaces(M_IP, S_IP, prefix="rc")
    nets.create()
    drivers: list[Driver] = []
    peers = ",".join(f"{S_IP}:{p}/{p + 2}" for p in CTL_PORTS)
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_process(nets.s, ["nameserver", "--host", "0.0.0.0", "--port", str(NS_PORT)],
                                         tmp_path / "ns.log"))
            for i, p in enumerate(CTL_PORTS):
                stack.enter_context(_process(nets.s, [
                    "controller", "--controller-peers", peers, "--port", str(p), "--host", "0.0.0.0",
                    "--data-dir", str(tmp_path / f"c{i}"), "--heartbeat-timeout-ms", str(HB_TIMEOUT_MS)],
                    tmp_path / f"c{i}.log"))
            dm, ds = Driver(nets.m), Driver(nets.s)
            drivers += [dm, ds]
            m_ha = f"http://{M_IP}:{M_PORT + 4}/api/v1/ha"
            s_ha = {p: f"http://{S_IP}:{p + 4}/api/v1/ha" for p in (S1_PORT, S2_PORT)}
            # the master's broker starts first and is elected; the slaves join its SyncStateSet
            stack.enter_context(_process(nets.m, _broker(tmp_path, "m", M_IP, M_PORT), tmp_path / "m.log"))

            def master_role() -> str | None:
                st = dm.http(m_ha)
                return st["body"]["brokerRole"] if st["status"] == 200 else None

            wait_for(lambda: master_role() not in (None, "SLAVE"), 60, interval=0.2, what="the first broker elected")
            stack.enter_context(_process(nets.s, _broker(tmp_path, "s1", S_IP, S1_PORT), tmp_path / "s1.log"))
            stack.enter_context(_process(nets.s, _broker(tmp_path, "s2", S_IP, S2_PORT), tmp_path / "s2.log"))
            wait_for(lambda: len(dm.http(m_ha)["body"]["controllerMode"]["syncStateSet"]) == 3, 60, interval=0.2,
                     what="both slaves in the SyncStateSet")
            master_addr = f"{M_IP}:{M_PORT}"
            assert dm.call(op="create_topic", addr=master_addr, topic="NetC", queues=4)["code"] == 0
            before = dm.call(op="send", addr=master_addr, topic="NetC", n=20)["results"]
            assert {c for c, _ in before} == {0}, before

            nets.cut()
            cut_at = time.monotonic()
            fenced_after = None
            codes: list[int] = []
            while time.monotonic() - cut_at < 12:
                res = dm.call(op="send", addr=master_addr, topic="NetC", n=1, timeout=3)["results"]
                codes.append(res[0][0])
                if res[0][0] == 14:
                    fenced_after = time.monotonic() - cut_at
                    break
            bound = HB_TIMEOUT_MS / 2000 + 1.0 + 1.5  # lease + poll period + a send's slaveTimeout
            assert 0 not in codes, codes  # nothing acknowledged without the slaves
            assert fenced_after is not None and fenced_after <= bound, (fenced_after, codes)
            status = dm.http(m_ha)["body"]
            assert status["controllerMode"]["fenced"], status["controllerMode"]

            def elected() -> int | None:
                for p, url in s_ha.items():
                    st = ds.http(url)
                    if st["status"] == 200 and st["body"]["brokerRole"] != "SLAVE":
                        return p
                return None

            wait_for(elected, 30, interval=0.2, what="the majority side to elect a slave")
            new_port = elected()
            assert new_port is not None
            new_addr = f"{S_IP}:{new_port}"
            assert ds.call(op="send", addr=new_addr, topic="NetC", n=5)["results"][0][0] == 0
            print(f"partitioned master refused sends as fenced {fenced_after:.2f} s after the cut (bound {bound} s)")

            nets.heal()
            wait_for(lambda: master_role() == "SLAVE", 40, interval=0.2, what="the old master to become a slave")
            new_status = ds.http(s_ha[new_port])["body"]

            def converged() -> bool:
                st = dm.http(m_ha)["body"]
                return st["epochs"] == new_status["epochs"] and st["maxOffset"] >= new_status["maxOffset"]

            wait_for(converged, 30, interval=0.2, what="the old master to take the new master's epochs and end")
    finally:
        for d in drivers:
            d.close()
        nets.delete()
    assert not [n for n in _ip("netns", "list").stdout.split() if n in (nets.m, nets.s)]
