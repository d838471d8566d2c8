"""rocket.store: the broker's storage engine (CommitLog, ConsumeQueue, IndexFile).

Start with :class:`DefaultMessageStore` (the façade, ``message_store``); formats are
described in the modules ``commitlog``, ``consumequeue``, ``index`` and ``checkpoint``,
the services in ``reput``, ``flush``, ``retention``, ``recovery`` and
``queue_store``, replication in ``ha`` (RocketMQ names throughout). The broker's topic,
subscription-group and consumer-offset tables are :mod:`rocket.broker.metadata`.
"""

from rocket.store.api import (
    AppendedMessage,
    BrokerRole,
    ConfigCorruptError,
    FlushDiskType,
    GetMessageResult,
    GetMessageStatus,
    MessageStoreConfig,
    PutMessageRequest,
    PutMessageResult,
    PutMessageStatus,
    StoreError,
)
from rocket.store.message_store import DefaultMessageStore, StoreStats

__all__ = [
    "AppendedMessage",
    "BrokerRole",
    "ConfigCorruptError",
    "DefaultMessageStore",
    "FlushDiskType",
    "GetMessageResult",
    "GetMessageStatus",
    "MessageStoreConfig",
    "PutMessageRequest",
    "PutMessageResult",
    "PutMessageStatus",
    "StoreError",
    "StoreStats",
]
