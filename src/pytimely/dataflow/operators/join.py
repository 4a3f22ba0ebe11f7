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

import heapq
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass
from itertools import product
from typing import TYPE_CHECKING, Any, Literal

import pytimely.container as container
from pytimely.dataflow.bins import DEFAULT_BINS
from pytimely.dataflow.operators.binned import bin_routes, earlier
from pytimely.dataflow.operators.fields import Field, check, getter
from pytimely.dataflow.operators.generic import Notificator
from pytimely.dataflow.state import KeyedState, declare
from pytimely.errors import InputFormatError, InvalidArgument
from pytimely.order import sort_key

if TYPE_CHECKING:
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = ["How", "Interval", "join"]

How = Literal["inner", "left", "outer"]


@dataclass(frozen=True, slots=True)
class Interval:
    """A left value at event time ``x`` meets right values at ``y`` with ``x + lower <= y <= x + upper``."""

    lower: int
    upper: int


def _pairs_of(port_batch: Any) -> Any:
    return container.records(port_batch)


class _KeyTypes:
    """The kinds of key each side has shown; two sides with no kind in common cannot be joined."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: tuple[set[str], set[str]] = (set(), set())

    def check(self, side: int, key: Any) -> None:
        """Note ``key``'s kind on ``side``; :class:`InputFormatError` when the sides share no kind."""
        kind = _kind_of(key)
        mine, theirs = self.seen[side], self.seen[1 - side]
        if kind in mine:
            return
        mine.add(kind)
        if theirs and not (mine & theirs):
            left, right = (mine, theirs) if side == 0 else (theirs, mine)
            raise InputFormatError(
                f"join {self.name!r}: the left side's keys are {' and '.join(sorted(left))}, the right side's "
                f"{' and '.join(sorted(right))}: no key of one can equal a key of the other (e.g. {key!r})"
            )


def _kind_of(key: Any) -> str:
    import numbers

    if isinstance(key, numbers.Number):
        return "numbers"
    if isinstance(key, tuple):
        return f"tuples of {len(key)}"
    return type(key).__name__


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
    from pytimely.dataflow.operators.window import Session, Sliding, Tumbling

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
        return _interval(left, right, name, how, over, time, clock, late)
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
    types = _KeyTypes(name)

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
            for k, v in _pairs_of(batch):
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
            lefts, rights = states[0].pop(t, {}), states[1].pop(t, {})
            lonely: list[Any] = []
            if keep[0]:
                lonely.extend((k, (v, None)) for k, vs in lefts.items() if k not in rights for v in vs)
            if keep[1]:
                lonely.extend((k, (None, v)) for k, vs in rights.items() if k not in lefts for v in vs)
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


def _latest(
    left: Stream[Any], right: Stream[Any], name: str, control: Stream[Any] | None, bins: int, how: How
) -> Stream[Any]:
    scope = left.scope
    # Routed by the bins of the keys (the state outlives a time: with a control stream, a moving bin's keys go
    # to their new owner; with recovery, a run restored on another number of workers finds them where they arrive).
    inputs, router = bin_routes([left, right], [0, 0], name, control, bins, migrate=True)
    if router is not None:
        assert router.state_output is not None
        inputs.append((router.state_output, router.pact))
    op = scope.add_operator(name, inputs, 1)
    op.notify = True
    ports: list[Any] = list(op.inputs)
    in1, in2, out = ports[0], ports[1], op.outputs[0]
    state_in = ports[2] if router is not None else None
    keyed: KeyedState[Any, list[Any]] = KeyedState(bins)
    declare(op, "latest", keyed, layout="latest_join/1")
    latest = keyed.data
    """Per key: ``[left value, right value]`` (None: none yet) — the operator's declared state."""
    pending: dict[Any, list[tuple[int, Any]]] = {}
    held = _Latest(ports, router, keyed, pending)
    if router is not None:
        router.holder = held
        subgraph, index = scope.subgraph, op.index
        router.may_change = lambda time: subgraph.may_change(index, time)
    notificator: Notificator[Any] = Notificator()
    types = _KeyTypes(name)
    need = {"inner": (True, True), "left": (True, False), "outer": (False, False)}[how]

    def absorb(port: Any, side: int) -> None:
        for cap, batch in port:
            t = cap.time
            waiting = pending.get(t)
            if waiting is None:
                waiting = pending[t] = []
                notificator.notify_at(cap.retain())
            seen = None
            for k, v in _pairs_of(batch):
                if type(k) is not seen:
                    seen = type(k)
                    types.check(side, k)
                waiting.append((side, (k, v)))

    def logic() -> None:
        if state_in is not None:
            # Shipped state goes in before any value is applied (binned.py, step 1).
            for _, shipped in state_in.batches():
                latest.update(shipped)
                keyed.touch(k for k, _ in shipped)
        absorb(in1, 0)
        absorb(in2, 1)
        for done in notificator.ready(*(p.frontier for p in ports)):
            changed: dict[Any, list[Any]] = {}
            came: list[Any] = []
            for side, (k, v) in pending.pop(done.time):
                pair = latest.get(k)
                if pair is None:
                    pair = latest[k] = [None, None]
                    came.append(k)
                pair[side] = v
                changed[k] = pair
            keyed.touch_batch(list(changed), came)
            sent = [
                (k, (lv, rv))
                for k, (lv, rv) in changed.items()
                if (lv is not None or not need[0]) and (rv is not None or not need[1])
            ]
            if sent:
                out.give(done, sent)
            done.drop()
        if router is not None and router.waiting:
            router.activate()

    op.logic = logic
    return scope.stream(out)


