"""Pausing Python's cyclic garbage collector while a burst of new objects is built and used.

A batch of results or received records is thousands of new tuples at once. With the collector running they set
off a young collection every 700 of them and are promoted generation by generation until full collections walk
every long-lived object of the process (the input, operator state), looking for cycles that such batches never
hold: reference counting frees them. A worker pauses the collector for each step (:meth:`pytimely.Worker.step`),
so the batches a step decodes and hands from operator to operator are usually freed before the one young
collection that follows; decoding and building keyed results pause it where they run outside a step too.

Pauses of several threads nest, and the collector comes back when the last one ends. So that workers stepping
in turn cannot keep it off for good, a pause under way for :data:`MAX_PAUSE` seconds takes no new threads: it
ends once the threads already in it leave, and cyclic garbage is then collected as usual.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["MAX_PAUSE", "paused"]

MAX_PAUSE = 0.1
"""Seconds after which a pause under way takes no new threads."""

_lock = threading.Lock()
_depth = 0
_since = 0.0
_disabled_here = False


@contextmanager
def paused() -> Iterator[None]:
    """Pause the collector for the block. Pauses of several threads nest: the collector is back on when the last
    one ends, and only if a pause turned it off (a program that turned it off itself keeps it off). A pause that
    began :data:`MAX_PAUSE` seconds ago is not joined: the block then runs under it while it lasts."""
    global _depth, _disabled_here, _since
    with _lock:
        joined = _depth == 0 or time.monotonic() - _since < MAX_PAUSE
        if joined:
            if _depth == 0:
                _disabled_here = gc.isenabled()
                if _disabled_here:
                    gc.disable()
                _since = time.monotonic()
            _depth += 1
    try:
        yield
    finally:
        if joined:
            with _lock:
                _depth -= 1
                if _depth == 0 and _disabled_here:
                    gc.enable()
