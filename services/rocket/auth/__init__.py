"""Authentication and authorization (RocketMQ ACL 2.0), shared by NameServer and broker.

* :mod:`rocket.auth.signature`: request signatures as RocketMQ clients make them.
* :mod:`rocket.auth.model`: users, resources, actions, policies and their evaluation.
* :mod:`rocket.auth.store`: users and ACLs, durable in one JSON file.
* :mod:`rocket.auth.classify`: the one table of what each request code does.
* :mod:`rocket.auth.hook`: the server-side RPC hook that checks every request.
* :mod:`rocket.auth.processor`: the AUTH_* admin request codes (mqadmin user/acl commands).
"""

from rocket.auth.hook import AuthConfig, ServerAuth, initial_user, inner_credentials
from rocket.auth.model import Acl, Action, AuthError, Decision, PolicyEntry, PolicyType, Resource, User, UserType
from rocket.auth.signature import CredentialsError, SessionCredentials, resolve_credentials
from rocket.auth.store import AuthMetadataStore

__all__ = [
    "Acl",
    "Action",
    "AuthConfig",
    "AuthError",
    "AuthMetadataStore",
    "CredentialsError",
    "Decision",
    "PolicyEntry",
    "PolicyType",
    "Resource",
    "ServerAuth",
    "SessionCredentials",
    "User",
    "UserType",
    "initial_user",
    "inner_credentials",
    "resolve_credentials",
]
