"""A breadth-first explicit-state model checker over a model's ``successors`` function.

Every reached configuration is checked against every (selected) state
invariant, and every explored transition against every transition invariant.
States are deduplicated; parent pointers give, on a violation, a counterexample
trace that is minimal (breadth-first order finds a shallowest violation first).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pytimely.verify.model import Action, Invariant, Model, TransitionInvariant

__all__ = ["CheckResult", "Step", "check", "select_invariants"]

S = TypeVar("S", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Step(Generic[S]):
    """One step of a counterexample: the action taken (``None`` for the initial state) and the state reached."""

    action: Action | None
    state: S


@dataclass
class CheckResult(Generic[S]):
    """What a run of :func:`check` found."""

    model: str
    depth: int
    states: int
    transitions: int
    seconds: float
    violation: str | None = None
    """Name of the violated invariant, or ``None``."""
    trace: list[Step[S]] = field(default_factory=list)
    """A shortest path from an initial state to the violation (empty if none)."""
    complete: bool = False
    """Whether every reachable state was explored (the search ran out of new states before ``depth``)."""
    levels: list[int] = field(default_factory=list)
    """Number of new states at each depth."""

    @property
    def states_per_second(self) -> float:
        """Explored states per second of wall-clock time."""
        return self.states / self.seconds if self.seconds > 0 else float("inf")

    @property
    def ok(self) -> bool:
        """Whether no violation was found."""
        return self.violation is None


def select_invariants(
    model: Model[Any], names: Iterable[str] | None
) -> tuple[list[Invariant[Any]], list[TransitionInvariant[Any]]]:
    """The model's state and transition invariants, restricted to ``names`` if given."""
    invs = list(model.invariants())
    tinvs = list(model.transition_invariants())
    if names is None:
        return invs, tinvs
    wanted = list(names)
    known = {i.name for i in invs} | {t.name for t in tinvs}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ValueError(f"unknown invariant(s) {unknown} for {model.name}; known: {sorted(known)}")
    return [i for i in invs if i.name in wanted], [t for t in tinvs if t.name in wanted]


def _trace(parent: dict[Any, tuple[Any, Action | None]], s: Any) -> list[Step[Any]]:
    steps: list[Step[Any]] = []
    cur: Any = s
    while True:
        prev, act = parent[cur]
        steps.append(Step(act, cur))
        if prev is None:
            break
        cur = prev
    steps.reverse()
    return steps


def _first_violated(invs: Sequence[Invariant[Any]], s: Any) -> str | None:
    for inv in invs:
        if not inv.holds(s):
            return inv.name
    return None


def check(
    model: Model[S],
    depth: int,
    *,
    invariants: Iterable[str] | None = None,
    max_states: int | None = None,
) -> CheckResult[S]:
    """Explore every state reachable within ``depth`` steps breadth-first and check the invariants.

    ``invariants`` restricts the check to the named invariants (state or
    transition); ``max_states`` stops early (``complete`` stays false). The
    search stops at the first violation with a minimal counterexample trace.
    """
    invs, tinvs = select_invariants(model, invariants)
    start = time.perf_counter()
    parent: dict[Any, tuple[Any, Action | None]] = {}
    transitions = 0
    levels: list[int] = []

    def result(
        violation: str | None = None, trace: list[Step[Any]] | None = None, complete: bool = False
    ) -> CheckResult[S]:
        return CheckResult(
            model.name,
            depth,
            len(parent),
            transitions,
            time.perf_counter() - start,
            violation,
            trace or [],
            complete,
            levels,
        )

    layer: list[Any] = []
    for s in model.initial_states():
        if s in parent:
            continue
        parent[s] = (None, None)
        bad = _first_violated(invs, s)
        if bad is not None:
            levels.append(len(parent))
            return result(bad, _trace(parent, s))
        layer.append(s)
    levels.append(len(layer))
    for _ in range(depth):
        nxt: list[Any] = []
        for s in layer:
            for act, s2 in model.successors(s):
                transitions += 1
                for tinv in tinvs:
                    if not tinv.holds(s, act, s2):
                        return result(tinv.name, [*_trace(parent, s), Step(act, s2)])
                if s2 in parent:
                    continue
                parent[s2] = (s, act)
                bad = _first_violated(invs, s2)
                if bad is not None:
                    levels.append(len(nxt) + 1)
                    return result(bad, _trace(parent, s2))
                nxt.append(s2)
                if max_states is not None and len(parent) >= max_states:
                    levels.append(len(nxt))
                    return result()
        levels.append(len(nxt))
        if not nxt:
            return result(complete=True)
        layer = nxt
    return result()
