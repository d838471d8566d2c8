"""Parsing accuracy of :mod:`rocket.analytics.mining` on the LogHub samples, without Spark.

The same steps as the logs job (header regex, drain3 with the system's
settings, file order) on each system's ``*_2k.log`` and its ground truth.
Used by ``rocket analytics accuracy`` and ``bench/bench_analytics.py``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocket.analytics import loghub
from rocket.analytics.accuracy import grouping_accuracy
from rocket.analytics.mining import mine


@dataclass(slots=True)
class SystemAccuracy:
    """One system's result: accuracy in [0, 1], lines, unparsed lines, templates mined, seconds."""

    system: str
    accuracy: float
    lines: int
    unparsed: int
    templates: int
    seconds: float
    drain_published: float | None


def evaluate_system(root: Path, system: str) -> SystemAccuracy | None:
    """Mine ``system``'s sample under ``root`` and score it; ``None`` without log or ground truth."""
    truth = loghub.load_ground_truth(root, system)
    if truth is None or not truth.lines:
        return None
    t0 = time.perf_counter()
    contents: list[str] = []
    parsed_idx: list[int] = []
    for i, line in enumerate(truth.lines):
        p = loghub.parse_header(system, line)
        if p is not None:
            contents.append(p.content)
            parsed_idx.append(i)
    result = mine(contents, system)
    predicted: list[Any] = [f"unparsed-{i}" for i in range(len(truth.lines))]
    for i, cid in zip(parsed_idx, result.cluster_ids, strict=True):
        predicted[i] = cid
    n = min(len(truth.event_ids), len(predicted))
    acc = grouping_accuracy(truth.event_ids[:n], predicted[:n])
    return SystemAccuracy(system, acc, n, len(truth.lines) - len(parsed_idx), len(result.templates),
                          time.perf_counter() - t0, loghub.DRAIN_PUBLISHED_ACCURACY.get(system))


def evaluate_loghub(root: str | Path | None = None) -> list[SystemAccuracy]:
    """:func:`evaluate_system` for every system found under ``root`` (default: found)."""
    folder = Path(root) if root else loghub.find_loghub_dir()
    if folder is None:
        return []
    results = [evaluate_system(folder, s) for s in loghub.SYSTEMS]
    return [r for r in results if r is not None]


def print_table(results: list[SystemAccuracy], stream: Any = None) -> None:
    """Per system: accuracy beside Drain's published figure; then both means."""
    stream = stream or sys.stdout
    print(f"{'system':10} {'accuracy':>8} {'Drain':>6} {'lines':>6} {'unparsed':>8} {'templates':>9}", file=stream)
    for r in results:
        d = "" if r.drain_published is None else f"{r.drain_published:.3f}"
        print(f"{r.system:10} {r.accuracy:>8.3f} {d:>6} {r.lines:>6} {r.unparsed:>8} {r.templates:>9}",
              file=stream)
    if results:
        mean = sum(r.accuracy for r in results) / len(results)
        drains = [r.drain_published for r in results if r.drain_published is not None]
        dmean = sum(drains) / len(drains) if drains else float("nan")
        print(f"{'mean':10} {mean:>8.3f} {dmean:>6.3f}  ({len(results)} systems; target >= "
              f"{loghub.DRAIN_PUBLISHED_MEAN:.3f})", file=stream)
