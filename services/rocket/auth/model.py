"""ACL 2.0 model: users, subjects, resources, actions, policies (Apache RocketMQ 5.x ``auth``).

Names and JSON shapes follow ``UserInfo`` (``username``, ``password``, ``userType`` Super|Normal,
``userStatus`` enable|disable) and ``AclInfo`` (``subject`` "User:<name>", ``policies`` of
``{policyType Custom|Default, entries: [{resource, actions, sourceIps, decision Allow|Deny}]}``).

A resource key is ``*`` (anything), ``Topic:<name>``, ``Group:<name>``, ``Cluster:<name>`` (also
``Namespace:``); a name ending in ``*`` is a prefix, ``Topic:*`` any topic (``Resource.of``).

Evaluation (``AclAuthorizationHandler``): Super users may do anything; otherwise the entries of
the Custom policy matching the resource, one of the actions and the source IP are taken (the
Default policy's only if none match); the most specific resource wins (a literal name before a
prefix, a longer prefix before a shorter one, before ``Type:*``, before ``*``) and among equally
specific entries Deny wins. No matching entry means deny.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import ipaddress
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"


class AuthError(ValueError):
    """A user, ACL or resource definition that is not valid (the message says why)."""


class _Named(enum.Enum):
    # Members are singletons compared by identity: hashing by identity is exact and runs in C
    # (``Enum.__hash__`` hashes the name in Python; every authorization lookup hashes a few).
    __hash__ = object.__hash__

    @classmethod
    def by_name(cls, name: str | None) -> Any:
        """The member whose RocketMQ name is ``name`` (case-insensitive), else None."""
        if not name or not isinstance(name, str):  # a JSON body may hold any type here
            return None
        lowered = name.strip().lower()
        for member in cls:
            if member.value.lower() == lowered:
                return member
        return None


class UserType(_Named):
    """``UserType``: Super users pass every authorization check."""

    SUPER = "Super"
    NORMAL = "Normal"


class UserStatus(_Named):
    """``UserStatus``: disabled users fail authentication."""

    ENABLE = "enable"
    DISABLE = "disable"


class Action(_Named):
    """``Action``: what a request does to a resource. ``ALL`` in an entry grants every action;
    ``ANY`` in a request is satisfied by any entry action."""

    ALL = "All"
    ANY = "Any"
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"


class ResourceType(_Named):
    """``ResourceType``."""

    ANY = "Any"
    CLUSTER = "Cluster"
    NAMESPACE = "Namespace"
    TOPIC = "Topic"
    GROUP = "Group"


class ResourcePattern(enum.Enum):
    """``ResourcePattern``."""

    __hash__ = object.__hash__  # as _Named
    ANY = "ANY"
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


class Decision(_Named):
    """``Decision``."""

    ALLOW = "Allow"
    DENY = "Deny"


class PolicyType(_Named):
    """``PolicyType``: Custom entries are consulted first, Default ones only if none match."""

    CUSTOM = "Custom"
    DEFAULT = "Default"


class Resource(NamedTuple):
    """A resource (``Resource``); ``name`` is None for the ANY pattern. A tuple: built and
    hashed on every request, so it must be cheap."""

    type: ResourceType
    name: str | None
    pattern: ResourcePattern

    @classmethod
    def parse(cls, key: str) -> Resource:
        """Parse a resource key (module doc). Raises :class:`AuthError` for an unknown type."""
        key = (key or "").strip()
        if not key:
            raise AuthError("a resource is empty")
        if key == "*":
            return cls(ResourceType.ANY, None, ResourcePattern.ANY)
        type_name, sep, name = key.partition(":")
        rtype = ResourceType.by_name(type_name)
        if rtype is None or rtype is ResourceType.ANY or not sep:
            raise AuthError(f"resource {key!r}: expected *, Topic:<name>, Group:<name> or Cluster:<name>")
        if name == "*":
            return cls(rtype, None, ResourcePattern.ANY)
        if not name:
            raise AuthError(f"resource {key!r} has no name")
        if name.endswith("*"):
            return cls(rtype, name.split("*", 1)[0], ResourcePattern.PREFIXED)
        return cls(rtype, name, ResourcePattern.LITERAL)

    @staticmethod
    def topic(name: str) -> Resource:
        """A literal topic; a retry topic ``%RETRY%<group>`` is its group (``Resource.ofTopic``
        callers map retry topics to groups). Memoised (bounded): every request builds one."""
        return _topic_resource(name)

    @staticmethod
    def group(name: str) -> Resource:
        """A literal group; ``%RETRY%g`` / ``%DLQ%g`` become ``g`` (``Resource.ofGroup``). Memoised."""
        return _group_resource(name)

    @classmethod
    def cluster(cls, name: str) -> Resource:
        """A literal cluster."""
        return cls(ResourceType.CLUSTER, name, ResourcePattern.LITERAL)

    @property
    def key(self) -> str:
        """The resource key (``Resource.getResourceKey``)."""
        if self.type is ResourceType.ANY:
            return "*"
        if self.pattern is ResourcePattern.ANY:
            return f"{self.type.value}:*"
        if self.pattern is ResourcePattern.PREFIXED:
            return f"{self.type.value}:{self.name}*"
        return f"{self.type.value}:{self.name}"

    def matches(self, target: Resource) -> bool:
        """Whether this (policy) resource covers the literal ``target``."""
        if self.type is ResourceType.ANY:
            return True
        if self.type is not target.type:
            return False
        if self.pattern is ResourcePattern.ANY:
            return True
        if self.pattern is ResourcePattern.LITERAL:
            return target.name == self.name
        return target.name is not None and target.name.startswith(self.name or "")

    def specificity(self) -> tuple[int, int]:
        """Sort key, most specific first (``AclAuthorizationHandler.comparePolicyEntries``)."""
        if self.type is ResourceType.ANY:
            return (3, 0)
        if self.pattern is ResourcePattern.LITERAL:
            return (0, 0)
        if self.pattern is ResourcePattern.PREFIXED:
            return (1, -len(self.name or ""))
        return (2, 0)


@functools.lru_cache(maxsize=4096)
def _group_resource(name: str) -> Resource:
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return Resource(ResourceType.GROUP, name, ResourcePattern.LITERAL)


@functools.lru_cache(maxsize=4096)
def _topic_resource(name: str) -> Resource:
    if name.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return _group_resource(name)
    return Resource(ResourceType.TOPIC, name, ResourcePattern.LITERAL)


def parse_source_ip(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """A source IP range: an address or CIDR block (``IPAddressUtils.isIPInRange``).
    Raises :class:`AuthError`."""
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError as exc:
        raise AuthError(f"source IP {text!r} is neither an address nor a CIDR range: {exc}") from None


@dataclasses.dataclass(slots=True)
class PolicyEntry:
    """One entry of a policy (``PolicyEntry``); ``source_ips`` empty = from anywhere."""

    resource: Resource
    actions: list[Action]
    source_ips: list[str] = dataclasses.field(default_factory=list)
    decision: Decision = Decision.ALLOW
    _networks: list[Any] = dataclasses.field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._networks = [parse_source_ip(ip) for ip in self.source_ips]

    def matches_actions(self, wanted: Sequence[Action]) -> bool:
        """``PolicyEntry.isMatchAction``: any wanted action is granted (``All`` grants all)."""
        if not self.actions:
            return False
        if Action.ANY in wanted:
            return True
        return Action.ALL in self.actions or any(a in self.actions for a in wanted)

    def matches_ip(self, source_ip: str | None) -> bool:
        """Whether ``source_ip`` is in one of the entry's ranges (always, when it has none)."""
        if not self._networks:
            return True
        if not source_ip:
            return False
        try:
            addr = ipaddress.ip_address(source_ip.strip("[]"))
        except ValueError:
            return False
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return any(addr.version == net.version and addr in net for net in self._networks)

    def to_json(self) -> dict[str, Any]:
        """``AclInfo.PolicyEntryInfo``."""
        out: dict[str, Any] = {"resource": self.resource.key, "actions": [a.value for a in self.actions]}
        if self.source_ips:
            out["sourceIps"] = list(self.source_ips)
        out["decision"] = self.decision.value
        return out

    @classmethod
    def from_json(cls, obj: Any) -> PolicyEntry:
        """Parse ``AclInfo.PolicyEntryInfo``. Raises :class:`AuthError`."""
        if not isinstance(obj, dict):
            raise AuthError("a policy entry must be an object")
        resource = Resource.parse(str(obj.get("resource") or ""))
        actions = []
        for name in _list(obj, "actions"):
            action = Action.by_name(str(name))
            if action is None:
                raise AuthError(f"unknown action {name!r} (Pub, Sub, Create, Update, Delete, Get, List, All)")
            actions.append(action)
        if not actions:
            raise AuthError(f"the entry for {resource.key} has no actions")
        decision = Decision.by_name(obj.get("decision")) if obj.get("decision") else Decision.ALLOW
        if decision is None:
            raise AuthError(f"unknown decision {obj.get('decision')!r} (Allow or Deny)")
        ips = [str(ip) for ip in _list(obj, "sourceIps") if str(ip).strip()]
        return cls(resource, actions, ips, decision)


