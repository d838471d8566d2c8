"""The AUTH_* request codes (3001-3010) of RocketMQ 5.x, as the broker answers them
(``AdminBrokerProcessor.createUser`` ... ``listAcl``).

Headers (``CreateUserRequestHeader`` ...): ``username`` for the user codes, ``filter`` for
AUTH_LIST_USER; ``subject`` for CREATE/UPDATE/GET_ACL; ``subject``, ``policyType``, ``resource``
for AUTH_DELETE_ACL; ``subjectFilter``, ``resourceFilter`` for AUTH_LIST_ACL. Bodies are
``UserInfo`` / ``AclInfo`` JSON (:mod:`rocket.auth.model`); GET answers carry one, LIST answers a
list, or no body when there is nothing. Invalid input is NO_PERMISSION (16, as RocketMQ's
``handleAuthException``) or INVALID_PARAMETER (29) for a blank name, with the reason as remark.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from rocket.auth.model import Acl, AuthError, PolicyType, Resource, User, UserType
from rocket.auth.signature import ACCESS_KEY
from rocket.auth.store import AuthMetadataStore
from rocket.protocol import loads_lenient
from rocket.remoting import RemotingCommand, RemotingConnection, RequestCode, ResponseCode


class AuthAdminProcessor:
    """Serves AUTH_* on a broker from ``store``. ``on_change`` is called after every change
    (e.g. to log or count). While ``read_only()`` is true (a slave, whose users are copied from
    its master) changes are refused with SYSTEM_ERROR and a remark saying so."""

    def __init__(self, store: AuthMetadataStore, on_change: Callable[[], None] | None = None,
                 read_only: Callable[[], bool] | None = None) -> None:
        self.store = store
        self.on_change = on_change
        self.read_only = read_only

    def handlers(self) -> dict[int, Callable[..., object]]:
        """Request code -> coroutine handler, to register on a remoting server."""
        return {
            RequestCode.AUTH_CREATE_USER: self.create_user,
            RequestCode.AUTH_UPDATE_USER: self.update_user,
            RequestCode.AUTH_DELETE_USER: self.delete_user,
            RequestCode.AUTH_GET_USER: self.get_user,
            RequestCode.AUTH_LIST_USER: self.list_users,
            RequestCode.AUTH_CREATE_ACL: self.create_acl,
            RequestCode.AUTH_UPDATE_ACL: self.create_acl,
            RequestCode.AUTH_DELETE_ACL: self.delete_acl,
            RequestCode.AUTH_GET_ACL: self.get_acl,
            RequestCode.AUTH_LIST_ACL: self.list_acls,
        }

    def _not_super(self, request: RemotingCommand) -> bool:
        ak = request.ext_fields.get(ACCESS_KEY)
        return bool(ak) and not self.store.is_super(ak)

    async def _write(self, request: RemotingCommand, change: Callable[[], None]) -> RemotingCommand:
        if self.read_only is not None and self.read_only():
            return request.response(ResponseCode.SYSTEM_ERROR, "this broker is a slave: its users and ACLs are "
                                    "copied from its master; change them there")
        try:
            await asyncio.to_thread(change)
        except AuthError as exc:
            return request.response(ResponseCode.NO_PERMISSION, str(exc))
        except OSError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"cannot store the auth metadata: {exc}")
        if self.on_change is not None:
            self.on_change()
        return request.response(ResponseCode.SUCCESS)

    @staticmethod
    def _body(request: RemotingCommand) -> object:
        if not request.body:
            return None
        try:
            return loads_lenient(request.body)
        except ValueError as exc:
            raise AuthError(f"the body is not JSON: {exc}") from None

    async def create_user(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """AUTH_CREATE_USER (3001): header ``username``, body ``UserInfo``; a Super user only by a Super user."""
        return await self._put_user(request, create=True)

    async def update_user(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """AUTH_UPDATE_USER (3002): change an existing user; fields missing from the body are kept."""
        return await self._put_user(request, create=False)

    async def _put_user(self, request: RemotingCommand, *, create: bool) -> RemotingCommand:
        name = (request.ext_fields.get("username") or "").strip()
        if not name:
            return request.response(ResponseCode.INVALID_PARAMETER, "The username is blank")
        old = self.store.get_user(name)
        try:
            user = User.from_json(self._body(request), name, None if create else old)
        except AuthError as exc:
            return request.response(ResponseCode.INVALID_PARAMETER, str(exc))
        verb = "create" if create else "update"
        if self._not_super(request) and (user.user_type is UserType.SUPER or
                                         (old is not None and old.user_type is UserType.SUPER)):
            return request.response(ResponseCode.SYSTEM_ERROR, f"The super user can only be {verb} by super user")
        return await self._write(request, lambda: (self.store.create_user if create else self.store.update_user)(user))

    async def delete_user(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """AUTH_DELETE_USER (3003): remove the user and its ACL (no error when it does not exist)."""
        name = (request.ext_fields.get("username") or "").strip()
        if not name:
            return request.response(ResponseCode.INVALID_PARAMETER, "The username is blank")
        if self.store.is_super(name) and self._not_super(request):
            return request.response(ResponseCode.NO_PERMISSION, "The super user can only be update by super user")
        return await self._write(request, lambda: self.store.delete_user(name))

    async def get_user(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """AUTH_GET_USER (3004): the ``UserInfo`` as body, or no body when there is no such user."""
        name = (request.ext_fields.get("username") or "").strip()
        if not name:
            return request.response(ResponseCode.INVALID_PARAMETER, "The username is blank")
        resp = request.response(ResponseCode.SUCCESS)
        user = self.store.get_user(name)
        if user is not None:
            resp.body = json.dumps(user.to_json()).encode()
        return resp

    async def list_users(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """AUTH_LIST_USER (3005): every ``UserInfo`` whose name contains header ``filter``."""
        users = self.store.list_users(request.ext_fields.get("filter"))
        resp = request.response(ResponseCode.SUCCESS)
        if users:
            resp.body = json.dumps([u.to_json() for u in users]).encode()
        return resp

    async def create_acl(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """AUTH_CREATE_ACL (3006) / AUTH_UPDATE_ACL (3007): merge the ``AclInfo`` body into the subject's ACL."""
        try:
            acl = Acl.from_json(self._body(request), request.ext_fields.get("subject"))
        except AuthError as exc:
            return request.response(ResponseCode.NO_PERMISSION, str(exc))
        return await self._write(request, lambda: self.store.put_acl(acl))

    async def delete_acl(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """AUTH_DELETE_ACL (3008): the subject's whole ACL, or its entries for header ``resource``."""
        fields = request.ext_fields
        try:
            subject = fields.get("subject") or ""
            ptype = PolicyType.by_name(fields.get("policyType")) if fields.get("policyType") else None
            resource = Resource.parse(fields["resource"]) if fields.get("resource") else None
        except AuthError as exc:
            return request.response(ResponseCode.NO_PERMISSION, str(exc))
        return await self._write(request, lambda: self.store.delete_acl(subject, ptype, resource))

    async def get_acl(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """AUTH_GET_ACL (3009): the subject's ``AclInfo`` as body, or no body."""
        try:
            acl = self.store.get_acl(request.ext_fields.get("subject") or "")
        except AuthError as exc:
            return request.response(ResponseCode.NO_PERMISSION, str(exc))
        resp = request.response(ResponseCode.SUCCESS)
        if acl is not None:
            resp.body = json.dumps(acl.to_json()).encode()
        return resp

    async def list_acls(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """AUTH_LIST_ACL (3010): ACLs matching ``subjectFilter`` / ``resourceFilter``."""
        acls = self.store.list_acls(request.ext_fields.get("subjectFilter"), request.ext_fields.get("resourceFilter"))
        resp = request.response(ResponseCode.SUCCESS)
        if acls:
            resp.body = json.dumps([a.to_json() for a in acls]).encode()
        return resp
