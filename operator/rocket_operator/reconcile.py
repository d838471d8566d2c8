"""One reconciliation pass of one RocketCluster, as a chain of named steps.

:func:`reconcile` is idempotent and never sleeps. It chains the steps of
:mod:`rocket_operator.steps`, each a function of its own returning its part of
the outcome, in this order (as Strimzi's ``KafkaReconciler`` chains its steps):

1. **observe** (:func:`~rocket_operator.steps.observe_cluster`): the RocketCluster
   fresh from the API server (``status`` is the memory of long operations) and its
   broker StatefulSets. An invalid spec is reported, not built; the
   ``rocket.dev/paused`` annotation stops the pass there; so do children of an earlier
   RocketCluster of the same name the garbage collector has yet to remove
   (:func:`~rocket_operator.steps.stale_children`);
   then **security** (:func:`~rocket_operator.security_step.reconcile_security`): the admin
   credentials and TLS Secrets of ``spec.security``; every later remoting call is signed with
   the admin keys;
2. **plan** (:func:`~rocket_operator.steps.plan_brokers`, pure): the broker
   StatefulSets' size (a scale-in keeps draining groups) and the drain records;
3. **apply children** (:func:`~rocket_operator.steps.apply_children`): server-side
   apply of every child from :mod:`rocket_operator.builders`, slave StatefulSets no
   longer wanted removed; then the listeners (:func:`rocket_operator.listeners.sync_listeners`):
   their Services, learned addresses and ``status.listeners``;
4. **analytics** (:func:`~rocket_operator.steps.run_analytics`): the analytics jobs'
   (Scheduled)SparkApplications; its failures never stop the rest of the pass;
5. **observe members** (:func:`~rocket_operator.steps.observe_members`): pods, PVCs,
   the NameServers' view of the brokers (``GET_BROKER_CLUSTER_INFO``); with
   ``failover: Controller`` the controllers first (:func:`~rocket_operator.steps.apply_controllers`,
   after step 3) and each group's actual master, epochs and SyncStateSet
   (:func:`~rocket_operator.steps.observe_roles`);
6. **claims** (:func:`~rocket_operator.steps.own_claims`): PVC ownership;
7. **broker groups** (:func:`~rocket_operator.steps.sync_groups`): registration,
   metadata copy to new groups (scale-out), topics from the spec;
8. **drain** (:func:`~rocket_operator.steps.drain_groups`): cancelled drains made
   writable again, then one step of each leaving group (:func:`rocket_operator.drain.advance`);
9. **rollout** (:func:`~rocket_operator.steps.roll_brokers`): at most one broker pod
   deleted (:func:`rocket_operator.rollout.next_restart`);
10. **status** (:func:`rocket_operator.status.cluster_status`, pure): phase,
    conditions, groups and drain records, written when they changed.

It returns the reasons it is waiting for something; the kopf handlers turn a
non-empty list into another pass ``RECHECK_SECONDS`` later.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rocket_operator import conditions, listeners, metrics, security_step, status, steps
from rocket_operator.kube import ApiError
from rocket_operator.spec import CONTROLLER_REPLICAS, SpecError, parse_spec
from rocket_operator.steps import Context, Event, Observed, Part

__all__ = ["Context", "Outcome", "merge_patch_diff", "reconcile"]

log = logging.getLogger("rocket_operator")


@dataclass
class Outcome:
    """Result of one pass: ``waiting`` reasons (empty = converged), the phase reported and the
    ``(type, reason, message)`` events to post."""

    phase: str = status.PHASE_PENDING
    waiting: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    #: whether the pass found the Spark operator's kinds served (None: the cluster has no analytics job)
    spark_served: bool | None = None

    def add(self, part: Part) -> None:
        """Add a step's waiting reasons and events (in step order)."""
        self.waiting.extend(part.waiting)
        self.events.extend(part.events)


