"""Compatibility: Apache RocketMQ's Java client reads every message from a slave after its master died.

Issue 19: a slave that still believed its master reachable answered PULL_MESSAGE with
PULL_RETRY_IMMEDIATELY (20) and a ``nextBeginOffset`` past the messages it had read. The Java
client takes 20 as NO_MATCHED_MSG, moves to ``nextBeginOffset`` and commits it: every message was
skipped, and the group's offsets on the slave said they were consumed.

Here, with real processes on loopback: a NameServer, a SYNC_MASTER and its slave (RocketMQ's
defaults: ``slaveReadEnable`` false; ``haHousekeepingInterval`` raised to 60 s so the slave keeps
believing its master reachable for the whole test). The Java producer sends 300 messages (all
SEND_OK, so the slave has each one), the master is killed with SIGKILL, and a push consumer of a
fresh group subscribes within seconds, once with Apache's Java client and once with the C++
client (``rocketmq==0.4.4``, ``driver.py``): it must receive every one of the 300 messages, and the
offsets it commits (held by the slave) must be each queue's end, no more. The Java program is
``tests/compat/PullCheck.java``, compiled against the client jars of ``bench/compare/java.py``
(Maven); if a client cannot be had, the test fails and says why.
"""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from rocket.remoting import RemotingClient
from tests.compat import pullcheck
from tests.integration.broker_harness import BrokerProc, RawBroker, broker_port, nameserver_process, route
from tests.integration.replication_support import group_broker, ha_status
from tests.support import eventually

#: Errors of a poll that mean "not yet" (a server still starting, an HTTP call refused).
RETRY_ON = (OSError, TimeoutError, aiohttp.ClientError)

pytestmark = [pytest.mark.compat, pytest.mark.timeout(420)]

TOPIC = "SlaveReadT"
QUEUES = 4
COUNT = 300
#: RocketMQ's defaults for slave reads, and a slave that believes its master alive for a minute.
GROUP_SETTINGS = {"slaveReadEnable": "false", "haHousekeepingInterval": "60000"}


@pytest.fixture(scope="module")
def java_program() -> tuple[Path, Path]:
    """(folder of Apache RocketMQ jars, folder of the compiled PullCheck); fails when unavailable."""
    return pullcheck.java_program()


def _logs(*brokers: BrokerProc) -> str:
    return "\n".join(f"--- {b.name} {b.addr} ---\n{b.log_text()[-4000:]}" for b in brokers)


@pytest.mark.parametrize("client", ["java", "cpp"])
async def test_real_consumer_reads_every_message_from_the_slave_after_the_master_is_killed(
        tmp_path: Path, client: str, request: pytest.FixtureRequest) -> None:
    program: tuple[Path, Path] = request.getfixturevalue("java_program")
    compat_python: Path | None = request.getfixturevalue("compat_python") if client == "cpp" else None
    rpc = RemotingClient()
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(nameserver_process(tmp_path))
        master = stack.enter_context(group_broker(tmp_path, "sr-a", ns.addr, port=broker_port(), role="SYNC_MASTER",
                                                  broker_id=0, extra=GROUP_SETTINGS))
        slave = stack.enter_context(group_broker(tmp_path, "sr-a", ns.addr, port=broker_port(), role="SLAVE",
                                                 broker_id=1, extra=GROUP_SETTINGS))
        try:
            assert (await RawBroker(rpc, master.addr).create_topic(TOPIC, queues=QUEUES)).code == 0
            await eventually(lambda: route(rpc, ns.addr, TOPIC), 10, what="the topic's route", retry_on=RETRY_ON)

            async def slave_in_sync() -> bool:
                return any(s["inSync"] for s in (await ha_status(master))["slaves"])

            await eventually(slave_in_sync, 20, what="the slave to replicate", retry_on=RETRY_ON)

            sent = pullcheck.run_java(program, tmp_path / "home-producer", "produce", f"namesrv={ns.addr}",
                             f"topic={TOPIC}", f"count={COUNT}", timeout=120)
            assert sent["statuses"] == {"SEND_OK": COUNT}, sent

            rb_slave = RawBroker(rpc, slave.addr)

            async def slave_has_all() -> bool:
                maxes, _ = await pullcheck.queue_offsets(rb_slave, TOPIC, QUEUES, "CG_NONE")
                return sum(maxes.values()) == COUNT

            await eventually(slave_has_all, 10, what="the slave's ConsumeQueues to hold every message",
                             retry_on=RETRY_ON)

            master.proc.send_signal(signal.SIGKILL)
            master.proc.wait(10)
            killed = time.monotonic()

            async def master_gone_from_route() -> bool:
                r = await route(rpc, ns.addr, TOPIC)
                addrs = {str(k) for bd in (r or {}).get("brokerDatas", []) for k in bd["brokerAddrs"]}
                return r is not None and "0" not in addrs and "1" in addrs

            await eventually(master_gone_from_route, 10, what="the NameServer to drop the killed master",
                             retry_on=RETRY_ON)
            master_state = (await ha_status(slave))["master"]
            # the situation of the defect: the slave still believes its master reachable
            assert master_state["reachable"] is True, master_state
            assert time.monotonic() - killed < 10

            group = f"CG_SLAVE_READ_{client.upper()}"
            if client == "java":
                got = pullcheck.java_consume(program, tmp_path / "home-consumer", ns.addr, TOPIC, group, COUNT)
            else:
                assert compat_python is not None
                got = pullcheck.cpp_consume(compat_python, tmp_path / "home-consumer", ns.addr, TOPIC, group, COUNT)
            context = f"{got.context}\n{_logs(slave)}"
            assert got.missing_count == 0, f"{got.missing_count} messages skipped, e.g. {got.missing}: {context}"

            maxes, committed = await pullcheck.queue_offsets(rb_slave, TOPIC, QUEUES, group)
            assert sum(maxes.values()) == COUNT
            # the offsets the client committed (held by the slave): each queue's end, no more, no less
            assert committed == maxes, f"committed {committed}, queue ends {maxes}\n{context}"
            if got.client_offsets is not None:
                assert got.client_offsets == {f"sr-a:{q}": maxes[q] for q in range(QUEUES)}, context
        finally:
            await rpc.close()
