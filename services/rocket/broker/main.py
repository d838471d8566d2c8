"""Running a broker process: ``rocket broker`` (see :func:`serve` and :func:`cli_overrides`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from rocket.broker.config import BrokerConfig, ConfigError
from rocket.runtime import stop_signals, tune_garbage_collector

log = logging.getLogger("rocket.broker")


def cli_overrides(
    *,
    name: str | None = None,
    cluster: str | None = None,
    broker_id: int | None = None,
    ip: str | None = None,
    port: int | None = None,
    http_port: int | None = None,
    namesrv: str | None = None,
    store_dir: str | None = None,
    flush: str | None = None,
    role: str | None = None,
    settings: Sequence[str] = (),
) -> dict[str, Any]:
    """Command-line flags as config overrides (Java names); ``settings`` are ``key=value`` strings.

    Raises :class:`ConfigError` for a setting without ``=``.
    """
    out: dict[str, Any] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    flags = {
        "brokerName": name,
        "brokerClusterName": cluster,
        "brokerId": broker_id,
        "brokerIP1": ip,
        "listenPort": port,
        "httpPort": http_port,
        "namesrvAddr": namesrv,
        "storePathRootDir": store_dir,
        "flushDiskType": flush,
        "brokerRole": role,
    }
    out.update({k: v for k, v in flags.items() if v is not None})
    return out


async def serve(config: BrokerConfig) -> None:
    """Run a broker until SIGTERM or SIGINT, then shut it down cleanly.

    Raises ``OSError`` when a port is taken, and whatever the store raises
    when its files cannot be recovered.
    """
    from rocket.broker.controller import BrokerController

    broker = BrokerController(config)
    # the handlers go in before start(): the remoting port opens before registration and the
    # admin HTTP server, and a SIGTERM in that window must still shut the broker down cleanly
    async with stop_signals() as received:
        await broker.start()
        tune_garbage_collector()
        try:
            log.info("%s received: shutting down", await received)
        finally:
            await broker.shutdown()
