"""The ``logs`` job: log lines of any topic → header fields, templates, levels per minute, error spikes, events.

Run it with ``spark-submit services/rocket/analytics/jobs/logs.py --namesrv H:P --topics loghub-HDFS,... --out
DIR``, as ``rocket analytics logs ...``, or from Python with :func:`run_logs_job` / :func:`analyze_logs`.

Any topic, no configuration needed. Per Spark partition (``mapInPandas``), per
topic, in chunks of at most ``MinerSettings.chunk_lines`` lines (bounded memory per task):

1. decode each body (:func:`decode_body`): empty, binary and over-long bodies
   are **skipped** and counted by reason; invalid UTF-8 is replaced and mined;
2. split the header (:mod:`rocket.analytics.header`): learned from the
   chunk's first lines, or ``--log-format`` (a LogHub preset name or loghub
   notation ``'<Date> <Time> <Level> <Component>: <Content>'``): event time,
   level (normalised; inferred from the words when there is none), component.
   A line whose header does not match is **unparsed**: mined whole, never fatal;
3. mine templates with the one default setting (:mod:`rocket.analytics.mining`);

then the partitions' templates are merged per topic on the driver
(:func:`merge_lines`), deterministically.

Then Spark aggregates: per-level counts per minute (event-time minutes, UTC),
templates with counts, error-rate spikes (below), and, where the LogHub ground
truth (``*_structured.csv``) is found (LogHub topics ``loghub-<System>``), GA, PA,
FGA and FTA (:mod:`rocket.analytics.accuracy`) over the lines matched to it.

Error-rate spike: a minute of a topic whose error count (ERROR + FATAL) is at
least ``min_errors`` (3), whose error rate is at least twice the topic's
overall rate ``p``, and exceeds its expectation by more than 3 binomial
standard deviations: ``errors > n·p + 3·sqrt(n·p·(1-p))``.

Output under ``out_dir``:

* ``lines/`` Parquet, partitioned by ``date`` (the store date: when the line
  was ingested) and ``topic``: one row per line;
* ``level_counts/`` Parquet, partitioned by ``date`` (of the event-time minute)
  and ``topic``: (minute, level, count);
* ``templates/`` Parquet, partitioned by ``topic``: every template with its counts;
* ``error_spikes/`` Parquet, partitioned by ``topic``;
* ``summary.json`` (the dict :func:`analyze_logs` returns) and ``report.md`` with ``charts/*.png``;
* with ``--events-topic T``: the events (a template not seen by the previous run
  into the same ``--out``, an error spike) as JSON messages on topic ``T``
  (tags ``new_template`` / ``error_spike``, keys = the source topic), written
  with ``df.write.format("rocket")``.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from rocket.analytics import header, loghub
from rocket.analytics.accuracy import grouping_accuracy, parsing_accuracy, template_f1
from rocket.analytics.jobs.common import (
    InputSpec,
    JobInputError,
    Stopwatch,
    add_input_arguments,
    input_frame,
    input_spec,
    planned_lines,
    utc_now,
    write_json,
    write_parquet,
)
from rocket.analytics.mining import DEFAULT_SETTINGS, MinerSettings, merge_templates, mine, template_id

log = logging.getLogger("rocket.analytics.logs")

#: Schema of the per-partition mining output (one row per input line). ``template`` is the partition's
#: template; the job replaces it with the merged one and sets ``template_id``. ``line`` (the raw line) is
#: set for LogHub topics only (scored against their ground truth, then dropped).
LINES_SCHEMA = (
    "topic string, system string, line_no int, broker_name string, queue_id int, queue_offset bigint, "
    "store_ms bigint, event_ms bigint, level string, level_inferred boolean, component string, parsed boolean, "
    "skipped string, template string, content string, line string"
)

_KEY_LINE = re.compile(r"^(?P<system>[A-Za-z]+)-(?P<n>\d+)$")

MIN_SPIKE_ERRORS = 3
SPIKE_SIGMAS = 3.0
SPIKE_RATIO = 2.0
#: Longest line mined, in bytes; a longer body is skipped (reason ``too_long``).
MAX_LINE_BYTES = 64 * 1024
#: Lines of a topic (per partition chunk) its header format is learned from.
SAMPLE_LINES = 1000
#: Header times outside [1970, 2200) are not believed: the line keeps its store time as event time (pandas and
#: Arrow timestamps end in 2262).
_MIN_EVENT = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_EVENT = datetime(2200, 1, 1, tzinfo=UTC)
#: Reasons a message is skipped (counted in the summary, never mined).
SKIP_REASONS = ("empty", "binary", "too_long")


def _line_number(keys: Any, system: str | None) -> int | None:
    if not isinstance(keys, str):
        return None
    for key in keys.split(" "):
        m = _KEY_LINE.match(key)
        if m and (system is None or m.group("system").lower() == system.lower()):
            return int(m.group("n"))
    return None


_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 11, 12, 13))


def decode_body(body: Any) -> tuple[str, str | None]:
    """A message body as one log line and the reason it is skipped (``None`` when it is mined).

    ``empty``: no bytes or only whitespace; ``too_long``: more than
    :data:`MAX_LINE_BYTES`; ``binary``: holds NUL or mostly control bytes.
    Invalid UTF-8 is decoded with U+FFFD replacements and mined. Never raises.
    """
    if isinstance(body, bytes | bytearray | memoryview):
        raw = bytes(body)
    elif isinstance(body, str):
        raw = body.encode("utf-8", errors="replace")
    else:
        raw = b""
    if len(raw) > MAX_LINE_BYTES:
        return "", "too_long"
    head = raw[:4096]
    if b"\x00" in head or len(head) - len(head.translate(None, _CONTROL_BYTES)) > len(head) // 10:
        return "", "binary"
    line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
    if not line.strip():
        return "", "empty"
    return line, None


#: Columns :func:`mine_topic_columns` computes (the others of :data:`LINES_SCHEMA` are the input's).
_COMPUTED = ("line_no", "event_ms", "level", "level_inferred", "component", "parsed", "skipped", "template",
             "content", "line")


def lines_arrow_schema() -> Any:
    """:data:`LINES_SCHEMA` as a ``pyarrow.Schema`` (the batches :func:`mine_partition` yields)."""
    import pyarrow as pa

    types = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(), "boolean": pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in (c.split(" ") for c in LINES_SCHEMA.split(", "))])


def mine_partition(batches: Iterator[Any], log_format: str | None = None,
                   settings: MinerSettings = DEFAULT_SETTINGS) -> Iterator[Any]:
    """The ``mapInArrow`` function: one partition's messages → one row per line (:data:`LINES_SCHEMA`).

    ``batches``: ``pyarrow.RecordBatch`` objects with the columns topic, tags,
    keys, broker_name, queue_id, queue_offset, store_ms, line (binary). Lines
    are gathered per topic in order and mined ``settings.chunk_lines`` at a time
    (memory per task is bounded by a chunk: its Arrow input, one Python list per
    column and its distinct token tuples), each chunk's header format learned
    from its first :data:`SAMPLE_LINES` lines unless ``log_format`` (a preset
    name or loghub notation, :func:`rocket.analytics.header.resolve`) is given.
    Yields ``pyarrow.RecordBatch`` objects of :func:`lines_arrow_schema`, at most
    10,000 rows each. Never raises for bad lines.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    fmt = header.resolve(log_format)
    schema = lines_arrow_schema()
    pending: dict[str, list[Any]] = {}
    pending_rows: dict[str, int] = {}
    for batch in batches:
        if batch.num_rows == 0:
            continue
        topics = pc.fill_null(batch.column("topic"), "")
        distinct = pc.unique(topics).to_pylist()
        parts = [(distinct[0], batch)] if len(distinct) == 1 else [
            (t, batch.filter(pc.equal(topics, t))) for t in distinct]
        for topic, part in parts:
            pending.setdefault(topic, []).append(part)
            pending_rows[topic] = pending_rows.get(topic, 0) + part.num_rows
            while pending_rows[topic] >= settings.chunk_lines:
                table = pa.Table.from_batches(pending[topic])
                yield from _mine_chunk(topic, table.slice(0, settings.chunk_lines), fmt, settings, schema)
                rest = table.slice(settings.chunk_lines)
                pending[topic] = rest.to_batches()
                pending_rows[topic] = rest.num_rows
    for topic, parts_ in pending.items():
        if pending_rows[topic]:
            yield from _mine_chunk(topic, pa.Table.from_batches(parts_), fmt, settings, schema)
    _record_task_stats()


