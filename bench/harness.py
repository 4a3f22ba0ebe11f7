"""What the benchmarks share: timing a measurement as the best of several runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["best_of"]


def best_of(runs: int, f: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest of ``runs`` timings of ``f()`` (at least one) and its last result."""
    best, result = float("inf"), None
    for _ in range(max(1, runs)):
        started = time.perf_counter()
        result = f()
        best = min(best, time.perf_counter() - started)
    return best, result
