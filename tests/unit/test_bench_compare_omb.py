"""``make bench-compare``'s ``omb`` cell (fixed-rate latency after the OpenMessaging Benchmark's
``1-topic-16-partitions-1kb``): which modes run it, how both systems get the same absolute rates,
and its section, headline and the run's elapsed time on the page. No Java, no servers: fast."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bench.compare import results
from bench.compare.__main__ import OmbRates, parse_args, select
from bench.compare.results import OMB

# -- selection --------------------------------------------------------------------------------------


def test_the_default_run_has_the_omb_cell_in_async_flush_only() -> None:
    matrix, _, _ = select(None, None)
    assert matrix["ASYNC_FLUSH"] == (*results.CELLS, OMB)
    assert OMB not in matrix["SYNC_FLUSH"] and OMB not in matrix["SYNC_MASTER+slave"]


def test_the_omb_cell_alone() -> None:
    assert select([OMB], None) == ({"ASYNC_FLUSH": (OMB,)}, False, False)
    assert select(["produce:64,omb"], ["ASYNC_FLUSH"])[0] == {"ASYNC_FLUSH": ("produce:64", OMB)}


def test_a_selection_that_runs_nothing_is_refused() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--cell", OMB, "--mode", "SYNC_FLUSH"])
    assert parse_args(["--cell", "timer"]).timer


# -- the same absolute rates on both systems ----------------------------------------------------------


def test_every_run_of_a_mode_uses_the_rates_of_our_first_maximum() -> None:
    rates = OmbRates()
    assert rates.given("ours", "ASYNC_FLUSH", 0) is None  # ours first: fractions of its own maximum
    rates.record("ours", "ASYNC_FLUSH", 0, {"rates": [2500.0, 5000.0, 8000.0]})
    for system, rnd in (("apache", 0), ("apache", 1), ("ours", 1), ("ours", 2), ("apache", 2)):
        assert rates.given(system, "ASYNC_FLUSH", rnd) == [2500.0, 5000.0, 8000.0]
        rates.record(system, "ASYNC_FLUSH", rnd, {"rates": [2500.0, 5000.0, 8000.0]})
    rates.record("ours", "ASYNC_FLUSH", 2, {"rates": [1.0, 2.0, 3.0]})  # later maxima do not move them
    assert rates.given("apache", "ASYNC_FLUSH", 2) == [2500.0, 5000.0, 8000.0]
    assert rates.given("apache", "SYNC_FLUSH", 0) is None  # per mode


def test_without_any_rates_of_ours_apache_uses_its_own_maximum() -> None:
    rates = OmbRates()
    assert rates.given("apache", "ASYNC_FLUSH", 1) is None
    rates.record("ours", "ASYNC_FLUSH", 0, {"cell": OMB, "failed": "driver exited 1", "rates": [1.0]})
    rates.record("apache", "ASYNC_FLUSH", 0, {"rates": [9.0]})
    assert rates.given("apache", "ASYNC_FLUSH", 0) is None


# -- the page --------------------------------------------------------------------------------------------


def lat(p50: float, p99: float, p999: float, top: float | None = None) -> dict[str, Any]:
    return {"samples": 1000, "p50_ms": p50, "p99_ms": p99, "p999_ms": p999, "max_ms": top or 2 * p999}


def phase(rate: float, pub: tuple[float, float, float], e2e: tuple[float, float, float],
          errors: int = 0) -> dict[str, Any]:
    n = int(rate * 5)
    return {"phase": "rate", "rate": rate, "seconds": 5.0, "sent": n, "acked": n, "received": n,
            "achieved_rate": rate, "publish_from_intended": lat(*pub), "publish": lat(*pub),
            "publish_delay": lat(0.05, 0.5, 1.0), "e2e": lat(*e2e), "errors": errors, "error_kinds": {}}


def omb_result(max_rate: float, scale: float, rates_from: str = "own maximum") -> dict[str, Any]:
    rates = [2000.0, 4000.0, 6400.0]
    return {"cell": OMB, "queues": 16, "size": 1024, "window": 1000, "max_rate": max_rate, "rates_from": rates_from,
            "fractions": [0.25, 0.5, 0.8], "rates": rates,
            "phases": [phase(r, (1.0 * scale * (i + 1), 5.0 * scale * (i + 1), 9.0 * scale * (i + 1)),
                             (2.0 * scale * (i + 1), 6.0 * scale * (i + 1), 10.0 * scale * (i + 1)))
                       for i, r in enumerate(rates)],
            "duplicates": 0, "errors": 0, "error_kinds": {}}


def run_data() -> dict[str, Any]:
    return {
        "format": 2, "argv": ["--cell", "omb"], "started": "2026-11-25T21:05:00Z",
        "machine": {"nproc": 2, "cpu_model": "AMD EPYC", "memory_gib": 23.5, "kernel": "6.1", "python": "3.11.7",
                    "java": "openjdk 17", "apache_rocketmq": "5.4.0", "loadavg_at_start": [3.2, 2.0, 1.5]},
        "ours": {"commit": "abc1234", "source": "commit abc1234"},
        "settings": {"seconds": 5.0, "warmup": 1.0, "server_warmup": 6.0, "body": 1024, "batch": 32, "queues": 8,
                     "e2e_rate": 1000, "consume_seconds": 20.0, "apache_broker_jvm": ["-Xms2g", "-Xmx2g"],
                     "omb": {"queues": 16, "window": 1000, "max_seconds": 5.0, "fractions": [0.25, 0.5, 0.8],
                             "modes": ["ASYNC_FLUSH"]}},
        "selection": {"modes": ["ASYNC_FLUSH"], "cells": ["omb"], "rounds": 3},
        "measurements": [], "problems": [],
    }


def test_the_omb_section_shows_medians_ours_beside_apache_every_round_and_the_headline(tmp_path: Path) -> None:
    page = results.Page(run_data(), tmp_path, began=0.0)
    # ours: rounds with scales 1, 3, 2 (median 2); Apache 2, 2, 4 (median 2... of each percentile)
    for rnd, (so, sa) in enumerate([(1.0, 2.0), (3.0, 2.0), (2.0, 4.0)]):
        ours = omb_result(8000.0 + rnd, so)
        if rnd == 1:
            ours["max"] = {"consume_rate": 7000.0}
        page.add("ours", "ASYNC_FLUSH", rnd, OMB, ours, (4.0, 5.0))
        page.add("apache", "ASYNC_FLUSH", rnd, OMB, omb_result(5000.0 + rnd, sa, "given"), (5.0, 6.0))
    page.save(complete=True)
    md = (tmp_path / "compare-2026-11-25-2105.md").read_text()
    assert "## Fixed-rate latency (OpenMessaging Benchmark style, `1-topic-16-partitions-1kb`)" in md
    assert "1 topic of 16 queues" in md and "25%, 50%, 80% of our maximum" in md
    # 80 %: ours' medians are scale 2 x 3 (the third phase), Apache's scale 2 x 3: ratio 1.00
    assert ("| ASYNC_FLUSH | 80% | 6,400 | 6.00 / 30.00 / 54.00 | 6.00 / 30.00 / 54.00 | 1.00 / 1.00 / 1.00 | "
            "12.00 / 36.00 / 60.00 | 12.00 / 36.00 / 60.00 | 1.00 / 1.00 / 1.00 | 6,400 / 6,400 |") in md
    assert "| ASYNC_FLUSH | 25% | 2,000 | 2.00 / 10.00 / 18.00 |" in md
    assert "ours 8,000, 8,001 (consumer 7,000), 8,002 msgs/s; apache 5,000, 5,001, 5,002 msgs/s" in md
    # every round of every rate, with the send delay, the counts and the load
    assert ("| ASYNC_FLUSH | ours | 2 | 8,001 | own maximum | 4,000 | 6.00 / 30.00 / 54.00 / 108.00 | 0.50 | "
            "12.00 / 36.00 / 60.00 / 120.00 | 20,000 / 20,000 / 20,000 | 0 | 4.0→5.0 |") in md
    assert "| ASYNC_FLUSH | apache | 1 | 5,000 | given | 2,000 |" in md
    data = json.loads((tmp_path / "compare-2026-11-25-2105.json").read_text())
    assert data["headline"] == ("omb ASYNC_FLUSH at 6,400 msgs/s (80%): publish p99 ours 30.0 / Apache 30.0 ms, "
                                "end-to-end p99 ours 36.0 / Apache 36.0 ms")
    assert data["elapsed_s"] > 0 and "Took " in md and " min in all." in md
    # the matrix stays out (no throughput cell ran)
    assert "## Throughput and latency" not in md
    assert results.key_metric(OMB, omb_result(8000.0, 1.0)) == 8000.0


def test_a_failed_omb_round_is_listed_and_left_out_of_the_medians(tmp_path: Path) -> None:
    page = results.Page(run_data(), tmp_path)
    page.add("ours", "ASYNC_FLUSH", 0, OMB, omb_result(8000.0, 1.0), (1.0, 1.0))
    page.add("ours", "ASYNC_FLUSH", 1, OMB, {"cell": OMB, "failed": "driver exited 1 during the cell", "errors": 1},
             (1.0, 1.0))
    md = (tmp_path / "compare-2026-11-25-2105.md").read_text()
    assert "| ASYNC_FLUSH | ours | 2 | failed: driver exited 1 during the cell |" in md
    assert "| ASYNC_FLUSH | 80% | 6,400 | 3.00 / 15.00 / 27.00 | - | - |" in md
    assert "ours ASYNC_FLUSH round 2 omb: failed: driver exited 1" in md
    assert "**partial**" in md and "So far" not in md  # no start time given: no elapsed figure


def test_an_omb_phase_with_errors_counts_them() -> None:
    r = omb_result(8000.0, 1.0)
    r["phases"][2] = phase(6400.0, (1.0, 2.0, 3.0), (1.0, 2.0, 3.0), errors=3)
    r["errors"], r["error_kinds"] = 3, {"missing: 3 acknowledged messages not received": 3}
    page = results.Page(run_data(), None)
    page.add("ours", "ASYNC_FLUSH", 0, OMB, r, (1.0, 1.0))
    md = results.render_page(page.data)
    assert ("| 6,400 | 1.00 / 2.00 / 3.00 / 6.00 | 0.50 | 1.00 / 2.00 / 3.00 / 6.00 | 32,000 / 32,000 / 32,000 "
            "| 3 |") in md
    assert "missing: 3 acknowledged messages not received (x3)" in md


def test_the_page_says_how_the_systems_shared_the_machine() -> None:
    page = results.Page(run_data(), None)
    r = {"cell": "produce:64", "tps": 1000.0, "sent_ok": 5000, "broker_cpu_s": 1.0, "errors": 0,
         "latency": {"p50_ms": 1.0, "p99_ms": 2.0, "p999_ms": 3.0}}
    page.add("ours", "ASYNC_FLUSH", 0, "produce:64", r, (1.0, 1.0))
    assert "on each fresh cluster first" in results.render_page(page.data)  # a run saved before either schedule
    page.data["settings"]["schedule"] = "alone, ours fresh"
    md = results.render_page(page.data)
    assert "each system runs all the rounds of a mode alone, Apache on one cluster kept" in md and "frozen" not in md
    page.data["settings"]["schedule"] = "alone"  # the run that kept ours too
    assert "alone, on one cluster started for them" in results.render_page(page.data)


def test_a_saved_run_of_frozen_kept_clusters_still_renders_their_idle_cpu() -> None:
    page = results.Page(run_data(), None)
    for rnd, cpu in enumerate([0.1, 0.4, 0.2]):
        r = {"cell": "produce:64", "tps": 1000.0, "sent_ok": 5000, "broker_cpu_s": 1.0, "errors": 0,
             "latency": {"p50_ms": 1.0, "p99_ms": 2.0, "p999_ms": 3.0}, "peer_cpu_s": cpu}
        page.add("ours", "ASYNC_FLUSH", rnd, "produce:64", r, (1.0, 1.0))
    page.data["settings"]["kept_clusters"] = True
    md = results.render_page(page.data)
    assert "It used 0.20 CPU s per cell meanwhile (median over 3 cells, at most 0.40 s)" in md
    assert "at the start of each round's driver (Apache's cluster of a mode is kept" in md
    assert results.peer_cpu_text([]) == ""


# -- each system alone ---------------------------------------------------------------------------------


class _Cluster:
    """Stands in for :class:`servers.Cluster` in :func:`run_targets`: its ``namesrv`` and ``stop``."""

    namesrv = "127.0.0.1:1"

    def __init__(self, system: str, live: set[str]) -> None:
        self.system, self.live = system, live
        live.add(system)

    def stop(self, discard: bool = False) -> None:
        self.live.discard(self.system)


def _settings(tmp_path: Path) -> Any:
    from bench.compare.__main__ import Settings

    return Settings(1.0, 0.0, 1.0, 0.0, tmp_path, tmp_path, None)


def test_each_system_runs_all_its_rounds_with_no_other_cluster_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.compare import __main__ as compare
    from bench.compare import servers

    live: set[str] = set()
    starts: list[str] = []
    measured: list[tuple[str, int, frozenset[str]]] = []
    problems: list[tuple[str, int, str]] = []

    def start(system: str, root: Path) -> Any:
        starts.append(system)
        return _Cluster(system, live)

    def measure(t: Any, rnd: int, cells: tuple[str, ...], settings: Any, record: Any, omb: Any = None) -> None:
        measured.append((t.system, rnd, frozenset(live)))
        if t.system == "apache" and rnd == 0:
            raise servers.ClusterStartError("broker-master exited (1)")

    monkeypatch.setattr(compare, "measure", measure)
    targets = [compare.Target(system, "ASYNC_FLUSH", lambda root, s=system: start(s, root),
                              keep=system in compare.KEEP_SYSTEMS)
               for system in ("ours", "apache")]
    compare.run_targets(targets, ("produce:64",), 3, _settings(tmp_path), lambda *a: None,
                        lambda system, config, rnd, why: problems.append((system, rnd, why)))
    assert [(s, r) for s, r, _ in measured] == [("ours", 0), ("ours", 1), ("ours", 2),
                                                ("apache", 0), ("apache", 1), ("apache", 2)]
    assert all(up == {system} for system, _, up in measured)  # alone on the machine, every round
    # ours fresh per round; Apache's kept for all its rounds, started afresh only after it died
    assert starts == ["ours", "ours", "ours", "apache", "apache"]
    assert problems == [("apache", 0, "stopped early: broker-master exited (1)")]
    assert not live and all(t.cluster is None for t in targets)


def test_which_system_goes_first_alternates_between_modes_and_ours_leads_where_omb_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.compare import __main__ as compare

    orders: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(compare, "run_targets",
                        lambda targets, *a, **k: orders.append((targets[0].config, [t.system for t in targets])))
    matrix = {"ASYNC_FLUSH": ("produce:1", OMB), "SYNC_FLUSH": ("produce:1",),
              "ASYNC_MASTER+slave": ("batch:16",), "SYNC_MASTER+slave": (OMB,)}
    compare.run_all(results.Page(run_data(), None), _settings(tmp_path), matrix, False, False, 3, 0.0)
    assert orders == [("ASYNC_FLUSH", ["ours", "apache"]), ("SYNC_FLUSH", ["apache", "ours"]),
                      ("ASYNC_MASTER+slave", ["ours", "apache"]), ("SYNC_MASTER+slave", ["ours", "apache"])]
    orders.clear()
    compare.run_all(results.Page(run_data(), None), _settings(tmp_path), {"SYNC_FLUSH": ("produce:1",)}, False,
                    False, 3, 0.0, systems=("apache",))
    assert orders == [("SYNC_FLUSH", ["apache"])]


def test_a_discarded_cluster_is_killed_at_once(tmp_path: Path) -> None:
    import time

    from bench.compare import servers

    procs = [servers.Proc(name, role, ["sleep", "60"], tmp_path / f"{name}.log", 1)
             for name, role in (("namesrv", "nameserver"), ("broker-master", "master"))]
    cluster = servers.Cluster("ours", tmp_path, "127.0.0.1:1", procs)
    for p in procs:
        p.start()
    try:
        started = time.monotonic()
        cluster.stop(discard=True)
        assert time.monotonic() - started < 5 and not any(p.alive() for p in procs)
    finally:
        for p in procs:
            if p.alive() and p.popen is not None:
                p.popen.kill()


def test_broker_busy_errors_differing_only_in_queue_figures_are_one_kind() -> None:
    r = omb_result(8000.0, 1.0)
    busy = "MQBrokerException: [TIMEOUT_CLEAN_QUEUE]broker busy, period in queue: {}ms, size of queue: {}"
    r["errors"], r["error_kinds"] = 3, {busy.format(210, 1625): 1, busy.format(214, 1067): 2}
    page = results.Page(run_data(), None)
    page.add("apache", "ASYNC_FLUSH", 0, OMB, r, (1.0, 1.0))
    md = results.render_page(page.data)
    assert "period in queue: [..]ms, size of queue: [..] (x3)" in md


def test_the_page_names_the_backlog_bound_of_the_maximum_when_the_run_had_one(tmp_path: Path) -> None:
    # OMB's maximum is one the consumer keeps up with (its RateController ramps down past 1,000
    # messages of receive backlog); runs before 2026-11-26 had no such bound and their pages say none
    for backlog, out in ((1000, tmp_path / "with"), (None, tmp_path / "without")):
        data = run_data()
        if backlog:
            data["settings"]["omb"]["backlog"] = backlog
        out.mkdir()
        page = results.Page(data, out, began=0.0)
        page.add("ours", "ASYNC_FLUSH", 0, OMB, omb_result(8000.0, 1.0), (4.0, 5.0))
        page.add("apache", "ASYNC_FLUSH", 0, OMB, omb_result(5000.0, 1.0, "given"), (5.0, 6.0))
        page.save(complete=True)
        md = (out / "compare-2026-11-25-2105.md").read_text()
        named = "at most 1,000 acknowledged but not yet received, so that it is a rate the consumer keeps up with"
        assert (named in md) is bool(backlog)
        assert "at most 1,000 unanswered" in md
