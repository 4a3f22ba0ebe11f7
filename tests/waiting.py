"""The one way tests wait for something to happen: a condition, polled until it holds or a deadline passes.

Deadlines are generous (a loaded machine is slow, not wrong); a condition that never holds fails the test with
what it waited for, never a silent fall-through.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_until"]


def wait_until(condition: Callable[[], object], timeout: float, what: str, *, every: float = 0.02) -> None:
    """Poll ``condition`` every ``every`` seconds until it is true; after ``timeout`` seconds, fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(every)
