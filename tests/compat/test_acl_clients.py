"""Compatibility of ACL 2.0 with real RocketMQ clients and tools, against one NameServer and one
broker of ours (processes) with ``aclEnable``:

* the Java client (5.4.0) signing with ``AclClientRPCHook(new SessionCredentials(ak, sk))``
  (``tests/compat/AclDriver.java``): allowed topic sends, a denied topic and unsigned sends fail
  with NO_PERMISSION and store nothing; a push consumer of an allowed group receives, one of a
  denied group receives nothing;
* the C++ client (``set_session_credentials``, ``tests/compat/driver.py``): signed sends go
  through, unsigned ones fail;
* ``mqadmin`` 5.4.0 (credentials from ``$ROCKETMQ_HOME/conf/tools.yml``): createUser and
  createAcl make a user whose policy then takes effect for the Java client; listUser shows it;
  ``updateTopic`` run with that user's keys is refused until ``updateAcl`` lets it Create.

If the Java jars, javac/java or the compat venv are missing, these tests fail and say why.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bench.compare import java

from rocket.auth import SessionCredentials
from rocket.client import Admin
from tests.compat import realclient
from tests.compat.cluster import CLUSTER_NAME, Proc, _broker_proc, masters_registered, pick_port
from tests.support import rocket_command, unique, wait_for, wait_port

pytestmark = [pytest.mark.compat, pytest.mark.timeout(600)]

DRIVER_SOURCE = Path(__file__).resolve().parent / "AclDriver.java"
ROOT = SessionCredentials("root", "root-secret-compat")
APP = SessionCredentials("app", "app-secret-compat")


@dataclass
class AclCluster:
    namesrv: str
    broker: Proc
    lib: Path
    classes: Path
    home: Path
    orders: str
    payments: str
    group: str
    procs: list[Proc]

    def logs(self) -> str:
        return "\n".join(p.log_tail() for p in self.procs)

    def java(self, *args: str, timeout: float = 120) -> dict[str, Any]:
        argv = java.driver_argv(self.lib, self.classes, self.home, *args, f"namesrv={self.namesrv}",
                                jvm=("-Xms64m", "-Xmx256m"), main="AclDriver")
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        results = java.driver_results(proc.stdout)
        assert results, f"AclDriver {args} printed no result (exit {proc.returncode})\n{proc.stderr[-3000:]}"
        result: dict[str, Any] = results[-1]
        return result

    def mqadmin(self, *args: str, home: Path | None = None, check: bool = True) -> str:
        """Run mqadmin with the keys of ``home``/conf/tools.yml (default: the Super user's)."""
        home = home or self.home
        argv = [java.java(), "-Xms64m", "-Xmx256m", java.QUIET_LOGBACK, f"-Drocketmq.home.dir={home}",
                f"-Duser.home={home}", "-cp", java.classpath(self.lib),
                "org.apache.rocketmq.tools.command.MQAdminStartup", *args, "-n", self.namesrv]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if check:
            assert proc.returncode == 0, f"mqadmin {args[0]} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout + proc.stderr


async def _admin_setup(namesrv: str, c: AclCluster) -> None:
    async with Admin(namesrv, credentials=ROOT) as admin:
        for topic in (c.orders, c.payments):
            await admin.create_topic(topic, queue_nums=2, cluster=CLUSTER_NAME)
        await admin.put_user(APP.access_key, APP.secret_key)
        await admin.put_acl(APP.access_key, [f"Topic:{c.orders}"], ["Pub", "Sub"])
        await admin.put_acl(APP.access_key, [f"Group:{c.group}", "Group:PID_*"], ["Sub", "Pub"])
        # may look the route up (Get), not send: the broker refuses the send itself
        await admin.put_acl(APP.access_key, [f"Topic:{c.payments}"], ["Get"])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    try:
        lib = java.ensure_jars()
        classes = java.ensure_driver(lib, DRIVER_SOURCE)
    except java.JavaSetupError as exc:
        pytest.fail(f"the Apache RocketMQ Java client is not available: {exc}", pytrace=False)
    root = tmp_path_factory.mktemp("acl")
    init_user = root / "init-user.json"
    init_user.write_text(json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key}))
    ns_cfg = root / "namesrv.json"
    ns_cfg.write_text(json.dumps({"acl_enable": True, "init_authentication_user": str(init_user),
                                  "auth_sync_interval": 0.5}))
    port = pick_port()
    ns = Proc("namesrv", rocket_command("nameserver", "--host", "127.0.0.1", "--port", str(port),
                                        "--http-port", str(pick_port()), "--config", str(ns_cfg)),
              root / "logs" / "namesrv.log", port)
    procs = [ns]
    ns.start()
    try:
        wait_port(ns.port, timeout=20)
        namesrv = ns.addr
        broker = _broker_proc(root, "broker-a", namesrv, {"aclEnable": "true",
                                                          "initAuthenticationUser": str(init_user)}, "ASYNC_FLUSH")
        procs.append(broker)
        broker.start()
        wait_for(lambda: masters_registered(namesrv, credentials=ROOT), 30, what="the broker to register (signed)")
        home = root / "home"
        (home / "conf").mkdir(parents=True)
        (home / "conf" / "tools.yml").write_text(f"accessKey: {ROOT.access_key}\nsecretKey: {ROOT.secret_key}\n")
        c = AclCluster(namesrv, broker, lib, classes, home, unique("Orders"), unique("Payments"), unique("CG"), procs)
        asyncio.run(_admin_setup(namesrv, c))
        wait_for(lambda: _app_known(namesrv, c.orders), 15, what="the NameServer to copy the users")
        yield c
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            p.reap()


