"""What the parts of a cluster know of one another: narrow protocols instead of the whole :class:`Cluster`.

timely's ``send_loop``/``recv_loop`` (``allocator/zero_copy/tcp.rs``) are free functions over queues: they know
nothing of the allocator that owns them. The same split here:

* a :class:`~.link.Link` knows only :class:`LinkEvents`: where the frames it receives go, whom it tells of a
  peer's control frames, and the flow control of its process's receiving side;
* a :class:`~.router.ClusterMailbox` knows only :class:`MailboxOwner`: whom it tells what its worker took, and
  whom it tells when a payload cannot be decoded;
* a worker's :class:`~.allocator.ClusterAllocator` and its push ends know only :class:`Hub`, the part of its
  process they ask for channels, links and membership.

:class:`~.process.Cluster` implements all three; nothing below it imports it, so the modules of this package form
no circle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pytimely.communication.allocator import ProcessGroup
from pytimely.communication.cluster.membership import Membership
from pytimely.communication.cluster.queues import OutgoingFrame
from pytimely.communication.cluster.quiescence import Quiescence
from pytimely.communication.frame import Frame
from pytimely.communication.platform import Event, Lock, Platform
from pytimely.config import Config

__all__ = ["Hub", "Inbox", "LinkEvents", "MailboxOwner"]


class LinkEvents(Protocol):
    """What a link's sending and receiving threads tell their process, and the little they ask of it."""

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped the computation, if any (the loops end once there is one)."""
        ...

    def fail(self, error: BaseException) -> None:
        """Stop the computation with ``error`` (the first one wins)."""
        ...

    def deliver(self, peer: int, frame: Frame) -> None:
        """A checked data or progress frame from ``peer``, for one worker here or for all of them."""
        ...

    def joined(self, peer: int, text: str) -> None:
        """``peer`` says it joins (its ``JOIN`` frame's text: its bootstrap server and workers per process)."""
        ...

    def leaving(self, peer: int) -> None:
        """``peer`` says it leaves (its ``LEAVING`` frame)."""
        ...

    def done(self, peer: int) -> None:
        """``DONE`` went to or came from ``peer``: whoever waits for the end may look again."""
        ...

    def sender_blocked(self, delta: int) -> None:
        """A worker here starts (+1) or stops (-1) waiting for a full send window."""
        ...

    def receiving_full(self) -> bool:
        """Whether data received here and not yet taken has reached the hard bound."""
        ...

    def throttle(self) -> bool:
        """Wait while too much received data is untaken; whether it waited (called by receiving threads)."""
        ...


class MailboxOwner(Protocol):
    """What a worker's mailbox tells its process."""

    def consumed(self, nbytes: int) -> None:
        """The worker took ``nbytes`` of payloads received from other processes (reading may resume)."""
        ...

    def fail(self, error: BaseException) -> None:
        """Stop the computation with ``error``."""
        ...


class Inbox(Protocol):
    """A worker's mailbox of one channel: other workers of its process push to it, its worker drains it."""

    def push(self, message: Any, /) -> None:
        """Queue ``message`` (from a worker of this process) and wake the mailbox's worker."""
        ...

    def drain(self) -> list[Any]:
        """The queued messages, oldest first (data payloads past a decoding budget may wait for the next drain)."""
        ...

    def waiting(self) -> bool:
        """Whether messages wait for a drain."""
        ...


class Hub(ProcessGroup, Protocol):
    """What a worker's allocator and its push ends ask of their process's part of the cluster."""

    config: Config
    platform: Platform
    me: int
    workers: int
    first: int
    peers: int
    initial_peers: int
    elastic: bool
    live: set[int]
    """Processes taking part, as far as this process knows."""
    server: int | None
    """For a joining process: the worker its workers bootstrap from."""
    events: list[Membership]
    leave_requested: bool
    quiescence: Quiescence

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped the computation, if any."""
        ...

    def check(self) -> None:
        """Raise the cluster's failure, if there is one."""
        ...

    def wake_event(self, local: int) -> Event:
        """What the ``local``-th worker here waits on between idle steps (set when something arrives for it)."""
        ...

    def open(self, channel: tuple[int, int]) -> Sequence[Inbox]:
        """The mailboxes of ``channel`` for every worker of this process."""
        ...

    def shared(self, channel: tuple[int, int], make: Callable[[], Any]) -> tuple[Any, Lock]:
        """The object this process's workers share for a grouped ``channel`` (made once) and their lock."""
        ...

    def seal(self, dataflow: int) -> None:
        """A worker here has built ``dataflow``: it opens no more of its channels."""
        ...

    def linked(self, process: int) -> bool:
        """Whether this process has a link to ``process``."""
        ...

    def enqueue(self, process: int, frames: list[OutgoingFrame]) -> None:
        """Queue ``frames`` on the link to ``process`` (data frames wait while its send window is full)."""
        ...

    def applied_by_worker(self, index: int) -> None:
        """A worker here has applied membership event ``index`` to its channels."""
        ...

    def retire_worker(self) -> None:
        """A worker here has finished: it applies no more membership changes."""
        ...

    def worker_leaves(self) -> None:
        """A worker here is ready to leave; once all are, the process says so to every other."""
        ...

    def left_by_all(self) -> bool:
        """Whether every other process has said ``DONE`` to this leaving one."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters for tests and benchmarks."""
        ...
