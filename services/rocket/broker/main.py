"""Running a broker process: ``rocket broker`` (see :func:`serve` and :func:`cli_overrides`)."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from typing import Any

from rocket.broker.config import BrokerConfig, ConfigError

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
    await broker.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await stop.wait()
        log.info("%s received: shutting down", received[0] if received else "stop")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await broker.shutdown()
