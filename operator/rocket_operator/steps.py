"""The steps of one reconciliation pass (:func:`rocket_operator.reconcile.reconcile` chains them).

Each step is a function of its own that reads what earlier steps found and
returns its part of the outcome (a :class:`Part`: the reasons it waits for
something and the Kubernetes events to post, plus what later steps need). The
decisions are pure functions elsewhere (:mod:`rocket_operator.builders`,
:mod:`rocket_operator.drain`, :mod:`rocket_operator.rollout`,
:mod:`rocket_operator.analytics`, :mod:`rocket_operator.status`); a step makes the
API and remoting calls they ask for. Every step is idempotent and none sleeps:
a step that must wait says so in ``waiting`` and the next pass carries on from
``status``.

=========================  ============================================================================
:func:`observe_cluster`    the RocketCluster and its broker StatefulSets
:func:`plan_brokers`       broker StatefulSets' size and drain records (pure, :func:`drain.plan`)
:func:`apply_children`     server-side apply of every child; slave StatefulSets no longer wanted deleted
:func:`apply_controllers`  ``failover: Controller``: the Raft secret (created once), the controllers
:func:`observe_roles`      ``failover: Controller``: each group's master, epochs and SyncStateSet
                           from the controllers, each pod's actual role from its broker
:func:`run_analytics`      the analytics jobs' (Scheduled)SparkApplications; never stops the pass
:func:`observe_members`    pods, PVCs, the NameServers' registration table (``GET_BROKER_CLUSTER_INFO``)
:func:`own_claims`         PVC owner references (``deleteClaim.onDelete``)
:func:`sync_groups`        per group: registration, metadata copy to new groups, spec topics
:func:`drain_groups`       cancelled drains made writable again; each leaving group's drain advanced
:func:`roll_brokers`       at most one broker pod deleted for a rolling restart
=========================  ============================================================================
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
from kubernetes.utils.quantity import parse_quantity as _parse_quantity

from rocket_operator import (
    analytics,
    builders,
    conditions,
    controllers,
    drain,
    eviction,
    failover,
    metrics,
    names,
    rollout,
    security,
)
from rocket_operator.addresses import AddressResolver, ClusterRef
from rocket_operator.admin import AdminError, ClusterAdmin, Registration
from rocket_operator.builders import Capabilities, Owner
from rocket_operator.kube import ApiError, KubeClient, resource_path
from rocket_operator.spec import CONTROLLER_REPLICAS, ClusterSpec, is_paused

log = logging.getLogger("rocket_operator")

#: Re-apply unchanged manifests at least this often (repairs drift by other writers).
REAPPLY_SECONDS = 120.0

Event = tuple[str, str, str]  # (type, reason, message) of a Kubernetes event


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
    #: masters whose eviction the admission webhook refused, to move away and delete (node drains)
    evictions: eviction.EvictionRequests = field(default_factory=eviction.EvictionRequests)

    def lock(self, uid: str) -> asyncio.Lock:
        """The lock serializing reconciliations of one RocketCluster."""
        return self.locks.setdefault(uid, asyncio.Lock())

    def forget(self, uid: str) -> None:
        """Drop in-memory state of a deleted RocketCluster."""
        self.locks.pop(uid, None)
        self.evictions.forget(uid)
        for key in [k for k in self.applied if k[0] == uid]:
            del self.applied[key]


@dataclass
class Part:
    """A step's part of the outcome: ``waiting`` reasons (empty = nothing to wait for) and ``events``."""

    waiting: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


# -- observe ---------------------------------------------------------------------------------------

@dataclass
class Observed:
    """The RocketCluster as read at the start of a pass, and its broker StatefulSets.

    ``status``: a copy of its ``status`` (the memory of long operations); ``raw_spec``:
    its ``spec`` as stored; ``statefulsets``: brokerId -> broker StatefulSet
    (those without a readable ``rocket.dev/broker-id`` label are ignored).
    """

    namespace: str
    name: str
    uid: str
    generation: int
    status: dict[str, Any]
    raw_spec: Any
    annotations: Mapping[str, str] | None
    statefulsets: dict[int, dict[str, Any]]
    statefulset_names: set[str]
    #: ``failover: Controller``: group index -> remoting address of the pod the controllers made
    #: master (:func:`observe_roles`); groups missing here use the brokerId 0 pod
    masters: dict[int, str] = field(default_factory=dict)

    @property
    def owner(self) -> Owner:
        """The owner reference target of every child."""
        return Owner(namespace=self.namespace, name=self.name, uid=self.uid)

    @property
    def ref(self) -> ClusterRef:
        """The cluster as the address resolver knows it."""
        return ClusterRef(self.namespace, self.name)

    @property
    def paused(self) -> bool:
        """True when the ``rocket.dev/paused`` annotation is "true"."""
        return is_paused(self.annotations)

    @property
    def current_groups(self) -> int:
        """Replicas of the master StatefulSet now (0 before it exists): the broker groups that exist."""
        master = self.statefulsets.get(0)
        return int((master or {}).get("spec", {}).get("replicas") or 0) if master else 0

    @property
    def previous_groups(self) -> dict[str, dict[str, Any]]:
        """The old ``status.brokerGroups`` entries by ``name``."""
        return {g.get("name"): g for g in self.status.get("brokerGroups") or []}


async def observe_cluster(ctx: Context, namespace: str, name: str) -> Observed | None:
    """Read the RocketCluster and its broker StatefulSets; None when it is gone or being deleted.

    Raises :class:`ApiError` when the API server refuses the reads.
    """
    cr, sts_all = await asyncio.gather(
        ctx.kube.get(names.API_VERSION, names.KIND, namespace, name),
        ctx.kube.list("apps/v1", "StatefulSet", namespace,
                      f"{names.LABEL_INSTANCE}={name},{names.LABEL_COMPONENT}={names.COMPONENT_BROKER}"))
    if cr is None or (cr.get("metadata") or {}).get("deletionTimestamp"):
        return None
    meta = cr["metadata"]
    statefulsets: dict[int, dict[str, Any]] = {}
    for sts in sts_all:
        try:
            statefulsets[int(sts["metadata"]["labels"][names.LABEL_BROKER_ID])] = sts
        except (KeyError, ValueError):
            continue
    return Observed(namespace=namespace, name=name, uid=meta["uid"], generation=int(meta.get("generation") or 0),
                    status=dict(cr.get("status") or {}), raw_spec=cr.get("spec"),
                    annotations=meta.get("annotations"), statefulsets=statefulsets,
                    statefulset_names={s["metadata"]["name"] for s in sts_all})


