"""Dataflow graphs with summary-weighted edges, path summaries and the implied frontier.

Seed ``000_306a8e6bd5c43d47.txt`` §5 (Fig. 5, locales ``graph`` and
``dataflow``): locations are vertices (sources and targets are not
distinguished), every edge carries an antichain of summaries, there are no
self-edges, and every proper cycle strictly advances every timestamp.
``path_summary l l'`` is the antichain of minimal summaries over all paths from
``l`` to ``l'`` (the empty path gives the identity). §6 derives the
could-result-in order ``≤cri`` from it, and §5 defines ``implied_frontier``.

``results_in`` may answer ``None`` (a bounded loop counter ran out). That value
is read as a top element ⊤ that is never materialised: lifted ``⊕`` drops it
and obligations about ``t ⊕ s = ⊤`` are vacuous.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from pytimely.verify.zmset import ZMSet

__all__ = ["Graph", "after_summary", "could_result_in", "implied_frontier"]

L = TypeVar("L", bound=Hashable)
T = TypeVar("T", bound=Hashable)

_MAX_RELAXATIONS = 100_000


def _minimal(summaries: Iterable[Any]) -> frozenset[Any]:
    items = set(summaries)
    return frozenset(s for s in items if not any(o != s and o <= s for o in items))


class Graph(Generic[L]):
    """A weighted directed graph of locations: ``weights[(l, l')]`` is the antichain ``summary l l'``."""

    __slots__ = ("_path", "_succ", "identity", "locations", "weights")

    def __init__(
        self,
        locations: Iterable[L],
        weights: Mapping[tuple[L, L], Iterable[Any]],
        identity: Any,
    ) -> None:
        self.locations: tuple[L, ...] = tuple(dict.fromkeys(locations))
        known = set(self.locations)
        w: dict[tuple[L, L], frozenset[Any]] = {}
        for (a, b), ss in weights.items():
            if a not in known or b not in known:
                raise ValueError(f"edge {a!r} -> {b!r} names an unknown location")
            if a == b:
                raise ValueError(f"self-edge at {a!r}: the graph locale requires weights l l = {{}}")
            anti = _minimal(ss)
            if anti:
                w[(a, b)] = anti
        self.weights: Mapping[tuple[L, L], frozenset[Any]] = w
        self.identity = identity
        succ: dict[L, list[L]] = {l: [] for l in self.locations}
        for a, b in w:
            succ[a].append(b)
        self._succ = {l: tuple(v) for l, v in succ.items()}
        self._path: dict[tuple[L, L], frozenset[Any]] | None = None

    def summary(self, l1: L, l2: L) -> frozenset[Any]:
        """``summary l l'``: the edge weight (empty when there is no edge)."""
        return self.weights.get((l1, l2), frozenset())

    def successors(self, l1: L) -> tuple[L, ...]:
        """Locations with an edge from ``l1``."""
        return self._succ[l1]

    def edges(self) -> list[tuple[L, L]]:
        """All edges with a non-empty weight."""
        return list(self.weights)

    def _compute_paths(self) -> dict[tuple[L, L], frozenset[Any]]:
        table: dict[tuple[L, L], frozenset[Any]] = {}
        for target in self.locations:
            best: dict[L, set[Any]] = {l: set() for l in self.locations}
            best[target] = {self.identity}
            work = [target]
            steps = 0
            while work:
                v = work.pop()
                for (u, v2), ws in self.weights.items():
                    if v2 != v:
                        continue
                    for s in list(best[v]):
                        for e in ws:
                            cand = e.followed_by(s)
                            if cand is None:
                                continue
                            steps += 1
                            if steps > _MAX_RELAXATIONS:
                                raise ValueError("path summaries do not converge: a cycle does not advance time")
                            cur = best[u]
                            if any(o <= cand for o in cur):
                                continue
                            cur.difference_update([o for o in cur if cand <= o])
                            cur.add(cand)
                            work.append(u)
            for l in self.locations:
                if best[l]:
                    table[(l, target)] = frozenset(best[l])
        return table

    def path_summary(self, l1: L, l2: L) -> frozenset[Any]:
        """``path_summary l l'``: the minimal summaries over all paths from ``l1`` to ``l2``."""
        if self._path is None:
            self._path = self._compute_paths()
        return self._path.get((l1, l2), frozenset())

    def could_result_in(self, a: tuple[L, Any], b: tuple[L, Any]) -> bool:
        """``(l, t) ≤cri (l', t') = (∃s ∈ path_summary l l'. t ⊕ s ≤ t')`` (§6)."""
        return could_result_in(self, a, b)

    def without_edge(self, l1: L, l2: L) -> Graph[L]:
        """The same graph with the weight of the edge ``l1 -> l2`` forgotten."""
        return Graph(self.locations, {e: s for e, s in self.weights.items() if e != (l1, l2)}, self.identity)

    def without_summary(self, l1: L, l2: L, s: Any) -> Graph[L]:
        """The same graph with summary ``s`` removed from the antichain on edge ``l1 -> l2``."""
        weights = dict(self.weights)
        weights[(l1, l2)] = frozenset(x for x in self.summary(l1, l2) if x != s)
        return Graph(self.locations, weights, self.identity)

    def validate(self, times: Iterable[Any]) -> None:
        """Check the §5 locale assumptions on ``times``: proper cycles strictly advance every timestamp."""
        ts = list(times)
        for l in self.locations:
            for succ in self.successors(l):
                for e in self.summary(l, succ):
                    for back in self.path_summary(succ, l):
                        cyc = e.followed_by(back)
                        if cyc is None:
                            continue
                        for t in ts:
                            r = cyc.results_in(t)
                            if r is not None and not t < r:
                                raise ValueError(f"cycle through {l!r} does not advance {t!r} (summary {cyc!r})")

    def __repr__(self) -> str:
        edges = ", ".join(f"{a}->{b}:{sorted(map(repr, s))}" for (a, b), s in self.weights.items())
        return f"Graph({edges})"


def could_result_in(graph: Graph[Any], a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    """``a ≤cri b`` for pointstamps ``(location, timestamp)`` of ``graph`` (§6)."""
    (l1, t1), (l2, t2) = a, b
    for s in graph.path_summary(l1, l2):
        r = s.results_in(t1)
        if r is not None and r <= t2:
            return True
    return False


def after_summary(M: ZMSet[T], summaries: Iterable[Any]) -> ZMSet[T]:
    """``M ⊕ A = Σ_{s ∈ A} (λt. t ⊕ s) #z M`` (§5); results ``None`` (⊤) are dropped."""
    out: ZMSet[T] = ZMSet()
    for s in summaries:
        out = out + M.image(s.results_in)
    return out


def implied_frontier(graph: Graph[Any], pts: Mapping[Any, Mapping[T, int] | ZMSet[T]], l: Any) -> frozenset[T]:
    """``implied_frontier P l = frontier (Σ_{l'} pos_z (P l') ⊕ path_summary l' l)`` (§5).

    ``pts`` maps a location to its timestamp counts (a :class:`ZMSet` or a plain
    dict; missing locations hold nothing). The answer is the antichain of minimal
    timestamps that the pointstamps could still produce at ``l``.
    """
    reached: set[T] = set()
    for l2, counts in pts.items():
        summaries = graph.path_summary(l2, l)
        if not summaries:
            continue
        for t, n in counts.items():
            if n <= 0:
                continue
            for s in summaries:
                r = s.results_in(t)
                if r is not None:
                    reached.add(r)
    return frozenset(t for t in reached if not any(o != t and o <= t for o in reached))  # type: ignore[operator]
