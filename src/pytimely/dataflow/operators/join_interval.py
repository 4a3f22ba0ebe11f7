"""The interval join (Flink's): a left value at event time ``x`` meets the right values of its key at ``y`` with
``x + lower <= y <= x + upper`` (see :mod:`.join`).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from typing import TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.dataflow.bins import DEFAULT_BINS
from pytimely.dataflow.capability import Capability
from pytimely.dataflow.operators.binned import bin_routes
from pytimely.dataflow.operators.clock import event_clock
from pytimely.dataflow.operators.join_keys import How, Interval, KeyTypes, time_getters
from pytimely.dataflow.operators.windowing import (
    DropLate,
    DroppedCount,
    SideOutput,
    frontier_bound,
    late_policy,
    send_late_to,
    take_start,
)
from pytimely.dataflow.state import KeyedState, declare
from pytimely.errors import InputFormatError, InvalidArgument

if TYPE_CHECKING:
    from pytimely.dataflow.stream import Stream

__all__ = ["interval_join"]


def interval_join(
    left: Stream[Any], right: Stream[Any], name: str, how: How, over: Interval, time: Any, clock: Any, late: Any
) -> Stream[Any]:
    """The interval join of ``left`` and ``right`` (see :mod:`.join`)."""
    lower, upper = over.lower, over.upper
    if type(lower) is not int or type(upper) is not int or lower > upper:
        raise InvalidArgument(f"{name!r}: an interval's bounds are ints with lower <= upper, got {over!r}")
    get_left, get_right = time_getters(time, name)
    policy = late_policy(late, name)
    scope = left.scope
    if type(scope.minimum) is not int:
        raise InvalidArgument(f"{name!r}: an interval join needs integer timestamps")
    sides, clock_late = _clocked([left, right], clock, (get_left, get_right), policy, name)
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
        declare(op, "dropped", DroppedCount(policy, state), layout="dropped/1")
    # A capability at the scope's minimum until the first step: a restored copy holds capabilities at the times
    # its restored values go out unmatched.
    initial = [Capability(scope.minimum, o, counted=True) for o in op.outputs]
    subgraph, index = scope.subgraph, op.index

    def logic() -> None:
        start = take_start(initial)
        if start is not None:
            state.resume(start)
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
    send_late_to(policy, scope.stream(late_out) if late_out else None, clock_late, name)
    return scope.stream(out)


def _clocked(
    sides: list[Stream[Any]], clock: Any, getters: tuple[Any, Any], policy: Any, name: str
) -> tuple[list[Stream[Any]], list[Stream[Any]]]:
    """Each side through its event clock (none without ``clock``), and the clocks' late values as ``(key, side,
    value)``."""
    clock_late: list[Stream[Any]] = []
    if clock is None:
        return sides, clock_late
    sides = list(sides)
    for i, get in enumerate(getters):
        clocked, lost = event_clock(sides[i], clock, _of_value(get), policy, f"{name}.{i}")
        sides[i] = clocked
        if lost is not None:
            clock_late.append(lost.map(_tagged(i), name=f"{name}.{i}.late"))
    return sides, clock_late


def _send_at(out: Any, cap: Any, matches: dict[Any, list[Any]]) -> None:
    """Send each time's matches, at that time (``cap``'s or a later one)."""
    t = cap.time
    for when, pairs in matches.items():
        if when == t:
            out.give(cap, pairs)
        else:
            later = cap.delayed(when)
            out.give(later, pairs)
            later.drop()


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
        self.types = KeyTypes(name)

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
                self._hold(cap, deadline if deadline > t else t)
        _send_at(out, cap, matches)
        for s in (0, 1):
            if written[s]:
                self.declared[s].touch_batch(written[s], came[s])
        return lost

    def _hold(self, cap: Any, when: Any) -> None:
        """Count one more unmatched value that may go out at ``when`` (a capability there is held while any may)."""
        held = self.caps.get(when)
        if held is None:
            self.caps[when] = [cap.delayed(when), 1]
        else:
            held[1] += 1

    def expire(self, left_frontier: Any, right_frontier: Any, out: Any, fence: int | None = None) -> None:
        """Drop the values no future value can meet; send the unmatched ones of the kept sides (not past
        ``fence``, the epoch of a pending snapshot)."""
        by_time: dict[int, list[Any]] = {}
        released: set[int] = set()
        # A left value waits on the right frontier, a right one on the left frontier.
        for side, bound in ((0, frontier_bound(right_frontier)), (1, frontier_bound(left_frontier))):
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
