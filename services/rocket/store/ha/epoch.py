"""Epochs of a replicated CommitLog: which master term wrote which byte range.

RocketMQ 5 keeps, next to the CommitLog of every broker of an auto-switching
group, an *epoch file*: the list of ``(epoch, startOffset)`` pairs, one per
master term, in increasing order. Term ``e`` wrote the bytes from its start
offset up to the next entry's start offset (the last term: up to the log's
max physical offset). Two copies of a group's log agree on every byte below
the end of the newest term they both have *with the same start offset* — the
"consistent point" — so a broker that returns from a failure as a slave
truncates its log to that point before it replicates the new master's data,
and two copies never disagree about an acknowledged message
(RocketMQ 5 ``EpochFileCache.findConsistentPoint``; concepts only).

RocketCluster rules (``rocket.store.ha`` and ``rocket.broker.replicas`` apply them):

* a broker that first becomes master of an empty epoch file starts epoch 1 at
  its log's minimum physical offset;
* every promotion of a slave starts a new epoch ``max(known epochs) + 1`` at
  the promoted broker's max physical offset;
* a slave copies its master's entries as the replicated data reaches their
  start offsets; after truncating it drops its own entries past the cut.

File: ``<storePathRootDir>/epochFileCheckpoint``, a small JSON document
``{"entries": [[epoch, startOffset], ...], "crc32": <CRC32 of the entries'
JSON>}`` replaced atomically (tmp file, fsync, rename, fsync of the
directory). A file whose CRC does not match raises :class:`EpochFileError`
(a broker must not guess its history).
"""

from __future__ import annotations

import contextlib
import logging
import os
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from rocket.store.api import StoreError

log = logging.getLogger("rocket.store")

EPOCH_FILE_NAME = "epochFileCheckpoint"


class EpochFileError(StoreError):
    """The epoch file is unreadable or its entries are not in order (the message says which)."""


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """One master term: ``epoch`` (≥ 1) began writing at physical offset ``start`` (bytes)."""

    epoch: int
    start: int

    def to_json(self) -> list[int]:
        """``[epoch, start]``."""
        return [self.epoch, self.start]

    @classmethod
    def from_json(cls, obj: object) -> EpochEntry:
        """From ``[epoch, start]`` (or ``{"epoch":..,"startOffset":..}``). Raises ``ValueError``."""
        if isinstance(obj, dict):
            epoch, start = obj.get("epoch"), obj.get("startOffset", obj.get("start"))
        elif isinstance(obj, (list, tuple)) and len(obj) == 2:
            epoch, start = obj
        else:
            raise ValueError(f"not an epoch entry: {obj!r}")
        if not isinstance(epoch, int) or not isinstance(start, int) or isinstance(epoch, bool):
            raise ValueError(f"not an epoch entry: {obj!r}")
        return cls(epoch, start)


def check_entries(entries: Sequence[EpochEntry]) -> None:
    """Raise ``ValueError`` unless epochs strictly increase (from ≥ 1) and starts never decrease."""
    prev: EpochEntry | None = None
    for e in entries:
        if e.epoch < 1 or e.start < 0:
            raise ValueError(f"epoch entry {e.to_json()}: epoch must be >= 1 and start >= 0")
        if prev is not None and (e.epoch <= prev.epoch or e.start < prev.start):
            raise ValueError(f"epoch entry {e.to_json()} does not follow {prev.to_json()}")
        prev = e


def entries_to_json(entries: Iterable[EpochEntry]) -> list[list[int]]:
    """``[[epoch, start], ...]``."""
    return [e.to_json() for e in entries]


def entries_from_json(obj: object) -> list[EpochEntry]:
    """Parse ``[[epoch, start], ...]`` and check the order. Raises ``ValueError``."""
    if not isinstance(obj, list):
        raise ValueError("epoch entries must be a JSON array")
    entries = [EpochEntry.from_json(o) for o in obj]
    check_entries(entries)
    return entries


def entry_end(entries: Sequence[EpochEntry], index: int, max_offset: int) -> int:
    """End (exclusive) of term ``entries[index]``: the next term's start, or ``max_offset``."""
    if index + 1 < len(entries):
        return entries[index + 1].start
    return max(max_offset, entries[index].start)