def _list(obj: dict[str, Any], name: str) -> list[Any]:
    """Member ``name`` of a JSON object as a list (absent or null: empty). Raises :class:`AuthError`."""
    value = obj.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise AuthError(f"{name} must be a JSON array")
    return value


@dataclasses.dataclass(slots=True)
class Acl:
    """A subject's policies (``Acl``): ``policies`` maps the policy type to its entries."""

    subject: str
    policies: dict[PolicyType, list[PolicyEntry]] = dataclasses.field(default_factory=dict)

    def update(self, other: Acl) -> None:
        """Merge ``other``'s entries in: an entry for the same resource is replaced, others are
        added (``Acl.updatePolicy`` / ``Policy.updateEntry``)."""
        for ptype, entries in other.policies.items():
            mine = self.policies.setdefault(ptype, [])
            for entry in entries:
                for i, old in enumerate(mine):
                    if old.resource == entry.resource:
                        mine[i] = entry
                        break
                else:
                    mine.append(entry)

    def delete(self, ptype: PolicyType, resource: Resource) -> None:
        """Remove the entries for ``resource`` from the ``ptype`` policy (``Acl.deletePolicy``)."""
        entries = [e for e in self.policies.get(ptype, []) if e.resource != resource]
        if entries:
            self.policies[ptype] = entries
        else:
            self.policies.pop(ptype, None)

    def decide(self, resource: Resource, actions: Sequence[Action], source_ip: str | None) -> PolicyEntry | None:
        """The deciding entry for a request (module doc), None when none matches."""
        for ptype in (PolicyType.CUSTOM, PolicyType.DEFAULT):
            matched = [
                e for e in self.policies.get(ptype, ())
                if e.resource.matches(resource) and e.matches_actions(actions) and e.matches_ip(source_ip)
            ]
            if matched:
                matched.sort(key=lambda e: (e.resource.specificity(), 0 if e.decision is Decision.DENY else 1))
                return matched[0]
        return None

    def to_json(self) -> dict[str, Any]:
        """``AclInfo``."""
        return {
            "subject": self.subject,
            "policies": [
                {"policyType": ptype.value, "entries": [e.to_json() for e in entries]}
                for ptype, entries in self.policies.items()
            ],
        }

    @classmethod
    def from_json(cls, obj: Any, subject: str | None = None) -> Acl:
        """Parse ``AclInfo``; ``subject`` (from the request header) is used when the body has none.
        Raises :class:`AuthError`."""
        if not isinstance(obj, dict):
            raise AuthError("an ACL must be a JSON object")
        subj = normalize_subject(str(obj.get("subject") or subject or ""))
        acl = cls(subj)
        policies = obj.get("policies")
        if not isinstance(policies, list) or not policies:
            raise AuthError("the body of acl is null: no policies")
        for pol in policies:
            if not isinstance(pol, dict):
                raise AuthError("a policy must be an object")
            ptype = PolicyType.by_name(pol.get("policyType")) if pol.get("policyType") else PolicyType.CUSTOM
            if ptype is None:
                raise AuthError(f"unknown policyType {pol.get('policyType')!r} (Custom or Default)")
            entries = [PolicyEntry.from_json(e) for e in _list(pol, "entries")]
            if entries:
                acl.update(cls(subj, {ptype: entries}))
        if not acl.policies:
            raise AuthError("the ACL has no policy entries")
        return acl


