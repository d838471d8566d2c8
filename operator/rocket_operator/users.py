"""RocketUser: a user of a RocketCluster's ACL and its policies (like Strimzi's ``KafkaUser``).

A RocketUser names its cluster, a user name (default: its own name), a user type and ACL 2.0
policy entries, as :mod:`rocket.auth.model` models them (Apache RocketMQ 5.x ``AclInfo``)::

    spec:
      cluster: prod
      username: orders-app          # default metadata.name
      secretName: orders-app        # default metadata.name
      policies:
        - resources: ["Topic:Orders", "Group:orders-*"]
          actions: [Pub, Sub]
          decision: Allow           # or Deny
          sourceIps: ["10.0.0.0/8"] # optional

The operator keeps the user on every master of the cluster (slaves and NameServers copy users and
ACLs from masters) with the AUTH_* request codes mqadmin uses, signed with the cluster's admin keys:

===========================  ============================================================
user                         3004 AUTH_GET_USER, then 3001 AUTH_CREATE_USER or 3002
                             AUTH_UPDATE_USER when missing or different
policies (``User:<name>``)   3009 AUTH_GET_ACL, 3008 AUTH_DELETE_ACL of entries no longer
                             wanted, 3006/3007 AUTH_CREATE/UPDATE_ACL when different
deletion                     3003 AUTH_DELETE_USER (the user and its ACL)
masters                      106 GET_BROKER_CLUSTER_INFO on every NameServer
===========================  ============================================================

Its random SecretKey (made once) and AccessKey are written to a Secret owned by the RocketUser.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rocket.auth.model import Acl, AuthError, PolicyEntry, PolicyType, Resource, parse_actions, parse_source_ip
from rocket.protocol import RequestCode, dumps, loads_lenient
from rocket_operator.admin import AdminError, RemotingClusterAdmin

#: What a user name may be: an AccessKey as RocketMQ's ``UserInfo`` takes it, without separators
#: that the ``User:<name>`` subject or the ``AccessKey:SecretKey`` HTTP credential would split on.
USERNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
#: Every RocketUser is a Normal user: a Super user passes every check, so whoever may create
#: RocketUsers would hold the cluster's admin rights (the admin user is the operator's own).
USER_TYPE = "Normal"


class UserSpecError(ValueError):
    """A RocketUser spec the CRD schema would refuse, or a policy :mod:`rocket.auth.model` refuses."""


@dataclass(frozen=True, slots=True)
class UserSpec:
    """A RocketUser's spec, defaulted: the cluster, the user (a Normal user), its Secret and its ACL
    (None: no policies)."""

    cluster: str
    username: str
    secret_name: str
    acl: Acl | None

    def acl_json(self) -> dict[str, Any] | None:
        """The ``AclInfo`` body of the policies (None without any)."""
        return self.acl.to_json() if self.acl is not None else None


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserSpecError(f"{where} must be a list of strings")
    return list(value)


def parse_user_spec(name: str, spec: Mapping[str, Any] | None) -> UserSpec:
    """The :class:`UserSpec` of RocketUser ``name``. Raises :class:`UserSpecError` naming the field
    for a missing cluster, a bad user name, and a resource, action, decision or source IP
    that :mod:`rocket.auth.model` refuses."""
    spec = spec or {}
    cluster = spec.get("cluster")
    if not isinstance(cluster, str) or not cluster:
        raise UserSpecError("spec.cluster must name the RocketCluster")
    username = spec.get("username") or name
    if not isinstance(username, str) or not USERNAME_RE.match(username):
        raise UserSpecError(f"spec.username must match {USERNAME_RE.pattern}, got {username!r}")
    secret_name = spec.get("secretName") or name
    if not isinstance(secret_name, str):
        raise UserSpecError("spec.secretName must be a string")
    subject = f"User:{username}"
    entries: list[PolicyEntry] = []
    raw_policies = spec.get("policies") or []
    if not isinstance(raw_policies, list):
        raise UserSpecError("spec.policies must be a list")
    for i, raw in enumerate(raw_policies):
        where = f"spec.policies[{i}]"
        if not isinstance(raw, Mapping):
            raise UserSpecError(f"{where} must be an object")
        try:
            resources = _strings(raw.get("resources"), f"{where}.resources")
            if not resources:
                raise UserSpecError(f"{where}.resources must list at least one resource")
            actions = parse_actions(_strings(raw.get("actions"), f"{where}.actions"))
            if not actions:
                raise UserSpecError(f"{where}.actions must list at least one action")
            ips = _strings(raw.get("sourceIps"), f"{where}.sourceIps")
            for ip in ips:
                parse_source_ip(ip)
            for key in resources:
                entries.append(PolicyEntry.from_json({"resource": Resource.parse(key).key,
                                                      "actions": [a.value for a in actions], "sourceIps": ips,
                                                      "decision": raw.get("decision") or "Allow"}))
        except AuthError as exc:
            raise UserSpecError(f"{where}: {exc}") from None
    acl = None
    if entries:
        acl = Acl(subject)
        for entry in entries:  # a resource listed twice: the later entry wins (Acl.update)
            acl.update(Acl(subject, {PolicyType.CUSTOM: [entry]}))
    return UserSpec(cluster=cluster, username=username, secret_name=secret_name, acl=acl)


def _entries(acl_json: Mapping[str, Any] | None) -> dict[tuple[str, str], dict[str, Any]]:
    """``(policyType, resource) -> entry JSON`` of an ``AclInfo`` (normalized through the model)."""
    if not acl_json:
        return {}
    try:
        acl = Acl.from_json(dict(acl_json))
    except AuthError:
        return {}
    out = {}
    for ptype, entries in acl.policies.items():
        for entry in entries:
            obj = entry.to_json()
            obj["actions"] = sorted(obj["actions"])
            obj["sourceIps"] = sorted(obj.get("sourceIps") or [])
            out[(ptype.value, entry.resource.key)] = obj
    return out


def acl_changes(current: Mapping[str, Any] | None, desired: Mapping[str, Any] | None
                ) -> tuple[list[tuple[str, str]], bool]:
    """What turns the ``AclInfo`` ``current`` into ``desired`` (either None: none): the ``(policyType,
    resource)`` entries to delete (AUTH_DELETE_ACL) and whether ``desired`` must be written."""
    have, want = _entries(current), _entries(desired)
    stale = sorted(set(have) - set(want))
    return stale, bool(want) and any(have.get(k) != v for k, v in want.items())


def masters_of(registration_tables: Mapping[str, Mapping[str, Mapping[int, str]]]) -> dict[str, str]:
    """brokerName -> master address (brokerId 0) from every NameServer's table (first one seen)."""
    out: dict[str, str] = {}
    for table in registration_tables.values():
        for broker_name, brokers in table.items():
            if 0 in brokers:
                out.setdefault(broker_name, brokers[0])
    return out


