"""The short fuzz run of ``make test``, and one test per crash the fuzzer found.

Every target of :mod:`tests.fuzz.targets` runs under hypothesis's engine (crashes are shrunk to
a minimal input) for ``FUZZ_TEST_EXAMPLES`` inputs (default 25); ``make fuzz`` runs the long
version (``python -m tests.fuzz``). The regression tests below pin each crash found: the input
that used to raise something other than the parser's defined error.
"""

from __future__ import annotations

import os
import struct
import zlib

import pytest

from rocket.auth.model import Acl, AuthError, User
from rocket.broker.heartbeat import HeartbeatData, HeartbeatParseError
from rocket.broker.transaction import parse_op_body
from rocket.protocol import BodyError, ClusterInfo, DataVersion, RegisterBrokerBody, TopicConfig, TopicRouteData
from rocket.protocol.body import json_object
from rocket.protocol.register import MAX_INFLATED_REGISTER_BODY
from rocket.protocol.route import MessageQueue
from tests.fuzz import strategies as S
from tests.fuzz.engine import MemoryWatch, run_buffers, run_target
from tests.fuzz.targets import TARGETS, by_name

pytestmark = pytest.mark.timeout(300)

EXAMPLES = int(os.environ.get("FUZZ_TEST_EXAMPLES", "25"))
SEED = int(os.environ.get("FUZZ_SEED", "20261125"))


@pytest.mark.parametrize("name", [t.name for t in TARGETS])
def test_target_has_no_crash(name: str) -> None:
    result = run_target(by_name(name), EXAMPLES, SEED)
    assert result.examples >= EXAMPLES * 0.9, f"only {result.examples} inputs ran"
    assert not result.crashes, "\n\n".join(map(str, result.crashes))


def test_parsers_hold_no_memory() -> None:
    """Inputs of the JSON, frame and batch parsers leave nothing behind (tracemalloc, product files).

    Bound: 512 KiB after 250 inputs per target, following 100 of warm-up (the long run's bound is
    1 MiB over 1,000,000). What is held is orjson's cache of object keys (2048 keys, charged to
    the line of ``loads_lenient`` that parses), which fills up and stays.
    """
    names = ["frame", "register-body", "heartbeat"]
    watch = MemoryWatch()
    try:
        for name in names:
            run_buffers(by_name(name), 100, SEED)
        watch.baseline()
        for name in names:
            result = run_buffers(by_name(name), 250, SEED + 1)
            assert not result.crashes, "\n\n".join(map(str, result.crashes))
        product, _, top = watch.growth()
    finally:
        watch.stop()
    assert product < 512 * 1024, f"the product holds {product} more bytes:\n" + "\n".join(top)


# -- crashes found by the fuzzer, now defined errors ---------------------------------------------


@pytest.mark.parametrize("body", [
    b'{"clientID": "127.0.0.1@1", "producerDataSet": true}',
    b'{"clientID": "127.0.0.1@1", "consumerDataSet": 1.0}',
    b'{"clientID": "c", "consumerDataSet": [{"groupName": "G", "subscriptionDataSet": 7}]}',
])
def test_heartbeat_member_of_the_wrong_type(body: bytes) -> None:
    """Was TypeError ('bool' object is not iterable): a set member that is not an array."""
    with pytest.raises(HeartbeatParseError, match="is not an array"):
        HeartbeatData.decode(body)


@pytest.mark.parametrize("obj", [
    {"username": "u", "password": "p", "userType": True},
    {"username": "u", "password": "p", "userStatus": 1},
    {"username": "u", "password": "p", "userStatus": [None]},
])
def test_user_enum_of_the_wrong_type(obj: dict[str, object]) -> None:
    """Was AttributeError ('bool' object has no attribute 'strip')."""
    with pytest.raises(AuthError, match="unknown user"):
        User.from_json(obj)


