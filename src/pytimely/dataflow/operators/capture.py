"""Capturing a stream's batches into a list, and replaying them as a stream."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pytimely.dataflow.capability import Capability
from pytimely.errors import CapabilityError

if TYPE_CHECKING:
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = ["capture", "replay"]


def capture(stream: Stream[Any], into: list[tuple[Any, list[Any]]], name: str) -> list[tuple[Any, list[Any]]]:
    """Append ``(time, records)`` for every batch that reaches this worker's copy of the stream.

    Lists are copied; numpy arrays and Arrow batches are kept as they are.
    """
    op = stream.scope._operator(name, [(stream, None)], 0)
    port = op.inputs[0]
    append = into.append

    def logic() -> None:
        for time, batch in port.batches():
            append((time, list(batch) if isinstance(batch, list) or not hasattr(batch, "__len__") else batch))

    op.logic = logic
    return into


def replay(scope: Scope[Any], events: Iterable[tuple[Any, Any]], name: str) -> Stream[Any]:
    """Send each captured ``(time, batch)`` again at its time, then finish."""
    op = scope._operator(name, [], 1)
    op.initial_caps = True
    output = op.outputs[0]
    cap = Capability(scope.minimum, output, counted=True)
    items = list(events)

    def logic() -> None:
        if not cap.valid:
            return
        for time, batch in items:
            if not cap.time <= time:
                raise CapabilityError(f"{name}: event time {time!r} is before the scope's minimum {cap.time!r}")
            if len(batch):
                output._push(time, list(batch))
        cap.drop()

    op.logic = logic
    return scope.stream(output)
