"""A cluster shared by the client integration tests: 1 NameServer + broker-a + broker-b (masters only).

Started once per test session on free loopback ports (real processes via
``rocket.local.LocalCluster``) and stopped at exit. Tests use unique topic and
group names, so they do not see each other's messages.
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from rocket.local import ClusterState, LocalCluster, find_free_base_port

_state: ClusterState | None = None
_cluster: LocalCluster | None = None


def shared_cluster() -> ClusterState:
    """The session's cluster, started on first use."""
    global _state, _cluster
    if _state is None:
        folder = Path(tempfile.mkdtemp(prefix="rocket-client-it-"))
        cluster = LocalCluster(folder, find_free_base_port(), nameservers=1, brokers=2, slaves=False)
        _state = cluster.start(detach=False, timeout=60)
        _cluster = cluster

        def stop() -> None:
            cluster.stop()
            shutil.rmtree(folder, ignore_errors=True)

        atexit.register(stop)
    return _state


def unique(prefix: str) -> str:
    """A fresh topic or group name."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def eventually(check: Callable[[], bool | Awaitable[bool]], timeout: float = 20.0,
                     interval: float = 0.1, what: str = "condition") -> None:
    """Wait until ``check()`` is true; fail with ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)