def _mine_chunk(topic: str, table: Any, fmt: header.HeaderFormat | None, settings: MinerSettings,
                schema: Any) -> Iterator[Any]:
    """One topic's chunk (a ``pyarrow.Table`` of :func:`mine_partition`'s input) → output batches."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    tags = pc.drop_null(table.column("tags")) if "tags" in table.column_names else pa.array([], pa.string())
    tags = tags.filter(pc.not_equal(tags, "")) if len(tags) else tags
    store_ms = pc.fill_null(table.column("store_ms"), 0)
    cols = mine_topic_columns(topic, tags[0].as_py() if len(tags) else None,
                              table.column("keys").to_pylist() if "keys" in table.column_names else [None] * n,
                              store_ms.to_pylist(), table.column("line").to_pylist(), fmt, settings)
    arrays: list[Any] = []
    for field in schema:
        name = field.name
        if name in cols:
            arrays.append(pa.array(cols[name], type=field.type))
        elif name == "topic":
            arrays.append(pa.array([topic] * n, type=field.type))
        elif name == "system":
            arrays.append(pa.array([cols["_system"]] * n, type=field.type))
        elif name == "store_ms":
            arrays.append(store_ms.cast(field.type))
        else:  # broker_name, queue_id, queue_offset: as read
            arrays.append(table.column(name).cast(field.type))
    yield from pa.Table.from_arrays(arrays, schema=schema).to_batches(max_chunksize=10_000)


def mine_topic_columns(topic: str, tags: str | None, keys: Sequence[str | None], store_ms: Sequence[int],
                       bodies: Sequence[Any], fmt: header.HeaderFormat | None = None,
                       settings: MinerSettings = DEFAULT_SETTINGS) -> dict[str, Any]:
    """One topic's messages, column by column, → the computed output columns.

    ``tags``: the first non-empty tags of the messages (names the LogHub system
    with the topic); ``keys``, ``store_ms`` (0 when unknown) and ``bodies`` (bytes)
    per message. ``fmt``: the header format; ``None`` learns it from the lines.
    Returns a list per column of :data:`_COMPUTED` (``template`` is this chunk's;
    merged later across chunks; ``line``, the raw line, only for a LogHub system's
    topic, which is scored against its ground truth: else ``None``, as it would
    only be carried and dropped) and ``"_system"``: the LogHub system or ``None``.
    """
    system = loghub.system_of(topic, tags)
    decoded = [decode_body(b) for b in bodies]
    if fmt is None:
        fmt = header.learn_format(line for line, why in decoded[:SAMPLE_LINES * 2] if why is None)
    n = len(decoded)
    line_no = [_line_number(k, system) for k in keys] if any(k is not None for k in keys) else [None] * n
    event_ms = list(store_ms)
    level: list[str | None] = [None] * n
    inferred: list[bool | None] = [None] * n
    component: list[str | None] = [None] * n
    parsed = [False] * n
    skipped: list[str | None] = [why for _, why in decoded]
    lines = [line for line, _ in decoded]
    content_col = list(lines)
    contents: list[str] = []
    mined_at: list[int] = []
    years: dict[int, int] = {}
    split = fmt.split if fmt is not None else None
    normalize, infer, header_time = loghub.normalize_level, loghub.infer_level, header.header_time
    for i, (line, why) in enumerate(decoded):
        if why is not None:
            continue
        fields = split(line) if split is not None else None
        content = line.strip()
        lv = None
        if fields is not None:
            content = fields["Content"]
            parsed[i] = True
            component[i] = fields.get("Component") or fields.get("Program")
            lv = normalize(fields.get("Level"))
            ms = store_ms[i]
            day = ms // 86_400_000
            year = years.get(day)
            if year is None:
                year = years[day] = datetime.fromtimestamp(ms / 1000, tz=UTC).year if ms > 0 else 1970
            when = header_time(fields, year)
            if when is not None and _MIN_EVENT <= when < _MAX_EVENT:  # else the store time (absurd header year)
                event_ms[i] = int(when.timestamp() * 1000)
        level[i] = lv or infer(content)
        inferred[i] = lv is None
        content_col[i] = content
        contents.append(content)
        mined_at.append(i)
    template: list[str | None] = [None] * n
    if contents:
        result = mine(contents, settings)
        texts = result.templates
        for i, cid in zip(mined_at, result.cluster_ids, strict=True):
            template[i] = texts[cid]
    return {"line_no": line_no, "event_ms": event_ms, "level": level, "level_inferred": inferred,
            "component": component, "parsed": parsed, "skipped": skipped, "template": template,
            "content": content_col, "line": lines if system is not None else [None] * n, "_system": system}


#: When set, each mining task writes ``<partition>-<pid>.json`` there: ``{"partition", "pid",
#: "max_rss_kib"}`` (the Python worker's peak resident set, ``getrusage`` ``ru_maxrss``; a reused worker's
#: figure covers its earlier tasks too, so it is an upper bound per task). Used by the benchmark.
STATS_DIR_ENV = "ROCKET_ANALYTICS_STATS_DIR"


def _record_task_stats() -> None:
    import json
    import os
    import resource

    folder = os.environ.get(STATS_DIR_ENV)
    if not folder:
        return
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else -1
        stats = {"partition": partition, "pid": os.getpid(),
                 "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
        Path(folder, f"{partition}-{os.getpid()}.json").write_text(json.dumps(stats))
    except OSError:
        pass


def mine_topic_rows(records: list[dict[str, Any]], fmt: header.HeaderFormat | None = None,
                    settings: MinerSettings = DEFAULT_SETTINGS) -> list[dict[str, Any]]:
    """Messages of one topic (dicts with :func:`mine_partition`'s input columns) → output rows
    (:func:`mine_topic_columns` row by row; for tests and small inputs).

    ``fmt``: the header format; ``None`` learns it from the lines. The
    ``template`` of each row is this chunk's (merged later across chunks).
    """
    if not records:
        return []
    topic = str(records[0].get("topic") or "")
    tags = next((r.get("tags") for r in records if r.get("tags")), None)
    cols = mine_topic_columns(topic, tags, [r.get("keys") for r in records],
                              [int(r.get("store_ms") or 0) for r in records], [r.get("line") for r in records],
                              fmt, settings)
    system = cols["_system"]
    out: list[dict[str, Any]] = []
    for i, r in enumerate(records):
        row = {"topic": topic, "system": system, "broker_name": r.get("broker_name"), "queue_id": r.get("queue_id"),
               "queue_offset": r.get("queue_offset"), "store_ms": int(r.get("store_ms") or 0)}
        row.update({c: cols[c][i] for c in _COMPUTED})
        out.append(row)
    return out


# -- accuracy ---------------------------------------------------------------------------


def topic_accuracy(system: str, rows: Sequence[tuple[int | None, int | None, str, str | None]],
                   truth: loghub.GroundTruth) -> dict[str, Any]:
    """Grouping accuracy of one topic against its ground truth.

    ``rows``: ``(line_no, template_id, raw line, template text or None)`` per message. A message is
    matched to ground-truth line ``line_no`` when that line's text equals the
    raw line, else to the next unused ground-truth line with the same text;
    unmatched messages are left out. Unparsed lines (``template_id`` None)
    count as singleton groups. Returns ``{"accuracy", "lines_evaluated",
    "ground_truth_lines", "drain_published"}`` (accuracy None when nothing matched).
    """
    gt_lines = truth.lines or []
    by_text = truth.by_line()
    used: set[int] = set()
    true_ids: list[str] = []
    predicted: list[Any] = []
    pred_templates: list[str] = []
    true_templates: list[str] = []
    for i, (line_no, tid, line, template) in enumerate(rows):
        idx: int | None = None
        if line_no is not None and 1 <= line_no <= len(truth.event_ids):
            cand = line_no - 1
            if not gt_lines or gt_lines[cand].strip() == line.strip():
                idx = cand
        if idx is None:
            for cand in by_text.get(line, ()):
                if cand not in used:
                    idx = cand
                    break
        if idx is None or idx >= len(truth.event_ids):
            continue
        used.add(idx)
        true_ids.append(truth.event_ids[idx])
        predicted.append(tid if tid is not None else f"unparsed-{i}")
        pred_templates.append(template if template is not None else line)
        true_templates.append(truth.templates[idx] if idx < len(truth.templates) else "")
    f1 = template_f1(true_ids, true_templates, predicted, pred_templates) if true_ids else None
    return {
        "accuracy": grouping_accuracy(true_ids, predicted) if true_ids else None,
        "pa": parsing_accuracy(true_templates, pred_templates) if true_ids else None,
        "fga": f1.fga if f1 else None,
        "fta": f1.fta if f1 else None,
        "lines_evaluated": len(true_ids),
        "ground_truth_lines": len(truth.event_ids),
        "drain_published": loghub.DRAIN_PUBLISHED_ACCURACY.get(system),
    }


# -- the job ---------------------------------------------------------------------------------


def mine_lines(df: Any, log_format: str | None = None, settings: MinerSettings = DEFAULT_SETTINGS) -> Any:
    """Messages (``rocket`` columns) → :data:`LINES_SCHEMA` rows, mined per Spark partition
    (:func:`mine_partition`): a large topic uses every task, each with bounded memory."""
    from pyspark.sql import functions as F

    msgs = df.select(
        "topic", "tags", "keys", "broker_name", "queue_id", "queue_offset",
        F.unix_millis("store_timestamp").alias("store_ms"),
        F.col("body").alias("line"),  # bytes: decoded in Python, bad UTF-8 replaced (never fatal)
    )
    return msgs.mapInArrow(partial(mine_partition, log_format=log_format, settings=settings),
                           schema=LINES_SCHEMA)


def merge_lines(mined: Any, settings: MinerSettings = DEFAULT_SETTINGS,
                known: dict[str, list[str]] | None = None) -> Any:
    """Merge the partitions' templates per topic (:func:`rocket.analytics.mining.merge_templates`, on the
    driver: one row per distinct template; with ``known``, per topic the templates of earlier micro-batches)
    and add ``template_id``, ``event_time``, ``minute`` (event-time minute), ``store_time`` and ``date``
    (``yyyy-MM-dd`` of the store time), all UTC. Deterministic: the result does not depend on how lines were
    partitioned beyond the templates each partition found."""
    from pyspark.sql import functions as F

    spark = mined.sparkSession
    per_topic: dict[str, list[str]] = {}
    for r in mined.where(F.col("template").isNotNull()).select("topic", "template").distinct().collect():
        per_topic.setdefault(r["topic"], []).append(r["template"])
    for topic, templates in (known or {}).items():  # templates of earlier micro-batches (--follow)
        if topic in per_topic:
            per_topic[topic].extend(templates)
    mapping = [(topic, t, merged, template_id(merged))
               for topic, templates in per_topic.items()
               for t, merged in merge_templates(templates, settings.merge_min_constant).items()]
    schema = "topic string, template string, merged string, template_id int"
    mapping_df = spark.createDataFrame(mapping, schema=schema)
    lines = (mined.join(F.broadcast(mapping_df), ["topic", "template"], "left")
             .withColumn("template", F.col("merged")).drop("merged"))
    event_time = F.timestamp_millis("event_ms")
    return (lines.withColumn("event_time", event_time)
            .withColumn("minute", F.date_trunc("minute", event_time))
            .withColumn("store_time", F.timestamp_millis("store_ms"))
            .withColumn("date", F.date_format(F.col("store_time"), "yyyy-MM-dd")))


def error_spikes(lines: Any) -> Any:
    """Per topic and minute: lines, errors, rate, z-score; only the spike minutes (module docstring)."""
    from pyspark.sql import functions as F

    return spike_minutes(lines.where(F.col("template").isNotNull()).groupBy("topic", "minute")
                         .agg(F.count("*").alias("lines"),
                              F.sum(F.when(F.col("level").isin("ERROR", "FATAL"), 1).otherwise(0)).alias("errors")))


def spike_minutes(per_min: Any) -> Any:
    """The spike minutes (module docstring) of ``per_min``: mined lines and errors per topic and minute
    (columns topic, minute, lines, errors). Columns: topic, minute, lines, errors, rate, topic_rate, z."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("topic")
    p = F.sum("errors").over(w) / F.sum("lines").over(w)
    scored = (per_min.withColumn("topic_rate", p)
              .withColumn("rate", F.col("errors") / F.col("lines"))
              .withColumn("expected", F.col("lines") * F.col("topic_rate"))
              .withColumn("sd", F.sqrt(F.col("lines") * F.col("topic_rate") * (1 - F.col("topic_rate"))))
              .withColumn("z", F.when(F.col("sd") > 0, (F.col("errors") - F.col("expected")) / F.col("sd"))))
    return scored.where(
        (F.col("errors") >= MIN_SPIKE_ERRORS)
        & (F.col("rate") >= F.col("topic_rate") * SPIKE_RATIO)
        & (F.col("z") > SPIKE_SIGMAS)
    ).select("topic", "minute", "lines", "errors", "rate", "topic_rate", "z")


