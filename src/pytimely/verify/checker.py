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
    passed_depth: int = -1
    """The greatest depth at which :func:`check` of the same model and invariants finds no violation, as far as this
    run shows: the depth of every layer fully checked before it stopped (its search is a prefix of this one, the
    search being deterministic); ``depth`` when it found none; ``-1`` when an initial state violates."""
    first_steps: dict[str, int] = field(default_factory=dict)
    """For each action name taken, the number of the first step at which the search took it (1: from an initial
    state): the actions a check to a given depth reaches, read off a deeper one."""

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


class _Search(Generic[S]):
    """One breadth-first search: the states reached (with their parents), the transitions taken, the layer sizes."""

    def __init__(
        self,
        model: Model[S],
        depth: int,
        invs: Sequence[Invariant[Any]],
        tinvs: Sequence[TransitionInvariant[Any]],
        max_states: int | None,
    ) -> None:
        self.model = model
        self.depth = depth
        self.invs = invs
        self.tinvs = tinvs
        self.max_states = max_states
        self.start = time.perf_counter()
        self.parent: dict[Any, tuple[Any, Action | None]] = {}
        self.transitions = 0
        self.levels: list[int] = []
        self.checked = -1
        """The deepest layer whose states are all checked, with the transitions out of every layer above it."""
        self.first_steps: dict[str, int] = {}

    def result(
        self, violation: str | None = None, trace: list[Step[Any]] | None = None, complete: bool = False
    ) -> CheckResult[S]:
        """What the search found so far."""
        passed = self.depth if violation is None and (self.max_states is None or complete) else self.checked
        return CheckResult(
            self.model.name,
            self.depth,
            len(self.parent),
            self.transitions,
            time.perf_counter() - self.start,
            violation,
            trace or [],
            complete,
            self.levels,
            passed,
            self.first_steps,
        )

    def first_layer(self) -> list[Any] | CheckResult[S]:
        """The distinct initial states, or the result if one violates an invariant."""
        layer: list[Any] = []
        for s in self.model.initial_states():
            if s in self.parent:
                continue
            self.parent[s] = (None, None)
            bad = _first_violated(self.invs, s)
            if bad is not None:
                self.levels.append(len(self.parent))
                return self.result(bad, _trace(self.parent, s))
            layer.append(s)
        self.levels.append(len(layer))
        self.checked = 0
        return layer

    def next_layer(self, layer: list[Any]) -> list[Any] | CheckResult[S]:
        """The states first reached from ``layer``, or the result on a violation, at ``max_states`` or at the end."""
        nxt: list[Any] = []
        parent = self.parent
        first_steps = self.first_steps
        step = self.checked + 1
        for s in layer:
            for act, s2 in self.model.successors(s):
                self.transitions += 1
                if act.name not in first_steps:
                    first_steps[act.name] = step
                for tinv in self.tinvs:
                    if not tinv.holds(s, act, s2):
                        return self.result(tinv.name, [*_trace(parent, s), Step(act, s2)])
                # one hash of s2 (a deep tuple) whether it is new or not
                known = len(parent)
                parent.setdefault(s2, (s, act))
                if len(parent) == known:
                    continue
                bad = _first_violated(self.invs, s2)
                if bad is not None:
                    self.levels.append(len(nxt) + 1)
                    return self.result(bad, _trace(self.parent, s2))
                nxt.append(s2)
                if self.max_states is not None and len(self.parent) >= self.max_states:
                    self.levels.append(len(nxt))
                    return self.result()
        self.levels.append(len(nxt))
        self.checked += 1
        if not nxt:
            return self.result(complete=True)
        return nxt


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
    search = _Search(model, depth, invs, tinvs, max_states)
    layer = search.first_layer()
    for _ in range(depth):
        if isinstance(layer, CheckResult):
            return layer
        layer = search.next_layer(layer)
    return layer if isinstance(layer, CheckResult) else search.result()
