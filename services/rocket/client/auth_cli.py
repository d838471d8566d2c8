"""``rocket user`` and ``rocket acl``: ACL 2.0 users and policies on every master broker of a
cluster (AUTH_* request codes, as ``mqadmin createUser`` / ``createAcl`` do).

Requests are signed with the credentials of ``rocket --access-key/--secret-key``, or
``$ROCKET_ACCESS_KEY``/``$ROCKET_SECRET_KEY``, or ``--credentials-file``/``$ROCKET_CREDENTIALS_FILE``
(a Super user's, to manage users). A new user's password comes from ``$ROCKET_USER_PASSWORD``
or standard input (``--password-stdin``), else one is generated and printed once.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import typer

from rocket.client.cli import NAMESRV_HELP, _fail, _run, console, resolve_namesrv
from rocket.client.output import OutputFormat, new_table, output_option, print_document

T = TypeVar("T")

user_app = typer.Typer(help="ACL users (AccessKey = username, SecretKey = password) on every master.",
                       no_args_is_help=True)
acl_app = typer.Typer(help="ACL policies: which user may do what on which topic, group or cluster.",
                      no_args_is_help=True)

CLUSTER_HELP = "Cluster whose masters get the change (default DefaultCluster)."
BROKER_HELP = "Only this broker 'host:port' (as mqadmin -b) instead of the cluster's masters."


def _password(password_stdin: bool, required: bool) -> tuple[str | None, bool]:
    """(password, generated?)"""
    if password_stdin:
        text = sys.stdin.readline().strip()
        if not text:
            raise _fail("no password on standard input")
        return text, False
    env = os.environ.get("ROCKET_USER_PASSWORD")
    if env:
        return env, False
    if required:
        return secrets.token_urlsafe(24), True
    return None, False


def _with_admin(namesrv: str | None, call: Callable[[Any], Awaitable[T]]) -> T:
    """``call(admin)``'s result, with an ``Admin`` of the NameServer ``namesrv`` (``resolve_namesrv``)
    open around it; a client error ends the command with its message (``rocket.client.cli._run``)."""
    from rocket.client import Admin

    addr = resolve_namesrv(namesrv)

    async def main() -> T:
        async with Admin(addr) as admin:
            return await call(admin)

    result: T = _run(main())
    return result


@user_app.command("create")
def user_create(
    username: str = typer.Argument(..., help="User name (its AccessKey)."),
    user_type: str = typer.Option("Normal", "--type", "-t", help="Normal or Super."),
    password_stdin: bool = typer.Option(False, "--password-stdin", help="Read the password from standard input."),
    cluster: str = typer.Option("DefaultCluster", "--cluster", "-c", help=CLUSTER_HELP),
    broker: str | None = typer.Option(None, "--broker", "-b", help=BROKER_HELP),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Create a user (AUTH_CREATE_USER). Password: $ROCKET_USER_PASSWORD, --password-stdin, or generated."""
    password, generated = _password(password_stdin, required=True)

    done = _with_admin(namesrv, lambda admin: admin.put_user(username, password, user_type=user_type, cluster=cluster,
                                                             broker_addr=broker))
    console.print(f"user {username} created on {', '.join(done)}", highlight=False)
    if generated:
        console.print(f"SecretKey (shown once): {password}", highlight=False, markup=False)


