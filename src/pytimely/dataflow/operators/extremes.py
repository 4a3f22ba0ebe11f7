"""``min_final``, ``max_final``, ``first_final``, ``last_final``: one value per key over the whole stream,
sent once the input has ended.

Records are ``(key, value)`` pairs by default (``key=0, value=1``); ``key`` and ``value`` may be functions of
the record or column indexes, and ``value=None`` takes the whole record. Two-dimensional numeric numpy batches
are reduced by key without a Python call per row (:mod:`~pytimely.dataflow.operators.grouping`), so Python
runs once per key and batch, not once per record. "First" is the value at the earliest timestamp and "last" at
the latest; among records of one time, the order in which they reached the key's worker decides (which is
only fixed when one worker sends them). Each key's result is sent at the latest time its records had.

The per-key state is declared (:mod:`pytimely.dataflow.state`, a :class:`~pytimely.dataflow.state.KeyedState`
of ``(best, its time, latest time)``), and records are routed by the bins of their keys: with recovery on, a
run restored on any number of workers holds each key where its records arrive, and holds capabilities at the
times its restored keys' results go out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import pytimely.container as container
from pytimely.dataflow.bins import DEFAULT_BINS
from pytimely.dataflow.capability import Capability
from pytimely.dataflow.operators.binned import bin_exchange
from pytimely.dataflow.operators.fields import Field, check, column, column_errors, reader, rows
from pytimely.dataflow.state import KeyedState, declare
from pytimely.errors import InvalidArgument
from pytimely.order import sort_key

if TYPE_CHECKING:
    from pytimely.dataflow.stream import Stream

__all__ = ["Extreme", "final"]

Extreme = Literal["min", "max", "first", "last"]


def _better(kind: Extreme) -> Callable[[Any, Any, Any, Any], bool]:
    """Whether ``(new value, new time)`` replaces ``(held value, held time)``."""
    if kind == "min":
        return lambda v, t, held, ht: bool(v < held)
    if kind == "max":
        return lambda v, t, held, ht: bool(v > held)
    if kind == "first":
        return lambda v, t, held, ht: bool(t <= ht and t != ht)
    return lambda v, t, held, ht: bool(ht <= t)


class _Extremes:
    """One worker's best value, its time and the latest time per key, and capabilities at the times results go out."""

    def __init__(self, kind: Extreme, key: Field, value: Field) -> None:
        self.kind = kind
        self.key_field, self.value_field = check(key, "key"), check(value, "value")
        self.better = _better(kind)
        self.keyed: KeyedState[Any, tuple[Any, Any, Any]] = KeyedState(DEFAULT_BINS)
        """Key -> ``(best value, its time, the key's latest time)``: the declared state."""
        self.caps: dict[Any, Capability[Any]] = {}
        self.prune_at = 16

    def absorb(self, t: Any, batch: Any) -> None:
        """Fold one batch at time ``t``."""
        pairs = self._reduced(batch)
        if pairs is None:
            get_key, get_value = reader(batch, self.key_field), reader(batch, self.value_field)
            with column_errors(batch, self.key_field, self.value_field):
                pairs = self._pairs(batch, get_key, get_value)
        entries, better = self.keyed.data, self.better
        keys: list[Any] = []
        added: list[Any] = []
        for k, v in pairs:
            keys.append(k)
            held = entries.get(k)
            if held is None:
                entries[k] = (v, t, t)
                added.append(k)
                continue
            best, when, last = held
            if better(v, t, best, when):
                best, when = v, t
            if last <= t and last != t:
                last = t
            entries[k] = (best, when, last)
        self.keyed.touch_batch(keys, added)

    @staticmethod
    def _pairs(batch: Any, get_key: Any, get_value: Any) -> list[tuple[Any, Any]]:
        return [
            (r if get_key is None else get_key(r), r if get_value is None else get_value(r)) for r in rows(batch)
        ]

    def _reduced(self, batch: Any) -> list[tuple[Any, Any]] | None:
        """The batch's own best ``(key, value)`` per key, computed on columns; None when it needs records."""
        if type(batch) is list:
            batch = self._as_array(batch)
            if batch is None:
                return None
        if self.value_field is None or callable(self.key_field):
            return None
        values = column(batch, self.value_field)
        if values is None or values.dtype.kind not in "iuf":
            return None
        from pytimely.dataflow.operators.grouping import reduce_by_key

        keys = column(batch, self.key_field)
        if keys is not None:
            ks, vs = reduce_by_key(keys, values, self.kind)
            return list(zip(ks.tolist(), vs.tolist(), strict=True))
        encoded = container.encoded(batch, self.key_field)
        if encoded is None:
            return None
        codes, distinct = encoded
        ks, vs = reduce_by_key(codes, values, self.kind)
        return list(zip([distinct[k] for k in ks.tolist()], vs.tolist(), strict=True))

    def _as_array(self, batch: list[Any]) -> Any:
        """A list of equal-length tuples of ints as a 2-d array (one C loop), when the fields are columns; else None."""
        fields = (self.key_field, self.value_field)
        if not batch or type(batch[0]) is not tuple or not all(type(f) is int for f in fields):
            return None
        import numpy as np

        try:
            array = np.array(batch)
        except (ValueError, OverflowError):  # ragged rows
            return None
        # Only all-int rows: a float among them would turn every key into a float.
        return array if array.ndim == 2 and array.dtype.kind in "iu" else None

    def prune(self) -> None:
        """Drop capabilities at times no key's result will be sent at (they would only hold back the frontier)."""
        needed = {last for _, _, last in self.keyed.data.values()}
        for t in [t for t in self.caps if t not in needed]:
            self.caps.pop(t).drop()


def final(stream: Stream[Any], kind: Extreme, key: Field, value: Field, name: str) -> Stream[Any]:
    """``(key, extreme)`` per key once the input has ended; see the module doc."""
    if kind not in ("min", "max", "first", "last"):
        raise InvalidArgument(f"{name}: kind must be 'min', 'max', 'first' or 'last', got {kind!r}")
    scope = stream.scope
    op = scope.add_operator(name, [(stream, bin_exchange(key, DEFAULT_BINS))], 1)
    op.notify = True
    op.initial_caps = True
    port, out = op.inputs[0], op.outputs[0]
    state = _Extremes(kind, key, value)
    declare(op, "extremes", state.keyed, layout=f"{kind}_final/1")
    # A capability at the scope's minimum until the first step: a restored copy turns it into capabilities at
    # the times its restored keys' results go out.
    initial = [Capability(scope.minimum, out, counted=True)]

    def logic() -> None:
        if initial:
            start = initial.pop()
            for t in {last for _, _, last in state.keyed.data.values()}:
                state.caps[t] = start.delayed(t)
            start.drop()
        for cap, batch in port:
            t = cap.time
            if t not in state.caps:
                state.caps[t] = cap.retain()
            state.absorb(t, batch)
        if len(state.caps) > state.prune_at:
            state.prune()
            state.prune_at = 2 * len(state.caps) + 16
        if port.frontier.is_empty() and state.caps:
            by_time: dict[Any, list[tuple[Any, Any]]] = {}
            for k, (v, _, last) in state.keyed.data.items():
                by_time.setdefault(last, []).append((k, v))
            for t in sorted(by_time, key=sort_key):
                out.give(state.caps[t], by_time[t])
            for held in state.caps.values():
                held.drop()
            state.caps.clear()
            state.keyed.clear()

    op.logic = logic
    return scope.stream(out)
