"""Process runtime helpers: the event loop policy and logging set-up."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop when it is installed, else on asyncio's loop.

    Set ``ROCKET_NO_UVLOOP=1`` to force the standard loop.
    """
    if not os.environ.get("ROCKET_NO_UVLOOP"):
        try:
            import uvloop

            return uvloop.run(main)
        except ImportError:
            pass
    return asyncio.run(main)


def setup_logging(level: str = "INFO") -> None:
    """One line per record on stderr: time, level, logger, message."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


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
