"""The security step of a reconciliation pass: the Secrets ``spec.security`` needs (I/O).

:func:`reconcile_security` runs before the children are applied (the pods mount these Secrets):

* **ACL**: the admin credentials Secret (:func:`rocket_operator.security.admin_secret`) is made
  once with a random SecretKey (``secrets.token_urlsafe``) and never changed by the operator.
  Whenever it exists, the pass signs its remoting requests with it and sends it as HTTP Basic
  credentials (brokers turning ACL on or off one by one during a rolling restart accept signed
  requests either way).
* **TLS, issuer Operator**: the cluster CA, its trust bundle and the server certificate, as
  :func:`rocket_operator.certs.plan` decides; only changed Secrets are written.
* **TLS, issuer Secret**: the named Secret must hold ``tls.crt`` and ``tls.key`` (and should hold
  ``ca.crt``); the step reports what is missing.
* **TLS, mode Enforcing**: the servers take no plaintext, so the pass's remoting calls (the admin,
  the controllers' 1004, a master switch) use TLS: the CA bundle (``ca.crt`` of
  ``<cluster>-cluster-ca-cert``, or of the user's Secret) is written to a file
  (:func:`write_ca_bundle`, under :data:`CA_DIR_ENV` or the temporary directory) that
  :meth:`rocket_operator.admin.ClusterAdmin.with_tls` trusts.

The step's ``SecurityReady`` condition and ``status.security`` go into the cluster's status.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import os
import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rocket.auth.signature import SessionCredentials
from rocket_operator import certs, conditions, names, security
from rocket_operator.kube import KubeClient
from rocket_operator.spec import ClusterSpec
from rocket_operator.steps import Context, Observed, Part

SECURITY_READY = "SecurityReady"
#: Environment variable naming the directory of the CA bundle files (default: the temporary directory).
CA_DIR_ENV = "ROCKET_OPERATOR_CA_DIR"


def write_ca_bundle(namespace: str, cluster: str, pem: bytes, directory: str | None = None) -> str:
    """Write ``pem`` (a cluster's CA bundle) to ``<directory>/<namespace>.<cluster>.ca.crt`` and
    return the path; the file is replaced atomically and only when its content changes (a client
    re-reads it then). ``directory``: default ``$ROCKET_OPERATOR_CA_DIR`` or the temporary
    directory, made (0700) if missing. Raises :class:`OSError` when it cannot be written."""
    base = directory or os.environ.get(CA_DIR_ENV) or os.path.join(tempfile.gettempdir(), "rocket-operator-ca")
    os.makedirs(base, mode=0o700, exist_ok=True)
    path = os.path.join(base, f"{namespace}.{cluster}.ca.crt")
    try:
        with open(path, "rb") as f:
            if f.read() == pem:
                return path
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(dir=base, prefix=".ca-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


@dataclass
class SecurityResult(Part):
    """``credentials``: the admin user's keys (None without the admin Secret); ``status``:
    ``status.security`` (None when nothing is enabled); ``condition``: ``SecurityReady`` (None when
    nothing is enabled); ``ca_file``: the CA bundle file the pass's remoting calls trust with
    ``tls.mode: Enforcing`` (None: plaintext)."""

    credentials: SessionCredentials | None = None
    status: dict[str, Any] | None = None
    condition: dict[str, Any] | None = None
    ca_file: str | None = None
    #: The CA bundle read this pass (PEM), before it is written to :attr:`ca_file`.
    ca_pem: bytes | None = None

    def signed(self, ctx: Context) -> Context:
        """``ctx`` whose admin signs with :attr:`credentials` and, with :attr:`ca_file`, connects
        with TLS (the same context when neither applies)."""
        if self.credentials is None and self.ca_file is None:
            return ctx
        admin = ctx.admin.with_credentials(self.credentials) if self.credentials is not None else ctx.admin
        if self.ca_file is not None:
            admin = admin.with_tls(self.ca_file)
        return dataclasses.replace(ctx, admin=admin)


def decode(secret: Mapping[str, Any] | None) -> dict[str, bytes] | None:
    """A Secret's ``data`` base64-decoded (None for a missing Secret; undecodable values are skipped)."""
    if secret is None:
        return None
    out: dict[str, bytes] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            out[str(key)] = base64.b64decode(str(value), validate=True)
        except ValueError:
            continue
    return out


def secret_manifest(namespace: str, name: str, data: Mapping[str, bytes], labels: Mapping[str, str],
                    owner_refs: list[dict[str, Any]], secret_type: str = "Opaque") -> dict[str, Any]:
    """A Secret for server-side apply with ``data`` base64-encoded."""
    return {
        "apiVersion": "v1", "kind": "Secret", "type": secret_type,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels), "ownerReferences": owner_refs},
        "data": {k: base64.b64encode(v).decode("ascii") for k, v in sorted(data.items())},
    }


