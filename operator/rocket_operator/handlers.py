"""kopf handlers: thin glue between kopf's events and :func:`rocket_operator.reconcile.reconcile`.

* ``on.startup``: kopf settings (progress kept in ``rocket.dev/`` annotations),
  the API client, server capabilities, the remoting hooks, the HTTP endpoint.
* ``on.login``: in-cluster service account, else the kubeconfig (no
  ``kubernetes`` package needed).
* ``on.create`` / ``on.update`` / ``on.resume``: one reconciliation pass at once
  (the spec or the pause annotation changed, or the operator started).
* ``daemon`` (one per RocketCluster): every ``RECHECK_SECONDS`` a pass while
  the cluster waits for something (pods, registration, a drain, a rolling
  restart), every ``RESYNC_SECONDS`` once it has converged. Long operations
  are driven this way with their progress in ``status``; no pass ever sleeps
  (the daemon waits on kopf's stop flag between passes).
* ``on.delete`` (optional, no finalizer): forget in-memory state. Children go
  by garbage collection through their owner references.
* ``on.validate`` of ``pods/eviction`` (with ``ROCKET_OPERATOR_WEBHOOK_PORT``): the node-drain
  admission webhook (:mod:`rocket_operator.eviction`); kopf serves it with a certificate the
  operator makes at startup (its own CA, :mod:`rocket_operator.certs`) and keeps the
  ValidatingWebhookConfiguration ``rocketcluster-operator.rocket.dev`` pointing at it with that CA.
* RocketUser resources have handlers of their own (:mod:`rocket_operator.user_handlers`).
* SparkApplications and ScheduledSparkApplications of a cluster's analytics jobs
  (and the runs the Spark operator makes of them) are watched by
  :class:`rocket_operator.watch.SparkWatch`, in each namespace where a pass
  found such jobs (all stop when a pass finds the kinds no longer served):
  a change makes the owning cluster's next pass due at once,
  so that its ``status.analytics`` follows their ``applicationState``. These
  kinds come and go with the Spark operator's CRDs; they are not watched by
  kopf, whose watch of a kind that stops being served ends the operator.

Tests and embedders call :func:`configure` before kopf starts to replace the
address resolver and the admin (see :mod:`rocket_operator.addresses`).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf

from rocket_operator import (
    certs,
    eviction,
    metrics,
    names,
    rollout,
    security_step,
    steps,
    user_handlers,  # noqa: F401  (registers the RocketUser handlers)
)
from rocket_operator.addresses import AddressResolver, DnsAddressResolver, StaticAddressResolver
from rocket_operator.admin import ClusterAdmin, RemotingClusterAdmin
from rocket_operator.kube import Credentials, KubeClient
from rocket_operator.reconcile import Context, Outcome, reconcile
from rocket_operator.settings import OperatorSettings
from rocket_operator.spec import SpecError, parse_spec
from rocket_operator.watch import SparkWatch

log = logging.getLogger("rocket_operator")


@dataclass
class Hooks:
    """Factories the operator uses at startup; ``None`` means the default."""

    resolver: Callable[[OperatorSettings], AddressResolver] | None = None
    admin: Callable[[OperatorSettings], ClusterAdmin] | None = None
    settings: OperatorSettings | None = None


@dataclass
class _State:
    settings: OperatorSettings
    ctx: Context
    http: metrics.HttpServer | None
    spark: SparkWatch
    #: uid -> monotonic time the next timer pass is due
    due: dict[str, float] = field(default_factory=dict)
    #: (namespace, name) -> uid of every RocketCluster seen by a pass
    uids: dict[tuple[str, str], str] = field(default_factory=dict)


HOOKS = Hooks()
_STATE: _State | None = None


def configure(*, resolver: Callable[[OperatorSettings], AddressResolver] | None = None,
              admin: Callable[[OperatorSettings], ClusterAdmin] | None = None,
              settings: OperatorSettings | None = None) -> None:
    """Replace the address resolver / admin factories or the settings (before kopf starts)."""
    HOOKS.resolver = resolver
    HOOKS.admin = admin
    HOOKS.settings = settings


def state() -> _State:
    """The running operator's state. Raises ``RuntimeError`` before startup."""
    if _STATE is None:
        raise RuntimeError("the operator has not started")
    return _STATE


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """Service account inside a pod, else ``$KUBECONFIG`` / ``~/.kube/config``."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, logger: Any, **kwargs: Any) -> None:
    """Configure kopf, connect to the API server, probe it, start the HTTP endpoint."""
    global _STATE
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=names.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=names.GROUP, key="last-handled-configuration")
    settings.persistence.finalizer = f"{names.GROUP}/finalizer"
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    ours = HOOKS.settings or OperatorSettings.from_env()
    info = kopf.login_with_service_account(settings=settings, logger=logger) or \
        kopf.login_with_kubeconfig(settings=settings, logger=logger)
    if info is None:
        raise kopf.PermanentError("no Kubernetes credentials: neither a service account nor a kubeconfig")
    kube = KubeClient(Credentials.from_connection_info(info))
    caps = await kube.probe_capabilities()
    resolver: AddressResolver
    if HOOKS.resolver:
        resolver = HOOKS.resolver(ours)
    elif ours.resolver == "static":
        resolver = StaticAddressResolver({"*": list(ours.static_nameservers)})
    else:
        resolver = DnsAddressResolver(ours.cluster_domain)
    admin = HOOKS.admin(ours) if HOOKS.admin else RemotingClusterAdmin(timeout=ours.remoting_timeout)
    if ours.webhook_port >= 0:
        settings.admission.server = webhook_server(ours)
        settings.admission.managed = WEBHOOK_CONFIGURATION
    http = None
    if ours.http_port >= 0:
        http = metrics.HttpServer(ours.http_host, ours.http_port)
        port = await http.start()
        logger.info("metrics and health on http://%s:%d", ours.http_host, port)
    _STATE = _State(settings=ours, ctx=Context(kube=kube, resolver=resolver, admin=admin, caps=caps,
                                               analytics_image=ours.analytics_image), http=http,
                    spark=SparkWatch(kube, _analytics_changed, retry_seconds=max(ours.recheck_seconds, 1.0)))
    logger.info("API server capabilities: %s", caps)


#: Name of the ValidatingWebhookConfiguration kopf keeps pointing at the operator's webhook server.
WEBHOOK_CONFIGURATION = "rocketcluster-operator.rocket.dev"


def webhook_server(ours: OperatorSettings) -> kopf.WebhookServer:
    """kopf's HTTPS webhook server on ``webhook_addr:webhook_port``, with a certificate for
    ``webhook_host`` (else ``webhook_addr``) signed by a CA the operator makes now (ECDSA P-256,
    :func:`certs.new_ca` / :func:`certs.new_server_cert`). The CA goes to the webhook
    configuration's ``caBundle``; a restarted operator makes a new pair and kopf updates the bundle."""
    host = ours.webhook_host or ours.webhook_addr
    now = datetime.datetime.now(datetime.UTC)
    ca_cert, ca_key = certs.new_ca("rocketcluster-operator webhook CA", now)
    cert, key = certs.new_server_cert(ca_cert, ca_key, [host], now)
    folder = Path(tempfile.mkdtemp(prefix="rocket-operator-webhook-"))
    (folder / "tls.crt").write_bytes(cert)
    (folder / "tls.key").write_bytes(key)
    (folder / "tls.key").chmod(0o600)
    return kopf.WebhookServer(addr=ours.webhook_addr, port=ours.webhook_port or None, host=host,
                              certfile=str(folder / "tls.crt"), pkeyfile=str(folder / "tls.key"), cadata=ca_cert)


