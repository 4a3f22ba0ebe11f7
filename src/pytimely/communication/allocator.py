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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from pytimely.communication.platform import Lock

if TYPE_CHECKING:
    from pytimely.communication.cluster.membership import Membership

__all__ = [
    "Allocator",
    "Broadcast",
    "Deferred",
    "ElasticAllocator",
    "Grouped",
    "GroupingAllocator",
    "Members",
    "Precedence",
    "ProcessGroup",
    "Pull",
    "Push",
    "ToProcesses",
    "broadcast",
    "elastic_view",
    "grouping_view",
]

M = TypeVar("M")
S = TypeVar("S")
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


@runtime_checkable
class Broadcast(Protocol[M_contra]):
    """The push ends of a channel that can send one message to every peer at once (a cluster serialises it once
    and sends it to each other process once, for all of that process's workers)."""

    def broadcast(self, message: M_contra, /) -> None:
        """Send ``message`` to every peer (FIFO with each end's earlier messages)."""
        ...


@runtime_checkable
class Members(Protocol):
    """The push ends of a cluster's channel, by worker id, that reach the workers of another process with one
    message (an elastic cluster's, whose peers come and go, and a fixed one's)."""

    def targets(self) -> list[tuple[int, Push[Any]]]:
        """``(worker id, push end)`` of every member now, by id."""
        ...

    def broadcast(self, message: Any, skip: int | None = None) -> None:
        """Send ``message`` to every member but ``skip``, serialised once and once to each other process."""
        ...


def broadcast(pushes: Iterable[Push[M]] | Broadcast[M], message: M) -> None:
    """``message`` to every push end of a channel: at once where the channel can, else one end after another."""
    # A list (in-process and fixed clusters) is told apart first: checking a runtime Protocol costs microseconds.
    # A fixed cluster's progress goes per worker here only when it is not combined per process (a choice).
    if not isinstance(pushes, list) and isinstance(pushes, Broadcast):
        pushes.broadcast(message)
        return
    for push in pushes:
        push.push(message)


class Pull(Protocol[M]):
    """The receiving end of a channel at this worker."""

    def drain(self) -> list[M]:
        """The messages received so far and not yet drained, oldest first per sender: every one, but that a
        cluster mailbox may leave data payloads past a decoding budget for the next drain (and wakes its worker
        for them; :meth:`pytimely.communication.cluster.router.ClusterMailbox.drain`)."""
        ...

    def waiting(self) -> bool:
        """Whether messages received here wait for a drain (a worker holding them has not taken its work)."""
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


@runtime_checkable
class ElasticAllocator(Allocator, Protocol):
    """An allocator of a cluster whose processes may join and leave while it runs (the cluster allocator)."""

    elastic: bool
    """Whether processes may join and leave (a cluster allocator of a fixed cluster says ``False``)."""
    seen: int
    """How many of :attr:`events` this worker has applied to its channels."""
    joining: tuple[int, tuple[int, ...], tuple[int, ...]] | None
    """For a worker of a joining process: its bootstrap server, the members it hears from, its fellow newcomers."""

    @property
    def events(self) -> list[Membership]:
        """The cluster's membership changes, in order."""
        ...

    @property
    def members(self) -> list[int]:
        """The ids of the workers taking part, as this worker has applied the changes so far."""
        ...

    @property
    def workers_per_process(self) -> int:
        """How many workers each process runs."""
        ...

    @property
    def leave_requested(self) -> bool:
        """Whether this worker's process was asked to leave."""
        ...

    def quiet(self, flag: bool) -> None:
        """Whether this worker now only waits for its dataflows and its last steps found nothing to do."""
        ...

    def stalled(self) -> bool:
        """Whether every process has been quiet, with nothing sent, for the cluster's stall timeout."""
        ...

    def ready_to_leave(self) -> None:
        """This worker may go; once every worker of the process is ready, the process says it leaves."""
        ...

    def left_by_all(self) -> bool:
        """Whether every other process has stopped sending to this leaving one."""
        ...

    def retire(self) -> None:
        """This worker has finished; it applies no further membership changes."""
        ...


@dataclass(frozen=True, slots=True)
class Grouped(Generic[S]):
    """One worker's ends of a channel whose messages to another process are sent once and fanned out there.

    ``local`` reaches each worker of this process (by local index), ``others`` other processes: a message
    pushed there is serialised once and reaches every worker of every process it is pushed to (by default every
    other process taking part), in the order this process's workers pushed, whichever worker pushed it.
    ``processes`` counts them all, this one included. ``shared`` is one object for every worker of this process
    (made by the first to ask), and ``lock`` the lock they share to keep their pushes in an order of their
    choosing. ``group`` tells which workers of the process are about to step and looks at a :class:`Deferred`
    ``shared`` object by the time it is told.
    """

    process: int
    processes: int
    local: list[Push[Any]]
    others: ToProcesses
    pull: Pull[Any]
    shared: S
    lock: Lock
    group: ProcessGroup


@runtime_checkable
class Deferred(Protocol):
    """A grouped channel's shared object that holds messages back for a while, to send them combined (a process's
    progress outbox). Its workers send what it holds at the end of their steps; what they leave behind the
    communication layer sends by the deadline it was told (:meth:`ProcessGroup.wake_by`), calling
    :meth:`flush_due` under the channel's lock from a thread of its own."""

    def deadline(self) -> float | None:
        """The monotonic time by which what it holds back must leave (``None``: it holds nothing)."""
        ...

    def flush_due(self, now: float) -> bool:
        """Send what must leave by ``now``; whether anything did."""
        ...


class ToProcesses(Protocol):
    """The push end of a grouped channel towards other processes: a message serialised once and sent once to each,
    handed there to every worker."""

    def push(self, message: Any, /, processes: Iterable[int] | None = None) -> None:
        """Send ``message`` to ``processes`` (default: every other process taking part), in the order pushed."""
        ...


class ProcessGroup(Protocol):
    """What the workers of a process sharing a grouped channel learn of one another from the communication layer."""

    def awake(self) -> list[int]:
        """The workers of this process with messages waiting for their next step (they will step soon)."""
        ...

    def wake_by(self, deadline: float) -> None:
        """Have every :class:`Deferred` shared object of this process looked at by ``deadline`` (a time of
        :meth:`monotonic`), even if no worker steps by then."""
        ...

    def monotonic(self) -> float:
        """The time on the communication layer's clock (what deadlines here are measured on)."""
        ...


@runtime_checkable
class GroupingAllocator(Allocator, Protocol):
    """An allocator of workers spread over processes that can send a message once per process (seed 002 §3.3)."""

    @property
    def groups(self) -> bool:
        """Whether channels are allocated grouped by process (a fixed cluster of several multi-worker processes)."""
        ...

    def allocate_grouped(
        self, channel: tuple[int, int], precedence: Precedence, make: Callable[[int], S]
    ) -> Grouped[S]:
        """Channel ``(dataflow, index)`` grouped by process; ``make(process)`` builds the shared object once."""
        ...


def grouping_view(allocator: Allocator) -> GroupingAllocator | None:
    """``allocator`` as one that groups channels by process, or ``None`` when it cannot now."""
    if isinstance(allocator, GroupingAllocator) and allocator.groups:
        return allocator
    return None


def elastic_view(allocator: Allocator) -> ElasticAllocator | None:
    """``allocator`` as a cluster allocator with membership, or ``None`` for an in-process one."""
    return allocator if isinstance(allocator, ElasticAllocator) else None
