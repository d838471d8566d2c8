"""Run fuzz targets with hypothesis: a budget of examples, a seed to replay, crashes collected.

Two ways, same strategies:

* :func:`run_target` (``make test``): hypothesis's own engine (``@given``) in chunks (a run keeps
  a tree of every input it tried, so one run per chunk keeps the fuzzer's memory flat), each
  chunk seeded ``seed + chunk``; a crash is shrunk to a minimal input.
* :func:`run_buffers` (``make fuzz``): the same property fed by ``fuzz_one_input`` with buffers
  of seeded random bytes (hypothesis turns each buffer into one input of the strategy), about
  twice as fast as the engine; input ``i`` of a target is replayed from ``(seed, target, i)``.

A crash is an exception outside the target's ``allowed`` types, or a failed shape check.

:class:`MemoryWatch` measures with ``tracemalloc`` the memory held by objects allocated in the
product (``services/rocket``) between a snapshot after a warm-up and one at the end, so that
the fuzzer's own bookkeeping is not counted.
"""

from __future__ import annotations

import io
import random
import time
import traceback
import tracemalloc
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, given, reporting, seed, settings

from tests.fuzz.targets import Target

#: Where the product's files are (tracemalloc counts the memory allocated there).
PRODUCT = "/rocket/"
#: Examples per hypothesis run (one chunk).
CHUNK = 5000


@dataclass
class Crash:
    """One crash: the target, the exception (type and text), the minimal input hypothesis found."""

    target: str
    error: str
    example: str
    seed: int

    def __str__(self) -> str:
        return f"{self.target} (seed {self.seed}): {self.error}\n{self.example}"


@dataclass
class Result:
    """What one target's run did: inputs run, seconds, crashes (and, for requests, the answer codes)."""

    target: str
    examples: int = 0
    seconds: float = 0.0
    crashes: list[Crash] = field(default_factory=list)
    answers: dict[int, int] = field(default_factory=dict)
    #: Bytes of memory the run left held (tracemalloc), when measured.
    memory: int | None = None


def run_target(target: Target, examples: int, base_seed: int, *, shrink: bool = True) -> Result:
    """Run ``target`` on ``examples`` generated inputs (chunks of :data:`CHUNK`), seeded from ``base_seed``.

    Stops at the first crash of a chunk (hypothesis shrinks it first when ``shrink``); later
    chunks still run, so one crash does not hide others of the same target.
    """
    result = Result(target.name)
    started = time.perf_counter()
    chunk_index = 0
    while result.examples < examples:
        size = min(CHUNK, examples - result.examples)
        chunk_seed = base_seed + chunk_index
        ran, crash = _run_chunk(target, size, chunk_seed, shrink)
        result.examples += ran
        if crash is not None:
            result.crashes.append(crash)
            if len(result.crashes) >= 3:
                break
        chunk_index += 1
        if ran == 0:
            break
    result.seconds = time.perf_counter() - started
    return result


