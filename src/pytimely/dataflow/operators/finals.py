"""``count_final``, ``fold_final``, ``reduce_final``: one result per key over the whole stream, sent once the
input has ended (Bytewax's operators of the same names).

``count_final(key)`` counts records by ``key`` (a function, a column, or ``None``: the record itself); numpy and
Arrow batches are counted on the key column at once. ``fold_final(init, fold)`` folds each key's values
(``acc = fold(acc, value)`` from ``init()``) and ``reduce_final(f)`` reduces them, over ``(key, value)`` pairs
by default (``key=0, value=1``; ``value=None`` takes the whole record). Values are folded in the order they
reach the key's worker: in timestamp order only where the input's times are complete before later ones come,
and within one time in arrival order. Each key's result is sent at the latest time its records had; until the
input ends the operator holds capabilities at those times (and only those).

Each key's accumulator and latest time are declared state (:mod:`pytimely.dataflow.state`, two
:class:`~pytimely.dataflow.state.KeyedState`), and records are routed by the bins of their keys: with recovery
on, a run restored on any number of workers holds each key where its records arrive, with capabilities at the
times its restored keys' results go out (as ``min_final`` … ``last_final`` do).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.dataflow.bins import DEFAULT_BINS
from pytimely.dataflow.capability import Capability
from pytimely.dataflow.operators.binned import bin_exchange
from pytimely.dataflow.operators.fields import Field, check, column_errors, reader, rows
from pytimely.dataflow.state import KeyedState, declare
from pytimely.errors import InvalidArgument
from pytimely.order import sort_key

if TYPE_CHECKING:
    from pytimely.dataflow.stream import Stream

__all__ = ["count_final", "fold_final", "reduce_final"]

_MISSING: Any = object()


class _Final:
    """One worker's accumulator and latest time per key, and capabilities at the times results go out."""

    def __init__(self) -> None:
        self.declared_accs: KeyedState[Any, Any] = KeyedState(DEFAULT_BINS)
        self.declared_last: KeyedState[Any, Any] = KeyedState(DEFAULT_BINS)
        self.accs: dict[Any, Any] = self.declared_accs.data
        """Per key: its accumulator (declared state, with ``last``)."""
        self.last: dict[Any, Any] = self.declared_last.data
        """Per key: the latest time it had a record at, where its result goes out."""
        self.caps: dict[Any, Capability[Any]] = {}
        self.prune_at = 16

    def seen(self, t: Any, keys: list[Any]) -> None:
        """Note that ``keys`` had a record at ``t`` (and that their accumulators were written)."""
        last = self.last
        came: list[Any] = []
        for k in keys:
            held = last.get(k)
            if held is None:
                last[k] = t
                came.append(k)
            elif held <= t and held != t:
                last[k] = t
        self.declared_accs.touch_batch(keys, came)
        self.declared_last.touch_batch(keys, came)

    def prune(self) -> None:
        """Drop capabilities at times no key's result will be sent at."""
        needed = set(self.last.values())
        for t in [t for t in self.caps if t not in needed]:
            self.caps.pop(t).drop()
        self.prune_at = 2 * len(self.caps) + 16


