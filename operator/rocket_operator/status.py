"""The RocketCluster's ``status`` from what the steps of one pass found (pure).

:func:`cluster_status` gives the phase, the conditions (the Kubernetes
``metav1.Condition`` shape, :mod:`rocket_operator.conditions`) and the other
``status`` fields; :func:`invalid_conditions` and :func:`paused_conditions` those
of a pass that stops early. Phases, first match wins:

=============  ===============================================================================
``Degraded``   a drain is ``Held`` (or the cluster was up and is no longer ready, not scaling)
``Draining``   a scale-in has a drain record
``Updating``   a broker pod runs an old revision, or a StatefulSet change is not observed yet
``Running``    every NameServer and broker group is ready and registered
``Scaling``    the cluster was up and the broker StatefulSets or groups are being resized
``Pending``    never up yet
=============  ===============================================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rocket_operator import conditions, drain
from rocket_operator.spec import ClusterSpec

PHASE_PENDING = "Pending"
PHASE_RUNNING = "Running"
PHASE_UPDATING = "Updating"
PHASE_SCALING = "Scaling"
PHASE_DRAINING = "Draining"
PHASE_DEGRADED = "Degraded"
PHASE_PAUSED = "Paused"
PHASE_INVALID = "Invalid"
#: Phases of a cluster that has been up: losing readiness then reads as Degraded (or Scaling), not Pending.
PHASES_UP = (PHASE_RUNNING, PHASE_SCALING, PHASE_UPDATING, PHASE_DRAINING, PHASE_DEGRADED)


@dataclass(slots=True)
class PassFacts:
    """What the steps of one pass found, as :func:`cluster_status` reads it.

    ``previous_phase`` / ``previous_groups``: the old ``status.phase`` and how many
    distinct groups the old ``status.brokerGroups`` listed; ``statefulsets``: broker
    StatefulSets found; ``replicas``: groups they keep now; ``groups``: the new
    ``status.brokerGroups`` entries; ``drain``: group index -> drain record;
    ``outdated``: broker pods on an old revision; ``unobserved``: StatefulSets whose
    change the controller has not seen yet; ``rollout``: ``status.rollout`` (None:
    nothing to roll); ``analytics_entries`` / ``analytics_condition``: ``status.analytics``
    and the ``AnalyticsReady`` condition (None: none).
    """

    spec: ClusterSpec
    previous_phase: str | None = None
    previous_groups: int = 0
    statefulsets: int = 0
    replicas: int = 0
    nameservers: list[str] = field(default_factory=list)
    nameservers_ready: int = 0
    groups: list[dict[str, Any]] = field(default_factory=list)
    drain: dict[int, dict[str, Any]] = field(default_factory=dict)
    outdated: tuple[str, ...] = ()
    unobserved: list[str] = field(default_factory=list)
    rollout: dict[str, Any] | None = None
    analytics_entries: list[dict[str, Any]] | None = None
    analytics_condition: dict[str, Any] | None = None


@dataclass(slots=True)
class StatusReport:
    """``phase``, ``conditions`` (without timestamps), the other ``status`` ``fields`` (None = drop
    the field), and the ``waiting`` reasons the status step adds (NameServers / groups not ready)."""

    phase: str
    conditions: list[dict[str, Any]]
    fields: dict[str, Any]
    waiting: list[str]


def cluster_status(facts: PassFacts, waiting: Sequence[str]) -> StatusReport:
    """The status of a pass that ran every step; ``waiting``: the reasons the earlier steps gave."""
    spec = facts.spec
    ns_desired, desired = spec.name_server.replicas, spec.broker.groups
    ready_groups = sum(1 for g in facts.groups
                       if g["state"] == "Active" and g["readyPods"] == spec.broker.replicas_per_group + 1)
    added = []
    if facts.nameservers_ready < ns_desired:
        added.append(f"NameServers ready {facts.nameservers_ready}/{ns_desired}")
    if ready_groups < desired:
        added.append(f"broker groups ready {ready_groups}/{desired}")
    all_registered = all(g["registered"] for g in facts.groups if g["state"] == "Active")
    ready = (facts.nameservers_ready >= ns_desired and ready_groups >= desired and all_registered
             and not facts.outdated and not facts.drain and not facts.unobserved)
    phase = _phase(facts, ready)
    conds = _conditions(facts, ready, phase, [*waiting, *added])
    fields: dict[str, Any] = {
        "phase": phase,
        "nameServers": {"desired": ns_desired, "ready": facts.nameservers_ready, "addresses": facts.nameservers},
        "nameServersReady": f"{facts.nameservers_ready}/{ns_desired}",
        "brokerGroupsReady": f"{ready_groups}/{desired}",
        "brokerGroups": facts.groups,
        "drain": [facts.drain[i] for i in sorted(facts.drain, reverse=True)] or None,
        "rollout": facts.rollout,
        "analytics": facts.analytics_entries,
    }
    return StatusReport(phase, conds, fields, added)


def _held(facts: PassFacts) -> list[dict[str, Any]]:
    return [r for r in facts.drain.values() if r.get("state") == drain.HELD]


def _phase(facts: PassFacts, ready: bool) -> str:
    spec = facts.spec
    scaling = (facts.replicas != spec.broker.groups or facts.statefulsets != spec.broker.replicas_per_group + 1
               or any(not g["metadataSynced"] or g["index"] >= facts.previous_groups for g in facts.groups))
    was_up = facts.previous_phase in PHASES_UP
    if _held(facts):
        return PHASE_DEGRADED
    if facts.drain:
        return PHASE_DRAINING
    if facts.outdated or facts.unobserved:
        return PHASE_UPDATING
    if ready:
        return PHASE_RUNNING
    if was_up and scaling:
        return PHASE_SCALING
    if was_up:
        return PHASE_DEGRADED
    return PHASE_PENDING


def _conditions(facts: PassFacts, ready: bool, phase: str, waiting: Sequence[str]) -> list[dict[str, Any]]:
    held = _held(facts)
    records = facts.drain
    degraded = bool(held) or phase == PHASE_DEGRADED
    waiting_text = "; ".join(dict.fromkeys(waiting))
    conds = [
        conditions.condition(conditions.READY, ready, "ClusterReady" if ready else "NotReady",
                             "all NameServers and broker groups are ready and registered" if ready else waiting_text),
        conditions.condition(conditions.PROGRESSING, bool(waiting) and not held,
                             "Reconciling" if waiting else "Reconciled", waiting_text),
        conditions.condition(conditions.DEGRADED, degraded,
                             "DrainHeld" if held else ("NotReady" if degraded else "AsExpected"),
                             "; ".join(f"{r['brokerName']}: {r.get('message', '')}" for r in held)
                             if held else (waiting_text if degraded else "")),
        conditions.condition(conditions.DRAINING, bool(records), "ScaleIn" if records else "NoDrain",
                             ", ".join(f"{r['brokerName']} {r.get('state')}" for r in
                                       sorted(records.values(), key=lambda r: -int(r["index"])))),
        conditions.condition(conditions.PAUSED, False, "NotPaused", ""),
    ]
    if facts.analytics_condition is not None:
        conds.append(facts.analytics_condition)
    return conds


def invalid_conditions(error: str) -> list[dict[str, Any]]:
    """The conditions of a cluster whose spec does not parse (``error``: why)."""
    return [
        conditions.condition(conditions.READY, False, "InvalidSpec", error),
        conditions.condition(conditions.PROGRESSING, False, "InvalidSpec", error),
        conditions.condition(conditions.DEGRADED, True, "InvalidSpec", error),
        conditions.condition(conditions.DRAINING, False, "InvalidSpec", ""),
        conditions.condition(conditions.PAUSED, False, "InvalidSpec", ""),
    ]


def paused_conditions(previous: Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """The conditions of a paused cluster: the ``previous`` ones as they were (without timestamps,
    which :func:`rocket_operator.conditions.merge_conditions` keeps) and ``Paused`` True."""
    message = "reconciliation paused by the rocket.dev/paused annotation"
    kept = [{k: v for k, v in c.items() if k not in ("observedGeneration", "lastTransitionTime")}
            for c in previous or [] if c.get("type") != conditions.PAUSED]
    return [*kept, conditions.condition(conditions.PAUSED, True, "Paused", message)]
