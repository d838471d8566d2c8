"""The controller's replicated state machine (rocket.controller.state) and settings, without Raft.

Decisions are made as the leader makes them, then their events are applied as every controller
applies committed log entries; the fencing (epoch) checks are exercised both at decision time
and at apply time (a decision overtaken by another one committed first).
"""

from __future__ import annotations

import orjson
import pytest

from rocket.controller.config import ConfigError, ControllerConfig, parse_peers, parse_properties, read_secret
from rocket.controller.heartbeat import BrokerHeartbeatManager
from rocket.controller.state import (
    BrokerLiveInfo,
    ControllerResult,
    DefaultElectPolicy,
    ReplicasInfoManager,
)
from rocket.protocol.codes import ResponseCode
from rocket.protocol.controller import parse_sync_state_set

CLUSTER, GROUP = "DefaultCluster", "broker-a"


class Liveness:
    """A hand-driven liveness table: ``alive`` ids and their heartbeat figures."""

    def __init__(self) -> None:
        self.alive: set[int] = set()
        self.info: dict[int, BrokerLiveInfo] = {}

    def is_alive(self, cluster: str, name: str, bid: int) -> bool:
        return bid in self.alive

    def live(self, cluster: str, name: str, bid: int) -> BrokerLiveInfo | None:
        return self.info.get(bid)

    def beat(self, bid: int, epoch: int = 0, offset: int = 0, priority: int = 2**31 - 1) -> None:
        self.alive.add(bid)
        self.info[bid] = BrokerLiveInfo(bid, epoch, offset, priority)


def commit(mgr: ReplicasInfoManager, result: ControllerResult) -> ControllerResult:
    """Apply the decision's events as Raft would; the result as the client would see it."""
    for event in result.events:
        code, remark = mgr.apply_event(orjson.loads(orjson.dumps(event)))  # events survive JSON
        if code != ResponseCode.SUCCESS:
            return ControllerResult().fail(code, remark or "")
    return result


def register(mgr: ReplicasInfoManager, live: Liveness, n: int) -> list[int]:
    """Register ``n`` brokers the way a controller-mode broker does; returns their ids."""
    ids = []
    for i in range(n):
        nxt = int(mgr.get_next_broker_id(CLUSTER, GROUP).header["nextBrokerId"] or 0)
        addr = f"127.0.0.1:{10911 + 10 * i}"
        res = commit(mgr, mgr.apply_broker_id(CLUSTER, GROUP, nxt, f"{addr};{1000 + i}"))
        assert res.code == ResponseCode.SUCCESS, res.remark
        res = commit(mgr, mgr.register_broker(CLUSTER, GROUP, nxt, addr, live.is_alive))
        assert res.code == ResponseCode.SUCCESS
        ids.append(nxt)
    return ids


@pytest.fixture()
def setup() -> tuple[ReplicasInfoManager, Liveness, DefaultElectPolicy]:
    mgr = ReplicasInfoManager()
    live = Liveness()
    return mgr, live, DefaultElectPolicy(live.is_alive, live.live)


def test_broker_ids_are_handed_out_in_order_and_reapplying_with_the_same_check_code_is_idempotent(setup):
    mgr, live, _ = setup
    assert register(mgr, live, 3) == [1, 2, 3]
    group = mgr.groups[GROUP]
    assert group.broker_addrs() == {1: "127.0.0.1:10911", 2: "127.0.0.1:10921", 3: "127.0.0.1:10931"}
    # the same broker retrying after a crash: same id, same check code -> granted again
    assert commit(mgr, mgr.apply_broker_id(CLUSTER, GROUP, 2, "127.0.0.1:10921;1001")).code == 0
    # another broker claiming a taken id -> refused
    res = commit(mgr, mgr.apply_broker_id(CLUSTER, GROUP, 2, "127.0.0.1:9999;5"))
    assert res.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    # a new group must start at id 1
    res = mgr.apply_broker_id(CLUSTER, "broker-b", 7, "127.0.0.1:1;1")
    assert res.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID and not res.events
    # an id applied out of order moves the next id past it
    assert commit(mgr, mgr.apply_broker_id(CLUSTER, GROUP, 9, "127.0.0.1:10991;1")).code == 0
    assert mgr.get_next_broker_id(CLUSTER, GROUP).header["nextBrokerId"] == "10"


