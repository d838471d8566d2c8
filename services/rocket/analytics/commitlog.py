"""``spark.read.format("rocket-commitlog")``: offline analysis of a broker's CommitLog segment files.

Options:

* ``path`` (required): a broker store directory (the one holding ``commitlog/``)
  or the ``commitlog`` directory itself;
* ``topic``: keep only these topics (comma-separated; default all);
* ``brokerName``: value of the ``broker_name`` column (default null);
* ``checkCrc``: ``true`` to verify each body's CRC32 (default ``false``).

One input partition per segment file (files named by their 20-digit start
offset, ``MappedFileQueue``). Each file is memory-mapped and decoded record by record with
:func:`rocket.message.decode_record`. A file's records end at the first
of: the end-of-file blank marker (magic ``BLANK_MAGIC_CODE``), a zeroed tail
(total size 0, the preallocated rest of the active segment), or a record that
does not decode (a torn tail after a crash, logged as a warning with its
offset) — as the broker's recovery does. Columns:
:data:`rocket.analytics.schema.COMMITLOG_SCHEMA`.

Raises :class:`CommitLogSourceError` when ``path`` is missing or holds no segment.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from rocket.analytics.schema import COMMITLOG_SCHEMA, BatchBuilder
from rocket.message import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MessageExt, MessageFormatError, decode_record

log = logging.getLogger("rocket.analytics.commitlog")

_SEGMENT_NAME = re.compile(r"^\d{20}$")
_HEAD = struct.Struct(">ii")


class CommitLogSourceError(ValueError):
    """The ``path`` option names no CommitLog (the message says what was looked for)."""


@dataclass
class SegmentPartition(InputPartition):
    """One segment file: its path and start (physical) offset."""

    path: str
    start_offset: int


@dataclass(slots=True)
class ScanResult:
    """Why a segment scan stopped: ``"blank"``, ``"zeroed"``, ``"end"`` (file end) or ``"corrupt"``,
    and at which physical offset."""

    reason: str = "end"
    offset: int = 0


def find_segments(path: str | os.PathLike[str]) -> list[Path]:
    """The segment files of ``path`` (a store dir or its ``commitlog`` dir), in offset order.

    Raises :class:`CommitLogSourceError` when neither holds a 20-digit-named file.
    """
    root = Path(path)
    for folder in (root / "commitlog", root):
        if folder.is_dir():
            files = sorted(p for p in folder.iterdir() if p.is_file() and _SEGMENT_NAME.match(p.name))
            if files:
                return files
    raise CommitLogSourceError(f"no CommitLog segment (20-digit file names) in {root} or {root / 'commitlog'}")


def scan_segment(path: str | os.PathLike[str], *, check_crc: bool = False,
                 result: ScanResult | None = None) -> Iterator[MessageExt]:
    """Decode the records of one segment file in order; never raises for bad data.

    ``result``, when given, receives the reason and physical offset where the
    scan stopped. An empty file yields nothing.
    """
    p = Path(path)
    base = int(p.name) if _SEGMENT_NAME.match(p.name) else 0
    res = result if result is not None else ScanResult()
    size = p.stat().st_size
    if size == 0:
        res.reason, res.offset = "end", base
        return
    with open(p, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm, memoryview(mm) as view:
        pos = 0
        while pos + 8 <= size:
            total, magic = _HEAD.unpack_from(view, pos)
            if magic == BLANK_MAGIC_CODE:
                res.reason, res.offset = "blank", base + pos
                return
            if total == 0 and magic == 0:
                res.reason, res.offset = "zeroed", base + pos
                return
            if magic != MESSAGE_MAGIC_CODE:
                log.warning("%s: no record at physical offset %d (magic %#x); stopping", p, base + pos, magic)
                res.reason, res.offset = "corrupt", base + pos
                return
            try:
                msg = decode_record(view, pos, check_crc=check_crc)
            except MessageFormatError as exc:
                log.warning("%s: undecodable record at physical offset %d (%s); stopping", p, base + pos, exc)
                res.reason, res.offset = "corrupt", base + pos
                return
            pos += msg.store_size
            yield msg
        res.reason, res.offset = "end", base + pos


class CommitLogReader(DataSourceReader):
    """Reads every segment of one CommitLog, one partition per file."""

    def __init__(self, path: str, topics: frozenset[str], broker_name: str | None, check_crc: bool) -> None:
        self.path = path
        self.topics = topics
        self.broker_name = broker_name
        self.check_crc = check_crc

    def partitions(self) -> Sequence[InputPartition]:
        """One :class:`SegmentPartition` per segment file."""
        return [SegmentPartition(str(f), int(f.name)) for f in find_segments(self.path)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The segment's messages as ``pyarrow.RecordBatch`` objects."""
        builder = BatchBuilder(commitlog=True)
        path = str(getattr(partition, "path", ""))
        if not path:
            return
        name = Path(path).name
        for msg in scan_segment(path, check_crc=self.check_crc):
            if self.topics and msg.topic not in self.topics:
                continue
            builder.add(msg, self.broker_name, name)
            if len(builder) >= 8192 or builder.body_bytes >= 4 << 20:
                yield builder.flush()
        if len(builder):
            yield builder.flush()


class CommitLogDataSource(DataSource):
    """``format("rocket-commitlog")``: the messages stored in CommitLog segment files."""

    @classmethod
    def name(cls) -> str:
        """The format name, ``rocket-commitlog``."""
        return "rocket-commitlog"

    def schema(self) -> StructType | str:
        """:data:`rocket.analytics.schema.COMMITLOG_SCHEMA`."""
        return COMMITLOG_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader; raises :class:`CommitLogSourceError` without a ``path`` option."""
        opts = {str(k).lower(): str(v) for k, v in self.options.items() if v is not None}
        path = opts.get("path", "").strip()
        if not path:
            raise CommitLogSourceError("option 'path' is required (a broker store dir or its commitlog dir)")
        topics = frozenset(t.strip() for t in opts.get("topic", opts.get("topics", "")).split(",") if t.strip())
        check = opts.get("checkcrc", "false").strip().lower() in ("1", "true", "yes")
        return CommitLogReader(path, topics, opts.get("brokername") or None, check)
