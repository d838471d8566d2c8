"""``spec.broker.failover`` without a control plane: the rendered objects of Controller vs Manual,
the restart order by ACTUAL role (``rocket_operator.failover``), and the rollout step against
:class:`tests.k8s.fakes.FakeAdmin` playing the controllers (no API server call is made except the
pod deletions, which the test records)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rocket_operator import builders, controllers, failover, names, rollout, steps
from rocket_operator.admin import Registration
from rocket_operator.builders import Capabilities, Owner
from rocket_operator.failover import BrokerRole, GroupState
from rocket_operator.kube import Credentials, KubeClient
from rocket_operator.spec import SpecError, parse_spec
from tests.k8s.fakes import FAKE_NAMESERVER, FakeAdmin, TestResolver

OWNER = Owner(namespace="prod", name="rc", uid="uid-1")


def kinds(children: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(c["kind"], c["metadata"]["name"]) for c in children}


# -- spec and rendered objects -------------------------------------------------------------------

def test_failover_defaults_to_controller_and_refuses_other_values() -> None:
    assert parse_spec({}).broker.failover == "Controller" and parse_spec({}).broker.controller_mode
    assert not parse_spec({"broker": {"failover": "Manual"}}).broker.controller_mode
    with pytest.raises(SpecError, match=r"spec.broker.failover must be one of Controller, Manual"):
        parse_spec({"broker": {"failover": "Auto"}})


def test_controller_mode_renders_controllers_and_controller_mode_brokers() -> None:
    spec = parse_spec({"broker": {"groups": 2, "replicasPerGroup": 2, "brokerRole": "SYNC_MASTER",
                                  "storage": {"storageClassName": "fast"},
                                  "config": {"enableControllerMode": "false", "allAckInSyncStateSet": "true"}}})
    extra = controllers.controller_children(OWNER, spec, Capabilities.for_version(1, 20))
    assert kinds(extra) == {("Service", "rc-controller"), ("StatefulSet", "rc-controller"),
                            ("PodDisruptionBudget", "rc-controller")}
    svc, sts, pdb = extra
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"remoting": 9878, "raft": 9880, "http": 9879}
    assert pdb["apiVersion"] == "policy/v1beta1" and pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == {names.LABEL_INSTANCE: "rc", names.LABEL_COMPONENT: "controller"}
    s = sts["spec"]
    assert s["replicas"] == 3 and s["serviceName"] == "rc-controller" and s["podManagementPolicy"] == "Parallel"
    assert s["updateStrategy"] == {"type": "RollingUpdate"}
    claim = s["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "data" and claim["spec"]["storageClassName"] == "fast"
    pod = s["template"]["spec"]
    container = pod["containers"][0]
    script = container["command"][-1]
    peers = ",".join(f"rc-controller-{i}.rc-controller.prod.svc:9878/9880" for i in range(3))
    assert f"controller --controller-peers {peers} " in script
    assert '--self-addr "$HOSTNAME.rc-controller.prod.svc:9878"' in script
    assert "--secret-file /etc/rocket/controller/raft-secret" in script and "--raft-bind-host 0.0.0.0" in script
    assert "--data-dir /var/lib/rocket/controller/raft" in script
    assert "ROCKET_CONTROLLER_SECRET" not in str(sts) and "env" not in container  # never in the environment
    assert {"name": "raft-secret", "secret": {"secretName": "rc-controller-secret", "defaultMode": 0o440}} \
        in pod["volumes"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert pod["securityContext"]["runAsNonRoot"] and container["securityContext"]["readOnlyRootFilesystem"]

    conf = builders.broker_config_text(OWNER, spec)
    addr = ";".join(f"rc-controller-{i}.rc-controller.prod.svc:9878" for i in range(3))
    assert "enableControllerMode=true\n" in conf and f"controllerAddr={addr}\n" in conf
    assert "brokerRole" not in conf and "allAckInSyncStateSet=true" in conf  # user keys kept, role not fixed
    for broker_id in (0, 1, 2):
        broker = builders.build_broker_statefulset(OWNER, spec, broker_id, 2)
        script = broker["spec"]["template"]["spec"]["containers"][0]["command"][-1]
        assert "--broker-id" not in script and "--role" not in script
        assert names.LABEL_ROLE not in broker["spec"]["template"]["metadata"]["labels"]
        assert broker["spec"]["selector"]["matchLabels"][names.LABEL_BROKER_ID] == str(broker_id)


def test_manual_mode_keeps_fixed_roles_and_no_controllers() -> None:
    spec = parse_spec({"broker": {"groups": 2, "replicasPerGroup": 1, "failover": "Manual"}})
    assert controllers.controller_children(OWNER, spec) == []
    conf = builders.broker_config_text(OWNER, spec)
    assert "enableControllerMode" not in conf and "controllerAddr" not in conf and "brokerRole=ASYNC_MASTER" in conf
    slave = builders.build_broker_statefulset(OWNER, spec, 1, 2)
    assert "--broker-id 1" in slave["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert "--role SLAVE" in slave["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert slave["spec"]["template"]["metadata"]["labels"][names.LABEL_ROLE] == "slave"


def test_raft_secret_is_random_owned_and_long_enough() -> None:
    first, second = controllers.new_raft_secret(), controllers.new_raft_secret()
    assert first != second and len(first) >= 40
    secret = controllers.build_controller_secret(OWNER, first)
    assert secret["metadata"]["name"] == "rc-controller-secret" and secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["raft-secret"]).decode() == first
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


@pytest.mark.parametrize("version", ["1.25.0", "1.37.0"])
def test_controller_objects_validate_against_current_kubernetes(version: str) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    spec = parse_spec({"broker": {"replicasPerGroup": 2}})
    caps = Capabilities.for_version(1, int(version.split(".")[1]))
    for child in [*controllers.controller_children(OWNER, spec, caps),
                  controllers.build_controller_secret(OWNER, "x" * 43),
                  *builders.desired_children(OWNER, spec, caps=caps)]:
        kv.validate(child, version, strict=True)


# -- restart order by actual role (pure) ----------------------------------------------------------

def view(name: str, broker_id: int, group: int, revision: str = "old") -> rollout.PodView:
    return rollout.PodView(name, broker_id, group, revision, True, False)


def state(index: int, master: int | None, sync: tuple[int, ...], roles: dict[str, tuple[int, str]],
          error: str = "") -> GroupState:
    return GroupState(index=index, name=f"rc-broker-{index}", master_id=master, master_address=f"10.0.0.{master}:10911",
                      master_epoch=3, sync_state_set=sync, sync_state_set_epoch=5,
                      brokers=tuple(BrokerRole(pod, cid, role) for pod, (cid, role) in roles.items()), error=error)


# group 0: the controllers moved the master to the slave-1 pod (controller id 2); group 1: as created
G0 = state(0, 2, (1, 2), {"rc-broker-master-0": (1, "SLAVE"), "rc-broker-slave-1-0": (2, "MASTER")})
G1 = state(1, 1, (1, 2), {"rc-broker-master-1": (1, "MASTER"), "rc-broker-slave-1-1": (2, "SLAVE")})
PODS = [view("rc-broker-master-0", 0, 0), view("rc-broker-master-1", 0, 1),
        view("rc-broker-slave-1-0", 1, 0), view("rc-broker-slave-1-1", 1, 1)]


def test_restart_order_follows_the_controllers_not_the_ordinal() -> None:
    roles = failover.actual_roles({0: G0, 1: G1})
    assert roles == {"rc-broker-master-0": "slave", "rc-broker-slave-1-0": "master",
                     "rc-broker-master-1": "master", "rc-broker-slave-1-1": "slave"}
    order = [p.name for p in failover.restart_order(PODS, roles)]
    # group by group (the highest first), in each the actual slave first: in group 0 that is the pod of
    # the master StatefulSet, and the actual master (the slave StatefulSet's pod) goes last
    assert order == ["rc-broker-slave-1-1", "rc-broker-master-1", "rc-broker-master-0", "rc-broker-slave-1-0"]
    # the Manual order would restart group 0's actual master before its slave
    assert [p.name for p in rollout.restart_order(PODS)].index("rc-broker-slave-1-0") < \
        [p.name for p in rollout.restart_order(PODS)].index("rc-broker-master-0")


def test_status_fields_name_the_real_master_and_set() -> None:
    assert G0.status_fields() == {
        "master": {"brokerId": 2, "address": "10.0.0.2:10911", "pod": "rc-broker-slave-1-0"},
        "masterEpoch": 3, "syncStateSet": [1, 2], "syncStateSetEpoch": 5,
        "roles": {"rc-broker-master-0": "slave", "rc-broker-slave-1-0": "master"}}
    broken = state(0, None, (), {"rc-broker-master-0": (1, "SLAVE")}, error="no controller leader")
    assert broken.status_fields() == {"roles": {"rc-broker-master-0": "unknown"},
                                      "controllerError": "no controller leader"}


@pytest.mark.parametrize("group, reason", [
    (G0, ""),
    (state(0, None, (), {"p": (1, "SLAVE")}), "rc-broker-0 has no master yet"),
    (state(0, 1, (1,), {"p": (1, "MASTER")}, error="timeout"), "cannot read rc-broker-0 from the controllers"),
    (state(0, 1, (1, 2), {"p": (1, "MASTER"), "q": (None, "")}), "cannot read the role of q"),
    (state(0, 2, (1, 2), {"p": (1, "MASTER"), "q": (2, "SLAVE")}), "waiting for p to run as slave"),
    (state(0, 1, (1,), {"p": (1, "MASTER"), "q": (2, "SLAVE")}), "waiting for q to join the SyncStateSet"),
])
def test_a_group_is_settled_only_with_roles_agreed_and_everyone_in_sync(group: GroupState, reason: str) -> None:
    got = failover.settled_reason(group)
    assert got.startswith(reason) and (reason or not got)


def test_next_step_switches_a_master_first_and_deletes_slaves() -> None:
    groups = {0: G0, 1: G1}
    slave_pick = view("rc-broker-master-0", 0, 0)
    assert failover.next_step(slave_pick, groups, set()).delete == slave_pick
    master_pick = view("rc-broker-master-1", 0, 1)
    step = failover.next_step(master_pick, groups, {"rc-broker-slave-1-1"})
    assert step.delete is None and step.switch is not None
    assert (step.switch.from_pod, step.switch.to_id, step.switch.to_pod) == (
        "rc-broker-master-1", 2, "rc-broker-slave-1-1")
    # 1 master + 2 slaves: the slave already on the new revision is preferred over the lower id
    three = state(1, 1, (1, 2, 3), {"m": (1, "MASTER"), "a": (2, "SLAVE"), "b": (3, "SLAVE")})
    assert failover.master_switch_target(three, {"b"}).pod == "b"  # type: ignore[union-attr]
    assert failover.master_switch_target(three, set()).pod == "a"  # type: ignore[union-attr]
    # no in-sync slave: wait, never restart the master
    lonely = state(1, 1, (1,), {"rc-broker-master-1": (1, "MASTER"), "rc-broker-slave-1-1": (2, "SLAVE")})
    step = failover.next_step(master_pick, {1: lonely}, set())
    assert step.delete is None and step.switch is None and "no in-sync slave of rc-broker-1" in step.waiting
    # a group of one broker has nobody to switch to: restarted as it is
    single = state(1, 1, (1,), {"rc-broker-master-1": (1, "MASTER")})
    assert failover.next_step(master_pick, {1: single}, set()).delete == master_pick


# -- the rollout step against fake controllers ---------------------------------------------------

@pytest.fixture
async def ctx() -> AsyncIterator[tuple[steps.Context, FakeAdmin]]:
    admin = FakeAdmin()
    kube = KubeClient(Credentials(server="http://127.0.0.1:1"), timeout=2.0)
    try:
        yield steps.Context(kube=kube, resolver=TestResolver(), admin=admin), admin
    finally:
        await kube.close()


def observed() -> steps.Observed:
    statefulsets = {bid: {"metadata": {"name": names.broker_statefulset("rc", bid), "generation": 1},
                          "spec": {"replicas": 1}, "status": {"observedGeneration": 1, "updateRevision": "new"}}
                    for bid in (0, 1)}
    return steps.Observed(namespace="ns", name="rc", uid="uid-1", generation=1, status={}, raw_spec={},
                          annotations=None, statefulsets=statefulsets,
                          statefulset_names={s["metadata"]["name"] for s in statefulsets.values()})


async def test_rollout_step_switches_the_master_through_the_controllers(ctx: tuple[steps.Context, FakeAdmin]
                                                                       ) -> None:
    context, admin = ctx
    spec = parse_spec({"broker": {"groups": 1, "replicasPerGroup": 1}})

    async def one_pass(revisions: dict[str, str]) -> steps.Rollout:
        seen = observed()
        plan = steps.plan_brokers(seen, spec, "2026-01-02T03:04:05Z")
        pods = [view(name, bid, 0, revisions[name]) for name, bid in
                (("rc-broker-master-0", 0), ("rc-broker-slave-1-0", 1))]
        members = steps.Members(nameservers=[FAKE_NAMESERVER], nameservers_ready=1, broker_pods=pods,
                                registration=Registration(per_nameserver={FAKE_NAMESERVER: {
                                    "rc-broker-0": {0: "rc-broker-0@master"}}}), controllers_ready=3)
        assert (await steps.observe_roles(context, seen, spec, plan.replicas, members)).waiting == []
        group = members.roles[0].status_fields()
        assert group["master"]["pod"] == ("rc-broker-master-0" if admin.master_ids.get("rc-broker-0", 1) == 1
                                          else "rc-broker-slave-1-0")
        return await steps.roll_brokers(context, seen, spec, plan, members,
                                        [{"name": "rc-broker-0", "index": 0, "state": "Active", "registered": True}])

    deleted: list[str] = []

    async def delete(api_version: str, kind: str, namespace: str, name: str, **kw: Any) -> bool:
        deleted.append(f"{kind}/{name}")
        return True

    context.kube.delete = delete  # type: ignore[method-assign]
    # the slave StatefulSet's pod is the actual slave: it is restarted first
    part = await one_pass({"rc-broker-master-0": "old", "rc-broker-slave-1-0": "old"})
    assert deleted == ["Pod/rc-broker-slave-1-0"] and part.status["restarting"] == "rc-broker-slave-1-0"
    # only the master is outdated: its master role moves to the (updated) slave first, nothing deleted
    part = await one_pass({"rc-broker-master-0": "old", "rc-broker-slave-1-0": "new"})
    assert admin.calls_of("switch_master") == [("switch_master", "rc-broker-0", 2)]
    assert part.status == {"outdatedPods": ["rc-broker-master-0"], "switchedMaster": {
        "group": "rc-broker-0", "from": "rc-broker-master-0", "to": "rc-broker-slave-1-0"}}
    assert [e[1] for e in part.events] == ["MasterSwitched"]
    assert deleted == ["Pod/rc-broker-slave-1-0"]
    # next pass: the old master now runs as a slave and is restarted as one (no second switch)
    part = await one_pass({"rc-broker-master-0": "old", "rc-broker-slave-1-0": "new"})
    assert deleted == ["Pod/rc-broker-slave-1-0", "Pod/rc-broker-master-0"]
    assert len(admin.calls_of("switch_master")) == 1


def test_write_fence_moves_with_the_restart_and_is_released_at_the_end() -> None:
    plan = failover.plan_fence
    # one group: nowhere else to send, no fence
    assert plan(None, 0.0, "rc-broker-0", 1) == failover.FenceStep(proceed=True)
    # two groups: fence first, wait the settle time, then go
    first = plan(None, 0.0, "rc-broker-1", 2)
    assert first.fence == "rc-broker-1" and not first.proceed and first.release is None
    assert not plan("rc-broker-1", 1.0, "rc-broker-1", 2).proceed
    assert plan("rc-broker-1", 3.5, "rc-broker-1", 2) == failover.FenceStep(proceed=True)
    # the rollout moves on to another group: release the old one; the new one waits for the producers'
    # route refresh so that none of them sees both groups refusing writes
    moved = plan("rc-broker-1", 60.0, "rc-broker-0", 2, route_refresh=30.0)
    assert (moved.release, moved.fence, moved.proceed) == ("rc-broker-1", None, False)
    assert plan(None, 0.0, "rc-broker-0", 2, resumed_for=10.0, route_refresh=30.0).fence is None
    assert plan(None, 0.0, "rc-broker-0", 2, resumed_for=31.0, route_refresh=30.0).fence == "rc-broker-0"
    # nothing left: release
    assert plan("rc-broker-0", 9.0, None, 2) == failover.FenceStep(release="rc-broker-0", proceed=False)


async def test_rollout_step_fences_each_group_once_and_switches_its_master(ctx: tuple[steps.Context, FakeAdmin]
                                                                         ) -> None:
    context, admin = ctx
    spec = parse_spec({"broker": {"groups": 2, "replicasPerGroup": 1, "clientRouteRefreshSeconds": 5}})
    deleted: list[str] = []

    async def delete(api_version: str, kind: str, namespace: str, name: str, **kw: Any) -> bool:
        deleted.append(name)
        return True

    context.kube.delete = delete  # type: ignore[method-assign]
    seen = observed()
    for sts in seen.statefulsets.values():
        sts["spec"]["replicas"] = 2
    plan = steps.plan_brokers(seen, spec, "2026-01-02T03:04:05Z")
    table = {f"rc-broker-{g}": {0: f"rc-broker-{g}@master"} for g in (0, 1)}
    entries = [{"name": f"rc-broker-{g}", "index": g, "state": "Active", "registered": True} for g in (0, 1)]
    new: set[str] = set()
    perms = lambda: [c[1:] for c in admin.calls_of("set_write_permission")]  # noqa: E731

    async def one_pass() -> steps.Rollout:
        pods = [view(names.broker_pod("rc", bid, g), bid, g, "new" if names.broker_pod("rc", bid, g) in new
                     else "old") for g in (0, 1) for bid in (0, 1)]
        members = steps.Members(nameservers=[FAKE_NAMESERVER], nameservers_ready=1, broker_pods=pods,
                                registration=Registration(per_nameserver={FAKE_NAMESERVER: table}),
                                controllers_ready=3)
        await steps.observe_roles(context, seen, spec, plan.replicas, members)
        part = await steps.roll_brokers(context, seen, spec, plan, members, entries)
        seen.status = {"rollout": part.status} if part.status else {}
        return part

    def age(key: str) -> None:  # as if the record were written long ago
        seen.status["rollout"][key]["since"] = "2000-01-01T00:00:00Z"

    part = await one_pass()  # group 1 first: made read-only, nothing restarts yet
    assert perms() == [("rc-broker-1", False)] and deleted == [] and [e[1] for e in part.events] == ["WritesPaused"]
    await one_pass()
    assert deleted == []  # within the settle time
    age("writeFence")
    await one_pass()  # its actual slave restarts, the fence stays
    assert deleted == ["rc-broker-slave-1-1"] and seen.status["rollout"]["writeFence"]["group"] == "rc-broker-1"
    new.add("rc-broker-slave-1-1")
    part = await one_pass()  # its master: moved to the (updated) slave first, not deleted
    assert admin.calls_of("switch_master") == [("switch_master", "rc-broker-1", 2)] and len(deleted) == 1
    assert part.status["switchedMaster"]["to"] == "rc-broker-slave-1-1"  # type: ignore[index]
    await one_pass()  # the old master runs as a slave now: restarted as one
    assert deleted == ["rc-broker-slave-1-1", "rc-broker-master-1"]
    new.add("rc-broker-master-1")
    await one_pass()  # group 0 next: group 1 takes writes again, group 0 waits for the route refresh
    assert perms()[1:] == [("rc-broker-1", True)] and "writeFence" not in seen.status["rollout"]
    age("writesResumed")
    await one_pass()
    assert perms()[2:] == [("rc-broker-0", False)]
    new.update({"rc-broker-master-0", "rc-broker-slave-1-0"})
    part = await one_pass()  # everything new: the last fence is released and status.rollout goes
    assert part.status is None and perms()[-1] == ("rc-broker-0", True)


def test_rendered_controller_command_is_what_rocket_controller_accepts(tmp_path: Any) -> None:
    import shlex
    from pathlib import Path

    import typer

    from rocket import cli

    script = controllers.controller_command(OWNER)[-1].replace("$HOSTNAME", "rc-controller-1")
    words = shlex.split(script)
    assert words[:5] == ["exec", "python", "-m", "rocket.cli", "controller"]
    opts = dict(zip(words[5::2], words[6::2], strict=True))
    known = {o for p in typer.main.get_command(cli.app).commands["controller"].params  # type: ignore[attr-defined]
             for o in p.opts}
    assert set(opts) <= known, set(opts) - known
    secret = tmp_path / "raft-secret"
    secret.write_text(controllers.new_raft_secret())
    cfg = cli._controller_config(
        peers=opts["--controller-peers"], self_addr=opts["--self-addr"], raft_port=None,
        data_dir=Path(opts["--data-dir"]), secret_file=secret, port=int(opts["--port"]), host=None, unclean=None,
        heartbeat_timeout_ms=None, log_level=None, http_port=int(opts["--http-port"]),
        raft_bind_host=opts["--raft-bind-host"])
    assert cfg.self_peer.id == "n1" and cfg.self_peer.raft_address == "rc-controller-1.rc-controller.prod.svc:9880"
    assert [p.address for p in cfg.peers] == [f"rc-controller-{i}.rc-controller.prod.svc:9878" for i in range(3)]
    assert cfg.raft_bind_host == "0.0.0.0" and cfg.http_port == 9879 and opts["--secret-file"] == \
        controllers.CONTROLLER_SECRET_FILE


def test_controller_pods_get_acl_and_tls_as_brokers_do(tmp_path: Any) -> None:
    """ACL + TLS: the rendered controller script writes a TLS properties file that ``rocket controller``
    reads as the brokers' TLS keys, passes the admin credentials file as initial user and inner
    credentials, and the pod mounts both Secrets; probes go HTTPS only with Enforcing."""
    import shlex
    import subprocess

    import typer

    from rocket import cli
    from rocket.remoting.tls import TlsConfig, TlsMode

    spec = parse_spec({"broker": {"replicasPerGroup": 1},
                       "security": {"acl": {"enabled": True}, "tls": {"mode": "Enforcing"}}})
    sts = controllers.build_controller_statefulset(OWNER, spec)
    pod = sts["spec"]["template"]["spec"]
    container = pod["containers"][0]
    script = container["command"][-1]
    prefix, _, rest = script.partition(" && ")
    words = shlex.split(rest.replace("$HOSTNAME", "rc-controller-0"))
    assert words[:5] == ["exec", "python", "-m", "rocket.cli", "controller"]
    flags = [w for w in words if w.startswith("--")]
    known = {o for p in typer.main.get_command(cli.app).commands["controller"].params  # type: ignore[attr-defined]
             for o in p.opts}
    assert set(flags) <= known, set(flags) - known
    opts = {w: words[i + 1] for i, w in enumerate(words) if w.startswith("--") and w != "--acl-enable"}
    assert "--acl-enable" in words
    assert opts["--init-authentication-user"] == opts["--inner-credentials"] == "/etc/rocket-auth/credentials"
    assert opts["--cluster"] == "rc" and opts["--tls-mode"] == "enforcing"
    # the shell writes the properties file; rocket controller reads it as RocketMQ's tls.config.file
    props = tmp_path / "tls.properties"
    subprocess.run(["/bin/sh", "-c", prefix.replace(controllers.CONTROLLER_TLS_CONFIG_FILE, str(props))], check=True)
    tls = cli._tls_settings(TlsConfig(), opts["--tls-mode"], props)
    assert tls.mode is TlsMode.ENFORCING and tls.enable
    assert (tls.server_cert_path, tls.server_key_path) == ("/etc/rocket-tls/tls.crt", "/etc/rocket-tls/tls.key")
    assert tls.client_trust_cert_path == "/etc/rocket-tls/ca.crt" and tls.client_auth_server is False
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["admin-credentials"]["secret"]["secretName"] == "rc-admin-credentials"
    assert volumes["tls"]["secret"]["secretName"] == "rc-tls"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/etc/rocket-auth"]["readOnly"] and mounts["/etc/rocket-tls"]["readOnly"]
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    # Permissive keeps plain HTTP probes; without security nothing is added
    permissive = parse_spec({"security": {"tls": {"mode": "Permissive"}}})
    c = controllers.build_controller_statefulset(OWNER, permissive)["spec"]["template"]["spec"]["containers"][0]
    assert "scheme" not in c["readinessProbe"]["httpGet"] and "--acl-enable" not in c["command"][-1]
    plain = controllers.build_controller_statefulset(OWNER, parse_spec({}))["spec"]["template"]["spec"]
    assert {v["name"] for v in plain["volumes"]} == {"raft-secret", "tmp"}
    assert "--tls-mode" not in plain["containers"][0]["command"][-1]
