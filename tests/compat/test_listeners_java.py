"""Listeners on loopback with Apache RocketMQ's Java client (5.x): each NameServer port routes its own addresses.

One NameServer of ours with an extra listener port (``--listener external:<port>``) and two
brokers, each serving an extra remoting port for that listener (``listenerPorts``) and
registering it (``listenerAddrs``, :mod:`rocket.nameserver.listeners`). Two runs of the Java
driver's ``roundtrip`` (create the topic, send, consume with a push and a lite pull consumer) on
the same topic: the first through the NameServer's default (internal) port, the second through
the listener port. Each is served in full, and the brokers' accepted-connection counters show
that each client reached the brokers only on its own listener's addresses, i.e. it got routes
(and cluster info) carrying them. The route answers of both ports are checked too.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bench.compare import java

from tests.compat import rawremoting
from tests.compat.cluster import Proc, broker_ports, pick_port
from tests.support import rocket_command, wait_for, wait_port

pytestmark = [pytest.mark.compat, pytest.mark.timeout(600)]

CLUSTER = "ListenerCluster"
BROKERS = ("broker-a", "broker-b")
TOPIC = "ListenerTopic"


@dataclass
class Servers:
    """The running NameServer and brokers: ports of each listener."""

    namesrv: Proc
    namesrv_external: int
    brokers: dict[str, Proc]
    broker_external: dict[str, int]

    def logs(self) -> str:
        return "\n".join(p.log_tail() for p in [self.namesrv, *self.brokers.values()])

    def status(self, name: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.brokers[name].http_port}/api/v1/status",
                                    timeout=5) as resp:
            data: dict[str, Any] = json.load(resp)
        return data

    def accepted(self) -> dict[str, tuple[int, int]]:
        """brokerName -> (connections accepted on listenPort, on the external listener port)."""
        out = {}
        for name in self.brokers:
            st = self.status(name)
            out[name] = (st["listenPortConnectionsAccepted"], st["listeners"]["external"]["connectionsAccepted"])
        return out


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    root = tmp_path_factory.mktemp("listeners")
    ns_port, ns_http, ns_ext = pick_port(), pick_port(), pick_port()
    namesrv = Proc("namesrv", rocket_command("nameserver", "--host", "127.0.0.1", "--port", str(ns_port),
                                             "--http-port", str(ns_http), "--listener", f"external:{ns_ext}"),
                   root / "logs" / "namesrv.log", ns_port, ns_http)
    procs = [namesrv]
    brokers: dict[str, Proc] = {}
    external: dict[str, int] = {}
    try:
        namesrv.start()
        wait_port(ns_port, timeout=30)
        wait_port(ns_ext, timeout=30)
        for name in BROKERS:
            listen, fast, ha = broker_ports()
            http, ext = pick_port(), pick_port()
            store = root / "store" / name
            store.mkdir(parents=True)
            cfg = root / f"{name}.properties"
            cfg.write_text(f"brokerIP1=127.0.0.1\nfastListenPort={fast}\nhaListenPort={ha}\n"
                           f"listenerPorts=external:{ext}\nautoCreateTopicEnable=false\n"
                           f"mappedFileSizeCommitLog={64 * 1024 * 1024}\n")
            proc = Proc(name, rocket_command(
                "broker", "--name", name, "--cluster", CLUSTER, "--broker-id", "0", "--port", str(listen),
                "--http-port", str(http), "--namesrv", f"127.0.0.1:{ns_port}", "--store-dir", str(store),
                "--config", str(cfg)), root / "logs" / f"{name}.log", listen, http)
            proc.start()
            procs.append(proc)
            brokers[name] = proc
            external[name] = ext
        srv = Servers(namesrv, ns_ext, brokers, external)

        def registered() -> bool:
            reply = rawremoting.cluster_info(namesrv.addr)
            table = reply.json().get("brokerAddrTable", {}) if reply.code == 0 else {}
            return all(name in table for name in BROKERS)

        wait_for(registered, 30, what=f"both brokers registered\n{srv.logs()}", retry_on=(OSError,))
        yield srv
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.reap()


@pytest.fixture(scope="module")
def java_client() -> tuple[Path, Path]:
    """(folder of Apache RocketMQ jars, folder of the compiled Driver); fails when unavailable."""
    try:
        lib = java.ensure_jars()
        return lib, java.ensure_driver(lib)
    except java.JavaSetupError as exc:
        pytest.fail(f"the Apache RocketMQ Java client is not available: {exc}", pytrace=False)


def _roundtrip(java_client: tuple[Path, Path], home: Path, namesrv: str, servers: Servers) -> dict[str, Any]:
    lib, classes = java_client
    argv = java.driver_argv(lib, classes, home, "roundtrip", f"namesrv={namesrv}", f"topic={TOPIC}", "count=20",
                            "batches=1", "batchSize=8", "vip=0", "consumers=push,pull", "timeout=40",
                            "pullTimeout=20", "queues=4")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
    results = java.driver_results(proc.stdout)
    assert results, (f"the Java driver printed no result (exit {proc.returncode})\n"
                     + "\n".join(proc.stderr.splitlines()[-25:]) + f"\n{servers.logs()}")
    return results[-1]


def _addresses(route: dict[str, Any]) -> dict[str, str]:
    return {bd["brokerName"]: bd["brokerAddrs"]["0"] for bd in route["brokerDatas"]}


def test_each_listener_port_routes_its_own_addresses(java_client: tuple[Path, Path], servers: Servers,
                                                     tmp_path: Path) -> None:
    internal_ns = servers.namesrv.addr
    external_ns = f"127.0.0.1:{servers.namesrv_external}"
    internal = {name: p.addr for name, p in servers.brokers.items()}
    external = {name: f"127.0.0.1:{port}" for name, port in servers.broker_external.items()}
    before = servers.accepted()

    # 1. the client of the internal listener: the NameServer's default port
    first = _roundtrip(java_client, tmp_path / "internal", internal_ns, servers)
    sent_first = sum(first["sent"].values())
    assert first["send_errors"] == 0 and sent_first > 0, first
    for how in ("push", "pull"):
        assert (first[f"{how}_missing"], first[f"{how}_unexpected_ids"], first[f"{how}_duplicates"],
                first[f"{how}_errors"]) == (0, 0, 0, 0), first
    after_first = servers.accepted()
    for name in BROKERS:
        assert after_first[name][0] > before[name][0], f"{name} served the internal client: {after_first}"
        assert after_first[name][1] == before[name][1], f"no connection on {name}'s external port: {after_first}"

    # the route answers: each port its own listener's addresses
    assert _addresses(rawremoting.route(internal_ns, TOPIC).json()) == internal
    assert _addresses(rawremoting.route(external_ns, TOPIC).json()) == external
    info = rawremoting.cluster_info(external_ns).json()
    assert {n: bd["brokerAddrs"]["0"] for n, bd in info["brokerAddrTable"].items()} == external

    # 2. the client of the external listener, same topic: it sees the first client's messages too
    second = _roundtrip(java_client, tmp_path / "external", external_ns, servers)
    sent_second = sum(second["sent"].values())
    assert second["send_errors"] == 0 and sent_second > 0, second
    for how in ("push", "pull"):
        assert (second[f"{how}_missing"], second[f"{how}_duplicates"], second[f"{how}_errors"]) == (0, 0, 0), second
        assert second[f"{how}_unexpected_ids"] == sent_first, second  # exactly the first client's messages
        assert second[f"{how}_received"] == sent_first + sent_second, second
    after_second = servers.accepted()
    for name in BROKERS:
        assert after_second[name][1] > after_first[name][1], f"{name} served the external client: {after_second}"
        assert after_second[name][0] == after_first[name][0], f"no new connection on {name}'s listenPort: " \
                                                              f"{after_first} -> {after_second}"
