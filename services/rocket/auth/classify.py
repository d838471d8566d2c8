"""THE table of what every request code does: which actions on which resources, read from the
request's header fields (and, for a few codes, its body).

Sources: the ``@RocketMQAction`` / ``@RocketMQResource`` annotations of Apache RocketMQ 5.x
request headers and ``DefaultAuthorizationContextBuilder.build(ChannelHandlerContext, ...)``
(special cases for sends, pulls, offsets, heartbeats, batch locks). Deviations, all on the
safe or usable side: codes whose header names no resource are checked against the
``Cluster:<name>`` resource (Apache lets them through unchecked); the offset look-ups consumers
make (GET_MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, ...) accept Sub as well as Get; deleting a
topic on the NameServer is ``Delete`` on the topic.

A classifier returns a list of ``(Resource, actions)`` — every one must be allowed, with any one
of its actions — or :data:`AUTHENTICATED` (``[]``: any signed-in user may, e.g. the cluster's
route table). A code missing from :data:`CLASSIFIERS` is denied when authorization is on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rocket.auth.model import RETRY_GROUP_TOPIC_PREFIX, Action, Resource
from rocket.protocol import loads_lenient
from rocket.remoting import RemotingCommand, RequestCode

Check = tuple[Resource, tuple[Action, ...]]
#: ``(request, cluster name) -> checks``
Classifier = Callable[[RemotingCommand, str], list[Check]]

#: What a code needing only authentication returns.
AUTHENTICATED: list[Check] = []

PUB = (Action.PUB,)
SUB = (Action.SUB,)
GET = (Action.GET,)
LIST = (Action.LIST,)
CREATE = (Action.CREATE,)
UPDATE = (Action.UPDATE,)
DELETE = (Action.DELETE,)
SUB_GET = (Action.SUB, Action.GET)
SUB_UPDATE = (Action.SUB, Action.UPDATE)


class ClassifyError(ValueError):
    """A request whose resource fields are missing or unreadable (then it is denied)."""


def _field(req: RemotingCommand, *names: str) -> str:
    for name in names:
        value = req.ext_fields.get(name)
        if value:
            return value
    raise ClassifyError(f"request {req.code} has no {' or '.join(names)} field to authorize")


def _is_retry(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def _cluster(actions: tuple[Action, ...]) -> Classifier:
    return lambda req, cluster: [(Resource.cluster(cluster), actions)]


def _topic(actions: tuple[Action, ...], *names: str) -> Classifier:
    names = names or ("topic",)
    return lambda req, cluster: [(Resource.topic(_field(req, *names)), actions)]


def _group(actions: tuple[Action, ...], *names: str) -> Classifier:
    names = names or ("consumerGroup",)
    return lambda req, cluster: [(Resource.group(_field(req, *names)), actions)]


def _authenticated(req: RemotingCommand, cluster: str) -> list[Check]:
    return AUTHENTICATED


def _send(topic_key: str, group_key: str) -> Classifier:
    def classify(req: RemotingCommand, cluster: str) -> list[Check]:
        topic = req.ext_fields.get(topic_key) or _field(req, topic_key)
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # a consumer sending back to its retry topic
            return [(Resource.group(req.ext_fields.get(group_key) or topic), SUB)]
        return [(Resource.topic(topic), PUB)]
    return classify


def _topic_and_group(actions: tuple[Action, ...], group_key: str = "consumerGroup") -> Classifier:
    def classify(req: RemotingCommand, cluster: str) -> list[Check]:
        checks: list[Check] = []
        topic = req.ext_fields.get("topic")
        if topic and not _is_retry(topic):
            checks.append((Resource.topic(topic), actions))
        checks.append((Resource.group(_field(req, group_key)), actions))
        return checks
    return classify


def _route(req: RemotingCommand, cluster: str) -> list[Check]:
    topic = _field(req, "topic")
    if _is_retry(topic):
        return [(Resource.group(topic), SUB_GET)]
    return [(Resource.topic(topic), (Action.PUB, Action.SUB, Action.GET))]


def _body(req: RemotingCommand) -> Any:
    if not req.body:
        return {}
    try:
        return loads_lenient(req.body)
    except ValueError:
        raise ClassifyError(f"request {req.code}: the body is not JSON") from None


def _heartbeat(req: RemotingCommand, cluster: str) -> list[Check]:
    obj = _body(req)
    checks: list[Check] = []
    for data in (obj.get("consumerDataSet") or []) if isinstance(obj, dict) else []:
        if not isinstance(data, dict):
            continue
        checks.append((Resource.group(str(data.get("groupName") or "")), SUB))
        for sub in data.get("subscriptionDataSet") or []:
            topic = str(sub.get("topic") or "") if isinstance(sub, dict) else ""
            if topic and not _is_retry(topic):
                checks.append((Resource.topic(topic), SUB))
    return checks  # a producer-only heartbeat needs authentication only


def _batch_lock(req: RemotingCommand, cluster: str) -> list[Check]:
    obj = _body(req)
    if not isinstance(obj, dict) or not obj.get("consumerGroup"):
        raise ClassifyError(f"request {req.code}: no consumerGroup in the body")
    checks: list[Check] = [(Resource.group(str(obj["consumerGroup"])), SUB)]
    for mq in obj.get("mqSet") or []:
        topic = str(mq.get("topic") or "") if isinstance(mq, dict) else ""
        if topic and not _is_retry(topic):
            checks.append((Resource.topic(topic), SUB))
    return checks


def _unregister_client(req: RemotingCommand, cluster: str) -> list[Check]:
    group = req.ext_fields.get("consumerGroup")
    return [(Resource.group(group), SUB)] if group else AUTHENTICATED


def _end_transaction(req: RemotingCommand, cluster: str) -> list[Check]:
    topic = req.ext_fields.get("topic")
    return [(Resource.topic(topic), PUB)] if topic else AUTHENTICATED


def _create_group(req: RemotingCommand, cluster: str) -> list[Check]:
    obj = _body(req)
    name = obj.get("groupName") if isinstance(obj, dict) else None
    if not name:
        raise ClassifyError("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: no groupName in the body")
    return [(Resource.group(str(name)), CREATE)]


def _consume_stats(req: RemotingCommand, cluster: str) -> list[Check]:
    return _topic_and_group(GET)(req, cluster)


C = RequestCode
#: Request code -> classifier. Every member of :class:`RequestCode` is here (a unit test checks).
CLASSIFIERS: dict[int, Classifier] = {
    # messages
    C.SEND_MESSAGE: _send("topic", "producerGroup"),
    C.SEND_MESSAGE_V2: _send("b", "a"),
    C.SEND_BATCH_MESSAGE: _send("b", "a"),
    C.CONSUMER_SEND_MSG_BACK: _group(SUB, "group"),
    C.END_TRANSACTION: _end_transaction,
    C.PULL_MESSAGE: _topic_and_group(SUB),
    C.LITE_PULL_MESSAGE: _topic_and_group(SUB),
    C.QUERY_MESSAGE: _topic(SUB_GET),
    C.VIEW_MESSAGE_BY_ID: _cluster(GET),
    # offsets
    C.QUERY_CONSUMER_OFFSET: _topic_and_group(SUB_GET),
    C.UPDATE_CONSUMER_OFFSET: _topic_and_group(SUB_UPDATE),
    C.GET_MAX_OFFSET: _topic(SUB_GET),
    C.GET_MIN_OFFSET: _topic(SUB_GET),
    C.GET_EARLIEST_MSG_STORETIME: _topic(SUB_GET),
    C.SEARCH_OFFSET_BY_TIMESTAMP: _topic(SUB_GET),
    C.QUERY_BROKER_OFFSET: _cluster(GET),
    C.GET_ALL_CONSUMER_OFFSET: _cluster(GET),
    C.GET_ALL_DELAY_OFFSET: _cluster(GET),
    C.GET_TIMER_CHECK_POINT: _cluster(GET),
    C.RESET_CONSUMER_CLIENT_OFFSET: _group(UPDATE, "group"),
    # clients
    C.HEART_BEAT: _heartbeat,
    C.UNREGISTER_CLIENT: _unregister_client,
    C.CHECK_CLIENT_CONFIG: _authenticated,
    C.GET_CONSUMER_LIST_BY_GROUP: _group(SUB_GET),
    C.LOCK_BATCH_MQ: _batch_lock,
    C.UNLOCK_BATCH_MQ: _batch_lock,
    C.GET_CONSUMER_CONNECTION_LIST: _group(GET),
    C.GET_CONSUMER_RUNNING_INFO: _group(GET),
    C.CONSUME_MESSAGE_DIRECTLY: _group(SUB),
    # broker to client only; a server receiving them treats them as cluster changes
    C.CHECK_TRANSACTION_STATE: _cluster(UPDATE),
    C.NOTIFY_CONSUMER_IDS_CHANGED: _cluster(UPDATE),
    # topics and groups
    C.UPDATE_AND_CREATE_TOPIC: _topic(CREATE),
    C.DELETE_TOPIC_IN_BROKER: _topic(DELETE),
    C.DELETE_TOPIC_IN_NAMESRV: _topic(DELETE),
    C.GET_ALL_TOPIC_CONFIG: _cluster(LIST),
    C.GET_TOPIC_CONFIG_LIST: _cluster(LIST),
    C.GET_TOPIC_STATS_INFO: _topic(GET),
    C.GET_TOPICS_BY_CLUSTER: _cluster(LIST),
    C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: _cluster(LIST),
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _create_group,
    C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: _cluster(LIST),
    C.DELETE_SUBSCRIPTIONGROUP: _group(DELETE, "groupName"),
    C.GET_CONSUME_STATS: _consume_stats,
    # broker administration
    C.UPDATE_BROKER_CONFIG: _cluster(UPDATE),
    C.GET_BROKER_CONFIG: _cluster(GET),
    C.GET_BROKER_RUNTIME_INFO: _cluster(GET),
    C.WIPE_WRITE_PERM_OF_BROKER: _cluster(UPDATE),
    C.ADD_WRITE_PERM_OF_BROKER: _cluster(UPDATE),
    C.GET_BROKER_HA_STATUS: _cluster(GET),
    C.GET_BROKER_EPOCH_CACHE: _cluster(GET),
    C.NOTIFY_BROKER_ROLE_CHANGED: _cluster(UPDATE),
    # NameServer
    C.GET_ROUTEINFO_BY_TOPIC: _route,
    C.GET_BROKER_CLUSTER_INFO: _authenticated,
    C.REGISTER_BROKER: _cluster(UPDATE),
    C.UNREGISTER_BROKER: _cluster(UPDATE),
    C.QUERY_DATA_VERSION: _cluster(GET),
    C.PUT_KV_CONFIG: _cluster(UPDATE),
    C.DELETE_KV_CONFIG: _cluster(UPDATE),
    C.GET_KV_CONFIG: _cluster(GET),
    # mqadmin's operational commands (rocket.broker.processor.tools)
    C.UPDATE_AND_CREATE_TOPIC_LIST: _cluster(UPDATE),
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: _cluster(UPDATE),
    C.GET_PRODUCER_CONNECTION_LIST: _group(GET, "producerGroup"),
    C.INVOKE_BROKER_TO_RESET_OFFSET: _group(UPDATE, "group"),
    C.QUERY_TOPIC_CONSUME_BY_WHO: _topic(GET),
    C.QUERY_CONSUME_QUEUE: _topic(GET),
    C.GET_TOPIC_CONFIG: _topic(GET),
    C.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: _cluster(LIST),
    C.VIEW_BROKER_STATS_DATA: _cluster(GET),
    C.GET_BROKER_CONSUME_STATS: _cluster(GET),
    C.GET_ALL_PRODUCER_INFO: _cluster(GET),
    C.CLEAN_EXPIRED_CONSUMEQUEUE: _cluster(UPDATE),
    C.CLEAN_UNUSED_TOPIC: _cluster(UPDATE),
    C.DELETE_EXPIRED_COMMITLOG: _cluster(UPDATE),
    C.UPDATE_NAMESRV_CONFIG: _cluster(UPDATE),
    C.GET_NAMESRV_CONFIG: _cluster(GET),
    # controller (rocket.controller) and broker heartbeats to it
    C.BROKER_HEARTBEAT: _cluster(UPDATE),
    C.CONTROLLER_ALTER_SYNC_STATE_SET: _cluster(UPDATE),
    C.CONTROLLER_ELECT_MASTER: _cluster(UPDATE),
    C.CONTROLLER_REGISTER_BROKER: _cluster(UPDATE),
    C.CONTROLLER_APPLY_BROKER_ID: _cluster(UPDATE),
    C.CONTROLLER_GET_NEXT_BROKER_ID: _cluster(GET),
    C.CONTROLLER_GET_REPLICA_INFO: _cluster(GET),
    C.CONTROLLER_GET_METADATA_INFO: _cluster(GET),
    C.CONTROLLER_GET_SYNC_STATE_DATA: _cluster(GET),
    C.UPDATE_CONTROLLER_CONFIG: _cluster(UPDATE),
    C.GET_CONTROLLER_CONFIG: _cluster(GET),
    C.CLEAN_BROKER_DATA: _cluster(UPDATE),
    # ACL 2.0 administration (CreateUserRequestHeader ... ListAclsRequestHeader)
    C.AUTH_CREATE_USER: _cluster(UPDATE),
    C.AUTH_UPDATE_USER: _cluster(UPDATE),
    C.AUTH_DELETE_USER: _cluster(UPDATE),
    C.AUTH_GET_USER: _cluster(GET),
    C.AUTH_LIST_USER: _cluster(GET),
    C.AUTH_CREATE_ACL: _cluster(UPDATE),
    C.AUTH_UPDATE_ACL: _cluster(UPDATE),
    C.AUTH_DELETE_ACL: _cluster(UPDATE),
    C.AUTH_GET_ACL: _cluster(GET),
    C.AUTH_LIST_ACL: _cluster(GET),
}


#: The codes a standalone controller (``rocket controller``) serves, and their classification:
#: Apache RocketMQ 5.x's ``@RocketMQAction`` of ``BrokerHeartbeatRequestHeader``,
#: ``AlterSyncStateSetRequestHeader``, ``ElectMasterRequestHeader``,
#: ``RegisterBrokerToControllerRequestHeader``, ``ApplyBrokerIdRequestHeader``,
#: ``CleanControllerBrokerDataRequestHeader`` (``Update`` on the cluster) and
#: ``GetReplicaInfoRequestHeader``, ``GetNextBrokerIdRequestHeader`` (``Get``). The codes without
#: such a header in Apache (GET_METADATA_INFO, GET_SYNC_STATE_DATA, GET/UPDATE_CONTROLLER_CONFIG,
#: which Apache lets any authenticated caller send) are ``Get`` / ``Update`` on the cluster here.
#: Every other code is unclassified on a controller (only Super users may send it).
CONTROLLER_CODES: frozenset[int] = frozenset({
    C.BROKER_HEARTBEAT, C.CONTROLLER_ALTER_SYNC_STATE_SET, C.CONTROLLER_ELECT_MASTER,
    C.CONTROLLER_REGISTER_BROKER, C.CONTROLLER_GET_REPLICA_INFO, C.CONTROLLER_GET_METADATA_INFO,
    C.CONTROLLER_GET_SYNC_STATE_DATA, C.UPDATE_CONTROLLER_CONFIG, C.GET_CONTROLLER_CONFIG,
    C.CLEAN_BROKER_DATA, C.CONTROLLER_GET_NEXT_BROKER_ID, C.CONTROLLER_APPLY_BROKER_ID,
})
#: :data:`CLASSIFIERS` restricted to :data:`CONTROLLER_CODES` (a controller's table).
CONTROLLER_CLASSIFIERS: dict[int, Classifier] = {code: CLASSIFIERS[code] for code in CONTROLLER_CODES}


def classify(request: RemotingCommand, cluster: str,
             classifiers: dict[int, Classifier] | None = None) -> list[Check] | None:
    """The checks for ``request`` on a server of cluster ``cluster``; None for an unclassified
    code. ``classifiers``: the server's table (default :data:`CLASSIFIERS`; a controller's is
    :data:`CONTROLLER_CLASSIFIERS`). Raises :class:`ClassifyError` when the resource fields
    cannot be read."""
    classifier = (CLASSIFIERS if classifiers is None else classifiers).get(request.code)
    if classifier is None:
        return None
    return classifier(request, cluster)
