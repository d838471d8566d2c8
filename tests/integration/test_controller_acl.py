"""ACL on the standalone controllers, against real processes: ``rocket local up --secure`` (as
``LocalCluster(secure=True)``: 1 NameServer, 3 ``rocket controller`` processes, broker-a master +
slave in controller mode, ACL and TLS enforced on every port).

* The cluster comes up at all: the brokers' controller requests (ids, registration, heartbeats,
  elections, SyncStateSet changes) are signed and accepted.
* Unsigned requests, an unknown AccessKey and a wrong SecretKey get NO_PERMISSION with a remark
  saying which, and the same connection then serves a signed request.
* A Normal user whose ACL allows ``Get`` on the cluster (created on the brokers, copied by the
  controllers) reads the controller's metadata and SyncStateSets, but may not elect a master
  (``Update``) nor send a code the controller does not classify; the admin (Super) may.
* Manual failover (``Admin.failover``, what ``rocket cluster failover`` runs) needs that
  admin: with the Normal user's keys the controller refuses ELECT_MASTER.
* kill -9 of the master under load: the controllers elect the slave, 0 acknowledged messages
  are lost, and no process logged a refused request (the controllers' NOTIFY_BROKER_ROLE_CHANGED
  to the brokers is signed too).
"""

from __future__ import annotations

import asyncio
import signal
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from rocket.auth import SessionCredentials
from rocket.auth.signature import parse_credentials_file
from rocket.client import Admin, Producer
from rocket.controller.client import ControllerClient
from rocket.local import CLUSTER_NAME, ClusterState, LocalCluster, find_free_base_port
from rocket.remoting import RemotingClient, RemotingCommand, RemotingCommandError, RequestCode, ResponseCode
from rocket.remoting.tls import ClientTls
from tests.integration.failover_support import AckLog, all_bodies
from tests.integration.replication_support import TRANSIENT
from tests.support import eventually, unique

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

OPS = SessionCredentials("ops-reader", "ops-reader-secret-0123")
GROUP = "broker-a"


class Secure:
    """The running cluster, its admin keys and CA."""

    def __init__(self, cluster: LocalCluster, state: ClusterState) -> None:
        self.cluster = cluster
        self.state = state
        self.admin = parse_credentials_file(state.credentials_file)
        self.tls = ClientTls.trusting(state.tls_ca_file)
        self.controllers = [p.addr for p in state.processes if p.kind == "controller"]
        self.http_token = Path(state.http_token_file).read_text().strip()

    def client(self, creds: SessionCredentials | None) -> RemotingClient:
        return RemotingClient(rpc_hook=creds.sign if creds else None, tls=self.tls)

    def log_sizes(self) -> dict[str, int]:
        """Process name -> bytes in its log now."""
        return {p.name: Path(p.log).stat().st_size for p in self.state.processes}

    def logs(self, since: dict[str, int] | None = None) -> str:
        """Every process's log (from the sizes ``since`` on, when given)."""
        out = []
        for p in self.state.processes:
            with open(p.log, "rb") as fh:
                fh.seek((since or {}).get(p.name, 0))
                out.append(fh.read().decode(errors="replace"))
        return "\n".join(out)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    cluster = LocalCluster(tmp_path_factory.mktemp("secure") / "local", find_free_base_port(), secure=True,
                           brokers=1, nameservers=1)
    assert cluster.controllers, "rocket local up --secure must run controller mode"
    state = cluster.start(detach=False, timeout=90)
    try:
        yield Secure(cluster, state)
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def ops_user(secure: Secure) -> SessionCredentials:
    """A Normal user allowed ``Get`` on the cluster, created on the brokers (the NameServer and
    the controllers copy it from there)."""
    async def create() -> None:
        async with Admin(secure.state.namesrv, credentials=secure.admin, tls=secure.tls) as admin:
            await admin.put_user(OPS.access_key, OPS.secret_key)
            await admin.put_acl(OPS.access_key, [f"Cluster:{CLUSTER_NAME}"], ["Get"])

    asyncio.run(create())
    return OPS


@pytest.fixture
async def admin_client(secure: Secure) -> AsyncIterator[RemotingClient]:
    client = secure.client(secure.admin)
    yield client
    await client.close()


async def _leader(secure: Secure, client: RemotingClient) -> str:
    ctl = ControllerClient(secure.controllers, client=client)
    return await eventually(ctl.find_leader, 30, what="a controller leader", retry_on=TRANSIENT)


