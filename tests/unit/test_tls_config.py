"""TLS settings (RocketMQ's ``tls.*`` names in every config style) and the reloading contexts."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import pytest

from rocket.broker.config import BrokerConfig, ConfigError, load_config
from rocket.nameserver.config import ConfigError as NameServerConfigError
from rocket.nameserver.config import load_config_file
from rocket.remoting import certs
from rocket.remoting.tls import (
    ClientAuth,
    ClientTls,
    ServerTls,
    TlsConfig,
    TlsConfigError,
    TlsMode,
    client_tls_from_env,
)


@pytest.fixture
def pki(tmp_path: Path) -> tuple[Path, certs.KeyPair]:
    ca = certs.issue_ca()
    certs.write_pem(tmp_path / "ca.pem", ca.cert_pem)
    certs.write_pair(tmp_path, "server", certs.issue_cert(ca, "s", ["127.0.0.1"]))
    return tmp_path, ca


def test_keys_in_every_spelling_and_the_config_file_wins(tmp_path: Path) -> None:
    props = tmp_path / "tls.properties"
    props.write_text("# RocketMQ's tls.config.file\ntls.server.certPath=/from/file.pem\ntls.client.authServer=false\n")
    cfg = TlsConfig.from_properties({
        "tls.server.mode": "PERMISSIVE", "tls_server_key_path": "/k.pem", "tls.server.certPath": "/inline.pem",
        "TLS-SERVER-NEED-CLIENT-AUTH": "optional", "tls.server.trustCertPath": "/ca.pem",
        "tls.config.file": str(props), "unrelated": "x",
    })
    assert cfg.mode is TlsMode.PERMISSIVE
    assert cfg.server_cert_path == "/from/file.pem" and cfg.server_key_path == "/k.pem"
    assert cfg.server_need_client_auth is ClientAuth.OPTIONAL and cfg.client_auth_server is False
    assert TlsConfig().mode is TlsMode.DISABLED and TlsConfig().client_auth_server is True


@pytest.mark.parametrize(("values", "message"), [
    ({"tlsMode": "strict"}, "tlsMode must be disabled, permissive or enforcing"),
    ({"tlsMode": "enforcing"}, "needs tls.server.certPath and tls.server.keyPath"),
    ({"tlsMode": "enforcing", "tls.server.certPath": "/c", "tls.server.keyPath": "/k",
      "tls.server.need.client.auth": "require"}, "needs tls.server.trustCertPath"),
    ({"tls.server.need.client.auth": "sometimes"}, "none, optional or require"),
    ({"tls.enable": "maybe"}, "tls.enable must be true or false"),
    ({"tls.client.certPath": "/c"}, "go together"),
    ({"tls.config.file": "/no/such/tls.properties"}, "tls.config.file /no/such/tls.properties"),
])
def test_bad_settings_are_refused_with_the_key(values: dict[str, str], message: str) -> None:
    with pytest.raises(TlsConfigError, match=message):
        TlsConfig.from_properties(values)


def test_broker_config_keys_toml_dotted_and_masked_passwords(tmp_path: Path, pki: tuple[Path, certs.KeyPair]) -> None:
    folder, _ = pki
    conf = tmp_path / "broker.toml"
    conf.write_text(f'brokerName = "b"\ntlsMode = "enforcing"\ntls.server.certPath = "{folder / "server.pem"}"\n'
                    f'tls.server.keyPath = "{folder / "server.key"}"\ntls.server.keyPassword = "pw"\n'
                    f'storePathRootDir = "{tmp_path / "store"}"\n')
    cfg = load_config(conf)
    tls = cfg.tls_config()
    assert tls.mode is TlsMode.ENFORCING and tls.server_key_password == "pw"
    props = cfg.to_properties()
    assert props["tlsMode"] == "enforcing" and props["tls.server.certPath"] == str(folder / "server.pem")
    assert props["tls.server.keyPassword"] == "******" and props["tls.client.keyPassword"] == ""
    with pytest.raises(ConfigError, match=r"tls\.server\.certPath"):
        BrokerConfig(broker_name="b").update({"tlsMode": "enforcing"})


def test_nameserver_config_file_takes_tls_keys(tmp_path: Path) -> None:
    conf = tmp_path / "ns.json"
    conf.write_text(json.dumps({"port": 0, "tlsMode": "permissive", "tls": {"test": {"mode": {"enable": True}}}}))
    cfg = load_config_file(conf)
    assert cfg.tls.mode is TlsMode.PERMISSIVE and cfg.tls.test_mode_enable
    conf.write_text(json.dumps({"tlsMode": "sometimes"}))
    with pytest.raises(NameServerConfigError, match="tlsMode"):
        load_config_file(conf)


def test_test_mode_makes_a_self_signed_certificate_and_trusts_any_server() -> None:
    cfg = TlsConfig.from_properties({"tlsMode": "enforcing", "tls.test.mode.enable": "true", "tls.enable": "true"})
    server = cfg.server()
    client = cfg.client()
    assert isinstance(server, ServerTls) and isinstance(client, ClientTls)
    assert client.context().verify_mode == ssl.CERT_NONE and not client.verify


def test_reload_waits_for_a_matching_pair(pki: tuple[Path, certs.KeyPair]) -> None:
    folder, ca = pki
    server = ServerTls(TlsConfig.from_properties({
        "tlsMode": "enforcing", "tls.server.certPath": str(folder / "server.pem"),
        "tls.server.keyPath": str(folder / "server.key")}))
    first = server.context()
    assert server.context() is first  # nothing changed: the same context
    new = certs.issue_cert(ca, "s", ["127.0.0.1"])
    certs.write_pem(folder / "server.pem", new.cert_pem)  # the key is still the old one
    assert server.context() is first and server.reloads == 0
    certs.write_pem(folder / "server.key", new.key_pem, private=True)
    second = server.context()
    assert second is not first and server.reloads == 1
    (folder / "server.key").write_text("not a key")  # a broken file keeps the last good context
    assert server.context() is second


def test_a_missing_certificate_fails_at_start(tmp_path: Path) -> None:
    cfg = TlsConfig.from_properties({"tlsMode": "enforcing", "tls.server.certPath": str(tmp_path / "none.pem"),
                                     "tls.server.keyPath": str(tmp_path / "none.key")})
    with pytest.raises(TlsConfigError, match="TLS server certificate"):
        cfg.server()


def test_client_tls_from_the_environment(pki: tuple[Path, certs.KeyPair]) -> None:
    folder, _ = pki
    assert client_tls_from_env({}) is None
    assert client_tls_from_env({"ROCKET_TLS": "false", "ROCKET_TLS_CA": str(folder / "ca.pem")}) is None
    on = client_tls_from_env({"ROCKET_TLS_CA": str(folder / "ca.pem")})
    assert on is not None and on.verify and on.context().verify_mode == ssl.CERT_REQUIRED
    insecure = client_tls_from_env({"ROCKET_TLS": "true", "ROCKET_TLS_VERIFY": "false"})
    assert insecure is not None and not insecure.verify
    with pytest.raises(TlsConfigError, match="ROCKET_TLS must be true or false"):
        client_tls_from_env({"ROCKET_TLS": "yes please"})


def test_local_secure_plan_enforces_tls_with_a_kept_ca(tmp_path: Path) -> None:
    from rocket.local import LocalCluster

    cluster = LocalCluster(tmp_path, 30000, brokers=1, secure=True)
    plan = cluster.plan()
    tls_dir = tmp_path / "secrets" / "tls"
    props = TlsConfig.from_properties({"tls.config.file": str(tls_dir / "tls.properties")})
    assert props.enable and props.client_trust_cert_path == str(tls_dir / "ca.pem")
    assert (tls_dir / "ca.key").stat().st_mode & 0o777 == 0o600
    assert ServerTls(TlsConfig.from_properties({"tlsMode": "enforcing", "tls.config.file": props.config_file}))
    ns_settings = json.loads((tmp_path / "secrets" / "namesrv-security.json").read_text())
    assert ns_settings["tlsMode"] == "enforcing" and ns_settings["acl_enable"] is True
    broker = " ".join(next(p for p in plan if p.kind == "broker").argv)
    assert "tlsMode=enforcing" in broker and f"tls.config.file={tls_dir / 'tls.properties'}" in broker
    ca = (tls_dir / "ca.pem").read_bytes()
    LocalCluster(tmp_path, 30000, brokers=1, secure=True).plan()
    assert (tls_dir / "ca.pem").read_bytes() == ca  # kept across runs
    # either half alone (the benchmark's setups); TLS alone keeps the controllers, over TLS
    tls_only = LocalCluster(tmp_path / "t", 30000, brokers=1, tls=True)
    argv = [" ".join(p.argv) for p in tls_only.plan()]
    assert tls_only.controllers and all("aclEnable" not in a for a in argv)
    assert all("--tls-mode enforcing" in a for a, p in zip(argv, tls_only.plan(), strict=True)
               if p.kind == "controller")
    acl_only = " ".join(LocalCluster(tmp_path / "a", 30000, brokers=1, acl=True).plan()[-1].argv)
    assert "aclEnable=true" in acl_only and "tlsMode" not in acl_only
