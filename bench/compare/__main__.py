"""``make bench-compare``: our cluster and Apache RocketMQ 5.x side by side, one run.

``python -m bench.compare [--short] [--replication auto|yes|no|skip] [--ours-ref REF] [--no-save]``

For each flush mode (ASYNC_FLUSH, then SYNC_FLUSH) it starts a NameServer and one master
broker of ours, measures, stops them, then does the same with Apache RocketMQ's (see
:mod:`bench.compare.servers` for the settings both get). The load generator is the same
for both: ``Driver.java`` on Apache's own Java client (:mod:`bench.compare.java`), one JVM
per cell, 1 KiB messages, topics of 8 queues:

* ``produce:N``: N threads doing sync sends through one DefaultMQProducer, for ``seconds``
  after ``warmup``: messages/s and send latency p50/p99/p99.9 (N = 1, 16, 64);
* ``batch:16``: 16 threads sending batches of 32 (SEND_BATCH_MESSAGE);
* ``consume``: a DefaultMQPushConsumer of a new group reads everything the produce cells
  stored, from the first offset (messages/s from the first to the last message received);
* ``e2e``: a push consumer, then 4 paced producer threads at 1,000 msgs/s in all; latency =
  receive time - send time (System.nanoTime() in the body; same JVM).

With replication (``rocket.store.ha`` present, or ``--replication yes``), the 64-producer
and batch cells also run against a master + slave pair, ASYNC_MASTER and SYNC_MASTER
(ASYNC_FLUSH). Apache's pair is measured regardless; ours shows "n/a (no replication yet)"
until our broker replicates (``--replication skip`` leaves these rows out).

The driver counts every error (exceptions, a send status other than SEND_OK, wrong bodies,
missing or duplicate messages; the client retries nothing) and the table shows them per cell:
the Java client driving our broker doubles as a compatibility test.

Output: the table on stdout, and ``bench/results/compare-<date>.md`` and ``.json`` with a
description of the machine. ``--short`` (2 s cells) is a smoke run and saves nothing unless
``--save`` is given.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.compare import java, servers

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
FLUSH_MODES = ("ASYNC_FLUSH", "SYNC_FLUSH")
ROLES = ("ASYNC_MASTER", "SYNC_MASTER")
CELLS = ("produce:1", "produce:16", "produce:64", "batch:16", "consume", "e2e")
REPLICATION_CELLS = ("produce:64", "batch:16")
SYSTEMS = ("ours", "apache")
QUEUES = 8
BODY = 1024
BATCH = 32
E2E_RATE = 1000
TARGET = ("ASYNC_FLUSH", "produce:64")  # issue #9: ratio >= 1.0 here
NO_REPLICATION = "n/a (no replication yet)"


@dataclass
class Settings:
    seconds: float
    warmup: float
    consume_seconds: float
    lib: Path
    classes: Path
    ours_path: Path | None
    keep: bool = False
    max_load: float = 0.0
    max_wait: float = 0.0
    server_warmup: float = 0.0


@dataclass
class Run:
    """Every cell of one system in one configuration (flush mode, role, slave or not)."""

    system: str
    config: str
    cells: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str = ""


# -- running -----------------------------------------------------------------------------------


def run_driver(settings: Settings, home: Path, command: str, args: list[str], timeout: float) -> list[dict[str, Any]]:
    """Run the driver; its RESULT lines as dicts. Raises RuntimeError when it prints none."""
    argv = java.driver_argv(settings.lib, settings.classes, home, command, *args)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"driver {command} {' '.join(args)} ran over {timeout:.0f} s") from exc
    results = java.driver_results(proc.stdout)
    if not results:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise RuntimeError(f"driver {command} exited {proc.returncode} without a result:\n{tail}")
    return results


def measure(system: str, flush: str, role: str, slave: bool, cells: tuple[str, ...], settings: Settings) -> Run:
    """Start ``system``, run ``cells`` one after the other, stop it."""
    config = f"{flush}/{role}" + ("+slave" if slave else "")
    run = Run(system, config)
    wait_for_quiet(settings, f"[{config} {system}]")
    root = Path(tempfile.mkdtemp(prefix=f"rocket-compare-{system}-"))
    label = f"[{config} {system}]"
    print(f"{label} starting {'Apache RocketMQ ' + java.version() if system == 'apache' else 'RocketCluster'} "
          f"in {root} ...", flush=True)
    started = time.monotonic()
    try:
        cluster = servers.start(system, root, flush=flush, role=role, slave=slave, lib=settings.lib,
                                ours_path=settings.ours_path)
    except servers.ClusterStartError as exc:
        run.error = f"did not start: {exc}"
        print(f"{label} {run.error}", flush=True)
        if not settings.keep:
            shutil.rmtree(root, ignore_errors=True)
        return run
    print(f"{label} ready in {time.monotonic() - started:.1f} s (NameServer {cluster.namesrv})", flush=True)
    home = root / "driver"
    try:
        run_driver(settings, home, "topics", [f"namesrv={cluster.namesrv}", "topics=bench,bench-e2e,bench-warmup",
                                              f"queues={QUEUES}"], timeout=120)
        if settings.server_warmup > 0:
            # unmeasured load first, so that a JVM broker's JIT has compiled its hot paths (same for ours)
            half = settings.server_warmup / 2
            warm = run_driver(settings, home, "suite", [f"namesrv={cluster.namesrv}", "topic=bench-warmup",
                                                        "cells=produce:64,batch:16", f"seconds={half}", "warmup=0",
                                                        f"size={BODY}", f"batchSize={BATCH}"],
                              timeout=settings.server_warmup + 120)
            kinds: dict[str, int] = {}
            for w in warm:
                for k, v in (w.get("error_kinds") or {}).items():
                    kinds[k] = kinds.get(k, 0) + int(v)
            run.cells["server-warmup"] = {"cell": "server-warmup", "seconds": settings.server_warmup,
                                          "tps": [round(float(w.get("tps", 0)), 1) for w in warm],
                                          "errors": sum(int(w.get("errors", 0)) for w in warm),
                                          "error_kinds": kinds}
            print(f"{label} server warm-up ({settings.server_warmup:.0f} s, unmeasured): "
                  f"{run.cells['server-warmup']['tps']} msgs/s", flush=True)
        stored = 0
        for cell in cells:
            cpu0 = cluster.broker_cpu_seconds()
            load = os.getloadavg()[0]
            args = [f"namesrv={cluster.namesrv}", "topic=bench", "e2eTopic=bench-e2e", f"cells={cell}",
                    f"seconds={settings.seconds}", f"warmup={settings.warmup}", f"size={BODY}",
                    f"batchSize={BATCH}", f"queues={QUEUES}", f"e2eRate={E2E_RATE}",
                    f"consumeSeconds={settings.consume_seconds}", f"expect={stored}"]
            limit = settings.warmup + settings.seconds + settings.consume_seconds + 120
            try:
                result = run_driver(settings, home, "suite", args, timeout=limit)[0]
            except RuntimeError as exc:
                result = {"cell": cell, "failed": str(exc), "errors": 1}
            result["broker_cpu_s"] = round(cluster.broker_cpu_seconds() - cpu0, 3)
            result["loadavg_1m_before"] = round(load, 2)
            stored += int(result.get("sent_ok", 0)) if cell.startswith(("produce", "batch")) else 0
            run.cells[cell] = result
            print(f"{label} {describe(cell, result)}", flush=True)
            cluster.check_alive()
    except (RuntimeError, servers.ClusterStartError) as exc:
        run.error = str(exc)
        print(f"{label} stopped early: {exc}", flush=True)
    finally:
        cluster.stop()
        if not settings.keep:
            shutil.rmtree(root, ignore_errors=True)
    return run


def wait_for_quiet(settings: Settings, label: str) -> None:
    """With ``--max-load``: wait (up to ``--max-wait`` s) until the 1-minute load average is at most that."""
    if settings.max_load <= 0:
        return
    deadline = time.monotonic() + settings.max_wait
    shown = False
    while os.getloadavg()[0] > settings.max_load and time.monotonic() < deadline:
        if not shown:
            print(f"{label} waiting for the load average ({os.getloadavg()[0]:.1f}) to drop to "
                  f"{settings.max_load} (at most {settings.max_wait:.0f} s) ...", flush=True)
            shown = True
        time.sleep(5)


def describe(cell: str, r: dict[str, Any]) -> str:
    """One progress line for a cell's result."""
    if "failed" in r:
        return f"{cell}: FAILED {r['failed']}"
    errs = f"errors {r.get('errors', 0)}" + (f" {r['error_kinds']}" if r.get("error_kinds") else "")
    if cell == "consume":
        return (f"consume: {r['messages']:,}/{r['expected']:,} msgs at {r['tps']:,.0f} msgs/s, "
                f"duplicates {r['duplicates']}, {errs}")
    if cell == "e2e":
        lat = r["latency"]
        return (f"e2e at {r['rate']:,.0f} msgs/s: {r['received']:,}/{r['sent_ok']:,} received, latency p50/p99/p99.9 "
                f"{lat['p50_ms']:.2f}/{lat['p99_ms']:.2f}/{lat['p999_ms']:.2f} ms, {errs}")
    lat = r["latency"]
    return (f"{cell}: {r['tps']:,.0f} msgs/s, latency p50/p99/p99.9 {lat['p50_ms']:.2f}/{lat['p99_ms']:.2f}/"
            f"{lat['p999_ms']:.2f} ms, broker CPU {r['broker_cpu_s']:.1f} s, {errs}")


