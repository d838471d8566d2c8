"""spec.analytics on a real kube-apiserver: the operator's SparkApplications and ScheduledSparkApplications.

No Spark operator runs here. Its CRDs are our own schema of the two kinds
(``tests/k8s/fixtures/spark-operator-crds.yaml``); the tests do what the Spark
operator would do: write ``status`` through the status subresource, and create
the runs of a ScheduledSparkApplication (owned by it, labels copied).
The session's operator (kopf, ``tests/k8s/conftest.py``) reconciles for real.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.k8s import harness
from tests.k8s.harness import wait_for
from tests.k8s.test_operator import condition, create, get, patch, rkc, status

SPARK = ("sparkoperator.k8s.io", "v1beta2")
APPS, SCHEDULED = "sparkapplications", "scheduledsparkapplications"
JOBS_DIR = "/opt/rocket/lib/python3.11/site-packages/rocket/analytics/jobs"


@pytest.fixture
def spark_crds(api: Any) -> Iterator[None]:
    """Our SparkApplication / ScheduledSparkApplication CRDs, installed and served."""
    harness.install_spark_crds(api)
    yield


@pytest.fixture
def no_spark_crds(api: Any) -> Iterator[None]:
    """No sparkoperator.k8s.io/v1beta2 on the API server (the CRDs are installed again afterwards)."""
    harness.remove_spark_crds(api)
    yield
    harness.install_spark_crds(api)


def spark_get(api: Any, namespace: str, plural: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(*SPARK, namespace, plural, name)


def spark_list(api: Any, namespace: str, plural: str) -> dict[str, dict[str, Any]]:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(*SPARK, namespace, plural)["items"]
    return {o["metadata"]["name"]: o for o in items}


def spark_status(api: Any, namespace: str, plural: str, name: str, body: dict[str, Any]) -> None:
    """Write ``status`` as the Spark operator does (status subresource, merge patch)."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(*SPARK, namespace, plural, name,
                                                                       {"status": body})


def entry(api: Any, namespace: str, cluster: str, job: str) -> dict[str, Any]:
    return next((e for e in status(api, namespace, cluster).get("analytics") or [] if e["name"] == job), {})


def events(api: Any, namespace: str, name: str) -> list[Any]:
    return client.CoreV1Api(api).list_namespaced_event(namespace,
                                                       field_selector=f"involvedObject.name={name}").items


# -- CRD validation ----------------------------------------------------------------------------------

def _job(**fields: Any) -> dict[str, Any]:
    return {"name": "j", "job": "logs", "topics": ["loghub-HDFS"], **fields}


@pytest.mark.parametrize("jobs, message", [
    ([_job(job="wordcount")], r"spec.analytics.jobs*.job"),
    ([{"name": "j", "job": "logs"}], r"spec.analytics.jobs*.topics"),
    ([_job(topics=[])], r"spec.analytics.jobs*.topics"),
    ([_job(topics=["a,b"])], r"spec.analytics.jobs*.topics"),
    ([_job(), _job(job="traffic")], r"spec.analytics.jobs[1]"),
    ([_job(schedule="every day")], r"spec.analytics.jobs*.schedule"),
    ([_job(schedule="0 3 * *")], r"spec.analytics.jobs*.schedule"),
    ([_job(concurrencyPolicy="Sometimes")], r"spec.analytics.jobs*.concurrencyPolicy"),
    ([_job(resources={"driver": {"memory": "1Gi"}})], r"spec.analytics.jobs*.resources.driver.memory"),
    ([_job(resources={"executor": {"instances": 0}})], r"spec.analytics.jobs*.resources.executor.instances"),
    ([_job(name="Nightly")], r"spec.analytics.jobs*.name"),
    ([_job(output="relative/dir")], r"spec.analytics.jobs*.output"),
    ([_job(outputVolumeClaim="Results_1")], r"spec.analytics.jobs*.outputVolumeClaim"),
    ([_job(outputVolumeClaim="c" * 254)], r"spec.analytics.jobs*.outputVolumeClaim"),
], ids=["unknown-job", "no-topics", "empty-topics", "comma-in-topic", "duplicate-name", "not-cron",
        "four-fields", "concurrency", "k8s-memory", "no-executors", "name", "relative-output", "claim-name",
        "claim-too-long"])
