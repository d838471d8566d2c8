"""Administration: topics, clusters, consumer progress and broker write permission.

Usage::

    async with Admin("127.0.0.1:9876;127.0.0.1:9877") as admin:
        await admin.create_topic("Orders", queue_nums=8)
        for broker in await admin.cluster_list(): print(broker.broker_name, broker.addr)
        lag = await admin.consumer_lag("CID_ORDERS", "Orders")
        print(lag.total_lag)

Calls (as RocketMQ's ``MQAdminExt``): topics are created and deleted on **every master**
of a cluster (GET_BROKER_CLUSTER_INFO 106, then UPDATE_AND_CREATE_TOPIC 17 /
DELETE_TOPIC_IN_BROKER 215 on each master, then DELETE_TOPIC_IN_NAMESRV 216 on
every NameServer); consumer lag comes from GET_CONSUME_STATS (208) or, when a
broker cannot answer it, from GET_MAX_OFFSET + QUERY_CONSUMER_OFFSET per queue;
write permission is wiped (205) / added back (327) on every NameServer;
manual failover promotes a slave (NOTIFY_BROKER_ROLE_CHANGED 1008, RocketCluster
form) and GET_BROKER_HA_STATUS (907) reads a broker's replication state.

Errors: :class:`RemotingCommandError` when a broker or NameServer refuses,
:class:`NameServerUnavailableError` when no NameServer answers, remoting
errors for unreachable brokers, ``KeyError`` for an unknown cluster name.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from rocket.auth.signature import SessionCredentials
from rocket.client.base import DEFAULT_TIMEOUT, MQClient, check_response, ext
from rocket.client.errors import TopicRouteError
from rocket.protocol import MASTER_ID, ClusterInfo, MessageQueue, TopicRouteData, loads_lenient, retry_topic
from rocket.remoting import (
    PERM_READ,
    PERM_WRITE,
    RemotingCommand,
    RemotingCommandError,
    RemotingConnectError,
    RemotingTimeoutError,
    RequestCode,
    ResponseCode,
)
from rocket.remoting.tls import ClientTls

log = logging.getLogger("rocket.client.admin")

DEFAULT_CLUSTER = "DefaultCluster"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """One broker process as the NameServers and the broker itself see it.

    ``runtime``: GET_BROKER_RUNTIME_INFO (28) key/values (empty when the broker
    did not answer; ``error`` then says why).
    """

    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    runtime: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None

    @property
    def role(self) -> str:
        """``MASTER`` for brokerId 0, else ``SLAVE``."""
        return "MASTER" if self.broker_id == MASTER_ID else "SLAVE"


@dataclass(frozen=True, slots=True)
class QueueLag:
    """A consumer group's progress on one queue. Offsets are queue offsets;
    ``broker_offset`` is the queue's exclusive end, ``consumer_offset`` -1 when
    the group never committed one; ``last_timestamp`` ms (0 when unknown)."""

    queue: MessageQueue
    broker_offset: int
    consumer_offset: int
    last_timestamp: int = 0

    @property
    def lag(self) -> int:
        """Messages not consumed yet (``broker_offset - max(consumer_offset, 0)``)."""
        return max(self.broker_offset - max(self.consumer_offset, 0), 0)


@dataclass(slots=True)
class GroupLag:
    """A group's progress over queues; ``source`` is ``consume-stats`` or ``offsets``."""

    group: str
    queues: list[QueueLag] = field(default_factory=list)
    consume_tps: float = 0.0
    source: str = "consume-stats"

    @property
    def total_lag(self) -> int:
        """Sum of the queues' lag."""
        return sum(q.lag for q in self.queues)


_OBJECT_KEY = re.compile(rb'([{,]\s*)(\{[^{}]*\})(\s*:)')


