"""``collect``: the records of each time (or of each window of epochs) gathered into one, per key or in all.

Keyed (records are ``(key, value)`` pairs, or rows of a two-column numpy or Arrow batch): ``(key, [values])`` per
key that had records, sent from the key's worker (a columnar batch is grouped by key at once). Unkeyed: one record
holding everything, sent from worker 0 — a numpy array when every batch was numpy (``np.concatenate``, no
Python call per record), an Arrow table when every batch was Arrow, else a list. With ``every=n`` (integer
epochs) the window ``[k*n, (k+1)*n)`` is gathered and sent at time ``(k+1)*n - 1`` once the frontier has
passed it; without, each time on its own. Order within a collection is the order of arrival, which varies
with the worker count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytimely import container
from pytimely.dataflow.channels import Exchange
from pytimely.dataflow.operators.fields import key_route
from pytimely.dataflow.operators.generic import Notificator
from pytimely.errors import InvalidArgument

if TYPE_CHECKING:
    from pytimely.dataflow.capability import InputCapability
    from pytimely.dataflow.stream import Stream

__all__ = ["collect", "gather"]


def _to_zero(batch: Any) -> Any:
    import numpy as np

    return np.zeros(container.length(batch), dtype=np.int64)


def gather(batches: list[Any]) -> Any:
    """One collection of ``batches``: a numpy array, an Arrow table, or a list, as the batches allow."""
    return container.concat(batches)


def _group(state: dict[Any, list[Any]], batch: Any) -> None:
    """Add a batch of ``(key, value)`` pairs to ``state``: a columnar batch is split by key at once."""
    kind = container.kind_of(batch)
    if kind.columnar:
        keys = kind.numeric(batch, 0)
        distinct: list[Any] | None = None
        if keys is None:
            encoded = kind.encoded(batch, 0)
            if encoded is not None:
                keys, distinct = encoded
        if keys is not None:
            _group_columns(state, keys, distinct, kind, batch)
            return
    for k, v in kind.records(batch):
        group = state.get(k)
        if group is None:
            state[k] = [v]
        else:
            group.append(v)


def _group_columns(state: dict[Any, list[Any]], keys: Any, distinct: list[Any] | None, kind: Any, batch: Any) -> None:
    """Group by a key column (numbers, or codes into ``distinct``): one sort, then one Python step per key."""
    from pytimely.dataflow.operators.grouping import group_starts

    order, starts = group_starts(keys)
    numbers = kind.numeric(batch, 1)
    if numbers is not None:
        ordered = numbers[order].tolist()
    else:
        values = kind.values(batch, 1)
        ordered = [values[j] for j in order.tolist()]
    firsts = keys[order[starts]].tolist()
    bounds = [*starts.tolist(), len(ordered)]
    for i, k in enumerate(firsts):
        if distinct is not None:
            k = distinct[k]
        chunk = ordered[bounds[i] : bounds[i + 1]]
        group = state.get(k)
        if group is None:
            state[k] = chunk
        else:
            group.extend(chunk)


def collect(stream: Stream[Any], keyed: bool, every: int | None, name: str) -> Stream[Any]:
    """Gather each time's (or window's) records, per key or in all; see the module doc."""
    if every is not None and (type(every) is not int or every < 1):
        raise InvalidArgument(f"{name}: every must be a positive int (epochs per window) or None, got {every!r}")
    scope = stream.scope
    route = key_route(0) if keyed else _to_zero
    op = scope._operator(name, [(stream, Exchange(route, vectorized=True))], 1)
    op.notify = True
    port, out = op.inputs[0], op.outputs[0]
    states: dict[Any, Any] = {}
    notificator: Notificator[Any] = Notificator()

    def window_of(cap: InputCapability[Any]) -> Any:
        t = cap.time
        if every is None:
            return t
        if type(t) is not int:
            raise InvalidArgument(f"{name}: every= groups integer epochs; time {t!r} is not one")
        return (t // every + 1) * every - 1

    def logic() -> None:
        for cap, batch in port:
            w = window_of(cap)
            if w not in states:
                states[w] = {} if keyed else []
                notificator.notify_at(cap.delayed(w) if w != cap.time else cap.retain())
            if keyed:
                _group(states[w], batch)
            else:
                states[w].append(batch)
        for held in notificator.ready(port.frontier):
            state = states.pop(held.time)
            if keyed:
                out.give(held, list(state.items()))
            else:
                out.give(held, [gather(state)])
            held.drop()

    op.logic = logic
    return scope.stream(out)
