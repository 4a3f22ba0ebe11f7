"""Local progress propagation of seed ``000_306a8e6bd5c43d47.txt`` §5 (Fig. 6).

A configuration holds, per location, the pointstamps ``pts``, the implications
``imp`` and the worklist ``work`` (all signed multisets of timestamps). The
actions are ``change_multiplicity`` (the system changed a pointstamp count; its
precondition is ``∃t' ∈ frontier (imp c l). t' ≤ t``) and ``propagate`` (apply a
*minimal* worklist entry to the implications and push the frontier change along
the outgoing edges, adjusted by their summaries).

Properties, all checkable on a single configuration: ``Safe`` (guarded by
``work_vacant``), the lemma ``implied_frontier`` (for work-vacant ``t``,
``t ∈ frontier (imp c l) ⟺ t ∈ implied_frontier (pts c) l``), and the two
auxiliary invariants of the safety proof (``imp`` is positive;
``imp l + work l = frontier (pts l) + Σ_{l'} frontier (imp l') ⊕ summary l' l``).

Propagation runs on ``propagation_graph`` (which the ``drop-summary`` mutant
degrades) while ``Safe``, ``work_vacant`` and the lemma are always judged on the
true ``graph``.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, NamedTuple

from pytimely.order import sort_key
from pytimely.verify.graph import Graph, after_summary, implied_frontier
from pytimely.verify.model import Action, Invariant, TransitionInvariant
from pytimely.verify.mutants import PROPAGATION_MUTANTS, Mutant
from pytimely.verify.zmset import ZMSet, frontier

__all__ = [
    "Init",
    "PropagationConfig",
    "PropagationModel",
    "Safe",
    "State",
    "change_multiplicity",
    "change_multiplicity_enabled",
    "imp_nonneg",
    "imp_work_sum",
    "implied_frontier_lemma",
    "initial_states",
    "make_state",
    "propagate",
    "propagate_all",
    "propagate_all_monotone",
    "propagate_all_outcomes",
    "propagate_all_run",
    "propagate_enabled",
    "propagate_monotone",
    "work_vacant",
]


class State(NamedTuple):
    """``record conf = pts, imp, work`` (§5); each field is a tuple indexed like ``graph.locations``."""

    pts: tuple[ZMSet[Any], ...]
    imp: tuple[ZMSet[Any], ...]
    work: tuple[ZMSet[Any], ...]


@lru_cache(maxsize=1 << 16)
def _frontier(M: ZMSet[Any]) -> frozenset[Any]:
    return frontier(M, operator.lt)


@lru_cache(maxsize=1 << 16)
def _frontier_z(M: ZMSet[Any]) -> ZMSet[Any]:
    return ZMSet.from_set(_frontier(M))


@dataclass(frozen=True)
class PropagationConfig:
    """A dataflow graph, a finite timestamp universe, initial pointstamps, count bounds and the mutant switch."""

    graph: Graph[Any]
    times: tuple[Any, ...]
    """Timestamps ``change_multiplicity`` may name."""
    initial: tuple[Mapping[Any, Mapping[Any, int]], ...]
    """The initial ``pts`` to start from (location → timestamp counts); ``Init`` fixes the rest."""
    max_pts: int = 1
    """``change_multiplicity`` is disabled if a count of ``pts`` would exceed this."""
    min_pts: int = 0
    """... or drop below this (the paper allows any change; negative counts may be explored)."""
    max_n: int = 1
    """``change_multiplicity`` changes a count by ``n`` with ``0 < |n| ≤ max_n``."""
    mutant: Mutant | None = None
    dropped_edge: tuple[Any, Any] | None = None
    """Under ``drop-summary``: the edge whose weight propagation forgets (default: the first edge)."""
    max_propagation_steps: int = 200
    """Bound for the termination check of repeated propagation."""
    check_termination: bool = True
    depth: int = 6
    name: str = ""
    locations: tuple[Any, ...] = field(init=False)

    def __post_init__(self) -> None:
        if self.mutant is not None and self.mutant not in PROPAGATION_MUTANTS:
            raise ValueError(f"mutant {self.mutant} does not apply to local propagation")
        object.__setattr__(self, "locations", self.graph.locations)

    @cached_property
    def index(self) -> dict[Any, int]:
        """Location → position in the state tuples."""
        return {l: i for i, l in enumerate(self.locations)}

    @cached_property
    def propagation_graph(self) -> Graph[Any]:
        """The graph propagation runs on: the true graph, minus one edge weight under ``drop-summary``."""
        if self.mutant is not Mutant.DROP_SUMMARY:
            return self.graph
        edge = self.dropped_edge or self.graph.edges()[0]
        return self.graph.without_edge(*edge)

    @cached_property
    def out_edges(self) -> tuple[tuple[tuple[int, frozenset[Any]], ...], ...]:
        """Per location index: ``(successor index, summary antichain)`` on the propagation graph."""
        g = self.propagation_graph
        return tuple(tuple((self.index[b], g.summary(a, b)) for b in g.successors(a)) for a in self.locations)

    @cached_property
    def in_edges(self) -> tuple[tuple[tuple[int, frozenset[Any]], ...], ...]:
        """Per location index: ``(predecessor index, summary antichain)`` on the propagation graph."""
        g = self.propagation_graph
        return tuple(
            tuple((self.index[a], g.summary(a, b)) for a in self.locations if g.summary(a, b)) for b in self.locations
        )

    @cached_property
    def paths(self) -> tuple[tuple[tuple[int, frozenset[Any]], ...], ...]:
        """Per location index: ``(target index, path_summary l l')`` on the true graph (non-empty only)."""
        g = self.graph
        return tuple(
            tuple((self.index[b], g.path_summary(a, b)) for b in self.locations if g.path_summary(a, b))
            for a in self.locations
        )

    @cached_property
    def reach_summaries(self) -> tuple[frozenset[Any], ...]:
        """Per location index: the minimal summaries of paths from it to anywhere (for ``work_vacant``)."""
        out = []
        for row in self.paths:
            allsum = {s for _, ss in row for s in ss}
            out.append(frozenset(s for s in allsum if not any(o != s and o <= s for o in allsum)))
        return tuple(out)


def make_state(cfg: PropagationConfig, pts: Mapping[Any, Mapping[Any, int]]) -> State:
    """The ``Init`` configuration for the given pointstamps: no implications, ``work l = frontier (pts l)``."""
    p = tuple(ZMSet(dict(pts.get(l, {}))) for l in cfg.locations)
    return State(p, (ZMSet(),) * len(p), tuple(_frontier_z(m) for m in p))


def Init(cfg: PropagationConfig, c: State) -> bool:
    """``Init c = (∀l. imp c l = {#}z ∧ work c l = frontier (pts c l))`` (§5)."""
    return all(not c.imp[i] and c.work[i] == _frontier_z(c.pts[i]) for i in range(len(cfg.locations)))


def initial_states(cfg: PropagationConfig) -> Iterator[State]:
    """One ``Init`` configuration per entry of ``cfg.initial``."""
    for pts in cfg.initial:
        yield make_state(cfg, pts)


def change_multiplicity_enabled(cfg: PropagationConfig, c: State, l: Any, t: Any, n: int) -> bool:
    """``change_multiplicity l t n``: ``n ≠ 0`` and ``∃t' ∈ frontier (imp c l). t' ≤ t`` (Fig. 6)."""
    return n != 0 and any(f <= t for f in _frontier(c.imp[cfg.index[l]]))


def change_multiplicity(cfg: PropagationConfig, c: State, l: Any, t: Any, n: int) -> State:
    """Effect: ``pts l += replicate n t``; ``work l`` changes by the change of ``frontier (pts l)``."""
    i = cfg.index[l]
    old = c.pts[i]
    new = old.add(t, n)
    pts = list(c.pts)
    pts[i] = new
    fo, fn = _frontier_z(old), _frontier_z(new)
    if fo is fn or fo == fn:
        return c._replace(pts=tuple(pts))
    work = list(c.work)
    work[i] = work[i] + fn - fo
    return c._replace(pts=tuple(pts), work=tuple(work))


def _is_minimal(c: State, t: Any) -> bool:
    return not any(u < t for wl in c.work for u in wl)


def propagate_enabled(cfg: PropagationConfig, c: State, l: Any, t: Any) -> bool:
    """``propagate l t``: ``t ∈#z work c l`` and no worklist anywhere holds a ``t' < t`` (Fig. 6).

    Under ``propagate-nonminimal`` the minimality requirement is dropped.
    """
    if t not in c.work[cfg.index[l]]:
        return False
    return cfg.mutant is Mutant.PROPAGATE_NONMINIMAL or _is_minimal(c, t)


def _propagate(cfg: PropagationConfig, c: State, i: int, t: Any) -> State:
    wl = c.work[i]
    k = wl.count(t)
    imp_old = c.imp[i]
    imp_new = imp_old.add(t, k)
    imp = list(c.imp)
    imp[i] = imp_new
    work = list(c.work)
    work[i] = wl.add(t, -k)
    fo, fn = _frontier_z(imp_old), _frontier_z(imp_new)
    if fo != fn:
        delta = fn - fo
        for j, summaries in cfg.out_edges[i]:
            work[j] = work[j] + after_summary(delta, summaries)
    return State(c.pts, tuple(imp), tuple(work))


def propagate(cfg: PropagationConfig, c: State, l: Any, t: Any) -> State:
    """Effect: ``imp l += replicate (work c l #z t) t``; drop ``t`` from ``work l``; every other
    ``work l'`` gains ``(frontier (imp' l) - frontier (imp l)) ⊕ summary l l'`` (Fig. 6)."""
    return _propagate(cfg, c, cfg.index[l], t)


def _choose(cfg: PropagationConfig, c: State) -> tuple[int, Any] | None:
    """The deterministic choice standing for ``SOME c'. ∃l t. propagate l t c c'`` in Fig. 7.

    The least entry in a linear extension of the order (so a minimal one); under
    ``propagate-nonminimal`` the greatest one instead.
    """
    entries = [(sort_key(t), i, t) for i, wl in enumerate(c.work) for t in wl]
    if not entries:
        return None
    pick = max if cfg.mutant is Mutant.PROPAGATE_NONMINIMAL else min
    _, i, t = pick(entries, key=lambda e: (e[0], e[1]))
    return i, t


def propagate_all(cfg: PropagationConfig, c: State, max_steps: int | None = None) -> State | None:
    """``while_option (λc. ∃l. work c l ≠ {#}z) (λc. SOME c'. ∃l t. propagate l t c c') c`` (Fig. 7).

    ``None`` if the worklists are not empty after ``max_steps`` propagations.
    """
    run = propagate_all_run(cfg, c, max_steps)
    if run is None:
        return None
    return run[-1][2] if run else c


def propagate_all_run(
    cfg: PropagationConfig, c: State, max_steps: int | None = None
) -> list[tuple[Any, Any, State]] | None:
    """The steps ``(location, timestamp, state after)`` of :func:`propagate_all`, or ``None`` past the bound."""
    bound = cfg.max_propagation_steps if max_steps is None else max_steps
    steps: list[tuple[Any, Any, State]] = []
    for _ in range(bound + 1):
        pick = _choose(cfg, c)
        if pick is None:
            return steps
        c = _propagate(cfg, c, *pick)
        steps.append((cfg.locations[pick[0]], pick[1], c))
    return None


def propagate_all_monotone(cfg: PropagationConfig, c: State) -> bool:
    """Every step of :func:`propagate_all` from ``c`` satisfies :func:`propagate_monotone`."""
    run = propagate_all_run(cfg, c)
    if run is None:
        return True
    return all(not any(u < t for wl in after.work for u in wl) for _, t, after in run)


def propagate_all_outcomes(cfg: PropagationConfig, c: State, max_steps: int | None = None) -> frozenset[State] | None:
    """Every configuration with empty worklists that some sequence of enabled ``propagate`` steps reaches.

    ``None`` if some sequence is longer than ``max_steps``.
    """
    bound = cfg.max_propagation_steps if max_steps is None else max_steps
    done: set[State] = set()
    layer = {c}
    seen = {c}
    for _ in range(bound + 1):
        nxt: set[State] = set()
        for s in layer:
            moves = _enabled_propagations(cfg, s)
            if not moves:
                done.add(s)
            for i, t in moves:
                s2 = _propagate(cfg, s, i, t)
                if s2 not in seen:
                    seen.add(s2)
                    nxt.add(s2)
        if not nxt:
            return frozenset(done)
        layer = nxt
    return None


def _enabled_propagations(cfg: PropagationConfig, c: State) -> list[tuple[int, Any]]:
    nonmin = cfg.mutant is Mutant.PROPAGATE_NONMINIMAL
    out = []
    for i, wl in enumerate(c.work):
        for t in wl:
            if nonmin or _is_minimal(c, t):
                out.append((i, t))
    return out


def _work_images(cfg: PropagationConfig, c: State) -> list[Any]:
    """``{t' ⊕ s | t' ∈#z work l, s ∈ path_summary l l'}`` reduced to its minimal elements."""
    imgs = set()
    for i, wl in enumerate(c.work):
        if not wl:
            continue
        for s in cfg.reach_summaries[i]:
            for t in wl:
                r = s.results_in(t)
                if r is not None:
                    imgs.add(r)
    return [x for x in imgs if not any(o != x and o <= x for o in imgs)]


def work_vacant(cfg: PropagationConfig, c: State, t: Any) -> bool:
    """``work_vacant c t = (∀l l' s t'. t' ∈#z work c l ⟶ s ∈ path_summary l l' ⟶ t' ⊕ s ≰ t)`` (§5)."""
    return not any(u <= t for u in _work_images(cfg, c))


def _reflected_downstream(cfg: PropagationConfig, c: State, pending: Sequence[Any]) -> bool:
    """Every ``t ⊕ s`` reachable from a positive pointstamp, unless some ``x <= t ⊕ s`` is in ``pending``,
    lies at or beyond ``frontier (imp c l')``."""
    for i, p in enumerate(c.pts):
        for t, n in p.items():
            if n <= 0:
                continue
            for j, summaries in cfg.paths[i]:
                fr = _frontier(c.imp[j])
                for s in summaries:
                    u = s.results_in(t)
                    if u is None or any(x <= u for x in pending):
                        continue
                    if not any(f <= u for f in fr):
                        return False
    return True


def Safe(cfg: PropagationConfig, c: State) -> bool:
    """``Safe`` (§5): for ``pts c l #z t > 0``, ``s ∈ path_summary l l'`` and ``work_vacant c (t ⊕ s)``,
    some ``t' ∈ frontier (imp c l')`` has ``t' ≤ t ⊕ s``."""
    return _reflected_downstream(cfg, c, _work_images(cfg, c))


def safe_strong(cfg: PropagationConfig, c: State) -> bool:
    """Like ``Safe`` but without the ``work_vacant`` guard (it holds when every worklist is empty)."""
    return _reflected_downstream(cfg, c, ())


def pts_map(cfg: PropagationConfig, c: State) -> dict[Any, ZMSet[Any]]:
    """``pts c`` as a location → counts mapping."""
    return {l: c.pts[i] for i, l in enumerate(cfg.locations) if c.pts[i]}


def implied_frontier_lemma(cfg: PropagationConfig, c: State) -> bool:
    """Lemma ``implied_frontier`` (§5): for work-vacant ``t``,
    ``t ∈ frontier (imp c l) ⟺ t ∈ implied_frontier (pts c) l`` at every location."""
    imgs = _work_images(cfg, c)
    pts = pts_map(cfg, c)
    for i, l in enumerate(cfg.locations):
        mismatch = _frontier(c.imp[i]) ^ implied_frontier(cfg.graph, pts, l)
        for t in mismatch:
            if not any(x <= t for x in imgs):
                return False
    return True


def propagate_monotone(c: State, a: Action, c2: State) -> bool:
    """After ``propagate l t`` no worklist holds a timestamp below ``t``.

    This is what propagating only minimal entries buys (§5: "any timestamp will
    eventually disappear from all worklists"): the worklists' lower bound only
    moves up, so a propagated timestamp never returns below it.
    """
    if a.name != "propagate":
        return True
    t = a.arg("t")
    return not any(u < t for wl in c2.work for u in wl)


def imp_nonneg(cfg: PropagationConfig, c: State) -> bool:
    """Auxiliary invariant 1 (§5): implications have only positive entries."""
    return all(n > 0 for m in c.imp for n in m.values())


def imp_work_sum(cfg: PropagationConfig, c: State) -> bool:
    """Auxiliary invariant 2 (§5): ``imp l + work l = frontier (pts l) + Σ_{l'} frontier (imp l') ⊕ summary l' l``."""
    for j in range(len(cfg.locations)):
        rhs = _frontier_z(c.pts[j])
        for i, summaries in cfg.in_edges[j]:
            rhs = rhs + after_summary(_frontier_z(c.imp[i]), summaries)
        if c.imp[j] + c.work[j] != rhs:
            return False
    return True


def format_propagation(cfg: PropagationConfig, c: State) -> str:
    """Per location with anything in it: ``pts``, ``imp`` and ``work``."""
    parts = []
    for i, l in enumerate(cfg.locations):
        if c.pts[i] or c.imp[i] or c.work[i]:
            parts.append(f"{l}: pts={c.pts[i]} imp={c.imp[i]} work={c.work[i]}")
    return "; ".join(parts) if parts else "(empty)"


class PropagationModel:
    """Local propagation (Fig. 6) under the bounds of a :class:`PropagationConfig`."""

    name = "propagation"

    def __init__(self, cfg: PropagationConfig) -> None:
        self.cfg = cfg
        self._terminates: dict[State, bool] = {}
        self._changes = [n for n in range(-cfg.max_n, cfg.max_n + 1) if n]

    def initial_states(self) -> Iterator[State]:
        """See :func:`initial_states`."""
        return initial_states(self.cfg)

    def successors(self, c: State) -> Iterator[tuple[Action, State]]:
        """Every enabled ``change_multiplicity`` (within the count bounds) and ``propagate``."""
        cfg = self.cfg
        for i, l in enumerate(cfg.locations):
            fr = _frontier(c.imp[i])
            if not fr:
                continue
            p = c.pts[i]
            for t in cfg.times:
                if not any(f <= t for f in fr):
                    continue
                have = p.count(t)
                for n in self._changes:
                    if cfg.min_pts <= have + n <= cfg.max_pts:
                        act = Action("change_multiplicity", (("l", l), ("t", t), ("n", n)))
                        yield act, change_multiplicity(cfg, c, l, t, n)
        for i, t in _enabled_propagations(cfg, c):
            yield Action("propagate", (("l", cfg.locations[i]), ("t", t))), _propagate(cfg, c, i, t)

    def terminates(self, c: State) -> bool:
        """Repeated propagation (deterministic choice) empties every worklist within the step bound."""
        known = self._terminates.get(c)
        if known is None:
            known = self._terminates[c] = propagate_all(self.cfg, c) is not None
        return known

    def invariants(self) -> list[Invariant[State]]:
        """``Safe``, the ``implied_frontier`` lemma, both auxiliary invariants and bounded termination."""
        cfg = self.cfg
        out: list[Invariant[State]] = [
            Invariant("Safe", lambda c: Safe(cfg, c)),
            Invariant("implied_frontier", lambda c: implied_frontier_lemma(cfg, c)),
            Invariant("InvImpNonneg", lambda c: imp_nonneg(cfg, c)),
            Invariant("InvImpsWorkSum", lambda c: imp_work_sum(cfg, c)),
        ]
        if cfg.check_termination:
            out.append(Invariant("PropagateTerminates", self.terminates))
        return out

    def transition_invariants(self) -> list[TransitionInvariant[State]]:
        """``PropagateMonotone``: see :func:`propagate_monotone`."""
        return [TransitionInvariant("PropagateMonotone", propagate_monotone)]

    def format_state(self, c: State) -> str:
        """See :func:`format_propagation`."""
        return format_propagation(self.cfg, c)


def pts_options(points: Iterable[tuple[Hashable, Any]], k: int) -> tuple[dict[Any, dict[Any, int]], ...]:
    """Initial ``pts`` choices: every set of at most ``k`` of the given ``(location, timestamp)`` pairs."""
    pts = list(dict.fromkeys(points))
    out: list[dict[Any, dict[Any, int]]] = []

    def rec(start: int, chosen: list[tuple[Any, Any]]) -> None:
        m: dict[Any, dict[Any, int]] = {}
        for l, t in chosen:
            m.setdefault(l, {})[t] = 1
        out.append(m)
        if len(chosen) == k:
            return
        for i in range(start, len(pts)):
            rec(i + 1, [*chosen, pts[i]])

    rec(0, [])
    return tuple(out)
