"""The ``rocket`` command line (typer)."""

from __future__ import annotations

from pathlib import Path

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


@app.command("nameserver")
def nameserver(
    host: str | None = typer.Option(None, help="Address to listen on (default 0.0.0.0)."),
    port: int | None = typer.Option(None, help="Remoting port (default 9876)."),
    http_port: int | None = typer.Option(None, help="HTTP port: probes, metrics, API (default 9877)."),
    scan_interval: float | None = typer.Option(None, help="Seconds between broker scans (default 10)."),
    broker_timeout: float | None = typer.Option(None, help="Seconds of silence before eviction (default 120)."),
    log_level: str | None = typer.Option(None, help="DEBUG, INFO, WARNING or ERROR (default INFO)."),
    config: Path | None = typer.Option(None, "--config", help="TOML or JSON settings file; flags win over it."),
) -> None:
    """Run a NameServer until SIGTERM or SIGINT."""
    from rocket.nameserver.config import ConfigError, NameServerConfig, load_config_file
    from rocket.nameserver.server import serve
    from rocket.runtime import run, setup_logging

    try:
        base = load_config_file(config) if config is not None else NameServerConfig()
        settings = base.with_overrides(
            host=host,
            port=port,
            http_port=http_port,
            scan_interval=scan_interval,
            broker_timeout=broker_timeout,
            log_level=log_level,
        )
        settings.validate()
    except ConfigError as exc:
        typer.echo(f"rocket nameserver: {exc}", err=True)
        raise typer.Exit(2) from None
    setup_logging(settings.log_level)
    try:
        run(serve(settings))
    except OSError as exc:
        typer.echo(f"rocket nameserver: {exc}", err=True)
        raise typer.Exit(1) from None


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
    from rocket.runtime import run, setup_logging
    from rocket.store.api import StoreError

    try:
        overrides = cli_overrides(
            name=name, cluster=cluster, broker_id=broker_id, ip=ip, port=port, http_port=http_port,
            namesrv=namesrv, store_dir=store_dir, flush=flush, role=role, settings=settings,
        )
        settings_obj = load_config(config, overrides)
    except ConfigError as exc:
        typer.echo(f"rocket broker: {exc}", err=True)
        raise typer.Exit(2) from None
    setup_logging(log_level)
    try:
        run(serve(settings_obj))
    except (OSError, StoreError) as exc:
        typer.echo(f"rocket broker: {exc}", err=True)
        raise typer.Exit(1) from None


# produce, consume, topic, cluster, group and local (rocket/client/cli.py)
from rocket.client.cli import register as _register_client_commands  # noqa: E402

_register_client_commands(app)

# user and acl (rocket/client/auth_cli.py)
from rocket.client.auth_cli import register as _register_auth_commands  # noqa: E402

_register_auth_commands(app)

# rocket analytics logs|traffic|accuracy (rocket/analytics/cli.py)
from rocket.analytics.cli import analytics_app  # noqa: E402

app.add_typer(analytics_app, name="analytics")


def main() -> None:
    """Entry point of the ``rocket`` console script."""
    app()


if __name__ == "__main__":
    main()
