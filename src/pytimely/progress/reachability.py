"""Reachability: the compiled dataflow graph and the tracker that turns pointstamps into frontiers.

A :class:`Builder` collects operators (nodes with input and output ports and
internal path summaries) and edges from output ports to input ports, rejects
graphs with a cycle some timestamp can travel without strictly advancing
(through a scope's ``leave`` and ``enter`` too), and builds a :class:`Tracker`.

The tracker keeps, per location, the *pointstamps* (counted timestamps present
there) and the *implications* (what could arrive there), and propagates changes
the way seed ``000_306a8e6bd5c43d47.txt`` §5 (Fig. 6) does: a change to
pointstamps enters the worklist only if it changes their frontier; the worklist
is drained minimal timestamp first; a change to implications is pushed to the
immediate successors, adjusted by the summary, only if it changes their
frontier. The work done per update therefore follows the frontier changes it
causes, not the size of the graph.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from pytimely.errors import (
    NonAdvancingCycleError,
    SummaryGoesBackError,
    TimestampError,
    UnknownLocationError,
    UnknownPortError,
)
from pytimely.order import flat_key, sort_key
from pytimely.progress.change_batch import ChangeBatch
from pytimely.progress.frontier import Antichain, MutableAntichain
from pytimely.progress.location import Location, Source, Target
from pytimely.progress.timestamp import Enter, Increment, Leave, ProductSummary, strictly_advances

__all__ = ["Builder", "PointstampOrder", "Tracker"]

T = TypeVar("T")
S = TypeVar("S")

SummarySpec = Mapping[tuple[int, int], Iterable[Any] | Any]


class _Node:
    __slots__ = ("identity", "inputs", "name", "outputs", "summary")

    def __init__(
        self,
        name: str,
        inputs: int,
        outputs: int,
        summary: dict[tuple[int, int], Antichain[Any]],
        identity: Any,
    ):
        self.name = name
        self.inputs = inputs
        self.outputs = outputs
        self.summary = summary
        self.identity = identity


def _depth(identity: Any) -> int:
    """How many coordinates a timestamp with this identity summary has (``Product`` nests add up)."""
    if isinstance(identity, ProductSummary):
        return _depth(identity.outer) + _depth(identity.inner)
    return 1


def _advanced(summary: Any, identity: Any) -> set[int]:
    """The coordinates (outermost first) that ``summary`` strictly advances for every timestamp it passes."""
    if isinstance(summary, ProductSummary):
        outer_id = identity.outer if isinstance(identity, ProductSummary) else None
        inner_id = identity.inner if isinstance(identity, ProductSummary) else None
        shift = _depth(summary.outer)
        return _advanced(summary.outer, outer_id) | {shift + j for j in _advanced(summary.inner, inner_id)}
    return {0} if strictly_advances(summary, identity) else set()


class Builder(Generic[T, S]):
    """Collects operators and edges, validates them, and builds a :class:`Tracker`.

    ``identity`` is the identity path summary of the graph's timestamp type
    (``Increment(0)`` for integer timestamps; see
    :func:`~pytimely.progress.timestamp.identity_for`).
    """

    def __init__(self, identity: S | None = None) -> None:
        self.identity: Any = Increment(0) if identity is None else identity
        self._nodes: list[_Node] = []
        self._edges: list[tuple[Source, Target]] = []
        self._mixed = False

    def add_node(
        self,
        inputs: int,
        outputs: int,
        summary: SummarySpec | None = None,
        name: str | None = None,
        identity: Any = None,
    ) -> int:
        """Add an operator with ``inputs`` input and ``outputs`` output ports; return its index.

        ``summary`` maps ``(input, output)`` to the path summaries from that input to
        that output (one summary or several); pairs left out have no internal path.
        ``None`` means the identity summary from every input to every output.
        ``identity`` is the identity summary of the operator's own timestamps when
        they differ from the graph's (operators inside a nested scope).
        """
        node_identity = self.identity if identity is None else identity
        if identity is not None and identity != self.identity:
            self._mixed = True
        index = len(self._nodes)
        label = name if name is not None else f"node {index}"
        if type(inputs) is not int or type(outputs) is not int or inputs < 0 or outputs < 0:
            raise UnknownPortError(f"{label}: port counts must be non-negative ints, got {inputs!r}, {outputs!r}")
        compiled: dict[tuple[int, int], Antichain[Any]] = {}
        if summary is None:
            for i in range(inputs):
                for o in range(outputs):
                    compiled[(i, o)] = Antichain([node_identity])
        else:
            for key, value in summary.items():
                i, o = key
                if not (0 <= i < inputs and 0 <= o < outputs):
                    raise UnknownPortError(
                        f"{label}: summary names input {i} -> output {o}, "
                        f"but the operator has {inputs} inputs and {outputs} outputs"
                    )
                summaries = list(value) if isinstance(value, (list, tuple, set, frozenset, Antichain)) else [value]
                for s in summaries:
                    self._check_summary(label, i, o, s, node_identity)
                if summaries:
                    compiled[(i, o)] = Antichain(summaries)
        self._nodes.append(_Node(label, inputs, outputs, compiled, node_identity))
        return index

    def _check_summary(self, label: str, i: int, o: int, s: Any, identity: Any) -> None:
        if getattr(s, "changes_scope", False):
            self._mixed = True
            return
        try:
            advances = identity <= s
        except (AttributeError, TypeError) as exc:
            raise TimestampError(
                f"{label}: summary {s!r} (input {i} -> output {o}) is not comparable with the "
                f"operator's identity summary {identity!r}"
            ) from exc
        if not advances:
            raise SummaryGoesBackError(
                f"{label}: summary {s!r} (input {i} -> output {o}) would move timestamps back in time"
            )

    def add_edge(self, source: Source, target: Target) -> None:
        """Connect output port ``source`` to input port ``target``."""
        if not isinstance(source, Source) or not isinstance(target, Target):
            raise UnknownPortError(f"an edge goes from a Source to a Target, got {source!r} -> {target!r}")
        self._check_port(source.node, source.port, "output", f"edge {source!r} -> {target!r}")
        self._check_port(target.node, target.port, "input", f"edge {source!r} -> {target!r}")
        self._edges.append((source, target))

    def _check_port(self, node: int, port: int, kind: str, what: str) -> None:
        if not 0 <= node < len(self._nodes):
            raise UnknownPortError(f"{what}: there is no operator {node} ({len(self._nodes)} operators)")
        n = self._nodes[node]
        count = n.outputs if kind == "output" else n.inputs
        if not 0 <= port < count:
            raise UnknownPortError(f"{what}: {n.name} has no {kind} port {port} ({count} {kind}s)")

    def node_name(self, node: int) -> str:
        """The name an operator was given (or ``node N``)."""
        return self._nodes[node].name

    def locations(self) -> list[Location]:
        """Every location: all input ports (Targets) then all output ports (Sources)."""
        targets: list[Location] = [Target(n, p) for n, node in enumerate(self._nodes) for p in range(node.inputs)]
        sources: list[Location] = [Source(n, p) for n, node in enumerate(self._nodes) for p in range(node.outputs)]
        return targets + sources

    def edges(self) -> list[tuple[Source, Target]]:
        """The edges added so far."""
        return list(self._edges)

    def weights(self) -> dict[tuple[Location, Location], list[Any]]:
        """Every one-step path summary: ``Source -> Target`` edges (identity) and internal ``Target -> Source`` ones."""
        out: dict[tuple[Location, Location], list[Any]] = {}
        for source, target in self._edges:
            out[(source, target)] = [self.identity]
        for n, node in enumerate(self._nodes):
            for (i, o), summaries in node.summary.items():
                out[(Target(n, i), Source(n, o))] = list(summaries)
        return out

    def path_summaries(self) -> dict[tuple[Location, Location], Antichain[Any]]:
        """The minimal summaries of all paths between every pair of connected locations.

        A fixpoint over ``followed_by``; only used off the hot path (validation,
        reference frontiers, the could-result-in order).
        """
        succ: dict[Location, list[tuple[Location, Any]]] = {}
        for (a, b), summaries in self.weights().items():
            succ.setdefault(a, []).extend((b, s) for s in summaries)
        result: dict[tuple[Location, Location], Antichain[Any]] = {}
        for start in self.locations():
            reach: dict[Location, Antichain[Any]] = {start: Antichain([self.identity])}
            todo: list[tuple[Location, Any]] = [(start, self.identity)]
            while todo:
                loc, summary = todo.pop()
                for nxt, step in succ.get(loc, ()):
                    combined = summary.followed_by(step)
                    if combined is None:
                        continue
                    chain = reach.setdefault(nxt, Antichain())
                    if chain.insert(combined):
                        todo.append((nxt, combined))
            for loc, chain in reach.items():
                result[(start, loc)] = chain
        return result

    def _depths(self) -> dict[Location, int]:
        """Each location's number of timestamp coordinates.

        An operator's locations have its identity's; an ``enter`` (its identity is
        the inner scope's) takes one coordinate fewer in, a ``leave`` (the outer
        scope's) one more.
        """
        depths: dict[Location, int] = {}
        for n, node in enumerate(self._nodes):
            d = _depth(node.identity)
            shift = 0
            for summaries in node.summary.values():
                for s in summaries:
                    if isinstance(s, Enter):
                        shift = -1
                    elif isinstance(s, Leave):
                        shift = 1
            for i in range(node.inputs):
                depths[Target(n, i)] = d + shift
            for o in range(node.outputs):
                depths[Source(n, o)] = d
        return depths

    def _find_stuck_cycle(self) -> list[int] | None:
        """Operators on a cycle some timestamp can travel without strictly advancing, if one exists.

        Along a cycle, the coordinates of the outermost scope it reaches (depth
        ``k``) persist; deeper ones are dropped by a ``leave`` and reset by the
        ``enter`` that follows. So a cycle advances only if some step on it strictly
        advances one of its first ``k`` coordinates: an inner loop's feedback does
        not make a cycle through ``leave`` and back through ``enter`` advance. For
        each depth ``k``, the steps that advance none of the first ``k``
        coordinates, between locations at least ``k`` deep, form a graph; a
        strongly connected part of it holding a location exactly ``k`` deep has a
        stuck cycle through that location.
        """
        depths = self._depths()
        steps: list[tuple[Location, Location, int]] = []
        """``(from, to, the first coordinate it surely advances, or a large number)`` for every one-step path."""
        never = 1 << 30
        for source, target in self._edges:
            steps.append((source, target, never))
        for n, node in enumerate(self._nodes):
            for (i, o), summaries in node.summary.items():
                # The least advancing summary decides (a timestamp may take that path): the step keeps the
                # first k coordinates unchanged if some summary advances none of them.
                least = max(
                    (
                        min(_advanced(s, node.identity), default=never)
                        if not getattr(s, "changes_scope", False)
                        else never
                        for s in summaries
                    ),
                    default=never,
                )
                steps.append((Target(n, i), Source(n, o), least))
        for k in sorted(set(depths.values())):
            graph: dict[Location, list[Location]] = {}
            for a, b, first in steps:
                if first >= k and depths.get(a, 0) >= k and depths.get(b, 0) >= k:
                    graph.setdefault(a, []).append(b)
            for component in _strongly_connected(graph):
                roots = [loc for loc in component if depths.get(loc) == k]
                if not roots:
                    continue
                cycle = _cycle_through(roots[0], graph, component)
                if cycle is not None:
                    ops: list[int] = []
                    for location in cycle:
                        if not ops or ops[-1] != location.node:
                            ops.append(location.node)
                    if len(ops) > 1 and ops[0] == ops[-1]:
                        ops.pop()
                    return ops
        return None

    def build(self) -> Tracker[T]:
        """Validate the graph and return a :class:`Tracker` for it."""
        cycle = self._find_stuck_cycle()
        if cycle is not None:
            names = [self._nodes[n].name for n in cycle]
            raise NonAdvancingCycleError(
                "the dataflow graph has a cycle whose summaries do not strictly advance timestamps, "
                f"through operators {' -> '.join(names)} -> {names[0]}; every cycle needs a feedback "
                "summary that increments the timestamp",
                operators=list(cycle),
            )
        return Tracker(self)


def _strongly_connected(graph: dict[Location, list[Location]]) -> list[set[Location]]:
    """The strongly connected components of ``graph`` (Tarjan's algorithm, without recursion)."""
    index: dict[Location, int] = {}
    low: dict[Location, int] = {}
    on_stack: set[Location] = set()
    stack: list[Location] = []
    out: list[set[Location]] = []
    counter = 0
    for root in list(graph):
        if root in index:
            continue
        work: list[tuple[Location, int]] = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, child = work[-1]
            nexts = graph.get(v, [])
            if child < len(nexts):
                work[-1] = (v, child + 1)
                w = nexts[child]
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                component: set[Location] = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.add(w)
                    if w == v:
                        break
                out.append(component)
    return out


def _cycle_through(
    start: Location, graph: dict[Location, list[Location]], within: set[Location]
) -> list[Location] | None:
    """A shortest cycle from ``start`` back to it inside ``within``, as the locations on it (``None`` if none)."""
    parent: dict[Location, Location] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        nxt: list[Location] = []
        for v in frontier:
            for w in graph.get(v, []):
                if w not in within:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return path[::-1]
                if w not in seen:
                    seen.add(w)
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    return None


class Tracker(Generic[T]):
    """Pointstamps and implications per location, kept consistent by worklist propagation.

    Feed it pointstamp changes with :meth:`update` (or :meth:`update_batch`),
    then call :meth:`propagate_all`, which returns how each input port's
    frontier changed.
    """

    def __init__(self, builder: Builder[T, Any]) -> None:
        locations = builder.locations()
        self._locations: list[Location] = locations
        self._index: dict[Location, int] = {loc: i for i, loc in enumerate(locations)}
        self._num_targets = sum(1 for loc in locations if isinstance(loc, Target))
        self._names = [builder.node_name(n) for n in range(len(builder._nodes))]
        # Successors of each location with the summaries that lead there; Source -> Target edges
        # carry the identity, which we apply by skipping results_in.
        n = len(locations)
        self._internal: list[list[tuple[int, tuple[Any, ...]]]] = [[] for _ in range(n)]
        self._edges: list[list[int]] = [[] for _ in range(n)]
        for node_index, node in enumerate(builder._nodes):
            for (i, o), summaries in node.summary.items():
                t_id = self._index[Target(node_index, i)]
                s_id = self._index[Source(node_index, o)]
                self._internal[t_id].append((s_id, tuple(summaries)))
        for source, target in builder._edges:
            self._edges[self._index[source]].append(self._index[target])
        self._pointstamps: list[MutableAntichain[T]] = [MutableAntichain() for _ in range(n)]
        self._implications: list[MutableAntichain[T]] = [MutableAntichain() for _ in range(n)]
        self._pending: list[tuple[int, T, int]] = []
        # Graphs with nested scopes hold timestamps of several shapes; their worklist keys must compare.
        self._key: Any = flat_key if builder._mixed else sort_key
        self._worklist: list[tuple[Any, int, T, int]] = []
        self.propagations = 0
        """Worklist entries processed so far (a measure of propagation work)."""

    # -- input -----------------------------------------------------------------------------

    def _id(self, location: Any) -> int:
        try:
            return self._index[location]
        except (KeyError, TypeError):
            raise UnknownLocationError(
                f"progress update for {location!r}, which is not a location of this graph "
                f"({self._num_targets} input ports, {len(self._locations) - self._num_targets} output ports)"
            ) from None

    def update(self, location: Location, time: T, diff: int) -> None:
        """Record that the count of pointstamp ``(location, time)`` changes by ``diff``."""
        lid = self._id(location)
        if diff:
            self._pending.append((lid, time, diff))

    def update_batch(self, updates: Iterable[tuple[Location, T, int]]) -> None:
        """Record a batch of ``(location, time, diff)`` changes; all of them or, on error, none."""
        staged = [(self._id(loc), t, d) for loc, t, d in updates]
        self._pending.extend(u for u in staged if u[2])

    # -- propagation -----------------------------------------------------------------------

    def propagate_all(self) -> dict[Target, list[tuple[T, int]]]:
        """Propagate every recorded change; return, per input port, its frontier changes ``(time, ±1)``."""
        worklist = self._worklist
        push = heapq.heappush
        pop = heapq.heappop
        key_of = self._key
        if self._pending:
            grouped: dict[int, list[tuple[T, int]]] = {}
            for lid, t, d in self._pending:
                grouped.setdefault(lid, []).append((t, d))
            self._pending = []
            for lid, updates in grouped.items():
                for t, d in self._pointstamps[lid].update_iter(updates):
                    push(worklist, (key_of(t), lid, t, d))
        # Changes to input ports' implications; other locations' changes only feed the worklist.
        reported: ChangeBatch[tuple[int, T]] = ChangeBatch()
        implications = self._implications
        internal = self._internal
        edges = self._edges
        num_targets = self._num_targets
        processed = 0
        while worklist:
            key, lid, t, d = pop(worklist)
            # Coalesce every entry for the same (time, location): Fig. 6 propagates its whole count.
            while worklist and worklist[0][0] == key and worklist[0][1] == lid:
                d += pop(worklist)[3]
            processed += 1
            if not d:
                continue
            for t2, d2 in implications[lid].update(t, d):
                if lid < num_targets:
                    reported.update((lid, t2), d2)
                    for s_id, summaries in internal[lid]:
                        for summary in summaries:
                            r = summary.results_in(t2)
                            if r is not None:
                                push(worklist, (key_of(r), s_id, r, d2))
                else:
                    k2 = key_of(t2)
                    for t_id in edges[lid]:
                        push(worklist, (k2, t_id, t2, d2))
        self.propagations += processed
        out: dict[Target, list[tuple[T, int]]] = {}
        for (lid, t), d in reported.items():
            out.setdefault(self._locations[lid], []).append((t, d))  # type: ignore[arg-type]
        return out

    # -- queries ---------------------------------------------------------------------------

    def live_frontier(self, location: Location) -> MutableAntichain[T]:
        """The object behind ``location``'s frontier, kept current by :meth:`propagate_all`; read it, never write."""
        return self._implications[self._id(location)]

    def held(self) -> dict[Location, dict[T, int]]:
        """Every location with pointstamps present, and their counts."""
        out: dict[Location, dict[T, int]] = {}
        for lid, chain in enumerate(self._pointstamps):
            counts = chain.counts()
            if counts:
                out[self._locations[lid]] = counts
        return out

    def counts(self) -> dict[Location, dict[T, int]]:
        """Every location with pointstamps present and their counts, recorded changes not yet propagated included
        (what a bootstrap server's state must hold when it took in batches since its last propagation)."""
        out = self.held()
        for lid, t, d in self._pending:
            counts = out.setdefault(self._locations[lid], {})
            counts[t] = counts.get(t, 0) + d
            if not counts[t]:
                del counts[t]
        return {loc: counts for loc, counts in out.items() if counts}

    def frontier(self, location: Location) -> Antichain[T]:
        """The frontier of what could still arrive at ``location`` (as of the last propagation)."""
        return self._implications[self._id(location)].frontier()

    def pointstamps(self, location: Location) -> dict[T, int]:
        """The counted timestamps present at ``location`` (propagated or not)."""
        lid = self._id(location)
        counts = self._pointstamps[lid].counts()
        for pid, t, d in self._pending:
            if pid == lid:
                counts[t] = counts.get(t, 0) + d
                if not counts[t]:
                    del counts[t]
        return counts

    def implications(self, location: Location) -> dict[T, int]:
        """The counts behind ``location``'s frontier (positive once propagation is complete)."""
        return self._implications[self._id(location)].counts()

    def locations(self) -> list[Location]:
        """Every location of the graph."""
        return list(self._locations)

    def has_pending(self) -> bool:
        """Whether changes were recorded since the last :meth:`propagate_all`."""
        return bool(self._pending)

    def lower_times(self) -> Iterator[T]:
        """The minimal times of the pointstamps at every location (as of the last propagation; may repeat).

        Nothing earlier than all of them is present anywhere, so no location can see one: a snapshot of every
        state up to a time all of them have passed is complete (:mod:`pytimely.recovery.runtime`).
        """
        for chain in self._pointstamps:
            yield from chain.frontier_elements()

    def is_idle(self) -> bool:
        """Whether no pointstamp is present anywhere (the computation has finished)."""
        return not self._pending and all(p.is_empty() for p in self._pointstamps)

    def operator_name(self, node: int) -> str:
        """The name of operator ``node``."""
        return self._names[node]


class PointstampOrder(Generic[T]):
    """The could-result-in order on pointstamps ``(location, time)`` (seed 000 §6, ``≤cri``).

    ``(l, t) <= (l', t')`` iff some path summary ``s`` from ``l`` to ``l'`` has
    ``t ⊕ s <= t'``. Built once from a :class:`Builder`; not for per-record use.
    """

    def __init__(self, builder: Builder[T, Any]) -> None:
        self._summaries = builder.path_summaries()

    def le(self, p: tuple[Location, T], q: tuple[Location, T]) -> bool:
        """Whether pointstamp ``p`` could result in pointstamp ``q``."""
        chain = self._summaries.get((p[0], q[0]))
        if chain is None:
            return False
        for s in chain:
            r = s.results_in(p[1])
            if r is not None and r <= q[1]:
                return True
        return False

    def lt(self, p: tuple[Location, T], q: tuple[Location, T]) -> bool:
        """Whether ``p`` could result in ``q`` and differs from it."""
        return p != q and self.le(p, q)

    def summaries(self, source: Location, target: Location) -> Antichain[Any]:
        """The minimal path summaries from ``source`` to ``target`` (empty if unconnected)."""
        return self._summaries.get((source, target), Antichain())
