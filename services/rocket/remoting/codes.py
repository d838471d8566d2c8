"""Request codes, response codes, language codes and flag bits of the RocketMQ 4.x
remoting protocol.

Source of every number: Apache RocketMQ 4.9.8 ``RequestCode``, ``ResponseCode``,
``RemotingSysResponseCode`` and ``LanguageCode`` (restated in
``shared/reference/rocketmq-protocol.md`` A1-A5).
"""

from __future__ import annotations

from enum import IntEnum


class RequestCode(IntEnum):
    """Codes of requests a peer may send (``RequestCode.java``)."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_TOPIC_CONFIG_LIST = 22
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_TOPICS_BY_CLUSTER = 224
    GET_CONSUMER_RUNNING_INFO = 307
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    #: RocketMQ 5.x lite pull consumers; same header and answer as PULL_MESSAGE.
    LITE_PULL_MESSAGE = 361
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327
    #: RocketMQ 5 numbers; RocketCluster bodies (``rocket.broker.ha``): HA status JSON,
    #: the epoch list, and a promotion request (ext ``role``, ``brokerRole``, ``force``).
    GET_BROKER_HA_STATUS = 907
    GET_BROKER_EPOCH_CACHE = 1007
    NOTIFY_BROKER_ROLE_CHANGED = 1008


class ResponseCode(IntEnum):
    """Codes of responses (``RemotingSysResponseCode`` 0-4 plus ``ResponseCode``)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    #: RocketMQ 5: a header field of the right type outside its allowed range.
    INVALID_PARAMETER = 29
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    FLOW_CONTROL = 215


class LanguageCode(IntEnum):
    """Sender language; JSON headers carry the name, binary headers the number."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12


class SerializeType(IntEnum):
    """Header serialization, the top byte of the header-length field."""

    JSON = 0
    ROCKETMQ = 1


#: ``flag`` bit 0: the command is a response.
FLAG_RESPONSE = 1
#: ``flag`` bit 1: a oneway request, never answered.
FLAG_ONEWAY = 2

#: Ordinal of ``MQVersion.Version.V4_9_8`` in the Java enum; what we announce.
VERSION_V4_9_8 = 409
#: Ordinal of ``V4_9_4``: from it on, Java NameServers write standard JSON routes.
VERSION_V4_9_4 = 401

#: Permission bits of topic configs and routes (``PermName.java``).
PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
