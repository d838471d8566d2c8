"""Compatibility: Apache RocketMQ's own admin tool, ``mqadmin`` 4.9.8 and 5.x, against our servers.

Every sub-command ``MQAdminStartup`` registers (``mqadmin`` without arguments lists them) is in
:data:`COVERAGE`, per version: the test that runs it, or why it cannot apply to a NameServer and
broker of ours. ``tests/compat/README.md`` holds the same table for people;
:func:`test_every_command_is_accounted_for` fails when either misses a command.

One cluster for the module (a NameServer and two broker groups, ``broker-a`` and ``broker-b``),
one JVM per mqadmin version running every command (``MQAdminShell.java``, see
``tests/compat/mqadmin.py``), plus one short JVM per version for ``clusterRT``, which never ends.
Each version uses its own topic and group names, so the two versions' tests never meet. The jars
come from Maven like the Java-client tests; without Maven, javac or java the tests fail and say why.

Tests check what the tool printed (topic and group names, offsets, message bodies, config
values), and where a command changes something, read it back with another command.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from bench.compare import java

from rocket.client.admin import loads_object_keys
from tests.compat import rawremoting
from tests.compat.cluster import CLUSTER_NAME, Cluster, start_cluster
from tests.compat.mqadmin import VERSIONS, MQAdminShell, Result

pytestmark = [pytest.mark.compat, pytest.mark.timeout(900)]  # the first run downloads the tools

BROKERS = ("broker-a", "broker-b")
TESTED = "tested"
CONTROLLER = "n/a: RocketMQ 5 controller mode (a controller process, SyncStateSets); issue 13/14"
ACL_2 = "n/a: ACL 2.0 users and policies (5.x); issue 13/14"
ACL_1 = "n/a: ACL 1.0 plain_acl.yml administration (4.x); issue 13/14"
ROCKSDB = "n/a: RocksDB-backed ConsumeQueue/metadata store (storeType=defaultRocksDB); our store is file based"
POP = "n/a: POP consumption (5.x proxy/gRPC clients) is not implemented; remoting clients pull"
STATIC = "n/a: static topics (logic queues, TopicQueueMapping, codes 513/514) are not implemented"
CONTAINER = "n/a: BrokerContainer (several brokers in one JVM, 5.x) has no counterpart; run one broker per process"
COLD = "n/a: cold-data flow control is a feature of the RocksDB/tiered store (codes 2001-2003)"

#: Command -> the test that runs it, or why it cannot apply. Keys: both versions' commands.
COVERAGE: dict[str, str] = {
    # topics
    "updateTopic": "test_topic_lifecycle",
    "updateTopicList": "test_topic_lifecycle (5.x)",
    "deleteTopic": "test_topic_lifecycle",
    "updateTopicPerm": "test_topic_lifecycle",
    "topicRoute": "test_topic_lifecycle",
    "topicStatus": "test_topic_lifecycle",
    "topicClusterList": "test_topic_lifecycle",
    "topicList": "test_topic_lifecycle, test_consumer_online (-c)",
    "updateStaticTopic": STATIC,
    "remappingStaticTopic": STATIC,
    # messages
    "queryMsgById": "test_messages, test_consumer_online (-g -d: CONSUME_MESSAGE_DIRECTLY)",
    "queryMsgByKey": "test_messages",
    "queryMsgByUniqueKey": "test_messages",
    "queryMsgByOffset": "test_messages",
    "queryMsgTraceById": "test_messages (a trace-enabled producer)",
    "printMsg": "test_messages",
    "printMsgByQueue": "test_messages",
    "sendMsgStatus": "test_messages",
    "sendMessage": "test_messages",
    "consumeMessage": "test_messages",
    "checkMsgSendRT": "test_messages",
    "queryCq": "test_messages",
    "clusterRT": "test_cluster_rt",
    "dumpCompactionLog": "n/a: reads a compaction-topic log file locally (cleanup.policy=COMPACTION topics "
                         "are not implemented); it sends nothing to a server",
    # consumers
    "consumerConnection": "test_consumer_online",
    "consumerProgress": "test_consumer_online",
    "consumerStatus": "test_consumer_online",
    "getConsumerConfig": "test_subscription_groups",
    "brokerConsumeStats": "test_consumer_online",
    "statsAll": "test_consumer_online",
    "cloneGroupOffset": "test_consumer_online",
    "resetOffsetByTime": "test_consumer_online (online: 222 then 220 to the client; offline)",
    "skipAccumulatedMessage": "test_consumer_online",
    "allocateMQ": "test_consumer_online",
    "startMonitoring": "test_start_monitoring",
    "setConsumeMode": POP,
    "exportPopRecord": POP,
    # producers
    "producerConnection": "test_producers",
    "producer": "test_producers",
    # subscription groups
    "updateSubGroup": "test_subscription_groups",
    "updateSubGroupList": "test_subscription_groups (5.x)",
    "deleteSubGroup": "test_subscription_groups",
    # brokers
    "clusterList": "test_cluster_and_brokers",
    "brokerStatus": "test_cluster_and_brokers",
    "getBrokerConfig": "test_cluster_and_brokers",
    "updateBrokerConfig": "test_cluster_and_brokers",
    "haStatus": "test_cluster_and_brokers (5.x)",
    "getBrokerEpoch": "test_cluster_and_brokers (5.x)",
    "wipeWritePerm": "test_write_perm",
    "addWritePerm": "test_write_perm",
    "cleanExpiredCQ": "test_store_housekeeping",
    "cleanUnusedTopic": "test_store_housekeeping",
    "deleteExpiredCommitLog": "test_store_housekeeping",
    "exportMetadata": "test_export",
    "exportConfigs": "test_export",
    "exportMetrics": "test_export",
    "resetMasterFlushOffset": "n/a: sets a slave's master flush offset for controller-mode truncation "
                              "(code 908); our slaves truncate by epochs; issue 13/14",
    "setCommitLogReadAheadMode": "n/a: madvise read-ahead of mmapped CommitLog files (code 2004); "
                                 "our store reads with pread, nothing is mmapped for reading",
    "switchTimerEngine": "n/a: switches 5.x's timer-message engine (code 5001); delayed messages here "
                         "use 4.x delay levels (SCHEDULE_TOPIC_XXXX)",
    "addBroker": CONTAINER,
    "removeBroker": CONTAINER,
    "exportMetadataInRocksDB": ROCKSDB,
    "rocksDBConfigToJson": ROCKSDB,
    "checkRocksdbCqWriteProgress": ROCKSDB,
    "getColdDataFlowCtrInfo": COLD,
    "updateColdDataFlowCtrGroupConfig": COLD,
    "removeColdDataFlowCtrGroupConfig": COLD,
    # NameServer
    "getNamesrvConfig": "test_namesrv_config",
    "updateNamesrvConfig": "test_namesrv_config",
    "updateKvConfig": "test_kv_and_order_conf",
    "deleteKvConfig": "test_kv_and_order_conf",
    "updateOrderConf": "test_kv_and_order_conf",
    # controller
    "getSyncStateSet": CONTROLLER,
    "getControllerMetaData": CONTROLLER,
    "getControllerConfig": CONTROLLER,
    "updateControllerConfig": CONTROLLER,
    "electMaster": CONTROLLER,
    "cleanBrokerMetadata": CONTROLLER,
    # ACL
    "createUser": ACL_2, "updateUser": ACL_2, "deleteUser": ACL_2, "getUser": ACL_2, "listUser": ACL_2,
    "copyUser": ACL_2, "createAcl": ACL_2, "updateAcl": ACL_2, "deleteAcl": ACL_2, "getAcl": ACL_2,
    "listAcl": ACL_2, "copyAcl": ACL_2,
    "updateAclConfig": ACL_1, "deleteAclConfig": ACL_1, "clusterAclConfigVersion": ACL_1,
    "updateGlobalWhiteAddr": ACL_1,
}


@dataclass
class Env:
    """The module's cluster, one shell per version, and per-version scratch folders."""

    cluster: Cluster
    shells: dict[str, MQAdminShell]
    root: Path
    lib: dict[str, Path] = field(default_factory=dict)

    def broker(self, name: str) -> str:
        return self.cluster.broker_addr(name)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """A NameServer, broker-a and broker-b, and an mqadmin shell per version (started in parallel)."""
    root = tmp_path_factory.mktemp("mqadmin")
    libs: dict[str, Path] = {}
    try:
        for version in VERSIONS:
            libs[version] = java.ensure_tools_jars(version)
    except java.JavaSetupError as exc:
        pytest.fail(f"Apache RocketMQ's mqadmin is not available: {exc}", pytrace=False)
    with start_cluster(root / "cluster", brokers=BROKERS) as cluster:
        with ThreadPoolExecutor(len(VERSIONS)) as pool:
            futures = {v: pool.submit(MQAdminShell, v, cluster.namesrv, root / f"home-{v}") for v in VERSIONS}
            shells = {v: f.result() for v, f in futures.items()}
        try:
            yield Env(cluster, shells, root, libs)
        finally:
            for shell in shells.values():
                shell.close()
                slow = [f"{' '.join(a[:3])} {t:.1f} s" for a, t in shell.history if t > 2.0]
                print(f"\nmqadmin {shell.version}: {len(shell.history)} requests, "
                      f"{sum(t for _, t in shell.history):.0f} s; slower than 2 s: {', '.join(slow) or 'none'}")
            cluster.check_alive()


