"""Keyed windows over event time: tumbling, sliding and session windows, closed by the frontier.

A record at dataflow time ``t`` carries an event time ``x`` (``time(record)``, or ``t`` itself for windows
over epochs). The dataflow time is the watermark: a record is **on time** when ``x >= t`` and **late**
when ``x < t`` (it was sent after the input had promised that no earlier time would come). Whether a
record is late depends only on the record and its time, never on scheduling, so every worker count gives
the same windows.

A window ``[start, end)`` closes, and its ``(start, end, key, aggregate)`` is emitted at time ``end - 1``,
once the input frontier has passed ``end - 1``: every on-time record with ``x < end`` has ``t <= x < end``,
so none can still arrive. A session ``[first, last + 1)`` closes once the frontier has passed ``last +
gap``: a later on-time record has ``x >= t > last + gap`` and cannot join it; it is emitted at ``last + gap``,
the first time at which it is known to be closed (emitted at ``last``, a snapshot of an epoch between ``last``
and ``last + gap`` would hold the session open while a capture downstream held its result: a resumed run
would send it twice). Late records are dropped and counted (:class:`DropLate`) or sent on a side stream at
their own time (:class:`SideOutput`).

Numpy batches (rows of columns named by index) and Arrow record batches are grouped with numpy sorts and
``reduceat``: count, sum, min and max need no Python call per record, only per window touched. Keys that are
not numbers (an Arrow column of strings) are dictionary-encoded per batch and given codes that hold while their
windows are open, so they are grouped the same way.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pytimely.dataflow.bins import DEFAULT_BINS, binner
from pytimely.dataflow.capability import Capability, EarliestEmission, InputCapability
from pytimely.dataflow.state import declare
from pytimely.errors import InvalidArgument

if TYPE_CHECKING:
    from pytimely.dataflow.ports import InputPort, OutputPort
    from pytimely.dataflow.stream import Stream

import pytimely.container as container
from pytimely.dataflow.operators.aggregations import Aggregation
from pytimely.dataflow.operators.binned import bin_exchange
from pytimely.dataflow.operators.clock import clocked
from pytimely.dataflow.operators.fields import Field, check, column, column_errors, reader, rows
from pytimely.dataflow.operators.folds import Fold, Folds, Reduce, aggregation
from pytimely.dataflow.operators.window_chunks import KeptChunks, reduceat
from pytimely.dataflow.operators.windowing import (
    DropLate,
    DroppedCount,
    Kind,
    Session,
    SideOutput,
    Sliding,
    Tumbling,
    check_kind,
    event_times,
    first_of,
    frontier_bound,
    last_of,
    late_policy,
    not_an_int,
    send_late_to,
    take_start,
)

__all__ = [
    "Aggregate", "DropLate", "Field", "Fold", "Reduce", "Session", "SideOutput", "Sliding", "Tumbling", "window",
]

Numeric = Literal["count", "sum", "min", "max"]
"""What the vectorised windows of this module compute over their records' values."""

Aggregate = Numeric | Literal["collect", "max_by", "min_by"] | Fold | Reduce
"""What a window computes over its records' values (see :mod:`pytimely.dataflow.operators.folds` for the last
five)."""

_COMBINE: dict[str, Callable[[Any, Any], Any]] = {
    "count": lambda a, b: a + b,
    "sum": lambda a, b: a + b,
    "min": min,
    "max": max,
}


