"""The controller's replicated state machine: every broker group's replicas, master and SyncStateSet.

Modelled on RocketMQ 5's ``ReplicasInfoManager`` (``controller/impl/manager``): per broker group
(``brokerName``) the controller keeps

* the broker ids handed out and each one's address and ``registerCheckCode``
  (``BrokerReplicaInfo``; ids start at ``MixAll.FIRST_BROKER_CONTROLLER_ID`` = 1),
* the master's broker id and the master epoch, the SyncStateSet (the ids in sync with the
  master) and its epoch (``SyncStateInfo``).

A request is handled in two steps, as in RocketMQ's ``ControllerResult``: a *decision*
(:meth:`ReplicasInfoManager.elect_master`, :meth:`~ReplicasInfoManager.alter_sync_state_set`, ...)
reads the state and the controller's local view of which brokers are alive, and returns the
response plus the events that would change the state; the events go through Raft, and every
controller applies them in log order with :meth:`ReplicasInfoManager.apply_event`. Unlike
RocketMQ's events, ours carry what the decision was based on (the master epoch, the SyncStateSet
epoch): an event whose premise no longer holds when it is applied (another decision committed
first) changes nothing and the request is answered with the fencing code, so two decisions made
concurrently can never both win. Applying is deterministic: it reads nothing but the event and
the state.

Everything here is pure (no I/O, no clock, no threads); the Raft wrapper (:mod:`rocket.controller.raft`)
serialises access.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from rocket.protocol.codes import ResponseCode
from rocket.protocol.controller import (
    broker_member_group,
    elect_master_body,
    parse_sync_state_set,
    sync_state_set_body,
)

#: ``MixAll.FIRST_BROKER_CONTROLLER_ID``: the first broker id a group hands out.
FIRST_BROKER_CONTROLLER_ID = 1

#: Most broker groups, and broker ids per group, the controller keeps (memory stays bounded
#: whoever sends APPLY_BROKER_ID; RocketMQ has no such limits).
MAX_BROKER_GROUPS = 10_000
MAX_BROKERS_PER_GROUP = 64

#: ``(clusterName, brokerName, brokerId) -> bool``: is the broker alive (heartbeats) on this controller.
AlivePredicate = Callable[[str, str, int], bool]


@dataclass(frozen=True, slots=True)
class BrokerLiveInfo:
    """What a broker's last heartbeat said (RocketMQ ``BrokerLiveInfo``): ``epoch`` of its last
    epoch entry, ``max_offset`` of its CommitLog (bytes), ``election_priority`` (lower wins)."""

    broker_id: int
    epoch: int = -1
    max_offset: int = -1
    election_priority: int = 2**31 - 1


#: ``(clusterName, brokerName, brokerId) -> BrokerLiveInfo | None``.
LiveInfoGetter = Callable[[str, str, int], "BrokerLiveInfo | None"]


@dataclass(slots=True)
class BrokerGroup:
    """One broker group's replicas (``BrokerReplicaInfo`` + ``SyncStateInfo``).

    ``brokers`` maps broker id to ``(address, registerCheckCode)``; ``master_broker_id`` is None
    while the group has no master; epochs start at 0 and only grow.
    """

    cluster_name: str
    broker_name: str
    brokers: dict[int, tuple[str, str]] = field(default_factory=dict)
    next_assign_broker_id: int = FIRST_BROKER_CONTROLLER_ID
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0

    def address(self, broker_id: int | None) -> str | None:
        """The registered address of ``broker_id`` (None when unknown)."""
        if broker_id is None:
            return None
        entry = self.brokers.get(broker_id)
        return entry[0] if entry else None

    def broker_addrs(self) -> dict[int, str]:
        """broker id -> address (``BrokerReplicaInfo.getBrokerIdTable``)."""
        return {bid: addr for bid, (addr, _) in sorted(self.brokers.items())}

    def to_json(self) -> dict[str, Any]:
        """A JSON-able copy, for snapshots."""
        return {
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "brokers": {str(k): [a, c] for k, (a, c) in self.brokers.items()},
            "nextAssignBrokerId": self.next_assign_broker_id,
            "masterBrokerId": self.master_broker_id,
            "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> BrokerGroup:
        """Inverse of :meth:`to_json`."""
        return cls(
            cluster_name=str(obj["clusterName"]),
            broker_name=str(obj["brokerName"]),
            brokers={int(k): (str(v[0]), str(v[1])) for k, v in obj.get("brokers", {}).items()},
            next_assign_broker_id=int(obj.get("nextAssignBrokerId", FIRST_BROKER_CONTROLLER_ID)),
            master_broker_id=None if obj.get("masterBrokerId") is None else int(obj["masterBrokerId"]),
            master_epoch=int(obj.get("masterEpoch", 0)),
            sync_state_set={int(x) for x in obj.get("syncStateSet", [])},
            sync_state_set_epoch=int(obj.get("syncStateSetEpoch", 0)),
        )


@dataclass(slots=True)
class ControllerResult:
    """A decision: the response (``code``, ``remark``, ext ``header``, ``body``) and the ``events``
    to commit before answering (RocketMQ ``ControllerResult``). Header values are strings (None
    values are left out of the frame)."""

    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    header: dict[str, str | None] = field(default_factory=dict)
    body: bytes = b""
    events: list[dict[str, Any]] = field(default_factory=list)

    def fail(self, code: int, remark: str) -> ControllerResult:
        """Set an error code and remark; returns self."""
        self.code = code
        self.remark = remark
        return self


def _s(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def member_group_json(group: BrokerGroup) -> dict[str, Any]:
    """The group's ``BrokerMemberGroup``."""
    return broker_member_group(group.cluster_name, group.broker_name, group.broker_addrs())


