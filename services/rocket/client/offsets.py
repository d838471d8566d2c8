"""Consumer offset stores: where a consumer group records how far it has consumed.

An offset is the **next** queue offset to consume (everything before it is
done). Both stores keep offsets in memory and write them out on
:meth:`OffsetStore.persist_all` (push consumers call it every 5 s and on
shutdown):

* :class:`RemoteOffsetStore` (CLUSTERING): the broker keeps the group's
  offsets; read with QUERY_CONSUMER_OFFSET (14), written with
  UPDATE_CONSUMER_OFFSET (15) to the queue's master (``RemoteBrokerOffsetStore``).
* :class:`LocalOffsetStore` (BROADCASTING): each consumer keeps its own
  offsets in a JSON file, written atomically (temporary file + rename).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import orjson

from rocket.client.base import MQClient, check_response, ext
from rocket.protocol import MessageQueue
from rocket.remoting import RemotingConnectError, RequestCode, ResponseCode

log = logging.getLogger("rocket.client.offsets")


class OffsetStore(Protocol):
    """The interface both stores share. Offsets are ints; -1 means "none stored"."""

    async def load(self) -> None:
        """Read what is stored (local files); no-op for the broker-backed store."""

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        """Set the in-memory offset of ``mq`` (ignored if ``increase_only`` and lower)."""

    def get(self, mq: MessageQueue) -> int:
        """The in-memory offset of ``mq``, -1 when unknown."""

    async def read(self, mq: MessageQueue) -> int:
        """The stored offset of ``mq`` (from the broker or the file), -1 when none."""

    async def persist(self, mq: MessageQueue, *, force: bool = False) -> None:
        """Write one queue's offset out now (``force``: even if unchanged since the last write)."""

    async def persist_all(self, mqs: Iterable[MessageQueue] | None = None, *, force: bool = False,
                          timeout: float | None = None) -> list[MessageQueue]:
        """Write the offsets of ``mqs`` (default: every known queue) out now; ``force`` writes
        even those unchanged since the last write, ``timeout`` (seconds) bounds each write.
        Returns the queues whose write failed (logged; nothing raised)."""

    def remove(self, mq: MessageQueue) -> None:
        """Forget ``mq`` (after rebalancing it away)."""


class _MemoryOffsets:
    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        if offset < 0:
            return
        old = self.table.get(mq)
        if old is None or not increase_only or offset > old:
            self.table[mq] = offset

    def get(self, mq: MessageQueue) -> int:
        return self.table.get(mq, -1)

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)


