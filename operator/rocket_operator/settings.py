"""Operator settings from the environment (all optional).

=====================================  =======  =======================================================
``ROCKET_OPERATOR_HTTP_HOST``          0.0.0.0  address of the ``/metrics`` + ``/healthz`` endpoint
``ROCKET_OPERATOR_HTTP_PORT``          8080     its port (0 = any free port, -1 = no endpoint)
``ROCKET_OPERATOR_RECHECK_SECONDS``    5        how soon a cluster that waits for something is looked at again
``ROCKET_OPERATOR_RESYNC_SECONDS``     60       how often a converged cluster is re-checked (drift, status)
``ROCKET_OPERATOR_REMOTING_TIMEOUT``   3        seconds per request to a NameServer or broker
``ROCKET_OPERATOR_CLUSTER_DOMAIN``     cluster.local  DNS suffix for Service and pod names
``ROCKET_OPERATOR_RESOLVER``           dns      ``dns`` (in-cluster names) or ``static`` (below; no DNS queries)
``ROCKET_OPERATOR_STATIC_NAMESERVERS``          with ``static``: ``host:port;host:port`` used for every cluster
                                                (brokers are then unreachable: for dry runs and benchmarks)
``ROCKET_OPERATOR_ANALYTICS_IMAGE``    rocketcluster/analytics:0.1.0  image of analytics jobs whose spec names none
``ROCKET_OPERATOR_WEBHOOK_PORT``       -1       port of the ``pods/eviction`` admission webhook (node drains;
                                                -1 = no webhook, 0 = any free port)
``ROCKET_OPERATOR_WEBHOOK_ADDR``       0.0.0.0  address it listens on
``ROCKET_OPERATOR_WEBHOOK_HOST``                the host name or IP the API server calls it by (its Service's
                                                DNS name in a cluster); also the certificate's name
=====================================  =======  =======================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from rocket_operator.builders import DEFAULT_ANALYTICS_IMAGE


@dataclass(frozen=True, slots=True)
class OperatorSettings:
    """The settings above, typed (seconds as floats)."""

    http_host: str = "0.0.0.0"
    http_port: int = 8080
    recheck_seconds: float = 5.0
    resync_seconds: float = 60.0
    remoting_timeout: float = 3.0
    cluster_domain: str = "cluster.local"
    resolver: str = "dns"
    static_nameservers: tuple[str, ...] = ()
    analytics_image: str = DEFAULT_ANALYTICS_IMAGE
    webhook_port: int = -1
    webhook_addr: str = "0.0.0.0"
    webhook_host: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorSettings:
        """Read ``ROCKET_OPERATOR_*`` variables; raises ``ValueError`` naming a malformed one."""
        env = os.environ if env is None else env

        def get(key: str, default: str) -> str:
            return env.get(f"ROCKET_OPERATOR_{key}", default)

        if get("RESOLVER", "dns") not in ("dns", "static"):
            raise ValueError("ROCKET_OPERATOR_RESOLVER must be dns or static")
        try:
            return cls(
                http_host=get("HTTP_HOST", "0.0.0.0"),
                http_port=int(get("HTTP_PORT", "8080")),
                recheck_seconds=float(get("RECHECK_SECONDS", "5")),
                resync_seconds=float(get("RESYNC_SECONDS", "60")),
                remoting_timeout=float(get("REMOTING_TIMEOUT", "3")),
                cluster_domain=get("CLUSTER_DOMAIN", "cluster.local"),
                resolver=get("RESOLVER", "dns"),
                static_nameservers=tuple(a.strip() for a in get("STATIC_NAMESERVERS", "").split(";") if a.strip()),
                analytics_image=get("ANALYTICS_IMAGE", DEFAULT_ANALYTICS_IMAGE) or DEFAULT_ANALYTICS_IMAGE,
                webhook_port=int(get("WEBHOOK_PORT", "-1")),
                webhook_addr=get("WEBHOOK_ADDR", "0.0.0.0"),
                webhook_host=get("WEBHOOK_HOST", ""),
            )
        except ValueError as exc:
            raise ValueError(f"bad ROCKET_OPERATOR_* setting: {exc}") from None
