"""Scale-in as a resumable state machine, one record per leaving broker group (pure parts).

A broker group leaves when ``spec.broker.groups`` drops below its index. Its
record lives in ``status.drain`` (a list, one object per group) so that an
operator restart carries on where it was:

==========================  =========================================================================
``Pending``                 asked to leave; write permission not yet wiped (``requestedAt`` set)
``WaitingForConsumers``     read-only everywhere (see below); waiting for every consumer
                            group's lag, retries and delayed messages to reach zero
                            (``startedAt``, ``pendingMessages``)
``Held``                    the drain timeout passed with messages still pending and
                            ``onTimeout: Hold``: nothing is removed, the cluster is Degraded;
                            checking goes on, and the group leaves once it is empty
``Drained``                 nothing pending (or ``onTimeout: Force``, recorded as ``forced``):
                            the StatefulSets may shrink past this group
``Removing``                the StatefulSets no longer include it: once its pods are gone it is
                            unregistered from every NameServer and its PVCs are deleted if asked
==========================  =========================================================================

(Read-only is RocketMQ's ``WIPE_WRITE_PERM_OF_BROKER`` request on every NameServer plus
``brokerPermission=4``, ``PermName.PERM_READ``, in the broker's config.)

The StatefulSets shrink only from the top: they keep ``1 + the highest group
not yet Drained`` replicas (:func:`statefulset_replicas`). When the last
record is gone and the StatefulSets have ``spec.broker.groups`` replicas the
scale-in is complete. Raising ``groups`` again cancels the drain of every group
not yet removed (write permission restored).

Everything here is pure. :func:`plan` turns ``status.drain`` and the sizes into
this pass's records; :func:`advance` takes one record one step further from what
the reconciler observed, and names the admin call it needs (:class:`DrainStep`
``need``) when it cannot decide without one. The reconciler makes that call, adds
its result to the :class:`DrainObservation` and calls :func:`advance` again, so
that each call is a function of the record and the observation alone.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocket_operator import names
from rocket_operator.admin import DrainProgress
from rocket_operator.spec import DrainSpec

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


@dataclass(slots=True)
class DrainPlan:
    """This pass's drain records and the broker StatefulSets' size (:func:`plan`).

    ``records``: group index -> record of every group leaving; ``cancelled``: the
    records of groups that are wanted again (taken out of ``records``);
    ``replicas``: how many groups the StatefulSets keep now.
    """

    records: dict[int, dict[str, Any]]
    cancelled: list[dict[str, Any]]
    replicas: int


def plan(status_drain: Iterable[Mapping[str, Any]] | None, current: int, desired: int, cluster: str,
         now: str) -> DrainPlan:
    """Records for this pass from ``status.drain``.

    ``current``: the broker StatefulSets' size now (0 before they exist); ``desired``:
    ``spec.broker.groups``; ``cluster``: the RocketCluster's name (for ``brokerName``);
    ``now``: RFC 3339 time stamped on new records (``requestedAt``). A group that must
    leave gets a ``Pending`` record; the record of a group wanted again is cancelled; a
    ``Drained`` group the StatefulSets no longer keep becomes ``Removing``.
    """
    records = by_index(status_drain)
    cancelled = [records.pop(index) for index in list(records) if index < desired]
    for index in leaving_groups(current, desired):
        records.setdefault(index, {"index": index, "brokerName": names.broker_name(cluster, index),
                                   "state": PENDING, "requestedAt": now})
    replicas = statefulset_replicas(current, desired, records)
    for index, rec in records.items():
        if index >= replicas and rec.get("state") == DRAINED:
            rec["state"] = REMOVING
    return DrainPlan(records, cancelled, replicas)


#: :attr:`DrainStep.need`: make the group read-only (``WIPE_WRITE_PERM_OF_BROKER`` on every NameServer,
#: ``brokerPermission=4`` on its master); result in :attr:`DrainObservation.wipe`.
WIPE_WRITE_PERMISSION = "WipeWritePermission"
#: Read the master's backlog (:meth:`rocket_operator.admin.ClusterAdmin.drain_progress`);
#: result in :attr:`DrainObservation.backlog`.
READ_BACKLOG = "ReadBacklog"
#: ``UNREGISTER_BROKER`` of the group's brokers on every NameServer; result in :attr:`DrainObservation.unregister`.
UNREGISTER = "Unregister"
#: Delete the group's PVCs (``deleteClaim.onScaleIn``); then :attr:`DrainObservation.claims_deleted`.
DELETE_CLAIMS = "DeleteClaims"


@dataclass(frozen=True, slots=True)
class Failed:
    """An admin call that failed; ``reason`` is its error text."""

    reason: str


@dataclass(frozen=True, slots=True)
class DrainObservation:
    """What the reconciler knows about one leaving group.

    ``nameservers_known``: at least one NameServer address is known; ``pods_left``:
    names of the group's pods still present; ``registered``: some NameServer still
    lists one of its brokers. The results of the calls :func:`advance` asked for:
    None = not made yet, ``True`` (or a :class:`DrainProgress`) = done, :class:`Failed`.
    """

    nameservers_known: bool = True
    pods_left: tuple[str, ...] = ()
    registered: bool = False
    wipe: bool | Failed | None = None
    backlog: DrainProgress | Failed | None = None
    unregister: bool | Failed | None = None
    claims_deleted: bool = False

    def having(self, **results: Any) -> DrainObservation:
        """A copy with some call results filled in (keyword names are the fields')."""
        return dataclasses.replace(self, **results)


@dataclass(slots=True)
class DrainStep:
    """The result of :func:`advance`.

    ``need``: an admin call (``WIPE_WRITE_PERMISSION`` ...) whose result :func:`advance`
    needs before it can decide; while it is set the rest is not final. Otherwise
    ``record`` is the record to keep (None: the group is gone, drop its record),
    ``waiting`` the reasons the drain is not done, ``events`` the ``(type, reason,
    message)`` Kubernetes events to post.
    """

    record: dict[str, Any] | None
    need: str | None = None
    waiting: list[str] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)


