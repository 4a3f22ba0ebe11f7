"""Joining two keyed streams: per timestamp, on each side's latest value, in windows, or in an interval.

Records are ``(key, value)`` pairs on both sides; a match is ``(key, (left value, right value))``. ``how``
says what happens to a value with no partner: ``"inner"`` drops it, ``"left"`` sends ``(key, (left, None))``
for a left value, ``"outer"`` does that for both sides (``(key, (None, right))``). What meets is ``over``:

* ``"time"`` (default): values of the same key at the same **timestamp**. Matches go out as soon as both are
  there; a value left without a partner goes out once both input frontiers have passed its time.
* ``"latest"`` (Bytewax's ``running`` join): each side's **latest** value per key, across timestamps. Times
  are applied in order once complete (within one, in the order values arrive); after a time, every key it
  changed sends ``(key, (latest left, latest right))`` once — for ``"inner"`` only when both sides have one,
  for ``"left"`` when the left has one.
* ``Tumbling``, ``Sliding`` or ``Session`` windows of **event time** (``time=``, read from the value): values
  of the same key in the same window meet once the window closes, sent at its last instant (``end - 1``; a
  session at ``last + gap``);
  ``clock=`` as for windows. Late values (event time before their timestamp, or behind the clock's watermark)
  go to ``late=`` as ``(key, side, value)``, side 0 for the left.
* ``Interval(lower, upper)`` (Flink's interval join): a left value at event time ``x`` meets the right values
  of its key at ``y`` with ``x + lower <= y <= x + upper``. Matches go out as soon as both are there, at the
  later of their two timestamps; a left value without a partner goes out once the right frontier has passed
  ``x + upper``, at ``x + upper`` (a right one once the left frontier has passed ``y - lower``, at ``y -
  lower``; at the value's own timestamp if that is later): the first time at which it is known to have none.
  Late values go to ``late=`` as above.

The two sides' keys must be comparable: a key type seen on one side and none of the other's (``1`` and
``"1"``) is an :class:`~pytimely.errors.InputFormatError` naming the operator, raised with the first batch
that shows it.

State that outlives a timestamp is declared (:mod:`pytimely.dataflow.state`), by the bins of the keys, and the
sides are routed by those bins: the running join's latest values per key (``"latest"``; with a control stream
of moves they go with their bins to the new owner, as ``state_machine``'s do), the interval join's values per
side and key, and the windowed join's through the window folds it is built on. A join per timestamp keeps
nothing across times and declares nothing.
"""

from __future__ import annotations

from itertools import product
from typing import TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.dataflow.bins import DEFAULT_BINS
from pytimely.dataflow.operators.binned import KeyedHolder, bin_routes, hold_state, migrating_routes
from pytimely.dataflow.operators.fields import Field
from pytimely.dataflow.operators.generic import Notificator
from pytimely.dataflow.operators.join_interval import interval_join
from pytimely.dataflow.operators.join_keys import How, Interval, KeyTypes, pairs_of, time_getters
from pytimely.dataflow.state import KeyedState, declare
from pytimely.errors import InvalidArgument
from pytimely.order import sort_key

if TYPE_CHECKING:
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = ["How", "Interval", "join"]

def join(
    left: Stream[Any],
    right: Stream[Any],
    name: str,
    control: Stream[Any] | None = None,
    bins: int = DEFAULT_BINS,
    *,
    how: How = "inner",
    over: Any = "time",
    time: Field | tuple[Field, Field] = None,
    clock: Any = None,
    late: Any = None,
) -> Stream[Any]:
    """``(key, (left value, right value))`` for the values that meet (see the module doc)."""
    from pytimely.dataflow.operators.windowing import Session, Sliding, Tumbling

    if how not in ("inner", "left", "outer"):
        raise InvalidArgument(f"{name!r}: how must be 'inner', 'left' or 'outer', got {how!r}")
    windowed = isinstance(over, Tumbling | Sliding | Session)
    if not (windowed or isinstance(over, Interval)) and (time is not None or clock is not None or late is not None):
        raise InvalidArgument(f"{name!r}: time=, clock= and late= belong to joins over windows or an interval")
    if over == "time":
        return _per_time(left, right, name, control, bins, how)
    if over == "latest":
        return _latest(left, right, name, control, bins, how)
    if windowed:
        return _windowed(left, right, name, how, over, time, clock, late)
    if isinstance(over, Interval):
        if clock is not None:
            from pytimely.dataflow.operators.clock import EventClock

            if not isinstance(clock, EventClock):
                raise InvalidArgument(f"{name!r}: an interval join takes an EventClock, got {clock!r}")
        return interval_join(left, right, name, how, over, time, clock, late)
    raise InvalidArgument(
        f"{name!r}: over must be 'time', 'latest', a Tumbling, Sliding or Session window or an Interval, "
        f"got {over!r}"
    )


