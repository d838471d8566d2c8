"""Replication under faults, with real processes on loopback.

SYNC_MASTER failover: a producer keeps sending while the master of group
``ha-a`` is killed with SIGKILL; the slave is promoted over HTTP; every
acknowledged message is then readable from the new master, a push consumer
that ran throughout has received every acknowledged message (no gap), the
producer moved to group ``ha-b`` meanwhile, and the old master, restarted
with its original configuration, steps down, truncates what the new master
does not have and converges to the same CommitLog bytes. The slave is frozen
(SIGSTOP) before the kill while the master stores 16 MiB of WAIT=false
messages, so the old master surely holds a tail the slave never received,
which it must cut when it rejoins.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rocket.client import Producer, PushConsumer
from rocket.client.subscription import ConsumeFrom
from rocket.message import MessageExt
from rocket.remoting import RemotingClient, RequestCode, ResponseCode
from tests.integration.broker_harness import RawBroker, broker_port, nameserver_process, records, route
from tests.integration.replication_support import (
    TRANSIENT,
    Load,
    commitlog_bytes,
    group_broker,
    ha_status,
    http_json,
)
from tests.support import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

SEGMENT = 8 * 1024 * 1024  # broker_process's mappedFileSizeCommitLog
TOPIC = "RepT"


async def _all_bodies(rb: RawBroker, topic: str, queues: int) -> set[bytes]:
    out: set[bytes] = set()
    for q in range(queues):
        offset = 0
        while True:
            resp = await rb.pull("CHECK_ALL", topic, queue_id=q, offset=offset, max_nums=32)
            if resp.code != ResponseCode.SUCCESS:
                break
            out.update(m.body for m in records(resp))
            offset = int(resp.ext_fields["nextBeginOffset"])
    return out


async def test_sync_master_killed_slave_promoted_old_master_rejoins(tmp_path: Path) -> None:
    client = RemotingClient()
    m_port, s_port, b_port = broker_port(), broker_port(), broker_port()
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(nameserver_process(tmp_path))
        master = stack.enter_context(group_broker(tmp_path, "ha-a", ns.addr, port=m_port, role="SYNC_MASTER",
                                                  broker_id=0))
        slave = stack.enter_context(group_broker(tmp_path, "ha-a", ns.addr, port=s_port, role="SLAVE",
                                                 broker_id=1))
        other = stack.enter_context(group_broker(tmp_path, "ha-b", ns.addr, port=b_port, role="ASYNC_MASTER",
                                                 broker_id=0))
        for b in (master, other):
            assert (await RawBroker(client, b.addr).create_topic(TOPIC, queues=4)).code == 0
        await eventually(lambda: route(client, ns.addr, TOPIC), 10, what="the topic's route", retry_on=TRANSIENT)

        async def slave_in_sync() -> bool:
            return any(s["inSync"] for s in (await ha_status(master))["slaves"])

        await eventually(slave_in_sync, 15, what="the slave to connect", retry_on=TRANSIENT)

        received: dict[bytes, int] = {}

        def handle(msgs: list[MessageExt]) -> None:
            for m in msgs:
                received[m.body] = received.get(m.body, 0) + 1

        consumer = PushConsumer("CG_REP", ns.addr, handle, consume_from=ConsumeFrom.FIRST_OFFSET,
                                poll_namesrv_interval=1.0, rebalance_interval=2.0, persist_interval=1.0,
                                suspend_timeout=2.0)
        consumer.subscribe(TOPIC)
        await consumer.start()
        producer = Producer("PG_REP", ns.addr, poll_namesrv_interval=1.0, fault_avoid_seconds=3.0,
                            send_timeout=3.0)
        await producer.start()
        load = Load(producer, TOPIC, workers=16)
        try:
            load.start()
            await asyncio.sleep(4.0)  # > the slave's first config sync (3 s)
            acked_before = len(load.acked_on("ha-a"))
            assert acked_before > 100, (load.acked, load.not_ok)
            # freeze the slave for a moment: the master keeps storing sends it cannot
            # acknowledge (FLUSH_SLAVE_TIMEOUT), a tail the slave never receives
            slave.proc.send_signal(signal.SIGSTOP)
            try:
                # WAIT=false sends are stored without waiting for a slave (never counted as
                # acknowledged below): ~16 MiB that cannot all fit in the sockets' buffers
                raw = RawBroker(client, master.addr)
                big = b"u" * 64 * 1024
                answers = await asyncio.gather(*(raw.send("RepNoWait", big, props={"WAIT": "false"})
                                                 for _ in range(256)))
                assert {a.code for a in answers} == {ResponseCode.SUCCESS}
                await asyncio.sleep(1.0)
                master.proc.send_signal(signal.SIGKILL)
                master.proc.wait(10)
            finally:
                slave.proc.send_signal(signal.SIGCONT)
            killed_at = len(load.acked)
            await asyncio.sleep(2.0)
            # producers moved on to the other group meanwhile
            assert len(load.acked_on("ha-b")) > 0

            async def promote() -> dict[str, object] | None:
                # generous: the promotion fsyncs the epoch and role files, which a busy disk may hold up
                status, body = await http_json(f"{slave.http}/api/v1/role", "POST", {"role": "MASTER"}, timeout=45)
                return body if status == 200 else None

            promoted = await eventually(promote, 60, what="the slave's promotion", retry_on=TRANSIENT)
            assert promoted["brokerRole"] == "ASYNC_MASTER" and promoted["brokerId"] == 0
            assert promoted["epoch"] == 2 and promoted["epochs"][-1][0] == 2

            async def sends_reach_new_master() -> bool:
                return len(load.acked_on("ha-a")) > acked_before + 50

            await eventually(sends_reach_new_master, 20, what="sends to the promoted master", retry_on=TRANSIENT)
            await asyncio.sleep(1.0)
        finally:
            await load.stop()
        assert len(load.acked) > killed_at
        acked_a, acked_b = load.acked_on("ha-a"), load.acked_on("ha-b")

        # 1. every acknowledged message of ha-a is on the new master, every one of ha-b on ha-b
        on_new_master = await _all_bodies(RawBroker(client, slave.addr), TOPIC, 4)
        missing = acked_a - on_new_master
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
        assert not acked_b - await _all_bodies(RawBroker(client, other.addr), TOPIC, 4)

        # 2. the consumer ran throughout and has every acknowledged message (duplicates allowed)
        async def consumed_all() -> bool:
            return not (set(load.acked) - set(received))

        try:
            await eventually(consumed_all, 30,
                             what="the consumer to receive every acknowledged message", retry_on=TRANSIENT)
        finally:
            await consumer.shutdown()
            await producer.shutdown()

        # 3. the old master comes back with its original configuration and becomes a slave
        old = stack.enter_context(group_broker(tmp_path, "ha-a", ns.addr, port=m_port, role="SYNC_MASTER",
                                               broker_id=0))
        new_master_status = await ha_status(slave)

        async def converged() -> dict[str, object] | None:
            st = await ha_status(old)
            ok = (st["brokerRole"] == "SLAVE" and st["maxOffset"] == new_master_status["maxOffset"]
                  and (st["master"] or {}).get("state") == "transferring")
            return st if ok else None

        rejoined = await eventually(converged, 30,
                                    what="the old master to rejoin as a slave and catch up", retry_on=TRANSIENT)
        assert rejoined["brokerId"] == 1 and rejoined["epochs"] == new_master_status["epochs"]
        end = int(new_master_status["maxOffset"])  # type: ignore[call-overload]
        assert commitlog_bytes(old.store, end, SEGMENT) == commitlog_bytes(slave.store, end, SEGMENT)
        # it refuses sends as a slave, and the NameServer lists the new master under id 0
        resp = await RawBroker(client, old.addr).send(TOPIC, b"x")
        assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
        rt = await route(client, ns.addr, TOPIC)
        assert rt is not None
        addrs = next(bd["brokerAddrs"] for bd in rt["brokerDatas"] if bd["brokerName"] == "ha-a")
        assert addrs == {"0": slave.addr, "1": old.addr}
        log = old.log_text()
        assert "stepping down" in log
        assert "truncated this broker's CommitLog" in log, "the old master had no divergent tail to cut"
        print(f"acked: ha-a {len(acked_a)}, ha-b {len(acked_b)}; not ok {load.not_ok}")
    await client.close()


async def test_slave_reads_config_copy_and_cli_failover(tmp_path: Path) -> None:
    """Slave reads (suggestWhichBrokerId, serving pulls, no offsets from pulls), the 10 s metadata copy
    (here 1 s: topics, groups, consumer and delay offsets), and ``rocket cluster failover``."""
    client = RemotingClient()
    lag_settings = {"slaveReadLagBytes": "2000"}
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(nameserver_process(tmp_path))
        master = stack.enter_context(group_broker(tmp_path, "ha-r", ns.addr, port=broker_port(),
                                                  role="ASYNC_MASTER", broker_id=0, extra=lag_settings))
        slave = stack.enter_context(group_broker(tmp_path, "ha-r", ns.addr, port=broker_port(), role="SLAVE",
                                                 broker_id=1, extra=lag_settings))
        rm, rs = RawBroker(client, master.addr), RawBroker(client, slave.addr)
        assert (await rm.create_topic("ReadT", queues=1)).code == 0

        async def slave_connected() -> bool:
            return bool((await ha_status(master))["slaves"])

        await eventually(slave_connected, 15, what="the slave to connect", retry_on=TRANSIENT)
        for i in range(100):
            assert (await rm.send("ReadT", f"r{i}".encode() * 20)).code == 0
        assert (await rm.send("ReadT", b"later", props={"DELAY": "1"})).code == 0
        group_body = b'{"groupName":"GROUP_R","retryMaxTimes":5,"whichBrokerWhenConsumeSlowly":1}'
        assert (await rm.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=group_body)).code == 0
        assert (await rm.call(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "GROUP_R", "topic": "ReadT",
                                                                   "queueId": 0, "commitOffset": 42})).code == 0
        # far behind (> slaveReadLagBytes): the master sends the consumer to broker 1; near the end: to 0
        far = await rm.pull("GROUP_R", "ReadT", offset=0, max_nums=1)
        near = await rm.pull("GROUP_R", "ReadT", offset=99, max_nums=1)
        assert (far.code, far.ext_fields["suggestWhichBrokerId"]) == (ResponseCode.SUCCESS, "1")
        assert near.ext_fields["suggestWhichBrokerId"] == "0"

        async def slave_copied() -> bool:
            offset = await rs.call(RequestCode.QUERY_CONSUMER_OFFSET,
                                   {"consumerGroup": "GROUP_R", "topic": "ReadT", "queueId": 0})
            groups = (await rs.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body
            delays_m = (await rm.call(RequestCode.GET_ALL_DELAY_OFFSET)).body
            delays_s = (await rs.call(RequestCode.GET_ALL_DELAY_OFFSET)).body
            return (offset.code == 0 and offset.ext_fields.get("offset") == "42" and b"GROUP_R" in groups
                    and delays_m == delays_s and b'"1"' in delays_s)

        await eventually(slave_copied, 15,
                         what="the slave to copy offsets, groups and delay offsets", retry_on=TRANSIENT)
        # the slave serves pulls (slaveReadEnable), and does not take offsets from them
        pulled = await rs.pull("GROUP_R", "ReadT", offset=10, max_nums=5, sys_flag=1 | 4, commit_offset=77)
        assert pulled.code == ResponseCode.SUCCESS and len(records(pulled)) == 5
        offset = await rs.call(RequestCode.QUERY_CONSUMER_OFFSET,
                               {"consumerGroup": "GROUP_R", "topic": "ReadT", "queueId": 0})
        assert offset.ext_fields["offset"] == "42"

        # failover from the command line: refused while the master lives, done once it is gone
        cli = [sys.executable, "-m", "rocket.cli", "cluster", "failover", "--broker-name", "ha-r", "-n", ns.addr]
        refused = await asyncio.to_thread(subprocess.run, cli, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1 and "still lists" in refused.stderr, refused
        master.proc.send_signal(signal.SIGKILL)
        master.proc.wait(10)

        async def failover() -> subprocess.CompletedProcess[str] | None:
            done = await asyncio.to_thread(subprocess.run, cli, capture_output=True, text=True, timeout=60)
            return done if done.returncode == 0 else None

        done = await eventually(failover, 20,
                                what="rocket cluster failover to succeed", retry_on=TRANSIENT, interval=0.5)
        assert "ASYNC_MASTER" in done.stdout and "epoch 2" in done.stdout
        assert (await rs.send("ReadT", b"after failover")).code == 0
    await client.close()
