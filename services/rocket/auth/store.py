"""Users and ACLs of one server, kept in memory and in one JSON file.

File (``<storePathRootDir>/config/auth.json`` on brokers, mode 0600: it holds the SecretKeys,
as RocketMQ's local metadata store does): ``{"version": n, "users": [UserInfo...],
"acls": [AclInfo...]}``, replaced atomically and fsynced on every change (as the broker's
other config files, ``write_file_durably``). Slaves replace their copy with the master's
(:meth:`AuthMetadataStore.replace_all`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from rocket.auth.model import Acl, AuthError, PolicyType, Resource, User, UserType, normalize_subject

log = logging.getLogger("rocket.auth")


def _write_private_durably(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably, readable by the owner only (0600):
    the file holds SecretKeys. Same steps as the broker's ``write_file_durably``. Raises ``OSError``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


class AuthMetadataStore:
    """Users by name and ACLs by subject. ``path`` None keeps them in memory only.

    Raises :class:`AuthError` for invalid input and ``OSError`` when the file cannot be written
    (then nothing changes in memory either)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.users: dict[str, User] = {}
        self.acls: dict[str, Acl] = {}
        self.version = 0
        self._lock = threading.Lock()
        if self.path is not None and self.path.exists():
            self._load()

    # -- persistence -----------------------------------------------------------------------

    def _load(self) -> None:
        assert self.path is not None
        try:
            obj = json.loads(self.path.read_text(encoding="utf-8"))
            users, acls = self._parse(obj)
        except (OSError, ValueError) as exc:
            raise AuthError(f"auth metadata file {self.path} cannot be read: {exc}") from None
        self.users, self.acls = users, acls
        self.version = int(obj.get("version") or 0)

    @staticmethod
    def _parse(obj: Any) -> tuple[dict[str, User], dict[str, Acl]]:
        if not isinstance(obj, dict):
            raise AuthError("auth metadata must be a JSON object")
        users = {}
        for item in obj.get("users") or []:
            user = User.from_json(item)
            users[user.username] = user
        acls = {}
        for item in obj.get("acls") or []:
            acl = Acl.from_json(item)
            acls[acl.subject] = acl
        return users, acls

    def to_json(self) -> dict[str, Any]:
        """The whole table (the file's content)."""
        return {
            "version": self.version,
            "users": [u.to_json() for u in self.users.values()],
            "acls": [a.to_json() for a in self.acls.values()],
        }

    def _commit(self, users: dict[str, User], acls: dict[str, Acl], version: int | None = None) -> None:
        new_version = self.version + 1 if version is None else version
        if self.path is not None:
            data = {"version": new_version, "users": [u.to_json() for u in users.values()],
                    "acls": [a.to_json() for a in acls.values()]}
            _write_private_durably(self.path, json.dumps(data, indent=1).encode())
        self.users, self.acls, self.version = users, acls, new_version

    # -- users -----------------------------------------------------------------------------

    def get_user(self, username: str) -> User | None:
        """The user, or None."""
        return self.users.get(username)

    def is_super(self, username: str | None) -> bool:
        """Whether ``username`` is an enabled Super user."""
        user = self.users.get(username or "")
        return user is not None and user.user_type is UserType.SUPER

    def create_user(self, user: User) -> None:
        """Add ``user``. Raises :class:`AuthError` when the name is taken."""
        with self._lock:
            if user.username in self.users:
                raise AuthError(f"The user of {user.username} is existed")
            self._commit({**self.users, user.username: user}, self.acls)

    def ensure_user(self, user: User) -> bool:
        """Add ``user`` unless a user of that name exists (initial users, as RocketMQ's
        ``initUser``: a changed password is kept). True if written."""
        with self._lock:
            if user.username in self.users:
                return False
            self._commit({**self.users, user.username: user}, self.acls)
            return True

    def update_user(self, user: User) -> None:
        """Replace an existing user. Raises :class:`AuthError` when there is none."""
        with self._lock:
            if user.username not in self.users:
                raise AuthError(f"The user of {user.username} is not exist")
            self._commit({**self.users, user.username: user}, self.acls)

    def delete_user(self, username: str) -> None:
        """Remove the user and its ACL (no error when there is none)."""
        with self._lock:
            if username not in self.users:
                return
            users = dict(self.users)
            del users[username]
            acls = {k: v for k, v in self.acls.items() if k != f"User:{username}"}
            self._commit(users, acls)

    def list_users(self, name_filter: str | None = None) -> list[User]:
        """Users whose name contains ``name_filter`` (all when empty)."""
        return [u for u in self.users.values() if not name_filter or name_filter in u.username]

    # -- ACLs ------------------------------------------------------------------------------

    def get_acl(self, subject: str) -> Acl | None:
        """The ACL of ``subject`` (``User:<name>`` or a bare user name), or None."""
        return self.acls.get(normalize_subject(subject))

    def put_acl(self, acl: Acl) -> None:
        """Create or merge ``acl`` (``AuthorizationMetadataManager.createAcl/updateAcl``).
        Raises :class:`AuthError` when its user does not exist."""
        with self._lock:
            name = acl.subject.partition(":")[2]
            if name not in self.users:
                raise AuthError(f"The subject of {acl.subject} is not exist.")
            old = self.acls.get(acl.subject)
            merged = Acl(acl.subject, {k: list(v) for k, v in old.policies.items()}) if old else Acl(acl.subject)
            merged.update(acl)
            self._commit(self.users, {**self.acls, acl.subject: merged})

    def delete_acl(self, subject: str, policy_type: PolicyType | None = None, resource: Resource | None = None) -> None:
        """Delete the whole ACL of ``subject``, or only its entries for ``resource``
        (``deleteAcl``). Raises :class:`AuthError` when there is no such ACL."""
        subject = normalize_subject(subject)
        with self._lock:
            old = self.acls.get(subject)
            if old is None:
                raise AuthError("The acl is not exist.")
            acls = dict(self.acls)
            if resource is None:
                del acls[subject]
            else:
                copy = Acl(subject, {k: list(v) for k, v in old.policies.items()})
                copy.delete(policy_type or PolicyType.CUSTOM, resource)
                if copy.policies:
                    acls[subject] = copy
                else:
                    del acls[subject]
            self._commit(self.users, acls)

    def list_acls(self, subject_filter: str | None = None, resource_filter: str | None = None) -> list[Acl]:
        """ACLs whose subject contains ``subject_filter`` and that have an entry whose resource key
        contains ``resource_filter``."""
        out = []
        for acl in self.acls.values():
            if subject_filter and subject_filter not in acl.subject:
                continue
            if resource_filter and not any(
                resource_filter in e.resource.key for entries in acl.policies.values() for e in entries
            ):
                continue
            out.append(acl)
        return out

    # -- replication -----------------------------------------------------------------------

    def replace_all(self, obj: Any) -> bool:
        """Make this store hold exactly ``obj`` (a :meth:`to_json` of another store, e.g. the
        master's). True when something changed. Raises :class:`AuthError`."""
        users, acls = self._parse(obj)
        with self._lock:
            if users == self.users and acls == self.acls:
                return False
            self._commit(users, acls, int(obj.get("version") or self.version + 1))
            return True
