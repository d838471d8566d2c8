"""What the operator asks of NameServers and brokers, over the RocketMQ remoting protocol.

:class:`ClusterAdmin` is the interface the reconciler uses (tests may pass a
fake); :class:`RemotingClusterAdmin` implements it with
:class:`rocket.remoting.client.RemotingClient` and RocketMQ's request codes
(``RequestCode``; what mqadmin sends through ``MQAdminExt``):

========================================  ===============================================
registration check                        106 GET_BROKER_CLUSTER_INFO on every NameServer
read-only before scale-in                 205 WIPE_WRITE_PERM_OF_BROKER on every NameServer,
                                          25 UPDATE_BROKER_CONFIG ``brokerPermission=4``
undo (scale-in cancelled)                 327 ADD_WRITE_PERM_OF_BROKER, 25 ``brokerPermission=6``
copy to a new group (scale-out)           21 GET_ALL_TOPIC_CONFIG / 201 GET_ALL_SUBSCRIPTIONGROUP_CONFIG
                                          -> 17 UPDATE_AND_CREATE_TOPIC / 200 UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
drain progress                            43 GET_ALL_CONSUMER_OFFSET, 30/31 GET_MAX/MIN_OFFSET,
                                          45 GET_ALL_DELAY_OFFSET (208 GET_CONSUME_STATS as fallback)
slave caught up                           28 GET_BROKER_RUNTIME_INFO ``commitLogMaxOffset``
remove a group                            104 UNREGISTER_BROKER on every NameServer
a broker's actual role (controller mode)  907 GET_BROKER_HA_STATUS
a group's master, epochs, SyncStateSet    1004 CONTROLLER_GET_REPLICA_INFO to the controller leader
switch a master (controller mode)         1002 CONTROLLER_ELECT_MASTER ``designateElect=true``
                                          (``rocket cluster failover``'s code path)
========================================  ===============================================

Errors: every method raises :class:`AdminError` (a message naming the request
and the peer) when a peer cannot be reached or answers with an error.

Signing (RocketMQ ACL): :meth:`ClusterAdmin.with_credentials` gives a view whose every request
carries ``AccessKey`` and ``Signature`` as ``AclClientRPCHook`` makes them; a pass of a cluster
with ``spec.security.acl`` uses its admin user's keys. :func:`http_auth_headers` is the same
credential for the brokers', NameServers' and controllers' ``/api/v1`` (HTTP Basic; a controller
with ACL accepts its Super users' keys). The controller requests (1004 through
:class:`rocket.controller.client.ControllerClient`, 1002 through ``Admin.failover``) are signed too.

TLS: :meth:`ClusterAdmin.with_tls` gives a view connecting with TLS (a cluster with
``spec.security.tls.mode: Enforcing``), trusting the cluster's CA bundle.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocket.auth.signature import SessionCredentials
from rocket.client.admin import Admin
from rocket.controller.client import ControllerClient, ReplicaInfo
from rocket.protocol import (
    PERM_READ,
    PERM_WRITE,
    ClusterInfo,
    RequestCode,
    ResponseCode,
    TopicConfig,
    TopicConfigSerializeWrapper,
    dumps,
    loads_lenient,
    parse_kv_table,
)
from rocket.remoting.client import RemotingClient
from rocket.remoting.command import RemotingCommand, RemotingError
from rocket.remoting.tls import ClientTls

PERM_READ_WRITE = PERM_READ | PERM_WRITE

#: Topics of the broker itself, never copied to another group nor counted as backlog.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
SYSTEM_TOPICS = frozenset({
    "TBW102", SCHEDULE_TOPIC, "RMQ_SYS_TRACE_TOPIC", "BenchmarkTest", "OFFSET_MOVED_EVENT",
    "SELF_TEST_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
})
SYSTEM_GROUPS = frozenset({
    "TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "__MONITOR_CONSUMER", "CLIENT_INNER_PRODUCER", "SELF_TEST_P_GROUP",
    "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_ONSAPI_PULL",
    "CID_RMQ_SYS_TRANS",
})
#: Prefix of the broker's own system topics (any name starting with it).
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


class AdminError(Exception):
    """A NameServer or broker could not be reached, or refused a request."""


@dataclass(slots=True)
class Registration:
    """What the NameServers report for one cluster.

    ``per_nameserver[addr]`` maps brokerName -> {brokerId: broker address} as
    seen by that NameServer; ``unreachable`` lists NameServers that did not answer.
    """

    per_nameserver: dict[str, dict[str, dict[int, str]]] = field(default_factory=dict)
    unreachable: list[str] = field(default_factory=list)

    def registered_everywhere(self, broker_name: str, broker_id: int = 0) -> bool:
        """True when every NameServer answered and each lists ``broker_id`` of ``broker_name``."""
        if self.unreachable or not self.per_nameserver:
            return False
        return all(broker_id in table.get(broker_name, {}) for table in self.per_nameserver.values())

    def registered_anywhere(self, broker_name: str) -> bool:
        """True when at least one NameServer still lists ``broker_name``."""
        return any(broker_name in table for table in self.per_nameserver.values())


@dataclass(slots=True)
class DrainProgress:
    """Backlog left on one draining master, in messages.

    ``lag``: per ``"topic@group"``, messages a consumer group has not consumed
    yet (retry topics included). ``unconsumed``: per topic, messages on topics
    no group has consumed from this broker. ``delayed``: scheduled (delay-level)
    messages not yet delivered. Zero everywhere means nothing would be lost.
    """

    lag: dict[str, int] = field(default_factory=dict)
    unconsumed: dict[str, int] = field(default_factory=dict)
    delayed: int = 0

    @property
    def total(self) -> int:
        """Every pending message counted once per consumer group."""
        return sum(self.lag.values()) + sum(self.unconsumed.values()) + self.delayed

    @property
    def drained(self) -> bool:
        """True when nothing is pending."""
        return self.total == 0


class ClusterAdmin:
    """Interface of the remoting calls the reconciler makes (see the module table)."""

    async def registration(self, nameservers: list[str], cluster_name: str) -> Registration:
        """brokerName -> {brokerId: addr} of ``cluster_name`` on every NameServer."""
        raise NotImplementedError

    async def set_write_permission(self, nameservers: list[str], broker_name: str, broker_addrs: list[str],
                                   writable: bool) -> None:
        """Wipe (or restore) write permission of a broker group on every NameServer and on its brokers."""
        raise NotImplementedError

    async def copy_metadata(self, source: str, target: str, exclude_topics: frozenset[str] = frozenset()
                            ) -> tuple[int, int]:
        """Copy every topic and subscription group from broker ``source`` to ``target``: (topics, groups).

        ``exclude_topics``: broker-specific topics (named after the cluster or a broker group).
        """
        raise NotImplementedError

    async def create_topics(self, broker: str, topics: Iterable[tuple[str, int, int]]) -> None:
        """Create or update ``(name, queues, perm)`` topics on a master."""
        raise NotImplementedError

    async def drain_progress(self, broker: str, exclude_topics: frozenset[str] = frozenset()) -> DrainProgress:
        """What is still pending on master ``broker`` (``exclude_topics``: broker-specific topics)."""
        raise NotImplementedError

    async def slave_caught_up(self, master: str, slave: str) -> bool:
        """True when ``slave``'s CommitLog reaches ``master``'s (within the allowance)."""
        raise NotImplementedError

    async def unregister(self, nameservers: list[str], cluster_name: str, broker_name: str,
                         brokers: Mapping[int, str]) -> None:
        """UNREGISTER_BROKER of every ``brokerId -> addr`` of a group on every NameServer."""
        raise NotImplementedError

    async def broker_ha_status(self, broker: str) -> dict[str, Any]:
        """GET_BROKER_HA_STATUS of ``broker``: ``brokerRole``, ``controllerMode`` (its controller
        broker id, master epoch, SyncStateSet) and replication figures."""
        raise NotImplementedError

    async def replica_info(self, controllers: list[str], broker_name: str) -> ReplicaInfo:
        """The controllers' view of group ``broker_name`` (master id and address, epochs, SyncStateSet)."""
        raise NotImplementedError

    async def switch_master(self, nameservers: list[str], broker_name: str, broker_id: int) -> dict[str, Any]:
        """Make controller broker id ``broker_id`` the master of ``broker_name`` through the
        controllers and wait until it runs as master; returns its HA status."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release connections."""

    def with_credentials(self, credentials: SessionCredentials | None) -> ClusterAdmin:
        """This admin signing every request with ``credentials`` (RocketMQ ACL; None: unsigned).
        The default (for admins that sign nothing, such as test fakes) returns ``self``."""
        return self

    def with_tls(self, ca_file: str | None) -> ClusterAdmin:
        """This admin connecting with TLS, trusting the CA bundle file ``ca_file`` (None:
        plaintext). The default (test fakes) returns ``self``."""
        return self


