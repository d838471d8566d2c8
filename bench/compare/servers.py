"""Start and stop the two systems under comparison on loopback: a NameServer and a broker group
(a master, and a slave when replication is measured), either Apache RocketMQ's (from the jars
:mod:`bench.compare.java` fetched) or ours (``python -m rocket.cli nameserver|broker``).

Both get the same settings: brokerName ``broker-a`` in ``DefaultCluster``, brokerIP1
127.0.0.1, the flush type and role under test, automatic topic creation on, a fresh
store under ``root``. Apache's broker runs with ``-Xms2g -Xmx2g`` and 512 MiB of direct
memory; its NameServer with 512 MiB of heap. Every process writes its output to
``root/logs/<name>.log``. A cluster is ready when its master (and slave) are registered with
the NameServer, as GET_BROKER_CLUSTER_INFO shows.

:func:`start_controller_group` starts the controller-mode layout instead (RocketMQ 5's RIP-44):
3 controllers (Apache's ``ControllerStartup``, DLedger, or ``rocket controller``), a NameServer
and a group of brokers with ``enableControllerMode=true`` that take their roles from the
controllers. It is ready when the controllers name a master, every broker is alive in the
SyncStateSet (CONTROLLER_GET_SYNC_STATE_DATA) and the NameServer routes the group to that master.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import secrets
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.compare import java

CLUSTER = "DefaultCluster"
BROKER_NAME = "broker-a"
APACHE_BROKER_JVM = ["-Xms2g", "-Xmx2g", "-XX:MaxDirectMemorySize=512m", "-XX:+UseG1GC",
                     "-XX:G1HeapRegionSize=16m", "-XX:G1ReservePercent=25",
                     "-XX:InitiatingHeapOccupancyPercent=30", "-XX:-OmitStackTraceInFastThrow"]
APACHE_NAMESRV_JVM = ["-Xms512m", "-Xmx512m", "-XX:+UseG1GC"]
#: Apache's controllers (ControllerStartup) and, in controller-mode groups, its brokers: 3 of each
#: run at once, so smaller heaps than the single broker of the throughput cells.
APACHE_CONTROLLER_JVM = ["-Xms256m", "-Xmx256m", "-XX:+UseG1GC"]
APACHE_GROUP_BROKER_JVM = ["-Xms1g", "-Xmx1g", "-XX:MaxDirectMemorySize=512m", "-XX:+UseG1GC",
                           "-XX:-OmitStackTraceInFastThrow"]
#: Controller-mode settings both systems get (brokers' ``controllerHeartBeatTimeoutMills``; the
#: controllers' ``scanNotActiveBrokerInterval``, ours' default and set explicitly for Apache's).
CONTROLLER_HEARTBEAT_TIMEOUT_MS = 4000
SCAN_NOT_ACTIVE_BROKER_MS = 1000
#: Java 17 keeps these closed; RocketMQ's store unmaps files through them.
JAVA_OPENS = ["--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED"]
#: The controller's Hessian serializer reflects into java.lang (else a stack trace per field at start).
HESSIAN_OPENS = ["--add-opens", "java.base/java.lang=ALL-UNNAMED"]
START_TIMEOUT = 180.0


class ClusterStartError(RuntimeError):
    """A process exited or did not become ready in time (the message has its log tail)."""


@dataclass
class Proc:
    """One server process."""

    name: str
    role: str  # "nameserver", "controller", "master", "slave", or "broker" (controller mode: role not fixed)
    argv: list[str]
    log: Path
    port: int
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env={**os.environ, **self.env}, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen else 0

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def cpu_seconds(self) -> float:
        """User + system CPU time so far (from /proc; 0 when unavailable)."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return 0.0

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class Cluster:
    """A running NameServer and broker group of one system."""

    system: str  # "ours" or "apache"
    root: Path
    namesrv: str
    procs: list[Proc]

    def brokers(self) -> list[Proc]:
        return [p for p in self.procs if p.role not in ("nameserver", "controller")]

    def controllers(self) -> list[str]:
        """The controllers' remoting addresses (empty outside controller mode)."""
        return [f"127.0.0.1:{p.port}" for p in self.procs if p.role == "controller"]

    def broker_at(self, addr: str) -> Proc:
        """The broker process listening on ``addr`` (``host:port``). Raises KeyError."""
        port = int(addr.rsplit(":", 1)[1])
        for p in self.brokers():
            if p.port == port:
                return p
        raise KeyError(addr)

    def group_state(self) -> dict[str, Any]:
        """The controller leader's view of ``broker-a`` (GET_SYNC_STATE_DATA's ``replicasInfoTable``
        entry: masterAddress, masterEpoch, inSyncReplicas [{brokerId, brokerAddress, alive}], ...);
        empty when no controller answers."""
        return sync_state(self.controllers())

    def wait_group(self, members: int, timeout: float = START_TIMEOUT) -> str:
        """Wait until the controllers name a master with ``members`` alive brokers in the
        SyncStateSet and the NameServer routes the group to it; the master's address.
        Raises :class:`ClusterStartError` (with the logs' tails) after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            self.check_alive()
            state = self.group_state()
            master = str(state.get("masterAddress") or "")
            alive = [r for r in state.get("inSyncReplicas") or [] if r.get("alive", True)]
            if master and len(alive) >= members and registered_brokers(self.namesrv).get("0") == master:
                return master
            time.sleep(0.5)
        tails = "\n".join(f"--- {p.name} ({p.log}):\n{p.tail(15)}" for p in self.procs if p.role != "nameserver")
        raise ClusterStartError(f"{self.system}: no master with {members} in sync after {timeout:.0f} s "
                                f"(last state {state})\n{tails}")

    def controller_cpu_seconds(self) -> float:
        """CPU seconds used so far by the controller processes (0 outside controller mode)."""
        return sum(p.cpu_seconds() for p in self.procs if p.role == "controller")

    def cpu_seconds(self) -> float:
        """CPU seconds used so far by every process of the cluster (NameServer, controllers, brokers)."""
        return sum(p.cpu_seconds() for p in self.procs)

    def broker_cpu_seconds(self) -> float:
        """CPU seconds used so far by the broker processes (master and slave)."""
        return sum(p.cpu_seconds() for p in self.brokers())

    def check_alive(self) -> None:
        for p in self.procs:
            if not p.alive():
                code = p.popen.returncode if p.popen else None
                raise ClusterStartError(f"{self.system} {p.name} exited ({code}); log {p.log}:\n{p.tail()}")

    def stop(self, timeout: float = 10.0, *, discard: bool = False) -> None:
        """SIGTERM every broker at once, then the NameServer and controllers at once; SIGKILL what
        outlives ``timeout`` s in each step. ``discard``: SIGKILL at once (the caller throws the
        stores away; Apache's broker otherwise spends ~10 s in its shutdown hook)."""
        for group in (self.brokers(), [p for p in self.procs if p.role in ("nameserver", "controller")]):
            running = [p.popen for p in group if p.popen is not None and p.popen.poll() is None]
            for proc in running:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGKILL if discard else signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for proc in running:
                try:
                    proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


# -- ports and readiness ----------------------------------------------------------------------


def _free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_block(span: int, taken: set[int]) -> int:
    """A port P with P..P+span-1 all free (and not in ``taken``); they are added to ``taken``.

    Below the kernel's ephemeral range, so that no outgoing connection takes one before the server binds it.
    """
    low = _ephemeral_low()
    top = low if low > 15000 else 60000
    for _ in range(500):
        base = random.randrange(10000, top - span)
        block = set(range(base, base + span))
        if not block & taken and all(_free(p) for p in block):
            taken |= block
            return base
    raise ClusterStartError("no free block of ports found")


def remoting_request(addr: str, code: int, timeout: float = 3.0, body: bytes = b"",
                     ext: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One remoting request (JSON header) on a fresh connection: (code, body)."""
    header = json.dumps({"code": code, "language": "JAVA", "version": 500, "opaque": 1, "flag": 0,
                         "extFields": ext or {}}).encode()
    frame = struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(frame)
        buf = b""
        while True:
            while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("closed")
                buf += chunk
            (length,) = struct.unpack_from(">i", buf)
            payload, buf = buf[4 : 4 + length], buf[4 + length :]
            hlen = struct.unpack_from(">I", payload)[0] & 0xFFFFFF
            reply = json.loads(payload[4 : 4 + hlen])
            if int(reply.get("flag", 0)) & 1:
                return int(reply["code"]), payload[4 + hlen :]


def registered_brokers(namesrv: str) -> dict[str, str]:
    """brokerId → address of ``broker-a`` as the NameServer lists it (empty when unreachable)."""
    try:
        code, body = remoting_request(namesrv, 106)  # GET_BROKER_CLUSTER_INFO
    except (OSError, ValueError):
        return {}
    if code != 0 or not body:
        return {}
    text = re.sub(r'([{,]\s*)(-?\d+)(\s*:)', r'\1"\2"\3', body.decode(errors="replace"))  # fastjson's bare keys
    try:
        table = json.loads(text).get("brokerAddrTable", {})
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in (table.get(BROKER_NAME, {}).get("brokerAddrs") or {}).items()}


def sync_state(controllers: list[str], group: str = BROKER_NAME) -> dict[str, Any]:
    """``group``'s entry of CONTROLLER_GET_SYNC_STATE_DATA (1006, body: a JSON list of broker
    names; RocketMQ's ``BrokerReplicasInfo``) from the first controller that answers it (only the
    Raft leader does); empty when none does."""
    for addr in controllers:
        try:
            code, body = remoting_request(addr, 1006, body=json.dumps([group]).encode())
        except (OSError, ValueError):
            continue
        if code != 0 or not body:
            continue
        try:
            table = json.loads(body).get("replicasInfoTable") or {}
        except ValueError:
            continue
        entry = table.get(group)
        if isinstance(entry, dict):
            return entry
    return {}


def topics_on(addr: str) -> set[str]:
    """The topic names a broker holds (GET_ALL_TOPIC_CONFIG, 21); empty when it does not answer."""
    try:
        code, body = remoting_request(addr, 21, timeout=10.0)
    except (OSError, ValueError):
        return set()
    if code != 0:
        return set()
    return set(re.findall(r'"topicName"\s*:\s*"([^"]+)"', body.decode(errors="replace")))


def _wait_tcp(proc: Proc, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise ClusterStartError(f"{proc.name} exited during start-up; log {proc.log}:\n{proc.tail()}")
        with socket.socket() as sock:
            sock.settimeout(0.5)
            if sock.connect_ex(("127.0.0.1", proc.port)) == 0:
                return
        time.sleep(0.2)
    raise ClusterStartError(f"{proc.name} not listening on {proc.port} after {timeout:.0f} s; log:\n{proc.tail()}")


def _wait_registered(cluster: Cluster, want: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        cluster.check_alive()
        if want <= set(registered_brokers(cluster.namesrv)):
            return
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.name} ({p.log}):\n{p.tail()}" for p in cluster.brokers())
            raise ClusterStartError(f"{cluster.system}: brokers {sorted(want)} not registered after {timeout:.0f} s\n"
                                    f"{tails}")
        time.sleep(0.5)


# -- the two systems --------------------------------------------------------------------------


def _broker_settings(root: Path, name: str, broker_id: int, port: int, namesrv: str, flush: str,
                     role: str) -> dict[str, str]:
    return {
        "brokerClusterName": CLUSTER,
        "brokerName": BROKER_NAME,
        "brokerId": str(broker_id),
        "listenPort": str(port),
        "haListenPort": str(port + 1),
        "brokerIP1": "127.0.0.1",
        "namesrvAddr": namesrv,
        "storePathRootDir": str(root / "store" / name),
        "flushDiskType": flush,
        "brokerRole": role,
        "autoCreateTopicEnable": "true",
    }


def start(system: str, root: Path, *, flush: str, role: str = "ASYNC_MASTER", slave: bool = False,
          lib: Path | None = None, ours_path: Path | None = None, extra: dict[str, str] | None = None) -> Cluster:
    """Start ``system`` ("ours" or "apache") under ``root`` and wait until it is registered.

    ``role`` is the master's brokerRole; ``slave`` adds a SLAVE (brokerId 1) of the same group.
    ``lib``: Apache's jars; ``ours_path``: a folder holding the ``rocket`` package to run instead
    of the installed one (e.g. an export of a commit); ``extra``: more broker settings (both systems'
    config files, e.g. ``timerPrecisionMs``). A start that fails because someone took
    a port meanwhile is retried twice on new ports. Raises :class:`ClusterStartError`
    (everything started is stopped again).
    """
    for attempt in range(3):
        try:
            return _start_once(system, root / f"try{attempt}" if attempt else root, flush=flush, role=role,
                               slave=slave, lib=lib, ours_path=ours_path, extra=extra or {})
        except ClusterStartError as exc:
            text = str(exc)
            if attempt == 2 or not ("Address already in use" in text or "address already in use" in text):
                raise
    raise AssertionError("unreachable")


def _start_once(system: str, root: Path, *, flush: str, role: str, slave: bool, lib: Path | None,
                ours_path: Path | None, extra: dict[str, str]) -> Cluster:
    root.mkdir(parents=True, exist_ok=True)
    taken: set[int] = set()
    ns_port = free_block(2, taken)
    namesrv = f"127.0.0.1:{ns_port}"
    logs = root / "logs"
    procs: list[Proc] = []
    members = [("master", 0, role)] + ([("slave", 1, "SLAVE")] if slave else [])
    if system == "apache":
        if lib is None:
            raise ValueError("the Apache jars folder is needed")
        cp = java.classpath(lib)
        jvm = java.java()

        def home(name: str) -> list[str]:  # logs go to <home>/logs/rocketmqlogs
            h = root / "home" / name
            h.mkdir(parents=True, exist_ok=True)
            return [f"-Duser.home={h}", f"-Drocketmq.home.dir={h}"]

        (root / "namesrv.conf").write_text(f"listenPort={ns_port}\n")
        procs.append(Proc("namesrv", "nameserver",
                          [jvm, *APACHE_NAMESRV_JVM, java.QUIET_LOGBACK, *home("namesrv"), "-cp", cp,
                           "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(root / "namesrv.conf")],
                          logs / "namesrv.log", ns_port))
        for kind, broker_id, broker_role in members:
            port = free_block(4, taken) + 2  # port-2 (VIP), port, port+1 (HA)
            name = f"broker-{kind}"
            settings = {**_broker_settings(root, name, broker_id, port, namesrv, flush, broker_role), **extra}
            conf = root / f"{name}.conf"
            conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
            procs.append(Proc(name, kind,
                              [jvm, *APACHE_BROKER_JVM, *JAVA_OPENS, java.QUIET_LOGBACK, *home(name), "-cp", cp,
                               "org.apache.rocketmq.broker.BrokerStartup", "-c", str(conf)],
                              logs / f"{name}.log", port))
    elif system == "ours":
        exe = [sys.executable, "-m", "rocket.cli"]
        env = {"PYTHONUNBUFFERED": "1"}
        if ours_path is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ours_path), os.environ.get("PYTHONPATH", "")]))
        http = free_block(1, taken)
        procs.append(Proc("namesrv", "nameserver",
                          [*exe, "nameserver", "--host", "127.0.0.1", "--port", str(ns_port),
                           "--http-port", str(http)], logs / "namesrv.log", ns_port, env))
        for kind, broker_id, broker_role in members:
            port = free_block(4, taken) + 2
            name = f"broker-{kind}"
            settings = {**_broker_settings(root, name, broker_id, port, namesrv, flush, broker_role), **extra}
            conf = root / f"{name}.properties"
            conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
            procs.append(Proc(name, kind,
                              [*exe, "broker", "--config", str(conf), "--http-port", str(free_block(1, taken))],
                              logs / f"{name}.log", port, env))
    else:
        raise ValueError(f"unknown system {system!r}")
    cluster = Cluster(system, root, namesrv, procs)
    try:
        procs[0].start()
        _wait_tcp(procs[0], START_TIMEOUT)
        for p in procs[1:]:
            p.start()
        want = {"0"} | ({"1"} if slave else set())
        _wait_registered(cluster, want, START_TIMEOUT)
    except BaseException:
        cluster.stop()
        raise
    return cluster


# -- controller mode --------------------------------------------------------------------------


def _apache_home(root: Path, name: str) -> list[str]:
    """``-Duser.home``/``-Drocketmq.home.dir`` of one Apache process (its logs go to <home>/logs)."""
    h = root / "home" / name
    h.mkdir(parents=True, exist_ok=True)
    return [f"-Duser.home={h}", f"-Drocketmq.home.dir={h}"]


def controller_group_broker_settings(root: Path, name: str, port: int, namesrv: str, controllers: list[str],
                                     flush: str) -> dict[str, str]:
    """One controller-mode broker's settings (both systems' config files: the same keys).

    ``brokerId`` and ``brokerRole`` are left out: in controller mode both come from the
    controllers (RocketMQ's ``ReplicasManager``; ours ``rocket.broker.controller_mode``).
    """
    settings = _broker_settings(root, name, 0, port, namesrv, flush, "SLAVE")
    del settings["brokerId"], settings["brokerRole"]
    settings.update({
        "enableControllerMode": "true",
        "controllerAddr": ";".join(controllers),
        "controllerHeartBeatTimeoutMills": str(CONTROLLER_HEARTBEAT_TIMEOUT_MS),
    })
    return settings


def start_controller_group(system: str, root: Path, *, flush: str, slaves: int, lib: Path | None = None,
                           ours_path: Path | None = None, extra: dict[str, str] | None = None,
                           members_timeout: float = START_TIMEOUT) -> Cluster:
    """Start 3 controllers, a NameServer and ``1 + slaves`` controller-mode brokers of ``system``
    under ``root``; return once :meth:`Cluster.wait_group` sees them all in sync.

    Apache: ``ControllerStartup`` x3 (DLedger, its default ``controllerType``; peers
    ``n0-127.0.0.1:<port>;...``), ``NamesrvStartup``, ``BrokerStartup`` x(1 + slaves). Ours:
    ``rocket controller`` x3 (pysyncobj Raft, a random secret per run), ``rocket nameserver``,
    ``rocket broker`` x(1 + slaves). Both: brokers' ``controllerHeartBeatTimeoutMills``
    :data:`CONTROLLER_HEARTBEAT_TIMEOUT_MS`, controllers' ``scanNotActiveBrokerInterval``
    :data:`SCAN_NOT_ACTIVE_BROKER_MS`; ``extra`` adds broker settings (e.g. ``allAckInSyncStateSet``).
    Raises :class:`ClusterStartError` (everything started is stopped again).
    """
    root.mkdir(parents=True, exist_ok=True)
    taken: set[int] = set()
    logs = root / "logs"
    ns_port = free_block(2, taken)
    namesrv = f"127.0.0.1:{ns_port}"
    ctl_ports = [free_block(2, taken) for _ in range(3)]  # remoting port, Raft/DLedger port + 1
    controllers = [f"127.0.0.1:{p}" for p in ctl_ports]
    procs: list[Proc] = []
    if system == "apache":
        if lib is None:
            raise ValueError("the Apache jars folder is needed")
        cp, jvm = java.classpath(lib), java.java()
        # with DLedger the controller answers brokers and mqadmin on its DLedger peer port (its
        # DLedgerServer's remoting server); listenPort is not opened
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ctl_ports))
        for i, port in enumerate(ctl_ports):
            conf = root / f"controller-n{i}.conf"
            conf.write_text("".join(f"{k}={v}\n" for k, v in {
                "listenPort": port + 1, "controllerDLegerGroup": "bench-controllers", "controllerDLegerPeers": peers,
                "controllerDLegerSelfId": f"n{i}", "controllerStorePath": root / "controller" / f"n{i}",
                "mappedFileSize": 64 * 1024 * 1024, "scanNotActiveBrokerInterval": SCAN_NOT_ACTIVE_BROKER_MS,
                "enableElectUncleanMaster": "false"}.items()))
            procs.append(Proc(f"controller-n{i}", "controller",
                              [jvm, *APACHE_CONTROLLER_JVM, *JAVA_OPENS, *HESSIAN_OPENS, java.QUIET_LOGBACK,
                               *_apache_home(root, f"controller-n{i}"),
                               "-cp", cp, "org.apache.rocketmq.controller.ControllerStartup", "-c", str(conf)],
                              logs / f"controller-n{i}.log", port))
        (root / "namesrv.conf").write_text(f"listenPort={ns_port}\n")
        procs.append(Proc("namesrv", "nameserver",
                          [jvm, *APACHE_NAMESRV_JVM, java.QUIET_LOGBACK, *_apache_home(root, "namesrv"), "-cp", cp,
                           "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(root / "namesrv.conf")],
                          logs / "namesrv.log", ns_port))
        for i in range(1 + slaves):
            port = free_block(4, taken) + 2
            name = f"broker-{i}"
            settings = {**controller_group_broker_settings(root, name, port, namesrv, controllers, flush),
                        **(extra or {})}
            conf = root / f"{name}.conf"
            conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
            procs.append(Proc(name, "broker",
                              [jvm, *APACHE_GROUP_BROKER_JVM, *JAVA_OPENS, java.QUIET_LOGBACK,
                               *_apache_home(root, name), "-cp", cp, "org.apache.rocketmq.broker.BrokerStartup",
                               "-c", str(conf)],
                              logs / f"{name}.log", port))
    elif system == "ours":
        exe = [sys.executable, "-m", "rocket.cli"]
        env = {"PYTHONUNBUFFERED": "1", "ROCKET_CONTROLLER_SECRET": secrets.token_hex(16)}
        if ours_path is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ours_path), os.environ.get("PYTHONPATH", "")]))
        peers = ",".join(f"127.0.0.1:{p}/{p + 1}" for p in ctl_ports)
        for i, port in enumerate(ctl_ports):
            procs.append(Proc(f"controller-n{i}", "controller",
                              [*exe, "controller", "--controller-peers", peers, "--port", str(port),
                               "--host", "127.0.0.1", "--data-dir", str(root / "controller" / f"n{i}"),
                               "--heartbeat-timeout-ms", str(CONTROLLER_HEARTBEAT_TIMEOUT_MS)],
                              logs / f"controller-n{i}.log", port, env))
        procs.append(Proc("namesrv", "nameserver",
                          [*exe, "nameserver", "--host", "127.0.0.1", "--port", str(ns_port),
                           "--http-port", str(free_block(1, taken))], logs / "namesrv.log", ns_port, env))
        for i in range(1 + slaves):
            port = free_block(4, taken) + 2
            name = f"broker-{i}"
            settings = {**controller_group_broker_settings(root, name, port, namesrv, controllers, flush),
                        **(extra or {})}
            conf = root / f"{name}.properties"
            conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
            procs.append(Proc(name, "broker",
                              [*exe, "broker", "--config", str(conf), "--http-port", str(free_block(1, taken))],
                              logs / f"{name}.log", port, env))
    else:
        raise ValueError(f"unknown system {system!r}")
    cluster = Cluster(system, root, namesrv, procs)
    try:
        servers = [p for p in procs if p.role in ("controller", "nameserver")]
        for p in servers:
            p.start()
        for p in servers:
            _wait_tcp(p, START_TIMEOUT)
        for p in cluster.brokers():
            p.start()
        cluster.wait_group(1 + slaves, members_timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster
