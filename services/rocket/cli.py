"""The ``rocket`` command line (typer)."""

from __future__ import annotations

import signal
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import typer

app = typer.Typer(no_args_is_help=True, help="RocketCluster: a RocketMQ-style message queue.")


@app.callback()
def _root(
    access_key: str | None = typer.Option(None, "--access-key", envvar="ROCKET_ACCESS_KEY", show_envvar=True,
                                          help="Sign requests with this AccessKey (ACL)."),
    secret_key: str | None = typer.Option(None, "--secret-key", envvar="ROCKET_SECRET_KEY", show_envvar=True,
                                          help="SecretKey of --access-key (prefer the environment variable)."),
    credentials_file: Path | None = typer.Option(None, "--credentials-file", envvar="ROCKET_CREDENTIALS_FILE",
                                                 show_envvar=True,
                                                 help="File with AccessKey=... and SecretKey=... lines."),
    tls: bool | None = typer.Option(None, "--tls/--no-tls", envvar="ROCKET_TLS", show_envvar=True,
                                    help="Connect with TLS (RocketMQ's useTLS); on by itself with --tls-ca."),
    tls_ca: Path | None = typer.Option(None, "--tls-ca", envvar="ROCKET_TLS_CA", show_envvar=True,
                                       help="PEM file of the CAs that sign the servers' certificates "
                                       "(default: the system's)."),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", envvar="ROCKET_TLS_CERT", show_envvar=True,
                                         help="Client certificate (PEM), for servers that ask for one."),
    tls_key: Path | None = typer.Option(None, "--tls-key", envvar="ROCKET_TLS_KEY", show_envvar=True,
                                        help="Private key (PEM) of --tls-cert."),
) -> None:
    """RocketCluster command line."""
    import os

    from rocket.auth.signature import CredentialsError, resolve_credentials

    try:
        creds = resolve_credentials(access_key, secret_key, str(credentials_file) if credentials_file else None,
                                    environ={})
    except CredentialsError as exc:
        typer.echo(f"rocket: {exc}", err=True)
        raise typer.Exit(2) from None
    if creds is not None:  # clients (MQClient) sign with these
        os.environ["ROCKET_ACCESS_KEY"] = creds.access_key
        os.environ["ROCKET_SECRET_KEY"] = creds.secret_key
    # clients (MQClient) connect as these say (rocket.remoting.tls.client_tls_from_env)
    for name, value in (("ROCKET_TLS", None if tls is None else str(tls).lower()), ("ROCKET_TLS_CA", tls_ca),
                        ("ROCKET_TLS_CERT", tls_cert), ("ROCKET_TLS_KEY", tls_key)):
        if value is not None:
            os.environ[name] = str(value)


def _bad_config(command: str, exc: Exception) -> typer.Exit:
    """Print why ``rocket <command>`` refused its settings; returns the exit to raise (code 2, bad usage)."""
    typer.echo(f"rocket {command}: {exc}", err=True)
    return typer.Exit(2)


def _run_server(command: str, main: Coroutine[Any, Any, None], log_level: str,
                failures: tuple[type[Exception], ...] = (OSError,)) -> None:
    """Set up logging at ``log_level`` and run the server coroutine ``main`` until it returns (a signal).

    A ``failures`` error (a port taken; for a broker also a store that cannot be recovered) or a TLS
    certificate that does not load is printed
    as ``rocket <command>: <error>`` and raises ``typer.Exit(1)``.
    """
    from rocket.remoting.tls import TlsConfigError
    from rocket.runtime import run, setup_logging

    setup_logging(log_level)
    import logging

    from rocket.compiled import describe_loaded

    logging.getLogger("rocket.compiled").info("%s", describe_loaded())
    caught: tuple[type[Exception], ...] = (*failures, TlsConfigError)
    try:
        run(main)
    except caught as exc:
        typer.echo(f"rocket {command}: {exc}", err=True)
        raise typer.Exit(1) from None


def _controller_config(*, peers: str, self_addr: str | None, raft_port: int | None, data_dir: Path | None,
                       secret_file: Path | None, port: int, host: str | None, unclean: bool | None,
                       heartbeat_timeout_ms: int | None, log_level: str | None, http_port: int | None = None,
                       raft_bind_host: str | None = None) -> Any:
    """Build and check a ControllerConfig from the command line (raises ConfigError)."""
    from rocket.controller.config import DEFAULT_RAFT_PORT, ControllerConfig, parse_peers, read_secret

    cfg = ControllerConfig(
        peers=parse_peers(peers, raft_port or DEFAULT_RAFT_PORT),
        self_address=self_addr or "",
        secret=read_secret(secret_file),
        data_dir=str(data_dir or Path("controller-data")),
        port=port,
    ).with_overrides(host=host, http_port=http_port, raft_bind_host=raft_bind_host, enable_elect_unclean_master=unclean,
                     controller_heart_beat_timeout_mills=heartbeat_timeout_ms, log_level=log_level)
    cfg.resolve_self(port)
    cfg.validate()
    return cfg


_TLS_MODE_HELP = ("TLS on the remoting and HTTP ports: disabled, permissive (TLS and plaintext on one port) or "
                  "enforcing (RocketMQ's tls.server.mode).")
_TLS_CONFIG_HELP = ("A Java properties file of RocketMQ's tls.* keys (tls.server.certPath, tls.server.keyPath, "
                    "tls.enable, tls.client.trustCertPath, ...; RocketMQ's tls.config.file).")


def _tls_settings(base: Any, mode: str | None, config_file: Path | None) -> Any:
    """``base`` (a TlsConfig) with ``--tls-mode`` and ``--tls-config`` applied (raises TlsConfigError)."""
    from rocket.remoting.tls import TlsConfig

    values: dict[str, str] = {}
    if mode is not None:
        values["tlsMode"] = mode
    if config_file is not None:
        values["tls.config.file"] = str(config_file)
    return TlsConfig.from_properties(values, base=base) if values else base


_PEERS_HELP = ("Every controller's remoting address, each optionally with '/<raft port>': "
               "'h:9878/9880,h2:9878/9880,h3:9878/9880'.")
_SECRET_HELP = "File holding the Raft secret (else $ROCKET_CONTROLLER_SECRET; never on the command line)."


@app.command("nameserver")
def nameserver(
    host: str | None = typer.Option(None, help="Address to listen on (default 0.0.0.0)."),
    port: int | None = typer.Option(None, help="Remoting port (default 9876)."),
    http_port: int | None = typer.Option(None, help="HTTP port: probes, metrics, API (default 9877)."),
    scan_interval: float | None = typer.Option(None, help="Seconds between broker scans (default 10)."),
    broker_timeout: float | None = typer.Option(None, help="Seconds of silence before eviction (default 120)."),
    log_level: str | None = typer.Option(None, help="DEBUG, INFO, WARNING or ERROR (default INFO)."),
    config: Path | None = typer.Option(None, "--config", help="TOML or JSON settings file; flags win over it."),
    enable_controller: bool = typer.Option(False, "--enable-controller-in-namesrv",
                                           help="Also run a controller, served on this port (RocketMQ's "
                                           "enableControllerInNamesrv)."),
    controller_peers: str | None = typer.Option(None, "--controller-peers", help="With the controller: every "
                                                "NameServer's address, each with '/<raft port>'."),
    raft_port: int | None = typer.Option(None, "--raft-port", help="Raft port of peers listed without one."),
    self_addr: str | None = typer.Option(None, "--self-addr", help="This NameServer's entry in the peers."),
    controller_data_dir: Path | None = typer.Option(None, "--controller-data-dir", help="Raft journal and "
                                                    "snapshots (default ./controller-data)."),
    secret_file: Path | None = typer.Option(None, "--secret-file", help=_SECRET_HELP),
    tls_mode: str | None = typer.Option(None, "--tls-mode", help=_TLS_MODE_HELP),
    tls_config: Path | None = typer.Option(None, "--tls-config", help=_TLS_CONFIG_HELP),
    listener: list[str] | None = typer.Option(None, "--listener", help="name:port of an extra remoting port "
                                              "whose routes carry the brokers' addresses on that listener "
                                              "(repeatable)."),
) -> None:
    """Run a NameServer until SIGTERM or SIGINT."""
    from rocket.nameserver.config import ConfigError, NameServerConfig, load_config_file
    from rocket.nameserver.server import serve
    from rocket.remoting.tls import TlsConfigError

    try:
        base = load_config_file(config) if config is not None else NameServerConfig()
        settings = base.with_overrides(
            host=host,
            port=port,
            http_port=http_port,
            scan_interval=scan_interval,
            broker_timeout=broker_timeout,
            log_level=log_level,
            tls=_tls_settings(base.tls, tls_mode, tls_config),
            listeners=",".join(listener) if listener else None,
        )
        settings.validate()
    except (ConfigError, TlsConfigError) as exc:
        raise _bad_config("nameserver", exc) from None
    controller_cfg = None
    if enable_controller:
        from rocket.controller.config import ConfigError as ControllerConfigError

        try:
            if not controller_peers:
                raise ControllerConfigError("--enable-controller-in-namesrv needs --controller-peers")
            controller_cfg = _controller_config(
                peers=controller_peers, self_addr=self_addr, raft_port=raft_port, data_dir=controller_data_dir,
                secret_file=secret_file, port=settings.port, host=None, unclean=None, heartbeat_timeout_ms=None,
                log_level=None)
            controller_cfg.tls = settings.tls
        except ControllerConfigError as exc:
            raise _bad_config("nameserver", exc) from None
    _run_server("nameserver", serve(settings, controller_cfg), settings.log_level)


@app.command("controller")
def controller(
    controller_peers: str = typer.Option(..., "--controller-peers", help=_PEERS_HELP),
    port: int = typer.Option(9878, "--port", help="Remoting port for brokers and mqadmin (default 9878)."),
    raft_port: int | None = typer.Option(None, "--raft-port", help="Raft port of peers listed without one (9880)."),
    self_addr: str | None = typer.Option(None, "--self-addr", help="This controller's entry in the peers "
                                         "(default: the one whose port is --port)."),
    host: str | None = typer.Option(None, "--host", help="Address to listen on (default 0.0.0.0)."),
    raft_bind_host: str | None = typer.Option(None, "--raft-bind-host", help="Address the Raft port binds "
                                              "(default: this peer's host in --controller-peers), e.g. 0.0.0.0."),
    http_port: int | None = typer.Option(None, "--http-port", help="HTTP probes, /metrics and /api/v1/controller "
                                         "(default: off)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Raft journal and snapshots (default "
                                          "./controller-data)."),
    secret_file: Path | None = typer.Option(None, "--secret-file", help=_SECRET_HELP),
    unclean: bool | None = typer.Option(None, "--enable-elect-unclean-master/--no-elect-unclean-master",
                                        help="Elect a replica outside the SyncStateSet when none in it is alive."),
    heartbeat_timeout_ms: int | None = typer.Option(None, "--heartbeat-timeout-ms", help="Broker heartbeat "
                                                    "timeout when a heartbeat carries none (default 10000)."),
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING or ERROR."),
    tls_mode: str | None = typer.Option(None, "--tls-mode", help=_TLS_MODE_HELP),
    tls_config: Path | None = typer.Option(None, "--tls-config", help=_TLS_CONFIG_HELP),
    acl_enable: bool = typer.Option(False, "--acl-enable", help="ACL on the remoting port (aclEnable: "
                                    "authenticationEnabled and authorizationEnabled), as on brokers."),
    init_auth_user: Path | None = typer.Option(None, "--init-authentication-user", help="File holding the initial "
                                               "Super user, JSON {\"username\",\"password\"} or AccessKey=/SecretKey= "
                                               "lines (else $ROCKET_INIT_AUTH_USER; never on the command line)."),
    inner_credentials: Path | None = typer.Option(None, "--inner-credentials", help="File of the credentials this "
                                                  "controller signs its requests to brokers with (default: the "
                                                  "initial user)."),
    cluster: str | None = typer.Option(None, "--cluster", help="Cluster of the Cluster:<name> resource requests "
                                       "are authorized against (default DefaultCluster)."),
    http_auth_token_file: Path | None = typer.Option(None, "--http-auth-token-file", help="Bearer token file for "
                                                     "/api/v1 (with ACL, Super users' keys work too)."),
    auth_sync_interval: float | None = typer.Option(None, "--auth-sync-interval", help="Seconds between copies of "
                                                    "the brokers' users and ACLs (default 10)."),
) -> None:
    """Run a controller (RocketMQ 5 controller mode) until SIGTERM or SIGINT."""
    from rocket.auth import AuthError
    from rocket.auth.http import HttpAuthError
    from rocket.controller.config import ConfigError
    from rocket.controller.server import check_auth_settings, serve
    from rocket.remoting.tls import TlsConfigError

    try:
        cfg = _controller_config(peers=controller_peers, self_addr=self_addr, raft_port=raft_port,
                                 data_dir=data_dir, secret_file=secret_file, port=port, host=host,
                                 unclean=unclean, heartbeat_timeout_ms=heartbeat_timeout_ms, log_level=log_level,
                                 http_port=http_port, raft_bind_host=raft_bind_host)
        cfg.tls = _tls_settings(cfg.tls, tls_mode, tls_config)
        cfg = cfg.with_overrides(
            authentication_enabled=acl_enable or None, authorization_enabled=acl_enable or None,
            init_authentication_user=str(init_auth_user) if init_auth_user else None,
            inner_client_authentication_credentials=str(inner_credentials) if inner_credentials else None,
            cluster_name=cluster, http_auth_token_file=str(http_auth_token_file) if http_auth_token_file else None,
            auth_sync_interval_s=auth_sync_interval)
        cfg.validate()
        check_auth_settings(cfg)
    except (ConfigError, TlsConfigError, AuthError, HttpAuthError) as exc:
        raise _bad_config("controller", exc) from None
    _run_server("controller", serve(cfg), log_level)


