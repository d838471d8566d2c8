"""Headers learned with no configuration, loghub notation and presets; the default miner and its merge;
the Loghub-2.0 metrics (PA, FGA, FTA) on tiny hand-made cases; bad bodies. No Spark."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from rocket.analytics import header
from rocket.analytics.accuracy import normalize_template, parsing_accuracy, template_f1
from rocket.analytics.jobs.logs import MAX_LINE_BYTES, decode_body, mine_topic_rows
from rocket.analytics.mining import (
    DEFAULT_SETTINGS,
    NORMAL_FORMS,
    VARIABLE_TOKEN_RULES,
    WILDCARD,
    merge_templates,
    mine,
    template_id,
    template_normal_form,
    tokenize,
)

from .nginx_like import TEMPLATES, nginx_lines

SAMPLES = {
    "iso-log4j": ("2024-01-02 03:04:05,678 INFO [main] com.example.Service: started in 35 ms",
                  {"Level": "INFO", "Component": "com.example.Service", "Content": "started in 35 ms"},
                  datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)),
    "iso8601-T-zone": ("2024-01-02T03:04:05.123Z ERROR worker: job 7 failed",
                       {"Level": "ERROR", "Component": "worker", "Content": "job 7 failed"},
                       datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)),
    "syslog": ("Mar  7 10:00:01 web01 cron[4242]: (root) CMD (run-parts /etc/cron.hourly)",
               {"Host": "web01", "Component": "cron", "ComponentPid": "4242",
                "Content": "(root) CMD (run-parts /etc/cron.hourly)"},
               datetime(2020, 3, 7, 10, 0, 1, tzinfo=UTC)),
    "logcat": ("03-17 16:13:38.811  1702  2395 D WindowManager: freezing display",
               {"Level": "D", "Component": "WindowManager", "Content": "freezing display"},
               datetime(2020, 3, 17, 16, 13, 38, 811000, tzinfo=UTC)),
    "apache-error": ("[Sun Dec 04 04:47:44 2005] [notice] workerEnv.init() ok /etc/httpd/conf/workers2.properties",
                     {"Level": "notice", "Content": "workerEnv.init() ok /etc/httpd/conf/workers2.properties"},
                     datetime(2005, 12, 4, 4, 47, 44, tzinfo=UTC)),
    "epoch": ("1700000000 WARN disk: /dev/sda1 is 91% full",
              {"Level": "WARN", "Component": "disk", "Content": "/dev/sda1 is 91% full"},
              datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)),
    "windows-event": ("2016-09-28 04:30:30, Info                  CBS    Loaded Servicing Stack v6.1.7601.23505",
                      {"Level": "Info", "Content": "CBS    Loaded Servicing Stack v6.1.7601.23505"},
                      datetime(2016, 9, 28, 4, 30, 30, tzinfo=UTC)),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_header_learned_without_configuration(name: str) -> None:
    line, expected, when = SAMPLES[name]
    fmt = header.learn_format([line] * 5)
    assert fmt is not None, name
    fields = fmt.split(line)
    assert fields is not None, (name, fmt.name)
    for key, value in expected.items():
        assert fields.get(key, "").strip() == value, (name, key, fields, fmt.name)
    assert header.header_time(fields, 2020) == when, (name, fields)


def test_learned_format_follows_the_majority_and_misses_are_none() -> None:
    lines = [f"2024-01-02 03:04:{i % 60:02d},000 INFO app.Main: tick {i}" for i in range(20)]
    fmt = header.learn_format([*lines, "    at com.example.Foo.bar(Foo.java:12)"])
    assert fmt is not None
    assert fmt.split("    at com.example.Foo.bar(Foo.java:12)") is None
    assert header.learn_format(["just words", "no header at all"]) is None


def test_loghub_notation_and_presets() -> None:
    fmt = header.format_from_loghub("<Date> <Time> <Pid> <Level> <Component>: <Content>")
    fields = fmt.split("081109 203615 148 INFO dfs.DataNode$PacketResponder: PacketResponder 1 terminating")
    assert fields == {"Date": "081109", "Time": "203615", "Pid": "148", "Level": "INFO",
                      "Component": "dfs.DataNode$PacketResponder", "Content": "PacketResponder 1 terminating"}
    assert header.resolve("hdfs") is not None and header.resolve("hdfs").name == "HDFS"  # type: ignore[union-attr]
    assert header.resolve("auto") is None and header.resolve(None) is None
    with pytest.raises(ValueError, match="must end with <Content>"):
        header.format_from_loghub("<Date> <Time>")
    with pytest.raises(ValueError, match="unknown log format preset 'nope'"):
        header.resolve("nope")


def test_unknown_format_mined_into_its_templates() -> None:
    lines, labels = nginx_lines(1500)
    rows = mine_topic_rows([{"topic": "app-logs", "line": line.encode(), "store_ms": 0} for line in lines])
    assert all(r["parsed"] for r in rows)
    templates = [r["template"] for r in rows]
    # one template per generator template, every line in the right one
    groups: dict[str, set[int]] = {}
    for t, k in zip(templates, labels, strict=True):
        groups.setdefault(t, set()).add(k)
    assert len(groups) == len(TEMPLATES) and all(len(v) == 1 for v in groups.values())
    assert {r["level"] for r in rows} == {"ERROR", "WARN", "INFO"}
    assert rows[0]["event_ms"] == int(datetime(2024, 3, 5, 10, 0, 0, tzinfo=UTC).timestamp() * 1000)


def test_mine_is_order_independent_and_ids_are_stable() -> None:
    lines, _ = nginx_lines(600, seed=3)
    a = mine(lines)
    shuffled = lines[:]
    random.Random(1).shuffle(shuffled)
    b = mine(shuffled)
    assert set(a.templates.values()) == set(b.templates.values())
    for tid, text in a.templates.items():
        assert tid == template_id(text)


def test_merge_templates_is_deterministic_and_keeps_specific_templates_apart() -> None:
    templates = ["user <*> logged in", "user bob logged in", "disk <*> full", "<*> <*> <*> full", "a b c d"]
    m1 = merge_templates(templates)
    m2 = merge_templates(list(reversed(templates)))
    assert m1 == m2
    assert m1["user bob logged in"] == "user <*> logged in"
    assert m1["disk <*> full"] == "disk <*> full"  # "<*> <*> <*> full" has too few constants to absorb it
    assert m1["a b c d"] == "a b c d"
    assert merge_templates(templates, 1.01)["user bob logged in"] == "user bob logged in"


def test_metrics_on_hand_made_cases() -> None:
    assert normalize_template("a  <*> <*> b ") == "a <*> b"
    assert parsing_accuracy(["a <*>", "b", "c <*>"], ["a <*>", "b <*>", "c <*><*>"]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="1 true templates but 0 predicted"):
        parsing_accuracy(["a"], [])
    # truth groups {0,1} "a <*>", {2} "b", {3} "c"; predicted {0,1} right text, {2,3} merged
    f = template_f1(["A", "A", "B", "C"], ["a <*>", "a <*>", "b", "c"], [1, 1, 2, 2], ["a <*>", "a <*>", "x", "x"])
    assert (f.pga, f.rga) == (pytest.approx(1 / 2), pytest.approx(1 / 3))
    assert f.fga == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))
    assert (f.pta, f.rta) == (pytest.approx(1 / 2), pytest.approx(1 / 3))
    # right group, wrong text: counts for FGA, not for FTA
    g = template_f1(["A", "A"], ["a <*>", "a <*>"], [5, 5], ["a b", "a b"])
    assert g.fga == 1.0 and g.fta == 0.0
    assert template_f1([], [], [], []).fta == 1.0


def test_bad_bodies_are_skipped_with_a_reason() -> None:
    assert decode_body(b"") == ("", "empty")
    assert decode_body(b"   \r\n") == ("", "empty")
    assert decode_body(b"x" * (MAX_LINE_BYTES + 1)) == ("", "too_long")
    assert decode_body(b"\x00\x01\x02\x03 ELF") == ("", "binary")
    assert decode_body(bytes(range(1, 32)) * 4) == ("", "binary")
    line, why = decode_body(b"caf\xc3\xa9 \xff\xfe ok\n")
    assert why is None and line == "café \ufffd\ufffd ok"
    rows = mine_topic_rows([{"topic": "t", "line": b}
                            for b in (b"", b"\x00bin", b"x" * (1 << 20), b"\xffbad text 1", b"\xffbad text 2")])
    assert [r["skipped"] for r in rows] == ["empty", "binary", "too_long", None, None]
    assert rows[3]["template"] == rows[4]["template"] == f"\ufffdbad text {WILDCARD}"


def test_an_absurd_header_year_keeps_the_store_time() -> None:
    rows = mine_topic_rows([{"topic": "t", "line": f"9127-03-05 10:00:0{i},000 INFO a.B: tick {i}".encode(),
                             "store_ms": 1_700_000_000_000} for i in range(5)])
    assert all(r["parsed"] and r["event_ms"] == 1_700_000_000_000 for r in rows)


def test_template_normal_form_after_khan_et_al() -> None:
    # a token of parameters and punctuation only is one parameter; a run of parameters is one
    assert template_normal_form("<*> close, <*> (<*>) sent, <*> <*> received") == "<*> close, <*> sent, <*> received"
    assert template_normal_form("open <*>:<*> via [<*>] <*>") == "open <*> via <*>"
    # a token with a word in it stays as it is
    assert template_normal_form("blk_<*> id=<*> (<*> KB)") == "blk_<*> id=<*> <*> KB)"
    for form in ("wildcards", "khan"):
        once = template_normal_form("a <*> <*> b (<*>) x_<*> /p/q <*>.<*>", form)
        assert template_normal_form(once, form) == once
    assert template_normal_form("a <*> <*> b", "off") == "a <*> <*> b"
    with pytest.raises(KeyError):
        template_normal_form("a", "nope")


def test_a_parameter_of_varying_token_count_mines_as_one_template() -> None:
    # "Released N locks" where N is written as one token "[1]" or as three "[1, 2, 3]"
    settings = replace(DEFAULT_SETTINGS, normalize_templates="wildcards")
    lines = [f"Released [{i}] locks of session s" for i in range(20)]
    lines += [f"Released [{i}, {i + 1}, {i + 2}] locks of session s" for i in range(20)]
    lines += [f"Acquired [{i}] locks of session s" for i in range(20)]
    result = mine(lines, settings)
    assert set(result.templates.values()) == {"Released <*> locks of session s", "Acquired <*> locks of session s"}
    assert len(set(result.cluster_ids[:40])) == 1
    # without the normal form the two lengths are two templates
    assert len(set(mine(lines, replace(settings, normalize_templates="khan")).cluster_ids[:40])) == 1
    assert len(set(mine(lines, replace(settings, normalize_templates="off")).cluster_ids[:40])) == 2


def test_merge_templates_with_normal_forms_is_order_independent_and_idempotent() -> None:
    templates = ["x <*> <*> done", "x (<*>) done", "x <*> done", "x 7 done", "y <*> z", "y q z", "<*> <*>"]
    m1 = merge_templates(templates, normalize="wildcards")
    assert m1 == merge_templates(list(reversed(templates)), normalize="wildcards")
    assert {m1[t] for t in templates[:4]} == {"x <*> done"}
    assert m1["y q z"] == "y <*> z" and m1["<*> <*>"] == "<*>"
    again = merge_templates(set(m1.values()), normalize="wildcards")
    assert all(again[t] == t for t in m1.values())
    # Khan et al.'s rules: a word joined to a parameter, joined parameters and paths are one parameter
    khan = ["Block rdd_<*>_<*> stored", "Block broadcast_<*>_piece0 stored", "load /a/b/c.so: done", "load <*> done",
            "peer <*>.<*>.<*>.<*>:<*> up", "peer <*> up"]
    k1 = merge_templates(khan, normalize="khan")
    assert k1 == merge_templates(sorted(khan), normalize="khan")
    assert {k1[t] for t in khan[:2]} == {"Block <*> stored"}
    assert k1["load /a/b/c.so: done"] == k1["load <*> done"] == "load <*> done"
    assert k1["peer <*>.<*>.<*>.<*>:<*> up"] == "peer <*> up"
    assert all(merge_templates(set(k1.values()), normalize="khan")[t] == t for t in k1.values())


@pytest.mark.parametrize(("rule", "content", "tokens"), [
    ("digit", "via SOCKS5 on eth0 index:-1 blk_-42", ("via", WILDCARD, "on", WILDCARD, WILDCARD, WILDCARD)),
    ("numeric", "via SOCKS5 on eth0 index:-1 blk_-42 0x1f", ("via", "SOCKS5", "on", "eth0", "index:-1", WILDCARD,
                                                            WILDCARD)),
    ("subword", "via SOCKS5 on eth0 index:-1 blk_-42 0x1f, (12)", ("via", "SOCKS5", "on", "eth0", "index:<*>",
                                                                  "blk_<*>", WILDCARD, WILDCARD)),
])
def test_variable_token_rules(rule: str, content: str, tokens: tuple[str, ...]) -> None:
    assert tokenize(content, replace(DEFAULT_SETTINGS, variable_tokens=rule, key_value_separators="")) == tokens


def test_tokenize_and_normal_forms_are_linear_on_long_lines() -> None:
    # name-like runs without dots once made the host mask quadratic; ~250 KB must take well under a second each
    for rule in VARIABLE_TOKEN_RULES:
        settings = replace(DEFAULT_SETTINGS, variable_tokens=rule)
        for text in ("ab-" * 80_000, "a1" * 120_000, "a." * 120_000, "k=v1 " * 50_000, "(1)" * 80_000):
            t0 = time.perf_counter()
            tokenize(text, settings)
            assert time.perf_counter() - t0 < 5.0, (rule, text[:6])
    for form in NORMAL_FORMS:
        for text in ("<*>" * 80_000 + "x", "(<*>)" * 50_000 + "a", "/a" * 120_000 + " x"):
            t0 = time.perf_counter()
            template_normal_form(text, form)
            assert time.perf_counter() - t0 < 5.0, (form, text[:6])


def test_merge_generalises_inside_tokens_across_partitions() -> None:
    # a part of a token that stayed constant in a small partition ("img21") is merged into the template
    # of a partition where it was a parameter, whatever the order the partitions come in
    templates = ['timed out, upstream: "http://<*>/api/<*>"', 'timed out, upstream: "http://<*>/api/img21"',
                 'timed out, upstream: "http://img67:<*>/api/<*>"', 'timed out, upstream: "ftp://<*>/api/<*>"']
    for order in (templates, list(reversed(templates)), sorted(templates)):
        merged = merge_templates(order)
        assert merged[templates[1]] == merged[templates[2]] == merged[templates[0]] == templates[0]
        assert merged[templates[3]] == templates[3]
    # and the nginx lines of one topic, mined in 10 small partitions, still give one template per generator
    lines, _ = nginx_lines(300, seed=11)
    texts = [t for k in range(10) for t in (lambda r: [r.templates[c] for c in r.cluster_ids])(mine(lines[k::10]))]
    assert len(set(merge_templates(texts).values())) == len(TEMPLATES)