#: Kinds of the children that carry the ``app.kubernetes.io/instance`` label (Secrets are never listed:
#: the operator's RBAC reads them by name only).
CHILD_KINDS = (("v1", "ConfigMap"), ("v1", "Service"), ("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"),
               ("networking.k8s.io/v1", "NetworkPolicy"))


async def stale_children(ctx: Context, seen: Observed) -> list[str]:
    """``Kind/name`` of the children of an earlier RocketCluster of the same name (a controller owner
    reference to another RocketCluster uid) still waiting for the garbage collector.

    Only asked until this operator has applied the cluster's children once (first pass after a create
    or a restart): applying over such an object takes it over for a moment, and then the garbage
    collector, which decided to delete it before, removes it, leaving the new cluster without that
    child until the next periodic re-apply. Raises :class:`ApiError` when a list is refused."""
    if any(key[0] == seen.uid for key in ctx.applied):
        return []
    selector = f"{names.LABEL_INSTANCE}={seen.name}"
    kinds = [*CHILD_KINDS, (ctx.caps.pdb_api_version, "PodDisruptionBudget")]
    found = await asyncio.gather(*(ctx.kube.list(api, kind, seen.namespace, selector) for api, kind in kinds))
    stale = []
    for (_, kind), objs in zip(kinds, found, strict=True):
        for obj in objs:
            refs = [r for r in obj["metadata"].get("ownerReferences") or []
                    if r.get("controller") and r.get("kind") == names.KIND]
            if refs and all(r.get("uid") != seen.uid for r in refs):
                stale.append(f"{kind}/{obj['metadata']['name']}")
    return stale


def plan_brokers(seen: Observed, spec: ClusterSpec, now: str) -> drain.DrainPlan:
    """The broker StatefulSets' size this pass and the drain records (a scale-in keeps draining
    groups until they are ``Drained``); ``now``: RFC 3339 time for new records."""
    return drain.plan(seen.status.get("drain"), seen.current_groups, spec.broker.groups, seen.name, now)


# -- apply children --------------------------------------------------------------------------------

async def apply_manifests(ctx: Context, uid: str, children: list[dict[str, Any]], force: bool) -> None:
    """Server-side apply, concurrently, every child that changed (or was last applied over
    ``REAPPLY_SECONDS`` ago, or every one when ``force``). Order does not matter: the StatefulSet
    controller creates pods only after the StatefulSet exists, and a pod waits for its ConfigMap volume.
    Raises :class:`ApiError` for a refused write."""
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


async def apply_children(ctx: Context, seen: Observed, spec: ClusterSpec, replicas: int) -> Part:
    """Apply every child of :func:`builders.desired_children` (the broker StatefulSets with
    ``replicas`` groups), all of them when a broker StatefulSet is missing, and delete the slave
    StatefulSets past ``spec.broker.replicasPerGroup`` and the :func:`optional_children` no longer wanted.
    Raises :class:`ApiError` for a refused write."""
    part = Part()
    children = builders.desired_children(seen.owner, spec, replicas, ctx.caps)
    force = any(names.broker_statefulset(seen.name, i) not in seen.statefulset_names
                for i in range(spec.broker.replicas_per_group + 1))
    first = not any(key[0] == seen.uid for key in ctx.applied)
    held = await _recreate_for_claims(ctx, seen, children, part)
    await apply_manifests(ctx, seen.uid, [c for c in children if (c["kind"], c["metadata"]["name"]) not in held],
                          force)
    wanted = {(c["kind"], c["metadata"]["name"]) for c in children}
    for api_version, kind, child in optional_children(seen.name):
        key = (seen.uid, kind, child)
        if (kind, child) not in wanted and (first or key in ctx.applied):
            if await ctx.kube.delete(api_version, kind, seen.namespace, child):
                part.events.append(("Normal", "ChildRemoved", f"removed {kind} {child} (no longer in the spec)"))
            ctx.applied.pop(key, None)
    for broker_id, sts in seen.statefulsets.items():
        if broker_id > spec.broker.replicas_per_group:
            sts_name = sts["metadata"]["name"]
            await ctx.kube.delete("apps/v1", "StatefulSet", seen.namespace, sts_name)
            ctx.applied.pop((seen.uid, "StatefulSet", sts_name), None)
            part.events.append(("Normal", "SlavesRemoved", f"removed {sts_name}"))
    return part


# -- analytics -------------------------------------------------------------------------------------

@dataclass
class AnalyticsResult(Part):
    """What :func:`reconcile_analytics` observed: ``status.analytics`` entries (None = drop the field),
    the ``AnalyticsReady`` condition (None = no jobs, no condition) and whether the Spark operator's
    kinds are served (None: the cluster has no analytics job and reported none)."""

    entries: list[dict[str, Any]] | None = None
    condition: dict[str, Any] | None = None
    spark_served: bool | None = None


def parse_quantity(text: Any) -> Any:
    """A Kubernetes quantity ("10Gi", "1e9", 5) as a ``decimal.Decimal`` (kubernetes.utils.quantity);
    raises ``ValueError`` for anything else."""
    return _parse_quantity(text)  # type: ignore[no-untyped-call]


def optional_children(cluster: str) -> list[tuple[str, str, str]]:
    """``(apiVersion, kind, name)`` of the children only some specs have (the NetworkPolicies of
    ``spec.security.networkPolicies``, the NameServer ConfigMap of ACL/TLS): :func:`apply_children`
    deletes those the spec no longer wants (all such names on a cluster's first pass, so that an operator
    restart misses none; afterwards those it applied)."""
    return [*(("networking.k8s.io/v1", "NetworkPolicy", n) for n in
              (names.broker_service(cluster), names.nameserver(cluster), security.controller_service(cluster))),
            ("v1", "ConfigMap", security.nameserver_config(cluster))]


def _claim_template(sts: Mapping[str, Any]) -> tuple[Any, Any]:
    """``(storage request, storageClassName)`` of a StatefulSet manifest's first volumeClaimTemplate."""
    templates = (sts.get("spec") or {}).get("volumeClaimTemplates") or [{}]
    claim = templates[0].get("spec") or {}
    return ((claim.get("resources") or {}).get("requests") or {}).get("storage"), claim.get("storageClassName")


