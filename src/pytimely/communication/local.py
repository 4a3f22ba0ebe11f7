"""Workers in one process: channels are shared deques, messages move by reference."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

from pytimely.communication.allocator import Precedence, Pull, Push
from pytimely.communication.mailbox import Mailbox
from pytimely.errors import InvalidArgument

__all__ = ["LocalAllocator"]


class _Registry:
    """The mailboxes of every channel, shared by a group of in-process workers."""

    def __init__(self, peers: int) -> None:
        self.peers = peers
        self._lock = threading.Lock()
        self._channels: dict[Hashable, list[Mailbox]] = {}

    def mailboxes(self, channel: Hashable) -> list[Mailbox]:
        with self._lock:
            boxes = self._channels.get(channel)
            if boxes is None:
                boxes = self._channels[channel] = [Mailbox() for _ in range(self.peers)]
            return boxes


class LocalAllocator:
    """The allocator of one of ``peers`` workers that share a process."""

    def __init__(self, index: int, registry: _Registry) -> None:
        self._index = index
        self._registry = registry

    @classmethod
    def group(cls, peers: int) -> list[LocalAllocator]:
        """Allocators for ``peers`` workers that talk to one another."""
        if type(peers) is not int or peers < 1:
            raise InvalidArgument(f"a group needs a positive number of workers, got {peers!r}")
        registry = _Registry(peers)
        return [cls(i, registry) for i in range(peers)]

    @property
    def index(self) -> int:
        """This worker's index."""
        return self._index

    @property
    def peers(self) -> int:
        """The number of workers in the group."""
        return self._registry.peers

    def allocate(
        self, channel: Hashable, precedence: Precedence = Precedence.DATA
    ) -> tuple[list[Push[Any]], Pull[Any]]:
        """Push ends to every worker's mailbox of ``channel``, and this worker's own mailbox."""
        boxes = self._registry.mailboxes(channel)
        return list(boxes), boxes[self._index]

    def built(self, dataflow: int) -> None:
        """Nothing to check: in-process workers cannot disagree about channels they share."""

    def receive(self) -> None:
        """Nothing to do: pushes land in mailboxes directly."""

    def release(self) -> None:
        """Nothing to do: pushes are never buffered."""

    def park(self, timeout: float) -> None:
        """Return at once: in-process workers take turns, so there is nobody to wait for."""
