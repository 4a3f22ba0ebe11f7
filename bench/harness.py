"""What the benchmarks share: timing a measurement as the best of several runs, alone or taking turns with others,
and printing what they measured."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["best_of", "machine", "machine_line", "print_json", "taking_turns"]


def best_of(runs: int, f: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest of ``runs`` timings of ``f()`` (at least one) and its last result."""
    best, result = float("inf"), None
    for _ in range(max(1, runs)):
        started = time.perf_counter()
        result = f()
        best = min(best, time.perf_counter() - started)
    return best, result


def taking_turns(runs: int, measures: Mapping[str, Callable[[], Any]], key: Callable[[Any], float]) -> dict[str, Any]:
    """Per measure, the result with the smallest ``key`` of ``runs`` rounds (at least one) in which every measure
    runs once, in the order given.

    A ratio of two figures taken this way compares runs made side by side: on a machine whose speed drifts
    (cores shared with other machines), figures taken one after the other in blocks also measure the drift.
    """
    best: dict[str, Any] = {}
    for _ in range(max(1, runs)):
        for name, measure in measures.items():
            result = measure()
            if name not in best or key(result) < key(best[name]):
                best[name] = result
    return best


def machine() -> dict[str, Any]:
    """What a figure of this machine depends on: the Python version, the architecture and the CPU count."""
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}


def machine_line() -> str:
    """:func:`machine` in words, for the line above a table."""
    facts = machine()
    return f"Python {facts['python']} on {facts['machine']}, {facts['cpus']} CPUs"


def print_json(rows: Iterable[Mapping[str, Any]], facts: Mapping[str, Any] | None = None) -> None:
    """What ``--json`` prints: ``facts`` (when given) as one JSON object, then one per row, a line each."""
    if facts is not None:
        print(json.dumps(facts))
    for row in rows:
        print(json.dumps(row))