async def _recreate_for_claims(ctx: Context, seen: Observed, children: list[dict[str, Any]], part: Part
                               ) -> set[tuple[str, str]]:
    """Broker StatefulSets whose volumeClaimTemplate no longer matches ``spec.broker.storage`` (size or
    class: fields the API server refuses to update) are deleted with ``propagationPolicy: Orphan``, so
    their pods and PVCs stay and the next pass creates them anew (the new StatefulSet adopts the pods).
    Returns the ``(kind, name)`` of the StatefulSets not to apply this pass (being deleted)."""
    held: set[tuple[str, str]] = set()
    wanted = {c["metadata"]["name"]: c for c in children if c["kind"] == "StatefulSet"}
    for sts in seen.statefulsets.values():
        sts_name = sts["metadata"]["name"]
        desired = wanted.get(sts_name)
        if desired is None:
            continue
        if sts["metadata"].get("deletionTimestamp"):
            held.add(("StatefulSet", sts_name))
            part.waiting.append(f"StatefulSet {sts_name} is being deleted")
        elif _claim_template(sts) != _claim_template(desired):
            await ctx.kube.delete("apps/v1", "StatefulSet", seen.namespace, sts_name, uid=sts["metadata"]["uid"],
                                  propagation="Orphan")
            ctx.applied.pop((seen.uid, "StatefulSet", sts_name), None)
            held.add(("StatefulSet", sts_name))
            part.waiting.append(f"re-creating StatefulSet {sts_name} for spec.broker.storage")
            part.events.append(("Normal", "StorageChanged", f"re-creating {sts_name} with the new volumeClaimTemplate "
                                "(pods and PVCs kept)"))
    return held


def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(r.get("uid") == uid and r.get("controller") for r in obj["metadata"].get("ownerReferences") or [])


async def run_analytics(ctx: Context, seen: Observed, spec: ClusterSpec) -> AnalyticsResult:
    """:func:`reconcile_analytics`, whose failures never stop the rest of the pass: an API error
    keeps the old ``status.analytics`` and makes the condition ``Unknown`` (what was found and done
    before the error, ``spark_served`` and events, is kept)."""
    result = AnalyticsResult()
    try:
        return await reconcile_analytics(ctx, seen.owner, spec, seen.status, result)
    except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
        log.warning("%s/%s: analytics jobs: %s", seen.namespace, seen.name, exc)
        result.entries = list(seen.status.get("analytics") or []) or None
        result.condition = conditions.condition(conditions.ANALYTICS_READY, None, "AnalyticsError", str(exc))
        return result


async def reconcile_analytics(ctx: Context, owner: Owner, spec: ClusterSpec, old_status: Mapping[str, Any],
                              result: AnalyticsResult | None = None) -> AnalyticsResult:
    """Apply the SparkApplication / ScheduledSparkApplication of every analytics job, delete the ones
    the cluster owns that no job wants any more, and read back their state.

    Nothing is asked of the API server when the cluster has no job and reported none before.
    When ``sparkoperator.k8s.io/v1beta2`` is not served, nothing is applied and the condition says
    to install the Spark operator. A job whose schedule the Spark operator would refuse is not
    applied (an object it already has is kept as it was). Warning events are added when the
    condition turns bad or changes its message. ``result`` (a new one when None) is filled in
    place, so that what was done before an error survives it. Raises :class:`ApiError` for a
    refused write.
    """
    result = result if result is not None else AnalyticsResult()
    jobs = spec.analytics.jobs
    if not jobs and not old_status.get("analytics"):
        return result
    served = await ctx.kube.served_resources(names.SPARK_API_VERSION) or set()
    missing = [kind for kind, plural in names.SPARK_PLURALS.items() if plural not in served]
    result.spark_served = not missing
    if missing:
        result.condition = analytics.spark_operator_missing(missing) if jobs else None
        if jobs:
            result.entries = [analytics.job_status(owner.name, j, None,
                                                   invalid=f"{names.SPARK_API_VERSION} is not served")
                              for j in jobs]
    else:
        await _apply_analytics(ctx, owner, spec, result)
    cond = result.condition
    before = conditions.get_condition(old_status.get("conditions"), conditions.ANALYTICS_READY)
    if cond is not None and cond["status"] == "False" and (
            before is None or (before.get("reason"), before.get("message")) != (cond["reason"], cond["message"])):
        result.events.append(("Warning", cond["reason"], cond["message"]))
    return result


async def _apply_analytics(ctx: Context, owner: Owner, spec: ClusterSpec, result: AnalyticsResult) -> None:
    """The Spark operator's kinds are served: apply, delete the stale, read back (see the caller)."""
    jobs = spec.analytics.jobs
    namespace, uid = owner.namespace, owner.uid
    selector = f"{names.LABEL_INSTANCE}={owner.name},{names.LABEL_COMPONENT}={names.COMPONENT_ANALYTICS}"
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
    await apply_manifests(ctx, uid, manifests, False)
    for key, stale in existing.items():
        if key in wanted or key in kept:
            continue
        stale_kind, stale_name = key
        await ctx.kube.delete(names.SPARK_API_VERSION, stale_kind, namespace, stale_name,
                              uid=stale["metadata"]["uid"])
        ctx.applied.pop((uid, *key), None)
        result.events.append(("Normal", "AnalyticsJobRemoved", f"deleted {stale_kind} {stale_name}"))
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
    result.entries = entries or None
    result.condition = analytics.analytics_condition(entries, invalid) if jobs else None


# -- observe members -------------------------------------------------------------------------------

@dataclass
class Members(Part):
    """The cluster's pods and PVCs and the NameServers' view of its brokers.

    ``nameservers``: NameServer addresses the resolver knows; ``nameservers_ready``:
    NameServer pods Ready; ``broker_pods``: a :class:`rollout.PodView` of each broker
    pod; ``registration``: brokerName -> brokers per NameServer (empty, with every
    NameServer ``unreachable``, when they could not be asked).
    """

    pvcs: list[dict[str, Any]] = field(default_factory=list)
    nameservers: list[str] = field(default_factory=list)
    nameservers_ready: int = 0
    broker_pods: list[rollout.PodView] = field(default_factory=list)
    registration: Registration = field(default_factory=Registration)
    #: controller pods Ready (``failover: Controller``)
    controllers_ready: int = 0
    #: ``failover: Controller``: group index -> its :class:`failover.GroupState` (:func:`observe_roles`)
    roles: dict[int, failover.GroupState] = field(default_factory=dict)

    def group_pods(self, index: int) -> list[rollout.PodView]:
        """The pods of broker group ``index``, by brokerId."""
        return sorted((p for p in self.broker_pods if p.group == index), key=lambda p: p.broker_id)