class DefaultElectPolicy:
    """RocketMQ's ``DefaultElectPolicy``: pick a master first among the SyncStateSet, then (for an
    unclean election) among every replica.

    Among the candidates that are alive: the old master if it still qualifies and nobody is
    preferred; else the preferred broker if it qualifies (else nobody); else the one with the
    highest epoch, then the highest max offset, then the lowest election priority, then (ours, to
    be deterministic) the lowest broker id.
    """

    def __init__(self, alive: AlivePredicate | None = None, live_info: LiveInfoGetter | None = None) -> None:
        self.alive = alive
        self.live_info = live_info

    def elect(self, cluster: str, broker_name: str, sync_state_brokers: set[int] | None,
              all_replica_brokers: set[int] | None, old_master: int | None, prefer: int | None) -> int | None:
        """The new master's broker id, or None when no candidate qualifies."""
        if sync_state_brokers is not None:
            chosen = self._try(cluster, broker_name, sync_state_brokers, old_master, prefer)
            if chosen is not None:
                return chosen
        if all_replica_brokers is not None:
            return self._try(cluster, broker_name, all_replica_brokers, old_master, prefer)
        return None

    def _try(self, cluster: str, broker_name: str, brokers: set[int], old_master: int | None,
             prefer: int | None) -> int | None:
        if self.alive is not None:
            brokers = {b for b in brokers if self.alive(cluster, broker_name, b)}
        if not brokers:
            return None
        if old_master in brokers and (prefer is None or prefer == old_master):
            return old_master
        if prefer is not None:
            return prefer if prefer in brokers else None

        def rank(bid: int) -> tuple[int, int, int, int, int]:
            info = self.live_info(cluster, broker_name, bid) if self.live_info else None
            if info is None:  # no heartbeat data: after every broker that has some
                return (1, 0, 0, 0, bid)
            return (0, -info.epoch, -info.max_offset, info.election_priority, bid)

        return min(brokers, key=rank)


