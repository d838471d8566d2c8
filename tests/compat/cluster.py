"""Start a throwaway RocketCluster on loopback for one compat test: NameServer(s) + broker groups.

Every process is a real ``python -m rocket.cli ...`` on free 127.0.0.1 ports
with a fresh store directory under the test's ``tmp_path``; each one's output
goes to ``<tmp>/logs/<name>.log``. They are started together and stopped
together (SIGTERM, then SIGKILL after 10 s).

Brokers get a properties file (``--config``) with the settings the command
line has no flag for: the VIP and HA listener ports (which otherwise default to
listenPort-2 and +1), short ``messageDelayLevel`` values (a message sent back
for retry is due after about a second instead of level 3's 10 s), and 64 MiB
CommitLog files instead of 1 GiB ones. Store directories are deleted after a
test that passed.

For comparing behaviour only, ``ROCKET_COMPAT_JAVA_LIB=<folder of the Apache
RocketMQ 4.9.x namesrv/broker jars and their dependencies>`` runs the same
tests against the Java NameServer and broker instead (never in ``make test``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.compat import rawremoting
from tests.support import free_port, rocket_command, wait_for, wait_port

CLUSTER_NAME = "DefaultCluster"
#: Level 1.. : levels 1-5 are one second, so sends-back (level 3 + reconsumeTimes) return quickly.
SHORT_DELAY_LEVELS = "1s 1s 1s 1s 1s 2s 2s 2s 2s 2s 2s 2s 2s 2s 2s 2s 2s 2s"
#: CommitLog file size of the test brokers (the largest test body is 120 KB).
COMMITLOG_FILE_SIZE = 64 * 1024 * 1024
JAVA_LIB = os.environ.get("ROCKET_COMPAT_JAVA_LIB", "")


def flavor() -> str:
    """``rocket`` (our servers, the default) or ``java`` (reference run, opt-in)."""
    return "java" if JAVA_LIB else "rocket"


def _port_free(port: int) -> bool:
    for host in ("0.0.0.0", "127.0.0.1"):
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                return False
    return True


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


_handed_out: set[int] = set()


def pick_port(span: int = 1) -> int:
    """A port P with P .. P+span-1 free, below the kernel's ephemeral range.

    Ports from ``bind(0)`` can be taken again by any outgoing connection
    (ours, the real client's, other tests') before the server binds them;
    ports below the ephemeral range are only taken by someone binding them on
    purpose. Never hands out the same port twice in one process.
    """
    low, _ = _ephemeral_range()
    top = low if low > 12000 else 60000
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(10000, top - span)
        block = range(port, port + span)
        if any(p in _handed_out for p in block) or not all(_port_free(p) for p in block):
            continue
        _handed_out.update(block)
        return port
    return free_port()


def broker_ports() -> tuple[int, int, int]:
    """(listen, fast = listen - 2, ha = listen + 1), all free now (Java derives the last two)."""
    base = pick_port(4)
    return base + 2, base, base + 3


@dataclass
class Proc:
    name: str
    argv: list[str]
    log_path: Path
    port: int
    http_port: int = 0
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                          env={**os.environ, **self.env}, start_new_session=True)
        finally:
            log.close()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, limit: int = 3000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            text = ""
        code = self.popen.poll() if self.popen else None
        state = "running" if code is None else f"exited {code}"
        return f"--- {self.name} ({state}) {self.log_path} ---\n{text[-limit:]}"

    def terminate(self) -> None:
        if self.alive():
            assert self.popen is not None
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)

    def reap(self, timeout: float = 10.0) -> None:
        if self.popen is None:
            return
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


@dataclass
class Cluster:
    """A running cluster. ``namesrv`` is the ``;``-joined list real clients are given."""

    root: Path
    namesrvs: list[Proc]
    brokers: dict[str, Proc]
    client_namesrv: str = ""

    @property
    def namesrv(self) -> str:
        return ";".join(p.addr for p in self.namesrvs)

    def broker_addr(self, name: str) -> str:
        return self.brokers[name].addr

    def logs(self) -> str:
        return "\n".join(p.log_tail() for p in [*self.namesrvs, *self.brokers.values()])

    def check_alive(self) -> None:
        dead = [p for p in [*self.namesrvs, *self.brokers.values()] if not p.alive()]
        if dead:
            raise AssertionError("server process(es) died:\n" + "\n".join(p.log_tail() for p in dead))

    # -- topics and routes ---------------------------------------------------------

    def create_topic(self, topic: str, queues: int = 4, brokers: Sequence[str] | None = None,
                     timeout: float = 10.0) -> None:
        """Create ``topic`` on each broker (UPDATE_AND_CREATE_TOPIC) and wait for every NameServer to route it."""
        names = list(brokers or self.brokers)
        for name in names:
            reply = rawremoting.create_topic(self.broker_addr(name), topic, queues)
            assert reply.code == 0, f"UPDATE_AND_CREATE_TOPIC {topic} on {name}: code {reply.code} {reply.remark}"
        self.wait_route(topic, names, timeout)

    def route(self, topic: str, namesrv: str | None = None) -> dict[str, object] | None:
        """The TopicRouteData from one NameServer, or None when it answers TOPIC_NOT_EXIST."""
        reply = rawremoting.route(namesrv or self.namesrvs[0].addr, topic)
        if reply.code != 0:
            return None
        data = reply.json()
        assert isinstance(data, dict)
        return data

    def wait_route(self, topic: str, brokers: Sequence[str], timeout: float = 10.0) -> dict[str, object]:
        """Wait until every NameServer's route for ``topic`` lists all of ``brokers``; return the first."""
        def complete() -> dict[str, object] | None:
            routes = [self.route(topic, ns.addr) for ns in self.namesrvs]
            if all(r is not None and {q["brokerName"] for q in r["queueDatas"]} >= set(brokers)  # type: ignore[index,union-attr]
                   for r in routes):
                return routes[0]
            return None

        found: dict[str, object] = wait_for(complete, timeout, what=f"every route of {topic} to list {list(brokers)}")
        return found


