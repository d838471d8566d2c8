"""Nearest-rank percentiles of latency samples, as the ``rocket`` command, the embedded demo and the
benchmarks print them."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` (0..100) percentile of already sorted values (nearest rank); 0 when empty."""
    if not sorted_values:
        return 0.0
    rank = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values) / 100 - 1e-9) - 1))
    return float(sorted_values[rank])
