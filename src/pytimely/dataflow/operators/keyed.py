"""Keyed streams, Bytewax style: ``key_on`` makes ``(key, record)`` pairs, ``map_value`` maps the values, and
``stateful_map`` keeps one state per key across timestamps.

A keyed stream is a stream of ``(key, value)`` pairs (the form ``count_by``, ``join`` and ``state_machine`` take).
``key_on`` with a column over a numpy or Arrow batch reads the key column at once (no Python call per
record); ``stateful_map`` is ``state_machine`` with Bytewax's ``mapper(state, value) -> (state, output)``.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.dataflow.bins import DEFAULT_BINS
from pytimely.dataflow.operators.fields import column_errors
from pytimely.errors import InvalidArgument

if TYPE_CHECKING:
    from pytimely.dataflow.stream import Stream

__all__ = ["key_on", "map_value", "stateful_map"]

KeyField = Callable[[Any], Any] | int | str


def key_on(stream: Stream[Any], key: KeyField, name: str) -> Stream[Any]:
    """``(key(record), record)`` for every record; ``key`` may be a column of numpy/Arrow batches."""
    if isinstance(key, bool) or not (callable(key) or isinstance(key, int | str)):
        raise InvalidArgument(
            f"{name}: key must be a function of the record or a column (position or name), got {key!r}"
        )
    op = stream.scope.add_operator(name, [(stream, None)], 1)
    port, out = op.inputs[0], op.outputs[0]

    def logic() -> None:
        for time, batch in port.batches():
            records = container.records(batch)
            if callable(key):
                keys: Any = map(key, records)
            elif type(batch) is list:
                keys = map(itemgetter(key), records)
            else:
                keys = container.values(batch, key)  # one column read, no call per record
            with column_errors(batch, None if callable(key) else key):
                pairs = list(zip(keys, records, strict=True))
            if pairs:
                out._push(time, pairs)

    op.logic = logic
    return _stream(stream, out)


def map_value(stream: Stream[Any], f: Callable[[Any], Any], name: str) -> Stream[Any]:
    """``(key, f(value))`` for every ``(key, value)`` pair."""
    op = stream.scope.add_operator(name, [(stream, None)], 1)
    port, out = op.inputs[0], op.outputs[0]

    def logic() -> None:
        for time, batch in port.batches():
            out._push(time, [(k, f(v)) for k, v in container.records(batch)])

    op.logic = logic
    return _stream(stream, out)


def stateful_map(
    stream: Stream[Any],
    mapper: Callable[[Any, Any], tuple[Any, Any]],
    name: str,
    control: Stream[Any] | None = None,
    bins: int = DEFAULT_BINS,
) -> Stream[Any]:
    """``(key, output)`` per ``(key, value)`` pair with ``(state, output) = mapper(state, value)``.

    The state starts as ``None`` and a returned state of ``None`` forgets the key; each key's values are
    mapped in timestamp order (within one time, in the order they reached the key's worker).
    """
    from pytimely.dataflow.operators.state_machine import state_machine

    def fold(k: Any, v: Any, state: Any) -> tuple[Any, list[Any]]:
        returned = mapper(state, v)
        # A string of two characters or a list would unpack too, and silently: only a pair is a pair.
        if not isinstance(returned, tuple) or len(returned) != 2:
            raise InvalidArgument(
                f"stateful_map {name!r}: the mapper must return a (state, output) tuple; for key {k!r} it "
                f"returned {returned!r}"
            )
        new, output = returned
        return new, [(k, output)]

    return state_machine(stream, fold, None, control, bins, name)


def _stream(stream: Stream[Any], port: Any) -> Stream[Any]:
    return stream.scope.stream(port)
