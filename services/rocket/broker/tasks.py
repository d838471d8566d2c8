"""Small asyncio helpers shared by the broker's services."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

log = logging.getLogger("rocket.broker")


class CoalescingRunner:
    """Runs an async ``action`` so that concurrent callers share runs.

    ``await run()`` returns once a run of ``action`` that *started after the
    call* has completed: a burst of callers while one run is in progress
    triggers exactly one more run. Used for NameServer registration (a topic
    created mid-registration must be in a later registration) and for
    persisting the delay offsets. An exception of ``action`` propagates to the
    caller whose run raised; the others then run it themselves.
    """

    def __init__(self, action: Callable[[], Awaitable[None]]) -> None:
        self._action = action
        self._lock = asyncio.Lock()
        self._requested = 0
        self._done = 0

    async def run(self) -> None:
        """Request a run and wait for one that covers this request."""
        self._requested += 1
        ticket = self._requested
        async with self._lock:
            if self._done >= ticket:
                return
            target = self._requested
            await self._action()
            self._done = max(self._done, target)


class TaskGroup:
    """Background tasks kept alive until :meth:`cancel_all`; failures are logged."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` in a task tracked by this group."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: background task %s failed", self.name, task.get_name(), exc_info=task.exception())

    async def cancel_all(self) -> None:
        """Cancel every task and wait for them to finish."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def __len__(self) -> int:
        return len(self._tasks)


def write_file_durably(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably (blocking).

    Writes ``path.tmp``, fsyncs it, renames it over ``path`` and fsyncs the
    directory, so a crash leaves either the old or the new content. Raises
    ``OSError``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
