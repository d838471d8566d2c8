"""``python -m tests.fuzz``: the long fuzz run of ``make fuzz``.

1. The targets of :mod:`tests.fuzz.targets` run on ``FUZZ_EXAMPLES`` generated inputs in all
   (default 1,000,000). With atheris installed (``make fuzz`` installs it), they run
   coverage-guided under libFuzzer in one child process (:mod:`tests.fuzz.libfuzzer`), starting
   from a corpus of :data:`CORPUS` inputs per target that its hypothesis strategy drew;
   without atheris, hypothesis draws every input, each target its share by weight (about ten
   times slower).
2. The in-process request fuzzer (:mod:`tests.fuzz.processors`) sends ``FUZZ_REQUESTS``
   requests (default 20,000) to a real NameServer, broker and controller in this process.

Prints the inputs per target, the time, the crashes and the memory growth, then the totals and
the seed. Memory: the traced memory (tracemalloc) from after a warm-up to the last input must
grow by less than ``FUZZ_MEMORY_BOUND`` bytes (default 1 MiB); for the request fuzzer
the bound is ``FUZZ_SERVER_MEMORY_BOUND`` (default 16 MiB: the servers' tables of the few names
the fuzzer uses, queues, stats). Exits 1 on any crash or memory over its bound.

Replay: ``FUZZ_SEED=<seed printed> FUZZ_TARGETS=name,name python -m tests.fuzz``; a libFuzzer
crash input is kept as ``<FUZZ_ARTIFACTS>/crash-*`` (default ``.fuzz-artifacts/``) and runs alone
with ``python -m tests.fuzz.libfuzzer 1 0 <that file> . <the targets printed>``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.fuzz.engine import MemoryWatch, Result, draw_inputs, run_buffers
from tests.fuzz.targets import TARGETS, Target, to_bytes

#: Inputs each target's hypothesis strategy draws as libFuzzer's seed corpus.
CORPUS = 300
ROOT = Path(__file__).resolve().parents[2]


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip().replace("_", "")
    return int(text) if text else default


def _write_corpus(targets: list[Target], directory: Path, seed_value: int) -> None:
    """Each target's hypothesis inputs as libFuzzer seeds, behind the byte that selects the target."""
    directory.mkdir(parents=True, exist_ok=True)
    for index, target in enumerate(targets):
        for i, value in enumerate(draw_inputs(target, CORPUS, seed_value)):
            data = bytes([index]) + to_bytes(target.kind, value)
            if len(data) <= 8192:
                (directory / f"{target.name}-{i:04d}").write_bytes(data)


def _libfuzzer(targets: list[Target], runs: int, seed_value: int, work: Path,
               artifacts: Path) -> tuple[list[Result], int, int | None]:
    """Run ``targets`` under libFuzzer in a child process; results from its ``fuzz-result`` line:
    per target, the inputs run in all (an empty input picks no target) and the memory growth."""
    corpus = work / "corpus"
    _write_corpus(targets, corpus, seed_value)
    print(f"fuzz: seed corpus of {sum(1 for _ in corpus.iterdir())} inputs drawn by hypothesis", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "services")])}
    names = ",".join(t.name for t in targets)
    argv = [sys.executable, "-m", "tests.fuzz.libfuzzer", str(runs), str(seed_value), str(corpus), str(artifacts),
            names]
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    output = proc.stdout + proc.stderr
    seconds = time.perf_counter() - started
    results = [Result(t.name) for t in targets]
    match = re.search(r"^fuzz-result (\{.*\})$", output, re.M)
    inputs, memory = 0, None
    if match:
        info = json.loads(match.group(1))
        inputs, memory = int(info["inputs"]), int(info["memory_growth"])
        for result in results:
            result.examples = int(info["per_target"].get(result.target, 0))
        results[0].seconds = seconds  # one process for all: the time is the run's
    if proc.returncode != 0 or not match:
        from tests.fuzz.engine import Crash
        tail = "\n".join(line for line in output.splitlines()
                         if not line.startswith(("#", "INFO: Instrumenting")))[-6000:]
        results[0].crashes.append(Crash("libFuzzer", f"exited {proc.returncode} (targets {names})", tail,
                                        seed_value))
    return results, inputs, memory


