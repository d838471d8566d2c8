"""Scale-out and scale-in with REAL NameServers and brokers: metadata copied to the new group;
zero messages lost and zero failed sends while a group drains.

Two NameServers and three broker masters run as local processes (``python -m
rocket.cli``) under the names the operator gives a RocketCluster ``drain``
(``drain-broker-<i>``, cluster ``drain``). The test resolver maps the pods
``drain-broker-master-<i>`` to those processes, so the operator's remoting calls
(registration 106, topic creation 17, write-permission wipe 205 + 25, consumer
offsets 43/30, unregistration 104) reach them; the pods themselves stay fake
(fake kubelet). When the StatefulSet deletes a pod, the test stops the matching
broker process, as the kubelet would stop the container.

The cluster starts with 2 groups; a topic and a subscription group are made on
drain-broker-0 outside the spec. ``groups`` goes 2 -> 3: the operator waits for
drain-broker-2 to register in both NameServers and copies every topic and
subscription group from drain-broker-0 to it (21/201 -> 17/200).

Then, while a producer sends without pause, ``groups`` goes 3 -> 2: the operator
makes ``drain-broker-2`` read-only on both NameServers and on the broker, and
reports the backlog nobody has consumed yet; the StatefulSet is shown not to
shrink while it is there. Then a push consumer starts, consumes everything,
commits its offsets, and only then does the operator shrink the StatefulSet and
unregister the group. Every message sent is received, and no send fails.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.harness import wait_for
from tests.k8s.test_operator import condition, create, patch, pods, rkc, status, sts_replicas
from tests.support import rocket_command

CLUSTER = "drain"
TOPIC = "DrainTopic"
GROUP = "drain-consumers"


def _free_block() -> int:
    """A port P with P-2 (VIP), P+1 (HA) and P+2 (HTTP) free too."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port < 1100 or port > 65000:
            continue
        ok = True
        for p in (port - 2, port + 1, port + 2):
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
        if ok:
            return port
    raise RuntimeError("no free port block")


class Process:
    """One ``rocket`` process with its log file; :meth:`stop` sends SIGTERM (SIGKILL after 10 s)."""

    def __init__(self, argv: list[str], port: int, log: Path, timeout: float = 90.0) -> None:
        self.log = log
        self._out = open(log, "wb")
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._out.close()
                raise RuntimeError(f"{argv[3]} exited with {self.proc.returncode}:\n{self.tail()}")
            with socket.socket() as sock:
                sock.settimeout(0.2)
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"{argv[3]} not listening on {port} after {timeout} s:\n{self.tail()}")

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


def _start(argv_for_port: Callable[[int], list[str]], log: Path) -> tuple[Process, int]:
    """Start a process on a fresh port block; a port taken meanwhile means one more try."""
    for attempt in range(3):
        port = _free_block()
        try:
            return Process(argv_for_port(port), port, log), port
        except RuntimeError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


@pytest.fixture
def rocket_processes() -> Iterator[dict[str, Any]]:
    """2 NameServers + 3 masters of cluster ``drain``; yields their addresses and a ``stop(i)``."""
    folder = Path(tempfile.mkdtemp(prefix="rocket-drain-"))
    started: list[Process] = []
    brokers: dict[int, Process] = {}
    try:
        nameservers = []
        for i in range(2):
            proc, port = _start(lambda p: rocket_command("nameserver", "--port", str(p), "--http-port", str(p + 2)),
                                folder / f"ns-{i}.log")
            started.append(proc)
            nameservers.append(f"127.0.0.1:{port}")
        addrs: dict[int, str] = {}
        for i in range(3):
            def argv(p: int, i: int = i) -> list[str]:
                return rocket_command(
                    "broker", "--name", f"{CLUSTER}-broker-{i}", "--cluster", CLUSTER, "--broker-id", "0",
                    "--port", str(p), "--http-port", str(p + 2), "--namesrv", ";".join(nameservers),
                    "--store-dir", str(folder / f"store-{i}"), "--set", "registerNameServerPeriod=3000")

            proc, port = _start(argv, folder / f"broker-{i}.log")
            brokers[i] = proc
            addrs[i] = f"127.0.0.1:{port}"

        def stop(i: int) -> None:
            proc = brokers.pop(i, None)
            if proc is not None:
                proc.stop()

        yield {"nameservers": nameservers, "brokers": addrs, "stop": stop, "folder": folder}
    finally:
        for proc in [*brokers.values(), *started]:
            proc.stop()
        shutil.rmtree(folder, ignore_errors=True)


