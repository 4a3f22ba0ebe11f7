"""A worker: builds dataflows and steps them, exchanging data and progress with its peers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pytimely.communication.allocator import Allocator
from pytimely.dataflow.scope import Scope
from pytimely.dataflow.subgraph import Subgraph
from pytimely.errors import ScopeError, StalledError

__all__ = ["Worker"]

R = TypeVar("R")

_PARK = 0.1
"""Longest wait for a message between idle steps; arrivals and failures wake a worker at once."""


class Worker:
    """One of the workers running a computation; every worker builds the same dataflows."""

    def __init__(self, allocator: Allocator) -> None:
        self._allocator = allocator
        self._dataflows: list[Subgraph] = []
        self._count = 0
        self._building = False
        self._after_step: Callable[[], None] | None = None
        self.last_step_worked = False
        """Whether the last :meth:`step` did anything (received, ran or sent something)."""

    @property
    def index(self) -> int:
        """This worker's index, ``0 <= index < peers``."""
        return self._allocator.index

    @property
    def peers(self) -> int:
        """How many workers run the computation."""
        return self._allocator.peers

    def dataflow(self, build: Callable[[Scope[Any]], R], *, minimum: Any = 0, name: str | None = None) -> R:
        """Build a dataflow with ``build(scope)`` in a fresh root scope whose least time is ``minimum``.

        Returns what ``build`` returns (typically input and probe handles).
        """
        if self._building:
            raise ScopeError("dataflows cannot be built inside another dataflow's build function")
        ident = self._count
        self._count += 1
        subgraph = Subgraph(self._allocator, ident, name if name is not None else f"dataflow {ident}")
        scope: Scope[Any] = Scope(subgraph, minimum)
        self._building = True
        try:
            result = build(scope)
        finally:
            self._building = False
        subgraph.build(scope._summaries)
        self._allocator.built(ident)
        self._dataflows.append(subgraph)
        return result

    def step(self) -> bool:
        """Run one step of every dataflow; return whether any dataflow is still running."""
        allocator = self._allocator
        allocator.receive()
        worked = False
        for subgraph in self._dataflows:
            worked = subgraph.step() or worked
        allocator.release()
        if any(s.complete for s in self._dataflows):
            self._dataflows = [s for s in self._dataflows if not s.complete]
        self.last_step_worked = worked
        if self._after_step is not None:
            self._after_step()
        return bool(self._dataflows)

    def step_while(self, condition: Callable[[], bool]) -> None:
        """Step while ``condition()`` holds (between idle steps, wait for messages from other processes)."""
        while condition():
            self.step()
            if not self.last_step_worked:
                self._allocator.park(_PARK)

    @property
    def running(self) -> bool:
        """Whether some dataflow of this worker has not finished."""
        return bool(self._dataflows)

    def close_inputs(self) -> None:
        """Close every input handle still open (as happens when the worker's function returns)."""
        for subgraph in self._dataflows:
            for handle in subgraph.inputs:
                handle.close()

    def communication_stats(self) -> dict[str, Any]:
        """Counters of the communication layer (queue peaks, flow-control waits, frames sent), if it keeps any."""
        stats = getattr(self._allocator, "stats", None)
        return stats() if stats is not None else {}

    def stall_report(self) -> str:
        """What keeps this worker's unfinished dataflows alive."""
        parts = []
        for subgraph in self._dataflows:
            held = subgraph.held()
            parts.append(f"{subgraph.name!r}: " + ("; ".join(held) if held else "nothing held"))
        return " | ".join(parts)

    def _stalled(self) -> StalledError:
        return StalledError(
            f"worker {self.index}: the computation cannot finish, as no operator has work and no message is in "
            f"flight, yet these remain: {self.stall_report()}. An operator holds a capability it never drops."
        )

    def finish(self) -> None:
        """Close inputs and step until every dataflow is done; a stall raises :class:`StalledError`."""
        self.close_inputs()
        idle = 0
        while self.step():
            idle = 0 if self.last_step_worked else idle + 1
            if idle >= 2 and self.peers == 1:
                raise self._stalled()
            if idle:
                self._allocator.park(_PARK)
