"""Accuracy of the default pipeline on the LogHub samples, without Spark; and the setting selection.

The same steps as the logs job with no per-system configuration: the header
is learned from the first :data:`SAMPLE_LINES` lines
(:func:`rocket.analytics.header.learn_format`), the content mined with
:data:`rocket.analytics.mining.DEFAULT_SETTINGS`. Scores per system: grouping
accuracy (GA), parsing accuracy (PA), FGA and FTA (:mod:`rocket.analytics.accuracy`).

:func:`select_setting` scores a grid of miner settings on the *selection*
systems only (:data:`SELECTION_SYSTEMS`) and reports the chosen one on the
others (:data:`REPORT_SYSTEMS`), so the reported figure is not tuned on.
Used by ``rocket analytics accuracy`` and ``bench/bench_analytics.py``.
"""

from __future__ import annotations

import functools
import itertools
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rocket.analytics import header, loghub
from rocket.analytics.accuracy import grouping_accuracy, parsing_accuracy, template_f1
from rocket.analytics.mining import DEFAULT_SETTINGS, MinerSettings, _mine_tokens, merge_templates, mine, tokenize

#: Lines a topic's header is learned from.
SAMPLE_LINES = 1000
#: Systems the default setting was chosen on (every other system of the 12 in ``loghub.SYSTEMS``).
SELECTION_SYSTEMS: tuple[str, ...] = loghub.SYSTEMS[0::2]
#: Systems the chosen setting is reported on (never used to choose it).
REPORT_SYSTEMS: tuple[str, ...] = loghub.SYSTEMS[1::2]


@dataclass(slots=True)
class SystemAccuracy:
    """One system's scores in [0, 1] (GA ``accuracy``, ``pa``, ``fga``, ``fta``), lines, lines whose header
    did not match the learned format, templates mined, seconds, the learned format's name."""

    system: str
    accuracy: float
    lines: int
    unparsed: int
    templates: int
    seconds: float
    drain_published: float | None
    pa: float = 0.0
    fga: float = 0.0
    fta: float = 0.0
    header: str = ""


def split_contents(lines: list[str], fmt: header.HeaderFormat | None) -> tuple[list[str], int]:
    """Each line's content by ``fmt`` (the whole line where it does not match) and how many did not match."""
    out: list[str] = []
    missed = 0
    for line in lines:
        fields = fmt.split(line) if fmt is not None else None
        if fields is None:
            missed += 1
            out.append(line.strip())
        else:
            out.append(fields["Content"])
    return out, missed


_Sample = tuple[loghub.GroundTruth, int, header.HeaderFormat | None, list[str], int]


@functools.lru_cache(maxsize=32)
def _sample(root: Path, system: str) -> _Sample | None:
    """``system``'s ground truth, lines scored, learned header, contents and header misses (cached: the
    header does not depend on the miner setting)."""
    truth = loghub.load_ground_truth(root, system)
    if truth is None or not truth.lines:
        return None
    n = min(len(truth.event_ids), len(truth.lines))
    fmt = header.learn_format(truth.lines[:n][:SAMPLE_LINES])
    contents, missed = split_contents(truth.lines[:n], fmt)
    return truth, n, fmt, contents, missed


def evaluate_system(root: Path, system: str, settings: MinerSettings = DEFAULT_SETTINGS) -> SystemAccuracy | None:
    """Learn the header, mine ``system``'s sample under ``root`` with ``settings`` and score it.

    ``None`` without log or ground truth.
    """
    t0 = time.perf_counter()
    sample = _sample(Path(root), system)
    if sample is None:
        return None
    truth, n, fmt, contents, missed = sample
    result = mine(contents, settings)
    predicted_templates = [result.templates[c] for c in result.cluster_ids]
    f1 = template_f1(truth.event_ids[:n], truth.templates[:n], result.cluster_ids, predicted_templates)
    return SystemAccuracy(
        system, grouping_accuracy(truth.event_ids[:n], result.cluster_ids), n, missed if fmt else n,
        len(result.templates), time.perf_counter() - t0, loghub.DRAIN_PUBLISHED_ACCURACY.get(system),
        pa=parsing_accuracy(truth.templates[:n], predicted_templates), fga=f1.fga, fta=f1.fta,
        header=fmt.name if fmt else "none")


