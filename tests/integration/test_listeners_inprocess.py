"""Listeners with a NameServer and a broker in one event loop: the broker's extra listener port is
served, an address written to ``listenerAddrsFile`` later reaches the listener's routes at the
next registration (no restart), and the default port keeps answering the registered address.
The Java client's view is ``tests/compat/test_listeners_java.py``."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from rocket.broker.config import BrokerConfig
from rocket.broker.controller import BrokerController
from rocket.client import Admin
from rocket.nameserver.config import NameServerConfig
from rocket.nameserver.server import NameServer
from rocket.remoting import RemotingClient, RemotingCommand, RequestCode
from tests.integration.broker_harness import broker_port
from tests.support import eventually, free_port

pytestmark = pytest.mark.timeout(90)


async def _route_addr(client: RemotingClient, namesrv: str, topic: str) -> str | None:
    resp = await client.invoke(namesrv, RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                        ext_fields={"topic": topic}), timeout=3)
    if resp.code != 0:
        return None
    addr: str = orjson.loads(resp.body)["brokerDatas"][0]["brokerAddrs"]["0"]
    return addr


async def test_listener_addresses_follow_the_file_without_restart(tmp_path: Path) -> None:
    ns = NameServer(NameServerConfig(host="127.0.0.1", port=0, http_port=0, listeners="external:0"))
    await ns.start()
    namesrv, external_ns = f"127.0.0.1:{ns.port}", f"127.0.0.1:{ns.listener_ports['external']}"
    addrs_file = tmp_path / "listeners.conf"
    ext_port = free_port()
    cfg = BrokerConfig(broker_name="lgrp", listen_port=broker_port(), namesrv_addr=namesrv,
                       store_path_root_dir=str(tmp_path / "broker"), bind_address="127.0.0.1",
                       vip_channel_enable=False, register_name_server_period=1000,
                       listener_ports=f"external:{ext_port}", listener_addrs_file=str(addrs_file))
    cfg.store_overrides.update({"mappedFileSizeCommitLog": str(1 << 20), "maxHashSlotNum": "1000",
                                "maxIndexNum": "4000"})
    broker = BrokerController(cfg)
    await broker.start()
    client = RemotingClient()
    try:
        async with Admin(namesrv, timeout=5) as admin:
            await eventually(lambda: admin.create_topic("ListenerTopic", cluster=None, queue_nums=2),
                             what="the topic created", retry_on=(LookupError,))
        # no file yet: the extra port, advertised as brokerIP1:<port>
        assert await eventually(lambda: _route_addr(client, external_ns, "ListenerTopic"),
                                what="a route on the listener port") == f"127.0.0.1:{ext_port}"
        assert await _route_addr(client, namesrv, "ListenerTopic") == cfg.broker_addr
        # the extra port serves the remoting protocol (same handlers as listenPort)
        resp = await client.invoke(f"127.0.0.1:{ext_port}",
                                   RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO), timeout=3)
        assert resp.code == 0
        # an address learned later (what the operator writes): taken at the next registration
        addrs_file.write_text("lgrp.0.external=lb.example.com:9896\nother.0.external=x.example.com:1\n")

        async def learned() -> bool:
            return await _route_addr(client, external_ns, "ListenerTopic") == "lb.example.com:9896"

        await eventually(learned, timeout=10, what="the file's address in the listener's route")
        assert await _route_addr(client, namesrv, "ListenerTopic") == cfg.broker_addr
    finally:
        await client.close()
        await broker.shutdown()
        await ns.stop()
