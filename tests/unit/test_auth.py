"""Units of ``rocket.auth``: signatures, the classification table, ACL evaluation, the store and
the server hook (no network)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest

from rocket.auth import AuthConfig, AuthError, AuthMetadataStore, ServerAuth, SessionCredentials
from rocket.auth.classify import CLASSIFIERS, classify
from rocket.auth.model import (
    Acl,
    Action,
    Decision,
    PolicyEntry,
    PolicyType,
    Resource,
    User,
    UserStatus,
    UserType,
)
from rocket.auth.signature import combine_request_content, resolve_credentials, verify_signature
from rocket.remoting import RemotingCommand, RequestCode, ResponseCode


def test_every_request_code_is_classified() -> None:
    missing = [code.name for code in RequestCode if code not in CLASSIFIERS]
    assert missing == []


def test_signature_is_hmac_sha1_over_sorted_values_then_body() -> None:
    cmd = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields={"b": "T", "a": "G", "z": "9"}, body=b"xy")
    SessionCredentials("ak1", "sk1").sign(cmd)
    assert cmd.ext_fields["AccessKey"] == "ak1"
    # sorted keys: AccessKey, a, b, z  (uppercase sorts first, as Java's TreeMap)
    content = b"ak1" + b"G" + b"T" + b"9" + b"xy"
    assert combine_request_content(cmd.ext_fields, cmd.body) == content
    expected = base64.b64encode(hmac.new(b"sk1", content, hashlib.sha1).digest()).decode()
    assert cmd.ext_fields["Signature"] == expected
    assert verify_signature(cmd, "sk1")
    assert not verify_signature(cmd, "sk2")
    cmd.body = b"xz"  # tampered body
    assert not verify_signature(cmd, "sk1")


def test_signature_skips_unique_key_query_for_old_clients() -> None:
    fields = {"_UNIQUE_KEY_QUERY": "true", "topic": "T"}
    assert combine_request_content(fields, b"", version=400) == b"T"
    assert combine_request_content(fields, b"", version=401) == b"trueT"


def test_fast_signing_equals_the_reference_for_any_key_and_field_order() -> None:
    """The cached key schedule and per-key-set field order give exactly ``hmac.digest`` over
    ``combine_request_content``: long and non-ASCII keys, fields in any order, non-ASCII field
    names (UTF-16 order), old clients without ``_UNIQUE_KEY_QUERY``, None values, a changed key."""
    from rocket.auth.signature import cal_signature

    keys = ["sk", "k" * 64, "k" * 65, "k" * 200, "s\u00e9cret\u4e2d", ""]
    field_sets = [
        {"b": "T", "a": "G", "z": "9", "AccessKey": "ak"},
        {"z": "9", "AccessKey": "ak", "b": "T", "a": "G"},
        {"\uff21": "wide", "\U0001f600": "emoji", "a": "x"},  # UTF-16 order differs from code points
        {"_UNIQUE_KEY_QUERY": "true", "topic": "T"},
        {"only": "one"},
        {},
    ]
    for secret in keys:
        for fields in field_sets:
            for body in (b"", b"payload" * 300):
                for version in (400, 401):
                    cmd = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=dict(fields), body=body,
                                          version=version)
                    SessionCredentials("ak", secret).sign(cmd)
                    signed = dict(cmd.ext_fields)
                    content = combine_request_content(signed, body)
                    reference = base64.b64encode(hmac.digest(secret.encode(), content, "sha1")).decode()
                    assert signed["Signature"] == reference
                    assert cal_signature(content, secret) == reference
                    # (a server leaves _UNIQUE_KEY_QUERY out for version 400: checked below)
                    old_query = version <= 400 and "_UNIQUE_KEY_QUERY" in fields
                    assert verify_signature(cmd, secret) is not old_query
                    assert verify_signature(cmd, secret + "x") is False
    # the server drops _UNIQUE_KEY_QUERY for clients up to V4_9_3 only
    cmd = RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields={"_UNIQUE_KEY_QUERY": "true", "topic": "T"},
                          version=400)
    cmd.ext_fields["AccessKey"] = "ak"
    cmd.ext_fields["Signature"] = base64.b64encode(hmac.digest(b"sk", b"akT", "sha1")).decode()
    assert verify_signature(cmd, "sk")
    cmd.version = 401
    assert not verify_signature(cmd, "sk")
    # a hand-built command with a None value signs as the reference (None values left out)
    cmd = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields={"a": "x"}, body=b"")
    cmd.ext_fields["n"] = None  # type: ignore[assignment]
    SessionCredentials("ak", "sk").sign(cmd)
    assert cmd.ext_fields["Signature"] == base64.b64encode(hmac.digest(b"sk", b"akx", "sha1")).decode()


def test_decisions_follow_acl_and_user_changes() -> None:
    """Cached authorization decisions never outlive the ACL or user they came from."""
    store = AuthMetadataStore()
    store.create_user(User("u", "pw"))
    store.put_acl(_acl({"resource": "Topic:t", "actions": ["Pub"], "decision": "Allow"}))
    auth = ServerAuth(AuthConfig(authentication_enabled=True, authorization_enabled=True), store)

    def send() -> RemotingCommand:
        cmd = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields={"a": "g", "b": "t"}, body=b"m")
        SessionCredentials("u", store.users["u"].password).sign(cmd)
        return cmd

    auth.check(send(), "10.0.0.1:1")
    store.put_acl(_acl({"resource": "Topic:t", "actions": ["Pub"], "decision": "Deny"}))
    with pytest.raises(AuthError, match="deny"):
        auth.check(send(), "10.0.0.1:1")
    store.put_acl(_acl({"resource": "Topic:t", "actions": ["Pub"], "decision": "Allow"}))
    auth.check(send(), "10.0.0.1:1")
    old = send()
    store.update_user(User("u", "new-pw"))  # the old SecretKey's signature no longer passes
    with pytest.raises(AuthError, match="signature"):
        auth.check(old, "10.0.0.1:1")
    auth.check(send(), "10.0.0.1:1")
    store.update_user(User("u", "new-pw", UserType.NORMAL, UserStatus.DISABLE))
    with pytest.raises(AuthError, match="disabled"):
        auth.check(send(), "10.0.0.1:1")
    store.delete_user("u")
    with pytest.raises(AuthError, match="not found"):
        auth.check(old, "10.0.0.1:1")


def test_resolve_credentials(tmp_path: Path) -> None:
    assert resolve_credentials(environ={}) is None
    env = {"ROCKET_ACCESS_KEY": "a", "ROCKET_SECRET_KEY": "s"}
    assert resolve_credentials(environ=env) == SessionCredentials("a", "s")
    key_file = tmp_path / "key"
    key_file.write_text("AccessKey=fa\nSecretKey=fs\n")
    assert resolve_credentials(credentials_file=str(key_file), environ=env) == SessionCredentials("fa", "fs")
    with pytest.raises(ValueError, match="both"):
        resolve_credentials(environ={"ROCKET_ACCESS_KEY": "a"})
    assert "fs" not in repr(SessionCredentials("fa", "fs"))


def _acl(*entries: dict[str, object]) -> Acl:
    return Acl.from_json({"subject": "User:u", "policies": [{"policyType": "Custom", "entries": list(entries)}]})


def test_acl_most_specific_resource_wins_then_deny() -> None:
    acl = _acl(
        {"resource": "Topic:*", "actions": ["Pub"], "decision": "Allow"},
        {"resource": "Topic:secret", "actions": ["Pub"], "decision": "Deny"},
        {"resource": "Topic:app-*", "actions": ["Sub"], "decision": "Allow"},
        {"resource": "Topic:app-private-*", "actions": ["Sub"], "decision": "Deny"},
        {"resource": "Group:g1", "actions": ["All"], "decision": "Allow"},
    )
    def allowed(resource: str, *actions: Action) -> bool:
        entry = acl.decide(Resource.parse(resource), actions, "10.0.0.1")
        return entry is not None and entry.decision is Decision.ALLOW
    assert allowed("Topic:anything", Action.PUB)
    assert not allowed("Topic:secret", Action.PUB)
    assert not allowed("Topic:anything", Action.SUB)
    assert allowed("Topic:app-orders", Action.SUB)
    assert not allowed("Topic:app-private-x", Action.SUB)
    assert allowed("Group:g1", Action.SUB)
    assert not allowed("Group:g2", Action.SUB)
    # equally specific Allow and Deny (one per source-IP range): Deny wins
    tie = Acl("User:u", {PolicyType.CUSTOM: [
        PolicyEntry(Resource.parse("Topic:t"), [Action.PUB], ["10.0.0.0/8"], Decision.ALLOW),
        PolicyEntry(Resource.parse("Topic:t"), [Action.ALL], ["10.0.0.1"], Decision.DENY),
    ]})
    entry = tie.decide(Resource.parse("Topic:t"), (Action.PUB,), "10.0.0.1")
    assert entry is not None and entry.decision is Decision.DENY
    entry = tie.decide(Resource.parse("Topic:t"), (Action.PUB,), "10.0.0.2")
    assert entry is not None and entry.decision is Decision.ALLOW


def test_acl_source_ip_ranges() -> None:
    acl = _acl({"resource": "Topic:t", "actions": ["Pub"], "sourceIps": ["192.168.0.0/24", "10.1.1.1"]})
    assert acl.decide(Resource.parse("Topic:t"), (Action.PUB,), "192.168.0.77") is not None
    assert acl.decide(Resource.parse("Topic:t"), (Action.PUB,), "10.1.1.1") is not None
    assert acl.decide(Resource.parse("Topic:t"), (Action.PUB,), "10.1.1.2") is None
    with pytest.raises(AuthError, match="CIDR"):
        _acl({"resource": "Topic:t", "actions": ["Pub"], "sourceIps": ["not-an-ip"]})


def test_bad_definitions_are_refused() -> None:
    with pytest.raises(AuthError, match="resource"):
        Resource.parse("Queue:x")
    with pytest.raises(AuthError, match="unknown action"):
        _acl({"resource": "Topic:t", "actions": ["Publish"]})
    with pytest.raises(AuthError, match="password"):
        User.from_json({"username": "x"})


def test_store_is_durable_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "config" / "auth.json"
    store = AuthMetadataStore(path)
    store.create_user(User("alice", "pw"))
    with pytest.raises(AuthError, match="existed"):
        store.create_user(User("alice", "pw2"))
    store.put_acl(_acl({"resource": "Topic:t", "actions": ["Pub"]}).__class__.from_json(
        {"subject": "alice", "policies": [{"policyType": "Custom", "entries": [
            {"resource": "Topic:t", "actions": ["Pub"]}]}]}))
    with pytest.raises(AuthError, match="not exist"):
        store.put_acl(Acl.from_json({"subject": "User:nobody", "policies": [{"entries": [
            {"resource": "Topic:t", "actions": ["Pub"]}]}]}))
    again = AuthMetadataStore(path)
    assert again.get_user("alice") == User("alice", "pw")
    assert again.get_acl("User:alice") is not None
    assert json.loads(path.read_text())["users"][0]["username"] == "alice"
    store.delete_acl("User:alice", PolicyType.CUSTOM, Resource.parse("Topic:t"))
    assert store.get_acl("alice") is None
    copy = AuthMetadataStore()
    assert copy.replace_all(again.to_json())
    assert not copy.replace_all(again.to_json())
    assert copy.get_user("alice") == User("alice", "pw")


def _hook(tmp_path: Path) -> ServerAuth:
    cfg = AuthConfig(authentication_enabled=True, authorization_enabled=True,
                     init_authentication_user='{"username":"root","password":"rootpw"}',
                     metadata_path=str(tmp_path / "auth.json"))
    hook = ServerAuth(cfg)
    hook.store.create_user(User("app", "apppw"))
    hook.store.put_acl(Acl.from_json({"subject": "User:app", "policies": [{"entries": [
        {"resource": "Topic:orders", "actions": ["Pub"]}]}]}))
    return hook


class _Conn:
    peer = "127.0.0.1:5555"

    def __init__(self) -> None:
        self.attributes: dict[str, object] = {}


def _send(topic: str, creds: SessionCredentials | None) -> RemotingCommand:
    cmd = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields={"a": "PG", "b": topic}, body=b"m")
    if creds is not None:
        creds.sign(cmd)
    return cmd


def test_hook_authenticates_and_authorizes(tmp_path: Path) -> None:
    hook = _hook(tmp_path)
    assert hook.store.get_user("root").user_type is UserType.SUPER  # type: ignore[union-attr]
    conn = _Conn()
    assert hook(_send("orders", SessionCredentials("app", "apppw")), conn) is None  # type: ignore[arg-type]
    assert hook(_send("anything", SessionCredentials("root", "rootpw")), conn) is None  # type: ignore[arg-type]
    cases = {
        "unsigned": (_send("orders", None), "no AccessKey"),
        "wrong key": (_send("orders", SessionCredentials("app", "nope")), "check signature failed"),
        "unknown user": (_send("orders", SessionCredentials("ghost", "x")), "not found"),
        "other topic": (_send("payments", SessionCredentials("app", "apppw")),
                        "no permission to access Topic:payments"),
    }
    for name, (cmd, remark) in cases.items():
        resp = hook(cmd, conn)  # type: ignore[arg-type]
        assert resp is not None, name
        assert resp.code == ResponseCode.NO_PERMISSION, name
        assert remark in (resp.remark or ""), (name, resp.remark)
    unknown = RemotingCommand(code=9999)
    SessionCredentials("app", "apppw").sign(unknown)
    resp = hook(unknown, conn)  # type: ignore[arg-type]
    assert resp is not None and "not classified" in (resp.remark or "")


def test_classification_reads_headers_and_bodies() -> None:
    pull = RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={"topic": "T", "consumerGroup": "G"})
    assert [(r.key, a) for r, a in classify(pull, "C") or []] == [
        ("Topic:T", (Action.SUB,)), ("Group:G", (Action.SUB,))]
    retry = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields={"a": "G", "b": "%RETRY%G"})
    assert [r.key for r, _ in classify(retry, "C") or []] == ["Group:G"]
    hb = RemotingCommand(code=RequestCode.HEART_BEAT, body=json.dumps({"consumerDataSet": [
        {"groupName": "G", "subscriptionDataSet": [{"topic": "T"}, {"topic": "%RETRY%G"}]}]}).encode())
    assert [r.key for r, _ in classify(hb, "C") or []] == ["Group:G", "Topic:T"]
    create = RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={"topic": "N"})
    assert classify(create, "C") == [(Resource.topic("N"), (Action.CREATE,))]
    wipe = RemotingCommand(code=RequestCode.WIPE_WRITE_PERM_OF_BROKER, ext_fields={"brokerName": "b"})
    assert classify(wipe, "C") == [(Resource.cluster("C"), (Action.UPDATE,))]
    assert classify(RemotingCommand(code=12345), "C") is None


def test_controller_codes_are_classified_as_apache_annotates_them() -> None:
    """Apache RocketMQ 5.x's ``@RocketMQAction`` of the controller request headers: Update on the
    cluster for the writes and heartbeats, Get for the reads; nothing else on a controller."""
    from rocket.auth.classify import CONTROLLER_CLASSIFIERS, CONTROLLER_CODES

    update = {RequestCode.BROKER_HEARTBEAT, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
              RequestCode.CONTROLLER_ELECT_MASTER, RequestCode.CONTROLLER_REGISTER_BROKER,
              RequestCode.CONTROLLER_APPLY_BROKER_ID, RequestCode.CLEAN_BROKER_DATA,
              RequestCode.UPDATE_CONTROLLER_CONFIG}
    for code in CONTROLLER_CODES:
        wanted = Action.UPDATE if code in update else Action.GET
        checks = classify(RemotingCommand(code=code, ext_fields={"clusterName": "Other"}), "C", CONTROLLER_CLASSIFIERS)
        assert checks == [(Resource.cluster("C"), (wanted,))], code  # the server's cluster, not the header's
    assert classify(RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields={"topic": "T"}), "C",
                    CONTROLLER_CLASSIFIERS) is None


def test_controller_hook_denies_other_codes_to_normal_users() -> None:
    from rocket.auth.classify import CONTROLLER_CLASSIFIERS

    store = AuthMetadataStore()
    store.create_user(User("ops", "ops-secret"))
    store.put_acl(Acl("User:ops", {PolicyType.CUSTOM: [PolicyEntry(Resource.parse("*"), [Action.ALL])]}))
    hook = ServerAuth(AuthConfig(cluster_name="C", authentication_enabled=True, authorization_enabled=True),
                      store, classifiers=CONTROLLER_CLASSIFIERS)
    ops = SessionCredentials("ops", "ops-secret")
    send = RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields={"topic": "T"})
    ops.sign(send)
    with pytest.raises(AuthError, match="not classified"):
        hook.check(send, "127.0.0.1:1")
    meta = RemotingCommand(code=RequestCode.CONTROLLER_GET_METADATA_INFO)
    ops.sign(meta)
    hook.check(meta, "127.0.0.1:1")  # allowed by the policy


def test_store_file_is_private(tmp_path: Path) -> None:
    store = AuthMetadataStore(tmp_path / "auth.json")
    store.create_user(User("alice", "pw"))
    assert (tmp_path / "auth.json").stat().st_mode & 0o777 == 0o600


def test_local_secure_plan(tmp_path: Path) -> None:
    from rocket.auth.signature import parse_credentials_file
    from rocket.local import LocalCluster

    cluster = LocalCluster(tmp_path, 30000, brokers=1, secure=True)
    plan = cluster.plan()
    creds = parse_credentials_file(tmp_path / "secrets" / "admin.credentials")
    assert (tmp_path / "secrets" / "admin.credentials").stat().st_mode & 0o777 == 0o600
    assert json.loads((tmp_path / "secrets" / "admin-user.json").read_text())["password"] == creds.secret_key
    assert {info.kind for info in plan} == {"nameserver", "controller", "broker"}  # controller mode, secure
    for info in plan:
        text = " ".join(info.argv)
        expected = {"nameserver": "--config", "controller": "--acl-enable", "broker": "aclEnable=true"}[info.kind]
        assert expected in text, text
        if info.kind != "nameserver":
            assert "enforcing" in text, text  # TLS too
        assert creds.secret_key not in text  # keys never on a command line
    again = LocalCluster(tmp_path, 30000, brokers=1, secure=True)
    again.plan()
    assert parse_credentials_file(tmp_path / "secrets" / "admin.credentials") == creds  # kept across runs
    assert "aclEnable" not in " ".join(LocalCluster(tmp_path, 30000, brokers=1).plan()[-1].argv)


def test_ha_hello_signature() -> None:
    from rocket.auth.ha import sign_hello, verify_hello

    store = AuthMetadataStore()
    store.create_user(User("root", "rootpw", UserType.SUPER))
    store.create_user(User("app", "apppw"))
    hello = {"brokerName": "b", "maxOffset": 5, "epochs": [[1, 0]]}
    assert verify_hello(sign_hello(hello, SessionCredentials("root", "rootpw")), store) is None
    assert "signature" in (verify_hello(sign_hello(hello, SessionCredentials("root", "x")), store) or "")
    assert "Super" in (verify_hello(sign_hello(hello, SessionCredentials("app", "apppw")), store) or "")
    tampered = sign_hello(hello, SessionCredentials("root", "rootpw"))
    tampered["maxOffset"] = 6
    assert verify_hello(tampered, store) is not None
    old = sign_hello(hello, SessionCredentials("root", "rootpw"), now_ms=1)
    assert "Timestamp" in (verify_hello(old, store) or "")
    assert verify_hello(None, store) is not None
    assert verify_hello(hello, store) is not None


def test_stateful_authentication_verifies_once_per_connection(tmp_path: Path) -> None:
    cfg = AuthConfig(authentication_enabled=True, authorization_enabled=True,
                     init_authentication_user='{"username":"root","password":"rootpw"}',
                     authentication_strategy="StatefulAuthenticationStrategy")
    hook = ServerAuth(cfg)
    hook.store.create_user(User("app", "apppw"))
    hook.store.put_acl(Acl.from_json({"subject": "User:app", "policies": [{"entries": [
        {"resource": "Topic:orders", "actions": ["Pub"]}]}]}))

    class Conn:
        peer = "127.0.0.1:1"

        def __init__(self) -> None:
            self.attributes: dict[str, object] = {}

    first, other = Conn(), Conn()
    forged = _send("orders", SessionCredentials("app", "guess"))
    assert hook(forged, first) is not None  # type: ignore[arg-type]  # unproven connection: verified
    assert hook(_send("orders", SessionCredentials("app", "apppw")), first) is None  # type: ignore[arg-type]
    assert hook(forged, first) is None  # type: ignore[arg-type]  # proven connection: not re-verified
    assert hook(forged, other) is not None  # type: ignore[arg-type]
    assert hook(_send("payments", SessionCredentials("app", "apppw")), first) is not None  # type: ignore[arg-type]
    hook.store.update_user(User("app", "newpw"))  # users changed: verify again
    assert hook(forged, first) is not None  # type: ignore[arg-type]
    with pytest.raises(AuthError, match="stateless or stateful"):
        ServerAuth(AuthConfig(authentication_enabled=True, authentication_strategy="sometimes"))


async def test_auth_admin_processor_answers_bad_input_clearly() -> None:
    from rocket.auth.processor import AuthAdminProcessor

    store = AuthMetadataStore()
    slave = False
    proc = AuthAdminProcessor(store, read_only=lambda: slave)
    conn: object = None

    async def call(code: RequestCode, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
        handler = proc.handlers()[code]
        return await handler(RemotingCommand(code=code, ext_fields=fields, body=body), conn)  # type: ignore[operator,no-any-return]

    resp = await call(RequestCode.AUTH_CREATE_USER, {}, b'{"password":"x"}')
    assert (resp.code, resp.remark) == (ResponseCode.INVALID_PARAMETER, "The username is blank")
    resp = await call(RequestCode.AUTH_CREATE_USER, {"username": "u"}, b"{not json")
    assert resp.code == ResponseCode.INVALID_PARAMETER and "JSON" in (resp.remark or "")
    resp = await call(RequestCode.AUTH_CREATE_USER, {"username": "u"}, b'{"password":"p","userType":"Boss"}')
    assert resp.code == ResponseCode.INVALID_PARAMETER and "userType" in (resp.remark or "")
    assert (await call(RequestCode.AUTH_CREATE_USER, {"username": "u"}, b'{"password":"p"}')).code == 0
    resp = await call(RequestCode.AUTH_CREATE_ACL, {"subject": "User:u"},
                      b'{"policies":[{"entries":[{"resource":"Queue:x","actions":["Pub"]}]}]}')
    assert resp.code == ResponseCode.NO_PERMISSION and "Queue:x" in (resp.remark or "")
    resp = await call(RequestCode.AUTH_DELETE_ACL, {"subject": "User:u"})
    assert resp.code == ResponseCode.NO_PERMISSION and "not exist" in (resp.remark or "")
    got = await call(RequestCode.AUTH_GET_USER, {"username": "u"})
    assert json.loads(got.body)["userType"] == "Normal"
    slave = True
    resp = await call(RequestCode.AUTH_DELETE_USER, {"username": "u"})
    assert resp.code == ResponseCode.SYSTEM_ERROR and "slave" in (resp.remark or "")
    assert store.get_user("u") is not None


def test_controller_acl_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ACL on a controller needs someone who can sign in; the ACL switches are shown by
    GET_CONTROLLER_CONFIG and cannot be turned off by UPDATE_CONTROLLER_CONFIG."""
    from rocket.controller.config import ConfigError, ControllerConfig, Peer
    from rocket.controller.server import check_auth_settings

    for name in ("ROCKET_ACCESS_KEY", "ROCKET_SECRET_KEY", "ROCKET_CREDENTIALS_FILE", "ROCKET_INIT_AUTH_USER"):
        monkeypatch.delenv(name, raising=False)
    cfg = ControllerConfig(peers=[Peer("n0", "127.0.0.1:1", "127.0.0.1:2")], self_address="127.0.0.1:1",
                           secret="s" * 16, authentication_enabled=True, authorization_enabled=True)
    with pytest.raises(AuthError, match="nobody could sign in"):
        check_auth_settings(cfg)
    init = tmp_path / "admin.json"
    init.write_text(json.dumps({"username": "admin", "password": "admin-secret"}))
    cfg.init_authentication_user = str(init)
    check_auth_settings(cfg)
    assert cfg.auth_config().enabled and cfg.auth_config().cluster_name == "DefaultCluster"
    assert "authenticationEnabled=true" in cfg.to_properties()
    assert "admin-secret" not in cfg.to_properties() and "admin-secret" not in repr(cfg)
    with pytest.raises(ConfigError, match="black list"):
        cfg.update_from_properties({"authenticationEnabled": "false"})
    assert cfg.authentication_enabled
