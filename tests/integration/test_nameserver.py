"""A real NameServer process (``python -m rocket.cli nameserver``) driven over TCP and HTTP."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from rocket.nameserver import client as ns
from rocket.protocol import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from rocket.remoting import RemotingClient, RemotingCommand, RemotingCommandError, RequestCode, encode
from tests.support import eventually, free_port, rocket_command, running, terminate, wait_port

pytestmark = pytest.mark.timeout(60)


@dataclass
class NameServerProcess:
    proc: subprocess.Popen[bytes]
    port: int
    http_port: int
    log: Path

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


@pytest.fixture(scope="module")
def nameserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NameServerProcess]:
    port, http_port = free_port(), free_port()
    log = tmp_path_factory.mktemp("nameserver") / "nameserver.log"
    argv = rocket_command("nameserver", "--host", "127.0.0.1", "--port", str(port), "--http-port", str(http_port))
    with running(argv, port=port, log_path=log) as proc:
        wait_port(http_port)
        yield NameServerProcess(proc, port, http_port, log)


@pytest.fixture
async def client() -> Any:
    remoting = RemotingClient()
    yield remoting
    await remoting.close()


async def register(client: RemotingClient, addr: str, broker_name: str, broker_addr: str, *topics: str,
                   broker_id: int = 0, version: int = 1, cluster: str = "DefaultCluster",
                   compressed: bool = False) -> ns.RegisterBrokerResponse:
    return await ns.register_broker(
        client, addr, cluster_name=cluster, broker_name=broker_name, broker_addr=broker_addr,
        broker_id=broker_id, ha_server_addr=broker_addr.rsplit(":", 1)[0] + ":10912",
        topic_configs=[TopicConfig(t, 4, 4) for t in topics], data_version=DataVersion(1_700_000_000_000, version),
        compressed=compressed,
    )


async def route_exists(client: RemotingClient, addr: str, topic: str) -> bool:
    try:
        await ns.get_route(client, addr, topic)
    except RemotingCommandError as exc:
        assert exc.code == 17
        return False
    return True


# -- routes --------------------------------------------------------------------------------------


async def test_register_master_and_slave_then_lookup(nameserver: NameServerProcess, client: RemotingClient) -> None:
    addr = nameserver.addr
    master = await register(client, addr, "reg-a", "10.1.0.1:10911", "RegTopic", "%RETRY%reg-group")
    assert master.master_addr is None and master.ha_server_addr is None
    slave = await register(client, addr, "reg-a", "10.1.0.2:10911", "RegTopic", broker_id=1)
    assert (slave.master_addr, slave.ha_server_addr) == ("10.1.0.1:10911", "10.1.0.1:10912")

    route = await ns.get_route(client, addr, "RegTopic")
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        ("reg-a", 4, 4, 6)
    ]
    assert [(b.cluster, b.broker_name, b.broker_addrs) for b in route.broker_datas] == [
        ("DefaultCluster", "reg-a", {0: "10.1.0.1:10911", 1: "10.1.0.2:10911"})
    ]
    assert await route_exists(client, addr, "%RETRY%reg-group")

    # The raw body is standard JSON with quoted brokerId keys.
    raw = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                    ext_fields={"topic": "RegTopic"}, version=63))
    assert raw.code == 0
    assert json.loads(raw.body)["brokerDatas"][0]["brokerAddrs"]["0"] == "10.1.0.1:10911"

    info = await ns.get_cluster_info(client, addr)
    assert info.broker_addr_table["reg-a"].broker_addrs == {0: "10.1.0.1:10911", 1: "10.1.0.2:10911"}
    assert "reg-a" in info.cluster_addr_table["DefaultCluster"]
    assert "RegTopic" in await ns.get_all_topic_list(client, addr)
    assert "RegTopic" in await ns.get_topics_by_cluster(client, addr, "DefaultCluster")

    await ns.unregister_broker(client, addr, cluster_name="DefaultCluster", broker_name="reg-a",
                               broker_addr="10.1.0.2:10911", broker_id=1)
    route = await ns.get_route(client, addr, "RegTopic")
    assert route.broker_datas[0].broker_addrs == {0: "10.1.0.1:10911"}
    await ns.unregister_broker(client, addr, cluster_name="DefaultCluster", broker_name="reg-a",
                               broker_addr="10.1.0.1:10911", broker_id=0)
    assert not await route_exists(client, addr, "RegTopic")


async def test_unknown_topic_answers_17(nameserver: NameServerProcess, client: RemotingClient) -> None:
    with pytest.raises(RemotingCommandError) as info:
        await ns.get_route(client, nameserver.addr, "NoSuchTopic")
    assert info.value.code == 17
    assert (info.value.remark or "").startswith("No topic route info in name server for the topic: NoSuchTopic")


async def test_compressed_registration_and_crc_check(nameserver: NameServerProcess, client: RemotingClient) -> None:
    addr = nameserver.addr
    await register(client, addr, "zip-a", "10.2.0.1:10911", "ZipTopic", compressed=True)
    assert (await ns.get_route(client, addr, "ZipTopic")).queue_datas[0].broker_name == "zip-a"
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({"CrcTopic": TopicConfig("CrcTopic")})).encode()
    request = RemotingCommand(code=RequestCode.REGISTER_BROKER, body=body, ext_fields={
        "brokerName": "crc-a", "brokerAddr": "10.2.0.9:10911", "clusterName": "DefaultCluster",
        "haServerAddr": "10.2.0.9:10912", "brokerId": "0", "bodyCrc32": "12345"})
    response = await client.invoke(addr, request)
    assert (response.code, response.remark) == (1, "crc32 not match")
    assert not await route_exists(client, addr, "CrcTopic")


async def test_wipe_and_restore_write_perm(nameserver: NameServerProcess, client: RemotingClient) -> None:
    addr = nameserver.addr
    await register(client, addr, "perm-a", "10.3.0.1:10911", "PermT1", "PermT2")
    assert await ns.wipe_write_perm_of_broker(client, addr, "perm-a") == 2
    assert (await ns.get_route(client, addr, "PermT1")).queue_datas[0].perm == 4
    # A heartbeat with the same data version keeps the wipe.
    await register(client, addr, "perm-a", "10.3.0.1:10911", "PermT1", "PermT2")
    assert (await ns.get_route(client, addr, "PermT2")).queue_datas[0].perm == 4
    assert await ns.add_write_perm_of_broker(client, addr, "perm-a") == 2
    assert (await ns.get_route(client, addr, "PermT1")).queue_datas[0].perm == 6


async def test_delete_topic_and_kv_config(nameserver: NameServerProcess, client: RemotingClient) -> None:
    addr = nameserver.addr
    await register(client, addr, "del-a", "10.4.0.1:10911", "DelTopic", "KeepTopic")
    await ns.delete_topic_in_namesrv(client, addr, "DelTopic")
    assert not await route_exists(client, addr, "DelTopic")
    assert await route_exists(client, addr, "KeepTopic")
    assert await ns.get_kv_config(client, addr, "it", "k") is None
    await ns.put_kv_config(client, addr, "it", "k", "v")
    assert await ns.get_kv_config(client, addr, "it", "k") == "v"
    await ns.delete_kv_config(client, addr, "it", "k")
    assert await ns.get_kv_config(client, addr, "it", "k") is None
    changed, held = await ns.query_data_version(
        client, addr, cluster_name="DefaultCluster", broker_name="del-a", broker_addr="10.4.0.1:10911",
        broker_id=0, data_version=DataVersion(1_700_000_000_000, 1))
    assert (changed, held) == (False, DataVersion(1_700_000_000_000, 1))


# -- liveness ------------------------------------------------------------------------------------


async def test_connection_close_removes_broker(nameserver: NameServerProcess, client: RemotingClient) -> None:
    addr = nameserver.addr
    broker = RemotingClient()
    await register(broker, addr, "close-a", "10.5.0.1:10911", "CloseTopic")
    await register(client, addr, "close-b", "10.5.0.2:10911", "CloseTopic")  # over the long-lived client
    assert len((await ns.get_route(client, addr, "CloseTopic")).queue_datas) == 2
    await broker.close()

    async def only_b_left() -> bool:
        route = await ns.get_route(client, addr, "CloseTopic")
        return [q.broker_name for q in route.queue_datas] == ["close-b"]

    await eventually(only_b_left, what="close-a removed after its connection closed")
    info = await ns.get_cluster_info(client, addr)
    assert "close-a" not in info.broker_addr_table


async def test_silent_broker_is_evicted(tmp_path: Path) -> None:
    port, http_port = free_port(), free_port()
    argv = rocket_command("nameserver", "--host", "127.0.0.1", "--port", str(port), "--http-port", str(http_port),
                          "--scan-interval", "0.2", "--broker-timeout", "2")
    with running(argv, port=port, log_path=tmp_path / "ns.log"):
        addr = f"127.0.0.1:{port}"
        broker, reader = RemotingClient(), RemotingClient()
        try:
            started = time.monotonic()
            await register(broker, addr, "silent-a", "10.6.0.1:10911", "SilentTopic")
            conn = await broker.connection(addr)
            assert await route_exists(reader, addr, "SilentTopic")

            async def gone() -> bool:
                return not await route_exists(reader, addr, "SilentTopic")

            await eventually(gone, timeout=10, what="silent broker evicted")
            assert time.monotonic() - started >= 2.0  # never before its timeout
            await eventually(lambda: _true_after(conn.closed), timeout=5, what="evicted broker's connection closed")
            wait_port(http_port)
            async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{http_port}/metrics") as r:
                text = await r.text()
            assert 'rocketmq_nameserver_broker_evictions_total{reason="timeout"} 1.0' in text
        finally:
            await broker.close()
            await reader.close()


async def _true_after(value: bool) -> bool:
    return value


# -- bad input -----------------------------------------------------------------------------------


def _frame(header: bytes, body: bytes = b"", length: int | None = None, tag: int | None = None) -> bytes:
    real_length = 4 + len(header) + len(body)
    return struct.pack(">iI", real_length if length is None else length,
                       len(header) if tag is None else tag) + header + body


BAD_FRAMES = {
    "negative length": struct.pack(">i", -5) + b"xxxx",
    "length too small": struct.pack(">i", 2) + b"xx",
    "header longer than frame": _frame(b'{"code":105}', tag=500),
    "header not json": _frame(b"{this is not json"),
    "header json not an object": _frame(b"[1,2,3]"),
    "unknown serialization type": _frame(b'{"code":105}', tag=(7 << 24) | 12),
    "oversized frame": struct.pack(">iI", 64 * 1024 * 1024, 10),
}


@pytest.mark.parametrize("garbage", list(BAD_FRAMES.values()), ids=list(BAD_FRAMES))
async def test_bad_frame_closes_only_its_connection(nameserver: NameServerProcess, client: RemotingClient,
                                                    garbage: bytes) -> None:
    addr = nameserver.addr
    await register(client, addr, "good-a", "10.7.0.1:10911", "GoodTopic")
    good = await client.connection(addr)
    reader, writer = await asyncio.open_connection("127.0.0.1", nameserver.port)
    try:
        writer.write(garbage)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # server closed it, answered nothing
    finally:
        writer.close()
    assert await route_exists(client, addr, "GoodTopic")
    assert (await client.connection(addr)) is good and not good.closed


async def test_close_mid_frame_leaves_others_working(nameserver: NameServerProcess, client: RemotingClient) -> None:
    addr = nameserver.addr
    await register(client, addr, "mid-a", "10.8.0.1:10911", "MidTopic")
    frame = encode(RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "MidTopic"}))
    for cut in (2, 6, len(frame) - 1):
        _, writer = await asyncio.open_connection("127.0.0.1", nameserver.port)
        writer.write(frame[:cut])
        await writer.drain()
        writer.close()
        await writer.wait_closed()
    assert await route_exists(client, addr, "MidTopic")
    # A brand-new connection works as well, including a binary (type 1) header.
    fresh = RemotingClient()
    try:
        cmd = RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "MidTopic"},
                              serialize_type=1)
        response = await fresh.invoke(addr, cmd)
        assert response.code == 0 and response.serialize_type == 1
        assert orjson.loads(response.body)["queueDatas"][0]["brokerName"] == "mid-a"
    finally:
        await fresh.close()


async def test_unknown_code_and_missing_field(nameserver: NameServerProcess, client: RemotingClient) -> None:
    response = await client.invoke(nameserver.addr, RemotingCommand(code=9999))
    assert response.code == 3
    response = await client.invoke(nameserver.addr, RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC))
    assert response.code == 1 and "topic" in (response.remark or "")


# -- HTTP ----------------------------------------------------------------------------------------


async def test_http_endpoints(nameserver: NameServerProcess, client: RemotingClient) -> None:
    await register(client, nameserver.addr, "http-a", "10.9.0.1:10911", "HttpTopic")
    with pytest.raises(RemotingCommandError):
        await ns.get_route(client, nameserver.addr, "HttpMissing")
    async with aiohttp.ClientSession(nameserver.http) as session:
        async with session.get("/healthz") as r:
            assert r.status == 200 and (await r.json())["status"] == "ok"
        async with session.get("/readyz") as r:
            assert r.status == 200 and (await r.json())["status"] == "ready"
        async with session.get("/metrics") as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
            text = await r.text()
        async with session.get("/api/v1/cluster") as r:
            assert r.status == 200
            cluster = await r.json()
        async with session.get("/api/v1/topics/HttpTopic/route") as r:
            assert r.status == 200
            route = await r.json()
        async with session.get("/api/v1/topics/HttpMissing/route") as r:
            assert r.status == 404
            missing = await r.json()
        async with session.get("/api/v1/topics") as r:
            topics = await r.json()
    for name in ("rocketmq_nameserver_brokers ", "rocketmq_nameserver_topics ",
                 'rocketmq_nameserver_route_lookups_total{result="found"}',
                 'rocketmq_nameserver_route_lookups_total{result="not_found"}',
                 "rocketmq_nameserver_broker_evictions_total",
                 'rocketmq_nameserver_request_duration_seconds_bucket{code="103"',
                 'rocketmq_nameserver_request_duration_seconds_count{code="105"}'):
        assert name in text, name
    brokers = [line for line in text.splitlines() if line.startswith("rocketmq_nameserver_brokers ")]
    assert float(brokers[0].split()[1]) >= 1
    assert cluster["brokerAddrTable"]["http-a"]["brokerAddrs"] == {"0": "10.9.0.1:10911"}
    assert "http-a" in cluster["clusterAddrTable"]["DefaultCluster"]
    assert cluster["brokerLiveTable"]["10.9.0.1:10911"]["brokerName"] == "http-a"
    assert route["queueDatas"][0]["brokerName"] == "http-a"
    assert missing["code"] == 17 and "HttpMissing" in missing["error"]
    assert "HttpTopic" in topics["topicList"]


# -- process -------------------------------------------------------------------------------------


async def test_config_file_and_flags(tmp_path: Path) -> None:
    file_port, flag_port, http_port = free_port(), free_port(), free_port()
    config = tmp_path / "ns.toml"
    config.write_text(f'host = "127.0.0.1"\nport = {file_port}\nhttp-port = {http_port}\nbroker-timeout = 30\n')
    with running(rocket_command("nameserver", "--config", str(config), "--port", str(flag_port)), port=flag_port,
                 log_path=tmp_path / "ns.log"):
        wait_port(http_port)
        remoting = RemotingClient()
        try:
            assert await ns.get_all_topic_list(remoting, f"127.0.0.1:{flag_port}") == []
        finally:
            await remoting.close()


def test_bad_config_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"no_such_setting": 1}')
    result = subprocess.run(rocket_command("nameserver", "--config", str(bad)), capture_output=True, timeout=30)
    assert result.returncode == 2 and b"no_such_setting" in result.stderr


def test_sigterm_exits_cleanly(tmp_path: Path) -> None:
    port, http_port = free_port(), free_port()
    log = tmp_path / "ns.log"
    argv = rocket_command("nameserver", "--host", "127.0.0.1", "--port", str(port), "--http-port", str(http_port))
    for sig in (signal.SIGTERM, signal.SIGINT):
        with running(argv, port=port, log_path=log) as proc:
            # A broker stays connected while the NameServer stops.
            with socket.create_connection(("127.0.0.1", port)) as broker:
                body = RegisterBrokerBody(TopicConfigSerializeWrapper({"SigTopic": TopicConfig("SigTopic")}))
                broker.sendall(encode(RemotingCommand(code=RequestCode.REGISTER_BROKER, body=body.encode(),
                                                      ext_fields={"brokerName": "sig-a", "brokerAddr": "10.0.0.1:1",
                                                                  "clusterName": "C", "haServerAddr": "",
                                                                  "brokerId": "0"})))
                broker.settimeout(5)
                assert broker.recv(65536)  # registered
                proc.send_signal(sig)
                assert proc.wait(10) == 0
        lines = log.read_text().splitlines()
        after_start = lines[next(i for i, line in enumerate(lines) if "listening" in line) + 1 :]
        after_start = [line for line in after_start if "registered:" not in line]  # the broker's own INFO lines
        assert len(after_start) == 1 and "NameServer stopped" in after_start[0] and sig.name in after_start[0], lines


def test_a_signal_the_moment_the_port_opens_still_stops_it_cleanly(tmp_path: Path) -> None:
    """The remoting port opens before the HTTP server does; SIGINT sent the moment a connection
    is accepted (the window a supervisor or a test harness hits) must still end in a clean stop,
    exit code 0 and "NameServer stopped (SIGINT)", never the default action's exit 130."""
    for attempt in range(3):
        port, http_port = free_port(), free_port()
        log = tmp_path / f"ns-{attempt}.log"
        argv = rocket_command("nameserver", "--host", "127.0.0.1", "--port", str(port),
                              "--http-port", str(http_port))
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
            try:
                wait_port(port, timeout=30, proc=proc, log_path=log, poll=0.001)
                proc.send_signal(signal.SIGINT)
                assert proc.wait(15) == 0, log.read_text()
            finally:
                terminate(proc, grace=5)
        assert "NameServer stopped (SIGINT)" in log.read_text()
