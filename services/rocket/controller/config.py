"""Controller settings: peers, ports, the Raft secret, election knobs.

Names follow RocketMQ 5's ``ControllerConfig`` where one exists (``enableElectUncleanMaster``,
``notifyBrokerRoleChanged``, ``scanNotActiveBrokerInterval``, ``scanInactiveMasterInterval``,
``electMasterMaxRetryCount``, ``configBlackList``; ``controllerHeartBeatTimeoutMills`` is the
broker-side name of the heartbeat timeout, used here for the default when a heartbeat carries
none). Differences from RocketMQ, on purpose:

* ``scanNotActiveBrokerInterval`` defaults to 1 000 ms (RocketMQ 5 000): a silent master is
  noticed within 1 s of its timeout, for a shorter failover. The scan is a dictionary walk.
* Raft is pysyncobj's, not DLedger/JRaft: each peer has a remoting address (what brokers and
  mqadmin use) and a Raft address. ``--controller-peers`` lists every peer's remoting address,
  each optionally followed by ``/<raft port>`` (default: ``--raft-port``), e.g.
  ``127.0.0.1:9878/9880,127.0.0.1:9888/9890,127.0.0.1:9898/9900``. Peer ids are ``n0``, ``n1``,
  ... in that order (as DLedger's ``controllerDLegerPeers`` ids).
* The Raft port is encrypted and authenticated with a shared secret (pysyncobj ``password``:
  Fernet, i.e. AES-128-CBC + HMAC-SHA256, with a key derived by PBKDF2): from the file
  ``--secret-file`` or the environment variable ``ROCKET_CONTROLLER_SECRET``, never a command-line
  value. A controller refuses to start without one (at least 16 characters).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rocket.auth.hook import AuthConfig
from rocket.protocol.body import parse_properties as parse_properties
from rocket.remoting.command import DEFAULT_MAX_FRAME_SIZE
from rocket.remoting.connection import parse_addr
from rocket.remoting.tls import TlsConfig

#: Environment variable holding the Raft secret.
SECRET_ENV = "ROCKET_CONTROLLER_SECRET"
#: Shortest secret accepted (characters).
MIN_SECRET_LENGTH = 16
#: RocketMQ's controller port in its deployment docs.
DEFAULT_PORT = 9878
#: Our default Raft port.
DEFAULT_RAFT_PORT = 9880


class ConfigError(ValueError):
    """A controller setting that cannot be used."""


@dataclass(frozen=True, slots=True)
class Peer:
    """One controller: ``id`` (``n0``...), ``address`` (remoting ``host:port``), ``raft_address``."""

    id: str
    address: str
    raft_address: str


def parse_peers(text: str, default_raft_port: int = DEFAULT_RAFT_PORT) -> list[Peer]:
    """Parse ``"host:port[/raftPort],..."`` (``,`` or ``;`` between entries).

    Raises :class:`ConfigError` for an empty list, a malformed entry or a duplicate address.
    """
    peers: list[Peer] = []
    for i, raw in enumerate(x.strip() for x in text.replace(";", ",").split(",")):
        if not raw:
            continue
        addr, _, raft = raw.partition("/")
        try:
            host, port = parse_addr(addr)
            raft_port = int(raft) if raft else default_raft_port
        except ValueError as exc:
            raise ConfigError(f"bad controller peer {raw!r}: {exc}") from None
        if not 0 < raft_port <= 65535 or not 0 < port <= 65535:
            raise ConfigError(f"bad controller peer {raw!r}: port out of range")
        peers.append(Peer(f"n{i}", f"{host}:{port}", f"{host}:{raft_port}"))
    if not peers:
        raise ConfigError("--controller-peers is empty")
    for attr in ("address", "raft_address"):
        seen = [getattr(p, attr) for p in peers]
        if len(set(seen)) != len(seen):
            raise ConfigError(f"--controller-peers repeats an address: {text!r}")
    return peers


def read_secret(secret_file: str | Path | None, environ: dict[str, str] | None = None) -> str:
    """The Raft secret: the file's content (stripped) when given, else ``$ROCKET_CONTROLLER_SECRET``.

    Raises :class:`ConfigError` when there is none, the file cannot be read, or it is shorter
    than :data:`MIN_SECRET_LENGTH` characters.
    """
    env = os.environ if environ is None else environ
    if secret_file is not None:
        try:
            secret = Path(secret_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the controller secret file {secret_file}: {exc}") from None
        source = str(secret_file)
    else:
        secret = env.get(SECRET_ENV, "").strip()
        source = f"${SECRET_ENV}"
        if not secret:
            raise ConfigError(f"no controller secret: pass --secret-file or set {SECRET_ENV} "
                              "(the Raft port is never left unauthenticated)")
    if len(secret) < MIN_SECRET_LENGTH:
        raise ConfigError(f"the controller secret from {source} is shorter than {MIN_SECRET_LENGTH} characters")
    return secret


@dataclass(slots=True)
class ControllerConfig:
    """Every controller setting (times in milliseconds unless named ``_s``).

    ``peers`` and ``self_address`` (the remoting address of this peer among ``peers``) decide
    the Raft cluster; ``data_dir`` holds pysyncobj's journal and full dump (the state survives
    restarts); ``secret`` encrypts the Raft port.
    """

    peers: list[Peer] = field(default_factory=list)
    self_address: str = ""
    secret: str = field(default="", repr=False)
    data_dir: str = "controller-data"
    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    #: HTTP probes, metrics and status (None: no HTTP server; 0 picks a port).
    http_port: int | None = None
    raft_bind_host: str | None = None
    controller_group: str = "RocketController"
    enable_elect_unclean_master: bool = False
    notify_broker_role_changed: bool = True
    scan_not_active_broker_interval: int = 1_000
    scan_inactive_master_interval: int = 5_000
    controller_heart_beat_timeout_mills: int = 10_000
    elect_master_max_retry_count: int = 3
    config_black_list: str = "configBlackList;configStorePath;controllerPeers;dataDir;secret"
    #: How long a write waits for the Raft majority before it is answered with an error (s).
    write_timeout_s: float = 5.0
    #: pysyncobj timings (s): election timeout range, and how long a leader that hears from no
    #: majority keeps believing it leads (pysyncobj's default is 30 s; short, so it steps down).
    raft_min_timeout_s: float = 0.4
    raft_max_timeout_s: float = 1.4
    raft_leader_fallback_timeout_s: float = 2.0
    raft_connection_retry_s: float = 1.0
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    log_level: str = "INFO"
    #: TLS of the remoting and HTTP ports, and of the notifications sent to brokers (``tls.enable``).
    tls: TlsConfig = field(default_factory=TlsConfig)
    #: ACL (RocketMQ 5.x ``AuthConfig`` names, as on brokers and NameServers): every request on the
    #: remoting port must be signed by a known user (authentication) whose ACL allows it
    #: (authorization, :data:`rocket.auth.classify.CONTROLLER_CLASSIFIERS`).
    authentication_enabled: bool = False
    authorization_enabled: bool = False
    #: The initial Super user: JSON ``{"username","password"}`` or a file (``ROCKET_INIT_AUTH_USER``).
    init_authentication_user: str = field(default="", repr=False)
    #: What this controller signs its own requests with (notifications to brokers, copies of their
    #: users): JSON ``{"accessKey","secretKey"}`` or a file; default the initial user.
    inner_client_authentication_credentials: str = field(default="", repr=False)
    #: The cluster of the ``Cluster:<name>`` resource every controller request is checked against.
    cluster_name: str = "DefaultCluster"
    #: Seconds between copies of the users and ACLs from a registered broker (as NameServers do).
    auth_sync_interval_s: float = 10.0
    #: Bearer token file for the HTTP ``/api/v1`` routes (``rocket.auth.http``); with ACL on, Super
    #: users' keys work too.
    http_auth_token_file: str = ""
    #: Also require the credential for /healthz, /readyz and /metrics.
    http_auth_probes: bool = False

    @property
    def acl_enabled(self) -> bool:
        """Whether requests are checked at all (authentication or authorization)."""
        return self.authentication_enabled or self.authorization_enabled

    def auth_config(self) -> AuthConfig:
        """The :class:`~rocket.auth.AuthConfig` of the remoting port's check (users in memory)."""
        return AuthConfig(cluster_name=self.cluster_name, authentication_enabled=self.authentication_enabled,
                          authorization_enabled=self.authorization_enabled,
                          init_authentication_user=self.init_authentication_user,
                          inner_client_authentication_credentials=self.inner_client_authentication_credentials)

    @property
    def self_peer(self) -> Peer:
        """This controller's :class:`Peer`. Raises :class:`ConfigError` when not among ``peers``."""
        for peer in self.peers:
            if peer.address == self.self_address:
                return peer
        raise ConfigError(f"this controller ({self.self_address or '?'}) is not among --controller-peers "
                          f"{[p.address for p in self.peers]}")

    def resolve_self(self, listen_port: int) -> None:
        """Pick ``self_address`` when unset: the only peer whose port is ``listen_port``.

        Raises :class:`ConfigError` when none or several match (then pass ``--self-addr``).
        """
        if self.self_address:
            self.self_peer  # noqa: B018 - validates
            return
        matches = [p for p in self.peers if parse_addr(p.address)[1] == listen_port]
        if len(matches) != 1:
            raise ConfigError(f"cannot tell which of --controller-peers is this controller (port {listen_port}): "
                              "pass --self-addr")
        self.self_address = matches[0].address

    def validate(self) -> None:
        """Raise :class:`ConfigError` for an unusable setting."""
        if not self.peers:
            raise ConfigError("no controller peers")
        self.self_peer  # noqa: B018 - validates
        for name in ("port", "http_port"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 65535:
                raise ConfigError(f"{name} {value} out of range")
        if len(self.secret) < MIN_SECRET_LENGTH:
            raise ConfigError("no controller secret (or shorter than 16 characters)")
        for name in ("scan_not_active_broker_interval", "scan_inactive_master_interval",
                     "controller_heart_beat_timeout_mills", "elect_master_max_retry_count"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        if not self.raft_max_timeout_s > self.raft_min_timeout_s > 0:
            raise ConfigError("raft timeouts: need 0 < min < max")
        if self.auth_sync_interval_s <= 0:
            raise ConfigError("auth_sync_interval_s must be positive")
        if not self.cluster_name.strip():
            raise ConfigError("cluster_name must not be empty")

    def with_overrides(self, **overrides: Any) -> ControllerConfig:
        """A copy with every non-None override applied."""
        return dataclasses.replace(self, **{k: v for k, v in overrides.items() if v is not None})

    # -- GET_CONTROLLER_CONFIG / UPDATE_CONTROLLER_CONFIG -----------------------------------------

    #: properties name -> (field, type) of the settings shown, and of those updatable at runtime.
    PROPERTIES: ClassVar[dict[str, tuple[str, type]]] = {
        "controllerDLegerGroup": ("controller_group", str),
        "enableElectUncleanMaster": ("enable_elect_unclean_master", bool),
        "notifyBrokerRoleChanged": ("notify_broker_role_changed", bool),
        "scanNotActiveBrokerInterval": ("scan_not_active_broker_interval", int),
        "scanInactiveMasterInterval": ("scan_inactive_master_interval", int),
        "controllerHeartBeatTimeoutMills": ("controller_heart_beat_timeout_mills", int),
        "electMasterMaxRetryCount": ("elect_master_max_retry_count", int),
        "configBlackList": ("config_black_list", str),
        "listenPort": ("port", int),
        "controllerStorePath": ("data_dir", str),
        "authenticationEnabled": ("authentication_enabled", bool),
        "authorizationEnabled": ("authorization_enabled", bool),
    }

    def to_properties(self) -> str:
        """Every shown setting as Java properties text (``key=value`` lines), plus
        ``controllerPeers`` and ``controllerSelfAddress``; never the secret."""
        lines = []
        for key, (name, kind) in sorted(self.PROPERTIES.items()):
            value = getattr(self, name)
            lines.append(f"{key}={str(value).lower() if kind is bool else value}")
        lines.append("controllerPeers=" + ";".join(f"{p.id}-{p.address}/{p.raft_address}" for p in self.peers))
        lines.append(f"controllerSelfAddress={self.self_address}")
        return "\n".join(sorted(lines)) + "\n"

    def black_list(self) -> set[str]:
        """Keys UPDATE_CONTROLLER_CONFIG may not change (``configBlackList``, ``;``-separated)."""
        return {"configBlackList", "listenPort", "controllerStorePath", "controllerDLegerGroup",
                "authenticationEnabled", "authorizationEnabled"} | {
            x.strip() for x in self.config_black_list.split(";") if x.strip()}

    def update_from_properties(self, props: dict[str, str]) -> list[str]:
        """Apply ``props`` (UPDATE_CONTROLLER_CONFIG); returns the keys changed; unknown keys are
        ignored as RocketMQ's ``Configuration.update`` does. Raises :class:`ConfigError` for a
        black-listed key or a value of the wrong type (then nothing changes)."""
        blocked = sorted(set(props) & self.black_list())
        if blocked:
            raise ConfigError(f"Can not update config in black list: {', '.join(blocked)}")
        staged: dict[str, Any] = {}
        for key, raw in props.items():
            spec = self.PROPERTIES.get(key)
            if spec is None:
                continue
            name, kind = spec
            text = raw.strip()
            if kind is bool:
                if text.lower() not in ("true", "false"):
                    raise ConfigError(f"{key}: not a boolean: {raw!r}")
                staged[name] = text.lower() == "true"
            elif kind is int:
                try:
                    number = int(text)
                except ValueError:
                    raise ConfigError(f"{key}: not an integer: {raw!r}") from None
                if number <= 0:
                    raise ConfigError(f"{key}: must be positive")
                staged[name] = number
            else:
                staged[name] = text
        for name, value in staged.items():
            setattr(self, name, value)
        return sorted(k for k in props if k in self.PROPERTIES)