@kopf.on.validate("v1", "pods", subresource="eviction", operations=["CREATE"], id="broker-eviction")
async def validate_eviction(body: kopf.Body, namespace: str | None, dryrun: bool, logger: Any, **_: Any) -> None:
    """Node drains: refuse (429) the eviction of a broker pod that is its group's master, an
    in-sync slave that its group must be made read-only for first, or a slave whose group is not
    in sync (:func:`eviction.decide`); the first two are recorded for the next pass to delete the
    pod once it is safe (:mod:`rocket_operator.eviction`).
    Pods that are not RocketCluster broker pods, or of ``failover: Manual`` clusters, pass (their
    PodDisruptionBudgets apply). Raises :class:`kopf.AdmissionError` to refuse."""
    pod_name = str((body.get("metadata") or {}).get("name") or "")
    ns = namespace or str((body.get("metadata") or {}).get("namespace") or "")
    preconditions = (body.get("deleteOptions") or {}).get("preconditions") or {}
    decision = await _eviction_decision(ns, pod_name, dryrun, preconditions.get("uid"))
    if decision.gone:
        raise kopf.AdmissionError(decision.message, code=404)
    if not decision.allowed:
        logger.info("eviction of %s/%s refused: %s", ns, pod_name, decision.message)
        raise kopf.AdmissionError(decision.message, code=eviction.RETRY_STATUS)


