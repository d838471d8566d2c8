"""Grouping accuracy on tiny hand-made ground truth (no Spark), and the one default setting on the
LogHub 2k samples, scored on the selection and report systems."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from rocket.analytics import loghub
from rocket.analytics.accuracy import grouping_accuracy
from rocket.analytics.evaluate import (
    REPORT_SYSTEMS,
    SELECTION_SYSTEMS,
    SETTING_GRID,
    choose,
    evaluate_loghub,
    grid_settings,
    score_grid,
)
from rocket.analytics.jobs.logs import topic_accuracy
from rocket.analytics.mining import DEFAULT_SETTINGS


def test_perfect_grouping_with_other_ids() -> None:
    assert grouping_accuracy(["E1", "E1", "E2", "E3"], [7, 7, 1, 2]) == 1.0


def test_merged_groups_count_as_wrong_for_every_member() -> None:
    # E1 and E2 merged into template 1: none of those 3 lines is right; E3 alone is right.
    assert grouping_accuracy(["E1", "E1", "E2", "E3"], [1, 1, 1, 2]) == pytest.approx(0.25)


def test_split_group_is_wrong_for_every_member() -> None:
    # E1 split in two templates: all four E1 lines are wrong, E2 right.
    assert grouping_accuracy(["E1"] * 4 + ["E2"], [1, 1, 2, 2, 3]) == pytest.approx(0.2)


def test_singletons_and_empty() -> None:
    assert grouping_accuracy([], []) == 1.0
    assert grouping_accuracy(["A", "B", "C"], [1, 2, 3]) == 1.0
    with pytest.raises(ValueError, match="2 true labels but 1"):
        grouping_accuracy(["A", "B"], [1])


def test_matches_the_loghub_evaluator_definition() -> None:
    # A worked example: predicted groups {0,1,2} {3} {4,5}; truth {0,1} {2} {3} {4,5}.
    truth = ["A", "A", "B", "C", "D", "D"]
    pred = [1, 1, 1, 2, 3, 3]
    # correct lines: 3 (group {3} = truth {3}) and 4, 5; lines 0..2 share a mixed group.
    assert grouping_accuracy(truth, pred) == pytest.approx(3 / 6)


def test_topic_accuracy_matches_lines_by_number_then_by_text() -> None:
    truth = loghub.GroundTruth("HDFS", ["E1", "E1", "E2"], ["a <*>", "a <*>", "b"], ["a 1", "a 2", "b"])
    # line numbers given for two, the third found by its text; an unknown line is left out
    rows = [(1, 10, "a 1", "a <*>"), (None, 10, "a 2", "a <*>"), (3, 11, "b", "b"),
            (None, 12, "not in the ground truth", None)]
    res = topic_accuracy("HDFS", rows, truth)
    assert res["accuracy"] == 1.0 and res["pa"] == 1.0 and res["fga"] == 1.0 and res["fta"] == 1.0
    assert res["lines_evaluated"] == 3
    assert res["ground_truth_lines"] == 3
    assert res["drain_published"] == loghub.DRAIN_PUBLISHED_ACCURACY["HDFS"]


def test_topic_accuracy_unparsed_lines_are_singletons() -> None:
    truth = loghub.GroundTruth("HDFS", ["E1", "E1"], ["x", "x"], ["x 1", "x 2"])
    res = topic_accuracy("HDFS", [(1, None, "x 1", None), (2, 5, "x 2", "x <*>")], truth)
    assert res["accuracy"] == 0.0


def test_loghub_accuracy_with_the_one_default_setting(loghub_truth_root: Path) -> None:
    """Headers learned, one miner setting: every header found, and the figures documented in
    ``rocket.analytics.mining`` (GA 0.981 on the selection systems, 0.993 on the report systems, 0.987 over
    the 12: the issue's target is 0.90)."""
    results = evaluate_loghub(loghub_truth_root)
    assert results, "no system evaluated"
    for r in results:
        assert r.unparsed <= 0.01 * r.lines, f"{r.system}: {r.unparsed} lines did not match the learned header"
        assert 0.0 <= r.pa <= 1.0 and 0.0 <= r.fta <= r.fga + 1e-9 <= 1.0 + 1e-9
    if len(results) == len(loghub.SYSTEMS):
        select = [r.accuracy for r in results if r.system in SELECTION_SYSTEMS]
        report = [r.accuracy for r in results if r.system in REPORT_SYSTEMS]
        assert sum(select) / len(select) >= 0.980
        assert sum(report) / len(report) >= 0.992
        assert sum(select + report) / len(results) >= 0.90


def test_choose_takes_the_best_mean_and_breaks_ties_by_grid_order() -> None:
    a, b, c = (replace(DEFAULT_SETTINGS, variable_threshold=t) for t in (2, 3, 4))
    scores = {a: {"X": 0.5, "Y": 1.0}, b: {"X": 1.0, "Y": 0.5}, c: {"X": 0.9, "Y": 0.1}}
    assert choose(scores, ("X", "Y")) == (a, 0.75)  # a and b tie: the earlier
    assert choose(scores, ("X",)) == (b, 1.0)
    with pytest.raises(ValueError, match="no score for"):
        choose(scores, ("Z",))
    with pytest.raises(ValueError, match="no setting scored"):
        choose({}, ("X",))
    grid = grid_settings()
    assert len(grid) == len(set(grid)) == math.prod(len(v) for v in SETTING_GRID.values())
    assert DEFAULT_SETTINGS in grid


def test_grid_scores_equal_the_evaluation(loghub_truth_root: Path) -> None:
    """The grid's fast path (tokens cached per tokenising setting) gives the GA of evaluate_loghub (mine())."""
    systems = ("HDFS", "Proxifier", "Spark")
    grid = [DEFAULT_SETTINGS, replace(DEFAULT_SETTINGS, variable_tokens="digit", normalize_templates="off",
                                      key_value_separators="=")]
    scores = score_grid(loghub_truth_root, systems, grid=grid)
    for settings in grid:
        assert scores[settings] == {r.system: r.accuracy for r in evaluate_loghub(loghub_truth_root, settings, systems)}
