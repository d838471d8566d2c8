"""kopf handlers of RocketUser (:mod:`rocket_operator.users`): create, update, resync, delete.

* ``on.create`` / ``on.update`` / ``on.resume``: :func:`sync_user`; while the user is not on every
  master yet the handler raises ``kopf.TemporaryError`` and kopf retries it ``RECHECK_SECONDS`` later.
* ``timer`` every :data:`RESYNC_SECONDS`: :func:`sync_user` again, so that a new broker group, a
  broker that lost its store or a user changed behind the operator's back gets the user back.
* ``on.delete`` (kopf's finalizer ``rocket.dev/finalizer``): AUTH_DELETE_USER on every master; the
  Secret goes with its owner. A cluster that no longer exists needs nothing; brokers that cannot
  be reached are retried :data:`DELETE_RETRIES` times, then the RocketUser is let go (with a
  warning event) rather than kept forever.

``status``: ``conditions`` (``Ready``, the ``metav1.Condition`` shape), ``observedGeneration``,
``username``, ``secretName`` and ``brokers`` (the broker groups whose master holds the user).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Mapping
from typing import Any

import kopf

from rocket_operator import conditions, names, security, security_step
from rocket_operator.addresses import ClusterRef
from rocket_operator.admin import AdminError
from rocket_operator.kube import ApiError, KubeClient
from rocket_operator.spec import SpecError, parse_spec
from rocket_operator.users import UserAdmin, UserSpec, UserSpecError, parse_user_spec

RESYNC_SECONDS = 60.0
DELETE_RETRIES = 12

_ADMIN: UserAdmin | None = None
_LOCKS: dict[str, asyncio.Lock] = {}


def _admin(timeout: float) -> UserAdmin:
    global _ADMIN
    if _ADMIN is None:
        _ADMIN = UserAdmin(timeout=timeout)
    return _ADMIN


@kopf.on.cleanup()
async def close_user_admin(**_: Any) -> None:
    """Close the RocketUser admin's connections."""
    global _ADMIN
    admin, _ADMIN = _ADMIN, None
    _LOCKS.clear()
    if admin is not None:
        await admin.close()


class NotReady(Exception):
    """The user is not (yet) where it should be: ``reason`` (CamelCase) and ``message``; ``retry``
    whether another try may help."""

    def __init__(self, reason: str, message: str, retry: bool = True) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry = retry