def test_two_brokers_claiming_one_id_concurrently_only_the_first_committed_wins(setup):
    mgr, _, _ = setup
    first = mgr.apply_broker_id(CLUSTER, GROUP, 1, "127.0.0.1:1;1")
    second = mgr.apply_broker_id(CLUSTER, GROUP, 1, "127.0.0.1:2;2")  # decided on the same state
    assert commit(mgr, first).code == 0
    assert commit(mgr, second).code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    assert mgr.groups[GROUP].brokers[1] == ("127.0.0.1:1", "127.0.0.1:1;1")


def test_register_updates_a_changed_address_and_reports_the_alive_master(setup):
    mgr, live, policy = setup
    register(mgr, live, 2)
    live.beat(1)
    live.beat(2)
    assert commit(mgr, mgr.elect_master(GROUP, 1, False, policy)).code == 0
    res = commit(mgr, mgr.register_broker(CLUSTER, GROUP, 2, "10.0.0.2:10911", live.is_alive))
    assert res.header["masterBrokerId"] == "1" and res.header["masterEpoch"] == "1"
    assert parse_sync_state_set(res.body) == ({1}, 1)
    assert mgr.groups[GROUP].address(2) == "10.0.0.2:10911"
    live.alive.discard(1)
    res = mgr.register_broker(CLUSTER, GROUP, 2, "10.0.0.2:10911", live.is_alive)
    assert "masterBrokerId" not in res.header  # a dead master is not reported
    assert mgr.register_broker(CLUSTER, GROUP, 5, "x:1", live.is_alive).code == \
        ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


def test_first_election_makes_the_asking_broker_master(setup):
    mgr, live, policy = setup
    register(mgr, live, 3)
    res = commit(mgr, mgr.elect_master(GROUP, 2, False, policy))  # nobody even alive yet
    assert res.code == ResponseCode.SUCCESS
    assert res.header == {"masterBrokerId": "2", "masterAddress": "127.0.0.1:10921", "masterEpoch": "1",
                          "syncStateSetEpoch": "1"}
    body = orjson.loads(res.body)
    assert body["syncStateSet"] == [2]
    assert body["brokerMemberGroup"]["brokerAddrs"] == {"1": "127.0.0.1:10911", "2": "127.0.0.1:10921",
                                                        "3": "127.0.0.1:10931"}
    g = mgr.groups[GROUP]
    assert (g.master_broker_id, g.master_epoch, g.sync_state_set, g.sync_state_set_epoch) == (2, 1, {2}, 1)
    # the other brokers asking afterwards learn the master (MASTER_STILL_EXIST names it)
    live.beat(2)
    res = commit(mgr, mgr.elect_master(GROUP, 3, False, policy))
    assert res.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST and res.header["masterBrokerId"] == "2"
    assert mgr.groups[GROUP].master_epoch == 1


def test_elect_policy_prefers_highest_epoch_then_offset_then_priority_within_the_sync_state_set(setup):
    mgr, live, policy = setup
    register(mgr, live, 4)
    live.beat(1)
    commit(mgr, mgr.elect_master(GROUP, 1, False, policy))
    commit(mgr, mgr.alter_sync_state_set(GROUP, 1, 1, {1, 2, 3}, 1, lambda *a: True))
    # broker 4 has the most data but is not in sync: never chosen without unclean election
    live.beat(2, epoch=1, offset=500)
    live.beat(3, epoch=1, offset=900)
    live.beat(4, epoch=1, offset=10_000)
    live.alive.discard(1)  # the master dies
    res = commit(mgr, mgr.elect_master(GROUP, None, False, policy))
    assert res.code == 0 and res.header["masterBrokerId"] == "3"
    assert res.header["masterEpoch"] == "2" and res.header["syncStateSetEpoch"] == "3"
    g = mgr.groups[GROUP]
    assert (g.master_broker_id, g.sync_state_set) == (3, {3})
    # ties on epoch and offset: the lower election priority wins; a higher epoch beats any offset
    p = DefaultElectPolicy(live.is_alive, live.live)
    live.beat(2, epoch=1, offset=900, priority=1)
    live.beat(3, epoch=1, offset=900, priority=5)
    assert p.elect(CLUSTER, GROUP, {2, 3}, None, None, None) == 2
    live.beat(5, epoch=2, offset=1)
    assert p.elect(CLUSTER, GROUP, {2, 3, 5}, None, None, None) == 5
    # the old master is kept while alive and nobody is preferred; a preferred dead broker: nobody
    assert p.elect(CLUSTER, GROUP, {2, 3, 5}, None, 3, None) == 3
    assert p.elect(CLUSTER, GROUP, {2, 3}, None, None, 9) is None


