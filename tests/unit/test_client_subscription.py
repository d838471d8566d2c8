"""Tag expressions and allocate-averagely (rocket.client.subscription)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rocket.client.subscription import SubscriptionData, allocate_averagely, parse_tag_expression
from rocket.message import java_string_hash
from rocket.protocol import MessageQueue


def test_parse_tag_expression() -> None:
    assert parse_tag_expression("*") == frozenset()
    assert parse_tag_expression("") == frozenset()
    assert parse_tag_expression(None) == frozenset()
    assert parse_tag_expression("TagA") == {"TagA"}
    assert parse_tag_expression(" TagA ||TagB||  || TagC ") == {"TagA", "TagB", "TagC"}


def test_subscription_matches_and_codes() -> None:
    sub = SubscriptionData.of("T", "TagB || TagA")
    assert sub.expression == "TagA || TagB"
    assert sub.codes == {java_string_hash("TagA"), java_string_hash("TagB")}
    assert sub.matches("TagA") and sub.matches("TagB")
    assert not sub.matches("TagC") and not sub.matches(None)
    everything = SubscriptionData.of("T", "*")
    assert everything.matches(None) and everything.matches("X")
    body = sub.to_json()
    assert body["subString"] == "TagA || TagB" and body["tagsSet"] == ["TagA", "TagB"]
    assert body["expressionType"] == "TAG" and isinstance(body["subVersion"], int)


def _mqs(n: int) -> list[MessageQueue]:
    return [MessageQueue("T", "broker-a" if i < n // 2 else "broker-b", i) for i in range(n)]


def test_allocate_examples() -> None:
    mqs = _mqs(8)
    ordered = sorted(mqs)
    assert allocate_averagely("c1", ["c2", "c1"], mqs) == ordered[:4]
    assert allocate_averagely("c2", ["c1", "c2"], mqs) == ordered[4:]
    # 8 queues over 3 clients: 3, 3, 2
    three = [allocate_averagely(c, ["a", "b", "c"], mqs) for c in ("a", "b", "c")]
    assert [len(x) for x in three] == [3, 3, 2]
    assert three[0] + three[1] + three[2] == ordered
    # more clients than queues: the last ones get nothing
    many = [allocate_averagely(f"c{i}", [f"c{j}" for j in range(5)], _mqs(3)) for i in range(5)]
    assert [len(x) for x in many] == [1, 1, 1, 0, 0]
    assert allocate_averagely("zz", ["a", "b"], mqs) == []
    assert allocate_averagely("a", ["a"], []) == []


@given(st.integers(0, 40), st.integers(1, 12))
def test_allocate_is_a_partition(n_queues: int, n_clients: int) -> None:
    mqs = _mqs(n_queues)
    cids = [f"10.0.0.{i}@{i}" for i in range(n_clients)]
    parts = [allocate_averagely(c, list(reversed(cids)), list(reversed(mqs))) for c in cids]
    flat = [mq for part in parts for mq in part]
    assert sorted(flat) == sorted(mqs)  # each queue exactly once
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
