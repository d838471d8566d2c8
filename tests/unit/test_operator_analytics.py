"""The operator's analytics jobs, pure parts: spec parsing, names, SparkApplication manifests, cron checks,
status entries and the AnalyticsReady condition (the API-server side is tests/k8s/test_analytics.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rocket_operator import analytics, builders, handlers, names
from rocket_operator import spec as spec_module
from rocket_operator.builders import Owner
from rocket_operator.settings import OperatorSettings
from rocket_operator.spec import SpecError, output_mount, parse_spec

OWNER = Owner(namespace="prod", name="rc", uid="uid-1")
ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "rocketclusters.yaml"
SPARK_CRDS = ROOT / "tests" / "k8s" / "fixtures" / "spark-operator-crds.yaml"


def jobs_spec(*jobs: dict[str, Any], **analytics_fields: Any) -> Any:
    return parse_spec({"analytics": {"jobs": list(jobs), **analytics_fields}})


# -- spec ------------------------------------------------------------------------------------------

def test_analytics_defaults_match_the_crd() -> None:
    spec = jobs_spec({"name": "n", "job": "logs", "topics": ["A"]})
    job = spec.analytics.jobs[0]
    assert job.schedule is None and not job.suspend and job.concurrency_policy == "Forbid"
    assert (job.driver.cores, job.driver.memory) == (1, "1g")
    assert (job.executor.cores, job.executor.memory, job.executor.instances) == (1, "1g", 1)
    crd = yaml.safe_load(CRD.read_text())
    an = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["analytics"]
    assert an["properties"]["sparkVersion"]["default"] == spec.analytics.spark_version
    item = an["properties"]["jobs"]["items"]["properties"]
    assert item["job"]["enum"] == ["traffic", "logs"]
    assert item["concurrencyPolicy"]["default"] == job.concurrency_policy
    executor = item["resources"]["properties"]["executor"]["properties"]
    assert executor["instances"]["default"] == job.executor.instances
    assert executor["memory"]["default"] == job.executor.memory and executor["cores"]["default"] == job.executor.cores


@pytest.mark.parametrize("jobs, field", [
    ([{"name": "n", "job": "wordcount", "topics": ["A"]}], r"spec.analytics.jobs[0].job"),
    ([{"name": "n", "job": "logs"}], r"spec.analytics.jobs[0].topics"),
    ([{"name": "n", "job": "logs", "topics": ["a,b"]}], r"spec.analytics.jobs[0].topics[0]"),
    ([{"name": "n", "job": "logs", "topics": ["A"]}, {"name": "n", "job": "traffic", "topics": ["A"]}],
     r"spec.analytics.jobs[1].name"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "resources": {"driver": {"memory": "1Gi"}}}],
     r"spec.analytics.jobs[0].resources.driver.memory"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "resources": {"executor": {"instances": 0}}}],
     r"spec.analytics.jobs[0].resources.executor.instances"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "concurrencyPolicy": "Never"}],
     r"spec.analytics.jobs[0].concurrencyPolicy"),
    ([{"name": "x" * 41, "job": "logs", "topics": ["A"]}], r"spec.analytics.jobs[0].name"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "output": "out/dir"}], r"spec.analytics.jobs[0].output"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "outputVolumeClaim": "Results"}],
     r"spec.analytics.jobs[0].outputVolumeClaim"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "outputVolumeClaim": "my_claim"}],
     r"spec.analytics.jobs[0].outputVolumeClaim"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "outputVolumeClaim": "a" * 254}],
     r"spec.analytics.jobs[0].outputVolumeClaim"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "outputVolumeClaim": "-claim"}],
     r"spec.analytics.jobs[0].outputVolumeClaim"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "outputVolumeClaim": 7}],
     r"spec.analytics.jobs[0].outputVolumeClaim"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "outputVolumeClaim": "c", "output": "/data/other"}],
     r"spec.analytics.jobs[0].output must end in /n"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "outputVolumeClaim": "c", "output": "/n"}],
     r"spec.analytics.jobs[0].output"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "outputVolumeClaim": "c", "output": "/opt/n"}],
     r"spec.analytics.jobs[0].output"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "outputVolumeClaim": "c", "output": "/opt/spark/n"}],
     r"spec.analytics.jobs[0].output"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "outputVolumeClaim": "c", "output": "/data/../tmp/n"}],
     r"spec.analytics.jobs[0].output"),
    ([{"name": "n", "job": "traffic", "topics": ["A"], "logFormat": "HDFS"}], r"spec.analytics.jobs[0]: logFormat"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "logFormat": "<Date> <Time>"}],
     r"spec.analytics.jobs[0].logFormat"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "follow": True, "schedule": "@daily"}],
     r"spec.analytics.jobs[0]: a follow job"),
    ([{"name": "n", "job": "traffic", "topics": ["A"], "follow": True}], r"spec.analytics.jobs[0]: logFormat"),
    ([{"name": "n", "job": "logs", "topics": ["A"], "eventsTopic": "bad topic"}],
     r"spec.analytics.jobs[0].eventsTopic"),
])
def test_parse_spec_refuses_bad_jobs(jobs: list[dict[str, Any]], field: str) -> None:
    with pytest.raises(SpecError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_spec({"analytics": {"jobs": jobs}})


def test_bad_analytics_level_claim_is_refused() -> None:
    with pytest.raises(SpecError, match=r"spec\.analytics\.outputVolumeClaim must be a PersistentVolumeClaim name"):
        jobs_spec({"name": "n", "job": "logs", "topics": ["A"]}, outputVolumeClaim="UPPER")
    # without a job the claim is still checked (the CRD's pattern would refuse it too)
    with pytest.raises(SpecError, match=r"spec\.analytics\.outputVolumeClaim"):
        jobs_spec(outputVolumeClaim="a..b")


def test_output_claim_job_overrides_the_analytics_default() -> None:
    spec = jobs_spec({"name": "a", "job": "logs", "topics": ["T"]},
                     {"name": "b", "job": "logs", "topics": ["T"], "outputVolumeClaim": "b-results.v1"},
                     {"name": "c", "job": "logs", "topics": ["T"], "output": "/data/reports/c"},
                     outputVolumeClaim="shared")
    assert spec.analytics.output_volume_claim == "shared"
    assert [j.output_volume_claim for j in spec.analytics.jobs] == ["shared", "b-results.v1", "shared"]
    bare = jobs_spec({"name": "a", "job": "logs", "topics": ["T"], "output": "/anywhere"})
    assert bare.analytics.output_volume_claim is None and bare.analytics.jobs[0].output_volume_claim is None
    for empty in ("", None):  # the same as absent
        assert jobs_spec({"name": "a", "job": "logs", "topics": ["T"], "outputVolumeClaim": empty},
                         outputVolumeClaim=empty).analytics.jobs[0].output_volume_claim is None


def test_output_mount_is_the_parent_of_the_output() -> None:
    assert output_mount("/opt/spark/work-dir/analytics/nightly") == "/opt/spark/work-dir/analytics"
    assert output_mount("/data//reports/nightly/") == "/data/reports"
    for bad in ("/nightly", "/opt/nightly", "/opt/spark/nightly", "/usr/nightly", "/tmp/nightly", "/a/./n"):
        with pytest.raises(SpecError):
            output_mount(bad)


def test_claim_field_matches_the_crd() -> None:
    crd = yaml.safe_load(CRD.read_text())
    an = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["analytics"]
    job_props = an["properties"]["jobs"]["items"]["properties"]
    for field in (an["properties"]["outputVolumeClaim"], job_props["outputVolumeClaim"]):
        assert field["type"] == "string" and field["maxLength"] == 253
        assert field["pattern"] == spec_module._SUBDOMAIN_RE.pattern
    for name in ("results", "a.b-c.d1", "0"):
        assert jobs_spec({"name": "n", "job": "logs", "topics": ["T"], "outputVolumeClaim": name})


# -- names -----------------------------------------------------------------------------------------

def test_application_names_fit_what_the_spark_operator_derives_from_them() -> None:
    assert names.analytics_application("rc", "nightly", scheduled=True) == "rc-nightly"
    cluster, job = "c" * 36, "j" * 40
    one_off = names.analytics_application(cluster, job, scheduled=False)
    scheduled = names.analytics_application(cluster, job, scheduled=True)
    assert len(one_off) == 56 and len(one_off + "-ui-svc") <= 63
    assert len(scheduled) == 36 and len(scheduled + "-1767323045000000000-ui-svc") <= 63
    assert one_off != names.analytics_application(cluster, "j" * 39 + "k", scheduled=False)
    assert one_off == names.analytics_application(cluster, job, scheduled=False)  # stable


# -- manifests -------------------------------------------------------------------------------------

def test_one_off_job_is_a_spark_application() -> None:
    spec = parse_spec({"imagePullPolicy": "Always", "analytics": {"jobs": [
        {"name": "once", "job": "traffic", "topics": ["Orders", "Payments"], "output": "/data/traffic",
         "resources": {"driver": {"cores": 2, "memory": "2g"}, "executor": {"instances": 3, "memory": "4g"}}}]}})
    app = builders.build_analytics_application(OWNER, spec, spec.analytics.jobs[0])
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2" and app["kind"] == "SparkApplication"
    meta = app["metadata"]
    assert meta["name"] == "rc-once" and meta["namespace"] == "prod"
    assert meta["ownerReferences"] == [OWNER.reference()]
    assert meta["labels"][names.LABEL_COMPONENT] == "analytics" and meta["labels"][names.LABEL_ANALYTICS_JOB] == "once"
    s = app["spec"]
    assert s["type"] == "Python" and s["mode"] == "cluster" and s["sparkVersion"] == "4.0.1"
    assert s["image"] == builders.DEFAULT_ANALYTICS_IMAGE and s["imagePullPolicy"] == "Always"
    assert s["mainApplicationFile"] == "local:///opt/rocket/lib/python3.11/site-packages/rocket/analytics/jobs/traffic.py"
    assert s["arguments"] == ["--namesrv", "rc-nameserver.prod.svc:9876", "--topics", "Orders,Payments",
                              "--out", "/data/traffic"]
    assert s["restartPolicy"]["type"] == "OnFailure" and s["restartPolicy"]["onFailureRetries"] == 2
    assert {k: s["driver"][k] for k in ("cores", "memory")} == {"cores": 2, "memory": "2g"}
    assert "instances" not in s["driver"] and "serviceAccount" not in s["driver"]
    assert {k: s["executor"][k] for k in ("cores", "memory", "instances")} == {"cores": 1, "memory": "4g",
                                                                                "instances": 3}
    assert s["driver"]["labels"] == s["executor"]["labels"] == meta["labels"]


def test_scheduled_job_is_a_scheduled_spark_application_with_the_same_template() -> None:
    spec = jobs_spec({"name": "nightly", "job": "logs", "topics": ["loghub-HDFS"], "schedule": "0 3 * * *",
                      "suspend": True, "concurrencyPolicy": "Replace"},
                     image="registry.local/analytics:1", serviceAccount="spark", imagePullPolicy="Never")
    job = spec.analytics.jobs[0]
    app = builders.build_analytics_application(OWNER, spec, job, default_image="ignored:1")
    assert app["kind"] == "ScheduledSparkApplication" and app["metadata"]["name"] == "rc-nightly"
    s = app["spec"]
    assert (s["schedule"], s["suspend"], s["concurrencyPolicy"]) == ("0 3 * * *", True, "Replace")
    assert s["successfulRunHistoryLimit"] == 3 and s["failedRunHistoryLimit"] == 3
    t = s["template"]
    assert t == builders.spark_application_spec(OWNER, spec, job, "ignored:1")
    assert t["image"] == "registry.local/analytics:1" and t["imagePullPolicy"] == "Never"
    assert t["driver"]["serviceAccount"] == "spark" and t["restartPolicy"] == {"type": "Never"}
    assert t["arguments"][-2:] == ["--out", "/opt/spark/work-dir/analytics/nightly"]


def test_image_precedence_job_then_spec_then_operator() -> None:
    spec = jobs_spec({"name": "a", "job": "logs", "topics": ["T"], "image": "job:1"},
                     {"name": "b", "job": "logs", "topics": ["T"]}, image="spec:1")
    a, b = (builders.build_analytics_application(OWNER, spec, j, "operator:1") for j in spec.analytics.jobs)
    assert a["spec"]["image"] == "job:1" and b["spec"]["image"] == "spec:1"
    bare = jobs_spec({"name": "c", "job": "logs", "topics": ["T"]})
    c = builders.build_analytics_application(OWNER, bare, bare.analytics.jobs[0], "operator:1")
    assert c["spec"]["image"] == "operator:1"
    assert OperatorSettings.from_env({"ROCKET_OPERATOR_ANALYTICS_IMAGE": "mine:2"}).analytics_image == "mine:2"
    assert OperatorSettings.from_env({}).analytics_image == builders.DEFAULT_ANALYTICS_IMAGE


def test_job_modules_exist_where_the_manifest_points() -> None:
    """mainApplicationFile names rocket/analytics/jobs/<job>.py; each is runnable as __main__."""
    for job in ("traffic", "logs"):
        module = ROOT / "services" / "rocket" / "analytics" / "jobs" / f"{job}.py"
        assert module.exists() and 'if __name__ == "__main__":' in module.read_text()
    dockerfile = (ROOT / "images" / "analytics" / "Dockerfile").read_text()
    assert "python3.11 -m venv /opt/rocket" in dockerfile  # => /opt/rocket/lib/python3.11/site-packages/rocket


def _fields(schema: dict[str, Any], value: Any, where: str = "spec") -> list[str]:
    """Paths in ``value`` that ``schema`` (a structural schema) does not declare (they would be pruned)."""
    if isinstance(value, dict) and schema.get("type") == "object":
        props, extra = schema.get("properties"), schema.get("additionalProperties")
        out = []
        for key, item in value.items():
            if props is not None and key in props:
                out += _fields(props[key], item, f"{where}.{key}")
            elif extra is not None:
                out += _fields(extra, item, f"{where}.{key}")
            else:
                out.append(f"{where}.{key}")
        return out
    if isinstance(value, list) and schema.get("type") == "array":
        return [p for i, v in enumerate(value) for p in _fields(schema["items"], v, f"{where}[{i}]")]
    return []


def test_manifests_use_only_fields_of_the_spark_operator_schema() -> None:
    crds = {c["spec"]["names"]["kind"]: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
            for c in yaml.safe_load(SPARK_CRDS.read_text())["items"]}
    spec = jobs_spec({"name": "a", "job": "logs", "topics": ["T"], "schedule": "@daily"},
                     {"name": "b", "job": "traffic", "topics": ["T"]},
                     {"name": "c", "job": "logs", "topics": ["T"], "schedule": "@daily", "outputVolumeClaim": "out"},
                     {"name": "d", "job": "traffic", "topics": ["T"], "outputVolumeClaim": "out"},
                     serviceAccount="spark")
    for job in spec.analytics.jobs:
        app = builders.build_analytics_application(OWNER, spec, job)
        assert _fields(crds[app["kind"]]["properties"]["spec"], app["spec"]) == []
        if job.output_volume_claim:  # the volume fields are declared, not pruned
            template = app["spec"].get("template", app["spec"])
            assert template["volumes"] and template["driver"]["volumeMounts"] and template["executor"]["volumeMounts"]
        template = app["spec"].get("template", app["spec"])
        assert template["type"] in crds["SparkApplication"]["properties"]["spec"]["properties"]["type"]["enum"]


def test_output_claim_becomes_a_volume_mounted_in_driver_and_executors() -> None:
    spec = jobs_spec({"name": "nightly", "job": "logs", "topics": ["T"], "schedule": "@daily"},
                     {"name": "once", "job": "traffic", "topics": ["T"], "output": "/data/reports/once",
                      "outputVolumeClaim": "own"},
                     outputVolumeClaim="analytics-results")
    nightly, once = (builders.build_analytics_application(OWNER, spec, j) for j in spec.analytics.jobs)
    t = nightly["spec"]["template"]
    assert "volumes" not in nightly["spec"]  # ScheduledSparkApplication: only inside the template
    assert t["volumes"] == [{"name": "analytics-output", "persistentVolumeClaim": {"claimName": "analytics-results"}}]
    mount = [{"name": "analytics-output", "mountPath": "/opt/spark/work-dir/analytics"}]
    assert t["driver"]["volumeMounts"] == t["executor"]["volumeMounts"] == mount
    assert t["arguments"][-2:] == ["--out", "/opt/spark/work-dir/analytics/nightly"]  # <mount>/<job name>
    assert t["sparkConf"] == {"spark.sql.sources.partitionOverwriteMode": "dynamic"}
    s = once["spec"]
    assert s["volumes"] == [{"name": "analytics-output", "persistentVolumeClaim": {"claimName": "own"}}]
    assert s["driver"]["volumeMounts"] == s["executor"]["volumeMounts"] == [
        {"name": "analytics-output", "mountPath": "/data/reports"}]
    assert s["arguments"][-2:] == ["--out", "/data/reports/once"]


def test_without_a_claim_there_is_no_volume() -> None:
    spec = jobs_spec({"name": "a", "job": "logs", "topics": ["T"], "schedule": "@daily"},
                     {"name": "b", "job": "traffic", "topics": ["T"], "output": "/anywhere"})
    for job in spec.analytics.jobs:
        app = builders.build_analytics_application(OWNER, spec, job)
        t = app["spec"].get("template", app["spec"])
        assert "volumes" not in t
        assert t["sparkConf"] == {"spark.sql.sources.partitionOverwriteMode": "dynamic"}  # with or without a claim
        assert "volumeMounts" not in t["driver"] and "volumeMounts" not in t["executor"]
        assert builders.analytics_output_volume(job) is None


# -- cron --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("expr", ["0 3 * * *", "*/15 * * * MON-FRI", "0-5/2,30 0 1,15 JAN-mar ?", "@daily",
                                  "@midnight", "@every 1h30m", "@every 90s", "59 23 31 12 6"])
def test_cron_accepts_what_the_spark_operator_accepts(expr: str) -> None:
    assert analytics.cron_error(expr) is None


@pytest.mark.parametrize("expr, why", [
    ("61 * * * *", "minute 61 is outside 0-59"),
    ("0 24 * * *", "hour 24 is outside 0-23"),
    ("0 0 0 * *", "day of month 0 is outside 1-31"),
    ("0 0 * 13 *", "month 13 is outside 1-12"),
    ("0 0 * * 7", "day of week 7 is outside 0-6"),
    ("0 0 * * FUN", "day of week 'FUN' is not a number or a name"),
    ("5-1 * * * *", "minute range '5-1' runs backwards"),
    ("*/0 * * * *", "minute step '0' must be a positive number"),
    ("0 3 * * * *", "6 fields instead of 5"),
    ("@reboot", "unknown descriptor '@reboot'"),
    ("@every soon", "@every needs a positive duration"),
])
def test_cron_refuses_with_a_reason(expr: str, why: str) -> None:
    error = analytics.cron_error(expr)
    assert error is not None and why in error


# -- status ------------------------------------------------------------------------------------------

def test_job_status_of_one_off_and_scheduled_jobs() -> None:
    spec = jobs_spec({"name": "once", "job": "traffic", "topics": ["T"]},
                     {"name": "nightly", "job": "logs", "topics": ["T"], "schedule": "@daily"})
    once, nightly = spec.analytics.jobs
    assert analytics.job_status("rc", once, None)["message"].startswith("SparkApplication created")
    fresh = analytics.job_status("rc", once, {"metadata": {}})
    assert fresh["applicationState"] == "NEW" and fresh["message"] == "waiting for the Spark operator"
    failed = analytics.job_status("rc", once, {"status": {"applicationState": {"state": "FAILED",
                                                                               "errorMessage": "boom"}}})
    assert (failed["applicationState"], failed["message"], failed["kind"]) == ("FAILED", "boom", "SparkApplication")
    sched = {"status": {"scheduleState": "Scheduled", "lastRunName": "rc-nightly-1", "lastRun": "t1", "nextRun": "t2"}}
    run = {"status": {"applicationState": {"state": "COMPLETED"}}}
    e = analytics.job_status("rc", nightly, sched, run)
    assert e["kind"] == "ScheduledSparkApplication" and e["application"] == "rc-nightly"
    assert (e["applicationState"], e["lastRunName"], e["lastRun"], e["nextRun"]) == ("COMPLETED", "rc-nightly-1",
                                                                                    "t1", "t2")
    assert "gone" in analytics.job_status("rc", nightly, sched, None)["message"]
    refused = analytics.job_status("rc", nightly, {"status": {"scheduleState": "FailedValidation", "reason": "bad"}})
    assert refused["message"] == "bad" and analytics.job_failed(refused)
    invalid = analytics.job_status("rc", nightly, None, invalid="schedule: nope")
    assert invalid["message"] == "schedule: nope" and "applicationState" not in invalid


def test_analytics_condition() -> None:
    ok = [{"name": "a", "applicationState": "RUNNING"}, {"name": "b", "scheduleState": "Scheduled"}]
    cond = analytics.analytics_condition(ok, {})
    assert (cond["type"], cond["status"], cond["reason"]) == ("AnalyticsReady", "True", "JobsApplied")
    assert cond["message"] == "a RUNNING, b Scheduled"
    bad = [*ok, {"name": "c", "applicationState": "SUBMISSION_FAILED", "message": "no quota"}]
    cond = analytics.analytics_condition(bad, {})
    assert (cond["status"], cond["reason"]) == ("False", "JobFailed") and "c: SUBMISSION_FAILED (no quota)" in \
        cond["message"]
    cond = analytics.analytics_condition(ok, {"d": "schedule 'x': 1 fields instead of 5"})
    assert cond["reason"] == "InvalidJob" and cond["message"].startswith("d: schedule")
    missing = analytics.spark_operator_missing(["SparkApplication"])
    assert missing["reason"] == "SparkOperatorMissing" and "install the Spark operator" in missing["message"]


# -- the watch callback ---------------------------------------------------------------------------

def test_spark_change_makes_the_owning_clusters_pass_due(monkeypatch: pytest.MonkeyPatch) -> None:
    class State:
        uids = {("prod", "rc"): "uid-1"}
        due = {"uid-1": 1e12}

    monkeypatch.setattr(handlers, "_STATE", State())
    handlers._analytics_changed("prod", "other")
    handlers._analytics_changed("staging", "rc")
    assert State.due["uid-1"] == 1e12
    handlers._analytics_changed("prod", "rc")
    assert State.due["uid-1"] == 0.0


def test_logs_job_options_become_arguments() -> None:
    spec = parse_spec({"analytics": {"jobs": [
        {"name": "app", "job": "logs", "topics": ["app-logs"], "logFormat": "<Date> <Time> <Level> <Content>",
         "eventsTopic": "app-events", "follow": True},
        {"name": "plain", "job": "logs", "topics": ["app-logs"]}]}})
    with_options, plain = (builders.build_analytics_application(OWNER, spec, j)["spec"]["arguments"]
                           for j in spec.analytics.jobs)
    assert with_options[-5:] == ["--log-format", "<Date> <Time> <Level> <Content>", "--events-topic", "app-events",
                                 "--follow"]
    assert "--log-format" not in plain and "--events-topic" not in plain and "--follow" not in plain
    # the job module parses these flags
    from rocket.analytics.jobs.logs import build_parser

    args = build_parser().parse_args(with_options)
    assert args.log_format == "<Date> <Time> <Level> <Content>" and args.events_topic == "app-events" and args.follow
    assert args.topics == "app-logs" and args.namesrv == "rc-nameserver.prod.svc:9876"


def test_logs_job_options_are_in_the_crd() -> None:
    crd = yaml.safe_load(CRD.read_text())
    job = (crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["analytics"]
           ["properties"]["jobs"]["items"]["properties"])
    assert job["logFormat"]["type"] == "string"
    assert job["eventsTopic"]["pattern"] == "^[A-Za-z0-9_%|-]+$"
    assert job["follow"] == {"type": "boolean", "default": False, "description": job["follow"]["description"]}