def http_auth_headers(credentials: SessionCredentials | None) -> dict[str, str]:
    """The ``Authorization`` header of a broker's or NameServer's ``/api/v1`` request made with the
    admin (Super) user's keys: ``Basic base64(AccessKey:SecretKey)`` (``rocket.auth.http``);
    empty without credentials."""
    if credentials is None:
        return {}
    token = base64.b64encode(f"{credentials.access_key}:{credentials.secret_key}".encode()).decode("ascii")
    return {"Authorization": f"Basic {token}"}


_OFFSET_PAIR = re.compile(r"\{[^{}]*\"brokerOffset\"\s*:\s*(-?\d+)[^{}]*\"consumerOffset\"\s*:\s*(-?\d+)[^{}]*\}")


def parse_consume_stats_lag(body: bytes) -> int:
    """Sum of ``brokerOffset - consumerOffset`` over a ``GET_CONSUME_STATS`` answer (RocketMQ's ``ConsumeStats``).

    Its ``offsetTable`` maps MessageQueue *objects* to OffsetWrapper objects: fastjson writes
    a map with object keys, which is not JSON; every ``{"brokerOffset":..,"consumerOffset":..}`` object
    is read wherever it appears.
    """
    text = body.decode("utf-8", errors="replace")
    return sum(max(0, int(b) - int(c)) for b, c in _OFFSET_PAIR.findall(text))


