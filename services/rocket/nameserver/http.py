"""The NameServer's HTTP side (aiohttp): probes, metrics and a JSON admin API.

| route | answer |
|---|---|
| ``GET /healthz`` | 200 ``{"status": "ok"}`` while the process serves |
| ``GET /readyz`` | 200 ``{"status": "ready"}`` once the remoting port listens; 503 otherwise |
| ``GET /metrics`` | Prometheus text format of the instance's own registry |
| ``GET /api/v1/cluster`` | ClusterInfo JSON (``ClusterInfo``, standard keys) plus ``brokerLiveTable`` |
| ``GET /api/v1/topics`` | ``{"topicList": [...]}`` |
| ``GET /api/v1/topics/{topic}/route`` | ``TopicRouteData`` JSON; 404 ``{"error", "code": 17}`` if unknown |
"""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web
from prometheus_client import generate_latest

from rocket.auth.http import HttpAuth
from rocket.nameserver.metrics import NameServerMetrics
from rocket.nameserver.processor import no_route_remark
from rocket.nameserver.routeinfo import RouteInfoManager
from rocket.protocol.codes import ResponseCode
from rocket.remoting.http import probe_app, prometheus_response


class NameServerView(Protocol):
    """What the HTTP side reads of a NameServer (:class:`rocket.nameserver.server.NameServer`)."""

    @property
    def ready(self) -> bool:
        """True once the remoting port listens."""
        ...

    @property
    def metrics(self) -> NameServerMetrics:
        """The instance's Prometheus metrics."""
        ...

    @property
    def routes(self) -> RouteInfoManager:
        """The route table."""
        ...

    @property
    def http_auth(self) -> HttpAuth | None:
        """The credential check of ``/api/v1`` (``rocket.auth.http``), None when open."""
        ...


_SERVER_KEY: web.AppKey[NameServerView] = web.AppKey("nameserver")


def build_app(server: NameServerView) -> web.Application:
    """The aiohttp application serving ``server``'s probes, metrics and API."""
    app = probe_app(server.http_auth, _readyz, _metrics)
    app[_SERVER_KEY] = server
    app.router.add_get("/api/v1/cluster", _cluster)
    app.router.add_get("/api/v1/topics", _topics)
    app.router.add_get("/api/v1/topics/{topic}/route", _route)
    return app


def _server(request: web.Request) -> NameServerView:
    return request.app[_SERVER_KEY]


async def _readyz(request: web.Request) -> web.Response:
    if _server(request).ready:
        return web.json_response({"status": "ready"})
    return web.json_response({"status": "not ready"}, status=503)


async def _metrics(request: web.Request) -> web.Response:
    return prometheus_response(generate_latest(_server(request).metrics.registry))


async def _cluster(request: web.Request) -> web.Response:
    server = _server(request)
    routes = server.routes
    obj: dict[str, Any] = routes.get_all_cluster_info().to_json()
    now = routes.clock()
    obj["brokerLiveTable"] = {
        addr: {
            "clusterName": live.cluster_name,
            "brokerName": live.broker_name,
            "brokerId": live.broker_id,
            "haServerAddr": live.ha_server_addr,
            "dataVersion": live.data_version.to_json(),
            "secondsSinceLastUpdate": round(now - live.last_update, 3),
        }
        for addr, live in routes.broker_live_table.items()
    }
    return web.json_response(obj)


async def _topics(request: web.Request) -> web.Response:
    return web.json_response({"topicList": _server(request).routes.get_all_topic_list()})


async def _route(request: web.Request) -> web.Response:
    topic = request.match_info["topic"]
    body = _server(request).routes.route_body(topic)
    if body is None:
        return web.json_response(
            {"error": no_route_remark(topic).split("\n", 1)[0], "code": int(ResponseCode.TOPIC_NOT_EXIST)},
            status=404,
        )
    return web.Response(body=body, content_type="application/json")
