"""rocket.runtime.tune_garbage_collector: a server's start-up objects leave the collector's
generations, generation 0 waits for 10,000 net allocations, and what is made afterwards is still
collected. Each case runs in a fresh interpreter, so the test process's own collector is never
changed."""

from __future__ import annotations

import os
import subprocess
import sys

_PROBE = """
import gc
from rocket.runtime import tune_garbage_collector

class Node:
    pass

before = Node(); before.me = before  # a start-up object in a cycle, reachable
frozen = tune_garbage_collector()
walked_after = gc.collect()
later = Node(); later.me = later     # made after the tuning, then dropped: still collected
del later
print(frozen, gc.get_freeze_count(), walked_after, gc.collect(), *gc.get_threshold())
"""


def _probe(**env: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **env}, check=True).stdout
    return [int(x) for x in out.split()]


def test_the_start_up_heap_is_frozen_and_later_garbage_still_collected() -> None:
    frozen, count, first, second, gen0, gen1, gen2 = _probe(ROCKET_NO_GC_TUNING="")
    assert frozen == count > 1000  # the interpreter's and rocket's modules, classes, functions
    assert first == 0
    assert second >= 1  # the later cycle was found and freed
    assert (gen0, gen1, gen2) == (10_000, 10, 10)


def test_rocket_no_gc_tuning_leaves_the_collector_alone() -> None:
    frozen, count, _first, second, gen0, gen1, gen2 = _probe(ROCKET_NO_GC_TUNING="1")
    assert frozen == count == 0
    assert second >= 1
    assert (gen0, gen1, gen2) == (700, 10, 10)  # CPython's defaults
