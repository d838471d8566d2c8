"""The results of ``make bench-compare``: one page per run, saved after every cell, and the index.

A run writes ``bench/results/compare-<YYYY-MM-DD-HHMM>.json`` (UTC start time) and the ``.md``
built from it, again after every measured cell, so a run that is cut keeps what it measured (the
page then says it is partial). The JSON (``"format": 2``) holds:

* ``machine``: cores, CPU model, RAM, kernel, Python, Java, Apache RocketMQ version;
* ``ours``: the commit measured; ``settings``: durations and sizes; ``selection``: modes, cells, rounds;
* ``measurements``: one entry per system, mode, round and cell: the driver's result (msgs/s,
  latency percentiles, errors; for ``failover`` the RTO, acknowledged and lost counts) and the
  1-minute load average when the cell started and ended;
* ``problems``: a system that did not start or stopped early.

The page shows per cell the round with the median key figure (msgs/s; end-to-end p99; RTO), then
every round's figures with the load average, the failover and quorum-ack sections and the errors.
``bench/results/README.md`` lists every saved run, newest first, with its headline ratios
(:func:`update_index`); runs saved before this format are read from their Markdown tables.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Throughput-matrix cells, in the order they run (``Driver.java suite``).
CELLS = ("produce:1", "produce:16", "produce:64", "batch:16", "consume", "e2e")
#: Cells of the replication modes and of the quorum-ack comparison.
REPLICATION_CELLS = ("produce:64", "batch:16")
#: The cells of the controller-mode comparisons.
FAILOVER, QUORUM = "failover", "quorum"
#: The timer-message cell (:mod:`bench.compare.timer`).
TIMER = "timer"
#: The fixed-rate latency cell after the OpenMessaging Benchmark's ``1-topic-16-partitions-1kb``
#: workload (``Driver.java omb``): the modes it runs in, its queues, and the shares of our maximum
#: produce rate it runs at (the same absolute rates on both systems).
OMB = "omb"
OMB_MODES = ("ASYNC_FLUSH",)
OMB_QUEUES = 16
OMB_FRACTIONS = (0.25, 0.5, 0.8)
#: ``--mode`` name -> (flush type, master's brokerRole, with a slave).
MODES = {
    "ASYNC_FLUSH": ("ASYNC_FLUSH", "ASYNC_MASTER", False),
    "SYNC_FLUSH": ("SYNC_FLUSH", "ASYNC_MASTER", False),
    "ASYNC_MASTER+slave": ("ASYNC_FLUSH", "ASYNC_MASTER", True),
    "SYNC_MASTER+slave": ("ASYNC_FLUSH", "SYNC_MASTER", True),
}
#: The two configurations of the quorum-ack cell (ours only): the baseline first.
QUORUM_BASE, QUORUM_ALLACK = "quorum: SYNC_MASTER+slave", "quorum: controller mode, allAckInSyncStateSet+slave"
#: The configuration of the failover cell.
FAILOVER_CONFIG = "controller mode, 1 master + 2 slaves"
#: Targets: quorum acks at least this share of SYNC_MASTER's msgs/s (issue #13); RTO ours <= Apache's.
QUORUM_TARGET = 0.80
BATCH = 32
E2E_RATE = 1000
CELL_LABELS = {
    "produce:1": "1 producer",
    "produce:16": "16 producers",
    "produce:64": "64 producers",
    "batch:16": f"batches of {BATCH}, 16 producers",
}
SYSTEMS = ("ours", "apache")


def _rounds(measurements: list[dict[str, Any]], cell: str) -> list[dict[str, Any]]:
    """The measurements of ``cell``, ours first then Apache (``SYSTEMS`` order), by round."""
    order = {name: i for i, name in enumerate(SYSTEMS)}
    return sorted((m for m in measurements if m["cell"] == cell),
                  key=lambda m: (order.get(m["system"], 9), m["round"]))


def _failed_row(m: dict[str, Any]) -> str:
    """A table row for a round that failed: system, round, the first line of the failure."""
    return (f"| {m['system']} | {m['round'] + 1} | failed: {m['result']['failed'].splitlines()[0][:200]} "
            "| | | | | | | |")


def mode_of(name: str) -> str:
    """The ``--mode`` name for what a user typed: ``SYNC_MASTER`` -> ``SYNC_MASTER+slave``.

    Raises ValueError for an unknown mode.
    """
    key = name.strip().upper().replace("+SLAVE", "+slave")
    if key in ("ASYNC_MASTER", "SYNC_MASTER"):
        key += "+slave"
    if key not in MODES:
        raise ValueError(f"unknown mode {name!r} (one of {', '.join(MODES)})")
    return key


# -- combining rounds -------------------------------------------------------------------------------


def key_metric(cell: str, r: dict[str, Any]) -> float | None:
    """What "median" means for a cell's result: msgs/s; end-to-end p99 ms; failover RTO s.
    None for a failed cell (or a failover without a new master)."""
    if "failed" in r:
        return None
    if cell == FAILOVER:
        v = r.get("rto_s")
        return None if v is None else float(v)
    if cell == "e2e":
        return float(r["latency"]["p99_ms"])
    if cell == TIMER:
        return float(r["timer_msgs_s"])
    if cell == OMB:
        return float(r["max_rate"])
    if cell in CELLS or cell in REPLICATION_CELLS:
        return float(r["tps"])
    return None


@dataclass
class Cell:
    """One cell of one system and mode over its rounds: ``chosen`` is the round with the median
    key figure (errors summed over the rounds), ``rounds`` each round's key figure (None: failed),
    ``loads`` each round's 1-minute load average at start and end."""

    chosen: dict[str, Any]
    rounds: list[float | None] = field(default_factory=list)
    loads: list[list[float]] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        ok = [x for x in self.rounds if x is not None]
        return statistics.median(ok) if ok else None