def test_crd_refuses_invalid_analytics_jobs(api: Any, namespace: str, jobs: list[dict[str, Any]],
                                            message: str) -> None:
    with pytest.raises(ApiException) as info:
        create(api, namespace, rkc("bad", analytics={"jobs": jobs}))
    assert info.value.status == 422
    pattern = re.escape(message).replace(r"\*", r"(\[\d+\])?")
    assert re.search(pattern, info.value.body), info.value.body


def test_crd_refuses_an_invalid_analytics_output_claim(api: Any, namespace: str) -> None:
    with pytest.raises(ApiException) as info:
        create(api, namespace, rkc("bad", analytics={"outputVolumeClaim": "-results", "jobs": [_job()]}))
    assert info.value.status == 422 and "spec.analytics.outputVolumeClaim" in info.value.body, info.value.body


def test_crd_fills_analytics_defaults(api: Any, namespace: str) -> None:
    created = create(api, namespace, rkc("defaults", analytics={"jobs": [_job(schedule="@daily"), _job(name="k")]}))
    analytics = created["spec"]["analytics"]
    assert analytics["sparkVersion"] == "4.0.1"
    job = analytics["jobs"][0]
    assert job["suspend"] is False and job["concurrencyPolicy"] == "Forbid"
    assert job["resources"] == {"driver": {"cores": 1, "memory": "1g"},
                                "executor": {"cores": 1, "memory": "1g", "instances": 1}}


# -- the operator and the Spark operator's kinds -------------------------------------------------------