class Traffic:
    """A producer sending without pause and a push consumer, in their own thread and event loop."""

    def __init__(self, namesrv: str, topic: str = TOPIC, group: str = GROUP) -> None:
        self.namesrv = namesrv
        self.topic = topic
        self.group = group
        self.sent: dict[str, str] = {}  # body -> broker group it went to
        self.failed: list[str] = []
        self.received: set[str] = set()
        self.duplicates = 0
        self.per_broker: dict[str, int] = {}
        self._stop_sending = threading.Event()
        self._stop = threading.Event()
        self._consume = threading.Event()
        self.consuming = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="traffic", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(30), "traffic did not start"

    def start_consumer(self) -> None:
        """Start the push consumer (from the first offset) now."""
        self._consume.set()
        assert self.consuming.wait(30), "the consumer did not start"

    def stop_sending(self) -> None:
        self._stop_sending.set()

    def stop(self) -> None:
        self._stop_sending.set()
        self._stop.set()
        self._thread.join(30)

    async def _main(self) -> None:
        from rocket.client import ConsumeFrom, Producer, PushConsumer, build_message

        def on_messages(msgs: list[Any]) -> None:
            for msg in msgs:
                body = msg.body.decode()
                if body in self.received:
                    self.duplicates += 1
                self.received.add(body)

        consumer = PushConsumer(self.group, self.namesrv, on_messages, consume_from=ConsumeFrom.FIRST_OFFSET,
                                rebalance_interval=1.0, persist_interval=0.5, poll_namesrv_interval=1.0,
                                heartbeat_interval=2.0, suspend_timeout=2.0)
        consumer.subscribe(self.topic)
        producer = Producer("drain-producers", self.namesrv, retries=2, poll_namesrv_interval=1.0,
                            heartbeat_interval=2.0, send_timeout=3.0)
        async def consume_when_asked() -> None:
            await asyncio.to_thread(self._consume.wait)
            await consumer.start()
            self.consuming.set()

        starter = asyncio.create_task(consume_when_asked())
        try:
            await producer.start()
            self._ready.set()
            n = 0
            while not self._stop_sending.is_set():
                body = f"m-{n}"
                n += 1
                try:
                    result = await producer.send(build_message(self.topic, body))
                except Exception as exc:  # a failed send is what this test must never see
                    self.failed.append(f"{body}: {exc!r}")
                else:
                    if result.ok:
                        group = result.queue.broker_name
                        self.sent[body] = group
                        self.per_broker[group] = self.per_broker.get(group, 0) + 1
                    else:
                        self.failed.append(f"{body}: {result.status}")
                await asyncio.sleep(0.005)
            await asyncio.to_thread(self._stop.wait)
        except BaseException as exc:
            self.error = exc
            self._ready.set()
        finally:
            self._consume.set()
            await starter
            await producer.shutdown()
            await consumer.shutdown()


def test_scale_out_then_scale_in_with_real_brokers(api: Any, namespace: str, operator: Any,
                                                   rocket_processes: dict[str, Any]) -> None:
    procs = rocket_processes
    operator.resolver.nameserver_addrs[CLUSTER] = procs["nameservers"]
    for i, addr in procs["brokers"].items():
        operator.resolver.broker_addrs[f"{CLUSTER}-broker-master-{i}"] = addr
    try:
        _scenario(api, namespace, operator, procs)
    finally:
        operator.resolver.nameserver_addrs.pop(CLUSTER, None)
        for i in procs["brokers"]:
            operator.resolver.broker_addrs.pop(f"{CLUSTER}-broker-master-{i}", None)


