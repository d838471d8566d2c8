"""Human reports of the jobs: Markdown with PNG charts (matplotlib, Agg backend, no display needed).

:func:`logs_report` and :func:`traffic_report` write ``report.md`` and
``charts/*.png`` into the job's output directory and return the report's path.
Chart drawing never fails a job: a chart that cannot be drawn is left out and
the report says so.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("rocket.analytics.report")

LEVEL_COLORS = {
    "FATAL": "#7f0000",
    "ERROR": "#d62728",
    "WARN": "#ff7f0e",
    "INFO": "#1f77b4",
    "DEBUG": "#2ca02c",
    "TRACE": "#9467bd",
    "UNPARSED": "#7f7f7f",
}
LEVEL_ORDER = ("FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "UNPARSED")


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path, dpi: int) -> bool:
    """Lay out ``fig``, write it to ``path`` as PNG at ``dpi`` dots per inch and free it; True (drawn)."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    _plt().close(fig)
    return True


def _short(topic: str) -> str:
    return topic.removeprefix("loghub-")


def _md_escape(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "" if value is None else format(value, spec)


# -- logs -----------------------------------------------------------------------------------


def accuracy_chart(summary: dict[str, Any], path: Path) -> bool:
    """Bars: our grouping accuracy per system beside Drain's published figure. False when nothing to draw."""
    items = [(t["system"] or _short(name), t["accuracy"]) for name, t in summary["topics"].items()
             if t.get("accuracy") and t["accuracy"].get("accuracy") is not None]
    if not items:
        return False
    plt = _plt()
    items.sort()
    labels = [s for s, _ in items]
    ours = [a["accuracy"] for _, a in items]
    drain = [a.get("drain_published") or 0.0 for _, a in items]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(items) + 2), 4.2))
    x = range(len(items))
    ax.bar([i - 0.2 for i in x], ours, width=0.4, label="this job (one setting, headers learned)", color="#1f77b4")
    ax.bar([i + 0.2 for i in x], drain, width=0.4, label="Drain, published", color="#bbbbbb")
    mean = summary.get("accuracy_mean")
    if mean is not None:
        ax.axhline(mean, color="#1f77b4", linestyle="--", linewidth=1, label=f"mean {mean:.3f}")
    ax.axhline(summary.get("drain_published_mean", 0.881), color="#888888", linestyle=":", linewidth=1,
               label=f"Drain mean {summary.get('drain_published_mean', 0.881):.3f}")
    ax.set_xticks(list(x), labels, rotation=35, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("grouping accuracy")
    ax.set_title("Log parsing accuracy on the LogHub 2k samples")
    ax.legend(loc="lower left", fontsize=8)
    return _save(fig, path, dpi=110)


def levels_chart(summary: dict[str, Any], path: Path) -> bool:
    """Stacked horizontal bars: lines per level for each topic."""
    topics = list(summary["topics"].items())
    if not topics:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(topics) + 1.5))
    names = [_short(t) for t, _ in topics]
    left = [0.0] * len(topics)
    for level in LEVEL_ORDER:
        counts = [float(info["levels"].get(level, 0)) for _, info in topics]
        if any(counts):
            ax.barh(names, counts, left=left, color=LEVEL_COLORS[level], label=level)
            left = [a + b for a, b in zip(left, counts, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("lines")
    ax.set_title("Lines per level and topic")
    ax.legend(loc="lower right", fontsize=8)
    return _save(fig, path, dpi=110)


def timeline_chart(level_counts: Any, spikes: Any, path: Path, max_topics: int = 12) -> bool:
    """Small multiples: lines per event-time minute per topic, errors in red, spikes marked with ▲.

    ``level_counts``/``spikes``: pandas frames of the job's ``level_counts`` and
    ``error_spikes`` tables.
    """
    if level_counts is None or len(level_counts) == 0:
        return False
    plt = _plt()
    topics = sorted(level_counts["topic"].unique())[:max_topics]
    cols = 3 if len(topics) > 4 else max(1, len(topics))
    rows = (len(topics) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.6 * rows), squeeze=False)
    for ax in axes.flat[len(topics):]:
        ax.axis("off")
    for ax, topic in zip(axes.flat, topics, strict=False):
        sub = level_counts[level_counts["topic"] == topic]
        total = sub.groupby("minute")["count"].sum().sort_index()
        errors = sub[sub["level"].isin(["ERROR", "FATAL"])].groupby("minute")["count"].sum()
        errors = errors.reindex(total.index, fill_value=0)
        ax.plot(total.index, total.values, ".-", color="#1f77b4", markersize=3, linewidth=0.8, label="lines")
        ax.plot(errors.index, errors.values, ".", color="#d62728", markersize=3, label="errors")
        if spikes is not None and len(spikes):
            sp = spikes[spikes["topic"] == topic]
            if len(sp):
                ax.plot(sp["minute"], sp["errors"], "^", color="#7f0000", markersize=7, label="spike")
        ax.set_title(_short(topic), fontsize=9)
        ax.tick_params(labelsize=6)
        for label in ax.get_xticklabels():
            label.set_rotation(30)
            label.set_ha("right")
    axes.flat[0].legend(fontsize=6, loc="upper right")
    fig.suptitle("Lines per minute (event time, UTC); errors red, spikes ▲", fontsize=10)
    return _save(fig, path, dpi=100)


def _chart(name: str, draw: Any, *args: Any) -> bool:
    try:
        return bool(draw(*args))
    except Exception:
        log.exception("chart %s could not be drawn", name)
        return False


def logs_report(summary: dict[str, Any], level_counts: Any, spikes: Any, out_dir: Path) -> str:
    """Write ``report.md`` (+ ``charts/``) for the logs job; returns its path."""
    charts = out_dir / "charts"
    charts.mkdir(parents=True, exist_ok=True)
    drawn = {
        "accuracy": _chart("accuracy", accuracy_chart, summary, charts / "accuracy.png"),
        "levels": _chart("levels", levels_chart, summary, charts / "levels.png"),
        "timeline": _chart("timeline", timeline_chart, level_counts, spikes, charts / "timeline.png"),
    }
    t = summary["totals"]
    md: list[str] = [
        "# Log analytics report",
        "",
        f"Generated {summary['generated_at']} in {summary.get('seconds', 0):.1f} s from "
        f"`{_md_escape(summary.get('input', {}))}`.",
        "",
        f"**{t['lines']:,} lines** in {t['topics']} topics: {t['parsed']:,} parsed, {t['unparsed']:,} unparsed "
        f"(no header found: mined whole), {t.get('skipped', 0):,} skipped (empty, binary, too long, unread), "
        f"{t['templates']:,} templates, "
        f"{t['error_spikes']} error-rate spikes.",
        "",
    ]
    if summary.get("accuracy_mean") is not None:
        md += [
            "## Parsing accuracy",
            "",
            f"Grouping accuracy (GA: a line counts when the lines sharing its mined template are exactly those "
            f"sharing its labelled EventId), parsing accuracy (PA) and template-level F1 (FGA, FTA; Loghub-2.0) "
            f"against the LogHub ground truth in `{summary.get('ground_truth')}`, with one miner setting and "
            f"headers learned per topic. "
            f"Mean **{summary['accuracy_mean']:.3f}** (Drain published {summary['drain_published_mean']:.3f}).",
            "",
        ]
        if drawn["accuracy"]:
            md += ["![accuracy](charts/accuracy.png)", ""]
    md += ["## Topics", "",
           "| topic | system | lines | unparsed | skipped | templates | error rate | spikes | GA | Drain | PA | FGA "
           "| FTA |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for topic, info in summary["topics"].items():
        acc = info.get("accuracy") or {}
        md.append(f"| {topic} | {info.get('system') or ''} | {info['lines']:,} | {info['unparsed']:,} | "
                  f"{sum(info.get('skipped', {}).values()):,} | "
                  f"{info['templates']} | {_fmt(info.get('error_rate'))} | {len(info['error_spikes'])} | "
                  f"{_fmt(acc.get('accuracy'))} | {_fmt(acc.get('drain_published'))} | {_fmt(acc.get('pa'))} | "
                  f"{_fmt(acc.get('fga'))} | {_fmt(acc.get('fta'))} |")
    md.append("")
    if drawn["levels"]:
        md += ["![levels](charts/levels.png)", ""]
    if drawn["timeline"]:
        md += ["## Lines and errors per minute", "", "![timeline](charts/timeline.png)", ""]
    md += ["## Error-rate spikes", "",
           "A minute is a spike when it has at least 3 errors, at least twice the topic's error rate, and more "
           "errors than 3 binomial standard deviations above its expectation.", ""]
    any_spike = False
    for topic, info in summary["topics"].items():
        for s in info["error_spikes"][:5]:
            if not any_spike:
                md += ["| topic | minute (UTC) | lines | errors | rate | topic rate | z |",
                       "|---|---|---:|---:|---:|---:|---:|"]
                any_spike = True
            md.append(f"| {topic} | {s['minute']} | {s['lines']} | {s['errors']} | {s['rate']:.2f} | "
                      f"{s['topic_rate']:.3f} | {s['z']:.1f} |")
    if not any_spike:
        md.append("No spikes.")
    md += ["", "## Top templates", ""]
    for topic, info in summary["topics"].items():
        if not info["top_templates"]:
            continue
        md += [f"### {topic}", "", "| # | count | errors | template |", "|---:|---:|---:|---|"]
        for i, tpl in enumerate(info["top_templates"][:5], 1):
            md.append(f"| {i} | {tpl['count']:,} | {tpl['errors']} | `{_md_escape(tpl['template'])[:160]}` |")
        md.append("")
    md += ["## Outputs", ""]
    for name, path in summary["outputs"].items():
        md.append(f"- {name}: `{path}`")
    md.append(f"- summary: `{out_dir / 'summary.json'}`")
    md.append("")
    path = out_dir / "report.md"
    path.write_text("\n".join(md), encoding="utf-8")
    return str(path)


# -- traffic --------------------------------------------------------------------------------------


def traffic_chart(per_minute: Any, path: Path) -> bool:
    """Two panels: messages per minute per topic, and store-latency p99 per minute per topic."""
    if per_minute is None or len(per_minute) == 0:
        return False
    plt = _plt()
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    topics = sorted(per_minute["topic"].unique())
    for topic in topics[:20]:
        sub = per_minute[per_minute["topic"] == topic].sort_values("minute")
        a1.plot(sub["minute"], sub["messages"], ".-", linewidth=1, markersize=3, label=_short(topic))
        a2.plot(sub["minute"], sub["latency_p99_ms"], ".-", linewidth=1, markersize=3, label=_short(topic))
    lo, hi = per_minute["minute"].min(), per_minute["minute"].max()
    if lo == hi:  # one minute only: show the hour around it rather than years
        import pandas as pd

        a1.set_xlim(lo - pd.Timedelta(minutes=30), hi + pd.Timedelta(minutes=30))
    a1.set_ylabel("messages / minute")
    a2.set_ylabel("store latency p99 (ms)")
    a1.set_title("Traffic per topic (store-time minutes, UTC)")
    a1.legend(fontsize=7, ncol=3)
    for label in a2.get_xticklabels():
        label.set_rotation(30)
        label.set_ha("right")
    return _save(fig, path, dpi=100)


def traffic_report(summary: dict[str, Any], per_minute: Any, out_dir: Path) -> str:
    """Write ``report.md`` (+ ``charts/traffic.png``) for the traffic job; returns its path."""
    charts = out_dir / "charts"
    charts.mkdir(parents=True, exist_ok=True)
    drawn = _chart("traffic", traffic_chart, per_minute, charts / "traffic.png")
    t = summary["totals"]
    md = [
        "# Traffic report",
        "",
        f"Generated {summary['generated_at']} in {summary.get('seconds', 0):.1f} s from "
        f"`{_md_escape(summary.get('input', {}))}`.",
        "",
        f"**{t['messages']:,} messages**, {t['bytes']:,} body bytes in {t['topics']} topics over {t['minutes']} "
        "topic-minutes.",
        "",
        "| topic | messages | bytes | minutes | peak msgs/min | store latency p50 / p95 / p99 (ms) | top producer |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for topic, info in summary["topics"].items():
        lat = info["store_latency_ms"]
        prod = info["top_producers"][0] if info["top_producers"] else None
        md.append(f"| {topic} | {info['messages']:,} | {info['bytes']:,} | {info['minutes']} | "
                  f"{info['peak_messages_per_minute']:,} | {_fmt(lat.get('p50'), '.1f')} / "
                  f"{_fmt(lat.get('p95'), '.1f')} / {_fmt(lat.get('p99'), '.1f')} | "
                  f"{prod['born_host'] + ' (' + format(prod['messages'], ',') + ')' if prod else ''} |")
    md.append("")
    if drawn:
        md += ["![traffic](charts/traffic.png)", ""]
    md += ["Store latency = store timestamp - born timestamp (broker clock minus producer clock; on one "
           "machine both are the same clock).", "", "## Outputs", ""]
    for name, path in summary["outputs"].items():
        md.append(f"- {name}: `{path}`")
    md.append("")
    path = out_dir / "report.md"
    path.write_text("\n".join(md), encoding="utf-8")
    return str(path)
