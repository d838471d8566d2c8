"""The controller-mode broker's pure rules (``rocket.broker.controller_mode``): which offset a send
is acknowledged at under ``allAckInSyncStateSet`` / ``minInSyncReplicas``, fencing, the settings."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from rocket.broker.config import BrokerConfig, ConfigError
from rocket.broker.controller_mode import ALL, ControllerReplicas


def _replicas(*, all_ack: bool = True, min_isr: int = 1, acks: dict[int, int] | None = None,
              sync_state_set: set[int] | None = None) -> ControllerReplicas:
    cfg = BrokerConfig(broker_name="g", enable_controller_mode=True, controller_addr="127.0.0.1:1",
                       all_ack_in_sync_state_set=all_ack, min_in_sync_replicas=min_isr)
    conns = [SimpleNamespace(slave_id=sid, ack_offset=off) for sid, off in (acks or {}).items()]
    ha: Any = SimpleNamespace(config=cfg, service=SimpleNamespace(connections=conns), is_master=True,
                              store=SimpleNamespace(max_phy_offset=1000))
    r = ControllerReplicas(ha)
    r.controller_id = 1
    r.sync_state_set = frozenset(sync_state_set if sync_state_set is not None else {1})
    r.lease_until = time.monotonic() + 60
    return r


def test_all_ack_needs_every_member_of_the_sync_state_set() -> None:
    r = _replicas(acks={2: 500, 3: 800}, sync_state_set={1, 2, 3})
    assert r.acked_offset() == 500
    # a member that is not connected holds every send back
    assert _replicas(acks={2: 500}, sync_state_set={1, 2, 3}).acked_offset() == -1
    # the master alone: nothing to wait for
    assert _replicas(acks={2: 500}, sync_state_set={1}).acked_offset() == ALL


def test_a_set_being_changed_counts_with_the_old_one_and_joining_slaves_count_too() -> None:
    r = _replicas(acks={2: 500, 3: 300}, sync_state_set={1, 2})
    assert r.acked_offset() == 500
    r.pending_set = frozenset({1, 2, 3})  # expanding: the new member counts already
    assert r.acked_offset() == 300
    r.pending_set = None
    r.joining[3] = (400, time.monotonic())
    assert r.acked_offset() == 300


def test_min_in_sync_replicas_without_all_ack() -> None:
    # 2 copies (master + 1 slave): the best member's offset
    assert _replicas(all_ack=False, min_isr=2, acks={2: 500, 3: 800}, sync_state_set={1, 2, 3}).acked_offset() == 800
    # 3 copies: the second best
    assert _replicas(all_ack=False, min_isr=3, acks={2: 500, 3: 800}, sync_state_set={1, 2, 3}).acked_offset() == 500
    # 1 copy: the master's own
    assert _replicas(all_ack=False, min_isr=1, acks={}, sync_state_set={1}).acked_offset() == ALL
    # fewer members than needed: nothing is acknowledged, and sends are refused
    r = _replicas(all_ack=False, min_isr=3, acks={2: 500}, sync_state_set={1, 2})
    assert r.acked_offset() == -1
    assert "minInSyncReplicas=3" in (r.refuse_writes() or "")


def _metrics(r: ControllerReplicas) -> list[object]:
    failed: list[object] = []
    r.ha.service.waiters = SimpleNamespace(fail_all=failed.append)
    r.ha.metrics = SimpleNamespace(role_changes=SimpleNamespace(labels=lambda *_: SimpleNamespace(inc=lambda: None)))
    return failed


def test_without_all_ack_a_master_whose_lease_ran_out_is_fenced_and_acknowledges_nothing() -> None:
    r = _replicas(all_ack=False, min_isr=2, acks={2: 500}, sync_state_set={1, 2})
    assert r.lease_fences
    assert r.refuse_writes() is None and r.lease_valid
    r.lease_until = time.monotonic() - 0.1
    failed = _metrics(r)
    assert "fenced" in (r.refuse_writes() or "")
    assert r.acked_offset() == -1 and failed  # waiting sends were failed
    assert r.fence_timeout == 5.0  # controllerHeartBeatTimeoutMills (10 s) / 2


def test_with_all_ack_a_master_without_a_controller_majority_keeps_acknowledging() -> None:
    """allAckInSyncStateSet: the quorum acknowledgements, not the lease, keep two masters apart
    (module doc), so a lease that ran out does not fence by default."""
    r = _replicas(acks={2: 500, 3: 700}, sync_state_set={1, 2, 3})
    assert not r.lease_fences
    r.lease_until = time.monotonic() - 0.1
    failed = _metrics(r)
    r.check_lease()
    assert r.fenced_reason is None and r.lease_valid and not failed
    assert r.refuse_writes() is None and r.acked_offset() == 500
    # ... but a member with no replication connection could not acknowledge, and the set cannot
    # shrink without the controllers: refused at once rather than after slaveTimeout
    r.ha.service.connections = [c for c in r.ha.service.connections if c.slave_id != 3]
    assert "[3] are not connected" in (r.refuse_writes() or "")
    assert r.fenced_reason is None
    # a master confirmed by the controller leader waits for the member as usual (it may drop it)
    r.lease_until = time.monotonic() + 5
    assert r.refuse_writes() is None and r.acked_offset() == -1


def test_controller_lease_fence_forces_the_rule_either_way() -> None:
    r = _replicas(acks={2: 500}, sync_state_set={1, 2})
    r.ha.config.controller_lease_fence = "true"
    r.lease_until = time.monotonic() - 0.1
    _metrics(r)
    assert r.lease_fences and "fenced" in (r.refuse_writes() or "")
    r2 = _replicas(all_ack=False, acks={2: 500}, sync_state_set={1, 2})
    r2.ha.config.controller_lease_fence = "false"
    r2.lease_until = time.monotonic() - 0.1
    assert not r2.lease_fences and r2.refuse_writes() is None
    with pytest.raises(ConfigError, match="controllerLeaseFence"):
        BrokerConfig(broker_name="g", controller_lease_fence="sometimes").validate()
    cfg = BrokerConfig(broker_name="g")
    cfg.update({"controllerLeaseFence": "TRUE"})
    assert cfg.controller_lease_fence == "true"


def test_members_an_unanswered_alter_would_add_stay_required_until_settled() -> None:
    r = _replicas(acks={2: 500, 3: 300}, sync_state_set={1, 2})
    r.sync_state_set_epoch = 4
    r.master_epoch = 2
    r.ha.service.recheck_quorum = lambda: None
    r.unsure = (4, frozenset({3}), time.monotonic())
    assert r.acked_offset() == 300  # 3 may be in the controllers' set: it must hold what is acked
    r._settle_unsure(4, time.monotonic())  # an answer soon after: the request may still commit
    assert r.unsure is not None
    r._settle_unsure(5, None)  # a newer set epoch: whatever committed is known now
    assert r.unsure is None and r.acked_offset() == 500
    r.unsure = (4, frozenset({3}), time.monotonic() - 30)
    r._settle_unsure(4, time.monotonic())  # asked long after: it was not committed
    assert r.unsure is None


def test_a_master_a_name_server_refused_for_a_newer_epoch_fences_itself() -> None:
    r = _replicas(acks={2: 500}, sync_state_set={1, 2})
    r.ha.epoch_file = SimpleNamespace(last_epoch=3)
    spawned: list[str] = []
    r._spawn = lambda coro, name: (coro.close(), spawned.append(name))  # type: ignore[method-assign]
    failed = _metrics(r)
    ok = SimpleNamespace(namesrv_addr="ns:9876", ok=True, master_addr=None, master_epoch=None)
    r.on_registered([ok])
    assert r.fenced_reason is None
    older = SimpleNamespace(namesrv_addr="ns:9876", ok=False, master_addr="10.0.0.2:10911", master_epoch=3)
    r.on_registered([older])
    assert r.fenced_reason is None
    newer = SimpleNamespace(namesrv_addr="ns:9876", ok=False, master_addr="10.0.0.2:10911", master_epoch=4)
    r.on_registered([newer])
    assert "newer epoch 4" in (r.fenced_reason or "") and failed and spawned == ["controller-reread"]


def test_controller_mode_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="controllerAddr"):
        BrokerConfig(broker_name="g", enable_controller_mode=True).validate()
    with pytest.raises(ConfigError, match="minInSyncReplicas"):
        BrokerConfig(broker_name="g", min_in_sync_replicas=0).validate()
    cfg = BrokerConfig(broker_name="g")
    cfg.update({"enableControllerMode": "true", "controllerAddr": "a:1;b:2", "allAckInSyncStateSet": "true",
               "haMaxTimeSlaveNotCatchup": "3000"})
    assert cfg.enable_controller_mode and cfg.all_ack_in_sync_state_set and cfg.ha_max_time_slave_not_catchup == 3000
