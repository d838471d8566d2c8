""":class:`StoreStats`: the message store's cheap counters (``DefaultMessageStore.stats``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rocket.store.commitlog import CommitLogStats


@dataclass(slots=True)
class StoreStats:
    """Cheap counters; ``commit_log`` holds write/flush timings (seconds) and fdatasync counts.

    ``last_recovery_*``: the last start-up's recovery (duration in seconds, abnormal = no clean
    shutdown before it, records checked); ``cq_flush_seconds``: the last ConsumeQueue/index
    fdatasync and checkpoint write.
    """

    put_calls: int = 0
    put_messages: int = 0
    put_rejected: int = 0
    commit_log: CommitLogStats = field(default_factory=CommitLogStats)
    last_recovery_seconds: float = 0.0
    last_recovery_abnormal: bool = False
    last_recovery_records: int = 0
    cq_flush_seconds: float = 0.0
