"""Typed async calls to a NameServer, for brokers, clients and admin tools.

Each function takes ``(client, addr, ...)``: a :class:`RemotingClient` and the
NameServer's ``"host:port"``, sends one request (codes and fields as RocketMQ's
``DefaultRequestProcessor`` reads them) and returns parsed data.

Errors: every function raises :class:`RemotingCommandError` when the
NameServer answers with a code other than SUCCESS (e.g. ``code`` 17 for an
unknown topic in :func:`get_route`), ``RemotingConnectError`` /
``RemotingTimeoutError`` when it cannot be reached in time, and
:class:`~rocket.protocol.BodyError` for a body that does not parse.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rocket.protocol import (
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
    crc32_masked,
    dumps,
    parse_kv_table,
    parse_topic_list,
)
from rocket.protocol.codes import RequestCode, ResponseCode
from rocket.remoting.client import RemotingClient
from rocket.remoting.command import RemotingCommand, RemotingCommandError

#: Timeout of REGISTER_BROKER in Java brokers (``registerBrokerTimeoutMills``), seconds.
REGISTER_TIMEOUT = 6.0
#: Default timeout of the other calls, seconds.
DEFAULT_TIMEOUT = 3.0


@dataclass(slots=True)
class RegisterBrokerResponse:
    """What REGISTER_BROKER answers (``RegisterBrokerResult``).

    ``ha_server_addr``/``master_addr``: for a slave whose master is live,
    where to replicate from; else None. ``order_topic_config``: the
    NameServer's ORDER_TOPIC_CONFIG namespace (topic -> conf), maybe empty.
    """

    ha_server_addr: str | None
    master_addr: str | None
    order_topic_config: dict[str, str]


async def _call(
    client: RemotingClient,
    addr: str,
    code: int,
    ext: dict[str, str] | None = None,
    body: bytes = b"",
    timeout: float = DEFAULT_TIMEOUT,
    accept: tuple[int, ...] = (ResponseCode.SUCCESS,),
) -> RemotingCommand:
    request = RemotingCommand(code=code, ext_fields=ext or {}, body=body)
    response = await client.invoke(addr, request, timeout)
    if response.code not in accept:
        raise RemotingCommandError(response.code, response.remark, RequestCode(code).name)
    return response


async def register_broker(
    client: RemotingClient,
    addr: str,
    *,
    cluster_name: str,
    broker_name: str,
    broker_addr: str,
    broker_id: int,
    ha_server_addr: str,
    topic_configs: Iterable[TopicConfig] | TopicConfigSerializeWrapper,
    data_version: DataVersion | None = None,
    filter_server_list: list[str] | None = None,
    compressed: bool = False,
    timeout: float = REGISTER_TIMEOUT,
) -> RegisterBrokerResponse:
    """REGISTER_BROKER (103) of one broker with one NameServer.

    ``topic_configs`` is the broker's topic table, either a wrapper (with its
    own data version) or configs plus ``data_version``. The body carries a
    masked CRC32 in ``bodyCrc32`` and is zlib-compressed when ``compressed``
    (RocketMQ's ``RegisterBrokerBody``).
    """
    if isinstance(topic_configs, TopicConfigSerializeWrapper):
        wrapper = topic_configs
    else:
        wrapper = TopicConfigSerializeWrapper(
            {tc.topic_name: tc for tc in topic_configs}, data_version or DataVersion()
        )
    body = RegisterBrokerBody(wrapper, list(filter_server_list or [])).encode(compressed)
    ext = {
        "brokerName": broker_name,
        "brokerAddr": broker_addr,
        "clusterName": cluster_name,
        "haServerAddr": ha_server_addr,
        "brokerId": str(broker_id),
        "compressed": "true" if compressed else "false",
        "bodyCrc32": str(crc32_masked(body)),
    }
    response = await _call(client, addr, RequestCode.REGISTER_BROKER, ext, body, timeout)
    return RegisterBrokerResponse(
        ha_server_addr=response.ext_fields.get("haServerAddr") or None,
        master_addr=response.ext_fields.get("masterAddr") or None,
        order_topic_config=parse_kv_table(response.body),
    )


async def unregister_broker(
    client: RemotingClient,
    addr: str,
    *,
    cluster_name: str,
    broker_name: str,
    broker_addr: str,
    broker_id: int,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    """UNREGISTER_BROKER (104)."""
    ext = {
        "brokerName": broker_name,
        "brokerAddr": broker_addr,
        "clusterName": cluster_name,
        "brokerId": str(broker_id),
    }
    await _call(client, addr, RequestCode.UNREGISTER_BROKER, ext, timeout=timeout)


async def query_data_version(
    client: RemotingClient,
    addr: str,
    *,
    cluster_name: str,
    broker_name: str,
    broker_addr: str,
    broker_id: int,
    data_version: DataVersion,
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[bool, DataVersion | None]:
    """QUERY_DATA_VERSION (322): ``(changed, version the NameServer holds or None)``."""
    ext = {
        "brokerName": broker_name,
        "brokerAddr": broker_addr,
        "clusterName": cluster_name,
        "brokerId": str(broker_id),
    }
    response = await _call(
        client, addr, RequestCode.QUERY_DATA_VERSION, ext, dumps(data_version.to_json()), timeout
    )
    changed = response.get_bool("changed", True)
    held = DataVersion.from_json(response.body) if response.body else None
    return changed, held


async def get_route(
    client: RemotingClient, addr: str, topic: str, timeout: float = DEFAULT_TIMEOUT
) -> TopicRouteData:
    """GET_ROUTEINFO_BY_TOPIC (105). Unknown topic: ``RemotingCommandError`` with code 17."""
    ext = {"topic": topic, "acceptStandardJsonOnly": "true"}
    response = await _call(client, addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, ext, timeout=timeout)
    return TopicRouteData.from_json(response.body)


async def get_cluster_info(client: RemotingClient, addr: str, timeout: float = DEFAULT_TIMEOUT) -> ClusterInfo:
    """GET_BROKER_CLUSTER_INFO (106)."""
    response = await _call(client, addr, RequestCode.GET_BROKER_CLUSTER_INFO, timeout=timeout)
    return ClusterInfo.from_json(response.body)


async def wipe_write_perm_of_broker(
    client: RemotingClient, addr: str, broker_name: str, timeout: float = DEFAULT_TIMEOUT
) -> int:
    """WIPE_WRITE_PERM_OF_BROKER (205): the number of topics touched (``wipeTopicCount``)."""
    response = await _call(
        client, addr, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": broker_name}, timeout=timeout
    )
    return response.get_int("wipeTopicCount", 0)


async def add_write_perm_of_broker(
    client: RemotingClient, addr: str, broker_name: str, timeout: float = DEFAULT_TIMEOUT
) -> int:
    """ADD_WRITE_PERM_OF_BROKER (327): the number of topics touched (``addTopicCount``)."""
    response = await _call(
        client, addr, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": broker_name}, timeout=timeout
    )
    return response.get_int("addTopicCount", 0)


async def get_all_topic_list(client: RemotingClient, addr: str, timeout: float = DEFAULT_TIMEOUT) -> list[str]:
    """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206): every topic name."""
    response = await _call(client, addr, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, timeout=timeout)
    return parse_topic_list(response.body)


async def get_topics_by_cluster(
    client: RemotingClient, addr: str, cluster: str, timeout: float = DEFAULT_TIMEOUT
) -> list[str]:
    """GET_TOPICS_BY_CLUSTER (224): topics hosted by ``cluster``'s broker groups."""
    response = await _call(client, addr, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster}, timeout=timeout)
    return parse_topic_list(response.body)