def known_templates(out: Path) -> set[tuple[str, int]]:
    """``(topic, template_id)`` of the templates a previous run wrote under ``out/templates`` (empty when none)."""
    path = out / "templates"
    if not (path / "_SUCCESS").exists():
        return set()
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(str(path), columns=["topic", "template_id"])
    except (OSError, ValueError):
        return set()
    return {(str(t), int(i)) for t, i in zip(table.column("topic").to_pylist(),
                                              table.column("template_id").to_pylist(), strict=True)
            if i is not None}


def log_events(templates_pd: Any, spikes_pd: Any, known: set[tuple[str, int]]) -> list[dict[str, Any]]:
    """The job's events: ``new_template`` for each template not in ``known`` (topic, template_id, template,
    count, errors, first_seen), then ``error_spike`` for each spike minute (topic, minute, lines, errors, rate,
    topic_rate, z). Times are ISO-8601 UTC strings."""
    events: list[dict[str, Any]] = []
    for r in templates_pd.sort_values(["topic", "template_id"]).itertuples():
        if (str(r.topic), int(r.template_id)) in known:
            continue
        first = r.first_seen.to_pydatetime().isoformat() if r.first_seen is not None else None
        events.append({"type": "new_template", "topic": str(r.topic), "template_id": int(r.template_id),
                       "template": r.template, "count": int(r.count), "errors": int(r.errors), "first_seen": first})
    for r in spikes_pd.sort_values(["topic", "minute"]).itertuples():
        events.append({"type": "error_spike", "topic": str(r.topic), "minute": r.minute.to_pydatetime().isoformat(),
                       "lines": int(r.lines), "errors": int(r.errors), "rate": float(r.rate),
                       "topic_rate": float(r.topic_rate), "z": float(r.z)})
    return events


