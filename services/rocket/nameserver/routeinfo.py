"""The NameServer's route table (``RouteInfoManager`` in RocketMQ 4.9.8).

Five tables, as in Java:

* ``topic_queue_table``: topic -> brokerName -> :class:`QueueData`
* ``broker_addr_table``: brokerName -> :class:`BrokerData` (brokerId -> addr)
* ``cluster_addr_table``: clusterName -> set of brokerNames
* ``broker_live_table``: broker addr -> :class:`BrokerLiveInfo`
* ``filter_server_table``: broker addr -> filter server addresses

Concurrency model: the NameServer runs one asyncio event loop, and every
method here is plain synchronous code with no ``await`` inside. A
registration (or any other change) is therefore applied whole before the loop
can run anything else, so a route lookup never sees a half-applied one —
the single-loop equivalent of Java's read/write lock. Request bodies are
decoded *before* a change method is called, so a bad body changes nothing.

Encoded route bodies are cached per topic (:meth:`RouteInfoManager.route_body`)
and a topic's entry is dropped whenever anything its route shows changes
(its queue data, or the addresses of a broker group hosting it).

Times come from the injected ``clock`` (seconds, monotonic by default) so that
eviction can be tested without waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rocket.protocol import (
    MASTER_ID,
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from rocket.protocol.codes import PERM_WRITE

log = logging.getLogger("rocket.nameserver")

#: Seconds of silence after which a broker is evicted (``BROKER_CHANNEL_EXPIRED_TIME``).
DEFAULT_BROKER_TIMEOUT = 120.0


@dataclass(slots=True)
class BrokerLiveInfo:
    """What the NameServer knows about one registered broker address.

    ``last_update`` is the ``clock`` reading (seconds) of its last
    registration; ``channel`` is the connection it registered over (any
    object; the server stores a ``RemotingConnection``), or None.
    """

    broker_addr: str
    last_update: float
    data_version: DataVersion
    channel: Any
    ha_server_addr: str
    cluster_name: str = ""
    broker_name: str = ""
    broker_id: int = 0
    #: Replication epoch a master registered with (RocketCluster extension); None = not sent.
    epoch: int | None = None


@dataclass(slots=True)
class RegisterBrokerResult:
    """Outcome of a registration (``RegisterBrokerResult.java``).

    ``ha_server_addr``/``master_addr`` are set only for a slave whose master
    is registered and live (the slave replicates from there, ``HAService``).
    ``queue_data_updated`` tells whether the topic table was (re)applied.
    ``master_epoch`` is set (with ``master_addr``/``ha_server_addr``) when a
    master registering with an epoch was *not* registered because another
    live master of its group has a newer or equal epoch: it must step down.
    """

    ha_server_addr: str | None = None
    master_addr: str | None = None
    queue_data_updated: bool = False
    master_epoch: int | None = None

    @property
    def superseded(self) -> bool:
        """The registering master lost its group to a newer master."""
        return self.master_epoch is not None


@dataclass(slots=True)
class EvictedBroker:
    """A broker address removed by :meth:`RouteInfoManager.scan_not_active_brokers`."""

    broker_addr: str
    channel: Any
    silent_for: float = field(default=0.0)


class RouteInfoManager:
    """Route table of one NameServer. See the module docstring for the model.

    ``clock`` returns seconds (monotonic); ``broker_timeout`` is the silence in
    seconds after which :meth:`scan_not_active_brokers` evicts a broker
    (default 120 s). ``order_topic_conf`` optionally maps a topic to its
    ``orderTopicConf`` string for route bodies (None = omit).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        broker_timeout: float = DEFAULT_BROKER_TIMEOUT,
        order_topic_conf: Callable[[str], str | None] | None = None,
    ) -> None:
        self.clock = clock
        self.broker_timeout = broker_timeout
        self.order_topic_conf = order_topic_conf
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}
        self._route_cache: dict[str, bytes] = {}

    # -- cache ------------------------------------------------------------------------

    def invalidate_topic(self, topic: str) -> None:
        """Forget the cached route body of ``topic``."""
        self._route_cache.pop(topic, None)

    def _invalidate_broker_name(self, broker_name: str) -> None:
        cache = self._route_cache
        if not cache:
            return
        for topic, queues in self.topic_queue_table.items():
            if broker_name in queues:
                cache.pop(topic, None)

    def _invalidate_all(self) -> None:
        self._route_cache.clear()

    # -- registration -----------------------------------------------------------------

    def register_broker(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config_wrapper: TopicConfigSerializeWrapper | None,
        filter_server_list: list[str] | None = None,
        channel: Any = None,
        epoch: int | None = None,
    ) -> RegisterBrokerResult:
        """Apply one REGISTER_BROKER (``RouteInfoManager.registerBroker``), atomically.

        Replication epochs (RocketCluster extension, ``rocket.broker.ha``): a
        master registering with ``epoch`` while another *live* address holds
        id 0 of the group with an epoch at least as new is not registered at
        all; the result names that master (``master_addr``, ``ha_server_addr``,
        ``master_epoch``) so the caller steps down. A newer epoch replaces the
        old master as usual. Registrations without an epoch (Java brokers)
        keep RocketMQ's last-writer-wins behaviour.

        Adds ``broker_name`` to ``cluster_name``; sets
        ``brokerAddrs[broker_id] = broker_addr`` after removing any other id
        mapped to the same address (slave -> master promotion); for a master
        (id 0) whose data version changed since its last registration (or on
        its first registration) upserts each topic's queue data; refreshes the
        live entry. Topics the broker no longer reports are kept, as in Java
        4.9.8 (DELETE_TOPIC_IN_NAMESRV removes them).
        """
        fenced = self._fenced_master(broker_addr, broker_name, broker_id, epoch)
        if fenced is not None:
            return fenced
        result = RegisterBrokerResult()
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
        register_first = self._put_broker_addr(cluster_name, broker_name, broker_id, broker_addr)

        if topic_config_wrapper is not None and broker_id == MASTER_ID:
            if register_first or self.is_broker_topic_config_changed(
                broker_addr, topic_config_wrapper.data_version
            ):
                for topic, tc in topic_config_wrapper.topic_config_table.items():
                    self._create_and_update_queue_data(
                        topic, broker_name, QueueData.from_topic_config(broker_name, tc)
                    )
                result.queue_data_updated = True

        data_version = topic_config_wrapper.data_version if topic_config_wrapper is not None else DataVersion()
        previous = self.broker_live_table.get(broker_addr)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            broker_addr=broker_addr,
            last_update=self.clock(),
            data_version=data_version,
            channel=channel,
            ha_server_addr=ha_server_addr,
            cluster_name=cluster_name,
            broker_name=broker_name,
            broker_id=broker_id,
            epoch=epoch,
        )
        if previous is None:
            log.info("new broker registered: %s %s/%d %s", cluster_name, broker_name, broker_id, broker_addr)

        if filter_server_list is not None:
            if filter_server_list:
                self.filter_server_table[broker_addr] = list(filter_server_list)
            else:
                self.filter_server_table.pop(broker_addr, None)

        if broker_id != MASTER_ID:
            self._fill_master_of_slave(broker_name, result)
        return result

    def _fenced_master(self, broker_addr: str, broker_name: str, broker_id: int,
                       epoch: int | None) -> RegisterBrokerResult | None:
        """The refusal of a master registration whose epoch is not newer than a live master's, else None."""
        if broker_id != MASTER_ID or epoch is None:
            return None
        current = self.broker_addr_table.get(broker_name)
        holder = current.broker_addrs.get(MASTER_ID) if current is not None else None
        live = self.broker_live_table.get(holder) if holder is not None and holder != broker_addr else None
        if live is None or live.epoch is None or live.epoch < epoch:
            return None
        log.warning("master registration of %s for %s refused: %s is live with epoch %d >= %d",
                    broker_addr, broker_name, holder, live.epoch, epoch)
        return RegisterBrokerResult(master_addr=holder, ha_server_addr=live.ha_server_addr, master_epoch=live.epoch)

    def _put_broker_addr(self, cluster_name: str, broker_name: str, broker_id: int, broker_addr: str) -> bool:
        """``brokerAddrs[broker_id] = broker_addr``, first dropping any other id mapped to that address.

        Returns True when the group or this id had no address before (a first registration).
        """
        register_first = False
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            register_first = True
            broker_data = BrokerData(cluster_name, broker_name, {})
            self.broker_addr_table[broker_name] = broker_data
        addrs = broker_data.broker_addrs
        addrs_changed = False
        for other_id, other_addr in list(addrs.items()):
            if other_addr == broker_addr and other_id != broker_id:
                del addrs[other_id]
                addrs_changed = True
        old_addr = addrs.get(broker_id)
        if old_addr != broker_addr:
            addrs[broker_id] = broker_addr
            addrs_changed = True
        if broker_data.cluster != cluster_name:
            broker_data.cluster = cluster_name
            addrs_changed = True
        if addrs_changed:
            self._invalidate_broker_name(broker_name)
        return register_first or old_addr is None

    def _fill_master_of_slave(self, broker_name: str, result: RegisterBrokerResult) -> None:
        """Set the live master's address and HA address on a slave's ``result``."""
        master_addr = self.broker_addr_table[broker_name].broker_addrs.get(MASTER_ID)
        master_live = self.broker_live_table.get(master_addr) if master_addr is not None else None
        if master_live is not None:
            result.ha_server_addr = master_live.ha_server_addr
            result.master_addr = master_addr

    def _create_and_update_queue_data(self, topic: str, broker_name: str, queue_data: QueueData) -> None:
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            self.topic_queue_table[topic] = {broker_name: queue_data}
            self._route_cache.pop(topic, None)
            log.info("new topic registered: %s from %s", topic, broker_name)
            return
        if queues.get(broker_name) != queue_data:
            queues[broker_name] = queue_data
            self._route_cache.pop(topic, None)

    def is_broker_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        """True when ``data_version`` differs from the one ``broker_addr`` last registered
        (or the broker is unknown)."""
        live = self.broker_live_table.get(broker_addr)
        return live is None or live.data_version != data_version

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        """The data version ``broker_addr`` last registered, or None (QUERY_DATA_VERSION)."""
        live = self.broker_live_table.get(broker_addr)
        return live.data_version if live is not None else None

    def update_broker_info_update_timestamp(self, broker_addr: str) -> None:
        """Mark ``broker_addr`` as alive now (QUERY_DATA_VERSION counts as a heartbeat)."""
        live = self.broker_live_table.get(broker_addr)
        if live is not None:
            live.last_update = self.clock()

    def unregister_broker(self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        """Apply one UNREGISTER_BROKER (``unregisterBroker``): drop the address everywhere.

        Removes ``broker_addr`` from the live table and from the group's
        ``brokerAddrs`` (the entry ``broker_id`` if it still maps to this
        address, and any other id that does); when the group is left empty,
        drops it, its cluster membership and its queue data.
        """
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            return
        addrs = broker_data.broker_addrs
        removed = False
        if addrs.get(broker_id) == broker_addr:
            del addrs[broker_id]
            removed = True
        for other_id, other_addr in list(addrs.items()):
            if other_addr == broker_addr:
                del addrs[other_id]
                removed = True
        if removed:
            self._invalidate_broker_name(broker_name)
            log.info("broker unregistered: %s %s/%d %s", cluster_name, broker_name, broker_id, broker_addr)
        if not addrs:
            self._remove_broker_name(broker_name, cluster_name)

    def _remove_broker_name(self, broker_name: str, cluster_name: str | None = None) -> None:
        """Drop an empty broker group, its cluster membership and its queue data."""
        self._invalidate_broker_name(broker_name)
        self.broker_addr_table.pop(broker_name, None)
        clusters = [cluster_name] if cluster_name is not None else list(self.cluster_addr_table)
        for name in clusters:
            names = self.cluster_addr_table.get(name)
            if names is not None and broker_name in names:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[name]
        self._remove_topic_by_broker_name(broker_name)

    def _remove_topic_by_broker_name(self, broker_name: str) -> None:
        for topic in list(self.topic_queue_table):
            queues = self.topic_queue_table[topic]
            if queues.pop(broker_name, None) is not None:
                self._route_cache.pop(topic, None)
                if not queues:
                    del self.topic_queue_table[topic]
                    log.info("topic %s removed: its last broker group %s is gone", topic, broker_name)

    # -- liveness -----------------------------------------------------------------------

    def scan_not_active_brokers(self) -> list[EvictedBroker]:
        """Evict every broker whose last registration is older than ``broker_timeout`` s.

        Returns the evicted addresses with their channels, so the caller can
        close those connections (Java closes them too).
        """
        now = self.clock()
        evicted: list[EvictedBroker] = []
        for addr, live in list(self.broker_live_table.items()):
            silent = now - live.last_update
            if silent > self.broker_timeout:
                log.warning("broker %s silent for %.1f s, evicting", addr, silent)
                evicted.append(EvictedBroker(addr, live.channel, silent))
                self.on_channel_destroy(addr)
        return evicted

    def on_channel_destroy(self, broker_addr: str, channel: Any = None) -> bool:
        """Drop ``broker_addr`` because its connection closed (or it timed out).

        With ``channel`` given, nothing happens when the broker's live entry
        belongs to another connection (it re-registered over a new one).
        Returns True when something was removed.
        """
        live = self.broker_live_table.get(broker_addr)
        if channel is not None and live is not None and live.channel is not channel:
            return False
        removed = self.broker_live_table.pop(broker_addr, None) is not None
        self.filter_server_table.pop(broker_addr, None)
        for broker_name, broker_data in list(self.broker_addr_table.items()):
            addrs = broker_data.broker_addrs
            ids = [bid for bid, addr in addrs.items() if addr == broker_addr]
            if not ids:
                continue
            removed = True
            for bid in ids:
                del addrs[bid]
            self._invalidate_broker_name(broker_name)
            if not addrs:
                self._remove_broker_name(broker_name)
        return removed

    # -- permissions ----------------------------------------------------------------------

    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        """Clear the WRITE bit (2) of ``broker_name``'s queues in every topic (205).

        Returns the number of topics touched (``wipeTopicCount``). The change
        lasts until the broker registers a different data version.
        """
        return self._operate_write_perm(broker_name, wipe=True)

    def add_write_perm_of_broker(self, broker_name: str) -> int:
        """Set the WRITE bit (2) again in every topic (327). Returns ``addTopicCount``."""
        return self._operate_write_perm(broker_name, wipe=False)

    def _operate_write_perm(self, broker_name: str, *, wipe: bool) -> int:
        count = 0
        for topic, queues in self.topic_queue_table.items():
            qd = queues.get(broker_name)
            if qd is None:
                continue
            perm = qd.perm & ~PERM_WRITE if wipe else qd.perm | PERM_WRITE
            if perm != qd.perm:
                queues[broker_name] = qd.with_perm(perm)
                self._route_cache.pop(topic, None)
            count += 1
        return count

    # -- topics ----------------------------------------------------------------------------

    def delete_topic(self, topic: str, cluster_name: str | None = None) -> bool:
        """DELETE_TOPIC_IN_NAMESRV (216): forget ``topic``.

        With ``cluster_name``, only the queue data of that cluster's broker
        groups goes (the topic stays if other groups host it). Returns True
        when something was removed.
        """
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return False
        self._route_cache.pop(topic, None)
        if not cluster_name:
            del self.topic_queue_table[topic]
            return True
        removed = False
        for broker_name in self.cluster_addr_table.get(cluster_name, ()):
            if queues.pop(broker_name, None) is not None:
                removed = True
        if not queues:
            del self.topic_queue_table[topic]
        return removed

    def get_all_topic_list(self) -> list[str]:
        """Every topic with queue data, in registration order."""
        return list(self.topic_queue_table)

    def get_topics_by_cluster(self, cluster_name: str) -> list[str]:
        """Topics hosted by at least one broker group of ``cluster_name`` (224)."""
        names = self.cluster_addr_table.get(cluster_name)
        if not names:
            return []
        return [topic for topic, queues in self.topic_queue_table.items() if not names.isdisjoint(queues)]

    # -- lookups ----------------------------------------------------------------------------

    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """The route of ``topic``, or None when unknown (``pickupTopicRouteData``).

        None also when no broker group hosting it has an address left. The
        result is a copy: changing it does not change the table.
        """
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        broker_datas = [
            self.broker_addr_table[name].copy() for name in queues if name in self.broker_addr_table
        ]
        if not broker_datas:
            return None
        filters: dict[str, list[str]] = {}
        if self.filter_server_table:
            for bd in broker_datas:
                for addr in bd.broker_addrs.values():
                    servers = self.filter_server_table.get(addr)
                    if servers:
                        filters[addr] = list(servers)
        order = self.order_topic_conf(topic) if self.order_topic_conf is not None else None
        return TopicRouteData(list(queues.values()), broker_datas, filters, order)

    def route_body(self, topic: str) -> bytes | None:
        """The encoded TopicRouteData JSON of ``topic`` (cached), or None when unknown."""
        body = self._route_cache.get(topic)
        if body is None:
            route = self.pickup_topic_route_data(topic)
            if route is None:
                return None
            body = route.encode()
            self._route_cache[topic] = body
        return body

    def get_all_cluster_info(self) -> ClusterInfo:
        """A copy of the broker and cluster tables (GET_BROKER_CLUSTER_INFO)."""
        return ClusterInfo(
            broker_addr_table={name: bd.copy() for name, bd in self.broker_addr_table.items()},
            cluster_addr_table={name: sorted(names) for name, names in self.cluster_addr_table.items()},
        )

    # -- sizes (metrics) ----------------------------------------------------------------------

    @property
    def broker_count(self) -> int:
        """Live broker addresses (masters and slaves)."""
        return len(self.broker_live_table)

    @property
    def topic_count(self) -> int:
        """Topics with queue data."""
        return len(self.topic_queue_table)
