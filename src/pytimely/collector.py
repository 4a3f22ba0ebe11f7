"""Pausing Python's cyclic garbage collector while a burst of new objects is built.

A batch of results or received records is thousands of new tuples at once. With the collector running they set
off a young collection every 700 of them and are promoted generation by generation until full collections walk
every long-lived object of the process (the input, operator state), looking for cycles that such batches never
hold: reference counting frees them. Pausing for the burst leaves one young collection afterwards instead.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused"]


@contextmanager
def paused() -> Iterator[None]:
    """Pause the collector for the block; if it is off already (the program's choice, or another thread's
    pause), leave it as it is."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
