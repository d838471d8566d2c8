"""Helpers for tests that run real ``rocket controller`` processes on loopback, and a raw
controller-mode broker (our broker's controller mode is later work: the test drives the broker
side of the protocol itself, frame by frame, as RocketMQ's ``BrokerOuterAPI`` sends it)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from rocket.protocol.codes import RequestCode
from rocket.remoting import Processors, RemotingClient, RemotingCommand, RemotingServer
from tests.support import reserve_ports, rocket_command, terminate, wait_port

SECRET = "test-controller-secret-0123456789"


class ControllerCluster:
    """``n`` controller processes: remoting ports ``base + 10*i``, Raft ports ``base + 10*i + 2``,
    HTTP ports ``base + 10*i + 4``.

    Each keeps its data in ``root/c<i>`` and logs in ``root/c<i>.log``; ``kill(i)`` is kill -9,
    ``start(i)`` (re)starts one on the same ports and data.
    """

    def __init__(self, root: Path, n: int = 3, *, extra: Iterable[str] = ()) -> None:
        self.root = root
        self.n = n
        offsets = [10 * i + k for i in range(n) for k in (0, 2, 4)]
        self.base = reserve_ports(offsets)
        self.ports = [self.base + 10 * i for i in range(n)]
        self.addrs = [f"127.0.0.1:{p}" for p in self.ports]
        self.http_ports = [p + 4 for p in self.ports]
        self.peers = ",".join(f"127.0.0.1:{p}/{p + 2}" for p in self.ports)
        self.extra = list(extra)
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * n

    def argv(self, i: int) -> list[str]:
        return rocket_command("controller", "--controller-peers", self.peers, "--port", str(self.ports[i]),
                              "--host", "127.0.0.1", "--data-dir", str(self.root / f"c{i}"),
                              "--http-port", str(self.http_ports[i]), *self.extra)

    def start(self, i: int) -> None:
        if self.procs[i] is not None and self.procs[i].poll() is None:  # type: ignore[union-attr]
            return
        env = {**os.environ, "ROCKET_CONTROLLER_SECRET": SECRET, "PYTHONUNBUFFERED": "1"}
        with open(self.root / f"c{i}.log", "ab") as log:
            self.procs[i] = subprocess.Popen(self.argv(i), stdout=log, stderr=subprocess.STDOUT, env=env)

    def start_all(self) -> None:
        for i in range(self.n):
            self.start(i)
        for i in range(self.n):
            wait_port(self.ports[i], timeout=30, proc=self.procs[i], log_path=self.root / f"c{i}.log")

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        self.procs[i] = None

    def alive(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p is not None and p.poll() is None]

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None:
                terminate(proc, grace=5.0)

    def log_tail(self, chars: int = 3000) -> str:
        out = []
        for i in range(self.n):
            try:
                out.append(f"--- c{i}.log\n" + (self.root / f"c{i}.log").read_text(errors="replace")[-chars:])
            except OSError:
                pass
        return "\n".join(out)


async def request(client: RemotingClient, addr: str, code: int, body: bytes = b"", timeout: float = 8.0,
                  **fields: Any) -> RemotingCommand:
    """One request with ext fields (None values left out)."""
    cmd = RemotingCommand(code=int(code), ext_fields={k: str(v).lower() if isinstance(v, bool) else str(v)
                                                      for k, v in fields.items() if v is not None}, body=body)
    return await client.invoke(addr, cmd, timeout=timeout)


async def metadata(client: RemotingClient, addr: str) -> dict[str, str]:
    """GET_METADATA_INFO's header from ``addr`` ({} when it does not answer)."""
    try:
        resp = await request(client, addr, RequestCode.CONTROLLER_GET_METADATA_INFO, timeout=2.0)
    except Exception:
        return {}
    return dict(resp.ext_fields)


