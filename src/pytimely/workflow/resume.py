"""Algorithm ``ComputeResumeState`` of seed ``004_6a2e88f6382bfe5d.txt`` §2.4: the optimal consistent checkpoint.

Given a parent module, the ports ``H`` that already have a value, the recomputed in-ports ``I*`` and the
requested out-ports ``O*``, every vertex of the pruned dependency graph is classified

* **ready**: in the checkpoint ``A``; interpretation resumes from it and it never gets a new value;
* **recompute**: reachable from ``I*`` or from a ready vertex; it will get a new value;
* **irrelevant**: not needed now,

and ``W`` collects the submodules' out-ports that witness an edge leaving a ready or recompute vertex — the
out-ports each child interpreter is asked for (equation 2.3). :func:`compute_resume_state` is lines 1–25 of
the algorithm (the seed file's lines 165–205; comments below cite the algorithm's own line numbers), with any
kind of queue (:class:`Fifo`, :class:`Lifo`, :class:`Priority`, :class:`SetQueue`); Lemma 2.12 says the
result does not depend on the kind, and the tests check it.
:func:`compute_resume_state_async` asks "``v ∈ H``?" lazily and concurrently (the only use of ``H`` is line
14) and dequeues whichever vertex's answer is known first — the same result by the same lemma.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from pytimely.errors import ResumePreconditionError
from pytimely.workflow.graph import DependencyGraph, Vertex
from pytimely.workflow.model import Module

__all__ = [
    "Fifo",
    "Lifo",
    "Priority",
    "Queue",
    "ResumeState",
    "SetQueue",
    "compute_resume_state",
    "compute_resume_state_async",
]

State = Literal["irrelevant", "ready", "recompute"]


class Queue(Protocol):
    """The queue operations the algorithm needs (§2.4): enqueue, dequeue, is-empty."""

    def enqueue(self, x: Vertex) -> None:
        """Add ``x``."""

    def dequeue(self) -> Vertex:
        """Remove and return some element."""

    def empty(self) -> bool:
        """Whether nothing is left."""


class Fifo:
    """Insertion order; an element enqueued twice is dequeued twice."""

    def __init__(self) -> None:
        self._items: deque[Vertex] = deque()

    def enqueue(self, x: Vertex) -> None:
        """Add ``x`` at the back."""
        self._items.append(x)

    def dequeue(self) -> Vertex:
        """Remove the front."""
        return self._items.popleft()

    def empty(self) -> bool:
        """Whether nothing is left."""
        return not self._items


class Lifo(Fifo):
    """Reverse insertion order."""

    def dequeue(self) -> Vertex:
        """Remove the back."""
        return self._items.pop()


class Priority:
    """Least ``key(x)`` first (ties in insertion order)."""

    def __init__(self, key: Callable[[Vertex], object] | None = None) -> None:
        self._key = key or (lambda v: v)
        self._heap: list[tuple[object, int, Vertex]] = []
        self._count = itertools.count()

    def enqueue(self, x: Vertex) -> None:
        """Add ``x`` by its key."""
        heapq.heappush(self._heap, (self._key(x), next(self._count), x))

    def dequeue(self) -> Vertex:
        """Remove the least."""
        return heapq.heappop(self._heap)[2]

    def empty(self) -> bool:
        """Whether nothing is left."""
        return not self._heap


class SetQueue:
    """Set semantics: an element waits at most once however often it is enqueued; the latest new one leaves first."""

    def __init__(self) -> None:
        self._items: dict[Vertex, None] = {}  # an insertion-ordered set: O(1) add, membership and pop

    def enqueue(self, x: Vertex) -> None:
        """Add ``x`` unless it is already waiting."""
        self._items.setdefault(x, None)

    def dequeue(self) -> Vertex:
        """Remove the most recently added waiting element."""
        return self._items.popitem()[0]

    def empty(self) -> bool:
        """Whether nothing is left."""
        return not self._items


@dataclass(frozen=True)
class ResumeState:
    """The algorithm's output: each vertex's state and ``W``, with what a parent interpreter derives from them."""

    graph: DependencyGraph
    state: dict[Vertex, State]
    witnesses: frozenset[tuple[str, str]]
    """``W``: (submodule, out-port) pairs the children are asked for."""
    recomputed_inputs: frozenset[str]

    @property
    def ready(self) -> frozenset[Vertex]:
        """``A``, the consistent checkpoint."""
        return frozenset(v for v, s in self.state.items() if s == "ready")

    @property
    def recompute(self) -> frozenset[Vertex]:
        """The vertices that get a new value."""
        return frozenset(v for v, s in self.state.items() if s == "recompute")

    @property
    def irrelevant(self) -> frozenset[Vertex]:
        """The vertices not needed now."""
        return frozenset(v for v, s in self.state.items() if s == "irrelevant")

    def child_inputs(self, child: str) -> frozenset[str]:
        """§2.3: the child's recomputed in-ports — reachable from ``A ∪ I*`` but not in ``A``."""
        return frozenset(
            v.port
            for v, s in self.state.items()
            if v.kind == "child-in" and v.module == child and s == "recompute"
            if v.port is not None
        )

    def child_outputs(self, child: str) -> frozenset[str]:
        """§2.3: the child's requested out-ports, ``O_N ∩ W``."""
        return frozenset(o for m, o in self.witnesses if m == child)

    def children_to_start(self) -> list[str]:
        """§2.3: submodules with an in-port in ``A``, or in ``A`` themselves; others start when a value arrives."""
        names = {v.module for v in self.ready if v.kind in ("child-in", "module") and v.module is not None}
        return sorted(names)

    def children_involved(self) -> list[str]:
        """Every submodule that runs: with a ready or recomputed in-port, or ready itself."""
        names = {
            v.module
            for v, s in self.state.items()
            if s != "irrelevant" and v.kind in ("child-in", "module") and v.module is not None
        }
        return sorted(names)


