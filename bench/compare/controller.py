"""The controller-mode cells of ``make bench-compare``: failover (ours and Apache RocketMQ) and
quorum acks (ours).

**failover** — for each system, one controller-mode cluster (:func:`servers.start_controller_group`:
3 controllers, a NameServer, 1 master + 2 slaves, SYNC_FLUSH, ``allAckInSyncStateSet=true``,
``controllerHeartBeatTimeoutMills`` 4000, ``scanNotActiveBrokerInterval`` 1000), then ``rounds``
times: wait until the group has a master with all 3 brokers alive in its SyncStateSet and the
NameServer routes to it; run ``Driver.java failover`` (8 threads of sync sends of unique 1 KiB
bodies through Apache's Java client, no client retries, the route polled every 200 ms), which
kill -9s the master after :data:`BEFORE_KILL` s and times, in its own clock, the first send
acknowledged by another broker (RTO); it reads the topic back and counts acknowledged messages
missing (lost); then the killed broker is started again on its store and must rejoin before the
next round. One topic per round, created (and copied to every broker) before the first.

**quorum** — ours only: a master and a slave, ASYNC_FLUSH, once as SYNC_MASTER and once in
controller mode with ``allAckInSyncStateSet=true`` (3 controllers), measured only when the slave
is in the SyncStateSet; produce:64 and batch:16 through the same driver as the throughput cells.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.compare import java, servers
from bench.compare.results import FAILOVER, FAILOVER_CONFIG

#: Seconds of load before the kill, after the first acknowledgement by the new master, and the
#: longest wait for one after the kill.
BEFORE_KILL, AFTER_RECOVERY, MAX_WAIT = 3.0, 2.0, 60.0
#: Producer threads, how often the client asks the NameServer for routes (ms; Java's default is
#: 30 000), its send timeout (ms) and its pause after a failed send (ms).
THREADS, POLL_NAMESRV_MS, SEND_TIMEOUT_MS, PAUSE_AFTER_ERROR_MS = 8, 200, 3000, 20
SLAVES = 2
FAILOVER_BROKER = {"allAckInSyncStateSet": "true"}
FAILOVER_FLUSH = "SYNC_FLUSH"

Record = Callable[[str, str, int, str, dict[str, Any], tuple[float, float]], None]


def failover_settings() -> dict[str, Any]:
    """What the page says about the failover harness."""
    return {
        "layout": (f"3 controllers (Apache: `ControllerStartup`, DLedger; ours: `rocket controller`, pysyncobj "
                   f"Raft), a NameServer, 1 master + {SLAVES} slaves with `enableControllerMode`, "
                   f"{FAILOVER_FLUSH}, `allAckInSyncStateSet=true`, `controllerHeartBeatTimeoutMills` "
                   f"{servers.CONTROLLER_HEARTBEAT_TIMEOUT_MS}, controllers' `scanNotActiveBrokerInterval` "
                   f"{servers.SCAN_NOT_ACTIVE_BROKER_MS} ms; Apache's brokers "
                   f"{' '.join(servers.APACHE_GROUP_BROKER_JVM[:2])}"),
        "how": (f"`Driver.java failover`: {THREADS} threads of sync sends (Apache's Java client, no retries, "
                f"{PAUSE_AFTER_ERROR_MS} ms pause after a failed send, routes polled every {POLL_NAMESRV_MS} ms "
                f"instead of 30 s, send timeout {SEND_TIMEOUT_MS} ms); after {BEFORE_KILL:.0f} s the driver kills "
                "the master with SIGKILL and times (one clock) the first send acknowledged by another broker: the "
                "RTO. 'new master routed' is when the NameServer first lists another broker as brokerId 0; "
                f"sending goes on {AFTER_RECOVERY:.0f} s after the RTO; then every acknowledged body is read back "
                "(a pull consumer, every queue from offset 0): 'lost' are acknowledged bodies not there. The "
                "killed broker is started again on its store and must be back in the SyncStateSet before the "
                "next round; one cluster per system, its rounds one after the other."),
    }


def _brokers_with(cluster: servers.Cluster, topics: list[str], timeout: float) -> None:
    """Wait until every live broker holds ``topics`` (a slave copies them from its master)."""
    deadline = time.monotonic() + timeout
    missing: dict[str, set[str]] = {}
    while time.monotonic() < deadline:
        missing = {p.name: set(topics) - servers.topics_on(f"127.0.0.1:{p.port}")
                   for p in cluster.brokers() if p.alive()}
        if not any(missing.values()):
            return
        time.sleep(1.0)
    raise servers.ClusterStartError(f"{cluster.system}: topics not on every broker after {timeout:.0f} s: {missing}")


def run_failover(system: str, rounds: int, lib: Path, classes: Path, ours_path: Path | None, keep: bool,
                 record: Record, problem: Callable[[str, str, int, str], None]) -> None:
    """The failover cell of ``system``: ``rounds`` kill -9s of its master (see the module doc).
    Each round's result goes to ``record``; a cluster that does not start or recover to ``problem``."""
    root = Path(tempfile.mkdtemp(prefix=f"rocket-compare-failover-{system}-"))
    label = f"[failover {system}]"
    print(f"{label} starting 3 controllers, a NameServer and 1 master + {SLAVES} slaves in {root} ...", flush=True)
    started = time.monotonic()
    try:
        cluster = servers.start_controller_group(system, root, flush=FAILOVER_FLUSH, slaves=SLAVES, lib=lib,
                                                 ours_path=ours_path, extra=FAILOVER_BROKER)
    except servers.ClusterStartError as exc:
        print(f"{label} did not start: {exc}", flush=True)
        problem(system, FAILOVER_CONFIG, 0, f"did not start: {exc}")
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        return
    print(f"{label} ready in {time.monotonic() - started:.1f} s", flush=True)
    home = root / "driver"
    topics = [f"failover-{i + 1}" for i in range(rounds)]
    try:
        argv = java.driver_argv(lib, classes, home, "topics", f"namesrv={cluster.namesrv}",
                                f"topics={','.join(topics)}", "queues=8")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
        if not java.driver_results(done.stdout):
            raise servers.ClusterStartError(f"creating the topics failed:\n{done.stderr[-2000:]}")
        _brokers_with(cluster, topics, 120)
        for rnd in range(rounds):
            master = cluster.wait_group(1 + SLAVES)
            victim = cluster.broker_at(master)
            load0 = os.getloadavg()[0]
            args = [f"namesrv={cluster.namesrv}", f"topic={topics[rnd]}", f"killPid={victim.pid}",
                    f"oldMaster={master}", f"threads={THREADS}", f"before={BEFORE_KILL}", f"after={AFTER_RECOVERY}",
                    f"maxWait={MAX_WAIT}", f"pollNameServerMs={POLL_NAMESRV_MS}", f"sendTimeoutMs={SEND_TIMEOUT_MS}",
                    f"pauseAfterErrorMs={PAUSE_AFTER_ERROR_MS}", "verifySeconds=60",
                    f"brokerName={servers.BROKER_NAME}"]
            run = java.stream_driver(java.driver_argv(lib, classes, home, "failover", *args),
                                     timeout=BEFORE_KILL + MAX_WAIT + AFTER_RECOVERY + 180,
                                     stderr_path=root / "logs" / "driver.log")
            if victim.popen is not None:
                try:
                    victim.popen.wait(30)
                except subprocess.TimeoutExpired:  # the driver died before its kill: do it here
                    victim.popen.kill()
                    victim.popen.wait()
            result = run.results[-1] if run.results else {
                "cell": FAILOVER, "errors": 1,
                "failed": f"driver exited {run.returncode} (timed out: {run.timed_out}) without a result; "
                          f"see {root / 'logs' / 'driver.log'}"}
            record(system, FAILOVER_CONFIG, rnd, FAILOVER, result, (load0, os.getloadavg()[0]))
            if "failed" in result:
                print(f"{label} round {rnd + 1}: FAILED {result['failed']}", flush=True)
            else:
                print(f"{label} round {rnd + 1}: RTO {_s(result.get('rto_s'))} s (new master routed "
                      f"{_s(result.get('routed_s'))} s), acknowledged {result['acked']:,}, lost {result['lost']}, "
                      f"duplicates {result['duplicates']}, failed sends {result['failed_sends']:,}", flush=True)
            if rnd + 1 < rounds:
                victim.start()  # back on its store; it must rejoin as a slave before the next round
    except (servers.ClusterStartError, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"{label} stopped early: {exc}", flush=True)
        problem(system, FAILOVER_CONFIG, 0, f"stopped early: {exc}")
    finally:
        cluster.stop(discard=True)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def _s(v: Any) -> str:
    return "-" if v is None else f"{float(v):.2f}"


def start_quorum(kind: str, root: Path, ours_path: Path | None) -> servers.Cluster:
    """Our master + slave for the quorum-ack cell: ``kind`` "SYNC_MASTER" (fixed roles) or
    "allAck" (controller mode, ``allAckInSyncStateSet=true``, ready once the slave is in sync)."""
    if kind == "SYNC_MASTER":
        return servers.start("ours", root, flush="ASYNC_FLUSH", role="SYNC_MASTER", slave=True, ours_path=ours_path)
    return servers.start_controller_group("ours", root, flush="ASYNC_FLUSH", slaves=1, ours_path=ours_path,
                                          extra={"allAckInSyncStateSet": "true"})
