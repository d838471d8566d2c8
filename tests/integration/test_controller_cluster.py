"""Three real ``rocket controller`` processes on loopback: Raft leadership, redirects, automatic
master elections, kill -9 of the leader, loss of the majority, restarts from disk, and the
authenticated Raft port.

The brokers here are :class:`RawBroker`: the broker side of RocketMQ 5's controller protocol
driven frame by frame (tests/compat/test_mqadmin_controller.py uses Apache's own broker).
"""

from __future__ import annotations

import asyncio
import os
import pickle
import re
import signal
import socket
import struct
import subprocess
import time
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from rocket.controller.client import ControllerClient
from rocket.protocol.codes import RequestCode, ResponseCode
from rocket.remoting import RemotingClient, RemotingCommandError
from tests.integration.controller_support import (
    SECRET,
    ControllerCluster,
    RawBroker,
    metadata,
    request,
    sync_state_body,
    wait_leader,
)
from tests.support import reserve_ports, rocket_command, running

pytestmark = pytest.mark.timeout(120)

CLUSTER = "DefaultCluster"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerCluster]:
    root = tmp_path_factory.mktemp("controllers")
    c = ControllerCluster(root, extra=["--heartbeat-timeout-ms", "1500"])
    c.start_all()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture()
async def client(cluster: ControllerCluster) -> AsyncIterator[RemotingClient]:
    cluster.start_all()  # every test starts with the three up
    c = RemotingClient()
    try:
        yield c
    finally:
        await c.close()


async def replica_info(client: RemotingClient, addr: str, name: str) -> tuple[int, dict[str, str], dict]:
    resp = await request(client, addr, RequestCode.CONTROLLER_GET_REPLICA_INFO, brokerName=name)
    return resp.code, dict(resp.ext_fields), (orjson.loads(resp.body) if resp.body else {})


async def test_one_leader_answers_writes_and_followers_redirect(cluster: ControllerCluster,
                                                                client: RemotingClient) -> None:
    leader, _ = await wait_leader(client, cluster.addrs)
    followers = [a for a in cluster.addrs if a != leader]
    for f in followers:
        meta = await metadata(client, f)
        assert meta["isLeader"] == "false" and meta["controllerLeaderAddress"] == leader
        assert meta["peers"] == "".join(f"n{i}:{a};" for i, a in enumerate(cluster.addrs))
        resp = await request(client, f, RequestCode.CONTROLLER_APPLY_BROKER_ID, clusterName=CLUSTER,
                             brokerName="redirect-test", appliedBrokerId=1, registerCheckCode="127.0.0.1:1;1")
        assert resp.code == ResponseCode.CONTROLLER_NOT_LEADER, resp.remark
    resp = await request(client, leader, RequestCode.CONTROLLER_APPLY_BROKER_ID, clusterName=CLUSTER,
                         brokerName="redirect-test", appliedBrokerId=1, registerCheckCode="127.0.0.1:1;1")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    # the committed change reaches the followers' state (reads are answered everywhere)
    deadline = time.monotonic() + 5
    for f in followers:
        while True:
            code, _, _ = await replica_info(client, f, "redirect-test")
            if code == ResponseCode.SUCCESS or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert code == ResponseCode.SUCCESS


