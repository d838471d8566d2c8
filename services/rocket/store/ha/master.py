"""The master side of replication: :class:`HAService` (RocketMQ 4.9.8 ``HAService`` +
``HAConnection`` + ``GroupTransferService``, on one asyncio loop).

Every broker listens on ``haListenPort``; only a master serves (a slave
answers an epoch handshake with ``ok: false`` and closes plain connections).
Per slave connection:

* a reader takes the slave's 8-byte reports (its max CommitLog offset); a
  connection without a report for ``haHousekeepingInterval`` (20 s) is
  dropped;
* a sender streams CommitLog data from the first report on — a first report
  of 0 starts at the beginning of the master's last CommitLog file, as
  RocketMQ does (an empty slave does not copy months of history) — in
  transfers of at most ``haTransferBatchSize`` (32 KiB), with an empty
  heartbeat after ``haSendHeartbeatInterval`` (5 s) of silence; new bytes are
  written by the store's commit listener itself, in the loop turn of the commit
  and before the reput (the sender task catches up, drains and sends heartbeats).

SYNC_MASTER (:meth:`HAService.wait_replicated`): a put is acknowledged once
some slave reported an offset at or past its end. Waiters sit in a deque in
arrival order (their deadlines are ordered too) and are resolved from the
left as reports arrive — many sends share one report, as a group commit —
so waiting never blocks other requests. ``SLAVE_NOT_AVAILABLE`` at once when
no slave is connected or the best one is more than ``haSlaveFallbehindMax``
(256 MiB) behind, ``FLUSH_SLAVE_TIMEOUT`` after ``slaveTimeout`` (3 s), and
``SLAVE_NOT_AVAILABLE`` for every waiter when the last slave goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rocket.remoting.tls import Listener, start_server
from rocket.runtime import await_ended, cancel_and_wait
from rocket.store.api import PutMessageStatus
from rocket.store.ha.protocol import (
    HAProtocolError,
    decode_report,
    encode_handshake,
    encode_transfer_header,
    is_handshake,
    read_handshake_body,
)

if TYPE_CHECKING:
    from rocket.store.ha.host import HAHost

log = logging.getLogger("rocket.store.ha")

#: Bytes buffered in a slave connection's transport before the sender waits for it to drain.
_WRITE_HIGH_WATER = 4 * 1024 * 1024
#: At most one lag sample per this many seconds.
_SAMPLE_EVERY = 0.01
_MAX_SAMPLES = 20_000


@dataclass(eq=False)
class HAConnection:
    """One slave connected to this master."""

    peer: str
    writer: asyncio.StreamWriter
    #: The slave's main address from its handshake (its peer address for a plain slave).
    slave_addr: str
    slave_id: int = -1
    handshake: bool = False
    #: The slave's latest report; -1 before the first.
    ack_offset: int = -1
    #: Next CommitLog offset to send; -1 before the first report.
    transfer_offset: int = -1
    connected_at: float = field(default_factory=time.monotonic)
    last_report: float = field(default_factory=time.monotonic)
    bytes_sent: int = 0
    #: The sender runs (``transfer_offset`` is where the stream stands): a commit may write at once.
    streaming: bool = False
    #: ``time.monotonic()`` of the last transfer written (heartbeats are sent after silence).
    last_write: float = field(default_factory=time.monotonic)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    first_report: asyncio.Event = field(default_factory=asyncio.Event)

    def close(self) -> None:
        """Drop the TCP connection at once."""
        with contextlib.suppress(Exception):
            self.writer.transport.abort()


class _Waiter:
    __slots__ = ("deadline", "done", "end", "fut")

    def __init__(self, end: int, deadline: float, fut: asyncio.Future[Any],
                 done: Callable[[PutMessageStatus], object]) -> None:
        self.end = end
        self.deadline = deadline
        self.fut = fut  # done() tells whether the waiter was answered
        self.done = done  # answers it with a status


class SyncWaiters:
    """Sends waiting for a slave (``GroupTransferService``): resolved by :meth:`ack`, expired by
    :meth:`expire`; see the module doc."""

    def __init__(self) -> None:
        self._q: deque[_Waiter] = deque()

    def __len__(self) -> int:
        return len(self._q)

    def add(self, end: int, deadline: float, loop: asyncio.AbstractEventLoop) -> asyncio.Future[PutMessageStatus]:
        """A future resolved with PUT_OK once a slave acknowledges ``end`` (or a failure status)."""
        fut: asyncio.Future[PutMessageStatus] = loop.create_future()
        self._q.append(_Waiter(end, deadline, fut, fut.set_result))
        return fut

    def add_callback(self, end: int, deadline: float, fut: asyncio.Future[Any],
                     done: Callable[[PutMessageStatus], object]) -> None:
        """Like :meth:`add` without a future of its own: ``done(status)`` is called once, unless
        ``fut`` is already done by then (the send path's answer future)."""
        self._q.append(_Waiter(end, deadline, fut, done))

    def ack(self, offset: int) -> int:
        """Resolve waiters (from the oldest) whose end is at or below ``offset``; returns how many."""
        q = self._q
        n = 0
        while q:
            w = q[0]
            if w.fut.done():
                q.popleft()
                continue
            if w.end > offset:
                break
            q.popleft()
            w.done(PutMessageStatus.PUT_OK)
            n += 1
        return n

    def expire(self, now: float) -> int:
        """Answer FLUSH_SLAVE_TIMEOUT to waiters past their deadline; returns how many."""
        q = self._q
        n = 0
        while q and q[0].deadline <= now:
            w = q.popleft()
            if not w.fut.done():
                w.done(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
                n += 1
        return n

    def next_deadline(self) -> float | None:
        """The oldest waiter's deadline (monotonic seconds), if any."""
        return self._q[0].deadline if self._q else None

    def fail_all(self, status: PutMessageStatus) -> int:
        """Answer ``status`` to every waiter; returns how many."""
        n = 0
        while self._q:
            w = self._q.popleft()
            if not w.fut.done():
                w.done(status)
                n += 1
        return n


async def _tick(event: asyncio.Event, every: float) -> None:
    """Set ``event`` every ``every`` seconds (a sender's heartbeat clock)."""
    while True:
        await asyncio.sleep(every)
        event.set()


class HAService:
    """Listens for slaves and streams the CommitLog to them; see the module doc."""

    def __init__(self, host: HAHost) -> None:
        self.host = host
        self.connections: list[HAConnection] = []
        self.waiters = SyncWaiters()
        self.port: int | None = None
        self._server: Listener | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sweeper_wakeup = asyncio.Event()
        self._samples: deque[tuple[int, float]] = deque()
        self._last_sample = 0.0
        #: Called with the acknowledged offset whenever the best slave's report advances.
        self.on_ack: Callable[[int], None] | None = None
        self._best_ack = -1
        self.transferred_bytes = 0
        #: Controller mode: returns the offset up to which sends are acknowledged (the
        #: SyncStateSet rule of ``rocket.broker.controller_mode``; ``1 << 62`` = no replica needed,
        #: -1 = none yet). None: SYNC_MASTER's "some slave has it".
        self.quorum: Callable[[], int] | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0 = any free port); returns the bound port. Raises ``OSError``."""
        store = self.host.store
        store.add_commit_listener(self._on_commit)
        self._samples.append((store.max_phy_offset, time.monotonic()))
        loop = asyncio.get_running_loop()

        def protocol() -> asyncio.StreamReaderProtocol:  # what asyncio.start_server builds per connection
            return asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), self._serve, loop=loop)

        self._server = await start_server(protocol, host, port, self.host.server_tls, name="ha")
        self.port = self._server.port
        self._spawn(self._sweep(), "ha-sync-timeouts")
        return self.port

    @property
    def listener(self) -> Listener | None:
        """The HA port's listener (its TLS counters), None before :meth:`start`."""
        return self._server

    async def stop(self) -> None:
        """Stop listening, drop every slave, fail waiting sends (SLAVE_NOT_AVAILABLE)."""
        if self._server is not None:
            self._server.close()
        self.drop_all("shutting down")
        await cancel_and_wait(self._tasks)
        if self._server is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await self._server.wait_closed()
            self._server = None

    def drop_all(self, why: str) -> None:
        """Close every slave connection (role change, shutdown) and fail the waiters."""
        for conn in list(self.connections):
            log.info("dropping replication connection of slave %s: %s", conn.slave_addr, why)
            conn.close()
        self.connections.clear()
        self._best_ack = -1
        self.waiters.fail_all(PutMessageStatus.SLAVE_NOT_AVAILABLE)

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- the store's commit listener -------------------------------------------------------------

    def _on_commit(self, end: int) -> None:
        for conn in self.connections:
            # Written here, in the loop turn of the commit, not by the sender task in a later turn:
            # under load a loop turn takes milliseconds, and a SYNC_MASTER send waits for this.
            try:
                if not conn.streaming or self._push(conn):
                    conn.wakeup.set()
            except Exception:  # never into the store's commit: this slave is dropped instead
                log.exception("replicating to slave %s failed", conn.slave_addr)
                conn.close()
        now = time.monotonic()
        if self.connections and now - self._last_sample >= _SAMPLE_EVERY:
            self._last_sample = now
            samples = self._samples
            samples.append((end, now))
            if len(samples) > _MAX_SAMPLES:
                samples.popleft()

    # -- slaves' state ------------------------------------------------------------------------------

    @property
    def active(self) -> list[HAConnection]:
        """Connections that have reported at least once."""
        return [c for c in self.connections if c.ack_offset >= 0]

    @property
    def best_ack(self) -> int:
        """The highest offset any slave acknowledged; -1 when none."""
        return self._best_ack

    def _recompute_best_ack(self) -> None:
        self._best_ack = max((c.ack_offset for c in self.connections), default=-1)

    def in_sync(self, conn: HAConnection) -> bool:
        """Is ``conn`` within ``haSlaveFallbehindMax`` bytes of this master?"""
        if conn.ack_offset < 0:
            return False
        return self.host.store.max_phy_offset - conn.ack_offset <= self.host.config.ha_slave_fallbehind_max

    def slave_ok(self) -> bool:
        """At least one connected slave is in sync (``isSlaveOK``)."""
        return any(self.in_sync(c) for c in self.connections)

    def lag_bytes(self, conn: HAConnection) -> int:
        """CommitLog bytes ``conn`` has not acknowledged yet."""
        end = self.host.store.max_phy_offset
        return max(0, end - max(conn.ack_offset, 0))

    def lag_seconds(self, conn: HAConnection) -> float:
        """How long ago the oldest byte ``conn`` has not acknowledged was written (0 when none)."""
        ack = conn.ack_offset
        if ack >= self.host.store.max_phy_offset:
            return 0.0
        now = time.monotonic()
        for offset, t in self._samples:
            if offset > ack:
                return max(0.0, now - t)
        return 0.0

    def _prune_samples(self) -> None:
        low = min((c.ack_offset for c in self.connections), default=-1)
        samples = self._samples
        while len(samples) > 1 and samples[1][0] <= low:
            samples.popleft()

    # -- SYNC_MASTER --------------------------------------------------------------------------------

    def recheck_quorum(self) -> None:
        """Controller mode: the SyncStateSet changed; answer the waiters the new rule covers."""
        if self.quorum is not None:
            q = self.quorum()
            if q >= 0:
                n = self.waiters.ack(q)
                if n:
                    self.host.metrics.sync_results.labels("ok").inc(n)

    def sync_now(self, end: int) -> PutMessageStatus | None:
        """For a put ending at ``end``: PUT_OK when a slave already has it, SLAVE_NOT_AVAILABLE when
        none can get it soon, None when it must wait (:meth:`sync_status`, ``waiters``). With a
        :attr:`quorum`: PUT_OK when the quorum holds it, else None (wait)."""
        if self.quorum is not None:
            return PutMessageStatus.PUT_OK if self.quorum() >= end else None
        best = self._best_ack
        if best < 0:
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        if best >= end:
            return PutMessageStatus.PUT_OK
        if self.host.store.max_phy_offset - best > self.host.config.ha_slave_fallbehind_max:
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        return None

    def wait_callback(self, end: int, fut: asyncio.Future[Any], done: Callable[[PutMessageStatus], object]) -> None:
        """Register ``done(status)`` for a put ending at ``end`` after :meth:`sync_now` said None."""
        self.waiters.add_callback(end, time.monotonic() + self.host.config.slave_timeout / 1000.0, fut, done)
        if len(self.waiters) == 1:
            self._sweeper_wakeup.set()

    def sync_status(self, end: int) -> PutMessageStatus | asyncio.Future[PutMessageStatus]:
        """For a put ending at ``end``: PUT_OK when a slave already has it, SLAVE_NOT_AVAILABLE
        when none can get it soon, else a future resolved by a report or the timeout."""
        best = self.best_ack
        cfg = self.host.config
        if self.quorum is not None:
            if self.quorum() >= end:
                return PutMessageStatus.PUT_OK
        elif best < 0:
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        elif best >= end:
            return PutMessageStatus.PUT_OK
        elif self.host.store.max_phy_offset - best > cfg.ha_slave_fallbehind_max:
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        deadline = time.monotonic() + cfg.slave_timeout / 1000.0
        fut = self.waiters.add(end, deadline, asyncio.get_running_loop())
        if len(self.waiters) == 1:
            self._sweeper_wakeup.set()
        return fut

    async def _sweep(self) -> None:
        """Expire waiters at their deadline (FLUSH_SLAVE_TIMEOUT)."""
        while True:
            deadline = self.waiters.next_deadline()
            if deadline is None:
                self._sweeper_wakeup.clear()
                await self._sweeper_wakeup.wait()
                continue
            delay = deadline - time.monotonic()
            if delay > 0:
                await asyncio.sleep(min(delay + 0.001, 1.0))
            n = self.waiters.expire(time.monotonic())
            if n:
                self.host.metrics.sync_results.labels("timeout").inc(n)

    # -- one slave ----------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername)
        conn: HAConnection | None = None
        try:
            conn = await self._accept(peer, reader, writer)
            if conn is None:
                return
            self.connections.append(conn)
            self._recompute_best_ack()
            self.host.metrics.connections_total.inc()
            log.info("slave %s (id %d, %s) connected for replication from %s", conn.slave_addr, conn.slave_id,
                     "epoch handshake" if conn.handshake else "plain", peer)
            sender = self._spawn(self._send_loop(conn), f"ha-send-{peer}")
            try:
                await self._read_loop(conn, reader)
            finally:
                sender.cancel()
                await await_ended(sender)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            if conn is not None:
                log.info("replication connection of slave %s closed: %s", conn.slave_addr, exc or "EOF")
        except HAProtocolError as exc:
            log.warning("replication connection from %s dropped: %s", peer, exc)
        except TimeoutError:
            log.warning("replication connection of slave %s idle for %.0f s: dropped",
                        conn.slave_addr if conn else peer, self.host.config.ha_housekeeping_interval / 1000)
        finally:
            with contextlib.suppress(Exception):
                writer.transport.abort()
            if conn is not None and conn in self.connections:
                self.connections.remove(conn)
                self._recompute_best_ack()
                self._after_disconnect(conn)

    def _after_disconnect(self, conn: HAConnection) -> None:
        if not self.connections and self.quorum is None:
            n = self.waiters.fail_all(PutMessageStatus.SLAVE_NOT_AVAILABLE)
            if n:
                self.host.metrics.sync_results.labels("slave_not_available").inc(n)
                log.warning("last slave gone: %d sends waiting for replication answered SLAVE_NOT_AVAILABLE", n)

    async def _accept(self, peer: str, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> HAConnection | None:
        """Read the first bytes: an epoch handshake, or a plain 8-byte report."""
        host = self.host
        idle = host.config.ha_housekeeping_interval / 1000.0
        async with asyncio.timeout(idle):
            first = await reader.readexactly(4)
        if not is_handshake(first):
            if not host.is_master:
                log.info("replication connection from %s refused: this broker is not a master", peer)
                return None
            refused = host.check_slave(None)
            if refused is not None:
                log.warning("replication connection from %s refused: %s", peer, refused)
                return None
            conn = HAConnection(peer, writer, slave_addr=peer)
            async with asyncio.timeout(idle):
                rest = await reader.readexactly(4)
            self._on_report(conn, decode_report(first + rest))
            return conn
        async with asyncio.timeout(idle):
            hello = await read_handshake_body(reader)
        error = None
        if not host.is_master:
            error = f"broker {host.config.broker_addr} is not a master (role {host.config.broker_role})"
        elif hello.get("brokerName") != host.config.broker_name:
            error = f"slave of group {hello.get('brokerName')!r} connected to the master of {host.config.broker_name!r}"
        else:
            error = host.check_slave(hello)
        if error is not None:
            writer.write(encode_handshake({"ok": False, "error": error}))
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await writer.drain()
            log.info("replication handshake from %s refused: %s", peer, error)
            return None
        store = host.store
        writer.write(encode_handshake({
            "ok": True,
            "brokerName": host.config.broker_name,
            "masterAddr": host.config.broker_addr,
            "epoch": host.epoch_file.last_epoch,
            "epochs": host.epoch_file.to_json(),
            "maxOffset": store.max_phy_offset,
            "minOffset": store.min_phy_offset,
        }))
        await writer.drain()
        return HAConnection(peer, writer, slave_addr=str(hello.get("brokerAddr") or peer),
                            slave_id=int(hello.get("brokerId", -1) or -1), handshake=True)

    async def _read_loop(self, conn: HAConnection, reader: asyncio.StreamReader) -> None:
        idle = self.host.config.ha_housekeeping_interval / 1000.0
        while True:
            async with asyncio.timeout(idle):
                data = await reader.readexactly(8)
            self._on_report(conn, decode_report(data))

    def _on_report(self, conn: HAConnection, offset: int) -> None:
        conn.last_report = time.monotonic()
        prev = conn.ack_offset
        before = self._best_ack
        conn.ack_offset = offset
        if prev < 0:
            conn.first_report.set()
        if offset >= before:
            self._best_ack = offset
        elif prev == before:
            self._recompute_best_ack()  # the best slave went back (it truncated its log)
        if self.quorum is not None:
            if offset > prev:
                q = self.quorum()
                n = self.waiters.ack(q) if q >= 0 else 0
                if n:
                    self.host.metrics.sync_results.labels("ok").inc(n)
                if self.on_ack is not None and q >= 0:
                    self.on_ack(min(q, self.host.store.max_phy_offset))
                self._prune_samples()
        elif offset > before:
            n = self.waiters.ack(offset)
            if n:
                self.host.metrics.sync_results.labels("ok").inc(n)
            if self.on_ack is not None:
                self.on_ack(offset)
            self._prune_samples()

    async def _send_loop(self, conn: HAConnection) -> None:
        host = self.host
        store = host.store
        cfg = host.config
        await conn.first_report.wait()
        offset = conn.ack_offset
        if offset == 0:
            end = store.max_phy_offset
            offset = end - end % store.config.mapped_file_size_commit_log
            offset = max(offset, store.min_phy_offset) if store.max_phy_offset else 0
        if offset > store.max_phy_offset:
            log.error("slave %s reports offset %d beyond this master's end %d; it must be truncated "
                      "(an epoch-aware slave does this itself)", conn.slave_addr, offset, store.max_phy_offset)
            conn.close()
            return
        if 0 < offset < store.min_phy_offset:
            log.error("slave %s reports offset %d, but this master's CommitLog starts at %d (older files "
                      "were deleted); clear the slave's store", conn.slave_addr, offset, store.min_phy_offset)
            conn.close()
            return
        conn.transfer_offset = offset
        log.info("replicating to slave %s from offset %d", conn.slave_addr, offset)
        heartbeat = cfg.ha_send_heartbeat_interval / 1000.0
        conn.last_write = time.monotonic()
        ticker = self._spawn(_tick(conn.wakeup, heartbeat / 2), f"ha-tick-{conn.peer}")
        conn.streaming = True
        try:
            await self._stream(conn, heartbeat)
        finally:
            conn.streaming = False
            ticker.cancel()

    def _push(self, conn: HAConnection) -> bool:
        """Write transfers (at most ``haTransferBatchSize`` bytes each) from ``conn.transfer_offset``
        while the log has more; True when it stopped because the transport holds more than
        ``_WRITE_HIGH_WATER`` bytes (the sender task then waits for it to drain)."""
        host = self.host
        store = host.store
        batch = max(1024, host.config.ha_transfer_batch_size)
        writer = conn.writer
        transport = writer.transport
        if transport.is_closing():
            return False
        while True:
            if transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                return True  # checked before each write: a slave that does not read holds a bounded buffer
            offset = conn.transfer_offset
            data = store.read_commit_log(offset, batch)
            if not data:
                return False
            n = len(data)
            writer.write(encode_transfer_header(offset, n) + data)
            conn.transfer_offset = offset + n
            conn.bytes_sent += n
            self.transferred_bytes += n
            host.metrics.transferred_bytes.inc(n)
            conn.last_write = time.monotonic()

    async def _stream(self, conn: HAConnection, heartbeat: float) -> None:
        """Send transfers from ``conn.transfer_offset`` until the connection fails (see the module
        doc); commits also write them at once (:meth:`_push` from the commit listener)."""
        store = self.host.store
        writer = conn.writer
        transport = writer.transport
        while not transport.is_closing():
            if self._push(conn):
                await writer.drain()
                continue
            if conn.transfer_offset < store.max_phy_offset:  # a hole the log cannot serve: never expected
                log.error("cannot read CommitLog offset %d for slave %s", conn.transfer_offset, conn.slave_addr)
                conn.close()
                return
            if transport.get_write_buffer_size():
                await writer.drain()
            now = time.monotonic()
            if now - conn.last_write >= heartbeat:
                writer.write(encode_transfer_header(conn.transfer_offset, 0))
                conn.last_write = now
            conn.wakeup.clear()
            if store.max_phy_offset > conn.transfer_offset:
                continue
            await conn.wakeup.wait()  # new data, or the ticker (heartbeats)
