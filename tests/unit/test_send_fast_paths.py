"""The send path's shortcuts give exactly what the general code gives.

Covers: the SUCCESS frame written without a RemotingCommand, properties plus
CLUSTER by appending, the V2 header fast path, the lock-free counters and
histogram against prometheus-client's own, the frame decoder fed in pieces,
and the producer's properties string.
"""

from __future__ import annotations

import random
import re
import struct
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from rocket.broker.headers import SendMessageRequestHeader
from rocket.broker.inner import cached_tags_code
from rocket.broker.metrics import FastCounter, FastHistogram
from rocket.broker.processor.send import SendMessageProcessor, send_ok_frame, with_cluster
from rocket.client.producer import Producer
from rocket.message import Message, decode_properties, encode_properties
from rocket.protocol import TopicConfig
from rocket.remoting import RemotingCommand
from rocket.remoting.command import FrameDecoder, FrameError, encode
from rocket.store.api import PutMessageBatch
from tests.support import unconnected_connection


def test_send_ok_frame_is_the_encoded_response() -> None:
    request = RemotingCommand(code=310, opaque=123456, ext_fields={})
    for msg_id, queue_id, offset in (("7F00000100002A9F0000000000123456", 3, 12345), ("AB,CD", 0, 0)):
        generic = encode(SendMessageProcessor._response(request, 0, None, msg_id, queue_id, offset))
        assert send_ok_frame(123456, msg_id, queue_id, offset) == generic
        assert send_ok_frame(123456, msg_id, queue_id, offset, store_ids=True) == generic


@pytest.mark.parametrize("msg_id", ['a"b', "a\\b", "a\nb", "é"])
def test_send_ok_frame_declines_ids_json_would_escape(msg_id: str) -> None:
    assert send_ok_frame(1, msg_id, 0, 0) is None


@pytest.mark.parametrize("text", [
    "", "A\x01b", "A\x01b\x02", "A\x01b\x02C\x01d\x02", "A\x01b\x02A\x01c", "\x01x\x02A\x01b", "A\x01b\x02\x02",
    "A\x01\x01b", "Ab", "A\x01b\x02Cd\x02", "\x02", "UNIQ_KEY\x01X\x02WAIT\x01true\x02TAGS\x01t",
])
def test_with_cluster_matches_encoding_the_dict(text: str) -> None:
    props = decode_properties(text)
    appended = with_cluster(text, len(props), "DefaultCluster")
    props["CLUSTER"] = "DefaultCluster"
    assert appended is None or appended == encode_properties(props)


def test_v2_header_fast_path_agrees_with_the_general_reading() -> None:
    ext = {"a": "g", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1763793600000", "h": "0",
           "i": "WAIT\x01true", "j": "0", "k": "false", "l": "16", "m": "false", "n": "broker-a"}
    fast = SendMessageRequestHeader.parse(RemotingCommand(code=310, ext_fields=ext))
    general = SendMessageRequestHeader.parse(RemotingCommand(code=10, ext_fields=fast.to_ext_fields(v2=False)))
    assert fast == general
    odd = dict(ext, k="TRUE", m="1")  # not canonical: read by the general code
    assert SendMessageRequestHeader.parse(RemotingCommand(code=310, ext_fields=odd)).unit_mode is True
    assert SendMessageRequestHeader.parse(RemotingCommand(code=320, ext_fields=ext)).batch is True


def _exposition(registry: CollectorRegistry) -> str:
    return re.sub(r"(_created(\{[^}]*\})?) \S+", r"\1 <ts>", generate_latest(registry).decode())


def test_fast_counter_and_histogram_export_as_prometheus_client_does() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    c1 = FastCounter("x_messages", "Messages", ["topic", "group"], registry=ours)
    c2 = Counter("x_messages", "Messages", ["topic", "group"], registry=theirs)
    h1 = FastHistogram("x_latency_seconds", "Latency", buckets=(0.001, 0.01, 0.1), registry=ours)
    h2 = Histogram("x_latency_seconds", "Latency", buckets=(0.001, 0.01, 0.1), registry=theirs)
    for topic, group, n in (("T", "G", 3), ("U", "G", 1), ("T", "G", 2)):
        c1.labels(topic, group).inc(n)
        c2.labels(topic, group).inc(n)
    for v in (0.0001, 0.001, 0.005, 0.05, 0.5, 7.0):
        h1.observe(v)
        h2.observe(v)
    assert _exposition(ours) == _exposition(theirs)


