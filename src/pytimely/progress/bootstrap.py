"""Bootstrapping a worker that joins a running computation (seed ``002_640294948a1fdfd3.txt`` §3.4), free of I/O.

A newcomer cannot replay every progress batch ever sent: it starts from a
*bootstrap server*'s progress state and fills the gap between that state and
what its own links carry.

1. Every member's first message on its new link to the newcomer is a
   :class:`Hello` carrying the sequence number of the next batch it sends there.
2. The server sends its :class:`ProgressState`: the accumulated updates of every
   batch it applied and, per sender, how many of that sender's batches they
   include (a sender it has not met yet, whose join is still on its way to the
   server, is left out: none of its batches). From then on it keeps a copy of
   every batch it applies (:class:`BootstrapServer`).
3. For each sender whose link starts later than the state ends, the newcomer
   asks the server for the missing range ``[included, hello)``
   (:class:`RangeRequest`); the server answers once it has applied those
   batches itself (:class:`RangeReply`).
4. The newcomer's view is then the state, plus the ranges, plus everything its
   links carry from ``max(included, hello)`` on: the accumulation of every batch
   ever sent, with none counted twice (:class:`Bootstrap`).

With progress aggregated per process (seed 002 §3.3), the senders are the workers of the newcomer's own
process and the *aggregate senders* of the others (:func:`~pytimely.progress.broadcast.aggregate_sender`):
each member process greets the newcomer once, under its outbox's lock, with the number of its next combined
batch, and the server's state names how many combined batches of its own process it includes (see
:meth:`BootstrapServer.state`; the model: ``processes`` in :mod:`pytimely.verify.rescale`).

Newcomers that join together start from zero on each other's links, so they
send no :class:`Hello` to one another; nor does a worker that joins while this
one bootstraps (:meth:`Bootstrap.joined`), whose batches the state includes up
to its ``included`` number. Batches the state already includes may still be on
a link when the view completes: the receiver :meth:`Bootstrap.finish` returns
checks them in order and discards them.

The state also names the capabilities the server minted for the newcomer
(§6.2), counted in the server's next batch, which the newcomer then owns and
retires like any other. Each is minted where seed ``000_306a8e6bd5c43d47.txt``
Fig. 4 lets a worker hand a capability to another: strictly above one the
server holds (:func:`mint_time`, one step after its least time at that output).
A copy at the *same* time is unsafe: the newcomer may retire it and its
``(t, -1)`` reach a member before the server's ``(t, +1)``, whose view then
passes ``t`` while the server still holds it (the ``announce-clone`` mutant of
:mod:`pytimely.verify.rescale`, ``Safe`` broken in 8 steps; see docs/verify.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytimely.errors import BootstrapError
from pytimely.order import Product, sort_key
from pytimely.progress.broadcast import ProgressBatch, ProgressReceiver

__all__ = [
    "Bootstrap",
    "BootstrapServer",
    "Hello",
    "ProgressState",
    "RangeReply",
    "RangeRequest",
    "mint",
    "mint_time",
    "successor",
]

Update = tuple[Any, Any, int]


def successor(t: Any) -> Any:
    """A time strictly after ``t``: ``t + 1`` for ints, the outer coordinate's successor for products.

    Other timestamp types say so with a ``successor()`` method; without one,
    :class:`BootstrapError` (no capability can be minted strictly above ``t``).
    """
    if type(t) is int:
        return t + 1
    if isinstance(t, Product):
        return Product(successor(t.outer), t.inner)
    method = getattr(t, "successor", None)
    if method is None:
        raise BootstrapError(
            f"cannot mint a capability for a joining worker strictly after {t!r}: {type(t).__name__} has no successor()"
        )
    return method()


def mint_time(held: Iterable[Any]) -> Any | None:
    """Where a bootstrap server mints a newcomer's capability at an output it holds ``held`` times at.

    Fig. 4's ``perf_op`` (seed ``000_306a8e6bd5c43d47.txt``) lets a worker give
    another a capability only strictly above one it holds itself: one step after
    the least time held. ``None`` when it holds none there (the newcomer's copy
    starts dropped).
    """
    times = list(held)
    if not times:
        return None
    return successor(min(times, key=sort_key))


def mint(held: Mapping[Any, Iterable[Any]], outputs: Iterable[Any]) -> list[tuple[Any, Any]]:
    """The ``(output, time)`` capabilities a server mints for one newcomer worker, from the times it holds per
    output: one per output it holds something at, at :func:`mint_time`."""
    minted = []
    for output in outputs:
        t = mint_time(held.get(output, ()))
        if t is not None:
            minted.append((output, t))
    return minted


@dataclass(frozen=True, slots=True)
class Hello:
    """The first message on a member's link into a newcomer: the number of the next batch on that link."""

    sender: int
    next_seq: int


