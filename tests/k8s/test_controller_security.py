"""``failover: Controller`` with ``spec.security`` (ACL and TLS Enforcing) on the real API server, with
REAL controllers, NameServer and controller-mode broker on loopback standing in for the pods.

The RocketCluster ``ctlsec`` asks for ACL and ``tls.mode: Enforcing`` with ``issuer: Secret``. The test
makes the admin credentials Secret and the TLS Secret itself (so that the processes it starts use the
same keys and certificates the operator reads), then starts from the operator's own settings
(:func:`rocket_operator.controllers.controller_security_args`, :func:`rocket_operator.security.broker_settings`,
:func:`rocket_operator.security.nameserver_config_json`; only paths differ from the pods'):

* 3 ``rocket controller`` processes with ``--acl-enable --init-authentication-user --inner-credentials
  --cluster`` and ``--tls-mode enforcing --tls-config``;
* a NameServer and one broker (controller mode) with ACL and TLS enforced.

The controllers refuse unsigned requests and plaintext connections (checked first), so
``status.brokerGroups[0]`` showing the controllers' master, epoch and SyncStateSet proves that the
operator's CONTROLLER_GET_REPLICA_INFO was signed with the admin keys and sent over TLS trusting the
CA bundle it wrote from the Secret. The controller StatefulSet stored on the API server carries the
ACL and TLS flags, the security volumes and HTTPS probes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from rocket.auth import SessionCredentials
from rocket.controller.client import ControllerClient
from rocket.remoting import RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode
from rocket.remoting.tls import ClientTls
from rocket_operator import certs, controllers, security
from rocket_operator.security import SecuritySpec, TlsSpec
from tests.integration.broker_harness import broker_port, broker_process
from tests.integration.controller_support import ControllerCluster
from tests.integration.failover_support import CONTROLLER_MODE
from tests.k8s.harness import wait_for
from tests.k8s.test_operator import create, rkc, status
from tests.support import free_port, rocket_command, running, unique

pytestmark = pytest.mark.timeout(240)

CLUSTER = "ctlsec"
TLS_SECRET = f"{CLUSTER}-cert"
SEC = SecuritySpec(acl_enabled=True, tls=TlsSpec(mode="Enforcing", issuer="Secret", secret_name=TLS_SECRET))


@dataclass
class Servers:
    root: Path
    admin: SessionCredentials
    files: dict[str, bytes]  # the TLS Secret's data
    ctl: ControllerCluster
    namesrv: str
    broker: str


def _local(value: str, root: Path) -> str:
    """A pod path (``/etc/rocket-auth/...``, ``/etc/rocket-tls/...``, the controller's /tmp file) in ``root``."""
    for pod_dir, here in ((security.AUTH_MOUNT, "auth"), (security.TLS_MOUNT, "tls"), (controllers.TMP_MOUNT, "tmp")):
        if value.startswith(pod_dir + "/"):
            return str(root / here) + value[len(pod_dir):]
    return value


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    root = tmp_path_factory.mktemp("ctlsec")
    for sub in ("auth", "tls", "tmp", "ctl"):
        (root / sub).mkdir()
    admin = SessionCredentials(security.ADMIN_USERNAME, secrets.token_urlsafe(24))
    creds = root / "auth" / security.CREDENTIALS_KEY
    creds.write_text(f"AccessKey={admin.access_key}\nSecretKey={admin.secret_key}\n")
    now = datetime.datetime.now(datetime.UTC)
    ca_cert, ca_key = certs.new_ca("ctlsec test CA", now)
    cert, key = certs.new_server_cert(ca_cert, ca_key, ["localhost"], now)
    files = {security.TLS_CERT_KEY: cert, security.TLS_KEY_KEY: key, security.CA_CERT_KEY: ca_cert}
    for name, data in files.items():
        (root / "tls" / name).write_bytes(data)
    props = controllers.controller_tls_properties(SEC).splitlines()
    (root / "tmp" / "controller-tls.properties").write_text(
        "".join(f"{k}={_local(v, root)}\n" for k, v in (line.split("=", 1) for line in props)))
    args = [_local(a, root) for a in controllers.controller_security_args(CLUSTER, SEC)]
    ctl = ControllerCluster(root / "ctl", 3, extra=["--heartbeat-timeout-ms",
                                                     CONTROLLER_MODE["controllerHeartBeatTimeoutMills"], *args])
    with contextlib.ExitStack() as stack:
        ctl.start_all()
        stack.callback(ctl.stop)
        ns_cfg = {k: _local(v, root) if isinstance(v, str) else v
                  for k, v in json.loads(security.nameserver_config_json(SEC)).items()}
        (root / "nameserver.json").write_text(json.dumps(ns_cfg))
        ns_port = free_port()
        stack.enter_context(running(rocket_command(
            "nameserver", "--host", "127.0.0.1", "--port", str(ns_port), "--http-port", "0",
            "--config", str(root / "nameserver.json")), port=ns_port, log_path=root / "ns.log"))
        namesrv = f"127.0.0.1:{ns_port}"
        settings = {**CONTROLLER_MODE, "brokerClusterName": CLUSTER, "controllerAddr": ";".join(ctl.addrs),
                    **{k: _local(v, root) for k, v in security.broker_settings(SEC).items()}}
        broker = stack.enter_context(broker_process(root, f"{CLUSTER}-broker-0", namesrv, settings=settings,
                                                    port=broker_port()))
        try:
            yield Servers(root, admin, files, ctl, namesrv, broker.addr)
        except BaseException:
            print(ctl.log_tail())
            raise


async def _replica_info(servers: Servers, *, signed: bool, tls: bool) -> Any:
    remoting = RemotingClient(connect_timeout=2.0, tls=ClientTls.trusting(
        servers.root / "tls" / "ca.crt", verify=False) if tls else None)
    ctl = ControllerClient(servers.ctl.addrs, client=remoting, timeout=2.0, redirect_timeout=2.0,
                           rpc_hook=servers.admin.sign if signed else None)
    try:
        return await ctl.get_replica_info(f"{CLUSTER}-broker-0")
    finally:
        await remoting.close()


async def _metadata_code(servers: Servers, *, signed: bool) -> int:
    """The code of CONTROLLER_GET_METADATA_INFO to the first controller over TLS, signed or not."""
    remoting = RemotingClient(connect_timeout=2.0, tls=ClientTls.trusting(servers.root / "tls" / "ca.crt",
                                                                          verify=False),
                              rpc_hook=servers.admin.sign if signed else None)
    try:
        response = await remoting.invoke(servers.ctl.addrs[0], RemotingCommand(
            code=int(RequestCode.CONTROLLER_GET_METADATA_INFO)), timeout=3.0)
        return int(response.code)
    finally:
        await remoting.close()


def _secret(name: str, data: dict[str, bytes]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


def test_operator_reads_acl_and_tls_controllers(api: Any, operator: Any, servers: Servers) -> None:
    def elected() -> Any:
        info = asyncio.run(_replica_info(servers, signed=True, tls=True))
        return info if info.master_broker_id is not None else None  # (no master elected yet: asked again)

    info = wait_for(elected, 60, retry_on=(RemotingError,), what="the controllers' master of the group")
    # the witnesses: the controllers refuse a plaintext connection and an unsigned request
    with pytest.raises((RemotingError, OSError, TimeoutError)):
        asyncio.run(_replica_info(servers, signed=True, tls=False))
    assert asyncio.run(_metadata_code(servers, signed=False)) == ResponseCode.NO_PERMISSION
    assert asyncio.run(_metadata_code(servers, signed=True)) == ResponseCode.SUCCESS

    ns = unique("cs")
    core = client.CoreV1Api(api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    resolver = operator.resolver
    resolver.nameserver_addrs[CLUSTER] = [servers.namesrv]
    resolver.broker_addrs[f"{CLUSTER}-broker-master-0"] = servers.broker
    for i, addr in enumerate(servers.ctl.addrs):
        resolver.controller_addrs[f"{CLUSTER}-controller-{i}"] = addr
    try:
        a = servers.admin
        core.create_namespaced_secret(ns, _secret(security.admin_secret(CLUSTER), {
            security.ACCESS_KEY: a.access_key.encode(), security.SECRET_KEY: a.secret_key.encode(),
            security.CREDENTIALS_KEY: f"AccessKey={a.access_key}\nSecretKey={a.secret_key}\n".encode()}))
        core.create_namespaced_secret(ns, _secret(TLS_SECRET, servers.files))
        create(api, ns, rkc(CLUSTER, broker={"groups": 1, "replicasPerGroup": 0}, security={
            "acl": {"enabled": True}, "tls": {"mode": "Enforcing", "issuer": "Secret", "secretName": TLS_SECRET}}))

        def group() -> dict[str, Any] | None:
            groups = status(api, ns, CLUSTER).get("brokerGroups") or []
            return groups[0] if groups and groups[0].get("master", {}).get("pod") else None

        entry = wait_for(group, 90, what="status.brokerGroups from the controllers")
        assert "controllerError" not in entry
        assert entry["master"] == {"brokerId": info.master_broker_id, "address": servers.broker,
                                   "pod": f"{CLUSTER}-broker-master-0"}
        assert entry["masterEpoch"] == info.master_epoch and entry["syncStateSet"] == [info.master_broker_id]
        assert entry["roles"] == {f"{CLUSTER}-broker-master-0": "master"}

        # the controller pods as stored on the API server
        sts = client.AppsV1Api(api).read_namespaced_stateful_set(f"{CLUSTER}-controller", ns)
        pod = api.sanitize_for_serialization(sts.spec.template.spec)
        container = pod["containers"][0]
        script = container["command"][-1]
        assert ("--acl-enable --init-authentication-user /etc/rocket-auth/credentials --inner-credentials "
                f"/etc/rocket-auth/credentials --cluster {CLUSTER} --tls-mode enforcing "
                "--tls-config /tmp/controller-tls.properties") in script
        assert "tls.server.certPath=/etc/rocket-tls/tls.crt" in script
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["admin-credentials"]["secret"]["secretName"] == security.admin_secret(CLUSTER)
        assert volumes["tls"]["secret"]["secretName"] == TLS_SECRET
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/etc/rocket-auth", "/etc/rocket-tls", "/tmp"} <= mounts
        assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
    finally:
        resolver.nameserver_addrs.pop(CLUSTER, None)
        resolver.broker_addrs.pop(f"{CLUSTER}-broker-master-0", None)
        for i in range(3):
            resolver.controller_addrs.pop(f"{CLUSTER}-controller-{i}", None)
        with contextlib.suppress(Exception):
            core.delete_namespace(ns)