class _Windows:
    """One worker's windows: open accumulators, the capability for the earliest emission, late records."""

    def __init__(
        self,
        kind: Kind,
        time: Field,
        key: Field,
        value: Field,
        aggregate: Numeric,
        late: DropLate | SideOutput,
        out: OutputPort[Any, Any],
        late_out: OutputPort[Any, Any] | None,
    ) -> None:
        self.kind = kind
        self.time_field = check(time, "time")
        self.key_field = check(key, "key")
        self.value_field = check(value, "value")
        self.aggregate = aggregate
        self.combine = _COMBINE[aggregate]
        self.late = late
        self.out = out
        self.late_out = late_out
        self.emitting: EarliestEmission[Any] = EarliestEmission()
        """The capability for the earliest pending emission."""
        # Tumbling and sliding: accumulators by window end, then key; ends in a heap.
        self.open: dict[int, dict[Any, Any]] = {}
        self.heap: list[int] = []
        # Tumbling and sliding over columns: arrays not yet grouped, and the codes of keys that are not numbers.
        step = kind.step if isinstance(kind, Sliding) else kind.size if isinstance(kind, Tumbling) else 1
        self.kept = KeptChunks(aggregate, step)
        # Sessions: per key, disjoint sessions [first, last, acc] sorted by first; deadlines in a heap.
        self.sessions: dict[Any, list[list[Any]]] = {}
        self.deadlines: list[tuple[int, int, Any, list[Any]]] = []
        self.seq = 0
        # Declared state (pytimely.dataflow.state): the open windows and sessions, in the bins of their keys.
        self.bins = DEFAULT_BINS
        self._find = binner(DEFAULT_BINS)
        self._bin_of: dict[Any, int] = {}
        self._changed = False
        self._reported: set[int] = set()
        self.restored = False
        """Whether a snapshot was restored (the operator takes a capability for its pending windows)."""

    # -- taking records ---------------------------------------------------------------------

    def absorb(self, cap: InputCapability[Any], batch: Any) -> None:
        """Fold one batch into the open windows; send or count its late records."""
        self._changed = True
        columns = batch if type(batch) is not list else self._as_array(batch)
        if columns is not None:
            xs = None if self.time_field is None else event_times(columns, self.time_field)
            values = None if self.aggregate == "count" else column(columns, self.value_field)
            if (xs is not None or self.time_field is None) and (values is not None or self.aggregate == "count"):
                keys, coded = self._keys(columns)
                if keys is not None:
                    if len(keys):
                        if coded != self.kept.coded:
                            self._switch_keys(coded)
                        # Late records are taken from ``batch`` itself: the side output keeps the batch's kind.
                        self._absorb_columns(cap, batch, xs, keys, values)
                    return
        self._absorb_records(cap, batch)

    def _keys(self, columns: Any) -> tuple[Any, bool]:
        """``(keys, coded)``: the key column as numbers, or as codes of this operator's own (see module doc)."""

        if callable(self.key_field):
            return None, False
        keys = column(columns, self.key_field)
        if keys is not None:
            return (keys, False) if keys.dtype.kind in "iuf" else (None, False)
        encoded = container.encoded(columns, self.key_field)
        if encoded is None:
            return None, False
        local, distinct = encoded
        return self.kept.encode(local, distinct), True

    def _switch_keys(self, coded: bool) -> None:
        """Keys change between numbers and codes: what is kept in arrays moves to the open windows first."""
        if self.kept:
            self._close_chunks(None)
        self.kept.coded = coded

    def _as_array(self, batch: list[Any]) -> Any:
        """A list of tuples of ints whose fields are named by column as a 2-d int array, else None."""
        fields = (self.time_field, self.key_field, self.value_field)
        if not batch or not all(f is None or type(f) is int for f in fields) or type(batch[0]) is not tuple:
            return None
        import numpy as np

        try:
            array = np.array(batch)
        except (ValueError, OverflowError):  # ragged rows
            return None
        # Only all-int rows: a float among them would turn every key into a float.
        return array if array.ndim == 2 and array.dtype.kind in "iu" else None

    def _absorb_records(self, cap: InputCapability[Any], batch: Any) -> None:
        get_time = reader(batch, self.time_field)
        get_key = reader(batch, self.key_field)
        get_value = reader(batch, self.value_field)
        with column_errors(batch, self.time_field, self.key_field, self.value_field):
            self._absorb_rows(cap, batch, get_time, get_key, get_value)

    def _absorb_rows(self, cap: InputCapability[Any], batch: Any, get_time: Any, get_key: Any, get_value: Any) -> None:
        t = cap.time
        counting = self.aggregate == "count"
        late: list[Any] = []
        if isinstance(self.kind, Session):
            for r in rows(batch):
                x = t if get_time is None else get_time(r)
                if type(x) is not int:
                    raise not_an_int(x, r, self.time_field, batch)
                if x < t:
                    late.append(r)
                    continue
                k = r if get_key is None else get_key(r)
                v = 1 if counting else (r if get_value is None else get_value(r))
                self._merge(cap, k, x, x, v)
        else:
            ends_of = self.kind.ends
            combine = self.combine
            for r in rows(batch):
                x = t if get_time is None else get_time(r)
                if type(x) is not int:
                    raise not_an_int(x, r, self.time_field, batch)
                if x < t:
                    late.append(r)
                    continue
                k = r if get_key is None else get_key(r)
                v = 1 if counting else (r if get_value is None else get_value(r))
                for end in ends_of(x):
                    accs = self._window(cap, end)
                    accs[k] = combine(accs[k], v) if k in accs else v
        if late:
            self._late(cap, late)

    def _absorb_columns(self, cap: InputCapability[Any], batch: Any, xs: Any, keys: Any, values: Any) -> None:
        import numpy as np

        t = cap.time
        n = len(keys)
        if xs is None:
            xs = np.full(n, t, dtype=np.int64)
        else:
            late = np.flatnonzero(xs < t)
            if late.size:
                self._late(cap, container.take(batch, late))
                keep = np.flatnonzero(xs >= t)
                xs, keys = xs[keep], keys[keep]
                values = None if values is None else values[keep]
        if not len(xs):
            return
        if isinstance(self.kind, Session):
            self._sessions_of_columns(cap, xs, keys, values)
            return
        ends, rows = self.kind.assign(xs)
        if not len(ends):  # sliding windows with gaps between them may hold none of these times
            return
        ks = keys[rows]
        accs = np.ones(len(ends), dtype=np.int64) if values is None else values[rows]
        # Kept as arrays until their windows close: a window's partial results from many batches are
        # combined in one grouping then, and Python runs once per window, not once per window and batch.
        low = self.kept.add(ends, ks, accs)
        self.emitting.hold(cap, low - 1)

    def _close_chunks(self, bound: int | None) -> None:
        """Move the kept windows that ``bound`` closes into the open windows, which emit them."""
        ends, keys, accs = self.kept.take_closed(bound)
        combine = self.combine
        current = None
        window: dict[Any, Any] = {}
        for end, k, a in zip(ends, keys, accs, strict=True):
            if end != current:
                current = end
                if end not in self.open:
                    self.open[end] = {}
                    heapq.heappush(self.heap, end)
                window = self.open[end]
            window[k] = combine(window[k], a) if k in window else a

    def _sessions_of_columns(self, cap: InputCapability[Any], xs: Any, keys: Any, values: Any) -> None:
        """Sessions within the batch first (sorted by key, time), then each merged into the key's sessions."""
        import numpy as np

        order = np.lexsort((xs, keys))
        xs, keys = xs[order], keys[order]
        gap = self.kind.gap  # type: ignore[union-attr]
        cut = np.concatenate(([True], (keys[1:] != keys[:-1]) | (xs[1:] - xs[:-1] > gap)))
        starts = np.flatnonzero(cut)
        ends = np.append(starts[1:], len(xs)) - 1
        accs = ends - starts + 1 if values is None else reduceat(self.aggregate, values[order], starts)
        distinct = keys[starts].tolist()
        if self.kept.coded:
            decode = self.kept.decode
            distinct = [decode[k] for k in distinct]
        for k, first, last, a in zip(distinct, xs[starts].tolist(), xs[ends].tolist(), accs.tolist(), strict=True):
            self._merge(cap, k, first, last, a)

    def _late(self, cap: InputCapability[Any], records: Any) -> None:
        if self.late_out is not None:
            self.late_out.give(cap, records)
        else:
            self.late.dropped += len(records)  # type: ignore[union-attr]

    # -- windows and capabilities -------------------------------------------------------------

    def _window(self, cap: InputCapability[Any], end: int) -> dict[Any, Any]:
        accs = self.open.get(end)
        if accs is None:
            accs = self.open[end] = {}
            heapq.heappush(self.heap, end)
            self.emitting.hold(cap, end - 1)
        return accs

    def _merge(self, cap: InputCapability[Any], k: Any, first: int, last: int, acc: Any) -> None:
        """Add the session ``[first, last]`` of key ``k``, joining every session within ``gap`` of it."""
        gap = self.kind.gap  # type: ignore[union-attr]
        mine = self.sessions.get(k)
        if mine is None:
            mine = self.sessions[k] = []
        lo = bisect_left(mine, first - gap, key=last_of)
        hi = bisect_right(mine, last + gap, key=first_of)
        if lo < hi:
            joined = mine[lo:hi]
            for s in joined:
                s[3] = False  # its deadline entry is stale now
                acc = self.combine(s[2], acc)
            first = min(first, joined[0][0])
            last = max(last, joined[-1][1])
        session = [first, last, acc, True]
        mine[lo:hi] = [session]
        self.seq += 1
        heapq.heappush(self.deadlines, (last + gap, self.seq, k, session))
        self.emitting.hold(cap, last + gap)

    def close(self, frontier: Any, fence: int | None = None) -> None:
        """Emit every window the frontier has passed, at its last instant, in time order.

        While a snapshot of epoch ``fence`` is pending, a window closing at a later time waits: closing it
        changes the declared state at that time (``OperatorInfo.may_change``).
        """
        bound = frontier_bound(frontier)
        if fence is not None:
            bound = fence + 1 if bound is None else min(bound, fence + 1)
        if isinstance(self.kind, Session):
            self._close_sessions(bound)
        else:
            self._close_windows(bound)

    def _close_windows(self, bound: int | None) -> None:
        self._close_chunks(bound)
        heap = self.heap
        size = self.kind.size  # type: ignore[union-attr]
        while heap and (bound is None or heap[0] <= bound):
            end = heapq.heappop(heap)
            accs = self.open.pop(end)
            self._emit(end - 1, [(end - size, end, k, a) for k, a in accs.items()])
        pending = [e for e in (heap[0] if heap else None, self.kept.low) if e is not None]
        self.emitting.settle(min(pending) - 1 if pending else None)

    def _close_sessions(self, bound: int | None) -> None:
        gap = self.kind.gap  # type: ignore[union-attr]
        deadlines = self.deadlines
        while deadlines and (not deadlines[0][3][3] or bound is None or deadlines[0][0] < bound):
            _, _, k, session = heapq.heappop(deadlines)
            if not session[3]:
                continue
            mine = self.sessions[k]
            del mine[bisect_left(mine, session[0], key=first_of)]
            if not mine:
                del self.sessions[k]
            first, last, acc, _ = session
            self._emit(last + gap, [(first, last + 1, k, acc)])
        self.emitting.settle(deadlines[0][0] if deadlines else None)

    def _emit(self, time: int, rows: list[tuple[Any, ...]]) -> None:
        self._changed = True
        self.emitting.give(self.out, time, rows)

    def resume(self, start: Capability[Any], _horizon: int | None) -> None:
        """Before the first step: hold ``start`` (a capability at the scope's minimum) at the earliest pending
        emission of a restored copy, or drop it."""
        self.emitting.resume(start, self.earliest_emission() if self.restored else None)

    def earliest_emission(self) -> int | None:
        """The time of the earliest pending emission, if any (what a restored operator holds a capability at)."""
        pending = [self.heap[0] - 1] if self.heap else []
        if self.kept.low is not None:
            pending.append(self.kept.low - 1)
        if self.deadlines:
            pending.append(self.deadlines[0][0])
        return min(pending) if pending else None

    def next_change(self) -> int | None:
        """The first epoch at which a window or session closes without any more input (the runtime's snapshots
        step there at once once no record can come): a window ``[start, end)`` closes with epoch ``end - 1``,
        a session with its deadline."""
        pending = [self.heap[0] - 1] if self.heap else []
        if self.kept.low is not None:
            pending.append(self.kept.low - 1)
        if self.deadlines:
            pending.append(self.deadlines[0][0])  # a stale entry at the top is earlier: stepping there is harmless
        return min(pending) if pending else None

    # -- declared state (pytimely.dataflow.state: a BinnedState, written whole when it changed) ----------

    def _bin(self, key: Any) -> int:
        b = self._bin_of.get(key)
        if b is None:
            b = self._bin_of[key] = self._find(key)
        return b

    def _portable(self) -> dict[str, Any]:
        """The open windows and sessions as plain dicts (arrays kept for speed are folded in first)."""
        if self.kept:
            self._close_chunks(None)
        return {
            "open": {end: dict(accs) for end, accs in self.open.items()},
            "sessions": {k: [s[:3] for s in mine] for k, mine in self.sessions.items()},
        }

    def _keys_of(self, value: dict[str, Any]) -> set[Any]:
        keys: set[Any] = set(value["sessions"])
        for accs in value["open"].values():
            keys.update(accs)
        return keys

    def changed(self) -> set[int]:
        """Every bin held, when anything changed since the last snapshot (the state is written whole)."""
        return set(self.held()) | self._reported if self._changed else set()

    def held(self) -> list[int]:
        """The bins of the keys with an open window or session."""
        return sorted({self._bin(k) for k in self._keys_of(self._portable())})

    def snapshot(self, bins: Any) -> dict[int, Any]:
        """Each bin's windows and sessions (``None`` for an empty one)."""
        value = self._portable()
        self._changed = False
        out: dict[int, Any] = {b: None for b in bins}
        for end, accs in value["open"].items():
            for k, a in accs.items():
                b = self._bin(k)
                if b in out:
                    part = out[b] = out[b] or {"open": {}, "sessions": {}}
                    part["open"].setdefault(end, {})[k] = a
        for k, mine in value["sessions"].items():
            b = self._bin(k)
            if b in out:
                part = out[b] = out[b] or {"open": {}, "sessions": {}}
                part["sessions"][k] = mine
        return out

    def capture(self, turn: int, rewrite_every: int) -> list[tuple[tuple[int, ...], Any]]:
        """One piece for every bin held, when anything changed (:class:`PiecewiseState`)."""
        if not self._changed:
            return []
        self._changed = False
        value = self._portable()
        held = {self._bin(k) for k in self._keys_of(value)}
        pieces: list[tuple[tuple[int, ...], Any]] = [((b,), None) for b in sorted(self._reported - held)]
        if held:
            pieces.append((tuple(sorted(held)), value))
        self._reported = held
        return pieces

    def restore(self, bin: int, value: Any) -> None:
        """Install one bin's windows and sessions."""
        self.restore_piece((bin,), value)

    def restore_piece(self, bins: Any, value: Any) -> None:
        """Install the windows and sessions of the keys of ``bins`` in ``value``."""
        if not value:
            return
        wanted = set(bins)
        for end, accs in value["open"].items():
            ours = {k: a for k, a in accs.items() if self._bin(k) in wanted}
            if ours:
                if end not in self.open:
                    self.open[end] = {}
                    heapq.heappush(self.heap, end)
                self.open[end].update(ours)
        gap = self.kind.gap if isinstance(self.kind, Session) else 0
        for k, sessions in value["sessions"].items():
            if self._bin(k) not in wanted:
                continue
            mine = self.sessions.setdefault(k, [])
            for first, last, acc in sessions:
                session = [first, last, acc, True]
                mine.append(session)
                self.seq += 1
                heapq.heappush(self.deadlines, (last + gap, self.seq, k, session))
            mine.sort(key=first_of)
        self._reported.update(b for b in wanted)
        self.restored = True


