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


def test_a_master_whose_lease_ran_out_is_fenced_and_acknowledges_nothing() -> None:
    r = _replicas(acks={2: 500}, sync_state_set={1, 2})
    assert r.refuse_writes() is None and r.lease_valid
    r.lease_until = time.monotonic() - 0.1
    failed: list[object] = []
    r.ha.service.waiters = SimpleNamespace(fail_all=failed.append)
    r.ha.metrics = SimpleNamespace(role_changes=SimpleNamespace(labels=lambda *_: SimpleNamespace(inc=lambda: None)))
    assert "fenced" in (r.refuse_writes() or "")
    assert r.acked_offset() == -1 and failed  # waiting sends were failed
    assert r.fence_timeout == 5.0  # controllerHeartBeatTimeoutMills (10 s) / 2


def test_controller_mode_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="controllerAddr"):
        BrokerConfig(broker_name="g", enable_controller_mode=True).validate()
    with pytest.raises(ConfigError, match="minInSyncReplicas"):
        BrokerConfig(broker_name="g", min_in_sync_replicas=0).validate()
    cfg = BrokerConfig(broker_name="g")
    cfg.update({"enableControllerMode": "true", "controllerAddr": "a:1;b:2", "allAckInSyncStateSet": "true",
               "haMaxTimeSlaveNotCatchup": "3000"})
    assert cfg.enable_controller_mode and cfg.all_ack_in_sync_state_set and cfg.ha_max_time_slave_not_catchup == 3000
