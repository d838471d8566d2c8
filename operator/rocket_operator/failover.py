"""``spec.broker.failover: Controller``: what the operator reads of each group's actual roles, and
how a rolling restart follows them (pure; the steps make the calls).

With controller mode the StatefulSet a broker pod belongs to (``<c>-broker-master``,
``<c>-broker-slave-k``) is a replica slot, not a role: the controllers choose each group's
master and move it on failures. The operator therefore reads, per group:

* from the controllers, CONTROLLER_GET_REPLICA_INFO (RocketMQ ``RequestCode`` 1004, the
  request a controller-mode broker polls): the master's controller broker id and address,
  ``masterEpoch``, the SyncStateSet and ``syncStateSetEpoch``;
* from each broker pod, GET_BROKER_HA_STATUS (907): its controller broker id and the role it
  runs now (``brokerRole``), which maps the controllers' ids to pods.

:class:`GroupState` holds both and gives ``status.brokerGroups[]`` its ``master``,
``masterEpoch``, ``syncStateSet``, ``syncStateSetEpoch`` and ``roles`` fields.

A rolling restart never fights the controllers' choice (:func:`restart_order`,
:func:`master_switch_target`, :func:`settled_reason`):

1. group by group; in each, actual slaves first and the master last (the controllers' master,
   not the brokerId-0 StatefulSet's pod);
2. before deleting a pod, every group must be settled: a master known to the controllers,
   every pod answering, each pod's own role the one the controllers chose, and every pod in
   the SyncStateSet (so the next master switch has an in-sync target, and the pod restarted
   last is back);
3. with two groups or more, the group whose pods are next is made read-only first (on the
   NameServers and its brokers, as a scale-in does; :func:`plan_fence`), so that producers send
   to the other groups while its brokers restart and its master switches, and writable again
   once the rollout moves on to another group (which is fenced only after producers have had
   time to re-read their routes) or ends;
4. the next pod to restart being a master, the operator first moves the master to an in-sync
   slave (ELECT_MASTER with ``designateElect``, as ``rocket cluster failover`` and ``mqadmin
   electMaster`` do), preferring one already on the new revision; once that slave runs as
   master and the old master as its slave, the old master is an outdated slave and is
   restarted as such. A group with a single broker has nobody to switch to: its pod is
   restarted as it is (as with ``failover: Manual``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rocket_operator.rollout import PodView

MASTER = "master"
SLAVE = "slave"
UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class BrokerRole:
    """One broker pod's own answer to GET_BROKER_HA_STATUS: ``controller_id`` (its controller
    broker id, None when unknown), ``role`` as it runs (``MASTER``, ``SLAVE``; "" when it did
    not answer), ``error`` (why it did not)."""

    pod: str
    controller_id: int | None = None
    role: str = ""
    error: str = ""

    @classmethod
    def from_ha_status(cls, pod: str, ha: Mapping[str, Any]) -> BrokerRole:
        """From a GET_BROKER_HA_STATUS answer (``brokerRole``; ``controllerMode.controllerBrokerId``).
        A broker not in controller mode has no controller id."""
        mode = ha.get("controllerMode") or {}
        raw_id = mode.get("controllerBrokerId") if isinstance(mode, Mapping) else None
        role = str(ha.get("brokerRole") or "")
        return cls(pod=pod, controller_id=int(raw_id) if raw_id is not None else None,
                   role="SLAVE" if role == "SLAVE" else ("MASTER" if role else ""))


@dataclass(frozen=True, slots=True)
class GroupState:
    """A broker group as the controllers and its pods see it.

    ``master_id`` / ``master_address``: the controllers' master (None: none); epochs as
    RocketMQ's ``masterEpoch`` and ``syncStateSetEpoch``; ``sync_state_set``: controller broker
    ids in sync; ``brokers``: each pod's :class:`BrokerRole` (in pod order); ``error``: why the
    controllers could not be asked ("" when they answered).
    """

    index: int
    name: str
    master_id: int | None = None
    master_address: str | None = None
    master_epoch: int = 0
    sync_state_set: tuple[int, ...] = ()
    sync_state_set_epoch: int = 0
    brokers: tuple[BrokerRole, ...] = ()
    error: str = ""

    def pod_of(self, controller_id: int | None) -> str | None:
        """The pod whose broker has ``controller_id`` (None when no pod reported it)."""
        if controller_id is None:
            return None
        return next((b.pod for b in self.brokers if b.controller_id == controller_id), None)

    @property
    def master_pod(self) -> str | None:
        """The pod the controllers made master (None: no master, or its pod did not answer)."""
        return self.pod_of(self.master_id)

    def role(self, pod: str) -> str:
        """``master`` / ``slave`` as the controllers chose for ``pod``; ``unknown`` when the
        controllers were not read, have no master, or the pod's controller id is unknown."""
        broker = next((b for b in self.brokers if b.pod == pod), None)
        if self.error or self.master_id is None or broker is None or broker.controller_id is None:
            return UNKNOWN
        return MASTER if broker.controller_id == self.master_id else SLAVE

    def status_fields(self) -> dict[str, Any]:
        """The controller fields of this group's ``status.brokerGroups`` entry: ``master``
        (``brokerId``: controller broker id, ``address``, ``pod``), ``masterEpoch``,
        ``syncStateSet`` (sorted ids), ``syncStateSetEpoch``, ``roles`` (pod -> master, slave or
        unknown) and ``controllerError`` when the controllers could not be read."""
        out: dict[str, Any] = {"roles": {b.pod: self.role(b.pod) for b in self.brokers}}
        if self.error:
            out["controllerError"] = self.error
            return out
        if self.master_id is not None:
            out["master"] = {"brokerId": self.master_id, "address": self.master_address or "",
                             "pod": self.master_pod or ""}
        out.update(masterEpoch=self.master_epoch, syncStateSet=sorted(self.sync_state_set),
                   syncStateSetEpoch=self.sync_state_set_epoch)
        return out


