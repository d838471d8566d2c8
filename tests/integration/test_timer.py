"""Timer messages (arbitrary delivery times) against real broker processes on loopback: our client and
``rocket produce --deliver-at/--delay``, the max-delay refusal, recovery after kill -9, and a manual
failover (``rocket cluster failover``) after which the new master delivers every pending timer while
the slave delivered nothing as a slave. Precision 100 ms and delays of 1-3 s keep it short."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocket.client import Producer, build_message, build_timer_delete
from rocket.remoting import RemotingClient, RemotingError, ResponseCode
from tests.integration.broker_harness import RawBroker, broker_port, broker_process, nameserver_process, records
from tests.integration.replication_support import TRANSIENT, group_broker, ha_status, http_json
from tests.support import ROOT, eventually

pytestmark = [pytest.mark.timeout(120)]

PRECISION_MS = 100
TIMER_SETTINGS = {"timerPrecisionMs": str(PRECISION_MS), "timerFlushIntervalMs": "100"}
#: Allowed lateness beyond one slot on a loaded 2-core machine (the bench measures the real figures).
SLACK_MS = 600


async def arrivals(rb: RawBroker, topic: str, queues: int, until: set[bytes], timeout: float,
                   seen: dict[bytes, list[float]] | None = None) -> dict[bytes, list[float]]:
    """Poll every queue of ``topic`` every 20 ms; body -> arrival times (ms) of each copy, until every
    body of ``until`` arrived (or ``timeout`` s passed)."""
    seen = seen if seen is not None else {}
    offsets = dict.fromkeys(range(queues), 0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for q in range(queues):
            try:
                resp = await rb.pull("TIMER_CHECK", topic, queue_id=q, offset=offsets[q], max_nums=32)
            except RemotingError:  # a restarted broker: the old connection is gone
                continue
            if resp.code == ResponseCode.SUCCESS:
                now = time.time() * 1000
                for m in records(resp):
                    seen.setdefault(m.body, []).append(now)
                offsets[q] = int(resp.ext_fields["nextBeginOffset"])
        if until <= seen.keys():
            break
        await asyncio.sleep(0.02)
    return seen


class Watcher:
    """A background :func:`arrivals` over a topic, started before the sends it times."""

    def __init__(self, rb: RawBroker, topic: str, queues: int) -> None:
        self.seen: dict[bytes, list[float]] = {}
        self._task = asyncio.get_running_loop().create_task(arrivals(rb, topic, queues, {b"\0never"}, 60, self.seen))

    async def wait_for(self, bodies: set[bytes], timeout: float) -> dict[bytes, list[float]]:
        deadline = time.monotonic() + timeout
        while not bodies <= self.seen.keys() and time.monotonic() < deadline:  # noqa: ASYNC110 (polls a dict)
            await asyncio.sleep(0.05)
        return self.seen

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def rocket_cli(*args: str, namesrv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT / "services"), "ROCKET_NAMESRV": namesrv}
    return subprocess.run([sys.executable, "-m", "rocket.cli", *args], capture_output=True, text=True, timeout=60,
                          env=env)


async def test_client_cli_limits_metrics_and_kill9_recovery(tmp_path: Path) -> None:
    client = RemotingClient()
    port = broker_port()
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(nameserver_process(tmp_path))
        broker = stack.enter_context(broker_process(tmp_path, "tm-a", ns.addr, port=port, settings=TIMER_SETTINGS))
        rb = RawBroker(client, broker.addr)
        assert (await rb.create_topic("TimerT", queues=2)).code == 0
        await asyncio.sleep(0.5)
        watcher = Watcher(rb, "TimerT", 2)
        # our client: absolute and relative times
        async with Producer("PID_TIMER", ns.addr) as producer:
            at = int(time.time() * 1000) + 1500
            r1 = await producer.send(build_message("TimerT", b"abs", deliver_time_ms=at, keys="kabs"))
            t0 = time.time() * 1000
            r2 = await producer.send(build_message("TimerT", b"rel", delay_ms=1000))
            t1 = time.time() * 1000
            cancel_at = int(time.time() * 1000) + 2000
            r3 = await producer.send(build_message("TimerT", b"cancelled", deliver_time_ms=cancel_at))
            await producer.send(build_timer_delete("TimerT", r3.msg_id, cancel_at))
        # the CLI
        c0 = time.time() * 1000
        cli = await asyncio.to_thread(rocket_cli, "produce", "TimerT", "--count", "1", "--size", "20",
                                      "--delay", "1200ms", "-q", namesrv=ns.addr)
        c1 = time.time() * 1000
        assert cli.returncode == 0, cli.stderr
        bad = await asyncio.to_thread(rocket_cli, "produce", "TimerT", "--delay", "soon", namesrv=ns.addr)
        assert bad.returncode == 2 and "--delay 'soon'" in bad.stderr + bad.stdout
        seen = await watcher.wait_for({b"abs", b"rel"}, 10)
        await asyncio.sleep(max(0.0, (cancel_at - time.time() * 1000) / 1000) + 0.5)  # the cancelled one's time
        await watcher.stop()
        assert at <= seen[b"abs"][0] <= at + PRECISION_MS + SLACK_MS, seen[b"abs"][0] - at
        assert t0 + 1000 <= seen[b"rel"][0] <= t1 + 1000 + PRECISION_MS + SLACK_MS
        cli_body = next(b for b in seen if b.startswith(b"0 "))
        assert c0 + 1200 <= seen[cli_body][0] <= c1 + 1200 + PRECISION_MS + SLACK_MS
        assert b"cancelled" not in seen and all(len(v) == 1 for v in seen.values())
        # msgId and keys kept: the delivered message is found by its id
        got = await rb.pull("TIMER_CHECK2", "TimerT", queue_id=0, max_nums=32)
        got2 = await rb.pull("TIMER_CHECK2", "TimerT", queue_id=1, max_nums=32)
        msgs = {m.body: m for m in records(got) + records(got2)}
        assert msgs[b"abs"].properties["UNIQ_KEY"] == r1.msg_id and msgs[b"rel"].properties["UNIQ_KEY"] == r2.msg_id
        assert msgs[b"abs"].properties["KEYS"] == "kabs" and msgs[b"abs"].properties["TIMER_DELIVER_MS"] == str(at)
        # beyond timerMaxDelaySec (3 days): MESSAGE_ILLEGAL with Apache's remark; past: at once
        far = await rb.send("TimerT", b"far", props={"TIMER_DELAY_SEC": str(3 * 86400 + 60)})
        assert far.code == ResponseCode.MESSAGE_ILLEGAL
        assert "the delay time should not be bigger than the max delay 259200000ms" in (far.remark or "")
        past = await rb.send("TimerT", b"past", queue_id=0, props={"__STARTDELIVERTIME": "1000"})
        assert past.code == 0
        assert b"past" in await arrivals(rb, "TimerT", 2, {b"past"}, 3)
        _status, metrics = await http_json_text(f"{broker.http}/metrics")
        for line in ("rocketmq_broker_timer_refused_total{reason=\"max_delay\"} 1.0",
                     "rocketmq_broker_timer_past_due_total 1.0", "rocketmq_broker_timer_deleted_total 1.0",
                     "rocketmq_broker_timer_pending 0.0", "rocketmq_broker_timer_delivery_lag_seconds_count"):
            assert line in metrics, line
        # kill -9 with timers pending: all delivered after the restart
        base = int(time.time() * 1000)
        for i in range(50):
            assert (await rb.send("TimerT", f"k{i}".encode(), queue_id=i % 2,
                                  props={"TIMER_DELIVER_MS": str(base + 2500 + i * 10)})).code == 0
        await asyncio.sleep(0.5)  # enqueued and flushed (timerFlushIntervalMs=100)
        broker.proc.send_signal(signal.SIGKILL)
        broker.proc.wait(10)
        stack.close()
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(nameserver_process(tmp_path))
        broker = stack.enter_context(broker_process(tmp_path, "tm-a", ns.addr, port=port, settings=TIMER_SETTINGS))
        rb = RawBroker(client, broker.addr)
        want = {f"k{i}".encode() for i in range(50)}
        seen = await arrivals(rb, "TimerT", 2, want, 15)
        assert want <= seen.keys()
        assert min(seen[b][0] for b in want) >= base + 2500
    await client.close()


async def http_json_text(url: str) -> tuple[int, str]:
    import aiohttp

    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        return resp.status, await resp.text()


async def test_failover_new_master_delivers_pending_timers_slave_never(tmp_path: Path) -> None:
    client = RemotingClient()
    extra = {**TIMER_SETTINGS, "slaveSyncInterval": "300"}
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(nameserver_process(tmp_path))
        master = stack.enter_context(group_broker(tmp_path, "tm-f", ns.addr, port=broker_port(),
                                                  role="ASYNC_MASTER", broker_id=0, extra=extra))
        slave = stack.enter_context(group_broker(tmp_path, "tm-f", ns.addr, port=broker_port(), role="SLAVE",
                                                 broker_id=1, extra=extra))
        rm, rs = RawBroker(client, master.addr), RawBroker(client, slave.addr)
        assert (await rm.create_topic("FailT", queues=1)).code == 0

        async def slave_connected() -> bool:
            return bool((await ha_status(master))["slaves"])

        await eventually(slave_connected, 15, what="the slave to connect", retry_on=TRANSIENT)
        now = int(time.time() * 1000)
        early = {f"e{i}".encode() for i in range(30)}
        late = {f"l{i}".encode() for i in range(30)}
        for i in range(30):
            assert (await rm.send("FailT", f"e{i}".encode(), props={"TIMER_DELIVER_MS": str(now + 1000)})).code == 0
            assert (await rm.send("FailT", f"l{i}".encode(), props={"TIMER_DELIVER_MS": str(now + 6000)})).code == 0
        seen_m = await arrivals(rm, "FailT", 1, early, 10)
        assert early <= seen_m.keys() and not (late & seen_m.keys())

        async def slave_has_the_deliveries_and_read_time() -> bool:
            s = await arrivals(rs, "FailT", 1, early, 0.2)
            _st, body = await http_json(f"{slave.http}/api/v1/status")
            timer = body.get("timer", {})
            return early <= s.keys() and timer.get("currReadTimeMs", 0) >= now + 1000 and timer.get("pending") == 30

        await eventually(slave_has_the_deliveries_and_read_time, 15, what="the slave to copy deliveries and read time",
                         retry_on=TRANSIENT)
        on_slave = await arrivals(rs, "FailT", 1, set(), 0.1)
        assert sorted(on_slave) == sorted(early) and all(len(v) == 1 for v in on_slave.values())  # none by the slave
        master.proc.send_signal(signal.SIGKILL)
        master.proc.wait(10)
        cli = [sys.executable, "-m", "rocket.cli", "cluster", "failover", "--broker-name", "tm-f", "-n", ns.addr]

        async def failover() -> subprocess.CompletedProcess[str] | None:
            done = await asyncio.to_thread(subprocess.run, cli, capture_output=True, text=True, timeout=60)
            return done if done.returncode == 0 else None

        await eventually(failover, 20, what="rocket cluster failover to succeed", interval=0.5)
        seen = await arrivals(rs, "FailT", 1, early | late, 20)
        assert (early | late) <= seen.keys()
        twice = [b for b, times in seen.items() if len(times) > 1]
        assert twice == [], f"delivered twice after the failover: {twice}"
        assert min(seen[b][0] for b in late) >= now + 6000
    await client.close()