def evaluate_loghub(root: str | Path | None = None, settings: MinerSettings = DEFAULT_SETTINGS,
                    systems: tuple[str, ...] = loghub.SYSTEMS) -> list[SystemAccuracy]:
    """:func:`evaluate_system` for every system of ``systems`` found under ``root`` (default: found)."""
    folder = Path(root) if root else loghub.find_loghub_dir()
    if folder is None:
        return []
    results = [evaluate_system(folder, s, settings) for s in systems]
    return [r for r in results if r is not None]


#: The grid :func:`select_setting` searches (every combination: 3·3·2·2·3·2·3·3 = 1,944 settings).
SETTING_GRID: dict[str, tuple[Any, ...]] = {
    "variable_threshold": (2, 3, 4),
    "key_value_separators": ("", "=", "=:"),
    "mask_hosts": (False, True),
    "mask_quantities": (False, True),
    "merge_min_constant": (0.5, 0.75, 1.01),
    "root_prefers_rare": (False, True),
    "variable_tokens": ("digit", "numeric", "subword"),
    "normalize_templates": ("khan", "wildcards", "off"),
}


def grid_settings() -> list[MinerSettings]:
    """Every setting of :data:`SETTING_GRID`, in grid order (the order ties are broken in)."""
    return [replace(DEFAULT_SETTINGS, **dict(zip(SETTING_GRID, values, strict=True)))
            for values in itertools.product(*SETTING_GRID.values())]


def _mean(results: list[SystemAccuracy]) -> float:
    return sum(r.accuracy for r in results) / len(results) if results else float("nan")


def score_grid(root: str | Path | None = None, systems: tuple[str, ...] = loghub.SYSTEMS,
               progress: Any = None, grid: list[MinerSettings] | None = None) -> dict[MinerSettings, dict[str, float]]:
    """GA of every setting of ``grid`` (default :func:`grid_settings`) on every system of ``systems`` found
    under ``root`` (``{setting: {system: GA}}``, the GA :func:`evaluate_system` gives; the whole grid on the
    12 systems takes minutes). ``progress(done, total)`` is called after each setting when given."""
    folder = Path(root) if root else loghub.find_loghub_dir()
    samples = [(s, x) for s in systems if folder is not None and (x := _sample(folder, s)) is not None]
    grid = grid_settings() if grid is None else grid
    scores: dict[MinerSettings, dict[str, float]] = {s: {} for s in grid}
    # the same steps as mining.mine (one chunk: a sample is below chunk_lines), with each system's tokens
    # computed once per tokenising setting; a test checks the figures equal mine()'s
    tokenizing = ("key_value_separators", "mask_hosts", "mask_quantities", "variable_tokens")
    by_tokens: dict[tuple[Any, ...], list[MinerSettings]] = {}
    for settings in grid:
        by_tokens.setdefault(tuple(getattr(settings, f) for f in tokenizing), []).append(settings)
    done = 0
    for group in by_tokens.values():
        tokens = {system: [tokenize(c, group[0]) for c in sample[3]] for system, sample in samples}
        for settings in group:
            for system, (truth, n, _, _, _) in samples:
                texts = _mine_tokens(tokens[system], settings)
                canonical = merge_templates(texts, settings.merge_min_constant,
                                            normalize=settings.normalize_templates)
                scores[settings][system] = grouping_accuracy(truth.event_ids[:n], [canonical[t] for t in texts])
            done += 1
            if progress is not None:
                progress(done, len(grid))
    return scores


def choose(scores: dict[MinerSettings, dict[str, float]], systems: tuple[str, ...]) -> tuple[MinerSettings, float]:
    """The setting of ``scores`` (in grid order) with the best mean GA over ``systems`` (ties: the earlier)
    and that mean. Raises ``ValueError`` when ``scores`` is empty or lacks one of ``systems``."""
    best: tuple[float, MinerSettings] | None = None
    for settings, per_system in scores.items():
        missing = [s for s in systems if s not in per_system]
        if missing:
            raise ValueError(f"no score for {missing}")
        score = sum(per_system[s] for s in systems) / len(systems)
        if best is None or score > best[0]:
            best = (score, settings)
    if best is None:
        raise ValueError("no setting scored")
    return best[1], best[0]


