"""Nemeses against one controller-mode group (3 controllers, a NameServer, 1 master + 2 slaves,
``allAckInSyncStateSet``, SYNC_FLUSH), with real processes on loopback and a checker: a producer
(8 tasks of our client) records every acknowledged id, with the broker that acknowledged it and
when; at the end every acknowledged id must be consumed from the group's master (0 lost) and
duplicates are counted. ``make chaos`` runs each nemesis ``CHAOS_RUNS`` times (kill -9 of the master:
that many; the others a quarter of it) and prints p50/p99; ``make test`` runs each once. The group
is shared by the tests of this module; every nemesis leaves it whole again (all 3 brokers in the
SyncStateSet, 3 controllers).

* kill -9 the master: the controllers elect a new master; RTO (first send acknowledged by the new
  master) and election time; the killed broker is started again and rejoins.
* SIGSTOP the master longer than ``controllerHeartBeatTimeoutMills``, then SIGCONT: a new master is
  elected meanwhile; the resumed one becomes a slave.
* kill -9 the master and the controller leader together: the other controllers elect a leader and
  it a new master.
* kill -9, then SIGSTOP, 2 of the 3 controllers (the leader among them) for longer than the heartbeat
  timeout and the lease: no election may happen, the master keeps acknowledging sends throughout
  (``allAckInSyncStateSet``: see ``rocket.broker.controller_mode``).
* SIGTERM and restart every controller, then every broker (the master among them), one by one under
  load.

The network partitions are in ``test_partition_chaos.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from collections.abc import Iterator

import pytest

from rocket.client import Producer
from rocket.percentiles import percentile
from rocket.remoting import RemotingClient
from tests.chaos.chaos_report import RUNS, report, spread
from tests.integration.controller_support import wait_leader
from tests.integration.failover_support import (
    CONTROLLER_MODE,
    AckLog,
    Group,
    all_bodies,
    controller_group,
    kill_master_once,
    wait_group_ready,
)
from tests.integration.replication_support import TRANSIENT
from tests.support import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240 + 60 * RUNS)]

HB_TIMEOUT_S = int(CONTROLLER_MODE["controllerHeartBeatTimeoutMills"]) / 1000
SOME = max(1, RUNS // 4)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    with controller_group(tmp_path_factory.mktemp("chaos")) as g:
        yield g


def _producer(g: Group, topic: str) -> Producer:
    return Producer(f"PG_{topic}", g.namesrv, poll_namesrv_interval=0.5, fault_avoid_seconds=1.0, send_timeout=3.0)


def _dups(bodies: dict[bytes, int]) -> int:
    return sum(n - 1 for n in bodies.values() if n > 1)


async def test_kill_9_master(group: Group) -> None:
    g = group
    client = RemotingClient()
    rtos: list[float] = []
    elections: list[float] = []
    lost = dups = acked = 0
    try:
        for run in range(RUNS):
            before = {i for i, b in enumerate(g.brokers) if b.proc.poll() is None}
            r = await kill_master_once(g, f"Chaos{run}", client, load_seconds=2.0)
            killed = next(i for i in before if g.brokers[i].proc.poll() is not None)
            print(f"kill -9 run {run + 1}/{RUNS}: RTO {r.rto:.2f} s, elected {r.elected:.2f} s, acked {r.acked}, "
                  f"lost {r.lost}, duplicates {r.duplicates}, not ok {r.not_ok}", flush=True)
            rtos.append(r.rto)
            elections.append(r.elected)
            lost += r.lost
            dups += r.duplicates
            acked += r.acked
            g.restart(killed)
    finally:
        await client.close()
    report("kill -9 of the master", len(rtos), acked, lost, dups, elected=spread(elections), rto=spread(rtos))
    assert lost == 0
    assert percentile(sorted(rtos), 99) <= 10.0, rtos


async def test_pause_master_longer_than_the_heartbeat_timeout(group: Group) -> None:
    g = group
    client = RemotingClient()
    rtos: list[float] = []
    lost = dups = acked = 0
    try:
        for run in range(SOME):
            topic = f"Pause{run}"
            m = await wait_group_ready(g, topic, client)
            producer = _producer(g, topic)
            await producer.start()
            load = AckLog(producer, topic)
            try:
                load.start()
                await asyncio.sleep(2.0)
                g.brokers[m].proc.send_signal(signal.SIGSTOP)
                paused = time.monotonic()
                await asyncio.sleep(HB_TIMEOUT_S + 3.0)
                g.brokers[m].proc.send_signal(signal.SIGCONT)
                resumed = time.monotonic()
                (new,) = await eventually(lambda m=m: g.master_box(not_index=m), 30, what="a new master",
                                          retry_on=TRANSIENT)

                async def demoted(m: int = m) -> bool:
                    st = (await g.statuses()).get(m)
                    return st is not None and st["brokerRole"] == "SLAVE"

                await eventually(demoted, 30, what="the resumed old master to become a slave", retry_on=TRANSIENT)
                await asyncio.sleep(1.0)
            finally:
                await load.stop()
                await producer.shutdown()
            on_new = await all_bodies(client, g.brokers[new].addr, topic, 4)
            missing = set(load.acked) - set(on_new)
            # the paused master acknowledged nothing after it was resumed
            late = [t for t, port in load.acked.values() if port == g.brokers[m].port and t > resumed]
            first = load.first_ack_after(paused, g.brokers[m].port)
            if first:
                rtos.append(first - paused)
            print(f"pause run {run + 1}: paused {resumed - paused:.1f} s, new master acknowledged "
                  f"{f'{first - paused:.2f} s' if first else 'nothing'} after the pause, acked {len(load.acked)}, "
                  f"lost {len(missing)}, duplicates {_dups(on_new)}", flush=True)
            assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
            assert not late, f"the resumed old master acknowledged {len(late)} sends"
            acked += len(load.acked)
            lost += len(missing)
            dups += _dups(on_new)
    finally:
        await client.close()
    report(f"SIGSTOP of the master for {HB_TIMEOUT_S + 3:.0f} s, then SIGCONT", SOME, acked, lost, dups,
           rto=spread(rtos))


async def test_kill_master_and_controller_leader_together(group: Group) -> None:
    """kill -9 the master and the controller leader at the same moment: the other two controllers
    elect a leader, which elects a new master; 0 acknowledged lost. Both are started again."""
    g = group
    client = RemotingClient()
    rtos: list[float] = []
    lost = dups = acked = 0
    try:
        for run in range(SOME):
            topic = f"Both{run}"
            m = await wait_group_ready(g, topic, client)
            leader, _ = await wait_leader(client, g.controllers.addrs)
            li = g.controllers.addrs.index(leader)
            producer = _producer(g, topic)
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
                                 is not None, 30, what="sends acknowledged by the new master", interval=0.05)
                rto = float(load.first_ack_after(killed, port) or 0.0) - killed
                await asyncio.sleep(1.0)
            finally:
                await load.stop()
                await producer.shutdown()
            on_new = await all_bodies(client, g.brokers[new].addr, topic, 4)
            missing = set(load.acked) - set(on_new)
            rtos.append(rto)
            print(f"master + controller leader run {run + 1}: RTO {rto:.2f} s, acked {len(load.acked)}, "
                  f"lost {len(missing)}, duplicates {_dups(on_new)}", flush=True)
            assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
            acked += len(load.acked)
            lost += len(missing)
            dups += _dups(on_new)
            g.controllers.start(li)
            g.restart(m)
    finally:
        await client.close()
    report("kill -9 of the master and of the controller leader together", SOME, acked, lost, dups, rto=spread(rtos))


async def test_two_of_three_controllers_down_no_election_master_keeps_serving(group: Group) -> None:
    """kill -9 (then, in a second round, SIGSTOP) 2 of the 3 controllers, the leader among them,
    for the heartbeat timeout + 2 s (the master's lease, ``timeout / 2``, runs out meanwhile): no
    election may happen (same master, same epoch, the others slaves), and the master keeps
    acknowledging sends — after its lease ran out too. The controllers come back; still no
    election; 0 acknowledged lost."""
    g = group
    client = RemotingClient()
    hold = HB_TIMEOUT_S + 2.0
    lease = HB_TIMEOUT_S / 2
    gaps: list[float] = []
    lost = dups = acked = 0
    try:
        for run in range(SOME):
            for how in ("kill", "stop"):
                topic = f"Two{how.capitalize()}{run}"
                m = await wait_group_ready(g, topic, client)
                epoch = (await g.statuses())[m]["controllerMode"]["masterEpoch"]
                leader, _ = await wait_leader(client, g.controllers.addrs)
                li = g.controllers.addrs.index(leader)
                down = [li, (li + 1) % 3]
                producer = _producer(g, topic)
                await producer.start()
                load = AckLog(producer, topic)
                port = g.brokers[m].port
                try:
                    load.start()
                    await asyncio.sleep(1.5)
                    t0 = time.monotonic()
                    for i in down:
                        if how == "kill":
                            g.controllers.kill(i)
                        else:
                            g.controllers.procs[i].send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
                    try:
                        await asyncio.sleep(hold)
                        t1 = time.monotonic()
                        st = await g.statuses()
                        cm = st[m]["controllerMode"]
                        assert st[m]["brokerRole"] != "SLAVE" and not cm["fenced"], st[m]
                        assert cm["masterEpoch"] == epoch, cm
                        assert all(s["brokerRole"] == "SLAVE" for i, s in st.items() if i != m), st
                    finally:
                        for i in down:
                            if how == "kill":
                                g.controllers.start(i)
                            else:
                                g.controllers.procs[i].send_signal(signal.SIGCONT)  # type: ignore[union-attr]
                    await wait_leader(client, g.controllers.addrs, timeout=30)
                    await asyncio.sleep(1.0)
                finally:
                    await load.stop()
                    await producer.shutdown()
                during = sorted(t for t, p in load.acked.values() if t0 < t <= t1)
                others = [p for t, p in load.acked.values() if p != port]
                after_lease = [t for t in during if t > t0 + lease + 1.0]
                edges = [t0, *during, t1]
                gap = max(b - a for a, b in itertools.pairwise(edges))
                gaps.append(gap)
                on_m = await all_bodies(client, g.brokers[m].addr, topic, 4)
                missing = set(load.acked) - set(on_m)
                print(f"2 of 3 controllers {how} run {run + 1}: {len(during)} acknowledged in the {hold:.0f} s without "
                      f"a majority ({len(after_lease)} after the lease ran out), longest gap {gap:.2f} s, acked "
                      f"{len(load.acked)}, lost {len(missing)}, duplicates {_dups(on_m)}", flush=True)
                assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
                assert not others, f"{len(others)} sends acknowledged by another broker: an election happened"
                assert after_lease, "the master stopped acknowledging without a controller majority"
                st = await g.statuses()
                assert await g.master() == m and st[m]["controllerMode"]["masterEpoch"] == epoch, st[m]
                acked += len(load.acked)
                lost += len(missing)
                dups += _dups(on_m)
    finally:
        await client.close()
    report("kill -9 / SIGSTOP of 2 of the 3 controllers", 2 * SOME, acked, lost, dups,
           elections="0", longest_gap_between_acks=spread(gaps))


async def test_restart_every_controller_and_broker_one_by_one_under_load(group: Group) -> None:
    """SIGTERM and restart each controller, then each broker (the master among them), one at a time,
    while a producer sends; after each restart the group must be whole again (a master with all 3
    in its SyncStateSet); at the end every acknowledged id is on the master (0 lost)."""
    g = group
    client = RemotingClient()
    try:
        await wait_group_ready(g, "Rolling", client)
        producer = _producer(g, "Rolling")
        await producer.start()
        load = AckLog(producer, "Rolling")
        began = time.monotonic()
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
                print(f"{time.monotonic() - began:.1f} s: controller {i} restarted; acked so far {len(load.acked)}",
                      flush=True)
            for i in range(len(g.brokers)):
                g.brokers[i].proc.send_signal(signal.SIGTERM)
                await asyncio.to_thread(g.brokers[i].proc.wait, 30)
                g.restart(i)

                async def whole(i: int = i) -> bool:
                    # a master with all 3 in its set, broker i master or replicating from it again
                    m = await g.master(full_set=3)
                    st = await g.statuses()
                    return m is not None and i in st and (m == i or (st[i]["master"] or {}).get("state")
                                                          == "transferring")

                await eventually(whole, 120, what="the group whole again", retry_on=TRANSIENT)
                print(f"{time.monotonic() - began:.1f} s: broker {i} restarted; acked so far {len(load.acked)}, "
                      f"not ok {load.not_ok}", flush=True)
            await asyncio.sleep(1.0)
        finally:
            await load.stop()
            await producer.shutdown()
        (m,) = await eventually(lambda: g.master_box(), 30, what="a master", retry_on=TRANSIENT)
        on_master = await all_bodies(client, g.brokers[m].addr, "Rolling", 4)
        missing = set(load.acked) - set(on_master)
        print(f"rolling restart: acked {len(load.acked)}, lost {len(missing)}, duplicates {_dups(on_master)}, "
              f"not ok {load.not_ok}")
        report("SIGTERM + restart of each controller, then each broker, under load", 1, len(load.acked),
               len(missing), _dups(on_master))
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    finally:
        await client.close()