async def _eviction_decision(namespace: str, pod_name: str, dryrun: bool,
                             meant_uid: str | None) -> eviction.EvictionDecision:
    st = state()
    ctx = st.ctx
    pod = await ctx.kube.get("v1", "Pod", namespace, pod_name)
    view = rollout.pod_view(pod) if pod is not None else None
    if pod is None or view is None or view.terminating:
        return eviction.EvictionDecision(True)
    cluster = (pod["metadata"].get("labels") or {}).get(names.LABEL_INSTANCE)
    seen = await steps.observe_cluster(ctx, namespace, cluster) if cluster else None
    if seen is None:
        return eviction.EvictionDecision(True)
    try:
        spec = parse_spec(seen.raw_spec)
    except SpecError:
        return eviction.EvictionDecision(True)
    if not spec.broker.controller_mode or view.group >= spec.broker.groups:
        return eviction.EvictionDecision(True)
    if (meant_uid and meant_uid != view.uid) or ctx.evictions.replaced(seen.uid, pod_name, view.uid, time.monotonic()):
        return eviction.EvictionDecision(False, f"{pod_name} was evicted already (the operator deleted it); "
                                                "this is its replacement", gone=True)
    # signed with the cluster's admin keys when it has them (ACL), as the passes' calls are
    creds = await security_step.admin_credentials(ctx.kube, namespace, seen.name)
    if creds is not None:
        ctx = dataclasses.replace(ctx, admin=ctx.admin.with_credentials(creds))
    members = await steps.observe_members(ctx, seen)
    await steps.observe_roles(ctx, seen, spec, min(seen.current_groups, spec.broker.groups), members)
    active = min(seen.current_groups, spec.broker.groups)
    decision = eviction.decide(pod_name, members.roles.get(view.group), active)
    if decision.operator_deletes and not dryrun:
        ctx.evictions.add(seen.uid, pod_name, view.uid)
        st.due[seen.uid] = 0.0  # the next pass now
    return decision


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    """Close connections and the HTTP endpoint."""
    global _STATE
    st, _STATE = _STATE, None
    if st is None:
        return
    await st.spark.close()
    if st.http is not None:
        await st.http.stop()
    await st.ctx.admin.close()
    await st.ctx.kube.close()


