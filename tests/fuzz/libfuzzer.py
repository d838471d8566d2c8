"""The fuzz targets under atheris (libFuzzer, coverage-guided), all in one process.

``python -m tests.fuzz.libfuzzer RUNS SEED CORPUS ARTIFACTS TARGET[,TARGET...]``

The product (``rocket``) is imported with atheris's coverage instrumentation. The first byte of
an input picks the target (its index in the list given, modulo its length), the rest is the
target's input (:func:`tests.fuzz.targets.from_bytes`). libFuzzer starts from ``CORPUS`` (the
inputs each target's hypothesis strategy drew, written by :mod:`tests.fuzz.__main__` with the
target's byte in front) and mutates towards new coverage for ``RUNS`` inputs with ``SEED``.

An exception outside the target's ``allowed`` types is a crash: libFuzzer prints it, writes the
input to ``ARTIFACTS/crash-<sha1>`` and exits non-zero (replay: ``python -m tests.fuzz.libfuzzer 1 0
<that file> . <same targets>``). An input that runs longer than 10 s is a crash too (``-timeout``).

Memory: ``tracemalloc`` runs all along. After the first :data:`WARMUP` inputs the traced memory
(every Python allocation still held; in this process only the targets and libFuzzer's Python
side run) is the reference; at the last input it must have grown by less than
``FUZZ_MEMORY_BOUND`` bytes (default 1 MiB), else that is a crash as well, reported with the
product's lines that hold the most. The last line printed is ``fuzz-result <json>`` with the
inputs per target.
"""

from __future__ import annotations

import json
import os
import sys
import time
import tracemalloc

WARMUP = 5000


def main(argv: list[str]) -> None:
    """Run the targets (see the module docs); does not return (libFuzzer exits the process)."""
    import atheris

    runs, seed_value, corpus, artifacts, names = int(argv[1]), int(argv[2]), argv[3], argv[4], argv[5].split(",")
    bound = int(os.environ.get("FUZZ_MEMORY_BOUND", str(1 << 20)))
    tracemalloc.start(1)
    with atheris.instrument_imports(include=["rocket"]):
        from tests.fuzz import targets as T

    chosen = [T.by_name(name) for name in names]
    table = [(t.run, t.kind, t.allowed) for t in chosen]
    counts = [0] * len(chosen)
    decode = T.from_bytes
    state = {"count": 0, "started": time.perf_counter(), "base": 0}
    warmup = min(WARMUP, max(1, runs // 10))

    def one_input(data: bytes) -> None:
        state["count"] += 1
        count = state["count"]
        if data:
            index = data[0] % len(table)
            run, kind, allowed = table[index]
            counts[index] += 1
            try:
                run(decode(kind, data[1:]))
            except allowed:
                pass
        if count == warmup:
            state["base"] = tracemalloc.get_traced_memory()[0]
        if count == runs:
            finish(count)

    def finish(count: int) -> None:
        growth = tracemalloc.get_traced_memory()[0] - state["base"]
        seconds = time.perf_counter() - state["started"]
        print("fuzz-result " + json.dumps({"inputs": count, "seconds": round(seconds, 1), "memory_growth": growth,
                                           "bound": bound, "per_target": dict(zip(names, counts, strict=True))}),
              flush=True)
        if growth > bound:
            top = [str(s) for s in tracemalloc.take_snapshot().statistics("lineno") if "/rocket/" in str(s)][:8]
            raise AssertionError(f"traced memory grew {growth} bytes over {count - warmup} inputs "
                                 f"(bound {bound}); largest holders in the product:\n" + "\n".join(top))

    atheris.Setup([argv[0], f"-runs={runs}", f"-seed={seed_value}", "-max_len=8192", "-timeout=10",
                   "-rss_limit_mb=2048", f"-artifact_prefix={artifacts.rstrip('/')}/", "-print_final_stats=1",
                   corpus], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