def combine(measurements: list[dict[str, Any]]) -> dict[tuple[str, str, str], Cell]:
    """(system, config, cell) -> :class:`Cell`, rounds in round order."""
    grouped: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for m in sorted(measurements, key=lambda m: int(m.get("round", 0))):
        grouped.setdefault((m["system"], m["config"], m["cell"]), []).append(m)
    out: dict[tuple[str, str, str], Cell] = {}
    for key, ms in grouped.items():
        cell = key[2]
        values = [key_metric(cell, m["result"]) for m in ms]
        ok = sorted((v, i) for i, v in enumerate(values) if v is not None)
        pick = ms[ok[(len(ok) - 1) // 2][1]] if ok else ms[0]
        chosen = dict(pick["result"])
        chosen["errors"] = sum(int(m["result"].get("errors", 0) or 0) for m in ms)
        kinds: dict[str, int] = {}
        for m in ms:
            for k, v in (m["result"].get("error_kinds") or {}).items():
                kinds[k] = kinds.get(k, 0) + int(v)
        chosen["error_kinds"] = kinds
        out[key] = Cell(chosen, values, [list(m.get("load") or []) for m in ms])
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def _fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


# -- the throughput matrix ----------------------------------------------------------------------------


def _lat(r: dict[str, Any]) -> str:
    lat = r["latency"]
    return f"{lat['p50_ms']:.2f} / {lat['p99_ms']:.2f} / {lat['p999_ms']:.2f}"


def _cpu_us(r: dict[str, Any] | None) -> float | None:
    if r is None or not r.get("sent_ok") or "broker_cpu_s" not in r:
        return None
    return float(r["broker_cpu_s"]) * 1e6 / float(r["sent_ok"])


def build_rows(cells: dict[tuple[str, str, str], Cell]) -> list[dict[str, str]]:
    """Rows of the main table (throughput modes only): mode, metric, ours, apache, ratio (ours /
    Apache), errors (summed over rounds, ours / Apache)."""
    rows: list[dict[str, str]] = []
    for mode in MODES:
        for cell in CELLS:
            o, a = cells.get(("ours", mode, cell)), cells.get(("apache", mode, cell))
            if o is None and a is None:
                continue
            ro = o.chosen if o and o.median is not None else None
            ra = a.chosen if a and a.median is not None else None

            def text(c: Cell | None, r: dict[str, Any] | None, fmt: Any) -> str:
                if r is not None:
                    return str(fmt(r))
                return "failed" if c is not None else "-"

            def errs(c: Cell | None) -> str:
                return "-" if c is None else str(c.chosen.get("errors", 0))

            errors = f"{errs(o)} / {errs(a)}"
            if cell in CELL_LABELS:
                what = CELL_LABELS[cell]
                kind = "batch" if cell.startswith("batch") else "send"
                rows.append({"config": mode, "metric": f"produce msgs/s, {what}", "cell": cell,
                             "ours": text(o, ro, lambda r: _num(r["tps"])),
                             "apache": text(a, ra, lambda r: _num(r["tps"])),
                             "ratio": _fmt_ratio(ratio(o.median if o else None, a.median if a else None)),
                             "errors": errors})
                lat_ratio = "-"
                if ro is not None and ra is not None:
                    lat_ratio = " / ".join(_fmt_ratio(ratio(ro["latency"][k], ra["latency"][k]))
                                           for k in ("p50_ms", "p99_ms", "p999_ms"))
                rows.append({"config": mode, "metric": f"{kind} latency p50 / p99 / p99.9 ms, {what}", "cell": "",
                             "ours": text(o, ro, _lat), "apache": text(a, ra, _lat), "ratio": lat_ratio,
                             "errors": ""})
            elif cell == "consume":
                rows.append({"config": mode, "metric": "consume msgs/s (push consumer, backlog from offset 0)",
                             "cell": cell, "ours": text(o, ro, lambda r: _num(r["tps"])),
                             "apache": text(a, ra, lambda r: _num(r["tps"])),
                             "ratio": _fmt_ratio(ratio(o.median if o else None, a.median if a else None)),
                             "errors": errors})
            elif cell == "e2e":
                lat_ratio = "-"
                if ro is not None and ra is not None:
                    lat_ratio = " / ".join(_fmt_ratio(ratio(ro["latency"][k], ra["latency"][k]))
                                           for k in ("p50_ms", "p99_ms", "p999_ms"))
                metric = f"end-to-end latency p50 / p99 / p99.9 ms at {E2E_RATE:,} msgs/s"
                rows.append({"config": mode, "metric": metric, "cell": "", "ours": text(o, ro, _lat),
                             "apache": text(a, ra, _lat), "ratio": lat_ratio, "errors": errors})
        o64, a64 = cells.get(("ours", mode, "produce:64")), cells.get(("apache", mode, "produce:64"))
        if (o64 or a64) and not MODES[mode][2]:
            co, ca = _cpu_us(o64.chosen if o64 else None), _cpu_us(a64.chosen if a64 else None)
            rows.append({"config": mode, "metric": "broker CPU µs per message, 64 producers", "cell": "",
                         "ours": "-" if co is None else f"{co:.1f}", "apache": "-" if ca is None else f"{ca:.1f}",
                         "ratio": _fmt_ratio(ratio(co, ca)), "errors": ""})
    return rows


def render_table(rows: list[dict[str, str]], apache_version: str) -> str:
    """The rows as a Markdown table."""
    head = ["mode", "metric", "ours", f"Apache RocketMQ {apache_version}", "ours / Apache", "errors (ours / Apache)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---", "---", "---:", "---:", "---:", "---:"]) + "|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['metric']} | {r['ours']} | {r['apache']} | {r['ratio']} | {r['errors']} |")
    return "\n".join(lines)


def _load_text(loads: list[list[float]]) -> str:
    return ", ".join(f"{x[0]:.1f}→{x[1]:.1f}" if len(x) == 2 else "?" for x in loads)


def _values_text(values: list[float | None], fmt: str = "{:,.0f}") -> str:
    return ", ".join("failed" if v is None else fmt.format(v) for v in values)


def per_round_lines(cells: dict[tuple[str, str, str], Cell]) -> list[str]:
    """Every round of every throughput cell: ours and Apache per round, each round's own ratio, the
    median ratio, and the 1-minute load average at each cell's start → end."""
    lines = ["| mode | cell | ours per round | Apache per round | ratio per round | median ratio | "
             "load 1m ours | load 1m Apache |", "|---|---|---|---|---|---:|---|---|"]
    for mode in MODES:
        for cell in CELLS:
            o, a = cells.get(("ours", mode, cell)), cells.get(("apache", mode, cell))
            if o is None and a is None:
                continue
            fmt = "{:.2f} ms p99" if cell == "e2e" else "{:,.0f}"
            per = []
            if o and a:
                per = [ratio(x, y) for x, y in zip(o.rounds, a.rounds, strict=False)]
            med = ratio(o.median if o else None, a.median if a else None)
            each = ", ".join(_fmt_ratio(x) for x in per) or "-"
            lines.append(f"| {mode} | {cell} | {_values_text(o.rounds, fmt) if o else '-'} | "
                         f"{_values_text(a.rounds, fmt) if a else '-'} | {each} "
                         f"| **{_fmt_ratio(med)}** | {_load_text(o.loads) if o else '-'} | "
                         f"{_load_text(a.loads) if a else '-'} |")
    return lines