def main() -> int:
    """Run the fuzzer; returns the exit status (0: no crash, memory within its bounds)."""
    total = _env_int("FUZZ_EXAMPLES", 1_000_000)
    requests = _env_int("FUZZ_REQUESTS", 20_000)
    server_bound = _env_int("FUZZ_SERVER_MEMORY_BOUND", 16 << 20)
    seed_value = _env_int("FUZZ_SEED", int(time.time()) % 1_000_000)
    wanted = {n for n in os.environ.get("FUZZ_TARGETS", "").split(",") if n}
    targets = [t for t in TARGETS if not wanted or t.name in wanted]
    weights = sum(t.weight for t in targets)
    artifacts = Path(os.environ.get("FUZZ_ARTIFACTS", ROOT / ".fuzz-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    engine = "libFuzzer (atheris)" if importlib.util.find_spec("atheris") else "hypothesis (atheris not installed)"
    print(f"fuzz: seed {seed_value}; {total} parser inputs over {len(targets)} targets with {engine}; "
          f"{requests} requests in-process; replay with FUZZ_SEED={seed_value}", flush=True)
    started = time.perf_counter()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="rocket-fuzz-corpus-") as work:
        if importlib.util.find_spec("atheris"):
            results, parser_inputs, memory = _libfuzzer(targets, total, seed_value, Path(work), artifacts)
        else:
            watch = MemoryWatch()  # hypothesis's own memory is not counted: the product's files only
            for target in targets:
                run_buffers(target, 200, seed_value + 1)
            watch.baseline()
            results = [run_buffers(t, max(1, total * t.weight // weights), seed_value) for t in targets]
            parser_inputs, memory = sum(r.examples for r in results), watch.growth()[0]
            watch.stop()
    parser_seconds = sum(r.seconds for r in results)
    for result in results:
        print(f"  {result.target:26s} {result.examples:9d} inputs  crashes {len(result.crashes)}", flush=True)
        for crash in result.crashes:
            print("    CRASH", str(crash).replace("\n", "\n      "), flush=True)
    bound = _env_int("FUZZ_MEMORY_BOUND", 1 << 20)
    shown = "not measured (the run stopped early)" if memory is None else f"{memory / 1024:+.0f} KiB"
    print(f"fuzz: {parser_inputs} parser inputs in {parser_seconds:.0f} s "
          f"({parser_inputs / max(parser_seconds, 1e-9):.0f}/s); traced memory after the warm-up {shown} "
          f"(bound {bound >> 10} KiB)", flush=True)
    status = 0 if memory is not None and memory <= bound else 1
    if requests and not wanted:
        from tests.fuzz.processors import run_requests
        watch = MemoryWatch()
        req = run_requests(requests, seed_value, watch=watch)
        watch.stop()
        results.append(req)
        print(f"  {'requests (in-process)':26s} {req.examples:9d} inputs {req.seconds:7.1f} s crashes "
              f"{len(req.crashes)} memory +{(req.memory or 0) / 1024:.0f} KiB (bound {server_bound >> 10} KiB); "
              f"answers {dict(sorted(req.answers.items()))}", flush=True)
        for crash in req.crashes:
            print("    CRASH", str(crash).replace("\n", "\n      "), flush=True)
        if (req.memory or 0) > server_bound:
            status = 1
    elapsed = time.perf_counter() - started
    crashes = sum(len(r.crashes) for r in results)
    requests_run = sum(r.examples for r in results if r.target == "requests")
    print(f"fuzz: {parser_inputs} parser inputs + {requests_run} requests in {elapsed:.0f} s; {crashes} crashes; "
          f"seed {seed_value}", flush=True)
    return 1 if crashes else status


if __name__ == "__main__":
    sys.exit(main())
