"""TLS with Apache RocketMQ's own Java clients (5.4.0 and 4.9.8) against NameServers and brokers of
ours (processes):

* ``enforcing`` (a NameServer and a broker): the Java client in its TLS mode (``-Dtls.enable=true``,
  i.e. ``ClientConfig.useTLS``, verifying our certificate with ``tls.client.authServer=true`` and
  ``tls.client.trustCertPath``; ``tls.test.mode.enable=false``) produces and consumes; the same
  client without TLS cannot send (the servers close its connections) and the servers log why; a
  TLS client trusting another CA cannot either;
* ``mqadmin`` (5.4.0) in the same TLS mode lists the enforcing cluster;
* ``permissive`` (another NameServer and broker): the Java client with and without TLS both
  produce, on the same ports, and a plaintext consumer receives both.

The certificates (a CA and a server certificate for 127.0.0.1) are made here with the
``cryptography`` library and given to our processes as RocketMQ's ``tls.config.file``. The Java
side is ``tests/compat/AclDriver.java`` run unsigned (``ak`` empty). If the jars or java are
missing, these tests fail and say why.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bench.compare import java

from rocket.remoting import certs
from rocket.remoting.tls import ClientTls
from tests.compat.cluster import Proc, _broker_proc, masters_registered, pick_port
from tests.support import rocket_command, unique, wait_for, wait_port

pytestmark = [pytest.mark.compat, pytest.mark.timeout(600)]

DRIVER_SOURCE = Path(__file__).resolve().parent / "AclDriver.java"


@dataclass
class TlsClusters:
    enforcing: str
    permissive: str
    ca: Path
    other_ca: Path
    drivers: dict[str, tuple[Path, Path]]  # version -> (lib, classes)
    home: Path
    procs: list[Proc]

    def logs(self) -> str:
        return "\n".join(p.log_tail() for p in self.procs)

    def tls_jvm(self, ca: Path) -> tuple[str, ...]:
        """The Java client's TLS mode (``TlsSystemConfig`` properties), verifying servers against ``ca``."""
        return ("-Dtls.enable=true", "-Dtls.test.mode.enable=false", "-Dtls.client.authServer=true",
                f"-Dtls.client.trustCertPath={ca}", f"-Dtls.config.file={self.home / 'none.properties'}")

    def java(self, namesrv: str, *args: str, tls: Path | None = None, version: str = "5.4.0",
             timeout: float = 120) -> dict[str, Any]:
        """Run AclDriver (unsigned) of ``version``; with TLS trusting ``tls`` when given."""
        lib, classes = self.drivers[version]
        jvm: tuple[str, ...] = ("-Xms64m", "-Xmx256m", *(self.tls_jvm(tls) if tls is not None else ()))
        argv = java.driver_argv(lib, classes, self.home, *args, f"namesrv={namesrv}", jvm=jvm, main="AclDriver")
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        results = java.driver_results(proc.stdout)
        assert results, f"AclDriver {args} printed no result (exit {proc.returncode})\n{proc.stderr[-3000:]}"
        result: dict[str, Any] = results[-1]
        return result


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsClusters]:
    try:
        drivers = {}
        for version, lib in (("5.4.0", java.ensure_jars()), ("4.9.8", java.ensure_tools_jars("4.9.8"))):
            drivers[version] = (lib, java.compile_java(lib, DRIVER_SOURCE, "acldriver"))
    except java.JavaSetupError as exc:
        pytest.fail(f"the Apache RocketMQ Java client is not available: {exc}", pytrace=False)
    root = tmp_path_factory.mktemp("tls")
    ca = certs.issue_ca("compat CA")
    certs.write_pem(root / "ca.pem", ca.cert_pem)
    certs.write_pair(root, "server", certs.issue_cert(ca, "rocket-compat", ["127.0.0.1", "localhost"]))
    certs.write_pem(root / "other-ca.pem", certs.issue_ca("another CA").cert_pem)
    props = root / "tls.properties"
    props.write_text(f"tls.server.certPath={root / 'server.pem'}\ntls.server.keyPath={root / 'server.key'}\n"
                     f"tls.enable=true\ntls.client.trustCertPath={root / 'ca.pem'}\n")
    procs: list[Proc] = []
    namesrvs: dict[str, str] = {}
    try:
        for mode in ("enforcing", "permissive"):
            port = pick_port()
            ns = Proc(f"namesrv-{mode}", rocket_command(
                "nameserver", "--host", "127.0.0.1", "--port", str(port), "--http-port", str(pick_port()),
                "--tls-mode", mode, "--tls-config", str(props)), root / "logs" / f"namesrv-{mode}.log", port)
            procs.append(ns)
            ns.start()
            wait_port(ns.port, timeout=20)
            broker = _broker_proc(root, f"broker-{mode}", ns.addr, {"tlsMode": mode, "tls.config.file": str(props)},
                                  "ASYNC_FLUSH")
            procs.append(broker)
            broker.start()
            namesrvs[mode] = ns.addr
        for addr in namesrvs.values():
            wait_for(functools.partial(masters_registered, addr, tls=ClientTls.trusting(root / "ca.pem")), 30,
                     what="the broker to register over TLS")
        yield TlsClusters(namesrvs["enforcing"], namesrvs["permissive"], root / "ca.pem", root / "other-ca.pem",
                          drivers, root / "home", procs)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            p.reap()