def test_no_in_sync_replica_alive_leaves_the_group_without_master_unless_unclean_election_is_on(setup):
    mgr, live, policy = setup
    register(mgr, live, 2)
    live.beat(1)
    commit(mgr, mgr.elect_master(GROUP, 1, False, policy))
    live.alive.clear()
    live.beat(2, epoch=0, offset=10)  # alive, but never joined the SyncStateSet
    res = commit(mgr, mgr.elect_master(GROUP, None, False, policy))
    assert res.code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE
    g = mgr.groups[GROUP]
    assert g.master_broker_id is None and g.master_epoch == 2 and g.sync_state_set == {1}
    # a broker asking (not the controller) gets ELECT_MASTER_FAILED and nothing changes
    res = commit(mgr, mgr.elect_master(GROUP, 2, False, policy))
    assert res.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED and g.master_epoch == 2
    mgr.enable_elect_unclean_master = True
    res = commit(mgr, mgr.elect_master(GROUP, None, False, policy))
    assert res.code == 0 and res.header["masterBrokerId"] == "2" and g.master_epoch == 3


def test_admin_designated_election_takes_that_broker_or_nobody(setup):
    mgr, live, policy = setup
    register(mgr, live, 3)
    live.beat(1)
    live.beat(2)
    commit(mgr, mgr.elect_master(GROUP, 1, False, policy))
    commit(mgr, mgr.alter_sync_state_set(GROUP, 1, 1, {1, 2}, 1, live.is_alive))
    assert commit(mgr, mgr.elect_master(GROUP, 3, True, policy)).code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    assert commit(mgr, mgr.elect_master(GROUP, 1, True, policy)).code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
    res = commit(mgr, mgr.elect_master(GROUP, 2, True, policy))
    assert res.code == 0 and res.header["masterBrokerId"] == "2" and mgr.groups[GROUP].master_epoch == 2


def test_alter_sync_state_set_checks_master_epochs_members_and_liveness(setup):
    mgr, live, policy = setup
    register(mgr, live, 3)
    live.beat(1)
    live.beat(2)
    commit(mgr, mgr.elect_master(GROUP, 1, False, policy))  # master 1, epoch 1, SSS {1} epoch 1

    def alter(master: int | None, epoch: int | None, new: set[int], sss_epoch: int) -> ControllerResult:
        return commit(mgr, mgr.alter_sync_state_set(GROUP, master, epoch, new, sss_epoch, live.is_alive))

    assert alter(2, 1, {1, 2}, 1).code == ResponseCode.CONTROLLER_INVALID_MASTER
    assert alter(1, 0, {1, 2}, 1).code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
    assert alter(1, 1, {1, 2}, 0).code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    assert alter(1, 1, {1, 9}, 1).code == ResponseCode.CONTROLLER_INVALID_REPLICAS
    assert alter(1, 1, {1, 3}, 1).code == ResponseCode.CONTROLLER_BROKER_NOT_ALIVE
    assert alter(1, 1, {2}, 1).code == ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED  # master left out
    assert alter(1, 1, {1}, 1).code == ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED  # unchanged
    assert mgr.groups[GROUP].sync_state_set_epoch == 1
    res = alter(1, 1, {1, 2}, 1)
    assert res.code == 0 and res.header == {"newSyncStateSetEpoch": "2"}
    assert parse_sync_state_set(res.body) == ({1, 2}, 2)
    assert mgr.groups[GROUP].sync_state_set == {1, 2}
    assert mgr.alter_sync_state_set("nope", 1, 1, {1}, 1, live.is_alive).code == \
        ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED


def test_a_decision_overtaken_by_one_committed_first_is_fenced_when_applied(setup):
    mgr, live, policy = setup
    register(mgr, live, 3)
    for b in (1, 2, 3):
        live.beat(b)
    commit(mgr, mgr.elect_master(GROUP, 1, False, policy))
    commit(mgr, mgr.alter_sync_state_set(GROUP, 1, 1, {1, 2, 3}, 1, live.is_alive))
    live.alive.discard(1)
    # two elections decided on the same state (e.g. an old and a new Raft leader)
    a = mgr.elect_master(GROUP, None, False, policy)
    b = mgr.elect_master(GROUP, 3, True, policy)
    assert a.code == 0 and b.code == 0
    assert commit(mgr, a).code == 0
    assert commit(mgr, b).code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
    g = mgr.groups[GROUP]
    assert g.master_epoch == 2 and g.master_broker_id == 2  # exactly one election took effect
    # a SyncStateSet change decided for the old master epoch is fenced too
    stale = {"type": "ALTER_SYNC_STATE_SET", "brokerName": GROUP, "newSyncStateSet": [1, 2],
             "masterBrokerId": 1, "masterEpoch": 1, "syncStateSetEpoch": 2}
    assert mgr.apply_event(stale)[0] == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
    assert g.sync_state_set == {2}


