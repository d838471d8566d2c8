"""Network partitions of a controller-mode master, with real network namespaces and the checker.

Three namespaces, each with one address of 10.213.79.0/24 on its loopback device and a veth pair
to each of the others (a host route per peer): **M** holds the master's broker; **S** the
NameServer, the two slaves and the checker's producer (our client, routes from the NameServer);
**C** the 3 controllers. A partition replaces a peer's route with a blackhole on both sides
(packets vanish, as in a real partition; connections are not reset), healing restores it. The
group runs ``allAckInSyncStateSet`` and SYNC_FLUSH with ``controllerHeartBeatTimeoutMills=4000``.
Every run starts with the broker in M as master (a manual failover, ELECT_MASTER through the
controllers, puts it back) and all 3 in the SyncStateSet.

* **Master cut from the controllers and the slaves** (links M-C and M-S): the master acknowledges
  nothing sent after the cut — a driver inside M sends to it directly and must never get SEND_OK;
  once its lease ran out and its replication connections dropped it refuses sends at once
  (code 14); the majority side elects a slave; on heal the old master becomes a slave of the new
  one, truncating what it stored after the cut (its copy of the topic equals the new master's).
* **Master cut from the controllers only** (link M-C; its slaves, the NameServer and the clients
  still reach it): the master keeps acknowledging until a slave is elected, and nothing after:
  the checker records which broker acknowledged each id and when, and no id may be acknowledged
  by the old master after the first one acknowledged by the new master (no two masters
  acknowledge). On heal it becomes a slave.

After each run every acknowledged id must be on the new master (0 lost); duplicates are counted.
``make chaos`` runs each partition ``CHAOS_RUNS / 4`` times; ``make test`` once. Needs root and
``ip`` (iproute2); fails, saying why, when namespaces cannot be created. Namespaces are removed at
the end.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.chaos_report import RUNS, report, spread
from tests.integration.controller_support import SECRET
from tests.integration.failover_support import CONTROLLER_MODE
from tests.integration.test_replication_netns import Driver, _ip
from tests.support import ROOT, reserve_ports, terminate, wait_for

SOME = max(1, RUNS // 4)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240 + 150 * SOME)]

SUBNET = "10.213.79"
IPS = {"m": f"{SUBNET}.1", "s": f"{SUBNET}.2", "c": f"{SUBNET}.3"}
HB_TIMEOUT_MS = int(CONTROLLER_MODE["controllerHeartBeatTimeoutMills"])
GROUP = "cm-part"


class Triangle:
    """Namespaces m, s and c, each pair joined by a veth pair; :meth:`cut` / :meth:`heal` one pair."""

    def __init__(self, prefix: str = "rp") -> None:
        tag = f"{os.getpid() % 100000}"
        self.ns = {k: f"{prefix}t_{k}{tag}" for k in IPS}
        self.dev = {(a, b): f"{prefix}{a}{b}{tag}" for a in IPS for b in IPS if a != b}

    def create(self) -> None:
        import shutil

        if shutil.which("ip") is None:
            pytest.fail("network partition test: the 'ip' command (iproute2) is not installed")
        try:
            _ip("netns", "add", self.ns["m"])
        except subprocess.CalledProcessError as exc:
            pytest.fail(f"network partition test: 'ip netns add' does not work here (needs root and "
                        f"CAP_SYS_ADMIN): {exc.stderr.strip()}")
        for k in ("s", "c"):
            _ip("netns", "add", self.ns[k])
        for k, ip in IPS.items():
            _ip("-n", self.ns[k], "link", "set", "lo", "up")
            _ip("-n", self.ns[k], "addr", "add", f"{ip}/32", "dev", "lo")
        for a, b in (("m", "s"), ("m", "c"), ("s", "c")):
            _ip("link", "add", self.dev[a, b], "type", "veth", "peer", "name", self.dev[b, a])
            for x, y in ((a, b), (b, a)):
                _ip("link", "set", self.dev[x, y], "netns", self.ns[x])
                _ip("-n", self.ns[x], "link", "set", self.dev[x, y], "up")
                self._route(x, y)

    def _route(self, a: str, b: str) -> None:
        _ip("-n", self.ns[a], "route", "replace", f"{IPS[b]}/32", "dev", self.dev[a, b], "src", IPS[a])

    def cut(self, a: str, b: str) -> None:
        """Packets between ``a`` and ``b`` vanish (both directions)."""
        for x, y in ((a, b), (b, a)):
            _ip("-n", self.ns[x], "route", "replace", "blackhole", f"{IPS[y]}/32")

    def heal(self, a: str, b: str) -> None:
        for x, y in ((a, b), (b, a)):
            self._route(x, y)

    def delete(self) -> None:
        for name in self.ns.values():
            _ip("netns", "del", name, check=False)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "services"), str(ROOT)])
    env["PYTHONUNBUFFERED"] = "1"
    env["ROCKET_CONTROLLER_SECRET"] = SECRET
    return env


def _cli(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, sys.executable, "-m", "rocket.cli", *argv]


@contextlib.contextmanager
def _process(ns: str, argv: list[str], log: Path) -> Iterator[None]:
    with open(log, "ab") as out:
        proc = subprocess.Popen(_cli(ns, *argv), stdout=out, stderr=subprocess.STDOUT, env=_env(), cwd=ROOT)
        try:
            yield
        finally:
            terminate(proc)


class Cluster:
    """The processes and drivers of the partition tests (see the module doc)."""

    def __init__(self, tmp: Path, net: Triangle, stack: contextlib.ExitStack) -> None:
        self.tmp, self.net, self.stack = tmp, net, stack
        base = reserve_ports([0, 10, 20, 30, 32, 34, 40, 42, 44, 50, 52, 54, 60, 64, 70, 74, 80, 84])
        self.ns_port = base
        self.ctl_ports = [base + 30, base + 40, base + 50]
        self.brokers = {"m": base + 60, "s1": base + 70, "s2": base + 80}
        self.namesrv = f"{IPS['s']}:{self.ns_port}"
        self.dm, self.ds = Driver(net.ns["m"]), Driver(net.ns["s"])
        stack.callback(self.dm.close)
        stack.callback(self.ds.close)

    def addr(self, b: str) -> str:
        return f"{IPS['m' if b == 'm' else 's']}:{self.brokers[b]}"

    def driver(self, b: str) -> Driver:
        return self.dm if b == "m" else self.ds

    def start(self) -> None:
        s, c = self.net.ns["s"], self.net.ns["c"]
        self.stack.enter_context(_process(s, ["nameserver", "--host", "0.0.0.0", "--port", str(self.ns_port)],
                                          self.tmp / "ns.log"))
        peers = ",".join(f"{IPS['c']}:{p}/{p + 2}" for p in self.ctl_ports)
        for i, p in enumerate(self.ctl_ports):
            self.stack.enter_context(_process(c, [
                "controller", "--controller-peers", peers, "--port", str(p), "--host", "0.0.0.0",
                "--data-dir", str(self.tmp / f"c{i}"), "--heartbeat-timeout-ms", str(HB_TIMEOUT_MS)],
                self.tmp / f"c{i}.log"))
        # the broker in M starts first and is elected; the slaves join its SyncStateSet
        self._broker("m")
        wait_for(lambda: self.role("m") not in (None, "SLAVE"), 60, interval=0.2, what="the broker in M elected")
        self._broker("s1")
        self._broker("s2")

    def _broker(self, b: str) -> None:
        ns = self.net.ns["m" if b == "m" else "s"]
        port = self.brokers[b]
        settings = {
            **CONTROLLER_MODE, "brokerIP1": IPS["m" if b == "m" else "s"],
            "controllerAddr": ";".join(f"{IPS['c']}:{p}" for p in self.ctl_ports),
            "mappedFileSizeCommitLog": str(8 * 1024 * 1024), "registerNameServerPeriod": "2000",
        }
        conf = self.tmp / f"{b}.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self.stack.enter_context(_process(ns, [
            "broker", "--config", str(conf), "--name", GROUP, "--port", str(port), "--http-port", str(port + 4),
            "--namesrv", self.namesrv, "--store-dir", str(self.tmp / f"store-{b}"), "--log-level", "INFO"],
            self.tmp / f"{b}.log"))

    def status(self, b: str) -> dict[str, Any] | None:
        ip = IPS["m" if b == "m" else "s"]
        st = self.driver(b).http(f"http://{ip}:{self.brokers[b] + 4}/api/v1/ha")
        return st["body"] if st["status"] == 200 and isinstance(st["body"], dict) else None

    def role(self, b: str) -> str | None:
        st = self.status(b)
        return None if st is None else str(st["brokerRole"])

    def master(self, among: tuple[str, ...] = ("m", "s1", "s2"), full_set: int = 0) -> str | None:
        for b in among:
            st = self.status(b)
            cm = (st or {}).get("controllerMode") or {}
            if (st is not None and st["brokerRole"] != "SLAVE" and not cm.get("fenced")
                    and len(cm.get("syncStateSet") or []) >= full_set):
                return b
        return None

    def whole_with_m_master(self, topic: str) -> None:
        """Make the broker in M master again (manual failover through the controllers) with all 3 in
        its SyncStateSet, and create ``topic`` there."""
        wait_for(lambda: self.master(full_set=3) is not None, 90, interval=0.3, what="a master with all 3 in sync")
        if self.master() != "m":
            st = self.status("m")
            assert st is not None
            mid = str(st["controllerMode"]["controllerBrokerId"])
            # The tool finds the group's brokers through the NameServer. A fenced old master that
            # has just rejoined registers its new role after the registration round it started
            # during the partition times out (registerBrokerTimeoutMills, 6 s; Apache's
            # registerBrokerAll is synchronized too): until then "no answering slave", and again.
            deadline = time.monotonic() + 30
            while True:
                done = subprocess.run(_cli(self.net.ns["s"], "cluster", "failover", "-b", GROUP, "--broker-id",
                                           mid, "-n", self.namesrv), capture_output=True, text=True, timeout=90,
                                      env=_env(), cwd=ROOT)
                out = done.stdout + done.stderr
                if done.returncode == 0 or "no answering slave" not in out or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert done.returncode == 0, out
            wait_for(lambda: self.master(full_set=3) == "m", 90, interval=0.3,
                     what="the broker in M master with all 3 in sync")
        assert self.ds.call(op="create_topic", addr=self.addr("m"), topic=topic, queues=4)["code"] == 0

    def check(self, new: str, topic: str, acked: list[list[Any]]) -> tuple[int, int]:
        """(lost, duplicates) of the acknowledged ids against the messages on ``new``."""
        bodies = self.driver(new).call(op="bodies", addr=self.addr(new), topic=topic, queues=4)["bodies"]
        lost = [b for b, _, _ in acked if b not in bodies]
        assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {sorted(lost)[:5]}"
        return 0, sum(n - 1 for n in bodies.values() if n > 1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("partition")
    net = Triangle()
    net.create()
    try:
        with contextlib.ExitStack() as stack:
            c = Cluster(tmp, net, stack)
            c.start()
            yield c
    finally:
        net.delete()
    assert not [n for n in _ip("netns", "list").stdout.split() if n in net.ns.values()]


def _wait_elected(c: Cluster, timeout: float = 40) -> str:
    try:
        wait_for(lambda: c.master(among=("s1", "s2")) is not None, timeout, interval=0.1,
                 what="the majority side to elect a slave")
    except AssertionError as exc:
        states = {b: (c.status(b) or {}).get("controllerMode") for b in ("s1", "s2")}
        logs = "\n".join((c.tmp / f"{n}.log").read_text(errors="replace")[-3000:] for n in ("c0", "m", "s1", "s2"))
        raise AssertionError(f"{exc}; slaves: {states}; logs:\n{logs}") from None
    new = c.master(among=("s1", "s2"))
    assert new is not None
    return new


def _rejoined(c: Cluster, new: str) -> None:
    """The old master is a slave of ``new`` with its epochs and, while the load still runs, has
    caught up with where ``new``'s CommitLog ended a moment before (:func:`_converged` checks the
    ends are equal once the load stopped)."""
    wait_for(lambda: c.role("m") == "SLAVE", 60, interval=0.2, what="the old master to become a slave")
    seen: list[Any] = []

    def caught_up() -> bool:
        nst = c.status(new)  # the new master's end first: the old master must reach it after
        st = c.status("m")
        seen[:] = [(st or {}).get("epochs"), (st or {}).get("maxOffset"),
                   (nst or {}).get("epochs"), (nst or {}).get("maxOffset")]
        return (st is not None and nst is not None and st["epochs"] == nst["epochs"]
                and st["maxOffset"] >= nst["maxOffset"])

    try:
        wait_for(caught_up, 60, interval=0.2, what="the old master to take the new master's epochs and catch up")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; old master epochs, end / new master epochs, end: {seen}; old master's "
                             f"log:\n{(c.tmp / 'm.log').read_text(errors='replace')[-4000:]}") from None


def _converged(c: Cluster, new: str) -> None:
    """With no load, the old master's CommitLog ends where ``new``'s does."""
    def same_end() -> bool:
        st, nst = c.status("m"), c.status(new)
        return st is not None and nst is not None and st["maxOffset"] == nst["maxOffset"]

    wait_for(same_end, 30, interval=0.2, what="the old master to end where the new master ends once quiet")


def test_master_cut_from_controllers_and_slaves(cluster: Cluster) -> None:
    c = cluster
    refused_after: list[float] = []
    rtos: list[float] = []
    acked_total = dups_total = 0
    for run in range(SOME):
        topic = f"CutAll{run}"
        c.whole_with_m_master(topic)
        assert c.ds.call(op="load_start", namesrv=c.namesrv, topic=topic)["ok"]
        time.sleep(2.0)
        c.net.cut("m", "c")
        c.net.cut("m", "s")
        cut_at = time.monotonic()
        # a client inside M: nothing sent after the cut may be acknowledged
        codes: list[int] = []
        refused = None
        while time.monotonic() - cut_at < 15:
            res = c.dm.call(op="send", addr=c.addr("m"), topic=topic, n=1, timeout=4, body=f"cut{run}-")["results"]
            codes.append(res[0][0])
            if res[0][0] == 14 and res[0][1] < 0.5:
                refused = time.monotonic() - cut_at
                break
        st = c.status("m")
        assert st is not None and st["brokerRole"] != "SLAVE", st
        new = _wait_elected(c)
        assert 0 not in codes, f"the cut-off master acknowledged a send made after the cut: {codes}"
        assert refused is not None, f"the cut-off master never refused at once: {codes}"
        refused_after.append(refused)
        time.sleep(2.0)
        c.net.heal("m", "s")
        c.net.heal("m", "c")
        _rejoined(c, new)
        out = c.ds.call(op="load_stop")
        _converged(c, new)
        acked = out["acked"]
        port_m = c.brokers["m"]
        first_new = min((t for _, t, p in acked if p != port_m and t > cut_at), default=None)
        assert first_new is not None, f"the new master acknowledged nothing: {out['not_ok']}"
        rtos.append(first_new - cut_at)
        _, dups = c.check(new, topic, acked)
        # the old master cut what it stored after the cut: its copy is the new master's
        on_m = c.dm.call(op="bodies", addr=c.addr("m"), topic=topic, queues=4)["bodies"]
        on_new = c.ds.call(op="bodies", addr=c.addr(new), topic=topic, queues=4)["bodies"]
        stray = [b for b in on_m if b.startswith(f"cut{run}-") and b not in on_new]
        assert not stray, f"the old master kept {len(stray)} messages stored after the cut"
        print(f"cut-all run {run + 1}: refused at once {refused:.2f} s after the cut, {new} elected, first send "
              f"acknowledged by it {rtos[-1]:.2f} s after the cut, probes "
              f"{codes}, acked {len(acked)}, lost 0, duplicates {dups}, not ok {out['not_ok']}", flush=True)
        acked_total += len(acked)
        dups_total += dups
    report("partition of the master from the controllers and slaves (netns)", SOME, acked_total, 0, dups_total,
           acknowledged_after_cut="0", refused_at_once=spread(refused_after),
           rto=spread(rtos))


def test_master_cut_from_the_controllers_only(cluster: Cluster) -> None:
    c = cluster
    rtos: list[float] = []
    acked_total = dups_total = old_after = 0
    for run in range(SOME):
        topic = f"CutCtl{run}"
        c.whole_with_m_master(topic)
        assert c.ds.call(op="load_start", namesrv=c.namesrv, topic=topic)["ok"]
        time.sleep(2.0)
        c.net.cut("m", "c")
        cut_at = time.monotonic()
        new = _wait_elected(c)
        elected = time.monotonic() - cut_at
        time.sleep(4.0)  # the old master's registration is refused (newer epoch): it fences itself
        st = c.status("m")
        assert st is not None
        fenced = st["brokerRole"] == "SLAVE" or bool((st["controllerMode"] or {}).get("fenced"))
        c.net.heal("m", "c")
        _rejoined(c, new)
        out = c.ds.call(op="load_stop")
        _converged(c, new)
        acked = out["acked"]
        port_m = c.brokers["m"]
        by_new = sorted(t for _, t, p in acked if p != port_m)
        by_old = sorted(t for _, t, p in acked if p == port_m)
        assert by_new, f"the new master acknowledged nothing: {out['not_ok']}"
        overlap = [t for t in by_old if t >= by_new[0]]
        last_old = by_old[-1] - cut_at if by_old else float("nan")
        rtos.append(by_new[0] - cut_at)
        _, dups = c.check(new, topic, acked)
        print(f"cut-controllers run {run + 1}: {new} elected {elected:.2f} s after the cut; old master acknowledged "
              f"{len(by_old)} (last {last_old:.2f} s after the cut), new master {len(by_new)} (first "
              f"{rtos[-1]:.2f} s after the cut); acknowledged by the old after the new's first: {len(overlap)}; "
              f"old master fenced 4 s after the election: {fenced}; lost 0, duplicates {dups}, "
              f"not ok {out['not_ok']}", flush=True)
        assert not overlap, f"two masters acknowledged: {len(overlap)} by the old master after the new one's first"
        assert fenced, st
        acked_total += len(acked)
        dups_total += dups
        old_after += len(overlap)
    report("partition of the master from the controllers only (netns)", SOME, acked_total, 0, dups_total,
           acknowledged_by_both=str(old_after), rto=spread(rtos))
