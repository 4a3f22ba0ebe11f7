"""Probes: watch how far a stream has got."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pytimely.errors import DataflowError
from pytimely.progress.frontier import Antichain

if TYPE_CHECKING:
    from pytimely.dataflow.ports import InputPort
    from pytimely.dataflow.stream import Stream

__all__ = ["ProbeHandle", "probe"]

T = TypeVar("T")


class ProbeHandle(Generic[T]):
    """Reports the frontier of a stream: which times could still appear on it."""

    def __init__(self, port: InputPort[T, Any]) -> None:
        self._port = port
        self._subgraph = port._op.scope.subgraph

    def _frontier(self) -> Any:
        if not self._subgraph.built:
            raise DataflowError("a probe reports nothing until its dataflow is built (after the build function)")
        return self._port.frontier

    def less_than(self, time: T) -> bool:
        """Whether some time earlier than ``time`` could still appear."""
        return bool(self._frontier().less_than(time))

    def less_equal(self, time: T) -> bool:
        """Whether ``time`` or something earlier could still appear."""
        return bool(self._frontier().less_equal(time))

    def done(self) -> bool:
        """Whether nothing more can appear at all."""
        return bool(self._frontier().is_empty())

    def frontier(self) -> Antichain[T]:
        """The times that could still appear, as their minimal elements."""
        return Antichain(self._frontier().frontier_elements())

    def __repr__(self) -> str:
        state = repr(self.frontier()) if self._subgraph.built else "unbuilt"
        return f"ProbeHandle({state})"


def probe(stream: Stream[Any], name: str) -> ProbeHandle[Any]:
    """Attach a probe to ``stream``; messages are consumed and discarded."""
    op = stream.scope._operator(name, [(stream, None)], 0)
    port = op.inputs[0]

    def logic() -> None:
        for _ in port.batches():
            pass

    op.logic = logic
    return ProbeHandle(port)