class RemotingClusterAdmin(ClusterAdmin):
    """:class:`ClusterAdmin` over one shared :class:`RemotingClient`.

    ``timeout``: seconds per request. ``catch_up_allowance``: bytes a slave may
    trail its master's CommitLog and still count as caught up (writes keep
    coming during a rolling restart).
    """

    def __init__(self, client: RemotingClient | None = None, *, timeout: float = 3.0,
                 catch_up_allowance: int = 256 * 1024, credentials: SessionCredentials | None = None) -> None:
        self.client = client or RemotingClient(connect_timeout=min(timeout, 2.0))
        self.timeout = timeout
        self.catch_up_allowance = catch_up_allowance
        #: What every request is signed with (``AclClientRPCHook``), None: unsigned.
        self.credentials = credentials
        #: The CA bundle file of :attr:`tls` (None: plaintext).
        self.tls_ca_file: str | None = None
        #: The TLS of the connections (:meth:`with_tls`), None: plaintext.
        self.tls: ClientTls | None = None
        #: CA bundle file -> a client connecting with TLS, shared by every view of this admin.
        self._tls_clients: dict[str, RemotingClient] = {}
        self._plain_client = self.client

    def with_credentials(self, credentials: SessionCredentials | None) -> RemotingClusterAdmin:
        """A view sharing this admin's connections whose requests are signed with ``credentials``
        (one operator serves clusters with different admin keys). Closing the view closes them."""
        view = copy.copy(self)
        view.credentials = credentials
        return view

    def with_tls(self, ca_file: str | None) -> RemotingClusterAdmin:
        """A view whose connections use TLS (RocketMQ's ``useTLS``), trusting the PEM bundle
        ``ca_file`` (re-read when the file changes) without checking the server's name or chain
        (``tls.client.authServer=false``: the operator reaches pods by address, which no server
        certificate names; see :mod:`rocket_operator.security`); None: plaintext. One client per
        CA file, shared by every view and closed by :meth:`close`."""
        view = copy.copy(self)
        view.tls_ca_file = ca_file
        if ca_file is None:
            view.client, view.tls = self._plain_client, None
            return view
        client = self._tls_clients.get(ca_file)
        if client is None:
            tls = ClientTls.trusting(ca_file, verify=False)
            client = RemotingClient(connect_timeout=self._plain_client.connect_timeout, tls=tls)
            self._tls_clients[ca_file] = client
        view.client, view.tls = client, client.tls
        return view

    def http_headers(self) -> dict[str, str]:
        """:func:`http_auth_headers` of this admin's credentials (for ``/api/v1`` calls)."""
        return http_auth_headers(self.credentials)

    async def _call(self, addr: str, code: int, ext: Mapping[str, str] | None = None, body: bytes = b"",
                    accept: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        request = RemotingCommand(code=int(code), ext_fields=dict(ext or {}), body=body)
        if self.credentials is not None:
            self.credentials.sign(request)
        try:
            response = await self.client.invoke(addr, request, self.timeout)
        except (RemotingError, OSError, TimeoutError) as exc:
            raise AdminError(f"{RequestCode(code).name} to {addr}: {exc}") from exc
        if response.code not in accept:
            raise AdminError(f"{RequestCode(code).name} to {addr}: code {response.code}: {response.remark or ''}")
        return response

    async def registration(self, nameservers: list[str], cluster_name: str) -> Registration:
        """Ask every NameServer in parallel (``GET_BROKER_CLUSTER_INFO``); unreachable ones are listed, not raised."""
        result = Registration()

        async def one(addr: str) -> None:
            try:
                response = await self._call(addr, RequestCode.GET_BROKER_CLUSTER_INFO)
                info = ClusterInfo.from_json(response.body)
            except (AdminError, ValueError):
                result.unreachable.append(addr)
                return
            members = set(info.cluster_addr_table.get(cluster_name, []))
            result.per_nameserver[addr] = {
                name: {int(k): v for k, v in data.broker_addrs.items()}
                for name, data in info.broker_addr_table.items() if name in members
            }

        await asyncio.gather(*(one(addr) for addr in nameservers))
        return result

    async def set_write_permission(self, nameservers: list[str], broker_name: str, broker_addrs: list[str],
                                   writable: bool) -> None:
        """205/327 on every NameServer, then 25 ``brokerPermission`` on every broker of the group.

        The broker-side permission makes the change survive re-registration and
        broker restarts; the NameServer-side one takes effect on producers' next
        route refresh without waiting for the broker to re-register.
        """
        code = RequestCode.ADD_WRITE_PERM_OF_BROKER if writable else RequestCode.WIPE_WRITE_PERM_OF_BROKER
        perm = PERM_READ_WRITE if writable else PERM_READ
        for addr in broker_addrs:
            await self._call(addr, RequestCode.UPDATE_BROKER_CONFIG, body=f"brokerPermission={perm}\n".encode())
        await asyncio.gather(*(self._call(ns, code, {"brokerName": broker_name}) for ns in nameservers))

    async def topic_configs(self, broker: str) -> dict[str, TopicConfig]:
        """Every topic config of ``broker`` (``GET_ALL_TOPIC_CONFIG``); empty when it has none (code 1 "No topic")."""
        response = await self._call(broker, RequestCode.GET_ALL_TOPIC_CONFIG,
                                    accept=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
        if response.code != ResponseCode.SUCCESS or not response.body:
            return {}
        try:
            return dict(TopicConfigSerializeWrapper.from_json(response.body).topic_config_table)
        except ValueError as exc:
            raise AdminError(f"GET_ALL_TOPIC_CONFIG from {broker}: bad body: {exc}") from exc

    async def subscription_groups(self, broker: str) -> dict[str, dict[str, Any]]:
        """Every subscription group config of ``broker`` (``GET_ALL_SUBSCRIPTIONGROUP_CONFIG``), as JSON
        objects by group name."""
        response = await self._call(broker, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        if not response.body:
            return {}
        try:
            obj = loads_lenient(response.body)
        except ValueError as exc:
            raise AdminError(f"GET_ALL_SUBSCRIPTIONGROUP_CONFIG from {broker}: bad body: {exc}") from exc
        table = obj.get("subscriptionGroupTable") if isinstance(obj, dict) else None
        return {str(k): dict(v) for k, v in (table or {}).items() if isinstance(v, dict)}

    async def _create_topic(self, broker: str, tc: TopicConfig) -> None:
        ext = {
            "topic": tc.topic_name,
            "defaultTopic": "TBW102",
            "readQueueNums": str(tc.read_queue_nums),
            "writeQueueNums": str(tc.write_queue_nums),
            "perm": str(tc.perm),
            "topicFilterType": tc.topic_filter_type or "SINGLE_TAG",
            "topicSysFlag": str(tc.topic_sys_flag),
            "order": "true" if tc.order else "false",
        }
        await self._call(broker, RequestCode.UPDATE_AND_CREATE_TOPIC, ext)

    async def copy_metadata(self, source: str, target: str, exclude_topics: frozenset[str] = frozenset()
                            ) -> tuple[int, int]:
        """21 + 201 from ``source``, then 17 per topic and 200 per group on ``target``.

        System topics and retry/DLQ topics are left to the target broker (it
        creates them itself); a topic's perm is copied as is. Idempotent.
        """
        topics = await self.topic_configs(source)
        groups = await self.subscription_groups(source)
        copied_topics = 0
        for name, tc in sorted(topics.items()):
            if (name in SYSTEM_TOPICS or name in exclude_topics
                    or name.startswith((RETRY_PREFIX, DLQ_PREFIX, SYSTEM_TOPIC_PREFIX))):
                continue
            await self._create_topic(target, tc)
            copied_topics += 1
        copied_groups = 0
        for name, config in sorted(groups.items()):
            if name in SYSTEM_GROUPS:
                continue
            body = dumps({**config, "groupName": name})
            await self._call(target, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
            copied_groups += 1
        return copied_topics, copied_groups

    async def create_topics(self, broker: str, topics: Iterable[tuple[str, int, int]]) -> None:
        """17 UPDATE_AND_CREATE_TOPIC per ``(name, queues, perm)``; read and write queue counts equal."""
        for name, queues, perm in topics:
            await self._create_topic(broker, TopicConfig(topic_name=name, read_queue_nums=queues,
                                                         write_queue_nums=queues, perm=perm))

    async def _offset(self, broker: str, code: int, topic: str, queue: int) -> int:
        response = await self._call(broker, code, {"topic": topic, "queueId": str(queue)})
        return response.get_int("offset", 0)

    async def drain_progress(self, broker: str, exclude_topics: frozenset[str] = frozenset()) -> DrainProgress:
        """Backlog on ``broker`` from its consumer offsets (``GET_ALL_CONSUMER_OFFSET``), its queue
        offsets (``GET_MAX_OFFSET`` / ``GET_MIN_OFFSET``) and delays (``GET_ALL_DELAY_OFFSET``).

        A ``topic@group`` pair counts ``max - committed`` per queue (a queue the
        group never committed counts from the queue's min offset). A non-system
        topic holding messages that no group has consumed here counts in
        ``unconsumed`` (topics in ``exclude_topics`` do not). Brokers without
        ``GET_ALL_CONSUMER_OFFSET`` fall back to ``GET_CONSUME_STATS`` per subscription
        group. Raises :class:`AdminError` for a failed request or an unreadable body.
        """
        topics = await self.topic_configs(broker)
        response = await self._call(broker, RequestCode.GET_ALL_CONSUMER_OFFSET,
                                    accept=(ResponseCode.SUCCESS, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                            ResponseCode.SYSTEM_ERROR))
        if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            return DrainProgress(lag=await self._lag_from_consume_stats(broker))
        progress = DrainProgress()
        consumed_topics: set[str] = set()
        for key, offsets in sorted(self._consumer_offset_table(broker, response).items()):
            topic, _, group = str(key).partition("@")
            tc = topics.get(topic)
            if tc is None or not isinstance(offsets, dict) or group in SYSTEM_GROUPS:
                continue
            consumed_topics.add(topic)
            lag = await self._group_lag(broker, topic, tc.read_queue_nums, {int(q): int(o) for q, o in offsets.items()})
            if lag:
                progress.lag[str(key)] = lag
        progress.unconsumed = await self._unconsumed(broker, topics, consumed_topics | exclude_topics)
        progress.delayed = await self._delayed(broker, topics.get(SCHEDULE_TOPIC))
        return progress

    async def _lag_from_consume_stats(self, broker: str) -> dict[str, int]:
        """``"*@group" -> lag`` from ``GET_CONSUME_STATS`` of every non-system subscription group."""
        lags: dict[str, int] = {}
        for group in await self.subscription_groups(broker):
            if group in SYSTEM_GROUPS:
                continue
            stats = await self._call(broker, RequestCode.GET_CONSUME_STATS, {"consumerGroup": group},
                                     accept=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
            if stats.code == ResponseCode.SUCCESS:
                lag = parse_consume_stats_lag(stats.body)
                if lag:
                    lags[f"*@{group}"] = lag
        return lags

    @staticmethod
    def _consumer_offset_table(broker: str, response: RemotingCommand) -> dict[str, Any]:
        """``offsetTable`` (``"topic@group" -> {queueId: offset}``) of a ``GET_ALL_CONSUMER_OFFSET``
        answer (RocketMQ's ``ConsumerOffsetSerializeWrapper``); empty for a ``SYSTEM_ERROR``."""
        if response.code != ResponseCode.SUCCESS or not response.body:
            return {}
        try:
            obj = loads_lenient(response.body)
        except ValueError as exc:
            raise AdminError(f"GET_ALL_CONSUMER_OFFSET from {broker}: bad body: {exc}") from exc
        return (obj.get("offsetTable") if isinstance(obj, dict) else None) or {}

    async def _group_lag(self, broker: str, topic: str, queues: int, committed: Mapping[int, int]) -> int:
        """Messages of ``topic`` a group has not consumed: ``max - committed`` per queue, from the
        queue's min offset where the group never committed."""
        lag = 0
        for queue in range(queues):
            high = await self._offset(broker, RequestCode.GET_MAX_OFFSET, topic, queue)
            low = committed.get(queue)
            if low is None:
                low = await self._offset(broker, RequestCode.GET_MIN_OFFSET, topic, queue) if high else 0
            lag += max(0, high - low)
        return lag

    async def _unconsumed(self, broker: str, topics: Mapping[str, TopicConfig], skip: set[str] | frozenset[str]
                          ) -> dict[str, int]:
        """``topic -> messages held`` (max - min over its queues) of the non-system topics not in ``skip``."""
        unconsumed: dict[str, int] = {}
        for topic, tc in sorted(topics.items()):
            if topic in skip or topic in SYSTEM_TOPICS or topic.startswith((DLQ_PREFIX, SYSTEM_TOPIC_PREFIX)):
                continue
            pending = 0
            for queue in range(tc.read_queue_nums):
                high = await self._offset(broker, RequestCode.GET_MAX_OFFSET, topic, queue)
                if high:
                    pending += high - await self._offset(broker, RequestCode.GET_MIN_OFFSET, topic, queue)
            if pending:
                unconsumed[topic] = pending
        return unconsumed

    async def _delayed(self, broker: str, schedule: TopicConfig | None) -> int:
        if schedule is None:
            return 0
        response = await self._call(broker, RequestCode.GET_ALL_DELAY_OFFSET,
                                    accept=(ResponseCode.SUCCESS, ResponseCode.REQUEST_CODE_NOT_SUPPORTED))
        if response.code != ResponseCode.SUCCESS:
            return 0
        try:
            obj = loads_lenient(response.body) if response.body else {}
        except ValueError as exc:
            raise AdminError(f"GET_ALL_DELAY_OFFSET from {broker}: bad body: {exc}") from exc
        delivered = {int(k): int(v) for k, v in ((obj or {}).get("offsetTable") or {}).items()}
        pending = 0
        for queue in range(schedule.read_queue_nums):  # queue id = delay level - 1
            high = await self._offset(broker, RequestCode.GET_MAX_OFFSET, SCHEDULE_TOPIC, queue)
            pending += max(0, high - delivered.get(queue + 1, 0))
        return pending

    async def _commitlog_max(self, broker: str) -> int:
        response = await self._call(broker, RequestCode.GET_BROKER_RUNTIME_INFO)
        table = parse_kv_table(response.body)
        try:
            return int(table.get("commitLogMaxOffset", "0"))
        except ValueError as exc:
            raise AdminError(f"GET_BROKER_RUNTIME_INFO from {broker}: bad commitLogMaxOffset") from exc

    async def slave_caught_up(self, master: str, slave: str) -> bool:
        """Master's ``commitLogMaxOffset`` first, then the slave's: caught up within the allowance."""
        master_max = await self._commitlog_max(master)
        slave_max = await self._commitlog_max(slave)
        return slave_max + self.catch_up_allowance >= master_max

    async def unregister(self, nameservers: list[str], cluster_name: str, broker_name: str,
                         brokers: Mapping[int, str]) -> None:
        """104 for every broker of the group on every NameServer (already-gone is fine)."""
        calls = []
        for ns in nameservers:
            for broker_id, addr in brokers.items():
                ext = {"brokerName": broker_name, "brokerAddr": addr, "clusterName": cluster_name,
                       "brokerId": str(broker_id)}  # UnRegisterBrokerRequestHeader
                calls.append(self._call(ns, RequestCode.UNREGISTER_BROKER, ext))
        results = await asyncio.gather(*calls, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            first = errors[0]
            if isinstance(first, AdminError):
                raise AdminError(f"UNREGISTER_BROKER of {broker_name}: {first}") from first
            raise first

    async def broker_ha_status(self, broker: str) -> dict[str, Any]:
        """907 with ``format=rocketcluster`` (the JSON ``rocket cluster ha`` prints). Raises
        :class:`AdminError` when the broker cannot be reached, refuses, or answers no JSON object."""
        response = await self._call(broker, RequestCode.GET_BROKER_HA_STATUS, {"format": "rocketcluster"})
        try:
            obj = loads_lenient(response.body) if response.body else None
        except ValueError as exc:
            raise AdminError(f"GET_BROKER_HA_STATUS from {broker}: bad body: {exc}") from exc
        if not isinstance(obj, dict):
            raise AdminError(f"GET_BROKER_HA_STATUS from {broker}: no status object")
        return obj

    async def replica_info(self, controllers: list[str], broker_name: str) -> ReplicaInfo:
        """1004 CONTROLLER_GET_REPLICA_INFO through :class:`rocket.controller.client.ControllerClient`
        (leader found with 1005 GET_METADATA_INFO, redirects followed for up to ``timeout``).
        Raises :class:`AdminError` when no controller leads or the group is unknown to them (2008)."""
        controller = ControllerClient(controllers, client=self.client, timeout=self.timeout,
                                      redirect_timeout=self.timeout,
                                      rpc_hook=self.credentials.sign if self.credentials is not None else None)
        try:
            return await controller.get_replica_info(broker_name)
        except (RemotingError, OSError, TimeoutError, ValueError) as exc:
            raise AdminError(f"CONTROLLER_GET_REPLICA_INFO of {broker_name} from {controllers}: {exc}") from exc

    async def switch_master(self, nameservers: list[str], broker_name: str, broker_id: int) -> dict[str, Any]:
        """What ``rocket cluster failover --broker-name N --broker-id I`` does
        (:meth:`rocket.client.admin.Admin.failover`): the group's brokers from the NameServers
        (106), their HA status (907), then CONTROLLER_ELECT_MASTER (1002, ``designateElect=true``)
        to the controller leader named in their ``controllerAddr``, and a wait (up to 20 s) until
        the chosen broker runs as master. Returns its HA status. Raises :class:`AdminError` when
        the group or broker is unknown, the controller refuses (e.g. 2012: not an alive
        SyncStateSet member) or the broker does not switch in time."""
        admin = Admin(";".join(nameservers), timeout=self.timeout, credentials=self.credentials,
                      tls=self.tls if self.tls is not None else False)
        try:
            return await admin.failover(broker_name, broker_id=broker_id)
        except (KeyError, RemotingError, OSError, TimeoutError, ValueError) as exc:
            raise AdminError(f"master switch of {broker_name} to broker {broker_id}: {exc}") from exc
        finally:
            await admin.close()

    async def close(self) -> None:
        """Close every connection (plaintext and TLS)."""
        await self._plain_client.close()
        for client in self._tls_clients.values():
            await client.close()
