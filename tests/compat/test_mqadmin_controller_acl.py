"""Compatibility: Apache RocketMQ 5.4.0's ``mqadmin`` against our controllers with ACL and TLS on.

The cluster is ``rocket local up --secure`` (``LocalCluster(secure=True)``: a NameServer, 3
``rocket controller`` processes and broker-a master + slave in controller mode, ACL and TLS
enforced on every port). ``mqadmin`` runs in its TLS mode trusting the cluster's CA
(``-Dtls.enable=true``, ``tls.client.trustCertPath``), once with the admin's keys in
``$ROCKETMQ_HOME/conf/tools.yml`` (it then signs with ``AclClientRPCHook``) and once without:

* getControllerMetaData and getSyncStateSet answer with the keys and are refused
  (NO_PERMISSION, the controller's remark) without them;
* electMaster without keys is refused and changes nothing; with the admin's keys the slave is
  elected (and our broker acts on the controller's signed notification).

Needs Java 17+ and the Apache jars (``bench/compare/java.py``); fails and says why when missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocket.auth.signature import parse_credentials_file
from rocket.controller.client import ControllerClient, ReplicaInfo
from rocket.local import CLUSTER_NAME, ClusterState, LocalCluster, find_free_base_port
from rocket.remoting import RemotingClient
from rocket.remoting.tls import ClientTls
from tests.compat import mqadmin
from tests.compat.mqadmin import fields
from tests.support import wait_for

pytestmark = [pytest.mark.compat, pytest.mark.timeout(600)]

GROUP = "broker-a"


@dataclass
class Secure:
    state: ClusterState
    lib: Path
    admin_home: Path  # conf/tools.yml with the admin's keys
    anon_home: Path  # no tools.yml: mqadmin does not sign

    @property
    def controllers(self) -> list[str]:
        return [p.addr for p in self.state.processes if p.kind == "controller"]

    def mqadmin(self, home: Path, *args: str) -> tuple[int, str]:
        """Run mqadmin in TLS mode trusting the cluster's CA; (exit code, stdout + stderr). A run
        that timed out waiting for an answer (mqadmin's fixed 3 s, which a JVM starting on the
        shared, loaded test machine can use up in its TLS handshake) is run again, twice at most."""
        tls = ("-Dtls.enable=true", "-Dtls.test.mode.enable=false", "-Dtls.client.authServer=true",
               f"-Dtls.client.trustCertPath={self.state.tls_ca_file}", f"-Dtls.config.file={home / 'none.properties'}")
        done = mqadmin.run_once(self.lib, home, *args, jvm=tls, attempts=3)
        return done.returncode, done.stdout + done.stderr

    def ok(self, *args: str) -> str:
        """mqadmin with the admin's keys; fails the test unless it succeeded."""
        code, out = self.mqadmin(self.admin_home, *args)
        assert code == 0 and "command failed" not in out.lower(), f"mqadmin {' '.join(args)}:\n{out}"
        return out

    def replica(self) -> ReplicaInfo:
        """broker-a's master and SyncStateSet as the controller leader holds them (signed; polling only)."""
        async def get() -> ReplicaInfo:
            creds = parse_credentials_file(self.state.credentials_file)
            client = RemotingClient(rpc_hook=creds.sign, tls=ClientTls.trusting(self.state.tls_ca_file))
            try:
                return await ControllerClient(self.controllers, client=client).get_replica_info(GROUP)
            finally:
                await client.close()
        return asyncio.run(get())


def refused(out: str) -> bool:
    """mqadmin's report of a failed command because of our NO_PERMISSION answer (code 16 and the
    controller's remark about the missing AccessKey)."""
    return ("command failed" in out.lower() and ("CODE: 16" in out or "code=16" in out or "NO_PERMISSION" in out)
            and "has no AccessKey" in out)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    lib = mqadmin.jars()
    root = tmp_path_factory.mktemp("mqadmin-controller-acl")
    cluster = LocalCluster(root / "local", find_free_base_port(), secure=True, brokers=1, nameservers=1)
    state = cluster.start(detach=False, timeout=120)
    try:
        admin = parse_credentials_file(state.credentials_file)
        admin_home, anon_home = root / "admin-home", root / "anon-home"
        (admin_home / "conf").mkdir(parents=True)
        (anon_home / "conf").mkdir(parents=True)
        (admin_home / "conf" / "tools.yml").write_text(f"accessKey: {admin.access_key}\n"
                                                       f"secretKey: {admin.secret_key}\n")
        s = Secure(state, lib, admin_home, anon_home)
        wait_for(lambda: (r := s.replica()).master_address and len(r.sync_state_set) == 2, 90,
                 what="broker-a's slave in the SyncStateSet", retry_on=(OSError, Exception))
        yield s
    finally:
        cluster.stop()


def test_get_controller_metadata_with_and_without_keys(secure: Secure) -> None:
    out = fields(secure.ok("getControllerMetaData", "-a", secure.controllers[0]))
    assert out["ControllerGroup"] == "RocketController", out
    assert out["ControllerLeaderAddress"] in secure.controllers, out
    _, text = secure.mqadmin(secure.anon_home, "getControllerMetaData", "-a", secure.controllers[0])
    assert refused(text), text
    assert "ControllerLeaderAddress" not in text


def test_get_sync_state_set_with_and_without_keys(secure: Secure) -> None:
    info = secure.replica()
    out = secure.ok("getSyncStateSet", "-a", secure.controllers[0], "-b", GROUP)
    head = fields(out)
    assert head["brokerName"] == GROUP and head["MasterAddr"] == info.master_address, out
    assert head["SyncStateSetNums"] == "2", out
    _, text = secure.mqadmin(secure.anon_home, "getSyncStateSet", "-a", secure.controllers[0], "-b", GROUP)
    assert refused(text), text
    assert "SyncStateSetNums" not in text


def test_elect_master_needs_the_admin(secure: Secure) -> None:
    before = secure.replica()
    assert before.master_address
    slave_id = next(b for b in sorted(before.sync_state_set) if b != before.master_broker_id)
    leader = fields(secure.ok("getControllerMetaData", "-a", secure.controllers[0]))["ControllerLeaderAddress"]
    args = ("electMaster", "-a", leader, "-c", CLUSTER_NAME, "-bn", GROUP, "-b", str(slave_id))
    _, text = secure.mqadmin(secure.anon_home, *args)
    assert refused(text), text
    assert secure.replica().master_epoch == before.master_epoch  # nothing elected
    out = fields(secure.ok(*args))
    assert out["MasterEpoch"] == str(before.master_epoch + 1), out
    after = secure.replica()
    assert after.master_broker_id == slave_id and after.master_address != before.master_address
    assert out["BrokerMasterAddr"] == after.master_address, out