def test_analytics_jobs_become_spark_applications(api: Any, namespace: str, operator: Any,
                                                  spark_crds: None) -> None:
    cr = create(api, namespace, rkc("an", broker={"groups": 1, "replicasPerGroup": 0}, analytics={
        "serviceAccount": "spark",
        "jobs": [
            {"name": "nightly", "job": "logs", "topics": ["loghub-HDFS", "loghub-Spark"], "schedule": "0 3 * * *",
             "resources": {"executor": {"instances": 2, "memory": "2g"}}},
            {"name": "once", "job": "traffic", "topics": ["Orders"], "image": "registry.local/analytics:7"},
        ]}))
    uid = cr["metadata"]["uid"]
    nameserver = f"an-nameserver.{namespace}.svc:9876"

    scheduled = wait_for(lambda: spark_get(api, namespace, SCHEDULED, "an-nightly"), 20,
                         what="the ScheduledSparkApplication")
    once = wait_for(lambda: spark_get(api, namespace, APPS, "an-once"), 20, what="the SparkApplication")
    for obj in (scheduled, once):
        refs = obj["metadata"]["ownerReferences"]
        assert refs == [{"apiVersion": "rocket.dev/v1alpha1", "kind": "RocketCluster", "name": "an", "uid": uid,
                         "controller": True, "blockOwnerDeletion": True}]
        assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == "analytics"
    s = scheduled["spec"]
    assert s["schedule"] == "0 3 * * *" and s["suspend"] is False and s["concurrencyPolicy"] == "Forbid"
    t = s["template"]
    assert t["type"] == "Python" and t["mode"] == "cluster" and t["sparkVersion"] == "4.0.1"
    assert t["image"] == "rocketcluster/analytics:0.1.0"
    assert t["mainApplicationFile"] == f"local://{JOBS_DIR}/logs.py"
    assert t["arguments"] == ["--namesrv", nameserver, "--topics", "loghub-HDFS,loghub-Spark",
                              "--out", "/opt/spark/work-dir/analytics/nightly"]
    assert t["restartPolicy"] == {"type": "Never"}
    assert t["driver"]["serviceAccount"] == "spark" and t["driver"]["cores"] == 1
    assert t["executor"]["instances"] == 2 and t["executor"]["memory"] == "2g"
    assert t["driver"]["labels"]["rocket.dev/analytics-job"] == "nightly"
    for app_spec in (t, once["spec"]):  # no outputVolumeClaim: no volume, no mounts
        assert "volumes" not in app_spec
        assert app_spec["sparkConf"] == {"spark.sql.sources.partitionOverwriteMode": "dynamic"}
        assert "volumeMounts" not in app_spec["driver"] and "volumeMounts" not in app_spec["executor"]
    o = once["spec"]
    assert o["image"] == "registry.local/analytics:7" and o["mainApplicationFile"].endswith("/jobs/traffic.py")
    assert o["arguments"][:4] == ["--namesrv", nameserver, "--topics", "Orders"]
    assert o["restartPolicy"]["type"] == "OnFailure"

    # the Spark operator submits and runs the one-off job: the RocketCluster's status follows
    wait_for(lambda: status(api, namespace, "an").get("phase") == "Running", 45, what="Running")
    e = wait_for(lambda: (x := entry(api, namespace, "an", "once")).get("applicationState") == "NEW" and x, 20,
                 what="once NEW (no status from the Spark operator yet)")
    assert e["message"] == "waiting for the Spark operator"
    e = entry(api, namespace, "an", "nightly")
    assert "applicationState" not in e and e["message"] == "no run yet" and e["schedule"] == "0 3 * * *"
    for state in ("SUBMITTED", "RUNNING"):
        spark_status(api, namespace, APPS, "an-once", {"applicationState": {"state": state}, "submissionAttempts": 1})
        wait_for(lambda state=state: entry(api, namespace, "an", "once").get("applicationState") == state, 20,
                 what=f"status.analytics once {state}")
    spark_status(api, namespace, APPS, "an-once", {"applicationState": {"state": "COMPLETED"},
                                                   "terminationTime": "2026-01-02T03:04:05Z"})
    e = wait_for(lambda: (x := entry(api, namespace, "an", "once")).get("applicationState") == "COMPLETED" and x,
                 20, what="once COMPLETED")
    assert e["kind"] == "SparkApplication" and e["application"] == "an-once" and e["submissionAttempts"] == 1
    assert e["terminationTime"] == "2026-01-02T03:04:05Z"
    assert condition(status(api, namespace, "an"), "AnalyticsReady")["status"] == "True"

    # a scheduled run (made by the Spark operator: owned by the ScheduledSparkApplication) fails
    run = "an-nightly-1767323045000000000"
    client.CustomObjectsApi(api).create_namespaced_custom_object(*SPARK, namespace, APPS, {
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": run, "labels": {**scheduled["metadata"]["labels"],
                                             "sparkoperator.k8s.io/scheduled-app-name": "an-nightly"},
                     "ownerReferences": [{"apiVersion": "sparkoperator.k8s.io/v1beta2",
                                          "kind": "ScheduledSparkApplication", "name": "an-nightly",
                                          "uid": scheduled["metadata"]["uid"], "controller": True}]},
        "spec": t})
    spark_status(api, namespace, APPS, run, {"applicationState": {"state": "FAILED",
                                                                  "errorMessage": "driver exited with code 1"}})
    spark_status(api, namespace, SCHEDULED, "an-nightly", {
        "scheduleState": "Scheduled", "lastRun": "2026-01-02T03:00:00Z", "nextRun": "2026-01-03T03:00:00Z",
        "lastRunName": run, "pastFailedRunNames": [run]})
    e = wait_for(lambda: (x := entry(api, namespace, "an", "nightly")).get("applicationState") == "FAILED" and x,
                 20, what="the failed run in status")
    assert e["kind"] == "ScheduledSparkApplication" and e["lastRunName"] == run and e["scheduleState"] == "Scheduled"
    assert e["lastRun"] == "2026-01-02T03:00:00Z" and e["nextRun"] == "2026-01-03T03:00:00Z"
    assert e["message"] == "driver exited with code 1"
    cond = wait_for(lambda: (c := condition(status(api, namespace, "an"), "AnalyticsReady")).get("reason")
                    == "JobFailed" and c, 10, what="AnalyticsReady JobFailed")
    assert cond["status"] == "False" and "nightly: FAILED" in cond["message"]
    assert any(ev.reason == "JobFailed" and ev.type == "Warning" for ev in events(api, namespace, "an"))
    assert condition(status(api, namespace, "an"), "Ready")["status"] == "True"  # analytics never block the cluster
    assert run in spark_list(api, namespace, APPS)  # a run belongs to the Spark operator, never deleted by us

    # spec changes are applied; a job removed from the spec goes
    patch(api, namespace, "an", {"spec": {"analytics": {"jobs": [
        {"name": "once", "job": "traffic", "topics": ["Orders", "Payments"]}]}}})
    wait_for(lambda: spark_get(api, namespace, APPS, "an-once")["spec"]["arguments"][3] == "Orders,Payments", 20,
             what="arguments updated")
    assert spark_get(api, namespace, APPS, "an-once")["spec"]["image"] == "rocketcluster/analytics:0.1.0"
    wait_for(lambda: "an-nightly" not in spark_list(api, namespace, SCHEDULED), 20,
             what="the removed job's ScheduledSparkApplication deleted")
    wait_for(lambda: [e["name"] for e in status(api, namespace, "an").get("analytics") or []] == ["once"], 20,
             what="status.analytics without the removed job")
    assert any(ev.reason == "AnalyticsJobRemoved" for ev in events(api, namespace, "an"))

    # one-off -> scheduled: the SparkApplication is replaced by a ScheduledSparkApplication
    patch(api, namespace, "an", {"spec": {"analytics": {"jobs": [
        {"name": "once", "job": "traffic", "topics": ["Orders"], "schedule": "@every 30m", "suspend": True}]}}})
    wait_for(lambda: spark_get(api, namespace, SCHEDULED, "an-once")["spec"]["suspend"] is True, 20,
             what="the job now scheduled")
    wait_for(lambda: "an-once" not in spark_list(api, namespace, APPS), 20, what="its SparkApplication deleted")

    # a SparkApplication deleted behind the operator's back is created again
    patch(api, namespace, "an", {"spec": {"analytics": {"jobs": [
        {"name": "again", "job": "logs", "topics": ["loghub-HDFS"]}]}}})
    first = wait_for(lambda: spark_get(api, namespace, APPS, "an-again"), 20, what="an-again")
    client.CustomObjectsApi(api).delete_namespaced_custom_object(*SPARK, namespace, APPS, "an-again")
    wait_for(lambda: (o := spark_list(api, namespace, APPS).get("an-again")) is not None
             and o["metadata"]["uid"] != first["metadata"]["uid"], 20, what="an-again created again")

    # deleting the RocketCluster garbage-collects what it owns
    client.CustomObjectsApi(api).delete_namespaced_custom_object("rocket.dev", "v1alpha1", namespace,
                                                                 "rocketclusters", "an")
    wait_for(lambda: not spark_list(api, namespace, SCHEDULED) and "an-again" not in spark_list(api, namespace, APPS),
             60, what="garbage collection of the Spark objects")