def find_consistent_point(local: Sequence[EpochEntry], local_max: int,
                          remote: Sequence[EpochEntry], remote_max: int) -> int:
    """The offset below which two copies of a log hold the same bytes; -1 when none is known.

    ``local``/``remote``: the two epoch lists; ``local_max``/``remote_max``:
    the max physical offsets of the two logs. The newest term present in both
    lists with the same start offset is the last one both copies share; the
    point is the smaller of its two ends. Example (RocketMQ 5's own test
    case): local ``(1,100) (2,300) (3,500)`` ending at 700 and remote
    ``(1,100) (2,300) (3,450)`` → term 3 differs, term 2 ends at 500 locally
    and 450 remotely → 450.
    """
    by_epoch = {e.epoch: i for i, e in enumerate(remote)}
    for i in range(len(local) - 1, -1, -1):
        entry = local[i]
        j = by_epoch.get(entry.epoch)
        if j is None or remote[j].start != entry.start:
            continue
        return min(entry_end(local, i, local_max), entry_end(remote, j, remote_max))
    return -1


class EpochFile:
    """The epoch list of one store, persisted at ``path`` (see the module doc).

    Methods that change the list write the file before returning (blocking:
    a few hundred bytes and two fsyncs; call them from an executor thread on
    a busy loop, or accept the short pause for rare role changes).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.entries: list[EpochEntry] = []

    # -- reading --------------------------------------------------------------------------------

    def load(self) -> None:
        """Read the file (absent = no entries). Raises :class:`EpochFileError`."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            self.entries = []
            return
        except OSError as exc:
            raise EpochFileError(f"cannot read {self.path}: {exc}") from None
        try:
            obj = orjson.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            body = orjson.dumps(obj.get("entries"))
            if zlib.crc32(body) != obj.get("crc32"):
                raise ValueError("CRC32 of the entries does not match")
            self.entries = entries_from_json(obj.get("entries"))
        except ValueError as exc:
            raise EpochFileError(f"{self.path}: {exc}; refusing to guess this broker's replication history "
                                 "(restore the file or remove it to start a fresh history)") from None

    @property
    def last(self) -> EpochEntry | None:
        """The newest term, if any."""
        return self.entries[-1] if self.entries else None

    @property
    def last_epoch(self) -> int:
        """The newest epoch number; 0 when there is none."""
        return self.entries[-1].epoch if self.entries else 0

    def to_json(self) -> list[list[int]]:
        """``[[epoch, start], ...]``."""
        return entries_to_json(self.entries)

    # -- changes --------------------------------------------------------------------------------

    def _save(self) -> None:
        entries = entries_to_json(self.entries)
        body = orjson.dumps(entries)
        data = orjson.dumps({"entries": entries, "crc32": zlib.crc32(body)})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        with contextlib.suppress(OSError):
            fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def append(self, epoch: int, start: int) -> EpochEntry:
        """Start term ``epoch`` at ``start`` and persist. Raises ``ValueError`` when it does not
        follow the newest entry (a lower/equal epoch or an earlier start), ``OSError`` on disk errors."""
        entry = EpochEntry(epoch, start)
        check_entries([*self.entries[-1:], entry])
        self.entries.append(entry)
        try:
            self._save()
        except OSError:
            self.entries.pop()
            raise
        log.info("epoch %d starts at CommitLog offset %d (%s)", epoch, start, self.path)
        return entry

    def replace(self, entries: Sequence[EpochEntry]) -> None:
        """Replace the whole list (checked) and persist. Raises ``ValueError``/``OSError``."""
        check_entries(entries)
        old = self.entries
        self.entries = list(entries)
        try:
            self._save()
        except OSError:
            self.entries = old
            raise

    def truncate_after(self, offset: int) -> list[EpochEntry]:
        """Drop the terms that start after ``offset`` (a log truncated to ``offset``); returns them."""
        keep = [e for e in self.entries if e.start <= offset]
        dropped = self.entries[len(keep):]
        if dropped:
            self.replace(keep)
        return dropped

    def truncate_to_epoch(self, epoch: int) -> list[EpochEntry]:
        """Drop the terms newer than ``epoch``; returns them."""
        keep = [e for e in self.entries if e.epoch <= epoch]
        dropped = self.entries[len(keep):]
        if dropped:
            self.replace(keep)
        return dropped

    def adopt(self, remote: Sequence[EpochEntry], max_offset: int) -> list[EpochEntry]:
        """A slave copies the master's terms newer than its own that start at or before
        ``max_offset`` (its replicated end); returns those added (persisted)."""
        last = self.last_epoch
        new = [e for e in remote if e.epoch > last and e.start <= max_offset]
        if new:
            self.replace([*self.entries, *new])
        return new