def publish_events(spark: Any, events: list[dict[str, Any]], namesrv: str, topic: str) -> int:
    """Send ``events`` to ``topic`` (created when missing, 4 queues per broker group) with
    ``df.write.format("rocket")``: body = the event as JSON, tags = its type, keys = the source topic,
    properties ``eventType`` and ``sourceTopic``. Returns the number sent."""
    import asyncio
    import json

    from rocket.client import Admin

    async def create() -> None:
        async with Admin(namesrv) as admin:
            await admin.create_topic(topic, queue_nums=4)

    asyncio.run(create())
    if not events:
        return 0
    rows = [(topic, e["topic"], e["type"], {"eventType": e["type"], "sourceTopic": e["topic"]},
             json.dumps(e, sort_keys=True).encode()) for e in events]
    frame = spark.createDataFrame(rows, schema="topic string, key string, tags string, "
                                               "properties map<string,string>, body binary")
    frame.coalesce(1).write.format("rocket").mode("append").option("namesrv", namesrv).save()
    return len(rows)


def add_unread(topics_summary: dict[str, Any], input_topics: Sequence[str], planned: dict[str, int]) -> None:
    """Complete the per-topic summary: an input topic with no message gets an entry (``empty``), and a topic
    that gave fewer lines than ``planned`` its skipped ``unread`` count (deleted mid-read, offsets expired)."""
    for topic in input_topics:
        if topic not in topics_summary:  # an input topic with no message: reported, not an error
            topics_summary[topic] = {"system": loghub.system_of(topic), "lines": 0, "parsed": 0, "unparsed": 0,
                                     "mined": 0, "skipped": {}, "templates": 0, "levels": {}, "error_rate": None,
                                     "first_event": None, "last_event": None, "top_templates": [],
                                     "error_spikes": [], "accuracy": None, "empty": True}
    for topic, n in planned.items():
        t = topics_summary.get(topic)
        if t is not None and n > t["lines"]:
            t["skipped"] = {**t["skipped"], "unread": n - t["lines"]}


