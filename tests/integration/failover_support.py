"""A controller-mode broker group on loopback (3 controllers, a NameServer, 1 master + 2 slaves) and a
failover run with a checker: a producer records every acknowledged message id, the master is killed
with SIGKILL, a new master must be elected by the controllers alone, and every acknowledged id must
then be read back (0 lost; duplicates counted). Shared by ``test_controller_failover.py`` (one short
run) and ``tests/chaos/failover.py`` (``make chaos``: many runs, RTO percentiles)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocket.client import Producer
from rocket.client.producer import SendResult
from rocket.remoting import RemotingClient, ResponseCode
from tests.integration.broker_harness import (
    BrokerProc,
    RawBroker,
    broker_port,
    broker_process,
    nameserver_process,
    records,
    route,
)
from tests.integration.controller_support import SECRET, ControllerCluster
from tests.integration.replication_support import FAST_HA, TRANSIENT, SendLoad, ha_status
from tests.support import eventually

#: Controller-mode settings of every broker in these tests.
CONTROLLER_MODE = {
    **FAST_HA,
    "enableControllerMode": "true",
    "allAckInSyncStateSet": "true",
    "flushDiskType": "SYNC_FLUSH",
    "controllerHeartBeatTimeoutMills": "4000",
    "brokerHeartbeatInterval": "500",
    "syncBrokerMetadataPeriod": "1000",
    "haMaxTimeSlaveNotCatchup": "3000",
    "slaveTimeout": "3000",
}


@dataclass
class Group:
    """The processes of one controller-mode group (``restart(i)`` starts broker ``i`` again on
    the same port and store)."""

    controllers: ControllerCluster
    namesrv: str
    brokers: list[BrokerProc]
    stack: contextlib.ExitStack
    tmp: Path
    name: str
    settings: dict[str, str]

    def restart(self, i: int) -> BrokerProc:
        """Start broker ``i`` again (it was killed) with its port and store."""
        old = self.brokers[i]
        self.brokers[i] = self.stack.enter_context(
            broker_process(self.tmp, self.name, self.namesrv, settings=self.settings, port=old.port))
        return self.brokers[i]

    async def statuses(self) -> dict[int, dict[str, Any]]:
        """index -> ``/api/v1/ha`` of every live broker."""
        out = {}
        for i, b in enumerate(self.brokers):
            if b.proc.poll() is None:
                with contextlib.suppress(*TRANSIENT):
                    out[i] = await ha_status(b)
        return out

    async def master(self, *, full_set: int = 0, not_index: int | None = None) -> int | None:
        """The index of the broker that is master (unfenced, SyncStateSet of at least ``full_set``)."""
        for i, st in (await self.statuses()).items():
            cm = st.get("controllerMode") or {}
            if (i != not_index and st["brokerRole"] != "SLAVE" and not cm.get("fenced")
                    and len(cm.get("syncStateSet") or []) >= full_set):
                return i
        return None

    async def master_box(self, **kwargs: Any) -> tuple[int] | None:
        """:meth:`master` as a 1-tuple (true even for index 0), for ``eventually``."""
        i = await self.master(**kwargs)
        return None if i is None else (i,)


@contextlib.contextmanager
def controller_group(tmp: Path, name: str = "fo-a", *, extra: dict[str, str] | None = None) -> Iterator[Group]:
    """Start 3 controllers, a NameServer and 3 controller-mode brokers of group ``name``."""
    os.environ.setdefault("ROCKET_CONTROLLER_SECRET", SECRET)
    # the controllers' own heartbeat timeout is also their start-up grace before electing
    ctl = ControllerCluster(tmp / "ctl", 3, extra=["--heartbeat-timeout-ms", CONTROLLER_MODE[
        "controllerHeartBeatTimeoutMills"]])
    (tmp / "ctl").mkdir(exist_ok=True)
    ctl.start_all()
    try:
        with contextlib.ExitStack() as stack:
            ns = stack.enter_context(nameserver_process(tmp))
            settings = {**CONTROLLER_MODE, "controllerAddr": ";".join(ctl.addrs), **(extra or {})}
            brokers = [stack.enter_context(broker_process(tmp, name, ns.addr, settings=settings, port=broker_port()))
                       for _ in range(3)]
            yield Group(ctl, ns.addr, brokers, stack, tmp, name, settings)
    finally:
        ctl.stop()


@dataclass
class AckLog(SendLoad[tuple[float, int]]):
    """A producer load that records every acknowledged id with the time it was acknowledged and
    the port of the broker that stored it (from the offset message id: host, port, offset)."""

    workers: int = 8

    def _ack(self, result: SendResult) -> tuple[float, int]:
        return time.monotonic(), int(result.offset_msg_id[8:16], 16)

    def first_ack_after(self, t: float, not_port: int | None = None) -> float | None:
        """When the first send acknowledged after ``t`` (by a broker not on ``not_port``) was."""
        later = [x for x, port in self.acked.values() if x > t and port != not_port]
        return min(later) if later else None


async def all_bodies(client: RemotingClient, addr: str, topic: str, queues: int) -> dict[bytes, int]:
    """Every body in ``topic`` on the broker at ``addr`` -> how often it is there."""
    rb = RawBroker(client, addr)
    out: dict[bytes, int] = {}
    for q in range(queues):
        offset = 0
        while True:
            resp = await rb.pull("CHECK_ALL", topic, queue_id=q, offset=offset, max_nums=32)
            if resp.code != ResponseCode.SUCCESS:
                break
            for m in records(resp):
                out[m.body] = out.get(m.body, 0) + 1
            offset = int(resp.ext_fields["nextBeginOffset"])
    return out


@dataclass
class FailoverResult:
    """One kill -9 of the master: how long until sends were acknowledged again (``rto`` s), how
    long until the controllers had a new master (``elected`` s), ids acknowledged / lost /
    duplicated."""

    rto: float
    elected: float
    acked: int
    lost: int
    duplicates: int
    not_ok: dict[str, int]


async def wait_group_ready(g: Group, topic: str, client: RemotingClient, queues: int = 4) -> int:
    """Wait for a master with all 3 in its SyncStateSet, create ``topic`` there; returns its index."""
    (m,) = await eventually(lambda: g.master_box(full_set=3), 60, what="a master with a SyncStateSet of 3",
                            retry_on=TRANSIENT)
    assert (await RawBroker(client, g.brokers[m].addr).create_topic(topic, queues=queues)).code == 0
    await eventually(lambda: route(client, g.namesrv, topic), 15, what="the topic's route", retry_on=TRANSIENT)
    return int(m)


async def kill_master_once(g: Group, topic: str, client: RemotingClient, *, queues: int = 4,
                           load_seconds: float = 3.0) -> FailoverResult:
    """Produce, kill -9 the master, wait for the new master to acknowledge sends, check the log."""
    m = await wait_group_ready(g, topic, client, queues)
    producer = Producer(f"PG_{topic}", g.namesrv, poll_namesrv_interval=0.5, fault_avoid_seconds=1.0,
                        send_timeout=3.0)
    await producer.start()
    load = AckLog(producer, topic)
    try:
        load.start()
        await asyncio.sleep(load_seconds)
        assert len(load.acked) > 50, (len(load.acked), load.not_ok)
        killed = time.monotonic()
        g.brokers[m].proc.send_signal(signal.SIGKILL)
        g.brokers[m].proc.wait(10)
        (new,) = await eventually(lambda: g.master_box(not_index=m), 30,
                                  what="a new master elected by the controllers", retry_on=TRANSIENT, interval=0.05)
        elected = time.monotonic() - killed
        port = g.brokers[m].port
        await eventually(lambda: load.first_ack_after(killed, port) is not None, 30,
                         what="sends acknowledged by the new master", interval=0.05)
        rto = float(load.first_ack_after(killed, port) or 0.0) - killed
        await asyncio.sleep(1.0)
    finally:
        await load.stop()
        await producer.shutdown()
    on_new = await all_bodies(client, g.brokers[int(new)].addr, topic, queues)
    lost = set(load.acked) - set(on_new)
    dups = sum(n - 1 for n in on_new.values() if n > 1)
    return FailoverResult(rto, elected, len(load.acked), len(lost), dups, dict(load.not_ok))
