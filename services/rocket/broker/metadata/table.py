"""Durable config tables of a broker: SQLite (WAL) rows written from a dedicated thread.

* :class:`ConfigTable`: a ``name → JSON object`` table plus a DataVersion in one
  SQLite file, changed incrementally: one row per topic/group, a batch of
  changes per transaction. Callers never block on the disk;
  :meth:`ConfigTable.flush` (or ``await wait_persisted()``) waits for durability.
* :class:`ConfigManager`: an in-memory table of configs plus its
  :class:`~rocket.protocol.DataVersion`, persisted through a ConfigTable (the
  base of :class:`~rocket.broker.metadata.topic.TopicConfigManager` and
  :class:`~rocket.broker.metadata.subscription.SubscriptionGroupManager`).

Every file is checked at start-up; a corrupt or truncated one is logged
(which file, what is wrong), set aside as ``<name>.corrupt-<ms>``, and the
last good copy (``.bak``) is used. With no good copy at all
:class:`~rocket.store.api.ConfigCorruptError` is raised, rather than silently
starting empty. JSON shapes are RocketMQ 4.9.8's (fastjson field names).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson

from rocket.protocol import DataVersion, SubscriptionGroupConfig, TopicConfig
from rocket.store.api import ConfigCorruptError, StoreError

log = logging.getLogger("rocket.broker.metadata")


def now_ms() -> int:
    """Wall-clock milliseconds."""
    return int(time.time() * 1000)


# -- SQLite-backed tables ---------------------------------------------------------------------

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS config (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
_DELETE = object()


def set_aside(path: Path) -> Path:
    """Rename a corrupt ``path`` (and its SQLite ``-wal``/``-shm`` files) to ``<name>.corrupt-<ms>``;
    returns the new path."""
    aside = path.with_name(f"{path.name}.corrupt-{now_ms()}")
    os.replace(path, aside)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.replace(side, aside.with_name(aside.name + suffix))
    return aside


class ConfigTable:
    """A durable ``name → JSON object`` table plus a DataVersion, in one SQLite file (WAL).

    Changes are queued by the caller's thread and written by a dedicated
    writer thread, coalesced: many changes, one transaction. Blocking
    methods (:meth:`load`, :meth:`flush`, :meth:`backup`, :meth:`close`)
    belong in a thread.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bak = path.with_name(path.name + ".bak")
        self._conn: sqlite3.Connection | None = None
        # Re-entrant: _kick_locked registers _done while holding it, and a write that has already
        # finished runs _done at once, in this thread (a plain Lock deadlocked there).
        self._lock = threading.RLock()
        self._pending: dict[str, Any] = {}
        self._pending_version: dict[str, int] | None = None
        self._inflight: Future[None] | None = None
        self._last: Future[None] | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"rocket-config-{path.stem}")
        self.write_errors = 0

    # -- load -----------------------------------------------------------------------------------------

    def _open(self, path: Path) -> tuple[sqlite3.Connection, dict[str, Any], dict[str, int] | None]:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            for stmt in _SCHEMA:
                conn.execute(stmt)
            check = conn.execute("PRAGMA quick_check").fetchone()
            if not check or check[0] != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {check[0] if check else 'no answer'}")
            rows: dict[str, Any] = {}
            for name, value in conn.execute("SELECT name, value FROM config"):
                try:
                    rows[name] = orjson.loads(value)
                except orjson.JSONDecodeError as exc:
                    raise sqlite3.DatabaseError(f"row {name!r} is not JSON: {exc}") from None
            version = None
            row = conn.execute("SELECT value FROM meta WHERE name = 'dataVersion'").fetchone()
            if row:
                try:
                    version = dict(orjson.loads(row[0]))
                except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
                    raise sqlite3.DatabaseError(f"dataVersion is not JSON: {exc}") from None
            return conn, rows, version
        except BaseException:
            conn.close()
            raise

    def load(self) -> tuple[dict[str, Any], dict[str, int] | None]:
        """Open (creating when missing) and read every row; falls back to ``.bak`` when corrupt.

        Raises :class:`ConfigCorruptError` when neither copy is usable.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn, rows, version = self._open(self.path)
        except sqlite3.DatabaseError as exc:
            problem = f"{self.path}: corrupt or truncated ({exc})"
            if not self.bak.exists():
                raise ConfigCorruptError(f"{problem}, and there is no last good copy {self.bak}") from None
            aside = set_aside(self.path)
            log.error("%s; set aside as %s, using the last good copy %s", problem, aside.name, self.bak)
            shutil.copyfile(self.bak, self.path)
            try:
                conn, rows, version = self._open(self.path)
            except sqlite3.DatabaseError as exc2:
                raise ConfigCorruptError(f"{problem}, and the last good copy {self.bak} is corrupt too ({exc2})"
                                         ) from None
        self._conn = conn
        return rows, version

    def backup(self) -> None:
        """Copy the (good) database to ``.bak`` via SQLite's online backup (blocking).

        Runs on the writer thread, so it never overlaps a write.
        """
        self.flush()
        self._executor.submit(self._backup).result()

    def _backup(self) -> None:
        conn = self._conn
        if conn is None:
            return
        tmp = self.bak.with_name(self.bak.name + ".tmp")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        dst = sqlite3.connect(tmp)
        try:
            conn.backup(dst)
        finally:
            dst.close()
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.bak)

    # -- writes -------------------------------------------------------------------------------------------

    def stage(self, name: str, value: Any, version: Mapping[str, int]) -> None:
        """Queue an upsert (``value`` a JSON-able object) or a delete (``value`` = ``DELETE``)."""
        with self._lock:
            self._pending[name] = value
            self._pending_version = dict(version)
            self._kick_locked()

    def stage_many(self, items: Iterable[tuple[str, Any]], version: Mapping[str, int]) -> None:
        """Queue several changes; they land in one transaction."""
        with self._lock:
            for name, value in items:
                self._pending[name] = value
            self._pending_version = dict(version)
            self._kick_locked()

    def _kick_locked(self) -> None:
        if self._inflight is not None or not (self._pending or self._pending_version):
            return
        batch, version = self._pending, self._pending_version
        self._pending, self._pending_version = {}, None
        fut = self._executor.submit(self._write, batch, version)
        self._inflight = self._last = fut
        fut.add_done_callback(self._done)

    def _done(self, fut: Future[None]) -> None:
        with self._lock:
            self._inflight = None
            self._kick_locked()

    def _write(self, batch: dict[str, Any], version: dict[str, int] | None) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            conn.execute("BEGIN")
            try:
                ups = [(k, orjson.dumps(v).decode()) for k, v in batch.items() if v is not _DELETE]
                dels = [(k,) for k, v in batch.items() if v is _DELETE]
                if ups:
                    conn.executemany(
                        "INSERT INTO config(name, value) VALUES(?, ?) "
                        "ON CONFLICT(name) DO UPDATE SET value = excluded.value", ups)
                if dels:
                    conn.executemany("DELETE FROM config WHERE name = ?", dels)
                if version is not None:
                    conn.execute(
                        "INSERT INTO meta(name, value) VALUES('dataVersion', ?) "
                        "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                        (orjson.dumps(version).decode(),))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            self.write_errors += 1
            log.error("%s: cannot persist %d change(s): %s; will retry", self.path, len(batch), exc)
            with self._lock:
                for k, v in batch.items():
                    self._pending.setdefault(k, v)
                if self._pending_version is None:
                    self._pending_version = version
            time.sleep(0.5)

    def flush(self, timeout: float | None = 30.0) -> None:
        """Block until every change staged so far is committed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                fut = self._inflight
                if fut is None and not self._pending and not self._pending_version:
                    return
                if fut is None:
                    self._kick_locked()
                    fut = self._inflight
            if fut is not None:
                fut.result(None if deadline is None else max(deadline - time.monotonic(), 0.0))
            if deadline is not None and time.monotonic() > deadline:
                raise StoreError(f"{self.path}: changes not persisted within {timeout} s")

    async def wait_persisted(self) -> None:
        """Await until every change staged so far is committed."""
        await asyncio.get_running_loop().run_in_executor(None, self.flush)

    def close(self) -> None:
        """Flush, then close the database and the writer thread."""
        self.flush()
        self._executor.shutdown(wait=True)
        if self._conn is not None:
            self._conn.close()
            self._conn = None


