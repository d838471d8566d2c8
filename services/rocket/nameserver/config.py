"""NameServer settings: defaults, config files, overrides.

Defaults follow RocketMQ 4.9.8 (``NamesrvConfig``/``NettyServerConfig``,
``NamesrvController``, ``RouteInfoManager``): remoting port 9876,
scan every 10 s, evict after 120 s of silence. The HTTP port (9877) is ours.

A config file is TOML (``.toml``) or JSON (anything else) holding a flat
table of the field names below, in ``snake_case`` or ``kebab-case``, e.g.::

    port = 9876
    http-port = 9877
    broker-timeout = 120

Units. Each key has one unit, the same in files and flags (``rocket nameserver --scan-interval``):

============================  =======  =================================================
key                           unit     meaning (default)
============================  =======  =================================================
scan_interval                 s        period of the scan for silent brokers (10)
scanNotActiveBrokerInterval   ms       the same setting under RocketMQ's ``NamesrvConfig``
                                       name and unit (10000)
scan_initial_delay            s        before the first scan (5; at most ``scan_interval``)
broker_timeout                s        silence after which a broker is evicted (120; Java's
                                       ``BROKER_CHANNEL_EXPIRED_TIME``, 120000 ms)
max_frame_size                bytes    largest remoting frame (16 MiB)
============================  =======  =================================================

TLS (remoting and HTTP ports, and this NameServer's own connections to brokers): RocketMQ's keys
(``tlsMode``, ``tls.server.certPath``, ... :data:`rocket.remoting.tls.TLS_KEYS`); in TOML they may
be written as they are (``tls.server.certPath = "..."`` is a dotted key) or quoted, in JSON as
flat keys or nested objects, e.g.::

    tlsMode = "enforcing"
    tls.server.certPath = "/etc/rocket/tls/tls.crt"
    tls.server.keyPath = "/etc/rocket/tls/tls.key"
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

from rocket.protocol.body import parse_properties
from rocket.remoting.command import DEFAULT_MAX_FRAME_SIZE
from rocket.remoting.connection import DEFAULT_MAX_PENDING_REQUESTS, FlowControl
from rocket.remoting.tls import TlsConfig, TlsConfigError, flatten_tables, is_tls_key


class ConfigError(ValueError):
    """A config file or value that cannot be used."""


@dataclass(slots=True)
class NameServerConfig:
    """Every NameServer setting.

    ``port``/``http_port``: TCP ports (0 = pick a free one; ``http_port``
    None = no HTTP server). ``scan_interval``/``broker_timeout``: seconds.
    ``scan_initial_delay``: seconds before the first scan (Java 5 s; never
    more than ``scan_interval``). ``max_frame_size``: bytes (16 MiB as Java).
    ``kv_config_path``: file for the KV store, or None for memory only.
    ``write_buffer_high_water_mark``/``write_buffer_low_water_mark``: bytes of
    unsent replies at which a connection stops / starts reading again (0 =
    Netty's 64 KiB / 32 KiB, as RocketMQ's NettyServerConfig);
    ``server_channel_max_pending_requests``: requests of one connection being
    handled at once at which it stops reading (see ``rocket.remoting.connection``).
    ``tls``: TLS of the remoting and HTTP ports and of the outgoing connections
    (:class:`~rocket.remoting.tls.TlsConfig`, RocketMQ's ``tls.*`` keys).
    """

    host: str = "0.0.0.0"
    port: int = 9876
    http_host: str | None = None
    http_port: int | None = 9877
    scan_interval: float = 10.0
    scan_initial_delay: float = 5.0
    broker_timeout: float = 120.0
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    order_message_enable: bool = False
    enable_all_topic_list: bool = True
    enable_topic_list: bool = True
    kv_config_path: str | None = None
    log_level: str = "INFO"
    #: ACL (RocketMQ 5.x ``AuthConfig`` names, as on brokers): requests must be signed by a known
    #: user (authentication) whose ACL allows them (authorization). ``acl_enable`` sets both.
    acl_enable: bool = False
    authentication_enabled: bool = False
    authorization_enabled: bool = False
    #: The initial Super user, JSON ``{"username","password"}`` or a file (``ROCKET_INIT_AUTH_USER``).
    init_authentication_user: str = ""
    #: What this NameServer signs its copies of the brokers' users with (default: the initial user).
    inner_client_authentication_credentials: str = ""
    #: Cluster name of the ``Cluster:`` resource checked for administrative requests.
    cluster_name: str = "DefaultCluster"
    #: Seconds between copies of the users and ACLs from a registered master broker.
    auth_sync_interval: float = 10.0
    #: Bearer token file for ``/api/v1`` (``rocket.auth.http``); with ACL on, Super users' keys work too.
    http_auth_token_file: str = ""
    #: Also require the credential for /healthz, /readyz and /metrics.
    http_auth_probes: bool = False
    write_buffer_high_water_mark: int = 0
    write_buffer_low_water_mark: int = 0
    server_channel_max_pending_requests: int = DEFAULT_MAX_PENDING_REQUESTS
    tls: TlsConfig = dataclass_field(default_factory=TlsConfig)
    #: Extra remoting ports, ``name:port,name:port``, each answering routes with the brokers'
    #: addresses on that listener (:mod:`rocket.nameserver.listeners`); empty = none.
    listeners: str = ""

    def flow_control(self) -> FlowControl:
        """The connections' backpressure bounds. Raises ``ValueError`` for inconsistent ones."""
        return FlowControl(self.write_buffer_high_water_mark, self.write_buffer_low_water_mark,
                           self.server_channel_max_pending_requests)

    def validate(self) -> None:
        """Raise :class:`ConfigError` for an out-of-range value."""
        for name in ("port", "http_port"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 65535:
                raise ConfigError(f"{name} {value} is not a TCP port")
        if self.scan_interval <= 0:
            raise ConfigError("scan_interval must be positive")
        if self.broker_timeout <= 0:
            raise ConfigError("broker_timeout must be positive")
        if self.scan_initial_delay < 0:
            raise ConfigError("scan_initial_delay must not be negative")
        if self.max_frame_size < 64:
            raise ConfigError("max_frame_size is too small")
        try:
            self.flow_control()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        from rocket.nameserver.listeners import ListenerError, parse_listener_ports

        try:
            parse_listener_ports(self.listeners)
        except ListenerError as exc:
            raise ConfigError(str(exc)) from None

    def with_overrides(self, **overrides: Any) -> NameServerConfig:
        """A copy with every override that is not None applied."""
        values = {k: v for k, v in overrides.items() if v is not None}
        return dataclasses.replace(self, **values)


_FIELDS = {f.name: f for f in dataclasses.fields(NameServerConfig)}

#: RocketMQ's ``NamesrvConfig`` keys accepted in files: name -> (field, seconds per unit of the key).
ROCKETMQ_KEYS: dict[str, tuple[str, float]] = {
    "scanNotActiveBrokerInterval": ("scan_interval", 0.001),
}


def load_config_file(path: Path) -> NameServerConfig:
    """Read a TOML or JSON config file into a :class:`NameServerConfig`.

    Raises :class:`ConfigError` for an unreadable or unparsable file, an
    unknown key or a value of the wrong type.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    try:
        if path.suffix.lower() == ".toml":
            data: Any = tomllib.loads(raw.decode())
        else:
            data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} does not parse: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a table/object")
    if isinstance(data.get("nameserver"), dict):  # allow a [nameserver] section
        data = data["nameserver"]
    data = flatten_tables(data)
    values: dict[str, Any] = {}
    tls: dict[str, Any] = {}
    for key, value in data.items():
        if is_tls_key(key):
            tls[key] = value
            continue
        if key in ROCKETMQ_KEYS:
            name, scale = ROCKETMQ_KEYS[key]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"config file {path}: {key} is in milliseconds and takes an integer, got {value!r}")
            values[name] = value * scale
            continue
        name = str(key).replace("-", "_")
        if name not in _FIELDS:
            raise ConfigError(f"config file {path}: unknown setting {key!r}")
        values[name] = _coerce(name, value, path)
    if tls:
        try:
            values["tls"] = TlsConfig.from_properties(tls)
        except TlsConfigError as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
    config = NameServerConfig(**values)
    config.validate()
    return config


def _coerce(name: str, value: Any, path: Path) -> Any:
    default = getattr(NameServerConfig(), name)
    kind = type(default) if default is not None else (int if name == "http_port" else str)
    if value is None:
        return None
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config file {path}: {name} must be true or false")
        return value
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is str and isinstance(value, str):
        return value
    raise ConfigError(f"config file {path}: {name} must be of type {kind.__name__}, got {value!r}")


# -- GET_NAMESRV_CONFIG / UPDATE_NAMESRV_CONFIG (mqadmin getNamesrvConfig / updateNamesrvConfig) -------

#: Settings that can change while the NameServer runs: Java name -> (field, to field, from field).
#: The Java names are those of RocketMQ's ``NamesrvConfig`` (intervals there are milliseconds);
#: ``brokerChannelExpiredTime`` is Java's fixed 120 s (``RouteInfoManager``), a setting here.
RUNTIME_SETTINGS: dict[str, tuple[str, Any, Any]] = {
    "orderMessageEnable": ("order_message_enable", lambda v: _java_bool(v), lambda v: str(v).lower()),
    "enableAllTopicList": ("enable_all_topic_list", lambda v: _java_bool(v), lambda v: str(v).lower()),
    "enableTopicList": ("enable_topic_list", lambda v: _java_bool(v), lambda v: str(v).lower()),
    "scanNotActiveBrokerInterval": ("scan_interval", lambda v: _positive_ms(v) / 1000.0,
                                    lambda v: str(round(v * 1000))),
    "brokerChannelExpiredTime": ("broker_timeout", lambda v: _positive_ms(v) / 1000.0,
                                 lambda v: str(round(v * 1000))),
}
#: Settings shown but read only at start (NettyServerConfig/NamesrvConfig names; ``httpPort`` is ours).
STARTUP_SETTINGS: dict[str, str] = {
    "listenPort": "port",
    "bindAddress": "host",
    "httpPort": "http_port",
    "kvConfigPath": "kv_config_path",
    "serverSocketMaxFrameSize": "max_frame_size",
}


def _java_bool(text: str) -> bool:
    low = text.strip().lower()
    if low not in ("true", "false"):
        raise ConfigError(f"{text!r} is not true or false")
    return low == "true"


def _positive_ms(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigError(f"{text!r} is not a whole number of milliseconds") from None
    if value <= 0:
        raise ConfigError(f"{value} must be positive")
    return value


def to_java_properties(config: NameServerConfig) -> dict[str, str]:
    """Every setting under its Java name, as GET_NAMESRV_CONFIG's properties body shows them."""
    out = {name: conv(getattr(config, field)) for name, (field, _, conv) in RUNTIME_SETTINGS.items()}
    for name, field in STARTUP_SETTINGS.items():
        value = getattr(config, field)
        out[name] = "" if value is None else str(value)
    return out


#: The bodies of UPDATE_NAMESRV_CONFIG (mqadmin updateNamesrvConfig): Java properties text.
parse_java_properties = parse_properties


def runtime_update(config: NameServerConfig, values: dict[str, str]) -> dict[str, Any]:
    """Check ``values`` (Java names) and return ``{field: new value}``; nothing is applied here.

    Raises :class:`ConfigError` naming the key for an unknown key, a setting read only at start,
    or a bad value: all or nothing.
    """
    changes: dict[str, Any] = {}
    for key, text in values.items():
        if key in STARTUP_SETTINGS:
            raise ConfigError(f"{key} is read at start only; change it in the NameServer's config and restart")
        if key not in RUNTIME_SETTINGS:
            known = ", ".join(sorted(RUNTIME_SETTINGS))
            raise ConfigError(f"unknown NameServer setting {key!r} (settable at run time: {known})")
        field, parse, _ = RUNTIME_SETTINGS[key]
        try:
            changes[field] = parse(text)
        except ConfigError as exc:
            raise ConfigError(f"{key}: {exc}") from None
    return changes
