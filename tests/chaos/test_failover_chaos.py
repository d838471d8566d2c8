"""``make chaos``: repeated nemeses against a controller-mode group (3 controllers, a NameServer,
1 master + 2 slaves, ``allAckInSyncStateSet``, SYNC_FLUSH), with real processes on loopback. Not
part of ``make test`` (marker ``chaos``); ``CHAOS_RUNS`` sets the number of runs (default 20).

* kill -9 the master while a producer records every acknowledged id; the controllers elect a new
  master; every acknowledged id must be on it (0 lost; duplicates counted); the killed broker is
  started again and must rejoin the SyncStateSet before the next run. Reports the time until the
  group acknowledged sends again (RTO) as p50/p99 and the election time.
* kill -9 the master and the controller leader together: the other controllers elect a leader
  and it a new master; 0 acknowledged lost.
* SIGSTOP the master longer than ``controllerHeartBeatTimeoutMills``, then SIGCONT: a new master
  is elected meanwhile; the old one, resumed, must not acknowledge anything (it is fenced, then
  becomes a slave); 0 acknowledged lost.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from rocket.client import Producer
from rocket.percentiles import percentile
from rocket.remoting import RemotingClient
from tests.integration.controller_support import wait_leader
from tests.integration.failover_support import (
    CONTROLLER_MODE,
    AckLog,
    all_bodies,
    controller_group,
    kill_master_once,
    wait_group_ready,
)
from tests.integration.replication_support import TRANSIENT
from tests.support import eventually

RUNS = int(os.environ.get("CHAOS_RUNS", "20"))
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(120 + 60 * RUNS)]


async def test_kill_9_master_repeatedly(tmp_path: Path) -> None:
    client = RemotingClient()
    rtos: list[float] = []
    elections: list[float] = []
    lost = dups = acked = 0
    try:
        with controller_group(tmp_path) as g:
            for run in range(RUNS):
                before = {i for i, b in enumerate(g.brokers) if b.proc.poll() is None}
                r = await kill_master_once(g, f"Chaos{run}", client, load_seconds=2.0)
                killed = next(i for i in before if g.brokers[i].proc.poll() is not None)
                print(f"run {run + 1}/{RUNS}: RTO {r.rto:.2f} s, elected {r.elected:.2f} s, acked {r.acked}, "
                      f"lost {r.lost}, duplicates {r.duplicates}, not ok {r.not_ok}", flush=True)
                rtos.append(r.rto)
                elections.append(r.elected)
                lost += r.lost
                dups += r.duplicates
                acked += r.acked
                g.restart(killed)
    finally:
        await client.close()
    rtos.sort()
    elections.sort()
    print(f"\n{len(rtos)} kill -9 failovers: RTO p50 {percentile(rtos, 50):.2f} s, p99 {percentile(rtos, 99):.2f} s, "
          f"max {max(rtos):.2f} s; election p50 {percentile(elections, 50):.2f} s, p99 "
          f"{percentile(elections, 99):.2f} s; {acked} acknowledged, {lost} lost, {dups} duplicates")
    assert lost == 0
    assert percentile(rtos, 99) <= 10.0


async def test_pause_master_longer_than_the_heartbeat_timeout(tmp_path: Path) -> None:
    client = RemotingClient()
    timeout_s = int(CONTROLLER_MODE["controllerHeartBeatTimeoutMills"]) / 1000
    try:
        with controller_group(tmp_path) as g:
            for run in range(max(1, RUNS // 4)):
                topic = f"Pause{run}"
                m = await wait_group_ready(g, topic, client)
                producer = Producer(f"PG_{topic}", g.namesrv, poll_namesrv_interval=0.5, fault_avoid_seconds=1.0,
                                    send_timeout=3.0)
                await producer.start()
                load = AckLog(producer, topic)
                try:
                    load.start()
                    await asyncio.sleep(2.0)
                    g.brokers[m].proc.send_signal(signal.SIGSTOP)
                    paused = time.monotonic()
                    await asyncio.sleep(timeout_s + 3.0)
                    g.brokers[m].proc.send_signal(signal.SIGCONT)
                    resumed = time.monotonic()
                    (new,) = await eventually(lambda m=m: g.master_box(not_index=m), 30, what="a new master",
                                              retry_on=TRANSIENT)

                    async def demoted(m: int = m) -> bool:
                        st = (await g.statuses()).get(m)
                        return st is not None and st["brokerRole"] == "SLAVE"

                    await eventually(demoted, 30, what="the resumed old master to become a slave",
                                     retry_on=TRANSIENT)
                    await asyncio.sleep(1.0)
                finally:
                    await load.stop()
                    await producer.shutdown()
                on_new = await all_bodies(client, g.brokers[new].addr, topic, 4)
                missing = set(load.acked) - set(on_new)
                first = load.first_ack_after(paused, g.brokers[m].port)
                rto = f"{first - paused:.2f} s" if first else "none"
                print(f"pause run {run + 1}: paused {resumed - paused:.1f} s, sends acknowledged by the new master "
                      f"{rto} after the pause, acked {len(load.acked)}, "
                      f"lost {len(missing)}, duplicates {sum(n - 1 for n in on_new.values() if n > 1)}", flush=True)
                assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    finally:
        await client.close()


async def test_kill_master_and_controller_leader_together(tmp_path: Path) -> None:
    """kill -9 the master and the controller leader at the same moment: the other two controllers
    elect a leader, which elects a new master; 0 acknowledged lost. Both are started again."""
    client = RemotingClient()
    rtos: list[float] = []
    try:
        with controller_group(tmp_path) as g:
            for run in range(max(1, RUNS // 4)):
                topic = f"Both{run}"
                m = await wait_group_ready(g, topic, client)
                leader, _ = await wait_leader(client, g.controllers.addrs)
                li = g.controllers.addrs.index(leader)
                producer = Producer(f"PG_{topic}", g.namesrv, poll_namesrv_interval=0.5, fault_avoid_seconds=1.0,
                                    send_timeout=3.0)
                await producer.start()
                load = AckLog(producer, topic)
                try:
                    load.start()
                    await asyncio.sleep(2.0)
                    killed = time.monotonic()
                    g.controllers.kill(li)
                    g.brokers[m].proc.send_signal(signal.SIGKILL)
                    g.brokers[m].proc.wait(10)
                    (new,) = await eventually(lambda m=m: g.master_box(not_index=m), 60, what="a new master",
                                              retry_on=TRANSIENT, interval=0.05)
                    port = g.brokers[m].port
                    await eventually(lambda port=port, load=load, killed=killed: load.first_ack_after(killed, port)
                                     is not None, 30,
                                     what="sends acknowledged by the new master", interval=0.05)
                    rto = float(load.first_ack_after(killed, port) or 0.0) - killed
                    await asyncio.sleep(1.0)
                finally:
                    await load.stop()
                    await producer.shutdown()
                on_new = await all_bodies(client, g.brokers[new].addr, topic, 4)
                missing = set(load.acked) - set(on_new)
                rtos.append(rto)
                print(f"master + controller leader run {run + 1}: RTO {rto:.2f} s, acked {len(load.acked)}, "
                      f"lost {len(missing)}, duplicates {sum(n - 1 for n in on_new.values() if n > 1)}", flush=True)
                assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
                g.controllers.start(li)
                g.restart(m)
    finally:
        await client.close()
    rtos.sort()
    print(f"\nmaster + controller leader killed, {len(rtos)} runs: RTO p50 {percentile(rtos, 50):.2f} s, "
          f"max {max(rtos):.2f} s")


async def test_restart_every_controller_and_broker_one_by_one_under_load(tmp_path: Path) -> None:
    """SIGTERM and restart each controller, then each broker (the master among them), one at a time,
    while a producer sends; after each restart the group must be whole again (a master with all 3
    in its SyncStateSet); at the end every acknowledged id is on the master (0 lost)."""
    client = RemotingClient()
    try:
        with controller_group(tmp_path) as g:
            await wait_group_ready(g, "Rolling", client)
            producer = Producer("PG_Rolling", g.namesrv, poll_namesrv_interval=0.5, fault_avoid_seconds=1.0,
                                send_timeout=3.0)
            await producer.start()
            load = AckLog(producer, "Rolling")
            try:
                load.start()
                for i in range(g.controllers.n):
                    proc = g.controllers.procs[i]
                    assert proc is not None
                    proc.send_signal(signal.SIGTERM)
                    await asyncio.to_thread(proc.wait, 20)
                    g.controllers.procs[i] = None
                    g.controllers.start(i)
                    await wait_leader(client, g.controllers.addrs, timeout=30)
                    print(f"controller {i} restarted; acked so far {len(load.acked)}", flush=True)
                for i in range(len(g.brokers)):
                    g.brokers[i].proc.send_signal(signal.SIGTERM)
                    await asyncio.to_thread(g.brokers[i].proc.wait, 30)
                    g.restart(i)
                    await eventually(lambda: g.master_box(full_set=3), 60, what="the group whole again",
                                     retry_on=TRANSIENT)
                    print(f"broker {i} restarted; acked so far {len(load.acked)}", flush=True)
                await asyncio.sleep(1.0)
            finally:
                await load.stop()
                await producer.shutdown()
            (m,) = await eventually(lambda: g.master_box(), 30, what="a master", retry_on=TRANSIENT)
            on_master = await all_bodies(client, g.brokers[m].addr, "Rolling", 4)
            missing = set(load.acked) - set(on_master)
            print(f"rolling restart: acked {len(load.acked)}, lost {len(missing)}, "
                  f"duplicates {sum(n - 1 for n in on_master.values() if n > 1)}, not ok {load.not_ok}")
            assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    finally:
        await client.close()
