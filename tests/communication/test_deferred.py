"""What a process's outbox holds back leaves by its deadline even when no worker steps: the cluster's outbox thread
looks at every deferred shared object when it is told to, and calls it under its channel's lock."""

from __future__ import annotations

import threading
import time

from pytimely.communication.cluster.process import Cluster
from pytimely.config import Config


class Held:
    """A deferred shared object holding one message back until ``due``."""

    def __init__(self, due: float) -> None:
        self.due: float | None = due
        self.lock: threading.Lock | None = None
        self.calls: list[tuple[float, bool]] = []
        self.sent = threading.Event()

    def deadline(self) -> float | None:
        return self.due

    def flush_due(self, now: float) -> bool:
        assert self.lock is not None
        self.calls.append((now, self.lock.locked()))
        if self.due is not None and now >= self.due:
            self.due = None
            self.sent.set()
            return True
        return False


def test_a_held_message_leaves_by_its_deadline_with_no_worker_stepping() -> None:
    cluster = Cluster(Config(secret=b"s" * 16))
    try:
        due = time.monotonic() + 0.05
        held, lock = cluster.shared((1, 0), lambda: Held(due))
        held.lock = lock
        assert cluster.awake() == []
        cluster.wake_by(due)
        assert held.sent.wait(30), "nothing looked at the held message"
        now, locked = held.calls[-1]
        assert now >= due and locked, held.calls
        assert held.deadline() is None
    finally:
        cluster.close()
    assert cluster._flusher is not None and not cluster._flusher.is_alive()