@dataclass(frozen=True, slots=True)
class ProgressState:
    """A server's progress state: accumulated updates and, per sender, how many of its batches they include."""

    server: int
    updates: tuple[Update, ...]
    included: Mapping[int, int]
    minted: tuple[tuple[Any, Any], ...] = ()
    """``(location, time)`` capabilities the server minted for the newcomer (§6.2), one per newcomer worker."""

    def __len__(self) -> int:
        return len(self.updates)


@dataclass(frozen=True, slots=True)
class RangeRequest:
    """A newcomer asks its server for the batches ``lo .. hi-1`` of each ``(sender, lo, hi)``."""

    newcomer: int
    ranges: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class RangeReply:
    """The server's answer to a :class:`RangeRequest`: the requested batches, in order per sender."""

    batches: tuple[ProgressBatch[Any], ...]


@dataclass
class _Log:
    """What a server keeps for one newcomer: every batch applied since its state was taken."""

    start: dict[int, int]
    batches: dict[int, list[ProgressBatch[Any]]] = field(default_factory=dict)
    request: RangeRequest | None = None


class BootstrapServer:
    """The server's side: snapshots, the batches applied since, and replies once they are complete."""

    def __init__(self, me: int) -> None:
        self.me = me
        self._logs: dict[int, _Log] = {}

    def state(
        self,
        newcomer: int,
        updates: Iterable[Update],
        receiver: ProgressReceiver,
        minted: Iterable[tuple[Any, Any]] = (),
        own: Mapping[int, int] | None = None,
    ) -> ProgressState:
        """Take the state for ``newcomer`` (the tracker's counts and ``receiver``'s numbers) and start its log.

        ``own``: with progress aggregated per process, the number of combined batches the server's own process has
        sent, under its aggregate sender (the state must then include every batch its process's workers put in the
        outbox, and no other: the server flushes the outbox and takes in what they sent first). The server never
        receives those combined batches, so no range of them is ever asked for: the newcomer's link from that
        process started no later than the state ends."""
        included = receiver.numbers()
        if own:
            included.update(own)
        self._logs[newcomer] = _Log(dict(included))
        return ProgressState(self.me, tuple(updates), included, tuple(minted))

    @property
    def serving(self) -> bool:
        """Whether some newcomer's log is open."""
        return bool(self._logs)

    def applied(self, batch: ProgressBatch[Any]) -> None:
        """The server applied ``batch``: keep it for every newcomer whose state does not include it."""
        for log in self._logs.values():
            # A sender the state does not name had no batch applied yet: the newcomer's range for it starts at 0.
            if batch.seq >= log.start.get(batch.sender, 0):
                log.batches.setdefault(batch.sender, []).append(batch)

    def request(self, request: RangeRequest) -> None:
        """A newcomer's request; :class:`BootstrapError` if no state was sent to it or a range is not in its log."""
        log = self._logs.get(request.newcomer)
        if log is None:
            raise BootstrapError(
                f"worker {self.me} sent no progress state to worker {request.newcomer}, which asks it for batches"
            )
        for sender, lo, hi in request.ranges:
            if log.start.get(sender, 0) != lo or hi < lo:
                raise BootstrapError(
                    f"worker {request.newcomer} asks worker {self.me} for batches {lo}..{hi - 1} of worker {sender}, "
                    f"but the state it was sent ends at {log.start.get(sender, 0)}"
                )
        if not request.ranges:
            del self._logs[request.newcomer]  # nothing missing: no reply, the log can go
            return
        log.request = request

    def replies(self, receiver: ProgressReceiver) -> list[tuple[int, RangeReply]]:
        """Replies to requests whose batches have all been applied here (their logs are then closed)."""
        out = []
        numbers = receiver.numbers()
        for newcomer, log in list(self._logs.items()):
            request = log.request
            if request is None:
                continue
            # A member the server has not met yet (its join is still on the way here) has no batch applied.
            if any(numbers.get(sender, 0) < hi for sender, _, hi in request.ranges):
                continue
            batches: list[ProgressBatch[Any]] = []
            for sender, lo, hi in request.ranges:
                kept = log.batches.get(sender, [])
                batches.extend(b for b in kept if lo <= b.seq < hi)
            out.append((newcomer, RangeReply(tuple(batches))))
            del self._logs[newcomer]
        return out

    def forget(self, newcomer: int) -> None:
        """Drop the log of a newcomer that went away."""
        self._logs.pop(newcomer, None)


