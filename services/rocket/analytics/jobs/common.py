"""What the jobs share: where their input comes from, and how they write their output.

Input (:func:`input_frame`) is a DataFrame with the ``rocket`` source's columns
(:data:`rocket.analytics.schema.MESSAGE_SCHEMA`), from one of:

* the brokers (``namesrv`` + ``topics``, ``format("rocket")``),
* CommitLog segment files (``commitlog`` = a store dir, ``format("rocket-commitlog")``),
* LogHub files directly (``loghub`` = a LogHub folder; no cluster — each line
  becomes a message of topic ``loghub-<System>``, tags ``<System>``, keys
  ``<System>-<line number>``, as ``make run`` publishes them).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rocket.analytics import loghub
from rocket.analytics.schema import MESSAGE_COLUMNS, MESSAGE_SCHEMA


class JobInputError(ValueError):
    """The job was given no input, or an input it cannot use (the message says which)."""


@dataclass(slots=True)
class InputSpec:
    """Where a job reads from (exactly one of ``namesrv``, ``commitlog``, ``loghub``)."""

    namesrv: str | None = None
    topics: tuple[str, ...] = ()
    commitlog: str | None = None
    loghub: str | None = None
    systems: tuple[str, ...] = ()
    starting_offsets: str = "earliest"
    ending_offsets: str = "latest"
    fail_on_data_loss: bool = True

    def describe(self) -> dict[str, Any]:
        """A JSON-able description for the job summary."""
        if self.namesrv:
            return {"source": "rocket", "namesrv": self.namesrv, "topics": list(self.topics),
                    "startingOffsets": self.starting_offsets, "endingOffsets": self.ending_offsets}
        if self.commitlog:
            return {"source": "rocket-commitlog", "path": self.commitlog, "topics": list(self.topics)}
        return {"source": "loghub-files", "path": self.loghub, "systems": list(self.systems)}


def loghub_frame(spark: Any, root: str | Path, systems: Sequence[str] = ()) -> Any:
    """The LogHub files under ``root`` as a DataFrame in the message schema (no cluster needed).

    Born/store timestamps are the time of the call; ``born_host`` is
    ``127.0.0.1:0``. Raises :class:`JobInputError` when no system's log is found.
    """
    import pandas as pd

    root = Path(root)
    now = pd.Timestamp(datetime.now(tz=UTC))
    cols: dict[str, list[Any]] = {c: [] for c in MESSAGE_COLUMNS}
    wanted = tuple(systems) or loghub.SYSTEMS
    for system, lines in loghub.iter_system_logs(root, wanted):
        topic = loghub.TOPIC_PREFIX + system
        for i, line in enumerate(lines, 1):
            key = f"{system}-{i}"
            for col, value in (("topic", topic), ("broker_name", "loghub"), ("queue_id", 0),
                               ("queue_offset", i - 1), ("keys", key), ("tags", system),
                               ("properties", {"TAGS": system, "KEYS": key}), ("born_timestamp", now),
                               ("store_timestamp", now), ("born_host", "127.0.0.1:0"), ("body", line.encode())):
                cols[col].append(value)
    if not cols["topic"]:
        raise JobInputError(f"no LogHub log found under {root} (systems {', '.join(wanted)})")
    return spark.createDataFrame(pd.DataFrame(cols), schema=MESSAGE_SCHEMA)


def input_frame(spark: Any, spec: InputSpec) -> Any:
    """The job's input DataFrame (message columns only). Raises :class:`JobInputError`."""
    if spec.namesrv:
        if not spec.topics:
            raise JobInputError("reading from a cluster needs topics")
        return (spark.read.format("rocket").option("namesrv", spec.namesrv).option("topic", ",".join(spec.topics))
                .option("startingOffsets", spec.starting_offsets).option("endingOffsets", spec.ending_offsets)
                .option("failOnDataLoss", str(spec.fail_on_data_loss).lower()).load())
    if spec.commitlog:
        reader = spark.read.format("rocket-commitlog").option("path", spec.commitlog)
        if spec.topics:
            reader = reader.option("topic", ",".join(spec.topics))
        return reader.load().select(*MESSAGE_COLUMNS)
    if spec.loghub:
        return loghub_frame(spark, spec.loghub, spec.systems)
    raise JobInputError("no input: give --namesrv and --topics, --commitlog DIR or --loghub DIR")


def planned_lines(spec: InputSpec) -> dict[str, int]:
    """Messages per topic the read of ``spec`` (a cluster input) is planned to cover, asked of the brokers now.

    Raises :class:`JobInputError` naming a topic that does not exist.
    """
    from rocket.analytics.offsets import parse_offsets
    from rocket.analytics.pull import RocketSourceError, SyncPuller

    if not spec.namesrv:
        return {}
    try:
        with SyncPuller(spec.namesrv) as puller:
            ranges = puller.plan(list(spec.topics), parse_offsets(spec.starting_offsets, default="earliest"),
                                 parse_offsets(spec.ending_offsets, default="latest"))
    except RocketSourceError as exc:
        raise JobInputError(str(exc)) from None
    out = {t: 0 for t in spec.topics}
    for r in ranges:
        out[r.topic] += r.end - r.start
    return out


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """The input flags every job accepts (see :class:`InputSpec`)."""
    parser.add_argument("--namesrv", help="NameServers 'host:port;host:port' (read from the brokers)")
    parser.add_argument("--topics", default="", help="comma-separated topics (with --namesrv or --commitlog)")
    parser.add_argument("--commitlog", help="a broker store dir or commitlog dir (offline)")
    parser.add_argument("--loghub", help="a LogHub folder, read directly (offline, no cluster)")
    parser.add_argument("--systems", default="", help="with --loghub: comma-separated systems (default all)")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--ending-offsets", default="latest")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--master", default=None, help="Spark master (default: configured, else local[2])")


def input_spec(args: argparse.Namespace) -> InputSpec:
    """An :class:`InputSpec` from parsed :func:`add_input_arguments` flags."""
    return InputSpec(
        namesrv=args.namesrv,
        topics=tuple(t.strip() for t in (args.topics or "").split(",") if t.strip()),
        commitlog=args.commitlog,
        loghub=args.loghub,
        systems=tuple(s.strip() for s in (args.systems or "").split(",") if s.strip()),
        starting_offsets=args.starting_offsets,
        ending_offsets=args.ending_offsets,
    )


def write_parquet(df: Any, path: Path, partition_by: Sequence[str], *, small: bool = False) -> str:
    """Overwrite ``path`` with ``df`` as Parquet partitioned by ``partition_by``.

    ``small``: the frame is an aggregate that fits one task (coalesced, no shuffle: one file per output
    partition); else every task writes its own file in each output partition it has rows of (no shuffle: a
    large topic is written by every core).
    """
    if small:
        df = df.coalesce(1)
    df.write.mode("overwrite").partitionBy(*partition_by).parquet(str(path))
    return str(path)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_json(obj: dict[str, Any], path: Path) -> str:
    """Write ``obj`` as indented JSON (NaN/inf become null, datetimes ISO-8601)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(obj), indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return str(path)


def utc_now() -> str:
    """Now as ISO-8601 UTC, seconds precision."""
    return datetime.now(tz=UTC).replace(microsecond=0).isoformat()


class Stopwatch:
    """Elapsed seconds since creation (``seconds``)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    @property
    def seconds(self) -> float:
        """Seconds since start."""
        return time.perf_counter() - self.t0