@pytest.mark.parametrize(("obj", "match"), [
    ({"subject": "User:u", "policies": [{"policyType": True}]}, "unknown policyType"),
    ({"subject": "User:u", "policies": [{"entries": 3}]}, "entries must be a JSON array"),
    ({"subject": "User:u", "policies": [{"entries": [{"resource": "Topic:T", "actions": 1}]}]},
     "actions must be a JSON array"),
    ({"subject": "User:u", "policies": [{"entries": [{"resource": "Topic:T", "actions": ["Pub"],
                                                      "sourceIps": True}]}]}, "sourceIps must be a JSON array"),
])
def test_acl_member_of_the_wrong_type(obj: dict[str, object], match: str) -> None:
    """Was AttributeError / TypeError ('int' object is not iterable)."""
    with pytest.raises(AuthError, match=match):
        Acl.from_json(obj)


def test_op_body_with_unicode_digits() -> None:
    """Was ValueError from int('²'): str.isdigit() is true for superscripts and other scripts' digits."""
    assert parse_op_body("3,²,٣,4".encode()) == [3, 4]


@pytest.mark.parametrize("body", [
    b'{"queueDatas": [null]}', b'{"brokerDatas": [1]}', b'{"queueDatas": ["b"]}',
])
def test_route_with_entries_that_are_not_objects(body: bytes) -> None:
    """Was AttributeError ('NoneType' object has no attribute 'get')."""
    with pytest.raises(BodyError, match="is not an object"):
        TopicRouteData.from_json(body)


def test_route_filter_server_entry_not_a_list_is_left_out() -> None:
    route = TopicRouteData.from_json(b'{"filterServerTable": {"a": null, "b": ["x"]}}')
    assert route.filter_server_table == {"b": ["x"]}


@pytest.mark.parametrize(("body", "match"), [
    (b'{"brokerAddrTable": {"b": null}}', "is not an object"),
    (b'{"clusterAddrTable": {"C": 1}}', "not an array"),
])
def test_cluster_info_with_entries_of_the_wrong_type(body: bytes, match: str) -> None:
    """Was AttributeError / TypeError ('int' object is not iterable)."""
    with pytest.raises(BodyError, match=match):
        ClusterInfo.from_json(body)


def test_deeply_nested_json_is_a_body_error() -> None:
    """Was RecursionError: ``{"value": {"value": ...}}`` 1000 levels deep (orjson reads up to 1024)
    made ``as_int`` unwrap AtomicLong beans without end, and ``str``/``repr`` of such a value (in
    ``MessageQueue``'s error) overflowed the stack too. Bodies deeper than 64 levels are refused;
    a nested bean is not an integer."""
    body = b'{"timestamp": 1, "counter": ' + S.deep(1000, objects_only=True) + b"}"
    with pytest.raises(BodyError, match="nested more than 64 levels deep"):
        DataVersion.from_json(body)
    with pytest.raises(BodyError, match="nested more than 64 levels deep"):
        MessageQueue.from_json(json_object(b'{"topic": ' + S.deep(1000) + b"}", "MessageQueue"))
    with pytest.raises(BodyError, match="counter is not an integer"):
        DataVersion.from_json(b'{"counter": ' + S.deep(10, objects_only=True) + b"}")
    assert DataVersion.from_json(b'{"counter": {"value": 7}}').counter == 7  # an AtomicLong bean still reads
    with pytest.raises(BodyError, match="readQueueNums is not an integer"):
        TopicConfig.from_json(b'{"topicName": "T", "readQueueNums": [4]}')


def test_compressed_register_body_bomb_is_refused() -> None:
    """Was an unbounded zlib.decompress: 80 KiB inflating to 80 MiB (or a 16 MiB frame to 16 GiB)."""
    assert MAX_INFLATED_REGISTER_BODY < len(bytes(80 << 20))
    with pytest.raises(BodyError, match="inflates to more than"):
        RegisterBrokerBody.decode(S.ZLIB_BOMB, compressed=True)


def test_compressed_register_body_truncated_stream() -> None:
    version = b'{"counter":1,"timestamp":2}'
    raw = struct.pack(">i", len(version)) + version + struct.pack(">i", 0) + struct.pack(">i", 2) + b"[]"
    assert RegisterBrokerBody.decode(zlib.compress(raw, 9), compressed=True).filter_server_list == []
    with pytest.raises(BodyError, match="truncated"):
        RegisterBrokerBody.decode(zlib.compress(raw, 9)[:-3], compressed=True)
