"""Rolling restarts of broker pods in a safe order (pure decision; the reconciler acts).

The broker StatefulSets use ``updateStrategy: OnDelete``: after a template
change (image, resources, ``broker.conf``) the StatefulSet controller makes a
new revision but replaces a pod only when it is deleted. The operator deletes
outdated pods one at a time, in :func:`restart_order`, and only when every
gate of :func:`next_restart` is open, in this order:

1. order: slaves before masters (slave StatefulSets from the highest slave
   index down, each from the highest group down), then masters from the highest
   group down, so a group always keeps a serving broker for reads and loses its
   master only after its slaves run the new revision;
2. no broker pod is terminating;
3. no broker pod is missing (each StatefulSet has a pod for every group kept);
4. every broker pod is Ready (the restarted one came back);
5. every active broker group is registered in every NameServer;
6. every slave has caught up with its master. This is the only gate that needs a
   remoting call, so it is checked last: :func:`next_restart` returns
   ``check_slaves`` when the other gates are open and the answer is not known
   yet; the reconciler asks the brokers and calls it again with the answer.

:func:`update_revisions` and :func:`unobserved` read what the decision needs from
the StatefulSets.

This is the order and the gates of ``spec.broker.failover: Manual``, where the
brokerId-0 StatefulSet holds the masters. With ``failover: Controller`` the
controllers choose the roles: :func:`next_restart` then gets the order by actual
role and, as its last gate, every group settled in its SyncStateSet
(:mod:`rocket_operator.failover`), and a master is switched away before its pod
is deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rocket_operator import names


@dataclass(frozen=True, slots=True)
class PodView:
    """What the rollout needs to know of one broker pod."""

    name: str
    broker_id: int
    group: int
    revision: str
    ready: bool
    terminating: bool
    uid: str = ""


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """True when the pod's ``Ready`` condition is "True" (and it is not terminating)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status")) == "True"
    return False


def pod_view(pod: Mapping[str, Any]) -> PodView | None:
    """A :class:`PodView` of a broker pod, or None for a pod that is not one of ours."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(names.LABEL_COMPONENT) != names.COMPONENT_BROKER:
        return None
    try:
        broker_id = int(labels.get(names.LABEL_BROKER_ID, ""))
        group = names.ordinal(meta.get("name", ""))
    except ValueError:
        return None
    return PodView(
        name=meta["name"], broker_id=broker_id, group=group, revision=labels.get(names.LABEL_REVISION, ""),
        ready=pod_ready(pod), terminating=bool(meta.get("deletionTimestamp")), uid=meta.get("uid", ""),
    )


def restart_order(pods: Sequence[PodView]) -> list[PodView]:
    """``pods`` sorted into restart order: slaves (highest slave index, highest group first), then masters."""
    return sorted(pods, key=lambda p: (p.broker_id == 0, -p.broker_id, -p.group))


@dataclass(frozen=True, slots=True)
class RolloutDecision:
    """``outdated``: pods still on an old revision; ``delete``: the one to delete now (or None);
    ``waiting``: why nothing is deleted now (empty when ``delete`` is set or nothing is outdated)."""

    outdated: tuple[str, ...]
    delete: PodView | None
    waiting: str
    #: every gate but the slaves' catching up is open and that one was not checked: check, then decide again
    check_slaves: bool = False


def next_restart(pods: Sequence[PodView], update_revisions: Mapping[int, str], expected: Mapping[int, int],
                 slaves_caught_up: bool | None, *, unregistered: Sequence[str] = (), lagging: str = "",
                 order: Callable[[Sequence[PodView]], list[PodView]] = restart_order) -> RolloutDecision:
    """Decide the next pod to delete (the gates of the module doc, in order).

    ``update_revisions``: brokerId -> the StatefulSet's ``status.updateRevision``
    (a StatefulSet without one yet is skipped). ``expected``: brokerId -> how
    many pods its StatefulSet should have (groups being kept). ``pods``: the
    broker pods of those groups. ``unregistered``: names of active broker groups
    not registered in every NameServer. ``slaves_caught_up``: whether every slave
    has caught up with its master; True when the cluster has no slaves; None when
    not checked yet, which yields ``check_slaves`` (and no deletion) once every
    other gate is open. ``lagging``: why the slaves have not caught up (the
    waiting reason when ``slaves_caught_up`` is False). ``order``: the restart order
    (:func:`restart_order` by brokerId; ``failover: Controller`` passes one by actual role,
    :func:`rocket_operator.failover.restart_order`).
    """
    outdated = [p for p in pods if update_revisions.get(p.broker_id) and p.revision
                and p.revision != update_revisions[p.broker_id]]
    names_out = tuple(p.name for p in order(outdated))
    if not outdated:
        return RolloutDecision((), None, "")
    why = _pods_not_settled(pods, expected)
    if not why and unregistered:
        why = f"waiting for {', '.join(unregistered)} to register in every NameServer"
    if not why and slaves_caught_up is None:
        return RolloutDecision(names_out, None, "", check_slaves=True)
    if not why and slaves_caught_up is False:
        why = lagging or "waiting for slaves to catch up with their masters"
    if why:
        return RolloutDecision(names_out, None, why)
    return RolloutDecision(names_out, order(outdated)[0], "")


def _pods_not_settled(pods: Sequence[PodView], expected: Mapping[int, int]) -> str:
    """Why the broker pods are not all there and Ready (empty when they are)."""
    terminating = [p.name for p in pods if p.terminating]
    if terminating:
        return f"waiting for {', '.join(sorted(terminating))} to terminate"
    for broker_id, count in expected.items():
        have = sum(1 for p in pods if p.broker_id == broker_id)
        if have < count:
            return f"waiting for brokerId {broker_id} pods to be created ({have}/{count})"
    not_ready = sorted(p.name for p in pods if not p.ready)
    if not_ready:
        return f"waiting for {', '.join(not_ready)} to become ready"
    return ""


def update_revisions(statefulsets: Mapping[int, Mapping[str, Any]], slaves: int) -> dict[int, str]:
    """brokerId -> ``status.updateRevision`` of the broker StatefulSets still wanted (brokerId <= ``slaves``);
    "" for one the StatefulSet controller has not given a revision yet."""
    return {bid: (sts.get("status") or {}).get("updateRevision", "")
            for bid, sts in statefulsets.items() if bid <= slaves}


def unobserved(statefulsets: Mapping[int, Mapping[str, Any]], wanted: Iterable[int]) -> list[str]:
    """Names of the ``wanted`` StatefulSets whose latest spec the StatefulSet controller has not
    observed yet (``status.observedGeneration < metadata.generation``), sorted."""
    ids = set(wanted)
    return sorted(sts["metadata"]["name"] for bid, sts in statefulsets.items()
                  if bid in ids and int((sts.get("status") or {}).get("observedGeneration") or 0)
                  < int(sts["metadata"].get("generation") or 0))