def test_frame_decoder_fed_in_any_pieces() -> None:
    rng = random.Random(7)
    commands = [RemotingCommand(code=310, opaque=i, ext_fields={"a": "x" * rng.randint(0, 40)},
                                body=bytes(rng.randint(0, 3000))) for i in range(200)]
    stream = b"".join(encode(c) for c in commands)
    for _ in range(30):
        decoder = FrameDecoder()
        out: list[RemotingCommand] = []
        pos = 0
        while pos < len(stream):
            n = rng.choice([1, 2, 3, 4, 5, 7, 100, 1000, 5000, 65536])
            out += decoder.feed(stream[pos:pos + n])
            pos += n
        assert [(c.opaque, c.ext_fields, c.body) for c in out] == [(c.opaque, c.ext_fields, c.body) for c in commands]
        assert decoder.buffered == 0


def test_frame_decoder_checks_a_held_over_length() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    assert decoder.feed(b"\x00\x00") == []
    with pytest.raises(FrameError):
        decoder.feed(b"\x10\x00")


@pytest.mark.parametrize("props", [
    {}, {"TAGS": "a"}, {"TAGS": "a", "WAIT": "false"}, {"UNIQ_KEY": "X"}, {"UNIQ_KEY": ""},
    {"UNIQ_KEY": "", "TAGS": "t"}, {"UNIQ_KEY": "X", "WAIT": "true", "KEYS": "k"}, {"WAIT": "false"},
])
def test_producer_properties_string(props: dict[str, str]) -> None:
    msg = Message("T", b"x" * 10, 0, dict(props))
    _, _, text, uniq = Producer("g")._prepare(msg)
    expected = dict(props)
    if not expected.get("UNIQ_KEY"):
        expected["UNIQ_KEY"] = uniq
    expected.setdefault("WAIT", "true")
    assert text == encode_properties(expected)
    assert msg.properties == props


def _batch_reference(batch_text: str, item_text: str,
                     cluster: str = "DefaultCluster") -> tuple[str, list[str], int, str | None, bool]:
    """What a batch item is stored with, the plain way: merged dict (item wins) plus CLUSTER, encoded."""
    props = {**decode_properties(batch_text), **decode_properties(item_text)}
    props["CLUSTER"] = cluster
    keys = props.get("KEYS")
    wait = props.get("WAIT")
    return (encode_properties(props), [k for k in keys.split(" ") if k] if keys else [],
            cached_tags_code(props.get("TAGS")), props.get("UNIQ_KEY") or None, wait is None or wait.lower() != "false")


