"""Exchanging progress between workers, free of I/O.

Each worker records the pointstamp changes its actions cause, and now and then
*flushes* them as one atomic :class:`ProgressBatch` broadcast to every worker
(itself included) over FIFO channels. Batches carry per-sender sequence
numbers, so a receiver can tell a gap or a duplicate from the next batch. A
worker's view of the system is the accumulation of the batches it received.

The sending policy is the exchange protocol of seed ``000_306a8e6bd5c43d47.txt``
§4 (Fig. 4, ``send_upd``): a worker may keep back part of its pending changes
only when what it keeps is ``justified`` by its *own* capabilities.

* :attr:`ProgressMode.EAGER` sends everything pending at every flush.
* :attr:`ProgressMode.DEMAND` keeps back exactly the increments its own
  capabilities justify (a message count at ``(target, t)`` while the worker
  still holds the capability at ``(source, t)`` that produced it) and sends
  the rest; decrements always go out, so the frontiers of others advance.

:class:`ProgressAggregator` is a process's side towards other processes when progress is aggregated per
process (seed ``002_640294948a1fdfd3.txt`` §3.3, footnote 4): its workers' batches, in the order they were
sent, leave as one combined batch numbered in the process's own sequence (model:
:mod:`pytimely.verify.aggregate`).

Nothing here reads a socket or a queue: transports (in-process queues, TCP, a
seeded simulator) move :class:`ProgressBatch` values and call these methods.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pytimely.errors import DemandModeError, InvalidArgument, SequenceError, UnjustifiedHoldError
from pytimely.progress.change_batch import ChangeBatch

__all__ = [
    "AGGREGATE_DELAY",
    "ProgressAggregator",
    "ProgressBatch",
    "ProgressMode",
    "ProgressReceiver",
    "ProgressSender",
    "aggregate_sender",
    "justified",
]

P = TypeVar("P", bound=Hashable)
T = TypeVar("T")

Pointstamp = tuple[Any, Any]
Lt = Callable[[Any, Any], bool]


class ProgressMode(enum.Enum):
    """When a worker sends its pending progress changes."""

    EAGER = "eager"
    DEMAND = "demand"


@dataclass(frozen=True, slots=True)
class ProgressBatch(Generic[T]):
    """One atomic batch of ``(location, time, diff)`` changes from ``sender``, numbered ``seq``."""

    sender: int
    seq: int
    updates: tuple[tuple[Any, T, int], ...]

    def __len__(self) -> int:
        return len(self.updates)


def justified(caps: Mapping[P, int], kept: Mapping[P, int], lt: Callable[[P, P], bool]) -> bool:
    """Seed 000 §4 ``justified C M``: every positive count in ``kept`` has a justification.

    A positive entry ``p`` is justified when ``kept`` also drops something
    strictly below ``p`` (``supp``), when ``caps`` holds something strictly below
    ``p``, or when ``kept``'s count of ``p`` is below ``caps``' count of ``p``.
    """
    held = [q for q, c in caps.items() if c > 0]
    negatives = [q for q, c in kept.items() if c < 0]
    for p, count in kept.items():
        if count <= 0:
            continue
        if count < caps.get(p, 0):
            continue
        if any(lt(q, p) for q in held):
            continue
        if any(lt(q, p) for q in negatives):
            continue
        return False
    return True


class ProgressSender(Generic[T]):
    """A worker's outgoing side: pending changes (``temp``), the sending policy, sequence numbers."""

    def __init__(self, worker: int, lt: Lt | None = None, mode: ProgressMode = ProgressMode.EAGER) -> None:
        if mode is ProgressMode.DEMAND and lt is None:
            raise DemandModeError("demand mode needs the could-result-in order (lt) to judge what it may keep")
        self.worker = worker
        self.mode = mode
        self._lt = lt
        self._pending: ChangeBatch[Pointstamp] = ChangeBatch()
        self._seq = 0

    def record(self, location: Any, time: T, diff: int) -> None:
        """Record a pointstamp change caused by this worker's own action."""
        self._pending.update((location, time), diff)

    def record_batch(self, updates: Iterable[tuple[Any, T, int]]) -> None:
        """Record the pointstamp changes of one action (kept together until flushed)."""
        self._pending.extend(((loc, t), d) for loc, t, d in updates)

    def pending(self) -> dict[Pointstamp, int]:
        """The changes recorded but not yet sent."""
        return dict(self._pending.items())

    def next_seq(self) -> int:
        """The sequence number the next batch will carry."""
        return self._seq

    def flush(self, caps: Mapping[Pointstamp, int] | None = None) -> ProgressBatch[T] | None:
        """Take the changes to send now as one batch (``None`` if there is nothing to send).

        ``caps`` are this worker's own capabilities (pointstamps it holds, including
        received messages not yet consumed); demand mode needs them.
        """
        pending = self._pending.items()
        if not pending:
            return None
        if self.mode is ProgressMode.EAGER:
            send = pending
            self._pending.clear()
        else:
            if caps is None:
                raise DemandModeError(
                    f"worker {self.worker}: demand mode needs the worker's own capabilities to decide what to keep; "
                    "pass flush(caps)"
                )
            send, keep = self._split(caps, dict(pending))
            if not send:
                return None
            self._pending.clear()
            self._pending.extend(keep.items())
        batch = ProgressBatch(self.worker, self._seq, tuple((p[0], p[1], d) for p, d in send))
        self._seq += 1
        return batch

    def send_subset(self, chosen: Iterable[Pointstamp], caps: Mapping[Pointstamp, int]) -> ProgressBatch[T] | None:
        """Send only the pending changes at ``chosen`` pointstamps (Fig. 4 ``send_upd w P``).

        Refuses, with :class:`UnjustifiedHoldError` and nothing changed, when what
        would stay behind is not justified by ``caps``.
        """
        pending = dict(self._pending.items())
        chosen_set = set(chosen)
        send = [(p, d) for p, d in pending.items() if p in chosen_set]
        if not send:
            return None
        keep = {p: d for p, d in pending.items() if p not in chosen_set}
        lt = self._lt if self._lt is not None else (lambda a, b: False)
        if not justified(caps, keep, lt):
            raise UnjustifiedHoldError(
                f"worker {self.worker} would keep back {keep!r}, which its capabilities {dict(caps)!r} "
                "do not justify; send those changes too"
            )
        self._pending.clear()
        self._pending.extend(keep.items())
        batch = ProgressBatch(self.worker, self._seq, tuple((p[0], p[1], d) for p, d in send))
        self._seq += 1
        return batch

    def _split(
        self, caps: Mapping[Pointstamp, int], pending: dict[Pointstamp, int]
    ) -> tuple[list[tuple[Pointstamp, int]], dict[Pointstamp, int]]:
        lt = self._lt
        assert lt is not None
        held = [q for q, c in caps.items() if c > 0]
        keep: dict[Pointstamp, int] = {}
        send: list[tuple[Pointstamp, int]] = []
        for p, d in pending.items():
            # Decrements always go out; the kept part then has no negatives, so an increment
            # is justified only by this worker's own capabilities.
            if d > 0 and (d < caps.get(p, 0) or any(lt(q, p) for q in held)):
                keep[p] = d
            else:
                send.append((p, d))
        return send, keep