class UserAdmin(RemotingClusterAdmin):
    """The AUTH_* calls of the module table, over the remoting protocol, signed as
    :class:`RemotingClusterAdmin` signs (use :meth:`with_credentials`). Errors: :class:`AdminError`."""

    async def masters(self, nameservers: Sequence[str], cluster: str) -> dict[str, str]:
        """brokerName -> master address of ``cluster`` as the reachable NameServers list them.
        Raises :class:`AdminError` when no NameServer answers."""
        reg = await self.registration(list(nameservers), cluster)
        if not reg.per_nameserver:
            raise AdminError(f"no NameServer answered ({', '.join(nameservers) or 'none known'})")
        return masters_of(reg.per_nameserver)

    async def _get_json(self, addr: str, code: int, ext: Mapping[str, str]) -> Any:
        response = await self._call(addr, code, ext)
        if not response.body:
            return None
        try:
            return loads_lenient(response.body)
        except ValueError as exc:
            raise AdminError(f"{RequestCode(code).name} from {addr}: bad body: {exc}") from exc

    async def ensure_user(self, addr: str, user: UserSpec, password: str) -> list[str]:
        """Make the master at ``addr`` hold ``user`` with ``password`` and exactly its policies;
        returns what was changed (empty when it already did)."""
        done: list[str] = []
        info = {"username": user.username, "password": password, "userType": USER_TYPE, "userStatus": "enable"}
        current = await self._get_json(addr, RequestCode.AUTH_GET_USER, {"username": user.username})
        if not isinstance(current, dict):
            await self._call(addr, RequestCode.AUTH_CREATE_USER, {"username": user.username}, dumps(info))
            done.append("user created")
        elif current.get("password") != password or any(
                str(current.get(k, "")).lower() != str(info[k]).lower() for k in ("userType", "userStatus")):
            await self._call(addr, RequestCode.AUTH_UPDATE_USER, {"username": user.username}, dumps(info))
            done.append("user updated")
        subject = f"User:{user.username}"
        acl = await self._get_json(addr, RequestCode.AUTH_GET_ACL, {"subject": subject})
        acl = acl if isinstance(acl, dict) else None
        desired = user.acl_json()
        stale, write = acl_changes(acl, desired)
        for ptype, resource in stale:
            await self._call(addr, RequestCode.AUTH_DELETE_ACL,
                             {"subject": subject, "policyType": ptype, "resource": resource})
            done.append(f"removed {resource}")
        if write and desired is not None:
            code = RequestCode.AUTH_UPDATE_ACL if acl else RequestCode.AUTH_CREATE_ACL
            await self._call(addr, code, {"subject": subject}, json.dumps(desired).encode())
            done.append("policies written")
        return done

    async def delete_user(self, addr: str, username: str) -> None:
        """AUTH_DELETE_USER of ``username`` (and its ACL) on the master at ``addr`` (no error when absent)."""
        await self._call(addr, RequestCode.AUTH_DELETE_USER, {"username": username})

    async def on_masters(self, masters: Mapping[str, str], call: Any) -> dict[str, BaseException | Any]:
        """``await call(addr)`` on every master at once: brokerName -> result or the exception."""
        results = await asyncio.gather(*(call(addr) for addr in masters.values()), return_exceptions=True)
        return dict(zip(masters, results, strict=True))