class Bootstrap:
    """The newcomer's side: collects hellos, the state, replies and link batches until its view is complete.

    ``members`` are the workers that send a :class:`Hello`; ``fresh`` the
    newcomers that join at the same time (their batches count from zero).
    """

    def __init__(self, me: int, server: int, members: Iterable[int], fresh: Iterable[int]) -> None:
        self.me = me
        self.server = server
        self._members = set(members)
        self._fresh = set(fresh)
        self._hello: dict[int, int] = {}
        self._state: ProgressState | None = None
        self._links: dict[int, list[ProgressBatch[Any]]] = {}
        self._requested: tuple[tuple[int, int, int], ...] | None = None
        self._reply: RangeReply | None = None

    def hello(self, hello: Hello) -> None:
        """A member's first message on its link."""
        if hello.sender not in self._members:
            raise BootstrapError(f"worker {self.me} got a hello from worker {hello.sender}, which is not a member")
        if hello.sender in self._hello:
            raise BootstrapError(f"worker {self.me} got a second hello from worker {hello.sender}")
        self._hello[hello.sender] = hello.next_seq

    def state(self, state: ProgressState) -> None:
        """The server's progress state."""
        if state.server != self.server or self._state is not None:
            raise BootstrapError(
                f"worker {self.me} got a progress state from worker {state.server}; it expects one, from worker "
                f"{self.server}"
            )
        self._state = state

    def joined(self, workers: Iterable[int]) -> None:
        """Workers that joined after this one: their links start at zero and send no hello."""
        self._fresh.update(w for w in workers if w not in self._members)

    def batch(self, batch: ProgressBatch[Any]) -> None:
        """A batch on a link (kept until the view is complete)."""
        if batch.sender not in self._members and batch.sender not in self._fresh:
            raise BootstrapError(f"worker {self.me} got a progress batch from unknown worker {batch.sender}")
        self._links.setdefault(batch.sender, []).append(batch)

    def request(self) -> RangeRequest | None:
        """The ranges to ask the server for, once the state and every hello are in (asked once; may be empty)."""
        if self._requested is not None or self._state is None or set(self._hello) != self._members:
            return None
        included = self._state.included
        ranges = []
        for sender, hi in sorted(self._hello.items()):
            lo = included.get(sender, 0)
            if lo < hi:
                ranges.append((sender, lo, hi))
        self._requested = tuple(ranges)
        return RangeRequest(self.me, self._requested)

    def reply(self, reply: RangeReply) -> None:
        """The server's answer; :class:`BootstrapError` unless it holds exactly the ranges asked for."""
        if self._requested is None or self._reply is not None:
            raise BootstrapError(f"worker {self.me} got batches it did not ask for")
        want = [(s, k) for s, lo, hi in self._requested for k in range(lo, hi)]
        got = [(b.sender, b.seq) for b in reply.batches]
        if want != got:
            raise BootstrapError(f"worker {self.me} asked for batches {want} and got {got}")
        self._reply = reply

    @property
    def done(self) -> bool:
        """Whether the view can be completed."""
        return self._requested is not None and (self._reply is not None or not self._requested)

    def finish(self) -> tuple[list[Update], ProgressReceiver, ProgressState]:
        """The view's updates in applying order, a receiver expecting each sender's next batch, and the state."""
        if not self.done:
            raise BootstrapError(f"worker {self.me} cannot finish its bootstrap yet")
        state = self._state
        assert state is not None
        updates: list[Update] = list(state.updates)
        if self._reply is not None:
            for b in self._reply.batches:
                updates.extend(b.updates)
        expected: dict[int, int] = {}
        counted: dict[int, int] = {}
        for sender in sorted(self._members | self._fresh):
            start = max(state.included.get(sender, 0), self._hello.get(sender, 0))
            link = self._links.get(sender, [])
            first = self._hello.get(sender, 0)
            for offset, b in enumerate(link):
                if b.seq != first + offset:
                    raise BootstrapError(
                        f"worker {self.me}: the link from worker {sender} carried batch {b.seq} where "
                        f"{first + offset} was due"
                    )
                if b.seq >= start:
                    updates.extend(b.updates)
            # Batches in [first + len(link), start) are in the state and may still be on the link.
            expected[sender] = first + len(link)
            counted[sender] = start
        receiver = ProgressReceiver(expected, counted)
        return updates, receiver, state
