"""Routes as clients see them: message queues, topic routes, publish and subscribe views.

A route (body of GET_ROUTEINFO_BY_TOPIC, reference A10.1) lists, per broker
group, how many read and write queues a topic has there and with which
permission, and the addresses of each group's master (brokerId 0) and slaves.
This module parses it liberally (standard JSON or fastjson's bare integer
``brokerAddrs`` keys, quirk Q1; numbers as strings) and derives:

* the **publish view**: write queues ``0..writeQueueNums-1`` of every group
  whose perm has WRITE and that has a master (only masters take sends);
* the **subscribe view**: read queues ``0..readQueueNums-1`` of every group
  whose perm has READ.

The module has no I/O; :mod:`rocket.client.base` fetches routes.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocket.remoting import PERM_READ, PERM_WRITE, loads_lenient

#: brokerId of a master; slaves have ids > 0.
MASTER_ID = 0
#: The auto-create template topic (A11 producer step 1).
AUTO_CREATE_TOPIC = "TBW102"
#: Prefix of a consumer group's retry topic.
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
#: Prefix of a consumer group's dead-letter topic.
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"


class RouteError(ValueError):
    """A route or cluster-info body that cannot be understood."""


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``: where a consumer group's failed messages go for another try."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        raise RouteError(f"{name} is not an integer: {value!r}") from None


def _json_object(data: bytes | str | Mapping[str, Any], what: str) -> Mapping[str, Any]:
    if isinstance(data, Mapping):
        return data
    try:
        obj = loads_lenient(data)
    except ValueError as exc:
        raise RouteError(f"{what} is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise RouteError(f"{what} is not a JSON object")
    return obj


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker group: ``(topic, broker_name, queue_id)``.

    Ordered by topic, then broker name, then queue id — the order rebalancing
    sorts queues in (allocate-averagely needs every client to agree on it).
    """

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


@dataclass(frozen=True, slots=True)
class QueueData:
    """A topic's queues on one broker group (A10.1 ``queueDatas`` entry)."""

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
    def from_json(cls, obj: Mapping[str, Any]) -> QueueData:
        """Parse one entry; raises :class:`RouteError` without a ``brokerName``."""
        name = obj.get("brokerName")
        if not isinstance(name, str) or not name:
            raise RouteError("queueData has no brokerName")
        return cls(
            broker_name=name,
            read_queue_nums=_as_int(obj.get("readQueueNums", 0), "readQueueNums"),
            write_queue_nums=_as_int(obj.get("writeQueueNums", 0), "writeQueueNums"),
            perm=_as_int(obj.get("perm", 0), "perm"),
            topic_sys_flag=_as_int(obj.get("topicSysFlag", obj.get("topicSynFlag", 0)), "topicSysFlag"),
        )


