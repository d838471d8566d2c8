"""Routes: message queues, queue data, broker groups, topic routes and the cluster table.

Every class mirrors the RocketMQ class of the same name
(``org.apache.rocketmq.remoting.protocol.route`` and ``common.message.MessageQueue``):
fields use Python names, ``to_json`` writes Java's field names (standard
JSON, quoted ``brokerId`` keys) and ``from_json`` reads standard JSON and
fastjson's bare integer keys alike (:mod:`rocket.protocol.body`).

A route (body of GET_ROUTEINFO_BY_TOPIC) lists, per broker group, how many
read and write queues a topic has there and with which permission, and the
addresses of each group's master (brokerId 0) and slaves. From it come:

* the **publish view** (:meth:`TopicRouteData.write_queues`): write queues
  ``0..writeQueueNums-1`` of every group whose perm has WRITE and that has a
  master (only masters take sends);
* the **subscribe view** (:meth:`TopicRouteData.read_queues`): read queues
  ``0..readQueueNums-1`` of every group whose perm has READ.

Parsers raise :class:`~rocket.protocol.body.BodyError`.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from rocket.protocol.body import BodyError, as_int, dumps, json_object
from rocket.protocol.codes import PERM_READ, PERM_WRITE
from rocket.protocol.topic import TopicConfig

#: brokerId of a master (``MixAll.MASTER_ID``); slaves have ids > 0.
MASTER_ID = 0


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker group: ``(topic, broker_name, queue_id)`` (``MessageQueue``).

    Hashable, and ordered by topic, then broker name, then queue id: the
    order rebalancing sorts queues in (allocate-averagely needs every client
    to agree on it).
    """

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"

    def to_json(self) -> dict[str, Any]:
        """``{"brokerName":…,"queueId":…,"topic":…}``."""
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> MessageQueue:
        """Read Java's form. Raises :class:`BodyError` when a field is missing or mistyped, or the
        queueId is not within 0 .. 2^31-1 (a Java int, never negative)."""
        try:
            mq = cls(topic=str(obj["topic"]), broker_name=str(obj["brokerName"]), queue_id=int(obj["queueId"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BodyError(f"bad MessageQueue {reprlib.repr(obj)}: {exc}") from None
        if not 0 <= mq.queue_id <= 2**31 - 1:
            raise BodyError(
                f"bad MessageQueue {reprlib.repr(obj)}: queueId {mq.queue_id} is out of range (0..2147483647)")
        return mq


@dataclass(frozen=True, slots=True)
class QueueData:
    """A topic's queues on one broker group (``QueueData``): one ``queueDatas`` entry.

    Immutable: a permission change replaces the object (:meth:`with_perm`).
    """

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    @property
    def writable(self) -> bool:
        """True when ``perm`` has the WRITE bit (2)."""
        return bool(self.perm & PERM_WRITE)

    @property
    def readable(self) -> bool:
        """True when ``perm`` has the READ bit (4)."""
        return bool(self.perm & PERM_READ)

    @classmethod
    def from_topic_config(cls, broker_name: str, tc: TopicConfig) -> QueueData:
        """The queue data a master's topic config announces (``createAndUpdateQueueData``)."""
        return cls(broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)

    def with_perm(self, perm: int) -> QueueData:
        """A copy with ``perm`` replaced."""
        return replace(self, perm=perm)

    def to_json(self) -> dict[str, Any]:
        """Java field names, alphabetical."""
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> QueueData:
        """Parse one entry (``topicSynFlag``, the pre-4.x spelling, accepted).

        Raises :class:`BodyError` when ``obj`` is not an object or has no ``brokerName``.
        """
        if not isinstance(obj, Mapping):
            raise BodyError(f"QueueData is not an object: {reprlib.repr(obj)}")
        name = obj.get("brokerName")
        if not isinstance(name, str) or not name:
            raise BodyError("QueueData has no brokerName")
        return cls(
            broker_name=name,
            read_queue_nums=as_int(obj.get("readQueueNums"), "readQueueNums"),
            write_queue_nums=as_int(obj.get("writeQueueNums"), "writeQueueNums"),
            perm=as_int(obj.get("perm"), "perm"),
            topic_sys_flag=as_int(obj.get("topicSysFlag", obj.get("topicSynFlag")), "topicSysFlag"),
        )


@dataclass(slots=True)
class BrokerData:
    """One broker group (``BrokerData``): its cluster, name, and brokerId → ``"ip:port"``.

    ``broker_addrs`` maps brokerId (0 = master, > 0 = slaves) to an address.
    """

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    @property
    def master_addr(self) -> str | None:
        """The master's address (id 0), or None when the group has no live master."""
        return self.broker_addrs.get(MASTER_ID)

    def select_addr(self, broker_id: int = MASTER_ID) -> str | None:
        """The address of ``broker_id``; else the master; else the lowest-id slave.

        This is how consumers read from a slave when told so
        (``suggestWhichBrokerId``) or when the master is gone.
        """
        addr = self.broker_addrs.get(broker_id)
        if addr:
            return addr
        if self.master_addr:
            return self.master_addr
        for bid in sorted(self.broker_addrs):
            return self.broker_addrs[bid]
        return None

    def copy(self) -> BrokerData:
        """A copy whose ``broker_addrs`` can be changed independently."""
        return BrokerData(self.cluster, self.broker_name, dict(self.broker_addrs))

    def to_json(self) -> dict[str, Any]:
        """Standard JSON: brokerId keys as quoted decimal strings, ascending."""
        return {
            "brokerAddrs": {str(bid): addr for bid, addr in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> BrokerData:
        """Parse one entry; ``brokerAddrs`` keys (ints or decimal strings) become ints, empty
        addresses are dropped. Raises :class:`BodyError` when ``obj`` is not an object or has no
        ``brokerName``."""
        if not isinstance(obj, Mapping):
            raise BodyError(f"BrokerData is not an object: {reprlib.repr(obj)}")
        name = obj.get("brokerName")
        if not isinstance(name, str) or not name:
            raise BodyError("BrokerData has no brokerName")
        addrs_obj = obj.get("brokerAddrs") or {}
        if not isinstance(addrs_obj, Mapping):
            raise BodyError("brokerAddrs is not an object")
        addrs = {as_int(k, "brokerId"): str(v) for k, v in addrs_obj.items() if v}
        return cls(cluster=str(obj.get("cluster") or ""), broker_name=name, broker_addrs=addrs)


@dataclass(slots=True)
class TopicRouteData:
    """Route of one topic: body of GET_ROUTEINFO_BY_TOPIC (``TopicRouteData``).

    ``queue_datas`` has one entry per broker group hosting the topic;
    ``broker_datas`` the addresses of exactly those groups;
    ``filter_server_table`` maps a broker address to its filter servers;
    ``order_topic_conf`` (e.g. ``"broker-a:4;broker-b:4"``) is set only when
    order messages are enabled on the NameServer.
    """

    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Standard JSON form (quoted brokerId keys); ``orderTopicConf`` omitted when None."""
        obj: dict[str, Any] = {
            "brokerDatas": [bd.to_json() for bd in self.broker_datas],
            "filterServerTable": self.filter_server_table,
        }
        if self.order_topic_conf is not None:
            obj["orderTopicConf"] = self.order_topic_conf
        obj["queueDatas"] = [qd.to_json() for qd in self.queue_datas]
        return obj

    def encode(self) -> bytes:
        """The response body bytes."""
        return dumps(self.to_json())

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any]) -> TopicRouteData:
        """Parse a route body in either standard or fastjson (bare-key) form.

        An empty ``orderTopicConf`` reads as None. Raises :class:`BodyError`
        when the body is not a route.
        """
        obj = json_object(data, "TopicRouteData")
        queue_datas = obj.get("queueDatas") or []
        broker_datas = obj.get("brokerDatas") or []
        if not isinstance(queue_datas, list) or not isinstance(broker_datas, list):
            raise BodyError("queueDatas/brokerDatas are not arrays")
        filters = obj.get("filterServerTable") or {}
        order = obj.get("orderTopicConf")
        return cls(
            queue_datas=[QueueData.from_json(q) for q in queue_datas],
            broker_datas=[BrokerData.from_json(b) for b in broker_datas],
            filter_server_table={str(k): [str(s) for s in v] for k, v in filters.items() if isinstance(v, list)}
            if isinstance(filters, dict)
            else {},
            order_topic_conf=order if isinstance(order, str) and order else None,
        )

    def broker(self, broker_name: str) -> BrokerData | None:
        """The broker group named ``broker_name``, if in this route."""
        for bd in self.broker_datas:
            if bd.broker_name == broker_name:
                return bd
        return None

    def broker_addrs(self) -> set[str]:
        """Every broker address (masters and slaves) of this route."""
        return {addr for bd in self.broker_datas for addr in bd.broker_addrs.values()}

    def master_addrs(self) -> set[str]:
        """The master address of every group of this route that has one."""
        return {bd.master_addr for bd in self.broker_datas if bd.master_addr}

    def write_queues(self, topic: str) -> list[MessageQueue]:
        """The publish view: write queues of writable groups that have a master.

        Ordered by broker name then queue id (producers only send to brokerId
        0; a group without one is not writable).
        """
        queues: list[MessageQueue] = []
        for qd in sorted(self.queue_datas, key=lambda q: q.broker_name):
            if not qd.writable:
                continue
            bd = self.broker(qd.broker_name)
            if bd is None or not bd.master_addr:
                continue
            queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
        return queues

    def read_queues(self, topic: str) -> list[MessageQueue]:
        """The subscribe view: read queues of readable groups, sorted."""
        queues: list[MessageQueue] = []
        for qd in self.queue_datas:
            if qd.readable:
                queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.read_queue_nums))
        return sorted(queues)

    def order_queues(self, topic: str) -> list[MessageQueue] | None:
        """Write queues from ``orderTopicConf`` (``"broker-a:4;broker-b:4"``), or None when unset."""
        if not self.order_topic_conf:
            return None
        queues: list[MessageQueue] = []
        for item in self.order_topic_conf.split(";"):
            name, _, count = item.partition(":")
            if name and count.strip().isdigit():
                queues.extend(MessageQueue(topic, name.strip(), i) for i in range(int(count)))
        return queues


@dataclass(slots=True)
class ClusterInfo:
    """Body of GET_BROKER_CLUSTER_INFO (``ClusterInfo``).

    ``broker_addr_table`` maps brokerName to :class:`BrokerData`;
    ``cluster_addr_table`` maps clusterName to its brokerNames (sorted when parsed).
    """

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Standard JSON (quoted brokerId keys, where Java writes them bare)."""
        return {
            "brokerAddrTable": {name: bd.to_json() for name, bd in self.broker_addr_table.items()},
            "clusterAddrTable": {name: sorted(names) for name, names in self.cluster_addr_table.items()},
        }

    def encode(self) -> bytes:
        """The response body bytes."""
        return dumps(self.to_json())

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any]) -> ClusterInfo:
        """Parse either form (Java always writes bare integer keys here). Raises :class:`BodyError`."""
        obj = json_object(data, "ClusterInfo")
        brokers = obj.get("brokerAddrTable") or {}
        clusters = obj.get("clusterAddrTable") or {}
        if not isinstance(brokers, Mapping) or not isinstance(clusters, Mapping):
            raise BodyError("brokerAddrTable/clusterAddrTable are not objects")
        if not all(isinstance(names, list) for names in clusters.values()):
            raise BodyError("a clusterAddrTable entry is not an array of broker names")
        return cls(
            broker_addr_table={str(k): BrokerData.from_json(v) for k, v in brokers.items()},
            cluster_addr_table={str(k): sorted(str(n) for n in v) for k, v in clusters.items()},
        )

    def masters(self, cluster: str | None = None) -> dict[str, str]:
        """Broker name → master address, for one cluster (or all when None).

        Raises ``KeyError`` for an unknown cluster name.
        """
        names: Iterable[str] = self.broker_addr_table if cluster is None else self.cluster_addr_table[cluster]
        result: dict[str, str] = {}
        for name in names:
            bd = self.broker_addr_table.get(name)
            if bd is not None and bd.master_addr:
                result[name] = bd.master_addr
        return result
