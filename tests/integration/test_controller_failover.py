"""Controller mode with real processes on loopback: 3 controllers, a NameServer and one group of
3 brokers (``enableControllerMode``, ``allAckInSyncStateSet``, SYNC_FLUSH). The controllers give
the brokers their ids and elect the master; the lease fence (``controllerLeaseFence``), manual
failover through the controllers, and a topic created just before the master dies. The kill -9
failover with its checker, and the other nemeses, are in ``tests/chaos`` (once each in
``make test``)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

import pytest

from rocket.protocol.codes import RequestCode
from rocket.remoting import RemotingClient, RemotingCommand, RemotingError, ResponseCode
from tests.integration.broker_harness import RawBroker, route
from tests.integration.controller_support import wait_leader
from tests.integration.failover_support import (
    CONTROLLER_MODE,
    Group,
    all_bodies,
    controller_group,
    wait_group_ready,
)
from tests.integration.replication_support import TRANSIENT, http_json
from tests.support import eventually, rocket_command

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def timer_dequeues(g: Group) -> dict[int, bool]:
    """index -> does the live broker deliver timer messages (``/api/v1/status`` ``timer.dequeue``)?"""
    out = {}
    for i, b in enumerate(g.brokers):
        if b.proc.poll() is None:
            status, body = await http_json(f"{b.http}/api/v1/status")
            assert status == 200, body
            out[i] = bool(body["timer"]["dequeue"])
    return out


async def test_master_with_the_lease_fence_stops_acknowledging_without_a_controller_majority(tmp_path: Path) -> None:
    """With ``controllerLeaseFence=true`` (the default when ``allAckInSyncStateSet`` is false; set
    here at run time with UPDATE_BROKER_CONFIG) SIGSTOP of 2 of the 3 controllers makes the master
    refuse sends within ``controllerHeartBeatTimeoutMills / 2`` (its lease) + the Raft leader
    fallback (2 s) + the poll period; it serves again once the controllers are back. (Without it,
    under ``allAckInSyncStateSet``, the master keeps serving: ``tests/chaos``.)"""
    client = RemotingClient()
    try:
        with controller_group(tmp_path) as g:
            m = await wait_group_ready(g, "FenceT", client)
            raw = RawBroker(client, g.brokers[m].addr)
            assert (await raw.send("FenceT", b"before")).code == ResponseCode.SUCCESS
            # the controller leader alone stops: the other two elect a leader, the master finds it
            # (it asks every controller at once) and keeps its role; no broker failover happens
            leader, _ = await wait_leader(client, g.controllers.addrs)
            li = g.controllers.addrs.index(leader)
            g.controllers.procs[li].send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
            try:
                await wait_leader(client, [a for a in g.controllers.addrs if a != leader], not_addr=leader)

                async def master_serves() -> bool:
                    return (await raw.send("FenceT", b"leader-paused")).code == ResponseCode.SUCCESS

                await eventually(master_serves, 10, what="the master to serve under the new controller leader",
                                 retry_on=TRANSIENT)
                assert await g.master() == m
            finally:
                g.controllers.procs[li].send_signal(signal.SIGCONT)  # type: ignore[union-attr]
            await asyncio.sleep(1.0)

            update = RemotingCommand(code=RequestCode.UPDATE_BROKER_CONFIG, body=b"controllerLeaseFence=true\n")
            assert (await client.invoke(g.brokers[m].addr, update, timeout=5.0)).code == ResponseCode.SUCCESS
            assert (await g.statuses())[m]["controllerMode"]["leaseFences"] is True
            leader, _ = await wait_leader(client, g.controllers.addrs)
            li = g.controllers.addrs.index(leader)
            paused = [li, (li + 1) % 3]  # the leader and one more: no majority is left
            stopped_at = time.monotonic()
            for i in paused:
                g.controllers.procs[i].send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
            try:
                last_ok = stopped_at
                refused: RemotingCommand | None = None
                while time.monotonic() - stopped_at < 15:
                    try:
                        resp = await asyncio.wait_for(raw.send("FenceT", b"during"), 4.0)
                    except (RemotingError, TimeoutError):
                        await asyncio.sleep(0.05)
                        continue
                    if resp.code == ResponseCode.SUCCESS:
                        last_ok = time.monotonic()
                    else:
                        refused = resp
                        if time.monotonic() - last_ok > 3.0:
                            break
                    await asyncio.sleep(0.05)
                bound = int(CONTROLLER_MODE["controllerHeartBeatTimeoutMills"]) / 2000 + 2.0 + 1.0
                fenced_after = last_ok - stopped_at
                print(f"last acknowledged send {fenced_after:.2f} s after the majority stopped (bound {bound} s)")
                assert refused is not None and refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused
                assert "fenced" in (refused.remark or ""), refused.remark
                assert fenced_after <= bound
            finally:
                for i in paused:
                    g.controllers.procs[i].send_signal(signal.SIGCONT)  # type: ignore[union-attr]

            async def serving_again() -> bool:
                i = await g.master()
                if i is None:
                    return False
                return (await RawBroker(client, g.brokers[i].addr).send("FenceT", b"after")).code == 0

            await eventually(serving_again, 30, what="the group to accept sends again", retry_on=TRANSIENT)

            # manual failover goes through the controllers (ELECT_MASTER, designateElect=true)
            (old,) = await eventually(lambda: g.master_box(full_set=2), 30, what="a master with a slave in sync",
                                      retry_on=TRANSIENT)
            done = await asyncio.to_thread(subprocess.run, rocket_command(
                "cluster", "failover", "-b", "fo-a", "-n", g.namesrv),
                capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stdout + done.stderr
            (new,) = await eventually(lambda: g.master_box(not_index=old), 20, what="the elected master",
                                      retry_on=TRANSIENT)
            st = (await g.statuses())[old]
            assert st["brokerRole"] == "SLAVE", st
            assert (await g.statuses())[new]["controllerMode"]["masterEpoch"] > st["epochs"][0][0]
            assert (await RawBroker(client, g.brokers[new].addr).send("FenceT", b"switched")).code == 0
    finally:
        await client.close()


async def test_a_topic_created_just_before_the_master_dies_is_served_by_the_new_master(tmp_path: Path) -> None:
    """The worst case for metadata: create a topic, send to it (acknowledged by every SyncStateSet
    member), kill -9 the master at once, before any metadata copy can reach the slaves. The new
    master gives the topic a config from its replicated data, registers its route, and serves
    every acknowledged message."""
    client = RemotingClient()
    try:
        with controller_group(tmp_path, extra={"slaveSyncInterval": "60000"}) as g:
            m = await wait_group_ready(g, "Warmup", client)
            raw = RawBroker(client, g.brokers[m].addr)
            assert (await raw.create_topic("Fresh", queues=2)).code == ResponseCode.SUCCESS
            acked = []
            for i in range(20):
                resp = await raw.send("Fresh", f"fresh-{i}".encode(), queue_id=i % 2)
                assert resp.code == ResponseCode.SUCCESS, resp.remark
                acked.append(f"fresh-{i}".encode())
            g.brokers[m].proc.send_signal(signal.SIGKILL)
            g.brokers[m].proc.wait(10)
            (new,) = await eventually(lambda: g.master_box(not_index=m), 30, what="a new master",
                                      retry_on=TRANSIENT)

            async def routed() -> bool:
                rt = await route(client, g.namesrv, "Fresh")
                return bool(rt) and any(bd["brokerAddrs"].get("0") == g.brokers[new].addr
                                        for bd in rt["brokerDatas"])

            await eventually(routed, 20, what="the topic's route to the new master", retry_on=TRANSIENT)
            # the NameServer lists the master as brokerId 0 and the slave under its controller id
            slave = next(i for i in range(3) if i not in (m, new))
            slave_id = (await g.statuses())[slave]["controllerMode"]["controllerBrokerId"]

            async def slave_listed() -> bool:
                rt = await route(client, g.namesrv, "Fresh")
                addrs = next(bd["brokerAddrs"] for bd in (rt or {}).get("brokerDatas", []))
                return addrs == {"0": g.brokers[new].addr, str(slave_id): g.brokers[slave].addr}

            await eventually(slave_listed, 20, what="master as id 0, slave under its controller id",
                             retry_on=TRANSIENT)
            on_new = await all_bodies(client, g.brokers[new].addr, "Fresh", 2)
            assert set(acked) <= set(on_new), sorted(set(acked) - set(on_new))
            assert (await RawBroker(client, g.brokers[new].addr).send("Fresh", b"after")).code == 0
    finally:
        await client.close()


async def test_a_promoted_master_with_the_lease_fence_keeps_serving_after_its_first_lease(tmp_path: Path) -> None:
    """A promotion grants the new master a lease of ``controllerHeartBeatTimeoutMills / 2``; its
    poll loop must confirm it from the controller leader at once, not after the slave's polling
    period (``syncBrokerMetadataPeriod``, longer than the lease here). Before the fix the new master
    refused sends as "fenced" for about a second, 2 s after its promotion (found by the failover
    cell of ``make bench-compare``)."""
    client = RemotingClient()
    fence_s = int(CONTROLLER_MODE["controllerHeartBeatTimeoutMills"]) / 2000
    # a slave polls every min(syncBrokerMetadataPeriod, 5 x brokerHeartbeatInterval) = 5 s > the 2 s lease
    extra = {"controllerLeaseFence": "true", "syncBrokerMetadataPeriod": "10000", "brokerHeartbeatInterval": "1000"}
    try:
        with controller_group(tmp_path, extra=extra) as g:
            m = await wait_group_ready(g, "LeaseT", client)
            # timer messages: only the master delivers (a controller-mode broker starts as a slave)
            assert await timer_dequeues(g) == {i: i == m for i in range(3)}
            g.brokers[m].proc.send_signal(signal.SIGKILL)
            g.brokers[m].proc.wait(10)
            (new,) = await eventually(lambda: g.master_box(not_index=m), 30, what="a new master",
                                      retry_on=TRANSIENT, interval=0.05)
            raw = RawBroker(client, g.brokers[int(new)].addr)

            async def serves() -> bool:
                return (await raw.send("LeaseT", b"first")).code == ResponseCode.SUCCESS

            await eventually(serves, 20, what="the new master to acknowledge", retry_on=TRANSIENT)
            refused: list[str] = []
            until = time.monotonic() + fence_s * 3  # well past the lease the promotion granted
            while time.monotonic() < until:
                response = await raw.send("LeaseT", b"steady")
                if response.code != ResponseCode.SUCCESS:
                    refused.append(f"{response.code}: {response.remark}")
                await asyncio.sleep(0.05)
            assert refused == []
            assert await timer_dequeues(g) == {i: i == int(new) for i in range(3) if i != m}
    finally:
        await client.close()
