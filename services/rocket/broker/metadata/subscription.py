"""Subscription-group configs of a broker (``org.apache.rocketmq.broker.subscription.SubscriptionGroupManager``),
file ``config/subscriptionGroup.db``."""

from __future__ import annotations

from rocket.broker.metadata.table import ConfigManager
from rocket.protocol import SubscriptionGroupConfig


class SubscriptionGroupManager(ConfigManager[SubscriptionGroupConfig]):
    """Subscription group configs (``SubscriptionGroupManager``); file ``config/subscriptionGroup.db``."""

    _kind = SubscriptionGroupConfig
    _wrapper_key = "subscriptionGroupTable"

    @staticmethod
    def _name(cfg: SubscriptionGroupConfig) -> str:
        return cfg.group_name
