"""``make bench-compare``'s bookkeeping: what a ``--cell``/``--mode`` selection runs, how rounds are
combined, the page saved after every cell, the index of saved runs (also of pages written before
the JSON format 2), and the streamed driver output. No Java, no servers: fast."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from bench.compare import java, results
from bench.compare.__main__ import can_drop_caches, parse_args, select, settle_page_cache
from bench.compare.results import FAILOVER, FAILOVER_CONFIG, QUORUM_ALLACK, QUORUM_BASE

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


# -- selection --------------------------------------------------------------------------------------


def test_the_default_runs_every_mode_the_quorum_and_the_failover_cell() -> None:
    matrix, quorum, failover = select(None, None)
    assert list(matrix) == ["ASYNC_FLUSH", "SYNC_FLUSH", "ASYNC_MASTER+slave", "SYNC_MASTER+slave"]
    assert matrix["SYNC_FLUSH"] == results.CELLS
    assert matrix["SYNC_MASTER+slave"] == ("produce:64", "batch:16")
    assert quorum and failover


def test_one_cell_in_one_mode() -> None:
    matrix, quorum, failover = select(["produce:64"], ["sync_flush"])
    assert matrix == {"SYNC_FLUSH": ("produce:64",)} and not quorum and not failover


def test_cells_without_a_mode_run_in_every_mode_that_has_them() -> None:
    matrix, _, _ = select(["consume,batch:16"], None)
    assert matrix == {"ASYNC_FLUSH": ("batch:16", "consume"), "SYNC_FLUSH": ("batch:16", "consume"),
                      "ASYNC_MASTER+slave": ("batch:16",), "SYNC_MASTER+slave": ("batch:16",)}


def test_only_the_failover_cell() -> None:
    assert select(["failover"], None) == ({}, False, True)
    assert select(["quorum", "failover"], None) == ({}, True, True)


def test_a_mode_alone_runs_no_controller_mode_cell_and_accepts_the_short_names() -> None:
    matrix, quorum, failover = select(None, ["SYNC_MASTER", "ASYNC_MASTER+slave"])
    assert list(matrix) == ["SYNC_MASTER+slave", "ASYNC_MASTER+slave"] and not quorum and not failover


def test_unknown_cells_and_modes_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown cell 'produce:8'"):
        select(["produce:8"], None)
    with pytest.raises(ValueError, match="unknown mode 'DLEDGER'"):
        select(None, ["DLEDGER"])
    with pytest.raises(SystemExit):
        parse_args(["--cell", "nope"])
    with pytest.raises(SystemExit):
        parse_args(["--rounds", "0"])


def test_rounds_default_to_three() -> None:
    args = parse_args([])
    assert args.rounds is None  # main(): 3, or 1 with --short
    assert parse_args(["--rounds", "5", "--cell", "failover"]).selection == ({}, False, True)


# -- combining rounds -------------------------------------------------------------------------------


def produce(tps: float, p99: float = 10.0, errors: int = 0, cell: str = "produce:64") -> dict[str, Any]:
    return {"cell": cell, "tps": tps, "sent_ok": int(tps * 5), "broker_cpu_s": 1.0, "errors": errors,
            "error_kinds": {"SendStatus FLUSH_SLAVE_TIMEOUT": errors} if errors else {},
            "latency": {"p50_ms": 1.0, "p99_ms": p99, "p999_ms": 2 * p99}}


def m(system: str, config: str, rnd: int, cell: str, result: dict[str, Any],
      load: tuple[float, float] = (1.0, 2.0)) -> dict[str, Any]:
    return {"system": system, "config": config, "round": rnd, "cell": cell, "result": result, "load": list(load)}


def test_the_median_round_is_shown_and_errors_are_summed() -> None:
    ms = [m("ours", "ASYNC_FLUSH", 0, "produce:64", produce(900, errors=1)),
          m("ours", "ASYNC_FLUSH", 1, "produce:64", produce(1200, p99=7.0)),
          m("ours", "ASYNC_FLUSH", 2, "produce:64", produce(1000, p99=9.0, errors=2))]
    cell = results.combine(ms)[("ours", "ASYNC_FLUSH", "produce:64")]
    assert cell.rounds == [900, 1200, 1000] and cell.median == 1000
    assert cell.chosen["latency"]["p99_ms"] == 9.0  # the median round's own latency
    assert cell.chosen["errors"] == 3 and cell.chosen["error_kinds"] == {"SendStatus FLUSH_SLAVE_TIMEOUT": 3}
    assert cell.loads == [[1.0, 2.0]] * 3


def test_a_failed_round_is_not_a_figure() -> None:
    ms = [m("apache", "SYNC_FLUSH", 0, "consume", {"cell": "consume", "failed": "driver exited 1", "errors": 1}),
          m("apache", "SYNC_FLUSH", 1, "consume", {"cell": "consume", "tps": 5000.0})]
    cell = results.combine(ms)[("apache", "SYNC_FLUSH", "consume")]
    assert cell.rounds == [None, 5000.0] and cell.median == 5000.0


def test_e2e_and_failover_medians_are_latency_and_rto() -> None:
    assert results.key_metric("e2e", produce(0, p99=4.5, cell="e2e")) == 4.5
    assert results.key_metric(FAILOVER, {"rto_s": 0.52}) == 0.52
    assert results.key_metric(FAILOVER, {"rto_s": None}) is None


# -- the page -------------------------------------------------------------------------------------------


def run_data(started: str = "2026-11-25T18:05:00Z") -> dict[str, Any]:
    return {
        "format": 2, "argv": ["--rounds", "2"], "started": started,
        "machine": {"nproc": 2, "cpu_model": "AMD EPYC", "memory_gib": 23.5, "kernel": "6.1", "python": "3.11.7",
                    "java": "openjdk 17", "apache_rocketmq": "5.4.0", "loadavg_at_start": [3.2, 2.0, 1.5]},
        "ours": {"commit": "abc1234", "source": "commit abc1234"},
        "settings": {"seconds": 5.0, "warmup": 1.0, "server_warmup": 8.0, "body": 1024, "batch": 32, "queues": 8,
                     "e2e_rate": 1000, "consume_seconds": 30.0, "apache_broker_jvm": ["-Xms2g", "-Xmx2g"],
                     "failover": {"layout": "3 controllers, 1 master + 2 slaves", "how": "kill -9"}},
        "selection": {"modes": ["ASYNC_FLUSH"], "cells": ["produce:64", "quorum", "failover"], "rounds": 2},
        "measurements": [], "problems": [],
    }


def failover_result(rto: float | None, acked: int = 1000, lost: int = 0) -> dict[str, Any]:
    return {"cell": FAILOVER, "rto_s": rto, "routed_s": 0.1, "last_failure_s": 0.2, "acked": acked,
            "acked_before_kill": 600, "failed_sends": 40, "lost": lost, "duplicates": 0,
            "error_kinds": {"RemotingConnectException: connect to 127.0.0.1:1 failed": 40}}


def fill(page: results.Page) -> None:
    for rnd, (o, a) in enumerate([(1100.0, 1000.0), (1300.0, 1000.0)]):
        page.add("ours", "ASYNC_FLUSH", rnd, "produce:64", produce(o), (2.5, 3.5))
        page.add("apache", "ASYNC_FLUSH", rnd, "produce:64", produce(a), (3.0, 4.0))
        page.add("ours", QUORUM_BASE, rnd, "produce:64", produce(1000.0), (1.0, 1.5))
        page.add("ours", QUORUM_ALLACK, rnd, "produce:64", produce(850.0), (1.0, 1.5))
        page.add("ours", FAILOVER_CONFIG, rnd, FAILOVER, failover_result(0.5 + rnd * 0.1), (2.0, 2.0))
        page.add("apache", FAILOVER_CONFIG, rnd, FAILOVER, failover_result(3.0), (2.0, 2.0))


def test_every_cell_is_saved_at_once_and_the_page_says_it_is_partial(tmp_path: Path) -> None:
    page = results.Page(run_data(), tmp_path)
    page.add("ours", "ASYNC_FLUSH", 0, "produce:64", produce(1100.0), (2.5, 3.5))
    saved = json.loads((tmp_path / "compare-2026-11-25-1805.json").read_text())
    assert [x["result"]["tps"] for x in saved["measurements"]] == [1100.0]
    assert saved["complete"] is False
    md = (tmp_path / "compare-2026-11-25-1805.md").read_text()
    assert "**partial**" in md and "1,100" in md
    assert "partial: " in (tmp_path / "README.md").read_text()
    assert not list(tmp_path.glob("*.tmp"))


def test_the_page_names_commit_machine_rounds_and_load(tmp_path: Path) -> None:
    page = results.Page(run_data(), tmp_path)
    fill(page)
    page.save(complete=True)
    md = (tmp_path / "compare-2026-11-25-1805.md").read_text()
    assert "commit abc1234" in md and "2 cores (AMD EPYC), 23.5 GiB RAM" in md and "complete" in md
    # per round: each system's figures, each round's ratio, the median, the load at start → end
    assert "| ASYNC_FLUSH | produce:64 | 1,100, 1,300 | 1,000, 1,000 | 1.10, 1.30 | **1.20** | 2.5→3.5, 2.5→3.5 |" in md
    assert "| produce:64 | 1,000, 1,000 | 850, 850 | 0.85, 0.85 | **0.85** (met)" in md
    assert "RTO ours / Apache (median): **0.18** (met)" in md
    assert "| ours | 2 | 0.60 |" in md and "RemotingConnectException" in md
    data = json.loads((tmp_path / "compare-2026-11-25-1805.json").read_text())
    assert data["complete"] is True
    assert data["headline"] == ("produce:64 ASYNC_FLUSH 1.20; 1 of 1 throughput cells ≥ 1.0 (lowest produce:64 "
                                "ASYNC_FLUSH 1.20); failover RTO ours 0.55 s (lost 0) / Apache 3.00 s (lost 0), "
                                "ratio 0.18; quorum acks / SYNC_MASTER produce:64 0.85")


def test_a_lost_message_and_a_failover_without_a_new_master_show(tmp_path: Path) -> None:
    page = results.Page(run_data(), tmp_path)
    page.add("ours", FAILOVER_CONFIG, 0, FAILOVER, failover_result(None, lost=3), (1.0, 1.0))
    page.add("ours", FAILOVER_CONFIG, 1, FAILOVER, {"cell": FAILOVER, "failed": "driver exited 1", "errors": 1},
             (1.0, 1.0))
    page.problem("apache", FAILOVER_CONFIG, 0, "did not start: controller-n0 exited (1)")
    md = (tmp_path / "compare-2026-11-25-1805.md").read_text()
    assert "| ours | 2 | - | -, - | 1,000 | 3 | 0 |" in md
    assert "| ours | 2 | failed: driver exited 1 |" in md
    assert "apache controller mode, 1 master + 2 slaves round 1: did not start" in md


def test_nothing_is_written_without_a_folder() -> None:
    page = results.Page(run_data(), None)
    page.add("ours", "ASYNC_FLUSH", 0, "produce:64", produce(1.0), (0.0, 0.0))
    assert page.save(complete=True) is None and page.data["complete"] is True


# -- the index -------------------------------------------------------------------------------------


def test_pages_written_before_format_2_give_their_ratios() -> None:
    v1 = results.legacy_ratios((RESULTS / "compare-2026-11-22.md").read_text())
    assert v1[("ASYNC_FLUSH", "produce:64")] == 0.96 and v1[("SYNC_MASTER+slave", "batch:16")] == 0.30
    assert v1[("SYNC_FLUSH", "consume")] == 1.24 and ("ASYNC_FLUSH", "e2e") not in v1
    run2 = results.legacy_ratios((RESULTS / "compare-2026-11-22-run2.md").read_text())
    assert run2[("ASYNC_FLUSH", "produce:64")] == 1.55 and run2[("SYNC_MASTER+slave", "batch:16")] == 0.40


def test_the_index_lists_every_run_newest_first(tmp_path: Path) -> None:
    for name in ("compare-2026-11-22.md", "compare-2026-11-22.json", "compare-2026-11-22-run2.md"):
        (tmp_path / name).write_bytes((RESULTS / name).read_bytes())
    older = results.Page(run_data("2026-11-24T09:00:00Z"), tmp_path)
    older.add("ours", "ASYNC_FLUSH", 0, "produce:64", produce(500.0), (1.0, 1.0))
    newer = results.Page(run_data("2026-11-25T18:05:00Z"), tmp_path)
    fill(newer)
    newer.save(complete=True)
    lines = [x for x in (tmp_path / "README.md").read_text().splitlines() if x.startswith("| [")]
    assert [x.split("]")[0][3:] for x in lines] == ["compare-2026-11-25-1805.md", "compare-2026-11-24-0900.md",
                                                    "compare-2026-11-22-run2.md", "compare-2026-11-22.md"]
    assert "| abc1234 | produce:64 ASYNC_FLUSH 1.20;" in lines[0]
    assert "| partial: no cell measured on both systems |" in lines[1]
    assert "produce:64 ASYNC_FLUSH 1.55; 8 of 14 throughput cells ≥ 1.0 (lowest batch:16 SYNC_MASTER+slave 0.40)" \
        in lines[2]
    assert "| 5d3b426 | produce:64 ASYNC_FLUSH 0.96;" in lines[3]


# -- the streamed driver ----------------------------------------------------------------------------


def fake_driver(script: str) -> list[str]:
    return [sys.executable, "-c", script]


def test_cells_and_results_arrive_as_the_driver_prints_them(tmp_path: Path) -> None:
    script = ("import sys, time\n"
              "print('CELL produce:1', flush=True)\n"
              "sys.stderr.write('progress\\n')\n"
              "print('noise')\n"
              "print('RESULT {\"cell\": \"produce:1\", \"tps\": 5.0}', flush=True)\n"
              "print('CELL consume', flush=True)\n"
              "sys.exit(3)\n")
    events: list[Any] = []
    run = java.stream_driver(fake_driver(script), timeout=30, stderr_path=tmp_path / "err.log",
                             on_start=lambda c: events.append(("start", c)), on_result=lambda r: events.append(r))
    assert events == [("start", "produce:1"), {"cell": "produce:1", "tps": 5.0}, ("start", "consume")]
    assert run.returncode == 3 and not run.timed_out and run.results == [{"cell": "produce:1", "tps": 5.0}]
    assert (tmp_path / "err.log").read_text() == "progress\n"


def test_a_driver_that_runs_over_its_time_is_killed(tmp_path: Path) -> None:
    started = time.monotonic()
    run = java.stream_driver(fake_driver("print('CELL e2e', flush=True)\nimport time\ntime.sleep(60)\n"), timeout=1,
                             stderr_path=tmp_path / "err.log")
    assert run.timed_out and run.returncode is None and time.monotonic() - started < 20


def test_the_quorum_cell_takes_sync_master_from_the_sync_master_mode_when_that_ran() -> None:
    ms = [m("ours", "SYNC_MASTER+slave", 0, "produce:64", produce(1000.0)),
          m("apache", "SYNC_MASTER+slave", 0, "produce:64", produce(900.0)),
          m("ours", QUORUM_ALLACK, 0, "produce:64", produce(700.0))]
    cells = results.combine(ms)
    assert results.quorum_ratios(cells) == {"produce:64": 0.7}
    assert "| produce:64 | 1,000 | 700 | 0.70 | **0.70** (not met)" in "\n".join(results.quorum_lines(cells))
    # its own SYNC_MASTER run, when there is one, comes first
    cells = results.combine([*ms, m("ours", QUORUM_BASE, 0, "produce:64", produce(875.0))])
    assert results.quorum_ratios(cells) == {"produce:64": 0.8}


# -- the timer cell ------------------------------------------------------------------------------------


def test_the_timer_cell_runs_by_default_and_when_named_but_not_with_modes_or_other_cells_alone() -> None:
    from bench.compare.__main__ import select_timer

    assert select_timer(None, None) is True
    assert select_timer(["timer"], None) is True and select_timer(["failover,timer"], None) is True
    assert select_timer(["failover"], None) is False and select_timer(None, ["ASYNC_FLUSH"]) is False
    args = parse_args(["--cell", "timer", "--rounds", "1"])
    assert args.timer is True and args.selection == ({}, False, False)


def timer_result(p99: float, plain: float, timer_: float, **extra: Any) -> dict[str, Any]:
    from bench.compare import timer

    r = {"n": 2000, "window_s": 60.0, "send_errors": 0, "received": 2000, "early": 0, "p50": p99 / 2,
         "p99": p99, "max": p99 + 100, "plain_msgs_s": plain, "timer_msgs_s": timer_, "plain_errors": 0,
         "timer_errors": 0, "broker_cpu_s": 12.5, **extra}
    return timer.tally(r)


def test_a_timer_result_counts_failed_sends_missing_and_early_timers_as_errors() -> None:
    r = timer_result(1000.0, 4000.0, 3000.0, send_errors=2, received=1990, early=1, timer_errors=5)
    assert r["error_kinds"] == {"failed timer send (delivery part)": 2, "timer never delivered": 8,
                                "failed timer send (throughput part)": 5, "timer delivered early": 1}
    assert r["errors"] == 16
    assert timer_result(1000.0, 4000.0, 3000.0)["errors"] == 0
    assert results.key_metric("timer", r) == 3000.0


def test_the_timer_section_shows_medians_ratios_every_round_and_the_headline(tmp_path: Path) -> None:
    data = run_data()
    data["settings"]["timer"] = {"precision": 1000, "n": 2000, "window": 60.0, "throughput": 10000,
                                 "threads": 64, "size": 1024}
    page = results.Page(data, tmp_path)
    page.add("ours", "timerPrecisionMs=1000", 0, "timer", timer_result(1010.0, 4000.0, 3600.0), (9.0, 10.0))
    page.add("apache", "timerPrecisionMs=1000", 0, "timer", timer_result(1100.0, 5000.0, 4000.0), (10.0, 11.0))
    page.add("ours", "timerPrecisionMs=1000", 1, "timer", {"failed": "ours: no result (exit 1)", "errors": 1},
             (9.0, 9.0))
    page.save(complete=True)
    md = (tmp_path / "compare-2026-11-25-1805.md").read_text()
    assert "## Timer messages" in md and "`timerPrecisionMs=1000`" in md and "2,000 timers spread over 60.0 s" in md
    assert "| ours | 2 | 505 / 1,010 / 1,110 | 0 | 0 | 4,000 | 3,600 | 90% | 1 |" in md
    assert "| apache | 1 | 550 / 1,100 / 1,200 | 0 | 0 | 5,000 | 4,000 | 80% | 0 |" in md
    assert "Timer sends ours / Apache (median msgs/s): **0.90**; plain sends ours / Apache 0.80" in md
    assert "| ours | 1 | 505 / 1,010 / 1,110 | 0 | 2,000 / 2,000 | 4,000 | 3,600 | 90% | 12.5 | 9.0→10.0 |" in md
    assert "| ours | 2 | failed: ours: no result (exit 1) |" in md
    assert "ours timerPrecisionMs=1000 round 2 timer: failed: ours: no result" in md
    headline = json.loads((tmp_path / "compare-2026-11-25-1805.json").read_text())["headline"]
    assert headline == ("timer sends ours / Apache 0.90, timer / plain ours 90%, Apache 80%, "
                        "delivery p99 ours 1,010 ms / Apache 1,100 ms")
    assert headline in (tmp_path / "README.md").read_text()
    # no throughput cell: the matrix table stays out
    assert "## Throughput and latency" not in md


# -- the page cache between the systems' runs ---------------------------------------------------------


def test_the_page_says_whether_the_page_cache_was_dropped_between_runs(tmp_path: Path) -> None:
    for state, expected in (("dropped", "the page cache written back and dropped before each system's run"),
                            ("kept: --keep-page-cache given",
                             "the page cache not dropped between runs (--keep-page-cache given)")):
        data = run_data()
        data["settings"]["page_cache"] = state
        page = results.Page(data, tmp_path)
        fill(page)
        page.save(complete=True)
        assert expected in (tmp_path / "compare-2026-11-25-1805.md").read_text()
    old = run_data()  # a run saved before the setting was recorded says nothing about it
    page = results.Page(old, tmp_path)
    fill(page)
    page.save(complete=True)
    assert "page cache" not in (tmp_path / "compare-2026-11-25-1805.md").read_text()


def test_settling_the_page_cache_writes_3_to_the_knob_and_says_when_it_cannot(tmp_path: Path) -> None:
    knob = tmp_path / "drop_caches"
    assert can_drop_caches(knob) == f"{knob} does not exist"
    knob.write_text("0\n")
    assert can_drop_caches(knob) is None
    assert settle_page_cache(knob) >= 0.0
    assert knob.read_text() == "3\n"
    knob.chmod(0o444)
    if os.access(knob, os.W_OK):  # root writes anything: the refusal is only observable otherwise
        return
    assert can_drop_caches(knob) == f"{knob} is not writable (needs root)"
    with pytest.raises(PermissionError):
        settle_page_cache(knob)


def test_keep_page_cache_is_an_option() -> None:
    assert parse_args(["--cell", "produce:1", "--mode", "ASYNC_FLUSH", "--keep-page-cache"]).keep_page_cache
    assert not parse_args(["--cell", "produce:1", "--mode", "ASYNC_FLUSH"]).keep_page_cache