@pytest.mark.parametrize("version", ["5.4.0", "4.9.8"])
def test_java_client_over_tls_against_enforcing(clusters: TlsClusters, version: str) -> None:
    c = clusters
    topic, group = unique("TlsJava"), unique("CG_tls")
    sent = c.java(c.enforcing, "produce", f"topic={topic}", "group=PID_tls", "count=3", tls=c.ca, version=version)
    assert sent == {"sent": 3, "error": ""}, c.logs()
    got = c.java(c.enforcing, "consume", f"topic={topic}", f"group={group}", "expect=3", "timeout=75", tls=c.ca,
                 version=version)
    assert got["received"] >= 3, c.logs()


def test_enforcing_refuses_plaintext_and_untrusted_java_clients(clusters: TlsClusters) -> None:
    c = clusters
    topic = unique("TlsRefused")
    plain = c.java(c.enforcing, "produce", f"topic={topic}", "group=PID_plain", "count=1")
    assert plain["sent"] == 0 and plain["error"], plain
    log = next(p for p in c.procs if p.name == "namesrv-enforcing").log_path.read_text()
    assert "insecure connection while this server is running in TLS enforcing mode" in log
    untrusted = c.java(c.enforcing, "produce", f"topic={topic}", "group=PID_untrusted", "count=1", tls=c.other_ca)
    assert untrusted["sent"] == 0 and untrusted["error"], untrusted


def test_mqadmin_over_tls(clusters: TlsClusters) -> None:
    c = clusters
    lib, _ = c.drivers["5.4.0"]
    argv = [java.java(), "-Xms64m", "-Xmx256m", java.QUIET_LOGBACK, f"-Drocketmq.home.dir={c.home}",
            f"-Duser.home={c.home}", *c.tls_jvm(c.ca), "-cp", java.classpath(lib),
            "org.apache.rocketmq.tools.command.MQAdminStartup", "clusterList", "-n", c.enforcing]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "broker-enforcing" in proc.stdout, proc.stdout + proc.stderr


def test_permissive_serves_java_clients_with_and_without_tls(clusters: TlsClusters) -> None:
    c = clusters
    topic, group = unique("TlsMixed"), unique("CG_mixed")
    plain = c.java(c.permissive, "produce", f"topic={topic}", "group=PID_plain", "count=2")
    assert plain == {"sent": 2, "error": ""}, c.logs()
    secure = c.java(c.permissive, "produce", f"topic={topic}", "group=PID_tls", "count=2", tls=c.ca)
    assert secure == {"sent": 2, "error": ""}, c.logs()
    got = c.java(c.permissive, "consume", f"topic={topic}", f"group={group}", "expect=4", "timeout=75")
    assert got["received"] >= 4, c.logs()