#: Serialises the two versions' updateBrokerConfig + getBrokerConfig of one setting (``both``
#: runs them in parallel; interleaved, one read back the other's value).
BROKER_CONFIG_LOCK = threading.Lock()


def both(check: Callable[[str], None]) -> None:
    """Run ``check(version)`` for every mqadmin version at once (threads: the versions use their
    own shells and names); fail with every version's failure, labelled."""
    with ThreadPoolExecutor(len(VERSIONS)) as pool:
        futures = {v: pool.submit(check, v) for v in VERSIONS}
    errors = []
    for v, fut in futures.items():
        exc = fut.exception()
        if exc is not None:
            errors.append(f"--- mqadmin {v}: {type(exc).__name__}: {exc}")
    if errors:
        raise AssertionError("\n".join(errors))


def tag(version: str) -> str:
    """A short marker for names, so that each version uses its own topics and groups."""
    return "V" + version.replace(".", "")


def is5(version: str) -> bool:
    return version.startswith("5.")


def rows(result: Result, first: str) -> list[list[str]]:
    """Whitespace-split lines whose first cell is ``first``."""
    return [ln.split() for ln in result.lines if ln.split()[:1] == [first]]


def kv(result: Result, sep: str) -> dict[str, str]:
    """``key <sep> value`` lines as a dict (stripped)."""
    out = {}
    for ln in result.lines:
        key, found, value = ln.partition(sep)
        if found:
            out[key.strip()] = value.strip()
    return out