def _volume(claim: str) -> list[dict[str, Any]]:
    return [{"name": "analytics-output", "persistentVolumeClaim": {"claimName": claim}}]


def _mounts(path: str) -> list[dict[str, Any]]:
    return [{"name": "analytics-output", "mountPath": path}]


def test_output_claim_is_mounted_in_driver_and_executors(api: Any, namespace: str, operator: Any,
                                                         spark_crds: None) -> None:
    """spec.analytics.outputVolumeClaim (and a job's own) become spec.volumes + driver/executor volumeMounts,
    kept by the API server (our schema of the kinds declares them); removing the claim removes them."""
    create(api, namespace, rkc("out", broker={"groups": 1, "replicasPerGroup": 0}, analytics={
        "outputVolumeClaim": "analytics-results",
        "jobs": [
            {"name": "nightly", "job": "logs", "topics": ["loghub-HDFS"], "schedule": "0 3 * * *"},
            {"name": "once", "job": "traffic", "topics": ["Orders"], "outputVolumeClaim": "traffic.v1",
             "output": "/data/reports/once"},
        ]}))
    scheduled = wait_for(lambda: spark_get(api, namespace, SCHEDULED, "out-nightly"), 30,
                         what="the ScheduledSparkApplication")
    once = wait_for(lambda: spark_get(api, namespace, APPS, "out-once"), 30, what="the SparkApplication")
    assert "volumes" not in scheduled["spec"]
    t = scheduled["spec"]["template"]
    assert t["volumes"] == _volume("analytics-results")
    assert t["driver"]["volumeMounts"] == t["executor"]["volumeMounts"] == _mounts("/opt/spark/work-dir/analytics")
    assert t["arguments"][-2:] == ["--out", "/opt/spark/work-dir/analytics/nightly"]
    assert t["sparkConf"] == {"spark.sql.sources.partitionOverwriteMode": "dynamic"}
    o = once["spec"]
    assert o["volumes"] == _volume("traffic.v1")
    assert o["driver"]["volumeMounts"] == o["executor"]["volumeMounts"] == _mounts("/data/reports")
    assert o["arguments"][-2:] == ["--out", "/data/reports/once"]
    # the driver/executor fields the other tests check are still there next to the mounts
    assert o["executor"]["instances"] == 1 and o["driver"]["labels"]["rocket.dev/analytics-job"] == "once"

    # the cluster-wide claim goes: the scheduled job's volume and mounts go with it, the one-off keeps its own
    patch(api, namespace, "out", {"spec": {"analytics": {"outputVolumeClaim": None}}})
    t = wait_for(lambda: "volumes" not in (x := spark_get(api, namespace, SCHEDULED, "out-nightly")["spec"]["template"])
                 and x, 20, what="the volume removed from the template")
    assert "volumeMounts" not in t["driver"] and "volumeMounts" not in t["executor"]
    assert t["sparkConf"] == {"spark.sql.sources.partitionOverwriteMode": "dynamic"}  # kept: never emptied
    assert spark_get(api, namespace, APPS, "out-once")["spec"]["volumes"] == _volume("traffic.v1")

    # an output that does not end in the job's name, with a claim: the operator refuses the spec
    patch(api, namespace, "out", {"spec": {"analytics": {"jobs": [
        {"name": "once", "job": "traffic", "topics": ["Orders"], "outputVolumeClaim": "traffic.v1",
         "output": "/data/reports/shared"}]}}})
    st = wait_for(lambda: (x := status(api, namespace, "out")).get("phase") == "Invalid" and x, 20,
                  what="phase Invalid")
    assert "spec.analytics.jobs[0].output must end in /once" in condition(st, "Ready")["message"]
    assert spark_get(api, namespace, APPS, "out-once")["spec"]["arguments"][-1] == "/data/reports/once"


