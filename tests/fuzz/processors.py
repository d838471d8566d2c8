"""Request fuzzing in one process: every request code of a real NameServer, broker and controller
with hostile header fields and bodies, to reach the body and header parsing inside processors.

The three servers run on loopback in this process (so tracemalloc sees them, and a traceback
their connection logs is caught); requests go over real TCP connections with our remoting
client, pipelined in batches. For each request code a server registers (and a few it does not),
a request gets ext fields from a pool of the names RocketMQ's request headers use, with a
client's values, some of them changed to hostile ones, and a body from the JSON-body strategies
of :mod:`tests.fuzz.targets` (or random bytes, or Java properties text).

A crash is an answer whose remark is an escaped exception (``TypeError: ...``, as the
connection words an exception a processor let through) or a traceback logged by the servers;
an answer code outside RocketMQ's ``ResponseCode`` is one too. A request left unanswered within
the timeout counts only for the codes that may long-poll (pulls).

Names (topics, groups, brokers, users) come from a small pool, so that whatever the fuzzer
creates stays bounded and memory growth means a leak.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import tempfile
import time
import warnings
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import HypothesisDeprecationWarning

from rocket.broker.config import BrokerConfig
from rocket.broker.controller import BrokerController
from rocket.controller.config import ControllerConfig, parse_peers
from rocket.controller.server import ControllerServer
from rocket.nameserver.config import NameServerConfig
from rocket.nameserver.server import NameServer
from rocket.protocol.codes import RequestCode, ResponseCode
from rocket.remoting import RemotingClient, RemotingCommand
from rocket.remoting.command import RemotingTimeoutError
from tests.fuzz import strategies as S
from tests.fuzz import targets as T
from tests.fuzz.engine import Crash, MemoryWatch, Result, buffer_rng
from tests.integration.broker_harness import broker_port
from tests.support import reserve_ports

KNOWN_CODES = {int(c) for c in ResponseCode} | {29}
#: The remark of a processor exception that escaped (``rocket.remoting.connection._error_response``).
ESCAPED = re.compile(r"^[A-Z][A-Za-z]*(Error|Exception|Interrupt)\b")
#: Codes that may hold a request (long polling); an unanswered one of these is not a crash.
MAY_HOLD = {RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE}
TOPICS = ["FuzzT", "FuzzU", "TBW102", "%RETRY%FuzzG", "%DLQ%FuzzG", "RMQ_SYS_TRANS_HALF_TOPIC"]
GROUPS = ["FuzzG", "FuzzH"]
BATCH = 64
WINDOW = 64

VALID: dict[str, list[str]] = {
    "topic": TOPICS, "originTopic": TOPICS, "defaultTopic": ["TBW102"], "b": TOPICS, "c": ["TBW102"],
    "consumerGroup": GROUPS, "group": GROUPS, "producerGroup": ["PG"], "a": ["PG"], "groupName": GROUPS,
    "queueId": ["0", "1", "3"], "e": ["0", "1"], "queueOffset": ["0", "5"], "offset": ["0", "100"],
    "commitOffset": ["0"], "maxMsgNums": ["32"], "maxNum": ["32"], "sysFlag": ["0", "3"], "f": ["0"],
    "suspendTimeoutMillis": ["0"], "subscription": ["*", "A||B"], "subVersion": ["0"], "expressionType": ["TAG"],
    "brokerName": ["fuzz-broker", "b"], "brokerAddr": ["127.0.0.1:10911"], "clusterName": ["DefaultCluster"],
    "brokerId": ["0", "1", "2"], "haServerAddr": ["127.0.0.1:10912"], "namespace": ["ns"], "key": ["k"],
    "value": ["v"], "username": ["fuzzuser"], "subject": ["User:fuzzuser"], "policyType": ["Custom"],
    "resource": ["Topic:FuzzT"], "timestamp": ["0", "1700000000000"], "beginTimestamp": ["0"],
    "endTimestamp": ["1700000000000"], "msgId": ["7F00000100002A9F0000000000000000"], "clientId": ["127.0.0.1@1"],
    "commitLogOffset": ["0"], "tranStateTableOffset": ["0"], "commitOrRollback": ["0", "8", "12"],
    "fromTransactionCheck": ["false"], "compressed": ["false", "true"], "bodyCrc32": ["0"], "epoch": ["1"],
    "maxOffset": ["0"], "confirmOffset": ["0"], "heartbeatTimeoutMills": ["1000"], "electionPriority": ["1"],
    "masterBrokerId": ["1"], "masterEpoch": ["1"], "masterAddress": ["127.0.0.1:10911"], "delayLevel": ["0", "3"],
    "readQueueNums": ["4"], "writeQueueNums": ["4"], "perm": ["6"], "topicFilterType": ["SINGLE_TAG"],
    "topicSysFlag": ["0"], "order": ["false"], "unitMode": ["false"], "maxReconsumeTimes": ["16"],
    "originMsgId": ["7F00000100002A9F0000000000000000"], "queueNums": ["4"], "isForce": ["false"],
    "designateElect": ["false"], "appliedBrokerId": ["1"], "registerCheckCode": ["x"], "isOrder": ["false"],
    "statsName": ["TOPIC_PUT_NUMS"], "statsKey": ["FuzzT"], "version": ["0"], "brokerControllerIdsToClean": ["1"],
    "isCleanLivingBroker": ["false"], "nextAssignBrokerId": ["1"], "newMasterBrokerId": ["1"],
    "d": ["4"], "g": ["1700000000000"], "h": ["0"], "i": ["TAGS\x01A\x02"], "j": ["0"], "k": ["false"],
    "l": ["16"], "m": ["false"], "uniqKey": ["7F00000100002A9F0000000000000000"], "transactionId": ["t"],
}
HOSTILE = st.one_of(st.sampled_from(S.TEXT_EDGES), st.sampled_from(S.INT_EDGES).map(str), st.text(max_size=20),
                    st.integers(-(2**70), 2**70).map(str))


@st.composite
def ext_fields(draw: st.DrawFn) -> dict[str, str]:
    """Some of the pool's fields with a client's values, a few made hostile or dropped."""
    names = draw(st.lists(st.sampled_from(sorted(VALID)), min_size=0, max_size=12, unique=True))
    ext = {name: draw(st.sampled_from(VALID[name])) for name in names}
    for name in draw(st.lists(st.sampled_from(sorted(VALID)), max_size=3, unique=True)):
        ext[name] = draw(HOSTILE)
    if draw(st.integers(0, 9)) == 0:
        ext[draw(st.text(max_size=8))] = draw(HOSTILE)
    return ext


BODY_TEMPLATES: list[Any] = [
    T.REGISTER, T.WRAPPER, T.TOPIC_CONFIG, T.GROUP, T.HEARTBEAT, T.SYNC_STATE, T.USER, T.ACL, T.DATA_VERSION,
    {"consumerGroup": "FuzzG", "clientId": "127.0.0.1@1", "mqSet": [T.MQ, {**T.MQ, "queueId": 2}]},
    {"topicConfigList": [T.TOPIC_CONFIG]}, {"groupConfigList": [T.GROUP]}, {"topicList": ["FuzzT"]},
    {"offsetTable": {"FuzzT@FuzzG": {"0": 1}}}, {"subscriptionData": {"topic": "FuzzT", "expressionType": "TAG"}},
    ["fuzz-broker"], {"table": {"a": "b"}},
]
bodies = st.one_of(
    st.just(b""),
    S.json_body(BODY_TEMPLATES),
    st.text(max_size=60).map(str.encode),
    T.batch_bodies,
    T.compressed_register,
)


@dataclass(frozen=True)
class Request:
    """One generated request: which server, the code, ext fields and body."""

    server: str
    code: int
    ext: dict[str, str]
    body: bytes


class _Tracebacks(logging.Handler):
    """Collects log records that carry a traceback (an exception a handler let escape)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Traceback" in record.getMessage():
            self.records.append(self.format(record)[-3000:])


