"""``spark.read.format("rocket")`` and ``spark.readStream.format("rocket")`` (Spark 4 Python Data Source API).

Options (names are case-insensitive):

==========================  ===========================================================================
``namesrv``                 NameServers, ``"host:port;host:port"`` (required)
``topic``                   one topic or several, comma-separated (required; ``topics`` also accepted)
``startingOffsets``         ``earliest`` (default), ``latest``, a timestamp or JSON (see
                            :mod:`rocket.analytics.offsets`)
``endingOffsets``           batch only: ``latest`` (default), ``earliest``, a timestamp or JSON
``consumerGroup``           group the readers use (default ``rocket-analytics``; nothing is committed)
``preferSlave``             ``true`` (default): pull from a slave of each broker group when there is one
``pullBatchSize``           messages per pull (default 32, the broker's in-memory limit)
``pullWindow``              pulls in flight per queue (default 8)
``maxOffsetsPerPartition``  split a queue's range into partitions of at most this many offsets
``maxOffsetsPerTrigger``    streaming: most new offsets per micro-batch, over all queues (Spark ≥ 4.2)
``failOnDataLoss``          ``true`` (default): fail when offsets of the range were deleted
``timeout``                 seconds per broker request (default 10)
==========================  ===========================================================================

Batch: one input partition per message queue and offset range ``[start, end)``
resolved on the driver from the brokers' min/max offsets. Streaming: offsets are
``{"<topic>": {"<brokerName>:<queueId>": <next offset>}}`` (Spark keeps them in
its checkpoint; nothing is committed to the brokers); each micro-batch reads
``[previous end, latest)`` per queue, new queues start at their min offset.

Errors: an unknown topic fails the planning with "topic '…' does not exist";
a broker that dies mid-read is retried on the group's other broker (slave or
master) and otherwise fails the task with "reading queue <topic>@<broker>:<id>
failed at offset <n>: …" (:class:`rocket.analytics.pull.RocketReadError`).
Columns: :data:`rocket.analytics.schema.MESSAGE_SCHEMA`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from rocket.analytics.offsets import OffsetSpec, clamp, parse_offsets, split_queue_key
from rocket.analytics.pull import (
    DEFAULT_BATCH,
    DEFAULT_GROUP,
    DEFAULT_TIMEOUT,
    DEFAULT_WINDOW,
    QueueRange,
    RocketSourceError,
    SyncPuller,
    shared_puller,
    split_range,
)
from rocket.analytics.schema import MESSAGE_SCHEMA, BatchBuilder


@dataclass
class RocketPartition(InputPartition):
    """One input partition: offsets ``[start, end)`` of one queue."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int

    @classmethod
    def of(cls, rng: QueueRange) -> RocketPartition:
        """The partition of a queue range."""
        return cls(rng.topic, rng.broker_name, rng.queue_id, rng.start, rng.end)

    @property
    def range(self) -> QueueRange:
        """The queue range."""
        return QueueRange(self.topic, self.broker_name, self.queue_id, self.start, self.end)


