"""Listeners without sockets: NameServer tables and request handlers, the broker's address file,
the operator's spec parsing, Services and address learning (the end-to-end checks are
``tests/compat/test_listeners_java.py`` and ``tests/k8s/test_listeners.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from rocket.broker.config import BrokerConfig, ConfigError
from rocket.broker.listeners import ListenerAddresses, read_listener_addrs_file
from rocket.nameserver.config import ConfigError as NameServerConfigError
from rocket.nameserver.config import NameServerConfig
from rocket.nameserver.kvconfig import KVConfigManager
from rocket.nameserver.listeners import (
    ListenerError,
    format_listener_addrs,
    listener_processors,
    parse_listener_addrs,
    parse_listener_ports,
)
from rocket.nameserver.processor import DefaultRequestProcessor, no_route_remark
from rocket.nameserver.routeinfo import RouteInfoManager
from rocket.protocol import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from rocket.protocol.codes import RequestCode, ResponseCode
from rocket.remoting.command import RemotingCommand
from rocket.remoting.connection import Processors
from rocket_operator import listeners as op_listeners
from rocket_operator.builders import Owner, desired_children
from rocket_operator.spec import ListenerSpec, SpecError, parse_spec

# -- NameServer ---------------------------------------------------------------------------------


def test_listener_lists_parse_and_refuse_bad_entries() -> None:
    assert parse_listener_ports("external:9886, public:0") == {"external": 9886, "public": 0}
    assert parse_listener_addrs("b=h.example:2;a=1.2.3.4:1") == {"a": "1.2.3.4:1", "b": "h.example:2"}
    assert format_listener_addrs({"b": "h:2", "a": "x:1"}) == "a=x:1;b=h:2"
    for bad in ("external", "Ext:1", "a:1,a:2", "a:70000", "a:x"):
        with pytest.raises(ListenerError):
            parse_listener_ports(bad)
    for bad in ("a", "a=nohostport", "a=:1", "a=h:1;a=h:2"):
        with pytest.raises(ListenerError):
            parse_listener_addrs(bad)
    with pytest.raises(NameServerConfigError, match="listed twice"):
        NameServerConfig(listeners="a:1,a:2").validate()
    with pytest.raises(ConfigError, match="listenerPorts"):
        BrokerConfig(broker_name="b").update({"listenerPorts": "bad"})


class FakeConnection:
    def __init__(self) -> None:
        self.attributes: dict[str, Any] = {}
        self.peer = "127.0.0.1:5555"


def _call(processors: Processors, code: int, ext: dict[str, str], body: bytes = b"",
          conn: FakeConnection | None = None) -> RemotingCommand:
    entry = processors.lookup(code)
    assert entry is not None and not entry[1]
    response = entry[0](RemotingCommand(code=code, ext_fields=ext, body=body), conn or FakeConnection())  # type: ignore[arg-type]
    assert isinstance(response, RemotingCommand)
    return response


def _register(processors: Processors, name: str, addr: str, broker_id: int, listener_addrs: str | None,
              conn: FakeConnection) -> RemotingCommand:
    wrapper = TopicConfigSerializeWrapper({"TopicA": TopicConfig("TopicA", 4, 4, 6)}, DataVersion(1, 1))
    ext = {"brokerName": name, "brokerAddr": addr, "clusterName": "C", "haServerAddr": "", "brokerId": str(broker_id)}
    if listener_addrs is not None:
        ext["listenerAddrs"] = listener_addrs
    return _call(processors, RequestCode.REGISTER_BROKER, ext, RegisterBrokerBody(wrapper).encode(), conn)


def test_listener_port_answers_its_addresses_and_default_port_the_registered_ones() -> None:
    routes = RouteInfoManager()
    processor = DefaultRequestProcessor(routes, KVConfigManager())
    default = Processors()
    processor.register(default)
    external = listener_processors(default, "external", routes, processor.listener_book, no_route_remark)
    conn = FakeConnection()
    assert _register(default, "a", "10.0.0.1:10911", 0, "external=203.0.113.1:31001", conn).code == 0
    assert _register(default, "a", "10.0.0.2:10911", 1, None, conn).code == 0  # a slave with no listener address
    assert _register(default, "b", "10.0.0.3:10911", 0, "external=b.example.com:31003;other=x:1", conn).code == 0
    bad = _register(default, "b", "10.0.0.3:10911", 0, "external=nohost", conn)
    assert bad.code == ResponseCode.INVALID_PARAMETER and "listenerAddrs" in (bad.remark or "")

    def addrs(processors: Processors) -> dict[str, dict[str, str]]:
        body = orjson.loads(_call(processors, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}).body)
        return {bd["brokerName"]: bd["brokerAddrs"] for bd in body["brokerDatas"]}

    assert addrs(default) == {"a": {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}, "b": {"0": "10.0.0.3:10911"}}
    assert addrs(external) == {"a": {"0": "203.0.113.1:31001", "1": "10.0.0.2:10911"},
                               "b": {"0": "b.example.com:31003"}}
    info = orjson.loads(_call(external, RequestCode.GET_BROKER_CLUSTER_INFO, {}).body)
    assert info["brokerAddrTable"]["b"]["brokerAddrs"] == {"0": "b.example.com:31003"}
    assert info["clusterAddrTable"] == {"C": ["a", "b"]}
    missing = _call(external, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
    assert (missing.code, missing.remark) == (ResponseCode.TOPIC_NOT_EXIST, no_route_remark("Nope"))
    # other codes are the default port's; a broker gone is forgotten at the next registration
    assert external.lookup(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER) == default.lookup(
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    routes.unregister_broker("C", "10.0.0.3:10911", "b", 0)
    _register(default, "a", "10.0.0.1:10911", 0, "external=203.0.113.1:31001", conn)
    assert set(processor.listener_book.table) == {"10.0.0.1:10911"}


# -- broker -------------------------------------------------------------------------------------


def test_broker_reads_its_own_entries_of_the_listener_file(tmp_path: Path) -> None:
    path = tmp_path / "listeners.conf"
    path.write_text("rc-broker-0.0.external=192.0.2.1:31001\nrc-broker-0.1.external=192.0.2.1:31002\n"
                    "rc-broker-1.0.external=192.0.2.1:31003\nrc-broker-0.0.public=lb.example.com:9896\n"
                    "rc-broker-0.0.bad=nothostport\n")
    assert read_listener_addrs_file(str(path), "rc-broker-0", 0) == {
        "external": "192.0.2.1:31001", "public": "lb.example.com:9896"}
    assert read_listener_addrs_file(str(path), "rc-broker-0", 1) == {"external": "192.0.2.1:31002"}
    # a host-name entry (what the operator writes: the pod's name) wins over a brokerName.brokerId one
    path.write_text(path.read_text() + "rc-broker-slave-1-0.external=192.0.2.1:31009\n")
    assert read_listener_addrs_file(str(path), "rc-broker-0", 0, "rc-broker-slave-1-0") == {
        "external": "192.0.2.1:31009", "public": "lb.example.com:9896"}
    addresses = ListenerAddresses("rc-broker-1", 0, "127.0.0.1", str(path), host_name="rc-broker-master-1")
    assert addresses.current({"external": 20001, "local": 20002}) == {
        "external": "192.0.2.1:31003", "local": "127.0.0.1:20002"}  # the file wins over brokerIP1:port
    path.unlink()  # not there (yet): the ports' defaults only, no error
    assert addresses.current({"local": 20002}) == {"local": "127.0.0.1:20002"}


# -- operator -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("listeners", "message"), [
    ([{"name": "a", "type": "nodeport", "port": 9876}], "is taken"),
    ([{"name": "a", "type": "nodeport", "port": 9886}, {"name": "b", "type": "loadbalancer", "port": 9886}],
     "is taken"),
    ([{"name": "a", "type": "nodeport", "port": 9886}, {"name": "a", "type": "nodeport", "port": 9887}],
     "listed twice"),
    ([{"name": "i", "type": "internal", "port": 9000}], "internal listener"),
    ([{"name": "a", "type": "ingress", "port": 9886}], "type must be one of"),
    ([{"name": "a", "type": "nodeport", "port": 9886, "addresses": [{"target": "nameserver", "address": "x"}]}],
     "host:port"),
])
def test_spec_refuses_bad_listeners(listeners: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec({"listeners": listeners})


def test_no_listeners_changes_nothing_and_external_ones_add_ports_and_mounts() -> None:
    owner = Owner("ns", "rc", "uid")
    plain = desired_children(owner, parse_spec({}))
    assert op_listeners.build_listener_services(owner, parse_spec({}), 2) == []
    assert plain == desired_children(owner, parse_spec({"listeners": [{"name": "i", "type": "internal",
                                                                       "port": 9876}]}))
    spec = parse_spec({"broker": {"groups": 2, "replicasPerGroup": 0},
                       "listeners": [{"name": "ext", "type": "loadbalancer", "port": 9896}]})
    services = op_listeners.build_listener_services(owner, spec, 2)
    assert [s["metadata"]["name"] for s in services] == [
        "rc-nameserver-ext", "rc-broker-master-0-ext", "rc-broker-master-1-ext"]
    assert services[1]["spec"]["selector"]["statefulset.kubernetes.io/pod-name"] == "rc-broker-master-0"
    children = {(c["kind"], c["metadata"]["name"]): c for c in desired_children(owner, spec)}
    assert "listenerAddrsFile=/etc/rocket-listeners/listeners.conf" in children[
        ("ConfigMap", "rc-broker-config")]["data"]["broker.conf"]
    command = children[("Deployment", "rc-nameserver")]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-2:] == ["--listener", "ext:9896"]


def test_network_policy_admits_the_listener_ports() -> None:
    spec = parse_spec({"security": {"networkPolicies": {"enabled": True}},
                       "listeners": [{"name": "ext", "type": "nodeport", "port": 9886}]})
    policies = {c["metadata"]["name"]: c for c in desired_children(Owner("ns", "rc", "uid"), spec)
                if c["kind"] == "NetworkPolicy"}
    assert {"ports": [{"protocol": "TCP", "port": 9886}]} in policies["rc-nameserver"]["spec"]["ingress"]
    broker_ports = [p["port"] for rule in policies["rc-broker"]["spec"]["ingress"] for p in rule["ports"]]
    assert 9886 not in broker_ports and 10911 in broker_ports  # per-pod Services target the remoting port


def test_addresses_learned_from_services_and_nodes() -> None:
    nodeport = ListenerSpec("ext", "nodeport", 9886)
    lb = ListenerSpec("pub", "loadbalancer", 9896)
    node = {"status": {"addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP",
                                                                             "address": "10.0.0.1"}]}}
    assert op_listeners.node_address(node) == "10.0.0.1"
    assert op_listeners.node_address({"status": {}}) is None
    svc = {"spec": {"ports": [{"port": 9886, "nodePort": 31000}]}}
    assert op_listeners.service_address(nodeport, svc, "10.0.0.1") == "10.0.0.1:31000"
    assert op_listeners.service_address(nodeport, svc, None) is None
    assert op_listeners.service_address(lb, {"status": {"loadBalancer": {}}}, None) is None
    assert op_listeners.service_address(lb, {"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example"}]}}},
                                        None) == "lb.example:9896"
    assert op_listeners.service_address(lb, {"status": {"loadBalancer": {"ingress": [{"ip": "2001:db8::1"}]}}},
                                        None) == "[2001:db8::1]:9896"
    pod = op_listeners.BrokerPod("rc-broker-master-0", "rc-broker-0", 0)
    text = op_listeners.listeners_config_text({"pub": {pod: "lb.example:9896"}})
    assert text == "rc-broker-master-0.pub=lb.example:9896\n"