def test_brokers_and_controllers_signed_everything_at_start(secure: Secure) -> None:
    """The brokers got ids, registered and elected (the cluster is up), and no process refused a
    request: every controller request of the brokers and every notification was signed."""
    assert "denied request" not in secure.logs()


async def test_unsigned_unknown_and_wrong_signatures_are_refused_on_a_usable_connection(secure: Secure) -> None:
    addr = secure.controllers[0]
    meta = RequestCode.CONTROLLER_GET_METADATA_INFO
    for creds, remark in ((None, "has no AccessKey"),
                          (SessionCredentials("nobody", "whatever-secret"), "User:nobody is not found"),
                          (SessionCredentials(secure.admin.access_key, "wrong-secret"), "check signature failed")):
        client = secure.client(creds)
        try:
            conn = await client.connection(addr)
            resp = await client.invoke(addr, RemotingCommand(code=meta), timeout=5)
            assert resp.code == ResponseCode.NO_PERMISSION, (creds, resp)
            assert remark in (resp.remark or ""), resp.remark
            # the connection stays open: the next request on it, signed right, is served
            client.rpc_hook = secure.admin.sign
            resp = await client.invoke(addr, RemotingCommand(code=meta), timeout=5)
            assert resp.code == ResponseCode.SUCCESS, resp
            assert not conn.closed and await client.connection(addr) is conn
        finally:
            await client.close()


async def test_a_normal_user_reads_but_may_not_elect(secure: Secure, ops_user: SessionCredentials,
                                                    admin_client: RemotingClient) -> None:
    ops = secure.client(ops_user)
    try:
        leader = await _leader(secure, admin_client)

        async def ops_known() -> bool:  # every controller copies the brokers' users (every 2 s here)
            for addr in secure.controllers:
                resp = await ops.invoke(addr, RemotingCommand(code=RequestCode.CONTROLLER_GET_METADATA_INFO))
                if resp.code != ResponseCode.SUCCESS:
                    return False
            return True

        await eventually(ops_known, 30, what="the controllers to copy the new user", retry_on=TRANSIENT)
        names = b'["' + GROUP.encode() + b'"]'
        resp = await ops.invoke(leader, RemotingCommand(code=RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=names))
        assert resp.code == ResponseCode.SUCCESS and GROUP.encode() in resp.body, resp
        resp = await ops.invoke(leader, RemotingCommand(code=RequestCode.CONTROLLER_GET_REPLICA_INFO,
                                                        ext_fields={"brokerName": GROUP}))
        assert resp.code == ResponseCode.SUCCESS, resp
        elect = RemotingCommand(code=RequestCode.CONTROLLER_ELECT_MASTER, ext_fields={
            "clusterName": CLUSTER_NAME, "brokerName": GROUP, "brokerId": "1", "designateElect": "true"})
        resp = await ops.invoke(leader, elect)
        assert resp.code == ResponseCode.NO_PERMISSION, resp
        assert f"Cluster:{CLUSTER_NAME} (Update)" in (resp.remark or ""), resp.remark
        # a code the controller does not classify: denied to the Normal user, served (as not
        # supported) for the Super user
        other = RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO)
        resp = await ops.invoke(leader, other)
        assert resp.code == ResponseCode.NO_PERMISSION and "not classified" in (resp.remark or ""), resp
        resp = await admin_client.invoke(leader, RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO))
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, resp
        # the same ELECT_MASTER from the admin passes the check (the controller itself answers)
        resp = await admin_client.invoke(leader, RemotingCommand(code=RequestCode.CONTROLLER_ELECT_MASTER, ext_fields={
            "clusterName": CLUSTER_NAME, "brokerName": GROUP, "brokerId": "-1", "designateElect": "false"}))
        assert resp.code in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST), resp
    finally:
        await ops.close()


async def _replica(secure: Secure, client: RemotingClient) -> tuple[str | None, int, int]:
    info = await ControllerClient(secure.controllers, client=client).get_replica_info(GROUP)
    return info.master_address, info.master_epoch, len(info.sync_state_set)