def _run_chunk(target: Target, size: int, chunk_seed: int, shrink: bool) -> tuple[int, Crash | None]:
    count = 0
    allowed = target.allowed

    phases = [Phase.generate, Phase.shrink] if shrink else [Phase.generate]

    @seed(chunk_seed)
    @settings(max_examples=size, database=None, deadline=None, phases=phases, report_multiple_bugs=False,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(target.inputs)
    def prop(data: object) -> None:
        nonlocal count
        count += 1
        try:
            target.run(data)
        except allowed:
            pass

    report = io.StringIO()
    try:
        with reporting.with_reporter(lambda text: report.write(f"{text}\n")):
            prop()
    except Exception as exc:
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        tail = "".join(traceback.format_tb(exc.__traceback__)[-2:])
        return min(count, size), Crash(target.name, f"{error}\n{tail}", report.getvalue().strip(), chunk_seed)
    return min(count, size), None


#: Bytes of randomness per input of :func:`run_buffers` (strategies that need more are cut short).
BUFFER = 2048


def _property(target: Target, last: list[object], counter: list[int]) -> object:
    allowed = target.allowed

    @settings(database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(target.inputs)
    def prop(data: object) -> None:
        last[0] = data
        counter[0] += 1
        try:
            target.run(data)
        except allowed:
            pass

    return prop


def buffer_rng(seed_value: int, target: str) -> random.Random:
    """The random source of ``target``'s inputs for ``seed_value`` (input ``i`` is its ``i``-th buffer)."""
    return random.Random(f"{seed_value}:{target}")


def run_buffers(target: Target, examples: int, seed_value: int, *, max_crashes: int = 3) -> Result:
    """Run ``target`` on ``examples`` inputs drawn by hypothesis from seeded random buffers.

    Returns the count of inputs run (a buffer too short for its input is not counted, and
    another is drawn), the time and up to ``max_crashes`` crashes (input index and ``repr``).
    """
    result = Result(target.name)
    last: list[object] = [None]
    counter = [0]
    fuzz = _property(target, last, counter).hypothesis.fuzz_one_input  # type: ignore[attr-defined]
    rng = buffer_rng(seed_value, target.name)
    started = time.perf_counter()
    drawn = 0
    while counter[0] < examples and drawn < examples * 3:
        buf = rng.randbytes(BUFFER)
        drawn += 1
        try:
            fuzz(buf)
        except Exception as exc:
            error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            tail = "".join(traceback.format_tb(exc.__traceback__)[-2:])
            result.crashes.append(Crash(target.name, f"{error} (buffer {drawn - 1})\n{tail}",
                                        f"input: {last[0]!r:.600}", seed_value))
            if len(result.crashes) >= max_crashes:
                break
    result.examples = counter[0]
    result.seconds = time.perf_counter() - started
    return result


def draw_inputs(target: Target, count: int, seed_value: int) -> list[object]:
    """``count`` inputs of ``target``'s strategy drawn from seeded random buffers (a libFuzzer seed corpus)."""
    out: list[object] = []

    @settings(database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(target.inputs)
    def collect(data: object) -> None:
        out.append(data)

    fuzz = collect.hypothesis.fuzz_one_input  # type: ignore[attr-defined]
    rng = buffer_rng(seed_value, target.name)
    for _ in range(count * 3):
        if len(out) >= count:
            break
        fuzz(rng.randbytes(BUFFER))
    return out


class MemoryWatch:
    """tracemalloc over a run: :meth:`baseline` after a warm-up, :meth:`growth` at the end (bytes
    still held by objects allocated in ``services/rocket``, and by everything)."""

    def __init__(self) -> None:
        self._started_here = not tracemalloc.is_tracing()
        if self._started_here:
            tracemalloc.start(1)
        self._base: tracemalloc.Snapshot | None = None

    @staticmethod
    def _product(snapshot: tracemalloc.Snapshot) -> int:
        return sum(stat.size for stat in snapshot.statistics("filename")
                   if PRODUCT in stat.traceback[0].filename)

    def baseline(self) -> None:
        """Take the reference snapshot."""
        self._base = tracemalloc.take_snapshot()

    def growth(self) -> tuple[int, int, list[str]]:
        """``(product bytes grown, all traced bytes grown, top product lines)`` since :meth:`baseline`."""
        assert self._base is not None
        now = tracemalloc.take_snapshot()
        product = self._product(now) - self._product(self._base)
        everything = sum(s.size for s in now.statistics("filename")) - sum(
            s.size for s in self._base.statistics("filename"))
        top = [str(stat) for stat in now.compare_to(self._base, "lineno")
               if PRODUCT in stat.traceback[0].filename][:5]
        return product, everything, top

    def stop(self) -> None:
        """Stop tracing if this watch started it."""
        if self._started_here:
            tracemalloc.stop()