def _stamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _elapsed(since: Any, now: datetime.datetime) -> float:
    """Seconds from an RFC 3339 ``since`` to ``now``; 0 for a missing or unreadable stamp."""
    if not since or not isinstance(since, str):
        return 0.0
    try:
        stamp = datetime.datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return (now - stamp).total_seconds()


def advance(record: Mapping[str, Any], seen: DrainObservation, policy: DrainSpec, now: datetime.datetime,
            delete_claims: bool = False) -> DrainStep:
    """Take one leaving group's record as far as ``seen`` allows (see the module table).

    ``policy``: ``spec.drain`` (timeout in seconds, ``Hold`` or ``Force``);
    ``now``: an aware datetime, the pass's time (stamps and timeouts);
    ``delete_claims``: ``spec.broker.storage.deleteClaim.onScaleIn``. ``record`` is
    not modified. A ``Drained`` record is returned as it is: it waits for the
    StatefulSets to shrink past it (:func:`plan` makes it ``Removing``).
    """
    rec = dict(record)
    state = rec.get("state")
    if state == PENDING:
        return _advance_pending(rec, seen, policy, now)
    if state in (WAITING, HELD):
        return _advance_waiting(rec, seen, policy, now, DrainStep(rec), str(state))
    if state == REMOVING:
        return _advance_removing(rec, seen, delete_claims)
    return DrainStep(rec)


