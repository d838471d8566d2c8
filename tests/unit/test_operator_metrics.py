"""The operator's own metrics: series of a deleted cluster are dropped; the HTTP server reports its bound port."""

from __future__ import annotations

import aiohttp

from rocket_operator.metrics import DRAIN_PENDING, HttpServer, forget_cluster


def drain_series() -> set[tuple[str, str, str]]:
    return {(s.labels["namespace"], s.labels["cluster"], s.labels["broker"])
            for family in DRAIN_PENDING.collect() for s in family.samples}


def test_forget_cluster_drops_only_that_clusters_drain_series() -> None:
    DRAIN_PENDING.labels("ns-forget", "gone", "broker-a").set(3)
    DRAIN_PENDING.labels("ns-forget", "gone", "broker-b").set(1)
    DRAIN_PENDING.labels("ns-forget", "kept", "broker-a").set(2)
    forget_cluster("ns-forget", "gone")
    mine = {s for s in drain_series() if s[0] == "ns-forget"}
    assert mine == {("ns-forget", "kept", "broker-a")}
    forget_cluster("ns-forget", "kept")
    assert not {s for s in drain_series() if s[0] == "ns-forget"}


async def test_http_server_on_port_zero_reports_the_bound_port() -> None:
    server = HttpServer("127.0.0.1", 0)
    port = await server.start()
    try:
        assert port > 0
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/healthz") as resp:
            assert resp.status == 200 and (await resp.json())["status"] == "ok"
    finally:
        await server.stop()