@app.command("broker")
def broker(
    config: Path | None = typer.Option(
        None, "--config", "-c", help="broker.conf (properties), TOML or JSON settings; flags win over it."
    ),
    name: str | None = typer.Option(None, "--name", help="brokerName, the broker group (default: host name)."),
    cluster: str | None = typer.Option(None, "--cluster", help="brokerClusterName (default DefaultCluster)."),
    broker_id: int | None = typer.Option(None, "--broker-id", help="0 = master, > 0 = slave."),
    ip: str | None = typer.Option(None, "--ip", help="brokerIP1, the address registered (default 127.0.0.1)."),
    port: int | None = typer.Option(None, "--port", help="listenPort (default 10911; VIP port is port-2)."),
    http_port: int | None = typer.Option(None, "--http-port", help="HTTP probes/metrics/API port (0 = off)."),
    namesrv: str | None = typer.Option(None, "--namesrv", help="NameServers 'h:p;h:p' or a DNS name 'ns:9876'."),
    store_dir: str | None = typer.Option(None, "--store-dir", help="storePathRootDir (default ~/store)."),
    flush: str | None = typer.Option(None, "--flush", help="SYNC_FLUSH or ASYNC_FLUSH."),
    role: str | None = typer.Option(None, "--role", help="ASYNC_MASTER, SYNC_MASTER or SLAVE."),
    settings: list[str] = typer.Option([], "--set", "-p", help="Any setting as key=value (repeatable)."),
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING or ERROR."),
) -> None:
    """Run a broker until SIGTERM or SIGINT."""
    from rocket.broker.config import ConfigError, load_config
    from rocket.broker.main import cli_overrides, serve
    from rocket.store.api import StoreError

    try:
        overrides = cli_overrides(
            name=name, cluster=cluster, broker_id=broker_id, ip=ip, port=port, http_port=http_port,
            namesrv=namesrv, store_dir=store_dir, flush=flush, role=role, settings=settings,
        )
        settings_obj = load_config(config, overrides)
    except ConfigError as exc:
        raise _bad_config("broker", exc) from None
    _run_server("broker", serve(settings_obj), log_level, (OSError, StoreError))


