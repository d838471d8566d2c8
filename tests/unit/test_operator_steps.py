"""The reconcile steps without a control plane: the drain state machine (``drain.plan`` / ``drain.advance``),
the rollout gates (``rollout.next_restart``), the status (``status.cluster_status``) and the steps that
only talk to brokers, driven against :class:`tests.k8s.fakes.FakeAdmin` (no API server call is made:
the API client points at a port nothing listens on)."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rocket_operator import drain, names, rollout, status, steps
from rocket_operator.admin import DrainProgress, Registration
from rocket_operator.kube import Credentials, KubeClient
from rocket_operator.spec import DrainSpec, parse_spec
from tests.k8s.fakes import FAKE_NAMESERVER, FakeAdmin, TestResolver

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
NOW_TEXT = "2026-01-02T03:04:05Z"
HOLD = DrainSpec(timeout_seconds=600, on_timeout="Hold")
FORCE = DrainSpec(timeout_seconds=600, on_timeout="Force")


def ago(seconds: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def record(index: int, state: str, **extra: Any) -> dict[str, Any]:
    return {"index": index, "brokerName": f"rc-broker-{index}", "state": state, **extra}


# -- drain.plan ------------------------------------------------------------------------------------

def test_plan_adds_pending_records_cancels_wanted_groups_and_removes_drained_ones() -> None:
    old = [record(3, drain.DRAINED, requestedAt=ago(60)), record(1, drain.WAITING)]
    plan = drain.plan(old, current=4, desired=2, cluster="rc", now=NOW_TEXT)
    assert plan.cancelled == [record(1, drain.WAITING)]
    # group 3 is drained: the StatefulSets shrink past it and it is removed; group 2 starts
    assert plan.replicas == 3
    assert plan.records == {3: record(3, drain.REMOVING, requestedAt=ago(60)),
                            2: record(2, drain.PENDING, requestedAt=NOW_TEXT)}
    # scale-out and creation: no record, immediate size
    assert drain.plan(None, current=0, desired=3, cluster="rc", now=NOW_TEXT) == drain.DrainPlan({}, [], 3)
    grown = drain.plan([record(2, drain.HELD)], current=3, desired=4, cluster="rc", now=NOW_TEXT)
    assert grown.records == {} and grown.cancelled == [record(2, drain.HELD)] and grown.replicas == 4


# -- drain.advance ---------------------------------------------------------------------------------

def run_drain(rec: dict[str, Any], seen: drain.DrainObservation, policy: DrainSpec = HOLD,
              answers: dict[str, Any] | None = None, delete_claims: bool = False
              ) -> tuple[drain.DrainStep, list[str]]:
    """Advance as the reconciler does: answer each ``need`` from ``answers`` (default: success)."""
    asked: list[str] = []
    results = {drain.WIPE_WRITE_PERMISSION: ("wipe", True), drain.READ_BACKLOG: ("backlog", DrainProgress()),
               drain.UNREGISTER: ("unregister", True), drain.DELETE_CLAIMS: ("claims_deleted", True)}
    while True:
        step = drain.advance(rec, seen, policy, NOW, delete_claims)
        if step.need is None:
            return step, asked
        assert step.need not in asked, f"{step.need} asked twice"
        asked.append(step.need)
        key, value = results[step.need]
        seen = seen.having(**{key: (answers or {}).get(step.need, value)})


def test_pending_is_made_read_only_then_waits_for_the_backlog_in_the_same_pass() -> None:
    rec = record(2, drain.PENDING, requestedAt=ago(5))
    step, asked = run_drain(rec, drain.DrainObservation(),
                            answers={drain.READ_BACKLOG: DrainProgress(lag={"T@g": 5}, unconsumed={"U": 2},
                                                                        delayed=1)})
    assert asked == [drain.WIPE_WRITE_PERMISSION, drain.READ_BACKLOG]
    assert step.record is not None and step.record["state"] == drain.WAITING
    assert step.record["startedAt"] == NOW_TEXT and step.record["pendingMessages"] == 8
    assert step.record["lag"] == {"T@g": 5, "U@-": 2} and step.record["delayedMessages"] == 1
    assert step.events == [("Normal", "DrainStarted", "rc-broker-2 is read-only; waiting for consumers")]
    assert step.waiting == ["rc-broker-2: draining, 8 messages pending"]
    assert rec == record(2, drain.PENDING, requestedAt=ago(5))  # the input is not modified


def test_pending_without_nameservers_or_reachable_broker_stays_pending() -> None:
    rec = record(2, drain.PENDING, requestedAt=ago(5))
    step, asked = run_drain(rec, drain.DrainObservation(nameservers_known=False))
    assert asked == [] and step.record == {**rec, "message": "no NameServer address known"}
    assert step.waiting == ["rc-broker-2: no NameServer address known"]
    failed = {drain.WIPE_WRITE_PERMISSION: drain.Failed("refused")}
    step, asked = run_drain(rec, drain.DrainObservation(), answers=failed)
    assert asked == [drain.WIPE_WRITE_PERMISSION] and step.record is not None
    assert step.record["state"] == drain.PENDING and step.events == []
    assert step.waiting == ["cannot make rc-broker-2 read-only yet: refused"]
    # past the timeout: Hold keeps waiting, Force drains it anyway
    late = record(2, drain.PENDING, requestedAt=ago(601))
    kept, _ = run_drain(late, drain.DrainObservation(), HOLD, failed)
    assert kept.record is not None and kept.record["state"] == drain.PENDING and kept.events == []
    forced, _ = run_drain(late, drain.DrainObservation(), FORCE, failed)
    assert forced.record is not None and forced.record["state"] == drain.DRAINED and forced.record["forced"]
    assert forced.record["finishedAt"] == NOW_TEXT
    assert forced.record["message"] == "forced after 600s: broker unreachable (refused)"
    assert forced.events == [("Warning", "DrainForced", "rc-broker-2: forced after 600s: broker unreachable (refused)")]


def test_waiting_group_is_drained_when_nothing_is_pending() -> None:
    step, asked = run_drain(record(2, drain.WAITING, startedAt=ago(30)), drain.DrainObservation())
    assert asked == [drain.READ_BACKLOG]
    assert step.record is not None and step.record["state"] == drain.DRAINED
    assert step.record["message"] == "no message pending" and step.record["pendingMessages"] == 0
    assert step.events == [("Normal", "Drained", "rc-broker-2: every consumer group caught up")]
    assert step.waiting == []


def test_drain_timeout_holds_once_then_force_removes() -> None:
    late = record(2, drain.WAITING, startedAt=ago(700), requestedAt=ago(800))
    backlog = {drain.READ_BACKLOG: DrainProgress(lag={"T@g": 3})}
    held, _ = run_drain(late, drain.DrainObservation(), HOLD, backlog)
    assert held.record is not None and held.record["state"] == drain.HELD
    assert held.events == [("Warning", "DrainHeld", "rc-broker-2: 3 messages pending after 600s; holding")]
    assert held.waiting == [f"rc-broker-2: {held.record['message']}"]
    again, _ = run_drain(held.record, drain.DrainObservation(), HOLD, backlog)
    assert again.record is not None and again.record["state"] == drain.HELD and again.events == []
    # a held group that empties leaves
    emptied, _ = run_drain(held.record, drain.DrainObservation())
    assert emptied.record is not None and emptied.record["state"] == drain.DRAINED
    forced, _ = run_drain(late, drain.DrainObservation(), FORCE, backlog)
    assert forced.record is not None and forced.record["state"] == drain.DRAINED and forced.record["forced"]
    assert forced.events[0][:2] == ("Warning", "DrainForced")
    # not yet timed out: just waiting
    early, _ = run_drain(record(2, drain.WAITING, startedAt=ago(599)), drain.DrainObservation(), HOLD, backlog)
    assert early.record is not None and early.record["state"] == drain.WAITING
    assert early.waiting == ["rc-broker-2: draining, 3 messages pending"]


def test_unreadable_backlog_waits_and_counts_the_timeout_from_the_request() -> None:
    failed = {drain.READ_BACKLOG: drain.Failed("timeout")}
    step, _ = run_drain(record(2, drain.WAITING, startedAt=ago(10)), drain.DrainObservation(), HOLD, failed)
    assert step.record is not None and step.record["state"] == drain.WAITING
    assert step.waiting == ["rc-broker-2: cannot read the backlog: timeout",
                            "rc-broker-2: draining, ? messages pending"]
    no_start = record(2, drain.WAITING, requestedAt=ago(601))
    forced, _ = run_drain(no_start, drain.DrainObservation(), FORCE, failed)
    assert forced.record is not None and forced.record["state"] == drain.DRAINED
    assert forced.record["message"] == "forced after 600s with unknown messages pending"


def test_removing_waits_for_pods_then_unregisters_and_deletes_claims() -> None:
    rec = record(2, drain.REMOVING)
    step, asked = run_drain(rec, drain.DrainObservation(pods_left=("rc-broker-slave-1-2", "rc-broker-master-2"),
                                                        registered=True))
    assert asked == [] and step.record == rec
    assert step.waiting == ["rc-broker-2: waiting for pods rc-broker-master-2, rc-broker-slave-1-2 to stop"]
    step, asked = run_drain(rec, drain.DrainObservation(registered=True),
                            answers={drain.UNREGISTER: drain.Failed("no NameServer")})
    assert asked == [drain.UNREGISTER] and step.record == rec
    assert step.waiting == ["rc-broker-2: unregistering: no NameServer"]
    step, asked = run_drain(rec, drain.DrainObservation(registered=True), delete_claims=True)
    assert asked == [drain.UNREGISTER, drain.DELETE_CLAIMS] and step.record is None
    assert step.events == [("Normal", "GroupRemoved", "rc-broker-2 removed (PVCs deleted)")]
    step, asked = run_drain(rec, drain.DrainObservation(registered=False))
    assert asked == [] and step.record is None
    assert step.events == [("Normal", "GroupRemoved", "rc-broker-2 removed")]


def test_drained_waits_for_the_statefulsets_to_shrink() -> None:
    rec = record(2, drain.DRAINED, finishedAt=ago(1))
    step, asked = run_drain(rec, drain.DrainObservation(pods_left=("rc-broker-master-2",)))
    assert asked == [] and step.record == rec and step.waiting == [] and step.events == []


# -- rollout gates ---------------------------------------------------------------------------------

def view(name: str, broker_id: int, group: int, revision: str = "old", ready: bool = True,
         terminating: bool = False) -> rollout.PodView:
    return rollout.PodView(name, broker_id, group, revision, ready, terminating)


PODS = [view("m-0", 0, 0), view("m-1", 0, 1), view("s-0", 1, 0), view("s-1", 1, 1)]
REVS = {0: "new", 1: "new"}
EXPECTED = {0: 2, 1: 2}


@pytest.mark.parametrize(("pods", "unregistered", "why"), [
    ([*PODS[:3], view("s-1", 1, 1, terminating=True)], (), "waiting for s-1 to terminate"),
    (PODS[:3], (), "waiting for brokerId 1 pods to be created (1/2)"),
    ([*PODS[:3], view("s-1", 1, 1, "new", ready=False)], (), "waiting for s-1 to become ready"),
    (PODS, ("rc-broker-1",), "waiting for rc-broker-1 to register in every NameServer"),
])
def test_rollout_gates_before_the_slaves_are_asked(pods: list[rollout.PodView], unregistered: tuple[str, ...],
                                                   why: str) -> None:
    decision = rollout.next_restart(pods, REVS, EXPECTED, None, unregistered=unregistered)
    assert decision.delete is None and decision.waiting == why and not decision.check_slaves
    assert decision.outdated


def test_rollout_asks_for_the_slaves_last_and_reports_why_they_lag() -> None:
    first = rollout.next_restart(PODS, REVS, EXPECTED, None)
    assert first.check_slaves and first.delete is None and first.outdated == ("s-1", "s-0", "m-1", "m-0")
    lagging = rollout.next_restart(PODS, REVS, EXPECTED, False, lagging="s-1 has not caught up with its master")
    assert lagging.delete is None and lagging.waiting == "s-1 has not caught up with its master"
    assert rollout.next_restart(PODS, REVS, EXPECTED, False).waiting == \
        "waiting for slaves to catch up with their masters"
    go = rollout.next_restart(PODS, REVS, EXPECTED, True)
    assert go.delete == PODS[3] and go.waiting == "" and not go.check_slaves
    masters = [p for p in PODS if p.broker_id == 0]  # no slaves: the caller passes True
    assert rollout.next_restart(masters, {0: "new"}, {0: 2}, True).delete == PODS[1]


def sts(broker_id: int, generation: int = 1, observed: int = 1, revision: str = "new") -> dict[str, Any]:
    return {"metadata": {"name": names.broker_statefulset("rc", broker_id), "generation": generation},
            "spec": {"replicas": 2}, "status": {"observedGeneration": observed, "updateRevision": revision}}


def test_update_revisions_and_unobserved_statefulsets() -> None:
    statefulsets = {0: sts(0, 2, 1), 1: sts(1), 2: sts(2, 3, 1, "")}
    assert rollout.update_revisions(statefulsets, 1) == {0: "new", 1: "new"}
    assert rollout.unobserved(statefulsets, [0, 1]) == ["rc-broker-master"]
    assert rollout.unobserved(statefulsets, [0, 1, 2]) == ["rc-broker-master", "rc-broker-slave-2"]


# -- status ----------------------------------------------------------------------------------------

def group(index: int, ready: int = 2, registered: bool = True, state: str = "Active", synced: bool = True
          ) -> dict[str, Any]:
    return {"name": f"rc-broker-{index}", "index": index, "readyPods": ready, "registered": registered,
            "state": state, "metadataSynced": synced}


def facts(**changes: Any) -> status.PassFacts:
    base = status.PassFacts(spec=parse_spec({"broker": {"groups": 2, "replicasPerGroup": 1}}),
                            previous_phase=None, previous_groups=2, statefulsets=2, replicas=2,
                            nameservers=["ns:9876"], nameservers_ready=2, groups=[group(0), group(1)])
    for key, value in changes.items():
        setattr(base, key, value)
    return base


@pytest.mark.parametrize(("changes", "phase"), [
    ({}, status.PHASE_RUNNING),
    ({"nameservers_ready": 1}, status.PHASE_PENDING),
    ({"nameservers_ready": 1, "previous_phase": status.PHASE_RUNNING}, status.PHASE_DEGRADED),
    ({"groups": [group(0), group(1, ready=1)], "previous_phase": status.PHASE_RUNNING, "replicas": 3},
     status.PHASE_SCALING),
    ({"groups": [group(0), group(1, synced=False)], "previous_phase": status.PHASE_DEGRADED,
      "nameservers_ready": 0}, status.PHASE_SCALING),
    ({"outdated": ("rc-broker-master-0",)}, status.PHASE_UPDATING),
    ({"unobserved": ["rc-broker-master"]}, status.PHASE_UPDATING),
    ({"drain": {2: record(2, drain.WAITING)}}, status.PHASE_DRAINING),
    ({"drain": {2: record(2, drain.HELD, message="m")}, "outdated": ("x",)}, status.PHASE_DEGRADED),
])
def test_phase(changes: dict[str, Any], phase: str) -> None:
    assert status.cluster_status(facts(**changes), []).phase == phase


def test_conditions_and_fields() -> None:
    report = status.cluster_status(facts(nameservers_ready=1, groups=[group(0), group(1, ready=0)]),
                                   ["rc-broker-1 is not registered in every NameServer yet"])
    assert report.waiting == ["NameServers ready 1/2", "broker groups ready 1/2"]
    by_type = {c["type"]: c for c in report.conditions}
    text = "rc-broker-1 is not registered in every NameServer yet; NameServers ready 1/2; broker groups ready 1/2"
    assert by_type["Ready"] == {"type": "Ready", "status": "False", "reason": "NotReady", "message": text}
    assert by_type["Progressing"]["status"] == "True" and by_type["Progressing"]["message"] == text
    assert by_type["Degraded"]["status"] == "False" and "AnalyticsReady" not in by_type
    assert report.fields["nameServersReady"] == "1/2" and report.fields["brokerGroupsReady"] == "1/2"
    assert report.fields["drain"] is None and report.fields["rollout"] is None
    held = status.cluster_status(facts(drain={3: record(3, drain.HELD, message="m3"), 2: record(2, drain.WAITING)}),
                                 ["x"])
    conds = {c["type"]: c for c in held.conditions}
    assert conds["Degraded"]["reason"] == "DrainHeld" and conds["Degraded"]["message"] == "rc-broker-3: m3"
    assert conds["Progressing"]["status"] == "False"
    assert conds["Draining"]["message"] == "rc-broker-3 Held, rc-broker-2 WaitingForConsumers"
    assert [r["index"] for r in held.fields["drain"]] == [3, 2]


def test_invalid_and_paused_conditions() -> None:
    invalid = {c["type"]: c for c in status.invalid_conditions("spec.broker.groups: too big")}
    assert invalid["Degraded"]["status"] == "True" and invalid["Ready"]["message"] == "spec.broker.groups: too big"
    previous = [{"type": "Ready", "status": "True", "reason": "ClusterReady", "message": "",
                 "observedGeneration": 3, "lastTransitionTime": NOW_TEXT},
                {"type": "Paused", "status": "False", "reason": "NotPaused", "message": ""}]
    assert status.paused_conditions(previous) == [
        {"type": "Ready", "status": "True", "reason": "ClusterReady", "message": ""},
        {"type": "Paused", "status": "True", "reason": "Paused",
         "message": "reconciliation paused by the rocket.dev/paused annotation"}]


# -- claim ownership (deleteClaim.onDelete) --------------------------------------------------------

def test_claim_owner_references_replace_an_earlier_cluster_of_the_same_name() -> None:
    """Found by the exploration (seed 2100862766): a cluster deleted with onDelete and re-created at once
    under the same name appended its reference beside the old one's, and the API server refused the
    patch (422 "Only one reference can have Controller set to true") on every pass."""
    from rocket_operator.builders import Owner

    new = Owner(namespace="ns", name="rc", uid="uid-new").reference()
    old = Owner(namespace="ns", name="rc", uid="uid-old").reference()
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "uid-cm"}
    refs = [other, old]
    assert steps.claim_owner_references(refs, new, owned=True) == [other, new]
    assert refs == [other, old]  # not modified
    assert steps.claim_owner_references([other, new], new, owned=True) == [other, new]  # already ours: as is
    # not owned: only this cluster's reference goes; someone else's controller reference stays
    assert steps.claim_owner_references([other, new], new, owned=False) == [other]
    assert steps.claim_owner_references([old], new, owned=False) == [old]
    # another kind's controller (or a RocketCluster of another name) keeps control: ours is a plain owner
    foreign = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "rc", "uid": "uid-sts", "controller": True}
    assert steps.claim_owner_references([foreign], new, owned=True) == [foreign, {**new, "controller": False}]
    elsewhere = {**old, "name": "rc-2"}
    assert steps.claim_owner_references([elsewhere], new, owned=True) == [elsewhere, {**new, "controller": False}]
    assert steps.claim_owner_references([], new, owned=True) == [new]


# -- steps against a fake observed state -----------------------------------------------------------

def observed(groups: int = 2, slaves: int = 1, old_status: dict[str, Any] | None = None) -> steps.Observed:
    statefulsets = {bid: sts(bid) for bid in range(slaves + 1)}
    for s in statefulsets.values():
        s["spec"]["replicas"] = groups
    return steps.Observed(namespace="ns", name="rc", uid="uid-1", generation=1, status=old_status or {},
                          raw_spec={}, annotations=None, statefulsets=statefulsets,
                          statefulset_names={s["metadata"]["name"] for s in statefulsets.values()})


def test_observed_state_and_plan() -> None:
    seen = observed(groups=3, old_status={"drain": [record(2, drain.WAITING)],
                                          "brokerGroups": [group(0), group(1), group(2)]})
    assert seen.current_groups == 3 and set(seen.previous_groups) == {"rc-broker-0", "rc-broker-1", "rc-broker-2"}
    assert not seen.paused and seen.owner.uid == "uid-1"
    spec = parse_spec({"broker": {"groups": 2}})
    plan = steps.plan_brokers(seen, spec, NOW_TEXT)
    assert plan.replicas == 3 and plan.records == {2: record(2, drain.WAITING)}
    assert steps.system_names(seen, spec, plan.replicas) == frozenset({"rc", "rc-broker-0", "rc-broker-1",
                                                                      "rc-broker-2"})
    entry = steps.group_entry("rc", 2, {"metadataSynced": True, "topicsDigest": "d"},
                              [view("rc-broker-master-2", 0, 2)], True, plan.records[2])
    assert entry["state"] == drain.WAITING and not entry["writable"] and entry["metadataSynced"]
    assert entry["readyPods"] == 1 and entry["topicsDigest"] == "d"
    assert steps.topics_digest(spec) != steps.topics_digest(parse_spec({"topics": [{"name": "T"}]}))


@pytest.fixture
async def ctx() -> AsyncIterator[tuple[steps.Context, FakeAdmin]]:
    """A context whose API client points at 127.0.0.1:1 (any API call fails) and a :class:`FakeAdmin`."""
    admin = FakeAdmin()
    kube = KubeClient(Credentials(server="http://127.0.0.1:1"), timeout=2.0)
    try:
        yield steps.Context(kube=kube, resolver=TestResolver(), admin=admin), admin
    finally:
        await kube.close()


def members_of(seen: steps.Observed, groups: int, slaves: int = 1) -> steps.Members:
    pods = [view(names.broker_pod("rc", bid, g), bid, g, "new") for g in range(groups) for bid in range(slaves + 1)]
    table = {f"rc-broker-{g}": {0: f"rc-broker-{g}@master"} for g in range(groups)}
    return steps.Members(nameservers=[FAKE_NAMESERVER], nameservers_ready=1, broker_pods=pods,
                         registration=Registration(per_nameserver={FAKE_NAMESERVER: table}))


async def test_drain_step_runs_the_machine_against_the_brokers(ctx: tuple[steps.Context, FakeAdmin]) -> None:
    context, admin = ctx
    spec = parse_spec({"broker": {"groups": 1, "replicasPerGroup": 0}})
    seen = observed(groups=3, slaves=0, old_status={"drain": [record(1, drain.HELD, startedAt=ago(10))]})
    plan = steps.plan_brokers(seen, spec, NOW_TEXT)
    admin.pending = {"rc-broker-2": 7}
    first = await steps.drain_groups(context, seen, spec, plan, members_of(seen, 3, 0), NOW)
    assert admin.calls_of("set_write_permission") == [("set_write_permission", "rc-broker-2", False)]
    assert admin.calls_of("drain_progress") == [("drain_progress", "rc-broker-2"), ("drain_progress", "rc-broker-1")]
    assert first.records[2]["state"] == drain.WAITING and first.records[2]["pendingMessages"] == 7
    assert first.records[1]["state"] == drain.DRAINED
    assert [e[1] for e in first.events] == ["DrainStarted", "Drained"]
    assert first.waiting == ["rc-broker-2: draining, 7 messages pending"]
    # groups wanted again: write permission restored, and kept while a broker is unreachable
    grown = parse_spec({"broker": {"groups": 3, "replicasPerGroup": 0}})
    again = observed(groups=3, slaves=0, old_status={"drain": list(first.records.values())})
    admin.unreachable = {"rc-broker-1"}
    cancelled = await steps.drain_groups(context, again, grown, steps.plan_brokers(again, grown, NOW_TEXT),
                                         members_of(again, 3, 0), NOW)
    assert ("set_write_permission", "rc-broker-2", True) in admin.calls
    assert cancelled.events == [("Normal", "DrainCancelled", "rc-broker-2 is writable again")]
    assert list(cancelled.records) == [1] and cancelled.waiting == [
        "restoring write permission of rc-broker-1: rc-broker-1 unreachable"]


async def test_removing_step_unregisters_a_group_whose_pods_are_gone(ctx: tuple[steps.Context, FakeAdmin]) -> None:
    context, admin = ctx
    spec = parse_spec({"broker": {"groups": 1, "replicasPerGroup": 0}})
    seen = observed(groups=1, slaves=0, old_status={"drain": [record(1, drain.REMOVING)]})
    plan = steps.plan_brokers(seen, spec, NOW_TEXT)
    with_pods = members_of(seen, 2, 0)
    waiting = await steps.drain_groups(context, seen, spec, plan, with_pods, NOW)
    assert waiting.records == {1: record(1, drain.REMOVING)} and admin.calls_of("unregister") == []
    gone = members_of(seen, 1, 0)
    gone.registration.per_nameserver[FAKE_NAMESERVER]["rc-broker-1"] = {0: "rc-broker-1@master"}
    removed = await steps.drain_groups(context, seen, spec, plan, gone, NOW)
    assert removed.records == {} and admin.calls_of("unregister") == [("unregister", "rc-broker-1")]
    assert removed.events == [("Normal", "GroupRemoved", "rc-broker-1 removed")]


async def test_groups_step_copies_metadata_to_new_groups_and_creates_spec_topics(
        ctx: tuple[steps.Context, FakeAdmin]) -> None:
    context, admin = ctx
    spec = parse_spec({"broker": {"groups": 2}, "topics": [{"name": "T", "queues": 4}]})
    seen = observed(groups=0)
    plan = steps.plan_brokers(seen, spec, NOW_TEXT)
    members = members_of(seen, 2)
    first = await steps.sync_groups(context, seen, spec, plan, members)
    # group 0 is the first: nothing to copy from; group 1 copies from it in the same pass
    assert admin.calls_of("copy_metadata") == [("copy_metadata", "rc-broker-0", "rc-broker-1")]
    assert [g["metadataSynced"] for g in first.entries] == [True, True]
    assert [g["metadataSource"] for g in first.entries] == ["", "rc-broker-0"]
    assert first.events == [("Normal", "ScaledOut", "rc-broker-1: copied 3 topics and 1 subscription groups "
                                                    "from rc-broker-0")]
    assert admin.calls_of("create_topics") == [("create_topics", "rc-broker-0", (("T", 4, 6),)),
                                               ("create_topics", "rc-broker-1", (("T", 4, 6),))]
    # the next pass: nothing to copy, spec topics unchanged
    second_seen = observed(groups=2, old_status={"brokerGroups": first.entries})
    second = await steps.sync_groups(context, second_seen, spec, plan, members)
    assert second.entries == first.entries and second.events == [] and second.waiting == []
    assert len(admin.calls) == 3
    # a group added later copies from a synced, registered group
    third_spec = parse_spec({"broker": {"groups": 3}, "topics": [{"name": "T", "queues": 4}]})
    third_plan = steps.plan_brokers(second_seen, third_spec, NOW_TEXT)
    third = await steps.sync_groups(context, second_seen, third_spec, third_plan, members_of(second_seen, 3))
    assert admin.calls_of("copy_metadata")[-1] == ("copy_metadata", "rc-broker-0", "rc-broker-2")
    assert third.entries[2]["metadataSource"] == "rc-broker-0"
    admin.registered = {"rc-broker-0"}
    unregistered = steps.Members(**{**members.__dict__, "registration": await admin.registration(
        [FAKE_NAMESERVER], "rc")})
    fourth = await steps.sync_groups(context, second_seen, spec, plan, unregistered)
    assert fourth.waiting == ["rc-broker-1 is not registered in every NameServer yet"]


async def test_rollout_step_waits_for_lagging_slaves_without_deleting(ctx: tuple[steps.Context, FakeAdmin]) -> None:
    context, admin = ctx
    spec = parse_spec({"broker": {"groups": 2, "replicasPerGroup": 1, "failover": "Manual"}})
    seen = observed(groups=2)
    plan = steps.plan_brokers(seen, spec, NOW_TEXT)
    members = members_of(seen, 2)
    members.broker_pods = [rollout.PodView(p.name, p.broker_id, p.group, "old", True, False)
                           for p in members.broker_pods]
    groups = [group(0), group(1)]
    admin.caught_up = False
    part = await steps.roll_brokers(context, seen, spec, plan, members, groups)
    assert part.status == {"outdatedPods": ["rc-broker-slave-1-1", "rc-broker-slave-1-0", "rc-broker-master-1",
                                            "rc-broker-master-0"],
                           "waiting": "rc-broker-slave-1-0 has not caught up with its master"}
    assert part.waiting == ["rolling restart: rc-broker-slave-1-0 has not caught up with its master"]
    assert part.events == [] and part.unobserved == []