@contextlib.asynccontextmanager
async def in_process_servers(root: Path) -> AsyncIterator[dict[str, tuple[str, list[int]]]]:
    """A NameServer, a broker registered with it and a one-node controller, in this process.

    Yields ``{server name: (address, request codes it registers)}``.
    """
    ns = NameServer(NameServerConfig(host="127.0.0.1", port=0, http_port=0))
    await ns.start()
    namesrv = f"127.0.0.1:{ns.port}"
    cfg = BrokerConfig(broker_name="fuzz-broker", listen_port=broker_port(), namesrv_addr=namesrv,
                       store_path_root_dir=str(root / "broker"), bind_address="127.0.0.1", vip_channel_enable=False,
                       register_name_server_period=5000)
    cfg.store_overrides.update({"mappedFileSizeCommitLog": str(4 << 20), "maxHashSlotNum": "1000",
                                "maxIndexNum": "4000"})
    broker = BrokerController(cfg)
    port = reserve_ports([0, 1])
    controller = ControllerServer(ControllerConfig(
        peers=parse_peers(f"127.0.0.1:{port}/{port + 1}"), self_address=f"127.0.0.1:{port}", host="127.0.0.1",
        port=port, secret="fuzz-controller-secret-0123456789", data_dir=str(root / "controller")))
    await broker.start()
    await controller.start()
    try:
        yield {
            "nameserver": (namesrv, ns.remoting.processors.codes()),
            "broker": (f"127.0.0.1:{broker.remoting.port}", broker.remoting.processors.codes()),
            "controller": (f"127.0.0.1:{controller.port}", controller.remoting.processors.codes()),
        }
    finally:
        await controller.stop()
        await broker.shutdown()
        await ns.stop()