def normalize_subject(subject: str) -> str:
    """``User:<name>`` from ``User:<name>`` or a bare name. Raises :class:`AuthError`."""
    subject = subject.strip()
    if not subject:
        raise AuthError("the subject is empty")
    kind, sep, name = subject.partition(":")
    if not sep:
        return f"User:{subject}"
    if kind.lower() != "user" or not name:
        raise AuthError(f"subject {subject!r}: expected User:<username>")
    return f"User:{name}"


@dataclasses.dataclass(slots=True)
class User:
    """A user (``User``): ``username`` is the AccessKey, ``password`` the SecretKey."""

    username: str
    password: str
    user_type: UserType = UserType.NORMAL
    user_status: UserStatus = UserStatus.ENABLE

    def __repr__(self) -> str:
        return f"User({self.username!r}, {self.user_type.value}, {self.user_status.value})"

    def to_json(self, *, with_password: bool = True) -> dict[str, Any]:
        """``UserInfo`` (the password is part of it, as RocketMQ's ``UserConverter`` answers)."""
        out: dict[str, Any] = {"username": self.username}
        if with_password:
            out["password"] = self.password
        out["userType"] = self.user_type.value
        out["userStatus"] = self.user_status.value
        return out

    @classmethod
    def from_json(cls, obj: Any, username: str | None = None, old: User | None = None) -> User:
        """Parse ``UserInfo``; missing fields come from ``old`` (an update) or the defaults
        (Normal, enable). Raises :class:`AuthError`."""
        if not isinstance(obj, dict):
            obj = {}
        name = str(username or obj.get("username") or "").strip()
        if not name:
            raise AuthError("the username is blank")
        password = obj.get("password") or (old.password if old else None)
        if not password:
            raise AuthError(f"user {name}: the password is blank")
        utype = UserType.by_name(obj.get("userType")) if obj.get("userType") else (
            old.user_type if old else UserType.NORMAL)
        if utype is None:
            raise AuthError(f"unknown userType {obj.get('userType')!r} (Super or Normal)")
        status = UserStatus.by_name(obj.get("userStatus")) if obj.get("userStatus") else (
            old.user_status if old else UserStatus.ENABLE)
        if status is None:
            raise AuthError(f"unknown userStatus {obj.get('userStatus')!r} (enable or disable)")
        return cls(name, str(password), utype, status)


def parse_actions(names: Iterable[str]) -> list[Action]:
    """Actions from names (``Pub``, ``sub``, ...). Raises :class:`AuthError`."""
    out = []
    for name in names:
        action = Action.by_name(name)
        if action is None:
            raise AuthError(f"unknown action {name!r} (Pub, Sub, Create, Update, Delete, Get, List, All)")
        out.append(action)
    return out