# -- the table --------------------------------------------------------------------------------

CELL_LABELS = {
    "produce:1": "1 producer",
    "produce:16": "16 producers",
    "produce:64": "64 producers",
    "batch:16": f"batches of {BATCH}, 16 producers",
}


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}"


def _get(run: Run | None, cell: str) -> dict[str, Any] | None:
    if run is None:
        return None
    r = run.cells.get(cell)
    return None if r is None or "failed" in r else r


def _errors(run: Run | None, cell: str) -> str:
    if run is None:
        return "-"
    r = run.cells.get(cell)
    if r is None:
        return "not run" if not run.error else "failed"
    return "failed" if "failed" in r else str(r.get("errors", 0))


def _cell(run: Run | None, r: dict[str, Any] | None, fmt: Any, na: bool) -> str:
    """A table cell: the formatted figure, the n/a text, "failed" or "-" (not run)."""
    if na:
        return NO_REPLICATION
    if r is not None:
        return str(fmt(r))
    return "failed" if run is not None and (run.error or run.cells) else "-"


def _tps_text(r: dict[str, Any]) -> str:
    return _num(r["tps"])


def build_rows(runs: dict[tuple[str, str], Run], na_ours: set[str]) -> list[dict[str, str]]:
    """Table rows: config, metric, ours, apache, ratio (ours / Apache), errors (ours / Apache)."""
    rows: list[dict[str, str]] = []
    configs = sorted({c for (_, c) in runs}, key=lambda c: (("+slave" in c), c))
    for config in configs:
        ours, apache = runs.get(("ours", config)), runs.get(("apache", config))
        na = config in na_ours
        mode = config.replace("ASYNC_FLUSH/", "") if "+slave" in config else config.replace("/ASYNC_MASTER", "")
        cells = [c for c in CELLS if any(run and c in run.cells for run in (ours, apache))]
        if na:
            cells = [c for c in CELLS if apache and c in apache.cells]
        for cell in cells:
            o, a = _get(ours, cell), _get(apache, cell)
            errors = f"{'n/a' if na else _errors(ours, cell)} / {_errors(apache, cell)}"

            def row(metric: str, fmt: Any, ratio: str, errs: str) -> None:
                rows.append({"config": mode, "metric": metric, "ours": _cell(ours, o, fmt, na),  # noqa: B023
                             "apache": _cell(apache, a, fmt, False), "ratio": "n/a" if na else ratio,  # noqa: B023
                             "errors": errs})

            if cell in CELL_LABELS:
                what = CELL_LABELS[cell]
                kind = "batch" if cell.startswith("batch") else "send"
                tps_ratio = _ratio(o["tps"] if o else None, a["tps"] if a else None)
                row(f"produce msgs/s, {what}", _tps_text, tps_ratio, errors)
                row(f"{kind} latency p50 / p99 / p99.9 ms, {what}", _lat, _lat_ratio(o, a), "")
            elif cell == "consume":
                row("consume msgs/s (push consumer, backlog from offset 0)", _tps_text,
                    _ratio(o["tps"] if o else None, a["tps"] if a else None), errors)
            elif cell == "e2e":
                row(f"end-to-end latency p50 / p99 / p99.9 ms at {E2E_RATE:,} msgs/s", _lat, _lat_ratio(o, a), errors)
        o64, a64 = _get(ours, "produce:64"), _get(apache, "produce:64")
        if (o64 or a64) and "+slave" not in config:
            rows.append({"config": mode, "metric": "broker CPU µs per message, 64 producers",
                         "ours": _cpu(o64) if o64 else "-", "apache": _cpu(a64) if a64 else "-",
                         "ratio": _ratio(_cpu_us(o64), _cpu_us(a64)), "errors": ""})
    return rows


