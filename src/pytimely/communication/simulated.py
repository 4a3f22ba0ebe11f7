"""A simulated cluster in one process: N processes of W workers, with message delays chosen by a seed.

Workers of one simulated process hand messages over by reference, at once. A message between processes is
pickled (as the network would) and delayed by a number of its receiver's steps drawn from a seeded random
generator, so messages from different senders, and on different channels, overtake one another. What the
allocator contract promises still holds: per sender and channel, messages arrive in the order they were
pushed (a message is never delivered before an earlier one on its link). Precedence is kept per receiver, as
the datagram model's ``Receive`` keeps it (:mod:`pytimely.verify.datagram`): a message never becomes visible
before a message of a higher level (progress over data) sent to the same receiver earlier. The model's
``Transport`` also orders levels across all receivers; the simulation does not, as its clocks are per
receiver.

Delays are counted in the receiver's steps (its :meth:`SimulatedAllocator.receive` calls), not in seconds,
and a receiver with nothing due but messages on the way skips ahead to the earliest of them, as a
discrete-event simulator does: an idle step never waits for a message that is merely late, so the stall
detector of the in-process scheduler stays right. Run under that scheduler with the same seed (see
:func:`pytimely.testing.run_simulated`), the whole run is a function of the seed: the same seed gives the
same deliveries in the same order (:attr:`SimulatedCluster.trace`), another seed another order.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from pytimely.communication.allocator import Precedence, Pull, Push
from pytimely.communication.payload import dumps, loads
from pytimely.errors import InvalidArgument

__all__ = ["Delivery", "SimulatedAllocator", "SimulatedCluster"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message taken by a receiver: who sent it, on which channel, at which of the receiver's steps."""

    sender: int
    receiver: int
    channel: Hashable
    step: int