def _start(
    module: Module, recomputed: Iterable[str], requested: Iterable[str]
) -> tuple[DependencyGraph, frozenset[str], frozenset[str]]:
    requested = frozenset(requested)
    recomputed = frozenset(recomputed)
    if not requested:
        raise ResumePreconditionError(f"module {module.name!r}: the set of requested out-ports O* is empty")
    unknown = sorted(recomputed - set(module.input_names))
    if unknown:
        raise ResumePreconditionError(f"module {module.name!r} has no in-port {unknown[0]!r} to recompute")
    return DependencyGraph.of(module, requested), recomputed, requested


def _check_precondition(
    module: Module, has_value: Callable[[Vertex], bool], recomputed: frozenset[str], requested: frozenset[str]
) -> None:
    for i in module.input_names:
        if module.deps.get(i, frozenset()) & requested and i not in recomputed and not has_value(Vertex.inport(i)):
            needed = sorted(module.deps[i] & requested)
            raise ResumePreconditionError(
                f"module {module.name!r}: out-port {needed[0]!r} needs in-port {i!r}, which has no value and is "
                "not among the recomputed in-ports"
            )


def compute_resume_state(
    module: Module,
    has_value: Iterable[Vertex] | Callable[[Vertex], bool],
    recomputed: Iterable[str],
    requested: Iterable[str],
    queue: Queue | None = None,
) -> ResumeState:
    """``ComputeResumeState(M, H, I*, O*)`` with the given queue (a fresh :class:`Fifo` by default).

    ``has_value`` is ``H``: a set of port vertices, or a predicate asked only where line 14 needs it.
    """
    graph, recomputed_set, requested_set = _start(module, recomputed, requested)
    if callable(has_value):
        in_h = has_value
    else:
        h = frozenset(has_value)

        def in_h(v: Vertex) -> bool:
            return v in h

    _check_precondition(module, in_h, recomputed_set, requested_set)
    q: Queue = Fifo() if queue is None else queue
    state = _initial(graph, recomputed_set, requested_set, q)
    witnesses: set[tuple[str, str]] = set()  # line 11
    while not q.empty():  # line 12
        v = q.dequeue()  # line 13
        _visit(graph, state, q, witnesses, v, in_h)
    return ResumeState(graph, state, frozenset(witnesses), recomputed_set)


def _initial(
    graph: DependencyGraph, recomputed: frozenset[str], requested: frozenset[str], q: Queue
) -> dict[Vertex, State]:
    """Lines 3-10: every vertex irrelevant but ``I*`` (recompute) and ``O*`` (ready), those two enqueued."""
    initial = {Vertex.inport(i) for i in recomputed} | {Vertex.outport(o) for o in requested}
    state: dict[Vertex, State] = {v: "irrelevant" for v in graph.vertices if v not in initial}  # lines 3-4
    for i in sorted(recomputed):  # lines 5-7
        state[Vertex.inport(i)] = "recompute"
        q.enqueue(Vertex.inport(i))
    for o in sorted(requested):  # lines 8-10
        state[Vertex.outport(o)] = "ready"
        q.enqueue(Vertex.outport(o))
    return state


