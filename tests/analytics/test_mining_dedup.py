"""The miner's de-duplication and token cache give exactly the templates of mining every line; the job's
Arrow partition function gives exactly the rows of the row-by-row one. No Spark."""

from __future__ import annotations

import random
from dataclasses import replace

import pyarrow as pa

from rocket.analytics import loghub
from rocket.analytics.jobs.logs import lines_arrow_schema, mine_partition, mine_topic_rows
from rocket.analytics.mining import (
    _DIGIT_SHAPE,
    DEFAULT_SETTINGS,
    DIGIT_BLIND,
    MinerSettings,
    MiningResult,
    TokenCache,
    _digit_blind,
    _mine_tokens,
    merge_templates,
    mine,
    template_id,
    tokenize,
)

from .nginx_like import nginx_lines


def _mine_every_line(contents: list[str], settings: MinerSettings) -> MiningResult:
    """The miner without de-duplication or cache: every line tokenized and mined (the reference)."""
    texts: list[str] = []
    for start in range(0, len(contents), settings.chunk_lines):
        chunk = [tokenize(c, settings) for c in contents[start:start + settings.chunk_lines]]
        texts.extend(_mine_tokens(chunk, settings))
    canonical = merge_templates(texts, settings.merge_min_constant)
    result = MiningResult()
    for text in texts:
        merged = canonical.get(text, text)
        tid = template_id(merged)
        result.cluster_ids.append(tid)
        result.templates[tid] = merged
        result.sizes[tid] = result.sizes.get(tid, 0) + 1
    return result


def _varied_lines(n: int, seed: int = 5) -> list[str]:
    """Lines with repeats, dates, UUIDs, key=value pairs, hosts and quantities (every mask at work)."""
    rnd = random.Random(seed)
    lines, _ = nginx_lines(n, seed=seed)
    extra = ("session 3f2a9c1e-1b2c-4d5e-8f90-a1b2c3d4e5f6 opened for user=alice on db{}.prod.example.com",
             "Jan  3 10:0{}:07 took 35 ms, sent 1.2 KB to 10.0.0.{}",
             "retry {} of 5 for job id:{} state=WAITING",
             "plain words only")
    out = []
    for line in lines:
        out.append(line)
        if rnd.random() < 0.4:
            template = rnd.choice(extra)
            out.append(template.format(*(rnd.randrange(10) for _ in range(template.count("{}")))))
    return out


def test_dedup_mining_equals_mining_every_line_across_chunks() -> None:
    lines = _varied_lines(3000)
    for settings in (DEFAULT_SETTINGS, replace(DEFAULT_SETTINGS, chunk_lines=700)):
        got, want = mine(lines, settings), _mine_every_line(lines, settings)
        assert got.cluster_ids == want.cluster_ids
        assert got.templates == want.templates and got.sizes == want.sizes
    root = loghub.find_loghub_dir()  # the bundled sample at least
    assert root is not None
    for system, sample in loghub.iter_system_logs(root):
        assert mine(sample).cluster_ids == _mine_every_line(sample, DEFAULT_SETTINGS).cluster_ids, system


def test_token_cache_keys_by_digit_shape_only_when_every_mask_is_digit_blind() -> None:
    assert DIGIT_BLIND
    assert _digit_blind(r"\b\d{1,2}:\d\d [0-9a-fA-F]{8}") and not _digit_blind(r"0x[0-9a-f]+")
    assert not _digit_blind(r"port 8080")
    cache = TokenCache(max_entries=4)
    for line in _varied_lines(500):
        shaped = tokenize(line.translate(_DIGIT_SHAPE))
        if not any(c.isdigit() for t in shaped for c in t):
            assert shaped == tokenize(line)
        assert cache.tokens(line) == tokenize(line)
    assert len(cache._by_shape) <= 4 and len(cache._by_content) <= 4  # bounded


def test_token_cache_keeps_the_digits_a_token_keeps_and_reads_a_leading_0x() -> None:
    # under the default (subword) rule SOCKS5 is a constant: a line with SOCKS4 must not get SOCKS5's tokens
    cache = TokenCache()
    for line in ("open through proxy host:1080 SOCKS5", "open through proxy host:1080 SOCKS4",
                 "flags 0x1abcdef set", "flags 1x1abcdef set", "flags 2xabcdefg set", "flags 0xabcdefg set"):
        assert cache.tokens(line) == tokenize(line), line
    assert tokenize("open through proxy host:1080 SOCKS4")[-1] == "SOCKS4"


def _batches(rows: list[tuple[str, bytes]], size: int) -> list[pa.RecordBatch]:
    cols = {"topic": [t for t, _ in rows], "tags": [None] * len(rows), "keys": [None] * len(rows),
            "broker_name": ["broker-a"] * len(rows), "queue_id": [1] * len(rows),
            "queue_offset": list(range(len(rows))), "store_ms": [1_700_000_000_000 + i for i in range(len(rows))],
            "line": [b for _, b in rows]}
    types = {"topic": pa.string(), "tags": pa.string(), "keys": pa.string(), "broker_name": pa.string(),
             "queue_id": pa.int32(), "queue_offset": pa.int64(), "store_ms": pa.int64(), "line": pa.binary()}
    table = pa.table({k: pa.array(v, type=types[k]) for k, v in cols.items()})
    return table.to_batches(max_chunksize=size)


def test_arrow_partition_equals_row_by_row_mining_per_topic_and_chunk() -> None:
    a, _ = nginx_lines(900, seed=11)
    b = _varied_lines(400, seed=12)
    rows: list[tuple[str, bytes]] = []
    for i in range(max(len(a), len(b))):  # two topics interleaved, bad bodies among them
        if i < len(a):
            rows.append(("app-a", a[i].encode()))
        if i < len(b):
            rows.append(("app-b", b[i].encode() if i % 97 else b"\x00\x01binary"))
    settings = replace(DEFAULT_SETTINGS, chunk_lines=250)
    out = pa.Table.from_batches(list(mine_partition(iter(_batches(rows, 64)), settings=settings)),
                                schema=lines_arrow_schema())
    got: dict[str, list[dict[str, object]]] = {}
    for row in out.to_pylist():
        got.setdefault(str(row["topic"]), []).append(row)
    for topic in ("app-a", "app-b"):
        records = [{"topic": t, "line": body, "broker_name": "broker-a", "queue_id": 1, "queue_offset": off,
                    "store_ms": 1_700_000_000_000 + off, "keys": None, "tags": None}
                   for off, (t, body) in enumerate(rows) if t == topic]
        want = [r for start in range(0, len(records), 250)
                for r in mine_topic_rows(records[start:start + 250], settings=settings)]
        assert got[topic] == want, topic
