"""Subscription-group configs (``org.apache.rocketmq.common.subscription.SubscriptionGroupConfig``).

The body entries of GET_ALL_SUBSCRIPTIONGROUP_CONFIG and
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, and the rows of a broker's
``subscriptionGroup`` table. Parsers raise :class:`~rocket.protocol.body.BodyError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rocket.protocol.body import BodyError, as_bool, as_int, json_object


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """One consumer group's config on a broker (``SubscriptionGroupConfig``), Java's defaults.

    ``retry_queue_nums`` queues of ``%RETRY%<group>``, at most
    ``retry_max_times`` redeliveries before the dead-letter topic;
    ``broker_id``/``which_broker_when_consume_slowly`` tell a consumer which
    broker of the group to pull from.
    """

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def to_json(self) -> dict[str, Any]:
        """Java field names."""
        return {
            "groupName": self.group_name,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "retryQueueNums": self.retry_queue_nums,
            "retryMaxTimes": self.retry_max_times,
            "brokerId": self.broker_id,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
        }

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any]) -> SubscriptionGroupConfig:
        """Parse Java JSON (numbers and bools may arrive as strings).

        Raises :class:`BodyError` without a ``groupName`` or for a number that does not parse.
        """
        o = json_object(data, "SubscriptionGroupConfig")
        name = o.get("groupName")
        if not name or not isinstance(name, str):
            raise BodyError("SubscriptionGroupConfig has no groupName")
        return cls(
            group_name=name,
            consume_enable=as_bool(o.get("consumeEnable", True)),
            consume_from_min_enable=as_bool(o.get("consumeFromMinEnable", True)),
            consume_broadcast_enable=as_bool(o.get("consumeBroadcastEnable", True)),
            retry_queue_nums=as_int(o.get("retryQueueNums"), "retryQueueNums", 1),
            retry_max_times=as_int(o.get("retryMaxTimes"), "retryMaxTimes", 16),
            broker_id=as_int(o.get("brokerId"), "brokerId", 0),
            which_broker_when_consume_slowly=as_int(o.get("whichBrokerWhenConsumeSlowly"),
                                                    "whichBrokerWhenConsumeSlowly", 1),
            notify_consumer_ids_changed_enable=as_bool(o.get("notifyConsumerIdsChangedEnable", True)),
        )
