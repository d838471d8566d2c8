"""The controller's request processors, broker liveness and master elections (RocketMQ 5
``ControllerManager`` + ``ControllerRequestProcessor``).

:class:`ControllerManager` registers its handlers on any :class:`~rocket.remoting.Processors`
table: the standalone controller's own port (:mod:`rocket.controller.server`) or a NameServer's
(``rocket nameserver --enable-controller-in-namesrv``). Who answers what:

* writes (ALTER_SYNC_STATE_SET, ELECT_MASTER, REGISTER_BROKER, APPLY_BROKER_ID,
  GET_NEXT_BROKER_ID, CLEAN_BROKER_DATA) only on the ready Raft leader, one at a time (RocketMQ's
  ``EventScheduler``); anywhere else they get CONTROLLER_NOT_LEADER (2007) and the client asks
  GET_METADATA_INFO who leads. A write the majority does not commit within ``write_timeout_s``
  gets SYSTEM_ERROR (outcome unknown).
* reads (GET_REPLICA_INFO, GET_SYNC_STATE_DATA) on every controller, from the state it has
  applied (on a follower possibly a little behind, never uncommitted); GET_METADATA_INFO,
  GET/UPDATE_CONTROLLER_CONFIG (this controller's own settings) and BROKER_HEARTBEAT everywhere.

Elections the controller starts itself (leader only): when a master's heartbeats stop for its
timeout, or the connection its heartbeats came on closes, and every
``scanInactiveMasterInterval`` for every group whose master is not alive while another broker of
it is. None starts during the first heartbeat timeout after this process started (its liveness
table is still filling: it must not take a master it has not heard from yet for dead). After a
new master is committed, every alive broker of the group gets NOTIFY_BROKER_ROLE_CHANGED
(oneway, at its registered address) when ``notifyBrokerRoleChanged``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from rocket.controller.config import ConfigError, ControllerConfig, parse_properties
from rocket.controller.heartbeat import BrokerHeartbeatManager
from rocket.controller.raft import CommitTimeoutError, NotLeaderError, RaftNode
from rocket.controller.state import ControllerResult, DefaultElectPolicy, ReplicasInfoManager
from rocket.protocol.codes import RequestCode, ResponseCode
from rocket.protocol.controller import parse_sync_state_set, sync_state_set_body
from rocket.remoting import Processors, RemotingClient, RemotingCommand, RemotingConnection, RemotingError
from rocket.remoting.command import HeaderFieldError

log = logging.getLogger("rocket.controller")

#: ELECT_MASTER answers -> RocketMQ's ``election_result`` label values.
_ELECTION_RESULTS: dict[int, str] = {
    ResponseCode.SUCCESS: "new_master_elected",
    ResponseCode.CONTROLLER_MASTER_STILL_EXIST: "keep_current_master",
    ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE: "no_master_elected",
    ResponseCode.CONTROLLER_ELECT_MASTER_FAILED: "no_master_elected",
}
#: Response codes after which a controller-triggered election is tried again.
_RETRY_ELECTION = {ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH, ResponseCode.SYSTEM_ERROR}


def _opt_int(request: RemotingCommand, name: str) -> int | None:
    text = request.get(name)
    if text is None or text == "" or text == "null":
        return None
    try:
        return int(text)
    except ValueError:
        raise HeaderFieldError(f"the custom field <{name}> is not an integer: {text!r}") from None


class ControllerManager:
    """One controller: Raft member, liveness table, election policy and request handlers.

    ``await start()`` joins the Raft cluster (raises ``OSError`` when its port is taken) and
    starts the scans; ``await stop()`` leaves. ``register(processors)`` installs the handlers and
    ``connection_closed(conn)`` must be called for every closed connection of the port(s) that
    serve them.
    """

    def __init__(self, config: ControllerConfig) -> None:
        config.validate()
        self.config = config
        self.replicas = ReplicasInfoManager(enable_elect_unclean_master=config.enable_elect_unclean_master)
        self.raft = RaftNode(config, self.replicas, on_leadership=self._leadership_changed)
        self.heartbeats = BrokerHeartbeatManager(default_timeout_ms=config.controller_heart_beat_timeout_mills)
        self.heartbeats.listeners.append(self._broker_inactive)
        self.policy = DefaultElectPolicy(self.heartbeats.is_active, self.heartbeats.live_info)
        self.client = RemotingClient(connect_timeout=3.0, tls=config.tls.client())
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._electing: set[str] = set()
        self._notify_tasks: dict[str, tuple[int, asyncio.Task[None]]] = {}
        self._started_at = time.monotonic()
        self._running = False
        self.elections: list[dict[str, Any]] = []  # the last elections this controller committed (bounded)
        #: (clusterName, brokerName, election_result) -> count, RocketMQ's ``election_total`` metric.
        self.election_counts: dict[tuple[str, str, str], int] = {}

    # -- lifecycle ---------------------------------------------------------------------------------

    def register(self, processors: Processors) -> None:
        """Install the controller's request handlers on ``processors``."""
        table: list[tuple[int, Callable[..., Any]]] = [
            (RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, self.process_alter_sync_state_set),
            (RequestCode.CONTROLLER_ELECT_MASTER, self.process_elect_master),
            (RequestCode.CONTROLLER_REGISTER_BROKER, self.process_register_broker),
            (RequestCode.CONTROLLER_GET_REPLICA_INFO, self.process_get_replica_info),
            (RequestCode.CONTROLLER_GET_METADATA_INFO, self.process_get_metadata),
            (RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, self.process_get_sync_state_data),
            (RequestCode.BROKER_HEARTBEAT, self.process_heartbeat),
            (RequestCode.UPDATE_CONTROLLER_CONFIG, self.process_update_config),
            (RequestCode.GET_CONTROLLER_CONFIG, self.process_get_config),
            (RequestCode.CLEAN_BROKER_DATA, self.process_clean_broker_data),
            (RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, self.process_get_next_broker_id),
            (RequestCode.CONTROLLER_APPLY_BROKER_ID, self.process_apply_broker_id),
        ]
        for code, handler in table:
            processors.register(code, handler)

    async def start(self) -> None:
        """Join Raft and start the liveness and inactive-master scans."""
        self._started_at = time.monotonic()
        await self.raft.start()
        self._running = True
        self._spawn(self._scan_brokers_loop(), "controller-scan-brokers")
        self._spawn(self._scan_masters_loop(), "controller-scan-masters")

    def quiesce(self) -> None:
        """Start no more elections (called first when shutting down)."""
        self._running = False

    async def stop(self) -> None:
        """Stop the scans and notifications, leave Raft, close outgoing connections."""
        self._running = False
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.raft.stop()
        await self.client.close()

    def connection_closed(self, conn: RemotingConnection) -> None:
        """A connection of a serving port closed: brokers that sent heartbeats on it are inactive."""
        self.heartbeats.on_channel_closed(conn)

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- helpers -----------------------------------------------------------------------------------

    def _alive(self, cluster: str, broker_name: str, broker_id: int) -> bool:
        return self.heartbeats.is_active(cluster, broker_name, broker_id)

    def _respond(self, request: RemotingCommand, result: ControllerResult) -> RemotingCommand:
        return request.response(result.code, result.remark, ext_fields=dict(result.header), body=result.body)

    def _read(self, request: RemotingCommand, decide: Callable[[], ControllerResult]) -> RemotingCommand:
        with self.raft.lock:
            result = decide()
        return self._respond(request, result)

    async def _commit(self, decide: Callable[[], ControllerResult]) -> ControllerResult:
        """Decide on the leader (one write at a time), commit the events, return the outcome."""
        async with self._write_lock:
            if not self.raft.is_leader:
                return ControllerResult().fail(ResponseCode.CONTROLLER_NOT_LEADER,
                                               "The controller is not in leader state")
            with self.raft.lock:
                self.replicas.enable_elect_unclean_master = self.config.enable_elect_unclean_master
                result = decide()
            if not result.events:
                return result
            try:
                outcomes = await self.raft.propose(result.events)
            except NotLeaderError as exc:
                return ControllerResult().fail(ResponseCode.CONTROLLER_NOT_LEADER, str(exc))
            except CommitTimeoutError as exc:
                return ControllerResult().fail(ResponseCode.SYSTEM_ERROR, str(exc))
            for code, remark in outcomes:
                if code != ResponseCode.SUCCESS:
                    return ControllerResult().fail(code, remark or "refused when committed")
            return result

    async def _write(self, request: RemotingCommand, decide: Callable[[], ControllerResult]) -> RemotingCommand:
        return self._respond(request, await self._commit(decide))

    # -- request handlers --------------------------------------------------------------------------

    async def process_alter_sync_state_set(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """CONTROLLER_ALTER_SYNC_STATE_SET (1001): header ``brokerName``, ``masterBrokerId``,
        ``masterEpoch``; body ``SyncStateSet`` (the new set and the epoch the master knows)."""
        broker_name = request.require("brokerName")
        master_id = _opt_int(request, "masterBrokerId")
        master_epoch = _opt_int(request, "masterEpoch")
        try:
            new_set, epoch = parse_sync_state_set(request.body)
        except ValueError as exc:
            return request.response(ResponseCode.CONTROLLER_INVALID_REQUEST, str(exc))
        return await self._write(request, lambda: self.replicas.alter_sync_state_set(
            broker_name, master_id, master_epoch, new_set, epoch, self._alive))

    async def process_elect_master(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """CONTROLLER_ELECT_MASTER (1002): header ``clusterName``, ``brokerName``, ``brokerId``
        (-1: let the controller choose), ``designateElect`` (mqadmin electMaster: that broker or
        nobody). Answers ``ElectMasterResponseHeader`` + ``ElectMasterResponseBody``."""
        broker_name = request.require("brokerName")
        broker_id = _opt_int(request, "brokerId")
        designate = request.get_bool("designateElect", False)
        result = await self._commit(lambda: self.replicas.elect_master(broker_name, broker_id, designate, self.policy))
        self._count_election(broker_name, result.code)
        if result.code == ResponseCode.SUCCESS:
            self._elected(broker_name, result, "broker" if not designate else "admin")
        return self._respond(request, result)

    async def process_register_broker(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """CONTROLLER_REGISTER_BROKER (1003): header ``clusterName``, ``brokerName``, ``brokerId``,
        ``brokerAddress``."""
        cluster = request.get("clusterName") or ""
        broker_name = request.require("brokerName")
        broker_id = request.require_int("brokerId")
        address = request.require("brokerAddress")
        return await self._write(request, lambda: self.replicas.register_broker(
            cluster, broker_name, broker_id, address, self._alive))

    def process_get_replica_info(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """CONTROLLER_GET_REPLICA_INFO (1004): header ``brokerName``."""
        broker_name = request.require("brokerName")
        return self._read(request, lambda: self.replicas.get_replica_info(broker_name))

    def process_get_metadata(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """CONTROLLER_GET_METADATA_INFO (1005): ``GetMetaDataResponseHeader``: ``group``,
        ``controllerLeaderId``, ``controllerLeaderAddress`` (absent while there is no leader),
        ``isLeader``, ``peers`` (``"n0:host:port;n1:host:port;"``)."""
        leader = self.raft.leader
        peers = "".join(f"{p.id}:{p.address};" for p in self.config.peers)
        return request.response(ext_fields={
            "group": self.config.controller_group,
            "controllerLeaderId": leader.id if leader else None,
            "controllerLeaderAddress": leader.address if leader else None,
            "isLeader": self.raft.is_leader,
            "peers": peers,
        })

    def process_get_sync_state_data(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """CONTROLLER_GET_SYNC_STATE_DATA (1006): body a JSON list of broker names;
        answers a ``BrokerReplicasInfo`` body."""
        try:
            names = orjson.loads(request.body) if request.body else []
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ValueError("expected a JSON list of broker names")
        except (orjson.JSONDecodeError, ValueError) as exc:
            return request.response(ResponseCode.CONTROLLER_INVALID_REQUEST, f"bad broker name list: {exc}")
        return self._read(request, lambda: self.replicas.get_sync_state_data(names, self._alive))

    def process_heartbeat(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """BROKER_HEARTBEAT (904, ``BrokerHeartbeatRequestHeader``): ``clusterName``,
        ``brokerName``, ``brokerAddr``, ``brokerId`` (required here), ``epoch``, ``maxOffset``,
        ``confirmOffset``, ``heartbeatTimeoutMills``, ``electionPriority``."""
        broker_id = _opt_int(request, "brokerId")
        if broker_id is None:
            return request.response(ResponseCode.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId")
        self.heartbeats.on_heartbeat(
            request.get("clusterName") or "", request.require("brokerName"), request.get("brokerAddr") or "",
            broker_id, timeout_ms=_opt_int(request, "heartbeatTimeoutMills"), channel=conn,
            epoch=_opt_int(request, "epoch"), max_offset=_opt_int(request, "maxOffset"),
            confirm_offset=_opt_int(request, "confirmOffset"),
            election_priority=_opt_int(request, "electionPriority"))
        return request.response(ResponseCode.SUCCESS, "Heart beat success")

    def process_update_config(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """UPDATE_CONTROLLER_CONFIG (1009): body Java properties; this controller only (mqadmin
        sends it to each). Black-listed keys get NO_PERMISSION, bad values SYSTEM_ERROR."""
        try:
            props = parse_properties(request.body.decode("utf-8"))
        except UnicodeDecodeError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"body is not UTF-8: {exc}")
        try:
            changed = self.config.update_from_properties(props)
        except ConfigError as exc:
            code = ResponseCode.NO_PERMISSION if "black list" in str(exc) else ResponseCode.SYSTEM_ERROR
            return request.response(code, str(exc))
        if "controllerHeartBeatTimeoutMills" in changed:
            self.heartbeats.default_timeout_ms = self.config.controller_heart_beat_timeout_mills
        log.info("controller config updated by %s: %s", conn.peer, ", ".join(changed) or "nothing")
        return request.response()

    def process_get_config(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """GET_CONTROLLER_CONFIG (1010): this controller's settings as Java properties."""
        return request.response(body=self.config.to_properties().encode())

    async def process_clean_broker_data(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """CLEAN_BROKER_DATA (1011): header ``clusterName``, ``brokerName``,
        ``brokerControllerIdsToClean`` (``"1;2"``; empty: the whole group), ``isCleanLivingBroker``."""
        cluster = request.get("clusterName") or ""
        broker_name = request.require("brokerName")
        ids = request.get("brokerControllerIdsToClean")
        clean_living = request.get_bool("isCleanLivingBroker", False, "cleanLivingBroker")
        return await self._write(request, lambda: self.replicas.clean_broker_data(
            broker_name, ids, clean_living, cluster, self._alive))

    async def process_get_next_broker_id(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """CONTROLLER_GET_NEXT_BROKER_ID (1012): header ``clusterName``, ``brokerName`` (leader only)."""
        cluster = request.get("clusterName") or ""
        broker_name = request.require("brokerName")
        return await self._write(request, lambda: self.replicas.get_next_broker_id(cluster, broker_name))

    async def process_apply_broker_id(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """CONTROLLER_APPLY_BROKER_ID (1013): header ``clusterName``, ``brokerName``,
        ``appliedBrokerId``, ``registerCheckCode`` (``"<address>;<ms>"``)."""
        cluster = request.get("clusterName") or ""
        broker_name = request.require("brokerName")
        broker_id = request.require_int("appliedBrokerId")
        check_code = request.require("registerCheckCode")
        return await self._write(request, lambda: self.replicas.apply_broker_id(cluster, broker_name, broker_id,
                                                                                check_code))

    # -- elections ---------------------------------------------------------------------------------

    def _leadership_changed(self, leading: bool) -> None:
        if leading and self._running:
            self._spawn(self._scan_masters_once(), "controller-scan-masters-now")

    def _in_startup_grace(self) -> bool:
        return time.monotonic() - self._started_at < self.config.controller_heart_beat_timeout_mills / 1000.0

    def _broker_inactive(self, cluster: str, broker_name: str, broker_id: int) -> None:
        if not self._running or not self.raft.is_leader:
            return
        with self.raft.lock:
            master = self.replicas.master_of(broker_name)
        if master == broker_id:
            self.trigger_election(broker_name, reason=f"master {broker_id} inactive")

    def trigger_election(self, broker_name: str, reason: str) -> None:
        """Start a controller-side election for ``broker_name`` unless one is running, this
        controller is still in its startup grace period, or it is stopping."""
        if broker_name in self._electing or not self._running:
            return
        if self._in_startup_grace():
            log.info("not electing a master for %s yet (%s): heartbeats are still arriving after start",
                     broker_name, reason)
            return
        self._electing.add(broker_name)
        task = self._spawn(self._elect(broker_name, reason), f"controller-elect-{broker_name}")
        task.add_done_callback(lambda _t: self._electing.discard(broker_name))

    async def _elect(self, broker_name: str, reason: str) -> None:
        for attempt in range(self.config.elect_master_max_retry_count):
            result = await self._commit(lambda: self.replicas.elect_master(broker_name, None, False, self.policy))
            self._count_election(broker_name, result.code)
            if result.code == ResponseCode.SUCCESS:
                self._elected(broker_name, result, f"controller ({reason})")
                return
            log.warning("election for %s (%s), attempt %d: %s %s", broker_name, reason, attempt + 1,
                        result.code, result.remark)
            if result.code not in _RETRY_ELECTION:
                return
            await asyncio.sleep(0.2)

    def _count_election(self, broker_name: str, code: int) -> None:
        label = _ELECTION_RESULTS.get(code)
        if label is None:
            return
        with self.raft.lock:
            group = self.replicas.groups.get(broker_name)
            cluster = group.cluster_name if group else ""
        key = (cluster, broker_name, label)
        self.election_counts[key] = self.election_counts.get(key, 0) + 1

    def status(self) -> dict[str, Any]:
        """A JSON-able picture of this controller: its Raft view, every broker group (master,
        epochs, SyncStateSet, each broker's address, liveness and sync) and the last elections.
        For ``GET /api/v1/controller`` and the operator's ``status.brokerGroups[]``."""
        leader = self.raft.leader
        raft = self.raft.status()
        groups = []
        with self.raft.lock:
            for name, g in sorted(self.replicas.groups.items()):
                groups.append({
                    "clusterName": g.cluster_name, "brokerName": name, "masterBrokerId": g.master_broker_id,
                    "masterAddress": g.address(g.master_broker_id), "masterEpoch": g.master_epoch,
                    "syncStateSet": sorted(g.sync_state_set), "syncStateSetEpoch": g.sync_state_set_epoch,
                    "brokers": [{"brokerId": bid, "address": addr, "alive": self._alive(g.cluster_name, name, bid),
                                 "inSync": bid in g.sync_state_set} for bid, addr in g.broker_addrs().items()],
                })
        return {
            "self": {"id": self.config.self_peer.id, "address": self.config.self_address},
            "isLeader": self.raft.is_leader,
            "leader": {"id": leader.id, "address": leader.address} if leader else None,
            "peers": [{"id": p.id, "address": p.address, "raftAddress": p.raft_address} for p in self.config.peers],
            "raft": {k: raft.get(k) for k in ("raft_term", "commit_idx", "last_applied", "log_len", "state")
                     if k in raft},
            "brokerGroups": groups,
            "elections": list(self.elections[-20:]),
        }

    def _elected(self, broker_name: str, result: ControllerResult, by: str) -> None:
        header = result.header
        record = {"brokerName": broker_name, "masterBrokerId": header.get("masterBrokerId"),
                  "masterAddress": header.get("masterAddress"), "masterEpoch": header.get("masterEpoch"),
                  "by": by, "at": time.time()}
        self.elections = [*self.elections[-99:], record]
        log.info("elected master %s (%s) of %s, master epoch %s, by %s", header.get("masterBrokerId"),
                 header.get("masterAddress"), broker_name, header.get("masterEpoch"), by)
        if self.config.notify_broker_role_changed:
            self.notify_role_changed(broker_name)

    def notify_role_changed(self, broker_name: str) -> None:
        """Send NOTIFY_BROKER_ROLE_CHANGED (1008, oneway) to every alive broker of the group, at its
        registered address: header ``masterAddress``, ``masterEpoch``, ``syncStateSetEpoch``,
        ``masterBrokerId``; body the SyncStateSet. A newer epoch supersedes a pending older one."""
        with self.raft.lock:
            group = self.replicas.groups.get(broker_name)
            if group is None or group.master_broker_id is None:
                return
            fields = {"masterAddress": group.address(group.master_broker_id), "masterEpoch": group.master_epoch,
                      "syncStateSetEpoch": group.sync_state_set_epoch, "masterBrokerId": group.master_broker_id}
            body = sync_state_set_body(group.sync_state_set, group.sync_state_set_epoch)
            targets = [addr for bid, addr in group.broker_addrs().items()
                       if self._alive(group.cluster_name, broker_name, bid)]
            epoch = group.master_epoch
        for addr in targets:
            pending = self._notify_tasks.get(addr)
            if pending is not None and pending[0] < epoch:
                pending[1].cancel()
            task = self._spawn(self._notify(addr, dict(fields), body), f"controller-notify-{addr}")
            self._notify_tasks[addr] = (epoch, task)
            task.add_done_callback(functools.partial(self._notify_done, addr))

    def _notify_done(self, addr: str, task: asyncio.Task[None]) -> None:
        entry = self._notify_tasks.get(addr)
        if entry is not None and entry[1] is task:
            del self._notify_tasks[addr]

    async def _notify(self, addr: str, fields: dict[str, Any], body: bytes) -> None:
        cmd = RemotingCommand(code=RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
                              ext_fields={k: str(v) for k, v in fields.items() if v is not None}, body=body)
        try:
            await self.client.invoke_oneway(addr, cmd)
        except (RemotingError, OSError, ValueError) as exc:
            log.warning("could not tell %s about the new master: %s", addr, exc)

    # -- scans --------------------------------------------------------------------------------------

    async def _scan_brokers_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.scan_not_active_broker_interval / 1000.0)
            try:
                self.heartbeats.scan_not_active()
            except Exception:
                log.exception("broker liveness scan failed")

    async def _scan_masters_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.scan_inactive_master_interval / 1000.0)
            await self._scan_masters_once()

    async def _scan_masters_once(self) -> None:
        if not self.raft.is_leader or self._in_startup_grace():
            return
        try:
            with self.raft.lock:
                names = self.replicas.scan_need_reelect(self._alive)
            for name in names:
                self.trigger_election(name, reason="master not alive")
        except Exception:
            log.exception("inactive-master scan failed")
