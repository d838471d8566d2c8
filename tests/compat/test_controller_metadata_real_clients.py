"""Compatibility: Apache RocketMQ's Java client and ``mqadmin`` (5.x) as witnesses that a controller-mode
master's metadata survives its kill -9 (``rocket.broker.metadata.replication``).

One group of 3 of our brokers in controller mode (``allAckInSyncStateSet``, SYNC_FLUSH, a 60 s
``slaveSyncInterval`` so that the periodic copy brings nothing) with 3 of our controllers. On the
master: ``mqadmin updateTopic`` and ``updateSubGroup`` (retryMaxTimes 5), the Java producer sends 20
messages, a Java push consumer of the group consumes them and commits its offsets (one-way
UPDATE_CONSUMER_OFFSET, as the Java client does); once both slaves hold those offsets the master is
killed with SIGKILL. Then ``mqadmin getConsumerConfig`` reads the group's config from the new master,
``mqadmin consumerProgress`` shows the committed offsets at the queues' ends (it finds the brokers
through the group's ``%RETRY%`` topic, created on the old master), and a Java push consumer of the
same group gets exactly the 10 messages sent after the failover: none of the 20 again.

Needs Java 17+ and the Apache jars (``bench/compare/java.py``); fails and says why when missing.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from bench.compare import java

from rocket.protocol import RequestCode
from rocket.remoting import RemotingClient, ResponseCode
from tests.compat.mqadmin import MQAdminShell
from tests.integration.broker_harness import RawBroker
from tests.integration.failover_support import controller_group, wait_group_ready
from tests.integration.replication_support import TRANSIENT
from tests.support import eventually

pytestmark = [pytest.mark.compat, pytest.mark.timeout(400)]

TOPIC = "MetaJava"
GROUP = "CG_META_JAVA"
QUEUES = 2


def _rows(output: str, first: str) -> list[list[str]]:
    return [ln.split() for ln in output.splitlines() if ln.split()[:1] == [first]]


async def _committed(client: RemotingClient, addr: str) -> dict[int, int]:
    out = {}
    for q in range(QUEUES):
        resp = await RawBroker(client, addr).call(RequestCode.QUERY_CONSUMER_OFFSET,
                                                  {"consumerGroup": GROUP, "topic": TOPIC, "queueId": q})
        out[q] = int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1
    return out


async def test_java_group_and_offsets_survive_a_kill_9_of_the_master(tmp_path: Path) -> None:
    version = java.version()
    try:
        java.ensure_tools_jars(version)
    except java.JavaSetupError as exc:
        pytest.fail(f"Apache RocketMQ's Java client and mqadmin are not available: {exc}", pytrace=False)
    client = RemotingClient()
    try:
        with controller_group(tmp_path, extra={"slaveSyncInterval": "60000"}) as g:
            m = await wait_group_ready(g, "Warmup", client)
            master = g.brokers[m].addr
            sh = await asyncio.to_thread(MQAdminShell, version, g.namesrv, tmp_path / "java-home")
            try:
                def admin(*args: str) -> str:
                    return sh.ok(*args).output

                made = await asyncio.to_thread(admin, "updateTopic", "-b", master, "-t", TOPIC, "-r", str(QUEUES),
                                               "-w", str(QUEUES))
                assert "success" in made, made
                made = await asyncio.to_thread(admin, "updateSubGroup", "-b", master, "-g", GROUP, "-r", "5")
                assert "create subscription group to" in made, made
                sent = _rows((await asyncio.to_thread(sh.client, "@produce", "PG_META_JAVA", TOPIC, "20", "TagA",
                                                      "before")).output, "SENT")
                assert len(sent) == 20 and all(s[1] == "SEND_OK" for s in sent), sent
                ends: dict[int, int] = {}
                for s in sent:
                    ends[int(s[5])] = max(ends.get(int(s[5]), 0), int(s[6]) + 1)

                await asyncio.to_thread(sh.client, "@consume", GROUP, TOPIC)

                async def consumed() -> bool:
                    got = _rows((await asyncio.to_thread(sh.client, "@received", GROUP)).output, "MSG")
                    return len(got) >= 20

                await eventually(consumed, 60, what="the Java consumer to receive the 20 messages")
                await asyncio.to_thread(sh.client, "@stop", GROUP)  # persists its offsets (one-way)
                slaves = [b.addr for i, b in enumerate(g.brokers) if i != m]

                async def on_master() -> bool:
                    return await _committed(client, master) == ends

                await eventually(on_master, 20, what="the Java consumer's offsets on the master", retry_on=TRANSIENT)
                t0 = time.monotonic()

                async def on_slaves() -> bool:
                    return all([await _committed(client, s) == ends for s in slaves])

                await eventually(on_slaves, 5, what="the offsets on both slaves (only metadata records bring "
                                 "them: slaveSyncInterval is 60 s)", retry_on=TRANSIENT, interval=0.01)
                print(f"offsets on both slaves {1000 * (time.monotonic() - t0):.0f} ms after the master answered them")
                g.brokers[m].proc.send_signal(signal.SIGKILL)
                g.brokers[m].proc.wait(10)
                (new,) = await eventually(lambda: g.master_box(not_index=m), 30, what="a new master",
                                          retry_on=TRANSIENT)

                async def group_listed() -> str | None:
                    out = (await asyncio.to_thread(sh.run, "getConsumerConfig", "-g", GROUP)).output
                    return out if f"groupName                               =  {GROUP}" in out else None

                config = await eventually(group_listed, 30, what="mqadmin getConsumerConfig to find the group",
                                          retry_on=TRANSIENT)
                values = {k.strip(): v.strip() for k, _, v in (ln.partition("=") for ln in config.splitlines())}
                assert values["retryMaxTimes"] == "5", config

                async def progress() -> dict[int, tuple[int, int]] | None:
                    out = (await asyncio.to_thread(sh.run, "consumerProgress", "-g", GROUP)).output
                    rows = {int(r[2]): (int(r[3]), int(r[4])) for r in _rows(out, TOPIC)}
                    return rows or None

                shown = await eventually(progress, 30, what="mqadmin consumerProgress on the new master",
                                         retry_on=TRANSIENT)
                assert shown == {q: (end, end) for q, end in ends.items()}, shown

                after = _rows((await asyncio.to_thread(sh.client, "@produce", "PG_META_JAVA_2", TOPIC, "10",
                                                       "TagA", "after")).output, "SENT")
                assert len(after) == 10 and all(s[1] == "SEND_OK" for s in after), after
                await asyncio.to_thread(sh.client, "@consume", GROUP, TOPIC)

                async def got_after() -> list[str] | None:
                    got = _rows((await asyncio.to_thread(sh.client, "@received", GROUP)).output, "MSG")
                    bodies = [r[5] for r in got]
                    return bodies if len([b for b in bodies if b.startswith("after-")]) >= 10 else None

                bodies = await eventually(got_after, 60, what="the Java consumer to get the 10 new messages")
                await asyncio.sleep(2.0)  # anything delivered again would arrive by now
                bodies = [r[5] for r in _rows((await asyncio.to_thread(sh.client, "@received", GROUP)).output, "MSG")]
                await asyncio.to_thread(sh.client, "@stop", GROUP)
                print(f"Java consumer of {GROUP} on the new master {g.brokers[new].addr}: {bodies}")
                assert sorted(bodies) == sorted(f"after-{i}" for i in range(10)), bodies
            finally:
                await asyncio.to_thread(sh.close)
    finally:
        await client.close()