def _app_known(namesrv: str, topic: str) -> bool:
    async def check() -> bool:
        async with Admin(namesrv, credentials=APP, timeout=2) as admin:
            await admin.client.fetch_route(topic, cache=False)
            return True
    try:
        return asyncio.run(check())
    except Exception:
        return False


def test_java_client_signed_allowed_and_denied(cluster: AclCluster) -> None:
    c = cluster
    ok = c.java("produce", f"topic={c.orders}", "group=PID_java", f"ak={APP.access_key}", f"sk={APP.secret_key}",
                "count=3")
    assert ok == {"sent": 3, "error": ""}, c.logs()
    denied = c.java("produce", f"topic={c.payments}", "group=PID_java", f"ak={APP.access_key}",
                    f"sk={APP.secret_key}", "count=1")
    assert denied["sent"] == 0 and "CODE: 16" in denied["error"], denied
    assert f"Topic:{c.payments}" in denied["error"], denied
    # the NameServer refuses the route; the Java client reports that as "No route info"
    unsigned = c.java("produce", f"topic={c.orders}", "group=PID_java", "count=1")
    assert unsigned["sent"] == 0 and "No route info" in unsigned["error"], unsigned
    wrong = c.java("produce", f"topic={c.orders}", "group=PID_java", f"ak={APP.access_key}", "sk=wrong", "count=1")
    assert wrong["sent"] == 0 and "No route info" in wrong["error"], wrong
    got = c.java("consume", f"topic={c.orders}", f"group={c.group}", f"ak={APP.access_key}",
                 f"sk={APP.secret_key}", "expect=3", "timeout=75")
    assert got["received"] >= 3, c.logs()
    other = c.java("consume", f"topic={c.orders}", f"group={unique('CG_denied')}", f"ak={APP.access_key}",
                   f"sk={APP.secret_key}", "expect=1", "timeout=6")
    assert other["received"] == 0


def test_cpp_client_signs(cluster: AclCluster, tmp_path: Path) -> None:
    try:
        python = realclient.ensure_venv()
    except Exception as exc:
        pytest.fail(f"the C++ client's compat venv is not available: {exc}", pytrace=False)
    driver = realclient.Driver(python, cluster.namesrv, tmp_path / "cpp-home")
    driver.extra_env = {"ROCKET_ACCESS_KEY": APP.access_key, "ROCKET_SECRET_KEY": APP.secret_key}
    sends = driver.send(cluster.orders, 2, "--group", "PID_cpp")
    assert [e["event"] for e in sends if e["event"] != "cpp_log"] == ["send", "send"], sends
    driver.extra_env = {}
    unsigned = driver.send(cluster.orders, 1, "--group", "PID_cpp", "--send-timeout-ms", "2000")
    assert [e["event"] for e in unsigned if e["event"] != "cpp_log"] == ["send_error"], unsigned


def test_mqadmin_user_and_acl_commands_take_effect(cluster: AclCluster) -> None:
    c = cluster
    c.mqadmin("createUser", "-c", CLUSTER_NAME, "-u", "bob", "-p", "bob-secret", "-t", "Normal")
    listed = c.mqadmin("listUser", "-c", CLUSTER_NAME)
    assert "bob" in listed, listed
    before = c.java("produce", f"topic={c.orders}", "group=PID_bob", "ak=bob", "sk=bob-secret", "count=1")
    assert before["sent"] == 0, before
    c.mqadmin("createAcl", "-c", CLUSTER_NAME, "-s", "User:bob", "-r", f"Topic:{c.orders},Group:PID_bob",
              "-a", "Pub", "-d", "Allow")
    shown = c.mqadmin("getAcl", "-c", CLUSTER_NAME, "-s", "User:bob")
    assert f"Topic:{c.orders}" in shown, shown

    def allowed() -> bool:
        after = c.java("produce", f"topic={c.orders}", "group=PID_bob", "ak=bob", "sk=bob-secret", "count=1")
        return bool(after["sent"] == 1)
    wait_for(allowed, 30, interval=1, what="bob's new policy to take effect on the NameServer and broker")

    # a real tool creating a topic as bob: refused until bob may Create it
    bob_home = c.home.parent / "bob-home"
    (bob_home / "conf").mkdir(parents=True)
    (bob_home / "conf" / "tools.yml").write_text("accessKey: bob\nsecretKey: bob-secret\n")
    topic = unique("BobTopic")
    refused = c.mqadmin("updateTopic", "-c", CLUSTER_NAME, "-t", topic, home=bob_home, check=False)
    assert "CODE: 16" in refused and f"Topic:{topic}" in refused, refused
    c.mqadmin("updateAcl", "-c", CLUSTER_NAME, "-s", "User:bob", "-r", "Topic:BobTopic*", "-a", "Create",
              "-d", "Allow")
    created = c.mqadmin("updateTopic", "-c", CLUSTER_NAME, "-t", topic, home=bob_home)
    assert "success" in created.lower(), created