def test_invalid_schedule_is_reported_and_the_rest_goes_on(api: Any, namespace: str, operator: Any,
                                                          spark_crds: None) -> None:
    create(api, namespace, rkc("cron", broker={"groups": 1, "replicasPerGroup": 0}, analytics={"jobs": [
        {"name": "good", "job": "traffic", "topics": ["Orders"], "schedule": "*/15 * * * MON-FRI"},
        {"name": "bad", "job": "logs", "topics": ["loghub-HDFS"], "schedule": "61 * * * *"}]}))
    st = wait_for(lambda: (s := status(api, namespace, "cron")).get("phase") == "Running"
                  and condition(s, "AnalyticsReady").get("reason") == "InvalidJob" and s, 45,
                  what="Running, with the bad schedule reported")
    cond = condition(st, "AnalyticsReady")
    assert cond["status"] == "False" and "bad: schedule '61 * * * *': minute 61 is outside 0-59" in cond["message"]
    assert condition(st, "Ready")["status"] == "True"
    assert "cron-good" in spark_list(api, namespace, SCHEDULED)
    assert "cron-bad" not in spark_list(api, namespace, SCHEDULED)
    bad = entry(api, namespace, "cron", "bad")
    assert "minute 61" in bad["message"] and "applicationState" not in bad
    assert any(ev.reason == "InvalidJob" and ev.type == "Warning" for ev in events(api, namespace, "cron"))
    patch(api, namespace, "cron", {"spec": {"analytics": {"jobs": [
        {"name": "good", "job": "traffic", "topics": ["Orders"], "schedule": "*/15 * * * MON-FRI"},
        {"name": "bad", "job": "logs", "topics": ["loghub-HDFS"], "schedule": "1 * * * *"}]}}})
    wait_for(lambda: "cron-bad" in spark_list(api, namespace, SCHEDULED), 20, what="the fixed job applied")
    wait_for(lambda: condition(status(api, namespace, "cron"), "AnalyticsReady").get("status") == "True", 20,
             what="AnalyticsReady True")


