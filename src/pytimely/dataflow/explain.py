"""Why a frontier is where it is: the held pointstamps that could result in it.

A frontier at an input port is the set of least times some held pointstamp (a capability on an output, or
messages on their way to an input) could still result in there, following the path summaries of the graph.
:func:`explain` reads the tracker's counts (global: every worker's capabilities and messages, as far as this
worker has heard) and, for each held pointstamp (the ones :meth:`Subgraph.held` lists in stall reports), walks
the graph forward from it the way the tracker propagates, one location at a time (summaries that change scope
do not compose, so nested scopes are followed location by location). Those that reach the probe's input at a
time of its frontier are what holds it there.

Without a location (a stalled dataflow) it names the held pointstamps no other held one could result in: the
roots that hold everything else up.

A capability is attributed to this worker when its own count (``Subgraph.own_capabilities``) covers it; the
rest of the tracker's count belongs to other workers: of this process when all workers run here, else of
processes whose own bookkeeping this one cannot see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytimely.dataflow.graph_view import DataflowGraph, describe
from pytimely.progress.frontier import Antichain
from pytimely.progress.location import Location, Source, Target

if TYPE_CHECKING:
    from pytimely.dataflow.subgraph import Subgraph

__all__ = ["Explanation", "Holder", "explain", "reach"]


@dataclass(frozen=True, slots=True)
class Holder:
    """A held pointstamp: capabilities on an output (``Source``) or messages for an input (``Target``)."""

    location: Location
    operator: str
    time: Any
    count: int
    """How many the tracker counts, over every worker."""
    own: int
    """How many of them this worker holds (its capabilities, or messages queued at its input)."""
    worker: int
    """The worker explaining."""
    others: str
    """Who holds the rest: ``another worker`` or ``another process``."""
    reaches: Any = None
    """The time it could result in at the explained location (``None`` for a stall's roots)."""

    @property
    def kind(self) -> str:
        """``capability`` or ``message``."""
        return "capability" if isinstance(self.location, Source) else "message"

    def __str__(self) -> str:
        if isinstance(self.location, Source):
            what = f"capability of {self.operator!r} on output {self.location.port} at time {self.time!r}"
            held = []
            if self.own > 0:
                held.append(f"worker {self.worker} ({self.own})")
            if self.count - max(self.own, 0) > 0:
                held.append(f"{self.others} ({self.count - max(self.own, 0)})")
            who = " held by " + " and ".join(held)
        else:
            what = f"{self.count} message(s) for {self.operator!r} input {self.location.port} at time {self.time!r}"
            who = (
                f", {self.own} queued at worker {self.worker}"
                if self.own
                else f", in flight or queued at {self.others}"
            )
        tail = "" if self.reaches is None else f" -> could result in {self.reaches!r} there"
        return what + who + tail


@dataclass(frozen=True, slots=True)
class Explanation:
    """What holds a frontier (or, for a stall, what holds the dataflow) where it is."""

    dataflow: str
    worker: int
    operator: str | None
    """The probe's operator, or ``None`` when explaining a stall."""
    location: Target | None
    frontier: tuple[Any, ...]
    holders: tuple[Holder, ...]

    def __str__(self) -> str:
        if self.location is None:
            head = f"dataflow {self.dataflow!r} on worker {self.worker} is held by (nothing else held precedes them)"
        else:
            head = (
                f"dataflow {self.dataflow!r} on worker {self.worker}: frontier of {self.operator!r} input "
                f"{self.location.port} is {list(self.frontier)!r}, held by"
            )
        if not self.holders:
            return head + " nothing" + (" (it is done)" if not self.frontier else "")
        return head + "\n" + "\n".join(f"  - {h}" for h in self.holders)


def reach(graph: DataflowGraph, location: Location, time: Any) -> dict[Location, Antichain[Any]]:
    """The least times pointstamp ``(location, time)`` could result in at every location it can reach."""
    out: dict[Location, list[Target]] = {}
    for c in graph.channels:
        out.setdefault(c.source, []).append(c.target)
    inner: dict[Target, list[tuple[Source, tuple[Any, ...]]]] = {}
    for op in graph.operators:
        for (i, o), summaries in op.summaries:
            inner.setdefault(Target(op.index, i), []).append((Source(op.index, o), summaries))
    reached: dict[Location, Antichain[Any]] = {location: Antichain([time])}
    todo: list[tuple[Location, Any]] = [(location, time)]
    while todo:
        loc, t = todo.pop()
        steps: list[tuple[Location, Any]] = []
        if isinstance(loc, Source):
            steps = [(target, t) for target in out.get(loc, ())]
        else:
            for source, summaries in inner.get(loc, ()):
                for s in summaries:
                    r = s.results_in(t)
                    if r is not None:
                        steps.append((source, r))
        for nxt, r in steps:
            # A feedback summary strictly advances, so a loop's later times are dominated and the walk ends.
            if reached.setdefault(nxt, Antichain()).insert(r):
                todo.append((nxt, r))
    return reached


def _others(subgraph: Subgraph, workers_per_process: int) -> str:
    return "another worker" if workers_per_process >= subgraph.peers else "another process"


def _holders(subgraph: Subgraph, workers_per_process: int) -> list[Holder]:
    assert subgraph.tracker is not None
    own = subgraph.own_capabilities()
    others = _others(subgraph, workers_per_process)
    holders = []
    for location, counts in subgraph.tracker.held().items():
        op = subgraph.operators[location.node]
        for t, c in sorted(counts.items(), key=lambda kv: repr(kv[0])):
            if isinstance(location, Source):
                mine = own.get((location, t), 0)
            else:
                mine = sum(1 for m in op.inputs[location.port]._queue if m[0] == t)
            holders.append(Holder(location, op.name, t, c, mine, subgraph.worker, others))
    return holders


def explain(subgraph: Subgraph, target: Target | None = None, *, workers_per_process: int = 1) -> Explanation:
    """What holds the frontier at ``target`` (or, without one, what holds the dataflow) where it is."""
    assert subgraph.tracker is not None
    graph = describe(subgraph)
    holders = _holders(subgraph, workers_per_process)
    reaches = [reach(graph, h.location, h.time) for h in holders]
    if target is None:
        roots = []
        for i, h in enumerate(holders):
            held_up = any(
                j != i
                and (holders[j].location, holders[j].time) != (h.location, h.time)
                and reaches[j].get(h.location, Antichain()).less_equal(h.time)
                for j in range(len(holders))
            )
            if not held_up:
                roots.append(h)
        return Explanation(subgraph.name, subgraph.worker, None, None, (), tuple(roots))
    frontier = tuple(subgraph.tracker.frontier(target))
    chosen = []
    for h, r in zip(holders, reaches, strict=True):
        times = r.get(target)
        if times is None:
            continue
        hits = [x for x in times if any(x <= f for f in frontier)]
        if hits:
            chosen.append(Holder(h.location, h.operator, h.time, h.count, h.own, h.worker, h.others, reaches=hits[0]))
    name = subgraph.operators[target.node].name
    return Explanation(subgraph.name, subgraph.worker, name, target, frontier, tuple(chosen))