def test_scan_finds_groups_whose_master_died_while_another_broker_lives(setup):
    mgr, live, policy = setup
    register(mgr, live, 2)
    live.beat(1)
    commit(mgr, mgr.elect_master(GROUP, 1, False, policy))
    assert mgr.scan_need_reelect(live.is_alive) == []
    live.alive.discard(1)
    assert mgr.scan_need_reelect(live.is_alive) == []  # nobody alive: nothing to elect from
    live.beat(2)
    assert mgr.scan_need_reelect(live.is_alive) == [GROUP]


def test_sync_state_data_body_has_apaches_field_names(setup):
    mgr, live, policy = setup
    register(mgr, live, 2)
    live.beat(1)
    commit(mgr, mgr.elect_master(GROUP, 1, False, policy))
    body = orjson.loads(mgr.get_sync_state_data([GROUP, "unknown"], live.is_alive).body)
    assert body == {"replicasInfoTable": {GROUP: {
        "masterBrokerId": 1, "masterAddress": "127.0.0.1:10911", "masterEpoch": 1, "syncStateSetEpoch": 1,
        "inSyncReplicas": [{"brokerName": GROUP, "brokerId": 1, "brokerAddress": "127.0.0.1:10911", "alive": True}],
        "notInSyncReplicas": [{"brokerName": GROUP, "brokerId": 2, "brokerAddress": "127.0.0.1:10921",
                               "alive": False}],
    }}}
    assert mgr.get_replica_info("unknown").code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST


def test_clean_broker_data_refuses_living_brokers_unless_told(setup):
    mgr, live, policy = setup
    register(mgr, live, 2)
    live.beat(1)
    live.beat(2)
    commit(mgr, mgr.elect_master(GROUP, 1, False, policy))
    res = mgr.clean_broker_data(GROUP, None, False, CLUSTER, live.is_alive)
    assert res.code == ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert mgr.clean_broker_data(GROUP, "2", False, CLUSTER, live.is_alive).code == \
        ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert mgr.clean_broker_data(GROUP, "x;1", True, CLUSTER, live.is_alive).code == \
        ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert commit(mgr, mgr.clean_broker_data(GROUP, "1", True, CLUSTER, live.is_alive)).code == 0
    g = mgr.groups[GROUP]
    assert set(g.brokers) == {2} and g.master_broker_id is None and g.master_epoch == 2
    assert commit(mgr, mgr.clean_broker_data(GROUP, "", True, CLUSTER, live.is_alive)).code == 0
    assert GROUP not in mgr.groups


def test_snapshot_round_trips_and_unknown_events_are_refused(setup):
    mgr, live, policy = setup
    register(mgr, live, 2)
    commit(mgr, mgr.elect_master(GROUP, 2, False, policy))
    copy = ReplicasInfoManager()
    copy.load_json(orjson.loads(orjson.dumps(mgr.to_json())))
    assert copy.to_json() == mgr.to_json()
    assert copy.groups[GROUP].master_broker_id == 2
    with pytest.raises(ValueError, match="unknown controller event"):
        mgr.apply_event({"type": "FROM_THE_FUTURE"})


def test_peers_parse_with_and_without_raft_ports():
    peers = parse_peers("127.0.0.1:9878/9880; h2:9878 ,h3:9878/19880", default_raft_port=7000)
    assert [(p.id, p.address, p.raft_address) for p in peers] == [
        ("n0", "127.0.0.1:9878", "127.0.0.1:9880"), ("n1", "h2:9878", "h2:7000"), ("n2", "h3:9878", "h3:19880")]
    for bad in ("", "h1", "h1:x", "h1:1/0", "h1:1,h1:1"):
        with pytest.raises(ConfigError):
            parse_peers(bad)
    cfg = ControllerConfig(peers=peers, secret="s" * 16)
    with pytest.raises(ConfigError, match="--self-addr"):
        cfg.resolve_self(9878)  # two peers listen on 9878
    cfg.self_address = "h2:9878"
    cfg.validate()
    assert cfg.self_peer.raft_address == "h2:7000"


