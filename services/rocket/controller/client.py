"""A client of the controller for a controller-mode broker and for tools (RocketMQ 5's
``BrokerOuterAPI`` controller calls, plus leader discovery and redirects).

:class:`ControllerClient` knows every controller address (a broker's ``controllerAddr``), finds
the leader with CONTROLLER_GET_METADATA_INFO, sends writes there and follows the leader when a
controller answers CONTROLLER_NOT_LEADER or cannot be reached. Heartbeats go to every
controller. The steps a broker takes with it are in :mod:`rocket.controller` (the contract).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import orjson

from rocket.protocol.codes import RequestCode, ResponseCode
from rocket.protocol.controller import parse_sync_state_set, sync_state_set_body
from rocket.remoting import RemotingClient, RemotingCommand, RemotingCommandError, RemotingError


class NoControllerLeaderError(RemotingError):
    """No controller named a reachable leader in time (no majority, or none reachable)."""


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """A group's master and SyncStateSet as the controller holds them (``master_broker_id`` None:
    no master). Epochs as RocketMQ's ``masterEpoch`` / ``syncStateSetEpoch``."""

    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


def _int_or_none(text: str | None) -> int | None:
    return None if text is None or text in ("", "null") else int(text)


class ControllerClient:
    """Talks to a controller group.

    ``addrs``: every controller's ``host:port``. ``timeout``: seconds for one request;
    ``redirect_timeout``: how long a write keeps looking for the leader. Methods raise
    :class:`RemotingCommandError` for an answer with an unexpected code (its ``code`` is the
    RocketMQ response code), :class:`NoControllerLeaderError` when no leader is found.
    ``rpc_hook``: called with every request before it is sent (RocketMQ's ``RPCHook``, e.g.
    ``SessionCredentials.sign`` for controllers running with ACL), also over a shared ``client``.
    """

    def __init__(self, addrs: Iterable[str], *, client: RemotingClient | None = None, timeout: float = 3.0,
                 redirect_timeout: float = 10.0,
                 rpc_hook: Callable[[RemotingCommand], None] | None = None) -> None:
        self.addrs = [a.strip() for a in addrs if a.strip()]
        if not self.addrs:
            raise ValueError("no controller addresses")
        self._own_client = client is None
        self.client = client or RemotingClient()
        self.timeout = timeout
        self.redirect_timeout = redirect_timeout
        self.leader_addr: str | None = None
        self.rpc_hook = rpc_hook

    @classmethod
    def from_controller_addr(cls, controller_addr: str, **kwargs: object) -> ControllerClient:
        """From a broker's ``controllerAddr`` (``;`` or ``,`` separated)."""
        return cls(controller_addr.replace(",", ";").split(";"), **kwargs)  # type: ignore[arg-type]

    async def close(self) -> None:
        """Close the connections (when the client was created here)."""
        if self._own_client:
            await self.client.close()

    async def _invoke(self, addr: str, code: int, fields: dict[str, object] | None = None,
                      body: bytes = b"") -> RemotingCommand:
        ext = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (fields or {}).items()
               if v is not None}
        request = RemotingCommand(code=int(code), ext_fields=ext, body=body)
        if self.rpc_hook is not None:
            self.rpc_hook(request)
        return await self.client.invoke(addr, request, timeout=self.timeout)

    async def metadata(self, addr: str) -> dict[str, str]:
        """CONTROLLER_GET_METADATA_INFO from ``addr``: ``group``, ``controllerLeaderId``,
        ``controllerLeaderAddress`` (absent without a leader), ``isLeader``, ``peers``."""
        resp = await self._invoke(addr, RequestCode.CONTROLLER_GET_METADATA_INFO)
        if resp.code != ResponseCode.SUCCESS:
            raise RemotingCommandError(resp.code, resp.remark, "controller metadata")
        return dict(resp.ext_fields)

    async def find_leader(self) -> str:
        """Ask the controllers in turn who leads; remembers and returns the leader's address."""
        for addr in self.addrs:
            try:
                meta = await self.metadata(addr)
            except (RemotingError, OSError):
                continue
            leader = meta.get("controllerLeaderAddress")
            if leader:
                self.leader_addr = leader
                return leader
        self.leader_addr = None
        raise NoControllerLeaderError(f"no controller leader among {self.addrs}")

    async def call_leader(self, code: int, fields: dict[str, object] | None = None, body: bytes = b"",
                          ok: Sequence[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """Send a request to the leader, following it on CONTROLLER_NOT_LEADER or a connection
        failure for up to ``redirect_timeout`` seconds. Raises :class:`RemotingCommandError` for an
        answer whose code is not in ``ok``."""
        deadline = time.monotonic() + self.redirect_timeout
        last: Exception | None = None
        while True:
            try:
                leader = self.leader_addr or await self.find_leader()
                resp = await self._invoke(leader, code, fields, body)
                if resp.code != ResponseCode.CONTROLLER_NOT_LEADER:
                    if resp.code not in ok:
                        raise RemotingCommandError(resp.code, resp.remark, f"controller request {code}")
                    return resp
                last = RemotingCommandError(resp.code, resp.remark, f"controller request {code}")
            except (NoControllerLeaderError, RemotingError, OSError) as exc:
                if isinstance(exc, RemotingCommandError):
                    raise
                last = exc
            self.leader_addr = None
            if time.monotonic() >= deadline:
                raise NoControllerLeaderError(f"controller request {code}: {last}")
            await asyncio.sleep(0.2)

    # -- the broker's calls ---------------------------------------------------------------------------

    async def get_next_broker_id(self, cluster: str, broker_name: str) -> int:
        """CONTROLLER_GET_NEXT_BROKER_ID: the id to apply for."""
        resp = await self.call_leader(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                                      {"clusterName": cluster, "brokerName": broker_name})
        return int(resp.ext_fields["nextBrokerId"])

    async def apply_broker_id(self, cluster: str, broker_name: str, broker_id: int, register_check_code: str) -> None:
        """CONTROLLER_APPLY_BROKER_ID; CONTROLLER_BROKER_ID_INVALID (2014) when it is taken."""
        await self.call_leader(RequestCode.CONTROLLER_APPLY_BROKER_ID, {
            "clusterName": cluster, "brokerName": broker_name, "appliedBrokerId": broker_id,
            "registerCheckCode": register_check_code})

    async def register_broker(self, cluster: str, broker_name: str, broker_id: int, address: str) -> ReplicaInfo:
        """CONTROLLER_REGISTER_BROKER: the group's alive master (if any) and SyncStateSet."""
        resp = await self.call_leader(RequestCode.CONTROLLER_REGISTER_BROKER, {
            "clusterName": cluster, "brokerName": broker_name, "brokerId": broker_id, "brokerAddress": address})
        return self._replica_info(resp)

    async def elect_master(self, cluster: str, broker_name: str, broker_id: int | None = None, *,
                           designate: bool = False) -> ReplicaInfo:
        """CONTROLLER_ELECT_MASTER (a broker: its own id; an admin: ``designate=True``). SUCCESS and
        CONTROLLER_MASTER_STILL_EXIST both return the master."""
        resp = await self.call_leader(RequestCode.CONTROLLER_ELECT_MASTER, {
            "clusterName": cluster, "brokerName": broker_name, "brokerId": -1 if broker_id is None else broker_id,
            "designateElect": designate}, ok=(ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST))
        h = resp.ext_fields
        body = orjson.loads(resp.body) if resp.body else {}
        return ReplicaInfo(_int_or_none(h.get("masterBrokerId")), h.get("masterAddress"),
                           int(h.get("masterEpoch") or 0), frozenset(int(x) for x in body.get("syncStateSet") or []),
                           int(h.get("syncStateSetEpoch") or 0))

    async def alter_sync_state_set(self, broker_name: str, master_broker_id: int, master_epoch: int,
                                   new_set: Iterable[int], sync_state_set_epoch: int) -> tuple[frozenset[int], int]:
        """CONTROLLER_ALTER_SYNC_STATE_SET: the new set and its epoch. Fencing answers
        (2000-2003, 2006, 2013) raise :class:`RemotingCommandError`."""
        resp = await self.call_leader(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
            "brokerName": broker_name, "masterBrokerId": master_broker_id, "masterEpoch": master_epoch},
            sync_state_set_body(new_set, sync_state_set_epoch))
        ids, epoch = parse_sync_state_set(resp.body)
        return frozenset(ids), epoch

    async def get_replica_info(self, broker_name: str) -> ReplicaInfo:
        """CONTROLLER_GET_REPLICA_INFO from the leader."""
        return self._replica_info(await self.call_leader(RequestCode.CONTROLLER_GET_REPLICA_INFO,
                                                         {"brokerName": broker_name}))

    async def get_replica_info_at(self, addr: str, broker_name: str) -> ReplicaInfo:
        """CONTROLLER_GET_REPLICA_INFO from the controller at ``addr`` (no redirect): for a
        broker that has just checked that ``addr`` leads. Raises :class:`RemotingCommandError`
        for an answer other than SUCCESS."""
        resp = await self._invoke(addr, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": broker_name})
        if resp.code != ResponseCode.SUCCESS:
            raise RemotingCommandError(resp.code, resp.remark, "controller GET_REPLICA_INFO")
        return self._replica_info(resp)

    async def heartbeat(self, cluster: str, broker_name: str, broker_addr: str, broker_id: int, *, epoch: int,
                        max_offset: int, confirm_offset: int, timeout_ms: int = 10_000,
                        election_priority: int | None = None) -> None:
        """BROKER_HEARTBEAT (oneway) to every controller at once; unreachable ones are skipped (one
        that does not take the frame within ``timeout`` seconds delays none of the others)."""
        fields: dict[str, object] = {
            "clusterName": cluster, "brokerName": broker_name, "brokerAddr": broker_addr, "brokerId": broker_id,
            "epoch": epoch, "maxOffset": max_offset, "confirmOffset": confirm_offset,
            "heartbeatTimeoutMills": timeout_ms, "electionPriority": election_priority}
        ext = {k: str(v) for k, v in fields.items() if v is not None}

        async def one(addr: str) -> None:
            try:
                await asyncio.wait_for(self.client.invoke_oneway(
                    addr, RemotingCommand(code=RequestCode.BROKER_HEARTBEAT, ext_fields=dict(ext))), self.timeout)
            except (RemotingError, OSError, TimeoutError):
                pass

        await asyncio.gather(*(one(a) for a in self.addrs))

    @staticmethod
    def _replica_info(resp: RemotingCommand) -> ReplicaInfo:
        h = resp.ext_fields
        ids, epoch = parse_sync_state_set(resp.body) if resp.body else (set(), 0)
        return ReplicaInfo(_int_or_none(h.get("masterBrokerId")), h.get("masterAddress"),
                           int(h.get("masterEpoch") or 0), frozenset(ids), epoch)