class _Latest:
    """The running join's state as a router sees it (:class:`~pytimely.dataflow.operators.binned.StateHolder`)."""

    def __init__(
        self, ports: list[Any], router: Any, keyed: KeyedState[Any, list[Any]], pending: dict[Any, list[Any]]
    ) -> None:
        self.keyed = keyed
        self.pending = pending
        self._ports = ports
        self._router = router

    def settled_before(self, time: Any) -> bool:
        """Whether every value at a time ``< time`` that will reach this worker has been applied."""
        for port in self._ports:
            if any(earlier(e, time) for e in port.frontier.frontier_elements()):
                return False
        return not any(earlier(s, time) for s in self.pending)

    def extract(self, leaving: set[int], owners: Any) -> dict[int, list[Any]]:
        """Remove the latest values of the keys in the bins ``leaving``; ``(key, [left, right])`` by new owner."""
        find = self._router.find
        latest = self.keyed.data
        out: dict[int, list[Any]] = {}
        for k in [k for k in latest if find(k) in leaving]:
            out.setdefault(owners[find(k)], []).append((k, latest.pop(k)))
        for items in out.values():
            self.keyed.touch(k for k, _ in items)
        return out


def _time_getters(time: Field | tuple[Field, Field], name: str) -> tuple[Any, Any]:
    """The event time of a left and a right value (``time`` for both, or one per side)."""
    fields = time if isinstance(time, tuple) else (time, time)
    if len(fields) != 2:
        raise InvalidArgument(f"{name!r}: time= is one field for both sides or a (left, right) pair, got {time!r}")
    getters = []
    for f in fields:
        check(f, "time")
        if f is None:
            raise InvalidArgument(f"{name!r}: a join over event time reads each value's event time: give time=")
        getters.append(getter(f, "time"))
    return getters[0], getters[1]


def _windowed(
    left: Stream[Any], right: Stream[Any], name: str, how: How, over: Any, time: Any, clock: Any, late: Any
) -> Stream[Any]:
    from pytimely.dataflow.operators.folds import Fold
    from pytimely.dataflow.operators.window import window

    get_left, get_right = _time_getters(time, name)
    types = _KeyTypes(name)

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


def _interval(
    left: Stream[Any], right: Stream[Any], name: str, how: How, over: Interval, time: Any, clock: Any, late: Any
) -> Stream[Any]:
    from pytimely.dataflow.capability import Capability
    from pytimely.dataflow.operators.window import DropLate, SideOutput, _Dropped

    lower, upper = over.lower, over.upper
    if type(lower) is not int or type(upper) is not int or lower > upper:
        raise InvalidArgument(f"{name!r}: an interval's bounds are ints with lower <= upper, got {over!r}")
    get_left, get_right = _time_getters(time, name)
    policy = DropLate() if late is None else late
    if not isinstance(policy, DropLate | SideOutput):
        raise InvalidArgument(f"{name!r}: late must be DropLate() or SideOutput(), got {late!r}")
    scope = left.scope
    if type(scope.minimum) is not int:
        raise InvalidArgument(f"{name!r}: an interval join needs integer timestamps")
    sides = [left, right]
    clock_late: list[Stream[Any]] = []
    if clock is not None:
        from pytimely.dataflow.operators.clock import event_clock

        for i, get in enumerate((get_left, get_right)):
            clocked, lost = event_clock(sides[i], clock, _of_value(get), policy, f"{name}.{i}")
            sides[i] = clocked
            if lost is not None:
                clock_late.append(lost.map(_tagged(i), name=f"{name}.{i}.late"))
    side_out = isinstance(policy, SideOutput)
    # Routed by the bins of the keys: a run restored on another number of workers finds a key's values where
    # its records arrive.
    inputs, _ = bin_routes(sides, [0, 0], name, None, DEFAULT_BINS, migrate=True)
    op = scope.add_operator(name, inputs, 2 if side_out else 1)
    op.notify = True
    op.initial_caps = True
    in1, in2, out = op.inputs[0], op.inputs[1], op.outputs[0]
    late_out = op.outputs[1] if side_out else None
    state = _IntervalState(how, lower, upper, (get_left, get_right), name)
    declare(op, "left", state.declared[0], layout="interval_join/1")
    declare(op, "right", state.declared[1], layout="interval_join/1")
    if isinstance(policy, DropLate):
        declare(op, "dropped", _Dropped(policy, state), layout="dropped/1")
    # A capability at the scope's minimum until the first step: a restored copy holds capabilities at the times
    # its restored values go out unmatched.
    initial = [Capability(scope.minimum, o, counted=True) for o in op.outputs]
    subgraph, index = scope.subgraph, op.index

    def logic() -> None:
        if initial:
            for other in initial[1:]:
                other.drop()
            state.resume(initial[0])
            initial.clear()
        for side, port in ((0, in1), (1, in2)):
            for cap, batch in port:
                lost = state.absorb(side, cap, batch, out)
                if lost:
                    if late_out is not None:
                        late_out.give(cap, lost)
                    else:
                        policy.dropped += len(lost)  # type: ignore[union-attr]
        state.expire(in1.frontier, in2.frontier, out, subgraph.fences.get(index))

    op.logic = logic
    if isinstance(policy, SideOutput):
        assert late_out is not None
        policy.stream = scope.stream(late_out)
        if clock_late:
            policy.stream = policy.stream.concat(*clock_late, name=f"{name}.late")
    return scope.stream(out)


