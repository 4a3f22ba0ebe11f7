"""Joining two keyed streams per timestamp.

Both sides are routed by the bins of their keys (:mod:`pytimely.dataflow.operators.binned`); a time's
state for a key lives only on the owner of the key's bin at that time, so a move ships no state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.dataflow.bins import DEFAULT_BINS
from pytimely.dataflow.operators.binned import bin_routes
from pytimely.order import sort_key

if TYPE_CHECKING:
    from pytimely.dataflow.stream import Stream

__all__ = ["join"]


def _key(record: Any) -> Any:
    return record[0]


def join(
    left: Stream[Any],
    right: Stream[Any],
    name: str,
    control: Stream[Any] | None = None,
    bins: int = DEFAULT_BINS,
) -> Stream[Any]:
    """``(key, (l, r))`` for every ``(key, l)`` and ``(key, r)`` at the same time.

    Matches are sent as soon as both sides have arrived; a time's state is
    released once both input frontiers have passed it.
    """
    scope = left.scope
    inputs, _ = bin_routes([left, right], [_key, _key], name, control, bins)
    op = scope._operator(name, inputs, 1)
    op.notify = True
    in1, in2, out = op.inputs[0], op.inputs[1], op.outputs[0]
    state1: dict[Any, dict[Any, list[Any]]] = {}
    state2: dict[Any, dict[Any, list[Any]]] = {}

    State = dict[Any, dict[Any, list[Any]]]

    def absorb(port: Any, mine: State, theirs: State, flip: bool) -> None:
        for cap, batch in port:
            t = cap.time
            own = mine.setdefault(t, {})
            other = theirs.get(t, {})
            matches: list[Any] = []
            for record in container.records(batch):
                k, v = record
                own.setdefault(k, []).append(v)
                partners = other.get(k)
                if partners:
                    if flip:
                        matches.extend((k, (w, v)) for w in partners)
                    else:
                        matches.extend((k, (v, w)) for w in partners)
            if matches:
                out.give(cap, matches)

    def logic() -> None:
        absorb(in1, state1, state2, False)
        absorb(in2, state2, state1, True)
        f1, f2 = in1.frontier, in2.frontier
        for state in (state1, state2):
            for t in sorted(state, key=sort_key):
                if not f1.less_equal(t) and not f2.less_equal(t):
                    del state[t]

    op.logic = logic
    return scope.stream(out)
