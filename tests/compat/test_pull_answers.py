"""Compatibility: what real clients do with a master's non-SUCCESS pull answers.

Apache's Java client and the C++ client (``rocketmq==0.4.4``) move to ``nextBeginOffset`` on
PULL_NOT_FOUND (19), PULL_RETRY_IMMEDIATELY (20) and PULL_OFFSET_MOVED (21) and commit it, so each
answer's offset decides whether messages are skipped. With one NameServer and one master (real
processes, shared by the module):

* 20: a group subscribed to ``TagB`` of a topic whose TagB messages sit between runs of TagA ones
  (the first longer than one read's scan) gets every TagB message, none of the others, and commits
  an offset past them and not past the queue's end (the 20s moved it over TagA entries only);
* 21: a group whose committed offsets lie past the queues' ends (1000) is moved back to 0 and
  reads every message, then commits each queue's end.

(The slave's answers, and 19 after a long poll, are in ``test_slave_read.py`` and every consumer test.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from rocket.remoting import RemotingClient, RequestCode, ResponseCode
from tests.compat import pullcheck
from tests.integration.broker_harness import BrokerProc, RawBroker, broker_process, nameserver_process, route
from tests.support import eventually

#: Errors of a poll that mean "not yet" (a server still starting, an HTTP call refused).
RETRY_ON = (OSError, TimeoutError, aiohttp.ClientError)

pytestmark = [pytest.mark.compat, pytest.mark.timeout(300)]

QUEUES = 4


@dataclass
class Servers:
    namesrv: str
    broker: BrokerProc
    tmp: Path


@dataclass
class Env:
    namesrv: str
    broker: BrokerProc
    rb: RawBroker
    program: tuple[Path, Path]
    tmp: Path


@pytest.fixture(scope="module")
def java_program() -> tuple[Path, Path]:
    """(folder of Apache RocketMQ jars, folder of the compiled PullCheck); fails when unavailable."""
    return pullcheck.java_program()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """One NameServer and one master for the module; each test uses topics and groups of its own."""
    tmp = tmp_path_factory.mktemp("pull-answers")
    with nameserver_process(tmp) as ns, broker_process(tmp, "pa-a", ns.addr) as broker:
        yield Servers(ns.addr, broker, tmp)


@pytest.fixture
async def env(servers: Servers, tmp_path: Path, java_program: tuple[Path, Path]) -> AsyncIterator[Env]:
    rpc = RemotingClient()
    try:
        yield Env(servers.namesrv, servers.broker, RawBroker(rpc, servers.broker.addr), java_program, tmp_path)
    finally:
        await rpc.close()


async def _topic(e: Env, topic: str, queues: int) -> None:
    assert (await e.rb.create_topic(topic, queues=queues)).code == 0
    await eventually(lambda: route(e.rb.client, e.namesrv, topic), 10, what="the topic's route", retry_on=RETRY_ON)


def _produce(e: Env, topic: str, *runs: tuple[str, str, int]) -> None:
    """Send each run ``(prefix, tag, count)`` in order with the Java producer; all must be SEND_OK."""
    spec = ",".join(f"{prefix}:{tag}:{count}" for prefix, tag, count in runs)
    sent = pullcheck.run_java(e.program, e.tmp / "home-producer", "produce", f"namesrv={e.namesrv}",
                              f"topic={topic}", f"runs={spec}", timeout=120)
    assert sent["statuses"] == {"SEND_OK": sum(r[2] for r in runs)}, sent


def _consume(e: Env, client: str, compat_python: Path | None, topic: str, group: str, expect: int,
             expression: str = "*") -> pullcheck.Consumed:
    home = e.tmp / f"home-{group}"
    if client == "java":
        return pullcheck.java_consume(e.program, home, e.namesrv, topic, group, expect, expression=expression)
    assert compat_python is not None
    return pullcheck.cpp_consume(compat_python, home, e.namesrv, topic, group, expect, expression=expression)


#: TagA messages before the TagB ones, on a one-queue topic: more than one read scans (800
#: ConsumeQueue entries), so the first pull is answered 20 (NO_MATCHED_MESSAGE) with nextBeginOffset 800.
LEADING = 820
TAGGED = 6
TRAILING = 20


@pytest.mark.parametrize("client", ["java", "cpp"])
async def test_no_matched_answers_skip_only_filtered_messages(env: Env, client: str,
                                                              request: pytest.FixtureRequest) -> None:
    compat_python = request.getfixturevalue("compat_python") if client == "cpp" else None
    topic = f"PaTag{client}"
    await _topic(env, topic, 1)
    _produce(env, topic, ("a-", "TagA", LEADING), ("sr-", "TagB", TAGGED), ("c-", "TagA", TRAILING))
    group = f"CG_TAG_{client.upper()}"
    got = _consume(env, client, compat_python, topic, group, TAGGED, expression="TagB")
    assert got.missing_count == 0 and got.unexpected == 0, got.context
    maxes, committed = await pullcheck.queue_offsets(env.rb, topic, 1, group)
    assert maxes == {0: LEADING + TAGGED + TRAILING}
    # The committed offset is past the TagB messages (the 20 moved the consumer over TagA entries
    # and nothing else) and not past the queue's end; whether it already covers the trailing TagA
    # entries depends on the next pull (a long poll), as with Apache's broker.
    assert LEADING + TAGGED <= committed[0] <= maxes[0], f"committed {committed}, end {maxes}\n{got.context}"


@pytest.mark.parametrize("client", ["java", "cpp"])
async def test_offset_moved_brings_a_consumer_back_to_what_is_there(env: Env, client: str,
                                                                    request: pytest.FixtureRequest) -> None:
    compat_python = request.getfixturevalue("compat_python") if client == "cpp" else None
    topic = f"PaMoved{client}"
    await _topic(env, topic, QUEUES)
    _produce(env, topic, ("sr-", "TagA", 40))
    group = f"CG_MOVED_{client.upper()}"
    for q in range(QUEUES):
        reply = await env.rb.call(RequestCode.UPDATE_CONSUMER_OFFSET,
                                  {"consumerGroup": group, "topic": topic, "queueId": q, "commitOffset": 1000})
        assert reply.code == ResponseCode.SUCCESS, reply
    got = _consume(env, client, compat_python, topic, group, 40)
    assert got.missing_count == 0, got.context
    maxes, committed = await pullcheck.queue_offsets(env.rb, topic, QUEUES, group)
    assert committed == maxes, f"committed {committed}, queue ends {maxes}\n{got.context}"
