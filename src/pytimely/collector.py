"""Letting a burst of new objects be built and used before Python's cyclic garbage collector walks them.

A batch of results or received records is thousands of new tuples at once. With the collector's usual young
threshold (700) they set off a young collection every 700 of them and are promoted generation by generation
until full collections walk every long-lived object of the process (the input, operator state), looking for
cycles that such batches never hold: reference counting frees them. A worker runs each step as a burst
(:meth:`pytimely.Worker.step`), and decoding a payload is one too: the young threshold is raised to
:data:`BURST` for the block, so the batches a step decodes and hands from operator to operator are usually freed
before any collection walks them (CPython counts a young object freed against the threshold).

The collector is never switched off: a block that makes cyclic garbage still has it collected every
:data:`BURST` young objects, so memory stays bounded however long a step runs. Bursts of several threads nest,
and the threshold the process had comes back when the last one ends, unless the program set its own meanwhile.
A program that turned automatic collection off (``gc.disable()``, or a threshold of 0) or set a threshold of
its own above :data:`BURST` is left as it is.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["BURST", "burst"]

BURST = 100_000
"""The young threshold during a burst: new container objects left alive before a young collection."""

_lock = threading.Lock()
_depth = 0
_replaced: int | None = None


@contextmanager
def burst() -> Iterator[None]:
    """Run the block with the collector's young threshold raised to :data:`BURST` (see the module's doc)."""
    global _depth, _replaced
    entered = False
    try:
        with _lock:
            if _depth == 0:
                young, older, oldest = gc.get_threshold()
                _replaced = young if 0 < young < BURST else None
                if _replaced is not None:
                    gc.set_threshold(BURST, older, oldest)
            _depth += 1
            entered = True
        yield
    finally:
        if entered:
            with _lock:
                _depth -= 1
                if _depth == 0 and _replaced is not None:
                    young, older, oldest = gc.get_threshold()
                    if young == BURST:  # else the program set a threshold of its own meanwhile: keep it
                        gc.set_threshold(_replaced, older, oldest)
                    _replaced = None
