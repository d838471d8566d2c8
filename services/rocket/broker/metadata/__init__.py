"""A broker's metadata: topic configs, subscription groups and consumer offsets.

As RocketMQ's ``broker/topic``, ``broker/subscription`` and ``broker/offset``:

* :class:`TopicConfigManager` (``config/topics.db``) and
  :class:`SubscriptionGroupManager` (``config/subscriptionGroup.db``): tables in
  memory, each change persisted incrementally to SQLite (:mod:`.table`);
* :class:`ConsumerOffsetManager` (``config/consumerOffset.json``);
* :class:`BrokerMetadata`: the three together, loaded, persisted and closed by the broker;
* :mod:`.replication`: a controller-mode master's changes written into its CommitLog for the
  slaves (:class:`~rocket.broker.metadata.replication.MetadataReplicator`).

The wire models they hold (:class:`~rocket.protocol.TopicConfig`,
:class:`~rocket.protocol.SubscriptionGroupConfig`,
:class:`~rocket.protocol.DataVersion`) live in :mod:`rocket.protocol`.
"""

from rocket.broker.metadata.lifecycle import BrokerMetadata
from rocket.broker.metadata.offset import ConsumerOffsetManager
from rocket.broker.metadata.subscription import SubscriptionGroupManager
from rocket.broker.metadata.table import ConfigTable
from rocket.broker.metadata.topic import TopicConfigManager

__all__ = ["BrokerMetadata", "ConfigTable", "ConsumerOffsetManager", "SubscriptionGroupManager", "TopicConfigManager"]
