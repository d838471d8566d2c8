"""Status conditions (pure): the Kubernetes ``metav1.Condition`` shape, kept idempotent.

A condition is ``{type, status ("True"|"False"|"Unknown"), reason (CamelCase),
message, lastTransitionTime (RFC 3339), observedGeneration}``;
``lastTransitionTime`` changes only when ``status`` does.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
DRAINING = "Draining"
PAUSED = "Paused"
#: Present only while ``spec.analytics.jobs`` lists jobs: their SparkApplications are applied and none failed.
ANALYTICS_READY = "AnalyticsReady"
CONDITION_TYPES = (READY, PROGRESSING, DEGRADED, DRAINING, PAUSED, ANALYTICS_READY)


def now_rfc3339() -> str:
    """The current UTC time as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str | None) -> datetime.datetime | None:
    """Parse ``YYYY-MM-DDTHH:MM:SSZ`` (or with an offset); None for None or garbage."""
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def condition(type_: str, status: bool | None, reason: str, message: str = "") -> dict[str, Any]:
    """A condition without timestamps; ``status`` None means "Unknown"."""
    text = "Unknown" if status is None else ("True" if status else "False")
    return {"type": type_, "status": text, "reason": reason, "message": message}


def merge_conditions(previous: Iterable[Mapping[str, Any]] | None, current: Iterable[Mapping[str, Any]],
                     generation: int, now: str | None = None) -> list[dict[str, Any]]:
    """The new conditions list: ``current`` stamped with ``observedGeneration``, keeping the old
    ``lastTransitionTime`` of each condition whose ``status`` did not change. Order: ``current``'s.
    """
    now = now or now_rfc3339()
    before = {c.get("type"): c for c in previous or []}
    out = []
    for cond in current:
        old = before.get(cond["type"])
        stamp = old.get("lastTransitionTime") if old and old.get("status") == cond["status"] else None
        out.append({**cond, "observedGeneration": generation, "lastTransitionTime": stamp or now})
    return out


def get_condition(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    """The condition of ``type_`` in a list, or None."""
    for cond in conditions or []:
        if cond.get("type") == type_:
            return cond
    return None