def events_summary(spark: Any, events: list[dict[str, Any]], namesrv: str, topic: str) -> dict[str, Any]:
    """Publish ``events`` (:func:`publish_events`) and count them: ``{"topic", "published", "new_templates",
    "error_spikes"}``."""
    sent = publish_events(spark, events, namesrv, topic)
    return {"topic": topic, "published": sent,
            "new_templates": sum(e["type"] == "new_template" for e in events),
            "error_spikes": sum(e["type"] == "error_spike" for e in events)}


def analyze_logs(df: Any, out_dir: str | Path, *, loghub_root: str | Path | None = None, top_n: int = 10,
                 input_info: dict[str, Any] | None = None, report: bool = True,
                 log_format: str | None = None, events_topic: str | None = None,
                 events_namesrv: str | None = None, planned: dict[str, int] | None = None) -> dict[str, Any]:
    """Run the logs job on a message DataFrame ``df`` and write everything under ``out_dir``.

    ``loghub_root``: where to look for ground truth (default: found by
    :func:`rocket.analytics.loghub.find_loghub_dir`). ``events_topic``: publish
    the events (:func:`log_events`: templates not in the previous run's
    ``out_dir/templates``, error spikes) there through ``events_namesrv``
    (:func:`publish_events`). ``planned``: messages per topic the read was
    planned to cover (:func:`rocket.analytics.jobs.common.planned_lines`); what
    was not read (a topic deleted mid-read, offsets expired) is reported as
    skipped ``unread``. Returns the summary
    (also written to ``summary.json``): per topic lines, parsed/unparsed,
    templates, level counts, error rate, top templates, spikes, accuracy;
    plus ``accuracy_mean`` over the topics with ground truth and ``phase_seconds``
    (wall seconds of the steps: ``mine_merge`` read, mine and merge templates;
    ``write_lines``; ``aggregate_write`` the per-minute, template and spike
    aggregates written; ``collect`` and ``collect_counts`` brought to the driver).
    """
    from pyspark.sql import functions as F

    clock = Stopwatch()
    phases: dict[str, float] = {}

    def lap(name: str) -> None:  # seconds per phase, in the summary
        phases[name] = round(clock.seconds - sum(phases.values()), 2)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(loghub_root) if loghub_root else loghub.find_loghub_dir()
    known = known_templates(out) if events_topic else set()
    mined = mine_lines(df, log_format).persist()
    lines = merge_lines(mined).persist()
    lap("mine_merge")
    small: list[Any] = []  # aggregates cached while they are written and collected
    try:
        write_parquet(lines.drop("line"), out / "lines", ["date", "topic"])
        mined.unpersist()  # lines holds everything now
        lap("write_lines")
        # one pass over the lines for everything counted per minute; the rest is derived from it
        is_error = F.col("level").isin("ERROR", "FATAL")
        per_minute = (lines.groupBy("topic", "system", "minute", "level", "skipped", "parsed",
                                    F.col("template").isNotNull().alias("mined"))
                      .agg(F.count("*").alias("count")).persist())
        small.append(per_minute)
        level_counts = (per_minute.groupBy(F.date_format("minute", "yyyy-MM-dd").alias("date"), "topic", "minute",
                                           F.coalesce("level", F.lit("SKIPPED")).alias("level"))
                        .agg(F.sum("count").alias("count")).persist())
        templates = (lines.where(F.col("template").isNotNull()).groupBy("topic", "system", "template_id", "template")
                     .agg(F.count("*").alias("count"),
                          F.sum(F.when(is_error, 1).otherwise(0)).alias("errors"),
                          F.min("event_time").alias("first_seen"), F.max("event_time").alias("last_seen")).persist())
        spikes = spike_minutes(per_minute.where("mined").groupBy("topic", "minute").agg(
            F.sum("count").alias("lines"), F.sum(F.when(is_error, F.col("count")).otherwise(0)).alias("errors"))
        ).persist()
        small += [level_counts, templates, spikes]
        write_parquet(level_counts, out / "level_counts", ["date", "topic"], small=True)
        write_parquet(templates, out / "templates", ["topic"], small=True)
        write_parquet(spikes, out / "error_spikes", ["topic"], small=True)
        lap("aggregate_write")
        levels_pd = level_counts.toPandas()
        templates_pd = templates.toPandas()
        spikes_pd = spikes.toPandas()
        lap("collect")
        per_topic_pd = (per_minute.groupBy("topic", "system", "skipped")
                        .agg(F.sum("count").alias("count"),
                             F.sum(F.when(F.col("parsed"), F.col("count")).otherwise(0)).alias("parsed")).toPandas())
        skipped_pd = per_topic_pd[per_topic_pd["skipped"].notna()][["topic", "skipped", "count"]]
        parsed_pd = per_topic_pd.groupby("topic", as_index=False)["parsed"].sum()
        systems: dict[str, Any] = {str(t): (None if s is None or s != s else str(s))
                   for t, s in per_topic_pd[["topic", "system"]].drop_duplicates().itertuples(index=False)}
        lap("collect_counts")
        with_truth = [t for t, sys_ in systems.items()
                      if root and sys_ and loghub.structured_path(root, sys_) is not None]
        truth_rows: dict[str, list[tuple[int | None, int | None, str, str | None]]] = {t: [] for t in with_truth}
        if with_truth:
            for r in (lines.where(F.col("topic").isin(with_truth))
                      .select("topic", "line_no", "template_id", "line", "template").collect()):
                truth_rows[r["topic"]].append((r["line_no"], r["template_id"], r["line"], r["template"]))
    finally:
        for frame in small:
            frame.unpersist()
        lines.unpersist()
        mined.unpersist()

    accuracies: dict[str, dict[str, Any]] = {}
    for topic, rows in truth_rows.items():
        truth = loghub.load_ground_truth(root, systems[topic]) if root else None
        if truth is not None:
            accuracies[topic] = topic_accuracy(systems[topic], rows, truth)
    per_topic: dict[str, dict[str, Any]] = {}
    levels: dict[str, dict[str, int]] = {}
    for topic, sub in levels_pd.groupby("topic"):
        lv = {str(k): int(v) for k, v in sub.groupby("level")["count"].sum().items()}
        levels[str(topic)] = lv
        total = int(sub["count"].sum())
        per_topic[str(topic)] = {
            "system": systems.get(str(topic)),
            "lines": total,
            "parsed": int(parsed_pd.loc[parsed_pd["topic"] == topic, "parsed"].sum()),
            "skipped": {str(r.skipped): int(r.count) for r in skipped_pd[skipped_pd["topic"] == topic].itertuples()},
            "templates": int((templates_pd["topic"] == topic).sum()),
            "first_event": sub["minute"].min().to_pydatetime(),
            "last_event": sub["minute"].max().to_pydatetime(),
        }
    top: dict[str, list[dict[str, Any]]] = {}
    for topic, sub in templates_pd.groupby("topic"):
        best = sub.sort_values(["count", "template_id"], ascending=[False, True]).head(top_n)
        top[str(topic)] = [{"template_id": int(r.template_id), "template": r.template, "count": int(r.count),
                            "errors": int(r.errors)} for r in best.itertuples()]
    spike_rows: dict[str, list[dict[str, Any]]] = {}
    for r in spikes_pd.sort_values(["topic", "z"], ascending=[True, False]).itertuples():
        spike_rows.setdefault(str(r.topic), []).append(
            {"minute": r.minute.to_pydatetime(), "lines": int(r.lines), "errors": int(r.errors),
             "rate": float(r.rate), "topic_rate": float(r.topic_rate), "z": float(r.z)})

    topics_summary: dict[str, Any] = {}
    for topic in sorted(per_topic):
        info = per_topic[topic]
        lv = levels.get(topic, {})
        parsed = int(info["parsed"] or 0)
        skipped = info.get("skipped", {})
        mined = int(info["lines"]) - sum(skipped.values())
        errors = lv.get("ERROR", 0) + lv.get("FATAL", 0)
        topics_summary[topic] = {
            "system": info.get("system"),
            "lines": int(info["lines"]),
            "parsed": parsed,
            "unparsed": mined - parsed,
            "mined": mined,
            "skipped": skipped,
            "templates": int(info["templates"]),
            "levels": dict(sorted(lv.items())),
            "error_rate": errors / mined if mined else None,
            "first_event": info.get("first_event"),
            "last_event": info.get("last_event"),
            "top_templates": top.get(topic, []),
            "error_spikes": spike_rows.get(topic, []),
            "accuracy": accuracies.get(topic),
        }
    add_unread(topics_summary, (input_info or {}).get("topics", []), planned or {})
    values = [a["accuracy"] for a in accuracies.values() if a.get("accuracy") is not None]
    summary: dict[str, Any] = {
        "job": "logs",
        "generated_at": utc_now(),
        "input": input_info or {},
        "ground_truth": str(root) if root else None,
        "totals": {
            "topics": len(topics_summary),
            "lines": sum(t["lines"] for t in topics_summary.values()),
            "parsed": sum(t["parsed"] for t in topics_summary.values()),
            "unparsed": sum(t["unparsed"] for t in topics_summary.values()),
            "skipped": sum(sum(t["skipped"].values()) for t in topics_summary.values()),
            "skipped_by_reason": {reason: sum(t["skipped"].get(reason, 0) for t in topics_summary.values())
                                  for reason in (*SKIP_REASONS, "unread")},
            "templates": sum(t["templates"] for t in topics_summary.values()),
            "error_spikes": sum(len(t["error_spikes"]) for t in topics_summary.values()),
        },
        "accuracy_mean": sum(values) / len(values) if values else None,
        "drain_published_mean": loghub.DRAIN_PUBLISHED_MEAN,
        "topics": topics_summary,
        "outputs": {name: str(out / name) for name in ("lines", "level_counts", "templates", "error_spikes")},
        "seconds": round(clock.seconds, 2),
        "phase_seconds": phases,
    }
    if events_topic:
        namesrv = events_namesrv or (input_info or {}).get("namesrv")
        if not namesrv:
            raise JobInputError("publishing events needs a NameServer (--namesrv)")
        summary["events"] = events_summary(df.sparkSession, log_events(templates_pd, spikes_pd, known), namesrv,
                                           events_topic)
    if report:
        from rocket.analytics.report import logs_report

        summary["outputs"]["report"] = logs_report(summary, levels_pd, spikes_pd, out)
    summary["outputs"]["summary"] = str(out / "summary.json")
    write_json(summary, out / "summary.json")
    return summary


