"""Which brokers are alive, as this controller sees them (RocketMQ ``DefaultBrokerHeartbeatManager``).

Controller-mode brokers send BROKER_HEARTBEAT (904, oneway) to *every* controller, so every
controller keeps its own table and a newly elected controller leader already knows who is
alive. The table is local (not replicated). A broker is alive while its last heartbeat is
younger than the ``heartbeatTimeoutMills`` it sent (RocketMQ's broker setting
``controllerHeartBeatTimeoutMills``, default 10 000 ms; the controller's default when a broker
sends none is ``DEFAULT_BROKER_CHANNEL_EXPIRED_TIME``, also 10 s). A broker leaves the table when
that time passes (:meth:`BrokerHeartbeatManager.scan_not_active`) or at once when the connection
it sent its heartbeats on closes (:meth:`BrokerHeartbeatManager.on_channel_closed`); both report
it to the listeners, which trigger a master election when it was a master.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rocket.controller.state import BrokerLiveInfo

log = logging.getLogger("rocket.controller")

#: ``BrokerHeartbeatManager.DEFAULT_BROKER_CHANNEL_EXPIRED_TIME``: 10 s.
DEFAULT_BROKER_CHANNEL_EXPIRED_TIME_MS = 10_000
#: At most this many brokers are tracked (memory stays bounded; more is refused and logged).
MAX_TRACKED_BROKERS = 100_000

#: ``(clusterName, brokerName, brokerId)``.
BrokerKey = tuple[str, str, int]
#: Called with ``(clusterName, brokerName, brokerId)`` when a broker becomes inactive.
InactiveListener = Callable[[str, str, int], None]


@dataclass(slots=True)
class _Live:
    address: str
    last_update: float  # time.monotonic() seconds
    timeout_ms: int
    channel: Any
    epoch: int
    max_offset: int
    confirm_offset: int
    election_priority: int


class BrokerHeartbeatManager:
    """The live-broker table. ``clock`` returns seconds (monotonic); injectable for tests."""

    def __init__(self, *, default_timeout_ms: int = DEFAULT_BROKER_CHANNEL_EXPIRED_TIME_MS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.default_timeout_ms = default_timeout_ms
        self._clock = clock
        self._table: dict[BrokerKey, _Live] = {}
        self.listeners: list[InactiveListener] = []

    def on_heartbeat(self, cluster: str, broker_name: str, address: str, broker_id: int, *,
                     timeout_ms: int | None = None, channel: Any = None, epoch: int | None = None,
                     max_offset: int | None = None, confirm_offset: int | None = None,
                     election_priority: int | None = None) -> None:
        """Record a heartbeat. Epoch and offsets only move forward (a late heartbeat carrying
        older figures does not roll them back), as in RocketMQ."""
        key = (cluster, broker_name, broker_id)
        now = self._clock()
        real_epoch = -1 if epoch is None else epoch
        real_max = -1 if max_offset is None else max_offset
        real_confirm = -1 if confirm_offset is None else confirm_offset
        real_timeout = self.default_timeout_ms if timeout_ms is None or timeout_ms <= 0 else timeout_ms
        real_priority = 2**31 - 1 if election_priority is None else election_priority
        prev = self._table.get(key)
        if prev is None:
            if len(self._table) >= MAX_TRACKED_BROKERS:
                log.warning("heartbeat from %s/%s/%d refused: %d brokers tracked already",
                            cluster, broker_name, broker_id, len(self._table))
                return
            self._table[key] = _Live(address, now, real_timeout, channel, real_epoch, real_max, real_confirm,
                                     real_priority)
            log.info("broker %s (%s, id %d) is alive at %s", broker_name, cluster, broker_id, address)
            return
        prev.last_update = now
        prev.timeout_ms = real_timeout
        prev.election_priority = real_priority
        prev.address = address
        if channel is not None:
            prev.channel = channel
        if real_epoch > prev.epoch or (real_epoch == prev.epoch and real_max > prev.max_offset):
            prev.epoch, prev.max_offset, prev.confirm_offset = real_epoch, real_max, real_confirm

    def is_active(self, cluster: str, broker_name: str, broker_id: int) -> bool:
        """True while the broker's last heartbeat is younger than its timeout."""
        live = self._table.get((cluster, broker_name, broker_id))
        return live is not None and self._clock() - live.last_update <= live.timeout_ms / 1000.0

    def live_info(self, cluster: str, broker_name: str, broker_id: int) -> BrokerLiveInfo | None:
        """The elect policy's view of a broker (None when it never sent a heartbeat)."""
        live = self._table.get((cluster, broker_name, broker_id))
        if live is None:
            return None
        return BrokerLiveInfo(broker_id, live.epoch, live.max_offset, live.election_priority)

    def address(self, cluster: str, broker_name: str, broker_id: int) -> str | None:
        """The address the broker's heartbeats carry."""
        live = self._table.get((cluster, broker_name, broker_id))
        return live.address if live else None

    def scan_not_active(self) -> list[BrokerKey]:
        """Drop brokers whose heartbeats stopped and tell the listeners; returns them.

        Unlike RocketMQ, the broker's connection is left open: inside a NameServer it is also the
        broker's registration connection, whose close removes its routes at once. A heartbeat
        arriving later on it makes the broker alive again."""
        now = self._clock()
        expired = [k for k, v in self._table.items() if now - v.last_update > v.timeout_ms / 1000.0]
        for key in expired:
            live = self._table.pop(key)
            log.warning("broker %s (%s, id %d) at %s: no heartbeat for %d ms", key[1], key[0], key[2],
                        live.address, live.timeout_ms)
            self._notify(key)
        return expired

    def on_channel_closed(self, channel: Any) -> list[BrokerKey]:
        """The connection ``channel`` closed: every broker that sent heartbeats on it is inactive."""
        gone = [k for k, v in self._table.items() if v.channel is channel]
        for key in gone:
            live = self._table.pop(key)
            log.warning("broker %s (%s, id %d) at %s: connection closed", key[1], key[0], key[2], live.address)
            self._notify(key)
        return gone

    def _notify(self, key: BrokerKey) -> None:
        for listener in self.listeners:
            try:
                listener(*key)
            except Exception:
                log.exception("broker-inactive listener failed for %s", key)

    def active_brokers(self) -> list[BrokerKey]:
        """Every broker alive now."""
        return [k for k in self._table if self.is_active(*k)]
