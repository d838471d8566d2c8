"""A small asyncio Kubernetes API client (aiohttp) for the operator's own requests.

kopf watches RocketClusters; everything the operator reads or writes besides
that goes through :class:`KubeClient`: server-side apply of children, pods and
PVCs, the status subresource. It takes credentials from kopf's
``ConnectionInfo`` (kubeconfig or in-cluster service account), so the heavy
``kubernetes`` package is never imported by the operator.

Errors: :class:`ApiError` with the HTTP ``status`` and the API server's
``Status`` message for any non-2xx answer; ``aiohttp.ClientError`` /
``TimeoutError`` when the server cannot be reached.
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp

from rocket_operator import names
from rocket_operator.builders import Capabilities

#: Kinds the operator touches: kind -> (API path prefix, plural, namespaced).
_CORE = "/api/v1"
_RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Service"): ("services", True),
    ("v1", "Pod"): ("pods", True),
    ("v1", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("v1", "Event"): ("events", True),
    ("v1", "Node"): ("nodes", False),
    ("v1", "Secret"): ("secrets", True),
    ("apps/v1", "Deployment"): ("deployments", True),
    ("apps/v1", "StatefulSet"): ("statefulsets", True),
    ("policy/v1", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    ("policy/v1beta1", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    (names.API_VERSION, names.KIND): (names.PLURAL, True),
    # The Spark operator's kinds (analytics jobs); served only where the Spark operator is installed.
    (names.SPARK_API_VERSION, names.SPARK_APPLICATION): (names.SPARK_PLURALS[names.SPARK_APPLICATION], True),
    (names.SPARK_API_VERSION, names.SCHEDULED_SPARK_APPLICATION):
        (names.SPARK_PLURALS[names.SCHEDULED_SPARK_APPLICATION], True),
    # spec.security and RocketUser
    ("networking.k8s.io/v1", "NetworkPolicy"): ("networkpolicies", True),
    (names.API_VERSION, names.USER_KIND): (names.USER_PLURAL, True),
}


class ApiError(Exception):
    """A non-2xx answer from the API server: ``status`` (HTTP code), ``reason``, ``message``."""

    def __init__(self, status: int, reason: str, message: str, method: str = "", path: str = "") -> None:
        super().__init__(f"{method} {path}: {status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message


#: The ``items`` of a list answer (named at module level: ``KubeClient.list`` shadows ``list`` in the class).
_Items = list[dict[str, Any]]


def _api_error(resp: aiohttp.ClientResponse, text: str, method: str, path: str) -> ApiError:
    """The :class:`ApiError` of a non-2xx answer whose body is ``text`` (a ``Status``, or plain text)."""
    try:
        status = json.loads(text)
        reason, message = str(status.get("reason", "")), str(status.get("message", text))
    except (ValueError, AttributeError):
        reason, message = resp.reason or "", text
    return ApiError(resp.status, reason, message, method, path)


def resource_path(api_version: str, kind: str, namespace: str | None, name: str | None = None,
                  subresource: str | None = None) -> str:
    """URL path of a collection or object, e.g. ``/apis/apps/v1/namespaces/ns/statefulsets/x``.

    Raises ``KeyError`` for a kind the operator does not manage.
    """
    plural, namespaced = _RESOURCES[(api_version, kind)]
    prefix = _CORE if api_version == "v1" else f"/apis/{api_version}"
    path = prefix
    if namespaced and namespace:
        path += f"/namespaces/{quote(namespace)}"
    path += f"/{plural}"
    if name:
        path += f"/{quote(name)}"
    if subresource:
        path += f"/{subresource}"
    return path


@dataclass(slots=True)
class Credentials:
    """What is needed to reach the API server: URL, CA, and a token or a client certificate."""

    server: str
    ca_data: bytes | None = None
    ca_path: str | None = None
    insecure: bool = False
    token: str | None = None
    scheme: str = "Bearer"
    cert_path: str | None = None
    key_path: str | None = None

    @classmethod
    def from_connection_info(cls, info: Any) -> Credentials:
        """Build from kopf's ``ConnectionInfo`` (inline cert/key data are written to temp files)."""

        def data(value: Any) -> bytes | None:
            if value is None:
                return None
            raw = value if isinstance(value, bytes) else str(value).encode()
            try:  # kubeconfig "*-data" fields are base64
                return base64.b64decode(raw, validate=True)
            except ValueError:
                return raw

        def to_file(content: bytes | None) -> str | None:
            if content is None:
                return None
            handle = tempfile.NamedTemporaryFile(prefix="rocket-operator-", delete=False)
            handle.write(content)
            handle.close()
            return handle.name

        cert = str(info.certificate_path) if info.certificate_path else to_file(data(info.certificate_data))
        key = str(info.private_key_path) if info.private_key_path else to_file(data(info.private_key_data))
        return cls(
            server=str(info.server).rstrip("/"),
            ca_data=data(info.ca_data),
            ca_path=str(info.ca_path) if info.ca_path else None,
            insecure=bool(info.insecure),
            token=info.token,
            scheme=info.scheme or "Bearer",
            cert_path=cert,
            key_path=key,
        )

    def ssl_context(self) -> ssl.SSLContext | bool:
        """An SSL context trusting the cluster CA (or ``False`` for an insecure connection)."""
        if self.insecure:
            return False
        ctx = ssl.create_default_context(cafile=self.ca_path,
                                         cadata=self.ca_data.decode() if self.ca_data else None)
        if self.cert_path:
            ctx.load_cert_chain(self.cert_path, self.key_path)
        return ctx