def _key_for_routing(key: Field) -> Any:
    """The key as the bin exchange reads it: a column, a function of the record, or the record itself."""
    return key


def _checked_aggregation(stream: Stream[Any], kind: Kind, aggregate: Aggregate, name: str) -> Aggregation | None:
    """The aggregation a window of ``kind`` computes (``None``: a numeric one of this module), after checking that
    ``kind``, ``aggregate`` and the stream's timestamps can make windows."""
    check_kind(kind)
    folds = aggregation(aggregate, type(kind).__name__, name)
    if folds is None and aggregate not in _COMBINE:
        raise InvalidArgument(
            f"{name!r}: aggregate must be one of {[*sorted(_COMBINE), 'collect', 'max_by', 'min_by']}, Fold(...) or "
            f"Reduce(...), got {aggregate!r}"
        )
    if type(stream.scope.minimum) is not int:
        raise InvalidArgument(f"{name!r}: windows need integer timestamps, not {type(stream.scope.minimum).__name__}")
    return folds


def window(
    stream: Stream[Any],
    kind: Kind,
    *,
    time: Field,
    key: Field,
    value: Field,
    aggregate: Aggregate,
    late: DropLate | SideOutput | None,
    name: str,
    clock: Any = None,
) -> Stream[tuple[int, int, Any, Any]]:
    """``(start, end, key, aggregate)`` for every window of ``kind`` holding a record (module doc).

    ``time``: the event time (``None``: the record's dataflow time, windows over epochs); ``key``: the key
    (``None``: the record itself); ``value``: what the aggregate works on (``None``: the record).
    An int names a column of tuple records, numpy rows or Arrow batches. ``clock`` (an
    :class:`~pytimely.dataflow.operators.clock.EventClock` or ``SystemClock``) makes the watermark from the data
    or the wall clock instead of the input's frontier (see :mod:`pytimely.dataflow.operators.clock`).
    """
    folds = _checked_aggregation(stream, kind, aggregate, name)
    scope = stream.scope
    policy = late_policy(late, name)
    clock_late: Stream[Any] | None = None
    if clock is not None:
        stream, time, clock_late = clocked(stream, clock, time, policy, name)
    side = isinstance(policy, SideOutput)
    # Routed by the bins of the keys (the default table): a run restored on another number of workers finds the
    # windows of a key where its records arrive.
    op = scope.add_operator(name, [(stream, bin_exchange(_key_for_routing(key), DEFAULT_BINS))], 2 if side else 1)
    op.notify = True
    op.initial_caps = True
    port: InputPort[Any, Any] = op.inputs[0]
    out: OutputPort[Any, Any] = op.outputs[0]
    late_out: OutputPort[Any, Any] | None = op.outputs[1] if side else None
    state: _Windows | Folds
    if folds is not None:
        state = Folds(kind, folds, time, key, value, policy, out, late_out)
        declare(op, "sessions" if isinstance(kind, Session) else "panes", state.keyed, layout="folds/1")
    else:
        state = _Windows(kind, time, key, value, aggregate, policy, out, late_out)  # type: ignore[arg-type]
        declare(op, "windows", state, layout="windows/1")
    if isinstance(policy, DropLate):
        declare(op, "dropped", DroppedCount(policy, state), layout="dropped/1")
    # Every copy starts with a capability at the scope's minimum: a restored one keeps it for its pending windows.
    initial: list[Capability[Any]] = [Capability(scope.minimum, o, counted=True) for o in op.outputs]
    subgraph, index = scope.subgraph, op.index

    def logic() -> None:
        start = take_start(initial)
        if start is not None:
            state.resume(start, subgraph.resume_epoch)
        for cap, batch in port:
            state.absorb(cap, batch)
        state.close(port.frontier, subgraph.fences.get(index))

    op.logic = logic
    send_late_to(policy, scope.stream(late_out) if late_out else None, [clock_late] if clock_late else [], name)
    return scope.stream(out)