async def delete_topic_in_namesrv(
    client: RemotingClient,
    addr: str,
    topic: str,
    cluster_name: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    """DELETE_TOPIC_IN_NAMESRV (216); with ``cluster_name`` only that cluster's queues go."""
    ext = {"topic": topic}
    if cluster_name:
        ext["clusterName"] = cluster_name
    await _call(client, addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, ext, timeout=timeout)


async def put_kv_config(
    client: RemotingClient, addr: str, namespace: str, key: str, value: str, timeout: float = DEFAULT_TIMEOUT
) -> None:
    """PUT_KV_CONFIG (100)."""
    ext = {"namespace": namespace, "key": key, "value": value}
    await _call(client, addr, RequestCode.PUT_KV_CONFIG, ext, timeout=timeout)


async def get_kv_config(
    client: RemotingClient, addr: str, namespace: str, key: str, timeout: float = DEFAULT_TIMEOUT
) -> str | None:
    """GET_KV_CONFIG (101): the value, or None when not set (code 22)."""
    response = await _call(
        client,
        addr,
        RequestCode.GET_KV_CONFIG,
        {"namespace": namespace, "key": key},
        timeout=timeout,
        accept=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND),
    )
    if response.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    return response.ext_fields.get("value")


async def delete_kv_config(
    client: RemotingClient, addr: str, namespace: str, key: str, timeout: float = DEFAULT_TIMEOUT
) -> None:
    """DELETE_KV_CONFIG (102)."""
    await _call(client, addr, RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key}, timeout=timeout)
