"""Keyed aggregation per timestamp: records are grouped by key and time, and each group's result is
sent once its time is complete (no input frontier can reach it any more).

Keys are routed to workers through bins (:mod:`pytimely.dataflow.operators.binned`): by a fixed table, or
by one that a control stream of moves changes at timestamps. The state of a key at a time lives only on
the owner of its bin at that time, so a move needs no state to be shipped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from pytimely import container
from pytimely.dataflow.bins import DEFAULT_BINS
from pytimely.dataflow.capability import InputCapability
from pytimely.dataflow.operators.binned import Key, bin_routes
from pytimely.dataflow.operators.generic import Notificator, pact_for

if TYPE_CHECKING:
    from pytimely.dataflow.ports import InputPort, OutputPort
    from pytimely.dataflow.stream import Stream

__all__ = ["count", "count_by", "fold_by", "reduce_by", "sum_by"]

Absorb = Callable[[Any, Any], None]


def _binned(
    stream: Stream[Any], name: str, key: Key, control: Stream[Any] | None, bins: int
) -> tuple[Stream[Any], Any]:
    """``stream`` and the pact routing its records to the owners of their keys' bins."""
    routes, _ = bin_routes([stream], [key], name, control, bins)
    return routes[0]


def _keyed(
    source: tuple[Stream[Any], Any],
    name: str,
    new_state: Callable[[], Any],
    absorb: Absorb,
    finish: Callable[[Any], Any],
) -> Stream[Any]:
    """Take ``source`` (a stream and its pact), fold each time's batches into one state and send
    ``finish(state)`` once the time is complete."""
    stream = source[0]
    scope = stream.scope
    op = scope._operator(name, [source], 1)
    op.notify = True
    port: InputPort[Any, Any] = op.inputs[0]
    out: OutputPort[Any, Any] = op.outputs[0]
    states: dict[Any, Any] = {}
    notificator: Notificator[Any] = Notificator()

    def logic() -> None:
        cap: InputCapability[Any]
        for cap, batch in port:
            t = cap.time
            state = states.get(t)
            if state is None:
                state = states[t] = new_state()
                notificator.notify_at(cap.retain())
            absorb(state, batch)
        for held in notificator.ready(port.frontier):
            # A result is one new tuple per key, built inside the worker's step: a burst (see pytimely.collector).
            result = finish(states.pop(held.time))
            if len(result):
                out.give(held, result)
            held.drop()

    op.logic = logic
    return scope.stream(out)


def count_by(
    stream: Stream[Any],
    key: Callable[[Any], Any] | None,
    name: str,
    control: Stream[Any] | None = None,
    bins: int = DEFAULT_BINS,
) -> Stream[Any]:
    """``(key, count)`` for every key seen at each time (the record itself when ``key`` is None)."""

    def finish(state: Counter[Any]) -> list[tuple[Any, int]]:
        return list(state.items())

    def absorb(state: Counter[Any], batch: Any) -> None:
        if type(batch) is list:
            state.update(batch if key is None else map(key, batch))
        elif key is None and (counted := _distinct_counts(batch)) is not None:
            for k, n in counted:
                state[k] += n
        else:
            records = container.records(batch)
            state.update(records if key is None else map(key, records))

    if stream.scope.peers == 1:
        return _keyed(_binned(stream, name, key, control, bins), name, Counter, absorb, finish)

    # Several workers: each counts its own records per time first, so every distinct key crosses to its
    # owner once per worker and time, not once per record (a combiner; counts add up exactly).
    def absorb_pairs(state: Counter[Any], pairs: list[tuple[Any, int]]) -> None:
        if not state:
            # The first batch of a time goes in at C speed when its keys are distinct, as one worker's are.
            first = dict(pairs)
            if len(first) == len(pairs):
                dict.update(state, first)
                return
        for k, n in pairs:
            state[k] += n

    # The local stage carries the user's name: an error in ``key`` belongs to their operator.
    local = _keyed((stream, None), name, Counter, absorb, finish)
    return _keyed(_binned(local, name, itemgetter(0), control, bins), name, Counter, absorb_pairs, finish)