def _write_broker_config(path: Path, *, name: str, ports: tuple[int, int, int], namesrv: str,
                         store: Path, http_port: int, extra: dict[str, str]) -> None:
    listen, fast, ha = ports
    settings = {
        "brokerClusterName": CLUSTER_NAME,
        "brokerName": name,
        "brokerId": "0",
        "brokerIP1": "127.0.0.1",
        "listenPort": str(listen),
        "fastListenPort": str(fast),
        "haListenPort": str(ha),
        "namesrvAddr": namesrv,
        "storePathRootDir": str(store),
        "storePathCommitLog": str(store / "commitlog"),
        "messageDelayLevel": SHORT_DELAY_LEVELS,
        # Small files: the defaults (1 GiB CommitLog files) would fill the disk with a dozen clusters.
        "mappedFileSizeCommitLog": str(COMMITLOG_FILE_SIZE),
        "mappedFileSizeConsumeQueue": str(30_000 * 20),
        "autoCreateTopicEnable": "true",
        **({"httpPort": str(http_port)} if http_port else {}),
        **extra,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))


_LOGBACK = (
    '<configuration><appender name="F" class="ch.qos.logback.core.FileAppender"><file>{file}</file>'
    "<encoder><pattern>%d %p %c{{1}} - %m%n</pattern></encoder></appender>"
    '<root level="INFO"><appender-ref ref="F"/></root></configuration>'
)


def _java_argv(main: str, config: Path) -> list[str]:
    return [shutil.which("java") or "java", "-Xms128m", "-Xmx256m", "-XX:+UseSerialGC",
            "-cp", f"{JAVA_LIB}/*", main, "-c", str(config)]


def _namesrv_proc(root: Path, index: int) -> Proc:
    port, http_port = pick_port(), pick_port()
    name = f"namesrv-{index}"
    log = root / "logs" / f"{name}.log"
    if flavor() == "java":
        home = root / "java-home"
        cfg = root / f"{name}.properties"
        cfg.write_text(f"listenPort={port}\n")
        return Proc(name, _java_argv("org.apache.rocketmq.namesrv.NamesrvStartup", cfg), log, port,
                    env={"ROCKETMQ_HOME": str(home)})
    argv = rocket_command("nameserver", "--host", "127.0.0.1", "--port", str(port), "--http-port", str(http_port))
    return Proc(name, argv, log, port, http_port)


def _broker_proc(root: Path, name: str, namesrv: str, extra: dict[str, str], flush: str | None) -> Proc:
    ports = broker_ports()
    http_port = pick_port() if flavor() == "rocket" else 0
    store = root / "store" / name
    store.mkdir(parents=True, exist_ok=True)
    cfg = root / f"{name}.properties"
    _write_broker_config(cfg, name=name, ports=ports, namesrv=namesrv, store=store, http_port=http_port,
                         extra=extra)
    log = root / "logs" / f"{name}.log"
    if flavor() == "java":
        home = root / "java-home"
        return Proc(name, _java_argv("org.apache.rocketmq.broker.BrokerStartup", cfg), log, ports[0],
                    env={"ROCKETMQ_HOME": str(home)})
    argv = rocket_command(
        "broker", "--name", name, "--cluster", CLUSTER_NAME, "--broker-id", "0", "--port", str(ports[0]),
        "--http-port", str(http_port), "--namesrv", namesrv, "--store-dir", str(store), "--config", str(cfg),
    )
    if flush:
        argv += ["--flush", flush]
    return Proc(name, argv, log, ports[0], http_port)


