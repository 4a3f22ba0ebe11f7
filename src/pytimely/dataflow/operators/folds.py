"""Window folds: :class:`Fold`, :class:`Reduce`, ``"collect"``, ``"max_by"`` and ``"min_by"`` per key and window.

The windows, their emission times and late records are those of :mod:`pytimely.dataflow.operators.window`; what
differs is what a window holds. Each aggregation works on a record's *value* (``value=``; the record itself by
default):

* ``Fold(init, fold, merge)``: ``acc = fold(acc, value)`` from ``init()``, in the order values reach the key's
  worker; ``merge(a, b)`` combines two accumulators (``a`` earlier in event time). Sliding windows are folded in
  *panes* of ``gcd(size, step)`` — each value is folded once, into its pane — and a window's result is the merge
  of its panes, from a fresh ``init()``; sessions merge when a value bridges two. Both need ``merge``;
  ``merge`` may change and return its first argument, never its second.
* ``Reduce(f)``: ``f(f(v1, v2), v3)...``; ``f`` is also the merge (a window of several panes starts from a
  shallow copy of its first pane's result, so ``f`` may change its first argument).
* ``"collect"``: the list of values in event-time order (values of one event time in arrival order), as
  Bytewax's ``collect_window`` gives them.
* ``"max_by"`` / ``"min_by"``: the **record** whose value is largest / smallest (the first to arrive wins a tie).

Numpy and Arrow batches are windowed on their columns: late rows are picked out with one comparison, each row's
pane is computed on the time column, and rows are grouped by ``(pane, key)`` with one stable sort, so Python
runs once per group for ``max_by``/``min_by`` over a numeric value column (the best row of every group is found
with ``reduceat``), and once per value only where the aggregation calls user code (``fold``, ``reduce``) or
builds the result (``collect``). The state is per key (``{key: {pane: accumulator}}`` and each key's sessions);
the heap of pending window ends is derived from it.

That state is declared (:mod:`pytimely.dataflow.state`): a :class:`~pytimely.dataflow.state.KeyedState` of the
panes or of the sessions, each key's bin written when one of its panes or sessions changed, records routed by
the bins of their keys. A window closes only while its epoch may change (``OperatorInfo.may_change``: no
snapshot of an earlier epoch is pending), so a snapshot of epoch ``e`` holds exactly the windows ending after
``e + 1``; a restored copy derives its pending window ends and deadlines from the panes and sessions it was
given (ends after the epoch the run resumes at) and holds a capability at the earliest emission.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from math import gcd
from typing import TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.dataflow.bins import DEFAULT_BINS
from pytimely.dataflow.capability import EarliestEmission
from pytimely.dataflow.operators.aggregations import MISSING, Aggregation, By, Fold, Reduce, aggregation
from pytimely.dataflow.operators.fields import Field, check, column, column_errors, reader, rows
from pytimely.dataflow.operators.windowing import (
    Session,
    Sliding,
    event_times,
    first_of,
    frontier_bound,
    last_of,
    not_an_int,
)
from pytimely.dataflow.state import KeyedState

if TYPE_CHECKING:
    from pytimely.dataflow.capability import Capability, InputCapability
    from pytimely.dataflow.ports import OutputPort

__all__ = ["Fold", "Reduce", "aggregation"]

class Folds:
    """One worker's window folds: per key, the accumulators of its panes or its sessions (see the module doc)."""

    def __init__(
        self,
        kind: Any,
        agg: Aggregation,
        time: Field,
        key: Field,
        value: Field,
        late: Any,
        out: OutputPort[Any, Any],
        late_out: OutputPort[Any, Any] | None,
    ) -> None:

        self.kind = kind
        self.agg = agg
        self.time_field = check(time, "time")
        self.key_field = check(key, "key")
        self.value_field = check(value, "value")
        self.late = late
        self.out = out
        self.late_out = late_out
        self.session = isinstance(kind, Session)
        if self.session:
            self.size = self.step = self.pane = 0
        else:
            self.size = kind.size
            self.step = kind.step if isinstance(kind, Sliding) else kind.size
            self.pane = gcd(self.size, self.step)
        self.held: EarliestEmission[Any] = EarliestEmission()
        self.panes: dict[Any, dict[int, Any]] = {}
        """Per key: pane start -> accumulator (the operator's state)."""
        self.pending: dict[int, set[Any]] = {}
        """Window end -> keys with a value in that window (derived from ``panes``)."""
        self.ends: list[int] = []
        self.sessions: dict[Any, list[list[Any]]] = {}
        """Per key: its open sessions ``[first, last, acc, live]``, sorted (the operator's state)."""
        self.deadlines: list[tuple[int, int, Any, list[Any]]] = []
        self.seq = 0
        self.keyed = _Declared(self, self.sessions if self.session else self.panes)
        """The panes or the sessions as declared state (keys written are noted once per batch or close)."""
        self._written: list[Any] = []
        self._came_or_went: list[Any] = []

    # -- taking records -------------------------------------------------------------------------

    def absorb(self, cap: InputCapability[Any], batch: Any) -> None:
        """Fold one batch into the open windows; send or count its late records."""
        kind = container.kind_of(batch)
        if kind.columnar and not callable(self.key_field) and not callable(self.time_field):
            xs = None if self.time_field is None else event_times(batch, self.time_field)
            coded = self._key_codes(batch)
            if coded is not None:
                self._absorb_columns(cap, batch, xs, coded)
                return
        self._absorb_records(cap, batch)

    def _key_codes(self, batch: Any) -> tuple[Any, list[Any]] | None:
        """``(codes, distinct keys)`` of the key column, or None when it must be read record by record."""
        import numpy as np

        keys = column(batch, self.key_field)
        if keys is not None:
            distinct, codes = np.unique(keys, return_inverse=True)
            values = distinct.tolist()
            if self.key_field is None and container.kind_of(batch).name == "arrow":
                values = [(k,) for k in values]  # an Arrow record is a tuple, even of one column
            return codes.astype(np.int64, copy=False), values
        if self.key_field is None or callable(self.key_field):
            return None
        return container.encoded(batch, self.key_field)

    def _items(self, batch: Any) -> list[Any]:
        """Each row's item: its value, or ``(value, record)`` for max_by / min_by."""
        field = self.value_field
        if not self.agg.by and field is not None and not callable(field):
            return container.values(batch, field)  # one column read: no tuple per row
        records = rows(batch)
        get = reader(batch, self.value_field)
        with column_errors(batch, self.value_field):
            values = list(records) if get is None else list(map(get, records))
        return list(zip(values, records, strict=True)) if self.agg.by else values

    def _absorb_records(self, cap: InputCapability[Any], batch: Any) -> None:

        t = cap.time
        records = rows(batch)
        get_time, get_key, get_value = (reader(batch, f) for f in (self.time_field, self.key_field, self.value_field))
        late: list[Any] = []
        by, timed = self.agg.by, self.agg.timed
        with column_errors(batch, self.time_field, self.key_field, self.value_field):
            for r in records:
                x = t if get_time is None else get_time(r)
                if type(x) is not int:
                    raise not_an_int(x, r, self.time_field, batch)
                if x < t:
                    late.append(r)
                    continue
                k = r if get_key is None else get_key(r)
                v = r if get_value is None else get_value(r)
                item = (v, r) if by else (x, v) if timed else v
                if self.session:
                    self._session(cap, k, x, x, [item])
                else:
                    self._pane(cap, k, x, [item])
        if late:
            self._late(cap, late)

    def _absorb_columns(self, cap: InputCapability[Any], batch: Any, xs: Any, coded: tuple[Any, list[Any]]) -> None:
        import numpy as np

        t = cap.time
        codes, distinct = coded
        n = len(codes)
        if xs is None:
            xs = np.full(n, t, dtype=np.int64)
        keep_mask = xs >= t
        if not keep_mask.all():
            self._late(cap, container.take(batch, np.flatnonzero(~keep_mask)))
        if not self.session:
            # Sliding windows with gaps between them hold no value whose offset in its step is past the size.
            keep_mask &= (xs % self.step) < self.size
        rows_of = np.arange(n)
        xs_all = xs
        if not keep_mask.all():
            rows_of = np.flatnonzero(keep_mask)
            if not rows_of.size:
                return
            xs, codes = xs[rows_of], codes[rows_of]
        by_column = self._by_column(batch) if self.agg.by else None
        items = None if by_column is not None else self._items(batch)
        if self.session:
            order = np.lexsort((xs, codes))
            xs_o, codes_o = xs[order], codes[order]
            gap = self.kind.gap
            cut = np.concatenate(([True], (codes_o[1:] != codes_o[:-1]) | (xs_o[1:] - xs_o[:-1] > gap)))
        else:
            panes = xs // self.pane * self.pane
            order = np.lexsort((codes, panes))
            xs_o, codes_o = panes[order], codes[order]
            cut = np.concatenate(([True], (codes_o[1:] != codes_o[:-1]) | (xs_o[1:] != xs_o[:-1])))
        starts = np.flatnonzero(cut)
        bounds = [*starts.tolist(), len(order)]
        src = rows_of[order]
        firsts = xs_o[starts].tolist()
        lasts = xs_o[np.append(starts[1:], len(order)) - 1].tolist()
        group_keys = [distinct[c] for c in codes_o[starts].tolist()]
        if by_column is not None:
            best = self._best_rows(by_column, src, starts)
            picked = container.records(container.take(batch, best))
            group_items: Any = [[item] for item in zip(by_column[best].tolist(), picked, strict=True)]
        else:
            assert items is not None
            srcs = src.tolist()
            if self.agg.timed:
                times = xs_all.tolist()
                items = list(zip(times, items, strict=True))
            group_items = [[items[j] for j in srcs[bounds[i] : bounds[i + 1]]] for i in range(len(starts))]
        if self.session:
            for k, first, last, its in zip(group_keys, firsts, lasts, group_items, strict=True):
                self._session(cap, k, first, last, its)
        else:
            for k, pane, its in zip(group_keys, firsts, group_items, strict=True):
                self._pane(cap, k, pane, its)

    def _by_column(self, batch: Any) -> Any:
        """The value column as numbers when max_by / min_by can pick rows on it at once, else None."""
        if self.value_field is None or callable(self.value_field):
            return None
        values = column(batch, self.value_field)
        if values is None or values.dtype.kind not in "iuf":
            return None
        return values

    def _best_rows(self, by_column: Any, src: Any, starts: Any) -> Any:
        """The row of each group holding its largest (smallest) value; the earliest row wins a tie."""
        import numpy as np

        values = by_column[src]
        largest = isinstance(self.agg, By) and self.agg.largest
        best = (np.maximum if largest else np.minimum).reduceat(values, starts)
        counts = np.diff(np.append(starts, len(src)))
        hit = values == np.repeat(best, counts)
        positions = np.where(hit, np.arange(len(src)), len(src))
        first = np.minimum.reduceat(positions, starts)
        return src[first]

    def _late(self, cap: InputCapability[Any], records: Any) -> None:
        if self.late_out is not None:
            self.late_out.give(cap, records)
        else:
            self.late.dropped += container.length(records)

    # -- tumbling and sliding: panes ------------------------------------------------------------

    def _pane(self, cap: InputCapability[Any], k: Any, x: int, items: list[Any]) -> None:
        """Fold ``items`` into the pane of key ``k`` holding event time ``x``."""
        step, size, g = self.step, self.size, self.pane
        if x % step >= size:
            return  # between two sliding windows
        p = x // g * g
        mine = self.panes.get(k)
        if mine is None:
            mine = self.panes[k] = {}
            self._came_or_went.append(k)
        self._written.append(k)
        acc = mine.get(p, MISSING)
        if acc is MISSING:
            for end in self._ends_of(p):
                keys = self.pending.get(end)
                if keys is None:
                    keys = self.pending[end] = set()
                    heapq.heappush(self.ends, end)
                    self.held.hold(cap, end - 1)
                keys.add(k)
        mine[p] = self.agg.add(acc, items)

    def _close_panes(self, bound: int | None) -> None:
        agg = self.agg
        size, g = self.size, self.pane
        while self.ends and (bound is None or self.ends[0] <= bound):
            end = heapq.heappop(self.ends)
            rows: list[tuple[Any, ...]] = []
            for k in self.pending.pop(end):
                mine = self.panes[k]
                accs = [mine[p] for p in range(end - size, end, g) if p in mine]
                if not accs:
                    continue
                if len(accs) == 1:
                    acc = accs[0] if size == g else agg.fresh(accs[0])
                else:
                    acc = agg.fresh(accs[0])
                    for other in accs[1:]:
                        acc = agg.merge(acc, other)
                rows.append((end - size, end, k, agg.finish(acc)))
                # This window's panes whose last window it is are of no more use (later panes belong to later
                # windows still open; earlier ones went with earlier windows).
                step = self.step
                for p in range(end - size, end, g):
                    if p in mine and p // step * step + size <= end:
                        del mine[p]
                self._written.append(k)
                if not mine:
                    del self.panes[k]
                    self._came_or_went.append(k)
            if rows:
                self._emit(end - 1, rows)
        self.held.settle(self.ends[0] - 1 if self.ends else None)

    # -- sessions -------------------------------------------------------------------------------

    def _session(self, cap: InputCapability[Any], k: Any, first: int, last: int, items: list[Any]) -> None:
        """Add ``items`` (event times ``first..last``) to key ``k``'s sessions, joining those within the gap."""
        gap = self.kind.gap
        agg = self.agg
        mine = self.sessions.get(k)
        if mine is None:
            mine = self.sessions[k] = []
            self._came_or_went.append(k)
        self._written.append(k)
        lo = bisect_left(mine, first - gap, key=last_of)
        hi = bisect_right(mine, last + gap, key=first_of)
        if lo < hi:
            joined = mine[lo:hi]
            acc = joined[0][2]
            for s in joined:
                s[3] = False  # its deadline entry is stale now
            for s in joined[1:]:
                acc = agg.merge(acc, s[2])
            acc = agg.add(acc, items)
            first = min(first, joined[0][0])
            last = max(last, joined[-1][1])
        else:
            acc = agg.add(MISSING, items)
        session = [first, last, acc, True]
        mine[lo:hi] = [session]
        self.seq += 1
        heapq.heappush(self.deadlines, (last + gap, self.seq, k, session))
        self.held.hold(cap, last + gap)

    def _close_sessions(self, bound: int | None) -> None:
        gap = self.kind.gap
        deadlines = self.deadlines
        while deadlines and (not deadlines[0][3][3] or bound is None or deadlines[0][0] < bound):
            _, _, k, session = heapq.heappop(deadlines)
            if not session[3]:
                continue
            mine = self.sessions[k]
            del mine[bisect_left(mine, session[0], key=first_of)]
            self._written.append(k)
            if not mine:
                del self.sessions[k]
                self._came_or_went.append(k)
            first, last, acc, _ = session
            self._emit(last + gap, [(first, last + 1, k, self.agg.finish(acc))])
        self.held.settle(deadlines[0][0] if deadlines else None)

    # -- capabilities ---------------------------------------------------------------------------

    def close(self, frontier: Any, fence: int | None = None) -> None:
        """Emit every window the frontier has passed, at its last instant, in time order.

        While a snapshot of epoch ``fence`` is pending, a window closing at a later time waits: closing it
        changes the declared state at that time (``OperatorInfo.may_change``).
        """

        bound = frontier_bound(frontier)
        if fence is not None:
            bound = fence + 1 if bound is None else min(bound, fence + 1)
        if self.session:
            self._close_sessions(bound)
        else:
            self._close_panes(bound)
        if self._written:
            self.keyed.touch_batch(self._written, self._came_or_went)
            self._written, self._came_or_went = [], []

    def resume(self, start: Capability[Any], horizon: int | None) -> None:
        """Before the first step: derive the pending window ends (those after ``horizon``, the epoch the run
        resumes at: a snapshot closed every earlier one) or the session deadlines from the restored state, and
        hold ``start`` (a capability at the scope's minimum) at the earliest emission, or drop it."""
        if self.session:
            gap = self.kind.gap
            for k, mine in self.sessions.items():
                for session in mine:
                    session[3] = True
                    self.seq += 1
                    heapq.heappush(self.deadlines, (session[1] + gap, self.seq, k, session))
        else:
            low = -1 if horizon is None else horizon
            for k, panes in self.panes.items():
                for p in panes:
                    for end in self._ends_of(p):
                        if end - 1 >= low:
                            keys = self.pending.get(end)
                            if keys is None:
                                keys = self.pending[end] = set()
                                heapq.heappush(self.ends, end)
                            keys.add(k)
        self.held.resume(start, self.next_change())

    def _ends_of(self, p: int) -> range:
        """The ends of the windows holding pane ``p``: starts ``j*step`` with ``j*step <= p`` and ``p + pane <=
        j*step + size``."""
        step, size = self.step, self.size
        first = max(0, -((size - self.pane - p) // step))
        return range(first * step + size, p // step * step + size + 1, step)

    def next_change(self) -> int | None:
        """The earliest pending emission: the first epoch at which a window or session closes without any more
        input (a window ``[start, end)`` with epoch ``end - 1``, a session at its deadline)."""
        pending = [self.ends[0] - 1] if self.ends else []
        if self.deadlines:
            pending.append(self.deadlines[0][0])  # a stale entry at the top is earlier: stepping there is harmless
        return min(pending) if pending else None

    def _emit(self, time: int, out: list[tuple[Any, ...]]) -> None:
        self.held.give(self.out, time, out)


class _Declared(KeyedState[Any, Any]):
    """The panes or the sessions of :class:`Folds` as a :class:`~pytimely.dataflow.state.KeyedState`, telling the
    runtime when they next change without input (its earliest pending emission)."""

    __slots__ = ("_folds",)

    def __init__(self, folds: Folds, data: dict[Any, Any]) -> None:
        super().__init__(DEFAULT_BINS, data=data)
        self._folds = folds

    def next_change(self) -> int | None:
        """The first epoch at which a window or session closes without input."""
        return self._folds.next_change()
