"""Rolling restarts of broker pods in a safe order (pure decision; the reconciler acts).

The broker StatefulSets use ``updateStrategy: OnDelete``: after a template
change (image, resources, ``broker.conf``) the StatefulSet controller makes a
new revision but replaces a pod only when it is deleted. The operator deletes
outdated pods one at a time:

1. slaves before masters (slave StatefulSets from the highest slave index
   down, each from the highest group down), then masters from the highest
   group down, so a group always keeps a serving broker for reads and loses
   its master only after its slaves run the new revision;
2. only when no broker pod is terminating or missing and every broker pod is
   Ready (the restarted one came back);
3. only when every slave has caught up with its master (checked by the
   reconciler through the admin protocol, passed in as ``slaves_caught_up``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
            return cond.get("status") == "True"
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


def next_restart(pods: Sequence[PodView], update_revisions: Mapping[int, str], expected: Mapping[int, int],
                 slaves_caught_up: bool | None) -> RolloutDecision:
    """Decide the next pod to delete.

    ``update_revisions``: brokerId -> the StatefulSet's ``status.updateRevision``
    (a StatefulSet without one yet is skipped). ``expected``: brokerId -> how
    many pods its StatefulSet should have (groups being kept). ``pods``: the
    broker pods of those groups. ``slaves_caught_up``: None when not checked yet
    (the reconciler checks only when this returns a candidate needing it).
    """
    outdated = [p for p in pods if update_revisions.get(p.broker_id) and p.revision
                and p.revision != update_revisions[p.broker_id]]
    names_out = tuple(p.name for p in restart_order(outdated))
    if not outdated:
        return RolloutDecision((), None, "")
    terminating = [p.name for p in pods if p.terminating]
    if terminating:
        return RolloutDecision(names_out, None, f"waiting for {', '.join(sorted(terminating))} to terminate")
    for broker_id, count in expected.items():
        have = sum(1 for p in pods if p.broker_id == broker_id)
        if have < count:
            return RolloutDecision(names_out, None,
                                   f"waiting for brokerId {broker_id} pods to be created ({have}/{count})")
    not_ready = sorted(p.name for p in pods if not p.ready)
    if not_ready:
        return RolloutDecision(names_out, None, f"waiting for {', '.join(not_ready)} to become ready")
    if slaves_caught_up is False:
        return RolloutDecision(names_out, None, "waiting for slaves to catch up with their masters")
    return RolloutDecision(names_out, restart_order(outdated)[0], "")