# produce, consume, topic, cluster and group (rocket/client/cli.py); they find a running local
# cluster's NameServers through rocket.local, which the client itself does not import
from rocket.client.cli import console, err_console  # noqa: E402
from rocket.client.cli import register as _register_client_commands  # noqa: E402
from rocket.client.output import OutputFormat, new_table, output_option, print_document  # noqa: E402


def _local_namesrv() -> str | None:
    from rocket.local import DEFAULT_DIR, namesrv_from_state

    return namesrv_from_state(DEFAULT_DIR)


_register_client_commands(app, _local_namesrv)


# -- rocket local up|down|status (rocket/local.py) -----------------------------------------------


def _fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {message}")
    return typer.Exit(code)


local_app = typer.Typer(help="A whole cluster on this machine (2 NameServers, 3 controllers, 2 broker groups of "
                             "master + slave).",
                        no_args_is_help=True)


@local_app.command("up")
def local_up(
    data_dir: Path = typer.Option(Path("data/local"), "--dir", "-d", help="Data and logs folder."),
    base_port: int = typer.Option(9876, "--base-port", "-p", help="First NameServer port; the others follow."),
    brokers: int = typer.Option(2, "--brokers", help="Broker groups (1 or 2)."),
    slaves: bool = typer.Option(True, "--slaves/--no-slaves", help="A slave per broker group (replication)."),
    flush: str = typer.Option("ASYNC_FLUSH", "--flush", help="ASYNC_FLUSH or SYNC_FLUSH."),
    failover: str = typer.Option("controller", "--failover", help="controller: 3 controllers elect each group's "
                                 "master (RocketMQ 5 controller mode); manual: fixed roles, rocket cluster failover."),
    foreground: bool = typer.Option(False, "--foreground", "-f", help="Stay attached; Ctrl-C stops the cluster."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds to wait for readiness."),
    secure: bool = typer.Option(False, "--secure", help="ACL on (an admin user whose keys are written to "
                                                        "<dir>/secrets/admin.credentials), a locked HTTP API and "
                                                        "TLS enforced on every port (CA: <dir>/secrets/tls/ca.pem)."),
) -> None:
    """Start 2 NameServers, 3 controllers and broker-a/broker-b (master + slave each) as local processes."""
    from rocket.local import LocalCluster, LocalClusterError, print_state

    try:
        cluster = LocalCluster(data_dir, base_port, brokers=brokers, flush=flush.upper(), slaves=slaves,
                               secure=secure, failover=failover.lower())
        state = cluster.start(detach=not foreground, timeout=timeout)
    except LocalClusterError as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        err_console.print("interrupted; stopped")
        raise typer.Exit(130) from None
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    if foreground:
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    print_state(state)
    if not foreground:
        console.print(f"running in the background; stop with: rocket local down --dir {data_dir}")
        return
    console.print("running in the foreground; Ctrl-C stops the cluster")
    try:
        while not stop:
            if any(p.poll() is not None for p in cluster.procs.values()):
                err_console.print("[red]a cluster process exited; stopping the others[/red]")
                break
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    console.print("stopping ...")
    cluster.stop()


@local_app.command("down")
def local_down(
    data_dir: Path = typer.Option(Path("data/local"), "--dir", "-d", help="Data and logs folder."),
    timeout: float = typer.Option(20.0, "--timeout", help="Seconds to wait before SIGKILL."),
) -> None:
    """Stop the local cluster (SIGTERM, wait, SIGKILL after --timeout)."""
    from rocket.local import LocalClusterError, down

    try:
        stopped = down(data_dir, timeout)
    except LocalClusterError as exc:
        raise _fail(str(exc)) from None
    console.print(f"stopped {', '.join(stopped) if stopped else 'nothing (already stopped)'}")


@local_app.command("kill")
def local_kill(
    name: str = typer.Argument(..., help="Process name (rocket local status), e.g. broker-a or controller-1."),
    data_dir: Path = typer.Option(Path("data/local"), "--dir", "-d", help="Data and logs folder."),
    sig: str = typer.Option("KILL", "--signal", "-s", help="KILL (a crash), TERM, STOP (freeze) or CONT."),
) -> None:
    """Send a signal (default SIGKILL) to one process of the local cluster, e.g. to watch a failover."""
    from rocket.local import LocalClusterError, kill

    try:
        number = signal.Signals[f"SIG{sig.upper().removeprefix('SIG')}"]
    except KeyError:
        raise _fail(f"unknown signal {sig!r}") from None
    try:
        info = kill(name, data_dir, number)
    except LocalClusterError as exc:
        raise _fail(str(exc)) from None
    console.print(f"sent {number.name} to {info.name} (pid {info.pid}); start it again with: "
                  f"rocket local start {info.name} --dir {data_dir}")


@local_app.command("start")
def local_start(
    name: str = typer.Argument(..., help="Process name (rocket local status)."),
    data_dir: Path = typer.Option(Path("data/local"), "--dir", "-d", help="Data and logs folder."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds to wait for readiness."),
) -> None:
    """Start one stopped process of the local cluster again (same ports, data and settings)."""
    from rocket.local import LocalClusterError, start_process

    try:
        info = start_process(name, data_dir, timeout)
    except LocalClusterError as exc:
        raise _fail(str(exc)) from None
    console.print(f"started {info.name} (pid {info.pid})")


@local_app.command("status")
def local_status(
    data_dir: Path = typer.Option(Path("data/local"), "--dir", "-d", help="Data and logs folder."),
    output: OutputFormat = output_option(),
) -> None:
    """Show the local cluster's processes; exit code 1 unless all are running and ready.

    ``-o json|yaml``: ``{"dataDir", "namesrv", "processes": [{"name", "kind", "addr", "httpPort", "pid",
    "running", "ready", "log"}]}`` (README.md, "Output for scripts"); ``-o wide`` adds kind and log file.
    """
    from rocket.local import LocalClusterError, status

    try:
        state, rows = status(data_dir)
    except LocalClusterError as exc:
        raise _fail(str(exc)) from None
    if output.machine:
        print_document({"dataDir": str(state.data_dir), "namesrv": state.namesrv, "processes": [
            {"name": r.name, "kind": r.kind, "addr": r.addr, "httpPort": r.http_port, "pid": r.pid,
             "running": r.running, "ready": r.ready, "log": r.log} for r in rows]}, output)
    else:
        wide = output is OutputFormat.WIDE
        columns: list[tuple[str, Any]] = [("process", "left"), ("address", "left"), ("http", "right"),
                                          ("pid", "right"), ("state", "left")]
        if wide:
            columns += [("kind", "left"), ("log", "left")]
        table = new_table(columns, title=f"local cluster in {state.data_dir}")
        for r in rows:
            st = ("[green]ready[/green]" if r.ready else
                  ("[yellow]starting[/yellow]" if r.running else "[red]stopped[/red]"))
            row = [r.name, r.addr, str(r.http_port), str(r.pid), st]
            if wide:
                row += [r.kind, r.log]
            table.add_row(*row)
        console.print(table)
        console.print(f"NameServers: {state.namesrv}", highlight=False)
    if not all(r.ready for r in rows):
        raise typer.Exit(1)


app.add_typer(local_app, name="local")

# user and acl (rocket/client/auth_cli.py)
from rocket.client.auth_cli import register as _register_auth_commands  # noqa: E402

_register_auth_commands(app)

# rocket analytics logs|traffic|accuracy (rocket/analytics/cli.py)
from rocket.analytics.cli import analytics_app  # noqa: E402

app.add_typer(analytics_app, name="analytics")


@app.command("version")
def version() -> None:
    """Print the version and which form of the hot modules an import loads (mypyc-compiled or pure)."""
    from rocket import __version__
    from rocket.compiled import status

    typer.echo(f"rocket {__version__}")
    typer.echo(status())


def main() -> None:
    """Entry point of the ``rocket`` console script."""
    app()


if __name__ == "__main__":
    main()
