"""format("rocket") against a real embedded cluster (2 NameServers + 2 broker processes on loopback):
batch reads, offsets options, streaming with a checkpoint, a missing topic, a broker that dies, the jobs."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from rocket.analytics import loghub
from rocket.analytics.fixtures import publish, publish_loghub
from rocket.analytics.offsets import parse_offsets
from rocket.analytics.pull import RocketReadError, RocketSourceError, SyncPuller

TOPIC = "analytics-ds"
N = 400


@pytest.fixture(scope="module")
def data(cluster: Any, loghub_root: Path) -> dict[str, Any]:
    bodies = [f"body-{i}".encode() for i in range(N)]
    assert publish(cluster.namesrv, TOPIC, bodies, queue_nums=4, tags="T", keys_prefix="k") == N
    lines = loghub.read_lines(loghub.log_path(loghub_root, "HDFS"))  # type: ignore[arg-type]
    publish_loghub(cluster.namesrv, {"HDFS": lines})
    return {"namesrv": cluster.namesrv, "bodies": bodies, "hdfs_lines": lines}


def _read(spark: Any, namesrv: str, topic: str = TOPIC, **options: str) -> Any:
    reader = spark.read.format("rocket").option("namesrv", namesrv).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_read_everything(spark: Any, data: dict[str, Any]) -> None:
    df = _read(spark, data["namesrv"])
    assert df.rdd.getNumPartitions() == 8  # 4 queues on each of 2 broker groups
    rows = df.collect()
    assert len(rows) == N
    assert sorted(r["body"] for r in rows) == sorted(data["bodies"])
    assert len({(r["broker_name"], r["queue_id"], r["queue_offset"]) for r in rows}) == N
    r = rows[0]
    assert r["topic"] == TOPIC and r["tags"] == "T" and r["keys"].startswith("k-")
    assert r["properties"]["TAGS"] == "T" and "UNIQ_KEY" in r["properties"]
    assert r["broker_name"] in ("broker-a", "broker-b")
    assert r["born_host"].startswith("127.0.0.1:")
    assert r["store_timestamp"] >= r["born_timestamp"]
    # queue offsets are dense per queue
    per_queue: dict[tuple[str, int], list[int]] = {}
    for row in rows:
        per_queue.setdefault((row["broker_name"], row["queue_id"]), []).append(row["queue_offset"])
    for offs in per_queue.values():
        assert sorted(offs) == list(range(len(offs)))


def test_offset_options(spark: Any, data: dict[str, Any]) -> None:
    ns = data["namesrv"]
    assert _read(spark, ns, startingOffsets="latest").count() == 0
    assert _read(spark, ns, startingOffsets="0").count() == N  # a timestamp before everything
    start = json.dumps({TOPIC: {"broker-a:0": 5}})
    end = json.dumps({TOPIC: {"broker-a:0": 9, "broker-a:1": 0, "broker-a:2": 0, "broker-a:3": 0,
                              "broker-b:0": 0, "broker-b:1": 0, "broker-b:2": 0, "broker-b:3": 0}})
    rows = _read(spark, ns, startingOffsets=start, endingOffsets=end).collect()
    assert sorted(r["queue_offset"] for r in rows) == [5, 6, 7, 8]
    assert {(r["broker_name"], r["queue_id"]) for r in rows} == {("broker-a", 0)}
    split = _read(spark, ns, maxOffsetsPerPartition="10", pullBatchSize="7", pullWindow="3")
    assert split.rdd.getNumPartitions() > 8
    assert split.count() == N


def test_missing_topic_is_a_clear_error(spark: Any, data: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="topic 'no-such-topic' does not exist"):
        _read(spark, data["namesrv"], topic="no-such-topic").count()
    with pytest.raises(Exception, match="startingOffsets"):
        _read(spark, data["namesrv"], startingOffsets="sometime").count()
    with pytest.raises(RocketSourceError, match="does not exist"), SyncPuller(data["namesrv"]) as puller:
        puller.queues("no-such-topic")


def test_streaming_keeps_progress_in_the_checkpoint(spark: Any, data: dict[str, Any], tmp_path: Path) -> None:
    ns = data["namesrv"]
    topic = "analytics-stream"
    publish(ns, topic, [f"s-{i}".encode() for i in range(50)], queue_nums=2)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run_once() -> int:
        stream = spark.readStream.format("rocket").option("namesrv", ns).option("topic", topic).load()
        query = (stream.select("topic", "queue_offset", "body").writeStream.format("parquet")
                 .option("path", str(out)).option("checkpointLocation", str(ckpt)).trigger(availableNow=True)
                 .start())
        query.awaitTermination(240)
        assert query.exception() is None
        return spark.read.parquet(str(out)).count()

    assert run_once() == 50
    publish(ns, topic, [f"t-{i}".encode() for i in range(30)], queue_nums=2)
    assert run_once() == 80  # only the 30 new messages were read the second time
    assert (ckpt / "offsets").is_dir()


def test_jobs_on_the_cluster(data: dict[str, Any], tmp_path: Path, spark: Any, loghub_root: Path) -> None:
    from rocket.analytics.jobs.common import InputSpec, input_frame
    from rocket.analytics.jobs.logs import run_logs_job
    from rocket.analytics.jobs.traffic import analyze_traffic

    summary = run_logs_job(data["namesrv"], ["loghub-HDFS"], tmp_path / "logs")
    hdfs = summary["topics"]["loghub-HDFS"]
    assert hdfs["lines"] == len(data["hdfs_lines"]) and hdfs["unparsed"] == 0
    if loghub.structured_path(loghub_root, "HDFS") is None:  # the 200-line sample shipped in the package
        assert hdfs["accuracy"] is None and summary["accuracy_mean"] is None, "an accuracy without ground truth"
    else:  # ../shared/data/loghub: HDFS_2k.log with its HDFS_2k.log_structured.csv
        assert hdfs["accuracy"] is not None, f"no accuracy although {loghub_root} has HDFS's ground truth"
        assert hdfs["accuracy"]["ground_truth_lines"] == len(data["hdfs_lines"])
        assert hdfs["accuracy"]["accuracy"] >= 0.99, hdfs["accuracy"]
    assert (tmp_path / "logs" / "report.md").exists()
    df = input_frame(spark, InputSpec(namesrv=data["namesrv"], topics=(TOPIC,)))
    traffic = analyze_traffic(df, tmp_path / "traffic")
    t = traffic["topics"][TOPIC]
    assert t["messages"] == N and t["bytes"] == sum(len(b) for b in data["bodies"])
    # the latency figures are those of the stored messages (store minus born timestamp, ms)
    with SyncPuller(data["namesrv"]) as puller:
        ranges = puller.plan([TOPIC], parse_offsets(None, default="earliest"), parse_offsets(None, default="latest"))
        latencies = sorted(m.store_timestamp - m.born_timestamp
                           for rng in ranges for msgs in puller.read_range(rng) for m in msgs)
    assert len(latencies) == N
    lat = t["store_latency_ms"]
    assert lat["max"] == latencies[-1]
    assert lat["p50"] in latencies and lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"], lat
    # a median: at most half the latencies below it, at least half at or below it
    assert sum(v < lat["p50"] for v in latencies) <= N / 2 <= sum(v <= lat["p50"] for v in latencies), lat
    assert t["top_producers"][0]["born_host"].startswith("127.0.0.1:")


def test_broker_death_mid_read_fails_over_then_names_queue_and_offset(tmp_path: Path) -> None:
    """Master killed mid-read: the read goes on from the slave. Then the slave killed mid-read with no
    broker left: RocketReadError names the queue and the offset."""
    from rocket.local import running_cluster

    from .conftest import SMALL_STORE_ARGS

    with running_cluster(tmp_path / "c", nameservers=1, brokers=1, extra_broker_args=SMALL_STORE_ARGS) as state:
        procs = {p.name: p for p in state.processes if p.kind == "broker"}
        assert "broker-a-slave" in procs, f"the local cluster started no slave (slaves are on by default): {procs}"
        bodies = [os.urandom(2000) for _ in range(3000)]
        # one batch at a time: the queue then holds the bodies in this order (concurrent batches may interleave)
        publish(state.namesrv, "dying", bodies, queue_nums=1, batch=64, concurrency=1)
        time.sleep(2.0)  # asynchronous replication catches up
        with SyncPuller(state.namesrv, timeout=3.0) as puller:
            (rng,) = puller.plan(["dying"], parse_offsets(None, default="earliest"),
                                 parse_offsets(None, default="latest"))
            assert (rng.start, rng.end) == (0, 3000)
            got: list[bytes] = []
            for msgs in puller.read_range(rng, window=1, prefer_slave=False):
                got += [m.body for m in msgs]
                if len(got) >= 64 and procs["broker-a"].pid > 0:
                    os.kill(procs["broker-a"].pid, signal.SIGKILL)
                    procs["broker-a"].pid = 0
            assert got == bodies  # every message once, in order, the rest from the slave

            seen = 0
            with pytest.raises(RocketReadError) as info:
                for msgs in puller.read_range(rng, window=1, max_attempts=2):
                    seen += len(msgs)
                    if seen >= 64 and procs["broker-a-slave"].pid > 0:
                        os.kill(procs["broker-a-slave"].pid, signal.SIGKILL)
                        procs["broker-a-slave"].pid = 0
            err = info.value
            assert 64 <= seen < 3000
            assert err.queue == "dying@broker-a:0" and err.offset == seen
            assert f"reading queue dying@broker-a:0 failed at offset {seen}" in str(err)


def test_slave_without_the_topic_yet_leaves_the_read_to_the_master(tmp_path: Path) -> None:
    """A slave knows a topic once it has copied the master's topic configs (every slaveSyncInterval) or
    replicated messages of it; until then it answers TOPIC_NOT_EXIST. A read that prefers slaves then
    reads everything from the master. Here the slave's replication points at a closed port and its
    config copy runs once, before the topic exists, so the slave never learns the topic."""
    from rocket.local import running_cluster
    from rocket.remoting import RemotingCommandError

    from .conftest import SMALL_STORE_ARGS

    args = [*SMALL_STORE_ARGS, "--set", "slaveSyncInterval=3600000",  # one copy after 3 s, then none for 1 h
            "--set", "haMasterAddress=127.0.0.1:9"]  # nothing listens there: no message reaches the slave
    with running_cluster(tmp_path / "c", nameservers=1, brokers=1, extra_broker_args=args,
                         wait_in_sync=False) as state:
        assert any(p.name == "broker-a-slave" for p in state.processes), \
            f"the local cluster started no slave (slaves are on by default): {[p.name for p in state.processes]}"
        time.sleep(4.0)  # the slave's first (and, for an hour, last) copy of the master's configs is done
        bodies = [f"fresh-{i}".encode() for i in range(100)]
        publish(state.namesrv, "fresh", bodies, queue_nums=1, concurrency=1)  # stored in this order
        with SyncPuller(state.namesrv, timeout=3.0) as puller:
            (rng,) = puller.plan(["fresh"], parse_offsets(None, default="earliest"),
                                 parse_offsets(None, default="latest"))
            puller._choose(rng.mq, True, False)
            with pytest.raises(RemotingCommandError, match="TOPIC_NOT_EXIST"):
                puller.run(puller.consumer.pull(rng.mq, 0, 32, timeout=3.0))  # the slave does not know it
            got = [m.body for msgs in puller.read_range(rng, prefer_slave=True) for m in msgs]
        assert got == bodies
