"""Who is connected: consumer groups (:class:`ConsumerManager`) and producer
groups (:class:`ProducerManager`), keyed by the client's connection.

Clients announce themselves with HEART_BEAT every 30 s; an entry not renewed
for ``channelExpiredTimeout`` (120 s) is dropped, and every entry of a
connection is dropped as soon as that connection closes (``ClientHousekeepingService``).
When the members of a consumer group change, the group's remaining members are
told with NOTIFY_CONSUMER_IDS_CHANGED (40) through the ``on_ids_changed``
callback, so that they rebalance at once (RocketMQ 4.9.8 ``ConsumerManager``,
``DefaultConsumerIdsChangeListener``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rocket.broker.filter import SubscriptionData
from rocket.remoting import RemotingConnection

log = logging.getLogger("rocket.broker")


@dataclass(slots=True)
class ClientChannelInfo:
    """A client connection as seen by heartbeats. ``last_update`` is ``time.monotonic()`` seconds."""

    connection: RemotingConnection
    client_id: str
    language: str = "JAVA"
    version: int = 0
    last_update: float = field(default_factory=time.monotonic)

    @property
    def client_addr(self) -> str:
        """The peer address ``ip:port`` of the connection."""
        return self.connection.peer


@dataclass(slots=True)
class ConsumerGroupInfo:
    """The live members of one consumer group and what they subscribe to."""

    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[RemotingConnection, ClientChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    last_update: float = field(default_factory=time.monotonic)

    def client_ids(self) -> list[str]:
        """Member client ids, sorted (as clients sort them before allocating queues)."""
        return sorted({c.client_id for c in self.channels.values()})

    def connections(self) -> list[RemotingConnection]:
        """Member connections."""
        return list(self.channels)

    def update_channel(self, info: ClientChannelInfo) -> bool:
        """Add or refresh a member; True when it is new (or changed its client id)."""
        old = self.channels.get(info.connection)
        self.channels[info.connection] = info
        self.last_update = time.monotonic()
        return old is None or old.client_id != info.client_id

    def update_subscriptions(self, subs: list[SubscriptionData]) -> bool:
        """Merge the subscriptions of a heartbeat; True when topics were added or removed.

        A newer ``subVersion`` replaces the old entry without counting as a change
        (as Java's ``ConsumerGroupInfo.updateSubscription``).
        """
        changed = False
        topics = set()
        for sub in subs:
            topics.add(sub.topic)
            old = self.subscriptions.get(sub.topic)
            if old is None:
                self.subscriptions[sub.topic] = sub
                changed = True
            elif sub.sub_version > old.sub_version:
                self.subscriptions[sub.topic] = sub
        for topic in list(self.subscriptions):
            if topic not in topics:
                del self.subscriptions[topic]
                changed = True
        return changed


#: ``on_ids_changed(group, remaining member connections)``.
IdsChangedCallback = Callable[[str, list[RemotingConnection]], None]


class ConsumerManager:
    """Consumer groups by name: members, subscriptions, expiry, change notification."""

    def __init__(
        self, on_ids_changed: IdsChangedCallback | None = None, channel_expired_timeout: float = 120.0
    ) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self.on_ids_changed = on_ids_changed
        #: Seconds without a heartbeat after which a member is dropped.
        self.channel_expired_timeout = channel_expired_timeout

    def _notify(self, group: str, info: ConsumerGroupInfo | None) -> None:
        if self.on_ids_changed is None:
            return
        try:
            self.on_ids_changed(group, info.connections() if info else [])
        except Exception:
            log.exception("notifying consumer group %s failed", group)

    def register_consumer(
        self,
        group: str,
        channel: ClientChannelInfo,
        consume_type: str,
        message_model: str,
        consume_from_where: str,
        subscriptions: list[SubscriptionData],
        *,
        notify: bool = True,
    ) -> bool:
        """Record a heartbeat of ``channel`` for ``group``.

        Returns True when membership or the subscribed topics changed; then,
        when ``notify``, every member (the new one included) is notified.
        """
        info = self.groups.get(group)
        if info is None:
            info = self.groups[group] = ConsumerGroupInfo(group_name=group)
        info.consume_type = consume_type
        info.message_model = message_model
        info.consume_from_where = consume_from_where
        added = info.update_channel(channel)
        subs_changed = info.update_subscriptions(subscriptions)
        if added:
            log.info("consumer %s (%s) joined group %s", channel.client_id, channel.client_addr, group)
        if (added or subs_changed) and notify:
            self._notify(group, info)
        return added or subs_changed

    def unregister_consumer(self, group: str, connection: RemotingConnection, *, notify: bool = True) -> bool:
        """Remove ``connection`` from ``group``; True when it was a member."""
        info = self.groups.get(group)
        if info is None or info.channels.pop(connection, None) is None:
            return False
        if not info.channels:
            del self.groups[group]
        if notify:
            self._notify(group, self.groups.get(group))
        return True

    def channel_closed(self, connection: RemotingConnection) -> list[str]:
        """Drop ``connection`` from every group (at once, on close); returns the groups it left."""
        left: list[str] = []
        for group, info in list(self.groups.items()):
            if info.channels.pop(connection, None) is not None:
                left.append(group)
                if not info.channels:
                    del self.groups[group]
                self._notify(group, self.groups.get(group))
        return left

    def scan_not_active(self, now: float | None = None) -> list[tuple[str, ClientChannelInfo]]:
        """Drop members not heard from for ``channel_expired_timeout`` seconds.

        Returns the dropped ``(group, channel)`` pairs; remaining members are notified.
        """
        now = time.monotonic() if now is None else now
        dropped: list[tuple[str, ClientChannelInfo]] = []
        for group, info in list(self.groups.items()):
            changed = False
            for conn, channel in list(info.channels.items()):
                if now - channel.last_update > self.channel_expired_timeout:
                    del info.channels[conn]
                    dropped.append((group, channel))
                    changed = True
                    log.warning("consumer %s of group %s expired (no heartbeat)", channel.client_id, group)
            if changed:
                if not info.channels:
                    del self.groups[group]
                self._notify(group, self.groups.get(group))
        return dropped

    def get(self, group: str) -> ConsumerGroupInfo | None:
        """The live group ``group``, if it has members."""
        return self.groups.get(group)

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """What ``group`` subscribes to on ``topic`` according to its heartbeats."""
        info = self.groups.get(group)
        return info.subscriptions.get(topic) if info else None

    def groups_of_topic(self, topic: str) -> list[str]:
        """Live groups subscribing to ``topic``."""
        return [g for g, info in self.groups.items() if topic in info.subscriptions]


class ProducerManager:
    """Producer groups by name: member connections and their last heartbeat."""

    def __init__(self, channel_expired_timeout: float = 120.0) -> None:
        self.groups: dict[str, dict[RemotingConnection, ClientChannelInfo]] = {}
        self.channel_expired_timeout = channel_expired_timeout

    def register_producer(self, group: str, channel: ClientChannelInfo) -> None:
        """Record a heartbeat of ``channel`` for ``group``."""
        self.groups.setdefault(group, {})[channel.connection] = channel

    def unregister_producer(self, group: str, connection: RemotingConnection) -> None:
        """Remove ``connection`` from ``group``."""
        members = self.groups.get(group)
        if members is not None:
            members.pop(connection, None)
            if not members:
                del self.groups[group]

    def channel_closed(self, connection: RemotingConnection) -> None:
        """Drop ``connection`` from every group."""
        for group in list(self.groups):
            self.unregister_producer(group, connection)

    def scan_not_active(self, now: float | None = None) -> list[tuple[str, ClientChannelInfo]]:
        """Drop members silent for ``channel_expired_timeout`` seconds; returns them."""
        now = time.monotonic() if now is None else now
        dropped: list[tuple[str, ClientChannelInfo]] = []
        for group, members in list(self.groups.items()):
            for conn, channel in list(members.items()):
                if now - channel.last_update > self.channel_expired_timeout:
                    dropped.append((group, channel))
                    self.unregister_producer(group, conn)
        return dropped
