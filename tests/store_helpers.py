"""Helpers for the message store tests: small configs, requests, an opened store."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

from rocket.message import encode_properties, tags_hash_code
from rocket.store import DefaultMessageStore, FlushDiskType, MessageStoreConfig, PutMessageRequest


def small_config(root: Path, **overrides: Any) -> MessageStoreConfig:
    """A store config with tiny files, so that tests roll segments, CQ files and index files."""
    values: dict[str, Any] = dict(
        store_path_root_dir=root,
        mapped_file_size_commit_log=16 * 1024,
        mapped_file_size_consume_queue=20 * 32,
        max_hash_slot_num=16,
        max_index_num=64,
        flush_disk_type=FlushDiskType.ASYNC_FLUSH,
        flush_interval_commit_log=0.05,
        flush_interval_consume_queue=0.1,
        clean_resource_interval=3600.0,
        flush_consumer_offset_interval=3600.0,
        delete_when="99",
    )
    values.update(overrides)
    return MessageStoreConfig(**values)


def make_request(topic: str = "TopicA", queue_id: int = 0, body: bytes = b"hello", *, tags: str | None = None,
                 keys: Iterable[str] = (), uniq: str | None = None, **fields: Any) -> PutMessageRequest:
    """A request whose properties carry the tags, keys and UNIQ_KEY as a broker would set them."""
    keys = list(keys)
    props: dict[str, str] = {}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = " ".join(keys)
    if uniq:
        props["UNIQ_KEY"] = uniq
    return PutMessageRequest(topic=topic, queue_id=queue_id, body=body, properties=encode_properties(props),
                             tags_code=tags_hash_code(tags), keys=keys, uniq_key=uniq, **fields)


def patch_file(path: Path, offset: int, data: bytes) -> bytes:
    """Overwrite ``len(data)`` bytes of ``path`` at ``offset`` (simulated damage); returns the old bytes."""
    with open(path, "r+b") as fh:
        fh.seek(offset)
        old = fh.read(len(data))
        fh.seek(offset)
        fh.write(data)
    return old


def body_hash(body: bytes) -> str:
    """Short content hash used by crash tests."""
    return hashlib.sha1(body).hexdigest()[:16]


@contextlib.asynccontextmanager
async def opened(config: MessageStoreConfig, **kwargs: Any) -> AsyncIterator[DefaultMessageStore]:
    """A started store, shut down at the end of the block."""
    store = DefaultMessageStore(config, **kwargs)
    await store.start()
    try:
        yield store
    finally:
        await store.shutdown()