def wait_until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``check`` every 0.3 s; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.3)


@dataclass
class Sent:
    status: str
    msg_id: str
    offset_msg_id: str
    broker: str
    queue_id: int
    queue_offset: int
    body: str


def produce(sh: MQAdminShell, group: str, topic: str, count: int, prefix: str, tags: str = "TagA") -> list[Sent]:
    """Send ``count`` messages with the shell's Java producer; bodies and keys ``<prefix>-<i>``."""
    result = sh.client("@produce", group, topic, str(count), tags, prefix)
    sent = [Sent(p[1], p[2], p[3], p[4], int(p[5]), int(p[6]), f"{prefix}-{i}")
            for i, p in enumerate(rows(result, "SENT"))]
    assert len(sent) == count and all(s.status == "SEND_OK" for s in sent), result
    return sent


def create_topic(sh: MQAdminShell, topic: str, queues: int = 4) -> None:
    """updateTopic on the cluster: both brokers answer success."""
    result = sh.ok("updateTopic", "-c", CLUSTER_NAME, "-t", topic, "-r", str(queues), "-w", str(queues))
    assert result.output.count("success") == len(BROKERS), result


# -- the command list -----------------------------------------------------------------------------


def check_every_command_is_accounted_for(sh: MQAdminShell, version: str) -> None:
    """``mqadmin`` (no arguments) lists its sub-commands: each is in COVERAGE and in the README table."""
    listed = {ln.split()[0] for ln in sh.run("@help", namesrv=False).lines[1:] if not ln.startswith("See ")}
    assert len(listed) > 50, listed
    assert not listed - set(COVERAGE), f"mqadmin {version} commands missing from COVERAGE: {listed - set(COVERAGE)}"
    readme = (Path(__file__).parent / "README.md").read_text()
    in_table = set(re.findall(r"^\| `(\w+)` \|", readme, re.M))
    assert not listed - in_table, f"commands missing from tests/compat/README.md: {sorted(listed - in_table)}"
    assert in_table <= set(COVERAGE), f"README lists unknown commands: {sorted(in_table - set(COVERAGE))}"


# -- cluster and brokers -----------------------------------------------------------------------------


def check_cluster_and_brokers(env: Env, sh: MQAdminShell, version: str) -> None:
    """clusterList, brokerStatus, getBrokerConfig/updateBrokerConfig, haStatus and getBrokerEpoch (5.x)."""
    listing = sh.ok("clusterList")
    table = rows(listing, CLUSTER_NAME)
    assert {r[1] for r in table} == set(BROKERS), listing
    assert {r[3] for r in table} == {env.broker(b) for b in BROKERS}, listing
    assert "null" not in listing.output, f"a runtime figure is missing:\n{listing}"
    if is5(version):
        assert all(r[-1] == "true" for r in table), f"#ACTIVATED of a master:\n{listing}"

    addr = env.broker("broker-a")
    status = kv(sh.ok("brokerStatus", "-b", addr), ":")
    assert status["brokerName"] == "broker-a" and status["brokerAddr"] == addr, status
    assert status["sendThreadPoolQueueHeadWaitTimeMills"] == "0", status

    value = "31" if is5(version) else "29"
    with BROKER_CONFIG_LOCK:  # the versions run in parallel on one broker: set and read back as a pair
        sh.ok("updateBrokerConfig", "-b", addr, "-k", "defaultQueryMaxNum", "-v", value)
        config = kv(sh.ok("getBrokerConfig", "-b", addr), "=")
    assert config["defaultQueryMaxNum"] == value and config["brokerName"] == "broker-a", config
    refused = sh.run("updateBrokerConfig", "-b", addr, "-k", "noSuchSetting", "-v", "1")
    assert "noSuchSetting" in refused.output, refused

    if is5(version):
        ha = sh.ok("haStatus", "-b", addr)
        info = kv(ha, "\t")
        assert info["#MasterAddr"] == addr and info["#SlaveNum"] == "0", ha
        assert int(info["#MasterCommitLogMaxOffset"]) >= 0 and info["#InSyncSlaveNum"] == "0", ha
        epochs = sh.ok("getBrokerEpoch", "-b", "broker-a")
        info = kv(epochs, "\t")
        assert info.get("#brokerName") == "broker-a" and info.get("#brokerAddr") == addr, epochs
        assert re.search(r"#Epoch: EpochEntry\{epoch=\d+, startOffset=\d+, endOffset=\d+\}", epochs.output), epochs


def check_cluster_rt(env: Env, version: str) -> None:
    """clusterRT sends to every broker and prints each one's RT, then repeats forever: one JVM, stopped."""
    home = env.root / f"rt-home-{version}"
    shutil.copytree(env.root / f"home-{version}" / "conf", home / "conf", dirs_exist_ok=True)
    argv = [java.java(), "-Xmx128m", "-XX:TieredStopAtLevel=1", f"-Duser.home={home}", "-cp",
            java.classpath(env.lib[version]), java.MQADMIN_MAIN, "clusterRT", "-a", "3", "-s", "32", "-i", "1",
            "-n", env.cluster.namesrv]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=home,
                            env={"ROCKETMQ_HOME": str(home), "PATH": "/usr/bin:/bin", "HOME": str(home)})
    seen: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line.rstrip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until("clusterRT to print both brokers",
                   lambda: all(any(b in ln and CLUSTER_NAME in ln for ln in seen) for b in BROKERS), 120)
    finally:
        proc.kill()
        proc.wait()
    out = "\n".join(seen)
    for name in BROKERS:
        row = next(ln.split() for ln in seen if name in ln and CLUSTER_NAME in ln)
        # #Cluster Name  #Broker Name  #RT  #successCount  #failCount
        assert row[3] == "3" and row[4] == "0", out


