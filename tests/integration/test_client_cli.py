"""The ``rocket`` client commands, run as subprocesses against real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocket.local import ClusterState, find_free_base_port
from tests.integration.client_support import shared_cluster, unique
from tests.support import ROOT


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


def test_bad_namesrv_gives_a_clear_error() -> None:
    from tests.support import free_port

    out = rocket("topic", "list", "--namesrv", f"127.0.0.1:{free_port()}")
    assert out.returncode == 1
    assert "no NameServer answered" in out.stderr


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
