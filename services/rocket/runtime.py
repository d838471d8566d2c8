"""Process runtime helpers: the event loop policy, logging set-up, signals and background tasks."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger("rocket.runtime")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop when it is installed, else on asyncio's loop.

    Set ``ROCKET_NO_UVLOOP=1`` to force the standard loop.
    """
    if not os.environ.get("ROCKET_NO_UVLOOP"):
        try:
            import uvloop
        except ImportError:
            pass
        else:  # an ImportError raised by ``main`` itself is main's error, not a missing uvloop
            return uvloop.run(main)
    return asyncio.run(main)


#: The collector's generation-0 threshold in a server (CPython's default: 700). See :func:`tune_garbage_collector`.
GC_GEN0_THRESHOLD = 10_000


def tune_garbage_collector() -> int:
    """Set up CPython's cyclic garbage collector for a long-running server that has just started;
    returns how many start-up objects were frozen, 0 (and nothing changed) when
    ``ROCKET_NO_GC_TUNING=1`` is set.

    1. ``gc.collect()``, then ``gc.freeze()`` (CPython 3.7+): every object tracked now moves to the
       permanent generation, which no collection walks. A server's modules, classes, functions,
       configuration and recovered metadata live as long as the process; in a broker under
       ~24,000 single sends/s on this project's 2-core test machine, full (generation 2)
       collections came about once a second and walked them all (~73,000 objects) in ~25 ms each,
       which showed as a 23-33 ms send-latency p99.9 (``make bench BENCH=broker``); frozen, a
       full collection took ~0.2 ms and the p99.9 was 5-9 ms (README, "Garbage collection").
    2. ``gc.set_threshold(GC_GEN0_THRESHOLD)`` (10,000 instead of 700): a generation-0 collection
       runs when allocations of tracked objects exceed deallocations by the threshold. A broker's
       requests in flight moved that count past 700 ~270 times a second (~0.5 µs of CPU per single
       send) while freeing nearly everything by reference counting; past 10,000 it never went in
       the same run. Cyclic garbage still triggers a collection, after at most 10,000 objects of
       it, so memory stays bounded. Generations 1 and 2 keep their thresholds (10, 10).

    Objects created later are collected as before. The cost: a cycle among start-up objects that
    becomes garbage later is never freed (bounded by the start-up heap). Logs one INFO line with the
    count and the threshold."""
    if os.environ.get("ROCKET_NO_GC_TUNING") == "1":
        return 0
    gc.collect()
    gc.freeze()
    _gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)
    frozen = gc.get_freeze_count()
    log.info("garbage collector: %d start-up objects frozen (gc.freeze), generation-0 threshold %d",
             frozen, GC_GEN0_THRESHOLD)
    return frozen


class BadHttpRequestFilter(logging.Filter):
    """Turns aiohttp's record of a request it could not parse (``aiohttp.server``: "Error handling
    request", ERROR with a traceback, for every malformed request line, header or chunk; the client
    gets a 400) into one WARNING line: such a request is the client's error, not the server's, and a
    traceback per bad request would let anyone flood the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record when its exception is one of aiohttp's HTTP parsing errors; keep it."""
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and type(exc).__module__ == "aiohttp.http_exceptions":
            peer = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            message = " ".join(str(exc).split())
            record.msg, record.args = "bad HTTP request from %s: %s", (peer, message[:200])
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True


def setup_logging(level: str = "INFO") -> None:
    """One line per record on stderr: time, level, logger, message (see :class:`BadHttpRequestFilter`)."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiohttp.server").addFilter(BadHttpRequestFilter())


@contextlib.asynccontextmanager
async def stop_signals() -> AsyncIterator[asyncio.Future[str]]:
    """Catch SIGTERM and SIGINT while the block runs; yields a future set to the first signal's name.

    A server awaits the future, then shuts down; the handlers are removed on
    exit. Must run in the main thread's event loop (``add_signal_handler``).
    """
    loop = asyncio.get_running_loop()
    received: asyncio.Future[str] = loop.create_future()

    def on_signal(sig: signal.Signals) -> None:
        if not received.done():
            received.set_result(sig.name)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        yield received
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


async def until_stopped(start: Callable[[], Coroutine[Any, Any, None]],
                        stop: Callable[[], Coroutine[Any, Any, None]],
                        started: Callable[[], None] | None = None) -> str:
    """Catch SIGTERM and SIGINT (:func:`stop_signals`), await ``start()``, tune the garbage
    collector (:func:`tune_garbage_collector`), call ``started()`` (e.g. to log "listening"), wait
    for a signal, then await ``stop()``; returns the signal's name (``"SIGTERM"``). The handlers
    go in before ``start()``, so a signal that comes while the process starts (its port may
    already be open) stops it cleanly once ``start()`` returns instead of killing it with the
    default action (exit 130 on SIGINT). ``stop()`` runs also when the wait itself is cancelled;
    it does not run when ``start()`` raises."""
    async with stop_signals() as received:
        await start()
        tune_garbage_collector()
        if started is not None:
            started()
        try:
            return await received
        finally:
            await stop()


async def await_ended(task: asyncio.Task[Any]) -> None:
    """Wait for ``task`` (usually one just cancelled) to end, swallowing its cancellation or error —
    but not a cancellation of the *calling* task, which propagates. (A bare
    ``suppress(CancelledError)`` around ``await task`` would also swallow the caller's own
    cancellation: a loop stopped while it waits there keeps running, and whoever stops it waits
    forever.)"""
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    except Exception:  # the task's own failure: it has ended, which is all that is awaited
        pass


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel every task of ``tasks`` (a snapshot is taken first), then wait for each to end; their
    exceptions, cancellation included, are swallowed (:func:`await_ended`): this is for stopping a
    service's loops."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    for task in pending:
        await await_ended(task)


class LoopService:
    """Base of a service that runs one loop, :meth:`_run`, in a task named ``task_name``, between
    :meth:`start` and :meth:`stop`; at most one such task at a time, on the event loop's thread.

    A subclass implements :meth:`_run` and extends :meth:`stop` to release what it holds.
    """

    #: The task's name (``asyncio.Task.get_name``).
    task_name = "loop"
    _task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        """The loop was started and has not ended."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the loop in the running event loop unless it runs already (idempotent)."""
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.task_name)

    async def stop(self) -> None:
        """Cancel the loop and wait until it has ended, swallowing its ``CancelledError`` or any error
        it ended with (a no-op when it was never started)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await await_ended(task)

    async def _run(self) -> None:
        raise NotImplementedError