def check_write_perm(env: Env, sh: MQAdminShell, version: str) -> None:
    """wipeWritePerm / addWritePerm on the NameServer: the topic route's perm for the group drops to 4 and back."""
    topic = f"{tag(version)}_Perm"
    broker = "broker-b" if is5(version) else "broker-a"  # each version its own: they run at once
    create_topic(sh, topic, 2)
    wiped = sh.ok("wipeWritePerm", "-b", broker)
    assert re.search(rf"wipe write perm of broker\[{broker}\] in name server\[.*\] OK, \d+", wiped.output), wiped

    def perms() -> dict[str, int]:
        route = env.cluster.route(topic)
        assert route is not None
        return {q["brokerName"]: q["perm"] for q in route["queueDatas"]}  # type: ignore[index,union-attr]

    try:
        assert perms()[broker] == 4
    finally:
        added = sh.ok("addWritePerm", "-b", broker)
    assert f"add write perm of broker[{broker}]" in added.output, added
    assert perms()[broker] == 6


# -- topics ------------------------------------------------------------------------------------------


def check_topic_lifecycle(env: Env, sh: MQAdminShell, version: str) -> None:
    """updateTopic, topicList, topicRoute, topicClusterList, topicStatus, updateTopicPerm,
    updateTopicList (5.x), deleteTopic."""
    topic = f"{tag(version)}_Topic"
    create_topic(sh, topic, 3)
    assert topic in sh.ok("topicList").lines
    route = loads_object_keys(sh.ok("topicRoute", "-t", topic).output)
    assert {q["brokerName"]: (q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in route["queueDatas"]} \
        == {b: (3, 3, 6) for b in BROKERS}, route
    assert sh.ok("topicClusterList", "-t", topic).lines == [CLUSTER_NAME]
    status = sh.ok("topicStatus", "-t", topic)
    queues = {(r[0], int(r[1])): (int(r[2]), int(r[3])) for r in status.lines[1:] if r.split()[0] in BROKERS
              for r in [r.split()]}
    assert queues == {(b, q): (0, 0) for b in BROKERS for q in range(3)}, status

    perm = sh.ok("updateTopicPerm", "-c", CLUSTER_NAME, "-t", topic, "-p", "4")
    assert perm.output.count("update topic perm from 6 to 4") == len(BROKERS), perm
    route = loads_object_keys(sh.ok("topicRoute", "-t", topic).output)
    assert {q["perm"] for q in route["queueDatas"]} == {4}, route

    if is5(version):
        spec = env.root / f"topics-{version}.json"
        names = [f"{tag(version)}_List{i}" for i in range(2)]
        spec.write_text(json.dumps([{"topicName": n, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
                                     "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
                                    for n in names]))
        listed = sh.ok("updateTopicList", "-c", CLUSTER_NAME, "-f", str(spec))
        assert listed.output.count("success") == len(BROKERS), listed
        topics = set(sh.ok("topicList").lines)
        assert set(names) <= topics, listed

    deleted = sh.ok("deleteTopic", "-c", CLUSTER_NAME, "-t", topic)
    assert f"delete topic [{topic}] from cluster [{CLUSTER_NAME}] success." in deleted.output, deleted
    assert f"delete topic [{topic}] from NameServer success." in deleted.output, deleted
    assert topic not in sh.ok("topicList").lines
    assert env.cluster.route(topic) is None


# -- messages ------------------------------------------------------------------------------------


def check_messages(env: Env, sh: MQAdminShell, version: str) -> None:
    """Look messages up every way mqadmin can, print them, send and consume with the tool itself."""
    t = tag(version)
    topic = f"{t}_Msg"
    create_topic(sh, topic, 2)
    sent = produce(sh, f"{t}_PG_Msg", topic, 6, f"{t}-body")
    first = sent[1]
    by_body = {s.body: s for s in sent}

    keyed = sh.ok("queryMsgByKey", "-t", topic, "-k", first.body)
    assert [r.split()[0] for r in keyed.lines[1:]] == [first.msg_id], keyed

    by_id = sh.ok("queryMsgById", "-i", first.offset_msg_id, *(["-t", topic] if is5(version) else []))
    fields = kv(by_id, ":")
    assert fields["Topic"] == topic and fields["Keys"] == f"[{first.body}]", by_id
    assert int(fields["Queue ID"]) == first.queue_id and int(fields["Queue Offset"]) == first.queue_offset
    assert Path(fields["Message Body Path"]).read_text() == first.body

    unique = sh.ok("queryMsgByUniqueKey", "-t", topic, "-i", first.msg_id)
    assert kv(unique, ":")["Keys"] == f"[{first.body}]", unique

    at = sh.ok("queryMsgByOffset", "-t", topic, "-b", first.broker, "-i", str(first.queue_id),
               "-o", str(first.queue_offset))
    assert kv(at, ":")["OffsetID"] == first.offset_msg_id, at

    printed = sh.ok("printMsg", "-t", topic, "-d", "true")
    bodies = set(re.findall(r"BODY: (\S+)", printed.output))
    assert bodies == set(by_body), printed
    queue = sh.ok("printMsgByQueue", "-t", topic, "-a", first.broker, "-i", str(first.queue_id), "-p", "true",
                  "-d", "true")
    expected = {s.body for s in sent if (s.broker, s.queue_id) == (first.broker, first.queue_id)}
    assert set(re.findall(r"BODY: (\S+)", queue.output)) == expected, queue

    cq = sh.ok("queryCq", "-t", topic, "-q", str(first.queue_id), "-i", "0", "-c", "10", "-b",
               env.broker(first.broker))
    assert re.search(r"max: (\d+), min: 0", cq.output), cq
    physics = [int(m) for m in re.findall(r"physicOffset=(\d+)", cq.output)]
    assert int(first.offset_msg_id[-16:], 16) in physics, cq

    single = sh.ok("sendMessage", "-t", topic, "-p", f"{t}-direct", "-k", f"{t}-direct-key")
    row = rows(single, "broker-a") + rows(single, "broker-b")
    assert row and row[0][2] == "SEND_OK", single
    found = sh.ok("queryMsgByKey", "-t", topic, "-k", f"{t}-direct-key")
    assert [r.split()[0] for r in found.lines[1:]] == [row[0][3]], found

    consumed = sh.ok("consumeMessage", "-t", topic, "-b", first.broker, "-i", str(first.queue_id),
                     "-o", str(first.queue_offset), "-c", "1")
    assert "Consume ok" in consumed.output and first.msg_id in consumed.output, consumed

    status = sh.ok("sendMsgStatus", "-b", "broker-a", "-c", "2", "-s", "32")
    assert status.output.count("sendStatus=SEND_OK") == 2, status
    rt = sh.ok("checkMsgSendRT", "-t", topic, "-a", "4", "-s", "32")
    cells = [r.split() for r in rt.lines[1:-1]]
    assert len(cells) == 4 and {c[0] for c in cells} <= set(BROKERS) and all(c[2] == "true" for c in cells), rt

    traced = f"{t}_Traced"
    create_topic(sh, traced, 1)
    trace_sent = sh.client("@produce-traced", f"{t}_PG_Trace", traced, "1", "TagT", f"{t}-traced")
    msg_id = rows(trace_sent, "SENT")[0][2]

    def trace_found() -> bool:
        out = sh.run("queryMsgTraceById", "-i", msg_id)
        return bool(re.search(rf"^Pub\s+{t}_PG_Trace\s+\S+\s+.*\ssuccess\s*$", out.output, re.M))

    wait_until("the trace of a traced send", trace_found)


# -- consumers ------------------------------------------------------------------------------------


def committed(env: Env, group: str, topic: str, queues: int = 2) -> dict[tuple[str, int], int]:
    """The group's committed offsets per (broker, queue), by QUERY_CONSUMER_OFFSET (-1: none)."""
    out = {}
    for name in BROKERS:
        for q in range(queues):
            reply = rawremoting.request(env.broker(name), 14, {"consumerGroup": group, "topic": topic, "queueId": q})
            out[(name, q)] = int(reply.ext["offset"]) if reply.code == 0 else -1
    return out


def received(sh: MQAdminShell, group: str) -> list[list[str]]:
    return rows(sh.client("@received", group), "MSG")


def check_consumer_online(env: Env, sh: MQAdminShell, version: str) -> None:
    """A Java push consumer online: connection, progress, status, broker stats, direct consumption,
    resetting its offsets (the broker tells the client), skipping, cloning offsets, allocation."""
    t = tag(version)
    topic, group = f"{t}_Cons", f"{t}_CG"
    create_topic(sh, topic, 2)
    sent = produce(sh, f"{t}_PG_Cons", topic, 8, f"{t}-c")
    client_id = rows(sh.client("@consume", group, topic), "CLIENT")[0][1]
    gone = f"{t}_CG_Gone"
    sh.client("@consume", gone, topic)
    wait_until("both consumers to receive all 8",
               lambda: len(received(sh, group)) >= 8 and len(received(sh, gone)) >= 8, 90)
    gone_progress = {(b, q): n for b in BROKERS for q in range(2)
                     for n in [sum(1 for s in sent if (s.broker, s.queue_id) == (b, q))]}
    wait_until(f"{gone}'s offsets to be committed", lambda: committed(env, gone, topic) == gone_progress)
    sh.client("@stop", gone)
    assert sorted(m[5] for m in received(sh, group)) == sorted(s.body for s in sent)

    conn = sh.ok("consumerConnection", "-g", group)
    assert [r.split()[0] for r in conn.lines[1:2]] == [client_id], conn
    assert re.search(rf"^{re.escape(topic)}\s+\*$", conn.output, re.M), conn

    def progress() -> dict[tuple[str, int], tuple[int, int]]:
        out = sh.ok("consumerProgress", "-g", group)
        return {(r[1], int(r[2])): (int(r[3]), int(r[4])) for r in rows(out, topic)}

    expected = {(b, q): (n, n) for b in BROKERS for q in range(2)
                for n in [sum(1 for s in sent if (s.broker, s.queue_id) == (b, q))]}
    # Wait with QUERY_CONSUMER_OFFSET (cheap), then check what consumerProgress prints.
    wait_until("committed offsets to reach the broker offsets",
               lambda: committed(env, group, topic) == {k: v[1] for k, v in expected.items()})
    assert progress() == expected

    status = sh.ok("consumerStatus", "-g", group)
    assert client_id in status.output and "Rebalance OK" in status.output, status
    detail = sh.ok("consumerStatus", "-g", group, "-i", client_id)
    assert "#Consumer Subscription#" in detail.output and topic in detail.output, detail
    assert re.search(r"PROP_CONSUMER_START_TIMESTAMP\s*:", detail.output), detail

    stats = sh.ok("brokerConsumeStats", "-b", env.broker("broker-a"))
    assert {(r[2], int(r[3])) for r in rows(stats, topic) if r[1] == group} <= {("broker-a", q) for q in range(2)}
    assert "Diff Total:" in stats.output, stats

    all_stats = sh.ok("statsAll", "-t", topic)
    # topic, group, backlog, in TPS, out TPS, in 24 h, out 24 h (VIEW_BROKER_STATS_DATA, summed over brokers)
    row = next((r for r in rows(all_stats, topic) if r[1] == group), None)
    # (the TPS columns cover the last minute only, which on a slow run may hold no message)
    assert row is not None and row[2] == "0" and float(row[3]) >= 0 and float(row[4]) >= 0, all_stats
    assert int(row[5]) == len(sent) and int(row[6]) >= len(sent), all_stats
    with_groups = sh.ok("topicList", "-c")
    assert [CLUSTER_NAME, topic, group] in [r[:3] for r in rows(with_groups, CLUSTER_NAME)], with_groups

    direct = sh.ok("queryMsgById", "-i", sent[0].offset_msg_id, "-g", group, "-d", client_id,
                   *(["-t", topic] if is5(version) else []))
    assert "consumeResult=CR_SUCCESS" in direct.output, direct
    tracked = sh.ok("queryMsgByOffset", "-t", topic, "-b", sent[0].broker, "-i", str(sent[0].queue_id),
                    "-o", str(sent[0].queue_offset))
    assert f"MessageTrack [consumerGroup={group}, trackType=CONSUMED" in tracked.output, tracked

    before = len(received(sh, group))
    reset = sh.ok("resetOffsetByTime", "-g", group, "-t", topic, "-s", "0")
    table = {(r[0], int(r[1])): int(r[2]) for r in reset.lines if r.split()[:1] and r.split()[0] in BROKERS
             for r in [r.split()]}
    assert table == {(b, q): 0 for b in BROKERS for q in range(2)}, reset
    wait_until("the consumer to receive everything again after the reset",
               lambda: len(received(sh, group)) >= before + 8, 60)
    wait_until("committed offsets back at the end",
               lambda: committed(env, group, topic) == {k: v[1] for k, v in expected.items()})

    more = produce(sh, f"{t}_PG_Cons", topic, 4, f"{t}-c2")
    wait_until("the consumer to receive 4 more", lambda: len(received(sh, group)) >= before + 12)
    skipped = sh.ok("skipAccumulatedMessage", "-g", group, "-t", topic)
    ends = {(b, q): n + sum(1 for s in more if (s.broker, s.queue_id) == (b, q)) for (b, q), (n, _) in expected.items()}
    table = {(r[0], int(r[1])): int(r[2]) for r in skipped.lines if r.split()[:1] and r.split()[0] in BROKERS
             for r in [r.split()]}
    assert table == ends, skipped

    clone = f"{t}_CG_Clone"
    cloned = sh.ok("cloneGroupOffset", "-s", group, "-d", clone, "-t", topic)
    assert f"clone group offset success. srcGroup[{group}], destGroup=[{clone}]" in cloned.output, cloned
    copied = {(b, q): int(rawremoting.request(env.broker(b), 14, {"consumerGroup": clone, "topic": topic,
                                                                  "queueId": q}).ext["offset"])
              for (b, q) in ends}
    assert copied == ends

    allocated = json.loads(sh.ok("allocateMQ", "-t", topic, "-i", "10.0.0.1@a,10.0.0.2@b").output)["result"]
    assert sorted(len(v) for v in allocated.values()) == [2, 2], allocated
    assert {(q["brokerName"], q["queueId"]) for v in allocated.values() for q in v} == set(expected)

    # Offline: a group whose only member has left. The broker answers CONSUMER_NOT_ONLINE (206) and
    # mqadmin resets queue by queue with UPDATE_CONSUMER_OFFSET; consumerProgress shows the new offsets.
    offline = sh.ok("resetOffsetByTime", "-g", gone, "-t", topic, "-s", "0")
    assert re.search(r"#resetOffset|#rollbackOffset", offline.output), offline
    out = sh.ok("consumerProgress", "-g", gone)
    assert {(r[1], int(r[2])): int(r[4]) for r in rows(out, topic)} == {(b, q): 0 for b in BROKERS for q in range(2)}


# -- producers ------------------------------------------------------------------------------------


def check_producers(env: Env, sh: MQAdminShell, version: str) -> None:
    """producerConnection and producer (GET_PRODUCER_CONNECTION_LIST, GET_ALL_PRODUCER_INFO)."""
    t = tag(version)
    topic, group = f"{t}_Prod", f"{t}_PG"
    create_topic(sh, topic, 1)
    produce(sh, group, topic, 1, f"{t}-p")
    # The shell sends a heartbeat right after the send; should the client skip it (a heartbeat of its
    # own in progress), the next comes within 30 s. Every broker the producer knows gets them.
    line = re.compile(rf"producer group \({group}\) instance : clientId=\S+@{group},remoteIP=127\.0\.0\.1:\d+, "
                      rf"language=JAVA, version=\d+, lastUpdateTimestamp=\d+")
    for name in BROKERS:
        wait_until(f"{group} in {name}'s producer table (GET_ALL_PRODUCER_INFO)",
                   lambda addr=env.broker(name): bool(line.search(sh.ok("producer", "-b", addr).output)), 45)
    conn = sh.ok("producerConnection", "-g", group, "-t", topic)
    row = conn.lines[0].split()
    assert row[0] == "0001" and row[1].endswith(f"@{group}") and row[2].startswith("127.0.0.1:"), conn
    assert row[3:5] == ["JAVA", "V" + version.replace(".", "_")], conn
    missing = sh.run("producerConnection", "-g", f"{t}_NoSuchGroup", "-t", topic)
    assert "not exist" in missing.output, missing


# -- subscription groups -------------------------------------------------------------------------


def check_subscription_groups(env: Env, sh: MQAdminShell, version: str) -> None:
    """The system groups every broker has, updateSubGroup, getConsumerConfig, updateSubGroupList (5.x),
    deleteSubGroup."""
    system = sh.ok("getConsumerConfig", "-g", "CID_ONSAPI_OWNER")
    assert system.output.count("groupName                               =  CID_ONSAPI_OWNER") == len(BROKERS), system
    group = f"{tag(version)}_SubGroup"
    made = sh.ok("updateSubGroup", "-c", CLUSTER_NAME, "-g", group, "-r", "5", "-q", "2")
    assert made.output.count("create subscription group to") == len(BROKERS), made
    config = sh.ok("getConsumerConfig", "-g", group)
    values = kv(config, "=")
    assert values["groupName"] == group and values["retryMaxTimes"] == "5" and values["retryQueueNums"] == "2"
    if is5(version):
        spec = env.root / f"groups-{version}.json"
        names = [f"{tag(version)}_GroupList{i}" for i in range(2)]
        spec.write_text(json.dumps([{"groupName": n, "retryMaxTimes": 7} for n in names]))
        sh.ok("updateSubGroupList", "-c", CLUSTER_NAME, "-f", str(spec))
        for name in names:
            assert kv(sh.ok("getConsumerConfig", "-g", name), "=")["retryMaxTimes"] == "7"
    gone = sh.ok("deleteSubGroup", "-c", CLUSTER_NAME, "-g", group)
    assert gone.output.count(f"delete subscription group [{group}] from broker") == len(BROKERS), gone
    assert group not in sh.run("getConsumerConfig", "-g", group).output.replace(f"-g {group}", "")


# -- NameServer ------------------------------------------------------------------------------------


def check_namesrv_config(env: Env, sh: MQAdminShell, version: str) -> None:
    """getNamesrvConfig / updateNamesrvConfig: a change shows in the next get and takes effect."""
    ns = env.cluster.namesrvs[0].addr
    before = kv(sh.ok("getNamesrvConfig"), "=")
    assert before["listenPort"] == str(env.cluster.namesrvs[0].port), before
    # Each version changes its own setting: the two run at the same time against one NameServer.
    key, new = ("brokerChannelExpiredTime", "121000") if is5(version) else ("scanNotActiveBrokerInterval", "9000")
    updated = sh.ok("updateNamesrvConfig", "-k", key, "-v", new)
    assert f"update name server config success![{ns}]" in updated.output, updated
    assert kv(sh.ok("getNamesrvConfig"), "=")[key] == new
    refused = sh.run("updateNamesrvConfig", "-k", "listenPort", "-v", "1")
    assert "read at start only" in refused.output, refused
    sh.ok("updateNamesrvConfig", "-k", key, "-v", before[key])


def check_kv_and_order_conf(env: Env, sh: MQAdminShell, version: str) -> None:
    """updateKvConfig / deleteKvConfig (read back with GET_KV_CONFIG) and updateOrderConf put/get/delete."""
    ns = env.cluster.namesrvs[0].addr
    space, key = f"{tag(version)}_NS", "answer"
    assert "success" in sh.ok("updateKvConfig", "-s", space, "-k", key, "-v", "42").output
    reply = rawremoting.request(ns, 101, {"namespace": space, "key": key})
    assert reply.code == 0 and reply.ext.get("value") == "42", reply
    assert "success" in sh.ok("deleteKvConfig", "-s", space, "-k", key).output
    assert rawremoting.request(ns, 101, {"namespace": space, "key": key}).code == 22

    topic = f"{tag(version)}_Order"
    put = sh.ok("updateOrderConf", "-t", topic, "-v", "broker-a:4;broker-b:4", "-m", "put")
    assert "update orderConf success" in put.output, put
    got = sh.ok("updateOrderConf", "-t", topic, "-m", "get")
    assert "broker-a:4;broker-b:4" in got.output, got
    sh.ok("updateOrderConf", "-t", topic, "-m", "delete")
    assert rawremoting.request(ns, 101, {"namespace": "ORDER_TOPIC_CONFIG", "key": topic}).code == 22


# -- store housekeeping, export, monitoring ---------------------------------------------------


def check_store_housekeeping(env: Env, sh: MQAdminShell, version: str) -> None:
    """cleanExpiredCQ, cleanUnusedTopic, deleteExpiredCommitLog: each answers success on every broker,
    and a topic's messages are all still there afterwards (nothing has expired)."""
    t = tag(version)
    topic = f"{t}_Keep"
    create_topic(sh, topic, 1)
    produce(sh, f"{t}_PG_Keep", topic, 3, f"{t}-k")
    for command in ("cleanExpiredCQ", "cleanUnusedTopic"):
        out = sh.ok(command, "-c", CLUSTER_NAME)
        assert "success" in out.output.lower(), out
    for name in BROKERS:
        out = sh.ok("deleteExpiredCommitLog", "-b", env.broker(name))
        assert "success" in out.output.lower(), out
    printed = sh.ok("printMsg", "-t", topic, "-d", "true")
    assert sorted(re.findall(r"BODY: (\S+)", printed.output)) == [f"{t}-k-{i}" for i in range(3)], printed


def check_export(env: Env, sh: MQAdminShell, version: str) -> None:
    """exportMetadata, exportConfigs, exportMetrics write JSON files holding our topics and groups."""
    t = tag(version)
    topic = f"{t}_Export"
    create_topic(sh, topic, 2)
    group = f"{t}_ExportGroup"
    sh.ok("updateSubGroup", "-c", CLUSTER_NAME, "-g", group, "-r", "3")
    folder = env.root / f"export-{version}"
    meta = sh.ok("exportMetadata", "-c", CLUSTER_NAME, "-f", str(folder))
    assert "success" in meta.output, meta
    files = {p.name: p for p in folder.rglob("*.json")}
    data = json.loads(next(p for n, p in files.items() if "metadata" in n.lower()).read_text())
    # For a cluster, exportMetadata adds up the queues of every broker: 2 brokers x 2 queues.
    assert topic in data["topicConfigTable"] and data["topicConfigTable"][topic]["readQueueNums"] == 4
    assert "TBW102" not in data["topicConfigTable"], "system topics are left out of the export"
    assert data["subscriptionGroupTable"][group]["retryMaxTimes"] == 3, data["subscriptionGroupTable"]
    configs = sh.ok("exportConfigs", "-c", CLUSTER_NAME, "-f", str(folder))
    assert "success" in configs.output, configs
    cfg = json.loads((folder / "configs.json").read_text())
    assert set(cfg["brokerConfigs"]) == set(BROKERS) and cfg["clusterScale"]["masterBrokerSize"] == 2, cfg
    metrics = sh.ok("exportMetrics", "-c", CLUSTER_NAME, "-f", str(folder))
    assert "success" in metrics.output, metrics
    report = json.loads((folder / "metrics.json").read_text())["evaluateReport"]
    assert set(report) == set(BROKERS), report
    for name in BROKERS:
        ratio = report[name]["runtimeQuota"]["diskRatio"]["commitLogDiskRatio"]
        assert 0.0 <= float(ratio) <= 1.0, report[name]


def check_start_monitoring(env: Env, sh: MQAdminShell, version: str) -> None:
    """startMonitoring starts Apache's MonitorService in the tool's JVM: its push consumer
    (__MONITOR_CONSUMER on OFFSET_MOVED_EVENT) shows up as a connected consumer group."""
    sh.ok("startMonitoring")

    def online() -> bool:
        out = sh.run("consumerConnection", "-g", "__MONITOR_CONSUMER")
        return "OFFSET_MOVED_EVENT" in out.output

    wait_until("the MonitorService's consumer to connect", online)


# -- the tests: each runs its check for both versions at once --------------------------------


def for_every_version(check: Callable[[Env, MQAdminShell, str], None]) -> Callable[[Env], None]:
    """A test (of the module's ``env``) that runs ``check(env, shell, version)`` for every version
    at once (:func:`both`)."""
    def test(env: Env) -> None:
        both(lambda v: check(env, env.shells[v], v))

    test.__name__ = test.__qualname__ = "test_" + check.__name__.removeprefix("check_")
    test.__doc__ = f":func:`{check.__name__}` for every version, in parallel."
    return test


def test_every_command_is_accounted_for(env: Env) -> None:
    """:func:`check_every_command_is_accounted_for` for every version, in parallel."""
    both(lambda v: check_every_command_is_accounted_for(env.shells[v], v))


test_cluster_and_brokers = for_every_version(check_cluster_and_brokers)


def test_cluster_rt(env: Env) -> None:
    """:func:`check_cluster_rt` for every version, in parallel."""
    both(lambda v: check_cluster_rt(env, v))


def test_write_perm(env: Env) -> None:
    """:func:`check_write_perm` for every version, one after the other: a broker's registration
    (after the other version's updateTopic) would restore the perm the NameServer wiped, as in Java."""
    for v in VERSIONS:
        check_write_perm(env, env.shells[v], v)


test_topic_lifecycle = for_every_version(check_topic_lifecycle)
test_messages = for_every_version(check_messages)
test_consumer_online = for_every_version(check_consumer_online)
test_producers = for_every_version(check_producers)
test_subscription_groups = for_every_version(check_subscription_groups)
test_namesrv_config = for_every_version(check_namesrv_config)
test_kv_and_order_conf = for_every_version(check_kv_and_order_conf)
test_store_housekeeping = for_every_version(check_store_housekeeping)
test_export = for_every_version(check_export)
test_start_monitoring = for_every_version(check_start_monitoring)


__all__ = ["COVERAGE"]