class ProgressReceiver:
    """A worker's incoming side: checks each sender's FIFO order by sequence number.

    ``counted`` names, per sender, how many of its batches the view already
    holds from elsewhere (a bootstrap's state): those still arrive on the link,
    are checked in order like any other, and are then discarded.
    """

    def __init__(
        self, peers: int | Iterable[int] | Mapping[int, int], counted: Mapping[int, int] | None = None
    ) -> None:
        if isinstance(peers, Mapping):
            self._expected: dict[int, int] = dict(peers)
        else:
            senders = range(peers) if isinstance(peers, int) else peers
            self._expected = {s: 0 for s in senders}
        self._counted: dict[int, int] = {}
        for sender, n in (counted or {}).items():
            if sender not in self._expected:
                raise InvalidArgument(f"counted batches of worker {sender}, which is not a sender")
            if n > self._expected[sender]:
                self._counted[sender] = n

    def accept(self, batch: ProgressBatch[T]) -> tuple[tuple[Any, T, int], ...]:
        """Check that ``batch`` is its sender's next one and return its updates (none if already counted).

        A gap, a duplicate or an unknown sender raises :class:`SequenceError` and
        changes nothing.
        """
        expected = self._expected.get(batch.sender)
        if expected is None:
            raise SequenceError(
                f"progress batch from unknown worker {batch.sender}", batch.sender, -1, batch.seq
            )
        if batch.seq != expected:
            kind = "duplicate" if batch.seq < expected else "gap"
            raise SequenceError(
                f"progress batch {batch.seq} from worker {batch.sender} is a {kind}: expected {expected}",
                batch.sender,
                expected,
                batch.seq,
            )
        self._expected[batch.sender] = expected + 1
        counted = self._counted
        if counted and batch.sender in counted:
            if expected + 1 >= counted[batch.sender]:
                del counted[batch.sender]
            return ()
        return batch.updates

    def expected(self, sender: int) -> int:
        """How many of ``sender``'s batches the view holds (the sequence number it needs next)."""
        return max(self._expected[sender], self._counted.get(sender, 0))

    def numbers(self) -> dict[int, int]:
        """Per sender, how many of its batches the view holds."""
        return {s: self.expected(s) for s in self._expected}

    def on_link(self, sender: int) -> int:
        """The sequence number due next on ``sender``'s link (below :meth:`expected` while counted ones arrive)."""
        return self._expected[sender]

    def add(self, sender: int, next_seq: int = 0) -> None:
        """Start accepting batches from ``sender`` (a worker that joined), from ``next_seq`` on."""
        self._expected.setdefault(sender, next_seq)

    def remove(self, sender: int) -> None:
        """Stop accepting batches from ``sender`` (a worker that left)."""
        self._expected.pop(sender, None)
        self._counted.pop(sender, None)


