"""Helpers of the pull-answer compat tests: the Java program ``PullCheck.java`` (Apache's
client), the C++ client's push consumer through ``driver.py``, and queue/offset queries."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bench.compare import java

from rocket.remoting import RequestCode, ResponseCode
from tests.compat.realclient import Driver, cpp_log_tail
from tests.integration.broker_harness import RawBroker

JAVA_SOURCE = Path(__file__).resolve().parent / "PullCheck.java"
#: A small heap (these programs hold a few hundred messages; later flags win over the driver's 1 GiB).
SMALL_HEAP = ("-Xms128m", "-Xmx256m")
#: JVM flags for the consumer: rebalance every second instead of every 20 s (``RebalanceService``).
FAST_REBALANCE = "-Drocketmq.client.rebalance.waitInterval=1000"


def java_program() -> tuple[Path, Path]:
    """(folder of Apache RocketMQ jars, folder of the compiled PullCheck); fails the test when unavailable."""
    try:
        lib = java.ensure_jars()
        return lib, java.ensure_driver(lib, JAVA_SOURCE)
    except java.JavaSetupError as exc:
        pytest.fail(f"the Apache RocketMQ Java client is not available: {exc}", pytrace=False)


def run_java(program: tuple[Path, Path], home: Path, *args: str, timeout: float,
             jvm: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run ``PullCheck <args>``; its RESULT object. Raises AssertionError with its output on failure."""
    lib, classes = program
    argv = java.driver_argv(lib, classes, home, args[0], *args[1:], jvm=(*SMALL_HEAP, *jvm), main="PullCheck")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    results = java.driver_results(proc.stdout)
    if proc.returncode != 0 or not results:
        raise AssertionError(f"PullCheck {args[0]} exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\n"
                             f"stderr:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = results[-1]
    return result


async def queue_offsets(rb: RawBroker, topic: str, queues: int, group: str) -> tuple[dict[int, int], dict[int, int]]:
    """Per queue: (the broker's max offset, the group's committed offset or -1)."""
    maxes: dict[int, int] = {}
    committed: dict[int, int] = {}
    for q in range(queues):
        r = await rb.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": q})
        assert r.code == ResponseCode.SUCCESS, r
        maxes[q] = int(r.ext_fields["offset"])
        r = await rb.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": q})
        committed[q] = int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else -1
    return maxes, committed


@dataclass
class Consumed:
    """What a real client's push consumer got: how many of the expected bodies never arrived
    (and some of them), bodies nobody expected, the offsets the client held at the end
    (``broker:queueId`` → offset; Java only), and text for failure messages."""

    missing_count: int
    missing: list[str]
    unexpected: int
    client_offsets: dict[str, int] | None
    context: str


def java_consume(program: tuple[Path, Path], home: Path, namesrv: str, topic: str, group: str, expect: int, *,
                 prefix: str = "sr-", expression: str = "*", timeout: float = 45) -> Consumed:
    """A Java DefaultMQPushConsumer until it has ``<prefix>0 .. <prefix><expect-1>`` (or the timeout)."""
    got = run_java(program, home, "consume", f"namesrv={namesrv}", f"topic={topic}", f"expect={expect}",
                   f"group={group}", f"prefix={prefix}", f"expression={expression}", f"timeout={timeout}",
                   timeout=timeout + 60, jvm=(FAST_REBALANCE,))
    return Consumed(int(got["missing_count"]), list(got["missing"]), int(got["unexpected"]), dict(got["offsets"]),
                    json.dumps(got))


def cpp_consume(compat_python: Path, home: Path, namesrv: str, topic: str, group: str, expect: int, *,
                prefix: str = "sr-", expression: str = "*", timeout: float = 45) -> Consumed:
    """The C++ client's push consumer (``driver.py push-consume``) until it has the ``expect`` bodies."""
    driver = Driver(compat_python, namesrv, home)
    events = driver.run("push-consume", "--topic", topic, "--group", group, "--expression", expression,
                        "--expect", str(expect), "--timeout", str(timeout), "--linger", "6", timeout=timeout + 60)
    bodies = {str(e["body"]) for e in events if e["event"] == "msg" and e["result"] == "ok"}
    missing = [f"{prefix}{i}" for i in range(expect) if f"{prefix}{i}" not in bodies]
    unexpected = len(bodies - {f"{prefix}{i}" for i in range(expect)})
    done = [e for e in events if e["event"] == "done"]
    return Consumed(len(missing), missing[:20], unexpected, None,
                    f"done: {done}; {len(bodies)} distinct bodies; {cpp_log_tail(home, 3000)}")