async def test_manual_failover_needs_the_admin(secure: Secure, ops_user: SessionCredentials,
                                              admin_client: RemotingClient) -> None:
    """``rocket cluster failover`` (Admin.failover): refused with the Normal user's keys, done with
    the admin's."""
    master, epoch, _ = await eventually(lambda: _full_set(secure, admin_client), 60,
                                        what="a master with its slave in sync", retry_on=TRANSIENT)
    await eventually(lambda: _ops_reads_brokers(secure, ops_user), 60, what="the brokers to know the Normal user",
                     retry_on=(*TRANSIENT, RemotingCommandError), interval=0.5)
    # generous timeouts: a status call timing out on the loaded test machine would skip a broker
    async with Admin(secure.state.namesrv, credentials=ops_user, tls=secure.tls, timeout=10) as ops:
        with pytest.raises(RemotingCommandError) as refused:
            await ops.failover(GROUP)
        assert refused.value.code == ResponseCode.NO_PERMISSION, refused.value
    assert (await _replica(secure, admin_client))[0] == master  # nothing changed
    async with Admin(secure.state.namesrv, credentials=secure.admin, tls=secure.tls, timeout=10) as admin:
        status = await admin.failover(GROUP)
    assert status["brokerRole"] != "SLAVE", status
    new_master, new_epoch, _ = await _replica(secure, admin_client)
    assert new_master != master and new_epoch > epoch, (master, epoch, new_master, new_epoch)


async def _full_set(secure: Secure, client: RemotingClient) -> tuple[str, int, int] | None:
    master, epoch, size = await _replica(secure, client)
    return (master, epoch, size) if master and size == 2 else None


async def _ops_reads_brokers(secure: Secure, ops_user: SessionCredentials) -> bool:
    """The NameServer and every broker (slaves copy users from their master) know the user."""
    async with Admin(secure.state.namesrv, credentials=ops_user, tls=secure.tls, timeout=3) as ops:
        info = await ops.cluster_info()
        for addr in info.broker_addr_table[GROUP].broker_addrs.values():
            await ops.broker_ha_status(addr)
    return True


async def test_master_killed_in_a_secure_cluster_elects_with_nothing_lost(secure: Secure,
                                                                          admin_client: RemotingClient) -> None:
    master, epoch, _ = await eventually(lambda: _full_set(secure, admin_client), 60,
                                        what="a master with its slave in sync", retry_on=TRANSIENT)
    victim = next(p for p in secure.state.processes if p.addr == master)
    logged = secure.log_sizes()
    topic = unique("SecureFo")
    async with Admin(secure.state.namesrv, credentials=secure.admin, tls=secure.tls) as admin:
        await admin.create_topic(topic, queue_nums=4, cluster=CLUSTER_NAME)
    producer = Producer(f"PG_{topic}", secure.state.namesrv, poll_namesrv_interval=0.5, fault_avoid_seconds=1.0,
                        send_timeout=3.0, credentials=secure.admin, tls=secure.tls)
    await producer.start()
    load = AckLog(producer, topic)
    try:
        load.start()
        await eventually(lambda: len(load.acked) > 100, 30, what="sends acknowledged before the kill")
        killed = time.monotonic()
        secure.cluster.procs[victim.name].send_signal(signal.SIGKILL)
        await asyncio.to_thread(secure.cluster.procs[victim.name].wait, 10)

        async def new_master() -> str | None:
            addr, new_epoch, _ = await _replica(secure, admin_client)
            return addr if addr and addr != master and new_epoch > epoch else None

        new = await eventually(new_master, 60, what="the controllers to elect the slave", retry_on=TRANSIENT)
        elected = time.monotonic() - killed
        await eventually(lambda: load.first_ack_after(killed, victim.port) is not None, 30,
                         what="sends acknowledged by the new master")
        await asyncio.sleep(1.0)
    finally:
        await load.stop()
        await producer.shutdown()
    on_new = await all_bodies(admin_client, new, topic, 4)
    lost = set(load.acked) - set(on_new)
    print(f"elected after {elected:.2f} s, acknowledged {len(load.acked)}, lost {len(lost)}, "
          f"not ok {load.not_ok}")
    assert len(load.acked) > 100
    assert not lost, sorted(lost)[:10]
    assert "denied request" not in secure.logs(since=logged)  # brokers and controllers signed everything


async def test_the_controller_http_api_needs_a_credential(secure: Secure) -> None:
    """``/api/v1/controller`` answers 401 without a credential, 200 with the HTTP token; probes stay open."""
    info = next(p for p in secure.state.processes if p.kind == "controller")
    url = f"https://127.0.0.1:{info.http_port}"
    token = secure.http_token
    context = ssl.create_default_context(cafile=secure.state.tls_ca_file)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        async with session.get(f"{url}/api/v1/controller") as resp:
            assert resp.status == 401, await resp.text()
        async with session.get(f"{url}/api/v1/controller", headers={"Authorization": f"Bearer {token}"}) as resp:
            assert resp.status == 200 and GROUP in await resp.text()
        async with session.get(f"{url}/healthz") as resp:
            assert resp.status == 200
