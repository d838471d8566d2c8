"""The broker's HTTP side (aiohttp): probes, metrics and a JSON admin API.

Routes:

* ``GET /healthz``: 200 ``{"status":"ok"}`` while the process serves.
* ``GET /readyz``: 200 ``{"status":"ready"}`` once the store is recovered and a
  NameServer accepted the registration within 120 s; else 503 with ``reasons``.
* ``GET /metrics``: Prometheus text format of the broker's own registry.
* ``GET /api/v1/status``: identity, role, readiness, NameServers, counters,
  delay levels, runtime info.
* ``GET /api/v1/topics``: ``{"topics":[TopicConfig JSON + "queues":[{queueId,
  minOffset, maxOffset}]]}``.
* ``POST /api/v1/topics``: body ``{"topic", "readQueueNums"=8,
  "writeQueueNums"=8, "perm"=6, "order"=false}``: create or update, register
  at once; 201 with the config.
* ``DELETE /api/v1/topics/{topic}``: delete, register at once; 404 when unknown.
* ``GET /api/v1/consumer-groups``: ``{"groups":[{group, online, clients,
  messageModel, consumeType, lag, consumeTps, topics:[{topic, lag, queues}]}]}``.
* ``GET /api/v1/consumer-groups/{group}``: one of those; 404 when unknown.
* ``GET /api/v1/ha``: replication role, epochs, slaves with their lag, the
  connection to the master (``ReplicationManager.status``).
* ``POST /api/v1/role``: body ``{"role": "MASTER", "brokerRole": "SYNC_MASTER"
  (optional), "force": false}``: promote this slave to master of its group
  (manual failover); 200 with the new status, 409 when refused (a live
  master is still registered), 400 for anything but a promotion.

With ACL on or ``httpAuthTokenFile`` set, every ``/api/v1`` route needs a credential
(``rocket.auth.http``: a bearer token or a Super user's keys, else 401); the probes and
``/metrics`` too with ``httpAuthProbes``.

Errors are JSON ``{"error": "...", "code": <RocketMQ code when there is one>}``
with 400 (bad input), 404 (unknown), 409 (refused on a slave).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from rocket.broker.metadata.replication import wait_replicated
from rocket.broker.topics import is_system_topic, validate_topic
from rocket.remoting import ResponseCode
from rocket.remoting.http import HttpServer, probe_app, prometheus_response
from rocket.remoting.tls import ServerTls

if TYPE_CHECKING:
    from rocket.broker.interfaces import HttpBroker

log = logging.getLogger("rocket.broker.http")

_BROKER_KEY: web.AppKey[HttpBroker] = web.AppKey("broker")


def build_app(broker: HttpBroker) -> web.Application:
    """The aiohttp application serving ``broker``."""
    app = probe_app(broker.http_auth, _readyz, _metrics)
    app[_BROKER_KEY] = broker
    app.router.add_get("/api/v1/status", _status)
    app.router.add_get("/api/v1/topics", _topics)
    app.router.add_post("/api/v1/topics", _create_topic)
    app.router.add_delete("/api/v1/topics/{topic}", _delete_topic)
    app.router.add_get("/api/v1/consumer-groups", _groups)
    app.router.add_get("/api/v1/consumer-groups/{group}", _group)
    app.router.add_get("/api/v1/ha", _ha_status)
    app.router.add_post("/api/v1/role", _change_role)
    return app


class BrokerHttpServer(HttpServer):
    """Runs :func:`build_app` on a TCP port (``tls``: the broker's ``tlsMode``, see :mod:`rocket.remoting.http`)."""

    def __init__(self, broker: HttpBroker, tls: ServerTls | None = None) -> None:
        super().__init__(build_app(broker), tls, name="broker-http")
        self.broker = broker


def _broker(request: web.Request) -> HttpBroker:
    return request.app[_BROKER_KEY]


def _error(status: int, message: str, code: int | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if code is not None:
        body["code"] = code
    return web.json_response(body, status=status)


async def _readyz(request: web.Request) -> web.Response:
    ready, reasons = _broker(request).readiness()
    if ready:
        return web.json_response({"status": "ready", "nameServers": _broker(request).registered_namesrvs})
    return web.json_response({"status": "not ready", "reasons": reasons}, status=503)


async def _metrics(request: web.Request) -> web.Response:
    return prometheus_response(_broker(request).metrics.render())


async def _status(request: web.Request) -> web.Response:
    return web.json_response(_broker(request).status())


def _topic_json(broker: HttpBroker, tc: Any) -> dict[str, Any]:
    store = broker.store
    obj = dict(tc.to_json())
    obj["queues"] = [
        {
            "queueId": q,
            "minOffset": max(0, store.get_min_offset_in_queue(tc.topic_name, q)),
            "maxOffset": max(0, store.get_max_offset_in_queue(tc.topic_name, q)),
        }
        for q in range(max(tc.read_queue_nums, tc.write_queue_nums))
    ]
    return obj


async def _topics(request: web.Request) -> web.Response:
    broker = _broker(request)
    configs = broker.metadata.topic_configs.all()
    return web.json_response({"topics": [_topic_json(broker, configs[name]) for name in sorted(configs)]})


async def _create_topic(request: web.Request) -> web.Response:
    broker = _broker(request)
    try:
        obj = await request.json()
    except ValueError:
        return _error(400, "body is not JSON")
    if not isinstance(obj, dict):
        return _error(400, "body must be a JSON object")
    topic = obj.get("topic") or obj.get("topicName")
    if not isinstance(topic, str):
        return _error(400, "missing 'topic'")
    problem = validate_topic(topic)
    if problem is not None:
        return _error(400, problem, ResponseCode.SYSTEM_ERROR)
    if is_system_topic(topic, broker.config.broker_cluster_name) or topic == broker.config.broker_name:
        return _error(400, f"The topic[{topic}] is conflict with system topic.", ResponseCode.SYSTEM_ERROR)
    if broker.config.is_slave:
        return _error(409, "this broker is a slave: create topics on the master", ResponseCode.SERVICE_NOT_AVAILABLE)
    try:
        spec: dict[str, Any] = obj
        read = int(spec.get("readQueueNums", spec.get("queueNums", broker.config.default_topic_queue_nums)))
        write = int(spec.get("writeQueueNums", spec.get("queueNums", read)))
        perm = int(obj.get("perm", 6))
        order = bool(obj.get("order", False))
    except (TypeError, ValueError) as exc:
        return _error(400, f"bad topic settings: {exc}")
    if read < 0 or write < 0 or max(read, write) == 0 or not 0 <= perm <= 7:
        return _error(400, f"illegal settings: readQueueNums={read} writeQueueNums={write} perm={perm}")
    tc = broker.new_topic_config(topic, read_queue_nums=read, write_queue_nums=write, perm=perm, order=order)
    await broker.create_topic(tc)
    not_replicated = await wait_replicated(broker.metadata_replication)
    if not_replicated is not None:
        return _error(503, f"topic[{topic}] created on the master, but not yet held by its SyncStateSet: "
                      f"{not_replicated}", ResponseCode.SYSTEM_ERROR)
    return web.json_response(_topic_json(broker, tc), status=201)


async def _delete_topic(request: web.Request) -> web.Response:
    broker = _broker(request)
    topic = request.match_info["topic"]
    if broker.topics.get(topic) is None:
        return _error(404, f"topic[{topic}] not exist", ResponseCode.TOPIC_NOT_EXIST)
    if is_system_topic(topic, broker.config.broker_cluster_name) or topic == broker.config.broker_name:
        return _error(400, f"The topic[{topic}] is conflict with system topic.", ResponseCode.SYSTEM_ERROR)
    await broker.delete_topic(topic)
    not_replicated = await wait_replicated(broker.metadata_replication)
    await broker.register_broker_all()
    if not_replicated is not None:
        return _error(503, f"topic[{topic}] deleted on the master, but not yet on its SyncStateSet: "
                      f"{not_replicated}", ResponseCode.SYSTEM_ERROR)
    return web.json_response({"deleted": topic})


def _group_json(broker: HttpBroker, group: str) -> dict[str, Any]:
    rows, tps = broker.consume_stats(group)
    info = broker.consumer_manager.get(group)
    topics: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = topics.setdefault(row.topic, {"topic": row.topic, "lag": 0, "queues": []})
        entry["lag"] += row.lag
        entry["queues"].append(
            {
                "queueId": row.queue_id,
                "brokerOffset": row.broker_offset,
                "consumerOffset": row.consumer_offset,
                "lag": row.lag,
                "lastTimestamp": row.last_timestamp,
            }
        )
    return {
        "group": group,
        "online": len(info.channels) if info else 0,
        "clients": info.client_ids() if info else [],
        "messageModel": info.message_model if info else None,
        "consumeType": info.consume_type if info else None,
        "lag": sum(t["lag"] for t in topics.values()),
        "consumeTps": tps,
        "topics": list(topics.values()),
    }


async def _groups(request: web.Request) -> web.Response:
    broker = _broker(request)
    return web.json_response({"groups": [_group_json(broker, g) for g in broker.consumer_groups()]})


async def _group(request: web.Request) -> web.Response:
    broker = _broker(request)
    group = request.match_info["group"]
    if group not in broker.consumer_groups() and broker.metadata.subscription_groups.get(group) is None:
        return _error(404, f"consumer group {group} is unknown to this broker")
    return web.json_response(_group_json(broker, group))


async def _ha_status(request: web.Request) -> web.Response:
    return web.json_response(_broker(request).ha.status())


async def _change_role(request: web.Request) -> web.Response:
    from rocket.broker.replicas import RoleChangeError

    broker = _broker(request)
    try:
        obj = await request.json() if request.can_read_body else {}
    except ValueError:
        return _error(400, "body is not JSON")
    if not isinstance(obj, dict):
        return _error(400, "body must be a JSON object")
    role = str(obj.get("role", "MASTER")).upper()
    if role != "MASTER":
        return _error(400, "only promotion (role MASTER) is supported: a master steps down by itself when a "
                           "newer master of its group registers")
    try:
        status = await broker.ha.promote(obj.get("brokerRole") or None, force=bool(obj.get("force", False)))
    except RoleChangeError as exc:
        return _error(409, str(exc), ResponseCode.SYSTEM_ERROR)
    except ValueError as exc:
        return _error(400, f"bad brokerRole: {exc}")
    return web.json_response(status)
