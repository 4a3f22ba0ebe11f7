"""A worker's incoming side of one channel: a FIFO that workers of the same process push to by reference."""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["Mailbox"]


class Mailbox:
    """One worker's incoming side of one channel; ``deque`` appends and pops are thread-safe."""

    __slots__ = ("_queue", "push")

    def __init__(self) -> None:
        self._queue: deque[Any] = deque()
        self.push = self._queue.append

    def waiting(self) -> bool:
        """Whether messages wait for a drain."""
        return bool(self._queue)

    def drain(self) -> list[Any]:
        """Take every queued message, oldest first."""
        queue = self._queue
        if not queue:
            return []
        out = []
        popleft = queue.popleft
        for _ in range(len(queue)):
            out.append(popleft())
        return out
