"""The columns of the ``rocket`` and ``rocket-commitlog`` data sources, and an Arrow batch builder.

Both sources yield ``pyarrow.RecordBatch`` objects (Spark 4's Python Data
Source API accepts them, and they cost far less per row than tuples).

Columns of :data:`MESSAGE_SCHEMA` (one row per stored message):

==================  ==================  ==============================================
column              type                meaning
==================  ==================  ==============================================
topic               string
broker_name         string              broker group of the queue (null for a CommitLog
                                        read without the ``brokerName`` option)
queue_id            int
queue_offset        bigint              logical offset in (topic, broker, queue)
keys                string              KEYS property (space-separated), null if unset
tags                string              TAGS property, null if unset
properties          map<string,string>  every property
born_timestamp      timestamp (UTC)     producer clock
store_timestamp     timestamp (UTC)     broker clock
born_host           string              ``ip:port`` of the producer's connection
body                binary              the body, decompressed
==================  ==================  ==============================================

:data:`COMMITLOG_SCHEMA` adds ``physical_offset`` (bigint, CommitLog offset),
``store_host`` (string), ``sys_flag`` (int) and ``segment`` (string, file name).
"""

from __future__ import annotations

from typing import Any

from rocket.message import MessageExt, MessageFormatError, decompress_body

MESSAGE_COLUMNS: tuple[str, ...] = (
    "topic",
    "broker_name",
    "queue_id",
    "queue_offset",
    "keys",
    "tags",
    "properties",
    "born_timestamp",
    "store_timestamp",
    "born_host",
    "body",
)

#: Spark DDL of the ``rocket`` source.
MESSAGE_SCHEMA = (
    "topic string, broker_name string, queue_id int, queue_offset bigint, keys string, tags string, "
    "properties map<string,string>, born_timestamp timestamp, store_timestamp timestamp, born_host string, "
    "body binary"
)

COMMITLOG_EXTRA_COLUMNS: tuple[str, ...] = ("physical_offset", "store_host", "sys_flag", "segment")

#: Spark DDL of the ``rocket-commitlog`` source.
COMMITLOG_SCHEMA = MESSAGE_SCHEMA + ", physical_offset bigint, store_host string, sys_flag int, segment string"


def _arrow_types() -> dict[str, Any]:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return {
        "topic": pa.string(),
        "broker_name": pa.string(),
        "queue_id": pa.int32(),
        "queue_offset": pa.int64(),
        "keys": pa.string(),
        "tags": pa.string(),
        "properties": pa.map_(pa.string(), pa.string()),
        "born_timestamp": ts,
        "store_timestamp": ts,
        "born_host": pa.string(),
        "body": pa.binary(),
        "physical_offset": pa.int64(),
        "store_host": pa.string(),
        "sys_flag": pa.int32(),
        "segment": pa.string(),
    }


class BatchBuilder:
    """Collects messages column by column and emits ``pyarrow.RecordBatch`` objects.

    ``commitlog=True`` adds the :data:`COMMITLOG_EXTRA_COLUMNS`. Bodies are
    decompressed when their sysFlag says so; a body that fails to decompress
    is kept as stored. Not thread-safe.
    """

    def __init__(self, *, commitlog: bool = False) -> None:
        self.columns = MESSAGE_COLUMNS + (COMMITLOG_EXTRA_COLUMNS if commitlog else ())
        self._data: dict[str, list[Any]] = {c: [] for c in self.columns}
        self._commitlog = commitlog
        #: Body bytes added since the last :meth:`flush` (decompressed sizes).
        self.body_bytes = 0

    def __len__(self) -> int:
        return len(self._data["topic"])

    def add(self, msg: MessageExt, broker_name: str | None, segment: str | None = None) -> None:
        """Append one message (``segment``: the CommitLog file name, commitlog mode only)."""
        d = self._data
        props = msg.properties
        body = msg.body
        if msg.sys_flag & 0x1:
            try:
                body = decompress_body(body, msg.sys_flag)
            except MessageFormatError:
                pass
        d["topic"].append(msg.topic)
        d["broker_name"].append(broker_name)
        d["queue_id"].append(msg.queue_id)
        d["queue_offset"].append(msg.queue_offset)
        d["keys"].append(props.get("KEYS"))
        d["tags"].append(props.get("TAGS"))
        d["properties"].append(list(props.items()))
        d["born_timestamp"].append(msg.born_timestamp * 1000)
        d["store_timestamp"].append(msg.store_timestamp * 1000)
        d["born_host"].append(msg.born_host)
        d["body"].append(body)
        self.body_bytes += len(body)
        if self._commitlog:
            d["physical_offset"].append(msg.physical_offset)
            d["store_host"].append(msg.store_host)
            d["sys_flag"].append(msg.sys_flag)
            d["segment"].append(segment)

    def flush(self) -> Any:
        """The collected rows as a ``pyarrow.RecordBatch`` (columns in schema order); resets the builder."""
        import pyarrow as pa

        types = _arrow_types()
        arrays = [pa.array(self._data[c], type=types[c]) for c in self.columns]
        self._data = {c: [] for c in self.columns}
        self.body_bytes = 0
        return pa.RecordBatch.from_arrays(arrays, names=list(self.columns))
