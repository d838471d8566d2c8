"""rocket.store: the broker's storage engine (CommitLog, ConsumeQueue, IndexFile, config stores).

Start with :class:`DefaultMessageStore` (the façade, ``message_store``); formats are
described in the modules ``commitlog``, ``consumequeue``, ``index``, ``checkpoint`` and
``config``, the services in ``reput``, ``flush``, ``retention``, ``recovery`` and
``queue_store``, replication in ``ha`` (RocketMQ names throughout).
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
from rocket.store.config import (
    ConsumerOffsetManager,
    SubscriptionGroupManager,
    TopicConfigManager,
)
from rocket.store.message_store import DefaultMessageStore, StoreStats

__all__ = [
    "AppendedMessage",
    "BrokerRole",
    "ConfigCorruptError",
    "ConsumerOffsetManager",
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
    "SubscriptionGroupManager",
    "TopicConfigManager",
]
