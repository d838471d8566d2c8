"""Topic configs of a broker (``org.apache.rocketmq.broker.topic.TopicConfigManager``), file ``config/topics.db``."""

from __future__ import annotations

from rocket.broker.metadata.table import ConfigManager
from rocket.protocol import TopicConfig


class TopicConfigManager(ConfigManager[TopicConfig]):
    """Topic configs (``TopicConfigManager``); file ``config/topics.db``."""

    _kind = TopicConfig
    _wrapper_key = "topicConfigTable"

    @staticmethod
    def _name(cfg: TopicConfig) -> str:
        return cfg.topic_name