class _Inbox:
    """A receiver's side of one channel: messages ordered by the step they are due at, then by arrival."""

    __slots__ = ("_channel", "_cluster", "_heap", "_receiver", "precedence")

    def __init__(self, cluster: SimulatedCluster, receiver: int, channel: Hashable, precedence: Precedence) -> None:
        self._cluster = cluster
        self._receiver = receiver
        self._channel = channel
        self.precedence = precedence
        self._heap: list[tuple[int, int, int, Any]] = []

    def put(self, due: int, sender: int, message: Any) -> None:
        heapq.heappush(self._heap, (due, self._cluster._next_seq(), sender, message))

    def earliest(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def waiting(self) -> bool:
        """Whether a message is due by the receiver's current step (later ones are still in flight)."""
        return bool(self._heap) and self._heap[0][0] <= self._cluster._clock[self._receiver]

    def drain(self) -> list[Any]:
        """Every message due by the receiver's current step, in due order."""
        heap = self._heap
        now = self._cluster._clock[self._receiver]
        out = []
        while heap and heap[0][0] <= now:
            _, _, sender, message = heapq.heappop(heap)
            self._cluster.trace.append(Delivery(sender, self._receiver, self._channel, now))
            out.append(message)
        return out


class _Link:
    """One sender's push end towards one receiver on one channel."""

    __slots__ = ("_cluster", "_inbox", "_receiver", "_remote", "_sender")

    def __init__(self, cluster: SimulatedCluster, sender: int, receiver: int, inbox: _Inbox) -> None:
        self._cluster = cluster
        self._sender = sender
        self._receiver = receiver
        self._inbox = inbox
        self._remote = cluster.process_of(sender) != cluster.process_of(receiver)

    def push(self, message: Any) -> None:
        cluster = self._cluster
        due = cluster._clock[self._receiver]
        if self._remote:
            # A copy through pickle, as between real processes: the receiver never shares the sender's objects.
            parts, _ = dumps(message)
            message = loads(b"".join(bytes(p) for p in parts))
            due += cluster._rng.randint(0, cluster.max_delay)
            key = (self._sender, self._inbox)
            # FIFO per link: never due before the previous message on it.
            due = max(due, cluster._link_due.get(key, 0))
            cluster._link_due[key] = due
        # Precedence at the receiver: nothing overtakes a message of a higher level sent to it before.
        levels = cluster._level_due[self._receiver]
        p = self._inbox.precedence
        due = max([due, *(d for q, d in levels.items() if q > p)])
        levels[p] = max(levels.get(p, 0), due)
        self._inbox.put(due, self._sender, message)


class SimulatedCluster:
    """The shared state of a simulated cluster: inboxes, every receiver's step count, the seeded delays."""

    def __init__(self, processes: int, workers_per_process: int, seed: int, max_delay: int = 8) -> None:
        for what, value in (("processes", processes), ("workers_per_process", workers_per_process)):
            if type(value) is not int or value < 1:
                raise InvalidArgument(f"a simulated cluster needs a positive int {what}, got {value!r}")
        if type(max_delay) is not int or max_delay < 0:
            raise InvalidArgument(f"max_delay must be an int >= 0 (receiver steps), got {max_delay!r}")
        self.processes = processes
        self.workers_per_process = workers_per_process
        self.peers = processes * workers_per_process
        self.seed = seed
        self.max_delay = max_delay
        self._rng = random.Random(seed)
        self._clock = [0] * self.peers
        self._seq = 0
        self._inboxes: dict[Hashable, list[_Inbox]] = {}
        self._link_due: dict[tuple[int, _Inbox], int] = {}
        self._level_due: list[dict[int, int]] = [{} for _ in range(self.peers)]
        self.trace: list[Delivery] = []
        """Every delivery so far, in order: the schedule a seed chose."""

    def process_of(self, worker: int) -> int:
        """The simulated process worker ``worker`` belongs to."""
        return worker // self.workers_per_process

    def allocators(self) -> list[SimulatedAllocator]:
        """One allocator per worker, by index."""
        return [SimulatedAllocator(i, self) for i in range(self.peers)]

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _channel(self, channel: Hashable, precedence: Precedence) -> list[_Inbox]:
        inboxes = self._inboxes.get(channel)
        if inboxes is None:
            inboxes = self._inboxes[channel] = [_Inbox(self, i, channel, precedence) for i in range(self.peers)]
        return inboxes

    def _tick(self, worker: int) -> None:
        """One step of ``worker``: its clock moves on, or jumps to its earliest message if none is due."""
        clock = self._clock[worker] + 1
        pending = [due for inboxes in self._inboxes.values() if (due := inboxes[worker].earliest()) is not None]
        if pending and min(pending) > clock:
            clock = min(pending)
        self._clock[worker] = clock

    def in_flight(self) -> int:
        """How many messages wait in inboxes."""
        return sum(len(inbox._heap) for inboxes in self._inboxes.values() for inbox in inboxes)


class SimulatedAllocator:
    """The allocator of one worker of a :class:`SimulatedCluster` (the interface of ``LocalAllocator``)."""

    def __init__(self, index: int, cluster: SimulatedCluster) -> None:
        self._index = index
        self._cluster = cluster

    @property
    def index(self) -> int:
        """This worker's index."""
        return self._index

    @property
    def peers(self) -> int:
        """The number of workers in the simulated cluster."""
        return self._cluster.peers

    def allocate(
        self, channel: Hashable, precedence: Precedence = Precedence.DATA
    ) -> tuple[list[Push[Any]], Pull[Any]]:
        """Push ends to every worker's inbox of ``channel`` (delayed across processes), and this worker's inbox."""
        inboxes = self._cluster._channel(channel, precedence)
        pushes: list[Push[Any]] = [_Link(self._cluster, self._index, j, inbox) for j, inbox in enumerate(inboxes)]
        return pushes, inboxes[self._index]

    def built(self, dataflow: int) -> None:
        """Nothing to check: simulated workers build the same dataflows in one process."""

    def receive(self) -> None:
        """Start a step: move this worker's clock, making the messages due by then visible."""
        self._cluster._tick(self._index)

    def release(self) -> None:
        """Nothing to do: pushes go straight to inboxes."""

    def park(self, timeout: float) -> None:
        """Return at once: simulated workers take turns, there is no one to wait for."""
