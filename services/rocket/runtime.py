"""Process runtime helpers: the event loop policy and logging set-up."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
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
