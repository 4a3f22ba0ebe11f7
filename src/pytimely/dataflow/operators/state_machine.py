"""A state machine per key: state kept across timestamps, records applied in timestamp order.

``stream.state_machine(fold, key=None, control=None, bins=256)`` keeps one state per key (``None`` until
the key is first seen) and, for every record, calls ``fold(key, value, state)``, which returns
``(new_state, outputs)``: the key's next state (``None`` forgets the key) and an iterable of records to
emit at the record's time (or ``None``). Records reach the owner of their key's bin; each time's records
are applied once the time is complete, times in order, so a key's records are folded in timestamp order
(within one time in the order they arrived). With a control stream of moves, the state of every key of
a moving bin goes to the bin's new owner; see :mod:`pytimely.dataflow.operators.binned` for why it is
shipped neither too early nor too late.

The per-key states are declared state (:class:`~pytimely.dataflow.state.KeyedState` ``"states"``): with
recovery on, the runtime snapshots the bins that changed at epoch boundaries and restores them before the
first step, on any number of workers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.dataflow.operators.binned import FIRST_COLUMN, KeyedHolder, Router, hold_state, migrating_routes
from pytimely.dataflow.operators.generic import Notificator
from pytimely.dataflow.state import KeyedState, declare

if TYPE_CHECKING:
    from pytimely.dataflow.ports import InputPort
    from pytimely.dataflow.stream import Stream

__all__ = ["state_machine"]

Fold = Callable[[Any, Any, Any], tuple[Any, Iterable[Any] | None]]
InspectState = Callable[[int, Any, Mapping[Any, Any]], None]


class _Held(KeyedHolder):
    """One worker's per-key states and the records waiting for their time to complete."""

    def __init__(self, ports: list[InputPort[Any, Any]], router: Router | None, keyed: KeyedState[Any, Any]) -> None:
        super().__init__(ports, router, keyed, {})
        self.states: dict[Any, Any] = keyed.data

    def take_records(self, port: InputPort[Any, Any], notificator: Notificator[Any]) -> None:
        """Queue the records that arrived by their time, asking to hear when each time is complete."""
        pending = self.pending
        for cap, batch in port:
            t = cap.time
            waiting = pending.get(t)
            if waiting is None:
                waiting = pending[t] = []
                notificator.notify_at(cap.retain())
            waiting.extend(container.records(batch))


def state_machine(
    stream: Stream[Any],
    fold: Fold,
    key: Callable[[Any], Any] | None,
    control: Stream[Any] | None,
    bins: int,
    name: str,
    inspect_state: InspectState | None = None,
    states: dict[Any, Any] | None = None,
) -> Stream[Any]:
    """Fold each key's records into its state in timestamp order, emitting what ``fold`` returns.

    Records are ``(key, value)`` pairs (or rows of a numpy or Arrow batch, routed by a vectorised lookup),
    or any record when ``key`` extracts its key (the value is then the record).
    ``inspect_state(worker, time, states)``, if given, sees this worker's states after each time.
    ``states``, if given, is the dict the per-key states live in (the job may read it, at the end say; with
    recovery on it holds the restored states before the first step).
    """
    scope = stream.scope
    key_of: Callable[[Any], Any] = itemgetter(0) if key is None else key
    value_of: Callable[[Any], Any] = itemgetter(1) if key is None else _same
    column = FIRST_COLUMN if key is None else None
    inputs, router = migrating_routes([stream], [key_of], name, control, bins, columns=[column])
    op = scope.add_operator(name, inputs, 1)
    op.notify = True
    ports: list[InputPort[Any, Any]] = list(op.inputs)
    data = ports[0]
    state_in = ports[1] if router is not None else None
    out = op.outputs[0]
    keyed: KeyedState[Any, Any] = KeyedState(bins, data=states)
    declare(op, "states", keyed, layout="state_machine/1")
    held = _Held(ports, router, keyed)
    hold_state(router, held, scope.subgraph, op.index)
    states, pending = held.states, held.pending
    notificator: Notificator[Any] = Notificator()
    worker = scope.index

    def logic() -> None:
        if state_in is not None:
            held.take_shipped(state_in)
        held.take_records(data, notificator)
        for done in notificator.ready(*(p.frontier for p in ports)):
            t = done.time
            op.time = t  # errors in ``fold`` name the time being applied
            emitted = _apply(pending.pop(t), fold, key_of, value_of, states, keyed)
            if emitted:
                out.give(done, emitted)
            done.drop()
            if inspect_state is not None:
                inspect_state(worker, t, states)
        if router is not None and router.waiting:
            router.activate()

    op.logic = logic
    return scope.stream(out)


def _apply(
    records: list[Any],
    fold: Fold,
    key_of: Callable[[Any], Any],
    value_of: Callable[[Any], Any],
    states: dict[Any, Any],
    keyed: KeyedState[Any, Any],
) -> list[Any]:
    """Fold ``records`` into their keys' states in order; what the folds emitted."""
    emitted: list[Any] = []
    extend = emitted.extend
    get = states.get
    keys = list(map(key_of, records))
    added: list[Any] = []  # keys that came or went: what a snapshot of the whole state must know of
    for k, record in zip(keys, records, strict=True):
        old = get(k)
        new, outputs = fold(k, value_of(record), old)
        if new is None:
            if old is not None:
                del states[k]
                added.append(k)
        else:
            if old is None:
                added.append(k)
            states[k] = new
        if outputs:
            extend(outputs)
    keyed.touch_batch(keys, added)
    return emitted


def _same(record: Any) -> Any:
    return record
