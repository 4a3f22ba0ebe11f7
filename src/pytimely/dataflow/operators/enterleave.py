"""Crossing into and out of nested scopes (loops change the timestamp; regions do not)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pytimely.errors import ScopeError
from pytimely.order import Product
from pytimely.progress.timestamp import Enter, Leave

if TYPE_CHECKING:
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = ["enter", "iterate", "leave"]

D = TypeVar("D")


def _identity(stream: Stream[Any], into: Scope[Any], name: str) -> Stream[Any]:
    """Cross between a scope and a region of it: the same timestamps on both sides."""
    op = into.subgraph.add_operator(name, into, 1, 1)
    into.subgraph.connect(stream._port, op.inputs[0], None)
    port, out = op.inputs[0], op.outputs[0]

    def logic() -> None:
        for time, batch in port.batches():
            out._push(time, batch)

    op.logic = logic
    return into.stream(out)


def enter(stream: Stream[Any], inner: Scope[Any], name: str) -> Stream[Any]:
    """Bring ``stream`` into the nested scope ``inner``: time ``t`` becomes ``(t, 0)``."""
    if inner.parent is not stream.scope:
        raise ScopeError(f"{name}: {inner!r} is not nested directly inside the stream's scope {stream.scope!r}")
    if inner.is_region:
        return _identity(stream, inner, name)
    minimum = inner.minimum
    assert isinstance(minimum, Product)
    start = minimum.inner
    op = inner.subgraph.add_operator(name, inner, 1, 1)
    inner.subgraph.connect(stream._port, op.inputs[0], None)
    inner._summaries[op.index] = {(0, 0): Enter(start)}
    port, out = op.inputs[0], op.outputs[0]

    def logic() -> None:
        for time, batch in port.batches():
            out._push(Product(time, start), batch)

    op.logic = logic
    return inner.stream(out)


def leave(stream: Stream[Any], name: str) -> Stream[Any]:
    """Take ``stream`` out of its nested scope: time ``(t, i)`` becomes ``t``."""
    inner = stream.scope
    outer = inner.parent
    if outer is None:
        raise ScopeError(f"{name}: the stream is in a dataflow's root scope; there is nothing to leave")
    if inner.is_region:
        return _identity(stream, outer, name)
    op = inner.subgraph.add_operator(name, outer, 1, 1)
    inner.subgraph.connect(stream._port, op.inputs[0], None)
    outer._summaries[op.index] = {(0, 0): Leave()}
    port, out = op.inputs[0], op.outputs[0]

    def logic() -> None:
        for time, batch in port.batches():
            out._push(time.outer, batch)

    op.logic = logic
    return outer.stream(out)


def iterate(stream: Stream[D], body: Callable[[Stream[D]], Stream[D]], limit: int | None, name: str) -> Stream[D]:
    """Run ``body`` in a loop: what it returns goes round again one iteration later, and leaves."""
    inner = stream.scope.iterative(name)
    handle, variable = inner.feedback(1, limit, name=f"{name}.feedback")
    result = body(stream.enter(inner, name=f"{name}.enter").concat(variable, name=f"{name}.concat"))
    result.connect_loop(handle)
    return result.leave(name=f"{name}.leave")
