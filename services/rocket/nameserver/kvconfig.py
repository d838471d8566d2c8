"""The NameServer's KV config store (``KVConfigManager`` in RocketMQ 4.9.8).

Namespaced string key/value pairs set by admin tools with PUT/GET/DELETE_KV_CONFIG
(100/101/102, RocketMQ's ``KVConfigManager``). The namespace
``ORDER_TOPIC_CONFIG`` holds per-topic order configs that REGISTER_BROKER
returns to brokers and route lookups may carry.

Kept in memory; with ``path`` set, the whole table is rewritten as JSON
``{"configTable": {namespace: {key: value}}}`` (Java's kvConfig.json shape)
after each change and loaded at construction.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import orjson

log = logging.getLogger("rocket.nameserver")

#: KV namespace holding per-topic order configs (``NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG``).
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    """Namespace -> key -> value, all strings.

    ``on_change(namespace, key)`` is called after each put/delete (the
    NameServer uses it to drop cached routes of order topics).
    Raises ``OSError`` from persistence and ``ValueError`` for a corrupt file.
    """

    def __init__(
        self,
        path: Path | None = None,
        on_change: Callable[[str, str], None] | None = None,
    ) -> None:
        self.path = path
        self.on_change = on_change
        self.config_table: dict[str, dict[str, str]] = {}
        if path is not None and path.exists():
            self._load(path)

    def _load(self, path: Path) -> None:
        obj = orjson.loads(path.read_bytes())
        table = obj.get("configTable", {}) if isinstance(obj, dict) else {}
        if not isinstance(table, dict):
            raise ValueError(f"{path}: configTable is not an object")
        for namespace, entries in table.items():
            if isinstance(entries, dict):
                self.config_table[str(namespace)] = {str(k): str(v) for k, v in entries.items()}

    def _persist(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(orjson.dumps({"configTable": self.config_table}))
        os.replace(tmp, self.path)

    def put(self, namespace: str, key: str, value: str) -> None:
        """Set ``namespace/key`` to ``value``."""
        self.config_table.setdefault(namespace, {})[key] = value
        self._persist()
        if self.on_change is not None:
            self.on_change(namespace, key)

    def get(self, namespace: str, key: str) -> str | None:
        """The value of ``namespace/key``, or None."""
        entries = self.config_table.get(namespace)
        return entries.get(key) if entries is not None else None

    def delete(self, namespace: str, key: str) -> None:
        """Remove ``namespace/key`` (no error when absent); an emptied namespace goes too."""
        entries = self.config_table.get(namespace)
        if entries is None or key not in entries:
            return
        del entries[key]
        if not entries:
            del self.config_table[namespace]
        self._persist()
        if self.on_change is not None:
            self.on_change(namespace, key)

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """A copy of every pair in ``namespace``, or None when it is empty."""
        entries = self.config_table.get(namespace)
        return dict(entries) if entries else None