def sum_by(
    stream: Stream[Any],
    key: Callable[[Any], Any],
    value: Callable[[Any], Any],
    name: str,
    control: Stream[Any] | None = None,
    bins: int = DEFAULT_BINS,
) -> Stream[Any]:
    """``(key, total of value(record))`` per key and time."""

    def absorb(state: dict[Any, Any], batch: Any) -> None:
        get = state.get
        for record in container.records(batch):
            k = key(record)
            state[k] = get(k, 0) + value(record)

    return _keyed(_binned(stream, name, key, control, bins), name, dict, absorb, lambda d: list(d.items()))


def fold_by(
    stream: Stream[Any],
    key: Callable[[Any], Any],
    init: Callable[[], Any],
    step: Callable[[Any, Any], Any],
    name: str,
    control: Stream[Any] | None = None,
    bins: int = DEFAULT_BINS,
) -> Stream[Any]:
    """``(key, accumulator)`` per key and time, folding ``step(acc, record)`` from ``init()``."""

    def absorb(state: dict[Any, Any], batch: Any) -> None:
        for record in container.records(batch):
            k = key(record)
            acc = state[k] if k in state else init()
            state[k] = step(acc, record)

    return _keyed(_binned(stream, name, key, control, bins), name, dict, absorb, lambda d: list(d.items()))


def reduce_by(
    stream: Stream[Any],
    key: Callable[[Any], Any],
    reducer: Callable[[Any, list[Any]], Any],
    name: str,
    control: Stream[Any] | None = None,
    bins: int = DEFAULT_BINS,
) -> Stream[Any]:
    """``(key, reducer(key, records))`` per key and time, with all of the time's records for the key."""

    def absorb(state: dict[Any, list[Any]], batch: Any) -> None:
        for record in container.records(batch):
            k = key(record)
            group = state.get(k)
            if group is None:
                state[k] = [record]
            else:
                group.append(record)

    return _keyed(
        _binned(stream, name, key, control, bins),
        name,
        dict,
        absorb,
        lambda d: [(k, reducer(k, v)) for k, v in d.items()],
    )


def count(stream: Stream[Any], name: str) -> Stream[int]:
    """The number of records at each time, summed over workers, sent by worker 0."""

    def absorb(state: list[int], batch: Any) -> None:
        state[0] += container.length(batch)

    def partial() -> list[int]:
        return [0]

    local = _keyed_local(stream, f"{name}.local", partial, absorb, lambda s: s)

    def add(state: list[int], batch: Any) -> None:
        state[0] += sum(batch)

    return _keyed((local, pact_for(lambda _: 0)), f"{name}.total", partial, add, lambda s: s)


def _distinct_counts(batch: Any) -> list[tuple[Any, int]] | None:
    """``(record, count)`` per distinct record of a one-column batch, counted on its column; None otherwise."""
    import numpy as np

    kind = container.kind_of(batch)
    column = kind.numeric(batch, None)
    if column is not None:
        distinct, counts = np.unique(column, return_counts=True)
        values: list[Any] = distinct.tolist()
    else:
        encoded = kind.encoded(batch, None)
        if encoded is None:
            return None
        codes, values = encoded
        counts = np.bincount(codes, minlength=len(values))
    if kind.name == "arrow":  # an Arrow row is a tuple, even of one column
        values = [(v,) for v in values]
    return list(zip(values, counts.tolist(), strict=True))


def _keyed_local(
    stream: Stream[Any],
    name: str,
    new_state: Callable[[], Any],
    absorb: Absorb,
    finish: Callable[[Any], Any],
) -> Stream[Any]:
    """Like :func:`_keyed` without the exchange: each worker aggregates what it has."""
    scope = stream.scope
    op = scope._operator(name, [(stream, None)], 1)
    op.notify = True
    port = op.inputs[0]
    out = op.outputs[0]
    states: dict[Any, Any] = {}
    notificator: Notificator[Any] = Notificator()

    def logic() -> None:
        for cap, batch in port:
            state = states.get(cap.time)
            if state is None:
                state = states[cap.time] = new_state()
                notificator.notify_at(cap.retain())
            absorb(state, batch)
        for held in notificator.ready(port.frontier):
            out.give(held, finish(states.pop(held.time)))
            held.drop()

    op.logic = logic
    return scope.stream(out)