@dataclass(frozen=True, slots=True)
class BrokerData:
    """One broker group: its cluster, name, and brokerId → ``"ip:port"`` (0 = master)."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str]

    @property
    def master_addr(self) -> str | None:
        """The master's address, or None when the group has no live master."""
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

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> BrokerData:
        """Parse one entry; ``brokerAddrs`` keys may be ints or decimal strings."""
        name = obj.get("brokerName")
        if not isinstance(name, str) or not name:
            raise RouteError("brokerData has no brokerName")
        raw = obj.get("brokerAddrs") or {}
        if not isinstance(raw, Mapping):
            raise RouteError("brokerAddrs is not an object")
        addrs = {_as_int(k, "brokerId"): str(v) for k, v in raw.items() if v}
        return cls(cluster=str(obj.get("cluster") or ""), broker_name=name, broker_addrs=addrs)


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    """A topic's route (body of code 105, A10.1)."""

    queue_datas: tuple[QueueData, ...] = ()
    broker_datas: tuple[BrokerData, ...] = ()
    order_topic_conf: str | None = None

    @classmethod
    def parse(cls, data: bytes | str | Mapping[str, Any]) -> TopicRouteData:
        """Parse a route body (standard JSON or fastjson bare-integer keys).

        Raises :class:`RouteError` when the body is not a route.
        """
        obj = _json_object(data, "TopicRouteData")
        qds = obj.get("queueDatas") or []
        bds = obj.get("brokerDatas") or []
        if not isinstance(qds, list) or not isinstance(bds, list):
            raise RouteError("queueDatas/brokerDatas are not arrays")
        conf = obj.get("orderTopicConf")
        return cls(
            queue_datas=tuple(QueueData.from_json(q) for q in qds),
            broker_datas=tuple(BrokerData.from_json(b) for b in bds),
            order_topic_conf=conf if isinstance(conf, str) and conf else None,
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

        Ordered by broker name then queue id (A10.1: producers only send to id 0;
        a group without one is not writable).
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


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """Body of GET_BROKER_CLUSTER_INFO (code 106, A10.2).

    ``brokers`` maps broker name → :class:`BrokerData`; ``clusters`` maps
    cluster name → sorted broker names.
    """

    brokers: Mapping[str, BrokerData]
    clusters: Mapping[str, tuple[str, ...]]

    @classmethod
    def parse(cls, data: bytes | str | Mapping[str, Any]) -> ClusterInfo:
        """Parse the body (Java always writes bare integer keys here, Q1)."""
        obj = _json_object(data, "ClusterInfo")
        table = obj.get("brokerAddrTable") or {}
        clusters = obj.get("clusterAddrTable") or {}
        if not isinstance(table, Mapping) or not isinstance(clusters, Mapping):
            raise RouteError("brokerAddrTable/clusterAddrTable are not objects")
        brokers = {str(name): BrokerData.from_json(bd) for name, bd in table.items()}
        return cls(
            brokers=brokers,
            clusters={str(c): tuple(sorted(str(n) for n in names)) for c, names in clusters.items()},
        )

    def masters(self, cluster: str | None = None) -> dict[str, str]:
        """Broker name → master address, for one cluster (or all when None).

        Raises ``KeyError`` for an unknown cluster name.
        """
        names: Iterable[str] = self.brokers if cluster is None else self.clusters[cluster]
        result: dict[str, str] = {}
        for name in names:
            bd = self.brokers.get(name)
            if bd is not None and bd.master_addr:
                result[name] = bd.master_addr
        return result


# -- the producer's queue selection ------------------------------------------------------


class FaultTracker:
    """Brokers to avoid for a while after a failed send ("recently failed brokers").

    ``mark(broker, seconds)`` makes ``available(broker)`` false for that many
    seconds. The clock is ``time.monotonic`` unless another is given (tests).
    """

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[str, float] = {}

    def mark(self, broker_name: str, seconds: float) -> None:
        """Avoid ``broker_name`` for ``seconds`` seconds from now."""
        self._until[broker_name] = self._clock() + seconds

    def clear(self, broker_name: str) -> None:
        """Forget a broker's failure (after it answered a send)."""
        self._until.pop(broker_name, None)

    def available(self, broker_name: str) -> bool:
        """False while ``broker_name`` is inside its avoidance window."""
        until = self._until.get(broker_name)
        if until is None:
            return True
        if self._clock() >= until:
            del self._until[broker_name]
            return True
        return False


@dataclass(slots=True)
class PublishInfo:
    """A producer's view of one topic: its write queues and a round-robin index.

    ``from_template`` is true when the queues come from the ``TBW102`` route
    (the topic does not exist yet and the broker will create it on first send).
    """

    topic: str
    route: TopicRouteData
    queues: list[MessageQueue]
    from_template: bool = False
    fetched_at: float = field(default_factory=time.monotonic)
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(0))

    @classmethod
    def build(cls, topic: str, route: TopicRouteData, *, from_template: bool = False,
              default_queue_nums: int = 4) -> PublishInfo:
        """The publish view of ``route`` for ``topic``.

        From a template route, each group offers ``min(default_queue_nums,
        writeQueueNums)`` queues, as Java clients do.
        """
        queues = route.write_queues(topic)
        if from_template:
            queues = [q for q in queues if q.queue_id < default_queue_nums]
        return cls(topic=topic, route=route, queues=queues, from_template=from_template)

    def select(self, faults: FaultTracker | None = None, avoid: str | None = None) -> MessageQueue:
        """The next queue round-robin, skipping avoided and recently failed brokers.

        ``avoid`` is the broker that failed the previous attempt of this send;
        ``faults`` the brokers that failed recently. When every queue is on an
        avoided broker the plain round-robin choice is returned. Raises
        ``LookupError`` when the topic has no writable queue.
        """
        queues = self.queues
        n = len(queues)
        if n == 0:
            raise LookupError(f"topic {self.topic} has no writable queue")
        start = next(self._counter)
        fallback: MessageQueue | None = None
        for i in range(n):
            mq = queues[(start + i) % n]
            ok_fault = faults is None or faults.available(mq.broker_name)
            if mq.broker_name != avoid and ok_fault:
                if i:
                    # keep the round robin moving past the skipped queues
                    self._counter = itertools.count(start + i + 1)
                return mq
            if fallback is None and mq.broker_name != avoid:
                fallback = mq
        return fallback or queues[start % n]