async def test_a_dead_master_is_replaced_by_the_best_in_sync_replica_and_the_group_is_told(
        cluster: ControllerCluster, client: RemotingClient) -> None:
    leader, _ = await wait_leader(client, cluster.addrs)
    brokers = [RawBroker(CLUSTER, "broker-fo", cluster.addrs) for _ in range(3)]
    try:
        ids = [await b.start(leader) for b in brokers]
        assert ids == [1, 2, 3]
        brokers[1].max_offset, brokers[2].max_offset = 1000, 2000  # broker 3 holds the most
        for b in brokers:
            b.start_heartbeats(timeout_ms=1500)
        await asyncio.sleep(0.5)
        resp = await request(client, leader, RequestCode.CONTROLLER_ELECT_MASTER, clusterName=CLUSTER,
                             brokerName="broker-fo", brokerId=1, designateElect=False)
        assert resp.code == 0 and resp.ext_fields["masterBrokerId"] == "1", resp.remark
        resp = await request(client, leader, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, brokerName="broker-fo",
                             masterBrokerId=1, masterEpoch=1, body=sync_state_body([1, 2, 3], 1))
        assert resp.code == 0 and resp.ext_fields["newSyncStateSetEpoch"] == "2", resp.remark
        for b in brokers:  # the first election was announced to the group too
            await asyncio.wait_for(b.notified.wait(), 5)
            assert b.notifications[-1].ext_fields["masterEpoch"] == "1"
            b.notifications.clear()
            b.notified.clear()

        # 1. the master's connections drop: an election at once
        started = time.monotonic()
        await brokers[0].crash()
        await asyncio.wait_for(brokers[2].notified.wait(), 10)
        took = time.monotonic() - started
        note = brokers[2].notifications[-1]
        assert note.ext_fields["masterBrokerId"] == "3" and note.ext_fields["masterEpoch"] == "2"
        assert note.ext_fields["masterAddress"] == brokers[2].address
        assert orjson.loads(note.body) == {"syncStateSet": [3], "syncStateSetEpoch": 3}
        await asyncio.wait_for(brokers[1].notified.wait(), 5)  # every alive broker is told
        assert took < 5, f"election after the connection closed took {took:.1f} s"

        # 2. the new master hangs (heartbeats stop, connections stay open): elected after its timeout
        resp = await request(client, leader, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, brokerName="broker-fo",
                             masterBrokerId=3, masterEpoch=2, body=sync_state_body([2, 3], 3))
        assert resp.code == 0, resp.remark
        brokers[1].notified.clear()
        started = time.monotonic()
        await brokers[2].stop_heartbeats()
        await asyncio.wait_for(brokers[1].notified.wait(), 10)
        took = time.monotonic() - started
        assert brokers[1].notifications[-1].ext_fields["masterBrokerId"] == "2"
        assert 1.0 < took < 6, f"election {took:.1f} s after the last heartbeat (timeout 1.5 s, scan 1 s)"
        code, header, body = await replica_info(client, leader, "broker-fo")
        assert code == 0 and header["masterBrokerId"] == "2" and header["masterEpoch"] == "3"
        assert body == {"syncStateSet": [2], "syncStateSetEpoch": 5}
    finally:
        for b in brokers:
            await b.crash()


async def test_http_status_and_metrics_show_the_groups_and_elections(cluster: ControllerCluster,
                                                                     client: RemotingClient) -> None:
    leader, _ = await wait_leader(client, cluster.addrs)
    http = cluster.http_ports[cluster.addrs.index(leader)]
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{http}/readyz") as resp:
            assert resp.status == 200 and (await resp.json())["isLeader"] is True
        async with session.get(f"http://127.0.0.1:{http}/api/v1/controller") as resp:
            status = await resp.json()
        async with session.get(f"http://127.0.0.1:{http}/metrics") as resp:
            metrics = await resp.text()
    assert status["isLeader"] and status["leader"]["address"] == leader
    # the previous test ended with every broker of broker-fo gone: the last master (2) died with
    # nobody left to elect, so the group has no master, a new master epoch, and keeps its set
    group = next(g for g in status["brokerGroups"] if g["brokerName"] == "broker-fo")
    assert (group["masterBrokerId"], group["masterEpoch"], group["syncStateSet"]) == (None, 4, [2])
    assert [(b["brokerId"], b["inSync"], b["alive"]) for b in group["brokers"]] == [
        (1, False, False), (2, True, False), (3, False, False)]
    assert "rocketmq_controller_role 1.0" in metrics
    labels = 'broker_set="broker-fo",cluster="DefaultCluster"'
    assert f"rocketmq_controller_master_epoch{{{labels}}} 4.0" in metrics
    assert f"rocketmq_controller_has_master{{{labels}}} 0.0" in metrics
    assert re.search(r'rocketmq_controller_election_total\{' + labels + r',election_result="new_master_elected"\} '
                     r'[1-9]\.0', metrics), metrics


