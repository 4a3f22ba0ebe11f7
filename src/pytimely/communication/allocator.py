"""The seam between the dataflow layer and whatever moves its messages.

A worker asks its allocator for a *channel* by an identifier every worker
computes the same way (they build the same dataflow in the same order). The
allocator answers with one :class:`Push` per peer and one :class:`Pull` that
yields what peers pushed to this worker. Per sender, messages arrive in the
order they were pushed (FIFO); nothing else is promised across senders.

The in-process allocator hands objects over by reference; a network allocator
serialises them. Nothing here knows about operators or timestamps.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol, TypeVar

__all__ = ["Allocator", "Pull", "Push"]

M = TypeVar("M")
M_contra = TypeVar("M_contra", contravariant=True)


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

    def allocate(self, channel: Hashable) -> tuple[list[Push[Any]], Pull[Any]]:
        """One push end per peer (by index) and this worker's pull end of channel ``channel``."""
        ...

    def receive(self) -> None:
        """Bring in whatever arrived from outside (network allocators); cheap when nothing did."""
        ...

    def release(self) -> None:
        """Send whatever is buffered (network allocators)."""
        ...