def owner_reference(name: str, uid: str) -> dict[str, Any]:
    """A controller owner reference to the RocketUser ``name`` (its Secret goes with it)."""
    return {"apiVersion": names.API_VERSION, "kind": names.USER_KIND, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


async def _password(kube: KubeClient, namespace: str, name: str, uid: str, user: UserSpec) -> tuple[str, bool]:
    """The user's SecretKey from its Secret, made (random) and written when missing or when the
    Secret holds another user's keys: ``(password, written)``. Raises :class:`NotReady` when a
    Secret of that name exists that this RocketUser does not own."""
    secret = await kube.get("v1", "Secret", namespace, user.secret_name)
    if secret is not None:
        refs = secret["metadata"].get("ownerReferences") or []
        if not any(r.get("uid") == uid for r in refs):
            raise NotReady("SecretConflict", f"Secret {user.secret_name} exists and is not owned by this "
                                             "RocketUser; choose another spec.secretName", retry=False)
        creds = security_step.credentials_of(security_step.decode(secret))
        if creds is not None and creds.access_key == user.username:
            return creds.secret_key, False
    password = secrets.token_urlsafe(24)
    labels = {names.LABEL_CLUSTER: user.cluster, names.LABEL_MANAGED_BY: names.FIELD_MANAGER,
              names.LABEL_PART_OF: "rocketcluster", names.LABEL_COMPONENT: "user"}
    await kube.apply(security_step.secret_manifest(namespace, user.secret_name,
                                                   security_step.credentials_data(user.username, password), labels,
                                                   [owner_reference(name, uid)]))
    return password, True


async def _cluster(kube: KubeClient, namespace: str, cluster: str) -> bool:
    """Whether the RocketCluster has ACL on. Raises :class:`NotReady` when it does not exist."""
    obj = await kube.get(names.API_VERSION, names.KIND, namespace, cluster)
    if obj is None:
        raise NotReady("ClusterNotFound", f"RocketCluster {cluster} does not exist in {namespace}")
    try:
        return parse_spec(obj.get("spec")).security.acl_enabled
    except SpecError:
        return False


async def _signed_admin(kube: KubeClient, namespace: str, cluster: str, timeout: float, *,
                        acl_on: bool = True) -> UserAdmin:
    """The user admin signing with ``cluster``'s admin keys. Raises :class:`NotReady` without them
    (retried only while the cluster has ACL on: the operator is about to make them; otherwise the
    resync timer looks again)."""
    creds = await security_step.admin_credentials(kube, namespace, cluster)
    if creds is None:
        if not acl_on:
            raise NotReady("AclDisabled", f"RocketCluster {cluster} has spec.security.acl.enabled false",
                           retry=False)
        raise NotReady("NoAdminCredentials", f"Secret {security.admin_secret(cluster)} does not exist yet")
    admin = _admin(timeout).with_credentials(creds)
    assert isinstance(admin, UserAdmin)
    return admin


async def _masters(admin: UserAdmin, resolver: Any, namespace: str, cluster: str) -> dict[str, str]:
    nameservers = await resolver.nameservers(ClusterRef(namespace, cluster))
    try:
        masters = await admin.masters(nameservers, cluster)
    except AdminError as exc:
        raise NotReady("BrokersUnreachable", str(exc)) from None
    if not masters:
        raise NotReady("NoBrokers", f"no master of {cluster} is registered with the NameServers")
    return masters


def _failures(results: Mapping[str, Any]) -> list[str]:
    return [f"{broker}: {r}" for broker, r in sorted(results.items()) if isinstance(r, BaseException)]


async def sync_user(namespace: str, name: str, uid: str, generation: int, spec: Mapping[str, Any] | None,
                    status: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """Bring one RocketUser to its spec (module doc); returns its new ``status`` fields (conditions
    without timestamps under ``"conditions"``) and events. Raises :class:`NotReady`, and
    :class:`rocket_operator.kube.ApiError` for a refused API call."""
    from rocket_operator import handlers

    st = handlers.state()
    kube, timeout = st.ctx.kube, st.settings.remoting_timeout
    try:
        user = parse_user_spec(name, spec)
    except UserSpecError as exc:
        raise NotReady("InvalidSpec", str(exc), retry=False) from None
    events: list[tuple[str, str, str]] = []
    acl_on = await _cluster(kube, namespace, user.cluster)
    password, written = await _password(kube, namespace, name, uid, user)
    if written:
        events.append(("Normal", "SecretWritten", f"keys of {user.username} in Secret {user.secret_name}"))
    admin = await _signed_admin(kube, namespace, user.cluster, timeout, acl_on=acl_on)
    masters = await _masters(admin, st.ctx.resolver, namespace, user.cluster)
    old_name = (status or {}).get("username")
    if old_name and old_name != user.username:
        failed = _failures(await admin.on_masters(masters, lambda a: admin.delete_user(a, old_name)))
        if failed:
            raise NotReady("BrokerRefused", f"deleting the old user {old_name}: {'; '.join(failed)}")
        events.append(("Normal", "UserRenamed", f"deleted user {old_name}"))
    results = await admin.on_masters(masters, lambda a: admin.ensure_user(a, user, password))
    failed = _failures(results)
    if failed:
        raise NotReady("BrokerRefused", "; ".join(failed))
    changed = sorted(b for b, r in results.items() if r)
    if changed:
        events.append(("Normal", "UserSynced", f"{user.username} on {', '.join(changed)}"))
    cond = conditions.condition(conditions.READY, True, "UserReady",
                                f"{user.username} is on every master ({len(masters)})")
    if not acl_on:
        cond = conditions.condition(conditions.READY, False, "AclDisabled",
                                    f"{user.username} is on every master, but RocketCluster {user.cluster} has "
                                    "spec.security.acl.enabled false: nothing is checked")
    return {"username": user.username, "secretName": user.secret_name, "brokers": sorted(masters),
            "conditions": [cond]}, events


async def _write_status(kube: KubeClient, namespace: str, name: str, generation: int,
                        old: Mapping[str, Any] | None, fields: Mapping[str, Any]) -> None:
    new = dict(fields)
    new["conditions"] = conditions.merge_conditions((old or {}).get("conditions"), fields["conditions"], generation)
    new["observedGeneration"] = generation
    try:
        await kube.merge_patch(names.API_VERSION, names.USER_KIND, namespace, name, {"status": new}, "status")
    except ApiError as exc:
        if exc.status != 404:
            raise


async def _pass(body: kopf.Body, namespace: str | None, name: str, uid: str, meta: Mapping[str, Any],
                spec: Mapping[str, Any], status: Mapping[str, Any], logger: Any, *, raise_retry: bool) -> None:
    from rocket_operator import handlers

    st = handlers.state()
    ns = namespace or ""
    generation = int(meta.get("generation") or 0)
    async with _LOCKS.setdefault(uid, asyncio.Lock()):
        try:
            fields, events = await sync_user(ns, name, uid, generation, spec, status)
        except NotReady as exc:
            old = conditions.get_condition((status or {}).get("conditions"), conditions.READY)
            fields = {"conditions": [conditions.condition(conditions.READY, False, exc.reason, exc.message)]}
            await _write_status(st.ctx.kube, ns, name, generation, status, fields)
            if old is None or (old.get("reason"), old.get("message")) != (exc.reason, exc.message):
                kopf.event(body, type="Warning", reason=exc.reason, message=exc.message)
            if exc.retry and raise_retry:
                raise kopf.TemporaryError(exc.message, delay=st.settings.recheck_seconds) from None
            logger.info("RocketUser %s/%s not ready: %s", ns, name, exc.message)
            return
        await _write_status(st.ctx.kube, ns, name, generation, status, fields)
    for type_, reason, message in events:
        kopf.event(body, type=type_, reason=reason, message=message)


@kopf.on.resume(names.GROUP, names.VERSION, names.USER_PLURAL)
@kopf.on.create(names.GROUP, names.VERSION, names.USER_PLURAL)
@kopf.on.update(names.GROUP, names.VERSION, names.USER_PLURAL)
async def user_changed(body: kopf.Body, namespace: str | None, name: str, uid: str, meta: kopf.Meta,
                       spec: kopf.Spec, status: kopf.Status, logger: Any, **_: Any) -> None:
    """The RocketUser was made or changed (or the operator started): sync it, retrying until it is on
    every master."""
    await _pass(body, namespace, name, uid, meta, spec, status, logger, raise_retry=True)


@kopf.timer(names.GROUP, names.VERSION, names.USER_PLURAL, interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS)
async def user_resync(body: kopf.Body, namespace: str | None, name: str, uid: str, meta: kopf.Meta,
                      spec: kopf.Spec, status: kopf.Status, logger: Any, **_: Any) -> None:
    """Every :data:`RESYNC_SECONDS`: sync again (repairs drift; new broker groups get the user)."""
    await _pass(body, namespace, name, uid, meta, spec, status, logger, raise_retry=False)


@kopf.on.delete(names.GROUP, names.VERSION, names.USER_PLURAL, retries=DELETE_RETRIES)
async def user_deleted(body: kopf.Body, namespace: str | None, name: str, uid: str, spec: kopf.Spec,
                       status: kopf.Status, retry: int, logger: Any, **_: Any) -> None:
    """AUTH_DELETE_USER on every master (module doc)."""
    from rocket_operator import handlers

    st = handlers.state()
    ns = namespace or ""
    _LOCKS.pop(uid, None)
    try:
        user = parse_user_spec(name, spec)
    except UserSpecError:
        return  # never created
    old_name = status.get("username") if status else None
    usernames = {user.username, *([str(old_name)] if old_name else [])}
    try:
        await _cluster(st.ctx.kube, ns, user.cluster)
        admin = await _signed_admin(st.ctx.kube, ns, user.cluster, st.settings.remoting_timeout)
        masters = await _masters(admin, st.ctx.resolver, ns, user.cluster)
        failed: list[str] = []
        for username in sorted(usernames):
            failed += _failures(await admin.on_masters(masters, lambda a, u=username: admin.delete_user(a, u)))
        if failed:
            raise NotReady("BrokerRefused", "; ".join(failed))
    except NotReady as exc:
        if exc.reason in ("ClusterNotFound", "NoAdminCredentials", "AclDisabled"):
            return  # nothing left that could hold the user
        if retry + 1 >= DELETE_RETRIES:
            kopf.event(body, type="Warning", reason="UserNotDeleted",
                       message=f"giving up deleting {', '.join(sorted(usernames))}: {exc.message}")
            return
        raise kopf.TemporaryError(exc.message, delay=st.settings.recheck_seconds) from None
    logger.info("deleted user %s of %s on %s", ", ".join(sorted(usernames)), user.cluster, ", ".join(sorted(masters)))