class KubeClient:
    """Async access to the API server. Create inside the event loop; ``close()`` when done."""

    def __init__(self, creds: Credentials, *, timeout: float = 30.0, field_manager: str = names.FIELD_MANAGER
                 ) -> None:
        self.creds = creds
        self.field_manager = field_manager
        headers = {"Accept": "application/json", "User-Agent": "rocket-operator"}
        if creds.token:
            headers["Authorization"] = f"{creds.scheme} {creds.token}"
        self._session = aiohttp.ClientSession(
            base_url=creds.server,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
            connector=aiohttp.TCPConnector(ssl=creds.ssl_context(), limit=32),
        )

    async def close(self) -> None:
        """Close the HTTP session."""
        await self._session.close()

    async def request(self, method: str, path: str, *, body: Any = None, content_type: str = "application/json",
                      params: Mapping[str, str] | None = None, missing_ok: bool = False) -> dict[str, Any] | None:
        """One API call; returns the decoded JSON answer (None for 404 when ``missing_ok``).

        Raises :class:`ApiError` for any other non-2xx status.
        """
        url = path + (f"?{urlencode(params)}" if params else "")
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else None
        async with self._session.request(method, url, data=data, headers=headers) as resp:
            text = await resp.text()
            if resp.status == 404 and missing_ok:
                return None
            if resp.status >= 300:
                raise _api_error(resp, text, method, path)
            return json.loads(text) if text else {}

    # -- generic object access ----------------------------------------------------------------

    async def apply(self, manifest: Mapping[str, Any], *, force: bool = True) -> dict[str, Any]:
        """Server-side apply ``manifest`` (field manager ``rocket-operator``, conflicts forced).

        Creates the object when missing, otherwise updates only the fields the
        operator manages; returns the object as stored.
        """
        meta = manifest["metadata"]
        path = resource_path(manifest["apiVersion"], manifest["kind"], meta.get("namespace"), meta["name"])
        params = {"fieldManager": self.field_manager, "force": "true" if force else "false"}
        out = await self.request("PATCH", path, body=manifest, content_type="application/apply-patch+yaml",
                                 params=params)
        assert out is not None
        return out

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        return await self.request("GET", resource_path(api_version, kind, namespace, name), missing_ok=True)

    async def list(self, api_version: str, kind: str, namespace: str, label_selector: str | None = None
                   ) -> list[dict[str, Any]]:
        """Objects of ``kind`` in ``namespace`` matching ``label_selector`` (a list's ``items``)."""
        params = {"labelSelector": label_selector} if label_selector else None
        out = await self.request("GET", resource_path(api_version, kind, namespace), params=params)
        return list((out or {}).get("items") or [])

    async def list_with_version(self, api_version: str, kind: str, namespace: str | None,
                                label_selector: str | None = None) -> tuple[_Items, str]:
        """``(items, resourceVersion)`` of a list (cluster-wide when ``namespace`` is None or empty).

        The resource version is where a :meth:`watch` continues from. Raises
        :class:`ApiError` (404 when the kind is not served).
        """
        params = {"labelSelector": label_selector} if label_selector else None
        out = await self.request("GET", resource_path(api_version, kind, namespace), params=params) or {}
        return list(out.get("items") or []), str((out.get("metadata") or {}).get("resourceVersion") or "")

    async def watch(self, api_version: str, kind: str, namespace: str | None, resource_version: str, *,
                    label_selector: str | None = None, timeout_seconds: int = 300
                    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events (``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": {...}}``) from
        ``resource_version`` until the API server ends the stream (after ``timeout_seconds``).

        An ``ERROR`` event carries a ``Status`` (410 Gone: the version is too old, list again).
        Raises :class:`ApiError` when the watch is refused (404: the kind is no longer served);
        ``aiohttp.ClientError`` / ``TimeoutError`` when the connection fails or stays silent
        for a minute past ``timeout_seconds``.
        """
        params = {"watch": "true", "allowWatchBookmarks": "true", "resourceVersion": resource_version,
                  "timeoutSeconds": str(timeout_seconds)}
        if label_selector:
            params["labelSelector"] = label_selector
        path = resource_path(api_version, kind, namespace)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=timeout_seconds + 60)
        async with self._session.get(f"{path}?{urlencode(params)}", timeout=timeout) as resp:
            if resp.status >= 300:
                raise _api_error(resp, await resp.text(), "GET", path)
            async for line in resp.content:  # one JSON event per line
                if line.strip():
                    yield json.loads(line)

    async def delete(self, api_version: str, kind: str, namespace: str, name: str, *,
                     uid: str | None = None, propagation: str = "Background") -> bool:
        """Delete the object (precondition on ``uid`` when given). False when it was already gone."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            out = await self.request("DELETE", resource_path(api_version, kind, namespace, name), body=body,
                                     missing_ok=True)
        except ApiError as exc:
            if exc.status == 409:  # precondition failed: a newer object of that name exists
                return False
            raise
        return out is not None

    async def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, patch: Mapping[str, Any],
                          subresource: str | None = None) -> dict[str, Any] | None:
        """JSON merge patch (``application/merge-patch+json``); None when the object is gone."""
        return await self.request("PATCH", resource_path(api_version, kind, namespace, name, subresource),
                                  body=patch, content_type="application/merge-patch+json", missing_ok=True)

    async def patch_cluster_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch ``status`` of a RocketCluster through its status subresource."""
        await self.merge_patch(names.API_VERSION, names.KIND, namespace, name, {"status": status}, "status")

    async def served_resources(self, api_version: str) -> set[str] | None:
        """Plural names the API server serves in ``api_version`` (``group/version``, discovery), or None
        when it serves nothing there (404: no CRD of that group and version is installed)."""
        out = await self.request("GET", f"/apis/{api_version}", missing_ok=True)
        if out is None:
            return None
        return {str(r.get("name")) for r in out.get("resources") or [] if "/" not in str(r.get("name"))}

    async def server_version(self) -> tuple[int, int]:
        """``(major, minor)`` of the API server (``/version``; a trailing ``+`` is dropped)."""
        out = await self.request("GET", "/version") or {}

        def number(text: Any) -> int:
            digits = "".join(ch for ch in str(text) if ch.isdigit())
            return int(digits or 0)

        return number(out.get("major")), number(out.get("minor"))

    async def probe_capabilities(self) -> Capabilities:
        """What this API server supports, from its version (see :class:`Capabilities`)."""
        major, minor = await self.server_version()
        return Capabilities.for_version(major, minor)
