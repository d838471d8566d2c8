"""The broker's metadata as one unit: the three managers, loaded, persisted and closed together.

``<storePathRootDir>/config/`` holds ``topics.db``, ``subscriptionGroup.db`` (SQLite,
:mod:`.table`) and ``consumerOffset.json`` (:mod:`.offset`). The broker
(``BrokerController``) loads them once its store has started (RocketMQ's
``BrokerController.initialize`` loads its config managers beside the message
store), writes the consumer offsets every ``flushConsumerOffsetInterval`` and at
shutdown, and closes the tables after the store.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rocket.broker.metadata.offset import ConsumerOffsetManager
from rocket.broker.metadata.subscription import SubscriptionGroupManager
from rocket.broker.metadata.topic import TopicConfigManager

log = logging.getLogger("rocket.broker.metadata")


class BrokerMetadata:
    """Topic configs, subscription groups and consumer offsets of one broker, in ``config_dir``.

    Blocking file work runs on one IO thread of its own. Raises
    :class:`~rocket.store.api.ConfigCorruptError` from :meth:`load` when a file
    and its last good copy are both unreadable.
    """

    def __init__(self, config_dir: Path) -> None:
        self.config_dir = config_dir
        self.topic_configs = TopicConfigManager(config_dir / "topics.db")
        self.subscription_groups = SubscriptionGroupManager(config_dir / "subscriptionGroup.db")
        self.consumer_offsets = ConsumerOffsetManager(config_dir / "consumerOffset.json")
        self._io = ThreadPoolExecutor(1, thread_name_prefix="rocket-metadata-io")
        self._loaded = False

    def _tables(self) -> tuple[TopicConfigManager, SubscriptionGroupManager]:
        return self.topic_configs, self.subscription_groups

    def _load_blocking(self) -> None:
        for manager in self._tables():
            manager.load()
        self.consumer_offsets.load()
        for manager in self._tables():
            table = manager.store
            try:
                table.backup()  # the last good copy, for a corrupt file next time
            except (OSError, sqlite3.Error) as exc:
                log.error("cannot back up %s to %s: %s", table.path, table.bak, exc)

    async def load(self) -> None:
        """Read every table (and back up the good SQLite files). Raises ``ConfigCorruptError``."""
        await asyncio.get_running_loop().run_in_executor(self._io, self._load_blocking)
        self._loaded = True

    async def persist_consumer_offsets(self) -> None:
        """Write ``consumerOffset.json`` now if it changed (an OSError is logged, not raised)."""
        co = self.consumer_offsets
        if not co.dirty and co.path.exists():
            return
        version, data = co.snapshot()
        try:
            await asyncio.get_running_loop().run_in_executor(self._io, co.write, version, data)
        except OSError as exc:
            log.error("cannot persist %s: %s", co.path, exc)

    async def run_offset_persist(self, interval: float) -> None:
        """Persist the consumer offsets every ``interval`` seconds, until cancelled."""
        while True:
            await asyncio.sleep(interval)
            await self.persist_consumer_offsets()

    def _close_blocking(self, backup: bool) -> None:
        for manager in self._tables():
            table = manager.store
            try:
                if backup:
                    table.backup()
                table.close()
            except Exception as exc:
                log.error("closing %s: %s", table.path, exc)

    async def close(self, *, backup: bool) -> None:
        """Persist the offsets, then flush and close the tables (``backup``: refresh the ``.bak`` copies)."""
        if self._loaded:
            await self.persist_consumer_offsets()
        await asyncio.get_running_loop().run_in_executor(self._io, self._close_blocking, backup and self._loaded)
        self._loaded = False
        self._io.shutdown(wait=False)