async def reconcile(ctx: Context, namespace: str, name: str) -> Outcome:
    """Bring one RocketCluster a step closer to its spec (the steps of the module doc).

    Raises :class:`rocket_operator.kube.ApiError` when the API server refuses a
    write (kopf retries the handler); remoting failures are reported as waiting
    reasons, never raised.
    """
    outcome = Outcome()
    seen = await steps.observe_cluster(ctx, namespace, name)
    if seen is None:
        return outcome
    try:
        spec = parse_spec(seen.raw_spec)
    except SpecError as exc:
        outcome.phase = status.PHASE_INVALID
        await _write_status(ctx, seen, {"phase": outcome.phase}, status.invalid_conditions(str(exc)))
        return outcome
    if seen.paused:
        outcome.phase = status.PHASE_PAUSED
        await _write_status(ctx, seen, {"phase": outcome.phase},
                            status.paused_conditions(seen.status.get("conditions")), keep_generation=True)
        return outcome

    stale = await steps.stale_children(ctx, seen)
    if stale:
        outcome.waiting.append(f"the garbage collector still removes {len(stale)} children of an earlier "
                               f"RocketCluster {name}: {', '.join(sorted(stale)[:5])}")
        return outcome

    now = datetime.datetime.now(datetime.UTC)
    secured = await security_step.reconcile_security(
        ctx, seen, spec, now, getattr(ctx.resolver, "cluster_domain", "cluster.local"))
    outcome.add(secured)
    ctx = secured.signed(ctx)
    plan = steps.plan_brokers(seen, spec, now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    outcome.add(await steps.apply_children(ctx, seen, spec, plan.replicas))
    outcome.add(await steps.apply_controllers(ctx, seen, spec))
    listened = await listeners.sync_listeners(ctx, seen, spec, plan.replicas)
    outcome.waiting.extend(listened.waiting)
    outcome.events.extend(listened.events)
    analytics = await steps.run_analytics(ctx, seen, spec)
    outcome.add(analytics)
    outcome.spark_served = analytics.spark_served
    members = await steps.observe_members(ctx, seen)
    outcome.add(members)
    outcome.add(await steps.observe_roles(ctx, seen, spec, plan.replicas, members))
    outcome.add(await steps.own_claims(ctx, seen, spec, members.pvcs))
    groups = await steps.sync_groups(ctx, seen, spec, plan, members)
    outcome.add(groups)
    for entry in groups.entries:
        if entry["index"] in members.roles:
            entry.update(members.roles[entry["index"]].status_fields())
    drains = await steps.drain_groups(ctx, seen, spec, plan, members, now)
    outcome.add(drains)
    rolled = await steps.roll_brokers(ctx, seen, spec, plan, members, groups.entries)
    outcome.add(rolled)

    report = status.cluster_status(status.PassFacts(
        spec=spec, previous_phase=seen.status.get("phase"), previous_groups=len(seen.previous_groups),
        statefulsets=len(seen.statefulsets), replicas=plan.replicas, nameservers=members.nameservers,
        nameservers_ready=members.nameservers_ready, groups=groups.entries, drain=drains.records,
        outdated=rolled.outdated, unobserved=rolled.unobserved, rollout=rolled.status,
        analytics_entries=analytics.entries, analytics_condition=analytics.condition), outcome.waiting)
    if spec.broker.controller_mode:
        report.fields["controllersReady"] = f"{members.controllers_ready}/{CONTROLLER_REPLICAS}"
    else:
        report.fields["controllersReady"] = None
    outcome.waiting.extend(report.waiting)
    report.fields["security"] = secured.status
    if secured.condition is not None:
        report.conditions.append(secured.condition)
    outcome.phase = report.phase
    metrics.CLUSTER_PHASE.labels(namespace, name).state(outcome.phase)
    await _write_status(ctx, seen, {**report.fields, "listeners": listened.status}, report.conditions)
    return outcome


def _strip_times(conds: Any) -> list[tuple[Any, ...]]:
    return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message"), c.get("observedGeneration"))
            for c in conds or []]


def _clean(value: Any) -> Any:
    """Drop ``None`` and ``""`` members of objects (the 1.20 API server reads ``""`` in a merge-patched
    list item as null and refuses it against a string schema)."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None and v != ""}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def merge_patch_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7386 merge patch turning ``old`` into ``new`` (objects recurse, removed keys become null,
    lists and scalars are replaced when different)."""
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            sub = merge_patch_diff(before, value)
            if sub:
                patch[key] = sub
        elif before != value:
            patch[key] = value
    return patch


async def _write_status(ctx: Context, seen: Observed, fields: Mapping[str, Any], conds: list[dict[str, Any]],
                        keep_generation: bool = False) -> None:
    """Merge-patch ``status`` with ``fields`` (None drops a field) and ``conds`` when anything changed
    (``observedGeneration`` set unless ``keep_generation``); a cluster deleted meanwhile is ignored.
    Raises :class:`ApiError` for another refusal."""
    old, generation = seen.status, seen.generation
    merged = conditions.merge_conditions(old.get("conditions"), conds, generation)
    if _strip_times(old.get("conditions")) == _strip_times(merged):
        merged = list(old.get("conditions") or [])
    new: dict[str, Any] = {k: v for k, v in old.items() if k not in fields}
    new.update({k: v for k, v in fields.items() if v is not None})
    new["conditions"] = merged
    if not keep_generation:
        new["observedGeneration"] = generation
    patch = merge_patch_diff(old, _clean(new))
    if not patch:
        return
    try:
        await ctx.kube.patch_cluster_status(seen.namespace, seen.name, patch)
    except ApiError as exc:
        if exc.status != 404:
            raise
