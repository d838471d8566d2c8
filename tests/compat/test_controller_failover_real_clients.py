"""Compatibility: clients and tools we did not write across a controller-mode failover.

One group of 3 of our brokers in controller mode (``allAckInSyncStateSet``, SYNC_FLUSH) with 3 of
our controllers (``tests/integration/failover_support.py``). The real RocketMQ C++ client
(PyPI ``rocketmq==0.4.4``) sends one message every few milliseconds and records every SEND_OK;
the master is killed with SIGKILL meanwhile; the controllers elect a new master with no operator
action, the C++ client finds it through the NameServer and sends to it; afterwards the C++ pull
consumer reads the topic and every acknowledged body must be there (0 lost). Then Apache's
``mqadmin getBrokerEpoch`` (GET_BROKER_EPOCH_CACHE, 1007) reads the new master's epochs: epoch 1
ended where epoch 2 began.

Needs the compat venv (``ROCKET_COMPAT_VENV``) and Java 17+ with the Apache jars
(``bench/compare/java.py``); fails and says why when they are missing.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from pathlib import Path

import pytest
from bench.compare import java

from rocket.remoting import RemotingClient
from tests.compat import mqadmin
from tests.compat.realclient import Driver, background
from tests.integration.failover_support import controller_group, wait_group_ready
from tests.integration.replication_support import TRANSIENT
from tests.support import eventually

pytestmark = [pytest.mark.compat, pytest.mark.timeout(400)]

TOPIC = "FoCpp"


async def test_cpp_client_across_a_kill_9_failover_and_mqadmin_get_broker_epoch(
        tmp_path: Path, compat_python: Path) -> None:
    try:
        lib = java.ensure_jars()
    except java.JavaSetupError as exc:
        pytest.fail(f"Apache RocketMQ's mqadmin is not available: {exc}", pytrace=False)
    client = RemotingClient()
    try:
        with controller_group(tmp_path) as g:
            m = await wait_group_ready(g, TOPIC, client)
            driver = Driver(compat_python, g.namesrv, tmp_path / "cpp-home")
            with background(driver, "send", "--topic", TOPIC, "--count", "2500", "--interval-ms", "5",
                            "--body-prefix", "cpp", "--send-timeout-ms", "3000", timeout=200) as sender:
                async def sent(n: int) -> bool:
                    return sum(1 for e in sender.events() if e.get("status") == "SEND_OK") >= n

                await eventually(lambda: sent(200), 60, what="the C++ client's first 200 acknowledged sends")
                killed = time.monotonic()
                g.brokers[m].proc.send_signal(signal.SIGKILL)
                g.brokers[m].proc.wait(10)
                before = sum(1 for e in sender.events() if e.get("status") == "SEND_OK")
                await eventually(lambda: sent(before + 100), 120,
                                 what="the C++ client's sends acknowledged by the new master")
                resumed = time.monotonic() - killed
                events = await asyncio.to_thread(sender.wait)
            acked = {e["body"] for e in events if e["event"] == "send" and e["status"] == "SEND_OK"}
            errors = [e for e in events if e["event"] == "send_error" or
                      (e["event"] == "send" and e["status"] != "SEND_OK")]
            print(f"C++ client: {len(acked)} acknowledged, {len(errors)} failed; sends to the new master "
                  f"{resumed:.1f} s after the kill")
            pulled = await asyncio.to_thread(driver.run, "pull-consume", "--topic", TOPIC, "--group", "CG_FO_CPP",
                                             "--expect", str(len(acked)), "--timeout", "60", timeout=90)
            bodies = [e["body"] for e in pulled if e["event"] == "msg"]
            lost = acked - set(bodies)
            print(f"C++ pull consumer: {len(bodies)} read, {len(bodies) - len(set(bodies))} duplicates, "
                  f"{len(lost)} acknowledged ones missing")
            assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {sorted(lost)[:5]}"

            (new,) = await eventually(lambda: g.master_box(not_index=m), 30, what="the new master",
                                      retry_on=TRANSIENT)
            out = await asyncio.to_thread(mqadmin.run_ok, lib, tmp_path / "mqadmin-home", "getBrokerEpoch",
                                          "-n", g.namesrv, "-b", "fo-a")
            assert g.brokers[new].addr in out, out
            epochs = re.findall(r"EpochEntry\{epoch=(\d+), startOffset=(\d+), endOffset=(\d+)\}", out)
            assert ("1", "0") in {(e, s) for e, s, _ in epochs}, out
            two = [(int(s), int(end)) for e, s, end in epochs if e == "2"]
            one_end = [int(end) for e, s, end in epochs if e == "1"]
            assert two and one_end and two[0][0] == one_end[0], out
    finally:
        await client.close()
