"""``tune_allocator``: a server process keeps freed heap instead of giving it back and faulting it in
again (``rocket.runtime.MALLOC_SETTINGS``), and leaves an operator's own glibc tunables alone.

Each case runs in a fresh interpreter: glibc's settings are per process and cannot be undone."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from rocket.runtime import MALLOC_SETTINGS

# Frees and allocates 2 MB of 40 KB blocks 200 times, as a broker frees a read's batch bodies and
# takes new ones; prints what tune_allocator set and the minor page faults of the 200 rounds.
_CHURN = """
import json, resource
from rocket.runtime import tune_allocator
tuned = tune_allocator()
def rounds(n):
    for _ in range(n):
        blocks = [bytearray(40_000) for _ in range(50)]
        del blocks
rounds(5)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rounds(200)
print(json.dumps({"tuned": tuned, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""

GLIBC = sys.platform == "linux" and platform.libc_ver()[0] == "glibc"


def _churn(**env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if k not in ("ROCKET_MALLOC_DEFAULTS", "GLIBC_TUNABLES")}
    out = subprocess.run([sys.executable, "-c", _CHURN], env={**clean, **env}, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    result: dict[str, object] = json.loads(out)
    return result


def test_a_tuned_process_does_not_fault_its_freed_heap_in_again() -> None:
    tuned, default = _churn(), _churn(ROCKET_MALLOC_DEFAULTS="1")
    assert default["tuned"] == {}
    if not GLIBC:
        assert tuned["tuned"] == {}
        return
    assert tuned["tuned"] == {name: value for name, _, value in MALLOC_SETTINGS}
    # glibc's defaults give the 2 MB back each round and fault it in again: ~500 faults a round
    assert isinstance(default["faults"], int) and default["faults"] > 200 * 100
    assert isinstance(tuned["faults"], int) and tuned["faults"] < default["faults"] // 20


@pytest.mark.parametrize("tunables", ["glibc.malloc.trim_threshold=1048576",
                                      "glibc.rtld.optional_static_tls=2048:glibc.malloc.top_pad=0"])
def test_an_operators_glibc_malloc_tunables_win(tunables: str) -> None:
    assert _churn(GLIBC_TUNABLES=tunables)["tuned"] == {}


def test_other_glibc_tunables_do_not_stop_the_tuning() -> None:
    result = _churn(GLIBC_TUNABLES="glibc.rtld.optional_static_tls=2048")
    assert result["tuned"] == ({name: value for name, _, value in MALLOC_SETTINGS} if GLIBC else {})