def loads_object_keys(data: bytes | str) -> Any:
    """Parse fastjson output whose map keys may be objects or bare integers.

    ``{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}}`` becomes
    a dict whose key is the JSON text of the key object. Raises ``ValueError``.
    """
    raw = data.encode() if isinstance(data, str) else bytes(data)
    try:
        return loads_lenient(raw)
    except ValueError:
        pass
    fixed = _OBJECT_KEY.sub(lambda m: m.group(1) + orjson.dumps(m.group(2).decode()) + m.group(3), raw)
    return loads_lenient(fixed)


def parse_consume_stats(body: bytes) -> tuple[list[QueueLag], float]:
    """Parse a ConsumeStats body: ``offsetTable`` (object keys, or a list of entries).

    Returns ``(queues, consumeTps)``. Raises ``ValueError`` when not understood.
    """
    obj = loads_object_keys(body)
    if not isinstance(obj, dict):
        raise ValueError("ConsumeStats is not an object")
    table = obj.get("offsetTable") or {}
    entries: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
    if isinstance(table, dict):
        for key, value in table.items():
            mq = orjson.loads(key) if isinstance(key, str) and key.startswith("{") else None
            if not isinstance(mq, dict) or not isinstance(value, dict):
                raise ValueError(f"offsetTable key {key!r} is not a message queue")
            entries.append((mq, value))
    elif isinstance(table, list):
        for item in table:
            if isinstance(item, dict):
                entries.append((item.get("messageQueue", item), item))
    queues = [
        QueueLag(
            queue=MessageQueue(str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"])),
            broker_offset=int(value.get("brokerOffset", 0)),
            consumer_offset=int(value.get("consumerOffset", -1)),
            last_timestamp=int(value.get("lastTimestamp", 0) or 0),
        )
        for mq, value in entries
    ]
    return queues, float(obj.get("consumeTps", 0.0) or 0.0)


class Admin:
    """Administrative calls against the NameServers and brokers of a cluster.

    ``namesrv_addr``: ``"host:port;host:port"``; ``timeout``: seconds per request; ``credentials``
    and ``tls`` as for :class:`~rocket.client.base.MQClient`.
    """

    def __init__(self, namesrv_addr: str = "127.0.0.1:9876", *, timeout: float = DEFAULT_TIMEOUT,
                 credentials: SessionCredentials | None = None, tls: ClientTls | bool | None = None) -> None:
        self.client = MQClient(namesrv_addr, timeout=timeout, credentials=credentials, tls=tls)

    async def close(self) -> None:
        """Close every connection."""
        await self.client.close()

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- NameServer queries ------------------------------------------------------------

    async def cluster_info(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO (106): brokers and clusters the NameServer knows."""
        response = await self.client.namesrv_invoke(RequestCode.GET_BROKER_CLUSTER_INFO)
        check_response(response, "cluster info")
        return ClusterInfo.from_json(response.body)

    async def topic_list(self) -> list[str]:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), sorted."""
        response = await self.client.namesrv_invoke(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        check_response(response, "topic list")
        obj = loads_lenient(response.body) if response.body else {}
        return sorted(str(t) for t in (obj.get("topicList") or []))

    async def topic_route(self, topic: str) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC (105). Raises :class:`TopicRouteError` for an unknown topic."""
        return await self.client.fetch_route(topic, cache=False)

    async def _masters(self, cluster: str | None) -> dict[str, str]:
        info = await self.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            known = sorted(info.cluster_addr_table)
            raise KeyError(f"cluster {cluster!r} is unknown to the NameServer (known: {known})")
        return info.masters(cluster)

    # -- topics ------------------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        *,
        cluster: str | None = DEFAULT_CLUSTER,
        queue_nums: int = 8,
        read_queue_nums: int | None = None,
        perm: int = PERM_READ | PERM_WRITE,
        order: bool = False,
    ) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC (17) on every master of ``cluster`` (all when None).

        ``queue_nums`` write queues (and read queues unless ``read_queue_nums``).
        Returns the broker names it was created on. Raises ``KeyError`` for an
        unknown cluster, ``LookupError`` when it has no master,
        :class:`RemotingCommandError` when a broker refuses.
        """
        from rocket.client.producer import validate_topic

        validate_topic(topic)
        masters = await self._masters(cluster)
        if not masters:
            raise LookupError(f"cluster {cluster!r} has no master broker")
        fields = ext(
            topic=topic,
            defaultTopic="TBW102",
            readQueueNums=read_queue_nums if read_queue_nums is not None else queue_nums,
            writeQueueNums=queue_nums,
            perm=perm,
            topicFilterType="SINGLE_TAG",
            topicSysFlag=0,
            order=order,
        )

        async def one(name: str, addr: str) -> str:
            response = await self.client.invoke(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
            check_response(response, f"create topic {topic} on {name} ({addr})")
            return name

        return sorted(await asyncio.gather(*(one(n, a) for n, a in masters.items())))

    async def delete_topic(self, topic: str, *, cluster: str | None = DEFAULT_CLUSTER) -> list[str]:
        """DELETE_TOPIC_IN_BROKER (215) on every master of ``cluster``, then
        DELETE_TOPIC_IN_NAMESRV (216) on every NameServer. Returns the broker names."""
        masters = await self._masters(cluster)

        async def one(name: str, addr: str) -> str:
            response = await self.client.invoke(addr, RequestCode.DELETE_TOPIC_IN_BROKER, ext(topic=topic))
            check_response(response, f"delete topic {topic} on {name} ({addr})")
            return name

        names = sorted(await asyncio.gather(*(one(n, a) for n, a in masters.items())))
        results = await self.client.namesrv_invoke_all(
            RequestCode.DELETE_TOPIC_IN_NAMESRV, ext(topic=topic, clusterName=cluster))
        for addr, result in results.items():
            if isinstance(result, BaseException):
                log.warning("delete topic %s on NameServer %s failed: %s", topic, addr, result)
            else:
                check_response(result, f"delete topic {topic} on NameServer {addr}")
        return names

    # -- users and ACLs (ACL 2.0, AUTH_* codes) -----------------------------------------

    async def _auth_all(self, code: int, fields: dict[str, str], body: bytes, what: str,
                        cluster: str | None, broker_addr: str | None) -> dict[str, RemotingCommand]:
        """Send an AUTH_* request to ``broker_addr``, or to every master of ``cluster``
        (as mqadmin's ``-b`` / ``-c``); returns broker address -> response (all SUCCESS).
        Raises :class:`RemotingCommandError` when one refuses."""
        targets = {broker_addr: broker_addr} if broker_addr else await self._masters(cluster)
        if not targets:
            raise LookupError(f"cluster {cluster!r} has no master broker")

        async def one(addr: str) -> tuple[str, RemotingCommand]:
            response = await self.client.invoke(addr, code, fields, body)
            check_response(response, f"{what} on {addr}")
            return addr, response

        return dict(await asyncio.gather(*(one(a) for a in targets.values())))

    async def put_user(self, username: str, password: str | None = None, *, user_type: str | None = None,
                       user_status: str | None = None, create: bool = True, cluster: str | None = DEFAULT_CLUSTER,
                       broker_addr: str | None = None) -> list[str]:
        """AUTH_CREATE_USER (3001) or, with ``create=False``, AUTH_UPDATE_USER (3002) on every
        master of ``cluster`` (or ``broker_addr``). Body ``UserInfo``. Returns the addresses."""
        info = {k: v for k, v in (("username", username), ("password", password), ("userType", user_type),
                                  ("userStatus", user_status)) if v}
        code = RequestCode.AUTH_CREATE_USER if create else RequestCode.AUTH_UPDATE_USER
        done = await self._auth_all(code, ext(username=username), orjson.dumps(info),
                                    f"{'create' if create else 'update'} user {username}", cluster, broker_addr)
        return sorted(done)

    async def delete_user(self, username: str, *, cluster: str | None = DEFAULT_CLUSTER,
                          broker_addr: str | None = None) -> list[str]:
        """AUTH_DELETE_USER (3003) on every master. Returns the addresses."""
        done = await self._auth_all(RequestCode.AUTH_DELETE_USER, ext(username=username), b"",
                                    f"delete user {username}", cluster, broker_addr)
        return sorted(done)

    async def list_users(self, name_filter: str | None = None, *, cluster: str | None = DEFAULT_CLUSTER,
                         broker_addr: str | None = None) -> dict[str, list[dict[str, Any]]]:
        """AUTH_LIST_USER (3005): broker address -> its ``UserInfo`` list."""
        done = await self._auth_all(RequestCode.AUTH_LIST_USER, ext(filter=name_filter), b"", "list users",
                                    cluster, broker_addr)
        return {addr: (loads_lenient(r.body) if r.body else []) for addr, r in done.items()}

    async def put_acl(self, subject: str, resources: Iterable[str], actions: Iterable[str], *,
                      decision: str = "Allow", source_ips: Iterable[str] = (), create: bool = True,
                      cluster: str | None = DEFAULT_CLUSTER, broker_addr: str | None = None) -> list[str]:
        """AUTH_CREATE_ACL (3006) / AUTH_UPDATE_ACL (3007): one Custom policy entry per resource
        with ``actions``, ``decision`` and ``source_ips`` (``AclInfo``). Returns the addresses."""
        subject = subject if ":" in subject else f"User:{subject}"
        entries = [{"resource": r, "actions": list(actions), "sourceIps": list(source_ips), "decision": decision}
                   for r in resources]
        body = orjson.dumps({"subject": subject, "policies": [{"policyType": "Custom", "entries": entries}]})
        code = RequestCode.AUTH_CREATE_ACL if create else RequestCode.AUTH_UPDATE_ACL
        done = await self._auth_all(code, ext(subject=subject), body, f"put acl of {subject}", cluster, broker_addr)
        return sorted(done)

    async def delete_acl(self, subject: str, resource: str | None = None, *, policy_type: str | None = None,
                         cluster: str | None = DEFAULT_CLUSTER, broker_addr: str | None = None) -> list[str]:
        """AUTH_DELETE_ACL (3008): the whole ACL of ``subject`` or its entries for ``resource``."""
        subject = subject if ":" in subject else f"User:{subject}"
        done = await self._auth_all(RequestCode.AUTH_DELETE_ACL,
                                    ext(subject=subject, resource=resource, policyType=policy_type), b"",
                                    f"delete acl of {subject}", cluster, broker_addr)
        return sorted(done)

    async def list_acls(self, subject_filter: str | None = None, resource_filter: str | None = None, *,
                        cluster: str | None = DEFAULT_CLUSTER,
                        broker_addr: str | None = None) -> dict[str, list[dict[str, Any]]]:
        """AUTH_LIST_ACL (3010): broker address -> its ``AclInfo`` list."""
        done = await self._auth_all(RequestCode.AUTH_LIST_ACL,
                                    ext(subjectFilter=subject_filter, resourceFilter=resource_filter), b"",
                                    "list acls", cluster, broker_addr)
        return {addr: (loads_lenient(r.body) if r.body else []) for addr, r in done.items()}

    # -- cluster -----------------------------------------------------------------------

    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO (28): the broker's KVTable."""
        response = await self.client.invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        check_response(response, f"runtime info of {addr}")
        obj = loads_lenient(response.body) if response.body else {}
        table = obj.get("table") or {}
        return {str(k): str(v) for k, v in table.items()}

    async def cluster_list(self, cluster: str | None = None) -> list[BrokerInfo]:
        """Every broker (masters and slaves) with its runtime info, sorted by
        cluster, broker name and id. Brokers that do not answer get ``error`` set."""
        info = await self.cluster_info()
        names = info.cluster_addr_table[cluster] if cluster is not None else tuple(info.broker_addr_table)
        cluster_of = {n: c for c, ns in info.cluster_addr_table.items() for n in ns}

        async def one(name: str, bid: int, addr: str) -> BrokerInfo:
            bd = info.broker_addr_table[name]
            clus = bd.cluster or cluster_of.get(name, "")
            try:
                runtime = await self.broker_runtime_info(addr)
                return BrokerInfo(clus, name, bid, addr, runtime)
            except Exception as exc:
                return BrokerInfo(clus, name, bid, addr, {}, f"{type(exc).__name__}: {exc}")

        jobs = [one(n, bid, addr) for n in names if n in info.broker_addr_table
                for bid, addr in info.broker_addr_table[n].broker_addrs.items()]
        brokers = await asyncio.gather(*jobs)
        return sorted(brokers, key=lambda b: (b.cluster, b.broker_name, b.broker_id))

    async def wipe_write_perm(self, broker_name: str) -> dict[str, int | str]:
        """WIPE_WRITE_PERM_OF_BROKER (205) on every NameServer: producers stop
        choosing the group (after their next route refresh) while consumers keep
        reading. Returns NameServer → topics touched (or an error text)."""
        return await self._perm_all(RequestCode.WIPE_WRITE_PERM_OF_BROKER, broker_name, "wipeTopicCount")

    async def add_write_perm(self, broker_name: str) -> dict[str, int | str]:
        """ADD_WRITE_PERM_OF_BROKER (327) on every NameServer; the inverse of :meth:`wipe_write_perm`."""
        return await self._perm_all(RequestCode.ADD_WRITE_PERM_OF_BROKER, broker_name, "addTopicCount")

    async def _perm_all(self, code: int, broker_name: str, count_key: str) -> dict[str, int | str]:
        results = await self.client.namesrv_invoke_all(code, ext(brokerName=broker_name))
        out: dict[str, int | str] = {}
        for addr, result in results.items():
            if isinstance(result, BaseException):
                out[addr] = f"{type(result).__name__}: {result}"
            elif result.code != ResponseCode.SUCCESS:
                out[addr] = str(RemotingCommandError(result.code, result.remark))
            else:
                out[addr] = int(result.ext_fields.get(count_key, "0") or 0)
        if all(isinstance(v, str) for v in out.values()):
            raise RemotingCommandError(ResponseCode.SYSTEM_ERROR, "; ".join(f"{a}: {v}" for a, v in out.items()),
                                       RequestCode(code).name)
        return out

    # -- replication (rocket.store.ha) --------------------------------------------------

    async def broker_ha_status(self, addr: str) -> dict[str, Any]:
        """GET_BROKER_HA_STATUS (907) of the broker at ``addr``: role, epochs, slaves, lag."""
        response = await self.client.invoke(addr, RequestCode.GET_BROKER_HA_STATUS, {"format": "rocketcluster"})
        check_response(response, f"HA status of {addr}")
        return dict(orjson.loads(response.body))

    async def promote_broker(self, addr: str, *, broker_role: str | None = None,
                             force: bool = False) -> dict[str, Any]:
        """Make the slave at ``addr`` the master of its group (manual failover):
        NOTIFY_BROKER_ROLE_CHANGED (1008) with ``role=MASTER``. ``broker_role``:
        ASYNC_MASTER or SYNC_MASTER (default: the broker's ``promotedBrokerRole``);
        ``force``: promote even while a NameServer still lists a live master.
        Returns the broker's new HA status; raises :class:`RemotingCommandError`
        when the broker refuses (a live master is still registered)."""
        fields: dict[str, Any] = {"role": "MASTER", "force": "true" if force else "false"}
        if broker_role:
            fields["brokerRole"] = broker_role
        response = await self.client.invoke(addr, RequestCode.NOTIFY_BROKER_ROLE_CHANGED, ext(**fields),
                                            timeout=max(self.client.timeout, 15.0))
        check_response(response, f"promotion of {addr}")
        return dict(orjson.loads(response.body))

    async def failover(self, broker_name: str, *, broker_role: str | None = None,
                       force: bool = False, broker_id: int | None = None) -> dict[str, Any]:
        """Promote a slave of group ``broker_name``: the lowest-id slave that answers (see
        :meth:`promote_broker`), or, when the group runs in controller mode, through its
        controllers (:meth:`controller_failover`). Raises ``KeyError`` for an unknown group
        or one without slaves, :class:`RemotingCommandError` when every slave refused (the last
        refusal) or the controller refused the election."""
        info = await self.cluster_info()
        bd = info.broker_addr_table.get(broker_name)
        if bd is None:
            raise KeyError(f"broker group {broker_name!r} is unknown to the NameServer")
        slaves = [bd.broker_addrs[bid] for bid in sorted(bd.broker_addrs) if bid != MASTER_ID]
        if not slaves:
            raise KeyError(f"broker group {broker_name!r} has no registered slave to promote")
        statuses: dict[str, dict[str, Any]] = {}
        for addr in sorted(bd.broker_addrs.values()):
            try:
                statuses[addr] = await self.broker_ha_status(addr)
            except (RemotingCommandError, RemotingConnectError, RemotingTimeoutError):
                continue
        if any(st.get("controllerMode") for st in statuses.values()):
            return await self.controller_failover(broker_name, statuses, broker_id=broker_id)
        last: Exception | None = None
        for addr in slaves:
            try:
                return await self.promote_broker(addr, broker_role=broker_role, force=force)
            except (RemotingCommandError, RemotingConnectError, RemotingTimeoutError) as exc:
                last = exc
        assert last is not None
        raise last

    async def controller_failover(self, broker_name: str, statuses: Mapping[str, Mapping[str, Any]], *,
                                  broker_id: int | None = None, wait: float = 20.0) -> dict[str, Any]:
        """Controller mode: CONTROLLER_ELECT_MASTER (1002, ``designateElect=true``, as ``mqadmin
        electMaster``) for ``broker_id`` (a controller broker id; default the lowest-id slave in
        the SyncStateSet) to the controllers' leader, then wait up to ``wait`` seconds until
        that broker reports itself master; returns its HA status. ``statuses``: the group's
        brokers' HA status (907) by address. While the controllers elect a leader (no
        ``controllerLeaderAddress``, CONTROLLER_NOT_LEADER, a controller not answering) it asks
        again every 0.5 s for up to ``wait`` seconds, then raises :class:`RemotingConnectError`.
        Raises ``KeyError`` when no slave qualifies, :class:`RemotingCommandError` when the
        controller refuses (e.g. 2012: not an alive member of the SyncStateSet) and
        ``TimeoutError`` when the broker does not switch."""
        modes = {addr: st["controllerMode"] for addr, st in statuses.items() if st.get("controllerMode")}
        any_mode = next(iter(modes.values()))
        in_sync = set(max(modes.values(), key=lambda m: m.get("syncStateSetEpoch") or 0).get("syncStateSet") or [])
        slaves = {m.get("controllerBrokerId"): addr for addr, m in modes.items()
                  if statuses[addr].get("brokerRole") == "SLAVE"}
        if broker_id is None:
            eligible = sorted(b for b in slaves if b in in_sync)
            if not eligible:
                raise KeyError(f"broker group {broker_name!r} has no slave in its SyncStateSet {sorted(in_sync)}")
            broker_id = eligible[0]
        target = slaves.get(broker_id)
        if target is None:
            raise KeyError(f"broker group {broker_name!r} has no answering slave with controller id {broker_id}")
        cluster = str(statuses[target].get("clusterName") or "")
        controllers = [a for a in str(any_mode.get("controllerAddr") or "").replace(",", ";").split(";") if a]
        fields = ext(clusterName=cluster, brokerName=broker_name, brokerId=str(broker_id), designateElect="true")
        last: Exception | None = None
        loop = asyncio.get_running_loop()
        # a controller election can take a few Raft timeouts (e.g. right after a majority comes
        # back from a pause, a stale candidate's higher term unseats the leader): keep asking
        # for up to ``wait`` seconds rather than a fixed number of passes
        leader_deadline = loop.time() + wait
        while True:
            for addr in controllers:
                try:
                    meta = await self.client.invoke(addr, RequestCode.CONTROLLER_GET_METADATA_INFO)
                    leader = meta.ext_fields.get("controllerLeaderAddress")
                    if not leader:
                        continue
                    response = await self.client.invoke(leader, RequestCode.CONTROLLER_ELECT_MASTER, fields)
                except (RemotingConnectError, RemotingTimeoutError) as exc:
                    last = exc
                    continue
                if response.code == ResponseCode.CONTROLLER_NOT_LEADER:
                    continue
                check_response(response, f"ELECT_MASTER of broker {broker_id} of {broker_name}")
                deadline = loop.time() + wait
                while True:
                    try:
                        st = await self.broker_ha_status(target)
                        if st.get("brokerRole") != "SLAVE":
                            return st
                    except (RemotingConnectError, RemotingTimeoutError):
                        pass
                    if loop.time() > deadline:
                        raise TimeoutError(f"{target} did not become master within {wait} s")
                    await asyncio.sleep(0.2)
            if loop.time() > leader_deadline:
                raise RemotingConnectError(f"no controller leader among {controllers} within {wait} s: {last}")
            await asyncio.sleep(0.5)

    # -- consumer groups ---------------------------------------------------------------

    async def consumer_ids(self, group: str, topic: str | None = None) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP (38) from a master: the group's live client ids, sorted."""
        if topic is not None:
            route = await self.client.fetch_route(topic)
            addrs = sorted(route.master_addrs())
        else:
            addrs = sorted((await self._masters(None)).values())
        for addr in addrs:
            try:
                response = await self.client.invoke(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                    ext(consumerGroup=group))
            except (RemotingConnectError, RemotingTimeoutError):
                continue
            if response.code == ResponseCode.SUCCESS and response.body:
                ids = loads_lenient(response.body).get("consumerIdList") or []
                return sorted(str(i) for i in ids)
        return []

    async def _group_topics(self, group: str, masters: Iterable[str]) -> list[str]:
        """Topics a group subscribes to, from GET_CONSUMER_CONNECTION_LIST (203)."""
        for addr in masters:
            try:
                response = await self.client.invoke(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                                    ext(consumerGroup=group))
            except (RemotingConnectError, RemotingTimeoutError):
                continue
            if response.code != ResponseCode.SUCCESS or not response.body:
                continue
            try:
                obj = loads_lenient(response.body)
            except ValueError:
                continue
            table = obj.get("subscriptionTable") or {}
            if isinstance(table, dict) and table:
                return sorted(str(t) for t in table)
        return []

    async def consumer_lag(self, group: str, topic: str | None = None) -> GroupLag:
        """The group's progress per queue: GET_CONSUME_STATS (208) on every master,
        falling back to GET_MAX_OFFSET + QUERY_CONSUMER_OFFSET per queue when a
        broker cannot answer it (then ``topic`` or the group's live subscriptions
        say which topics to look at). Queues sorted."""
        masters = await self._masters(None)
        queues: list[QueueLag] = []
        tps = 0.0
        failed: list[str] = []
        for name, addr in sorted(masters.items()):
            try:
                response = await self.client.invoke(addr, RequestCode.GET_CONSUME_STATS,
                                                    ext(consumerGroup=group, topic=topic))
                if response.code != ResponseCode.SUCCESS:
                    if response.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST or (
                            response.code == ResponseCode.SYSTEM_ERROR and "not exist" in (response.remark or "")):
                        continue  # the group has nothing on this broker
                    raise RemotingCommandError(response.code, response.remark, "consume stats")
                got, broker_tps = parse_consume_stats(response.body)
                queues.extend(got)
                tps += broker_tps
            except Exception as exc:
                log.info("consume stats of %s from %s failed (%s); computing from offsets", group, name, exc)
                failed.append(name)
        source = "consume-stats"
        if failed or not queues:
            topics = [topic] if topic else await self._group_topics(group, sorted(masters.values()))
            if not topic and topics and retry_topic(group) not in topics:
                topics.append(retry_topic(group))
            computed = await self._lag_from_offsets(group, topics, None if not queues else set(failed))
            if computed:
                source = "consume-stats+offsets" if queues else "offsets"
            queues.extend(computed)
        if topic:
            queues = [q for q in queues if q.queue.topic == topic]
        unique = {q.queue: q for q in queues}
        return GroupLag(group=group, queues=sorted(unique.values(), key=lambda q: q.queue), consume_tps=tps,
                        source=source)

    async def _lag_from_offsets(self, group: str, topics: Iterable[str], only_brokers: set[str] | None
                                ) -> list[QueueLag]:
        result: list[QueueLag] = []
        for topic in topics:
            try:
                route = await self.client.fetch_route(topic)
            except TopicRouteError:
                continue
            mqs = [mq for mq in route.read_queues(topic) if only_brokers is None or mq.broker_name in only_brokers]

            async def one(mq: MessageQueue) -> QueueLag | None:
                addr = self.client.admin_addr(mq.broker_name)
                if addr is None:
                    return None
                max_resp = await self.client.invoke(addr, RequestCode.GET_MAX_OFFSET,
                                                    ext(topic=mq.topic, queueId=mq.queue_id))
                check_response(max_resp, f"max offset of {mq}")
                off_resp = await self.client.invoke(addr, RequestCode.QUERY_CONSUMER_OFFSET,
                                                    ext(consumerGroup=group, topic=mq.topic, queueId=mq.queue_id))
                consumer = int(off_resp.ext_fields.get("offset", "-1")) if off_resp.code == 0 else -1
                return QueueLag(mq, int(max_resp.ext_fields.get("offset", "0") or 0), consumer)

            for item in await asyncio.gather(*(one(mq) for mq in mqs)):
                if item is not None:
                    result.append(item)
        return result

    async def reset_offset_by_timestamp(
        self, group: str, topic: str, timestamp: int | datetime
    ) -> dict[MessageQueue, int]:
        """Set the group's committed offset of every queue of ``topic`` to the
        offset stored nearest ``timestamp`` (ms or datetime), via
        SEARCH_OFFSET_BY_TIMESTAMP (29) + UPDATE_CONSUMER_OFFSET (15). Running
        consumers keep their in-memory offsets, so stop them first.
        Returns queue → new offset."""
        ts = int(timestamp.timestamp() * 1000) if isinstance(timestamp, datetime) else int(timestamp)
        route = await self.client.fetch_route(topic)
        out: dict[MessageQueue, int] = {}
        for mq in route.read_queues(topic):
            addr = self.client.admin_addr(mq.broker_name)
            if addr is None:
                continue
            response = await self.client.invoke(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                                ext(topic=topic, queueId=mq.queue_id, timestamp=ts))
            check_response(response, f"search offset of {mq}")
            offset = int(response.ext_fields.get("offset", "0") or 0)
            update = await self.client.invoke(addr, RequestCode.UPDATE_CONSUMER_OFFSET,
                                              ext(consumerGroup=group, topic=topic, queueId=mq.queue_id,
                                                  commitOffset=offset))
            check_response(update, f"update offset of {mq}")
            out[mq] = offset
        return out
