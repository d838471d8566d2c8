"""The embedded default: a whole cluster on this machine, and the LogHub demo.

``rocket local up`` starts two NameServers and two broker groups (``broker-a``
and ``broker-b``), each a master (brokerId 0, ASYNC_MASTER) and a slave
(``broker-a-slave``: brokerId 1, replicating from its master, serving reads
when the master is gone), as separate processes (``python -m rocket.cli
nameserver|broker ...``), with data and logs under one folder (default
``./data/local``), waits until every one is ready, prints the addresses and
writes ``state.json`` (pids, ports) there. ``slaves=False`` starts masters
only. CommitLog files are 256 MiB here (``LOCAL_COMMITLOG_FILE_SIZE``, not
RocketMQ's 1 GiB): four brokers preallocate 1 GiB, not 4 GiB, of disk. ``rocket local down`` stops them
(SIGTERM, then waits; SIGKILL after a timeout), ``rocket local status`` shows
them.

Ports, from a base port P (default 9876)::

    namesrv-1   P       (HTTP P+10)        9876 / 9886
    namesrv-2   P+1     (HTTP P+11)        9877 / 9887
    broker-a    P+1035  (HTTP +4)          10911 / 10915  (also uses 10909 and 10912)
    broker-b    P+1045  (HTTP +4)          10921 / 10925  (also uses 10919 and 10922)
    broker-a-slave  P+1055  (HTTP +4)      10931 / 10935  (also uses 10929 and 10932)
    broker-b-slave  P+1065  (HTTP +4)      10941 / 10945  (also uses 10939 and 10942)

Failover (``failover``): with slaves the default is **controller mode**
(RocketMQ 5, RIP-44): three controllers ``controller-1..3`` (``rocket
controller``, remoting ports P+20, P+30, P+40, their Raft ports +2 and HTTP
ports +4, a random Raft secret in ``<dir>/controller-secret``) choose each
group's master; the brokers run with ``enableControllerMode``,
``allAckInSyncStateSet`` and ``controllerAddr`` (``rocket.broker.controller_mode``).
Which process of a group is master is then the controllers' choice (the first
to ask; ``broker-a-slave`` is only a process name). ``rocket local kill
broker-a`` (SIGKILL) shows a failover: the controllers elect the other broker
within a few seconds, clients continue; ``rocket local start broker-a`` brings
the process back and it rejoins as a slave. ``failover="manual"`` (``rocket
local up --failover manual``) runs the old layout: fixed master and slave, and a
failed master is replaced by hand with ``rocket cluster failover --broker-name
broker-a``; the old master, started again, rejoins as a slave
(``rocket.broker.replicas``, ``rocket.store.ha``).

``python -m rocket.local demo`` (``make run``) starts a cluster in a
temporary folder, publishes the LogHub samples — one topic per system
(``loghub-HDFS`` ...), one message per line with tags = system — consumes them
back with a push consumer, prints a summary (messages, bytes, throughput,
end-to-end latency percentiles) and stops the cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rocket.percentiles import percentile

DEFAULT_DIR = Path("data/local")
DEFAULT_BASE_PORT = 9876
STATE_FILE = "state.json"
CLUSTER_NAME = "DefaultCluster"
BROKER_NAMES = ("broker-a", "broker-b")
#: Controller processes of a controller-mode local cluster.
CONTROLLER_NAMES = ("controller-1", "controller-2", "controller-3")
#: The Raft secret of the local controllers (written once, mode 0600).
CONTROLLER_SECRET_FILE = "controller-secret"
#: Process name of a group's slave: ``broker-a-slave``.
SLAVE_SUFFIX = "-slave"
#: ``mappedFileSizeCommitLog`` of local brokers (bytes); a master and its slave must agree on it.
LOCAL_COMMITLOG_FILE_SIZE = 256 * 1024 * 1024
#: IndexFile size of local brokers: 500,000 slots and 2,000,000 entries (about 42 MB a file, preallocated)
#: instead of RocketMQ's 5,000,000 / 20,000,000 (about 420 MB), ample for a development cluster.
LOCAL_INDEX_SETTINGS = ("--set", "maxHashSlotNum=500000", "--set", "maxIndexNum=2000000")
PACKAGE_ROOT = Path(__file__).resolve().parent
#: The project's root when running from a checkout (services/rocket/local.py → project).
PROJECT_ROOT = PACKAGE_ROOT.parent.parent


class LocalClusterError(RuntimeError):
    """A local cluster could not be started, found, or stopped (the message says why)."""


@dataclass
class ProcessInfo:
    """One process of the local cluster, as recorded in ``state.json``."""

    name: str
    kind: str  # "nameserver" or "broker"
    port: int
    http_port: int
    log: str
    argv: list[str]
    pid: int = 0

    @property
    def addr(self) -> str:
        """``127.0.0.1:port`` of its remoting listener."""
        return f"127.0.0.1:{self.port}"


@dataclass
class ClusterState:
    """What ``state.json`` holds: where the cluster lives and its processes."""

    data_dir: str
    base_port: int
    namesrv: str
    processes: list[ProcessInfo] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    #: With ``--secure``: the admin (Super user) credentials file and the HTTP bearer token file.
    credentials_file: str = ""
    http_token_file: str = ""
    #: With ``--secure``: the CA certificate (PEM) that signs every process's certificate (TLS).
    tls_ca_file: str = ""

    def save(self) -> None:
        """Write ``state.json`` atomically."""
        path = Path(self.data_dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, path)

    @classmethod
    def load(cls, data_dir: Path) -> ClusterState:
        """Read ``state.json``; raises :class:`LocalClusterError` when absent or unreadable."""
        path = Path(data_dir) / STATE_FILE
        try:
            raw = json.loads(path.read_text())
            procs = [ProcessInfo(**p) for p in raw.pop("processes", [])]
            return cls(processes=procs, **raw)
        except FileNotFoundError:
            raise LocalClusterError(f"no local cluster state at {path} (run 'rocket local up')") from None
        except (ValueError, TypeError) as exc:
            raise LocalClusterError(f"unreadable state file {path}: {exc}") from None


def ports_for(base_port: int, brokers: int = len(BROKER_NAMES), slaves: bool = True,
              controllers: bool = False) -> dict[str, tuple[int, int]]:
    """Process name → (remoting port, HTTP port) for a cluster at ``base_port`` (a controller's
    Raft port is its remoting port + 2)."""
    layout = {
        "namesrv-1": (base_port, base_port + 10),
        "namesrv-2": (base_port + 1, base_port + 11),
    }
    if controllers:
        for i, name in enumerate(CONTROLLER_NAMES):
            port = base_port + 20 + 10 * i
            layout[name] = (port, port + 4)
    for i, name in enumerate(BROKER_NAMES[:brokers]):
        port = base_port + 1035 + 10 * i
        layout[name] = (port, port + 4)
    if slaves:
        for i, name in enumerate(BROKER_NAMES[:brokers]):
            port = base_port + 1055 + 10 * i
            layout[name + SLAVE_SUFFIX] = (port, port + 4)
    return layout


def _all_ports(base_port: int, brokers: int = len(BROKER_NAMES), slaves: bool = True,
               controllers: bool = True) -> list[int]:
    ports: list[int] = []
    for name, (port, http) in ports_for(base_port, brokers, slaves, controllers).items():
        ports.append(http)
        if name.startswith("broker"):
            ports.extend([port - 2, port, port + 1])
        elif name.startswith("controller"):
            ports.extend([port, port + 2])
        else:
            ports.append(port)
    return ports


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind (TIME_WAIT is fine)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for ``bind(0)`` and outgoing connections (``net.ipv4.ip_local_port_range``;
    Linux's default 32768-60999 when it cannot be read)."""
    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def find_free_base_port(low: int = 20000, high: int | None = None, attempts: int = 200) -> int:
    """A base port whose whole layout (see :func:`ports_for`) is free right now. By default the
    layout stays below the kernel's ephemeral port range, so that no outgoing connection of
    another process can take one of its ports between this check and the bind (it did: a slave
    failed with EADDRINUSE). Raises :class:`LocalClusterError` when none is found."""
    if high is None:
        span = max(_all_ports(0)) + 1
        high = ephemeral_port_range()[0] - span
        if high <= low:
            high = 50000
    for _ in range(attempts):
        base = random.randrange(low, high)
        if all(_port_free(p) for p in _all_ports(base)):
            return base
    raise LocalClusterError("no free block of ports found")


