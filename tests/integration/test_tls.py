"""TLS on a NameServer, brokers (remoting, HA, HTTP) and a controller in one event loop, with our own
client and raw sockets: enforcing refuses plaintext with a clean close, permissive serves both on one
port, a slave replicates over TLS, a certificate rotated under load is served to the next handshake
and fails no send. The certificates are made here (a CA and a server certificate for 127.0.0.1,
with the ``cryptography`` library). Real RocketMQ clients over TLS: ``tests/compat/test_tls_java.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rocket.broker.config import BrokerConfig
from rocket.broker.controller import BrokerController
from rocket.client import Admin, Producer, PullConsumer, build_message
from rocket.controller.client import ControllerClient
from rocket.controller.config import ControllerConfig, parse_peers
from rocket.controller.server import ControllerServer
from rocket.nameserver.config import NameServerConfig
from rocket.nameserver.server import NameServer
from rocket.remoting import RemotingClient, RemotingCommand, RemotingConnectError, RequestCode, certs, encode
from rocket.remoting.tls import ClientTls, TlsConfig
from rocket.store.api import BrokerRole
from tests.integration.broker_harness import broker_port
from tests.support import eventually, free_port, unique

pytestmark = pytest.mark.timeout(120)


@dataclass
class Pki:
    """A CA and a server certificate for 127.0.0.1 in ``folder`` (ca.pem, server.pem, server.key)."""

    folder: Path
    ca: certs.KeyPair

    @property
    def ca_file(self) -> Path:
        return self.folder / "ca.pem"

    def issue_server(self) -> int:
        """(Re)write server.pem/server.key, a new certificate; returns its serial number."""
        pair = certs.issue_cert(self.ca, "rocket-test", ["127.0.0.1", "localhost"])
        certs.write_pair(self.folder, "server", pair)
        return pair.serial

    def config(self, mode: str, **extra: Any) -> dict[str, Any]:
        """RocketMQ's tls.* keys for a process of ours: ``mode``, our certificate, TLS to peers."""
        return {"tlsMode": mode, "tls.server.certPath": str(self.folder / "server.pem"),
                "tls.server.keyPath": str(self.folder / "server.key"), "tls.enable": "true",
                "tls.client.trustCertPath": str(self.ca_file), **extra}


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    folder = tmp_path / "tls"
    ca = certs.issue_ca("test CA")
    certs.write_pem(folder / "ca.pem", ca.cert_pem)
    p = Pki(folder, ca)
    p.issue_server()
    return p


def _broker_config(tmp: Path, name: str, namesrv: str, tls: dict[str, Any], **fields: Any) -> BrokerConfig:
    cfg = BrokerConfig(broker_name="tlsgrp", listen_port=broker_port(), namesrv_addr=namesrv,
                       store_path_root_dir=str(tmp / name), bind_address="127.0.0.1", vip_channel_enable=False,
                       register_name_server_period=1000, ha_send_heartbeat_interval=500, http_port=free_port(),
                       **fields)
    cfg.update(tls)
    cfg.store_overrides.update({"mappedFileSizeCommitLog": str(1 << 20), "maxHashSlotNum": "1000",
                                "maxIndexNum": "4000"})
    return cfg


@contextlib.asynccontextmanager
async def _cluster(tmp: Path, pki: Pki, mode: str, *, slave: bool = False
                   ) -> AsyncIterator[tuple[NameServer, list[BrokerController], str]]:
    ns = NameServer(NameServerConfig(host="127.0.0.1", port=0, http_port=0,
                                     tls=TlsConfig.from_properties(pki.config(mode))))
    await ns.start()
    namesrv = f"127.0.0.1:{ns.port}"
    brokers: list[BrokerController] = []
    try:
        brokers.append(BrokerController(_broker_config(tmp, "master", namesrv, pki.config(mode))))
        await brokers[0].start()
        if slave:
            brokers.append(BrokerController(_broker_config(tmp, "slave", namesrv, pki.config(mode),
                                                           broker_role=BrokerRole.SLAVE, broker_id=1)))
            await brokers[1].start()
        await eventually(lambda: all(b.registered_namesrvs for b in brokers), 15)
        yield ns, brokers, namesrv
    finally:
        for b in reversed(brokers):
            await b.shutdown()
        await ns.stop()


