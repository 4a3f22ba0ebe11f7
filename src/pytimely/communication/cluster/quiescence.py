"""Whether a whole cluster has gone quiet: every process's workers idle and nothing sent for a while.

A stall across processes (an operator holding a capability it never drops) cannot be proved by one process
alone: another may still be working, or have frames on the way. Each process therefore says, in every
heartbeat, whether its workers are *quiet* (each one is waiting for its dataflows to finish, and its last
steps found nothing to do) and how many data and progress frames it has sent so far (its *activity*).

A heartbeat leaves only when its link's queue is empty, so every frame the peer sent before it has arrived
by the time the heartbeat does. Hence, when this process has been quiet with an unchanged activity for
``T`` seconds, and every live peer has reported the same ``(quiet, activity)`` for ``T`` seconds, nothing was
sent anywhere in that time and nothing is in flight: no worker can ever have anything to do again. A
dataflow that has not finished by then is stalled. Any data or progress frame received from a peer, or
sent by this process, restarts the clock.

The class is free of I/O and of threads' concerns beyond one lock: the links feed it what they hear and
the workers what they do.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterable

__all__ = ["Quiescence"]

_REPORT = struct.Struct("<BQ")


class Quiescence:
    """This process's view of how long the whole cluster has been quiet."""

    def __init__(self, workers: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._quiet = [False] * workers
        self._activity = 0
        self._since: float | None = None
        """When this process became quiet with its current activity (``None``: not quiet)."""
        self._peers: dict[int, tuple[bytes, float]] = {}
        """Per peer: its last report and when it was first heard unchanged (absent: not known to be quiet)."""

    def quiet(self, worker: int, flag: bool) -> None:
        """Worker ``worker`` (local index) is now quiet or not."""
        with self._lock:
            if self._quiet[worker] == flag:
                return
            self._quiet[worker] = flag
            self._since = self._clock() if all(self._quiet) else None

    def sent(self, frames: int) -> None:
        """This process queued ``frames`` data or progress frames."""
        if frames:
            with self._lock:
                self._activity += frames
                if self._since is not None:
                    self._since = self._clock()

    def report(self) -> bytes:
        """The payload of this process's next heartbeat."""
        with self._lock:
            return _REPORT.pack(self._since is not None, self._activity)

    def heard(self, peer: int, payload: bytes) -> None:
        """A heartbeat from ``peer`` carried ``payload`` (an empty or unknown payload counts as busy)."""
        with self._lock:
            if len(payload) != _REPORT.size or not payload[0]:
                self._peers.pop(peer, None)
                return
            known = self._peers.get(peer)
            if known is None or known[0] != payload:
                self._peers[peer] = (bytes(payload), self._clock())

    def active(self, peer: int) -> None:
        """A data or progress frame came from ``peer``."""
        if peer in self._peers:
            with self._lock:
                self._peers.pop(peer, None)

    def quiet_for(self, peers: Iterable[int]) -> float:
        """Seconds this process and every one of ``peers`` have been quiet with nothing sent (0 if not)."""
        with self._lock:
            since = self._since
            if since is None:
                return 0.0
            for peer in peers:
                known = self._peers.get(peer)
                if known is None:
                    return 0.0
                since = max(since, known[1])
            return max(0.0, self._clock() - since)