async def _pass(body: kopf.Body, namespace: str | None, name: str, uid: str, logger: Any, *, wait_for_lock: bool
                ) -> Outcome | None:
    st = state()
    st.uids[(namespace or "", name)] = uid
    lock = st.ctx.lock(uid)
    if lock.locked() and not wait_for_lock:
        return None
    async with lock:
        started = time.monotonic()
        try:
            outcome = await reconcile(st.ctx, namespace or "", name)
        except Exception as exc:
            metrics.RECONCILES.labels("error").inc()
            metrics.RECONCILE_ERRORS.labels(type(exc).__name__).inc()
            st.due[uid] = time.monotonic() + st.settings.recheck_seconds
            raise
        finally:
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
            if st.http is not None:
                st.http.beat()
    metrics.RECONCILES.labels("waiting" if outcome.waiting else "converged").inc()
    if outcome.spark_served:
        st.spark.ensure(namespace or "")
    elif outcome.spark_served is False:  # uninstalled: a watch may hang on until its request times out
        await st.spark.close()
    delay = st.settings.recheck_seconds if outcome.waiting else st.settings.resync_seconds
    st.due[uid] = time.monotonic() + delay
    for type_, reason, message in outcome.events:
        kopf.event(body, type=type_, reason=reason, message=message)
        logger.info("%s: %s", reason, message)
    if outcome.waiting:
        logger.debug("waiting: %s", "; ".join(outcome.waiting))
    metrics.CLUSTERS.set(len(st.ctx.locks))
    return outcome


@kopf.on.resume(names.GROUP, names.VERSION, names.PLURAL)
@kopf.on.create(names.GROUP, names.VERSION, names.PLURAL)
@kopf.on.update(names.GROUP, names.VERSION, names.PLURAL)
async def changed(body: kopf.Body, namespace: str | None, name: str, uid: str, logger: Any, **_: Any) -> None:
    """The spec or metadata changed (or the operator started): reconcile now."""
    await _pass(body, namespace, name, uid, logger, wait_for_lock=True)


@kopf.daemon(names.GROUP, names.VERSION, names.PLURAL, cancellation_timeout=10.0)
async def drive(body: kopf.Body, namespace: str | None, name: str, uid: str, logger: Any,
                stopped: kopf.DaemonStopped, **_: Any) -> None:
    """One per RocketCluster: run a pass whenever the cluster's next pass is due (recheck or resync).

    It waits on kopf's stop flag between checks (at most one second), so it
    ends promptly when the cluster is deleted or the operator stops. A failed
    pass is counted in metrics and retried after ``RECHECK_SECONDS``.
    """
    while not stopped:
        if _STATE is None:  # the operator is stopping: cleanup ran before kopf stopped this daemon
            return
        st = _STATE
        if st.http is not None:
            st.http.beat()
        wait = st.due.get(uid, 0.0) - time.monotonic()
        if wait <= 0:
            try:
                await _pass(body, namespace, name, uid, logger, wait_for_lock=False)
            except Exception as exc:  # counted in _pass; the next pass retries
                logger.warning("reconciliation failed, retrying in %.0f s: %s", st.settings.recheck_seconds, exc)
            wait = 0.0
        await stopped.wait(min(max(wait, 0.05), 1.0))


@kopf.on.delete(names.GROUP, names.VERSION, names.PLURAL, optional=True)
async def deleted(namespace: str | None, name: str, uid: str, **_: Any) -> None:
    """Forget the cluster; its children are garbage-collected through owner references."""
    if _STATE is not None:
        _STATE.ctx.forget(uid)
        _STATE.due.pop(uid, None)
        _STATE.uids.pop((namespace or "", name), None)
        metrics.CLUSTERS.set(len(_STATE.ctx.locks))
    metrics.forget_cluster(namespace or "", name)


def _analytics_changed(namespace: str, cluster: str) -> None:
    """An analytics job's Spark object changed: the cluster's next pass is due now.

    Changes of clusters no pass has seen yet are ignored (their first pass reads
    every object anyway).
    """
    if _STATE is None:
        return
    uid = _STATE.uids.get((namespace, cluster))
    if uid is not None:
        _STATE.due[uid] = 0.0
