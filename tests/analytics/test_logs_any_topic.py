"""The logs job on topics of a real cluster: a log format no preset knows, an empty topic, events published
back with ``df.write.format("rocket")`` and read by the real RocketMQ C++ client; the writer's columns."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from rocket.analytics.fixtures import publish
from tests.compat.realclient import CompatVenvError, Driver, ensure_venv

from .nginx_like import TEMPLATES, nginx_lines

APP = "app-logs"
EMPTY = "app-logs-empty"
EVENTS = "app-logs-events"


@pytest.fixture(scope="module")
def app(cluster: Any) -> dict[str, Any]:
    lines, labels = nginx_lines(900, seed=11)
    assert publish(cluster.namesrv, APP, [line.encode() for line in lines], queue_nums=2) == len(lines)
    assert publish(cluster.namesrv, EMPTY, [], queue_nums=1) == 0
    return {"namesrv": cluster.namesrv, "lines": lines, "labels": labels}


@pytest.fixture(scope="module")
def real_client(app: dict[str, Any]) -> Driver:
    try:  # created on first use when missing (tests/compat/realclient.py); fails, never skips, when it cannot
        python = ensure_venv()
    except CompatVenvError as exc:
        pytest.fail(f"the real RocketMQ client is not available: {exc}", pytrace=False)
    return Driver(python, app["namesrv"], Path(tempfile.mkdtemp(prefix="analytics-cpp-home-")))


def _pull_all(driver: Driver, topic: str, expect: int, group: str) -> list[dict[str, Any]]:
    events = driver.run("pull-consume", "--topic", topic, "--group", group, "--expect", str(expect),
                        "--timeout", "30", timeout=60)
    return [e for e in events if e["event"] == "msg"]


def test_unknown_format_mined_and_events_published(app: dict[str, Any], tmp_path: Path, spark: Any,
                                                   real_client: Driver) -> None:
    from rocket.analytics.jobs.logs import run_logs_job

    out = tmp_path / "logs"
    summary = run_logs_job(app["namesrv"], [APP, EMPTY], out, events_topic=EVENTS)
    t = summary["topics"][APP]
    assert t["lines"] == len(app["lines"]) and t["parsed"] == len(app["lines"]) and t["skipped"] == {}
    assert t["templates"] == len(TEMPLATES)
    assert {k for k in t["levels"]} <= {"ERROR", "WARN", "INFO"}
    empty = summary["topics"][EMPTY]
    assert empty["lines"] == 0 and empty["empty"] is True
    ev = summary["events"]
    assert ev["new_templates"] == len(TEMPLATES) and ev["published"] == ev["new_templates"] + ev["error_spikes"]

    # the real C++ client reads the events back
    msgs = _pull_all(real_client, EVENTS, ev["published"], "CID_EVENTS_1")
    assert len(msgs) == ev["published"]
    assert sum(m["tags"] == "new_template" for m in msgs) == len(TEMPLATES)
    assert {m["keys"] for m in msgs} == {APP}
    assert all(m["body_head"].startswith('{"count": ') for m in msgs if m["tags"] == "new_template")
    # the driver prints bodies of up to 200 characters: the short ones are whole JSON events
    short = [json.loads(m["body"]) for m in msgs if m["body"]]
    assert short and all(b["topic"] == APP and b["type"] in ("new_template", "error_spike") for b in short)

    # a second run into the same --out knows these templates: no new_template event
    again = run_logs_job(app["namesrv"], [APP], out, events_topic=EVENTS)
    assert again["events"]["new_templates"] == 0


def test_write_columns_as_the_kafka_sink(app: dict[str, Any], spark: Any, real_client: Driver) -> None:
    topic = "analytics-write"
    publish(app["namesrv"], topic, [], queue_nums=2)
    rows = [(topic, f"k{i}", "T" if i % 2 else "U", {"myprop": f"v{i}"}, f"body {i}".encode()) for i in range(40)]
    df = spark.createDataFrame(rows, schema="topic string, key string, tags string, properties map<string,string>, "
                                            "body binary").repartition(3)
    df.write.format("rocket").mode("append").option("namesrv", app["namesrv"]).save()
    msgs = _pull_all(real_client, topic, len(rows), "CID_WRITE_1")
    got = {m["body"]: m for m in msgs}
    assert len(msgs) == len(rows) and set(got) == {f"body {i}" for i in range(40)}
    m7 = got["body 7"]
    assert m7["keys"] == "k7" and m7["tags"] == "T" and m7["props"]["myprop"] == "v7"

    # the topic option for rows without a topic column; a frame without body fails before sending
    spark.createDataFrame([("only body",)], "body string").write.format("rocket").mode("append") \
        .option("namesrv", app["namesrv"]).option("topic", topic).save()
    assert len(_pull_all(real_client, topic, len(rows) + 1, "CID_WRITE_2")) == len(rows) + 1
    with pytest.raises(Exception, match="needs a 'body' column"):
        spark.createDataFrame([("x",)], "value string").write.format("rocket").mode("append") \
            .option("namesrv", app["namesrv"]).option("topic", topic).save()


def _delete_topic(namesrv: str, topic: str) -> None:
    import asyncio

    from rocket.client import Admin

    async def run() -> None:
        async with Admin(namesrv) as admin:
            await admin.delete_topic(topic)

    asyncio.run(run())


def test_topic_deleted_during_a_range_read(app: dict[str, Any]) -> None:
    from rocket.analytics.offsets import parse_offsets
    from rocket.analytics.pull import RocketReadError, SyncPuller

    ns = app["namesrv"]
    for fail in (False, True):
        topic = f"doomed-range-{int(fail)}"
        publish(ns, topic, [f"line {i}".encode() for i in range(200)], queue_nums=1)
        with SyncPuller(ns) as puller:
            ranges = puller.plan([topic], parse_offsets("earliest", default="earliest"),
                                 parse_offsets("latest", default="latest"))
            rng = max(ranges, key=lambda r: r.end - r.start)
            reader = puller.read_range(rng, batch_size=10, window=1, prefer_slave=False, fail_on_data_loss=fail)
            first = next(reader)
            assert len(first) == 10
            _delete_topic(ns, topic)
            if fail:
                with pytest.raises(RocketReadError, match="TOPIC_NOT_EXIST"):
                    list(reader)
            else:
                rest = sum(len(b) for b in reader)  # ends early, no error
                assert rest < rng.end - rng.start - 10


def test_topic_deleted_before_the_read_is_reported_as_unread(app: dict[str, Any], spark: Any,
                                                             tmp_path: Path) -> None:
    from rocket.analytics.jobs.common import InputSpec, input_frame, planned_lines
    from rocket.analytics.jobs.logs import analyze_logs

    ns = app["namesrv"]
    publish(ns, "doomed-logs", [line.encode() for line in app["lines"][:300]], queue_nums=1)
    spec = InputSpec(namesrv=ns, topics=("doomed-logs", APP), fail_on_data_loss=False)
    planned = planned_lines(spec)
    assert planned["doomed-logs"] == 300
    _delete_topic(ns, "doomed-logs")  # after the job planned its input, before Spark reads it
    summary = analyze_logs(input_frame(spark, spec), tmp_path / "out", input_info=spec.describe(),
                           planned=planned, report=False)
    assert summary["topics"]["doomed-logs"]["lines"] == 0
    assert summary["topics"]["doomed-logs"]["skipped"] == {"unread": 300}
    assert summary["topics"][APP]["lines"] == len(app["lines"])
    assert summary["totals"]["skipped_by_reason"]["unread"] == 300


def _events(namesrv: str, topic: str) -> list[dict[str, Any]]:
    from rocket.analytics.offsets import parse_offsets
    from rocket.analytics.pull import SyncPuller

    out: list[dict[str, Any]] = []
    with SyncPuller(namesrv) as puller:
        for rng in puller.plan([topic], parse_offsets("earliest", default="earliest"),
                               parse_offsets("latest", default="latest")):
            for msgs in puller.read_range(rng, prefer_slave=False):
                out.extend(json.loads(m.body) for m in msgs)
    return out


def test_follow_publishes_a_new_template_of_the_next_micro_batch(app: dict[str, Any], spark: Any,
                                                                 tmp_path: Path) -> None:
    from rocket.analytics.jobs.common import InputSpec
    from rocket.analytics.jobs.logs import follow_logs

    ns = app["namesrv"]
    topic, events_topic = "follow-logs", "follow-events"
    publish(ns, topic, [line.encode() for line in app["lines"][:300]], queue_nums=2)
    out = tmp_path / "follow"
    query = follow_logs(spark, InputSpec(namesrv=ns, topics=(topic,)), out, trigger_seconds=1,
                        events_topic=events_topic)
    try:
        query.processAllAvailable()
        state = json.loads((out / "state" / "templates.json").read_text())
        assert len(state[topic]) == len(TEMPLATES)
        assert sum(e["type"] == "new_template" for e in _events(ns, events_topic)) == len(TEMPLATES)
        new = [f"2024/03/06 11:00:0{i} [crit] 12#0: *{i} SSL_do_handshake() failed (SSL: error:{i}) while SSL "
               f"handshaking, client: 10.0.0.{i}" for i in range(5)]
        publish(ns, topic, [line.encode() for line in new], queue_nums=2)
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    state = json.loads((out / "state" / "templates.json").read_text())
    assert len(state[topic]) == len(TEMPLATES) + 1
    news = [e for e in _events(ns, events_topic) if e["type"] == "new_template"]
    assert len(news) == len(TEMPLATES) + 1
    ssl = [e for e in news if "SSL_do_handshake()" in e["template"]]
    assert len(ssl) == 1 and ssl[0]["count"] == 5
    assert (out / "checkpoint" / "offsets").is_dir()
