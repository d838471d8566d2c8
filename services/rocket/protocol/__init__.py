"""Wire models of the RocketMQ protocol, each defined once: codes, JSON bodies, topic configs, routes.

The bottom layer of the ``rocket`` package (RocketMQ keeps the same things in
``remoting/protocol`` and ``common``): it imports nothing else from ``rocket``,
and the remoting layer, the NameServer, the broker, the client and the
operator all use it.

* :mod:`~rocket.protocol.codes` request, response and language codes, flag and permission bits;
* :mod:`~rocket.protocol.body` lenient JSON parsing, :class:`BodyError`, small bodies (TopicList, KVTable);
* :mod:`~rocket.protocol.topic` :class:`DataVersion`, :class:`TopicConfig`, :class:`TopicConfigSerializeWrapper`;
* :mod:`~rocket.protocol.subscription` :class:`SubscriptionGroupConfig`;
* :mod:`~rocket.protocol.route` :class:`MessageQueue`, :class:`QueueData`, :class:`BrokerData`,
  :class:`TopicRouteData`, :class:`ClusterInfo`;
* :mod:`~rocket.protocol.register` :class:`RegisterBrokerBody`;
* :mod:`~rocket.protocol.controller` the controller's bodies (``SyncStateSet``, ``BrokerMemberGroup``,
  ``ElectMasterResponseBody``).
"""

from rocket.protocol.body import (
    BodyError,
    crc32_masked,
    dumps,
    kv_table_body,
    loads_lenient,
    parse_kv_table,
    parse_topic_list,
    topic_list_body,
)
from rocket.protocol.codes import (
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    LanguageCode,
    RequestCode,
    ResponseCode,
)
from rocket.protocol.register import RegisterBrokerBody
from rocket.protocol.route import MASTER_ID, BrokerData, ClusterInfo, MessageQueue, QueueData, TopicRouteData
from rocket.protocol.subscription import SubscriptionGroupConfig
from rocket.protocol.topic import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    DataVersion,
    TopicConfig,
    TopicConfigSerializeWrapper,
    dlq_topic,
    retry_topic,
)

__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC",
    "DLQ_GROUP_TOPIC_PREFIX",
    "MASTER_ID",
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "RETRY_GROUP_TOPIC_PREFIX",
    "BodyError",
    "BrokerData",
    "ClusterInfo",
    "DataVersion",
    "LanguageCode",
    "MessageQueue",
    "QueueData",
    "RegisterBrokerBody",
    "RequestCode",
    "ResponseCode",
    "SubscriptionGroupConfig",
    "TopicConfig",
    "TopicConfigSerializeWrapper",
    "TopicRouteData",
    "crc32_masked",
    "dlq_topic",
    "dumps",
    "kv_table_body",
    "loads_lenient",
    "parse_kv_table",
    "parse_topic_list",
    "retry_topic",
    "topic_list_body",
]
