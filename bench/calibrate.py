"""What this machine charges for the work every broker does outside its own code.

On the 2-core Firecracker VMs these benchmarks run on, a page the guest has not used lately (never
touched since boot, or handed back to the host by free page reporting,
``page_reporting.page_reporting_order`` on the kernel command line) costs a host fault when the
guest first writes it. A broker writing new CommitLog data fills new page-cache pages all the
time, so the kernel's copy into the page cache (``copy_folio_from_iter_atomic`` in ``perf``) can
cost more than all of the broker's own work per message: the same code measured 4.3 µs of broker
CPU per batched message one day and 10.3 µs another, and on the second day ``perf record -a``
put 46 % of the broker's samples in that one kernel function. :func:`page_cache_write_cost`
measures it directly, so a benchmark's page can say which kind of day it ran on.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: Bytes per ``pwrite`` of the probe (1 MiB, as a CommitLog writer's large appends are).
_WRITE = 1 << 20


@dataclass(frozen=True)
class PageCacheCost:
    """CPU seconds per GiB written through ``pwrite(2)`` by one thread: ``new`` data (pages the
    file did not have in the page cache), the same range ``rewritten`` (pages already cached)."""

    new: float
    rewritten: float

    @property
    def new_us_per_kib(self) -> float:
        """``new`` in microseconds per KiB, the page-cache share of storing a 1 KiB message."""
        return self.new * 1e6 / (1 << 20)

    def text(self) -> str:
        """``page cache: new data 2.12 s of CPU per GiB (2.0 µs per KiB), cached pages rewritten 0.16 s``."""
        return (f"page cache: new data {self.new:.2f} s of CPU per GiB ({self.new_us_per_kib:.1f} µs per KiB), "
                f"cached pages rewritten {self.rewritten:.2f} s")


def page_cache_write_cost(folder: str | Path | None = None, mib: int = 1024) -> PageCacheCost:
    """Write ``mib`` MiB of new data to a temporary file in ``folder`` (the system's temporary
    folder by default: put it on the file system the broker writes to), then the same range
    again, in 1 MiB ``pwrite`` calls, timing this thread's CPU (``time.thread_time``) for each
    pass; the file is deleted. The default is a GiB: the first few hundred MiB often land on
    pages freed moments ago that the host still backs, and cost a tenth of the rest.

    Returns the two costs scaled to one GiB. Raises ``OSError`` when the file cannot be written
    (a full disk, a missing folder) and ``ValueError`` when ``mib`` < 1."""
    if mib < 1:
        raise ValueError(f"mib must be at least 1, not {mib}")
    data = os.urandom(_WRITE)
    fd, name = tempfile.mkstemp(prefix="page-cache-probe-", dir=folder)
    try:
        costs = []
        for _ in range(2):
            started = time.thread_time()
            for i in range(mib):
                view = memoryview(data)
                at = i * _WRITE
                while view:
                    written = os.pwrite(fd, view, at)
                    view = view[written:]
                    at += written
            costs.append((time.thread_time() - started) * 1024 / mib)
    finally:
        os.close(fd)
        os.unlink(name)
    return PageCacheCost(new=costs[0], rewritten=costs[1])
