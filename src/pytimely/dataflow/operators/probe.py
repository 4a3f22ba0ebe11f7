"""Probes: watch how far a stream has got."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pytimely.errors import DataflowError, DroppedDataflowError, InvalidArgument
from pytimely.progress.frontier import Antichain

if TYPE_CHECKING:
    from pytimely.dataflow.ports import InputPort
    from pytimely.dataflow.stream import Stream

__all__ = ["ProbeHandle", "probe", "probe_with"]

T = TypeVar("T")


class ProbeHandle(Generic[T]):
    """Reports the frontier of one or more streams (see ``Stream.probe_with``): which times could still appear."""

    def __init__(self, port: InputPort[T, Any] | None = None) -> None:
        self._ports: list[InputPort[T, Any]] = []
        if port is not None:
            self._attach(port)

    def _attach(self, port: InputPort[T, Any]) -> None:
        self._ports.append(port)

    @property
    def _port(self) -> InputPort[T, Any]:
        """The first stream's port (what ``Worker.explain`` follows)."""
        if not self._ports:
            raise DataflowError("this probe watches no stream yet; attach one with stream.probe_with(handle)")
        return self._ports[0]

    @property
    def _subgraph(self) -> Any:
        return self._port._op.scope.subgraph

    def _frontiers(self) -> list[Any]:
        if not self._ports:
            raise DataflowError("this probe watches no stream yet; attach one with stream.probe_with(handle)")
        out = []
        for port in self._ports:
            subgraph = port._op.scope.subgraph
            if subgraph.dropped:
                raise DroppedDataflowError(f"the probe watches dataflow {subgraph.name!r}, which was dropped")
            if not subgraph.built:
                raise DataflowError("a probe reports nothing until its dataflow is built (after the build function)")
            out.append(port.frontier)
        return out

    def less_than(self, time: T) -> bool:
        """Whether some time earlier than ``time`` could still appear."""
        return any(f.less_than(time) for f in self._frontiers())

    def less_equal(self, time: T) -> bool:
        """Whether ``time`` or something earlier could still appear."""
        return any(f.less_equal(time) for f in self._frontiers())

    def done(self) -> bool:
        """Whether nothing more can appear at all."""
        return all(f.is_empty() for f in self._frontiers())

    def frontier(self) -> Antichain[T]:
        """The times that could still appear, as their minimal elements."""
        return Antichain([t for f in self._frontiers() for t in f.frontier_elements()])

    def __repr__(self) -> str:
        built = bool(self._ports) and all(p._op.scope.subgraph.built for p in self._ports)
        return f"ProbeHandle({self.frontier()!r})" if built else "ProbeHandle(unbuilt)"


def _probe_port(stream: Stream[Any], name: str) -> InputPort[Any, Any]:
    """A sink on ``stream`` whose input frontier a probe reads; messages are consumed and discarded."""
    op = stream.scope.add_operator(name, [(stream, None)], 0)
    port = op.inputs[0]

    def logic() -> None:
        for _ in port.batches():
            pass

    op.logic = logic
    port_: InputPort[Any, Any] = port
    return port_


def probe(stream: Stream[Any], name: str) -> ProbeHandle[Any]:
    """Attach a new probe to ``stream``."""
    return ProbeHandle(_probe_port(stream, name))


def probe_with(stream: Stream[Any], handle: ProbeHandle[Any], name: str) -> None:
    """Make ``handle`` watch ``stream`` too: it reports the times that could still appear on any of its streams."""
    if not isinstance(handle, ProbeHandle):
        raise InvalidArgument(f"{name}: expected a ProbeHandle, got {type(handle).__name__}")
    handle._attach(_probe_port(stream, name))