def test_the_secret_comes_from_a_file_or_the_environment_and_must_be_long_enough(tmp_path):
    with pytest.raises(ConfigError, match="no controller secret"):
        read_secret(None, environ={})
    with pytest.raises(ConfigError, match="shorter"):
        read_secret(None, environ={"ROCKET_CONTROLLER_SECRET": "short"})
    assert read_secret(None, environ={"ROCKET_CONTROLLER_SECRET": "x" * 20}) == "x" * 20
    f = tmp_path / "secret"
    f.write_text("from-a-file-0123456789\n")
    assert read_secret(f, environ={"ROCKET_CONTROLLER_SECRET": "y" * 20}) == "from-a-file-0123456789"
    with pytest.raises(ConfigError, match="cannot read"):
        read_secret(tmp_path / "missing")


def test_controller_config_properties_update_and_black_list():
    cfg = ControllerConfig(peers=parse_peers("127.0.0.1:9878/9880"), secret="s" * 16, self_address="127.0.0.1:9878")
    text = cfg.to_properties()
    props = parse_properties(text)
    assert props["enableElectUncleanMaster"] == "false" and props["listenPort"] == "9878"
    assert "s" * 16 not in text
    assert cfg.update_from_properties({"enableElectUncleanMaster": "true", "somethingElse": "1"}) == [
        "enableElectUncleanMaster"]
    assert cfg.enable_elect_unclean_master is True
    with pytest.raises(ConfigError, match="black list"):
        cfg.update_from_properties({"controllerStorePath": "/tmp/x"})
    with pytest.raises(ConfigError, match="not an integer"):
        cfg.update_from_properties({"scanInactiveMasterInterval": "soon", "enableElectUncleanMaster": "false"})
    assert cfg.enable_elect_unclean_master is True  # nothing applied from a refused update


def test_heartbeat_table_expires_brokers_and_keeps_their_best_figures():
    now = [100.0]
    hb = BrokerHeartbeatManager(default_timeout_ms=10_000, clock=lambda: now[0])
    gone: list[tuple[str, str, int]] = []
    hb.listeners.append(lambda *key: gone.append(key))
    conn_a, conn_b = object(), object()
    hb.on_heartbeat(CLUSTER, GROUP, "a:1", 1, timeout_ms=2000, channel=conn_a, epoch=2, max_offset=500)
    hb.on_heartbeat(CLUSTER, GROUP, "b:1", 2, channel=conn_b, epoch=1, max_offset=900)  # default timeout 10 s
    # a late heartbeat with older figures does not roll them back; a newer epoch replaces them
    hb.on_heartbeat(CLUSTER, GROUP, "a:1", 1, timeout_ms=2000, channel=conn_a, epoch=1, max_offset=9999)
    assert hb.live_info(CLUSTER, GROUP, 1) == BrokerLiveInfo(1, 2, 500, 2**31 - 1)
    hb.on_heartbeat(CLUSTER, GROUP, "a:1", 1, timeout_ms=2000, channel=conn_a, epoch=3, max_offset=10)
    assert hb.live_info(CLUSTER, GROUP, 1) == BrokerLiveInfo(1, 3, 10, 2**31 - 1)
    now[0] += 2.5
    assert not hb.is_active(CLUSTER, GROUP, 1) and hb.is_active(CLUSTER, GROUP, 2)
    assert hb.scan_not_active() == [(CLUSTER, GROUP, 1)] and gone == [(CLUSTER, GROUP, 1)]
    assert hb.on_channel_closed(conn_a) == []  # already gone
    assert hb.on_channel_closed(conn_b) == [(CLUSTER, GROUP, 2)]
    assert gone[-1] == (CLUSTER, GROUP, 2) and hb.active_brokers() == []


def test_the_number_of_groups_and_ids_per_group_is_bounded(setup, monkeypatch):
    import rocket.controller.state as state

    mgr, _, _ = setup
    monkeypatch.setattr(state, "MAX_BROKER_GROUPS", 2)
    monkeypatch.setattr(state, "MAX_BROKERS_PER_GROUP", 2)
    for name in ("g1", "g2"):
        assert commit(mgr, mgr.apply_broker_id(CLUSTER, name, 1, f"{name}:1;1")).code == 0
    res = mgr.apply_broker_id(CLUSTER, "g3", 1, "g3:1;1")
    assert res.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID and "broker groups" in (res.remark or "")
    assert commit(mgr, mgr.apply_broker_id(CLUSTER, "g1", 2, "g1:2;1")).code == 0
    res = mgr.apply_broker_id(CLUSTER, "g1", 3, "g1:3;1")
    assert res.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID and "broker ids" in (res.remark or "")
    assert commit(mgr, mgr.apply_broker_id(CLUSTER, "g1", 2, "g1:2;1")).code == 0  # re-applying still works
