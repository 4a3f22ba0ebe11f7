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

import pytimely.container as container
from pytimely.container.kind import Field
from pytimely.dataflow.bins import DEFAULT_BINS
from pytimely.dataflow.capability import InputCapability
from pytimely.dataflow.operators.binned import Key, bin_routes
from pytimely.dataflow.operators.fields import check, column_errors, reader
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
    op = scope.add_operator(name, [source], 1)
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
    key: Key,
    name: str,
    control: Stream[Any] | None = None,
    bins: int = DEFAULT_BINS,
) -> Stream[Any]:
    """``(key, count)`` for every key seen at each time (the record itself when ``key`` is None).

    ``key`` may be a column (position or name): numpy and Arrow batches are then counted on the column, with
    Python running once per distinct key, not once per record.
    """
    check(key, "key")

    def absorb(state: Counter[Any], batch: Any) -> None:
        if type(batch) is list:
            with column_errors(batch, key):
                state.update(batch if key is None else map(_function(key), batch))
        elif not callable(key) and (counted := _column_counts(batch, key)) is not None:
            for k, n in counted:
                state[k] += n
        else:
            records = container.records(batch)
            get = reader(batch, key)
            with column_errors(batch, key):
                state.update(records if get is None else map(get, records))

    return _combined(stream, name, key, control, bins, Counter, absorb)


def sum_by(
    stream: Stream[Any],
    key: Key,
    value: Key,
    name: str,
    control: Stream[Any] | None = None,
    bins: int = DEFAULT_BINS,
) -> Stream[Any]:
    """``(key, total of value(record))`` per key and time; columns of numpy and Arrow batches are summed at once."""
    check(key, "key")
    check(value, "value")

    def absorb(state: dict[Any, Any], batch: Any) -> None:
        get = state.get
        if type(batch) is not list and not callable(key) and not callable(value):
            summed = _column_sums(batch, key, value)
            if summed is not None:
                for k, v in summed:
                    state[k] = get(k, 0) + v
                return
        get_key, get_value = reader(batch, key), reader(batch, value)
        with column_errors(batch, key, value):
            for record in container.records(batch):
                k = record if get_key is None else get_key(record)
                state[k] = get(k, 0) + (record if get_value is None else get_value(record))

    return _combined(stream, name, key, control, bins, dict, absorb)


def _combined(
    stream: Stream[Any],
    name: str,
    key: Key,
    control: Stream[Any] | None,
    bins: int,
    new_state: Callable[[], Any],
    absorb: Absorb,
) -> Stream[Any]:
    """A keyed aggregation whose partial results add up: ``(key, total)`` per key and time.

    With several workers each one aggregates its own records per time first, so every distinct key crosses to
    its owner once per worker and time, not once per record (a combiner), and the owner adds the partials.
    """
    if stream.scope.peers == 1:
        return _keyed(_binned(stream, name, key, control, bins), name, new_state, absorb, _items)

    def absorb_pairs(state: dict[Any, Any], pairs: list[tuple[Any, Any]]) -> None:
        if not state:
            # The first batch of a time goes in at C speed when its keys are distinct, as one worker's are.
            first = dict(pairs)
            if len(first) == len(pairs):
                dict.update(state, first)
                return
        get = state.get
        for k, n in pairs:
            state[k] = get(k, 0) + n

    # The local stage carries the user's name: an error in ``key`` belongs to their operator.
    local = _keyed((stream, None), name, new_state, absorb, _items)
    return _keyed(_binned(local, name, itemgetter(0), control, bins), name, dict, absorb_pairs, _items)


def _items(state: dict[Any, Any]) -> list[tuple[Any, Any]]:
    return list(state.items())


def _function(key: Key) -> Callable[[Any], Any]:
    """A key that is a column, as a function of a plain record."""
    return key if callable(key) else itemgetter(key)


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


def _codes(kind: Any, batch: Any, field: Field) -> tuple[Any, list[Any]] | None:
    """``(codes, distinct keys)`` of a key column (numbers by one sort, others by dictionary encoding)."""
    import numpy as np

    column = kind.numeric(batch, field)
    if column is None:
        encoded: tuple[Any, list[Any]] | None = kind.encoded(batch, field)
        return encoded
    distinct, codes = np.unique(column, return_inverse=True)
    return codes.astype(np.int64, copy=False), distinct.tolist()


def _column_counts(batch: Any, field: Field) -> list[tuple[Any, int]] | None:
    """``(key, count)`` per distinct key of a column of a columnar batch; None when the column cannot be read."""
    import numpy as np

    kind = container.kind_of(batch)
    coded = _codes(kind, batch, field)
    if coded is None:
        return None
    codes, keys = coded
    if field is None and kind.name == "arrow":  # an Arrow record is a tuple, even of one column
        keys = [(k,) for k in keys]
    return list(zip(keys, np.bincount(codes, minlength=len(keys)).tolist(), strict=True))


def _column_sums(batch: Any, key: Field, value: Field) -> list[tuple[Any, Any]] | None:
    """``(key, sum)`` per distinct key of a columnar batch, summed in row order; None when not all numbers."""
    import numpy as np

    kind = container.kind_of(batch)
    values = kind.numeric(batch, value)
    if values is None or key is None:
        return None
    coded = _codes(kind, batch, key)
    if coded is None:
        return None
    codes, keys = coded
    if values.dtype.kind == "b":
        values = values.astype(np.int64)
    sums = np.zeros(len(keys), dtype=values.dtype)
    np.add.at(sums, codes, values)  # unbuffered, in row order: the sums a loop over the records gives
    return list(zip(keys, sums.tolist(), strict=True))


def _keyed_local(
    stream: Stream[Any],
    name: str,
    new_state: Callable[[], Any],
    absorb: Absorb,
    finish: Callable[[Any], Any],
) -> Stream[Any]:
    """Like :func:`_keyed` without the exchange: each worker aggregates what it has."""
    scope = stream.scope
    op = scope.add_operator(name, [(stream, None)], 1)
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