def run_logs_job(namesrv: str, topics: list[str], out_dir: Path, log_format: str | None = None,
                 events_topic: str | None = None) -> dict[str, Any]:
    """The logs job on ``topics`` of a running cluster (``make run`` calls this after publishing LogHub).

    Reads every message from earliest to latest with ``format("rocket")`` on a
    ``local[2]`` SparkSession (reused when one is active; stopped again when
    this call created it), writes Parquet + ``summary.json`` + ``report.md``
    under ``out_dir`` and returns the summary dict (see :func:`analyze_logs`).
    Raises ``JobInputError`` for an empty topic list, and Spark's exception
    (its message naming the topic) when a topic does not exist.
    """
    from pyspark.sql import SparkSession

    from rocket.analytics.session import spark_session

    spec = InputSpec(namesrv=namesrv, topics=tuple(topics), fail_on_data_loss=False)
    planned = planned_lines(spec)
    active = SparkSession.getActiveSession()
    spark = spark_session("rocket-logs")
    try:
        return analyze_logs(input_frame(spark, spec), out_dir, input_info=spec.describe(), log_format=log_format,
                            events_topic=events_topic, events_namesrv=namesrv, planned=planned)
    finally:
        if active is None:
            spark.stop()


# -- --follow: Structured Streaming ------------------------------------------------------------------