# -- quorum acks and failover -----------------------------------------------------------------------


def quorum_base(cells: dict[tuple[str, str, str], Cell], cell: str) -> Cell | None:
    """Our SYNC_MASTER figures for the quorum comparison: the quorum cell's own, else (when the run
    had the SYNC_MASTER+slave mode, the same setup) that mode's."""
    return cells.get(("ours", QUORUM_BASE, cell)) or cells.get(("ours", "SYNC_MASTER+slave", cell))


def quorum_ratios(cells: dict[tuple[str, str, str], Cell]) -> dict[str, float | None]:
    """cell -> median msgs/s with allAckInSyncStateSet / median with SYNC_MASTER (ours)."""
    out = {}
    for cell in REPLICATION_CELLS:
        base, allack = quorum_base(cells, cell), cells.get(("ours", QUORUM_ALLACK, cell))
        if allack:
            out[cell] = ratio(allack.median, base.median if base else None)
    return out


def _cpu_text(c: Cell | None) -> str:
    v = _cpu_us(c.chosen if c else None)
    return "-" if v is None else f"{v:.0f}"


def _ctl_text(c: Cell | None) -> str:
    v = c.chosen.get("controller_cpu_s") if c else None
    return "" if v is None else f"; {float(v):.1f} s"


def quorum_lines(cells: dict[tuple[str, str, str], Cell]) -> list[str]:
    """The quorum-ack section's table (empty when the cell did not run)."""
    ratios = quorum_ratios(cells)
    if not ratios:
        return []
    lines = ["| cell | SYNC_MASTER msgs/s per round | allAckInSyncStateSet msgs/s per round | ratio per round | "
             f"median ratio (target ≥ {QUORUM_TARGET:.2f}) | load 1m (SYNC_MASTER / allAck) | "
             "broker CPU µs/msg, median round (SYNC_MASTER / allAck; controllers' CPU s) | errors |",
             "|---|---|---|---|---:|---|---|---|"]
    for cell, med in ratios.items():
        base, allack = quorum_base(cells, cell), cells.get(("ours", QUORUM_ALLACK, cell))
        per = [ratio(x, y) for x, y in zip(allack.rounds, base.rounds, strict=False)] if base and allack else []
        verdict = "" if med is None else (" (met)" if med >= QUORUM_TARGET else " (not met)")
        errors = (f"{base.chosen.get('errors', 0) if base else '-'} / "
                  f"{allack.chosen.get('errors', 0) if allack else '-'}")
        lines.append(f"| {cell} | {_values_text(base.rounds) if base else '-'} | "
                     f"{_values_text(allack.rounds) if allack else '-'} | {', '.join(_fmt_ratio(x) for x in per)} | "
                     f"**{_fmt_ratio(med)}**{verdict} | {_load_text(base.loads) if base else '-'} / "
                     f"{_load_text(allack.loads) if allack else '-'} | {_cpu_text(base)} / {_cpu_text(allack)}"
                     f"{_ctl_text(allack)} | {errors} |")
    return lines