async def test_kill_9_of_the_leader_elects_a_new_one_that_keeps_the_state(cluster: ControllerCluster,
                                                                          client: RemotingClient) -> None:
    leader, _ = await wait_leader(client, cluster.addrs)
    resp = await request(client, leader, RequestCode.CONTROLLER_APPLY_BROKER_ID, clusterName=CLUSTER,
                         brokerName="survives-leader", appliedBrokerId=1, registerCheckCode="127.0.0.1:7;7")
    assert resp.code == 0, resp.remark
    cluster.kill(cluster.addrs.index(leader))
    killed_at = time.monotonic()
    survivors = [a for a in cluster.addrs if a != leader]
    new_leader, _ = await wait_leader(client, survivors, timeout=15)
    took = time.monotonic() - killed_at
    assert took < 8, f"a new controller leader took {took:.1f} s"
    code, _, _ = await replica_info(client, new_leader, "survives-leader")
    assert code == ResponseCode.SUCCESS
    resp = await request(client, new_leader, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, clusterName=CLUSTER,
                         brokerName="survives-leader")
    assert resp.code == 0 and resp.ext_fields["nextBrokerId"] == "2"  # the committed id is remembered


async def test_a_leader_stopping_gracefully_elects_nobody_on_its_way_out(cluster: ControllerCluster,
                                                                         client: RemotingClient) -> None:
    leader, _ = await wait_leader(client, cluster.addrs)
    broker = RawBroker(CLUSTER, "broker-sigterm", cluster.addrs)
    try:
        await broker.start(leader)
        broker.start_heartbeats(timeout_ms=1500)
        await asyncio.sleep(0.5)
        resp = await request(client, leader, RequestCode.CONTROLLER_ELECT_MASTER, clusterName=CLUSTER,
                             brokerName="broker-sigterm", brokerId=1)
        assert resp.code == 0, resp.remark
        i = cluster.addrs.index(leader)
        proc = cluster.procs[i]
        assert proc is not None
        proc.send_signal(signal.SIGTERM)  # closes the broker's connection to it while still leading
        assert proc.wait(15) == 0
        cluster.procs[i] = None
        new_leader, _ = await wait_leader(client, [a for a in cluster.addrs if a != leader], timeout=15)
        await asyncio.sleep(1.0)
        code, header, _ = await replica_info(client, new_leader, "broker-sigterm")
        assert code == 0 and (header["masterBrokerId"], header["masterEpoch"]) == ("1", "1"), header
    finally:
        await broker.crash()


async def test_controller_client_registers_a_broker_and_follows_the_leader(cluster: ControllerCluster,
                                                                           client: RemotingClient) -> None:
    await wait_leader(client, cluster.addrs)
    cc = ControllerClient(reversed(cluster.addrs))
    try:
        bid = await cc.get_next_broker_id(CLUSTER, "broker-cc")
        await cc.apply_broker_id(CLUSTER, "broker-cc", bid, "127.0.0.1:40001;1")
        info = await cc.register_broker(CLUSTER, "broker-cc", bid, "127.0.0.1:40001")
        assert (bid, info.master_broker_id, info.sync_state_set) == (1, None, frozenset())
        info = await cc.elect_master(CLUSTER, "broker-cc", bid)
        assert (info.master_broker_id, info.master_address, info.master_epoch) == (1, "127.0.0.1:40001", 1)
        with pytest.raises(RemotingCommandError) as err:  # a stale SyncStateSet epoch is fenced
            await cc.alter_sync_state_set("broker-cc", 1, 1, [1, 2], 0)
        assert err.value.code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
        old_leader = cc.leader_addr
        assert old_leader is not None
        cluster.kill(cluster.addrs.index(old_leader))
        info = await cc.get_replica_info("broker-cc")  # redirected to the new leader
        assert cc.leader_addr not in (None, old_leader)
        assert (info.master_broker_id, info.master_epoch, info.sync_state_set_epoch) == (1, 1, 1)
    finally:
        await cc.close()