def _plain_frame() -> bytes:
    """A plaintext GET_BROKER_CLUSTER_INFO request frame, as a client without TLS sends it."""
    return encode(RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO, opaque=1))


async def _plaintext_answer(port: int) -> bytes:
    """What a plaintext client gets back for one request (b"" = the server closed with a FIN);
    raises ConnectionResetError when the server resets instead."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(_plain_frame())
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()


async def _peer_serial(port: int, ca_file: Path) -> int:
    """The serial number of the certificate the server at ``port`` presents to a new handshake."""
    ctx = ssl.create_default_context(cafile=str(ca_file))
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
    try:
        return int(writer.get_extra_info("peercert")["serialNumber"], 16)
    finally:
        writer.close()


async def test_enforcing_serves_tls_and_closes_plaintext_cleanly(tmp_path: Path, pki: Pki) -> None:
    topic, group = unique("TlsOrders"), unique("CG")
    tls = ClientTls.trusting(pki.ca_file)
    async with _cluster(tmp_path, pki, "enforcing") as (ns, (broker,), namesrv):
        # the broker registered over TLS: the NameServer port takes nothing else
        assert ns.remoting.listener is not None and ns.remoting.listener.tls_accepted >= 1
        async with Admin(namesrv, tls=tls) as admin:
            await admin.create_topic(topic, queue_nums=2)
        async with Producer(unique("PID"), namesrv, tls=tls, retries=0) as producer:
            for i in range(20):
                assert (await producer.send(build_message(topic, f"secret-{i}"))).msg_id
        async with PullConsumer(group, namesrv, tls=tls) as consumer:
            got: list[bytes] = []
            for mq in await consumer.queues(topic):
                got += [m.body for m in (await consumer.pull(mq, 0)).messages]
        assert sorted(got) == sorted(f"secret-{i}".encode() for i in range(20))

        # plaintext: closed at once with a FIN (no reset, no answer), and logged; both ports
        for server in (ns.remoting, broker.remoting):
            listener = server.listener
            assert listener is not None
            refused = listener.refused
            assert await _plaintext_answer(server.port) == b""
            assert listener.refused == refused + 1
        # our client without TLS: a connect error, not a hang
        with pytest.raises(Exception, match=r"tlsMode=enforcing closes plaintext connections"):
            async with Admin(namesrv, tls=False, timeout=2) as admin:
                await admin.cluster_info()
        # a client trusting another CA: the handshake fails and says why
        other = tmp_path / "other-ca.pem"
        certs.write_pem(other, certs.issue_ca("other").cert_pem)
        client = RemotingClient(tls=ClientTls.trusting(other))
        with pytest.raises(RemotingConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.invoke(namesrv, RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO))
        await client.close()

        # no request can turn TLS off (UPDATE_BROKER_CONFIG of a tls key is refused, nothing applied)
        update = RemotingCommand(code=RequestCode.UPDATE_BROKER_CONFIG, body=b"tlsMode=disabled\n")
        client = RemotingClient(tls=tls)
        answer = await client.invoke(broker.config.broker_addr, update)
        await client.close()
        assert answer.code == 1 and "tlsMode" in (answer.remark or ""), answer.remark
        assert broker.config.tls_mode == "enforcing"

        # HTTP: HTTPS only
        url = f"127.0.0.1:{broker.http_port}/healthz"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"https://{url}", ssl=ssl.create_default_context(cafile=str(pki.ca_file))) as r:
                assert r.status == 200
            with pytest.raises(aiohttp.ClientError):
                async with session.get(f"http://{url}") as r:
                    await r.read()


async def test_permissive_serves_tls_and_plaintext_on_one_port(tmp_path: Path, pki: Pki) -> None:
    topic = unique("TlsMixed")
    async with _cluster(tmp_path, pki, "permissive") as (_ns, (broker,), namesrv):
        async with Admin(namesrv, tls=False) as admin:
            await admin.create_topic(topic, queue_nums=1)
        for tls in (False, ClientTls.trusting(pki.ca_file)):
            async with Producer(unique("PID"), namesrv, tls=tls, retries=0) as producer:
                assert (await producer.send(build_message(topic, "mixed"))).msg_id
        listener = broker.remoting.listener
        assert listener is not None and listener.tls_accepted >= 1 and listener.plain_accepted >= 1
        assert listener.refused == 0
        assert len(await _plaintext_answer(broker.remoting.port)) > 0  # a plaintext answer
        url = f"127.0.0.1:{broker.http_port}/healthz"
        async with aiohttp.ClientSession() as session:
            for scheme, ctx in (("http", None), ("https", ssl.create_default_context(cafile=str(pki.ca_file)))):
                async with session.get(f"{scheme}://{url}", ssl=ctx if ctx is not None else True) as r:
                    assert r.status == 200


async def test_slave_replicates_over_tls(tmp_path: Path, pki: Pki) -> None:
    topic = unique("TlsHA")
    async with _cluster(tmp_path, pki, "enforcing", slave=True) as (_ns, (master, slave), namesrv):
        async with Producer(unique("PID"), namesrv, tls=ClientTls.trusting(pki.ca_file), retries=0) as producer:
            for i in range(10):
                assert (await producer.send(build_message(topic, f"ha-{i}"))).msg_id
        await eventually(lambda: slave.store.max_phy_offset == master.store.max_phy_offset > 0, 15)
        ha_listener = master.ha.service.listener
        assert ha_listener is not None and ha_listener.tls_accepted >= 1
        assert await _plaintext_answer(master.ha.service.port or 0) == b""


async def test_certificate_rotation_under_load_fails_no_send(tmp_path: Path, pki: Pki) -> None:
    """Rotate the server certificate three times while producers send (one long-lived connection
    and a new producer, so new handshakes, every 100 ms): no send fails, and each handshake after
    a rotation presents the new certificate. Half-way states (a new certificate with the old key)
    keep the previous context."""
    topic = unique("TlsRotate")
    tls = ClientTls.trusting(pki.ca_file)
    async with _cluster(tmp_path, pki, "enforcing") as (ns, (broker,), namesrv):
        async with Admin(namesrv, tls=tls) as admin:
            await admin.create_topic(topic, queue_nums=2)
        sent, failures = 0, []
        stop = asyncio.Event()

        async def steady() -> None:
            nonlocal sent
            async with Producer(unique("PID"), namesrv, tls=tls, retries=0) as producer:
                while not stop.is_set():
                    try:
                        await producer.send(build_message(topic, "steady"))
                        sent += 1
                    except Exception as exc:
                        failures.append(repr(exc))

        async def fresh() -> None:
            nonlocal sent
            while not stop.is_set():
                try:
                    async with Producer(unique("PID"), namesrv, tls=tls, retries=0) as producer:
                        await producer.send(build_message(topic, "fresh"))
                        sent += 1
                except Exception as exc:
                    failures.append(repr(exc))
                await asyncio.sleep(0.1)

        tasks = [asyncio.create_task(steady()), asyncio.create_task(steady()), asyncio.create_task(fresh())]
        serials = []
        for _ in range(3):
            await asyncio.sleep(0.5)
            new = certs.issue_cert(pki.ca, "rocket-test", ["127.0.0.1"])
            certs.write_pem(pki.folder / "server.pem", new.cert_pem)  # the key follows a moment later
            await asyncio.sleep(0.2)
            certs.write_pem(pki.folder / "server.key", new.key_pem, private=True)
            for port in (ns.port, broker.remoting.port):
                assert await _peer_serial(port, pki.ca_file) == new.serial
            serials.append(new.serial)
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(*tasks)
        assert failures == []
        assert sent > 30
        assert ns.tls is not None and ns.tls.reloads >= 3 and broker.tls is not None and broker.tls.reloads >= 3
        assert len(set(serials)) == 3


async def test_controller_port_and_broker_to_controller_over_tls(tmp_path: Path, pki: Pki) -> None:
    """A controller enforcing TLS elects a controller-mode broker that talks to it over TLS."""
    port = free_port()
    cfg = ControllerConfig(peers=parse_peers(f"127.0.0.1:{port}/{free_port()}"), self_address=f"127.0.0.1:{port}",
                           secret="s" * 20, data_dir=str(tmp_path / "controller"), host="127.0.0.1", port=port,
                           tls=TlsConfig.from_properties(pki.config("enforcing")))
    controller = ControllerServer(cfg)
    await controller.start()
    ns = NameServer(NameServerConfig(host="127.0.0.1", port=0, http_port=None,
                                     tls=TlsConfig.from_properties(pki.config("enforcing"))))
    await ns.start()
    broker = BrokerController(_broker_config(
        tmp_path, "cm", f"127.0.0.1:{ns.port}", pki.config("enforcing"), enable_controller_mode=True,
        controller_addr=f"127.0.0.1:{port}", broker_heartbeat_interval=300, sync_broker_metadata_period=500))
    try:
        await broker.start()
        await eventually(lambda: broker.config.is_master and broker.registered_namesrvs, 20)
        client = ControllerClient([f"127.0.0.1:{port}"], client=RemotingClient(tls=ClientTls.trusting(pki.ca_file)))
        info = await client.get_replica_info("tlsgrp")
        assert info.master_address == broker.config.broker_addr
        await client.client.close()
        listener = controller.remoting.listener
        assert listener is not None and listener.tls_accepted >= 1
        assert await _plaintext_answer(port) == b""
        assert listener.refused == 1
    finally:
        await broker.shutdown()
        await ns.stop()
        await controller.stop()


async def test_client_certificates_when_the_server_requires_them(tmp_path: Path, pki: Pki) -> None:
    """``tls.server.need.client.auth=require``: a client certificate signed by the trusted CA gets in,
    a client without one (or with one of another CA) does not."""
    client_cert, client_key = certs.write_pair(pki.folder, "client", certs.issue_cert(pki.ca, "app", ["app"]))
    stranger = certs.issue_cert(certs.issue_ca("stranger CA"), "x", ["x"])
    other_cert, other_key = certs.write_pair(pki.folder, "stranger", stranger)
    ns = NameServer(NameServerConfig(host="127.0.0.1", port=0, http_port=None, tls=TlsConfig.from_properties(
        pki.config("enforcing", **{"tls.server.need.client.auth": "require",
                                   "tls.server.trustCertPath": str(pki.ca_file)}))))
    await ns.start()
    addr = f"127.0.0.1:{ns.port}"
    request = RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO)
    try:
        ok = RemotingClient(tls=ClientTls.trusting(pki.ca_file, cert_file=str(client_cert), key_file=str(client_key)))
        assert (await ok.invoke(addr, request)).code == 0
        await ok.close()
        for tls in (ClientTls.trusting(pki.ca_file),
                    ClientTls.trusting(pki.ca_file, cert_file=str(other_cert), key_file=str(other_key))):
            refused = RemotingClient(tls=tls)
            with pytest.raises((RemotingConnectError, TimeoutError)):
                await refused.invoke(addr, RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO), timeout=3)
            await refused.close()
        assert ns.remoting.listener is not None and ns.remoting.listener.handshake_failures >= 1
    finally:
        await ns.stop()