def test_without_the_spark_operator_the_cluster_still_reconciles(api: Any, namespace: str, operator: Any,
                                                                no_spark_crds: None) -> None:
    create(api, namespace, rkc("nospark", broker={"groups": 1, "replicasPerGroup": 0}, analytics={"jobs": [
        {"name": "once", "job": "traffic", "topics": ["Orders"]}]}))
    st = wait_for(lambda: (s := status(api, namespace, "nospark")).get("phase") == "Running"
                  and condition(s, "AnalyticsReady") and s, 45, what="Running with an AnalyticsReady condition")
    cond = condition(st, "AnalyticsReady")
    assert cond["status"] == "False" and cond["reason"] == "SparkOperatorMissing"
    assert "sparkoperator.k8s.io/v1beta2 is not served" in cond["message"]
    assert "install the Spark operator" in cond["message"]
    assert condition(st, "Ready")["status"] == "True"
    assert st["analytics"][0]["name"] == "once" and "not served" in st["analytics"][0]["message"]
    client.AppsV1Api(api).read_namespaced_stateful_set("nospark-broker-master", namespace)
    assert any(ev.reason == "SparkOperatorMissing" for ev in events(api, namespace, "nospark"))

    # the Spark operator arrives: the job is created without anything else being touched
    harness.install_spark_crds(api)
    wait_for(lambda: spark_get(api, namespace, APPS, "nospark-once"), 30, what="the SparkApplication, late")
    wait_for(lambda: condition(status(api, namespace, "nospark"), "AnalyticsReady").get("status") == "True", 20,
             what="AnalyticsReady True")
    spark_status(api, namespace, APPS, "nospark-once", {"applicationState": {"state": "RUNNING"}})
    wait_for(lambda: entry(api, namespace, "nospark", "once").get("applicationState") == "RUNNING", 20,
             what="status follows the late SparkApplication")
    assert get(api, namespace, "nospark")["status"]["phase"] == "Running"


# -- the operator's own watch of the Spark kinds ----------------------------------------------------

def _app(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": name, "labels": labels},
            "spec": {"type": "Python", "sparkVersion": "4.0.1", "mode": "cluster"}}