def _of_value(get: Any) -> Any:
    """A function reading ``get`` from the value of a ``(key, value)`` pair."""
    return lambda kv: get(kv[1])


def _tagged(side: int) -> Any:
    """A function turning a ``(key, value)`` pair into ``(key, side, value)``."""
    return lambda kv: (kv[0], side, kv[1])


class _IntervalState:
    """One worker's interval join: per key, each side's values in event-time order, and when they expire.

    A value at event time ``x`` and timestamp ``t`` expires at its *deadline* ``x + upper`` (a left one; a right
    one at ``y - lower``): once the other side's frontier has passed it no partner can come. Unmatched, it goes
    out then, at ``max(deadline, t)``: the first time at which it is known to have no partner, so that a
    snapshot of any earlier epoch holds the value and no output of it. Values expire only while that time may
    change (``OperatorInfo.may_change``: no snapshot of an earlier epoch pending).
    """

    def __init__(self, how: How, lower: int, upper: int, getters: tuple[Any, Any], name: str) -> None:
        self.keep = (how != "inner", how == "outer")
        self.lower, self.upper = lower, upper
        self.getters = getters
        self.values: tuple[dict[Any, list[list[Any]]], dict[Any, list[list[Any]]]] = ({}, {})
        """Per side, per key: ``[x, seq, value, matched, timestamp]`` sorted by event time (the operator's state)."""
        self.declared = (_Values(self, self.values[0]), _Values(self, self.values[1]))
        """Each side's values as declared state (the keys written are noted once per batch and expiry)."""
        self.expiry: tuple[list[Any], list[Any]] = ([], [])
        """Per side, a heap of ``(deadline, seq, key, entry)``: when the other side's frontier passes it."""
        self.caps: dict[int, list[Any]] = {}
        """Emission time -> [capability, values of the kept sides that may go out unmatched there]."""
        self.seq = 0
        self.types = _KeyTypes(name)

    def _deadline(self, side: int, x: int) -> int:
        return x + (self.upper if side == 0 else -self.lower)

    def absorb(self, side: int, cap: Any, batch: Any, out: Any) -> list[Any]:
        """Match one batch of a side against the other side's values; return its late records (tagged)."""
        t = cap.time
        get = self.getters[side]
        mine, theirs = self.values[side], self.values[1 - side]
        lo, hi = (self.lower, self.upper) if side == 0 else (-self.upper, -self.lower)
        matches: dict[Any, list[Any]] = {}
        lost: list[Any] = []
        seen = None
        written: tuple[list[Any], list[Any]] = ([], [])
        came: tuple[list[Any], list[Any]] = ([], [])
        for k, v in container.records(batch):
            if type(k) is not seen:
                seen = type(k)
                self.types.check(side, k)
            x = get(v)
            if type(x) is not int:
                raise InputFormatError(
                    f"join: event times must be integers; the time {x!r} of {(k, v)!r} is a {type(x).__name__}"
                )
            if x < t:
                lost.append((k, side, v))
                continue
            entry = [x, self.seq, v, False, t]
            self.seq += 1
            partners = theirs.get(k)
            if partners:
                a = bisect_left(partners, x + lo, key=_time)
                b = bisect_right(partners, x + hi, key=_time)
                for p in partners[a:b]:
                    if not p[3]:
                        p[3] = True
                        written[1 - side].append(k)
                    entry[3] = True
                    # At the later of the two timestamps, whichever came first: the same in every schedule.
                    when = p[4] if p[4] > t else t
                    pair = (k, (v, p[2]) if side == 0 else (p[2], v))
                    group = matches.get(when)
                    if group is None:
                        matches[when] = [pair]
                    else:
                        group.append(pair)
            values = mine.get(k)
            if values is None:
                mine[k] = [entry]
                came[side].append(k)
            else:
                insort(values, entry, key=_time)
            written[side].append(k)
            deadline = x + hi
            heapq.heappush(self.expiry[side], (deadline, entry[1], k, entry))
            if self.keep[side]:
                when = deadline if deadline > t else t
                held = self.caps.get(when)
                if held is None:
                    self.caps[when] = [cap.delayed(when), 1]
                else:
                    held[1] += 1
        for when, pairs in matches.items():
            if when == t:
                out.give(cap, pairs)
            else:
                later = cap.delayed(when)
                out.give(later, pairs)
                later.drop()
        for s in (0, 1):
            if written[s]:
                self.declared[s].touch_batch(written[s], came[s])
        return lost

    def expire(self, left_frontier: Any, right_frontier: Any, out: Any, fence: int | None = None) -> None:
        """Drop the values no future value can meet; send the unmatched ones of the kept sides (not past
        ``fence``, the epoch of a pending snapshot)."""
        from pytimely.dataflow.operators.window import _bound

        by_time: dict[int, list[Any]] = {}
        released: set[int] = set()
        # A left value waits on the right frontier, a right one on the left frontier.
        for side, bound in ((0, _bound(right_frontier)), (1, _bound(left_frontier))):
            if fence is not None:
                bound = fence + 1 if bound is None else min(bound, fence + 1)
            heap = self.expiry[side]
            written: list[Any] = []
            gone: list[Any] = []
            while heap and (bound is None or heap[0][0] < bound):
                _, _, k, entry = heapq.heappop(heap)
                self._drop(side, k, entry, by_time, gone, released)
                written.append(k)
            if written:
                self.declared[side].touch_batch(written, gone)
        for when in sorted(by_time):
            out.give(self.caps[when][0], by_time[when])
        for when in released:
            held = self.caps[when]
            if held[1] == 0:
                held[0].drop()
                del self.caps[when]

    def _drop(
        self, side: int, k: Any, entry: list[Any], by_time: dict[int, list[Any]], gone: list[Any], released: set[int]
    ) -> None:
        group = self.values[side][k]
        i = bisect_left(group, entry[0], key=_time)
        while group[i] is not entry:
            i += 1
        del group[i]
        if not group:
            del self.values[side][k]
            gone.append(k)
        if self.keep[side]:
            deadline, t = self._deadline(side, entry[0]), entry[4]
            when = deadline if deadline > t else t
            self.caps[when][1] -= 1
            released.add(when)
            if not entry[3]:
                v = entry[2]
                by_time.setdefault(when, []).append((k, (v, None) if side == 0 else (None, v)))

    def next_change(self) -> int | None:
        """The first epoch at which a value expires without input (its deadline)."""
        tops = [heap[0][0] for heap in self.expiry if heap]
        return min(tops) if tops else None

    def resume(self, start: Any) -> None:
        """Before the first step: rebuild the expiry heaps from the restored values (numbered afresh) and hold
        ``start`` (a capability at the scope's minimum) at the times the kept sides' values may go out, or drop it."""
        for side in (0, 1):
            heap = self.expiry[side]
            for k, group in self.values[side].items():
                for entry in group:
                    entry[1] = self.seq
                    self.seq += 1
                    heapq.heappush(heap, (self._deadline(side, entry[0]), entry[1], k, entry))
                    if self.keep[side]:
                        deadline, t = self._deadline(side, entry[0]), entry[4]
                        when = deadline if deadline > t else t
                        held = self.caps.get(when)
                        if held is None:
                            self.caps[when] = [start.delayed(when), 1]
                        else:
                            held[1] += 1
        start.drop()


class _Values(KeyedState[Any, Any]):
    """One side's values of an interval join as a :class:`~pytimely.dataflow.state.KeyedState`, telling the
    runtime when they next change without input (the earliest deadline)."""

    __slots__ = ("_join",)

    def __init__(self, join: _IntervalState, data: dict[Any, Any]) -> None:
        super().__init__(DEFAULT_BINS, data=data)
        self._join = join

    def next_change(self) -> int | None:
        """The first epoch at which a value expires without input."""
        return self._join.next_change()


def _time(entry: list[Any]) -> Any:
    return entry[0]
