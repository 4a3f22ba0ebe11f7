"""Generic operators: user logic with access to input frontiers and capabilities."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pytimely.dataflow.capability import Capability
from pytimely.dataflow.channels import Pact, exchange_for
from pytimely.order import sort_key
from pytimely.progress.frontier import MutableAntichain

if TYPE_CHECKING:
    from pytimely.dataflow.operator import OperatorInfo
    from pytimely.dataflow.ports import InputPort, OutputPort
    from pytimely.dataflow.stream import Stream

__all__ = ["Notificator", "binary", "pact_for", "unary"]

T = TypeVar("T")

UnaryLogic = Callable[["InputPort[Any, Any]", "OutputPort[Any, Any]"], None]
BinaryLogic = Callable[["InputPort[Any, Any]", "InputPort[Any, Any]", "OutputPort[Any, Any]"], None]


def pact_for(route: Callable[[Any], Any] | None, vectorized: bool = False) -> Pact:
    """The edge contract for an optional exchange ``route`` (see :func:`pytimely.dataflow.channels.exchange_for`)."""
    return exchange_for(route, vectorized)


class Notificator(Generic[T]):
    """Capabilities parked until their time is complete at every watched input.

    ``notify_at(cap)`` hands a capability over; ``ready(input.frontier, ...)``
    gives back, in time order, those whose time none of the given frontiers can
    still reach.
    """

    def __init__(self) -> None:
        self._pending: dict[T, Capability[T]] = {}

    def notify_at(self, cap: Capability[T]) -> None:
        """Ask to be told when ``cap.time`` is complete (one capability per time is kept)."""
        t = cap.time
        held = self._pending.get(t)
        if held is None:
            self._pending[t] = cap
        elif held is not cap:
            cap.drop()

    def ready(self, *frontiers: MutableAntichain[T]) -> list[Capability[T]]:
        """The parked capabilities whose time ``frontiers`` have passed, earliest first; the caller drops them."""
        if not self._pending:
            return []
        done = [t for t in self._pending if not any(f.less_equal(t) for f in frontiers)]
        done.sort(key=sort_key)
        return [self._pending.pop(t) for t in done]

    def pending(self) -> list[T]:
        """The times still waiting."""
        return sorted(self._pending, key=sort_key)

    def __len__(self) -> int:
        return len(self._pending)


def unary(
    stream: Stream[Any],
    constructor: Callable[[Capability[Any], OperatorInfo], UnaryLogic],
    *,
    name: str,
    exchange: Callable[[Any], Any] | None = None,
    vectorized: bool = False,
) -> Stream[Any]:
    """A one-input operator: ``constructor(capability, info)`` returns ``logic(input, output)``.

    The logic runs when data arrives or the input frontier moves. The initial
    capability (at the scope's minimum) is the logic's to keep, downgrade or drop.
    """
    scope = stream.scope
    op = scope.add_operator(name, [(stream, pact_for(exchange, vectorized))], 1)
    op.notify = True
    op.initial_caps = True
    port, out = op.inputs[0], op.outputs[0]
    logic = constructor(Capability(scope.minimum, out, counted=True), scope._info(op))
    op.logic = lambda: logic(port, out)
    return scope.stream(out)


def binary(
    left: Stream[Any],
    right: Stream[Any],
    constructor: Callable[[Capability[Any], OperatorInfo], BinaryLogic],
    *,
    name: str,
    exchange1: Callable[[Any], Any] | None = None,
    exchange2: Callable[[Any], Any] | None = None,
    vectorized: bool = False,
) -> Stream[Any]:
    """A two-input operator: ``constructor(capability, info)`` returns ``logic(input1, input2, output)``."""
    scope = left.scope
    pacts = [(left, pact_for(exchange1, vectorized)), (right, pact_for(exchange2, vectorized))]
    op = scope.add_operator(name, pacts, 1)
    op.notify = True
    op.initial_caps = True
    in1, in2, out = op.inputs[0], op.inputs[1], op.outputs[0]
    logic = constructor(Capability(scope.minimum, out, counted=True), scope._info(op))
    op.logic = lambda: logic(in1, in2, out)
    return scope.stream(out)
