"""PullConsumer's public choice of the broker a pull goes to (used by the Spark source)."""

from __future__ import annotations

import pytest

from rocket.client import PullConsumer
from rocket.protocol import MASTER_ID, BrokerData, MessageQueue
from rocket.remoting import RemotingConnectError

MQ = MessageQueue("Orders", "broker-a", 3)


def _consumer(addrs: dict[int, str]) -> PullConsumer:
    consumer = PullConsumer("CID_PULL_API", "127.0.0.1:1")  # never started: no network
    consumer.client.brokers["broker-a"] = BrokerData("DefaultCluster", "broker-a", addrs)
    return consumer


def test_broker_ids_lists_the_group_sorted_and_nothing_for_an_unknown_group() -> None:
    consumer = _consumer({2: "127.0.0.1:30913", MASTER_ID: "127.0.0.1:10911", 1: "127.0.0.1:20911"})
    assert consumer.broker_ids("broker-a") == [0, 1, 2]
    assert consumer.broker_ids("broker-b") == []


def test_pull_from_picks_the_broker_and_falls_back_when_it_is_down_or_missing() -> None:
    consumer = _consumer({MASTER_ID: "127.0.0.1:10911", 1: "127.0.0.1:20911"})
    assert consumer.pull_address(MQ) == ("127.0.0.1:10911", MASTER_ID)
    consumer.pull_from(MQ, 1)
    assert consumer.pull_address(MQ) == ("127.0.0.1:20911", 1)
    consumer.mark_broker_down("127.0.0.1:20911", 10.0)
    assert consumer.pull_address(MQ) == ("127.0.0.1:10911", MASTER_ID)
    consumer.mark_broker_down("127.0.0.1:10911", 10.0)  # everything down: the chosen one after all
    assert consumer.pull_address(MQ) == ("127.0.0.1:20911", 1)
    consumer.pull_from(MQ, 7)  # an id the group lacks: the master
    consumer.mark_broker_down("127.0.0.1:10911", 0.0)
    assert consumer.pull_address(MQ) == ("127.0.0.1:10911", MASTER_ID)


def test_pull_address_without_a_route_says_so() -> None:
    consumer = PullConsumer("CID_PULL_API", "127.0.0.1:1")
    with pytest.raises(RemotingConnectError, match="no address known for broker group broker-a"):
        consumer.pull_address(MQ)
