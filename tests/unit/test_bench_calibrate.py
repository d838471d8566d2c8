"""The page-cache probe of bench/calibrate.py and where the benchmark pages show it."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.calibrate import PageCacheCost, page_cache_write_cost
from bench.compare import results

from tests.unit.test_bench_compare_omb import run_data


def test_the_probe_times_both_passes_and_leaves_no_file(tmp_path: Path) -> None:
    cost = page_cache_write_cost(tmp_path, mib=4)
    assert cost.new > 0 and cost.rewritten > 0
    assert list(tmp_path.iterdir()) == []


def test_the_probe_refuses_nothing_to_write_and_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        page_cache_write_cost(tmp_path, mib=0)
    with pytest.raises(FileNotFoundError):
        page_cache_write_cost(tmp_path / "absent", mib=1)


def test_the_cost_reads_per_kib_of_message() -> None:
    cost = PageCacheCost(new=2.0, rewritten=0.25)
    assert cost.new_us_per_kib == pytest.approx(2.0e6 / 1048576)
    assert cost.text() == "page cache: new data 2.00 s of CPU per GiB (1.9 µs per KiB), cached pages rewritten 0.25 s"


def test_the_page_shows_the_probe_when_the_run_measured_it() -> None:
    page = results.Page(run_data(), None)
    assert "Page cache at start" not in results.render_page(page.data)  # a run saved before the probe
    page.data["machine"]["page_cache_s_per_gib"] = {"new": 2.36, "rewritten": 0.27}
    assert ("Page cache at start: new data 2.36 s of CPU per GiB, cached pages rewritten 0.27 s"
            in results.render_page(page.data))