def test_batch_items_are_stored_with_the_merged_properties() -> None:
    """The batch path joins strings when batch and item properties are disjoint; whatever the
    strings, each store request carries what merging the dicts and encoding them gives."""
    rng = random.Random(7)
    names = ["WAIT", "UNIQ_KEY", "KEYS", "TAGS", "CLUSTER", "X", "", "DELAY"]
    values = ["", "true", "false", "a b", "0", "v"]

    def text() -> str:
        pieces = [f"{rng.choice(names)}\x01{rng.choice(values)}" for _ in range(rng.randrange(0, 4))]
        if rng.random() < 0.1:
            pieces.append(rng.choice(["odd", ""]))
        return "\x02".join(pieces) + ("\x02" if rng.random() < 0.3 else "")

    broker = SimpleNamespace(config=SimpleNamespace(broker_cluster_name="DefaultCluster", max_message_size=1 << 22))
    processor = SendMessageProcessor(broker)  # type: ignore[arg-type]
    conn = unconnected_connection()
    topic_config = TopicConfig("T", read_queue_nums=4, write_queue_nums=4)
    checked = 0
    for _ in range(3000):
        batch_text = rng.choice(["", "WAIT\x01true", f"WAIT\x01true\x02UNIQ_KEY\x01B{rng.randrange(3)}", text(),
                                 f"UNIQ_KEY\x01H{rng.randrange(3)}\x02WAIT\x01true", f"UNIQ_KEY\x01{rng.randrange(3)}"])
        if decode_properties(batch_text).get("DELAY", "0") not in ("", "0"):
            continue
        item_texts = [rng.choice(["UNIQ_KEY\x01I1", "", text(), f"UNIQ_KEY\x01U{rng.randrange(99)}",
                                  f"UNIQ_KEY\x01{rng.choice(['', 'U1', 'U22'])}\x02WAIT\x01true\x02TAGS\x01t",
                                  f"{text()}\x02UNIQ_KEY\x01U{rng.randrange(9)}\x02{text()}"])
                      for _ in range(rng.randrange(1, 6))]
        # Items as MessageDecoder.encodeMessages lays them out, with these raw properties strings.
        body = b"".join(struct.pack(">iiiii", 23 + len(t), 0, 0, 0, 1) + b"b" + struct.pack(">h", len(t)) + t.encode()
                        for t in item_texts)
        ext = {"a": "g", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1", "h": "0",
               "i": batch_text, "j": "0", "m": "true"}
        request = RemotingCommand(code=320, ext_fields=ext, body=body)
        header = SendMessageRequestHeader.parse(request)
        got = processor._prepare_batch(request, conn, header, topic_config)  # type: ignore[arg-type]
        refs = [_batch_reference(batch_text, t) for t in item_texts]
        if isinstance(got, RemotingCommand):
            assert any(decode_properties(r[0]).get("DELAY", "0") not in ("", "0") for r in refs), got.remark
            continue
        # (the store waits for a flush when any message's WAIT is not "false")
        assert [(p.decode(), k, t, u) for p, k, t, u in zip(got.properties, got.keys, got.tags_codes, got.uniq_keys,
                                                             strict=True)] == [r[:4] for r in refs]
        assert got.wait_store_msg_ok == any(r[4] for r in refs)
        assert got.indexed == any(r[1] or r[3] for r in refs)
        checked += 1
    assert checked > 2000


def _prepare_batch(processor: SendMessageProcessor, batch_text: str,
                   item_texts: list[str]) -> RemotingCommand | PutMessageBatch:
    """What ``processor`` makes of a SEND_BATCH_MESSAGE to queue 1 of topic T (4 queues) whose header
    properties are ``batch_text`` and whose items (1-byte bodies) have ``item_texts``, laid out as
    ``MessageDecoder.encodeMessages`` does."""
    raw = [t.encode() for t in item_texts]
    body = b"".join(struct.pack(">iiiii", 23 + len(r), 0, 0, 0, 1) + b"b" + struct.pack(">h", len(r)) + r
                    for r in raw)
    ext = {"a": "g", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1", "h": "0",
           "i": batch_text, "j": "0", "m": "true"}
    request = RemotingCommand(code=320, ext_fields=ext, body=body)
    return processor._prepare_batch(request, unconnected_connection(),  # type: ignore[arg-type]
                                    SendMessageRequestHeader.parse(request),
                                    TopicConfig("T", read_queue_nums=4, write_queue_nums=4))


