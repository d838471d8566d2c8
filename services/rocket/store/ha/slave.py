"""The slave side of replication: :class:`HAClient` (RocketMQ 4.9.8 ``HAClient`` with
RocketMQ 5's epoch handshake and truncation).

Session (one TCP connection to the master's HA address, which comes from
``haMasterAddress`` or the NameServer's REGISTER_BROKER answer):

1. connect (3 s timeout) and send the epoch handshake (``protocol``); the
   master answers with its epoch list, max and min offsets;
2. reconcile: refuse a master whose newest epoch is older than ours or than
   :attr:`HAClient.min_master_epoch` (it is not the group's real master);
   otherwise find the consistent point
   (``rocket.store.ha.epoch``) and truncate the store's divergent tail there;
   an empty epoch list means a new (or pre-epoch) store whose bytes are
   trusted as they are; a store entirely behind the master's oldest file is
   emptied and copied afresh;
3. report the max offset, then append every transfer byte for byte with
   ``append_commit_log_data`` (a transfer at another offset drops the
   connection) and report again as soon as a batch is written (from the store's commit
   listener, before the reput dispatches it) and at least every
   ``haSendHeartbeatInterval`` (5 s). Transfers that arrive while a batch is
   being written are coalesced into the next one. The master's epochs are
   adopted as the replicated data reaches their start offsets.

No data from the master for ``haHousekeepingInterval`` (20 s) drops the
connection; the client reconnects after a second (any error included).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from rocket.remoting import parse_addr
from rocket.runtime import LoopService, await_ended
from rocket.store.ha.epoch import EpochEntry, entries_from_json, find_consistent_point
from rocket.store.ha.protocol import (
    HAProtocolError,
    TransferParser,
    encode_handshake,
    encode_report,
    read_handshake,
)

if TYPE_CHECKING:
    from rocket.store.ha.host import HAHost

log = logging.getLogger("rocket.store.ha")

#: Replicated bytes buffered before the reader waits for the store.
_MAX_PENDING = 32 * 1024 * 1024
_RECONNECT_DELAY = 1.0
#: The longest wait before asking a master that refused again (seconds). Refusals back off from
#: ``_RECONNECT_DELAY``, doubling: the first is often a race (the slave learns the new master from
#: the controller before that broker has finished becoming master).
_REFUSED_DELAY_MAX = 5.0


def reconnect_delay(refusals: int) -> float:
    """Seconds a slave waits before connecting to its master again: ``_RECONNECT_DELAY`` after a
    session that ended or failed to connect; after ``refusals`` refused handshakes in a row it
    doubles from there up to ``_REFUSED_DELAY_MAX`` (1, 2, 4, 5, 5 ... s)."""
    if refusals <= 0:
        return _RECONNECT_DELAY
    return min(_RECONNECT_DELAY * float(2 ** min(refusals - 1, 16)), _REFUSED_DELAY_MAX)


class HARefusedError(Exception):
    """The master (or our own history) forbids replicating from it; the message says why."""


def common_epoch(local: list[EpochEntry], remote: list[EpochEntry]) -> int:
    """The newest epoch both lists hold with the same start offset; 0 when none."""
    starts = {e.epoch: e.start for e in remote}
    for e in reversed(local):
        if starts.get(e.epoch) == e.start:
            return e.epoch
    return 0


class HAClient(LoopService):
    """Replicates from the master; see the module doc. ``state`` is one of
    :data:`~rocket.store.ha.protocol.STATES`. ``running``/``start``/``stop`` run the connect/replicate
    loop (:class:`~rocket.runtime.LoopService`), on the broker's loop."""

    task_name = "ha-client"

    def __init__(self, host: HAHost) -> None:
        self.host = host
        self.state = "disconnected"
        #: Why the last session ended (or was refused).
        self.last_error = ""
        self.master_ha_addr: str | None = None
        #: The master's main (remoting) address, from the handshake.
        self.master_addr: str | None = None
        self.master_epoch = 0
        #: Refuse a master whose newest epoch is below this (controller mode: the master epoch the
        #: controllers announced; a replaced master's stream is never acknowledged again).
        self.min_master_epoch = 0
        self.master_max_offset = -1
        self.connected_since: float | None = None
        self.disconnected_since: float = time.monotonic()
        self.last_received = 0.0
        self.received_bytes = 0
        self._remote_epochs: list[EpochEntry] = []
        self._writer: asyncio.StreamWriter | None = None
        self._last_report = 0.0
        #: The offset last reported in this session (a report that would repeat it is skipped).
        self._reported = -1
        self._listening = False
        self._wakeup = asyncio.Event()
        #: Refusals in a row (the wait before the next attempt doubles with each).
        self._refusals = 0

    # -- lifecycle ----------------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop replicating and wait until the store has written every byte received."""
        await super().stop()
        self._close()
        self._set_state("disconnected")
        await self.host.store.commit_log.wait_idle()

    def wake(self) -> None:
        """Try to connect now (the master's address just became known)."""
        self._wakeup.set()

    async def _pause(self, seconds: float) -> None:
        self._wakeup.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wakeup.wait()

    def _close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.transport.abort()
            self._writer = None

    def _set_state(self, state: str) -> None:
        if state == self.state:
            return
        if state == "transferring":
            self.connected_since = time.monotonic()
        elif self.state == "transferring":
            self.connected_since = None
            self.disconnected_since = time.monotonic()
        self.state = state

    @property
    def master_reachable(self) -> bool:
        """Replicating now, or not replicating for less than ``haHousekeepingInterval`` (counted
        from the last session's end, or from start-up when there was none)."""
        if self.state == "transferring":
            return True
        grace = self.host.config.ha_housekeeping_interval / 1000.0
        return time.monotonic() - self.disconnected_since < grace

    # -- the loop -----------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            addr = self.host.master_ha_address()
            if not addr:
                self._set_state("disconnected")
                await self._pause(_RECONNECT_DELAY)
                continue
            self.master_ha_addr = addr
            try:
                await self._session(addr)
            except asyncio.CancelledError:
                raise
            except HARefusedError as exc:
                self._note_error(f"master {addr} refused: {exc}", refused=True)
            except (OSError, asyncio.IncompleteReadError, HAProtocolError, TimeoutError, ValueError) as exc:
                self._note_error(f"replication from {addr} stopped: {type(exc).__name__}: {exc}")
            except Exception as exc:
                log.exception("replication from %s failed", addr)
                self._note_error(f"replication from {addr} failed: {exc}")
            finally:
                self._close()
            self._refusals = self._refusals + 1 if self.state == "refused" else 0
            await self._pause(reconnect_delay(self._refusals))

    def _note_error(self, text: str, *, refused: bool = False) -> None:
        if text != self.last_error:
            (log.error if refused else log.warning)("%s", text)
        self.last_error = text
        self._set_state("refused" if refused else "disconnected")

    async def _session(self, addr: str) -> None:
        host = self.host
        cfg = host.config
        store = host.store
        ip, port = parse_addr(addr)
        self._set_state("connecting")
        await store.commit_log.wait_idle()  # bytes of a previous session are written: report the true end
        async with asyncio.timeout(3.0):
            tls = host.client_tls
            reader, writer = await asyncio.open_connection(ip, port, **(tls.connect_args(ip) if tls else {}))
        self._writer = writer
        self._reported = -1
        if not self._listening:
            store.add_commit_listener(self._on_commit)
            self._listening = True
        self._set_state("handshaking")
        writer.write(encode_handshake(host.sign_hello({
            "brokerName": cfg.broker_name,
            "brokerAddr": cfg.broker_addr,
            "brokerId": cfg.broker_id,
            "maxOffset": store.max_phy_offset,
            "epochs": host.epoch_file.to_json(),
        })))
        await writer.drain()
        async with asyncio.timeout(10.0):
            reply = await read_handshake(reader)
        if not reply.get("ok"):
            raise HARefusedError(str(reply.get("error") or "no reason given"))
        if reply.get("brokerName") != cfg.broker_name:
            raise HARefusedError(f"it is the master of {reply.get('brokerName')!r}, not of {cfg.broker_name!r}")
        remote = entries_from_json(reply.get("epochs", []))
        newest = max(int(reply.get("epoch", 0) or 0), remote[-1].epoch if remote else 0)
        if newest < self.min_master_epoch:
            raise HARefusedError(f"its newest epoch {newest} is older than the master epoch {self.min_master_epoch} "
                                 "the controllers announced: it has been replaced")
        self.master_addr = str(reply.get("masterAddr") or "") or None
        self.master_epoch = int(reply.get("epoch", 0) or 0)
        self.master_max_offset = int(reply.get("maxOffset", -1))
        await self._reconcile(remote, self.master_max_offset, int(reply.get("minOffset", 0)))
        self._remote_epochs = [e for e in remote if e.epoch > host.epoch_file.last_epoch]
        await self._adopt_epochs()
        self._report(store.max_phy_offset)
        self._set_state("transferring")
        self.last_error = ""
        log.info("replicating from master %s (%s, epoch %d) from offset %d", self.master_addr, addr,
                 self.master_epoch, store.max_phy_offset)
        await self._transfer(reader, writer)

    async def _reconcile(self, remote: list[EpochEntry], remote_max: int, remote_min: int) -> None:
        """Truncate our divergent tail (or refuse the master); see the module doc."""
        host = self.host
        store = host.store
        local = list(host.epoch_file.entries)
        local_max = store.max_phy_offset
        if local and remote and remote[-1].epoch < local[-1].epoch:
            raise HARefusedError(f"its newest epoch {remote[-1].epoch} is older than ours {local[-1].epoch}: "
                                 "it is not the group's current master")
        cut = -1
        if local and local_max > 0:
            point = find_consistent_point(local, local_max, remote, remote_max)
            if point < 0:
                raise HARefusedError(f"no common history (ours {host.epoch_file.to_json()}, the master's "
                                     f"{[e.to_json() for e in remote]}); clear this broker's store to copy the "
                                     "master afresh")
            if point < local_max:
                cut = point
            keep = common_epoch(local, remote)
            if cut < 0 and keep < local[-1].epoch:
                cut = local_max  # no data to drop, but epochs the master never had
            if cut >= 0:
                await self._truncate(cut, keep)
        elif not local and local_max > 0:
            log.warning("this store has data up to %d but no epoch history (written before epochs existed): "
                        "trusting it as a copy of the master", local_max)
        local_max = store.max_phy_offset
        if 0 < local_max < remote_min:
            log.warning("this store ends at %d, before the master's oldest CommitLog file (%d): emptying it "
                        "to copy the master afresh", local_max, remote_min)
            await self._truncate(0, 0)

    async def _truncate(self, offset: int, keep_epoch: int) -> None:
        host = self.host
        loop = asyncio.get_running_loop()
        removed = await host.store.truncate(offset)
        await loop.run_in_executor(None, host.epoch_file.truncate_to_epoch, keep_epoch)
        await loop.run_in_executor(None, host.epoch_file.truncate_after, host.store.max_phy_offset)
        host.metrics.truncated_bytes.inc(removed)
        host.metrics.truncations.inc()
        log.warning("truncated this broker's CommitLog to %d (%d bytes the master does not have; "
                    "epochs now %s)", host.store.max_phy_offset, removed, host.epoch_file.to_json())

    async def _adopt_epochs(self) -> None:
        pending = self._remote_epochs
        end = self.host.store.max_phy_offset
        if pending and pending[0].start <= end:
            ef = self.host.epoch_file
            await asyncio.get_running_loop().run_in_executor(None, ef.adopt, pending, end)
            self._remote_epochs = [e for e in pending if e.epoch > ef.last_epoch]

    def _report(self, offset: int) -> None:
        if self._writer is not None:
            self._writer.write(encode_report(offset))
            self._reported = offset
            self._last_report = time.monotonic()

    @property
    def reported_offset(self) -> int:
        """The CommitLog offset last reported to the master in this session (-1 before the first)."""
        return self._reported

    def _on_commit(self, end: int) -> None:
        """The store's commit listener: report replicated bytes as soon as they are written, in
        the loop turn of the write and before the reput dispatches them (as Apache RocketMQ's
        ``HAClient``, which reports after ``appendToCommitLog``; its reput is another thread),
        so that a SYNC_MASTER send waits for neither the dispatch nor a later turn."""
        if self.state == "transferring" and end > self._reported:
            self._report(end)

    async def _transfer(  # noqa: C901 - hot: per chunk replicated, bench_replication
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Read transfers and apply them in batches until the connection fails."""
        host = self.host
        store = host.store
        cfg = host.config
        idle = cfg.ha_housekeeping_interval / 1000.0
        heartbeat = cfg.ha_send_heartbeat_interval / 1000.0
        tick = min(heartbeat, idle / 4)
        parser = TransferParser()
        pending: list[bytes | memoryview] = []  # transfers received and not yet applied, contiguous
        pending_size = 0
        pending_offset = -1
        have_data = asyncio.Event()
        room = asyncio.Event()
        room.set()
        failure: list[BaseException] = []
        self.last_received = time.monotonic()

        async def apply() -> None:
            nonlocal pending, pending_size, pending_offset
            while True:
                await have_data.wait()
                have_data.clear()
                if not pending:
                    continue
                data = pending[0] if len(pending) == 1 else b"".join(pending)
                offset = pending_offset
                pending = []
                pending_size = 0
                pending_offset = -1
                room.set()
                if not await store.append_commit_log_data(offset, data):
                    raise HAProtocolError(f"the master sent data at {offset}, this log ends at "
                                          f"{store.commit_log.append_offset}")
                self.received_bytes += len(data)
                host.metrics.received_bytes.inc(len(data))
                if store.max_phy_offset != self._reported:  # (the commit listener reports first)
                    self._report(store.max_phy_offset)
                await self._adopt_epochs()

        async def beat() -> None:
            # Also the read deadline (haHousekeepingInterval without a byte from the master), kept
            # here rather than as a timeout around each read: that one costs a timer per chunk.
            while True:
                await asyncio.sleep(tick)
                now = time.monotonic()
                if now - self.last_received >= idle:
                    failure.append(TimeoutError(f"nothing from the master for {idle:g} s"))
                    writer.transport.abort()
                    return
                if now - self._last_report >= heartbeat:
                    self._report(store.max_phy_offset)

        applier = asyncio.get_running_loop().create_task(apply(), name="ha-client-apply")
        beater = asyncio.get_running_loop().create_task(beat(), name="ha-client-heartbeat")

        def done(task: asyncio.Task[Any]) -> None:
            if not task.cancelled() and task.exception() is not None:
                failure.append(task.exception())  # type: ignore[arg-type]
                writer.transport.abort()

        applier.add_done_callback(done)
        try:
            while True:
                if not room.is_set():
                    await room.wait()
                    self.last_received = time.monotonic()  # the read deadline counts from here
                chunk = await reader.read(256 * 1024)
                if not chunk:
                    if failure:
                        raise failure[0]
                    raise ConnectionError("the master closed the connection")
                self.last_received = time.monotonic()
                for offset, data in parser.feed(chunk):
                    if offset + len(data) > self.master_max_offset:
                        self.master_max_offset = offset + len(data)
                    if not data:
                        continue  # heartbeat
                    if pending_offset < 0:
                        pending_offset = offset
                    elif offset != pending_offset + pending_size:
                        raise HAProtocolError(f"transfer at {offset}, expected {pending_offset + pending_size}")
                    pending.append(data)
                    pending_size += len(data)
                    have_data.set()
                if pending_size >= _MAX_PENDING:
                    room.clear()
        except Exception:
            if failure:
                raise failure[0] from None
            raise
        finally:
            applier.cancel()
            beater.cancel()
            for t in (applier, beater):
                await await_ended(t)  # a stop() of this client arriving meanwhile must not be lost
