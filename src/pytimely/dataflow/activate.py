"""Waking operators from other threads (timely's ``scheduling/activate.rs``).

An operator's own logic reschedules itself with ``info.activate()``; that runs on the
worker's thread. A :class:`SyncActivator` may be called from any thread: it queues the
operator's index for the worker (a ``deque`` append, atomic under the interpreter lock)
and rings the worker's :class:`Doorbell`, so a worker waiting between idle steps wakes at
once. While an activator is open the worker does not take its idle steps for a stall:
another thread may still act. Close it (or leave its ``with`` block) when that thread is done.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from pytimely.communication.platform import Event
from pytimely.errors import DataflowError

__all__ = ["Alarm", "Doorbell", "SyncActivator"]


class Doorbell:
    """What a worker waits on between idle steps: rung by activators on other threads (``event``: the platform's,
    a simulator's in a simulated process)."""

    def __init__(self, event: Event | None = None) -> None:
        self._event: Event = threading.Event() if event is None else event
        self._lock = threading.Lock()
        self._open = 0

    @property
    def open(self) -> int:
        """How many activators are open (a worker with open activators is never stalled)."""
        return self._open

    def ring(self) -> None:
        """Wake the worker if it waits."""
        self._event.set()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a ring; return whether one came (and reset it)."""
        rung = self._event.wait(timeout)
        self._event.clear()
        return rung

    def _opened(self) -> None:
        with self._lock:
            self._open += 1

    def _closed(self) -> None:
        with self._lock:
            self._open -= 1


class SyncActivator:
    """Schedules one operator at the worker's next step; safe to call from any thread."""

    __slots__ = ("_closed", "_doorbell", "_index", "_name", "_pending")

    def __init__(self, index: int, name: str, pending: deque[int], doorbell: Doorbell) -> None:
        self._index = index
        self._name = name
        self._pending = pending
        self._doorbell = doorbell
        self._closed = False
        doorbell._opened()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def activate(self) -> None:
        """Schedule the operator; :class:`DataflowError` once the activator is closed."""
        if self._closed:
            raise DataflowError(f"the activator of operator {self._name!r} is closed")
        self._pending.append(self._index)
        self._doorbell.ring()

    def close(self) -> None:
        """Schedule the operator one last time and stop keeping the worker from declaring a stall."""
        if self._closed:
            return
        self._closed = True
        self._pending.append(self._index)
        self._doorbell._closed()
        self._doorbell.ring()

    def __enter__(self) -> SyncActivator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SyncActivator({self._name!r}{', closed' if self._closed else ''})"


class Alarm:
    """Wakes one operator at a deadline from a timer thread (its ``SyncActivator``); one timer at a time.

    While armed or not, the alarm holds its activator open, so the worker does not take a wait for the wall
    clock for a stall; :meth:`close` gives it up (when the operator no longer waits for time to pass).
    """

    __slots__ = ("_activator", "_due", "_lock", "_timer")

    def __init__(self, activator: SyncActivator) -> None:
        self._activator = activator
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._due: float | None = None

    def arm(self, delay: float) -> None:
        """Wake the operator in ``delay`` seconds (or sooner, if already armed for sooner)."""
        import time

        due = time.monotonic() + max(0.0, delay)
        with self._lock:
            if self._activator.closed or (self._due is not None and self._due <= due):
                return
            if self._timer is not None:
                self._timer.cancel()
            self._due = due
            self._timer = threading.Timer(max(0.0, delay), self._ring)
            self._timer.daemon = True
            self._timer.start()

    def _ring(self) -> None:
        with self._lock:
            self._due = None
            self._timer = None
            if self._activator.closed:
                return
            self._activator.activate()

    def close(self) -> None:
        """Cancel any timer and close the activator (the operator waits for time no more)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._due = None
            self._activator.close()

    def __repr__(self) -> str:
        return f"Alarm({self._activator!r}, due={self._due!r})"