def _final(
    stream: Stream[Any],
    key: Field,
    name: str,
    absorb: Callable[[_Final, Any], list[Any]],
    finish: Callable[[Any], Any],
    kind: str,
) -> Stream[Any]:
    """``(key, finish(acc))`` per key once the input has ended; ``absorb(state, batch)`` gives the batch's keys."""
    scope = stream.scope
    op = scope.add_operator(name, [(stream, bin_exchange(key, DEFAULT_BINS))], 1)
    op.notify = True
    op.initial_caps = True
    port, out = op.inputs[0], op.outputs[0]
    state = _Final()
    declare(op, "accumulators", state.declared_accs, layout=f"{kind}/1")
    declare(op, "latest", state.declared_last, layout="final_latest/1")
    # A capability at the scope's minimum until the first step: a restored copy turns it into capabilities at
    # the times its restored keys' results go out.
    initial = [Capability(scope.minimum, out, counted=True)]

    def logic() -> None:
        if initial:
            start = initial.pop()
            for t in set(state.last.values()):
                state.caps[t] = start.delayed(t)
            start.drop()
        for cap, batch in port:
            t = cap.time
            if t not in state.caps:
                state.caps[t] = cap.retain()
            state.seen(t, absorb(state, batch))
        if len(state.caps) > state.prune_at:
            state.prune()
        if port.frontier.is_empty() and state.caps:
            by_time: dict[Any, list[tuple[Any, Any]]] = {}
            for k, acc in state.accs.items():
                by_time.setdefault(state.last[k], []).append((k, finish(acc)))
            for t in sorted(by_time, key=sort_key):
                out.give(state.caps[t], by_time[t])
            for held in state.caps.values():
                held.drop()
            state.caps.clear()
            state.declared_accs.clear()
            state.declared_last.clear()

    op.logic = logic
    return scope.stream(out)


def count_final(stream: Stream[Any], key: Field, name: str) -> Stream[Any]:
    """``(key, count)`` per key over the whole stream, once the input has ended."""
    from pytimely.dataflow.operators.reduce import _column_counts

    check(key, "key")

    def absorb(state: _Final, batch: Any) -> list[Any]:
        accs = state.accs
        get = accs.get
        if not callable(key) and container.kind_of(batch).columnar:
            counted = _column_counts(batch, key)
            if counted is not None:
                for k, n in counted:
                    accs[k] = get(k, 0) + n
                return [k for k, _ in counted]
        records = rows(batch)
        read = reader(batch, key)
        with column_errors(batch, key):
            keys = list(records) if read is None else list(map(read, records))
        for k in keys:
            accs[k] = get(k, 0) + 1
        return keys

    return _final(stream, key, name, absorb, lambda acc: acc, "count_final")


def _values(key: Field, value: Field, name: str) -> Callable[[Any], list[tuple[Any, Any]]]:
    check(key, "key")
    check(value, "value")

    def pairs(batch: Any) -> list[tuple[Any, Any]]:
        records = rows(batch)
        get_key, get_value = reader(batch, key), reader(batch, value)
        with column_errors(batch, key, value):
            return [(r if get_key is None else get_key(r), r if get_value is None else get_value(r)) for r in records]

    return pairs


def fold_final(
    stream: Stream[Any],
    init: Callable[[], Any],
    fold: Callable[[Any, Any], Any],
    key: Field,
    value: Field,
    name: str,
) -> Stream[Any]:
    """``(key, acc)`` per key once the input has ended, ``acc = fold(acc, value)`` from ``init()``."""
    if not callable(init) or not callable(fold):
        raise InvalidArgument(f"{name!r}: fold_final takes functions init() and fold(acc, value)")
    pairs = _values(key, value, name)

    def absorb(state: _Final, batch: Any) -> list[Any]:
        accs = state.accs
        got = pairs(batch)
        for k, v in got:
            acc = accs.get(k, _MISSING)
            accs[k] = fold(init() if acc is _MISSING else acc, v)
        return [k for k, _ in got]

    return _final(stream, key, name, absorb, lambda acc: acc, "fold_final")


def reduce_final(stream: Stream[Any], f: Callable[[Any, Any], Any], key: Field, value: Field, name: str) -> Stream[Any]:
    """``(key, f(f(v1, v2), v3)...)`` per key once the input has ended."""
    if not callable(f):
        raise InvalidArgument(f"{name!r}: reduce_final takes a function f(acc, value), got {f!r}")
    pairs = _values(key, value, name)

    def absorb(state: _Final, batch: Any) -> list[Any]:
        accs = state.accs
        got = pairs(batch)
        for k, v in got:
            acc = accs.get(k, _MISSING)
            accs[k] = v if acc is _MISSING else f(acc, v)
        return [k for k, _ in got]

    return _final(stream, key, name, absorb, lambda acc: acc, "reduce_final")
