"""Analytics jobs on the Spark operator (pure): cron checks, and the status the operator reports.

A RocketCluster's ``spec.analytics.jobs`` become SparkApplications (one-off
jobs) or ScheduledSparkApplications (jobs with a ``schedule``) of the kubeflow
Spark operator (``sparkoperator.k8s.io/v1beta2``); their manifests are built by
:func:`rocket_operator.builders.build_analytics_application` and applied by
:mod:`rocket_operator.reconcile`. This module holds what needs no I/O:

* :func:`cron_error`: the schedule checked the way the Spark operator parses it
  (robfig/cron's standard parser: five fields, or a ``@`` descriptor), so that a
  schedule it would refuse is reported on the RocketCluster instead;
* :func:`job_status`: one ``status.analytics`` entry from the objects observed;
* :func:`analytics_condition`: the ``AnalyticsReady`` condition summing them up.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from rocket_operator import conditions, names
from rocket_operator.spec import AnalyticsJobSpec

#: ``status.applicationState.state`` values of a SparkApplication (the Spark operator's own names).
APPLICATION_STATES = ("NEW", "SUBMITTED", "RUNNING", "COMPLETED", "FAILED", "SUBMISSION_FAILED", "PENDING_RERUN",
                      "INVALIDATING", "SUCCEEDING", "FAILING", "UNKNOWN")
#: States after which a run will not go on by itself.
FAILED_STATES = frozenset({"FAILED", "SUBMISSION_FAILED"})
#: ``status.scheduleState`` of a ScheduledSparkApplication the Spark operator refused.
SCHEDULE_FAILED = "FailedValidation"

_DESCRIPTORS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
_GO_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$")
_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct",
                                       "nov", "dec"), 1)}
_DAYS = {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
#: (field name, lowest, highest, names) of the five standard cron fields.
_FIELDS: tuple[tuple[str, int, int, Mapping[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 6, _DAYS),
)


def _cron_value(text: str, field: str, lo: int, hi: int, words: Mapping[str, int]) -> int:
    if text.lower() in words:
        return words[text.lower()]
    if not text.isdigit():
        raise ValueError(f"{field} {text!r} is not a number" + (" or a name" if words else ""))
    value = int(text)
    if not lo <= value <= hi:
        raise ValueError(f"{field} {value} is outside {lo}-{hi}")
    return value


def _cron_field(text: str, field: str, lo: int, hi: int, words: Mapping[str, int]) -> None:
    for item in text.split(","):
        span, _, step = item.partition("/")
        if step and (not step.isdigit() or int(step) == 0):
            raise ValueError(f"{field} step {step!r} must be a positive number")
        if span in ("*", "?"):
            continue
        first, dash, last = span.partition("-")
        start = _cron_value(first, field, lo, hi, words)
        if dash and start > _cron_value(last, field, lo, hi, words):
            raise ValueError(f"{field} range {span!r} runs backwards")


def cron_error(expression: str) -> str | None:
    """Why the Spark operator would refuse ``expression`` as a schedule, or None when it is valid.

    Accepted: five fields (minute 0-59, hour 0-23, day of month 1-31, month
    1-12 or JAN-DEC, day of week 0-6 or SUN-SAT; each a ``,`` list of ``*``,
    ``?``, ``n`` or ``a-b``, optionally ``/step``), a descriptor (``@daily``,
    ``@hourly``, ``@weekly``, ``@monthly``, ``@yearly``, ``@annually``,
    ``@midnight``) or ``@every <Go duration>`` (``90s``, ``1h30m``).
    """
    text = expression.strip()
    if text.startswith("@"):
        if text in _DESCRIPTORS:
            return None
        every, _, duration = text.partition(" ")
        if every == "@every":
            duration = duration.strip()
            if _GO_DURATION.match(duration) and any(c in "123456789" for c in duration):
                return None
            return f"@every needs a positive duration such as 90s or 1h30m, got {duration!r}"
        return f"unknown descriptor {text!r} (use @hourly, @daily, @weekly, @monthly, @yearly or @every <duration>)"
    parts = text.split()
    if len(parts) != 5:
        return f"{len(parts)} fields instead of 5 (minute hour day-of-month month day-of-week)"
    for part, (field, lo, hi, words) in zip(parts, _FIELDS, strict=True):
        try:
            _cron_field(part, field, lo, hi, words)
        except ValueError as exc:
            return str(exc)
    return None


def _application_state(obj: Mapping[str, Any] | None) -> tuple[str, str]:
    """``(state, errorMessage)`` of a SparkApplication; ``NEW`` before the Spark operator wrote a status."""
    app_state = ((obj or {}).get("status") or {}).get("applicationState") or {}
    return str(app_state.get("state") or "NEW"), str(app_state.get("errorMessage") or "")


def job_status(cluster: str, job: AnalyticsJobSpec, obj: Mapping[str, Any] | None,
               last_run: Mapping[str, Any] | None = None, invalid: str | None = None) -> dict[str, Any]:
    """One entry of ``status.analytics`` for ``job``.

    ``obj`` is the job's SparkApplication / ScheduledSparkApplication as read
    (None: not created yet), ``last_run`` the SparkApplication named by a
    ScheduledSparkApplication's ``status.lastRunName`` (None: no run yet or gone),
    ``invalid`` why the job was not applied. Keys: ``name``, ``job``, ``kind``,
    ``application`` (the object's name), ``applicationState`` (of the
    application, or of the last run when scheduled), ``message``; for scheduled
    jobs also ``schedule``, ``scheduleState``, ``lastRun``, ``lastRunName`` and
    ``nextRun``. Empty values are left out by the status writer.
    """
    scheduled = job.schedule is not None
    kind = names.SCHEDULED_SPARK_APPLICATION if scheduled else names.SPARK_APPLICATION
    entry: dict[str, Any] = {"name": job.name, "job": job.job, "kind": kind,
                             "application": names.analytics_application(cluster, job.name, scheduled)}
    if invalid is not None:
        entry["message"] = invalid
        return entry
    if obj is None:
        entry["message"] = f"{kind} created; waiting for the Spark operator"
        return entry
    status = obj.get("status") or {}
    if not scheduled:
        state, error = _application_state(obj)
        entry["applicationState"] = state
        entry["message"] = error or ("waiting for the Spark operator" if not status else "")
        entry["submissionAttempts"] = status.get("submissionAttempts")
        entry["terminationTime"] = status.get("terminationTime")
        return entry
    entry.update(schedule=job.schedule, scheduleState=status.get("scheduleState"), lastRun=status.get("lastRun"),
                 lastRunName=status.get("lastRunName"), nextRun=status.get("nextRun"))
    if last_run is not None:
        state, error = _application_state(last_run)
        entry["applicationState"] = state
        entry["message"] = error
    elif status.get("lastRunName"):
        entry["message"] = f"last run {status['lastRunName']} is gone"
    else:
        entry["message"] = status.get("reason") or ("suspended" if job.suspend else "no run yet")
    if status.get("scheduleState") == SCHEDULE_FAILED:
        entry["message"] = status.get("reason") or "the Spark operator refused the schedule"
    return entry


def job_failed(entry: Mapping[str, Any]) -> bool:
    """True when a ``status.analytics`` entry shows a failed (last) run or a refused schedule."""
    return entry.get("applicationState") in FAILED_STATES or entry.get("scheduleState") == SCHEDULE_FAILED


def analytics_condition(entries: Iterable[Mapping[str, Any]], invalid: Mapping[str, str]) -> dict[str, Any]:
    """The ``AnalyticsReady`` condition: True when every job is applied and none failed.

    False with reason ``InvalidJob`` (a job was not applied: ``invalid`` maps
    its name to why), else ``JobFailed`` (a run failed or a schedule was
    refused; the message names the jobs and their errors); True with reason
    ``JobsApplied`` and each job's state in the message otherwise.
    """
    entries = list(entries)
    if invalid:
        message = "; ".join(f"{name}: {why}" for name, why in sorted(invalid.items()))
        return conditions.condition(conditions.ANALYTICS_READY, False, "InvalidJob", message)
    failed = [e for e in entries if job_failed(e)]
    if failed:
        message = "; ".join(f"{e['name']}: {e.get('applicationState') or e.get('scheduleState')}"
                            + (f" ({e['message']})" if e.get("message") else "") for e in failed)
        return conditions.condition(conditions.ANALYTICS_READY, False, "JobFailed", message)
    states = ", ".join(f"{e['name']} {e.get('applicationState') or e.get('scheduleState') or 'NEW'}"
                       for e in entries)
    return conditions.condition(conditions.ANALYTICS_READY, True, "JobsApplied", states)


def spark_operator_missing(missing: Iterable[str]) -> dict[str, Any]:
    """The ``AnalyticsReady`` condition when the API server does not serve the Spark operator's kinds."""
    kinds = ", ".join(missing)
    return conditions.condition(
        conditions.ANALYTICS_READY, False, "SparkOperatorMissing",
        f"{names.SPARK_API_VERSION} is not served ({kinds} missing): install the Spark operator "
        "(kubeflow spark-operator) to run spec.analytics.jobs")