def aggregate_sender(process: int) -> int:
    """The sender id of process ``process``'s combined batches (negative: never a worker's index)."""
    return -1 - process


AGGREGATE_DELAY = 0.001
"""Seconds a process's outbox may hold a worker's progress batch back, at most, waiting for the batches of the
process's other workers (:class:`ProgressAggregator`)."""


class ProgressAggregator(Generic[T]):
    """A process's outgoing progress towards other processes: its workers' batches, combined.

    Workers :meth:`offer` every batch they broadcast (they still hand it to the workers of their own
    process directly); :meth:`flush` takes the oldest batches, in order, as one batch from
    :func:`aggregate_sender` of the process. Sent once per remote process and handed to each of its
    workers, it replaces one frame per remote worker and per sending worker (``agg_send`` of
    :mod:`pytimely.verify.aggregate`, checked in lockstep in ``tests/lockstep/test_aggregate_lockstep.py``).

    *When* to flush is decided here too, with the time passed in (nothing here reads a clock). A worker says
    when its step begins (:meth:`begin`) and when it ends (:meth:`end`, after its offer, if it made one), and
    names the workers of the process that have messages waiting for their next step (``awake``). The queued
    batches leave at the end of a step once every worker that may still add to them has ended a step since the
    oldest was offered (a worker inside a step, or woken by a message: the worker threads of a process take
    turns, so without waiting for the awake ones no two batches would ever meet), or once the oldest has waited
    ``delay`` seconds, whichever comes first; whoever holds the outbox looks again by :meth:`deadline`.
    ``combine`` False sends every batch on its own at once (as before batches were combined).
    """

    def __init__(self, process: int, *, delay: float = AGGREGATE_DELAY, combine: bool = True) -> None:
        self.process = process
        self.sender = aggregate_sender(process)
        self.delay = delay
        self.combine = combine
        self._queued: list[ProgressBatch[T]] = []
        self._offered: list[tuple[int, float]] = []
        """Per queued batch: the event count and the time it was offered at."""
        self._stepping: set[int] = set()
        self._ended: dict[int, int] = {}
        """Per worker: the event count at which its last step ended."""
        self._events = 0
        self._seq = 0
        self.flushes = 0
        """How many times queued batches were taken as one (whether they cancelled out or not)."""
        self.flushed = 0
        """How many offered batches they held in all."""
        self.combined = 0
        """How many of them held the batches of more than one worker."""

    def begin(self, worker: int) -> None:
        """``worker`` started a step: until its :meth:`end` it may still offer a batch."""
        self._stepping.add(worker)

    def end(self, worker: int, now: float, awake: Iterable[int] = ()) -> int:
        """``worker``'s step ended (after its offer, if any): how many queued batches to :meth:`flush` now (0: keep
        them for another worker's step, or for the delay). ``awake``: the workers with messages waiting."""
        self._stepping.discard(worker)
        self._events += 1
        self._ended[worker] = self._events
        return self.due(now, awake)

    def due(self, now: float, awake: Iterable[int] = ()) -> int:
        """How many queued batches must leave by ``now`` (all or none): all once no worker inside a step or in
        ``awake`` is still to end a step since the oldest was offered, or once that one has waited ``delay``."""
        if not self._queued:
            return 0
        oldest, since = self._offered[0]
        # Compared as deadline() computes it: ``now - since >= delay`` can be false one ulp after the deadline,
        # and whoever waits for the deadline would look again and again without anything leaving.
        if not self.combine or now >= since + self.delay:
            return len(self._queued)
        ended = self._ended
        for worker in (*self._stepping, *awake):
            if ended.get(worker, -1) < oldest:
                return 0
        return len(self._queued)

    def next_seq(self) -> int:
        """The sequence number the next combined batch will carry (what a newcomer's link starts at)."""
        return self._seq

    def deadline(self) -> float | None:
        """When the oldest queued batch must leave at the latest (``None``: nothing is queued)."""
        return self._offered[0][1] + self.delay if self._offered else None

    def offer(self, batch: ProgressBatch[T], now: float = 0.0) -> None:
        """Queue a batch one of this process's workers broadcast at time ``now`` (behind every batch offered before
        it)."""
        self._events += 1
        self._queued.append(batch)
        self._offered.append((self._events, now))

    def queued(self) -> list[ProgressBatch[T]]:
        """The batches offered and not yet flushed, oldest first."""
        return list(self._queued)

    def flush(self, count: int | None = None) -> ProgressBatch[T] | None:
        """The oldest ``count`` (default: all) queued batches as one; ``None`` if they cancel out or none are queued.

        Only a prefix may go: a later batch of a worker must never overtake an earlier one (the mutant
        ``aggregate-reorders`` shows ``Safe`` breaking when it does).
        """
        if count is None:
            count = len(self._queued)
        if not 1 <= count <= len(self._queued):
            if not self._queued:
                return None
            raise InvalidArgument(
                f"process {self.process} has {len(self._queued)} progress batches queued, cannot flush {count}"
            )
        taken, self._queued = self._queued[:count], self._queued[count:]
        del self._offered[:count]
        self.flushes += 1
        self.flushed += count
        if len({batch.sender for batch in taken}) > 1:
            self.combined += 1
        combined: ChangeBatch[Pointstamp] = ChangeBatch()
        for batch in taken:
            combined.extend(((loc, t), d) for loc, t, d in batch.updates)
        updates = combined.items()
        if not updates:
            return None
        out = ProgressBatch(self.sender, self._seq, tuple((p[0], p[1], d) for p, d in updates))
        self._seq += 1
        return out