def _lat(r: dict[str, Any]) -> str:
    lat = r["latency"]
    return f"{lat['p50_ms']:.2f} / {lat['p99_ms']:.2f} / {lat['p999_ms']:.2f}"


def _lat_ratio(o: dict[str, Any] | None, a: dict[str, Any] | None) -> str:
    if o is None or a is None:
        return "-"
    return " / ".join(_ratio(o["latency"][k], a["latency"][k]) for k in ("p50_ms", "p99_ms", "p999_ms"))


def _cpu_us(r: dict[str, Any] | None) -> float | None:
    if r is None or not r.get("sent_ok"):
        return None
    return float(r["broker_cpu_s"]) * 1e6 / float(r["sent_ok"])


def _cpu(r: dict[str, Any]) -> str:
    v = _cpu_us(r)
    return "-" if v is None else f"{v:.1f}"


def render(rows: list[dict[str, str]], apache_version: str) -> str:
    """The rows as a Markdown table."""
    head = ["mode", "metric", "ours", f"Apache RocketMQ {apache_version}", "ours / Apache", "errors (ours / Apache)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---", "---", "---:", "---:", "---:", "---:"]) + "|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['metric']} | {r['ours']} | {r['apache']} | {r['ratio']} | {r['errors']} |")
    return "\n".join(lines)