async def wait_leader(client: RemotingClient, addrs: Iterable[str], timeout: float = 20.0,
                      not_addr: str | None = None) -> tuple[str, float]:
    """Wait until one of ``addrs`` says it is the ready leader (and it is not ``not_addr``) and
    every other answering peer names it; returns (leader address, seconds waited)."""
    start = time.monotonic()
    addrs = list(addrs)
    seen: dict[str, dict[str, str]] = {}
    while time.monotonic() - start < timeout:
        seen = {a: await metadata(client, a) for a in addrs}
        leaders = [a for a, m in seen.items() if m.get("isLeader") == "true"]
        if len(leaders) == 1 and leaders[0] != not_addr:
            named = {m.get("controllerLeaderAddress") for m in seen.values() if m}
            if named == {leaders[0]}:
                return leaders[0], time.monotonic() - start
        await asyncio.sleep(0.1)
    raise AssertionError(f"no single ready controller leader after {timeout} s: {seen}")


class RawBroker:
    """A controller-mode broker reduced to its protocol: applies for an id, registers, heartbeats
    to every controller on its own connections, and listens on ``address`` for
    NOTIFY_BROKER_ROLE_CHANGED (kept in :attr:`notifications`)."""

    def __init__(self, cluster: str, broker_name: str, controllers: list[str]) -> None:
        self.cluster = cluster
        self.broker_name = broker_name
        self.controllers = controllers
        self.client = RemotingClient()
        self.broker_id: int | None = None
        self.notifications: list[RemotingCommand] = []
        self.notified = asyncio.Event()
        processors = Processors()
        processors.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self._on_notify)
        self.server = RemotingServer(processors, host="127.0.0.1", port=0, name="raw-broker")
        self.epoch = 0
        self.max_offset = 0
        self._beating: asyncio.Task[None] | None = None

    def _on_notify(self, request: RemotingCommand, conn: Any) -> None:
        self.notifications.append(request)
        self.notified.set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def start(self, leader: str) -> int:
        """Listen, get an id, apply it and register with the controller ``leader``; returns the id."""
        await self.server.start()
        resp = await request(self.client, leader, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                             clusterName=self.cluster, brokerName=self.broker_name)
        assert resp.code == 0, resp.remark
        bid = int(resp.ext_fields["nextBrokerId"])
        resp = await request(self.client, leader, RequestCode.CONTROLLER_APPLY_BROKER_ID, clusterName=self.cluster,
                             brokerName=self.broker_name, appliedBrokerId=bid,
                             registerCheckCode=f"{self.address};{int(time.time() * 1000)}")
        assert resp.code == 0, resp.remark
        resp = await request(self.client, leader, RequestCode.CONTROLLER_REGISTER_BROKER, clusterName=self.cluster,
                             brokerName=self.broker_name, brokerId=bid, brokerAddress=self.address)
        assert resp.code == 0, resp.remark
        self.broker_id = bid
        return bid

    async def heartbeat_once(self, timeout_ms: int) -> None:
        for addr in self.controllers:
            cmd = RemotingCommand(code=RequestCode.BROKER_HEARTBEAT, ext_fields={
                "clusterName": self.cluster, "brokerName": self.broker_name, "brokerAddr": self.address,
                "brokerId": str(self.broker_id), "epoch": str(self.epoch), "maxOffset": str(self.max_offset),
                "confirmOffset": str(self.max_offset), "heartbeatTimeoutMills": str(timeout_ms)})
            try:
                await self.client.invoke_oneway(addr, cmd)
            except Exception:
                pass  # a controller that is down

    def start_heartbeats(self, timeout_ms: int = 1500, period: float = 0.3) -> None:
        async def loop() -> None:
            while True:
                await self.heartbeat_once(timeout_ms)
                await asyncio.sleep(period)
        self._beating = asyncio.get_running_loop().create_task(loop())

    async def stop_heartbeats(self) -> None:
        """Stop sending heartbeats but keep the connections open (a hung broker)."""
        if self._beating is not None:
            self._beating.cancel()
            try:
                await self._beating
            except asyncio.CancelledError:
                pass
            self._beating = None

    async def crash(self) -> None:
        """Stop everything at once: heartbeats, connections, listening port."""
        await self.stop_heartbeats()
        await self.client.close()
        await self.server.stop()


def sync_state_body(ids: Iterable[int], epoch: int) -> bytes:
    return orjson.dumps({"syncStateSet": sorted(ids), "syncStateSetEpoch": epoch})
