"""Grouping accuracy on tiny hand-made ground truth (no Spark), and the per-system miner settings
on the LogHub 2k samples (target: Drain's published mean, 0.881)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocket.analytics import loghub
from rocket.analytics.accuracy import grouping_accuracy
from rocket.analytics.evaluate import evaluate_loghub
from rocket.analytics.jobs.logs import topic_accuracy


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
    rows = [(1, 10, "a 1"), (None, 10, "a 2"), (3, 11, "b"), (None, 12, "not in the ground truth")]
    res = topic_accuracy("HDFS", rows, truth)
    assert res["accuracy"] == 1.0
    assert res["lines_evaluated"] == 3
    assert res["ground_truth_lines"] == 3
    assert res["drain_published"] == loghub.DRAIN_PUBLISHED_ACCURACY["HDFS"]


def test_topic_accuracy_unparsed_lines_are_singletons() -> None:
    truth = loghub.GroundTruth("HDFS", ["E1", "E1"], ["x", "x"], ["x 1", "x 2"])
    res = topic_accuracy("HDFS", [(1, None, "x 1"), (2, 5, "x 2")], truth)
    assert res["accuracy"] == 0.0


def test_loghub_accuracy_reaches_drain_published_mean(loghub_truth_root: Path) -> None:
    results = evaluate_loghub(loghub_truth_root)
    assert results, "no system evaluated"
    by_system = {r.system: r.accuracy for r in results}
    mean = sum(by_system.values()) / len(by_system)
    if len(by_system) == len(loghub.SYSTEMS):
        assert mean >= loghub.DRAIN_PUBLISHED_MEAN, by_system
    for r in results:
        assert r.unparsed == 0, f"{r.system}: {r.unparsed} lines did not match the header format"
        # never clearly worse than Drain's published figure on any system
        assert r.accuracy >= (r.drain_published or 0) - 0.01, (r.system, r.accuracy)
