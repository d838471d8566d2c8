"""``make bench-compare``: our cluster and Apache RocketMQ 5.x side by side, one run.

``python -m bench.compare [--cell NAME ...] [--mode MODE ...] [--rounds N] [--short] [--ours-ref REF]``

The load generator is the same for both systems: ``Driver.java`` on Apache's own Java client
(:mod:`bench.compare.java`), 1 KiB messages, topics of 8 queues. Cells (``--cell``, repeatable or
comma-separated; default all):

* ``produce:N``: N threads of sync sends through one DefaultMQProducer (N = 1, 16, 64): msgs/s and
  send latency p50/p99/p99.9; ``batch:16``: 16 threads sending batches of 32;
* ``consume``: a push consumer of a new group reads what the produce cells stored, from offset 0;
* ``e2e``: a push consumer, then 4 paced producer threads at 1,000 msgs/s; receive - send time;
* ``omb`` (ASYNC_FLUSH only): the OpenMessaging Benchmark's ``1-topic-16-partitions-1kb`` at fixed
  rates: 1 topic of 16 queues, one async producer, one push consumer; its maximum first, then
  open-loop at 25/50/80 % of our maximum of the mode's first round (both systems, every round:
  :class:`OmbRates`); publish and
  end-to-end latency p50/p99/p99.9 from the intended send time (coordinated-omission safe);
* ``quorum``: ours only, a master + slave acknowledging with ``allAckInSyncStateSet`` in controller
  mode vs as SYNC_MASTER (:mod:`bench.compare.controller`; SYNC_MASTER's figures are those of the
  ``SYNC_MASTER`` mode when that runs too, the same setup);
* ``failover``: kill -9 of a controller-mode master, RTO and acknowledged messages lost, ours and
  Apache's controller (:mod:`bench.compare.controller`);
* ``timer``: timer messages (``setDeliverTimeMs``) on one ASYNC_FLUSH master with ``timerPrecisionMs``
  1000: delivery error p50/p99/max of 2,000 timers over 30 s, then enqueue throughput of 10,000 timer
  vs 10,000 plain sync sends from 64 threads (:mod:`bench.compare.timer`; about 1 minute per system
  and round).

Modes (``--mode``, repeatable or comma-separated; default all) of the throughput cells:
``ASYNC_FLUSH`` and ``SYNC_FLUSH`` (one master, every cell), ``ASYNC_MASTER`` and ``SYNC_MASTER``
(a master + slave, ASYNC_FLUSH, produce:64 and batch:16). Giving only ``--mode`` runs no
controller-mode cell and no timer cell; giving only ``--cell failover`` runs only that.

Each mode runs on each system alone (:func:`run_targets`): the system runs all the mode's rounds
(``--rounds``, default 3) back to back, Apache on one NameServer and broker(s) kept for all of them,
ours on fresh ones per round (:data:`KEEP_SYSTEMS`), and stops before the other system starts;
which system goes first alternates between modes (ours first in a mode with the omb cell). Each
round runs every cell of that mode in one driver process on topics of its own (first topics, then
unmeasured load, then the cells). Then the quorum cell's clusters the same way (fresh per round,
as ours always are), then the timer cell per round; the failover cell runs its rounds on one cluster per system
(first in the run, so a cut run has it). Clusters are killed at once when done (their stores
are thrown away). Before each round's run (and each timer cell) the page cache is written back and
dropped when this process may (root; :func:`settle_page_cache`; ``--keep-page-cache`` to skip), so
that each run starts with nothing dirty and no clean, unmapped page cache left before it; the page
says whether it was.

The driver counts every error (exceptions, a send status other than SEND_OK, wrong bodies, missing
or duplicate messages; the client retries nothing); the page shows them.

Output: progress on stdout; ``bench/results/compare-<YYYY-MM-DD-HHMM>.json`` and ``.md``, saved after
every cell (a cut run keeps what it measured), and ``bench/results/README.md``, the list of saved
runs (:mod:`bench.compare.results`). ``--short`` (2 s cells, 1 round) is a smoke run and saves
nothing unless ``--save`` is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.calibrate import page_cache_write_cost
from bench.compare import controller, java, results, servers, timer
from bench.compare.results import (
    CELLS,
    FAILOVER,
    MODES,
    OMB,
    OMB_FRACTIONS,
    OMB_MODES,
    OMB_QUEUES,
    QUORUM,
    QUORUM_ALLACK,
    QUORUM_BASE,
    REPLICATION_CELLS,
    TIMER,
)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
SYSTEMS = results.SYSTEMS
QUEUES = 8
BODY = 1024
BATCH = results.BATCH
E2E_RATE = results.E2E_RATE
ALL_CELLS = (*CELLS, OMB, QUORUM, FAILOVER, TIMER)
#: The omb cell's bound on unanswered async sends while it measures the maximum.
OMB_WINDOW = 1000
#: ... and on messages acknowledged but not yet received (OMB's RateController ramps the rate down
#: past ``RECEIVE_BACKLOG_LIMIT``, 1000 by default: its maximum is one the consumer keeps up with).
OMB_BACKLOG = 1000
#: The systems whose cluster of a mode is kept for all its rounds: Apache's JVMs run faster once warm
#: (and take 7-30 s to start). Ours gets a fresh cluster per round (:func:`run_targets` says why).
KEEP_SYSTEMS = ("apache",)
#: Default durations (s), chosen so that the default run (3 rounds of everything) takes at most 30
#: minutes on a 2-core machine: throughput cells (and each omb phase), their warm-up, the unmeasured
#: load at the start of each round's driver, the longest consume.
SECONDS, WARMUP, SERVER_WARMUP, CONSUME_SECONDS = 5.0, 1.0, 6.0, 20.0


@dataclass
class Settings:
    seconds: float
    warmup: float
    consume_seconds: float
    server_warmup: float
    lib: Path
    classes: Path
    ours_path: Path | None
    keep: bool = False
    max_load: float = 0.0
    max_wait: float = 0.0
    timer_classes: Path | None = None
    #: Write back and drop the page cache before each system's run (:func:`settle_page_cache`).
    drop_caches: bool = False


Record = Callable[[str, str, int, str, dict[str, Any], tuple[float, float]], None]


# -- one system in one mode ---------------------------------------------------------------------------


class OmbRates:
    """The absolute rates (msgs/s) of the ``omb`` cell, per mode: the same for both systems and every
    round, so that the medians over the rounds compare like with like.

    They are :data:`OMB_FRACTIONS` of our maximum in the mode's first round (ours goes first there):
    our driver measures it and picks them; every later run of either system gets them. Every run
    still measures its own maximum (on the page). Before any result of ours (ours failed), Apache
    runs at the fractions of its own maximum ("rates from" on the page says which)."""

    def __init__(self) -> None:
        self.rates: dict[str, list[float]] = {}  # mode -> our first rates

    def given(self, system: str, mode: str, rnd: int) -> list[float] | None:
        """The rates to pass to ``system``'s driver in ``mode`` and round ``rnd`` (0-based), or None:
        the driver takes the fractions of its own maximum."""
        return self.rates.get(mode)

    def record(self, system: str, mode: str, rnd: int, result: dict[str, Any]) -> None:
        """Note the rates our driver ran at (its ``omb`` result's ``rates``), the first time."""
        rates = [float(x) for x in result.get("rates") or []]
        if system == "ours" and rates and "failed" not in result:
            self.rates.setdefault(mode, rates)


@dataclass
class Target:
    """One cluster of the run: ``system`` in ``config`` (a mode, or a quorum configuration),
    started with ``start(root)``; ``cluster``/``root`` while it runs."""

    system: str
    config: str
    start: Callable[[Path], servers.Cluster]
    #: One cluster for all its rounds; else a fresh one per round (:data:`KEEP_SYSTEMS`).
    keep: bool = True
    cluster: servers.Cluster | None = None
    root: Path | None = None

    @property
    def label(self) -> str:
        return f"{self.config} {self.system}"


def start_target(t: Target, settings: Settings, label: str) -> str | None:
    """Start ``t``'s cluster in a new temporary folder; None, or why it did not start."""
    wait_for_quiet(settings, label)
    t.root = Path(tempfile.mkdtemp(prefix=f"rocket-compare-{t.system}-"))
    print(f"{label} starting {'Apache RocketMQ ' + java.version() if t.system == 'apache' else 'RocketCluster'} "
          f"in {t.root} ...", flush=True)
    started = time.monotonic()
    try:
        t.cluster = t.start(t.root)
    except servers.ClusterStartError as exc:
        print(f"{label} did not start: {exc}", flush=True)
        stop_target(t, settings)
        return f"did not start: {exc}"
    print(f"{label} ready in {time.monotonic() - started:.1f} s (NameServer {t.cluster.namesrv})", flush=True)
    return None


def stop_target(t: Target, settings: Settings) -> None:
    """Stop ``t``'s cluster at once (its store is thrown away) and remove its folder (unless ``--keep``)."""
    if t.cluster is not None:
        t.cluster.stop(discard=True)
    if t.root is not None and not settings.keep:
        shutil.rmtree(t.root, ignore_errors=True)
    t.cluster, t.root = None, None


def run_targets(targets: list[Target], cells: tuple[str, ...], rounds: int, settings: Settings, record: Record,
                problem: Callable[[str, str, int, str], None], omb: OmbRates | None = None) -> None:
    """Run ``cells`` on each target alone: all its rounds back to back (one driver process per
    round, topics of that round), on one cluster for all of them when ``t.keep``, else on a fresh
    one per round; its cluster is stopped before the next target starts, so that no other cluster
    is on the machine while one is measured. A cluster that did not start or died is started afresh
    for the next round; ``problem`` gets each round it missed.

    Why not take turns round by round with the idle cluster frozen (SIGSTOP), as before 2026-11-27:
    memory that stayed resident from before a run slowed that run on this VM. ``--cell batch:16
    --mode ASYNC_MASTER --rounds 3``: our master+slave made 127-146k msgs/s in every round on a fresh
    cluster per round with nothing beside it (``--system ours``, twice), but 89-126k beside a frozen
    process holding 5 GiB, 87-96k in rounds 2 and 3 of the day's full runs (112-139k in round 1,
    before Apache's frozen cluster existed), and 75-103k in rounds 2 and 3 on one kept cluster alone
    (137-139k in round 1). ``perf record -a`` of that last case: ``copy_folio_from_iter_atomic`` (the
    CommitLog's ``pwrite`` into new page-cache pages) went from 1.7 % of all samples in round 1 to
    28 % in round 3, the cost of first touching guest memory the host backs anew (this VM reports
    free pages to the host: ``page_reporting``). Hence ours gets a fresh cluster per round, as it
    did before, and Apache's JVMs are kept warm for all their rounds (fresh per round, Apache's
    master+slave made 50-58k against 84-88k in its kept rounds 2 and 3): each system as it runs
    best, and never beside the other."""
    for t in targets:
        try:
            for rnd in range(rounds):
                label = f"[round {rnd + 1} {t.label}]"
                if t.cluster is None:
                    why = start_target(t, settings, label)
                    if why is not None:
                        problem(t.system, t.config, rnd, why)
                        continue
                assert t.cluster is not None
                try:
                    measure(t, rnd, cells, settings, record, omb)
                    if not t.keep:
                        stop_target(t, settings)
                except servers.ClusterStartError as exc:
                    print(f"{label} stopped early: {exc}", flush=True)
                    problem(t.system, t.config, rnd, f"stopped early: {exc}")
                    stop_target(t, settings)
        finally:
            stop_target(t, settings)


def measure(t: Target, rnd: int, cells: tuple[str, ...], settings: Settings, record: Record,
            omb: OmbRates | None = None) -> None:
    """Run ``cells`` of round ``rnd`` on ``t``'s running cluster in one driver process, on topics of
    their own (``bench-r<N>``...).

    Each cell's result goes to ``record`` as it arrives, with the broker CPU it used and the
    1-minute load average at its start and end. Raises :class:`servers.ClusterStartError` when the cluster died.
    """
    cluster = t.cluster
    assert cluster is not None and t.root is not None
    system, config = t.system, t.config
    label = f"[round {rnd + 1} {t.label}]"
    prepare_run(settings, label)
    # consume reads what the produce cells before it stored; without any, an unmeasured backlog first
    before_consume = cells[:cells.index("consume")] if "consume" in cells else cells
    fill = settings.seconds if "consume" in cells and not any(c.startswith(("produce", "batch"))
                                                              for c in before_consume) else 0
    suffix = f"-r{rnd + 1}"
    topic, e2e_topic, omb_topic = f"bench{suffix}", f"bench-e2e{suffix}", f"bench-omb{suffix}"
    args = [f"namesrv={cluster.namesrv}", f"topic={topic}", f"e2eTopic={e2e_topic}", f"cells={','.join(cells)}",
            f"createTopics={topic},{e2e_topic},bench-warmup", "warmupTopic=bench-warmup",
            f"serverWarmup={settings.server_warmup}", f"fill={fill}",
            f"seconds={settings.seconds}", f"warmup={settings.warmup}", f"size={BODY}", f"batchSize={BATCH}",
            f"queues={QUEUES}", f"e2eRate={E2E_RATE}", f"consumeSeconds={settings.consume_seconds}"]
    if OMB in cells:
        given = omb.given(system, config, rnd) if omb is not None else None
        args += [f"ombTopic={omb_topic}", f"ombQueues={OMB_QUEUES}", f"ombMaxSeconds={settings.seconds}",
                 f"ombWindow={OMB_WINDOW}", f"ombBacklog={OMB_BACKLOG}",
                 f"ombFractions={','.join(str(f) for f in OMB_FRACTIONS)}",
                 f"ombRates={','.join(f'{x:g}' for x in given or [])}"]
    limit = (180 + settings.server_warmup + fill + settings.consume_seconds
             + len(cells) * (settings.warmup + settings.seconds + 45)
             + (len(OMB_FRACTIONS) + 1) * (settings.warmup + settings.seconds + 35) * (OMB in cells))
    current: dict[str, Any] = {}

    def on_start(cell: str) -> None:
        current.update(cell=cell, cpu=cluster.broker_cpu_seconds(), ctl=cluster.controller_cpu_seconds(),
                       load=os.getloadavg()[0])

    def on_result(r: dict[str, Any]) -> None:
        cell = str(r.get("cell"))
        r["broker_cpu_s"] = round(cluster.broker_cpu_seconds() - current.get("cpu", 0.0), 3)
        if cluster.controllers():
            r["controller_cpu_s"] = round(cluster.controller_cpu_seconds() - current.get("ctl", 0.0), 3)
        load = (float(current.get("load", 0.0)), os.getloadavg()[0])
        current.clear()
        if cell in ("server-warmup", "fill"):
            print(f"{label} {cell} (unmeasured): {r.get('tps')} msgs/s, errors {r.get('errors', 0)}", flush=True)
            return
        if cell == OMB and omb is not None:
            omb.record(system, config, rnd, r)
        record(system, config, rnd, cell, r, load)
        print(f"{label} {describe(cell, r)} (load {load[0]:.1f}→{load[1]:.1f})", flush=True)
        cluster.check_alive()

    run = java.stream_driver(java.driver_argv(settings.lib, settings.classes, t.root / f"driver{suffix}", "suite",
                                              *args),
                             timeout=limit, stderr_path=t.root / "logs" / f"driver{suffix}.log", on_start=on_start,
                             on_result=on_result)
    if current.get("cell") and current["cell"] not in ("server-warmup", "fill"):
        # a cell started and never reported: the driver died or ran over its time
        tail = (t.root / "logs" / f"driver{suffix}.log").read_text(errors="replace").splitlines()[-15:]
        r = {"cell": current["cell"], "errors": 1,
             "failed": f"driver exited {run.returncode} (timed out: {run.timed_out}) during the cell: "
                       + " | ".join(tail)}
        record(system, config, rnd, current["cell"], r, (float(current["load"]), os.getloadavg()[0]))
    cluster.check_alive()


#: The kernel's knob for dropping clean caches (Documentation/admin-guide/sysctl/vm.rst, "drop_caches":
#: 1 the page cache, 2 dentries and inodes, 3 both); writable by root only.
DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def can_drop_caches(knob: Path = DROP_CACHES) -> str | None:
    """None when this process may write ``knob``, else why not (one line, for the page)."""
    if not knob.exists():
        return f"{knob} does not exist"
    if not os.access(knob, os.W_OK):
        return f"{knob} is not writable (needs root)"
    return None


def settle_page_cache(knob: Path = DROP_CACHES) -> float:
    """Write every dirty page back (``sync(2)``), then drop the clean page cache (``3`` to ``knob``),
    so that a system's run starts with nothing dirty and no clean, unmapped cache left by the other
    (pages a process still maps stay); returns the seconds it took. Raises OSError when ``knob``
    cannot be written.

    Why (measured with ``--mode ASYNC_MASTER --cell batch:16`` on 2026-11-26, when the systems took
    turns round by round and Apache's idle cluster stayed up, frozen, beside ours): with Apache's
    store of the round before still cached, our brokers' CommitLog writes became expensive:
    ``perf record -a`` put 32 % of all CPU samples in ``copy_folio_from_iter_atomic`` under
    ``pwrite64`` (0.5 % when ours ran alone, 1 % after a drop), our broker CPU per message rose from
    8 to 13 µs and the cell fell from 150-177k to 113-135k msgs/s (146-165k with the drop). The
    likely cause is this VM's free page reporting (virtio-balloon ``VIRTIO_BALLOON_F_REPORTING``): a
    page the guest reported free is handed back to the host, and the first write into it costs a
    host fault. Each system now also runs alone (:func:`run_targets`); the drop still gives each run
    the same start."""
    started = time.monotonic()
    os.sync()
    knob.write_text("3\n")
    return time.monotonic() - started


def prepare_run(settings: Settings, label: str) -> None:
    """Before one system's run: with ``settings.drop_caches`` :func:`settle_page_cache`, then
    :func:`wait_for_quiet`."""
    if settings.drop_caches:
        took = settle_page_cache()
        print(f"{label} page cache written back and dropped ({took:.1f} s)", flush=True)
    wait_for_quiet(settings, label)


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
    if cell == OMB:
        phases = "; ".join(
            f"{ph['rate']:,.0f} msgs/s: publish p50/p99/p99.9 {_pcts(ph['publish_from_intended'])}, "
            f"e2e {_pcts(ph['e2e'])} ms" for ph in r.get("phases") or [])
        return f"omb: max {r['max_rate']:,.0f} msgs/s ({r.get('rates_from')}); {phases}; {errs}"
    lat = r["latency"]
    if cell == "e2e":
        return (f"e2e at {r['rate']:,.0f} msgs/s: {r['received']:,}/{r['sent_ok']:,} received, latency p50/p99/p99.9 "
                f"{lat['p50_ms']:.2f}/{lat['p99_ms']:.2f}/{lat['p999_ms']:.2f} ms, {errs}")
    return (f"{cell}: {r['tps']:,.0f} msgs/s, latency p50/p99/p99.9 {lat['p50_ms']:.2f}/{lat['p99_ms']:.2f}/"
            f"{lat['p999_ms']:.2f} ms, broker CPU {r['broker_cpu_s']:.1f} s, {errs}")


def _pcts(lat: dict[str, Any]) -> str:
    return f"{lat['p50_ms']:.2f}/{lat['p99_ms']:.2f}/{lat['p999_ms']:.2f}"


# -- machine and selection ---------------------------------------------------------------------------


def _first(path: str, key: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30,
                              check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine() -> dict[str, Any]:
    """Cores, CPU model, RAM, kernel, Python, Java, Apache RocketMQ version, load average now, and
    the CPU seconds per GiB of writing new data and of rewriting cached
    pages (:func:`bench.calibrate.page_cache_write_cost`, about 3 s): on the VMs this runs on the
    first differs by an order of magnitude from one day to another, and both systems pay it per
    byte stored."""
    mem_kb = _first("/proc/meminfo", "MemTotal").split()[0]
    cost = page_cache_write_cost()
    return {
        "page_cache_s_per_gib": {"new": round(cost.new, 3), "rewritten": round(cost.rewritten, 3)},
        "nproc": os.cpu_count(),
        "memory_gib": round(int(mem_kb) / 1024 / 1024, 1) if mem_kb.isdigit() else None,
        "cpu_model": _first("/proc/cpuinfo", "model name"),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "java": java.java_version(),
        "apache_rocketmq": java.version(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def split_list(values: list[str] | None) -> list[str]:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]`` (repeatable, comma-separated options)."""
    return [x.strip() for v in values or [] for x in v.split(",") if x.strip()]


def select(cells_arg: list[str] | None, modes_arg: list[str] | None) -> tuple[dict[str, tuple[str, ...]], bool, bool]:
    """What to run: mode -> its throughput cells, whether the quorum cell runs, whether failover runs.

    No ``--cell`` and no ``--mode``: everything. Only ``--mode``: those modes' cells, no
    controller-mode cell. Raises ValueError for an unknown cell or mode.
    """
    cells = split_list(cells_arg)
    for c in cells:
        if c not in ALL_CELLS:
            raise ValueError(f"unknown cell {c!r} (one of {', '.join(ALL_CELLS)})")
    modes = [results.mode_of(m) for m in split_list(modes_arg)]
    everything = not cells and not modes
    chosen_modes = modes or list(MODES)
    matrix: dict[str, tuple[str, ...]] = {}
    for mode in chosen_modes:
        allowed = REPLICATION_CELLS if MODES[mode][2] else CELLS + ((OMB,) if mode in OMB_MODES else ())
        wanted = tuple(c for c in allowed if (not cells or c in cells))
        if cells and not modes and not wanted:
            continue
        if wanted:
            matrix[mode] = wanted
    quorum = everything or QUORUM in cells
    failover = everything or FAILOVER in cells
    return matrix, quorum, failover


def select_timer(cells_arg: list[str] | None, modes_arg: list[str] | None) -> bool:
    """Whether the ``timer`` cell runs: in the default run (no ``--cell``, no ``--mode``) and when
    named by ``--cell``."""
    cells = split_list(cells_arg)
    return TIMER in cells or (not cells and not split_list(modes_arg))


def export_ref(ref: str) -> Path:
    """``git archive <ref> services`` into a temporary folder; the folder holding ``rocket``."""
    dest = Path(tempfile.mkdtemp(prefix="rocket-compare-src-"))
    archive = subprocess.run(["git", "archive", ref, "services"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / "services"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cell", action="append", metavar="NAME",
                        help=f"run only these cells (repeatable or comma-separated): {', '.join(ALL_CELLS)}")
    parser.add_argument("--mode", action="append", metavar="MODE",
                        help=f"run only these modes (repeatable or comma-separated): {', '.join(MODES)}")
    parser.add_argument("--rounds", type=int, default=None, help="rounds, alternating which system goes first "
                        "(default 3; --short 1); the page shows each round and the medians")
    parser.add_argument("--short", action="store_true", help="2 s cells, 1 round: a smoke run (saves nothing "
                        "unless --save)")
    parser.add_argument("--seconds", type=float, default=None, help=f"seconds per cell (default {SECONDS:g})")
    parser.add_argument("--server-warmup", type=float, default=None, help="seconds of unmeasured load on a fresh "
                        f"cluster before its cells (default {SERVER_WARMUP:g}; --short 2)")
    parser.add_argument("--ours-ref", default=None,
                        help="run our servers from this git commit (exported to a temp folder) instead of the tree")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results (default bench/results)")
    parser.add_argument("--render", type=Path, default=None, metavar="JSON",
                        help="only rebuild the .md of a saved compare-*.json and the index")
    parser.add_argument("--index", action="store_true", help="only rebuild the index (bench/results/README.md)")
    parser.add_argument("--save", action="store_true", help="save a --short run too")
    parser.add_argument("--no-save", action="store_true", help="print only")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folders (logs, stores)")
    parser.add_argument("--max-load", type=float, default=0.0,
                        help="before each system's run, wait until the 1-minute load average is at most this")
    parser.add_argument("--max-wait", type=float, default=600.0, help="longest such wait, seconds (default 600)")
    parser.add_argument("--system", choices=SYSTEMS, default=None,
                        help="run the throughput modes' cells on this system only (a probe of one system's "
                             "rounds without the other's cluster; default both)")
    parser.add_argument("--keep-page-cache", action="store_true",
                        help="do not write back and drop the page cache before each system's run (it is "
                             "dropped by default when this process may write /proc/sys/vm/drop_caches)")
    args = parser.parse_args(argv)
    try:
        args.selection = select(args.cell, args.mode)
    except ValueError as exc:
        parser.error(str(exc))
    args.timer = select_timer(args.cell, args.mode)
    if not any(args.selection) and not args.timer and not (args.index or args.render):
        parser.error("nothing to run: no mode has these cells (omb runs in " + ", ".join(OMB_MODES) + " only)")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def run_all(page: results.Page, settings: Settings, matrix: dict[str, tuple[str, ...]], quorum: bool, failover: bool,
            rounds: int, began: float, timer_cell: bool = False, systems: tuple[str, ...] = SYSTEMS) -> None:
    """The failover cell (its rounds on one cluster per system); then per mode of the throughput
    matrix one cluster per system of ``systems`` for all its rounds (:func:`run_targets`: each system
    alone, the first alternating between modes, ours first where the omb cell runs); then the
    quorum cell's clusters the same way; then per round the timer cell (a fresh cluster per system)."""
    lib, ours_path = settings.lib, settings.ours_path
    if failover:
        for system in SYSTEMS:
            controller.run_failover(system, rounds, lib, settings.classes, ours_path, settings.keep, page.add,
                                    page.problem)
    omb = OmbRates()
    for i, (mode, cells) in enumerate(matrix.items()):
        print(f"--- {mode}: {rounds} round(s) --- {(time.monotonic() - began) / 60:.1f} min so far", flush=True)
        flush, role, slave = MODES[mode]
        order = systems if i % 2 == 0 or OMB in cells else systems[::-1]
        targets = [Target(system, mode, functools.partial(_start_system, system, flush=flush, role=role, slave=slave,
                                                          lib=lib, ours_path=ours_path), keep=system in KEEP_SYSTEMS)
                   for system in order]
        run_targets(targets, cells, rounds, settings, page.add, page.problem, omb)
    if quorum:
        print(f"--- quorum: {rounds} round(s) --- {(time.monotonic() - began) / 60:.1f} min so far", flush=True)
        # SYNC_MASTER's figures: the SYNC_MASTER+slave mode's of the same round when it ran (the same setup)
        kinds = [("SYNC_MASTER", QUORUM_BASE)] if "SYNC_MASTER+slave" not in matrix else []
        kinds.append(("allAck", QUORUM_ALLACK))
        targets = [Target("ours", config, functools.partial(_start_quorum, kind, ours_path=ours_path), keep=False)
                   for kind, config in kinds]
        run_targets(targets, REPLICATION_CELLS, rounds, settings, page.add, page.problem)
    if timer_cell and settings.timer_classes is not None:
        for rnd in range(rounds):
            print(f"--- timer: round {rnd + 1} of {rounds} --- {(time.monotonic() - began) / 60:.1f} min so far",
                  flush=True)
            for system in (SYSTEMS if rnd % 2 == 0 else SYSTEMS[::-1]):
                prepare_run(settings, f"[round {rnd + 1} timer {system}]")
                timer.run_cell(system, rnd, lib, settings.timer_classes, page.add, page.problem,
                               ours_path=ours_path, keep=settings.keep)


def _start_system(system: str, root: Path, *, flush: str, role: str, slave: bool, lib: Path,
                  ours_path: Path | None) -> servers.Cluster:
    return servers.start(system, root, flush=flush, role=role, slave=slave, lib=lib, ours_path=ours_path)


def _start_quorum(kind: str, root: Path, *, ours_path: Path | None) -> servers.Cluster:
    return controller.start_quorum(kind, root, ours_path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.index:
        print(f"written: {results.update_index(args.out)}")
        return 0
    if args.render is not None:
        import json

        data = json.loads(args.render.read_text())
        page = results.Page(data, args.render.parent)
        saved = page.save(complete=bool(data.get("complete")))
        print(f"written: {saved}")
        return 0
    matrix, quorum, failover = args.selection
    rounds = args.rounds or (1 if args.short else 3)
    seconds = args.seconds or (2.0 if args.short else SECONDS)
    warmup = 0.5 if args.short else WARMUP
    server_warmup = args.server_warmup if args.server_warmup is not None else (2.0 if args.short else SERVER_WARMUP)
    save_files = (args.save or not args.short) and not args.no_save

    print(f"Apache RocketMQ {java.version()}: fetching with Maven into {java.cache_dir()} (first time only) ...",
          flush=True)
    try:
        lib = java.ensure_jars()
        classes = java.ensure_driver(lib)
        timer_classes = java.ensure_driver(lib, timer.DRIVER) if args.timer else None
    except java.JavaSetupError as exc:
        print(f"bench-compare: {exc}", file=sys.stderr)
        return 2
    ours_path = export_ref(args.ours_ref) if args.ours_ref else None
    commit = _git("rev-parse", "--short", args.ours_ref or "HEAD")
    dirty = bool(_git("status", "--porcelain", "services")) and not args.ours_ref
    no_drop = "--keep-page-cache given" if args.keep_page_cache else can_drop_caches()
    if no_drop and not args.keep_page_cache:
        print(f"bench-compare: the page cache is not dropped between runs: {no_drop}", flush=True)
    settings = Settings(seconds, warmup, 12.0 if args.short else CONSUME_SECONDS, server_warmup, lib, classes,
                        ours_path, args.keep, args.max_load, args.max_wait, timer_classes, drop_caches=not no_drop)
    info = machine()
    data: dict[str, Any] = {
        "format": 2,
        "argv": list(argv if argv is not None else sys.argv[1:]),
        "started": results.utc_now(),
        "machine": info,
        "ours": {"commit": commit,
                 "source": f"commit {commit}" + (" plus uncommitted changes under services/" if dirty else "")},
        "settings": {"seconds": seconds, "warmup": warmup, "server_warmup": server_warmup, "body": BODY,
                     "batch": BATCH, "queues": QUEUES, "e2e_rate": E2E_RATE,
                     "consume_seconds": settings.consume_seconds, "schedule": "alone, ours fresh",
                     "page_cache": "dropped" if settings.drop_caches else f"kept: {no_drop}",
                     "apache_broker_jvm": servers.APACHE_BROKER_JVM, "driver_jvm": java.DRIVER_JVM,
                     "failover": controller.failover_settings(),
                     **({"timer": dataclasses.asdict(timer.CELL)} if args.timer else {}),
                     **({"omb": {"queues": OMB_QUEUES, "window": OMB_WINDOW, "backlog": OMB_BACKLOG,
                                 "max_seconds": seconds, "fractions": list(OMB_FRACTIONS), "modes": list(OMB_MODES)}}
                        if any(OMB in cs for cs in matrix.values()) else {})},
        "selection": {"modes": list(matrix), "rounds": rounds,
                      "systems": [args.system] if args.system else list(SYSTEMS),
                      "cells": [*sorted({c for cs in matrix.values() for c in cs}, key=ALL_CELLS.index),
                                *([QUORUM] if quorum else []), *([FAILOVER] if failover else []),
                                *([TIMER] if args.timer else [])]},
        "measurements": [],
        "problems": [],
    }
    began = time.monotonic()
    page = results.Page(data, args.out if save_files else None, began)
    print(f"machine: {info}\nours: {data['ours']['source']}; modes {list(matrix)}; quorum {quorum}; "
          f"failover {failover}; timer {args.timer}; {rounds} round(s)", flush=True)
    try:
        run_all(page, settings, matrix, quorum, failover, rounds, began, args.timer,
                (args.system,) if args.system else SYSTEMS)
    finally:
        if ours_path is not None:
            shutil.rmtree(ours_path.parent, ignore_errors=True)
    saved = page.save(complete=True)
    cells_now = results.combine(data["measurements"])
    rows = results.build_rows(cells_now)
    if rows:
        print("\n" + results.render_table(rows, java.version()) + "\n")
    for section in (results.quorum_lines(cells_now), results.failover_lines(data["measurements"]),
                    results.timer_lines(data["measurements"]), results.omb_lines(data["measurements"])):
        if section:
            print("\n".join(section) + "\n")
    print(f"\nheadline: {data['headline']}\ntook {(time.monotonic() - began) / 60:.1f} min")
    if saved:
        print(f"written: {saved[0]}, {saved[1]}, {args.out / 'README.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