def request_strategy(servers: dict[str, tuple[str, list[int]]]) -> st.SearchStrategy[Request]:
    """Requests to any of ``servers``: a registered code (sometimes an unknown one), ext, body."""
    pairs = [(name, code) for name, (_, codes) in servers.items() for code in codes]
    pairs += [(name, code) for name in servers for code in (-1, 0, 9999, 2**31 - 1)]
    return st.builds(lambda pair, ext, body: Request(pair[0], pair[1], ext, body),
                     st.sampled_from(pairs), ext_fields(), bodies)


def _draw_requests(strategy: st.SearchStrategy[Request], count: int, seed_value: int) -> list[Request]:
    """``count`` requests drawn by hypothesis from seeded random buffers."""
    out: list[Request] = []

    @settings(database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(req: Request) -> None:
        out.append(req)

    rng = buffer_rng(seed_value, "requests")
    fuzz: Callable[[bytes], object] = collect.hypothesis.fuzz_one_input  # type: ignore[attr-defined]
    with warnings.catch_warnings():
        # hypothesis notices the servers' use of `random` between two draws and takes it for the strategy's
        warnings.simplefilter("ignore", HypothesisDeprecationWarning)
        while len(out) < count:
            fuzz(rng.randbytes(1024))
    return out


async def _send(client: RemotingClient, servers: dict[str, tuple[str, list[int]]], req: Request,
                result: Result, seed_value: int) -> None:
    """Send one request and judge its answer into ``result``."""
    cmd = RemotingCommand(code=req.code, ext_fields=dict(req.ext), body=req.body, language="JAVA")
    try:
        resp = await client.invoke(servers[req.server][0], cmd, timeout=5.0)
    except RemotingTimeoutError:
        if req.code not in MAY_HOLD:
            result.crashes.append(Crash(f"{req.server} code {req.code}", "no answer within 5 s",
                                        f"ext {req.ext!r:.300} body {req.body!r:.300}", seed_value))
        return
    result.examples += 1
    result.answers[resp.code] = result.answers.get(resp.code, 0) + 1
    remark = resp.remark or ""
    if resp.code not in KNOWN_CODES or ESCAPED.match(remark):
        result.crashes.append(Crash(f"{req.server} code {req.code}", f"answer {resp.code}: {remark[:300]}",
                                    f"ext {req.ext!r:.300} body {req.body!r:.300}", seed_value))


async def fuzz_requests(count: int, seed_value: int, root: Path, watch: MemoryWatch | None = None) -> Result:
    """Send ``count`` generated requests to in-process servers under ``root``; collect crashes.

    With ``watch``, the memory the product holds is measured from after the first tenth of the
    requests (the servers' tables filled with the fuzzer's names) to the end, into ``memory``.
    """
    result = Result("requests")
    catcher = _Tracebacks()
    logging.getLogger().addHandler(catcher)
    started = time.perf_counter()
    try:
        async with in_process_servers(root) as servers:
            requests = request_strategy(servers)
            client = RemotingClient()
            window = asyncio.Semaphore(WINDOW)  # requests in flight (a long-polled pull holds one)
            tasks: set[asyncio.Task[None]] = set()
            try:
                done = 0
                warm = count // 10
                while done < count and len(result.crashes) < 20:
                    if watch is not None and done >= warm and result.memory is None:
                        await asyncio.gather(*tasks)
                        watch.baseline()
                        result.memory = 0
                    batch = _draw_requests(requests, min(BATCH, count - done), seed_value + done)
                    for req in batch:
                        await window.acquire()
                        task = asyncio.create_task(_send(client, servers, req, result, seed_value))
                        tasks.add(task)
                        task.add_done_callback(lambda t: (tasks.discard(t), window.release()))
                    done += len(batch)
                await asyncio.gather(*tasks)
                if watch is not None and result.memory is not None:
                    result.memory = watch.growth()[0]
            finally:
                await client.close()
    finally:
        logging.getLogger().removeHandler(catcher)
    for text in catcher.records[:10]:
        result.crashes.append(Crash("server log", "a traceback was logged", text, seed_value))
    result.seconds = time.perf_counter() - started
    return result


def run_requests(count: int, seed_value: int, watch: MemoryWatch | None = None) -> Result:
    """:func:`fuzz_requests` in a fresh event loop and a temporary store directory."""
    with tempfile.TemporaryDirectory(prefix="rocket-fuzz-") as tmp:
        return asyncio.run(fuzz_requests(count, seed_value, Path(tmp), watch))


def describe(requests: list[Request]) -> str:
    """A readable dump of requests (for failure messages)."""
    return "\n".join(json.dumps({"server": r.server, "code": r.code, "ext": r.ext, "body": r.body[:200].decode(
        "utf-8", "replace")}) for r in requests)