def _sides(
    left: Stream[Any], right: Stream[Any], name: str, control: Stream[Any] | None, bins: int
) -> tuple[Scope[Any], list[tuple[Stream[Any], Any]]]:
    scope = left.scope
    inputs, _ = bin_routes([left, right], [0, 0], name, control, bins)
    return scope, inputs


def _per_time(
    left: Stream[Any], right: Stream[Any], name: str, control: Stream[Any] | None, bins: int, how: How
) -> Stream[Any]:
    scope, inputs = _sides(left, right, name, control, bins)
    op = scope.add_operator(name, inputs, 1)
    op.notify = True
    in1, in2, out = op.inputs[0], op.inputs[1], op.outputs[0]
    states: tuple[dict[Any, dict[Any, list[Any]]], dict[Any, dict[Any, list[Any]]]] = ({}, {})
    keep = (how != "inner", how == "outer")
    notificator: Notificator[Any] = Notificator()
    types = KeyTypes(name)

    def absorb(port: Any, side: int) -> None:
        mine, theirs = states[side], states[1 - side]
        for cap, batch in port:
            t = cap.time
            own = mine.get(t)
            if own is None:
                own = mine[t] = {}
                if keep[0] or keep[1]:
                    notificator.notify_at(cap.retain())
            other = theirs.get(t, {})
            matches: list[Any] = []
            seen = None
            for k, v in pairs_of(batch):
                if type(k) is not seen:
                    seen = type(k)
                    types.check(side, k)
                group = own.get(k)
                if group is None:
                    own[k] = [v]
                else:
                    group.append(v)
                partners = other.get(k)
                if partners:
                    if side:
                        matches.extend((k, (w, v)) for w in partners)
                    else:
                        matches.extend((k, (v, w)) for w in partners)
            if matches:
                out.give(cap, matches)

    def logic() -> None:
        absorb(in1, 0)
        absorb(in2, 1)
        f1, f2 = in1.frontier, in2.frontier
        for held in notificator.ready(f1, f2):
            t = held.time
            lonely = _unmatched(states[0].pop(t, {}), states[1].pop(t, {}), keep)
            if lonely:
                out.give(held, lonely)
            held.drop()
        if not (keep[0] or keep[1]):
            for state in states:
                for t in sorted(state, key=sort_key):
                    if not f1.less_equal(t) and not f2.less_equal(t):
                        del state[t]

    op.logic = logic
    return scope.stream(out)


def _unmatched(lefts: dict[Any, list[Any]], rights: dict[Any, list[Any]], keep: tuple[bool, bool]) -> list[Any]:
    """The records of one time's values without a partner, of the sides ``keep`` says go out alone."""
    lonely: list[Any] = []
    if keep[0]:
        lonely.extend((k, (v, None)) for k, vs in lefts.items() if k not in rights for v in vs)
    if keep[1]:
        lonely.extend((k, (None, v)) for k, vs in rights.items() if k not in lefts for v in vs)
    return lonely