async def observe_members(ctx: Context, seen: Observed) -> Members:
    """List the cluster's pods and PVCs and ask every NameServer for its registration table.
    A NameServer failure is a waiting reason. Raises :class:`ApiError` when a list is refused."""
    selector = f"{names.LABEL_INSTANCE}={seen.name}"
    pods = await ctx.kube.list("v1", "Pod", seen.namespace, selector)
    members = Members(pvcs=await ctx.kube.list("v1", "PersistentVolumeClaim", seen.namespace, selector))
    members.nameservers_ready = sum(
        1 for p in pods if (p["metadata"].get("labels") or {}).get(names.LABEL_COMPONENT) == names.COMPONENT_NAMESERVER
        and rollout.pod_ready(p))
    members.broker_pods = [v for v in (rollout.pod_view(p) for p in pods) if v is not None]
    members.controllers_ready = sum(
        1 for p in pods if (p["metadata"].get("labels") or {}).get(names.LABEL_COMPONENT) == names.COMPONENT_CONTROLLER
        and rollout.pod_ready(p))
    members.nameservers = await ctx.resolver.nameservers(seen.ref)
    if members.nameservers:
        try:
            members.registration = await ctx.admin.registration(members.nameservers, seen.name)
        except AdminError as exc:
            members.registration = Registration(unreachable=list(members.nameservers))
            members.waiting.append(f"NameServers: {exc}")
    return members


def _pod_addr(ctx: Context, seen: Observed, broker_id: int, group: int) -> str:
    return ctx.resolver.broker(seen.ref, names.broker_pod(seen.name, broker_id, group))


def _master_addr(ctx: Context, seen: Observed, group: int) -> str:
    """The address of group ``group``'s master: the pod the controllers chose (``failover:
    Controller``, when known), else the brokerId 0 pod."""
    return seen.masters.get(group) or _pod_addr(ctx, seen, 0, group)


# -- claims ----------------------------------------------------------------------------------------

