"""Node drains: the eviction webhook's answers (pure) and the requests the operator keeps."""

from __future__ import annotations

from rocket_operator import eviction
from rocket_operator.failover import BrokerRole, GroupState


def group(master: int | None, sync: tuple[int, ...], roles: dict[str, tuple[int | None, str]],
          error: str = "", broken: str = "") -> GroupState:
    return GroupState(index=0, name="rc-broker-0", master_id=master, master_address="10.0.0.1:10911",
                      sync_state_set=sync, brokers=tuple(
                          BrokerRole(pod, cid, role, "refused" if pod == broken else "")
                          for pod, (cid, role) in roles.items()), error=error)


# the controllers moved the master to the slave-1 pod (controller id 2)
MOVED = {"rc-broker-master-0": (1, "SLAVE"), "rc-broker-slave-1-0": (2, "MASTER")}


def test_the_master_is_refused_and_the_operator_deletes_it() -> None:
    answer = eviction.decide("rc-broker-slave-1-0", group(2, (1, 2), MOVED), 2)
    assert not answer.allowed and answer.operator_deletes
    assert "rc-broker-slave-1-0 is the master of rc-broker-0" in answer.message
    # the same with a single group: the master still moves first
    assert eviction.decide("rc-broker-slave-1-0", group(2, (1, 2), MOVED), 1).operator_deletes


def test_a_slave_goes_when_the_rest_of_its_group_is_in_sync() -> None:
    # single group: no group to fence, the in-sync slave goes at once
    assert eviction.decide("rc-broker-master-0", group(2, (1, 2), MOVED), 1).allowed
    # a slave not in the SyncStateSet: its master no longer waits for it
    assert eviction.decide("rc-broker-master-0", group(2, (2,), MOVED), 2).allowed
    # two groups and an in-sync slave: refused once, the operator fences the group and deletes it
    answer = eviction.decide("rc-broker-master-0", group(2, (1, 2), MOVED), 2)
    assert not answer.allowed and answer.operator_deletes and "in-sync slave" in answer.message


def test_a_slave_whose_group_is_not_in_sync_stays() -> None:
    three = {**MOVED, "rc-broker-slave-2-0": (3, "SLAVE")}
    answer = eviction.decide("rc-broker-master-0", group(2, (1, 2), three), 1)
    assert not answer.allowed and not answer.operator_deletes
    assert "rc-broker-slave-2-0 is not in the SyncStateSet" in answer.message
    answer = eviction.decide("rc-broker-master-0", group(2, (1, 2, 3), three, broken="rc-broker-slave-2-0"), 1)
    assert not answer.allowed and "does not answer" in answer.message


def test_unknown_roles_are_refused_and_lone_brokers_pass() -> None:
    answer = eviction.decide("rc-broker-master-0", group(None, (), MOVED, error="no controller"), 2)
    assert not answer.allowed and not answer.operator_deletes and "no controller" in answer.message
    assert not eviction.decide("rc-broker-master-0", group(None, (), MOVED), 2).allowed
    assert eviction.decide("rc-broker-master-0", group(1, (1,), {"rc-broker-master-0": (1, "MASTER")}), 2).allowed
    assert eviction.decide("rc-broker-master-5", None, 2).allowed


def test_requests_and_replacements() -> None:
    requests = eviction.EvictionRequests()
    requests.add("c1", "rc-broker-master-0", "uid-1")
    assert requests.of("c1") == {"rc-broker-master-0": "uid-1"} and requests.of("c2") == {}
    requests.deleted_by_operator("c1", "rc-broker-master-0", "uid-1", now=100.0)
    assert requests.of("c1") == {}
    # the StatefulSet's new pod under the same name: an eviction retried by name meets it
    assert requests.replaced("c1", "rc-broker-master-0", "uid-2", now=110.0)
    assert not requests.replaced("c1", "rc-broker-master-0", "uid-1", now=110.0)
    assert not requests.replaced("c1", "rc-broker-master-0", "uid-2", now=100.0 + eviction.EVICTED_MEMORY_SECONDS)
    requests.forget("c1")
    assert not requests.replaced("c1", "rc-broker-master-0", "uid-2", now=110.0)
