"""Committed consumer offsets (``org.apache.rocketmq.broker.offset.ConsumerOffsetManager``).

``topic@group → {queueId: offset}`` in memory, written to
``config/consumerOffset.json`` atomically (temp file, fsync, rename, the
previous copy kept as ``.bak``) every ``flush_consumer_offset_interval`` and at
shutdown. A corrupt file is set aside and the ``.bak`` used; with no good copy
:class:`~rocket.store.api.ConfigCorruptError` is raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from rocket.broker.metadata.table import set_aside
from rocket.protocol import loads_lenient
from rocket.store.api import ConfigCorruptError
from rocket.store.files import write_file_atomically

log = logging.getLogger("rocket.broker.metadata")


def _as_obj(obj: Mapping[str, Any] | str | bytes) -> Mapping[str, Any]:
    if isinstance(obj, (str, bytes)):
        obj = loads_lenient(obj)
    if not isinstance(obj, Mapping):
        raise ValueError("not a JSON object")
    return obj


class ConsumerOffsetManager:
    """Committed consumer offsets (``ConsumerOffsetManager``), ``topic@group → {queueId: offset}``.

    In memory; :meth:`persist` writes ``config/consumerOffset.json``
    (standard JSON, string queue ids) atomically with a ``.bak``. :attr:`on_change`, when set,
    is called with the ``topic@group`` keys each :meth:`commit` (of a new value),
    :meth:`remove_group` or :meth:`remove_topic` changed (the master records them for its slaves,
    :mod:`rocket.broker.metadata.replication`).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bak = path.with_name(path.name + ".bak")
        self.table: dict[str, dict[int, int]] = {}
        self._version = 0
        self._persisted_version = 0
        self.on_change: Callable[[list[str]], None] | None = None

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store ``offset`` for the group's queue."""
        k = f"{topic}@{group}"
        q = self.table.get(k)
        if q is None:
            q = self.table[k] = {}
        if q.get(queue_id) != offset:
            q[queue_id] = offset
            self._changed([k])

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed offset, or None."""
        q = self.table.get(f"{topic}@{group}")
        return None if q is None else q.get(queue_id)

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        """A copy of the group's offsets on ``topic``."""
        return dict(self.table.get(f"{topic}@{group}", {}))

    def remove_group(self, group: str) -> int:
        """Forget the group on every topic; returns how many topic entries went."""
        return self._remove([k for k in self.table if k.rpartition("@")[2] == group])

    def remove_topic(self, topic: str) -> int:
        """Forget every group's offsets on ``topic``; returns how many group entries went."""
        return self._remove([k for k in self.table if k.rpartition("@")[0] == topic])

    def _remove(self, gone: list[str]) -> int:
        for k in gone:
            del self.table[k]
        if gone:
            self._changed(gone)
        return len(gone)

    def _changed(self, keys: list[str]) -> None:
        self._version += 1
        if self.on_change is not None:
            self.on_change(keys)

    def entry(self, key: str) -> dict[int, int] | None:
        """A copy of the offsets of ``key`` (``topic@group``), None when absent."""
        q = self.table.get(key)
        return None if q is None else dict(q)

    def apply_entries(self, entries: Mapping[str, Mapping[int, int] | None]) -> None:
        """Set whole ``topic@group`` entries (None removes one), as a slave replaying its master's
        changes; :attr:`on_change` is not called."""
        for key, value in entries.items():
            if value is None:
                self.table.pop(key, None)
            else:
                self.table[key] = dict(value)
        if entries:
            self._version += 1

    def to_json(self) -> dict[str, Any]:
        """``{"offsetTable": {"topic@group": {"0": 12}}}`` (standard JSON)."""
        return {"offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in self.table.items()}}

    def replace_all(self, obj: Mapping[str, Any] | str | bytes) -> None:
        """Take over a whole table (a slave copying its master's). Raises ``ValueError``."""
        self.table = self._parse(obj)
        self._version += 1

    @staticmethod
    def _parse(obj: Mapping[str, Any] | str | bytes) -> dict[str, dict[int, int]]:
        o = _as_obj(obj)
        raw = o.get("offsetTable")
        if not isinstance(raw, Mapping):
            raise ValueError('no "offsetTable" object')
        table: dict[str, dict[int, int]] = {}
        for k, v in raw.items():
            if not isinstance(v, Mapping) or "@" not in str(k):
                raise ValueError(f"entry {k!r} is not topic@group -> {{queueId: offset}}")
            table[str(k)] = {int(q): int(off) for q, off in v.items()}
        return table

    @property
    def dirty(self) -> bool:
        """Changed since the last persist."""
        return self._version != self._persisted_version

    def load(self) -> None:
        """Read the file (blocking); falls back to ``.bak``. Raises :class:`ConfigCorruptError`."""
        if not self.path.exists() and not self.bak.exists():
            return
        problems = []
        for candidate in (self.path, self.bak):
            if not candidate.exists():
                continue
            try:
                self.table = self._parse(candidate.read_bytes())
            except (ValueError, TypeError) as exc:
                problems.append(f"{candidate}: corrupt or truncated ({exc})")
                continue
            if problems:
                aside = set_aside(self.path)
                log.error("%s; set aside as %s, using the last good copy %s", problems[0], aside.name, candidate)
            return
        raise ConfigCorruptError("; ".join(problems) or f"{self.path}: unreadable")

    def snapshot(self) -> tuple[int, bytes]:
        """On the loop: ``(version, JSON bytes)`` to hand to :meth:`write`."""
        return self._version, orjson.dumps(self.to_json())

    def write(self, version: int, data: bytes) -> None:
        """Blocking: write a snapshot atomically (keeping ``.bak``) and mark it persisted."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomically(self.path, data, keep_bak=True)
        self._persisted_version = max(self._persisted_version, version)

    def persist(self) -> None:
        """Blocking: write the current table when it changed."""
        if self.dirty or not self.path.exists():
            self.write(*self.snapshot())
