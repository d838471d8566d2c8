"""Node drains: whether a broker pod may be evicted now (pure), and the requests the operator acts on.

``kubectl drain`` (and every other eviction: the cluster autoscaler, node upgrades) asks the
``pods/eviction`` subresource of each pod (Kubernetes' Eviction API). The operator's validating
admission webhook (``handlers.validate_eviction``) answers for the broker pods of a RocketCluster
with ``spec.broker.failover: Controller``, from the roles the controllers hold
(:class:`rocket_operator.failover.GroupState`, read live for each request):

* an actual **slave** may go when every other broker of its group answers and is in the
  SyncStateSet (so the group keeps every acknowledged message, RocketMQ's
  ``allAckInSyncStateSet``, and has an in-sync broker to take over). A slave not in the
  SyncStateSet, or of a cluster with a single group, is evicted at once. A slave in the
  SyncStateSet of a cluster with two groups or more is one its master waits for on every send
  until the controllers drop it from the set (``haMaxTimeSlaveNotCatchup``): its eviction is
  refused (429) once, and the operator makes the group read-only first (producers send to the
  other groups), deletes the pod itself, and keeps the group read-only until the broker has left
  the SyncStateSet or is back in sync;
* the actual **master** is refused with HTTP 429 (Too Many Requests, what ``kubectl drain`` retries
  every 5 s, as for a PodDisruptionBudget) and a message; the refusal records an eviction request
  (:class:`EvictionRequests`) on which the operator's next pass makes the group read-only, switches
  the master to an in-sync slave (``ELECT_MASTER`` with ``designateElect``, as ``rocket cluster
  failover``) and, once the old master runs as a slave, deletes the pod itself. The retried
  eviction then finds the pod gone or, ``kubectl drain`` evicting by name, its replacement (which
  the scheduler put on another node): that eviction is answered 404 (Not Found, the pod it was
  meant for is gone), which ``kubectl drain`` takes as done (it then sees the pod's uid changed);
* a group of a single broker, a cluster with ``failover: Manual``, and pods that are not broker
  pods are left to their PodDisruptionBudgets (NameServers and controllers have one each).

A dry-run eviction gets the same answer but records nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rocket_operator.failover import MASTER, SLAVE, GroupState

#: How long a pod the operator deleted for an eviction is remembered (seconds): an eviction retried
#: within that time under the same name meets its replacement and is answered "already gone".
EVICTED_MEMORY_SECONDS = 900.0

#: HTTP status of a refused eviction: 429 is what ``kubectl drain`` and the Eviction API's clients
#: retry (the API server answers 429 for an eviction a PodDisruptionBudget does not allow now).
RETRY_STATUS = 429


@dataclass(frozen=True, slots=True)
class EvictionDecision:
    """The answer to one eviction: ``allowed``; ``message`` (why not, shown by ``kubectl drain``);
    ``operator_deletes``: refused, and the operator deletes the pod itself once it is safe (a
    master after moving the master away; a slave after making its group read-only); ``gone``: the
    pod meant was deleted already and this is its replacement (answered 404, Not Found)."""

    allowed: bool
    message: str = ""
    operator_deletes: bool = False
    gone: bool = False


def decide(pod: str, group: GroupState | None, active_groups: int) -> EvictionDecision:
    """Whether broker pod ``pod`` of a controller-mode group may be evicted now.

    ``group``: its group as the controllers and its pods see it (None: the pod is not part of an
    active group, e.g. one a scale-in removes: allowed); ``active_groups``: the cluster's groups
    (with fewer than 2 no group is made read-only). See the module doc for the rules.
    """
    if group is None:
        return EvictionDecision(True)
    if group.error:
        return EvictionDecision(False, f"cannot read the roles of {group.name} from the controllers: "
                                       f"{group.error}; retry")
    if len(group.brokers) <= 1:
        return EvictionDecision(True)
    role = group.role(pod)
    if role == SLAVE:
        for broker in group.brokers:
            if broker.pod == pod:
                continue
            if broker.error or broker.controller_id is None:
                return EvictionDecision(False, f"{pod} is a slave of {group.name}, but {broker.pod} does not "
                                               f"answer ({broker.error or 'no controller broker id'}); retry")
            if broker.controller_id not in group.sync_state_set:
                return EvictionDecision(False, f"{pod} is a slave of {group.name}, but {broker.pod} is not in "
                                               "the SyncStateSet yet; retry")
        own = next(b for b in group.brokers if b.pod == pod)
        if active_groups >= 2 and own.controller_id in group.sync_state_set:
            return EvictionDecision(False, f"{pod} is an in-sync slave of {group.name}: the operator makes the group "
                                           "read-only and then deletes the pod itself; retry", operator_deletes=True)
        return EvictionDecision(True)
    if role == MASTER:
        return EvictionDecision(False, f"{pod} is the master of {group.name}: the operator moves the master to "
                                       "an in-sync slave and then deletes the pod itself; retry",
                                operator_deletes=True)
    return EvictionDecision(False, f"the role of {pod} in {group.name} is not known yet; retry")


@dataclass
class EvictionRequests:
    """Masters whose eviction was refused, for the operator to move away: RocketCluster uid ->
    pod name -> pod uid (a pod replaced under the same name is not evicted by an old request).
    Kept in memory: after an operator restart the retried eviction records it again."""

    pods: dict[str, dict[str, str]] = field(default_factory=dict)
    #: RocketCluster uid -> pod name -> (uid of the pod the operator deleted, monotonic time)
    deleted: dict[str, dict[str, tuple[str, float]]] = field(default_factory=dict)

    def add(self, cluster_uid: str, pod: str, pod_uid: str) -> None:
        """Record a refused eviction of ``pod`` (uid ``pod_uid``)."""
        self.pods.setdefault(cluster_uid, {})[pod] = pod_uid

    def of(self, cluster_uid: str) -> dict[str, str]:
        """The requests of one cluster (pod -> pod uid; a copy)."""
        return dict(self.pods.get(cluster_uid, {}))

    def done(self, cluster_uid: str, pod: str) -> None:
        """Forget the request of ``pod`` (deleted, or gone)."""
        wanted = self.pods.get(cluster_uid)
        if wanted is not None:
            wanted.pop(pod, None)
            if not wanted:
                self.pods.pop(cluster_uid, None)

    def deleted_by_operator(self, cluster_uid: str, pod: str, pod_uid: str, now: float) -> None:
        """The operator deleted ``pod`` (uid ``pod_uid``) at monotonic time ``now`` for its eviction."""
        self.done(cluster_uid, pod)
        self.deleted.setdefault(cluster_uid, {})[pod] = (pod_uid, now)

    def replaced(self, cluster_uid: str, pod: str, pod_uid: str, now: float) -> bool:
        """True when ``pod``, now uid ``pod_uid``, replaces one the operator deleted for its eviction
        less than :data:`EVICTED_MEMORY_SECONDS` ago: an eviction retried by ``kubectl drain`` (which
        evicts by name) then meets the replacement, which the scheduler put on another node."""
        old = self.deleted.get(cluster_uid, {}).get(pod)
        return old is not None and old[0] != pod_uid and now - old[1] < EVICTED_MEMORY_SECONDS

    def forget(self, cluster_uid: str) -> None:
        """Forget a deleted cluster's requests."""
        self.pods.pop(cluster_uid, None)
        self.deleted.pop(cluster_uid, None)