def settled_reason(group: GroupState) -> str:
    """Why ``group`` is not settled enough for a pod restart ("" when it is): the controllers
    were not read, it has no master, a pod did not answer or runs another role than the
    controllers chose, or a pod is not in the SyncStateSet."""
    if group.error:
        return f"cannot read {group.name} from the controllers: {group.error}"
    if group.master_id is None:
        return f"{group.name} has no master yet"
    for broker in group.brokers:
        if broker.error or broker.controller_id is None:
            return f"cannot read the role of {broker.pod}: {broker.error or 'no controller broker id yet'}"
        wanted = "MASTER" if broker.controller_id == group.master_id else "SLAVE"
        if broker.role != wanted:
            return (f"waiting for {broker.pod} to run as {wanted.lower()} as the controllers chose "
                    f"(it runs as {broker.role.lower() or 'nothing'})")
    for broker in group.brokers:
        if broker.controller_id not in group.sync_state_set:
            return f"waiting for {broker.pod} to join the SyncStateSet of {group.name}"
    return ""


def groups_settled(groups: Mapping[int, GroupState]) -> str:
    """The first :func:`settled_reason` over ``groups`` in index order ("" when all are settled)."""
    for index in sorted(groups):
        reason = settled_reason(groups[index])
        if reason:
            return reason
    return ""


def actual_roles(groups: Mapping[int, GroupState]) -> dict[str, str]:
    """pod -> ``master`` / ``slave`` / ``unknown`` over every group."""
    return {b.pod: g.role(b.pod) for g in groups.values() for b in g.brokers}


def restart_order(pods: Sequence[PodView], roles: Mapping[str, str]) -> list[PodView]:
    """``pods`` in restart order: group by group, the highest first (as
    :func:`rocket_operator.rollout.restart_order` goes for Manual), and in each group by ACTUAL
    role: slaves (and pods of unknown role) first, the highest StatefulSet (brokerId label) first,
    then the master. Group by group, so that each group is made read-only once (:func:`plan_fence`)."""
    return sorted(pods, key=lambda p: (-p.group, roles.get(p.name) == MASTER, -p.broker_id))


@dataclass(frozen=True, slots=True)
class MasterSwitch:
    """Move group ``group``'s master from pod ``from_pod`` to the broker of controller id
    ``to_id`` (pod ``to_pod``) before restarting ``from_pod``."""

    group: GroupState
    from_pod: str
    to_id: int
    to_pod: str


@dataclass(frozen=True, slots=True)
class RoleAwareStep:
    """What to do about the pod a rolling restart picked: ``delete`` it, ``switch`` its group's
    master first, or neither (``waiting`` says why)."""

    delete: PodView | None = None
    switch: MasterSwitch | None = None
    waiting: str = ""


