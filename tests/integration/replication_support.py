"""Helpers for the replication fault tests: broker processes with fixed stores, HA status,
CommitLog files compared byte for byte, and a producer load that records what was acknowledged."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import aiohttp

from rocket.client import Producer
from rocket.client.producer import SendResult, build_message
from tests.integration.broker_harness import BrokerProc, broker_process

V = TypeVar("V")

#: Errors a poll of a broker that is starting, stopping or failing over may meet: "not yet".
TRANSIENT = (TimeoutError, aiohttp.ClientError, OSError)

#: Replication settings that keep the fault tests short (defaults: 5 s / 20 s / 3 s / 10 s).
FAST_HA = {
    "haSendHeartbeatInterval": "1000",
    "haHousekeepingInterval": "4000",
    "slaveTimeout": "1500",
    "slaveReadEnable": "true",
    "slaveSyncInterval": "1000",
    # small index files (RocketMQ's preallocate 420 MB per broker)
    "maxHashSlotNum": "50000",
    "maxIndexNum": "200000",
}


@contextlib.contextmanager
def group_broker(tmp: Path, name: str, namesrv: str, *, port: int, role: str, broker_id: int,
                 extra: dict[str, str] | None = None) -> Iterator[BrokerProc]:
    """One broker of group ``name`` with its own store (same ``port`` = same store on restart)."""
    settings = {"brokerRole": role, "brokerId": str(broker_id), **FAST_HA, **(extra or {})}
    with broker_process(tmp, name, namesrv, settings=settings, port=port) as b:
        yield b


async def http_json(url: str, method: str = "GET", body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
    """``(status, JSON)`` of one HTTP call."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http, \
            http.request(method, url, json=body) as resp:
        return resp.status, await resp.json(content_type=None)


async def ha_status(b: BrokerProc) -> dict[str, Any]:
    """``GET /api/v1/ha`` of a broker."""
    status, body = await http_json(f"{b.http}/api/v1/ha")
    assert status == 200, body
    return dict(body)


def commitlog_bytes(store: Path, end: int, segment_size: int) -> bytes:
    """The first ``end`` bytes of a store's CommitLog, read from its files."""
    out = bytearray()
    pos = 0
    while pos < end:
        start = pos - pos % segment_size
        path = store / "commitlog" / f"{start:020d}"
        with open(path, "rb") as fh:
            fh.seek(pos - start)
            out += fh.read(min(end - pos, start + segment_size - pos))
        pos = start + segment_size
    return bytes(out)


@dataclass
class SendLoad(Generic[V]):
    """A sustained produce: ``workers`` tasks sending unique bodies until stopped.

    ``acked``: body → what :meth:`_ack` records of its SEND_OK; ``not_ok``: status or error name →
    count; ``sent``: sends tried.
    """

    producer: Producer
    topic: str
    workers: int = 16
    acked: dict[bytes, V] = field(default_factory=dict)
    not_ok: dict[str, int] = field(default_factory=dict)
    sent: int = 0
    _stop: bool = False
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def _ack(self, result: SendResult) -> V:
        """What to record of an acknowledged send."""
        raise NotImplementedError

    def start(self) -> None:
        for w in range(self.workers):
            self._tasks.append(asyncio.create_task(self._run(w)))

    async def _run(self, worker: int) -> None:
        i = 0
        while not self._stop:
            body = f"w{worker}-{i}".encode()
            i += 1
            self.sent += 1
            try:
                r = await self.producer.send(build_message(self.topic, body), timeout=3.0)
            except Exception as exc:
                key = type(exc).__name__
                self.not_ok[key] = self.not_ok.get(key, 0) + 1
                await asyncio.sleep(0.05)
                continue
            if r.ok:
                self.acked[body] = self._ack(r)
            else:
                self.not_ok[r.status.name] = self.not_ok.get(r.status.name, 0) + 1

    async def stop(self) -> None:
        self._stop = True
        await asyncio.gather(*self._tasks, return_exceptions=True)


@dataclass
class Load(SendLoad[str]):
    """A :class:`SendLoad` recording the broker name that stored each acknowledged body."""

    def _ack(self, result: SendResult) -> str:
        return result.queue.broker_name

    def acked_on(self, broker_name: str) -> set[bytes]:
        return {b for b, name in self.acked.items() if name == broker_name}