@user_app.command("update")
def user_update(
    username: str = typer.Argument(...),
    user_type: str | None = typer.Option(None, "--type", "-t", help="Normal or Super."),
    status: str | None = typer.Option(None, "--status", help="enable or disable."),
    password_stdin: bool = typer.Option(False, "--password-stdin", help="Read a new password from standard input."),
    cluster: str = typer.Option("DefaultCluster", "--cluster", "-c", help=CLUSTER_HELP),
    broker: str | None = typer.Option(None, "--broker", "-b", help=BROKER_HELP),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Change a user's password ($ROCKET_USER_PASSWORD or --password-stdin), type or status."""
    password, _ = _password(password_stdin, required=False)

    done = _with_admin(namesrv, lambda admin: admin.put_user(username, password, user_type=user_type,
                                                             user_status=status, create=False, cluster=cluster,
                                                             broker_addr=broker))
    console.print(f"user {username} updated on {', '.join(done)}", highlight=False)


@user_app.command("delete")
def user_delete(
    username: str = typer.Argument(...),
    cluster: str = typer.Option("DefaultCluster", "--cluster", "-c", help=CLUSTER_HELP),
    broker: str | None = typer.Option(None, "--broker", "-b", help=BROKER_HELP),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Delete a user and its ACL (AUTH_DELETE_USER)."""
    done = _with_admin(namesrv, lambda admin: admin.delete_user(username, cluster=cluster, broker_addr=broker))
    console.print(f"user {username} deleted on {', '.join(done)}", highlight=False)


@user_app.command("list")
def user_list(
    name_filter: str | None = typer.Option(None, "--filter", help="Only names containing this."),
    output: OutputFormat = output_option(),
    cluster: str = typer.Option("DefaultCluster", "--cluster", "-c", help=CLUSTER_HELP),
    broker: str | None = typer.Option(None, "--broker", "-b", help=BROKER_HELP),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Users per broker (AUTH_LIST_USER); passwords are never shown. ``-o json``: {"users": [...]}."""
    per_broker = _with_admin(namesrv, lambda admin: admin.list_users(name_filter, cluster=cluster,
                                                                      broker_addr=broker))
    rows = [{"broker": addr, "username": u.get("username"), "userType": u.get("userType"),
             "userStatus": u.get("userStatus")}
            for addr, users in sorted(per_broker.items()) for u in users if isinstance(u, dict)]
    if output.machine:
        print_document({"users": rows}, output)
        return
    table = new_table([("username", "left"), ("type", "left"), ("status", "left"), ("broker", "left")])
    for r in rows:
        table.add_row(str(r["username"]), str(r["userType"]), str(r["userStatus"]), r["broker"])
    console.print(table)


@acl_app.command("grant")
def acl_grant(
    subject: str = typer.Argument(..., help="User (name or User:<name>)."),
    resources: list[str] = typer.Option(..., "--resource", "-r",
                                        help="Topic:<name>, Group:<name>, Cluster:<name>, prefix 'Topic:app-*', '*'."),
    actions: list[str] = typer.Option(..., "--action", "-a",
                                      help="Pub, Sub, Create, Update, Delete, Get, List or All (repeat)."),
    source_ips: list[str] = typer.Option([], "--source-ip", "-i", help="Address or CIDR range (repeat)."),
    deny: bool = typer.Option(False, "--deny", help="A Deny entry (deny wins over allow)."),
    cluster: str = typer.Option("DefaultCluster", "--cluster", "-c", help=CLUSTER_HELP),
    broker: str | None = typer.Option(None, "--broker", "-b", help=BROKER_HELP),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Add or replace policy entries of a user (AUTH_CREATE_ACL), one per resource."""
    from rocket.auth.model import AuthError, Resource, parse_actions, parse_source_ip

    try:
        for r in resources:
            Resource.parse(r)
        parse_actions(actions)
        for ip in source_ips:
            parse_source_ip(ip)
    except AuthError as exc:
        raise _fail(str(exc), 2) from None

    done = _with_admin(namesrv, lambda admin: admin.put_acl(subject, resources, actions,
                                                            decision="Deny" if deny else "Allow",
                                                            source_ips=source_ips, cluster=cluster, broker_addr=broker))
    console.print(f"acl of {subject} updated on {', '.join(done)}", highlight=False)


@acl_app.command("revoke")
def acl_revoke(
    subject: str = typer.Argument(...),
    resource: str | None = typer.Option(None, "--resource", "-r", help="Only this resource's entries (default: all)."),
    cluster: str = typer.Option("DefaultCluster", "--cluster", "-c", help=CLUSTER_HELP),
    broker: str | None = typer.Option(None, "--broker", "-b", help=BROKER_HELP),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Delete a user's ACL, or its entries for one resource (AUTH_DELETE_ACL)."""
    done = _with_admin(namesrv, lambda admin: admin.delete_acl(subject, resource, cluster=cluster, broker_addr=broker))
    console.print(f"acl of {subject} revoked on {', '.join(done)}", highlight=False)


@acl_app.command("list")
def acl_list(
    subject: str | None = typer.Option(None, "--subject", "-s", help="Only subjects containing this."),
    resource: str | None = typer.Option(None, "--resource", "-r", help="Only ACLs with a resource containing this."),
    output: OutputFormat = output_option(),
    cluster: str = typer.Option("DefaultCluster", "--cluster", "-c", help=CLUSTER_HELP),
    broker: str | None = typer.Option(None, "--broker", "-b", help=BROKER_HELP),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Policy entries per broker (AUTH_LIST_ACL). ``-o json``: {"acls": [{broker, subject, policyType,
    resource, actions, sourceIps, decision}]}."""
    found = _with_admin(namesrv, lambda admin: admin.list_acls(subject, resource, cluster=cluster,
                                                               broker_addr=broker))
    rows = []
    for addr, acls in sorted(found.items()):
        for acl in acls:
            for policy in acl.get("policies") or []:
                for e in policy.get("entries") or []:
                    rows.append({"broker": addr, "subject": acl.get("subject"), "policyType": policy.get("policyType"),
                                 "resource": e.get("resource"), "actions": e.get("actions") or [],
                                 "sourceIps": e.get("sourceIps") or [], "decision": e.get("decision")})
    if output.machine:
        print_document({"acls": rows}, output)
        return
    table = new_table([("subject", "left"), ("resource", "left"), ("actions", "left"), ("decision", "left"),
                       ("source IPs", "left"), ("broker", "left")])
    for r in rows:
        table.add_row(str(r["subject"]), str(r["resource"]), ",".join(r["actions"]), str(r["decision"]),
                      ",".join(r["sourceIps"]) or "any", r["broker"])
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add ``rocket user`` and ``rocket acl``."""
    app.add_typer(user_app, name="user")
    app.add_typer(acl_app, name="acl")