def credentials_data(username: str, password: str) -> dict[str, bytes]:
    """The data of a credentials Secret: ``AccessKey``, ``SecretKey`` and ``credentials`` (RocketMQ's
    key file format, ``AccessKey=...`` / ``SecretKey=...`` lines: ``ROCKET_CREDENTIALS_FILE``)."""
    return {security.ACCESS_KEY: username.encode(), security.SECRET_KEY: password.encode(),
            security.CREDENTIALS_KEY: f"AccessKey={username}\nSecretKey={password}\n".encode()}


def credentials_of(data: Mapping[str, bytes] | None) -> SessionCredentials | None:
    """The keys of a credentials Secret's data, None when it lacks them."""
    if not data:
        return None
    ak, sk = data.get(security.ACCESS_KEY), data.get(security.SECRET_KEY)
    if not ak or not sk:
        return None
    return SessionCredentials(ak.decode("utf-8", "replace"), sk.decode("utf-8", "replace"))


async def admin_credentials(kube: KubeClient, namespace: str, cluster: str) -> SessionCredentials | None:
    """The admin keys of ``cluster`` (from its admin Secret), None when it has none.
    Raises :class:`rocket_operator.kube.ApiError` when the read is refused."""
    return credentials_of(decode(await kube.get("v1", "Secret", namespace, security.admin_secret(cluster))))


async def _ensure_admin(ctx: Context, seen: Observed, spec: ClusterSpec, part: SecurityResult) -> None:
    name = security.admin_secret(seen.name)
    data = decode(await ctx.kube.get("v1", "Secret", seen.namespace, name))
    creds = credentials_of(data)
    if creds is None and spec.security.acl_enabled:
        data = credentials_data(security.ADMIN_USERNAME, secrets.token_urlsafe(24))
        await ctx.kube.apply(secret_manifest(seen.namespace, name, data,
                                             names.base_labels(seen.name, names.COMPONENT_BROKER),
                                             [seen.owner.reference()]))
        part.events.append(("Normal", "AdminCredentialsCreated", f"admin user {security.ADMIN_USERNAME} in Secret "
                                                                 f"{name}"))
        creds = credentials_of(data)
    part.credentials = creds


def _day(when: datetime.datetime | None) -> str | None:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ") if when else None


