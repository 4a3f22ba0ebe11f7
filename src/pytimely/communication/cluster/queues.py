"""Frames waiting to leave on one link, typed, and the queues that order them by precedence (seed 003)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from pytimely.communication.allocator import Precedence
from pytimely.communication.frame import CONTROL_CHANNEL, Control

__all__ = ["OutgoingFrame", "SendQueues"]

_IOV = 512
_BATCH_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class OutgoingFrame:
    """A frame queued for a link: where it goes and its payload parts (``length`` bytes in all)."""

    precedence: Precedence
    dataflow: int
    channel: int
    source: int
    target: int
    parts: list[bytes | memoryview]
    length: int

    @classmethod
    def control(cls, code: Control, source: int, target: int, body: bytes = b"") -> OutgoingFrame:
        """A control frame (heartbeat, done, abort, join, leaving) from process ``source`` to ``target``."""
        return cls(Precedence.CONTROL, CONTROL_CHANNEL, int(code), source, target, [body] if body else [], len(body))


class SendQueues:
    """Frames waiting for one link, by precedence: seed 003's Transport takes the highest precedence first.

    Each precedence level is one FIFO queue, so frames of one (channel, source)
    (a channel has one precedence) leave in the order they were put.
    """

    __slots__ = ("_levels", "queues")

    def __init__(self) -> None:
        self.queues: dict[Precedence, deque[OutgoingFrame]] = {p: deque() for p in sorted(Precedence, reverse=True)}
        self._levels = list(self.queues.values())

    def put(self, frame: OutgoingFrame) -> None:
        """Queue ``frame`` behind the frames of its precedence."""
        self.queues[frame.precedence].append(frame)

    def take(self, max_frames: int = _IOV, max_bytes: int = _BATCH_BYTES) -> list[OutgoingFrame]:
        """The next frames to write, highest precedence first, up to ``max_frames`` or about ``max_bytes``."""
        batch: list[OutgoingFrame] = []
        size = 0
        for queue in self._levels:
            while queue and len(batch) < max_frames and size < max_bytes:
                frame = queue.popleft()
                batch.append(frame)
                size += frame.length
        return batch

    def __len__(self) -> int:
        return sum(len(q) for q in self._levels)