def test_java_client_batches_are_stored_with_the_merged_properties() -> None:
    """Batches as Apache's Java client sends them (``DefaultMQProducer.batch``: UNIQ_KEY and WAIT on the
    batch, UNIQ_KEY, WAIT and TAGS on each item, in ``HashMap`` order), with items of other forms mixed in:
    a second UNIQ_KEY, another tag, KEYS, a UNIQ_KEY last or empty, a DELAY (refused with its index)."""
    broker = SimpleNamespace(config=SimpleNamespace(broker_cluster_name="DefaultCluster", max_message_size=1 << 22))
    processor = SendMessageProcessor(broker)  # type: ignore[arg-type]
    batch_text = "UNIQ_KEY\x017F0000010B5C1B6C0000BATCH0000\x02WAIT\x01true"
    usual = [f"UNIQ_KEY\x017F0000010B5C1B6C0000{i:012X}\x02WAIT\x01true\x02TAGS\x01bench" for i in range(32)]
    odd = {3: "UNIQ_KEY\x01A\x02WAIT\x01true\x02TAGS\x01bench\x02UNIQ_KEY\x01B",
           7: "UNIQ_KEY\x01C\x02WAIT\x01true\x02TAGS\x01other",
           8: "UNIQ_KEY\x01D\x02WAIT\x01true\x02TAGS\x01other",
           12: "KEYS\x01k1 k2\x02UNIQ_KEY\x01E\x02WAIT\x01false\x02TAGS\x01bench",
           13: "WAIT\x01true\x02TAGS\x01bench\x02UNIQ_KEY\x01F",
           14: "UNIQ_KEY\x01\x02WAIT\x01true\x02TAGS\x01bench",
           20: "WAIT\x01true\x02TAGS\x01bench"}
    for delayed in (False, True):
        texts = [odd.get(i, t) for i, t in enumerate(usual)]
        if delayed:
            texts[25] = "UNIQ_KEY\x01G\x02WAIT\x01true\x02DELAY\x013"
        got = _prepare_batch(processor, batch_text, texts)
        if delayed:
            assert isinstance(got, RemotingCommand)
            assert got.remark == "batch message 25 cannot be delayed (DELAY is set)"
            continue
        assert isinstance(got, PutMessageBatch)
        refs = [_batch_reference(batch_text, t) for t in texts]
        assert [(p.decode(), k, t, u) for p, k, t, u in zip(got.properties, got.keys, got.tags_codes, got.uniq_keys,
                                                             strict=True)] == [r[:4] for r in refs]
        assert (got.uniq_keys[3], got.uniq_keys[14], got.uniq_keys[20]) == ("B", None, "7F0000010B5C1B6C0000BATCH0000")


def test_item_forms_kept_between_batches_follow_the_cluster_name_and_the_form_limit() -> None:
    """The send processor keeps the item forms it worked out for the next batches with the same header
    properties: a renamed cluster (CLUSTER is in every stored form) starts them afresh, and a batch with
    more forms than one batch may work out stores the same as a batch with few."""
    broker = SimpleNamespace(config=SimpleNamespace(broker_cluster_name="A", max_message_size=1 << 22))
    processor = SendMessageProcessor(broker)  # type: ignore[arg-type]

    def stored(texts: list[str], header: str = "WAIT\x01true") -> list[str]:
        got = _prepare_batch(processor, header, texts)
        assert isinstance(got, PutMessageBatch)
        assert got.uniq_keys == [_batch_reference(header, t)[3] for t in texts]
        return [p.decode() for p in got.properties]

    usual = [f"UNIQ_KEY\x01U{i}\x02TAGS\x01t" for i in range(4)]
    assert all(decode_properties(p)["CLUSTER"] == "A" for p in stored(usual))
    broker.config.broker_cluster_name = "B"
    assert all(decode_properties(p)["CLUSTER"] == "B" for p in stored(usual))
    # Headers as the Java client's (a UNIQ_KEY of its own per batch): an item without a UNIQ_KEY is
    # stored with its batch's, never with the one of the batch that worked its form out first.
    for n in range(3):
        header = f"UNIQ_KEY\x01H{n}\x02WAIT\x01true"
        texts = ["UNIQ_KEY\x01U1\x02TAGS\x01t", "TAGS\x01t", "UNIQ_KEY\x01U2\x02TAGS\x01t", "TAGS\x01t"]
        assert stored(texts, header) == [_batch_reference(header, t, "B")[0] for t in texts]
    many = [f"UNIQ_KEY\x01U{i}\x02TAGS\x01t{i}" for i in range(20)]  # 20 forms: past the 8 worked out per batch
    first = stored(many)
    assert stored(many) == first == [_batch_reference("WAIT\x01true", t, "B")[0] for t in many]
    assert all(decode_properties(p)["CLUSTER"] == "B" for p in stored(usual))