async def test_without_a_majority_nothing_is_written_or_elected_but_reads_answer_and_a_restart_recovers(
        cluster: ControllerCluster, client: RemotingClient) -> None:
    leader, _ = await wait_leader(client, cluster.addrs)
    broker = RawBroker(CLUSTER, "broker-minority", cluster.addrs)
    other = RawBroker(CLUSTER, "broker-minority", cluster.addrs)
    try:
        await broker.start(leader)
        await other.start(leader)
        broker.start_heartbeats(timeout_ms=1500)
        other.start_heartbeats(timeout_ms=1500)
        await asyncio.sleep(0.5)
        resp = await request(client, leader, RequestCode.CONTROLLER_ELECT_MASTER, clusterName=CLUSTER,
                             brokerName="broker-minority", brokerId=1)
        assert resp.code == 0, resp.remark
        resp = await request(client, leader, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                             brokerName="broker-minority", masterBrokerId=1, masterEpoch=1,
                             body=sync_state_body([1, 2], 1))
        assert resp.code == 0, resp.remark
        before = await replica_info(client, leader, "broker-minority")

        # kill two of three, the leader among them, once the survivor has applied the last change
        # (a follower's reads are a committed prefix and may lag by a heartbeat)
        survivor = next(a for a in cluster.addrs if a != leader)
        for _ in range(100):
            if await replica_info(client, survivor, "broker-minority") == before:
                break
            await asyncio.sleep(0.05)
        for a in cluster.addrs:
            if a != survivor:
                cluster.kill(cluster.addrs.index(a))
        await broker.crash()  # the master dies too: with a majority this would elect broker 2
        await asyncio.sleep(4.0)  # > leader fallback (2 s) + heartbeat timeout (1.5 s) + scan (1 s)
        meta = await metadata(client, survivor)
        assert meta["isLeader"] == "false" and "controllerLeaderAddress" not in meta, meta
        resp = await request(client, survivor, RequestCode.CONTROLLER_APPLY_BROKER_ID, clusterName=CLUSTER,
                             brokerName="broker-minority", appliedBrokerId=3, registerCheckCode="127.0.0.1:3;3")
        assert resp.code != ResponseCode.SUCCESS
        resp = await request(client, survivor, RequestCode.CONTROLLER_ELECT_MASTER, clusterName=CLUSTER,
                             brokerName="broker-minority", brokerId=2, designateElect=True)
        assert resp.code == ResponseCode.CONTROLLER_NOT_LEADER
        # no election happened: the only announcement is the first election's
        assert [n.ext_fields["masterEpoch"] for n in other.notifications] in ([], ["1"])
        assert await replica_info(client, survivor, "broker-minority") == before  # reads still answer
        resp = await request(client, survivor, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
                             body=orjson.dumps(["broker-minority"]))
        assert resp.code == 0 and orjson.loads(resp.body)["replicasInfoTable"]["broker-minority"]["masterBrokerId"] == 1

        # every controller down, then up again: the state comes back from disk
        await other.crash()
        cluster.kill(cluster.addrs.index(survivor))
        cluster.start_all()
        new_leader, _ = await wait_leader(client, cluster.addrs, timeout=30)
        assert await replica_info(client, new_leader, "broker-minority") == before
        code, _, _ = await replica_info(client, new_leader, "survives-leader")
        assert code == ResponseCode.SUCCESS
    finally:
        await broker.crash()
        await other.crash()


def _frame(payload: bytes) -> bytes:
    """A pysyncobj TCP frame: native int32 length, then the payload."""
    return struct.pack("i", len(payload)) + payload