def _visit(
    graph: DependencyGraph,
    state: dict[Vertex, State],
    q: Queue,
    witnesses: set[tuple[str, str]],
    v: Vertex,
    in_h: Callable[[Vertex], bool],
) -> None:
    """Lines 14-25 for the dequeued vertex ``v``."""
    if state[v] == "ready" and v.is_port and not in_h(v):  # lines 14-15
        state[v] = "recompute"
    if state[v] == "recompute":  # lines 16-20
        for w in graph.predecessors[v]:
            if state[w] == "irrelevant":
                state[w] = "ready"
                q.enqueue(w)
    for w in graph.successors[v]:  # lines 21-25
        module = v.module
        if module is not None:
            witnesses.update((module, o) for o in graph.outports(v, w))
        if state[w] != "recompute":
            state[w] = "recompute"
            q.enqueue(w)


async def compute_resume_state_async(
    module: Module,
    has_value: Callable[[Vertex], Awaitable[bool]],
    recomputed: Iterable[str],
    requested: Iterable[str],
) -> ResumeState:
    """The same result, asking ``has_value`` (an async predicate, e.g. a staging look-up) lazily and at once.

    A check starts as soon as a port vertex becomes ready; a dequeued vertex whose answer is still unknown waits
    aside while others are processed (Lemma 2.12: the order of dequeuing does not change the result).
    """
    graph, recomputed_set, requested_set = _start(module, recomputed, requested)
    answers: dict[Vertex, bool] = {}
    checks: dict[Vertex, asyncio.Task[bool]] = {}

    def ask(v: Vertex) -> None:
        if v not in checks:
            checks[v] = asyncio.ensure_future(has_value(v))

    needed = [
        Vertex.inport(i)
        for i in module.input_names
        if i not in recomputed_set and module.deps.get(i, frozenset()) & requested_set
    ]
    for v in needed:
        ask(v)
    try:
        for v in needed:
            answers[v] = await checks[v]
        _check_precondition(module, lambda v: answers.get(v, False), recomputed_set, requested_set)
        q = Fifo()
        state = _initial(graph, recomputed_set, requested_set, q)
        for o in sorted(requested_set):
            ask(Vertex.outport(o))
        witnesses: set[tuple[str, str]] = set()
        waiting: list[Vertex] = []
        asking = _Asking(state, ask)
        while not q.empty():
            asking.enqueue(q.dequeue())
        while not asking.empty() or waiting:
            if asking.empty():
                await _answered(waiting, checks, answers, asking)
                continue
            v = asking.dequeue()
            if state[v] == "ready" and v.is_port and v not in answers:
                task = checks[v]
                if not task.done():
                    waiting.append(v)
                    continue
                answers[v] = task.result()
            _visit(graph, state, asking, witnesses, v, lambda u: answers[u])
        return ResumeState(graph, state, frozenset(witnesses), recomputed_set)
    finally:
        for task in checks.values():
            if not task.done():
                task.cancel()


class _Asking(Fifo):
    """A FIFO that starts the ``H`` check of a ready port vertex as it is enqueued."""

    def __init__(self, state: Mapping[Vertex, State], ask: Callable[[Vertex], None]) -> None:
        super().__init__()
        self._state = state
        self._ask = ask

    def enqueue(self, x: Vertex) -> None:
        """Add ``x`` at the back, and start its check if it is a ready port."""
        super().enqueue(x)
        if self._state.get(x) == "ready" and x.is_port:
            self._ask(x)


async def _answered(
    waiting: list[Vertex], checks: Mapping[Vertex, asyncio.Task[bool]], answers: dict[Vertex, bool], q: Queue
) -> None:
    """Wait until a check of a vertex set aside (``waiting``) is answered; enqueue again every answered one."""
    pending = {checks[v] for v in waiting if v not in answers}
    if pending:
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    for v in list(waiting):
        if checks[v].done():
            answers[v] = checks[v].result()
            waiting.remove(v)
            q.enqueue(v)