class ReplicasInfoManager:
    """Every broker group's replica state, with RocketMQ's decisions and our event application.

    Not thread-safe: the caller (the Raft wrapper) serialises decisions, applies and reads.
    """

    def __init__(self, *, enable_elect_unclean_master: bool = False) -> None:
        self.groups: dict[str, BrokerGroup] = {}
        self.enable_elect_unclean_master = enable_elect_unclean_master

    # -- snapshots -------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The whole state as JSON-able data (for Raft snapshots)."""
        return {name: g.to_json() for name, g in sorted(self.groups.items())}

    def load_json(self, data: Mapping[str, Any]) -> None:
        """Replace the state with one from :meth:`to_json`."""
        self.groups = {str(name): BrokerGroup.from_json(obj) for name, obj in data.items()}

    # -- decisions (leader only) -------------------------------------------------------------------

    def alter_sync_state_set(self, broker_name: str, master_broker_id: int | None, master_epoch: int | None,
                             new_set: set[int], sync_state_set_epoch: int, alive: AlivePredicate) -> ControllerResult:
        """CONTROLLER_ALTER_SYNC_STATE_SET: the master reports a new SyncStateSet.

        Refused (RocketMQ's checks and codes) when the group is unknown or the set is unchanged
        (ALTER_SYNC_STATE_SET_FAILED), the sender is not the master (INVALID_MASTER), its master
        epoch (FENCED_MASTER_EPOCH) or SyncStateSet epoch (FENCED_SYNC_STATE_SET_EPOCH) is stale,
        a member is unknown (INVALID_REPLICAS) or not alive (BROKER_NOT_ALIVE), or the master
        is left out. On success header ``newSyncStateSetEpoch`` and a SyncStateSet body.
        """
        result = ControllerResult()
        group = self.groups.get(broker_name)
        if group is None:
            return result.fail(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "Broker metadata is not existed")
        if group.sync_state_set == new_set:
            return result.fail(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                               "The newSyncStateSet is equal with oldSyncStateSet, no needed to update syncStateSet")
        if group.master_broker_id is None or group.master_broker_id != master_broker_id:
            return result.fail(ResponseCode.CONTROLLER_INVALID_MASTER,
                               f"Rejecting alter syncStateSet request because the current leader is:"
                               f"{{{group.master_broker_id}}}, not {{{master_broker_id}}}")
        if master_epoch != group.master_epoch:
            return result.fail(ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                               f"Rejecting alter syncStateSet request because the current master epoch is:"
                               f"{{{group.master_epoch}}}, not {{{master_epoch}}}")
        if sync_state_set_epoch != group.sync_state_set_epoch:
            return result.fail(ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                               f"Rejecting alter syncStateSet request because the current syncStateSet epoch is:"
                               f"{{{group.sync_state_set_epoch}}}, not {{{sync_state_set_epoch}}}")
        for replica in sorted(new_set):
            if replica not in group.brokers:
                return result.fail(ResponseCode.CONTROLLER_INVALID_REPLICAS,
                                   f"Rejecting alter syncStateSet request because the replicas {{{replica}}} "
                                   "don't exist")
            if not alive(group.cluster_name, broker_name, replica):
                return result.fail(ResponseCode.CONTROLLER_BROKER_NOT_ALIVE,
                                   f"Rejecting alter syncStateSet request because the replicas {{{replica}}} "
                                   "don't alive")
        if group.master_broker_id not in new_set:
            return result.fail(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                               f"Rejecting alter syncStateSet request because the newSyncStateSet don't contains "
                               f"origin leader {{{group.master_broker_id}}}")
        epoch = group.sync_state_set_epoch + 1
        result.header["newSyncStateSetEpoch"] = str(epoch)
        result.body = sync_state_set_body(new_set, epoch)
        result.events.append({
            "type": "ALTER_SYNC_STATE_SET", "brokerName": broker_name, "newSyncStateSet": sorted(new_set),
            "masterBrokerId": group.master_broker_id, "masterEpoch": group.master_epoch,
            "syncStateSetEpoch": group.sync_state_set_epoch,
        })
        return result

    def elect_master(self, broker_name: str, broker_id: int | None, designate_elect: bool,
                     policy: DefaultElectPolicy) -> ControllerResult:
        """CONTROLLER_ELECT_MASTER, from a broker (its own id), an admin (``designate_elect``: that
        id or nothing) or the controller itself (``broker_id`` None: the best in-sync replica).

        The group's first election makes the requesting broker master. Answers SUCCESS with the
        new master (epochs + 1, SyncStateSet = {master}) and an ``ElectMasterResponseBody``;
        MASTER_STILL_EXIST when the old master is kept; MASTER_NOT_AVAILABLE (the group is left
        without master) or ELECT_MASTER_FAILED when nobody qualifies; BROKER_NEED_TO_BE_REGISTERED
        for an unknown group.
        """
        result = ControllerResult()
        group = self.groups.get(broker_name)
        if group is None:
            return result.fail(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "Broker hasn't been registered")
        if broker_id is not None and broker_id < 0:
            broker_id = None
        old_master = group.master_broker_id
        all_replicas = set(group.brokers) if self.enable_elect_unclean_master else None
        new_master: int | None = None
        if group.master_epoch == 0 and broker_id is not None and broker_id in group.brokers:
            new_master = broker_id  # the first election: whoever asks first
        if new_master is None:
            prefer = broker_id if designate_elect else None
            new_master = policy.elect(group.cluster_name, broker_name, set(group.sync_state_set), all_replicas,
                                      old_master, prefer)
        if new_master is not None and new_master == old_master:
            result.header.update(masterBrokerId=_s(old_master), masterAddress=group.address(old_master),
                                 masterEpoch=_s(group.master_epoch), syncStateSetEpoch=_s(group.sync_state_set_epoch))
            result.body = elect_master_body(None, group.sync_state_set)
            return result.fail(ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                               f"The old master {old_master} is still alive, not need to elect new master for broker "
                               f"{broker_name}")
        event = {"type": "ELECT_MASTER", "brokerName": broker_name, "newMasterBrokerId": new_master,
                 "masterEpoch": group.master_epoch}
        if new_master is not None:
            result.header.update(masterBrokerId=_s(new_master), masterAddress=group.address(new_master),
                                 masterEpoch=_s(group.master_epoch + 1),
                                 syncStateSetEpoch=_s(group.sync_state_set_epoch + 1))
            result.body = elect_master_body(member_group_json(group), [new_master])
            result.events.append(event)
            return result
        if broker_id is None:
            result.events.append(event)
            return result.fail(ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                               "Old master has down and failed to elect a new broker master")
        return result.fail(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect a new master")

    def get_next_broker_id(self, cluster: str, broker_name: str) -> ControllerResult:
        """CONTROLLER_GET_NEXT_BROKER_ID: header ``clusterName``, ``brokerName``, ``nextBrokerId``."""
        group = self.groups.get(broker_name)
        nxt = FIRST_BROKER_CONTROLLER_ID if group is None else group.next_assign_broker_id
        return ControllerResult(header={"clusterName": cluster, "brokerName": broker_name, "nextBrokerId": str(nxt)})

    def apply_broker_id(self, cluster: str, broker_name: str, broker_id: int,
                        register_check_code: str) -> ControllerResult:
        """CONTROLLER_APPLY_BROKER_ID: claim ``broker_id`` with ``registerCheckCode`` (``"<address>;<ms>"``).

        Granted when the group is new and the id is the first one, or the id is free, or it was
        granted to the same check code before; else BROKER_ID_INVALID.
        """
        result = ControllerResult(header={"clusterName": cluster, "brokerName": broker_name})
        code, remark = self._check_apply_broker_id(broker_name, broker_id, register_check_code)
        if code != ResponseCode.SUCCESS:
            return result.fail(code, remark or "")
        result.events.append({"type": "APPLY_BROKER_ID", "clusterName": cluster, "brokerName": broker_name,
                              "brokerAddress": register_check_code.split(";")[0], "brokerId": broker_id,
                              "registerCheckCode": register_check_code})
        return result

    def _check_apply_broker_id(self, broker_name: str, broker_id: int, check_code: str) -> tuple[int, str | None]:
        group = self.groups.get(broker_name)
        if group is None:
            if len(self.groups) >= MAX_BROKER_GROUPS:
                return (ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                        f"the controller holds {MAX_BROKER_GROUPS} broker groups already; clean some first")
            if broker_id == FIRST_BROKER_CONTROLLER_ID:
                return ResponseCode.SUCCESS, None
            return (ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                    f"Broker-set: {broker_name} hasn't been registered in controller, but broker try to apply "
                    f"brokerId: {broker_id}")
        entry = group.brokers.get(broker_id)
        if entry is None and len(group.brokers) >= MAX_BROKERS_PER_GROUP:
            return (ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                    f"broker-set {broker_name} has {MAX_BROKERS_PER_GROUP} broker ids already; clean some first")
        if entry is None or entry[1] == check_code:
            return ResponseCode.SUCCESS, None
        return (ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                f"Fail to apply brokerId: {broker_id} in broker-set: {broker_name}")

    def register_broker(self, cluster: str, broker_name: str, broker_id: int, address: str,
                        alive: AlivePredicate) -> ControllerResult:
        """CONTROLLER_REGISTER_BROKER: a broker that holds an applied id says it is up at ``address``.

        Header ``clusterName``, ``brokerName`` and, when the group's master is alive, its
        ``masterBrokerId``, ``masterAddress``, ``masterEpoch``, ``syncStateSetEpoch``; body the
        SyncStateSet. A changed address is committed (UPDATE_BROKER_ADDRESS).
        """
        result = ControllerResult(header={"clusterName": cluster, "brokerName": broker_name})
        group = self.groups.get(broker_name)
        if group is None:
            return result.fail(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                               f"Broker-set: {broker_name} hasn't been registered in controller")
        if broker_id not in group.brokers:
            return result.fail(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                               f"BrokerId: {broker_id} hasn't been registered in broker-set: {broker_name}")
        master = group.master_broker_id
        if master is not None and alive(cluster, broker_name, master):
            result.header.update(masterBrokerId=str(master), masterAddress=group.address(master),
                                 masterEpoch=str(group.master_epoch), syncStateSetEpoch=str(group.sync_state_set_epoch))
        result.body = sync_state_set_body(group.sync_state_set, group.sync_state_set_epoch)
        if address != group.address(broker_id):
            result.events.append({"type": "UPDATE_BROKER_ADDRESS", "clusterName": cluster, "brokerName": broker_name,
                                  "brokerAddress": address, "brokerId": broker_id})
        return result

    def get_replica_info(self, broker_name: str) -> ControllerResult:
        """CONTROLLER_GET_REPLICA_INFO: header ``masterBrokerId``, ``masterAddress``, ``masterEpoch``;
        body the SyncStateSet; BROKER_METADATA_NOT_EXIST for an unknown group."""
        result = ControllerResult()
        group = self.groups.get(broker_name)
        if group is None:
            return result.fail(ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST, "Broker metadata is not existed")
        master = group.master_broker_id
        result.header.update(masterBrokerId=_s(master), masterAddress=group.address(master),
                             masterEpoch=str(group.master_epoch))
        result.body = sync_state_set_body(group.sync_state_set, group.sync_state_set_epoch)
        return result

    def get_sync_state_data(self, broker_names: Iterable[str], alive: AlivePredicate) -> ControllerResult:
        """CONTROLLER_GET_SYNC_STATE_DATA: a ``BrokerReplicasInfo`` body for the known groups among
        ``broker_names``: ``{"replicasInfoTable": {brokerName: {masterBrokerId, masterAddress,
        masterEpoch, syncStateSetEpoch, inSyncReplicas: [ReplicaIdentity], notInSyncReplicas}}}``
        with ``ReplicaIdentity`` = ``{brokerName, brokerId, brokerAddress, alive}``."""
        table: dict[str, Any] = {}
        for name in broker_names:
            group = self.groups.get(name)
            if group is None:
                continue
            in_sync: list[dict[str, Any]] = []
            not_in_sync: list[dict[str, Any]] = []
            for bid, addr in group.broker_addrs().items():
                replica = {"brokerName": name, "brokerId": bid, "brokerAddress": addr,
                           "alive": bool(alive(group.cluster_name, name, bid))}
                (in_sync if bid in group.sync_state_set else not_in_sync).append(replica)
            table[name] = {
                "masterBrokerId": group.master_broker_id,
                "masterAddress": group.address(group.master_broker_id),
                "masterEpoch": group.master_epoch,
                "syncStateSetEpoch": group.sync_state_set_epoch,
                "inSyncReplicas": in_sync,
                "notInSyncReplicas": not_in_sync,
            }
        return ControllerResult(body=orjson.dumps({"replicasInfoTable": table}))

    def clean_broker_data(self, broker_name: str, ids_to_clean: str | None, clean_living: bool,
                          cluster: str, alive: AlivePredicate) -> ControllerResult:
        """CLEAN_BROKER_DATA: forget a group (``ids_to_clean`` empty) or some of its ids
        (``"1;2"``). Unless ``clean_living``, refused (INVALID_CLEAN_BROKER_METADATA) while the
        group has a master (whole group) or a listed id is alive."""
        result = ControllerResult()
        ids: list[int] | None = None
        if ids_to_clean and ids_to_clean.strip():
            try:
                ids = sorted({int(x) for x in ids_to_clean.split(";") if x.strip()})
            except ValueError as exc:
                return result.fail(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                   f"Please set the option <brokerControllerIdsToClean> according to the format, "
                                   f"exception: {exc}")
        group = self.groups.get(broker_name)
        if not clean_living:
            if ids is None and group is not None and group.master_broker_id is not None:
                return result.fail(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                   f"Broker {broker_name} is still alive, clean up failure")
            for bid in ids or []:
                if alive(cluster, broker_name, bid):
                    return result.fail(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                       f"Broker [{broker_name},  {bid}] is still alive, clean up failure")
        if group is None:
            return result.fail(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                               f"Broker {broker_name} is not existed,clean broker data failure.")
        result.events.append({"type": "CLEAN_BROKER_DATA", "brokerName": broker_name, "brokerIds": ids})
        return result

    def scan_need_reelect(self, alive: AlivePredicate) -> list[str]:
        """Groups whose master is not alive while another of their brokers is
        (``scanNeedReelectBrokerSets``)."""
        out = []
        for name, group in sorted(self.groups.items()):
            master = group.master_broker_id
            if master is None or alive(group.cluster_name, name, master):
                continue
            if any(alive(group.cluster_name, name, bid) for bid in group.brokers):
                out.append(name)
        return out

    def master_of(self, broker_name: str) -> int | None:
        """The master broker id of ``broker_name`` (None: no master or unknown group)."""
        group = self.groups.get(broker_name)
        return group.master_broker_id if group else None

    # -- applying committed events (every controller) -------------------------------------------

    def apply_event(self, event: Mapping[str, Any]) -> tuple[int, str | None]:
        """Apply one committed event; returns ``(code, remark)``: SUCCESS, or the fencing code when
        the event's premise no longer holds (then nothing changed). Raises ``ValueError`` for an
        unknown event type (a newer controller's log: refuse rather than skip it)."""
        kind = event.get("type")
        handler = _APPLIERS.get(str(kind))
        if handler is None:
            raise ValueError(f"unknown controller event type {kind!r}")
        return handler(self, event)

    def _apply_alter(self, ev: Mapping[str, Any]) -> tuple[int, str | None]:
        group = self.groups.get(ev["brokerName"])
        if group is None:
            return ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "Broker metadata is not existed"
        if group.master_broker_id != ev["masterBrokerId"] or group.master_epoch != ev["masterEpoch"]:
            return ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH, "the master changed while the request was committed"
        if group.sync_state_set_epoch != ev["syncStateSetEpoch"]:
            return (ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                    "the SyncStateSet changed while the request was committed")
        group.sync_state_set = {int(x) for x in ev["newSyncStateSet"]}
        group.sync_state_set_epoch += 1
        return ResponseCode.SUCCESS, None

    def _apply_elect(self, ev: Mapping[str, Any]) -> tuple[int, str | None]:
        group = self.groups.get(ev["brokerName"])
        if group is None:
            return ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "Broker hasn't been registered"
        if group.master_epoch != ev["masterEpoch"]:
            return ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH, "another election was committed first"
        new_master = ev.get("newMasterBrokerId")
        group.master_epoch += 1
        if new_master is None:
            group.master_broker_id = None  # no master; the SyncStateSet is kept for the next election
        else:
            group.master_broker_id = int(new_master)
            group.sync_state_set = {int(new_master)}
            group.sync_state_set_epoch += 1
        return ResponseCode.SUCCESS, None

    def _apply_broker_id(self, ev: Mapping[str, Any]) -> tuple[int, str | None]:
        name, bid, code = ev["brokerName"], int(ev["brokerId"]), str(ev["registerCheckCode"])
        verdict = self._check_apply_broker_id(name, bid, code)
        if verdict[0] != ResponseCode.SUCCESS:
            return verdict
        group = self.groups.get(name)
        if group is None:
            group = self.groups[name] = BrokerGroup(str(ev["clusterName"]), name)
        if bid not in group.brokers:
            group.brokers[bid] = (str(ev["brokerAddress"]), code)
            group.next_assign_broker_id = max(group.next_assign_broker_id, bid + 1)
        return ResponseCode.SUCCESS, None

    def _apply_update_address(self, ev: Mapping[str, Any]) -> tuple[int, str | None]:
        group = self.groups.get(ev["brokerName"])
        bid = int(ev["brokerId"])
        if group is None or bid not in group.brokers:
            return ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"BrokerId: {bid} hasn't been registered"
        group.brokers[bid] = (str(ev["brokerAddress"]), group.brokers[bid][1])
        return ResponseCode.SUCCESS, None

    def _apply_clean(self, ev: Mapping[str, Any]) -> tuple[int, str | None]:
        name = ev["brokerName"]
        ids = ev.get("brokerIds")
        if not ids:
            self.groups.pop(name, None)
            return ResponseCode.SUCCESS, None
        group = self.groups.get(name)
        if group is None:
            return ResponseCode.SUCCESS, None
        for bid in ids:
            group.brokers.pop(int(bid), None)
            group.sync_state_set.discard(int(bid))
            if group.master_broker_id == int(bid):  # the master is gone: a new master epoch, no master
                group.master_broker_id = None
                group.master_epoch += 1
        if not group.brokers:
            del self.groups[name]
        return ResponseCode.SUCCESS, None


_APPLIERS: dict[str, Callable[[ReplicasInfoManager, Mapping[str, Any]], tuple[int, str | None]]] = {
    "ALTER_SYNC_STATE_SET": ReplicasInfoManager._apply_alter,
    "ELECT_MASTER": ReplicasInfoManager._apply_elect,
    "APPLY_BROKER_ID": ReplicasInfoManager._apply_broker_id,
    "UPDATE_BROKER_ADDRESS": ReplicasInfoManager._apply_update_address,
    "CLEAN_BROKER_DATA": ReplicasInfoManager._apply_clean,
}

__all__ = [
    "FIRST_BROKER_CONTROLLER_ID",
    "MAX_BROKERS_PER_GROUP",
    "MAX_BROKER_GROUPS",
    "AlivePredicate",
    "BrokerGroup",
    "BrokerLiveInfo",
    "ControllerResult",
    "DefaultElectPolicy",
    "LiveInfoGetter",
    "ReplicasInfoManager",
    "member_group_json",
    "parse_sync_state_set",
    "sync_state_set_body",
]
