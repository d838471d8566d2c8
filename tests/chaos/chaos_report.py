"""The checker's summary of one nemesis: a line on stdout (``pytest -s``) and, when
``$CHAOS_REPORT`` names a file, one JSON line appended to it (``make chaos`` prints the table)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import orjson

from rocket.percentiles import percentile

#: Runs of each nemesis: ``make chaos`` sets ``CHAOS_RUNS`` (20); ``make test`` runs each once.
RUNS = max(1, int(os.environ.get("CHAOS_RUNS", "1")))


def spread(values: Sequence[float]) -> str:
    """``p50 x s, p99 y s`` of ``values`` (nearest rank), or ``—`` when there are none."""
    if not values:
        return "—"
    v = sorted(values)
    if len(v) == 1:
        return f"{v[0]:.2f} s"
    return f"p50 {percentile(v, 50):.2f} s, p99 {percentile(v, 99):.2f} s, max {v[-1]:.2f} s"


def report(nemesis: str, runs: int, acked: int, lost: int, duplicates: int, **figures: Any) -> None:
    """Print the checker's verdict for ``nemesis`` (every acknowledged id consumed or not) and
    append it to ``$CHAOS_REPORT``; ``figures``: more columns (text)."""
    extra = "; ".join(f"{k} {v}" for k, v in figures.items())
    print(f"\n[chaos] {nemesis}: {runs} runs, {acked} acknowledged, {lost} lost, {duplicates} duplicates"
          + (f"; {extra}" if extra else ""), flush=True)
    path = os.environ.get("CHAOS_REPORT")
    if path:
        with open(path, "ab") as out:
            out.write(orjson.dumps({"nemesis": nemesis, "runs": runs, "acknowledged": acked, "lost": lost,
                                    "duplicates": duplicates, **figures}) + b"\n")


def table(path: str) -> str:
    """The Markdown table of the JSON lines :func:`report` appended to ``path``."""
    rows = []
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                rows.append(orjson.loads(line))
    out = ["| nemesis | runs | acknowledged | lost | duplicates | figures |", "|---|---|---|---|---|---|"]
    for r in rows:
        figures = "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in r.items()
                            if k not in ("nemesis", "runs", "acknowledged", "lost", "duplicates"))
        out.append(f"| {r['nemesis']} | {r['runs']} | {r['acknowledged']:,} | {r['lost']} | {r['duplicates']} | "
                   f"{figures} |")
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.chaos.chaos_report REPORT.jsonl")
    try:
        print(table(sys.argv[1]))
    except FileNotFoundError:
        sys.exit(f"{sys.argv[1]}: no nemesis reported (did every test fail before its report?)")
