"""One reconciliation pass of one RocketCluster: observe, apply, take at most one step, report.

:func:`reconcile` is idempotent and never sleeps. Each call:

1. reads the RocketCluster fresh from the API server (status is the memory of
   long operations) and parses its spec (an invalid spec is reported, not built);
2. stops there when the ``rocket.dev/paused`` annotation is "true";
3. works out the broker StatefulSets' size (a scale-in keeps draining groups,
   :mod:`rocket_operator.drain`) and server-side applies every child from
   :mod:`rocket_operator.builders`, removing slave StatefulSets no longer wanted;
   then the analytics jobs' (Scheduled)SparkApplications (:func:`reconcile_analytics`),
   which never stop the rest of the pass;
4. observes pods, the NameServers' view of the brokers (106), and takes the
   next step of each long operation: metadata copy to new groups (scale-out),
   topics from the spec, the drain state machine, one rolling-restart deletion;
5. writes ``status`` (phase, conditions, groups, drain records) when it changed.

It returns the reasons it is waiting for something; the kopf handlers turn a
non-empty list into ``kopf.TemporaryError`` so that kopf calls again later.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from rocket_operator import analytics, builders, conditions, drain, metrics, names, rollout
from rocket_operator.addresses import AddressResolver, ClusterRef
from rocket_operator.admin import AdminError, ClusterAdmin, Registration
from rocket_operator.builders import Capabilities, Owner
from rocket_operator.kube import ApiError, KubeClient
from rocket_operator.spec import ClusterSpec, SpecError, is_paused, parse_spec

log = logging.getLogger("rocket_operator")

PHASE_PENDING = "Pending"
PHASE_RUNNING = "Running"
PHASE_UPDATING = "Updating"
PHASE_SCALING = "Scaling"
PHASE_DRAINING = "Draining"
PHASE_DEGRADED = "Degraded"
PHASE_PAUSED = "Paused"
PHASE_INVALID = "Invalid"

#: Re-apply unchanged manifests at least this often (repairs drift by other writers).
REAPPLY_SECONDS = 120.0


@dataclass
class Context:
    """What every reconciliation shares: API client, server capabilities and the remoting hooks."""

    kube: KubeClient
    resolver: AddressResolver
    admin: ClusterAdmin
    caps: Capabilities = field(default_factory=Capabilities)
    #: Image of analytics jobs whose spec names none (``ROCKET_OPERATOR_ANALYTICS_IMAGE``).
    analytics_image: str = builders.DEFAULT_ANALYTICS_IMAGE
    #: (uid, kind, name) -> (manifest digest, monotonic time applied)
    applied: dict[tuple[str, str, str], tuple[str, float]] = field(default_factory=dict)
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    def lock(self, uid: str) -> asyncio.Lock:
        """The lock serializing reconciliations of one RocketCluster."""
        return self.locks.setdefault(uid, asyncio.Lock())

    def forget(self, uid: str) -> None:
        """Drop in-memory state of a deleted RocketCluster."""
        self.locks.pop(uid, None)
        for key in [k for k in self.applied if k[0] == uid]:
            del self.applied[key]


@dataclass
class Outcome:
    """Result of one pass: ``waiting`` reasons (empty = converged) and the phase reported."""

    phase: str = PHASE_PENDING
    waiting: list[str] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    #: whether the pass found the Spark operator's kinds served (None: the cluster has no analytics job)
    spark_served: bool | None = None


def _topics_digest(spec: ClusterSpec) -> str:
    raw = json.dumps([[t.name, t.queues, t.perm] for t in spec.topics])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _elapsed(since: str | None) -> float:
    stamp = conditions.parse_rfc3339(since)
    if stamp is None:
        return 0.0
    return (datetime.datetime.now(datetime.UTC) - stamp).total_seconds()


async def _apply_children(ctx: Context, uid: str, children: list[dict[str, Any]], force: bool) -> None:
    """Server-side apply, concurrently, every child that changed (or was last applied over
    ``REAPPLY_SECONDS`` ago). Order does not matter: the StatefulSet controller creates pods
    only after the StatefulSet exists, and a pod waits for its ConfigMap volume."""
    now = time.monotonic()
    todo: list[tuple[tuple[str, str, str], str, dict[str, Any]]] = []
    for child in children:
        key = (uid, child["kind"], child["metadata"]["name"])
        digest = builders.manifest_digest(child)
        seen = ctx.applied.get(key)
        if force or not seen or seen[0] != digest or now - seen[1] >= REAPPLY_SECONDS:
            todo.append((key, digest, child))
    await asyncio.gather(*(ctx.kube.apply(child) for _, _, child in todo))
    for key, digest, _ in todo:
        ctx.applied[key] = (digest, now)


@dataclass
class AnalyticsResult:
    """What :func:`reconcile_analytics` observed: ``status.analytics`` entries (None = drop the field)
    and the ``AnalyticsReady`` condition (None = no jobs, no condition)."""

    entries: list[dict[str, Any]] | None = None
    condition: dict[str, Any] | None = None


def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(r.get("uid") == uid and r.get("controller") for r in obj["metadata"].get("ownerReferences") or [])


async def reconcile_analytics(ctx: Context, owner: Owner, spec: ClusterSpec, old_status: Mapping[str, Any],
                              outcome: Outcome) -> AnalyticsResult:
    """Apply the SparkApplication / ScheduledSparkApplication of every analytics job, delete the ones
    the cluster owns that no job wants any more, and read back their state.

    Nothing is asked of the API server when the cluster has no job and reported none before.
    When ``sparkoperator.k8s.io/v1beta2`` is not served, nothing is applied and the condition says
    to install the Spark operator. A job whose schedule the Spark operator would refuse is not
    applied (an object it already has is kept as it was). Warning events are added to ``outcome``
    when the condition turns bad or changes its message. Raises :class:`ApiError` for a refused write.
    """
    jobs = spec.analytics.jobs
    previous = old_status.get("analytics") or []
    if not jobs and not previous:
        return AnalyticsResult()
    namespace, uid = owner.namespace, owner.uid
    served = await ctx.kube.served_resources(names.SPARK_API_VERSION) or set()
    missing = [kind for kind, plural in names.SPARK_PLURALS.items() if plural not in served]
    outcome.spark_served = not missing
    if missing:
        result = AnalyticsResult(condition=analytics.spark_operator_missing(missing) if jobs else None)
        if jobs:
            result.entries = [analytics.job_status(owner.name, j, None,
                                                   invalid=f"{names.SPARK_API_VERSION} is not served")
                              for j in jobs]
    else:
        selector = (f"{names.LABEL_INSTANCE}={owner.name},{names.LABEL_COMPONENT}={names.COMPONENT_ANALYTICS}")
        apps, scheduled = await asyncio.gather(
            ctx.kube.list(names.SPARK_API_VERSION, names.SPARK_APPLICATION, namespace, selector),
            ctx.kube.list(names.SPARK_API_VERSION, names.SCHEDULED_SPARK_APPLICATION, namespace, selector))
        existing = {(o["kind"], o["metadata"]["name"]): o for o in [*apps, *scheduled] if _owned_by(o, uid)}
        invalid = {j.name: f"schedule {j.schedule!r}: {err}" for j in jobs
                   if j.schedule is not None and (err := analytics.cron_error(j.schedule))}
        manifests = [builders.build_analytics_application(owner, spec, j, ctx.analytics_image)
                     for j in jobs if j.name not in invalid]
        wanted = {(m["kind"], m["metadata"]["name"]) for m in manifests}
        kept = {(m_kind, names.analytics_application(owner.name, j.name, m_kind == names.SCHEDULED_SPARK_APPLICATION))
                for j in jobs if j.name in invalid for m_kind in names.SPARK_PLURALS}
        for key in wanted - existing.keys():  # deleted behind our back: create again now
            ctx.applied.pop((uid, *key), None)
        await _apply_children(ctx, uid, manifests, False)
        for key, stale in existing.items():
            if key in wanted or key in kept:
                continue
            stale_kind, stale_name = key
            await ctx.kube.delete(names.SPARK_API_VERSION, stale_kind, namespace, stale_name,
                                  uid=stale["metadata"]["uid"])
            ctx.applied.pop((uid, *key), None)
            outcome.events.append(("Normal", "AnalyticsJobRemoved", f"deleted {stale_kind} {stale_name}"))
        by_name = {o["metadata"]["name"]: o for o in apps}
        entries = []
        for job in jobs:
            is_scheduled = job.schedule is not None
            kind = names.SCHEDULED_SPARK_APPLICATION if is_scheduled else names.SPARK_APPLICATION
            obj = existing.get((kind, names.analytics_application(owner.name, job.name, is_scheduled)))
            last_run = None
            run_name = ((obj or {}).get("status") or {}).get("lastRunName") if is_scheduled else None
            if run_name:
                last_run = by_name.get(run_name) or await ctx.kube.get(
                    names.SPARK_API_VERSION, names.SPARK_APPLICATION, namespace, run_name)
            entries.append(analytics.job_status(owner.name, job, obj, last_run, invalid.get(job.name)))
        result = AnalyticsResult(entries=entries or None,
                                 condition=analytics.analytics_condition(entries, invalid) if jobs else None)
    cond = result.condition
    before = conditions.get_condition(old_status.get("conditions"), conditions.ANALYTICS_READY)
    if cond is not None and cond["status"] == "False" and (
            before is None or (before.get("reason"), before.get("message")) != (cond["reason"], cond["message"])):
        outcome.events.append(("Warning", cond["reason"], cond["message"]))
    return result


async def reconcile(ctx: Context, namespace: str, name: str) -> Outcome:
    """Bring one RocketCluster a step closer to its spec (see the module doc).

    Raises :class:`rocket_operator.kube.ApiError` when the API server refuses a
    write (kopf retries the handler); remoting failures are reported as waiting
    reasons, never raised.
    """
    cr, sts_all = await asyncio.gather(
        ctx.kube.get(names.API_VERSION, names.KIND, namespace, name),
        ctx.kube.list("apps/v1", "StatefulSet", namespace,
                      f"{names.LABEL_INSTANCE}={name},{names.LABEL_COMPONENT}={names.COMPONENT_BROKER}"))
    outcome = Outcome()
    if cr is None or (cr.get("metadata") or {}).get("deletionTimestamp"):
        return outcome
    meta = cr["metadata"]
    uid = meta["uid"]
    generation = int(meta.get("generation") or 0)
    old_status: dict[str, Any] = dict(cr.get("status") or {})
    owner = Owner(namespace=namespace, name=name, uid=uid)
    ref = ClusterRef(namespace, name)

    try:
        spec = parse_spec(cr.get("spec"))
    except SpecError as exc:
        outcome.phase = PHASE_INVALID
        conds = [
            conditions.condition(conditions.READY, False, "InvalidSpec", str(exc)),
            conditions.condition(conditions.PROGRESSING, False, "InvalidSpec", str(exc)),
            conditions.condition(conditions.DEGRADED, True, "InvalidSpec", str(exc)),
            conditions.condition(conditions.DRAINING, False, "InvalidSpec", ""),
            conditions.condition(conditions.PAUSED, False, "InvalidSpec", ""),
        ]
        await _write_status(ctx, ref, old_status, {"phase": outcome.phase}, conds, generation)
        return outcome

    if is_paused(meta.get("annotations")):
        outcome.phase = PHASE_PAUSED
        message = "reconciliation paused by the rocket.dev/paused annotation"
        prev = old_status.get("conditions") or []
        conds = [dict(c) for c in prev if c.get("type") != conditions.PAUSED]
        conds = [{k: v for k, v in c.items() if k not in ("observedGeneration", "lastTransitionTime")}
                 for c in conds]
        conds.append(conditions.condition(conditions.PAUSED, True, "Paused", message))
        await _write_status(ctx, ref, old_status, {"phase": PHASE_PAUSED}, conds, generation,
                            keep_generation=True)
        return outcome

    # -- size of the broker StatefulSets --------------------------------------------------------
    statefulsets: dict[int, dict[str, Any]] = {}
    for sts in sts_all:
        try:
            statefulsets[int(sts["metadata"]["labels"][names.LABEL_BROKER_ID])] = sts
        except (KeyError, ValueError):
            continue
    master = statefulsets.get(0)
    current = int((master or {}).get("spec", {}).get("replicas") or 0) if master else 0
    desired = spec.broker.groups
    records = drain.by_index(old_status.get("drain"))
    now = conditions.now_rfc3339()

    # groups that must leave get a record; a record of a group that is wanted again is cancelled
    cancelled: list[dict[str, Any]] = []
    for index in list(records):
        if index < desired:
            cancelled.append(records.pop(index))
    for index in drain.leaving_groups(current, desired):
        records.setdefault(index, {"index": index, "brokerName": names.broker_name(name, index),
                                   "state": drain.PENDING, "requestedAt": now})
    replicas = drain.statefulset_replicas(current, desired, records)
    for index, rec in records.items():
        if index >= replicas and rec.get("state") == drain.DRAINED:
            rec["state"] = drain.REMOVING

    children = builders.desired_children(owner, spec, replicas, ctx.caps)
    existing = {s["metadata"]["name"] for s in sts_all}
    force_apply = any(names.broker_statefulset(name, i) not in existing
                      for i in range(spec.broker.replicas_per_group + 1))
    await _apply_children(ctx, uid, children, force_apply)
    for broker_id, sts in statefulsets.items():
        if broker_id > spec.broker.replicas_per_group:
            await ctx.kube.delete("apps/v1", "StatefulSet", namespace, sts["metadata"]["name"])
            ctx.applied.pop((uid, "StatefulSet", sts["metadata"]["name"]), None)
            outcome.events.append(("Normal", "SlavesRemoved", f"removed {sts['metadata']['name']}"))
    try:
        analytics_result = await reconcile_analytics(ctx, owner, spec, old_status, outcome)
    except (ApiError, aiohttp.ClientError, TimeoutError) as exc:  # analytics never stop the rest of the pass
        log.warning("%s/%s: analytics jobs: %s", namespace, name, exc)
        analytics_result = AnalyticsResult(
            entries=list(old_status.get("analytics") or []) or None,
            condition=conditions.condition(conditions.ANALYTICS_READY, None, "AnalyticsError", str(exc)))

    # -- observe --------------------------------------------------------------------------------
    pods = await ctx.kube.list("v1", "Pod", namespace, f"{names.LABEL_INSTANCE}={name}")
    pvcs = await ctx.kube.list("v1", "PersistentVolumeClaim", namespace, f"{names.LABEL_INSTANCE}={name}")
    ns_pods = [p for p in pods
               if (p["metadata"].get("labels") or {}).get(names.LABEL_COMPONENT) == names.COMPONENT_NAMESERVER]
    ns_ready = sum(1 for p in ns_pods if rollout.pod_ready(p))
    broker_pods = [v for v in (rollout.pod_view(p) for p in pods) if v is not None]
    nameservers = await ctx.resolver.nameservers(ref)
    registration = Registration()
    if nameservers:
        try:
            registration = await ctx.admin.registration(nameservers, name)
        except AdminError as exc:
            registration = Registration(unreachable=list(nameservers))
            outcome.waiting.append(f"NameServers: {exc}")
    active_groups = list(range(min(desired, replicas)))

    def pod_addr(broker_id: int, group: int) -> str:
        return ctx.resolver.broker(ref, names.broker_pod(name, broker_id, group))

    # -- PVC ownership (deleteClaim.onDelete): owned PVCs go with the RocketCluster ---------------
    for pvc in pvcs:
        refs = pvc["metadata"].get("ownerReferences") or []
        ours = [r for r in refs if r.get("uid") == uid]
        if spec.broker.storage.delete_claim.on_delete and not ours:
            await ctx.kube.merge_patch("v1", "PersistentVolumeClaim", namespace, pvc["metadata"]["name"],
                                       {"metadata": {"ownerReferences": [*refs, owner.reference()]}})
        elif not spec.broker.storage.delete_claim.on_delete and ours:
            kept = [r for r in refs if r.get("uid") != uid]
            await ctx.kube.merge_patch("v1", "PersistentVolumeClaim", namespace, pvc["metadata"]["name"],
                                       {"metadata": {"ownerReferences": kept or None}})

    # -- groups: registration, scale-out metadata copy, spec topics -----------------------------
    prev_groups = {g.get("name"): g for g in old_status.get("brokerGroups") or []}
    topics_digest = _topics_digest(spec)
    exclude = frozenset({name, *(names.broker_name(name, i) for i in range(max(current, desired, replicas)))})
    groups_status: list[dict[str, Any]] = []
    synced_sources = [i for i in active_groups
                      if prev_groups.get(names.broker_name(name, i), {}).get("metadataSynced")
                      and registration.registered_everywhere(names.broker_name(name, i))]
    for index in range(replicas):
        bname = names.broker_name(name, index)
        prev = prev_groups.get(bname, {})
        group_pods = sorted((p for p in broker_pods if p.group == index), key=lambda p: p.broker_id)
        registered = registration.registered_everywhere(bname)
        entry: dict[str, Any] = {
            "name": bname,
            "index": index,
            "pods": [p.name for p in group_pods],
            "readyPods": sum(1 for p in group_pods if p.ready),
            "registered": registered,
            "metadataSynced": bool(prev.get("metadataSynced")),
            "topicsDigest": prev.get("topicsDigest", ""),
            "metadataSource": prev.get("metadataSource", ""),
        }
        leaving = records.get(index)
        entry["state"] = leaving["state"] if leaving else "Active"
        entry["writable"] = leaving is None or leaving.get("state") == drain.PENDING
        if leaving is None:
            if not registered:
                outcome.waiting.append(f"{bname} is not registered in every NameServer yet")
            elif not entry["metadataSynced"]:
                source = next((i for i in synced_sources if i != index), None)
                if source is None and not synced_sources:
                    entry["metadataSynced"] = True  # the first group: nothing to copy from
                    synced_sources.append(index)
                elif source is not None:
                    try:
                        copied = await ctx.admin.copy_metadata(pod_addr(0, source), pod_addr(0, index), exclude)
                    except AdminError as exc:
                        outcome.waiting.append(f"copying topics to {bname}: {exc}")
                    else:
                        entry["metadataSynced"] = True
                        entry["metadataSource"] = names.broker_name(name, source)
                        outcome.events.append(("Normal", "ScaledOut",
                                               f"{bname}: copied {copied[0]} topics and {copied[1]} subscription "
                                               f"groups from {names.broker_name(name, source)}"))
            if registered and entry["metadataSynced"] and entry["topicsDigest"] != topics_digest:
                try:
                    await ctx.admin.create_topics(pod_addr(0, index),
                                                  [(t.name, t.queues, t.perm) for t in spec.topics])
                except AdminError as exc:
                    outcome.waiting.append(f"creating spec topics on {bname}: {exc}")
                else:
                    entry["topicsDigest"] = topics_digest
        groups_status.append(entry)

    # -- cancelled drains: writable again --------------------------------------------------------
    for rec in cancelled:
        if rec.get("state") == drain.PENDING:
            continue
        index = int(rec["index"])
        try:
            await ctx.admin.set_write_permission(nameservers, rec["brokerName"], [pod_addr(0, index)], True)
            outcome.events.append(("Normal", "DrainCancelled", f"{rec['brokerName']} is writable again"))
        except AdminError as exc:
            records[index] = rec  # keep trying
            outcome.waiting.append(f"restoring write permission of {rec['brokerName']}: {exc}")

    # -- drain state machine ---------------------------------------------------------------------
    for index in sorted(records, reverse=True):
        rec = records[index]
        bname = rec["brokerName"]
        state = rec.get("state")
        if index < desired:
            continue
        if state == drain.PENDING and not nameservers:
            rec["message"] = "no NameServer address known"
            outcome.waiting.append(f"{bname}: {rec['message']}")
            continue
        if state == drain.PENDING:
            try:
                await ctx.admin.set_write_permission(nameservers, bname, [pod_addr(0, index)], False)
            except AdminError as exc:
                rec["message"] = f"cannot make {bname} read-only yet: {exc}"
                outcome.waiting.append(rec["message"])
                if drain.timed_out(_elapsed(rec.get("requestedAt")), spec.drain.timeout_seconds) \
                        and spec.drain.on_timeout == "Force":
                    rec.update(state=drain.DRAINED, forced=True, finishedAt=now,
                               message=f"forced after {spec.drain.timeout_seconds}s: broker unreachable ({exc})")
                    outcome.events.append(("Warning", "DrainForced", f"{bname}: {rec['message']}"))
                continue
            rec.update(state=drain.WAITING, startedAt=now, message="write permission wiped; waiting for consumers")
            outcome.events.append(("Normal", "DrainStarted", f"{bname} is read-only; waiting for consumers"))
            state = drain.WAITING
        if state in (drain.WAITING, drain.HELD):
            try:
                progress = await ctx.admin.drain_progress(pod_addr(0, index), exclude)
            except AdminError as exc:
                rec["message"] = f"cannot read the backlog: {exc}"
                outcome.waiting.append(f"{bname}: {rec['message']}")
                progress = None
            if progress is not None:
                rec["pendingMessages"] = progress.total
                rec["lag"] = drain.summarize_lag({**progress.lag, **{f"{t}@-": n
                                                                  for t, n in progress.unconsumed.items()}})
                rec["delayedMessages"] = progress.delayed
                metrics.DRAIN_PENDING.labels(namespace, name, bname).set(progress.total)
            if progress is not None and progress.drained:
                rec.update(state=drain.DRAINED, finishedAt=now, message="no message pending")
                outcome.events.append(("Normal", "Drained", f"{bname}: every consumer group caught up"))
            elif drain.timed_out(_elapsed(rec.get("startedAt") or rec.get("requestedAt")),
                                 spec.drain.timeout_seconds):
                pending = rec.get("pendingMessages", "unknown")
                if spec.drain.on_timeout == "Force":
                    rec.update(state=drain.DRAINED, forced=True, finishedAt=now,
                               message=f"forced after {spec.drain.timeout_seconds}s with {pending} messages pending")
                    outcome.events.append(("Warning", "DrainForced", f"{bname}: {rec['message']}"))
                else:
                    if state != drain.HELD:
                        outcome.events.append(("Warning", "DrainHeld", f"{bname}: {pending} messages pending after "
                                                                         f"{spec.drain.timeout_seconds}s; holding"))
                    rec.update(state=drain.HELD, message=f"drain timeout passed with {pending} messages pending; "
                                                         "holding (set spec.drain.onTimeout=Force to remove anyway)")
                    outcome.waiting.append(f"{bname}: {rec['message']}")
            else:
                outcome.waiting.append(f"{bname}: draining, {rec.get('pendingMessages', '?')} messages pending")
        if rec.get("state") == drain.REMOVING:
            left = [p.name for p in broker_pods if p.group == index]
            if left:
                outcome.waiting.append(f"{bname}: waiting for pods {', '.join(sorted(left))} to stop")
                continue
            brokers: dict[int, str] = {}
            for table in registration.per_nameserver.values():
                brokers.update(table.get(bname, {}))
            if brokers:
                try:
                    await ctx.admin.unregister(nameservers, name, bname, brokers)
                except AdminError as exc:
                    outcome.waiting.append(f"{bname}: unregistering: {exc}")
                    continue
            if spec.broker.storage.delete_claim.on_scale_in:
                for broker_id in range(max(statefulsets, default=0) + 1):
                    await ctx.kube.delete("v1", "PersistentVolumeClaim", namespace,
                                          names.pvc_name(names.broker_pod(name, broker_id, index)))
            outcome.events.append(("Normal", "GroupRemoved", f"{bname} removed"
                                   + (" (PVCs deleted)" if spec.broker.storage.delete_claim.on_scale_in else "")))
            metrics.remove_drain_series(namespace, name, bname)
            del records[index]

    # -- rolling restart (OnDelete) --------------------------------------------------------------
    update_revisions = {bid: (sts.get("status") or {}).get("updateRevision", "")
                        for bid, sts in statefulsets.items() if bid <= spec.broker.replicas_per_group}
    unobserved = [sts["metadata"]["name"] for bid, sts in statefulsets.items()
                  if bid in update_revisions and int((sts.get("status") or {}).get("observedGeneration") or 0)
                  < int(sts["metadata"].get("generation") or 0)]
    if unobserved:
        outcome.waiting.append(f"StatefulSet controller has not observed {', '.join(sorted(unobserved))} yet")
    kept_pods = [p for p in broker_pods if p.group < len(active_groups) and p.broker_id in update_revisions]
    expected = {bid: len(active_groups) for bid in update_revisions}
    decision = rollout.next_restart(kept_pods, update_revisions, expected, None)
    rollout_status: dict[str, Any] | None = None
    if decision.outdated:
        rollout_status = {"outdatedPods": list(decision.outdated)}
        pick, why = decision.delete, decision.waiting
        unregistered = [g["name"] for g in groups_status if g["state"] == "Active" and not g["registered"]]
        if pick is not None and unregistered:
            pick, why = None, f"waiting for {', '.join(unregistered)} to register in every NameServer"
        if pick is not None and spec.broker.replicas_per_group > 0:
            caught_up, lagging = await _slaves_caught_up(ctx, ref, name, active_groups,
                                                         spec.broker.replicas_per_group)
            if not caught_up:
                pick, why = None, lagging
        if pick is None:
            rollout_status["waiting"] = why
            outcome.waiting.append(f"rolling restart: {why}")
        else:
            await ctx.kube.delete("v1", "Pod", namespace, pick.name, uid=pick.uid)
            rollout_status["restarting"] = pick.name
            outcome.events.append(("Normal", "PodRestarted", f"deleted {pick.name} to roll it to the new revision"))
            outcome.waiting.append(f"rolling restart: {pick.name} restarting")
            metrics.ROLLING_RESTARTS.labels(namespace, name).inc()

    # -- status ----------------------------------------------------------------------------------
    ns_desired = spec.name_server.replicas
    ready_groups = sum(1 for g in groups_status
                       if g["state"] == "Active" and g["readyPods"] == spec.broker.replicas_per_group + 1)
    if ns_ready < ns_desired:
        outcome.waiting.append(f"NameServers ready {ns_ready}/{ns_desired}")
    if ready_groups < desired:
        outcome.waiting.append(f"broker groups ready {ready_groups}/{desired}")
    held = [r for r in records.values() if r.get("state") == drain.HELD]
    all_registered = all(g["registered"] for g in groups_status if g["state"] == "Active")
    ready = (ns_ready >= ns_desired and ready_groups >= desired and all_registered and not decision.outdated
             and not records and not unobserved)
    scaling = (replicas != desired or len(statefulsets) != spec.broker.replicas_per_group + 1
               or any(not g["metadataSynced"] or g["index"] >= len(prev_groups) for g in groups_status))
    was_up = old_status.get("phase") in (PHASE_RUNNING, PHASE_SCALING, PHASE_UPDATING, PHASE_DRAINING,
                                         PHASE_DEGRADED)
    if held:
        outcome.phase = PHASE_DEGRADED
    elif records:
        outcome.phase = PHASE_DRAINING
    elif decision.outdated or unobserved:
        outcome.phase = PHASE_UPDATING
    elif ready:
        outcome.phase = PHASE_RUNNING
    elif was_up and scaling:
        outcome.phase = PHASE_SCALING
    elif was_up:
        outcome.phase = PHASE_DEGRADED
    else:
        outcome.phase = PHASE_PENDING
    degraded = bool(held) or outcome.phase == PHASE_DEGRADED
    waiting_text = "; ".join(dict.fromkeys(outcome.waiting))
    conds = [
        conditions.condition(conditions.READY, ready, "ClusterReady" if ready else "NotReady",
                             "all NameServers and broker groups are ready and registered" if ready else waiting_text),
        conditions.condition(conditions.PROGRESSING, bool(outcome.waiting) and not held,
                             "Reconciling" if outcome.waiting else "Reconciled", waiting_text),
        conditions.condition(conditions.DEGRADED, degraded,
                             "DrainHeld" if held else ("NotReady" if degraded else "AsExpected"),
                             "; ".join(f"{r['brokerName']}: {r.get('message', '')}" for r in held)
                             if held else (waiting_text if degraded else "")),
        conditions.condition(conditions.DRAINING, bool(records), "ScaleIn" if records else "NoDrain",
                             ", ".join(f"{r['brokerName']} {r.get('state')}" for r in
                                       sorted(records.values(), key=lambda r: -int(r["index"])))),
        conditions.condition(conditions.PAUSED, False, "NotPaused", ""),
    ]
    if analytics_result.condition is not None:
        conds.append(analytics_result.condition)
    fields: dict[str, Any] = {
        "phase": outcome.phase,
        "nameServers": {"desired": ns_desired, "ready": ns_ready, "addresses": nameservers},
        "nameServersReady": f"{ns_ready}/{ns_desired}",
        "brokerGroupsReady": f"{ready_groups}/{desired}",
        "brokerGroups": groups_status,
        "drain": [records[i] for i in sorted(records, reverse=True)] or None,
        "rollout": rollout_status,
        "analytics": analytics_result.entries,
    }
    metrics.CLUSTER_PHASE.labels(namespace, name).state(outcome.phase)
    await _write_status(ctx, ref, old_status, fields, conds, generation)
    return outcome


async def _slaves_caught_up(ctx: Context, ref: ClusterRef, name: str, groups: list[int], slaves: int
                            ) -> tuple[bool, str]:
    for group in groups:
        master = ctx.resolver.broker(ref, names.broker_pod(name, 0, group))
        for broker_id in range(1, slaves + 1):
            slave = ctx.resolver.broker(ref, names.broker_pod(name, broker_id, group))
            try:
                if not await ctx.admin.slave_caught_up(master, slave):
                    return False, f"{names.broker_pod(name, broker_id, group)} has not caught up with its master"
            except AdminError as exc:
                return False, f"cannot compare {names.broker_pod(name, broker_id, group)} with its master: {exc}"
    return True, ""


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


async def _write_status(ctx: Context, ref: ClusterRef, old: Mapping[str, Any], fields: Mapping[str, Any],
                        conds: list[dict[str, Any]], generation: int, keep_generation: bool = False) -> None:
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
        await ctx.kube.patch_cluster_status(ref.namespace, ref.name, patch)
    except ApiError as exc:
        if exc.status != 404:
            raise
