"""Compatibility: Apache RocketMQ's own Java client (5.x, from Maven) against our servers.

Maven fetches the client into a cache folder outside the repository (the first run takes a
minute or two; see ``bench/compare/java.py``), ``javac`` compiles ``bench/compare/Driver.java``
(the load generator of ``make bench-compare``) and one run of its ``roundtrip`` command, against
one NameServer and one broker of ours, does:

* sync sends (SEND_MESSAGE_V2, 310), async sends, and batches of 32 (SEND_BATCH_MESSAGE, 320),
  with tags, keys and a user property; then the same through the broker's VIP port
  (``listenPort - 2``) with a producer that has ``vipChannelEnabled``;
* a DefaultMQPushConsumer of a new group reads everything back (long polling, offset commits
  as oneway UPDATE_CONSUMER_OFFSET, heartbeats);
* a DefaultLitePullConsumer of another group reads everything back again.

Each message is checked: body, tags, keys, user property, timestamps and hosts, and its client
message id (UNIQ_KEY) against the ids the send results reported. If Maven cannot fetch the
client, or javac/java are missing, these tests fail and say why.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench.compare import java

from tests.compat.cluster import start_cluster
from tests.compat.wiretap import Wiretap

pytestmark = [pytest.mark.compat, pytest.mark.timeout(900)]  # the first run downloads the client

SINGLE_KINDS = ("sync", "async", "vip-sync", "vip-async")


@pytest.fixture(scope="module")
def java_client() -> tuple[Path, Path]:
    """(folder of Apache RocketMQ jars, folder of the compiled Driver); fails when unavailable."""
    try:
        lib = java.ensure_jars()
        return lib, java.ensure_driver(lib)
    except java.JavaSetupError as exc:
        pytest.fail(f"the Apache RocketMQ Java client is not available: {exc}", pytrace=False)


@pytest.fixture(scope="module", params=["ASYNC_FLUSH", "SYNC_FLUSH"])
def roundtrip(java_client: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory,
              request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """The driver's ``roundtrip`` result against a fresh NameServer + broker, plus logs for messages;
    once per flush type (SYNC_FLUSH: every send answered after its group commit's fdatasync)."""
    lib, classes = java_client
    root = tmp_path_factory.mktemp("java-client")
    tap = Wiretap(root / "wiretap.jsonl") if os.environ.get("ROCKET_COMPAT_WIRETAP") == "1" else None
    with start_cluster(root / "cluster", brokers=("broker-a",), flush=request.param) as cluster:
        namesrv = tap.nameserver(cluster.namesrv) if tap else cluster.namesrv
        argv = java.driver_argv(lib, classes, root / "home", "roundtrip", f"namesrv={namesrv}", "count=20",
                                "batches=2", "batchSize=32", f"vip={0 if tap else 1}", "consumers=push,pull",
                                "timeout=40", "pullTimeout=15")
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
        results = java.driver_results(proc.stdout)
        result: dict[str, Any] = results[-1] if results else {}
        result["_context"] = (f"driver exit {proc.returncode}; stderr tail:\n"
                              + "\n".join(proc.stderr.splitlines()[-25:])
                              + f"\n--- the Java client's warnings ---\n{_client_warnings(root / 'home')}"
                              + f"\n{cluster.logs()}"
                              + (f"\nwiretap: {root / 'wiretap.jsonl'}" if tap else ""))
        if not results:
            pytest.fail(f"the Java driver printed no result\n{result['_context']}", pytrace=False)
        yield result
    if tap:
        tap.close()


def _client_warnings(home: Path, limit: int = 40) -> str:
    """WARN/ERROR lines (and the exception line after each) of the Java client's logs under ``home``."""
    lines: list[str] = []
    for path in sorted((home / "logs").rglob("*.log")):
        text = path.read_text(errors="replace").splitlines()
        for i, line in enumerate(text):
            if " WARN " in line or " ERROR " in line:
                lines.append(line[:400])
                if i + 1 < len(text) and not text[i + 1][:4].isdigit():
                    lines.append("    " + text[i + 1][:400])
    return "\n".join(lines[-limit:]) or "(none)"


def test_java_producer_sends_everything(roundtrip: dict[str, Any]) -> None:
    """Sync (310), async and batch (320) sends, also through the VIP port: all SEND_OK, ids for each."""
    sent = roundtrip["sent"]
    assert roundtrip["send_errors"] == 0, f"send errors: {roundtrip['send_error_kinds']}\n{roundtrip['_context']}"
    assert sent["sync"] == 20 and sent["async"] == 20 and sent["batch"] == 64, sent
    if "vip-sync" in sent:
        assert sent["vip-sync"] == 4 and sent["vip-async"] == 4 and sent["vip-batch"] == 32, sent


def test_java_push_consumer_receives_single_sends(roundtrip: dict[str, Any]) -> None:
    """Every message sent one at a time comes back once, with its id, body, tags, keys and property."""
    missing = {k: v for k, v in roundtrip["push_missing_by_kind"].items() if k in SINGLE_KINDS}
    assert not missing, f"not received by the push consumer: {missing}\n{roundtrip['_context']}"
    assert roundtrip["push_errors"] == 0, f"{roundtrip['push_error_kinds']}\n{roundtrip['_context']}"


def test_java_push_consumer_receives_batches_with_their_ids(roundtrip: dict[str, Any]) -> None:
    """Each message of a batch comes back under the client id its send result reported."""
    assert roundtrip["push_missing"] == 0, (
        f"missing by kind {roundtrip['push_missing_by_kind']}, {roundtrip['push_unexpected_ids']} ids nobody "
        f"sent, {roundtrip['push_duplicates']} ids received more than once\n{roundtrip['_context']}")
    assert roundtrip["push_unexpected_ids"] == 0 and roundtrip["push_duplicates"] == 0


def test_java_lite_pull_consumer_receives_everything(roundtrip: dict[str, Any]) -> None:
    """A DefaultLitePullConsumer (subscribe mode) reads every message back."""
    assert roundtrip["pull_missing"] == 0 and roundtrip["pull_errors"] == 0, (
        f"missing by kind {roundtrip['pull_missing_by_kind']}, errors {roundtrip['pull_error_kinds']}\n"
        f"{roundtrip['_context']}")