def _python_env() -> dict[str, str]:
    env = dict(os.environ)
    services = str(PACKAGE_ROOT.parent)
    env["PYTHONPATH"] = services + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _spawn(info: ProcessInfo, *, detach: bool) -> subprocess.Popen[bytes]:
    Path(info.log).parent.mkdir(parents=True, exist_ok=True)
    with open(info.log, "ab") as log:
        proc = subprocess.Popen(
            info.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            # always a session of its own: a terminal's Ctrl-C goes to us only, and we stop the
            # processes in order (brokers first); ``detach`` only says whether we keep watching
            env=_python_env(), start_new_session=True,
        )
    info.pid = proc.pid
    return proc


def _http_get(port: int, path: str, ca_file: str = "", token: str = "") -> bytes | None:
    """The body of GET ``path`` on the local ``port`` (over HTTPS trusting ``ca_file``, with the
    bearer ``token``, when given); None unless it answers 200."""
    scheme, context = "http", None
    if ca_file:
        scheme, context = "https", ssl.create_default_context(cafile=ca_file)
    req = urllib.request.Request(f"{scheme}://127.0.0.1:{port}{path}",
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=1.0, context=context) as resp:
            return resp.read() if resp.status == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _http_ok(port: int, path: str, ca_file: str = "") -> bool:
    """GET ``path`` on the local ``port`` answers 200 (over HTTPS trusting ``ca_file`` when given)."""
    return _http_get(port, path, ca_file) is not None


def _http_json(port: int, path: str, ca_file: str = "", token: str = "") -> Any:
    """The JSON body of :func:`_http_get`; None when it does not answer 200 with JSON."""
    body = _http_get(port, path, ca_file, token)
    try:
        return None if body is None else json.loads(body)
    except ValueError:
        return None


def _group_in_sync(members: Sequence[ProcessInfo], ca_file: str = "", token: str = "") -> bool:
    """Controller mode: one process of the group is master and every process is in its
    SyncStateSet (so a kill -9 of the master now can be failed over without losing an
    acknowledged message: the controllers elect only from the SyncStateSet, as RocketMQ 5's
    ``ReplicasInfoManager.electMaster`` without ``enableElectUncleanMaster``)."""
    for info in members:
        ha = _http_json(info.http_port, "/api/v1/ha", ca_file, token)
        if not isinstance(ha, dict) or ha.get("brokerRole") == "SLAVE":
            continue
        ctl = ha.get("controllerMode") or {}
        return len(ctl.get("syncStateSet") or []) >= len(members)
    return False


