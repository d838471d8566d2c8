"""Scale-in as a resumable state machine, one record per leaving broker group (pure parts).

A broker group leaves when ``spec.broker.groups`` drops below its index. Its
record lives in ``status.drain`` (a list, one object per group) so that an
operator restart carries on where it was:

==========================  =========================================================================
``Pending``                 asked to leave; write permission not yet wiped (``requestedAt`` set)
``WaitingForConsumers``     read-only everywhere (205 on every NameServer, brokerPermission=4 on the
                            broker); waiting for every consumer group's lag, retries and delayed
                            messages to reach zero (``startedAt``, ``pendingMessages``)
``Held``                    the drain timeout passed with messages still pending and
                            ``onTimeout: Hold``: nothing is removed, the cluster is Degraded;
                            checking goes on, and the group leaves once it is empty
``Drained``                 nothing pending (or ``onTimeout: Force``, recorded as ``forced``):
                            the StatefulSets may shrink past this group
``Removing``                the StatefulSets no longer include it: once its pods are gone it is
                            unregistered from every NameServer and its PVCs are deleted if asked
==========================  =========================================================================

The StatefulSets shrink only from the top: they keep ``1 + the highest group
not yet Drained`` replicas (:func:`statefulset_replicas`). When the last
record is gone and the StatefulSets have ``spec.broker.groups`` replicas the
scale-in is complete. Raising ``groups`` again cancels the drain of every group
not yet removed (write permission restored).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PENDING = "Pending"
WAITING = "WaitingForConsumers"
HELD = "Held"
DRAINED = "Drained"
REMOVING = "Removing"
STATES = (PENDING, WAITING, HELD, DRAINED, REMOVING)


def by_index(records: Iterable[Mapping[str, Any]] | None) -> dict[int, dict[str, Any]]:
    """``status.drain`` records keyed by group index (malformed entries are dropped)."""
    out: dict[int, dict[str, Any]] = {}
    for rec in records or []:
        try:
            out[int(rec["index"])] = dict(rec)
        except (KeyError, TypeError, ValueError):
            continue
    return out


def statefulset_replicas(current: int, desired: int, records: Mapping[int, Mapping[str, Any]]) -> int:
    """How many groups the broker StatefulSets keep now.

    ``current``: their size now (0 when they do not exist yet); ``desired``:
    ``spec.broker.groups``. Growing is immediate; shrinking passes a group only
    when it is ``Drained`` or ``Removing``, from the top down.
    """
    if desired >= current:
        return desired
    size = current
    while size > desired and records.get(size - 1, {}).get("state") in (DRAINED, REMOVING):
        size -= 1
    return size


def leaving_groups(current: int, desired: int) -> list[int]:
    """Indexes of the groups that must leave, highest first."""
    return list(range(current - 1, desired - 1, -1))


def timed_out(elapsed_seconds: float, timeout_seconds: int) -> bool:
    """True when a drain that began ``elapsed_seconds`` ago has used its ``timeout_seconds``."""
    return elapsed_seconds >= timeout_seconds


def summarize_lag(lag: Mapping[str, int], limit: int = 10) -> dict[str, int]:
    """The ``limit`` largest ``topic@group -> messages`` entries (for status)."""
    top = sorted(lag.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return dict(top)
