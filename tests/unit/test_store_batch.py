"""The batch send's store path (:class:`PutMessageBatch`, ``DefaultMessageStore.put_batch_nowait``)
against the store requests' path (``put_messages``): same files, same answers, same refusals."""

from __future__ import annotations

import random
from pathlib import Path

from rocket.message import MAX_PROPERTIES_SIZE, decode_record, encode_properties
from rocket.store import DefaultMessageStore
from rocket.store.api import PutMessageBatch, PutMessageResult, PutMessageStatus
from tests.store_helpers import opened, small_config


def _batches(rng: random.Random) -> list[PutMessageBatch]:
    out = []
    for n in range(40):
        count = rng.randrange(1, 6)
        props = []
        keys: list[list[str]] = []
        uniq: list[str | None] = []
        for i in range(count):
            k = rng.choice([[], ["a"], ["k1", "k2"]])
            u = rng.choice([None, f"UNIQ{n:04d}{i:04d}AAAAAAAAAAAAAAAAAAAA"])
            fields = {"WAIT": "true", "CLUSTER": "c"}
            if k:
                fields["KEYS"] = " ".join(k)
            if u:
                fields["UNIQ_KEY"] = u
            props.append(encode_properties(fields).encode())
            keys.append(k)
            uniq.append(u)
        bodies: list[bytes | memoryview] = [rng.randbytes(rng.randrange(0, 900)) for _ in range(count)]
        if n % 2:  # as a batch send has them: views of one request body (rocket.message.split_batch)
            whole = memoryview(b"-".join(bodies))
            starts = [sum(len(b) + 1 for b in bodies[:i]) for i in range(count)]
            bodies = [whole[at : at + len(b)] for at, b in zip(starts, bodies, strict=True)]
        out.append(PutMessageBatch(
            topic=rng.choice(["T1", "T2"]), queue_id=rng.randrange(2),
            bodies=bodies, properties=props,
            flags=[rng.randrange(-5, 5) for _ in range(count)], tags_codes=[rng.randrange(-9, 9) for _ in range(count)],
            keys=keys, uniq_keys=uniq, sys_flag=rng.choice([0, 0, 0, 0x8, 0xC]), born_timestamp=rng.randrange(1 << 41),
            born_host=rng.choice(["10.0.0.1:5555", "[::1]:7"]), reconsume_times=rng.randrange(3),
            wait_store_msg_ok=rng.random() < 0.5, indexed=any(keys) or any(u is not None for u in uniq)))
    return out


async def _put(store: DefaultMessageStore, batch: PutMessageBatch, whole: bool) -> PutMessageResult:
    if not whole:
        return await store.put_messages(batch.to_requests())
    put = store.put_batch_nowait(batch)
    return put if isinstance(put, PutMessageResult) else await put


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and (p.parent.name in ("commitlog", "index") or "consumequeue" in p.parts)}


async def test_a_batch_is_stored_as_its_store_requests_are(tmp_path: Path) -> None:
    """Byte-identical CommitLog, ConsumeQueue and IndexFile files across segment rolls, IPv4 and IPv6
    born hosts, transactional (commit, rollback) sysFlags; the same results, ids joined by commas."""
    results: dict[bool, list[tuple[object, ...]]] = {}
    for whole in (False, True):
        root = tmp_path / str(whole)
        async with opened(small_config(root), clock=lambda: 1_700_000_000.0) as store:
            got = []
            for batch in _batches(random.Random(5)):
                r = await _put(store, batch, whole)
                assert r.status is PutMessageStatus.PUT_OK, r
                got.append((r.messages, r.msg_ids or ",".join(m.msg_id for m in r.messages)))
                if whole:
                    assert r.msg_ids == ",".join(m.msg_id for m in r.messages)
            await store.flush()
        results[whole] = got
    assert results[True] == results[False]
    assert _files(tmp_path / "True") == _files(tmp_path / "False")
    assert len(_files(tmp_path / "True")) > 3


async def test_a_batch_is_refused_as_its_store_requests_are(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path, max_message_size=100)) as store:
        batch = PutMessageBatch("T", 0, [b"x", b"y" * 101], [b"", b""], [0, 0], [0, 0], [[], []], [None, None])
        assert batch.lengths() == (101, 0, 102)  # longest body, longest properties, all bodies' bytes
        for b in (batch, PutMessageBatch("T", 0, [b"x"], [b"p" * (MAX_PROPERTIES_SIZE + 1)], [0], [0], [[]], [None]),
                  PutMessageBatch("T", -1, [b"x"], [b""], [0], [0], [[]], [None]),
                  PutMessageBatch("", 0, [b"x"], [b""], [0], [0], [[]], [None])):
            whole = store.put_batch_nowait(b)
            assert isinstance(whole, PutMessageResult)
            each = await store.put_messages(b.to_requests())
            assert (whole.status, whole.remark) == (each.status, each.remark)
            assert whole.status is not PutMessageStatus.PUT_OK
        assert store.commit_log.append_offset == 0


async def test_a_batch_that_fails_to_encode_leaves_nothing_of_itself_in_the_log(tmp_path: Path) -> None:
    """The CommitLog keeps a batch's record parts unjoined until the write: when a record fails to
    pack part-way (a flag beyond int32), the parts of the records before it must not be written
    ahead of the next put. The refusal is a status (MESSAGE_ILLEGAL), as every store refusal is,
    for the batch and for the same messages as requests."""
    async with opened(small_config(tmp_path)) as store:
        bad = PutMessageBatch("T", 0, [b"first", b"second"], [b"", b""], [0, 1 << 40], [0, 0], [[], []], [None, None])
        whole = store.put_batch_nowait(bad)
        each = await store.put_messages(bad.to_requests())
        for refused in (whole, each):
            assert isinstance(refused, PutMessageResult)
            assert refused.status is PutMessageStatus.MESSAGE_ILLEGAL and "out of range" in refused.remark
        assert store.commit_log.append_offset == 0 and store.stats.put_rejected == 2
        ok = await store.put_messages(bad.to_requests()[:1])
        assert ok.status is PutMessageStatus.PUT_OK and ok.messages[0].physical_offset == 0
    async with opened(small_config(tmp_path)) as store:
        got = store.get_message("T", 0, 0, 32)
        assert [decode_record(r, check_crc=True).body for r in got.records] == [b"first"]
        assert store.commit_log.append_offset == ok.messages[0].size