# -- machine and files ----------------------------------------------------------------------


def _first(path: str, key: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30,
                              check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    mem_kb = _first("/proc/meminfo", "MemTotal").split()[0]
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "memory_gib": round(int(mem_kb) / 1024 / 1024, 1) if mem_kb.isdigit() else None,
        "cpu_model": _first("/proc/cpuinfo", "model name"),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "java": java.java_version(),
        "apache_rocketmq": java.version(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def save(out: Path, data: dict[str, Any], table: str) -> tuple[Path, Path]:
    """Write ``compare-<date>.json`` and ``.md`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"compare-{data['machine']['date'][:10]}"
    json_path, md_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    m, s = data["machine"], data["settings"]
    errors = []
    for run in data["runs"]:
        if run["error"]:
            errors.append(f"- {run['system']} {run['config']}: {run['error'].splitlines()[0]}")
        for cell, r in run["cells"].items():
            if r.get("failed"):
                errors.append(f"- {run['system']} {run['config']} {cell}: failed: {r['failed'].splitlines()[0]}")
            elif r.get("error_kinds"):
                merged: dict[str, int] = {}
                for kind, v in r["error_kinds"].items():
                    kind = re.sub(r"\s*See https?://\S+ for further details\.", "", kind)
                    kind = re.sub(r"cost \[\d+\]ms", "cost [..]ms", kind)
                    merged[kind] = merged.get(kind, 0) + int(v)
                kinds = "; ".join(f"{k} (x{v})" for k, v in merged.items())
                note = " (unmeasured warm-up load)" if cell == "server-warmup" else ""
                errors.append(f"- {run['system']} {run['config']} {cell}{note}: {kinds}")
    loads = []
    for run in data["runs"]:
        values = [r["loadavg_1m_before"] for r in run["cells"].values() if "loadavg_1m_before" in r]
        if values:
            loads.append(f"{run['system']} {run['config']} {min(values):.1f}-{max(values):.1f}")
    md = [
        f"# RocketCluster vs Apache RocketMQ {m['apache_rocketmq']} — {m['date'][:10]}",
        "",
        "`make bench-compare` (`python -m bench.compare`): the same Java load generator "
        "(`bench/compare/Driver.java`, Apache's own client) against our NameServer + broker and against "
        "Apache RocketMQ's, one after the other, on loopback.",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu_model']}), {m['memory_gib']} GiB, Linux {m['kernel']}; "
        f"Python {m['python']}; {m['java']}. Load average at start {m['loadavg_at_start']} "
        "(the machine is shared: the load generator, the broker and other work run on the same CPUs).",
        f"Ours: {data['ours']['source']}.",
        "",
        f"Each cluster first gets {s['server_warmup']:.0f} s of unmeasured load (64 producers, then batches), "
        "so that the JVM broker's JIT has compiled its hot paths. "
        f"Cells: {s['seconds']} s each after {s['warmup']} s of warm-up"
        + (f", {s['rounds']} rounds alternating which system goes first (per cell the round with the median "
           "msgs/s is shown, for end-to-end the median p99; errors are summed over the rounds)"
           if s.get("rounds", 1) > 1 else "")
        + f"; {BODY}-byte messages; topics of {QUEUES} "
        f"queues; sync sends, no client retries; Apache's broker -Xms2g -Xmx2g, 512 MiB direct memory. "
        "`ours / Apache`: above 1 is better for msgs/s, below 1 is better for latency and CPU.",
        "",
        table,
        "",
        *round_ratios(data),
        "1-minute load average before each cell of the round shown (it counts the runnable threads of the "
        "system under test and of the load generator too, not only the machine's other work): "
        + "; ".join(loads) + ".",
        "",
        "## Errors",
        "",
        *(errors or ["None: every send succeeded and every message came back, on both systems."]),
        "",
    ]
    md_path.write_text("\n".join(md))
    return md_path, json_path


def round_ratios(data: dict[str, Any]) -> list[str]:
    """With several rounds: each round's ours / Apache msgs/s ratio per throughput cell (paired in time)."""
    if data["settings"].get("rounds", 1) < 2:
        return []
    runs = {(r["system"], r["config"]): r for r in data["runs"]}
    lines = ["Each round's own ratio (ours / Apache msgs/s, the two measured minutes apart; their median in bold) "
             "shows how much the shared machine moved the figures:", ""]
    for (system, config), ours in runs.items():
        apache = runs.get(("apache", config))
        if system != "ours" or apache is None:
            continue
        parts = []
        for cell in CELLS:
            o = (ours["cells"].get(cell) or {}).get("rounds")
            a = (apache["cells"].get(cell) or {}).get("rounds")
            if cell == "e2e" or not o or not a:
                continue
            ratios = sorted(x / y for x, y in zip(o, a, strict=False) if x is not None and y)
            if ratios:
                each = ", ".join(f"{x / y:.2f}" if x is not None and y else "-" for x, y in zip(o, a, strict=False))
                parts.append(f"{cell} {each} (**{ratios[(len(ratios) - 1) // 2]:.2f}**)")
        if parts:
            lines.append(f"- {config}: " + "; ".join(parts))
    return [*lines, ""]


def rerender(path: Path) -> int:
    """Rebuild the table and the ``.md`` of a saved ``.json`` (after a change of format)."""
    data = json.loads(path.read_text())
    runs = {(r["system"], r["config"]): Run(r["system"], r["config"], dict(r["cells"]), r["error"])
            for r in data["runs"]}
    na_ours = {c for (system, c), run in runs.items() if system == "ours" and run.error == NO_REPLICATION}
    rows = build_rows(runs, na_ours)
    data["rows"] = rows
    table = render(rows, data["machine"]["apache_rocketmq"])
    md, js = save(path.parent, data, table)
    print(f"{table}\nwritten: {md}, {js}")
    return 0


def export_ref(ref: str) -> Path:
    """``git archive <ref> services`` into a temporary folder; the folder holding ``rocket``."""
    dest = Path(tempfile.mkdtemp(prefix="rocket-compare-src-"))
    archive = subprocess.run(["git", "archive", ref, "services"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / "services"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="2 s cells: a smoke run (saves nothing unless --save)")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per cell (default 10, short 2)")
    parser.add_argument("--replication", choices=("auto", "yes", "no", "skip"), default="auto",
                        help="measure our master+slave: auto = when rocket.store.ha exists; skip = no such rows")
    parser.add_argument("--flush", default=",".join(FLUSH_MODES), help="flush modes to run (comma-separated)")
    parser.add_argument("--ours-ref", default=None,
                        help="run our servers from this git commit (exported to a temp folder) instead of the tree")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat everything, alternating which system goes first; the table shows medians")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results (default bench/results)")
    parser.add_argument("--render", type=Path, default=None, metavar="JSON",
                        help="only rebuild the table and .md of a saved compare-<date>.json")
    parser.add_argument("--save", action="store_true", help="write bench/results/compare-<date>.md/.json")
    parser.add_argument("--no-save", action="store_true", help="print only")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folders (logs, stores)")
    parser.add_argument("--server-warmup", type=float, default=None,
                        help="seconds of unmeasured load on a fresh cluster before its cells (default 30, short 4)")
    parser.add_argument("--max-load", type=float, default=0.0,
                        help="before each system's run, wait until the 1-minute load average is at most this")
    parser.add_argument("--max-wait", type=float, default=600.0, help="longest such wait, seconds (default 600)")
    args = parser.parse_args(argv)
    if args.render is not None:
        return rerender(args.render)
    seconds = args.seconds or (2.0 if args.short else 10.0)
    warmup = 0.5 if args.short else 2.0
    save_files = (args.save or not args.short) and not args.no_save

    print(f"Apache RocketMQ {java.version()}: fetching with Maven into {java.cache_dir()} (first time only) ...",
          flush=True)
    try:
        lib = java.ensure_jars()
        classes = java.ensure_driver(lib)
    except java.JavaSetupError as exc:
        print(f"bench-compare: {exc}", file=sys.stderr)
        return 2
    ours_path = export_ref(args.ours_ref) if args.ours_ref else None
    commit = _git("rev-parse", "--short", args.ours_ref or "HEAD")
    dirty = bool(_git("status", "--porcelain", "services")) and not args.ours_ref
    ours_source = f"commit {commit}" + (" plus uncommitted changes under services/" if dirty else "")
    if ours_path is not None:
        spec_ok = (ours_path / "rocket" / "broker" / "ha").is_dir()
    else:
        spec_ok = importlib.util.find_spec("rocket.store.ha") is not None
    ours_replicates = {"auto": spec_ok, "yes": True, "no": False, "skip": False}[args.replication]
    settings = Settings(seconds, warmup, 12.0 if args.short else 60.0, lib, classes, ours_path, args.keep,
                        args.max_load, args.max_wait,
                        args.server_warmup if args.server_warmup is not None else (4.0 if args.short else 30.0))
    info = machine()
    print(f"machine: {info}\nours: {ours_source}; replication measured for ours: {ours_replicates}", flush=True)

    by_key: dict[tuple[str, str], list[Run]] = {}
    na_ours: set[str] = set()
    flushes = [f.strip() for f in args.flush.split(",") if f.strip()]
    try:
        for rnd in range(args.rounds):
            order = SYSTEMS if rnd % 2 == 0 else SYSTEMS[::-1]  # alternate who goes first
            if args.rounds > 1:
                print(f"--- round {rnd + 1} of {args.rounds} ({' then '.join(order)}) ---", flush=True)
            for flush in flushes:
                for system in order:
                    run = measure(system, flush, "ASYNC_MASTER", False, CELLS, settings)
                    by_key.setdefault((system, run.config), []).append(run)
            if args.replication == "skip":
                continue
            for role in ROLES:
                for system in order:
                    config = f"ASYNC_FLUSH/{role}+slave"
                    if system == "ours" and not ours_replicates:
                        by_key.setdefault((system, config), []).append(Run(system, config, error=NO_REPLICATION))
                        na_ours.add(config)
                        continue
                    run = measure(system, "ASYNC_FLUSH", role, True, REPLICATION_CELLS, settings)
                    by_key.setdefault((system, run.config), []).append(run)
    finally:
        if ours_path is not None:
            shutil.rmtree(ours_path.parent, ignore_errors=True)
    runs = {key: combine(rounds) for key, rounds in by_key.items()}

    rows = build_rows(runs, na_ours)
    table = render(rows, java.version())
    print("\n" + table + "\n")
    target = _ratio(_tps(runs.get(("ours", TARGET[0] + "/ASYNC_MASTER")), TARGET[1]),
                    _tps(runs.get(("apache", TARGET[0] + "/ASYNC_MASTER")), TARGET[1]))
    print(f"target (issue #9): ours / Apache >= 1.0 for produce msgs/s, 64 producers, ASYNC_FLUSH: {target}")
    total_errors = {s: sum(int(r.get("errors", 0)) for (sys_, _), run in runs.items() if sys_ == s
                           for r in run.cells.values()) for s in SYSTEMS}
    print(f"errors: ours {total_errors['ours']}, Apache {total_errors['apache']}")
    if save_files:
        data = {
            "machine": {**info, "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]},
            "settings": {"seconds": seconds, "warmup": warmup, "rounds": args.rounds,
                         "server_warmup": settings.server_warmup, "body": BODY, "batch": BATCH,
                         "queues": QUEUES,
                         "e2e_rate": E2E_RATE, "consume_seconds": settings.consume_seconds,
                         "apache_broker_jvm": servers.APACHE_BROKER_JVM, "driver_jvm": java.DRIVER_JVM},
            "ours": {"source": ours_source, "replication": ours_replicates},
            "target": {"what": "produce msgs/s, 64 producers, ASYNC_FLUSH, ours / Apache >= 1.0", "ratio": target},
            "rows": rows,
            "runs": [{"system": r.system, "config": r.config, "error": r.error, "cells": r.cells}
                     for r in runs.values()],
        }
        md, js = save(args.out, data, table)
        print(f"written: {md}, {js}")
    return 0


def _key_metric(cell: str, r: dict[str, Any]) -> float:
    """What "median" means for a cell: msgs/s, or for e2e the p99 latency (0 for the server warm-up)."""
    if cell not in CELLS:
        return 0.0
    return float(r["latency"]["p99_ms"]) if cell == "e2e" else float(r["tps"])


def combine(rounds: list[Run]) -> Run:
    """One Run from several rounds: per cell the round with the median key metric (msgs/s, or e2e p99),
    its errors replaced by the sum over all rounds; every round's key metric kept under ``rounds``."""
    if len(rounds) == 1:
        return rounds[0]
    out = Run(rounds[0].system, rounds[0].config, error="; ".join(r.error for r in rounds if r.error))
    for cell in dict.fromkeys(c for r in rounds for c in r.cells):
        results = [r.cells[cell] for r in rounds if cell in r.cells]
        ok = sorted((x for x in results if "failed" not in x), key=lambda x: _key_metric(cell, x))
        chosen = dict(ok[(len(ok) - 1) // 2] if ok else results[0])
        chosen["rounds"] = [round(_key_metric(cell, x), 2) if "failed" not in x else None for x in results]
        chosen["errors"] = sum(int(x.get("errors", 0)) for x in results)
        kinds: dict[str, int] = {}
        for x in results:
            for k, v in (x.get("error_kinds") or {}).items():
                kinds[k] = kinds.get(k, 0) + int(v)
        chosen["error_kinds"] = kinds
        out.cells[cell] = chosen
    return out


def _tps(run: Run | None, cell: str) -> float | None:
    r = _get(run, cell)
    return None if r is None else float(r["tps"])


if __name__ == "__main__":
    sys.exit(main())