def failover_summary(measurements: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """system -> {rto_median_s, rounds, acked, lost, duplicates, failed_rounds} over its failover rounds."""
    out: dict[str, dict[str, Any]] = {}
    for system in SYSTEMS:
        ms = [m for m in measurements if m["cell"] == FAILOVER and m["system"] == system]
        if not ms:
            continue
        rtos = [key_metric(FAILOVER, m["result"]) for m in ms]
        ok = [x for x in rtos if x is not None]
        out[system] = {
            "rounds": len(ms),
            "rto_median_s": statistics.median(ok) if ok else None,
            "rto_s": rtos,
            "acked": sum(int(m["result"].get("acked", 0)) for m in ms),
            "lost": sum(int(m["result"].get("lost", 0)) for m in ms if "failed" not in m["result"]),
            "duplicates": sum(int(m["result"].get("duplicates", 0)) for m in ms if "failed" not in m["result"]),
            "failed_rounds": sum(1 for x in rtos if x is None),
        }
    return out


def _opt_s(v: Any) -> str:
    return "-" if v is None else f"{float(v):.2f}"


def failover_lines(measurements: list[dict[str, Any]]) -> list[str]:
    """The failover section's tables (empty when the cell did not run)."""
    summary = failover_summary(measurements)
    if not summary:
        return []
    lines = ["| system | rounds | RTO median s | RTO per round s | acknowledged | acknowledged lost | duplicates |",
             "|---|---:|---:|---|---:|---:|---:|"]
    for system, s in summary.items():
        lines.append(f"| {system} | {s['rounds']} | {_opt_s(s['rto_median_s'])} | "
                     f"{', '.join(_opt_s(x) for x in s['rto_s'])} | {s['acked']:,} | {s['lost']} | {s['duplicates']} |")
    o, a = summary.get("ours"), summary.get("apache")
    if o and a:
        r = ratio(o["rto_median_s"], a["rto_median_s"])
        met = "" if r is None else (" (met)" if r <= 1.0 else " (not met)")
        lines += ["", f"RTO ours / Apache (median): **{_fmt_ratio(r)}**{met}; target ≤ 1.00."]
    lines += ["", "| system | round | RTO s | new master routed s | last failed send s | acknowledged (before kill) | "
              "failed sends | lost | duplicates | load 1m |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for m in _rounds(measurements, FAILOVER):
        r = m["result"]
        if "failed" in r:
            lines.append(_failed_row(m))
            continue
        lines.append(f"| {m['system']} | {m['round'] + 1} | {_opt_s(r.get('rto_s'))} | {_opt_s(r.get('routed_s'))} | "
                     f"{_opt_s(r.get('last_failure_s'))} | {r.get('acked', 0):,} ({r.get('acked_before_kill', 0):,}) | "
                     f"{r.get('failed_sends', 0):,} | {r.get('lost', '-')} | {r.get('duplicates', '-')} | "
                     f"{_load_text([m.get('load') or []])} |")
    return lines


# -- timer messages ---------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def timer_summary(measurements: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """system -> its ``timer`` cell over the rounds: ``rounds`` (how many), ``ok`` (results that did not
    fail, in round order), medians of ``p50``/``p99``/``max`` delivery error (ms), ``plain``/``timer``
    (msgs/s), ``ratio`` (median of each round's timer / plain), ``early``, ``missing`` and
    ``errors`` summed, ``loads``."""
    out: dict[str, dict[str, Any]] = {}
    for system in SYSTEMS:
        ms = sorted((m for m in measurements if m["cell"] == TIMER and m["system"] == system),
                    key=lambda m: int(m.get("round", 0)))
        if not ms:
            continue
        ok = [m["result"] for m in ms if "failed" not in m["result"]]
        out[system] = {
            "rounds": len(ms), "ok": ok, "loads": [list(m.get("load") or []) for m in ms],
            **{k: _median([float(r[k]) for r in ok]) for k in ("p50", "p99", "max")},
            "plain": _median([float(r["plain_msgs_s"]) for r in ok]),
            "timer": _median([float(r["timer_msgs_s"]) for r in ok]),
            "ratio": _median([float(r["timer_msgs_s"]) / float(r["plain_msgs_s"]) for r in ok
                              if r.get("plain_msgs_s")]),
            "early": sum(int(r.get("early", 0)) for r in ok),
            "missing": sum(int(r.get("error_kinds", {}).get("timer never delivered", 0)) for r in ok),
            "errors": sum(int(m["result"].get("errors", 0) or 0) for m in ms),
        }
    return out


def _opt(x: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def timer_lines(measurements: list[dict[str, Any]]) -> list[str]:
    """The timer section's tables: per system the medians, ours / Apache, then every round (empty
    when the cell did not run)."""
    summary = timer_summary(measurements)
    if not summary:
        return []
    lines = ["| system | rounds | delivery error p50 / p99 / max ms | early | never delivered | plain msgs/s | "
             "timer msgs/s | timer / plain | errors |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for system, s in summary.items():
        lines.append(f"| {system} | {s['rounds']} | {_opt(s['p50'])} / {_opt(s['p99'])} / {_opt(s['max'])} | "
                     f"{s['early']} | {s['missing']} | {_opt(s['plain'])} | {_opt(s['timer'])} | "
                     f"{_opt(s['ratio'], '{:.0%}')} | {s['errors']} |")
    o, a = summary.get("ours"), summary.get("apache")
    if o and a:
        lines += ["", f"Timer sends ours / Apache (median msgs/s): **{_fmt_ratio(ratio(o['timer'], a['timer']))}**; "
                  f"plain sends ours / Apache {_fmt_ratio(ratio(o['plain'], a['plain']))}; delivery error p99 "
                  f"ours / Apache {_fmt_ratio(ratio(o['p99'], a['p99']))} (below 1 is better)."]
    lines += ["", "| system | round | delivery error p50 / p99 / max ms | early | received | plain msgs/s | "
              "timer msgs/s | timer / plain | broker CPU s | load 1m |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for m in _rounds(measurements, TIMER):
        r = m["result"]
        if "failed" in r:
            lines.append(_failed_row(m))
            continue
        tp = ratio(float(r["timer_msgs_s"]), float(r["plain_msgs_s"]))
        lines.append(f"| {m['system']} | {m['round'] + 1} | {r['p50']:,.0f} / {r['p99']:,.0f} / {r['max']:,.0f} | "
                     f"{r['early']} | {r['received']:,} / {r['n']:,} | {r['plain_msgs_s']:,.0f} | "
                     f"{r['timer_msgs_s']:,.0f} | {_opt(tp, '{:.0%}')} | {_opt(r.get('broker_cpu_s'), '{:.1f}')} | "
                     f"{_load_text([m.get('load') or []])} |")
    return lines


def timer_headline(measurements: list[dict[str, Any]]) -> str | None:
    """``timer sends ours / Apache R (timer / plain ours X, Apache Y), delivery p99 ours P / Apache Q ms``,
    or None when the timer cell did not run."""
    summary = timer_summary(measurements)
    if not summary:
        return None
    o, a = summary.get("ours"), summary.get("apache")
    parts = []
    if o and a:
        parts.append(f"timer sends ours / Apache {_fmt_ratio(ratio(o['timer'], a['timer']))}")
    parts.append("timer / plain " + ", ".join(f"{name} {_opt(s['ratio'], '{:.0%}')}"
                                              for name, s in (("ours", o), ("Apache", a)) if s))
    parts.append("delivery p99 " + " / ".join(f"{name} {_opt(s['p99'])} ms"
                                              for name, s in (("ours", o), ("Apache", a)) if s))
    return ", ".join(parts)


# -- fixed-rate latency (omb) ----------------------------------------------------------------------

#: The latencies of an omb phase the page shows: result key, label.
OMB_LATENCIES = (("publish_from_intended", "publish"), ("e2e", "end-to-end"))
_PCTS = ("p50_ms", "p99_ms", "p999_ms")


def omb_points(measurements: list[dict[str, Any]]) -> dict[str, dict[str, dict[int, list[dict[str, Any]]]]]:
    """mode -> system -> phase index (0: the lowest rate) -> that phase's results over the rounds
    (round order; failed omb cells and rounds without phases are left out)."""
    out: dict[str, dict[str, dict[int, list[dict[str, Any]]]]] = {}
    for m in sorted(measurements, key=lambda m: int(m.get("round", 0))):
        if m["cell"] != OMB or "failed" in m["result"]:
            continue
        for i, ph in enumerate(m["result"].get("phases") or []):
            out.setdefault(m["config"], {}).setdefault(m["system"], {}).setdefault(i, []).append(ph)
    return out


def omb_median(phases: list[dict[str, Any]], key: str) -> dict[str, float] | None:
    """Per percentile (``p50_ms``, ``p99_ms``, ``p999_ms``) the median over ``phases`` of ``phase[key]``;
    None without phases."""
    if not phases:
        return None
    return {p: float(statistics.median(float(ph[key][p]) for ph in phases)) for p in _PCTS}


def _pct_text(v: dict[str, float] | None) -> str:
    return "-" if v is None else " / ".join(f"{v[p]:.2f}" for p in _PCTS)


def _pct_ratio(a: dict[str, float] | None, b: dict[str, float] | None) -> str:
    if a is None or b is None:
        return "-"
    return " / ".join(_fmt_ratio(ratio(a[p], b[p])) for p in _PCTS)


def omb_lines(measurements: list[dict[str, Any]]) -> list[str]:
    """The omb section's tables: per mode and rate the medians over the rounds of publish and
    end-to-end p50 / p99 / p99.9 (ms, from the intended send time), ours beside Apache; the maximum
    produce rates; then every round (empty when the cell did not run)."""
    points = omb_points(measurements)
    ms = _rounds(measurements, OMB)
    if not ms:
        return []
    lines = ["| mode | share of our max | msgs/s | publish p50 / p99 / p99.9 ms ours | Apache | ours / Apache | "
             "end-to-end p50 / p99 / p99.9 ms ours | Apache | ours / Apache | achieved msgs/s ours / Apache |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for mode, systems in points.items():
        o, a = systems.get("ours", {}), systems.get("apache", {})
        for i in sorted(set(o) | set(a)):
            po, pa = o.get(i, []), a.get(i, [])
            share = _omb_fraction(measurements, mode, i)
            rates = sorted({float(ph["rate"]) for ph in po + pa})
            rate = " / ".join(_num(x) for x in rates)
            ach = " / ".join("-" if not ps else _num(statistics.median(float(ph["achieved_rate"]) for ph in ps))
                             for ps in (po, pa))
            cols = []
            for key, _label in OMB_LATENCIES:
                mo, ma = omb_median(po, key), omb_median(pa, key)
                cols += [_pct_text(mo), _pct_text(ma), _pct_ratio(mo, ma)]
            lines.append(f"| {mode} | {share} | {rate} | {' | '.join(cols)} | {ach} |")
    lines += ["", "| mode | system | round | max msgs/s | rates from | msgs/s | publish p50 / p99 / p99.9 / max ms | "
              "send delay p99 ms | end-to-end p50 / p99 / p99.9 / max ms | sent / acknowledged / received | "
              "errors | load 1m |", "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for m in sorted(ms, key=lambda m: (m["config"], SYSTEMS.index(m["system"]) if m["system"] in SYSTEMS else 9,
                                       m["round"])):
        r = m["result"]
        if "failed" in r:
            lines.append(f"| {m['config']} |{_failed_row(m)[1:]}")
            continue
        for ph in r.get("phases") or []:
            pub, e2e = ph["publish_from_intended"], ph["e2e"]
            lines.append(
                f"| {m['config']} | {m['system']} | {m['round'] + 1} | {_num(float(r['max_rate']))} | "
                f"{r.get('rates_from', '?')} | {_num(float(ph['rate']))} | "
                f"{pub['p50_ms']:.2f} / {pub['p99_ms']:.2f} / {pub['p999_ms']:.2f} / {pub['max_ms']:.2f} | "
                f"{ph['publish_delay']['p99_ms']:.2f} | "
                f"{e2e['p50_ms']:.2f} / {e2e['p99_ms']:.2f} / {e2e['p999_ms']:.2f} / {e2e['max_ms']:.2f} | "
                f"{ph['sent']:,} / {ph['acked']:,} / {ph['received']:,} | {ph.get('errors', 0)} | "
                f"{_load_text([m.get('load') or []])} |")
    return lines


def _omb_fraction(measurements: list[dict[str, Any]], mode: str, index: int) -> str:
    """The share of our maximum the ``index``-th phase of ``mode`` ran at (from the results' ``fractions``)."""
    for m in measurements:
        if m["cell"] == OMB and m["config"] == mode and "failed" not in m["result"]:
            fr = m["result"].get("fractions") or []
            if index < len(fr):
                return f"{float(fr[index]):.0%}"
    return "?"


def omb_max_lines(measurements: list[dict[str, Any]]) -> list[str]:
    """One line per mode: the maximum produce rate of the omb workload (one producer, async sends)
    per round, ours and Apache."""
    out = []
    for mode in dict.fromkeys(m["config"] for m in measurements if m["cell"] == OMB):
        parts = []
        for system in SYSTEMS:
            vals = []
            for m in _rounds(measurements, OMB):
                if m["config"] != mode or m["system"] != system:
                    continue
                r = m["result"]
                text = _values_text([key_metric(OMB, r)])
                consumed = (r.get("max") or {}).get("consume_rate")
                vals.append(text + ("" if consumed is None or "failed" in r else f" (consumer {consumed:,.0f})"))
            if vals:
                parts.append(f"{system} {', '.join(vals)} msgs/s")
        backlog = next((m["result"]["backlog"] for m in measurements
                        if m["cell"] == OMB and m["config"] == mode and m["result"].get("backlog")), None)
        bound = f" and at most {backlog:,} acknowledged but not yet received" if backlog else ""
        out.append(f"- {mode}: maximum per round (one producer, async sends, at most 1,000 unanswered{bound}; in "
                   f"brackets what the consumer received meanwhile): {'; '.join(parts)}.")
    return out


def omb_headline(measurements: list[dict[str, Any]]) -> str | None:
    """``omb <mode> at <rate> msgs/s (80 %): publish p99 ours X / Apache Y ms, end-to-end p99 ...`` for
    the highest rate of the first mode, or None when the cell did not run."""
    points = omb_points(measurements)
    for mode, systems in points.items():
        o, a = systems.get("ours", {}), systems.get("apache", {})
        if not o and not a:
            continue
        i = max(set(o) | set(a))
        po, pa = o.get(i, []), a.get(i, [])
        rate = statistics.median(float(ph["rate"]) for ph in po + pa)
        parts = []
        for key, label in OMB_LATENCIES:
            mo, ma = omb_median(po, key), omb_median(pa, key)
            parts.append(f"{label} p99 " + " / ".join(f"{name} {v['p99_ms']:.1f}"
                                                      for name, v in (("ours", mo), ("Apache", ma)) if v) + " ms")
        return f"omb {mode} at {rate:,.0f} msgs/s ({_omb_fraction(measurements, mode, i)}): {', '.join(parts)}"
    return None


# -- headline ---------------------------------------------------------------------------------------


def matrix_ratios(cells: dict[tuple[str, str, str], Cell]) -> dict[tuple[str, str], float]:
    """(mode, cell) -> median msgs/s ours / Apache, for the throughput cells measured on both."""
    out = {}
    for mode in MODES:
        for cell in CELLS:
            if cell == "e2e":
                continue
            o, a = cells.get(("ours", mode, cell)), cells.get(("apache", mode, cell))
            r = ratio(o.median if o else None, a.median if a else None)
            if r is not None:
                out[(mode, cell)] = r
    return out


def headline_text(ratios: dict[tuple[str, str], float], extra: list[str] | None = None) -> str:
    """One line: produce:64 ASYNC_FLUSH, how many throughput cells are >= 1.0, the lowest; then ``extra``."""
    parts = []
    p64 = ratios.get(("ASYNC_FLUSH", "produce:64"))
    if p64 is not None:
        parts.append(f"produce:64 ASYNC_FLUSH {p64:.2f}")
    if ratios:
        ahead = sum(1 for r in ratios.values() if r >= 1.0)
        (mode, cell), low = min(ratios.items(), key=lambda kv: kv[1])
        parts.append(f"{ahead} of {len(ratios)} throughput cells ≥ 1.0 (lowest {cell} {mode} {low:.2f})")
    return "; ".join(parts + (extra or [])) or "no cell measured on both systems"


def headline(data: dict[str, Any]) -> str:
    """The headline of a format-2 run: matrix ratios, failover RTO, quorum ratio."""
    ms = data.get("measurements") or []
    cells = combine(ms)
    extra = []
    fo = failover_summary(ms)
    if fo:
        o, a = fo.get("ours"), fo.get("apache")
        text = "failover RTO " + " / ".join(f"{name} {_opt_s(s['rto_median_s'])} s (lost {s['lost']})"
                                            for name, s in (("ours", o), ("Apache", a)) if s)
        if o and a:
            text += f", ratio {_fmt_ratio(ratio(o['rto_median_s'], a['rto_median_s']))}"
        extra.append(text)
    q = quorum_ratios(cells)
    if q:
        extra.append("quorum acks / SYNC_MASTER " + ", ".join(f"{c} {_fmt_ratio(r)}" for c, r in q.items()))
    t = timer_headline(ms)
    if t:
        extra.append(t)
    o = omb_headline(ms)
    if o:
        extra.append(o)
    return headline_text(matrix_ratios(cells), extra)


# -- saved pages written before format 2 ------------------------------------------------------------

_METRIC_CELLS = {f"produce msgs/s, {label}": cell for cell, label in CELL_LABELS.items()}
_LEGACY_MODES = {"ASYNC_FLUSH/ASYNC_MASTER": "ASYNC_FLUSH", "SYNC_FLUSH/ASYNC_MASTER": "SYNC_FLUSH",
                 "ASYNC_FLUSH/ASYNC_MASTER+slave": "ASYNC_MASTER+slave",
                 "ASYNC_FLUSH/SYNC_MASTER+slave": "SYNC_MASTER+slave"}


def legacy_ratios(markdown: str) -> dict[tuple[str, str], float]:
    """(mode, cell) -> ours / Apache msgs/s from a page written before format 2: its main table
    (``| mode | metric | ... | ours / Apache | errors |``) or its per-round table
    (``| mode | cell | ... | median ratio |``, the median in bold). Rows that are not throughput
    cells are skipped."""
    out: dict[tuple[str, str], float] = {}
    header: list[str] = []
    for line in markdown.splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if not header:
            header = [c.lower() for c in cols]
            continue
        if set(line.replace("|", "").strip()) <= set("-: "):
            continue
        row = dict(zip(header, cols, strict=False))
        mode = _LEGACY_MODES.get(row.get("mode", ""), row.get("mode", ""))
        if "median ratio" in row:
            cell, value = row.get("cell", ""), row["median ratio"]
        elif "ours / apache" in row:
            metric = row.get("metric", "")
            cell = _METRIC_CELLS.get(metric, "consume" if metric.startswith("consume msgs/s") else "")
            value = row["ours / apache"]
        else:
            continue
        number = re.sub(r"[*\s]", "", value)
        if cell in CELLS and mode in MODES and re.fullmatch(r"\d+(\.\d+)?", number):
            out.setdefault((mode, cell), float(number))
    return out


# -- files ------------------------------------------------------------------------------------------


def utc_now(ts: float | None = None) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` of ``ts`` (default: now)."""
    return datetime.datetime.fromtimestamp(ts if ts is not None else datetime.datetime.now().timestamp(),
                                           datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def page_stem(started: str) -> str:
    """``compare-YYYY-MM-DD-HHMM`` for a UTC start time ``YYYY-MM-DDTHH:MM:SSZ``."""
    return f"compare-{started[:10]}-{started[11:13]}{started[14:16]}"


@dataclass
class Page:
    """One run's page: :meth:`add` a measurement and the ``.json``, ``.md`` and the index are
    written at once (``out`` None: nothing is written)."""

    data: dict[str, Any]
    out: Path | None
    #: ``time.monotonic()`` when the run began: each save stores the elapsed seconds (``elapsed_s``).
    began: float | None = None

    @property
    def stem(self) -> str:
        return page_stem(self.data["started"])

    def add(self, system: str, config: str, round_: int, cell: str, result: dict[str, Any],
            load: tuple[float, float]) -> None:
        """Record one cell's result (``round_`` from 0; ``load``: 1-minute load average at start, end)."""
        self.data["measurements"].append({"system": system, "config": config, "round": round_, "cell": cell,
                                          "result": result, "load": [round(load[0], 2), round(load[1], 2)],
                                          "at": utc_now()})
        self.save()

    def problem(self, system: str, config: str, round_: int, error: str) -> None:
        """Record that ``system`` in ``config`` did not start or stopped early."""
        self.data["problems"].append({"system": system, "config": config, "round": round_, "error": error})
        self.save()

    def save(self, complete: bool = False) -> tuple[Path, Path] | None:
        """Write the ``.json`` and ``.md`` and update the index; ``complete`` marks the end of the run."""
        self.data["updated"] = utc_now()
        self.data["complete"] = complete
        if self.began is not None:
            self.data["elapsed_s"] = round(time.monotonic() - self.began, 1)
        self.data["headline"] = headline(self.data)
        self.data["rows"] = build_rows(combine(self.data["measurements"]))
        if self.out is None:
            return None
        self.out.mkdir(parents=True, exist_ok=True)
        js, md = self.out / f"{self.stem}.json", self.out / f"{self.stem}.md"
        _write(js, json.dumps(self.data, indent=1) + "\n")
        _write(md, render_page(self.data))
        update_index(self.out)
        return md, js


def _write(path: Path, text: str) -> None:
    """Write through a temporary file and a rename, so a cut run never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _error_lines(data: dict[str, Any]) -> list[str]:
    lines = [f"- {p['system']} {p['config']} round {p['round'] + 1}: {p['error'].splitlines()[0][:300]}"
             for p in data["problems"]]
    for m in data["measurements"]:
        r = m["result"]
        where = f"{m['system']} {m['config']} round {m['round'] + 1} {m['cell']}"
        if r.get("failed"):
            lines.append(f"- {where}: failed: {r['failed'].splitlines()[0][:300]}")
        elif r.get("error_kinds"):
            merged: dict[str, int] = {}
            for kind, v in r["error_kinds"].items():
                kind = re.sub(r"\s*See https?://\S+ for further details\.", "", kind)
                kind = re.sub(r"cost \[\d+\]ms", "cost [..]ms", kind)
                kind = re.sub(r"period in queue: \d+ms, size of queue: \d+",
                              "period in queue: [..]ms, size of queue: [..]", kind)
                merged[kind] = merged.get(kind, 0) + int(v)
            note = " (failed sends of the round, most while no master answered)" if m["cell"] == FAILOVER else ""
            lines.append(f"- {where}{note}: " + "; ".join(f"{k} (x{v})" for k, v in merged.items()))
    return lines


def peer_cpu_text(measurements: list[dict[str, Any]]) -> str:
    """One sentence on the CPU the other system's idle cluster used during each cell (``peer_cpu_s``,
    recorded since the clusters of a mode stay up for all its rounds); empty when none was recorded."""
    cpu = [float(m["result"]["peer_cpu_s"]) for m in measurements if "peer_cpu_s" in m.get("result", {})]
    if not cpu:
        return ""
    return (f"Apache's cluster of a mode stays up for all its rounds, frozen (SIGSTOP) while ours runs "
            f"(controller-mode clusters idle instead). It used {statistics.median(cpu):.2f} CPU s per "
            f"cell meanwhile (median over {len(cpu)} cells, at most {max(cpu):.2f} s).")


def _schedule_text(settings: dict[str, Any]) -> str:
    """Where the unmeasured load runs and how the systems share the machine (``settings["schedule"]``,
    or ``kept_clusters`` in runs saved before 2026-11-27 16:00 UTC)."""
    if settings.get("schedule") == "alone, ours fresh":
        return ("at the start of each round's driver (each system runs all the rounds of a mode alone, Apache on "
                "one cluster kept for them, ours on a fresh one per round, and stops before the other system starts; "
                "which system goes first alternates between modes); ")
    if settings.get("schedule") == "alone":  # the run of 2026-11-27 14:04 UTC
        return ("at the start of each round's driver (each system runs all the rounds of a mode alone, on one "
                "cluster started for them and stopped before the other system's starts; which system goes first "
                "alternates between modes); ")
    if settings.get("kept_clusters"):
        return ("at the start of each round's driver (Apache's cluster of a mode is kept for all its rounds, frozen "
                "while ours runs; ours is fresh each round); ")
    return "on each fresh cluster first; "


def _page_cache_text(settings: dict[str, Any]) -> str:
    """What the run did with the page cache between the systems' runs (``settings["page_cache"]``:
    ``dropped`` or ``kept: <why>``); empty for runs saved before it was recorded."""
    state = settings.get("page_cache")
    if state is None:
        return ""
    if state == "dropped":
        return "the page cache written back and dropped before each system's run of a round; "
    return f"the page cache not dropped between runs ({str(state).removeprefix('kept: ')}); "


def _page_cache_cost_text(m: dict[str, Any]) -> str:
    """`` Page cache at start: new data 2.36 s of CPU per GiB, cached pages rewritten 0.27 s ...``
    from ``machine["page_cache_s_per_gib"]`` (:mod:`bench.calibrate`); empty for runs saved
    before it was measured."""
    cost = m.get("page_cache_s_per_gib")
    if not cost:
        return ""
    return (f" Page cache at start: new data {cost['new']:.2f} s of CPU per GiB, cached pages rewritten "
            f"{cost['rewritten']:.2f} s (`bench/calibrate.py`; on this VM the first varies from day to day, "
            "and both systems pay it for every byte they store).")


def _elapsed_text(data: dict[str, Any]) -> str:
    """`` Took 27.5 min in all.`` (`` So far 3.0 min.`` for a partial page); empty for runs saved
    without ``elapsed_s``."""
    if data.get("elapsed_s") is None:
        return ""
    minutes = float(data["elapsed_s"]) / 60
    return f" Took {minutes:.1f} min in all." if data.get("complete") else f" So far {minutes:.1f} min."


def render_page(data: dict[str, Any]) -> str:
    """The Markdown page of a format-2 run."""
    m, s, sel = data["machine"], data["settings"], data["selection"]
    cells = combine(data["measurements"])
    rows = build_rows(cells)
    state = ("complete" if data.get("complete") else
             f"**partial**: the run was cut or is still going (last saved {data.get('updated', '?')})")
    md = [
        f"# RocketCluster vs Apache RocketMQ {m['apache_rocketmq']} — {data['started'][:16].replace('T', ' ')} UTC",
        "",
        f"`make bench-compare` (`python -m bench.compare {' '.join(data.get('argv') or [])}`), {state}. "
        f"Ours: {data['ours']['source']}. Modes {', '.join(sel['modes']) or '-'}; cells "
        f"{', '.join(sel['cells']) or '-'}; {sel['rounds']} round(s)." + _elapsed_text(data),
        "",
        f"Machine: {m['nproc']} cores ({m['cpu_model']}), {m['memory_gib']} GiB RAM, Linux {m['kernel']}; "
        f"Python {m['python']}; {m['java']}. 1-minute load average at start {m['loadavg_at_start']} — the machine "
        "is shared with other work, and the load generator and the system under test run on the same cores, so "
        "each cell's load average (start → end) is listed with its figures below." + _page_cache_cost_text(m),
        "",
        f"Settings: {s['seconds']} s per throughput cell after {s['warmup']} s of warm-up; "
        f"{s['server_warmup']} s of unmeasured load (64 producers, then batches) "
        + _schedule_text(s) +
        _page_cache_text(s) +
        f"consume at most {s['consume_seconds']} s; {s['body']}-byte messages, topics of {s['queues']} queues, "
        f"sync sends, no client retries; Apache's broker {' '.join(s['apache_broker_jvm'][:2])}. Per cell the "
        "round with the median figure is shown (msgs/s; end-to-end p99); errors are summed over the rounds. "
        "`ours / Apache`: above 1 is better for msgs/s, below 1 for latency and CPU.",
        "",
    ]
    if rows:
        md += ["## Throughput and latency", "", render_table(rows, m["apache_rocketmq"]), "",
               "### Every round", "", *per_round_lines(cells), ""]
        peer = peer_cpu_text(data["measurements"])
        if peer:
            md += [peer, ""]
    q = quorum_lines(cells)
    if q:
        md += ["## Quorum acks (ours): allAckInSyncStateSet in controller mode vs SYNC_MASTER", "",
               f"Ours only, {s['seconds']} s cells: a master and one slave, ASYNC_FLUSH, once as SYNC_MASTER and once "
               "in controller mode (3 controllers) with `allAckInSyncStateSet=true` (measured only once the slave "
               "is in the SyncStateSet), in each round; when the run has the SYNC_MASTER+slave mode, its figures "
               "of the same round are SYNC_MASTER's. Target (issue #13): allAckInSyncStateSet ≥ "
               f"{QUORUM_TARGET:.0%} of SYNC_MASTER's msgs/s.", "", *q, ""]
    f = failover_lines(data["measurements"])
    if f:
        fo = s.get("failover") or {}
        md += ["## Failover: kill -9 of the master (controller mode)", "",
               f"Same harness on both sides: {fo.get('layout', FAILOVER_CONFIG)}. {fo.get('how', '')}", "", *f, ""]
    t = timer_lines(data["measurements"])
    if t:
        ts = s.get("timer") or {}
        md += ["## Timer messages (RocketMQ 5's setDeliverTimeMs): delivery error and enqueue throughput", "",
               f"Same harness on both sides (`tests/compat/TimerDriver.java bench`, Apache's Java client): one "
               f"ASYNC_FLUSH master with `timerPrecisionMs={ts.get('precision', '?')}`, a push consumer; "
               f"{ts.get('n', 0):,} timers spread over {ts.get('window', '?')} s that start once all are sent "
               "(delivery error = arrival - scheduled time), then enqueue throughput: "
               f"{ts.get('throughput', 0):,} plain and {ts.get('throughput', 0):,} timer sync sends "
               f"(due in an hour) of {ts.get('size', '?')} bytes from {ts.get('threads', '?')} threads, in halves: "
               "plain, timer, timer, plain (the topics are created before the consumer starts). "
               "Medians over the rounds; errors: failed sends, timers never delivered or delivered early.",
               "", *t, ""]
    o = omb_lines(data["measurements"])
    if o:
        om = s.get("omb") or {}
        md += ["## Fixed-rate latency (OpenMessaging Benchmark style, `1-topic-16-partitions-1kb`)", "",
               f"Same harness on both sides (`Driver.java`, Apache's Java client), after the OpenMessaging Benchmark's "
               f"workload: 1 topic of {om.get('queues', OMB_QUEUES)} queues, {s['body']}-byte messages, one producer "
               "(async sends, `DefaultMQProducer.send(msg, SendCallback)` as OMB's RocketMQ driver) and one push "
               "consumer. First the maximum: unpaced async sends (at most "
               f"{om.get('window', 1000):,} unanswered"
               + (f" and at most {om['backlog']:,} acknowledged but not yet received, so that it is a rate the "
                  "consumer keeps up with, as OMB's `RateController` (it ramps down past its `RECEIVE_BACKLOG_LIMIT`, "
                  "1,000)" if om.get("backlog") else "")
               + f") for {om.get('max_seconds', s['seconds'])} s after "
               f"{s['warmup']} s, the consumer reading. Then one phase per rate: "
               f"{', '.join(f'{f:.0%}' for f in om.get('fractions', OMB_FRACTIONS))} of our maximum in the mode's "
               "first round (both systems and every round run at those absolute rates; each run still measures "
               "its own maximum), one thread sending open-loop at fixed intended times (OMB's "
               f"`UniformRateLimiter`), {s['warmup']} s unmeasured then {s['seconds']} s measured. Latencies are "
               "from the intended send time (coordinated-omission safe): publish = acknowledgement - intended, "
               "end-to-end = receipt - intended (the body carries it); 'send delay' is OMB's "
               "publishDelayLatency (actual - intended send). Medians over the rounds of each percentile; "
               "every acknowledged message must arrive within 15 s after its phase.", "",
               *omb_max_lines(data["measurements"]), "", *o, ""]
    errors = _error_lines(data)
    md += ["## Errors", "", *(errors or ["None: every send succeeded and every message came back, on both systems."]),
           ""]
    return "\n".join(md)


#: The index's first lines.
INDEX_HEAD = ("# Saved `make bench-compare` runs",
              "",
              "Written by `python -m bench.compare` after every cell (do not edit by hand); newest first. "
              "Ratios are ours / Apache RocketMQ (msgs/s: above 1 is better; RTO: below 1 is better), "
              "medians over the rounds. The 2026-11-22 pages ran a fresh driver JVM per cell, later ones one per "
              "cluster (a JIT-warm client): their throughput ratios are not comparable (README, Performance).",
              "")


def index_entries(folder: Path) -> list[dict[str, str]]:
    """Every ``compare-*.md`` page in ``folder``: name, when, commit, headline; newest first."""
    entries = []
    for md in folder.glob("compare-*.md"):
        js = md.with_suffix(".json")
        data: dict[str, Any] = {}
        if js.exists():
            try:
                data = json.loads(js.read_text())
            except ValueError:
                data = {}
        if data.get("format") == 2:
            when = data["started"][:16].replace("T", " ") + " UTC"
            commit = data["ours"].get("commit", "")
            text = data.get("headline") or headline(data)
            if not data.get("complete"):
                text = "partial: " + text
            sort_key = data["started"]
        else:
            found = re.match(r"compare-(\d{4}-\d{2}-\d{2})(.*)$", md.stem)
            day, rest = (found.group(1), found.group(2)) if found else ("", md.stem)
            when = day
            commit = str((data.get("ours") or {}).get("source", "")).replace("commit ", "")
            text = headline_text(legacy_ratios(md.read_text()))
            sort_key = f"{day}T00:00:00{rest}"
        entries.append({"page": md.name, "when": when, "commit": commit, "headline": text, "key": sort_key})
    entries.sort(key=lambda e: e["key"], reverse=True)
    return entries


def update_index(folder: Path) -> Path:
    """(Re)write ``folder/README.md``: one row per saved run, newest first."""
    lines = [*INDEX_HEAD, "| run | started | ours | headline |", "|---|---|---|---|"]
    for e in index_entries(folder):
        lines.append(f"| [{e['page']}]({e['page']}) | {e['when']} | {e['commit'] or '-'} | {e['headline']} |")
    path = folder / "README.md"
    _write(path, "\n".join(lines) + "\n")
    return path
