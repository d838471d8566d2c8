"""Request processors of the NameServer (``DefaultRequestProcessor`` in RocketMQ 4.9.8).

Every handler is a plain (non-async) function, so the remoting connection
calls it inline: it runs to completion without yielding to the event loop,
which makes each registration atomic with respect to lookups (see
:mod:`rocket.nameserver.routeinfo`) and keeps the route-lookup hot path free
of task creation.

Ext fields, bodies and response codes follow RocketMQ's ``DefaultRequestProcessor``;
a missing required field is answered with SYSTEM_ERROR (1) by the
connection (``HeaderFieldError``), as Java does for ``@CFNotNull`` fields.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rocket.nameserver.kvconfig import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from rocket.nameserver.listeners import LISTENER_ADDRS_FIELD, ListenerAddressBook, ListenerError, parse_listener_addrs
from rocket.nameserver.routeinfo import RouteInfoManager
from rocket.protocol import (
    BodyError,
    DataVersion,
    RegisterBrokerBody,
    crc32_masked,
    dumps,
    kv_table_body,
    topic_list_body,
)
from rocket.protocol.codes import RequestCode, ResponseCode
from rocket.protocol.validation import LONG_MAX, topic_counts_problem
from rocket.remoting.command import RemotingCommand
from rocket.remoting.connection import Processors, RemotingConnection, parse_addr

if TYPE_CHECKING:
    from rocket.nameserver.metrics import NameServerMetrics

log = logging.getLogger("rocket.nameserver")

#: Key in ``RemotingConnection.attributes``: broker addresses registered over that connection.
CONN_BROKER_ADDRS = "nameserver.broker_addrs"

#: FAQ link Java appends to "no route" remarks (``FAQUrl.APPLY_TOPIC_URL`` + ``suggestTodo``).
_APPLY_TOPIC_SUGGESTION = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def no_route_remark(topic: str) -> str:
    """Remark of a TOPIC_NOT_EXIST (17) answer to GET_ROUTEINFO_BY_TOPIC (``DefaultRequestProcessor``)."""
    return f"No topic route info in name server for the topic: {topic}{_APPLY_TOPIC_SUGGESTION}"


class DefaultRequestProcessor:
    """Handlers for every NameServer request code; :meth:`register` installs them.

    ``metrics`` is optional (unit tests run without). ``order_message_enable``
    and ``enable_all_topic_list``/``enable_topic_list`` mirror the Java
    NamesrvConfig switches of the same names (defaults: false, true, true).
    """

    def __init__(
        self,
        routes: RouteInfoManager,
        kv_config: KVConfigManager,
        metrics: NameServerMetrics | None = None,
        *,
        order_message_enable: bool = False,
        enable_all_topic_list: bool = True,
        enable_topic_list: bool = True,
    ) -> None:
        self.routes = routes
        self.kv_config = kv_config
        self.metrics = metrics
        self.order_message_enable = order_message_enable
        self.enable_all_topic_list = enable_all_topic_list
        self.enable_topic_list = enable_topic_list
        #: Brokers' addresses per listener (``listenerAddrs`` of REGISTER_BROKER, :mod:`rocket.nameserver.listeners`).
        self.listener_book = ListenerAddressBook()

    def register(self, processors: Processors) -> None:
        """Install every handler in ``processors``."""
        table = {
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm_of_broker,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm_of_broker,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_namesrv,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
        }
        for code, handler in table.items():
            processors.register(code, handler)

    # -- KV config (100/101/102) -------------------------------------------------------

    def put_kv_config(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """PUT_KV_CONFIG: ext ``namespace``, ``key``, ``value`` -> code 0."""
        self.kv_config.put(request.require("namespace"), request.require("key"), request.require("value"))
        return request.response()

    def get_kv_config(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """GET_KV_CONFIG: ext ``namespace``, ``key`` -> code 0 + ext ``value``,
        or QUERY_NOT_FOUND (22) "No config item, Namespace: <ns> Key: <k>"."""
        namespace, key = request.require("namespace"), request.require("key")
        value = self.kv_config.get(namespace, key)
        if value is None:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}"
            )
        return request.response(ext_fields={"value": value})

    def delete_kv_config(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """DELETE_KV_CONFIG: ext ``namespace``, ``key`` -> code 0 (also when absent)."""
        self.kv_config.delete(request.require("namespace"), request.require("key"))
        return request.response()

    # -- brokers (103/104/322) ---------------------------------------------------------

    def register_broker(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """REGISTER_BROKER (103), as ``DefaultRequestProcessor.registerBroker``.

        Ext: ``brokerName``, ``brokerAddr``, ``clusterName``, ``haServerAddr``,
        ``brokerId`` (required), ``compressed``, ``bodyCrc32`` (optional).
        Answers SYSTEM_ERROR (1) "crc32 not match" when ``bodyCrc32`` is
        non-zero and differs from the masked CRC32 of the body, and
        SYSTEM_ERROR with a description for an undecodable body. On success:
        code 0, ext ``haServerAddr``/``masterAddr`` for a slave whose master
        is live, body = KVTable of ORDER_TOPIC_CONFIG when not empty.

        Answers INVALID_PARAMETER (29) for an empty ``brokerName``/``clusterName``, a negative
        ``brokerId`` or ``epoch``, or an address that is not ``host:port``; a topic of the body
        whose queue counts, perm or topicSysFlag are out of range
        (``rocket.protocol.validation.topic_counts_problem``) is left out of the routes, logged.

        Optional ext ``epoch`` (RocketCluster replication epoch of a master):
        when another live master of the group has a newer or equal epoch, the
        registration is not applied and the answer (code 0) carries that
        master's ``masterAddr``, ``haServerAddr`` and ``masterEpoch``.
        """
        broker_name = request.require("brokerName")
        broker_addr = request.require("brokerAddr")
        cluster_name = request.require("clusterName")
        ha_server_addr = request.require("haServerAddr")
        broker_id = request.require_int("brokerId")
        epoch_text = request.get("epoch")
        try:
            epoch = int(epoch_text) if epoch_text not in (None, "") else None
        except ValueError:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad epoch {epoch_text!r}")
        if epoch is not None and not 0 <= epoch <= LONG_MAX:
            return request.response(ResponseCode.INVALID_PARAMETER, f"epoch {epoch} is out of range (0..{LONG_MAX})")
        compressed = request.get_bool("compressed", False)
        body_crc = request.get_int("bodyCrc32", 0, bits=32)
        problem = _broker_identity_problem(broker_name, broker_addr, cluster_name, broker_id, ha_server_addr)
        if problem is not None:
            return request.response(ResponseCode.INVALID_PARAMETER, problem)
        try:
            listener_addrs = parse_listener_addrs(request.get(LISTENER_ADDRS_FIELD) or "")
        except ListenerError as exc:
            return request.response(ResponseCode.INVALID_PARAMETER, str(exc))
        if body_crc != 0 and crc32_masked(request.body) != body_crc:
            log.warning("register from %s (%s): body crc32 does not match", broker_addr, conn.peer)
            return request.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        try:
            body = RegisterBrokerBody.decode(request.body, compressed)
        except BodyError as exc:
            log.warning("register from %s (%s): bad body: %s", broker_addr, conn.peer, exc)
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad register body: {exc}")
        table = body.topic_config_serialize_wrapper.topic_config_table
        for name, tc in list(table.items()):
            problem = topic_counts_problem(tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)
            if problem is not None:  # one odd topic must not take the whole broker out of the routes
                log.warning("register from %s (%s): topic %s left out of the routes: %s", broker_addr, conn.peer,
                            name, problem)
                del table[name]

        result = self.routes.register_broker(
            cluster_name,
            broker_addr,
            broker_name,
            broker_id,
            ha_server_addr,
            body.topic_config_serialize_wrapper,
            body.filter_server_list,
            conn,
            epoch=epoch,
        )
        if result.superseded:
            return request.response(ext_fields={
                "masterAddr": result.master_addr or "",
                "haServerAddr": result.ha_server_addr or "",
                "masterEpoch": str(result.master_epoch),
            })
        addrs = conn.attributes.get(CONN_BROKER_ADDRS)
        if addrs is None:
            addrs = conn.attributes[CONN_BROKER_ADDRS] = set()
        addrs.add(broker_addr)
        self.listener_book.update(broker_addr, listener_addrs)
        self.listener_book.prune(self.routes.broker_live_table)

        ext: dict[str, str] = {}
        if result.ha_server_addr is not None and result.master_addr is not None:
            ext["haServerAddr"] = result.ha_server_addr
            ext["masterAddr"] = result.master_addr
        order_conf = self.kv_config.namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        return request.response(ext_fields=ext, body=kv_table_body(order_conf) if order_conf else b"")

    def unregister_broker(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """UNREGISTER_BROKER (104): ext ``brokerName``, ``brokerAddr``,
        ``clusterName``, ``brokerId`` (required) -> code 0, no body."""
        broker_name = request.require("brokerName")
        broker_addr = request.require("brokerAddr")
        cluster_name = request.require("clusterName")
        broker_id = request.require_int("brokerId")
        if broker_id < 0:
            return request.response(ResponseCode.INVALID_PARAMETER,
                                    f"brokerId {broker_id} is out of range (0..{LONG_MAX})")
        self.routes.unregister_broker(cluster_name, broker_addr, broker_name, broker_id)
        addrs = conn.attributes.get(CONN_BROKER_ADDRS)
        if addrs is not None:
            addrs.discard(broker_addr)
        return request.response()

    def query_data_version(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """QUERY_DATA_VERSION (322): ext ``brokerAddr`` (+ name, cluster, id),
        body DataVersion JSON -> code 0, ext ``changed`` (true when the
        NameServer holds a different or no version), body = the version it
        holds (absent when none). Also refreshes the broker's liveness."""
        broker_addr = request.require("brokerAddr")
        try:
            version = DataVersion.from_json(request.body) if request.body else DataVersion()
        except BodyError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad DataVersion body: {exc}")
        changed = self.routes.is_broker_topic_config_changed(broker_addr, version)
        if not changed:
            self.routes.update_broker_info_update_timestamp(broker_addr)
        held = self.routes.query_broker_topic_config(broker_addr)
        body = b"" if held is None else dumps(held.to_json())
        return request.response(ext_fields={"changed": changed}, body=body)

    # -- routes (105/106) ---------------------------------------------------------------

    def get_route_info_by_topic(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """GET_ROUTEINFO_BY_TOPIC (105): ext ``topic`` -> code 0 + TopicRouteData
        JSON (always standard JSON), or TOPIC_NOT_EXIST (17) with the
        Java remark. The hot path: the body comes from the route cache."""
        topic = request.ext_fields.get("topic")
        if topic is None:
            topic = request.require("topic")
        body = self.routes.route_body(topic)
        metrics = self.metrics
        if body is None:
            if metrics is not None:
                metrics.lookups_not_found += 1
            return request.response(ResponseCode.TOPIC_NOT_EXIST, no_route_remark(topic))
        if metrics is not None:
            metrics.lookups_found += 1
        return request.response(body=body)

    def get_broker_cluster_info(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """GET_BROKER_CLUSTER_INFO (106): no ext -> code 0 + ``ClusterInfo`` JSON."""
        return request.response(body=self.routes.get_all_cluster_info().encode())

    # -- permissions (205/327) -------------------------------------------------------------

    def wipe_write_perm_of_broker(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """WIPE_WRITE_PERM_OF_BROKER (205): ext ``brokerName`` -> code 0, ext ``wipeTopicCount``."""
        broker_name = request.require("brokerName")
        count = self.routes.wipe_write_perm_of_broker(broker_name)
        log.info("write permission of broker %s wiped in %d topics (from %s)", broker_name, count, conn.peer)
        return request.response(ext_fields={"wipeTopicCount": count})

    def add_write_perm_of_broker(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """ADD_WRITE_PERM_OF_BROKER (327): ext ``brokerName`` -> code 0, ext ``addTopicCount``."""
        broker_name = request.require("brokerName")
        count = self.routes.add_write_perm_of_broker(broker_name)
        log.info("write permission of broker %s added in %d topics (from %s)", broker_name, count, conn.peer)
        return request.response(ext_fields={"addTopicCount": count})

    # -- topics (206/216/224) ----------------------------------------------------------------

    def get_all_topic_list(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) -> code 0 + ``{"topicList": [...]}``;
        SYSTEM_ERROR "disable" when ``enable_all_topic_list`` is off (Java)."""
        if not self.enable_all_topic_list:
            return request.response(ResponseCode.SYSTEM_ERROR, "disable")
        return request.response(body=topic_list_body(self.routes.get_all_topic_list()))

    def delete_topic_in_namesrv(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """DELETE_TOPIC_IN_NAMESRV (216): ext ``topic``, optional ``clusterName`` -> code 0."""
        topic = request.require("topic")
        cluster_name = request.get("clusterName") or None
        if self.routes.delete_topic(topic, cluster_name):
            log.info("topic %s deleted%s (from %s)", topic, f" in {cluster_name}" if cluster_name else "", conn.peer)
        return request.response()

    def get_topics_by_cluster(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """GET_TOPICS_BY_CLUSTER (224): ext ``cluster`` -> code 0 + TopicList;
        SYSTEM_ERROR "disable" when ``enable_topic_list`` is off (Java)."""
        if not self.enable_topic_list:
            return request.response(ResponseCode.SYSTEM_ERROR, "disable")
        cluster = request.require("cluster")
        return request.response(body=topic_list_body(self.routes.get_topics_by_cluster(cluster)))

    # -- connection close -------------------------------------------------------------------

    def connection_closed(self, conn: RemotingConnection) -> list[str]:
        """Drop the brokers that registered over ``conn`` (``BrokerHousekeepingService``).

        A broker that has since re-registered over another connection is
        kept. Returns the addresses removed.
        """
        addrs = conn.attributes.get(CONN_BROKER_ADDRS)
        removed: list[str] = []
        if not addrs:
            return removed
        for addr in sorted(addrs):
            if self.routes.on_channel_destroy(addr, conn):
                removed.append(addr)
        addrs.clear()
        if removed:
            log.warning("connection %s closed: removed brokers %s", conn.peer, ", ".join(removed))
        return removed

    def order_topic_conf(self, topic: str) -> str | None:
        """``orderTopicConf`` for a route body: the KV value when order messages are enabled."""
        if not self.order_message_enable:
            return None
        return self.kv_config.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic)


def _broker_identity_problem(name: str, addr: str, cluster: str, broker_id: int, ha_addr: str) -> str | None:
    """A remark when a registering broker's identity is out of range, else None: names not
    empty, ``brokerId`` >= 0, ``brokerAddr`` (and a non-empty ``haServerAddr``) ``host:port``."""
    if not name or not cluster:
        return "brokerName and clusterName must not be empty"
    if broker_id < 0:
        return f"brokerId {broker_id} is out of range (0..{LONG_MAX})"
    for field, value in (("brokerAddr", addr), ("haServerAddr", ha_addr)):
        if field == "haServerAddr" and not value:
            continue
        try:
            host, _ = parse_addr(value)
        except ValueError as exc:
            return f"{field}: {exc}"
        if not host:
            return f"{field} {value!r} has no host"
    return None