async def own_claims(ctx: Context, seen: Observed, spec: ClusterSpec, pvcs: list[dict[str, Any]]) -> Part:
    """``deleteClaim.onDelete``: the cluster owns its PVCs (they go with it), else it owns none; owner
    references as :func:`claim_owner_references`. A broker PVC smaller than ``spec.broker.storage.size``
    is expanded; a refusal, e.g. by a StorageClass without ``allowVolumeExpansion``, is a waiting
    reason naming it. PVCs never shrink, and the controllers' Raft PVCs keep
    ``controllers.CONTROLLER_STORAGE``. A PVC being deleted (still held by a finalizer, e.g. one of an
    earlier cluster of the same name) is left alone. Raises :class:`ApiError` for another refused patch."""
    part = Part()
    want = parse_quantity(spec.broker.storage.size)
    for pvc in pvcs:
        if pvc["metadata"].get("deletionTimestamp"):
            continue  # already going (e.g. with an earlier cluster of this name): not expanded nor owned
        size = ((pvc.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
        broker = (pvc["metadata"].get("labels") or {}).get(names.LABEL_COMPONENT) == names.COMPONENT_BROKER
        if broker and size is not None and parse_quantity(size) < want:
            try:
                await ctx.kube.merge_patch("v1", "PersistentVolumeClaim", seen.namespace, pvc["metadata"]["name"],
                                           {"spec": {"resources": {"requests": {"storage": spec.broker.storage.size}}}})
            except ApiError as exc:
                if exc.status not in (403, 422):
                    raise
                part.waiting.append(f"PVC {pvc['metadata']['name']} cannot be expanded to "
                                    f"{spec.broker.storage.size}: {exc.message}")
        refs = pvc["metadata"].get("ownerReferences") or []
        wanted = claim_owner_references(refs, seen.owner.reference(), spec.broker.storage.delete_claim.on_delete)
        if wanted != refs:
            await ctx.kube.merge_patch("v1", "PersistentVolumeClaim", seen.namespace, pvc["metadata"]["name"],
                                       {"metadata": {"ownerReferences": wanted or None}})
    return part


def claim_owner_references(refs: list[dict[str, Any]], owner: dict[str, Any], owned: bool) -> list[dict[str, Any]]:
    """A PVC's ``metadata.ownerReferences`` as ``deleteClaim.onDelete`` (``owned``) wants them.

    ``refs``: the PVC's references now; ``owner``: this RocketCluster's controller reference
    (:meth:`Owner.reference`). Owned: ``owner`` is added, replacing a controller reference to an
    earlier RocketCluster of the same name (deleted and re-created before the garbage collector came:
    the new cluster adopts the claim its pods mount, and the API server allows one controller
    reference only, ``Only one reference can have Controller set to true``); under another kind's
    controller it is added as a plain owner. Not owned: references to ``owner``'s uid are removed.
    Other references are kept in order; the input is not modified."""
    if not owned:
        return [r for r in refs if r.get("uid") != owner["uid"]]
    if any(r.get("uid") == owner["uid"] for r in refs):
        return list(refs)
    kept = [r for r in refs if not (r.get("controller") and r.get("kind") == owner["kind"]
                                    and r.get("apiVersion", "").split("/")[0] == owner["apiVersion"].split("/")[0]
                                    and r.get("name") == owner["name"])]
    controlled = any(r.get("controller") for r in kept)
    return [*kept, {**owner, "controller": False} if controlled else owner]


# -- broker groups ---------------------------------------------------------------------------------

@dataclass
class Groups(Part):
    """``entries``: the new ``status.brokerGroups`` (one per group the StatefulSets keep)."""

    entries: list[dict[str, Any]] = field(default_factory=list)


def topics_digest(spec: ClusterSpec) -> str:
    """A short digest of ``spec.topics`` (name, queues, perm): a group whose ``topicsDigest``
    differs gets the spec topics created again."""
    raw = json.dumps([[t.name, t.queues, t.perm] for t in spec.topics])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def system_names(seen: Observed, spec: ClusterSpec, replicas: int) -> frozenset[str]:
    """Topic names that are the cluster's or a broker's own (not copied, not counted in a drain)."""
    top = max(seen.current_groups, spec.broker.groups, replicas)
    return frozenset({seen.name, *(names.broker_name(seen.name, i) for i in range(top))})


def group_entry(cluster: str, index: int, previous: Mapping[str, Any], pods: list[rollout.PodView],
                registered: bool, record: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``status.brokerGroups`` entry of group ``index`` before this pass's metadata steps
    (``previous``: its old entry; ``record``: its drain record, None when it stays)."""
    return {
        "name": names.broker_name(cluster, index),
        "index": index,
        "pods": [p.name for p in pods],
        "readyPods": sum(1 for p in pods if p.ready),
        "registered": registered,
        "metadataSynced": bool(previous.get("metadataSynced")),
        "topicsDigest": previous.get("topicsDigest", ""),
        "metadataSource": previous.get("metadataSource", ""),
        "state": record["state"] if record else "Active",
        "writable": record is None or record.get("state") == drain.PENDING,
    }


async def sync_groups(ctx: Context, seen: Observed, spec: ClusterSpec, plan: drain.DrainPlan,
                      members: Members) -> Groups:
    """One entry per group the StatefulSets keep; for each group that stays and is registered in
    every NameServer: copy topics and subscription groups from a synced group to a new one
    (scale-out; the first group has nothing to copy from), then create the spec topics when they
    changed. Admin failures are waiting reasons."""
    part = Groups()
    prev_groups = seen.previous_groups
    digest = topics_digest(spec)
    exclude = system_names(seen, spec, plan.replicas)
    active = range(min(spec.broker.groups, plan.replicas))
    synced_sources = [i for i in active
                      if prev_groups.get(names.broker_name(seen.name, i), {}).get("metadataSynced")
                      and members.registration.registered_everywhere(names.broker_name(seen.name, i))]
    for index in range(plan.replicas):
        bname = names.broker_name(seen.name, index)
        entry = group_entry(seen.name, index, prev_groups.get(bname, {}), members.group_pods(index),
                            members.registration.registered_everywhere(bname), plan.records.get(index))
        if index not in plan.records:
            await _sync_group(ctx, seen, spec, entry, synced_sources, exclude, digest, part)
        part.entries.append(entry)
    return part


async def _sync_group(ctx: Context, seen: Observed, spec: ClusterSpec, entry: dict[str, Any],
                      synced_sources: list[int], exclude: frozenset[str], digest: str, part: Groups) -> None:
    bname, index = entry["name"], entry["index"]
    if not entry["registered"]:
        part.waiting.append(f"{bname} is not registered in every NameServer yet")
    elif not entry["metadataSynced"]:
        source = next((i for i in synced_sources if i != index), None)
        if source is None and not synced_sources:
            entry["metadataSynced"] = True  # the first group: nothing to copy from
            synced_sources.append(index)
        elif source is not None:
            source_name = names.broker_name(seen.name, source)
            try:
                copied = await ctx.admin.copy_metadata(_master_addr(ctx, seen, source), _master_addr(ctx, seen, index),
                                                       exclude)
            except AdminError as exc:
                part.waiting.append(f"copying topics to {bname}: {exc}")
            else:
                entry["metadataSynced"] = True
                entry["metadataSource"] = source_name
                part.events.append(("Normal", "ScaledOut", f"{bname}: copied {copied[0]} topics and {copied[1]} "
                                                           f"subscription groups from {source_name}"))
    if entry["registered"] and entry["metadataSynced"] and entry["topicsDigest"] != digest:
        try:
            await ctx.admin.create_topics(_master_addr(ctx, seen, index),
                                          [(t.name, t.queues, t.perm) for t in spec.topics])
        except AdminError as exc:
            part.waiting.append(f"creating spec topics on {bname}: {exc}")
        else:
            entry["topicsDigest"] = digest


# -- drain -----------------------------------------------------------------------------------------

@dataclass
class Drains(Part):
    """``records``: group index -> drain record left after this pass (``status.drain``)."""

    records: dict[int, dict[str, Any]] = field(default_factory=dict)


async def drain_groups(ctx: Context, seen: Observed, spec: ClusterSpec, plan: drain.DrainPlan, members: Members,
                       now: datetime.datetime) -> Drains:
    """Restore the write permission of the groups whose drain was cancelled (a failure keeps their
    record, to try again), then advance the drain of every leaving group, highest first
    (:func:`drain.advance`), making the admin and API calls it asks for.
    Raises :class:`ApiError` when a PVC deletion is refused."""
    part = Drains(records=dict(plan.records))
    for rec in plan.cancelled:
        if rec.get("state") == drain.PENDING:
            continue
        try:
            await ctx.admin.set_write_permission(members.nameservers, rec["brokerName"],
                                                 [_master_addr(ctx, seen, int(rec["index"]))], True)
            part.events.append(("Normal", "DrainCancelled", f"{rec['brokerName']} is writable again"))
        except AdminError as exc:
            part.records[int(rec["index"])] = rec  # keep trying
            part.waiting.append(f"restoring write permission of {rec['brokerName']}: {exc}")
    exclude = system_names(seen, spec, plan.replicas)
    for index in sorted(part.records, reverse=True):
        if index < spec.broker.groups:
            continue
        step = await _drive_drain(ctx, seen, spec, members, part.records[index], now, exclude)
        part.waiting.extend(step.waiting)
        part.events.extend(step.events)
        if step.record is None:
            metrics.remove_drain_series(seen.namespace, seen.name, part.records[index]["brokerName"])
            del part.records[index]
        else:
            part.records[index] = step.record
    return part


async def _drive_drain(ctx: Context, seen: Observed, spec: ClusterSpec, members: Members, rec: dict[str, Any],
                       now: datetime.datetime, exclude: frozenset[str]) -> drain.DrainStep:
    """Call :func:`drain.advance` until it needs nothing more, making each call it asks for once."""
    index, bname = int(rec["index"]), rec["brokerName"]
    brokers: dict[int, str] = {}
    for table in members.registration.per_nameserver.values():
        brokers.update(table.get(bname, {}))
    observed = drain.DrainObservation(nameservers_known=bool(members.nameservers),
                                      pods_left=tuple(p.name for p in members.broker_pods if p.group == index),
                                      registered=bool(brokers))
    delete_claims = spec.broker.storage.delete_claim.on_scale_in
    while True:
        step = drain.advance(rec, observed, spec.drain, now, delete_claims)
        if step.need is None:
            return step
        master = _master_addr(ctx, seen, index)
        try:
            if step.need == drain.WIPE_WRITE_PERMISSION:
                await ctx.admin.set_write_permission(members.nameservers, bname, [master], False)
                observed = observed.having(wipe=True)
            elif step.need == drain.READ_BACKLOG:
                progress = await ctx.admin.drain_progress(master, exclude)
                metrics.DRAIN_PENDING.labels(seen.namespace, seen.name, bname).set(progress.total)
                observed = observed.having(backlog=progress)
            elif step.need == drain.UNREGISTER:
                await ctx.admin.unregister(members.nameservers, seen.name, bname, brokers)
                observed = observed.having(unregister=True)
            else:
                await _delete_claims(ctx, seen, index)
                observed = observed.having(claims_deleted=True)
        except AdminError as exc:
            observed = observed.having(**{_RESULT_FIELD[step.need]: drain.Failed(str(exc))})


#: The :class:`drain.DrainObservation` field that holds the result of each admin call a drain asks for.
_RESULT_FIELD = {drain.WIPE_WRITE_PERMISSION: "wipe", drain.READ_BACKLOG: "backlog", drain.UNREGISTER: "unregister"}


async def _delete_claims(ctx: Context, seen: Observed, index: int) -> None:
    """Delete the PVC of every broker (master and slaves, as many as StatefulSets exist) of group ``index``."""
    for broker_id in range(max(seen.statefulsets, default=0) + 1):
        await ctx.kube.delete("v1", "PersistentVolumeClaim", seen.namespace,
                              names.pvc_name(names.broker_pod(seen.name, broker_id, index)))


# -- rollout ---------------------------------------------------------------------------------------

@dataclass
class Rollout(Part):
    """``outdated``: broker pods on an old revision; ``unobserved``: StatefulSets whose change the
    controller has not observed yet; ``status``: ``status.rollout`` (None when nothing is outdated)."""

    outdated: tuple[str, ...] = ()
    unobserved: list[str] = field(default_factory=list)
    status: dict[str, Any] | None = None


async def roll_brokers(ctx: Context, seen: Observed, spec: ClusterSpec, plan: drain.DrainPlan, members: Members,
                       groups: list[dict[str, Any]]) -> Rollout:
    """Delete at most one outdated broker pod (``updateStrategy: OnDelete``) when every gate of
    :func:`rollout.next_restart` is open, asking the brokers whether the slaves caught up only
    when that is the last gate. Raises :class:`ApiError` when the deletion is refused."""
    slaves = spec.broker.replicas_per_group
    revisions = rollout.update_revisions(seen.statefulsets, slaves)
    part = Rollout(unobserved=rollout.unobserved(seen.statefulsets, revisions))
    if part.unobserved:
        part.waiting.append(f"StatefulSet controller has not observed {', '.join(part.unobserved)} yet")
    active = min(spec.broker.groups, plan.replicas)
    kept_pods = [p for p in members.broker_pods if p.group < active and p.broker_id in revisions]
    expected = {bid: active for bid in revisions}
    unregistered = [g["name"] for g in groups if g["state"] == "Active" and not g["registered"]]
    if spec.broker.controller_mode:
        return await _roll_by_actual_role(ctx, seen, spec, members, part, kept_pods, revisions, expected,
                                          unregistered)
    decision = rollout.next_restart(kept_pods, revisions, expected, None if slaves else True,
                                    unregistered=unregistered)
    if decision.check_slaves:
        caught_up, lagging = await _slaves_caught_up(ctx, seen, active, slaves)
        decision = rollout.next_restart(kept_pods, revisions, expected, caught_up, unregistered=unregistered,
                                        lagging=lagging)
    part.outdated = decision.outdated
    if not decision.outdated:
        return part
    part.status = {"outdatedPods": list(decision.outdated)}
    pick = decision.delete
    if pick is None:
        part.status["waiting"] = decision.waiting
        part.waiting.append(f"rolling restart: {decision.waiting}")
        return part
    await ctx.kube.delete("v1", "Pod", seen.namespace, pick.name, uid=pick.uid)
    part.status["restarting"] = pick.name
    part.events.append(("Normal", "PodRestarted", f"deleted {pick.name} to roll it to the new revision"))
    part.waiting.append(f"rolling restart: {pick.name} restarting")
    metrics.ROLLING_RESTARTS.labels(seen.namespace, seen.name).inc()
    return part


async def _slaves_caught_up(ctx: Context, seen: Observed, groups: int, slaves: int) -> tuple[bool, str]:
    """Whether every slave of the first ``groups`` groups has caught up with its master, and if not why."""
    for group in range(groups):
        master = _pod_addr(ctx, seen, 0, group)
        for broker_id in range(1, slaves + 1):
            pod = names.broker_pod(seen.name, broker_id, group)
            try:
                if not await ctx.admin.slave_caught_up(master, _pod_addr(ctx, seen, broker_id, group)):
                    return False, f"{pod} has not caught up with its master"
            except AdminError as exc:
                return False, f"cannot compare {pod} with its master: {exc}"
    return True, ""


# -- controller mode (spec.broker.failover: Controller) ----------------------------------------------

async def apply_controllers(ctx: Context, seen: Observed, spec: ClusterSpec) -> Part:
    """``failover: Controller``: create the Raft secret once (a random password; an existing Secret
    is never read back nor changed), then apply the controllers' Service, StatefulSet and PDB
    (:func:`controllers.controller_children`). ``failover: Manual``: delete those (and the Secret)
    when a controller StatefulSet is left from before; their PVCs stay, as broker PVCs do.
    Raises :class:`ApiError` for a refused write."""
    part = Part()
    owner = seen.owner
    sts_name = names.controller(seen.name)
    if not spec.broker.controller_mode:
        if await ctx.kube.get("apps/v1", "StatefulSet", seen.namespace, sts_name) is None:
            return part
        for api_version, kind, name in (("apps/v1", "StatefulSet", sts_name), ("v1", "Service", sts_name),
                                        (ctx.caps.pdb_api_version, "PodDisruptionBudget", sts_name),
                                        ("v1", "Secret", names.controller_secret(seen.name))):
            await ctx.kube.delete(api_version, kind, seen.namespace, name)
            ctx.applied.pop((seen.uid, kind, name), None)
        part.events.append(("Normal", "ControllersRemoved", f"failover is Manual: removed {sts_name}"))
        return part
    secret_name = names.controller_secret(seen.name)
    checked = ctx.applied.get((seen.uid, "Secret", secret_name))
    if checked is None or time.monotonic() - checked[1] >= REAPPLY_SECONDS:
        if await ctx.kube.get("v1", "Secret", seen.namespace, secret_name) is None:
            manifest = controllers.build_controller_secret(owner, controllers.new_raft_secret())
            try:
                await ctx.kube.request("POST", resource_path("v1", "Secret", seen.namespace), body=manifest)
                part.events.append(("Normal", "ControllerSecretCreated", f"created {secret_name}"))
            except ApiError as exc:
                if exc.status != 409:  # 409: made meanwhile (another pass); keep that one
                    raise ApiError(exc.status, exc.reason, f"creating Secret {secret_name} refused") from None
        ctx.applied[(seen.uid, "Secret", secret_name)] = ("", time.monotonic())
    await apply_manifests(ctx, seen.uid, controllers.controller_children(owner, spec, ctx.caps), False)
    return part


async def observe_roles(ctx: Context, seen: Observed, spec: ClusterSpec, replicas: int, members: Members) -> Part:
    """``failover: Controller``: for each of the ``replicas`` groups, CONTROLLER_GET_REPLICA_INFO
    from the controllers and GET_BROKER_HA_STATUS from each of its pods, concurrently, into
    ``members.roles``; the master's pod address goes to ``seen.masters``. Failures are recorded in
    the :class:`failover.GroupState` (and reported by the rollout when it needs them), never raised.
    Adds a waiting reason while fewer controllers than wanted are Ready."""
    part = Part()
    if not spec.broker.controller_mode:
        return part
    if members.controllers_ready < CONTROLLER_REPLICAS:
        part.waiting.append(f"controllers ready {members.controllers_ready}/{CONTROLLER_REPLICAS}")
    addrs = ctx.resolver.controllers(seen.ref)

    async def broker(pod: str, group: int, broker_id: int) -> failover.BrokerRole:
        try:
            ha = await ctx.admin.broker_ha_status(_pod_addr(ctx, seen, broker_id, group))
        except AdminError as exc:
            return failover.BrokerRole(pod=pod, error=str(exc))
        return failover.BrokerRole.from_ha_status(pod, ha)

    async def group(index: int) -> failover.GroupState:
        bname = names.broker_name(seen.name, index)
        pods = members.group_pods(index)
        roles = await asyncio.gather(*(broker(p.name, p.group, p.broker_id) for p in pods))
        try:
            info = await ctx.admin.replica_info(addrs, bname)
        except AdminError as exc:
            return failover.GroupState(index=index, name=bname, brokers=tuple(roles), error=str(exc))
        return failover.GroupState(index=index, name=bname, master_id=info.master_broker_id,
                                   master_address=info.master_address, master_epoch=info.master_epoch,
                                   sync_state_set=tuple(sorted(info.sync_state_set)),
                                   sync_state_set_epoch=info.sync_state_set_epoch, brokers=tuple(roles))

    states = await asyncio.gather(*(group(i) for i in range(replicas)))
    members.roles = {g.index: g for g in states}
    for state in states:
        pod = state.master_pod
        view = next((p for p in members.broker_pods if p.name == pod), None)
        if view is not None:
            seen.masters[state.index] = _pod_addr(ctx, seen, view.broker_id, view.group)
    return part


async def _roll_by_actual_role(ctx: Context, seen: Observed, spec: ClusterSpec, members: Members, part: Rollout,
                               kept_pods: list[rollout.PodView], revisions: dict[int, str], expected: dict[int, int],
                               unregistered: list[str]) -> Rollout:
    """:func:`roll_brokers` under ``failover: Controller``: the gates of :func:`rollout.next_restart`
    with every group settled (:func:`failover.groups_settled`) in place of the slaves' catching up,
    pods in :func:`failover.restart_order` (group by group, actual slaves first). Before touching a
    group's pod the group is made read-only (:func:`failover.plan_fence`; ``status.rollout``'s
    ``writeFence`` and ``writesResumed`` carry it across passes and operator restarts) and made
    writable again when the rollout moves on or ends. A pick the controllers made master is not
    deleted: its group's master is switched to an in-sync slave first
    (:meth:`ClusterAdmin.switch_master`), and the pod is restarted as a slave in a later pass.
    Raises :class:`ApiError` when the deletion is refused."""
    active = {p.group for p in kept_pods}
    groups = {i: g for i, g in members.roles.items() if i in active}
    roles = failover.actual_roles(groups)
    unsettled = failover.groups_settled(groups)
    decision = rollout.next_restart(kept_pods, revisions, expected, not unsettled, unregistered=unregistered,
                                    lagging=unsettled, order=lambda pods: failover.restart_order(pods, roles))
    old = seen.status.get("rollout") or {}
    carried = {k: dict(old[k]) for k in ("writeFence", "writesResumed") if isinstance(old.get(k), Mapping)}
    part.outdated = decision.outdated
    refresh = float(spec.broker.client_route_refresh_seconds)
    if not decision.outdated:
        evicting = await _evict_masters(ctx, seen, members, part, kept_pods, groups, carried, refresh)
        if evicting is not None:
            return evicting
        if "writeFence" in carried:  # done: the last fenced group takes writes again
            part.status = carried
            if await _write_fence(ctx, seen, members, part, None, len(active), refresh):
                part.status = None
        return part
    part.status = {"outdatedPods": list(decision.outdated), **carried}
    pick = decision.delete
    if pick is None:
        return _roll_waits(part, decision.waiting)
    step = failover.next_step(pick, groups, {p.name for p in kept_pods if p.revision == revisions.get(p.broker_id)})
    if step.delete is None and step.switch is None:
        return _roll_waits(part, step.waiting)
    if not await _write_fence(ctx, seen, members, part, pick.group, len(active), refresh):
        return part
    if step.switch is not None:
        switch = step.switch
        if not await _switch_master(ctx, members, part, switch, "restarting"):
            return part
        part.status["switchedMaster"] = {"group": switch.group.name, "from": switch.from_pod, "to": switch.to_pod}
        part.waiting.append(f"rolling restart: {switch.from_pod} restarts once it runs as a slave")
        return part
    assert step.delete is not None
    await ctx.kube.delete("v1", "Pod", seen.namespace, step.delete.name, uid=step.delete.uid)
    part.status["restarting"] = step.delete.name
    part.events.append(("Normal", "PodRestarted", f"deleted {step.delete.name} ({roles.get(step.delete.name)}) "
                                                  "to roll it to the new revision"))
    part.waiting.append(f"rolling restart: {step.delete.name} restarting")
    metrics.ROLLING_RESTARTS.labels(seen.namespace, seen.name).inc()
    return part


async def _evict_masters(ctx: Context, seen: Observed, members: Members, part: Rollout,
                         kept_pods: list[rollout.PodView], groups: Mapping[int, failover.GroupState],
                         carried: dict[str, dict[str, Any]], refresh: float) -> Rollout | None:
    """Node drains (:mod:`rocket_operator.eviction`): act on the pods whose eviction the webhook
    refused for the operator to delete, one at a time (group by group, slaves first), when no
    rolling restart is under way. The pod's group is made read-only (the rolling restart's write
    fence); a master is first switched to an in-sync slave, and once the old master runs as a
    slave (the new master as master) the pod is deleted. The group
    stays read-only until the deleted broker has left the SyncStateSet or is back in sync (its
    master then no longer waits for it), then the next request, or the end, releases the fence.
    None when there is nothing to do (the caller releases a fence left); else this pass's part.
    Raises :class:`ApiError` when the deletion is refused."""
    evicted = carried.get("evicted")
    if evicted is not None:
        group = groups.get(int(evicted.get("index", -1)))
        broker_id = evicted.get("brokerId")
        back = any(p.name == evicted.get("pod") and p.uid != evicted.get("uid") and p.ready for p in kept_pods)
        if group is None or group.error or (broker_id in group.sync_state_set
                                            and not (back and not failover.settled_reason(group))):
            part.status = dict(carried)
            return _roll_waits(part, f"{evicted.get('pod')} was evicted; waiting for its broker to leave the "
                                     f"SyncStateSet of group {evicted.get('index')} or to be back in sync")
        carried.pop("evicted", None)
    wanted = ctx.evictions.of(seen.uid)
    by_name = {p.name: p for p in kept_pods}
    for pod, uid in wanted.items():
        view = by_name.get(pod)
        if view is None or view.uid != uid or view.terminating:
            ctx.evictions.done(seen.uid, pod)  # gone or replaced: the retried eviction decides afresh
    pick = next((p for p in failover.restart_order(kept_pods, failover.actual_roles(groups))
                 if wanted.get(p.name) == p.uid and not p.terminating), None)
    if pick is None:
        return None
    part.status = {"evicting": pick.name, **carried}
    group = groups.get(pick.group)
    if group is None:
        return _roll_waits(part, f"evicting {pick.name}: its group's roles are not known")
    master_pod = group.master_pod
    master = next((b for b in group.brokers if b.pod == master_pod), None)
    # the old master runs as a slave and the new one as master: the pod may go
    ready_to_delete = group.role(pick.name) == failover.SLAVE and master is not None and master.role == "MASTER"
    step = failover.next_step(pick, groups, set())
    if not ready_to_delete and step.switch is None:
        return _roll_waits(part, f"evicting {pick.name}: {step.waiting or 'waiting for the new master'}")
    if not await _write_fence(ctx, seen, members, part, pick.group, len(groups), refresh):
        return part
    if step.switch is not None:
        if not await _switch_master(ctx, members, part, step.switch, "evicting"):
            return part
        return _roll_waits(part, f"evicting {pick.name} once it runs as a slave")
    await ctx.kube.delete("v1", "Pod", seen.namespace, pick.name, uid=pick.uid)
    ctx.evictions.deleted_by_operator(seen.uid, pick.name, pick.uid, time.monotonic())
    broker = next((b for b in group.brokers if b.pod == pick.name), None)
    part.status.pop("evicting", None)
    part.status["evicted"] = {"pod": pick.name, "uid": pick.uid, "index": pick.group,
                              "brokerId": broker.controller_id if broker else None}
    part.events.append(("Normal", "PodEvicted", f"deleted {pick.name} (a slave of {group.name}, whose master is "
                                                f"{master_pod}) for its eviction"))
    return _roll_waits(part, f"{pick.name} evicted")


async def _switch_master(ctx: Context, members: Members, part: Rollout, switch: failover.MasterSwitch,
                         before: str) -> bool:
    """Move ``switch.group``'s master to ``switch.to_id`` through the controllers
    (:meth:`~rocket_operator.admin.ClusterAdmin.switch_master`) before ``before`` (``"restarting"``
    or ``"evicting"``) the old master's pod; records a MasterSwitched event. False, with the
    reason in ``part``'s waits, when the switch failed."""
    try:
        await ctx.admin.switch_master(members.nameservers, switch.group.name, switch.to_id)
    except AdminError as exc:
        _roll_waits(part, f"switching the master of {switch.group.name} to {switch.to_pod} before "
                          f"{before} {switch.from_pod}: {exc}")
        return False
    part.events.append(("Normal", "MasterSwitched",
                        f"{switch.group.name}: master moved from {switch.from_pod} to {switch.to_pod} "
                        f"(controller broker id {switch.to_id}) before {before} {switch.from_pod}"))
    return True


def _roll_waits(part: Rollout, why: str) -> Rollout:
    """The rollout waits for ``why`` (``status.rollout.waiting`` and a waiting reason)."""
    if part.status is not None:
        part.status["waiting"] = why
    part.waiting.append(f"rolling restart: {why}")
    return part


def _age(record: Mapping[str, Any] | None, now: datetime.datetime) -> float | None:
    """Seconds since ``record["since"]`` (RFC 3339, UTC); None without a readable record."""
    if not record:
        return None
    try:
        since = datetime.datetime.strptime(str(record.get("since")), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return 0.0
    return (now - since.replace(tzinfo=datetime.UTC)).total_seconds()


async def _write_fence(ctx: Context, seen: Observed, members: Members, part: Rollout, target: int | None,
                       writable_groups: int, route_refresh: float) -> bool:
    """Apply :func:`failover.plan_fence` for group ``target`` (None: the rollout ended) to the
    fence records in ``part.status``: make the fenced group writable again and/or the target
    read-only (WIPE / ADD write permission on every NameServer and ``brokerPermission`` on each
    of its brokers). True when the restart may go ahead now; else the waiting reason is in ``part``."""
    assert part.status is not None
    now = datetime.datetime.now(datetime.UTC)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    fence = part.status.get("writeFence")
    target_name = names.broker_name(seen.name, target) if target is not None else None
    plan = failover.plan_fence(fence.get("group") if fence else None, _age(fence, now) or 0.0, target_name,
                               writable_groups, _age(part.status.get("writesResumed"), now), route_refresh)
    if plan.release is not None and fence:
        try:
            await _set_group_writable(ctx, seen, members, int(fence.get("index", -1)), plan.release, True)
        except AdminError as exc:
            _roll_waits(part, f"making {plan.release} writable again: {exc}")
            return False
        part.status.pop("writeFence", None)
        part.status["writesResumed"] = {"group": plan.release, "since": stamp}
        part.events.append(("Normal", "WritesResumed", f"{plan.release} takes writes again"))
    if plan.fence is not None and target is not None:
        try:
            await _set_group_writable(ctx, seen, members, target, plan.fence, False)
        except AdminError as exc:
            _roll_waits(part, f"making {plan.fence} read-only: {exc}")
            return False
        part.status["writeFence"] = {"group": plan.fence, "index": target, "since": stamp}
        part.status.pop("writesResumed", None)
        part.events.append(("Normal", "WritesPaused", f"{plan.fence} made read-only while its brokers restart"))
    if not plan.proceed:
        if target is not None:
            _roll_waits(part, plan.waiting)
        return target is None
    return True


async def _set_group_writable(ctx: Context, seen: Observed, members: Members, index: int, broker_name: str,
                              writable: bool) -> None:
    """Write permission of group ``index`` on every NameServer and each of its brokers (raises
    :class:`AdminError`)."""
    addrs = [_pod_addr(ctx, seen, p.broker_id, p.group) for p in members.group_pods(index)]
    await ctx.admin.set_write_permission(members.nameservers, broker_name, addrs, writable)