def _advance_pending(rec: dict[str, Any], seen: DrainObservation, policy: DrainSpec,
                     now: datetime.datetime) -> DrainStep:
    step = DrainStep(rec)
    bname = rec["brokerName"]
    if not seen.nameservers_known:
        rec["message"] = "no NameServer address known"
        step.waiting.append(f"{bname}: {rec['message']}")
        return step
    if seen.wipe is None:
        step.need = WIPE_WRITE_PERMISSION
        return step
    if isinstance(seen.wipe, Failed):
        rec["message"] = f"cannot make {bname} read-only yet: {seen.wipe.reason}"
        step.waiting.append(rec["message"])
        if timed_out(_elapsed(rec.get("requestedAt"), now), policy.timeout_seconds) and policy.on_timeout == "Force":
            rec.update(state=DRAINED, forced=True, finishedAt=_stamp(now),
                       message=f"forced after {policy.timeout_seconds}s: broker unreachable ({seen.wipe.reason})")
            step.events.append(("Warning", "DrainForced", f"{bname}: {rec['message']}"))
        return step
    rec.update(state=WAITING, startedAt=_stamp(now), message="write permission wiped; waiting for consumers")
    step.events.append(("Normal", "DrainStarted", f"{bname} is read-only; waiting for consumers"))
    return _advance_waiting(rec, seen, policy, now, step, WAITING)


def _advance_waiting(rec: dict[str, Any], seen: DrainObservation, policy: DrainSpec, now: datetime.datetime,
                     step: DrainStep, state: str) -> DrainStep:
    bname = rec["brokerName"]
    if seen.backlog is None:
        step.need = READ_BACKLOG
        return step
    progress = seen.backlog if isinstance(seen.backlog, DrainProgress) else None
    if isinstance(seen.backlog, Failed):
        rec["message"] = f"cannot read the backlog: {seen.backlog.reason}"
        step.waiting.append(f"{bname}: {rec['message']}")
    if progress is not None:
        rec["pendingMessages"] = progress.total
        rec["lag"] = summarize_lag({**progress.lag, **{f"{t}@-": n for t, n in progress.unconsumed.items()}})
        rec["delayedMessages"] = progress.delayed
    if progress is not None and progress.drained:
        rec.update(state=DRAINED, finishedAt=_stamp(now), message="no message pending")
        step.events.append(("Normal", "Drained", f"{bname}: every consumer group caught up"))
    elif timed_out(_elapsed(rec.get("startedAt") or rec.get("requestedAt"), now), policy.timeout_seconds):
        _time_out(rec, policy, now, step, state)
    else:
        step.waiting.append(f"{bname}: draining, {rec.get('pendingMessages', '?')} messages pending")
    return step


def _time_out(rec: dict[str, Any], policy: DrainSpec, now: datetime.datetime, step: DrainStep, state: str) -> None:
    """The drain timeout passed with messages pending: ``Force`` drains anyway, ``Hold`` holds."""
    bname = rec["brokerName"]
    pending = rec.get("pendingMessages", "unknown")
    if policy.on_timeout == "Force":
        rec.update(state=DRAINED, forced=True, finishedAt=_stamp(now),
                   message=f"forced after {policy.timeout_seconds}s with {pending} messages pending")
        step.events.append(("Warning", "DrainForced", f"{bname}: {rec['message']}"))
        return
    if state != HELD:
        step.events.append(("Warning", "DrainHeld", f"{bname}: {pending} messages pending after "
                                                    f"{policy.timeout_seconds}s; holding"))
    rec.update(state=HELD, message=f"drain timeout passed with {pending} messages pending; "
                                   "holding (set spec.drain.onTimeout=Force to remove anyway)")
    step.waiting.append(f"{bname}: {rec['message']}")


def _advance_removing(rec: dict[str, Any], seen: DrainObservation, delete_claims: bool) -> DrainStep:
    bname = rec["brokerName"]
    step = DrainStep(rec)
    if seen.pods_left:
        step.waiting.append(f"{bname}: waiting for pods {', '.join(sorted(seen.pods_left))} to stop")
        return step
    if seen.registered and seen.unregister is None:
        step.need = UNREGISTER
        return step
    if seen.registered and isinstance(seen.unregister, Failed):
        step.waiting.append(f"{bname}: unregistering: {seen.unregister.reason}")
        return step
    if delete_claims and not seen.claims_deleted:
        step.need = DELETE_CLAIMS
        return step
    step.record = None
    step.events.append(("Normal", "GroupRemoved", f"{bname} removed" + (" (PVCs deleted)" if delete_claims else "")))
    return step