def _scenario(api: Any, namespace: str, operator: Any, procs: dict[str, Any]) -> None:
    brokers = procs["brokers"]
    # two groups first; drain-broker-2 runs but is not part of the cluster yet (an empty new broker)
    # the processes are brokers with fixed roles: failover Manual
    create(api, namespace, rkc(CLUSTER, broker={"groups": 2, "replicasPerGroup": 0, "failover": "Manual"},
                               topics=[{"name": TOPIC, "queues": 4}], drain={"timeoutSeconds": 120}))
    st = wait_for(lambda: (s := status(api, namespace, CLUSTER)).get("phase") == "Running" and s, 60,
                  what="Running with 2 registered groups and the spec topic created on each")
    assert st["nameServers"]["addresses"] == procs["nameservers"]
    assert all(g["registered"] and g["topicsDigest"] for g in st["brokerGroups"])
    assert TOPIC in _topics(brokers[0]) and TOPIC in _topics(brokers[1]) and TOPIC not in _topics(brokers[2])
    # metadata made outside the spec, on one master: a topic and a subscription group
    _run(_admin_call(brokers[0], "create_topics", [("ExtraTopic", 2, 6)]))
    _run(_create_group(brokers[0], "extra-group"))

    # scale-out: the new group registers, then gets every topic and subscription group copied
    patch(api, namespace, CLUSTER, {"spec": {"broker": {"groups": 3}}})
    st = wait_for(lambda: (s := status(api, namespace, CLUSTER)).get("phase") == "Running"
                  and len(s["brokerGroups"]) == 3 and s, 60, what="Running with 3 groups")
    new = st["brokerGroups"][2]
    assert new["registered"] and new["metadataSynced"]
    assert new["metadataSource"] == f"{CLUSTER}-broker-0"  # the lowest synced group is the source
    topics = _topics(brokers[2])
    assert TOPIC in topics and topics[TOPIC].read_queue_nums == 4
    assert "ExtraTopic" in topics and topics["ExtraTopic"].write_queue_nums == 2
    assert "extra-group" in _groups(brokers[2])
    assert f"{CLUSTER}-broker-0" not in topics  # broker-specific topics are not copied

    traffic = Traffic(";".join(procs["nameservers"]))
    traffic.start()
    try:
        wait_for(lambda: len(traffic.per_broker) == 3 and min(traffic.per_broker.values()) >= 20, 30,
                 what="messages on every broker group")
        assert traffic.failed == [], traffic.failed[:5]
        assert traffic.error is None
        # the StatefulSet deleting a pod stops its broker, as a kubelet would
        stopper = threading.Thread(target=_stop_brokers_of_deleted_pods, args=(api, namespace, procs),
                                   daemon=True)
        stopper.start()
        patch(api, namespace, CLUSTER, {"spec": {"broker": {"groups": 2}}})
        st = wait_for(lambda: (s := status(api, namespace, CLUSTER)).get("drain")
                      and s["drain"][0]["state"] == "WaitingForConsumers" and s, 20, what="drain waiting")
        assert condition(st, "Draining")["status"] == "True"
        sent_to_2_at_drain = traffic.per_broker.get(f"{CLUSTER}-broker-2", 0)
        # nobody has consumed yet: the operator sees the backlog and keeps the group
        st = wait_for(lambda: (s := status(api, namespace, CLUSTER))["drain"][0].get("pendingMessages")
                      and s, 10, what="backlog reported")
        assert st["drain"][0]["pendingMessages"] >= sent_to_2_at_drain > 0
        time.sleep(2.0)
        assert sts_replicas(api, namespace, f"{CLUSTER}-broker-master") == 3
        assert status(api, namespace, CLUSTER)["drain"][0]["state"] == "WaitingForConsumers"
        traffic.start_consumer()
        wait_for(lambda: sts_replicas(api, namespace, f"{CLUSTER}-broker-master") == 2, 90,
                 what="drain-broker-2 drained and the StatefulSet shrunk")
        st = wait_for(lambda: (s := status(api, namespace, CLUSTER)).get("phase") == "Running"
                      and "drain" not in s and s, 60, what="Running with 2 groups")
        assert [g["name"] for g in st["brokerGroups"]] == [f"{CLUSTER}-broker-0", f"{CLUSTER}-broker-1"]
        assert f"{CLUSTER}-broker-master-2" not in pods(api, namespace)
        time.sleep(1.0)  # producing goes on against the two remaining groups
        traffic.stop_sending()
        wait_for(lambda: set(traffic.sent) <= traffic.received, 60,
                 what=f"every sent message consumed (missing {len(set(traffic.sent) - traffic.received)})")
    finally:
        traffic.stop()
    print(f"sent {len(traffic.sent)} (per group {traffic.per_broker}), received {len(traffic.received)}, "
          f"duplicates {traffic.duplicates}, failed {len(traffic.failed)}; "
          f"drain-broker-2 had {sent_to_2_at_drain} when the scale-in began", file=sys.__stderr__)
    assert traffic.error is None, traffic.error
    assert traffic.failed == [], traffic.failed[:5]
    assert set(traffic.sent) <= traffic.received
    assert len(traffic.sent) > 100
    # writes to the leaving group stopped once it was made read-only (route refresh <= 1 s)
    assert traffic.per_broker.get(f"{CLUSTER}-broker-2", 0) <= sent_to_2_at_drain + 400
    _assert_unregistered(procs["nameservers"])


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _admin_call(addr: str, method: str, *args: Any) -> Any:
    from rocket_operator.admin import RemotingClusterAdmin

    admin = RemotingClusterAdmin()
    try:
        return await getattr(admin, method)(addr, *args)
    finally:
        await admin.close()