def _tcp_ok(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def pid_alive(pid: int) -> bool:
    """True when ``pid`` runs and is one of our processes (its command line has ``rocket.cli``)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"rocket.cli" not in cmdline:
            return False
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except OSError:
        return True  # no /proc: trust kill(0)


def _ready(info: ProcessInfo, ca_file: str = "") -> bool:
    if info.kind == "controller":
        return _tcp_ok(info.port)
    if info.kind == "broker":
        return _http_ok(info.http_port, "/readyz", ca_file)
    return _tcp_ok(info.port) and (_http_ok(info.http_port, "/readyz", ca_file)
                                   or _http_ok(info.http_port, "/healthz", ca_file))


async def _registered(namesrv: Sequence[str], brokers: Sequence[str], credentials_file: str = "",
                      ca_file: str = "") -> bool:
    from rocket.auth.signature import parse_credentials_file
    from rocket.client.base import MQClient
    from rocket.protocol import ClusterInfo
    from rocket.remoting import RequestCode
    from rocket.remoting.tls import ClientTls

    creds = parse_credentials_file(credentials_file) if credentials_file else None
    tls = ClientTls.trusting(ca_file) if ca_file else False
    client = MQClient(";".join(namesrv), timeout=1.0, credentials=creds, tls=tls)
    try:
        for addr in namesrv:
            response = await client.invoke(addr, RequestCode.GET_BROKER_CLUSTER_INFO)
            if response.code != 0:
                return False
            info = ClusterInfo.from_json(response.body)
            if not all(name in info.broker_addr_table and info.broker_addr_table[name].master_addr for name in brokers):
                return False
        return True
    except Exception:
        return False
    finally:
        await client.close()


class LocalCluster:
    """Start, watch and stop a local cluster under ``data_dir``.

    ``brokers``: how many broker groups (1 or 2); ``slaves``: a slave per group
    (brokerId 1, ``slaveReadEnable``); ``flush``: ``ASYNC_FLUSH`` or
    ``SYNC_FLUSH``; ``extra_broker_args``: more ``rocket broker`` flags; ``failover``:
    ``"controller"`` (3 controllers elect the masters; the default with slaves) or ``"manual"``
    (fixed roles; always so without slaves).
    ``secure``: ACL on every NameServer, controller and broker (``aclEnable``), an admin Super user whose
    keys are written to ``<data_dir>/secrets/admin.credentials`` (mode 0600, kept across runs) and
    a bearer token for the HTTP API in ``<data_dir>/secrets/http.token``; and TLS enforced on every
    port (``tlsMode=enforcing``, remoting, HA and HTTP; brokers connect with ``tls.enable``), with
    a CA made for this folder (``<data_dir>/secrets/tls/ca.pem``, kept across runs; its key stays
    there, 0600) and a certificate for 127.0.0.1/localhost (``server.pem``/``server.key``).
    ``acl`` / ``tls`` (default: ``secure``) turn either half on alone (the benchmarks compare them).
    ``wait_in_sync``: with controllers, :meth:`start` returns once every slave is in its master's
    SyncStateSet, so that a master killed from then on can be failed over (False: once the brokers
    registered; for a slave kept from replicating on purpose).
    """

    def __init__(self, data_dir: Path | str = DEFAULT_DIR, base_port: int = DEFAULT_BASE_PORT, *,
                 brokers: int = 2, nameservers: int = 2, flush: str = "ASYNC_FLUSH",
                 extra_broker_args: Sequence[str] = (), slaves: bool = True, secure: bool = False,
                 failover: str = "controller", acl: bool | None = None, tls: bool | None = None,
                 wait_in_sync: bool = True) -> None:
        if failover not in ("controller", "manual"):
            raise LocalClusterError(f"failover must be 'controller' or 'manual', not {failover!r}")
        self.acl = secure if acl is None else acl
        self.tls = secure if tls is None else tls
        self.secure = self.acl or self.tls
        self.controllers = failover == "controller" and slaves
        self.data_dir = Path(data_dir).resolve()
        self.base_port = base_port
        self.brokers = max(1, min(brokers, len(BROKER_NAMES)))
        self.nameservers = max(1, min(nameservers, 2))
        self.flush = flush
        self.extra_broker_args = list(extra_broker_args)
        self.slaves = slaves
        self.wait_in_sync = wait_in_sync
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.state: ClusterState | None = None

    @property
    def namesrv(self) -> str:
        """``"127.0.0.1:P;127.0.0.1:P+1"``."""
        layout = ports_for(self.base_port, self.brokers, self.slaves, self.controllers)
        return ";".join(f"127.0.0.1:{layout[f'namesrv-{i + 1}'][0]}" for i in range(self.nameservers))

    def _store_args(self, group: str) -> list[str]:
        """Store flags of a broker of ``group``: its CommitLog file size and the local index size."""
        return ["--set", f"mappedFileSizeCommitLog={self._commitlog_file_size(group)}", *LOCAL_INDEX_SETTINGS]

    def _commitlog_file_size(self, group: str) -> int:
        """The CommitLog file size of a broker group (master and slave must agree): that of
        files its stores already hold (a store written before keeps working), else
        :data:`LOCAL_COMMITLOG_FILE_SIZE`."""
        for name in (group, group + SLAVE_SUFFIX):
            with contextlib.suppress(OSError):
                for entry in sorted((self.data_dir / name / "commitlog").iterdir()):
                    if entry.name.isdigit() and entry.stat().st_size > 0:
                        return entry.stat().st_size
        return LOCAL_COMMITLOG_FILE_SIZE

    @property
    def secrets_dir(self) -> Path:
        """Where ``--secure`` keeps the admin credentials and the HTTP token."""
        return self.data_dir / "secrets"

    def ensure_secrets(self) -> tuple[Path, Path, Path]:
        """Create (once) the admin credentials, the matching ``initAuthenticationUser`` JSON and the
        HTTP token, all mode 0600; returns (credentials file, init-user file, token file)."""
        import secrets as _secrets

        folder = self.secrets_dir
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
        creds, init_user, token = folder / "admin.credentials", folder / "admin-user.json", folder / "http.token"

        def write(path: Path, text: str) -> None:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)

        if not creds.exists():
            write(creds, f"AccessKey=rocket-admin\nSecretKey={_secrets.token_urlsafe(24)}\n")
        from rocket.auth.signature import parse_credentials_file

        admin = parse_credentials_file(creds)
        write(init_user, json.dumps({"username": admin.access_key, "password": admin.secret_key}))
        if not token.exists():
            write(token, _secrets.token_urlsafe(32) + "\n")
        return creds, init_user, token

    @property
    def tls_dir(self) -> Path:
        """Where ``--secure`` keeps the CA, the certificate and ``tls.properties``."""
        return self.secrets_dir / "tls"

    def ensure_tls(self) -> tuple[Path, Path]:
        """Create the CA once (``ca.pem``, ``ca.key`` 0600), a certificate it signs for 127.0.0.1 and
        localhost when there is none valid for 30 more days, and ``tls.properties`` (RocketMQ's
        ``tls.config.file``: the certificate, its key, ``tls.enable`` and the CA as trust store);
        returns (CA file, tls.properties)."""
        from rocket.remoting import certs

        folder = self.tls_dir
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
        ca_file, ca_key = folder / "ca.pem", folder / "ca.key"
        if not (ca_file.exists() and ca_key.exists()):
            certs.write_pair(folder, "ca", certs.issue_ca(f"RocketCluster local CA ({self.data_dir.name})"))
        ca = certs.KeyPair(ca_file.read_bytes(), ca_key.read_bytes())
        server = folder / "server.pem"
        if not server.exists() or certs.expires_within(server.read_bytes(), days=30):
            certs.write_pair(folder, "server", certs.issue_cert(ca, "rocket-local", ["127.0.0.1", "localhost"]))
        props = folder / "tls.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in {
            "tls.test.mode.enable": "false",
            "tls.server.certPath": folder / "server.pem",
            "tls.server.keyPath": folder / "server.key",
            "tls.enable": "true",
            "tls.client.authServer": "true",
            "tls.client.trustCertPath": ca_file,
        }.items()))
        return ca_file, props

    def _controller_secure_args(self) -> list[str]:
        """``rocket controller`` flags turning ACL and/or TLS on (as for the brokers: the same
        initial Super user, which the brokers also sign their controller requests with)."""
        args: list[str] = []
        if self.acl:
            _, init_user, token = self.ensure_secrets()
            args += ["--acl-enable", "--init-authentication-user", str(init_user), "--cluster", CLUSTER_NAME,
                     "--http-auth-token-file", str(token), "--auth-sync-interval", "2"]
        if self.tls:
            _, tls_props = self.ensure_tls()
            args += ["--tls-mode", "enforcing", "--tls-config", str(tls_props)]
        return args

    def _secure_args(self) -> tuple[list[str], list[str]]:
        """(NameServer flags, broker flags) turning ACL and/or TLS on."""
        if not self.secure:
            return [], []
        ns_settings: dict[str, Any] = {}
        broker: list[str] = []
        if self.acl:
            _, init_user, token = self.ensure_secrets()
            ns_settings.update({"acl_enable": True, "init_authentication_user": str(init_user),
                                "auth_sync_interval": 2.0, "http_auth_token_file": str(token)})
            broker += ["--set", "aclEnable=true", "--set", f"initAuthenticationUser={init_user}",
                       "--set", f"httpAuthTokenFile={token}"]
        if self.tls:
            _, tls_props = self.ensure_tls()
            ns_settings.update({"tlsMode": "enforcing", "tls.config.file": str(tls_props)})
            broker += ["--set", "tlsMode=enforcing", "--set", f"tls.config.file={tls_props}"]
        self.secrets_dir.mkdir(parents=True, exist_ok=True)
        ns_config = self.secrets_dir / "namesrv-security.json"
        ns_config.write_text(json.dumps(ns_settings))
        return ["--config", str(ns_config)], broker

    def plan(self) -> list[ProcessInfo]:
        """The processes :meth:`start` runs, NameServers first."""
        layout = ports_for(self.base_port, self.brokers, self.slaves, self.controllers)
        exe = [sys.executable, "-m", "rocket.cli"]
        ns_secure, broker_secure = self._secure_args()
        logs = self.data_dir / "logs"
        plan: list[ProcessInfo] = []
        for i in range(self.nameservers):
            name = f"namesrv-{i + 1}"
            port, http = layout[name]
            plan.append(ProcessInfo(name, "nameserver", port, http, str(logs / f"{name}.log"),
                                    [*exe, "nameserver", "--port", str(port), "--http-port", str(http),
                                     *ns_secure]))
        controller_args: list[str] = []
        if self.controllers:
            peers = ",".join(f"127.0.0.1:{layout[n][0]}/{layout[n][0] + 2}" for n in CONTROLLER_NAMES)
            for name in CONTROLLER_NAMES:
                port, http = layout[name]
                plan.append(ProcessInfo(name, "controller", port, http, str(logs / f"{name}.log"), [
                    *exe, "controller", "--controller-peers", peers, "--port", str(port), "--host", "127.0.0.1",
                    "--http-port", str(http), "--data-dir", str(self.data_dir / name),
                    "--secret-file", str(self.data_dir / CONTROLLER_SECRET_FILE),
                    *self._controller_secure_args()]))
            addrs = ";".join(f"127.0.0.1:{layout[n][0]}" for n in CONTROLLER_NAMES)
            controller_args = ["--set", "enableControllerMode=true", "--set", f"controllerAddr={addrs}",
                               "--set", "allAckInSyncStateSet=true"]
        for name in BROKER_NAMES[: self.brokers]:
            port, http = layout[name]
            argv = [*exe, "broker", "--name", name, "--cluster", CLUSTER_NAME, "--broker-id", "0",
                    "--port", str(port), "--http-port", str(http), "--namesrv", self.namesrv,
                    "--store-dir", str(self.data_dir / name), "--flush", self.flush,
                    *self._store_args(name), *broker_secure, *controller_args, *self.extra_broker_args]
            if self.slaves:
                argv += ["--set", "slaveReadEnable=true"]
            plan.append(ProcessInfo(name, "broker", port, http, str(logs / f"{name}.log"), argv))
        if self.slaves:
            for group in BROKER_NAMES[: self.brokers]:
                name = group + SLAVE_SUFFIX
                port, http = layout[name]
                argv = [*exe, "broker", "--name", group, "--cluster", CLUSTER_NAME, "--broker-id", "1",
                        "--role", "SLAVE", "--port", str(port), "--http-port", str(http), "--namesrv",
                        self.namesrv, "--store-dir", str(self.data_dir / name), "--flush", self.flush,
                        *self._store_args(group), "--set", "slaveReadEnable=true", *broker_secure,
                        *controller_args, *self.extra_broker_args]
                plan.append(ProcessInfo(name, "broker", port, http, str(logs / f"{name}.log"), argv))
        return plan

    def start(self, *, detach: bool = True, timeout: float = 60.0) -> ClusterState:
        """Start every process and wait until each is ready and the brokers are
        registered with every NameServer. On failure (or Ctrl-C) everything
        started is stopped again and :class:`LocalClusterError` is raised
        (``KeyboardInterrupt`` is re-raised)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            old: ClusterState | None = ClusterState.load(self.data_dir)
        except LocalClusterError:
            old = None
        if old is not None and any(pid_alive(p.pid) for p in old.processes):
            raise LocalClusterError(f"a local cluster already runs from {self.data_dir} "
                                    "(rocket local status / rocket local down)")
        plan = self.plan()
        busy = [p for p in _all_ports(self.base_port, self.brokers, self.slaves, self.controllers)
                if not _port_free(p)]
        if busy:
            raise LocalClusterError(f"ports already in use: {busy} (choose another --base-port)")
        self.state = ClusterState(str(self.data_dir), self.base_port, self.namesrv, plan)
        if self.controllers:
            _ensure_secret(self.data_dir / CONTROLLER_SECRET_FILE)
        if self.acl:
            self.state.credentials_file = str(self.secrets_dir / "admin.credentials")
            self.state.http_token_file = str(self.secrets_dir / "http.token")
        if self.tls:
            self.state.tls_ca_file = str(self.tls_dir / "ca.pem")
        try:
            for info in plan:
                self.procs[info.name] = _spawn(info, detach=detach)
                if info.kind == "nameserver":
                    self._wait_ready([info], timeout)
            self._wait_ready([p for p in plan if p.kind == "controller"], timeout)
            self.state.save()
            self._wait_ready(plan, timeout)
            deadline = time.monotonic() + timeout
            nss = self.namesrv.split(";")
            while not asyncio.run(_registered(nss, BROKER_NAMES[: self.brokers], self.state.credentials_file,
                                              self.state.tls_ca_file)):
                if time.monotonic() > deadline:
                    raise LocalClusterError("brokers did not register with the NameServers in time")
                time.sleep(0.2)
            if self.controllers and self.wait_in_sync:
                self._wait_in_sync(plan, deadline)
        except BaseException:
            self.stop()
            raise
        return self.state

    def _wait_in_sync(self, plan: Sequence[ProcessInfo], deadline: float) -> None:
        """Wait until each broker group's slave is in its master's SyncStateSet (controller mode):
        until then the controllers would refuse to fail the group over. Raises
        :class:`LocalClusterError` naming the groups still out of sync at ``deadline``
        (``time.monotonic()`` seconds)."""
        from rocket.auth.http import read_token

        assert self.state is not None
        groups = {name: [p for p in plan if p.kind == "broker" and p.name in (name, name + SLAVE_SUFFIX)]
                  for name in BROKER_NAMES[: self.brokers]}
        token = read_token(self.state.http_token_file) if self.state.http_token_file else ""
        while True:
            waiting = [name for name, members in groups.items()
                       if not _group_in_sync(members, self.state.tls_ca_file, token)]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise LocalClusterError(
                    f"slaves of {', '.join(waiting)} did not join their master's SyncStateSet in time "
                    f"(logs in {self.data_dir}/logs)")
            time.sleep(0.2)

    def _wait_ready(self, infos: Sequence[ProcessInfo], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = list(infos)
        while pending:
            for info in list(pending):
                proc = self.procs.get(info.name)
                if proc is not None and proc.poll() is not None:
                    tail = _tail(Path(info.log))
                    raise LocalClusterError(f"{info.name} exited with {proc.returncode} during start-up; "
                                            f"log {info.log}:\n{tail}")
                if _ready(info, self.state.tls_ca_file if self.state else ""):
                    pending.remove(info)
            if pending and time.monotonic() > deadline:
                names = ", ".join(p.name for p in pending)
                raise LocalClusterError(f"not ready after {timeout:.0f} s: {names} (logs in {self.data_dir}/logs)")
            if pending:
                time.sleep(0.1)

    def stop(self, timeout: float = 20.0) -> list[str]:
        """SIGTERM brokers, then NameServers; wait; SIGKILL what is left. Returns stopped names."""
        if self.state is None:
            return []
        stopped = stop_processes(self.state.processes, self.procs, timeout=timeout)
        with contextlib.suppress(FileNotFoundError):
            (self.data_dir / STATE_FILE).unlink()
        return stopped


def _ensure_secret(path: Path) -> None:
    """Write a random Raft secret to ``path`` (mode 0600) unless one is there."""
    if path.exists():
        return
    import secrets

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_urlsafe(32))


def kill(name: str, data_dir: Path | str = DEFAULT_DIR, sig: int = signal.SIGKILL) -> ProcessInfo:
    """Send ``sig`` (default SIGKILL, as a crash) to the process ``name`` of the recorded cluster;
    returns it. Raises :class:`LocalClusterError` for an unknown or stopped process."""
    state = ClusterState.load(Path(data_dir))
    info = next((p for p in state.processes if p.name == name), None)
    if info is None:
        raise LocalClusterError(f"no process {name!r}; processes: {', '.join(p.name for p in state.processes)}")
    if not pid_alive(info.pid):
        raise LocalClusterError(f"{name} is not running")
    os.kill(info.pid, sig)
    return info


def start_process(name: str, data_dir: Path | str = DEFAULT_DIR, timeout: float = 60.0) -> ProcessInfo:
    """Start the stopped process ``name`` of the recorded cluster again (same ports, data and
    settings) and wait until it is ready; returns it. Raises :class:`LocalClusterError`."""
    state = ClusterState.load(Path(data_dir))
    info = next((p for p in state.processes if p.name == name), None)
    if info is None:
        raise LocalClusterError(f"no process {name!r}; processes: {', '.join(p.name for p in state.processes)}")
    if pid_alive(info.pid):
        raise LocalClusterError(f"{name} is already running (pid {info.pid})")
    proc = _spawn(info, detach=True)
    state.save()
    deadline = time.monotonic() + timeout
    while not _ready(info, state.tls_ca_file):
        if proc.poll() is not None:
            raise LocalClusterError(f"{name} exited with {proc.returncode}; log {info.log}:\n{_tail(Path(info.log))}")
        if time.monotonic() > deadline:
            raise LocalClusterError(f"{name} not ready after {timeout:.0f} s (log {info.log})")
        time.sleep(0.1)
    return info


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop_processes(infos: Sequence[ProcessInfo], procs: dict[str, subprocess.Popen[bytes]] | None = None,
                   timeout: float = 20.0) -> list[str]:
    """Stop processes: brokers first (so they unregister while NameServers still listen)."""
    procs = procs or {}
    ordered = sorted(infos, key=lambda p: 0 if p.kind == "broker" else 1)
    stopped: list[str] = []
    for group in ([p for p in ordered if p.kind == "broker"], [p for p in ordered if p.kind == "nameserver"],
                  [p for p in ordered if p.kind == "controller"]):
        signalled: list[ProcessInfo] = []
        for info in group:
            proc = procs.get(info.name)
            alive = proc.poll() is None if proc is not None else pid_alive(info.pid)
            if alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(info.pid, signal.SIGTERM)
                signalled.append(info)
        deadline = time.monotonic() + timeout
        for info in signalled:
            proc = procs.get(info.name)
            while True:
                done = proc.poll() is not None if proc is not None else not pid_alive(info.pid)
                if done:
                    break
                if time.monotonic() > deadline:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(info.pid, signal.SIGKILL)
                    if proc is not None:
                        proc.wait(5)
                    break
                time.sleep(0.05)
            stopped.append(info.name)
    return stopped


def down(data_dir: Path | str = DEFAULT_DIR, timeout: float = 20.0) -> list[str]:
    """Stop the cluster recorded in ``data_dir/state.json``; returns stopped process names."""
    state = ClusterState.load(Path(data_dir))
    stopped = stop_processes(state.processes, timeout=timeout)
    with contextlib.suppress(FileNotFoundError):
        (Path(data_dir) / STATE_FILE).unlink()
    return stopped


@dataclass(frozen=True)
class ProcessStatus:
    """``rocket local status`` row."""

    name: str
    kind: str
    pid: int
    addr: str
    http_port: int
    running: bool
    ready: bool
    log: str


def status(data_dir: Path | str = DEFAULT_DIR) -> tuple[ClusterState, list[ProcessStatus]]:
    """The recorded cluster and each process's state. Raises :class:`LocalClusterError`."""
    state = ClusterState.load(Path(data_dir))
    rows = []
    for p in state.processes:
        running = pid_alive(p.pid)
        rows.append(ProcessStatus(p.name, p.kind, p.pid, p.addr, p.http_port, running,
                                  running and _ready(p, state.tls_ca_file), p.log))
    return state, rows


def namesrv_from_state(data_dir: Path | str = DEFAULT_DIR) -> str | None:
    """The NameServer list of a running local cluster in ``data_dir``, if any. When that cluster
    enforces TLS (``--secure``) and ``ROCKET_TLS`` / ``ROCKET_TLS_CA`` are unset, ``ROCKET_TLS_CA``
    is set to its CA, so the clients of this process trust it."""
    try:
        state = ClusterState.load(Path(data_dir))
    except LocalClusterError:
        return None
    if not any(pid_alive(p.pid) for p in state.processes):
        return None
    if state.tls_ca_file and not os.environ.get("ROCKET_TLS") and not os.environ.get("ROCKET_TLS_CA"):
        os.environ["ROCKET_TLS_CA"] = state.tls_ca_file
    return state.namesrv


def print_state(state: ClusterState) -> None:
    """A rich table of the cluster's processes (cells never cut: see :func:`stdout_console`)."""
    from rocket.client.output import new_table, stdout_console

    table = new_table([(col, "left") for col in ("process", "role", "address", "http", "pid")],
                      title=f"local cluster in {state.data_dir}")
    for p in state.processes:
        if p.kind == "controller":
            role = "controller"
        elif p.kind == "nameserver":
            role = "NameServer"
        elif any(a.startswith("enableControllerMode=") for a in p.argv):
            role = "broker (role from the controllers)"
        else:
            role = "broker (slave)" if "SLAVE" in p.argv else "broker (master)"
        table.add_row(p.name, role, p.addr, f"127.0.0.1:{p.http_port}", str(p.pid))
    console = stdout_console()
    console.print(table)
    console.print(f"data and logs: {state.data_dir} (logs/<process>.log)")
    console.print(f"NameServers: [bold]{state.namesrv}[/bold]   (export ROCKET_NAMESRV='{state.namesrv}')")
    if state.credentials_file:
        console.print(f"ACL is on. Admin credentials: [bold]{state.credentials_file}[/bold]   "
                      f"(export ROCKET_CREDENTIALS_FILE='{state.credentials_file}')", highlight=False)
        console.print(f"HTTP API bearer token: {state.http_token_file}   "
                      f"(curl --cacert {state.tls_ca_file or '...'} -H \"Authorization: Bearer "
                      f"$(cat {state.http_token_file})\" https://...)", highlight=False)
    if state.tls_ca_file:
        console.print(f"TLS is enforced on every port. CA certificate: [bold]{state.tls_ca_file}[/bold]   "
                      f"(export ROCKET_TLS_CA='{state.tls_ca_file}')", highlight=False)


# -- the LogHub demo ---------------------------------------------------------------------


def loghub_dir() -> Path:
    """``$ROCKET_LOGHUB_DIR``, else ``../shared/data/loghub`` (all 2k lines) when
    present, else the 200-line sample shipped in the package."""
    env = os.environ.get("ROCKET_LOGHUB_DIR")
    if env:
        return Path(env)
    shared = PROJECT_ROOT.parent / "shared" / "data" / "loghub"
    if shared.is_dir():
        return shared
    return PACKAGE_ROOT / "data" / "loghub"


def loghub_logs(folder: Path | None = None) -> dict[str, list[str]]:
    """System name → log lines, from ``<System>_2k.log`` / ``<System>_200.log`` files
    (flat or in per-system folders)."""
    folder = folder or loghub_dir()
    logs: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*.log")):
        system = path.name.split("_")[0]
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        if lines:
            logs[system] = lines
    return logs


async def run_demo(namesrv: str, logs: dict[str, list[str]], *, concurrency: int = 64,
                   timeout: float = 120.0) -> dict[str, Any]:
    """Publish every line (topic ``loghub-<System>``, tags = system, keys =
    ``<System>-<line>``) and consume it back with group ``loghub-demo``.

    Returns the figures; latencies in ms: ``store`` = store - born time,
    ``e2e`` = receive - born time.
    """
    from rocket.client import Admin, ConsumeFrom, MessageExt, Producer, PushConsumer, build_message

    topics = {system: f"loghub-{system}" for system in logs}
    async with Admin(namesrv) as admin:
        for topic in topics.values():
            await admin.create_topic(topic, queue_nums=4)
    total = sum(len(lines) for lines in logs.values())
    received: dict[str, int] = dict.fromkeys(logs, 0)
    e2e: list[float] = []
    store_lat: list[float] = []
    seen: set[str] = set()
    done = asyncio.Event()
    first_receive = [0.0]
    last_receive = [0.0]

    async def handle(msgs: list[MessageExt]) -> None:
        now = time.time() * 1000
        if not first_receive[0]:
            first_receive[0] = now
        last_receive[0] = now
        for msg in msgs:
            if msg.msg_id in seen:
                continue
            seen.add(msg.msg_id)
            received[msg.tags or "?"] = received.get(msg.tags or "?", 0) + 1
            e2e.append(now - msg.born_timestamp)
            store_lat.append(msg.store_timestamp - msg.born_timestamp)
        if len(seen) >= total:
            done.set()

    consumer = PushConsumer("loghub-demo", namesrv, handle, consume_from=ConsumeFrom.FIRST_OFFSET,
                            rebalance_interval=2.0)
    for topic in topics.values():
        consumer.subscribe(topic, "*")
    await consumer.start()
    bytes_sent = 0
    send_lat: list[float] = []
    try:
        async with Producer("loghub-demo-producer", namesrv) as producer:
            sem = asyncio.Semaphore(concurrency)

            async def send(system: str, i: int, line: str) -> None:
                async with sem:
                    t0 = time.perf_counter()
                    await producer.send(build_message(topics[system], line, tags=system, keys=f"{system}-{i}"))
                    send_lat.append((time.perf_counter() - t0) * 1000)

            started = time.perf_counter()
            jobs = []
            for system, lines in logs.items():
                for i, line in enumerate(lines, 1):
                    bytes_sent += len(line.encode())
                    jobs.append(send(system, i, line))
            await asyncio.gather(*jobs)
            produce_s = time.perf_counter() - started
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await done.wait()
        consume_s = time.perf_counter() - started
    finally:
        await consumer.shutdown()
    e2e.sort()
    store_lat.sort()
    send_lat.sort()
    return {
        "messages": total,
        "received": len(seen),
        "bytes": bytes_sent,
        "produce_seconds": produce_s,
        "consume_seconds": consume_s,
        "produce_rate": total / produce_s if produce_s else 0.0,
        "per_system": {s: (len(logs[s]), received.get(s, 0)) for s in logs},
        "send_ms": {q: percentile(send_lat, q) for q in (50, 99, 99.9)},
        "store_ms": {q: percentile(store_lat, q) for q in (50, 99, 99.9)},
        "e2e_ms": {q: percentile(e2e, q) for q in (50, 99, 99.9)},
    }


def print_demo(figures: dict[str, Any], source: Path) -> None:
    """The demo summary as rich tables."""
    from rich.table import Table

    from rocket.client.output import stdout_console

    console = stdout_console()
    table = Table(title=f"LogHub through RocketCluster ({source})")
    for col in ("system", "topic", "sent", "received"):
        table.add_column(col, justify="right" if col in ("sent", "received") else "left")
    for system, (sent, got) in sorted(figures["per_system"].items()):
        table.add_row(system, f"loghub-{system}", str(sent), str(got))
    console.print(table)
    mb = figures["bytes"] / 1e6
    summary = Table(title="summary", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    summary.add_row("messages sent / received", f"{figures['messages']} / {figures['received']}")
    summary.add_row("bytes (bodies)", f"{figures['bytes']:,} ({mb:.2f} MB)")
    summary.add_row("produce throughput", f"{figures['produce_rate']:,.0f} msgs/s "
                    f"({mb / figures['produce_seconds']:.2f} MB/s)")
    summary.add_row("produce + consume-all time", f"{figures['consume_seconds']:.2f} s")
    for key, label in (("send_ms", "send latency"), ("store_ms", "born → stored"),
                       ("e2e_ms", "end-to-end (born → received)")):
        p = figures[key]
        summary.add_row(label, f"p50 {p[50]:.1f} ms · p99 {p[99]:.1f} ms · p99.9 {p[99.9]:.1f} ms")
    console.print(summary)


#: Where ``make run`` writes the logs job's report (relative to the working directory).
DEFAULT_REPORT_DIR = Path("data/analytics")


def demo(data_dir: Path | None = None, base_port: int | None = None, keep: bool = False,
         report_dir: Path | None = DEFAULT_REPORT_DIR, secure: bool = False) -> int:
    """``make run``: start a cluster, publish and consume LogHub, print a summary, run the
    Spark logs job on the published topics (unless ``report_dir`` is None), print its
    summary, stop. ``secure``: ACL and TLS on (as ``rocket local up --secure``); the demo's clients
    sign with the admin credentials (``ROCKET_CREDENTIALS_FILE``) and trust the cluster's CA
    (``ROCKET_TLS_CA``). Returns the process exit
    code (0 when every message came back)."""
    from rocket.client.output import stdout_console

    console = stdout_console()
    tmp = None
    if data_dir is None:
        tmp = tempfile.mkdtemp(prefix="rocket-demo-")
        data_dir = Path(tmp)
    base = base_port or (DEFAULT_BASE_PORT if all(_port_free(p) for p in _all_ports(DEFAULT_BASE_PORT))
                         else find_free_base_port())
    source = loghub_dir()
    logs = loghub_logs(source)
    if not logs:
        console.print(f"[red]no LogHub logs found in {source}[/red]")
        return 1
    cluster = LocalCluster(data_dir, base, secure=secure)
    console.print(f"starting a local cluster in {data_dir} (base port {base}) ...")
    try:
        state = cluster.start(detach=False)
        if state.credentials_file:  # the demo's clients (and the Spark job's) sign with the admin keys
            os.environ["ROCKET_CREDENTIALS_FILE"] = state.credentials_file
        if state.tls_ca_file:  # ... and connect with TLS, trusting the cluster's CA
            os.environ["ROCKET_TLS_CA"] = state.tls_ca_file
        print_state(state)
        console.print(f"publishing {sum(len(v) for v in logs.values())} lines of {len(logs)} systems "
                      f"from {source} ...")
        figures = asyncio.run(run_demo(state.namesrv, logs))
        print_demo(figures, source)
        ok = figures["received"] == figures["messages"]
        if not ok:
            console.print(f"[red]only {figures['received']} of {figures['messages']} messages came back[/red]")
            return 1
        if report_dir is not None:
            from rocket.analytics.jobs.logs import print_summary, run_logs_job

            topics = sorted(f"loghub-{system}" for system in logs)
            console.print(f"running the Spark logs job (local[2]) on {len(topics)} topics read back "
                          f"through the rocket data source ...")
            print_summary(run_logs_job(state.namesrv, topics, report_dir))
        return 0
    except LocalClusterError as exc:
        console.print(f"[red]{exc}[/red]")
        return 1
    except KeyboardInterrupt:
        console.print("interrupted")
        return 130
    finally:
        console.print("stopping the cluster ...")
        cluster.stop()
        if tmp is not None and not keep:
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def running_cluster(data_dir: Path | str, base_port: int | None = None, **kwargs: Any) -> Iterator[ClusterState]:
    """Run a local cluster (in the foreground) for the duration of a ``with`` block."""
    cluster = LocalCluster(data_dir, base_port or find_free_base_port(), **kwargs)
    state = cluster.start(detach=False)
    try:
        yield state
    finally:
        cluster.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rocket.local demo [--dir D] [--base-port P] [--keep]``."""
    parser = argparse.ArgumentParser(prog="python -m rocket.local")
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="start a cluster, publish and consume LogHub, print a summary, stop")
    p_demo.add_argument("--dir", type=Path, default=None, help="data folder (default: a temporary one)")
    p_demo.add_argument("--base-port", type=int, default=None)
    p_demo.add_argument("--keep", action="store_true", help="keep the temporary data folder")
    p_demo.add_argument("--report-dir", type=Path, default=DEFAULT_REPORT_DIR,
                        help=f"where the logs job writes its report (default: {DEFAULT_REPORT_DIR})")
    p_demo.add_argument("--no-analytics", action="store_true", help="skip the Spark logs job")
    p_demo.add_argument("--secure", action="store_true", help="ACL and TLS on (rocket local up --secure)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(args.dir, args.base_port, args.keep, None if args.no_analytics else args.report_dir,
                    secure=args.secure)
    return 2


if __name__ == "__main__":
    sys.exit(main())