async def _operator_tls(ctx: Context, seen: Observed, now: datetime.datetime, cluster_domain: str,
                        part: SecurityResult) -> dict[str, Any]:
    ns, cluster = seen.namespace, seen.name
    ca_name, bundle_name = security.cluster_ca_secret(cluster), security.cluster_ca_cert_secret(cluster)
    server_name = security.server_tls_secret(cluster)
    raw = await asyncio.gather(*(ctx.kube.get("v1", "Secret", ns, n) for n in (ca_name, bundle_name, server_name)))
    ca, bundle, server = (decode(r) for r in raw)
    # a Secret's type cannot change: one made before (e.g. by hand, Opaque) keeps its own
    server_type = str((raw[2] or {}).get("type") or "kubernetes.io/tls")
    decided = certs.plan(cluster, ca, bundle, server, security.server_dns_names(ns, cluster, cluster_domain), now)
    labels = names.base_labels(cluster, names.COMPONENT_BROKER)
    refs = [seen.owner.reference()]
    # trust first, then the CA, then the certificate: a server never presents one its clients cannot check
    if decided.ca_cert is not None:
        await ctx.kube.apply(secret_manifest(ns, bundle_name, decided.ca_cert, labels, refs))
    if decided.ca is not None:
        await ctx.kube.apply(secret_manifest(ns, ca_name, decided.ca, labels, refs))
    if decided.server is not None:
        await ctx.kube.apply(secret_manifest(ns, server_name, decided.server, labels, refs, server_type))
    part.events.extend(("Normal", reason, message) for reason, message in decided.events)
    trust = decided.ca_cert if decided.ca_cert is not None else bundle
    if trust and trust.get(security.CA_CERT_KEY):
        part.ca_pem = trust[security.CA_CERT_KEY]
    return {"issuer": "Operator", "secretName": server_name, "caSecretName": bundle_name,
            "caNotAfter": _day(decided.ca_not_after), "notAfter": _day(decided.server_not_after)}


async def _secret_tls(ctx: Context, seen: Observed, spec: ClusterSpec, part: SecurityResult) -> dict[str, Any]:
    name = security.tls_secret_name(seen.name, spec.security.tls)
    data = decode(await ctx.kube.get("v1", "Secret", seen.namespace, name))
    out: dict[str, Any] = {"issuer": "Secret", "secretName": name}
    if data is None:
        part.waiting.append(f"TLS Secret {name} does not exist")
        return out
    if data.get(security.CA_CERT_KEY):
        part.ca_pem = data[security.CA_CERT_KEY]
    missing = [k for k in (security.TLS_CERT_KEY, security.TLS_KEY_KEY, security.CA_CERT_KEY) if not data.get(k)]
    if missing:
        part.waiting.append(f"TLS Secret {name} lacks {', '.join(missing)}")
        return out
    try:
        out["notAfter"] = _day(certs.not_after(certs.load_certs(data[security.TLS_CERT_KEY])[0]))
    except (certs.CertError, IndexError):
        part.waiting.append(f"TLS Secret {name}: tls.crt is not a PEM certificate")
    return out


async def reconcile_security(ctx: Context, seen: Observed, spec: ClusterSpec, now: datetime.datetime,
                             cluster_domain: str = "cluster.local") -> SecurityResult:
    """Make the Secrets of ``spec.security`` (module doc). Problems with a user-given TLS Secret are
    waiting reasons and a ``SecurityReady=False`` condition. Raises
    :class:`rocket_operator.kube.ApiError` when the API server refuses a read or write, and
    :class:`rocket_operator.certs.CertError` for a cluster CA that cannot sign, :class:`OSError` when the
    CA bundle file (tls.mode Enforcing) cannot be written."""
    part = SecurityResult()
    sec = spec.security
    await _ensure_admin(ctx, seen, spec, part)
    if not sec.any:
        return part
    status: dict[str, Any] = {"aclEnabled": sec.acl_enabled, "tlsMode": sec.tls.mode}
    if sec.acl_enabled:
        status["adminSecretName"] = security.admin_secret(seen.name)
    if sec.tls.enabled:
        if sec.tls.issuer == "Operator":
            status["tls"] = await _operator_tls(ctx, seen, now, cluster_domain, part)
        else:
            status["tls"] = await _secret_tls(ctx, seen, spec, part)
    part.status = status
    if sec.tls.mode == "Enforcing":
        if part.ca_pem:
            part.ca_file = write_ca_bundle(seen.namespace, seen.name, part.ca_pem)
        else:
            part.waiting.append("no CA bundle (ca.crt) to reach the servers with TLS")
    if part.waiting:
        part.condition = conditions.condition(SECURITY_READY, False, "TlsSecretInvalid", "; ".join(part.waiting))
    else:
        part.condition = conditions.condition(SECURITY_READY, True, "SecretsReady",
                                              "credentials and certificates are in place")
    return part