class FollowState:
    """What ``--follow`` keeps between micro-batches, in ``<out>/state/templates.json``: per topic, every
    template seen with its line count. Saved after each batch (write then rename), so a restarted query (its
    offsets in the Spark checkpoint) goes on with the templates it knew."""

    def __init__(self, out: Path) -> None:
        self.path = out / "state" / "templates.json"
        self.templates: dict[str, dict[str, int]] = {}
        if self.path.exists():
            import json

            self.templates = json.loads(self.path.read_text(encoding="utf-8"))

    def save(self) -> None:
        """Write the state atomically."""
        import json

        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.templates, sort_keys=True), encoding="utf-8")
        tmp.replace(self.path)


def follow_batch(batch: Any, batch_id: int, out: Path, state: FollowState, *, log_format: str | None = None,
                 events_topic: str | None = None, events_namesrv: str | None = None) -> dict[str, Any]:
    """One micro-batch of ``--follow``: mine it, merge its templates with the known ones, append its lines to
    ``<out>/lines``, and publish a ``new_template`` event for each template not seen before and an
    ``error_spike`` event for each spike minute of the batch (:func:`log_events`). Returns
    ``{"batch", "lines", "new_templates", "error_spikes", "published"}``. At least once: a batch Spark
    retries may publish its events again."""
    from pyspark.sql import functions as F

    mined = mine_lines(batch, log_format).persist()
    try:
        known = {t: list(v) for t, v in state.templates.items()}
        lines = merge_lines(mined, known=known).persist()
        try:
            n = lines.count()
            if n:
                write_parquet_append(lines.drop("line"), out / "lines", ["date", "topic"])
            templates_pd = (lines.where(F.col("template").isNotNull())
                            .groupBy("topic", "template_id", "template")
                            .agg(F.count("*").alias("count"),
                                 F.sum(F.when(F.col("level").isin("ERROR", "FATAL"), 1).otherwise(0)).alias("errors"),
                                 F.min("event_time").alias("first_seen")).toPandas())
            spikes_pd = error_spikes(lines).toPandas()
        finally:
            lines.unpersist()
    finally:
        mined.unpersist()
    from rocket.analytics.mining import template_id as tid_of

    seen = {(topic, tid_of(t)) for topic, ts in state.templates.items() for t in ts}
    events = log_events(templates_pd, spikes_pd, seen)
    for r in templates_pd.itertuples():
        per = state.templates.setdefault(str(r.topic), {})
        per[str(r.template)] = per.get(str(r.template), 0) + int(r.count)
    state.save()
    sent = 0
    if events_topic and events_namesrv:
        sent = publish_events(batch.sparkSession, events, events_namesrv, events_topic)
    result = {"batch": batch_id, "lines": n, "published": sent,
              "new_templates": sum(e["type"] == "new_template" for e in events),
              "error_spikes": sum(e["type"] == "error_spike" for e in events)}
    log.info("micro-batch %d: %s", batch_id, result)
    return result


def write_parquet_append(df: Any, path: Path, partition_by: Sequence[str]) -> None:
    """Append ``df`` to the Parquet dataset at ``path``, partitioned by ``partition_by``."""
    df.write.mode("append").partitionBy(*partition_by).parquet(str(path))