async def test_spark_watch_follows_changes_and_ends_when_the_kinds_go(api: Any, namespace: str,
                                                                     spark_crds: None) -> None:
    import asyncio

    import kopf

    from rocket_operator.kube import Credentials, KubeClient
    from rocket_operator.watch import SparkWatch

    objects = client.CustomObjectsApi(api)
    ours = {"app.kubernetes.io/component": "analytics", "app.kubernetes.io/managed-by": "rocket-operator"}
    kube = KubeClient(Credentials.from_connection_info(kopf.login_with_kubeconfig(settings=kopf.OperatorSettings())))
    changes: list[tuple[str, str]] = []
    # 2 s per watch request: the stream is ended by the API server and re-opened during the test
    w = SparkWatch(kube, lambda ns, cluster: changes.append((ns, cluster)), retry_seconds=0.2, timeout_seconds=2)

    async def touched(name: str, cluster: str, seconds: float = 20.0) -> None:
        """Annotate ``name`` again and again until a change of ``cluster`` is reported."""
        changes.clear()
        deadline = asyncio.get_running_loop().time() + seconds
        n = 0
        while (namespace, cluster) not in changes:
            assert asyncio.get_running_loop().time() < deadline, f"no change of {cluster} reported: {changes}"
            n += 1
            await asyncio.to_thread(objects.patch_namespaced_custom_object, *SPARK, namespace, APPS, name,
                                    {"metadata": {"annotations": {"touch": str(n)}}})
            await asyncio.sleep(0.3)

    try:
        await asyncio.to_thread(objects.create_namespaced_custom_object, *SPARK, namespace, APPS,
                                _app("mine", {**ours, "rocket.dev/cluster": "c1"}))
        await asyncio.to_thread(objects.create_namespaced_custom_object, *SPARK, namespace, APPS,
                                _app("foreign", {"rocket.dev/cluster": "c2"}))
        w.ensure(namespace)
        assert w.watching() == {(namespace, "SparkApplication"), (namespace, "ScheduledSparkApplication")}
        await touched("mine", "c1")
        await asyncio.sleep(3.0)  # past timeoutSeconds: the watch was re-opened from the last version seen
        await touched("mine", "c1")
        for n in range(3):  # an object without the operator's labels is not reported
            await asyncio.to_thread(objects.patch_namespaced_custom_object, *SPARK, namespace, APPS, "foreign",
                                    {"metadata": {"annotations": {"touch": str(n)}}})
        await asyncio.sleep(1.0)
        assert (namespace, "c2") not in changes

        # the Spark operator is uninstalled: both watches end by themselves, without an error
        tasks = list(w._tasks.values())
        await asyncio.to_thread(harness.remove_spark_crds, api)
        for _ in range(100):
            if not w.watching():
                break
            await asyncio.sleep(0.2)
        assert not w.watching()
        assert all(t.done() and t.exception() is None for t in tasks)

        # installed again: a new ensure() watches again
        await asyncio.to_thread(harness.install_spark_crds, api)
        await asyncio.to_thread(objects.create_namespaced_custom_object, *SPARK, namespace, APPS,
                                _app("mine", {**ours, "rocket.dev/cluster": "c3"}))
        w.ensure(namespace)
        await touched("mine", "c3")
    finally:
        await w.close()
        await kube.close()
        await asyncio.to_thread(harness.install_spark_crds, api)


def test_operator_survives_the_spark_operator_going_away(api: Any, namespace: str, operator: Any,
                                                        spark_crds: None) -> None:
    from rocket_operator import handlers

    create(api, namespace, rkc("gone", broker={"groups": 1, "replicasPerGroup": 0}, analytics={"jobs": [
        {"name": "once", "job": "traffic", "topics": ["Orders"]}]}))
    wait_for(lambda: spark_get(api, namespace, APPS, "gone-once"), 30, what="the SparkApplication")
    wait_for(lambda: (namespace, "SparkApplication") in handlers.state().spark.watching(), 20,
             what="the operator watching SparkApplications in the namespace")
    try:
        harness.remove_spark_crds(api)
        wait_for(lambda: condition(status(api, namespace, "gone"), "AnalyticsReady").get("reason")
                 == "SparkOperatorMissing", 30, what="AnalyticsReady SparkOperatorMissing")
        assert (namespace, "SparkApplication") not in handlers.state().spark.watching()
        assert operator.runner.alive()
        # the operator still serves clusters
        create(api, namespace, rkc("after", broker={"groups": 1, "replicasPerGroup": 0}))
        wait_for(lambda: status(api, namespace, "after").get("phase") == "Running", 45, what="a new cluster Running")
    finally:
        harness.install_spark_crds(api)
    # back: the job is created again, watched again, and its status followed again
    wait_for(lambda: spark_get(api, namespace, APPS, "gone-once"), 30, what="the SparkApplication again")
    wait_for(lambda: (namespace, "SparkApplication") in handlers.state().spark.watching(), 20,
             what="watching again")
    spark_status(api, namespace, APPS, "gone-once", {"applicationState": {"state": "RUNNING"}})
    wait_for(lambda: entry(api, namespace, "gone", "once").get("applicationState") == "RUNNING", 20,
             what="status follows the SparkApplication again")
    assert operator.runner.alive()