@dataclass(slots=True)
class Selection:
    """:func:`select_setting`'s answer. ``settings``: chosen on :data:`SELECTION_SYSTEMS`; ``on_select`` /
    ``on_report``: its mean GA there and on :data:`REPORT_SYSTEMS`; ``reverse``: the setting chosen on the
    report systems instead, with its mean GA there and on the selection systems; ``leave_one_out``: per
    system, its GA under the setting chosen on the other systems (``None`` unless asked for)."""

    settings: MinerSettings
    on_select: float
    on_report: float
    reverse: MinerSettings
    reverse_on_report: float
    reverse_on_select: float
    leave_one_out: dict[str, float] | None = None


def select_setting(root: str | Path | None = None, leave_one_out: bool = False, progress: Any = None) -> Selection:
    """Score the grid (:func:`score_grid`) on every found system; the setting with the best mean GA on
    :data:`SELECTION_SYSTEMS` (ties: the earlier in the grid) and its mean GA on :data:`REPORT_SYSTEMS`,
    which never take part in the choice; the reverse split as a check; with ``leave_one_out``, each
    system's GA under the setting chosen on the 11 others. Raises ``ValueError`` when a system lacks."""
    scores = score_grid(root, loghub.SYSTEMS, progress)
    chosen, on_select = choose(scores, SELECTION_SYSTEMS)
    reverse, rev_on_report = choose(scores, REPORT_SYSTEMS)
    loo: dict[str, float] | None = None
    if leave_one_out:
        loo = {}
        for system in loghub.SYSTEMS:
            others = tuple(s for s in loghub.SYSTEMS if s != system)
            loo[system] = scores[choose(scores, others)[0]][system]
    def mean(settings: MinerSettings, systems: tuple[str, ...]) -> float:
        return sum(scores[settings][s] for s in systems) / len(systems)

    return Selection(chosen, on_select, mean(chosen, REPORT_SYSTEMS), reverse, rev_on_report,
                     mean(reverse, SELECTION_SYSTEMS), loo)


def print_table(results: list[SystemAccuracy], stream: Any = None) -> None:
    """Per system: GA beside Drain's published GA, PA, FGA, FTA; then the means (all, selection, report)."""
    stream = stream or sys.stdout
    print(f"{'system':10} {'GA':>6} {'Drain':>6} {'PA':>6} {'FGA':>6} {'FTA':>6} {'lines':>6} {'nohdr':>6} "
          f"{'tmpl':>5}  split", file=stream)
    for r in results:
        d = "" if r.drain_published is None else f"{r.drain_published:.3f}"
        split = "select" if r.system in SELECTION_SYSTEMS else "report"
        print(f"{r.system:10} {r.accuracy:>6.3f} {d:>6} {r.pa:>6.3f} {r.fga:>6.3f} {r.fta:>6.3f} {r.lines:>6} "
              f"{r.unparsed:>6} {r.templates:>5}  {split}", file=stream)
    if results:
        def means(rs: list[SystemAccuracy]) -> str:
            if not rs:
                return "-"
            k = len(rs)
            return (f"GA {sum(r.accuracy for r in rs) / k:.3f} PA {sum(r.pa for r in rs) / k:.3f} "
                    f"FGA {sum(r.fga for r in rs) / k:.3f} FTA {sum(r.fta for r in rs) / k:.3f} ({k} systems)")
        print(f"mean all    {means(results)}; Drain published GA {loghub.DRAIN_PUBLISHED_MEAN:.3f} "
              "(tuned per system)", file=stream)
        print(f"mean select {means([r for r in results if r.system in SELECTION_SYSTEMS])}", file=stream)
        print(f"mean report {means([r for r in results if r.system in REPORT_SYSTEMS])}", file=stream)
