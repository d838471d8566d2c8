"""Watches of the Spark operator's kinds, so that a cluster's ``status.analytics`` follows its jobs.

The operator's analytics jobs are SparkApplications and ScheduledSparkApplications
(``sparkoperator.k8s.io/v1beta2``), kinds that exist only while the Spark
operator's CRDs are installed, and that can be uninstalled at any moment. kopf
would watch them too, but a kopf watch that the API server answers with 404
(the CRDs went away between kopf's CRD scan and its reconnection) ends the
whole operator. So the operator watches them itself:

* one watch per (namespace, kind), started by :meth:`SparkWatch.ensure` when a
  reconciliation pass found analytics jobs in that namespace and the kinds served;
* list, then watch from the list's ``resourceVersion`` (with bookmarks), again
  from the last version seen when the API server ends the stream, and a fresh
  list after ``410 Gone``;
* every ADDED / MODIFIED / DELETED object labelled as an analytics job
  (``app.kubernetes.io/component=analytics``, ``managed-by=rocket-operator``)
  calls ``on_change(namespace, cluster)`` with its ``rocket.dev/cluster`` label;
* a 404 (the kinds are no longer served) ends that watch quietly; so does
  :meth:`SparkWatch.close`, which the operator calls when a pass finds the kinds
  gone (the API server may keep an open watch of a deleted CRD silent until the
  request's ``timeoutSeconds``). The next pass that finds them served starts
  the watches again. Other failures (connection lost,
  5xx, 403) are logged once and retried every ``retry_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from rocket_operator import names
from rocket_operator.kube import ApiError, KubeClient

log = logging.getLogger("rocket_operator.watch")

#: Label selector of every Spark object the operator makes for an analytics job.
ANALYTICS_SELECTOR = (f"{names.LABEL_COMPONENT}={names.COMPONENT_ANALYTICS},"
                      f"{names.LABEL_MANAGED_BY}={names.FIELD_MANAGER}")


class SparkWatch:
    """Namespaced watches of SparkApplications and ScheduledSparkApplications.

    ``on_change(namespace, cluster)`` is called (in the event loop) for every
    change of an analytics job's object; ``retry_seconds`` is the pause after a
    failed list or watch; ``timeout_seconds`` bounds one watch request (the API
    server ends it then and it is re-opened from the last version seen).
    """

    def __init__(self, kube: KubeClient, on_change: Callable[[str, str], None], *,
                 retry_seconds: float = 5.0, timeout_seconds: int = 120) -> None:
        self.kube = kube
        self.on_change = on_change
        self.retry_seconds = retry_seconds
        self.timeout_seconds = timeout_seconds
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}

    def watching(self) -> set[tuple[str, str]]:
        """``(namespace, kind)`` of every watch running now."""
        return {key for key, task in self._tasks.items() if not task.done()}

    def ensure(self, namespace: str) -> None:
        """Start the watches of both Spark kinds in ``namespace`` unless they run already."""
        for kind in names.SPARK_PLURALS:
            key = (namespace, kind)
            task = self._tasks.get(key)
            if task is None or task.done():
                self._tasks[key] = asyncio.get_running_loop().create_task(
                    self._run(namespace, kind), name=f"watch {kind} in {namespace}")

    async def close(self) -> None:
        """Stop every watch and wait for them to end (:meth:`ensure` starts them again)."""
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _notify(self, namespace: str, obj: Any) -> None:
        labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
        cluster = labels.get(names.LABEL_CLUSTER)
        if cluster:
            self.on_change(namespace, str(cluster))

    async def _follow(self, namespace: str, kind: str, version: str | None) -> str | None:
        """List (when ``version`` is None) and watch ``kind`` in ``namespace`` until the server ends the
        watch; returns the resourceVersion to go on from (None: list again, after an ERROR event).
        Raises :class:`ApiError` and connection errors."""
        if version is None:
            _, version = await self.kube.list_with_version(names.SPARK_API_VERSION, kind, namespace,
                                                           ANALYTICS_SELECTOR)
        async for event in self.kube.watch(names.SPARK_API_VERSION, kind, namespace, version,
                                           label_selector=ANALYTICS_SELECTOR, timeout_seconds=self.timeout_seconds):
            obj = event.get("object") or {}
            if event.get("type") == "ERROR":
                log.debug("watch of %s in %s: %s; listing again", kind, namespace, obj.get("message"))
                return None  # 410 Gone (or another error): start from a fresh list
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                self._notify(namespace, obj)
        return version

    async def _run(self, namespace: str, kind: str) -> None:
        failing = False
        version: str | None = None
        while True:
            try:
                version = await self._follow(namespace, kind, version)
                if failing:
                    log.info("watching %s in %s again", kind, namespace)
                failing = False
                continue
            except ApiError as exc:
                if exc.status == 404:
                    log.info("%s is not served any more: stopped watching %s in %s",
                             names.SPARK_API_VERSION, kind, namespace)
                    return
                if exc.status == 410:
                    version = None
                    continue
                error: Exception = exc
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                error = exc
            if not failing:
                log.warning("watching %s in %s failed, retrying every %.0f s: %s",
                            kind, namespace, self.retry_seconds, error)
            failing = True
            await asyncio.sleep(self.retry_seconds)