def _flag(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def _int(opts: Mapping[str, str], key: str, default: int | None) -> int | None:
    raw = opts.get(key.lower())
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise RocketSourceError(f"option {key}={raw!r} is not an integer") from None


@dataclass(frozen=True)
class RocketOptions:
    """The parsed options (see the module docstring)."""

    namesrv: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    group: str = DEFAULT_GROUP
    prefer_slave: bool = True
    batch_size: int = DEFAULT_BATCH
    window: int = DEFAULT_WINDOW
    max_per_partition: int | None = None
    max_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    timeout: float = DEFAULT_TIMEOUT

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> RocketOptions:
        """Parse Spark's options. Raises :class:`RocketSourceError` (or ``OffsetSpecError``) naming the option."""
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        namesrv = opts.get("namesrv") or opts.get("namesrvaddr") or ""
        if not namesrv.strip():
            raise RocketSourceError("option 'namesrv' is required (NameServers 'host:port;host:port')")
        raw_topics = opts.get("topic") or opts.get("topics") or ""
        topics = tuple(t.strip() for t in raw_topics.split(",") if t.strip())
        if not topics:
            raise RocketSourceError("option 'topic' is required (one topic or several, comma-separated)")
        timeout = opts.get("timeout")
        return cls(
            namesrv=namesrv.strip(),
            topics=topics,
            starting=parse_offsets(opts.get("startingoffsets"), default="earliest", option="startingOffsets"),
            ending=parse_offsets(opts.get("endingoffsets"), default="latest", option="endingOffsets"),
            group=opts.get("consumergroup") or DEFAULT_GROUP,
            prefer_slave=_flag(opts.get("preferslave"), True),
            batch_size=max(1, _int(opts, "pullBatchSize", DEFAULT_BATCH) or DEFAULT_BATCH),
            window=max(1, _int(opts, "pullWindow", DEFAULT_WINDOW) or DEFAULT_WINDOW),
            max_per_partition=_int(opts, "maxOffsetsPerPartition", None),
            max_per_trigger=_int(opts, "maxOffsetsPerTrigger", None),
            fail_on_data_loss=_flag(opts.get("failondataloss"), True),
            timeout=float(timeout) if timeout else DEFAULT_TIMEOUT,
        )

    def puller(self) -> SyncPuller:
        """A connected :class:`SyncPuller` (close it after use)."""
        return SyncPuller(self.namesrv, group=self.group, timeout=self.timeout)


def read_partition(options: RocketOptions, part: Any) -> Iterator[Any]:
    """Pull one partition's range and yield ``pyarrow.RecordBatch`` objects (at most ~4 MB of bodies each).

    ``part``: a :class:`RocketPartition` (attributes are read, not its class: Spark may hand
    over a copy unpickled from another module instance).
    """
    if not hasattr(part, "topic"):  # Spark's placeholder when planning found no range: nothing to read
        return
    builder = BatchBuilder()
    rng = QueueRange(part.topic, part.broker_name, int(part.queue_id), int(part.start), int(part.end))
    puller = shared_puller(options.namesrv, group=options.group, timeout=options.timeout)
    for msgs in puller.read_range(rng, batch_size=options.batch_size, window=options.window,
                                  prefer_slave=options.prefer_slave,
                                  fail_on_data_loss=options.fail_on_data_loss):
        for msg in msgs:
            builder.add(msg, rng.broker_name)
        if len(builder) >= 8192 or builder.body_bytes >= 4 << 20:
            yield builder.flush()
    if len(builder):
        yield builder.flush()


class RocketBatchReader(DataSourceReader):
    """Batch reader: plans one partition per queue range on the driver, pulls on the executors."""

    def __init__(self, options: RocketOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        """One :class:`RocketPartition` per non-empty queue range (driver side; talks to the cluster)."""
        o = self.options
        with o.puller() as puller:
            ranges = puller.plan(list(o.topics), o.starting, o.ending, o.max_per_partition)
        return [RocketPartition.of(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The partition's messages as Arrow batches (executor side)."""
        yield from read_partition(self.options, partition)


Offsets = dict[str, dict[str, int]]


class RocketStreamReader(DataSourceStreamReader):
    """Micro-batch reader; offsets ``{"<topic>": {"<broker>:<queueId>": next offset}}``."""

    def __init__(self, options: RocketOptions) -> None:
        self.options = options
        self._puller: SyncPuller | None = None

    def _client(self) -> SyncPuller:
        if self._puller is None:
            self._puller = self.options.puller()
        return self._puller

    def initialOffset(self) -> Offsets:
        """Where a new query starts: ``startingOffsets`` resolved per queue."""
        o = self.options
        puller = self._client()
        out: Offsets = {}
        for topic in o.topics:
            out[topic] = {}
            for mq in puller.queues(topic):
                lo, hi = puller.bounds(mq)
                out[topic][f"{mq.broker_name}:{mq.queue_id}"] = puller.resolve(o.starting, mq, lo, hi)
        return out

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> Offsets:
        """Every queue's max offset, capped by ``maxOffsetsPerTrigger`` / Spark's ``ReadMaxRows``."""
        latest = self._client().latest(list(self.options.topics))
        max_rows = getattr(limit, "max_rows", None)
        if limit is None and self.options.max_per_trigger:
            max_rows = self.options.max_per_trigger
        if not max_rows or start is None:
            return latest
        return cap_offsets(start, latest, int(max_rows))

    def getDefaultReadLimit(self) -> Any:
        """``ReadMaxRows(maxOffsetsPerTrigger)`` when that option is set, else read everything."""
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        n = self.options.max_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One partition per queue with new offsets in ``[start, end)``."""
        parts: list[InputPartition] = []
        for topic, queues in end.items():
            for key, stop in queues.items():
                broker, qid = split_queue_key(key)
                begin = start.get(topic, {}).get(key)
                if begin is None:  # a queue that appeared after the previous batch
                    begin = self._client().bounds(_mq(topic, broker, qid))[0]
                rng = QueueRange(topic, broker, qid, int(begin), int(stop))
                parts.extend(RocketPartition.of(r) for r in split_range(rng, self.options.max_per_partition))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The partition's messages as Arrow batches."""
        yield from read_partition(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: progress lives in Spark's checkpoint."""

    def stop(self) -> None:
        """Close the driver-side client."""
        if self._puller is not None:
            self._puller.close()
            self._puller = None


def _mq(topic: str, broker: str, qid: int) -> Any:
    from rocket.protocol import MessageQueue

    return MessageQueue(topic, broker, qid)


def cap_offsets(start: Mapping[str, Mapping[str, int]], latest: Offsets, max_rows: int) -> Offsets:
    """``latest`` lowered so that at most ``max_rows`` offsets lie between ``start`` and it.

    The budget is shared fairly: queues are served in turn, each taking at
    most an equal share of what is left. Queues absent from ``start`` count
    from their latest offset (they are read from their min offset by
    :meth:`RocketStreamReader.partitions`, so they are kept as they are).
    """
    pending: list[tuple[str, str, int, int]] = []
    out: Offsets = {t: dict(q) for t, q in latest.items()}
    for topic, queues in latest.items():
        for key, hi in queues.items():
            lo = start.get(topic, {}).get(key)
            if lo is not None and hi > lo:
                pending.append((topic, key, int(lo), int(hi)))
    budget = max(0, max_rows)
    pending.sort(key=lambda p: p[3] - p[2])
    for i, (topic, key, lo, hi) in enumerate(pending):
        share = budget // (len(pending) - i) if budget else 0
        take = min(hi - lo, share)
        out[topic][key] = clamp(lo + take, lo, hi)
        budget -= take
    return out


class RocketDataSource(DataSource):
    """``format("rocket")``: messages of RocketCluster topics, pulled from the brokers."""

    @classmethod
    def name(cls) -> str:
        """The format name, ``rocket``."""
        return "rocket"

    def schema(self) -> StructType | str:
        """:data:`rocket.analytics.schema.MESSAGE_SCHEMA`."""
        return MESSAGE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader; the options are checked here (bad ones fail before any partition is planned)."""
        return RocketBatchReader(RocketOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A micro-batch reader (``endingOffsets`` is ignored)."""
        return RocketStreamReader(RocketOptions.parse(self.options))