def _prepare_java_home(root: Path) -> None:
    conf = root / "java-home" / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    for which in ("namesrv", "broker"):
        (conf / f"logback_{which}.xml").write_text(_LOGBACK.format(file=root / "logs" / f"java-{which}.log"))


def _http_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _registered(namesrv: str, names: Sequence[str]) -> bool:
    try:
        reply = rawremoting.cluster_info(namesrv)
    except OSError:
        return False
    if reply.code != 0:
        return False
    table = reply.json().get("brokerAddrTable", {})
    return all(name in table and "0" in {str(k) for k in table[name].get("brokerAddrs", {})} for name in names)


def masters_registered(namesrv: str, **admin: Any) -> bool:
    """True when our ``Admin(namesrv, **admin)`` (credentials, TLS) sees a master in the cluster."""
    from rocket.client import Admin

    async def check() -> bool:
        async with Admin(namesrv, timeout=2, **admin) as client:
            return bool((await client.cluster_info()).masters(CLUSTER_NAME))
    try:
        return asyncio.run(check())
    except Exception:
        return False


class _PortClash(RuntimeError):
    """A server could not bind its port: someone took it after we picked it."""


def _stop(procs: Sequence[Proc]) -> None:
    for proc in reversed(procs):
        proc.terminate()
    for proc in reversed(procs):
        proc.reap()


def _check_started(cluster: Cluster) -> None:
    for proc in [*cluster.namesrvs, *cluster.brokers.values()]:
        if not proc.alive() and "already in use" in proc.log_tail():
            raise _PortClash(proc.log_tail())
    cluster.check_alive()


def _launch(root: Path, namesrvs: int, brokers: Sequence[str], broker_config: dict[str, str],
            flush: str | None, timeout: float, started: list[Proc]) -> Cluster:
    ns_procs = [_namesrv_proc(root, i) for i in range(namesrvs)]
    cluster = Cluster(root, ns_procs, {})
    for proc in ns_procs:
        proc.start()
        started.append(proc)
    for proc in ns_procs:
        try:
            wait_port(proc.port, timeout=timeout, proc=None)
        except TimeoutError:
            _check_started(cluster)
            raise AssertionError(f"NameServer did not listen:\n{proc.log_tail()}") from None
    for name in brokers:
        proc = _broker_proc(root, name, cluster.namesrv, broker_config, flush)
        cluster.brokers[name] = proc
        proc.start()
        started.append(proc)
    deadline = time.monotonic() + timeout
    while True:
        _check_started(cluster)
        ready = all(_http_ready(p.http_port) for p in cluster.brokers.values() if p.http_port)
        if ready and all(_registered(ns.addr, list(brokers)) for ns in ns_procs):
            return cluster
        if time.monotonic() > deadline:
            raise AssertionError(f"cluster not ready after {timeout} s\n{cluster.logs()}")
        time.sleep(0.1)


@contextlib.contextmanager
def start_cluster(root: Path, *, namesrvs: int = 1, brokers: Sequence[str] = ("broker-a", "broker-b"),
                  broker_config: dict[str, str] | None = None, flush: str | None = "ASYNC_FLUSH",
                  timeout: float = 30.0) -> Iterator[Cluster]:
    """Run ``namesrvs`` NameServers and one master per name in ``brokers`` until the block ends.

    Waits until every NameServer lists every broker (GET_BROKER_CLUSTER_INFO)
    and, for our brokers, until ``/readyz`` answers 200. A start that fails
    because a port was taken meanwhile is retried (twice) on new ports.
    """
    root.mkdir(parents=True, exist_ok=True)
    if flavor() == "java":
        _prepare_java_home(root)
    started: list[Proc] = []
    try:
        for attempt in range(3):
            try:
                cluster = _launch(root, namesrvs, brokers, broker_config or {}, flush, timeout, started)
                break
            except _PortClash:
                if attempt == 2:
                    raise
                _stop(started)
                started.clear()
                for store in (root / "store").glob("*"):
                    shutil.rmtree(store, ignore_errors=True)
        cluster.client_namesrv = cluster.namesrv
        yield cluster
    finally:
        _stop(started)
