"""Helpers for broker integration tests: real NameServer and broker processes on
loopback, and a thin raw-protocol client (RemotingClient + RemotingCommand)."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from rocket.message import (
    Message,
    MessageExt,
    decode_records,
    encode_batch,
    encode_properties,
)
from rocket.remoting import RemotingClient, RemotingCommand, RemotingConnection, RequestCode
from tests.support import free_port, reserve_ports, rocket_command, running, wait_port

#: Short delay levels so retries and delayed delivery take well under a second.
FAST_DELAY_LEVELS = "300ms 300ms 400ms " + " ".join(["400ms"] * 15)


def broker_port() -> int:
    """A listen port whose VIP port (port - 2) and HA port (port + 1) are free too, outside the
    kernel's ephemeral range: a test may kill a broker and restart it on the same ports later,
    and a port in that range may meanwhile be taken by any outgoing connection (or its TIME_WAIT)
    or by a server started on a ``free_port()``."""
    return reserve_ports((-2, 0, 1))


@dataclass
class NameServerProc:
    proc: subprocess.Popen[bytes]
    port: int
    http_port: int
    log: Path

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextlib.contextmanager
def nameserver_process(tmp: Path, port: int | None = None) -> Iterator[NameServerProc]:
    """A NameServer subprocess for the duration of the block."""
    port = port or free_port()
    http_port = free_port()
    log = tmp / f"nameserver-{port}.log"
    argv = rocket_command("nameserver", "--host", "127.0.0.1", "--port", str(port), "--http-port", str(http_port))
    with running(argv, port=port, log_path=log) as proc:
        yield NameServerProc(proc, port, http_port, log)


@dataclass
class BrokerProc:
    proc: subprocess.Popen[bytes]
    port: int
    http_port: int
    name: str
    store: Path
    log: Path
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def vip_addr(self) -> str:
        return f"127.0.0.1:{self.port - 2}"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def write_broker_conf(path: Path, settings: dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))


@contextlib.contextmanager
def broker_process(
    tmp: Path,
    name: str,
    namesrv: str,
    *,
    settings: dict[str, str] | None = None,
    port: int | None = None,
    wait: bool = True,
) -> Iterator[BrokerProc]:
    """``rocket broker --config FILE --name ... --port ...`` for the duration of the block."""
    port = port or broker_port()
    http_port = free_port()
    store = tmp / f"store-{name}-{port}"
    conf = tmp / f"{name}-{port}.conf"
    all_settings = {
        "brokerClusterName": "TestCluster",
        "messageDelayLevel": FAST_DELAY_LEVELS,
        "registerNameServerPeriod": "2000",
        "mappedFileSizeCommitLog": str(8 * 1024 * 1024),
        "mappedFileSizeConsumeQueue": str(6000 * 20),
        **(settings or {}),
    }
    write_broker_conf(conf, all_settings)
    log = tmp / f"broker-{name}-{port}.log"
    restarts = 1
    while log.exists():  # a restart on the same port: keep the earlier run's log
        restarts += 1
        log = tmp / f"broker-{name}-{port}.{restarts}.log"
    argv = rocket_command(
        "broker",
        "--config", str(conf),
        "--name", name,
        "--port", str(port),
        "--http-port", str(http_port),
        "--namesrv", namesrv,
        "--store-dir", str(store),
        "--log-level", "INFO",
    )
    with running(argv, port=port if wait else None, log_path=log, timeout=30) as proc:
        if wait:
            wait_port(http_port, proc=proc, log_path=log)
        yield BrokerProc(proc, port, http_port, name, store, log, all_settings)


# -- raw protocol helpers -------------------------------------------------------------------------------


def cmd(code: int, ext: dict[str, Any] | None = None, body: bytes = b"", language: str = "JAVA",
        version: int = 409) -> RemotingCommand:
    """A request with ext values as strings."""
    return RemotingCommand(
        code=int(code),
        ext_fields={k: str(v) for k, v in (ext or {}).items()},
        body=body,
        language=language,
        version=version,
    )


class RawBroker:
    """Requests to one broker address over a RemotingClient."""

    def __init__(self, client: RemotingClient, addr: str) -> None:
        self.client = client
        self.addr = addr

    async def call(self, code: int, ext: dict[str, Any] | None = None, body: bytes = b"",
                   timeout: float = 5.0, **kw: Any) -> RemotingCommand:
        return await self.client.invoke(self.addr, cmd(code, ext, body, **kw), timeout)

    async def connection(self) -> RemotingConnection:
        return await self.client.connection(self.addr)

    async def send(self, topic: str, body: bytes = b"hello", *, queue_id: int = 0, tags: str | None = None,
                   keys: str | None = None, props: dict[str, str] | None = None, code: int = RequestCode.SEND_MESSAGE,
                   default_topic: str = "TBW102", queue_nums: int = 4, reconsume_times: int = 0,
                   max_reconsume_times: int | None = None) -> RemotingCommand:
        properties = dict(props or {})
        if tags:
            properties["TAGS"] = tags
        if keys:
            properties["KEYS"] = keys
        ext: dict[str, Any] = {
            "producerGroup": "PID_TEST",
            "topic": topic,
            "defaultTopic": default_topic,
            "defaultTopicQueueNums": queue_nums,
            "queueId": queue_id,
            "sysFlag": 0,
            "bornTimestamp": int(time.time() * 1000),
            "flag": 0,
            "properties": encode_properties(properties),
            "reconsumeTimes": reconsume_times,
        }
        if max_reconsume_times is not None:
            ext["maxReconsumeTimes"] = max_reconsume_times
        if code == RequestCode.SEND_MESSAGE_V2:
            short = dict(zip(
                ["producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
                 "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch"],
                "abcdefghijklm",
                strict=True,
            ))
            ext = {short[k]: v for k, v in ext.items()}
        return await self.call(code, ext, body)

    async def send_batch(self, topic: str, bodies: list[bytes], *, queue_id: int = 0, cpp_style: bool = False,
                         raw_body: bytes | None = None, properties: str = "") -> RemotingCommand:
        body = raw_body if raw_body is not None else encode_batch(
            [Message(topic, b, properties={"KEYS": f"k{i}"}) for i, b in enumerate(bodies)]
        )
        ext = {
            "producerGroup": "PID_TEST", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
            "queueId": queue_id, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
            "properties": properties, "batch": "1" if cpp_style else "true",
        }
        if cpp_style:
            return await self.call(RequestCode.SEND_MESSAGE, ext, body, language="CPP", version=63)
        short = {"producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d",
                 "queueId": "e", "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i", "batch": "m"}
        return await self.call(RequestCode.SEND_BATCH_MESSAGE, {short[k]: v for k, v in ext.items()}, body)

    async def pull(self, group: str, topic: str, queue_id: int = 0, offset: int = 0, *, max_nums: int = 32,
                   sys_flag: int = 4, subscription: str = "*", suspend_ms: int = 0, commit_offset: int = 0,
                   timeout: float = 5.0) -> RemotingCommand:
        ext = {
            "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
            "maxMsgNums": max_nums, "sysFlag": sys_flag, "commitOffset": commit_offset,
            "suspendTimeoutMillis": suspend_ms, "subscription": subscription, "subVersion": 0,
        }
        return await self.call(RequestCode.PULL_MESSAGE, ext, timeout=timeout)

    async def heartbeat(self, client_id: str, consumer_groups: list[tuple[str, list[str]]] = (),  # type: ignore[assignment]
                        producer_groups: list[str] = (), cpp: bool = False) -> RemotingCommand:  # type: ignore[assignment]
        consumers = []
        for group, topics in consumer_groups:
            if cpp:
                subs = [{"subString": "*", "subVersion": str(int(time.time() * 1000)), "topic": t} for t in topics]
                consumers.append({"consumeFromWhere": 0, "consumeType": 1, "groupName": group, "messageModel": 1,
                                  "subscriptionDataSet": subs})
            else:
                subs = [{"topic": t, "subString": "*", "classFilterMode": False, "tagsSet": [], "codeSet": [],
                         "subVersion": int(time.time() * 1000), "expressionType": "TAG"} for t in topics]
                consumers.append({"groupName": group, "consumeType": "CONSUME_PASSIVELY",
                                  "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                                  "unitMode": False, "subscriptionDataSet": subs})
        body: dict[str, Any] = {"clientID": client_id, "consumerDataSet": consumers}
        if producer_groups or not cpp:
            body["producerDataSet"] = [{"groupName": g} for g in producer_groups]
        return await self.call(RequestCode.HEART_BEAT, body=orjson.dumps(body),
                               language="CPP" if cpp else "JAVA", version=63 if cpp else 409)

    async def create_topic(self, topic: str, queues: int = 4, perm: int = 6) -> RemotingCommand:
        return await self.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
            "perm": perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false",
        })


def records(resp: RemotingCommand) -> list[MessageExt]:
    return list(decode_records(resp.body))


async def route(client: RemotingClient, namesrv: str, topic: str) -> dict[str, Any] | None:
    """TopicRouteData JSON from the NameServer, None when code 17."""
    resp = await client.invoke(namesrv, cmd(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), 3.0)
    if resp.code != 0:
        return None
    obj: dict[str, Any] = orjson.loads(resp.body)
    return obj
