"""A remoting connection usable from either end, and the processor table.

Both the server and the client side of a TCP connection may send requests
(RocketMQ's ``Broker2Client`` sends NOTIFY_CONSUMER_IDS_CHANGED to clients), so one class,
:class:`RemotingConnection`, does both: it matches responses to requests by
``opaque`` and dispatches incoming requests to a :class:`Processors` table.

Every coroutine processor runs in a task of its own, so a suspended request
(a long-polled pull) never holds up the requests behind it, and responses are
written in whatever order they complete (as RocketMQ's ``NettyRemotingAbstract``
matches them by ``opaque``). Plain functions are
called inline: they cannot wait, so they cannot hold up the connection either;
one may still answer later by returning an ``asyncio.Future`` of the response
(no task is created for it), or by returning :data:`ANSWER_LATER` and calling
:meth:`RemotingConnection.answer` itself (no future either).

Writes are coalesced: the frames answered while the requests of one read are
handled (with whatever those requests completed: see :attr:`Processors.gather`)
go out with a single ``transport.write`` at the end of that read, in the same
loop turn; every other frame sent or answered during a loop turn goes out with a
single ``transport.write`` at the end of that turn. So one connection makes at
most one write per read plus one per turn, however many requests it answers.
Request timeouts are enforced by one timer per connection, armed for the earliest
deadline of the requests in flight, not by one timer per request.

Backpressure (server side, :class:`FlowControl`): a peer that sends requests
and does not read the replies must not grow the server's memory. As Netty's
channel writability in Apache RocketMQ's NettyRemotingServer
(``channelWritabilityChanged`` turns ``autoRead`` off while the channel is not
writable; marks ``writeBufferHighWaterMark``/``writeBufferLowWaterMark`` of
NettyServerConfig), a server connection stops reading while its unsent replies
are above the high-water mark (the transport's ``pause_writing``) and reads
again once they are below the low-water mark (``resume_writing``). It also
stops reading while ``serverChannelMaxPendingRequests`` requests are being
handled and not yet answered. Requests already decoded when reading stops wait
in a backlog, in order, and are dispatched as the bounds allow; responses to
our own requests are always taken at once. So a connection holds at most about
twice the high-water mark of unsent replies (below the mark in the transport
when a loop turn starts, up to the mark more produced in that turn, plus the
reply that crossed it), the bound of pending requests, and one read's worth of
decoded requests waiting.

Request queues (server side, :class:`RequestQueue`): codes registered with a queue
(the broker's sends) are handled as they are read for up to a slice of a few
milliseconds per loop turn; past that they are queued, stamped with the time they
were read, and handled in order in the next turns' slices, so that reading (and the requests of other codes on the same
connection, such as heartbeats) goes on while the sends wait. A slice starts with a
request handled at once; it ends after its length, or with the loop turn in which a
request finds half of it gone (only then is a callback scheduled for the next turn, so
that light traffic costs no loop turn of its own). One loop turn thus handles queued
codes for at most about one slice (two, when a single stretch of other work of half a
slice or more hides the turn's end), plus the request that runs past the end. As Apache RocketMQ's
``BrokerFastFailure``, a queued request that waited ``maxWait`` or longer is answered
SYSTEM_BUSY (2) with ``[TIMEOUT_CLEAN_QUEUE]broker busy, ...`` instead of being handled,
and one that finds the queue full (its capacity, as a thread pool's queue capacity)
gets SYSTEM_BUSY with ``[OVERLOAD]system busy, ...`` (``NettyRemotingAbstract`` on a
``RejectedExecutionException``). Both are cheap, so an overloaded broker keeps answering
quickly instead of leaving requests unread until the client times them out.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from mypy_extensions import mypyc_attr

from rocket.protocol.codes import FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode
from rocket.remoting.command import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    FrameError,
    HeaderFieldError,
    RemotingCommand,
    RemotingConnectError,
    RemotingTimeoutError,
    encode,
)

log = logging.getLogger("rocket.remoting")

HandlerResult = RemotingCommand | None
Handler = Callable[
    [RemotingCommand, "RemotingConnection"],
    Awaitable[HandlerResult] | HandlerResult | asyncio.Future[HandlerResult],
]
#: Called with (request code, seconds spent, response code or None) after each request.
Observer = Callable[[int, float, "int | None"], None]


#: Netty's default channel write-buffer water marks (``WriteBufferWaterMark.DEFAULT``), which
#: Apache RocketMQ's NettyServerConfig uses when ``writeBufferHighWaterMark``/``LowWaterMark`` are 0.
DEFAULT_WRITE_BUFFER_HIGH_WATER_MARK = 64 * 1024
DEFAULT_WRITE_BUFFER_LOW_WATER_MARK = 32 * 1024
#: Default of :attr:`FlowControl.max_pending_requests` (requests of one connection being handled at once).
DEFAULT_MAX_PENDING_REQUESTS = 4096


@dataclass(frozen=True, slots=True)
class FlowControl:
    """Per-connection bounds of a server connection (see the module docs).

    ``write_buffer_high_water_mark`` / ``write_buffer_low_water_mark``: bytes of
    unsent replies above which reading stops, and below which it starts again
    (RocketMQ's ``writeBufferHighWaterMark`` / ``writeBufferLowWaterMark``;
    0 = Netty's defaults, 64 KiB / 32 KiB). ``max_pending_requests``: requests
    being handled (not yet answered) at which reading stops
    (``serverChannelMaxPendingRequests``; a long-polled pull counts until it is
    answered). Raises ``ValueError`` for a negative value, a low mark above the
    high mark, or ``max_pending_requests`` < 1.
    """

    write_buffer_high_water_mark: int = 0
    write_buffer_low_water_mark: int = 0
    max_pending_requests: int = DEFAULT_MAX_PENDING_REQUESTS

    def __post_init__(self) -> None:
        if self.write_buffer_high_water_mark < 0 or self.write_buffer_low_water_mark < 0:
            raise ValueError("write buffer water marks must be >= 0")
        if self.high < self.low:
            raise ValueError(f"writeBufferLowWaterMark {self.low} is above writeBufferHighWaterMark {self.high}")
        if self.max_pending_requests < 1:
            raise ValueError(f"serverChannelMaxPendingRequests must be >= 1, got {self.max_pending_requests}")

    @property
    def high(self) -> int:
        """The high-water mark in bytes (the default when configured 0)."""
        return self.write_buffer_high_water_mark or DEFAULT_WRITE_BUFFER_HIGH_WATER_MARK

    @property
    def low(self) -> int:
        """The low-water mark in bytes (the default, capped at the high mark, when configured 0)."""
        return self.write_buffer_low_water_mark or min(DEFAULT_WRITE_BUFFER_LOW_WATER_MARK, self.high)


#: Remark prefix of a queued request that waited too long (Apache RocketMQ's ``BrokerFastFailure``).
TIMEOUT_CLEAN_QUEUE_REMARK = "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while"
#: Remark of a request refused because its queue is full (``NettyRemotingAbstract.processRequestCommand``).
OVERLOAD_REMARK = "[OVERLOAD]system busy, start flow control for a while"


class RequestQueue:
    """One FIFO of requests waiting to be handled, shared by every connection that registered
    codes with it (Apache RocketMQ's send thread pool queue with ``BrokerFastFailure``).

    ``max_wait`` () -> seconds a request may wait before it is answered SYSTEM_BUSY (2) with
    :data:`TIMEOUT_CLEAN_QUEUE_REMARK` (None: never; RocketMQ ``waitTimeMillsInSendQueue``,
    200 ms, with ``brokerFastFailureEnable``). ``capacity`` () -> requests the queue holds at
    most; one more is answered SYSTEM_BUSY with :data:`OVERLOAD_REMARK` at once (RocketMQ
    ``sendThreadPoolQueueCapacity``, 10,000); ``max_bytes`` () -> body bytes it holds at most
    (beyond one request), likewise. These are called when used, so they follow the
    configuration. ``slice_seconds``: how long one turn of the event loop handles requests
    of the queue before the rest wait for the next turn (reading goes on meanwhile; see the
    module docs for when a slice ends); while none wait and the slice is not used up, a
    request is handled as soon as it is read.
    ``on_busy`` (reason ``"timeout"`` or ``"overload"``) counts refusals (metrics).
    ``gather``: ``(begin, end)`` called around each slice of queued requests handled in a
    later turn (as :attr:`Processors.gather` around a read).
    """

    def __init__(
        self,
        name: str,
        *,
        max_wait: Callable[[], float | None],
        capacity: Callable[[], int],
        max_bytes: Callable[[], int] = lambda: 512 * 1024 * 1024,
        slice_seconds: float = 0.010,
        on_busy: Callable[[str], None] | None = None,
        gather: tuple[Callable[[], None], Callable[[], None]] | None = None,
    ) -> None:
        self.name = name
        #: Called around each slice of queued requests handled (as :attr:`Processors.gather`).
        self.gather = gather
        self.max_wait = max_wait
        self.capacity = capacity
        self.max_bytes = max_bytes
        #: Body bytes of the queued requests.
        self._bytes = 0
        self.slice_seconds = slice_seconds
        self.on_busy = on_busy
        # (read at, on the loop clock; connection; request; handler; is a coroutine function)
        self._entries: deque[tuple[float, RemotingConnection, RemotingCommand, Handler, bool]] = deque()
        self._scheduled = False
        #: Start and end of the current slice (perf_counter; end 0: no slice started).
        self._slice_start = 0.0
        self._slice_end = 0.0
        #: Requests answered SYSTEM_BUSY because they waited too long / found the queue full.
        self.timed_out = 0
        self.overloaded = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, read_at: float, conn: RemotingConnection, request: RemotingCommand,
            handler: Handler, is_coroutine: bool) -> None:
        """Handle ``request`` (read at ``read_at``, loop clock) now when nothing waits and this
        turn's slice is not used up; else queue it, or refuse it when the queue is full."""
        entries = self._entries
        if not entries:
            now = time.perf_counter()
            if not self._scheduled:
                if now >= self._slice_end:
                    # No slice yet, or the last one's loop turn is over (a request of that turn
                    # past its half would have scheduled its end): this request starts one.
                    self._slice_start = now
                    self._slice_end = now + self.slice_seconds
                elif now - self._slice_start >= self.slice_seconds / 2:
                    self._schedule()  # half of it is gone: it ends with this loop turn
            if now < self._slice_end:
                conn.invoke(request, handler, is_coroutine)
                return
        size = len(request.body)
        if len(entries) >= self.capacity() or (entries and self._bytes + size > self.max_bytes()):
            self.overloaded += 1
            if self.on_busy is not None:
                self.on_busy("overload")
            conn.answer(request, request.response(
                ResponseCode.SYSTEM_BUSY,
                f"{OVERLOAD_REMARK}, size of queue: {len(entries)}, bytes in queue: {self._bytes}"))
            return
        entries.append((read_at, conn, request, handler, is_coroutine))
        self._bytes += size
        conn.queued += 1
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            loop = asyncio.get_running_loop()
            loop.call_soon(self._drain, loop)

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Next loop turn: handle queued requests for one slice; refuse those that waited too long."""
        self._scheduled = False
        entries = self._entries
        if not entries:
            self._slice_end = 0.0  # the next request starts a new slice
            return
        max_wait = self.max_wait()
        now = loop.time()
        self._slice_start = time.perf_counter()
        until = self._slice_end = self._slice_start + self.slice_seconds
        gather = self.gather
        if gather is not None:
            gather[0]()
        try:
            self._drain_slice(entries, max_wait, now, until)
        finally:
            if gather is not None:
                gather[1]()
        self._schedule()  # the next turn drains on (or starts a new slice when none wait)

    def _drain_slice(self, entries: deque[tuple[float, RemotingConnection, RemotingCommand, Handler, bool]],
                     max_wait: float | None, now: float, until: float) -> None:
        while entries:
            read_at, conn, request, handler, is_coroutine = entries.popleft()
            self._bytes -= len(request.body)
            conn.queued -= 1
            if conn.closed:
                conn.answer(request, None)  # nothing is sent; no longer pending
                continue
            waited = now - read_at
            if max_wait is not None and waited >= max_wait:
                self.timed_out += 1
                if self.on_busy is not None:
                    self.on_busy("timeout")
                conn.answer(request, request.response(
                    ResponseCode.SYSTEM_BUSY,
                    f"{TIMEOUT_CLEAN_QUEUE_REMARK}, period in queue: {int(waited * 1000)}ms, "
                    f"size of queue: {len(entries)}",
                ))
                continue
            conn.invoke(request, handler, is_coroutine)
            if time.perf_counter() >= until:
                break


class _AnswerLater:
    def __repr__(self) -> str:
        return "ANSWER_LATER"


#: What a plain handler returns when it calls :meth:`RemotingConnection.answer` itself later.
ANSWER_LATER: Any = _AnswerLater()


@mypyc_attr(allow_interpreted_subclasses=True)  # remoting.server.HookedProcessors
class Processors:
    """Request code -> handler table.

    A handler takes ``(request, connection)`` and returns the response (or
    ``None`` for no response); it may be a coroutine function (run in its own
    task) or a plain function (run inline), which may also return an
    ``asyncio.Future`` resolving to the response (answered when it is done),
    or :data:`ANSWER_LATER` when it calls :meth:`RemotingConnection.answer`
    itself. Unknown codes are answered with REQUEST_CODE_NOT_SUPPORTED (3).
    """

    def __init__(self) -> None:
        self._handlers: dict[int, tuple[Handler, bool]] = {}
        self.observers: list[Observer] = []
        #: Request code -> the :class:`RequestQueue` its requests wait in (server side).
        self.queues: dict[int, RequestQueue] = {}
        #: ``(begin, end)`` called before and after the requests of one read are dispatched
        #: (None: nothing). The broker gathers the CommitLog appends of a read into one write
        #: job there, which ``end`` runs (ASYNC_FLUSH), so that the answers it completes leave
        #: with the read's one write, in the same loop turn as the read.
        self.gather: tuple[Callable[[], None], Callable[[], None]] | None = None

    def register(self, code: int, handler: Handler, queue: RequestQueue | None = None) -> None:
        """Route requests with ``code`` to ``handler`` (replacing any earlier one); with ``queue``,
        requests of that code wait in it before they are handled (see :class:`RequestQueue`)."""
        self._handlers[int(code)] = (handler, inspect.iscoroutinefunction(handler))
        if queue is not None:
            self.queues[int(code)] = queue
        else:
            self.queues.pop(int(code), None)

    def lookup(self, code: int) -> tuple[Handler, bool] | None:
        """The handler for ``code`` and whether it is a coroutine function."""
        return self._handlers.get(code)

    def codes(self) -> list[int]:
        """Every registered request code, sorted."""
        return sorted(self._handlers)


def _error_response(request: RemotingCommand, exc: BaseException) -> RemotingCommand:
    if isinstance(exc, HeaderFieldError):
        return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
    return request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")


class RemotingConnection(asyncio.Protocol):
    """One TCP connection speaking the remoting protocol, from either end.

    ``peer`` is the remote ``"host:port"``; ``attributes`` is free for the
    application (e.g. the broker registered over this connection).
    ``flow_control``: the server-side bounds (see the module docs); None (a
    client connection) never stops reading, so that two peers cannot both wait
    for the other to read.
    """

    def __init__(
        self,
        processors: Processors,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        on_close: Callable[[RemotingConnection], None] | None = None,
        role: str = "server",
        flow_control: FlowControl | None = None,
    ) -> None:
        self.processors = processors
        self.role = role
        self.peer = "?"
        self.local = "?"
        self.attributes: dict[str, Any] = {}
        #: Called with every request this end sends, before encoding (signing, ``RemotingClient``).
        self.rpc_hook: Callable[[RemotingCommand], None] | None = None
        self._decoder = FrameDecoder(max_frame_size)
        self._on_close = on_close
        self._transport: asyncio.Transport | None = None
        # opaque -> (future, deadline on the loop clock, timeout, request code)
        self._pending: dict[int, tuple[asyncio.Future[RemotingCommand], float, float, int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._next_opaque = 0
        self._closed = False
        self._closed_future: asyncio.Future[None] | None = None
        self._write_ok: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Frames written during this loop turn, sent with one transport.write by _flush.
        self._out: list[bytes] = []
        self._flush_scheduled = False
        #: A read is being handled: frames queued now leave with its write (no turn scheduled).
        self._reading = False
        # The one timeout timer: armed for the earliest deadline of the pending requests.
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        # Backpressure (server side): None = never stop reading.
        self._flow = flow_control
        #: ``flow_control.high``, read once (a property, and asked once per request).
        self._high = flow_control.high if flow_control is not None else 0
        self._out_bytes = 0
        #: Requests dispatched and not yet answered.
        self.pending_requests = 0
        #: Of those, the ones waiting in a :class:`RequestQueue` (not counted against
        #: ``max_pending_requests``: the queue has its own bounds, and reading must go on so that
        #: other requests, heartbeats among them, are answered while sends wait).
        self.queued = 0
        self._write_paused = False
        self._reading_paused = False
        #: Requests decoded while the bounds held reading; dispatched in order later.
        self._backlog: deque[RemotingCommand] = deque()
        self._resume_scheduled = False
        #: How often reading was stopped (for logs and tests).
        self.read_pauses = 0
        #: A response arrived on this connection (tells "refused at once" from "lost later").
        self._answered = False
        #: When the bytes being decoded were read (loop clock): the arrival time of queued requests.
        self._read_at = 0.0

    # -- asyncio.Protocol ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        loop = self._loop = asyncio.get_running_loop()
        self._closed_future = loop.create_future()
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        self.peer = _format_addr(peer)
        self.local = _format_addr(local)
        if self._flow is not None:
            self._transport.set_write_buffer_limits(high=self._flow.high, low=self._flow.low)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        try:
            commands = self._decoder.feed(data)
        except FrameError as exc:
            log.warning("closing %s connection with %s: %s", self.role, self.peer, exc)
            self.abort()
            return
        if not commands:
            return
        # Answers given while this read is handled are queued and leave with one write at its end.
        self._read_at = self._loop.time() if self._loop is not None else 0.0
        pending = self._pending
        flow = self._flow
        backlog = self._backlog
        gather = self.processors.gather
        self._reading = True
        if gather is not None:
            gather[0]()
        try:
            for cmd in commands:
                if cmd.flag & FLAG_RESPONSE:
                    self._answered = True
                    entry = pending.pop(cmd.opaque, None)
                    if entry is not None and not entry[0].done():
                        entry[0].set_result(cmd)
                elif flow is None:
                    self._dispatch(cmd)
                elif backlog or self._must_hold(flow):
                    backlog.append(cmd)
                else:
                    self._dispatch(cmd)
        finally:
            try:
                if gather is not None:
                    gather[1]()  # (runs the gathered appends' job: their answers join this read's write)
            finally:
                self._reading = False
        if self._out:
            self._flush()
        if backlog:
            self._pause_reading()

    # -- backpressure (server side) -----------------------------------------------

    def _must_hold(self, flow: FlowControl) -> bool:
        """Should requests wait (unsent replies above the mark, or too many being handled)?"""
        return (self._write_paused or self._out_bytes >= self._high
                or self.pending_requests - self.queued >= flow.max_pending_requests)

    def _pause_reading(self) -> None:
        if self._reading_paused or self._closed or self._transport is None:
            return
        self._reading_paused = True
        self.read_pauses += 1
        try:
            self._transport.pause_reading()
        except (RuntimeError, AttributeError):  # closing
            pass
        if self.read_pauses == 1 or self.read_pauses % 1000 == 0:
            log.warning(
                "%s connection with %s: reading paused (%d time(s)): %d replies' bytes unsent, %d requests "
                "pending, %d waiting; the peer does not read its replies fast enough",
                self.role, self.peer, self.read_pauses, self._out_bytes + self._transport_buffered(),
                self.pending_requests, len(self._backlog),
            )

    def _transport_buffered(self) -> int:
        transport = self._transport
        try:
            return int(transport.get_write_buffer_size()) if transport is not None else 0
        except (RuntimeError, AttributeError):
            return 0

    def _schedule_resume(self) -> None:
        if self._flow is None or self._resume_scheduled or self._closed:
            return
        if not self._reading_paused and not self._backlog:
            return
        self._resume_scheduled = True
        assert self._loop is not None
        self._loop.call_soon(self._resume)

    def _resume(self) -> None:
        """Dispatch waiting requests as the bounds allow; read again once none wait."""
        self._resume_scheduled = False
        flow = self._flow
        if flow is None or self._closed:
            return
        backlog = self._backlog
        if backlog:
            gather = self.processors.gather
            if gather is not None:
                gather[0]()
            try:
                while backlog and not self._must_hold(flow):
                    self._dispatch(backlog.popleft())
            finally:
                if gather is not None:
                    gather[1]()
        if backlog or self._must_hold(flow):
            return  # called again when a bound releases
        if self._reading_paused:
            self._reading_paused = False
            try:
                self._transport.resume_reading()  # type: ignore[union-attr]
            except (RuntimeError, AttributeError):
                pass

    def _request_done(self) -> None:
        """One dispatched request was answered (or will never be)."""
        if self.pending_requests > 0:
            self.pending_requests -= 1
        if self._reading_paused or self._backlog:
            self._schedule_resume()

    def eof_received(self) -> bool | None:
        if self._decoder.buffered:
            log.warning(
                "closing %s connection with %s: closed mid-frame (%d bytes buffered)",
                self.role,
                self.peer,
                self._decoder.buffered,
            )
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._out.clear()
        self._out_bytes = 0
        self._backlog.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        why = f"connection to {self.peer} closed"
        if self._pending and not self._answered and self._transport is not None \
                and self._transport.get_extra_info("sslcontext") is None:
            why += (" before any answer (a server with tlsMode=enforcing closes plaintext connections: "
                    "connect with TLS, e.g. --tls / ROCKET_TLS_CA)")
        for fut, *_ in self._pending.values():
            if not fut.done():
                fut.set_exception(RemotingConnectError(why))
        self._pending.clear()
        for task in list(self._tasks):
            task.cancel()
        if self._write_ok is not None:
            self._write_ok.set()
        if self._closed_future is not None and not self._closed_future.done():
            self._closed_future.set_result(None)
        if self._on_close is not None:
            try:
                self._on_close(self)
            except Exception:
                log.exception("connection close callback failed for %s", self.peer)

    def pause_writing(self) -> None:
        if self._write_ok is None:
            self._write_ok = asyncio.Event()
        self._write_ok.clear()
        self._write_paused = True
        if self._flow is not None:
            self._pause_reading()

    def resume_writing(self) -> None:
        if self._write_ok is not None:
            self._write_ok.set()
        self._write_paused = False
        self._schedule_resume()

    # -- dispatch -----------------------------------------------------------------

    def _dispatch(self, request: RemotingCommand) -> None:
        self.pending_requests += 1
        entry = self.processors.lookup(request.code)
        if entry is None:
            self._respond(
                request,
                request.response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    f" request type {request.code} not supported",
                ),
                0.0,
            )
            return
        handler, is_coroutine = entry
        queues = self.processors.queues
        if queues and self._flow is not None:
            queue = queues.get(request.code)
            if queue is not None:
                queue.put(self._read_at, self, request, handler, is_coroutine)
                return
        self.invoke(request, handler, is_coroutine)

    def invoke(self, request: RemotingCommand, handler: Handler, is_coroutine: bool) -> None:
        """Run ``handler`` for a dispatched ``request`` (counted in ``pending_requests``; called by
        a :class:`RequestQueue` when the request's turn comes)."""
        if is_coroutine:
            task = asyncio.get_running_loop().create_task(self._run(handler, request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        started = time.perf_counter()
        try:
            response = handler(request, self)
        except Exception as exc:
            if not isinstance(exc, HeaderFieldError):
                log.exception("request %d from %s failed", request.code, self.peer)
            response = _error_response(request, exc)
        if response is ANSWER_LATER:
            return
        if isinstance(response, asyncio.Future):
            if isinstance(response, asyncio.Task):  # cancelled with the connection, as handler tasks are
                self._tasks.add(response)
                response.add_done_callback(self._tasks.discard)
            response.add_done_callback(partial(self._answer_later, request, started))
            return
        self._respond(request, response, started)  # type: ignore[arg-type]

    def answer(self, request: RemotingCommand, response: RemotingCommand | None, started: float = 0.0) -> None:
        """Answer ``request`` (for handlers that returned :data:`ANSWER_LATER`); ``started`` is
        the ``time.perf_counter()`` at which handling began, for the observers."""
        self._respond(request, response, started)

    def answer_frame(self, request: RemotingCommand, response_code: int, frame: bytes, started: float = 0.0) -> None:
        """Answer ``request`` with a response already encoded as a whole ``frame`` (bytes with
        its length field; it must carry ``request.opaque`` and the request's serialization).
        ``response_code`` is the code inside it, for the observers; ``started`` as in
        :meth:`answer`. Nothing is sent for a oneway request or on a closed connection."""
        self._request_done()
        observers = self.processors.observers
        if observers:
            elapsed = time.perf_counter() - started if started else 0.0
            for observer in observers:
                observer(request.code, elapsed, response_code)
        if request.flag & FLAG_ONEWAY or self._closed:
            return
        self._send(frame)

    def _answer_later(self, request: RemotingCommand, started: float,
                      fut: asyncio.Future[RemotingCommand | None]) -> None:
        """Done callback of a future returned by a plain handler: answer with its result."""
        if fut.cancelled():
            self._request_done()
            return
        exc = fut.exception()
        if exc is None:
            response = fut.result()
        else:
            if not isinstance(exc, HeaderFieldError):
                log.error("request %d from %s failed", request.code, self.peer, exc_info=exc)
            response = _error_response(request, exc)
        self._respond(request, response, started)

    async def _run(self, handler: Handler, request: RemotingCommand) -> None:
        started = time.perf_counter()
        try:
            response = await handler(request, self)  # type: ignore[misc]
        except asyncio.CancelledError:
            self._request_done()
            raise
        except Exception as exc:
            if not isinstance(exc, HeaderFieldError):
                log.exception("request %d from %s failed", request.code, self.peer)
            response = _error_response(request, exc)
        self._respond(request, response, started)

    def _respond(self, request: RemotingCommand, response: RemotingCommand | None, started: float) -> None:
        self._request_done()
        observers = self.processors.observers
        if observers:
            elapsed = time.perf_counter() - started if started else 0.0
            code = response.code if response is not None else None
            for observer in observers:
                observer(request.code, elapsed, code)
        if response is None or request.flag & FLAG_ONEWAY or self._closed:
            return
        response.opaque = request.opaque
        response.serialize_type = request.serialize_type
        self._send(encode(response))

    # -- sending --------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the connection is closed (or lost)."""
        return self._closed

    def _opaque(self) -> int:
        self._next_opaque = (self._next_opaque + 1) & 0x7FFFFFFF
        return self._next_opaque

    def _send(self, data: bytes) -> None:
        """Queue ``data`` for the one write at the end of the read being handled, else at the end
        of this loop turn (dropped when closed)."""
        self._out.append(data)
        self._out_bytes += len(data)
        if not (self._flush_scheduled or self._reading):
            self._flush_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self._out_bytes = 0
        transport = self._transport
        if not self._closed and transport is not None and not transport.is_closing():
            transport.write(data)  # may call pause_writing
        if self._backlog or self._reading_paused:
            self._schedule_resume()

    def _write(self, data: bytes) -> None:
        transport = self._transport
        if self._closed or transport is None or transport.is_closing():
            raise RemotingConnectError(f"connection to {self.peer} is closed")
        self._send(data)

    async def request(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send ``cmd`` as a request and wait for its response.

        ``cmd.opaque`` is assigned here. Raises ``RemotingTimeoutError`` after
        ``timeout`` seconds and ``RemotingConnectError`` if the connection is or
        becomes closed.
        """
        transport = self._transport
        if self._closed or transport is None or transport.is_closing():
            raise RemotingConnectError(f"connection to {self.peer} is closed")
        loop = self._loop
        assert loop is not None
        opaque = self._next_opaque = (self._next_opaque + 1) & 0x7FFFFFFF
        cmd.opaque = opaque
        cmd.flag &= ~FLAG_ONEWAY
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        data = encode(cmd)
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        deadline = loop.time() + timeout
        self._pending[opaque] = (fut, deadline, timeout, cmd.code)
        self._send(data)
        if self._timer is None or deadline < self._timer_at:
            self._arm(deadline)
        try:
            return await fut
        finally:
            self._pending.pop(opaque, None)

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        assert self._loop is not None
        self._timer_at = at
        self._timer = self._loop.call_at(at, self._expire)

    def _expire(self) -> None:
        """The timeout timer: fail the requests past their deadline, re-arm for the next one."""
        self._timer = None
        assert self._loop is not None
        now = self._loop.time()
        pending = self._pending
        expired = [opaque for opaque, entry in pending.items() if entry[1] <= now]
        for opaque in expired:
            fut, _, timeout, code = pending.pop(opaque)
            if not fut.done():
                fut.set_exception(
                    RemotingTimeoutError(f"request {code} to {self.peer} timed out after {timeout:.3f} s")
                )
        if pending and not self._closed:
            self._arm(min(entry[1] for entry in pending.values()))

    def oneway(self, cmd: RemotingCommand) -> None:
        """Send ``cmd`` as a oneway request (flag bit 2): no response is expected.

        Raises ``RemotingConnectError`` if the connection is closed.
        """
        cmd.opaque = self._opaque()
        cmd.flag |= FLAG_ONEWAY
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        self._write(encode(cmd))

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if self._write_ok is not None and not self._closed:
            await self._write_ok.wait()

    def close(self) -> None:
        """Close after flushing what is already written."""
        if self._transport is not None:
            self._flush()
            self._transport.close()

    def abort(self) -> None:
        """Close at once, discarding unwritten data."""
        if self._transport is not None:
            self._transport.abort()

    async def wait_closed(self) -> None:
        """Wait until the connection is closed."""
        if self._closed_future is not None:
            await asyncio.shield(self._closed_future)


def _format_addr(addr: Any) -> str:
    if not addr:
        return "?"
    if isinstance(addr, tuple):
        host, port = addr[0], addr[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(addr)


def parse_addr(addr: str) -> tuple[str, int]:
    """Split ``"host:port"`` or ``"[v6]:port"`` into ``(host, port)``.

    Raises ``ValueError`` for a missing or non-numeric port.
    """
    text = addr.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"bad address {addr!r}: expected [host]:port")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"bad address {addr!r}: expected host:port")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"bad address {addr!r}: port is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"bad address {addr!r}: port out of range")
    return host, port
