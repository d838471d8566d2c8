"""Compatibility: Apache RocketMQ's own Java push consumer (5.x, remoting API) shut down right after
consuming: our broker keeps its final offsets.

``tests/compat/PushShutdownDriver.java`` is compiled like ``bench/compare/Driver.java``
(``bench/compare/java.py``) and run once against one NameServer and two brokers of ours. Each of
its rounds sends 40 messages, starts a new ``DefaultMQPushConsumer`` of one group (offsets
persisted every 60 s only, so that what the broker holds at the end comes from the pulls'
``commitOffset`` and from shutdown's ``persistAll``: oneway UPDATE_CONSUMER_OFFSET right behind
the consumer's last pull on the same connection), consumes them and shuts it down at once. After
each shutdown every queue's committed offset must equal its max offset (Apache's
``DefaultMQAdminExt.examineConsumeStats``), and the next round's consumer, resuming from those
offsets, must get its own round's messages and none of an earlier round. Our own admin client
then checks the group's lag once more.

If Maven cannot fetch the client, or javac/java are missing, the test fails and says why.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest
from bench.compare import java

from rocket.client import Admin
from tests.compat.cluster import start_cluster
from tests.support import unique

pytestmark = [pytest.mark.compat, pytest.mark.timeout(900)]

DRIVER_SOURCE = Path(__file__).resolve().parent / "PushShutdownDriver.java"
ROUNDS = 4
COUNT = 40


def test_java_push_consumer_final_offsets_survive_its_shutdown(tmp_path: Path) -> None:
    try:
        lib = java.ensure_jars()
        classes = java.ensure_driver(lib, DRIVER_SOURCE)
    except java.JavaSetupError as exc:
        pytest.fail(f"the Apache RocketMQ Java client is not available: {exc}", pytrace=False)
    with start_cluster(tmp_path / "cluster", brokers=("broker-a", "broker-b")) as cluster:
        topic, group = unique("PushShutdown"), unique("CID_SHUTDOWN")
        cluster.create_topic(topic, queues=2)  # 2 queues on each broker
        argv = java.driver_argv(lib, classes, tmp_path / "home", "run", f"namesrv={cluster.namesrv}",
                                f"topic={topic}", f"group={group}", f"rounds={ROUNDS}", f"count={COUNT}",
                                "timeout=75", jvm=("-Xms128m", "-Xmx384m"), main="PushShutdownDriver")
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        results = java.driver_results(proc.stdout)
        context = (f"driver exit {proc.returncode}; stderr tail:\n" + "\n".join(proc.stderr.splitlines()[-40:])
                   + f"\n{cluster.logs()}")
        assert results, f"the Java driver printed no result\n{context}"
        result: dict[str, Any] = results[-1]
        assert "error" not in result and proc.returncode == 0, f"{result.get('error')}\n{context}"
        rounds = result["rounds"]
        assert len(rounds) == ROUNDS, context
        for number, got in enumerate(rounds):
            assert got["consumed"] == COUNT, f"round {number}: {got}\n{context}"
            assert not got["unknown"], f"round {number}: {got}"
            assert not got["again"], f"round {number}: an earlier round's messages came again: {got}"
            offsets = got["offsets"]
            assert {(q["brokerName"], q["queueId"]) for q in offsets} == {
                (b, i) for b in ("broker-a", "broker-b") for i in range(2)}, f"round {number}: {offsets}"
            behind = [q for q in offsets if q["consumerOffset"] != q["brokerOffset"]]
            assert not behind, f"round {number}: final offsets not committed after shutdown: {behind}\n{context}"
            assert sum(q["brokerOffset"] for q in offsets) == COUNT * (number + 1), offsets

        async def lag() -> tuple[int, int]:
            async with Admin(cluster.namesrv) as admin:
                found = await admin.consumer_lag(group, topic)
            return found.total_lag, sum(q.broker_offset for q in found.queues)

        assert asyncio.run(lag()) == (0, ROUNDS * COUNT)
