"""ACL on a NameServer and a broker in one event loop, with our own client: signed and unsigned,
allowed and denied per resource and action; a refusal leaves the connection usable and stores
nothing; users and ACLs survive a restart and reach the NameServer."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rocket.auth import SessionCredentials
from rocket.broker.config import BrokerConfig
from rocket.broker.controller import BrokerController
from rocket.client import Admin, Producer, PullConsumer, build_message
from rocket.client.errors import SendFailedError
from rocket.nameserver.config import NameServerConfig
from rocket.nameserver.server import NameServer
from rocket.remoting import RemotingCommandError, ResponseCode
from tests.integration.broker_harness import broker_port
from tests.support import eventually, free_port, rocket_command, unique

pytestmark = pytest.mark.timeout(90)

ROOT = SessionCredentials("root", "root-secret-1")
APP = SessionCredentials("app", "app-secret-1")
INIT_USER = json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key})


@contextlib.asynccontextmanager
async def _cluster(tmp: Path) -> AsyncIterator[tuple[NameServer, BrokerController, str]]:
    ns = NameServer(NameServerConfig(host="127.0.0.1", port=0, http_port=0, acl_enable=True,
                                     init_authentication_user=INIT_USER, auth_sync_interval=0.3))
    await ns.start()
    namesrv = f"127.0.0.1:{ns.port}"
    cfg = BrokerConfig(broker_name="aclgrp", listen_port=broker_port(), namesrv_addr=namesrv,
                       store_path_root_dir=str(tmp / "broker"), bind_address="127.0.0.1", vip_channel_enable=False,
                       register_name_server_period=1000, acl_enable=True, init_authentication_user=INIT_USER,
                       http_port=free_port())
    cfg.store_overrides.update({"mappedFileSizeCommitLog": str(1 << 20), "maxHashSlotNum": "1000",
                                "maxIndexNum": "4000"})
    broker = BrokerController(cfg)
    await broker.start()
    try:
        yield ns, broker, namesrv
    finally:
        await broker.shutdown()
        await ns.stop()


def _stored(broker: BrokerController, topic: str) -> int:
    return sum(broker.store.get_max_offset_in_queue(topic, q) for q in broker.store.queue_ids(topic))


async def _send(namesrv: str, topic: str, creds: SessionCredentials | None, **kw: Any) -> Any:
    async with Producer(unique("PID"), namesrv, credentials=creds, retries=0, **kw) as producer:
        return await producer.send(build_message(topic, "hello"))


async def test_acl_with_our_client(tmp_path: Path) -> None:
    orders, payments, group = unique("orders"), unique("payments"), unique("CG")
    async with _cluster(tmp_path) as (ns, broker, namesrv):
        async with Admin(namesrv, credentials=ROOT) as admin:
            await eventually(lambda: broker.registered_namesrvs)
            for topic in (orders, payments):
                await admin.create_topic(topic, queue_nums=2)
            await admin.put_user(APP.access_key, APP.secret_key)
            await admin.put_acl(APP.access_key, [f"Topic:{orders}"], ["Pub", "Sub"])
            await admin.put_acl(APP.access_key, [f"Group:{group}"], ["Sub"])
        await eventually(lambda: ns.auth_store.get_acl("User:app") is not None)

        # unsigned, wrong key, unknown user: refused by the NameServer already
        for creds, remark in ((None, "no AccessKey"), (SessionCredentials("app", "wrong"), "signature"),
                              (SessionCredentials("ghost", "x"), "not found")):
            with pytest.raises(RemotingCommandError) as info:
                await _send(namesrv, orders, creds)
            assert info.value.code == ResponseCode.NO_PERMISSION
            assert remark in (info.value.remark or "")

        # allowed topic, then a denied one over the same connections, then allowed again
        async with Producer(unique("PID"), namesrv, credentials=APP, retries=0) as producer:
            assert (await producer.send(build_message(orders, "one"))).msg_id
            with pytest.raises((RemotingCommandError, SendFailedError)) as denied:
                await producer.send(build_message(payments, "nope"))
            assert "Topic:" + payments in str(denied.value)
            assert (await producer.send(build_message(orders, "two"))).msg_id
        assert _stored(broker, orders) == 2
        assert _stored(broker, payments) == 0

        # the broker itself refuses a denied send even with a route in hand (route from root)
        async with Producer(unique("PID"), namesrv, credentials=ROOT, retries=0) as producer:
            await producer.send(build_message(payments, "by root"))
            producer.client.set_credentials(APP)
            with pytest.raises(SendFailedError) as failed:
                await producer.send(build_message(payments, "as app"))
            assert "NO_PERMISSION" in str(failed.value)
        assert _stored(broker, payments) == 1

        # subscribe: allowed group, denied group
        async with PullConsumer(group, namesrv, credentials=APP) as consumer:
            queues = await consumer.queues(orders)
            got = [m for mq in queues for m in (await consumer.pull(mq, 0)).messages]
            assert sorted(m.body for m in got) == [b"one", b"two"]
        async with PullConsumer(unique("CG_other"), namesrv, credentials=APP) as consumer:
            queues = await consumer.queues(orders)
            with pytest.raises(RemotingCommandError) as info:
                await consumer.pull(queues[0], 0)
            assert info.value.code == ResponseCode.NO_PERMISSION and "Group:" in (info.value.remark or "")

        # create topic: denied until granted
        new_topic = unique("newtopic")
        async with Admin(namesrv, credentials=APP) as admin:
            with pytest.raises(RemotingCommandError) as info:
                await admin.create_topic(new_topic)
            assert info.value.code == ResponseCode.NO_PERMISSION
        async with Admin(namesrv, credentials=ROOT) as admin:
            await admin.put_acl(APP.access_key, ["Topic:newtopic*"], ["Create"])
            await admin.put_acl(APP.access_key, ["Cluster:DefaultCluster"], ["Get"])  # cluster info
        async with Admin(namesrv, credentials=APP) as admin:
            await eventually(lambda: ns.auth_store.get_acl("app") is not None and len(
                ns.auth_store.get_acl("app").policies[next(iter(ns.auth_store.get_acl("app").policies))]) >= 4)
            assert await admin.create_topic(new_topic) == ["aclgrp"]
            # a Normal user cannot manage users
            with pytest.raises(RemotingCommandError):
                await admin.put_user("mallory", "x", user_type="Super")
        assert broker.auth_store.get_user("mallory") is None

    # durable: a restarted broker knows the users and ACLs
    async with _cluster(tmp_path) as (ns, broker, namesrv):
        assert broker.auth_store.get_user("app") is not None
        assert broker.auth_store.get_acl("User:app") is not None


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_http_api_needs_a_credential(tmp_path: Path) -> None:
    async with _cluster(tmp_path) as (ns, broker, _namesrv), aiohttp.ClientSession() as http:
        root = {"Authorization": _basic(ROOT.access_key, ROOT.secret_key)}
        wrong = {"Authorization": _basic(ROOT.access_key, "wrong")}
        for port in (broker.http_port, ns.http_port):
            base = f"http://127.0.0.1:{port}"
            for probe in ("/healthz", "/metrics"):
                async with http.get(base + probe) as resp:
                    assert resp.status == 200, probe
            async with http.get(base + "/api/v1/topics") as resp:
                assert resp.status == 401
                assert "credential" in (await resp.json())["error"]
            async with http.get(base + "/api/v1/topics", headers=wrong) as resp:
                assert resp.status == 401
            async with http.get(base + "/api/v1/topics", headers=root) as resp:
                assert resp.status == 200
        base = f"http://127.0.0.1:{broker.http_port}"
        async with http.post(base + "/api/v1/role", json={"role": "MASTER"}) as resp:
            assert resp.status == 401  # no promotion without a credential
        async with http.post(base + "/api/v1/topics", json={"topic": unique("viahttp")}, headers=root) as resp:
            assert resp.status == 201


async def _rocket(*args: str, env: dict[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(*rocket_command(*args), stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT, env={**os.environ, **env})
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode()


async def test_rocket_user_and_acl_commands(tmp_path: Path) -> None:
    creds_file = tmp_path / "admin.credentials"
    creds_file.write_text(f"AccessKey={ROOT.access_key}\nSecretKey={ROOT.secret_key}\n")
    topic = unique("clitopic")
    async with _cluster(tmp_path) as (ns, broker, namesrv):
        await eventually(lambda: broker.registered_namesrvs)
        admin_env = {"ROCKET_NAMESRV": namesrv, "ROCKET_CREDENTIALS_FILE": str(creds_file),
                     "ROCKET_USER_PASSWORD": "cli-user-secret"}
        code, out = await _rocket("topic", "create", topic, env={"ROCKET_NAMESRV": namesrv})
        assert code == 1 and "no AccessKey" in out, out
        for args in (("topic", "create", topic), ("user", "create", "cli"),
                     ("acl", "grant", "cli", "-r", f"Topic:{topic}", "-a", "Pub")):
            code, out = await _rocket(*args, env=admin_env)
            assert code == 0, (args, out)
        code, out = await _rocket("acl", "list", "-o", "json", env=admin_env)
        assert json.loads(out)["acls"][0]["resource"] == f"Topic:{topic}", out
        code, out = await _rocket("user", "list", "-o", "json", env=admin_env)
        assert "cli-user-secret" not in out and {"cli", "root"} <= {u["username"] for u in json.loads(out)["users"]}
        await eventually(lambda: ns.auth_store.get_acl("cli") is not None)
        user_env = {"ROCKET_NAMESRV": namesrv, "ROCKET_ACCESS_KEY": "cli", "ROCKET_SECRET_KEY": "cli-user-secret"}
        code, out = await _rocket("produce", topic, "-c", "2", "-q", env=user_env)
        assert code == 0 and "failed 0" in out, out
        assert _stored(broker, topic) == 2
        code, out = await _rocket("acl", "grant", "cli", "-r", "Topic:x", "-a", "Publish", env=admin_env)
        assert code == 2 and "unknown action" in out, out


async def test_slave_replicates_with_signed_handshake_and_copies_users(tmp_path: Path) -> None:
    from rocket.store.api import BrokerRole
    from rocket.store.ha.protocol import encode_report

    async with _cluster(tmp_path) as (_ns, master, namesrv):
        await eventually(lambda: master.registered_namesrvs)
        async with Admin(namesrv, credentials=ROOT) as admin:
            await admin.put_user(APP.access_key, APP.secret_key)
        slave_cfg = BrokerConfig(broker_name="aclgrp", broker_id=1, broker_role=BrokerRole.SLAVE,
                                 listen_port=broker_port(), namesrv_addr=namesrv,
                                 store_path_root_dir=str(tmp_path / "slave"), bind_address="127.0.0.1",
                                 vip_channel_enable=False, register_name_server_period=1000,
                                 slave_sync_interval=300, ha_send_heartbeat_interval=500,
                                 acl_enable=True, init_authentication_user=INIT_USER)
        slave_cfg.store_overrides.update(master.config.store_overrides)
        slave = BrokerController(slave_cfg)
        await slave.start()
        try:
            await eventually(lambda: slave.ha.client.state == "transferring", 15)
            await eventually(lambda: slave.auth_store.get_user("app") is not None, 15)
            assert (tmp_path / "slave" / "config" / "auth.json").stat().st_mode & 0o777 == 0o600
        finally:
            await slave.shutdown()
        # a plain (unsigned, 4.x-style) replication connection is closed at once
        port = master.ha.service.port
        assert port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode_report(0))
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