class RemoteOffsetStore(_MemoryOffsets):
    """Offsets kept by the brokers for ``group`` (CLUSTERING mode)."""

    def __init__(self, client: MQClient, group: str) -> None:
        super().__init__()
        self.client = client
        self.group = group
        self._persisted: dict[MessageQueue, int] = {}

    async def load(self) -> None:
        return None

    def _addr(self, mq: MessageQueue) -> str:
        addr = self.client.admin_addr(mq.broker_name)
        if addr is None:
            raise RemotingConnectError(f"no address known for broker group {mq.broker_name}")
        return addr

    async def read(self, mq: MessageQueue) -> int:
        """QUERY_CONSUMER_OFFSET: the broker's offset, -1 on QUERY_NOT_FOUND (22).

        Raises ``RemotingCommandError`` for other answers and the remoting errors.
        """
        response = await self.client.invoke(
            self._addr(mq), RequestCode.QUERY_CONSUMER_OFFSET,
            ext(consumerGroup=self.group, topic=mq.topic, queueId=mq.queue_id),
        )
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        check_response(response, f"query offset of {mq}")
        offset = int(response.ext_fields.get("offset", "-1"))
        if offset >= 0:
            self.update(mq, offset)
            self._persisted[mq] = offset
        return offset

    async def persist(self, mq: MessageQueue, *, force: bool = False, timeout: float | None = None) -> None:
        """UPDATE_CONSUMER_OFFSET (two-way) for ``mq`` if its offset changed since the last write,
        or whenever ``force`` (the broker's copy may have changed without us: a pull's older
        ``commitOffset`` applied late, an admin reset). ``timeout`` in seconds (default the
        client's). Raises the remoting errors and ``RemotingCommandError`` for a refusal."""
        offset = self.table.get(mq)
        if offset is None or (not force and self._persisted.get(mq) == offset):
            return
        response = await self.client.invoke(
            self._addr(mq), RequestCode.UPDATE_CONSUMER_OFFSET,
            ext(consumerGroup=self.group, topic=mq.topic, queueId=mq.queue_id, commitOffset=offset),
            timeout=timeout,
        )
        check_response(response, f"update offset of {mq}")
        self._persisted[mq] = offset

    async def persist_all(self, mqs: Iterable[MessageQueue] | None = None, *, force: bool = False,
                          timeout: float | None = None) -> list[MessageQueue]:
        """Persist in parallel (as ``RemoteBrokerOffsetStore.persistAll``). Failures are logged
        and returned (the periodic caller retries them next time, a shutdown at once)."""
        targets = list(self.table if mqs is None else mqs)

        async def one(mq: MessageQueue) -> MessageQueue | None:
            try:
                await self.persist(mq, force=force, timeout=timeout)
            except Exception as exc:
                log.warning("persisting offset %d of %s for %s failed: %s", self.get(mq), mq, self.group, exc)
                return mq
            return None

        return [mq for mq in await asyncio.gather(*(one(mq) for mq in targets)) if mq is not None]

    def remove(self, mq: MessageQueue) -> None:
        super().remove(mq)
        self._persisted.pop(mq, None)


class LocalOffsetStore(_MemoryOffsets):
    """Offsets in a JSON file ``path`` (BROADCASTING mode).

    File shape: ``{"group": g, "offsetTable": [{"topic", "brokerName", "queueId", "offset"}]}``.
    """

    def __init__(self, path: Path, group: str) -> None:
        super().__init__()
        self.path = Path(path)
        self.group = group
        self._stored: dict[MessageQueue, int] = {}

    async def load(self) -> None:
        """Read the file; a missing one is empty, a corrupt one is logged and ignored."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            data = orjson.loads(raw)
            for item in data.get("offsetTable", []):
                mq = MessageQueue(str(item["topic"]), str(item["brokerName"]), int(item["queueId"]))
                self._stored[mq] = int(item["offset"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning("offset file %s is unreadable, starting without it: %s", self.path, exc)
            self._stored.clear()

    async def read(self, mq: MessageQueue) -> int:
        offset = self._stored.get(mq, -1)
        if offset >= 0:
            self.update(mq, offset)
        return offset

    async def persist(self, mq: MessageQueue, *, force: bool = False) -> None:
        """Merge ``mq``'s offset into the file now (always written, ``force`` changes nothing).
        Raises ``OSError`` when it cannot be written."""
        await self._write([mq])

    async def persist_all(self, mqs: Iterable[MessageQueue] | None = None, *, force: bool = False,
                          timeout: float | None = None) -> list[MessageQueue]:
        """Merge the in-memory offsets into the file (atomic replace; the file is always
        rewritten, ``force`` and ``timeout`` change nothing). Returns the queues not written
        (all of them when the file could not be written: the ``OSError`` is logged)."""
        targets = [mq for mq in (self.table if mqs is None else mqs) if mq in self.table]
        try:
            await self._write(targets)
        except OSError as exc:
            log.warning("writing offset file %s for %s failed: %s", self.path, self.group, exc)
            return targets
        return []

    async def _write(self, mqs: Iterable[MessageQueue]) -> None:
        for mq in mqs:
            if mq in self.table:
                self._stored[mq] = self.table[mq]
        payload = {
            "group": self.group,
            "offsetTable": [
                {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off}
                for mq, off in sorted(self._stored.items())
            ],
        }
        data = orjson.dumps(payload, option=orjson.OPT_INDENT_2)
        await asyncio.to_thread(_atomic_write, self.path, data)


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        with contextlib.suppress(OSError):
            os.fsync(fh.fileno())
    os.replace(tmp, path)