def _latest(
    left: Stream[Any], right: Stream[Any], name: str, control: Stream[Any] | None, bins: int, how: How
) -> Stream[Any]:
    scope = left.scope
    # Routed by the bins of the keys (the state outlives a time: with a control stream, a moving bin's keys go
    # to their new owner; with recovery, a run restored on another number of workers finds them where they arrive).
    inputs, router = migrating_routes([left, right], [0, 0], name, control, bins)
    op = scope.add_operator(name, inputs, 1)
    op.notify = True
    ports: list[Any] = list(op.inputs)
    in1, in2, out = ports[0], ports[1], op.outputs[0]
    state_in = ports[2] if router is not None else None
    keyed: KeyedState[Any, list[Any]] = KeyedState(bins)
    declare(op, "latest", keyed, layout="latest_join/1")
    pending: dict[Any, list[tuple[int, Any]]] = {}
    held = _Latest(ports, router, keyed, pending)
    hold_state(router, held, scope.subgraph, op.index)
    notificator: Notificator[Any] = Notificator()
    types = KeyTypes(name)
    need = {"inner": (True, True), "left": (True, False), "outer": (False, False)}[how]

    def absorb(port: Any, side: int) -> None:
        for cap, batch in port:
            t = cap.time
            waiting = pending.get(t)
            if waiting is None:
                waiting = pending[t] = []
                notificator.notify_at(cap.retain())
            seen = None
            for k, v in pairs_of(batch):
                if type(k) is not seen:
                    seen = type(k)
                    types.check(side, k)
                waiting.append((side, (k, v)))

    def logic() -> None:
        if state_in is not None:
            held.take_shipped(state_in)
        absorb(in1, 0)
        absorb(in2, 1)
        for done in notificator.ready(*(p.frontier for p in ports)):
            sent = held.apply(pending.pop(done.time), need)
            if sent:
                out.give(done, sent)
            done.drop()
        if router is not None and router.waiting:
            router.activate()

    op.logic = logic
    return scope.stream(out)


class _Latest(KeyedHolder):
    """The running join's latest values per key (``[left value, right value]``, None: none yet) as a router sees
    them (:class:`~pytimely.dataflow.operators.binned.StateHolder`)."""

    def apply(self, values: list[tuple[int, Any]], need: tuple[bool, bool]) -> list[Any]:
        """Make one time's ``(side, (key, value))`` the latest; the pairs of the keys it changed that go out."""
        latest = self.keyed.data
        changed: dict[Any, list[Any]] = {}
        came: list[Any] = []
        for side, (k, v) in values:
            pair = latest.get(k)
            if pair is None:
                pair = latest[k] = [None, None]
                came.append(k)
            pair[side] = v
            changed[k] = pair
        self.keyed.touch_batch(list(changed), came)
        return [
            (k, (lv, rv))
            for k, (lv, rv) in changed.items()
            if (lv is not None or not need[0]) and (rv is not None or not need[1])
        ]


def _windowed(
    left: Stream[Any], right: Stream[Any], name: str, how: How, over: Any, time: Any, clock: Any, late: Any
) -> Stream[Any]:
    from pytimely.dataflow.operators.folds import Fold
    from pytimely.dataflow.operators.window import window

    get_left, get_right = time_getters(time, name)
    types = KeyTypes(name)

    def tag(side: int) -> Any:
        def of(batch: Any) -> list[Any]:
            out = [(k, side, v) for k, v in container.records(batch)]
            if out:
                types.check(side, out[0][0])
            return out

        return of

    tagged = left.map_batch(tag(0), name=f"{name}.left").concat(
        right.map_batch(tag(1), name=f"{name}.right"), name=f"{name}.sides"
    )

    def event_time(record: Any) -> Any:
        return get_left(record[2]) if record[1] == 0 else get_right(record[2])

    def add(acc: tuple[list[Any], list[Any]], record: Any) -> tuple[list[Any], list[Any]]:
        acc[record[1]].append(record[2])
        return acc

    def merge(a: tuple[list[Any], list[Any]], b: tuple[list[Any], list[Any]]) -> tuple[list[Any], list[Any]]:
        a[0].extend(b[0])
        a[1].extend(b[1])
        return a

    windows = window(
        tagged,
        over,
        time=event_time,
        key=0,
        value=None,
        aggregate=Fold(lambda: ([], []), add, merge),
        late=late,
        name=name,
        clock=clock,
    )

    def pairs(row: tuple[int, int, Any, tuple[list[Any], list[Any]]]) -> list[Any]:
        _, _, k, (lefts, rights) = row
        return _meet(k, lefts, rights, how)

    return windows.flat_map(pairs, name=f"{name}.pairs")


def _meet(k: Any, lefts: list[Any], rights: list[Any], how: How) -> list[Any]:
    """The records of values of key ``k`` meeting in one window."""
    if lefts and rights:
        return [(k, lr) for lr in product(lefts, rights)]
    if lefts and how != "inner":
        return [(k, (v, None)) for v in lefts]
    if rights and how == "outer":
        return [(k, (None, v)) for v in rights]
    return []


