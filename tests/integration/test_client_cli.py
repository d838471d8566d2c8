"""The ``rocket`` client commands, run as subprocesses against real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rocket.local import ClusterState, find_free_base_port
from tests.integration.client_support import shared_cluster
from tests.support import ROOT, unique, wait_for


@pytest.fixture(scope="module")
def cluster() -> ClusterState:
    return shared_cluster()


def rocket(*args: str, namesrv: str | None = None, input: bytes | None = None, timeout: float = 60,
           cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT / "services")}
    if namesrv:
        env["ROCKET_NAMESRV"] = namesrv
    return subprocess.run([sys.executable, "-m", "rocket.cli", *args], capture_output=True, timeout=timeout,
                          env=env, input=input.decode() if input else None, text=True, cwd=cwd)


def test_topic_produce_consume_lag_cluster_commands(cluster: ClusterState) -> None:
    ns = cluster.namesrv
    topic = unique("CliT")
    group = unique("CliG")
    out = rocket("topic", "create", topic, "--queues", "2", namesrv=ns)
    assert out.returncode == 0, out.stderr
    assert "broker-a" in out.stdout and "broker-b" in out.stdout
    listed = rocket("topic", "list", namesrv=ns)
    assert listed.returncode == 0 and topic in listed.stdout.split()
    assert "%RETRY%" not in listed.stdout
    sent = rocket("produce", topic, "--count", "20", "--size", "64", "--tags", "Cli", "--keys", "key-{i}", "-q",
                  namesrv=ns)
    assert sent.returncode == 0, sent.stderr
    assert "sent 20 message(s)" in sent.stdout
    batched = rocket("produce", topic, "--stdin", "--batch-size", "5", "-q", namesrv=ns,
                     input=b"".join(f"line {i}\n".encode() for i in range(10)))
    assert batched.returncode == 0 and "sent 10 message(s)" in batched.stdout, batched.stderr
    got = rocket("consume", topic, "--group", group, "--from", "first", "--count", "30", "--timeout", "15",
                 "--namesrv", ns)
    assert got.returncode == 0, got.stderr
    assert "consumed 30 message(s)" in got.stderr
    assert got.stdout.count("tags=Cli") == 20 and "line 7" in got.stdout and "key-3" in got.stdout
    lag = rocket("group", "lag", group, "--topic", topic, namesrv=ns)
    assert lag.returncode == 0, lag.stderr
    assert "total lag: 0" in lag.stdout
    clusters = rocket("cluster", "list", namesrv=ns)
    assert clusters.returncode == 0, clusters.stderr
    assert "broker-a" in clusters.stdout and "broker-b" in clusters.stdout and "MASTER" in clusters.stdout
    deleted = rocket("topic", "delete", topic, namesrv=ns)
    assert deleted.returncode == 0, deleted.stderr
    assert topic not in rocket("topic", "list", namesrv=ns).stdout


def rocket_to_file(out_file: Path, *args: str, namesrv: str) -> str:
    """Run ``rocket <args>`` as a script would, standard output into a file (no terminal, and no
    $COLUMNS to lean on); returns what landed in the file. Fails on a non-zero exit."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(PYTHONPATH=str(ROOT / "services"), ROCKET_NAMESRV=namesrv)
    with out_file.open("w") as sink:
        done = subprocess.run([sys.executable, "-m", "rocket.cli", *args], stdout=sink, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, timeout=60, env=env, text=True)
    text = out_file.read_text()
    assert done.returncode == 0, f"rocket {' '.join(args)}: exit {done.returncode}\n{done.stderr}\n{text}"
    return text


#: The documented top-level keys of each listing command's ``-o json`` document (README.md,
#: "Output for scripts"), and of its list entries.
DOCUMENTED_KEYS: dict[str, tuple[set[str], set[str]]] = {
    "topic list": ({"topics"}, {"topic", "queueDatas"}),
    "cluster list": ({"brokers"}, {"clusterName", "brokerName", "brokerId", "brokerAddr", "role", "error",
                                   "runtime"}),
    "group lag": ({"consumerGroup", "source", "consumeTps", "totalLag", "queues"},
                  {"topic", "brokerName", "queueId", "brokerOffset", "consumerOffset", "lag", "lastTimestamp"}),
    "local status": ({"dataDir", "namesrv", "processes"},
                     {"name", "kind", "addr", "httpPort", "pid", "running", "ready", "log"}),
    "cluster ha": ({"brokerName", "brokerId", "brokerRole", "brokerAddr", "haServerAddr", "epoch", "epochs",
                    "maxOffset", "minOffset", "slaves", "master"}, set()),
}


