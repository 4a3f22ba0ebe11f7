"""The seam between the dataflow layer and whatever moves its messages.

A worker asks its allocator for a *channel* by an identifier every worker
computes the same way (they build the same dataflow in the same order): a pair
``(dataflow, index)``, allocated in increasing order, with a :class:`Precedence`. The
allocator answers with one :class:`Push` per peer and one :class:`Pull` that
yields what peers pushed to this worker. Per sender, messages arrive in the
order they were pushed (FIFO); nothing else is promised across senders.

The in-process allocator hands objects over by reference; a network allocator
serialises them. Nothing here knows about operators or timestamps.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol, TypeVar

__all__ = ["Allocator", "Precedence", "Pull", "Push"]

M = TypeVar("M")
M_contra = TypeVar("M_contra", contravariant=True)


class Precedence(enum.IntEnum):
    """Seed 003's precedence levels of a channel's messages: a higher level is transported and received first."""

    DATA = 1
    PROGRESS = 2
    CONTROL = 3


class Push(Protocol[M_contra]):
    """The sending end of a channel towards one peer."""

    def push(self, message: M_contra, /) -> None:
        """Send ``message`` (FIFO with this end's earlier messages)."""
        ...


class Pull(Protocol[M]):
    """The receiving end of a channel at this worker."""

    def drain(self) -> list[M]:
        """Every message received so far and not yet drained, oldest first per sender."""
        ...


class Allocator(Protocol):
    """What a worker needs from the communication layer."""

    @property
    def index(self) -> int:
        """This worker's index, ``0 <= index < peers``."""
        ...

    @property
    def peers(self) -> int:
        """How many workers take part."""
        ...

    def allocate(
        self, channel: tuple[int, int], precedence: Precedence = Precedence.DATA
    ) -> tuple[list[Push[Any]], Pull[Any]]:
        """One push end per peer (by index) and this worker's pull end of channel ``(dataflow, index)``."""
        ...

    def built(self, dataflow: int) -> None:
        """Every channel of ``dataflow`` is allocated: a message for another of its channels is an error."""
        ...

    def receive(self) -> None:
        """Bring in whatever arrived from outside (network allocators); cheap when nothing did."""
        ...

    def release(self) -> None:
        """Send whatever is buffered (network allocators)."""
        ...

    def park(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a message from another thread or process (or return at once)."""
        ...
