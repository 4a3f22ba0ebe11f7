"""Pausing Python's cyclic garbage collector while a burst of new objects is built.

A batch of results or received records is thousands of new tuples at once. With the collector running they set
off a young collection every 700 of them and are promoted generation by generation until full collections walk
every long-lived object of the process (the input, operator state), looking for cycles that such batches never
hold: reference counting frees them. Pausing for the burst leaves one young collection afterwards instead.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused"]

_lock = threading.Lock()
_depth = 0
_disabled_here = False


@contextmanager
def paused() -> Iterator[None]:
    """Pause the collector for the block. Pauses of several threads nest: the collector is back on when the last
    one ends, and only if a pause turned it off (a program that turned it off itself keeps it off)."""
    global _depth, _disabled_here
    with _lock:
        if _depth == 0:
            _disabled_here = gc.isenabled()
            if _disabled_here:
                gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _disabled_here:
                gc.enable()