class _Exploit:
    """Unpickling this makes a directory: proof that code ran."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os
        return (os.mkdir, (self.path,))


async def test_the_raft_port_runs_no_pickle_and_takes_no_command_from_an_unauthenticated_peer(
        cluster: ControllerCluster, client: RemotingClient, tmp_path: Path) -> None:
    from pysyncobj.encryptor import getEncryptor

    await wait_leader(client, cluster.addrs)
    before = {a: await replica_info(client, a, "survives-leader") for a in cluster.addrs}
    marker = tmp_path / "pwned"
    attacks = [
        zlib.compress(pickle.dumps(_Exploit(marker))),  # code execution on unpickling
        zlib.compress(pickle.dumps(["remove", "127.0.0.1:1"])),  # a pysyncobj utility command
        zlib.compress(pickle.dumps({"type": "apply_command", "command": b"\x01" + pickle.dumps(_Exploit(marker))})),
        # a well-formed Fernet token, but under another secret
        getEncryptor("not-the-secret-0123456789").encrypt(zlib.compress(pickle.dumps(_Exploit(marker)))),
    ]
    for port in (p + 2 for p in cluster.ports):
        for payload in attacks:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(_frame(payload))
                sock.settimeout(5)
                try:
                    data = sock.recv(4096)
                except ConnectionResetError:
                    data = b""
                except TimeoutError:
                    pytest.fail(f"the Raft port {port} kept a connection open after an unauthenticated frame")
                assert data == b"", f"the Raft port {port} answered an unauthenticated frame: {data[:60]!r}"
    # a frame announcing 1 GiB is cut off at once instead of being buffered
    with socket.create_connection(("127.0.0.1", cluster.ports[0] + 2), timeout=5) as sock:
        sock.settimeout(5)
        sock.sendall(struct.pack("i", 1 << 30) + b"\0" * 65536)
        try:
            for _ in range(64):  # up to 4 MiB more: the server must close long before 1 GiB
                sock.sendall(b"\0" * 65536)
            data = sock.recv(1)
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        assert data == b""
    assert not marker.exists(), "an unauthenticated pickle was loaded on the Raft port"
    assert await wait_leader(client, cluster.addrs)
    assert {a: await replica_info(client, a, "survives-leader") for a in cluster.addrs} == before


def test_a_controller_without_a_secret_refuses_to_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ROCKET_CONTROLLER_SECRET"}
    for extra in ([], ["--secret-file", str(tmp_path / "missing")]):
        done = subprocess.run(rocket_command("controller", "--controller-peers", "127.0.0.1:1/2", "--port", "1",
                                             "--data-dir", str(tmp_path / "d"), *extra),
                              capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 2, done.stderr
        assert "secret" in done.stderr
    assert not (tmp_path / "d").exists()


async def test_a_nameserver_can_run_the_controller_on_its_own_port(tmp_path: Path) -> None:
    port = reserve_ports([0, 2])
    addr = f"127.0.0.1:{port}"
    argv = rocket_command("nameserver", "--host", "127.0.0.1", "--port", str(port), "--http-port", "0",
                          "--enable-controller-in-namesrv", "--controller-peers", f"{addr}/{port + 2}",
                          "--controller-data-dir", str(tmp_path / "ctl"))
    with running(argv, port=port, env={"ROCKET_CONTROLLER_SECRET": SECRET}, log_path=tmp_path / "ns.log"):
        client = RemotingClient()
        try:
            leader, _ = await wait_leader(client, [addr])
            assert leader == addr
            resp = await request(client, addr, RequestCode.CONTROLLER_APPLY_BROKER_ID, clusterName=CLUSTER,
                                 brokerName="in-namesrv", appliedBrokerId=1, registerCheckCode="127.0.0.1:5;5")
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            resp = await request(client, addr, RequestCode.GET_BROKER_CLUSTER_INFO)  # still a NameServer
            assert resp.code == ResponseCode.SUCCESS and b"brokerAddrTable" in resp.body
        finally:
            await client.close()