def _topics(addr: str) -> dict[str, Any]:
    return _run(_admin_call(addr, "topic_configs"))


def _groups(addr: str) -> dict[str, Any]:
    return _run(_admin_call(addr, "subscription_groups"))


async def _create_group(addr: str, group: str) -> None:
    from rocket.protocol.codes import RequestCode
    from rocket.remoting.client import RemotingClient
    from rocket.remoting.command import RemotingCommand

    client = RemotingClient()
    try:
        body = json.dumps({"groupName": group, "consumeEnable": True, "consumeBroadcastEnable": True,
                           "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0,
                           "whichBrokerWhenConsumeSlowly": 1}).encode()
        response = await client.invoke(addr, RemotingCommand(
            code=RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body))
        assert response.code == 0, response.remark
    finally:
        await client.close()


def _stop_brokers_of_deleted_pods(api: Any, namespace: str, procs: dict[str, Any]) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and procs["brokers"]:
        current = pods(api, namespace)
        for i in list(procs["brokers"]):
            pod = current.get(f"{CLUSTER}-broker-master-{i}")
            if i == 2 and (pod is None or pod.metadata.deletion_timestamp):
                procs["stop"](i)
                return
        time.sleep(0.1)


def _assert_unregistered(nameservers: list[str]) -> None:
    from rocket.nameserver import client as ns_client
    from rocket.remoting.client import RemotingClient

    async def check() -> None:
        client = RemotingClient()
        try:
            for ns in nameservers:
                info = await ns_client.get_cluster_info(client, ns)
                assert sorted(info.cluster_addr_table.get(CLUSTER, [])) == [
                    f"{CLUSTER}-broker-0", f"{CLUSTER}-broker-1"]
        finally:
            await client.close()

    asyncio.run(check())
