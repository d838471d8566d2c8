"""A broker's addresses per listener (RocketCluster extension; see :mod:`rocket.nameserver.listeners`).

Two broker settings:

* ``listenerPorts`` = ``name:port,name:port``: the broker also serves its
  remoting protocol on each port (same request handlers as ``listenPort``), and
  its address on that listener is ``brokerIP1:<port>`` unless the file below
  says otherwise. Needed when listeners must differ by port (processes on one
  host); in Kubernetes a per-pod Service forwards to ``listenPort`` instead.
* ``listenerAddrsFile``: a Java properties file, re-read at every registration
  round, with lines ``<hostName>.<listener>=<host>:<port>`` (the broker whose host
  name, ``socket.gethostname()``, is ``hostName``: in Kubernetes a StatefulSet pod's
  name, which stays with the pod whatever role or brokerId it has) or
  ``<brokerName>.<brokerId>.<listener>=<host>:<port>``; a host-name entry wins.
  The Kubernetes operator writes host-name entries into the
  ``<cluster>-broker-listeners`` ConfigMap, so one file serves every broker pod
  and addresses learned later reach the brokers without a restart. A missing or
  unreadable file counts as empty (logged once per error).

The addresses go to the NameServers in REGISTER_BROKER's ext field
``listenerAddrs`` (:data:`rocket.nameserver.listeners.LISTENER_ADDRS_FIELD`).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from pathlib import Path

from rocket.nameserver.listeners import ListenerError, parse_listener_ports
from rocket.protocol.body import parse_properties
from rocket.remoting.connection import parse_addr

log = logging.getLogger("rocket.broker.listeners")


def read_listener_addrs_file(path: str, broker_name: str, broker_id: int, host_name: str | None = None
                             ) -> dict[str, str]:
    """The ``{listener: host:port}`` entries of ``path`` for this broker: keys
    ``<host_name>.<listener>`` (these win) and ``<broker_name>.<broker_id>.<listener>``.

    Other keys are ignored; a value that is not ``host:port`` is logged and skipped.
    Raises ``OSError`` when the file cannot be read.
    """
    text = Path(path).read_text(encoding="utf-8")
    by_id: dict[str, str] = {}
    by_host: dict[str, str] = {}
    prefixes = [(f"{broker_name}.{broker_id}.", by_id)]
    if host_name:
        prefixes.append((f"{host_name}.", by_host))
    for key, value in parse_properties(text).items():
        for prefix, out in prefixes:
            listener = key[len(prefix):] if key.startswith(prefix) else ""
            if listener and "." not in listener:
                _put(out, path, key, listener, value)
    return {**by_id, **by_host}


def _put(out: dict[str, str], path: str, key: str, listener: str, value: str) -> None:
    """``out[listener] = value`` when ``value`` is ``host:port``, else logged."""
    try:
        host, _ = parse_addr(value.strip())
    except ValueError:
        host = ""
    if not host:
        log.warning("%s: %s=%r is not host:port; ignored", path, key, value)
        return
    out[listener] = value.strip()


def listener_ports(text: str) -> dict[str, int]:
    """``listenerPorts`` -> {listener: port}. Raises ``ValueError`` for a malformed list."""
    try:
        return parse_listener_ports(text)
    except ListenerError as exc:
        raise ValueError(f"listenerPorts: {exc}") from None


class ListenerAddresses:
    """Computes the broker's ``{listener: host:port}`` at each registration round.

    ``broker_ip``: ``brokerIP1``; ``ports``: the bound port of each ``listenerPorts``
    listener; ``path``: ``listenerAddrsFile`` (empty = none); ``host_name``: the key of
    this broker's host-name entries (default ``socket.gethostname()``). The file's
    entries win over the ``brokerIP1:<port>`` defaults.
    """

    def __init__(self, broker_name: str, broker_id: int, broker_ip: str, path: str,
                 host_name: str | None = None) -> None:
        self.host_name = host_name if host_name is not None else socket.gethostname()
        self.broker_name = broker_name
        self.broker_id = broker_id
        self.broker_ip = broker_ip
        self.path = path
        self._last_error: str | None = None

    def current(self, ports: Mapping[str, int]) -> dict[str, str]:
        """The addresses now (never raises; a file that cannot be read is logged once per error)."""
        out = {name: f"{self.broker_ip}:{port}" for name, port in ports.items()}
        if self.path:
            try:
                out.update(read_listener_addrs_file(self.path, self.broker_name, self.broker_id,
                                                     self.host_name))
                self._last_error = None
            except OSError as exc:
                error = str(exc)
                if error != self._last_error:
                    log.warning("listener addresses file %s not read: %s", self.path, error)
                self._last_error = error
        return out