def follow_logs(spark: Any, spec: InputSpec, out_dir: str | Path, *, checkpoint: str | Path | None = None,
                trigger_seconds: float = 10.0, log_format: str | None = None, events_topic: str | None = None
                ) -> Any:
    """Start ``--follow``: ``readStream.format("rocket")`` on ``spec``'s topics, :func:`follow_batch` per
    micro-batch every ``trigger_seconds``; offsets in ``checkpoint`` (default ``<out>/checkpoint``), templates
    in :class:`FollowState`. Returns the running ``StreamingQuery``. Raises :class:`JobInputError` without a
    cluster input."""
    if not spec.namesrv or not spec.topics:
        raise JobInputError("--follow reads from a cluster: give --namesrv and --topics")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = FollowState(out)
    stream = (spark.readStream.format("rocket").option("namesrv", spec.namesrv)
              .option("topic", ",".join(spec.topics)).option("startingOffsets", spec.starting_offsets)
              .option("failOnDataLoss", "false").load())

    def handle(batch: Any, batch_id: int) -> None:
        follow_batch(batch, batch_id, out, state, log_format=log_format, events_topic=events_topic,
                     events_namesrv=spec.namesrv)

    return (stream.writeStream.foreachBatch(handle)
            .option("checkpointLocation", str(checkpoint or out / "checkpoint"))
            .trigger(processingTime=f"{trigger_seconds} seconds").start())


def build_parser() -> argparse.ArgumentParser:
    """The logs job's command-line flags (input flags of :func:`add_input_arguments` and the job's own)."""
    parser = argparse.ArgumentParser(prog="logs", description="Log analytics for any topic: headers, templates, "
                                                              "levels, spikes, events")
    add_input_arguments(parser)
    parser.add_argument("--ground-truth", default=None, help="LogHub folder with *_structured.csv")
    parser.add_argument("--top", type=int, default=10, help="templates per topic in the summary")
    parser.add_argument("--events-topic", default=None,
                        help="publish the job's events (new templates, error spikes) to this topic, as JSON")
    parser.add_argument("--follow", action="store_true",
                        help="keep running (Structured Streaming): mine each micro-batch, publish new templates "
                             "and error spikes as they come")
    parser.add_argument("--trigger-seconds", type=float, default=10.0, help="with --follow: the trigger interval")
    parser.add_argument("--checkpoint", default=None, help="with --follow: checkpoint dir (default <out>/checkpoint)")
    parser.add_argument("--log-format", default=None,
                        help="header format: 'auto' (learned per topic, the default), a LogHub preset name "
                             "(HDFS, Spark...) or loghub notation '<Date> <Time> <Level> <Component>: <Content>'")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit .../jobs/logs.py --namesrv H:P --topics T1,T2 --out DIR`` (or ``--commitlog``/``--loghub``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        header.resolve(args.log_format)
    except (ValueError, re.error) as exc:
        parser.error(str(exc))
    from rocket.analytics.session import spark_session

    spec = input_spec(args)
    if args.follow:
        spark = spark_session("rocket-logs-follow", master=args.master)
        query = follow_logs(spark, spec, args.out, checkpoint=args.checkpoint, trigger_seconds=args.trigger_seconds,
                            log_format=args.log_format, events_topic=args.events_topic)
        query.awaitTermination()
        return 0
    spec.fail_on_data_loss = False  # a topic deleted mid-read or expired offsets: reported as skipped "unread"
    planned = planned_lines(spec)
    spark = spark_session("rocket-logs", master=args.master)
    summary = analyze_logs(input_frame(spark, spec), args.out, loghub_root=args.ground_truth, top_n=args.top,
                           input_info=spec.describe(), log_format=args.log_format,
                           events_topic=args.events_topic, events_namesrv=args.namesrv, planned=planned)
    print_summary(summary)
    return 0


def print_summary(summary: dict[str, Any], stream: Any = None) -> None:
    """A plain-text table of the summary: per topic lines, unparsed (no header), skipped, templates, error
    rate and, with ground truth, GA (beside Drain's published GA), PA, FGA, FTA; then their means."""
    stream = stream or sys.stdout
    print(f"{'topic':22} {'lines':>7} {'nohdr':>6} {'skipped':>7} {'tmpl':>5} {'err':>6} {'GA':>6} {'Drain':>6} "
          f"{'PA':>6} {'FGA':>6} {'FTA':>6}", file=stream)

    def f(x: Any) -> str:
        return "" if x is None else f"{x:.3f}"

    scored: list[dict[str, Any]] = []
    for topic, t in summary["topics"].items():
        acc = t.get("accuracy") or {}
        if acc.get("accuracy") is not None:
            scored.append(acc)
        print(f"{topic:22} {t['lines']:>7} {t['unparsed']:>6} {sum(t.get('skipped', {}).values()):>7} "
              f"{t['templates']:>5} {f(t.get('error_rate')):>6} {f(acc.get('accuracy')):>6} "
              f"{f(acc.get('drain_published')):>6} {f(acc.get('pa')):>6} {f(acc.get('fga')):>6} "
              f"{f(acc.get('fta')):>6}", file=stream)
    if scored:
        means = {k: sum(a.get(k) or 0.0 for a in scored) / len(scored) for k in ("accuracy", "pa", "fga", "fta")}
        print(f"mean over {len(scored)} topics with ground truth: GA {means['accuracy']:.3f} (Drain published "
              f"{summary['drain_published_mean']:.3f}, tuned per system) PA {means['pa']:.3f} "
              f"FGA {means['fga']:.3f} FTA {means['fta']:.3f}; one default setting, headers learned",
              file=stream)
        from rocket.analytics.evaluate import REPORT_SYSTEMS, SELECTION_SYSTEMS

        for label, systems in (("selection", SELECTION_SYSTEMS), ("report", REPORT_SYSTEMS)):
            part = [t["accuracy"]["accuracy"] for t in summary["topics"].values()
                    if t.get("system") in systems and (t.get("accuracy") or {}).get("accuracy") is not None]
            if part:
                how = "chosen on" if label == "selection" else "not tuned on"
                print(f"  GA on the {label} systems (the setting was {how} them): {sum(part) / len(part):.3f} "
                      f"({len(part)} topics)", file=stream)
    print(f"outputs: {summary['outputs'].get('report', summary['outputs'].get('summary'))}", file=stream)


if __name__ == "__main__":
    sys.exit(main())