def _without(doc: dict[str, Any], *volatile: str) -> dict[str, Any]:
    """``doc`` with the figures that change between two runs (rates, uptime) taken out."""
    if "brokers" in doc:
        return {"brokers": [{k: v for k, v in b.items() if k != "runtime"} for b in doc["brokers"]]}
    return {k: v for k, v in doc.items() if k not in volatile}


def test_listing_commands_piped_to_a_file_print_whole_cells_json_and_yaml(cluster: ClusterState,
                                                                         tmp_path: Path) -> None:
    """Issue 19: piped into a file, no cell is cut ("Defa…", "127.…"); -o json/yaml parse and agree."""
    ns = cluster.namesrv
    topic = unique("CliListingTopicWithAQuiteLongNameToBeSeenWhole")
    group = unique("CliListingGroupWithAQuiteLongNameToBeSeenWhole")
    assert subprocess.run([sys.executable, "-m", "rocket.cli", "topic", "create", topic, "--queues", "2", "-n", ns],
                          capture_output=True, timeout=60).returncode == 0
    assert rocket("produce", topic, "--count", "6", "-q", namesrv=ns).returncode == 0
    out = tmp_path / "out.txt"

    brokers = json.loads(rocket_to_file(out, "cluster", "list", "-o", "json", namesrv=ns))["brokers"]
    addrs = sorted(b["brokerAddr"] for b in brokers)
    assert len(addrs) == 2 and all(a.startswith("127.0.0.1:") for a in addrs)
    commands: dict[str, list[str]] = {
        "topic list": ["topic", "list"],
        "cluster list": ["cluster", "list"],
        "group lag": ["group", "lag", group, "--topic", topic],
        "local status": ["local", "status", "--dir", cluster.data_dir],
        "cluster ha": ["cluster", "ha", "--addr", addrs[0]],
    }
    # what each command's tables must show whole: names, addresses, numbers
    whole: dict[str, list[str]] = {
        "topic list": [topic],
        "cluster list": ["DefaultCluster", "broker-a", "broker-b", *addrs, "MASTER"],
        "group lag": [topic, "broker-a", "broker-b", group],
        "local status": [p.addr for p in cluster.processes] + [str(p.pid) for p in cluster.processes]
        + [cluster.data_dir],
        "cluster ha": [addrs[0]],
    }
    for name, argv in commands.items():
        for fmt in ("table", "wide"):
            text = rocket_to_file(out, *argv, "-o", fmt, namesrv=ns)
            assert "…" not in text and "..." not in text, f"{name} -o {fmt} cut a cell:\n{text}"
            for cell in whole[name]:
                assert cell in text, f"{name} -o {fmt} lacks {cell!r} whole:\n{text}"
        doc = json.loads(rocket_to_file(out, *argv, "-o", "json", namesrv=ns))
        top, entry = DOCUMENTED_KEYS[name]
        assert isinstance(doc, dict) and top <= set(doc), f"{name}: {sorted(doc)}"
        items = next((v for v in doc.values() if isinstance(v, list) and v and isinstance(v[0], dict)), [])
        if entry:
            assert items, f"{name} -o json lists nothing: {doc}"
            for item in items:
                assert entry - {"queueDatas"} <= set(item) <= entry, f"{name}: {sorted(item)}"
        again = yaml.safe_load(rocket_to_file(out, *argv, "-o", "yaml", namesrv=ns))
        assert _without(again, "maxOffset", "minOffset", "consumeTps") == _without(doc, "maxOffset", "minOffset",
                                                                                     "consumeTps"), name
    # the figures are the real ones, with their JSON types
    lag = json.loads(rocket_to_file(out, "group", "lag", group, "--topic", topic, "-o", "json", namesrv=ns))
    assert lag["consumerGroup"] == group and lag["totalLag"] == 6
    assert sum(q["brokerOffset"] for q in lag["queues"]) == 6 and all(q["lag"] == q["brokerOffset"]
                                                                      for q in lag["queues"])
    topics = json.loads(rocket_to_file(out, "topic", "list", "-o", "json", "--routes", namesrv=ns))["topics"]
    mine = next(t for t in topics if t["topic"] == topic)
    assert sorted((q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in mine["queueDatas"]) \
        == [("broker-a", 2, 2, 6), ("broker-b", 2, 2, 6)]
    # both masters stored some of the 6 messages; runtime keeps RocketMQ's keys and string values
    assert {b["brokerId"] for b in brokers} == {0} and all(int(b["runtime"]["commitLogMaxOffset"]) > 0
                                                            for b in brokers)
    assert {b["runtime"]["brokerName"] for b in brokers} == {"broker-a", "broker-b"}
    status = json.loads(rocket_to_file(out, "local", "status", "--dir", cluster.data_dir, "-o", "json", namesrv=ns))
    assert sorted(p["addr"] for p in status["processes"]) == sorted(p.addr for p in cluster.processes)
    assert all(p["ready"] is True for p in status["processes"])


def test_bad_namesrv_gives_a_clear_error() -> None:
    from tests.support import free_port

    out = rocket("topic", "list", "--namesrv", f"127.0.0.1:{free_port()}")
    assert out.returncode == 1
    assert "no NameServer answered" in out.stderr


def _local_role(data: Path, name: str) -> str | None:
    """brokerRole of local process ``name`` from its /api/v1/ha (None when it does not answer)."""
    import urllib.request

    info = next(p for p in ClusterState.load(data).processes if p.name == name)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{info.http_port}/api/v1/ha", timeout=2) as resp:
            return str(json.loads(resp.read())["brokerRole"])
    except OSError:
        return None


def _local_master(data: Path, group: str) -> str | None:
    """The local process that is master of ``group`` now."""
    for name in (group, group + "-slave"):
        role = _local_role(data, name)
        if role is not None and role != "SLAVE":
            return name
    return None


@pytest.mark.slow
def test_local_up_status_down(tmp_path: Path) -> None:
    base = find_free_base_port()
    data = tmp_path / "local"
    up = rocket("local", "up", "--dir", str(data), "--base-port", str(base), timeout=120)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "broker-a" in up.stdout and "namesrv-2" in up.stdout
        assert (data / "state.json").exists()
        status = rocket("local", "status", "--dir", str(data))
        assert status.returncode == 0, status.stdout + status.stderr
        assert status.stdout.count("ready") >= 4
        again = rocket("local", "up", "--dir", str(data), "--base-port", str(base))
        assert again.returncode == 1 and "already runs" in again.stderr
        # the commands find the local cluster through its state file
        listed = rocket("cluster", "list", "--namesrv", f"127.0.0.1:{base};127.0.0.1:{base + 1}")
        assert listed.returncode == 0 and "broker-b" in listed.stdout
        produced = rocket("produce", "LocalT", "--count", "3", "-q", "--namesrv", f"127.0.0.1:{base + 1}")
        assert produced.returncode == 0, produced.stderr
        assert status.stdout.count("controller-") == 3
        # controller mode: kill -9 broker-a's master, the controllers elect the other process
        master = _local_master(data, "broker-a")
        killed = rocket("local", "kill", master, "--dir", str(data))
        assert killed.returncode == 0, killed.stdout + killed.stderr
        other = "broker-a-slave" if master == "broker-a" else "broker-a"
        wait_for(lambda: _local_master(data, "broker-a") == other, 30, what=f"{other} elected master")
        produced = rocket("produce", "LocalT", "--count", "3", "-q", "--namesrv", f"127.0.0.1:{base}")
        assert produced.returncode == 0, produced.stderr
        started = rocket("local", "start", master, "--dir", str(data))
        assert started.returncode == 0, started.stdout + started.stderr
        wait_for(lambda: _local_role(data, master) == "SLAVE", 30, what=f"{master} back as a slave")
    finally:
        down = rocket("local", "down", "--dir", str(data))
    assert down.returncode == 0, down.stdout + down.stderr
    assert "broker-a" in down.stdout
    after = rocket("local", "status", "--dir", str(data))
    assert after.returncode == 1
    assert (data / "logs" / "broker-a.log").exists() and (data / "broker-a").is_dir()


@pytest.mark.slow
def test_local_up_foreground_stops_on_ctrl_c(tmp_path: Path) -> None:
    import signal
    import time

    from rocket.local import ClusterState, pid_alive

    base = find_free_base_port()
    data = tmp_path / "fg"
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT / "services")}
    proc = subprocess.Popen([sys.executable, "-m", "rocket.cli", "local", "up", "--dir", str(data), "--base-port",
                             str(base), "--foreground"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 90
        lines = []
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline().decode()
            lines.append(line)
            if "Ctrl-C stops the cluster" in line or not line:
                break
        assert "Ctrl-C stops the cluster" in "".join(lines), "".join(lines)
        pids = [p.pid for p in ClusterState.load(data).processes]
        assert all(pid_alive(pid) for pid in pids)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(40) == 0
        assert not any(pid_alive(pid) for pid in pids)
        assert not (data / "state.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