T = TypeVar("T", TopicConfig, SubscriptionGroupConfig)


class ConfigManager(Generic[T]):
    """In-memory table + DataVersion persisted through a :class:`ConfigTable`.

    :attr:`on_change`, when set, is called with the names created, replaced or removed by each
    :meth:`put` / :meth:`put_many` / :meth:`delete` / :meth:`delete_many` (after the change; the
    master records them for its slaves, :mod:`rocket.broker.metadata.replication`).
    """

    _kind: type[T]
    _wrapper_key: str

    def __init__(self, path: Path) -> None:
        self.store = ConfigTable(path)
        self._table: dict[str, T] = {}
        self.data_version = DataVersion(timestamp=now_ms())
        self._loaded = False
        self.on_change: Callable[[list[str]], None] | None = None

    @staticmethod
    def _name(cfg: T) -> str:
        """The table key of ``cfg``."""
        raise NotImplementedError

    def load(self) -> None:
        """Read the table (blocking). Raises :class:`ConfigCorruptError`."""
        rows, version = self.store.load()
        table: dict[str, T] = {}
        for name, obj in rows.items():
            try:
                table[name] = self._kind.from_json(obj)
            except (KeyError, ValueError, TypeError) as exc:
                log.error("%s: entry %r is malformed (%s); ignored", self.store.path, name, exc)
        self._table = table
        if version is not None:
            self.data_version = DataVersion(int(version.get("timestamp", 0)), int(version.get("counter", 0)))
        self._loaded = True

    def _check(self) -> None:
        if not self._loaded:
            raise StoreError(f"{self.store.path}: not loaded yet (start the store first)")

    def get(self, name: str) -> T | None:
        """The config named ``name``, if any."""
        return self._table.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._table

    def __len__(self) -> int:
        return len(self._table)

    def all(self) -> dict[str, T]:
        """A copy of the whole table."""
        return dict(self._table)

    def put(self, cfg: T) -> None:
        """Create or replace; bumps the data version; persisted in the background."""
        self._check()
        name = self._name(cfg)
        self._table[name] = cfg
        self.data_version = self.data_version.next_version()
        self.store.stage(name, cfg.to_json(), self.data_version.to_json())
        if self.on_change is not None:
            self.on_change([name])

    def put_many(self, cfgs: Iterable[T]) -> None:
        """Create or replace several with one version bump and one transaction."""
        self._check()
        items = []
        for cfg in cfgs:
            name = self._name(cfg)
            self._table[name] = cfg
            items.append((name, cfg.to_json()))
        if items:
            self.data_version = self.data_version.next_version()
            self.store.stage_many(items, self.data_version.to_json())
            if self.on_change is not None:
                self.on_change([name for name, _ in items])

    def delete(self, name: str) -> bool:
        """Remove ``name``; False when absent."""
        self._check()
        if self._table.pop(name, None) is None:
            return False
        self.data_version = self.data_version.next_version()
        self.store.stage(name, _DELETE, self.data_version.to_json())
        if self.on_change is not None:
            self.on_change([name])
        return True

    def delete_many(self, names: Iterable[str]) -> int:
        """Remove several in one transaction; returns how many existed."""
        self._check()
        gone = [n for n in names if self._table.pop(n, None) is not None]
        if gone:
            self.data_version = self.data_version.next_version()
            self.store.stage_many([(n, _DELETE) for n in gone], self.data_version.to_json())
            if self.on_change is not None:
                self.on_change(gone)
        return len(gone)

    def wrapper_json(self) -> dict[str, Any]:
        """``{"<table key>": {name: json}, "dataVersion": {...}}`` (the ...SerializeWrapper)."""
        return {
            self._wrapper_key: {n: c.to_json() for n, c in self._table.items()},
            "dataVersion": self.data_version.to_json(),
        }

    def flush(self) -> None:
        """Block until persisted."""
        self.store.flush()

    async def wait_persisted(self) -> None:
        """Await until every change so far is persisted."""
        await self.store.wait_persisted()