def master_switch_target(group: GroupState, updated_pods: Collection[str]) -> BrokerRole | None:
    """The slave to make master before ``group``'s master restarts: an alive SyncStateSet member
    running as slave, preferring one whose pod is in ``updated_pods`` (already on the new
    revision), then the lowest controller id. None when there is none."""
    candidates = [b for b in group.brokers
                  if b.controller_id is not None and b.controller_id != group.master_id
                  and b.controller_id in group.sync_state_set and b.role == "SLAVE" and not b.error]
    if not candidates:
        return None
    return min(candidates, key=lambda b: (b.pod not in updated_pods, b.controller_id))


def next_step(pick: PodView, groups: Mapping[int, GroupState], updated_pods: Collection[str]) -> RoleAwareStep:
    """For the pod a rolling restart picked (every gate open): delete it when the controllers
    made it a slave (or its group has no other broker), else switch its group's master to
    :func:`master_switch_target` first; wait when no target is in sync."""
    group = groups.get(pick.group)
    if group is None or group.role(pick.name) != MASTER:
        return RoleAwareStep(delete=pick)
    if len(group.brokers) <= 1:
        return RoleAwareStep(delete=pick)  # nobody to take over: restarted as it is
    target = master_switch_target(group, updated_pods)
    if target is None or target.controller_id is None:
        return RoleAwareStep(waiting=f"no in-sync slave of {group.name} to take over from {pick.name}")
    return RoleAwareStep(switch=MasterSwitch(group=group, from_pod=pick.name, to_id=target.controller_id,
                                             to_pod=target.pod))


# -- write fence around a restart ------------------------------------------------------------------

#: Seconds a group stays read-only before one of its brokers is restarted or its master switched:
#: sends the brokers took before refusing new ones finish within RocketMQ's ``slaveTimeout`` (3 s).
WRITE_FENCE_SETTLE_SECONDS = 3.0


@dataclass(frozen=True, slots=True)
class FenceStep:
    """What the rollout does about write permissions before touching a group's pods:
    ``release``: the group to make writable again (None: none); ``fence``: the group to make
    read-only now (None: none); ``proceed``: the restart or switch may happen now; ``waiting``: why
    not."""

    release: str | None = None
    fence: str | None = None
    proceed: bool = False
    waiting: str = ""


def plan_fence(fenced: str | None, fenced_for: float, target: str | None, writable_groups: int,
               resumed_for: float | None = None, route_refresh: float = 30.0,
               settle: float = WRITE_FENCE_SETTLE_SECONDS) -> FenceStep:
    """The write fence of a role-aware rolling restart (RocketMQ's graceful broker restart:
    ``mqadmin wipeWritePerm`` first, so producers send to the other groups; our producers and
    Apache's retry a NO_PERMISSION answer on another group).

    ``fenced``: the group an earlier pass made read-only (None: none), for ``fenced_for`` seconds;
    ``target``: the group whose pod is to be restarted or whose master is to be switched now
    (None: nothing left to restart); ``writable_groups``: active groups of the cluster (with fewer
    than 2 there is nowhere else to send: no fence, and a master switch may then fail sends);
    ``resumed_for``: seconds since the last fenced group took writes again (None: never);
    ``route_refresh``: how often producers re-read routes (RocketMQ clients'
    ``pollNameServerInterval``, 30 s): a group is fenced only that long after the previous one was
    released, so that no producer still sees that one read-only while this one refuses sends.
    ``settle``: seconds a fenced group waits before its brokers are touched.
    """
    if target is None or writable_groups < 2:
        return FenceStep(release=fenced, proceed=target is not None)
    if fenced is not None and fenced != target:
        return FenceStep(release=fenced, waiting=f"{fenced} takes writes again; {target} is made read-only "
                                                 f"once producers have re-read their routes ({route_refresh:.0f} s)")
    if fenced is None:
        if resumed_for is not None and resumed_for < route_refresh:
            return FenceStep(waiting=f"{target} is made read-only {route_refresh - resumed_for:.0f} s from now, "
                                     "once producers have re-read their routes")
        return FenceStep(fence=target, waiting=f"{target} made read-only; its brokers restart in {settle:.0f} s")
    if fenced_for < settle:
        return FenceStep(waiting=f"{target} is read-only since {fenced_for:.1f} s; its brokers restart after "
                                 f"{settle:.0f} s")
    return FenceStep(proceed=True)
