"""A cluster shared by the client integration tests: 1 NameServer + broker-a + broker-b (masters only).

Started once per test session on free loopback ports (real processes via
``rocket.local.LocalCluster``) and stopped at exit. Tests use unique topic and
group names (``tests.support.unique``), so they do not see each other's messages.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
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
