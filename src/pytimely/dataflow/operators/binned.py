"""Routing keyed records by a bin table that changes at timestamps, and moving state with its bins.

A keyed operator (``count_by``, ``sum_by``, ``fold_by``, ``reduce_by``, ``join``, ``state_machine``) sends
record ``r`` at time ``s`` to the owner of ``bin_of(key(r))`` in the table in force at ``s``
(:class:`~pytimely.dataflow.bins.BinTable`). Without a control stream the table never changes, and the
operators keep the exchange they always had (worker ``hash(key) % peers``: the same placement, the same
cost per record). With one, every worker runs a :class:`Router` in front of the operator (Megaphone's
F-operator; the operator itself is the S-operator):

* inputs: the data stream(s) (pipelined) and the control stream of :class:`~pytimely.dataflow.bins.Move`
  records (broadcast, so every worker's router keeps the same table);
* outputs: the routed data, one per data input, each exchanged to the worker the router names; and, for
  operators whose state outlives a timestamp (``state_machine``), the state of bins that move.

**Routing.** A move takes effect at its own time ``t``, and arrives on the control stream at a time
``tc <= t`` (a move with ``t < tc`` raises :class:`~pytimely.errors.LateMoveError`). Data at time ``s``
is routed only once the control frontier has passed ``s`` (no control time ``<= s`` can still arrive),
so every move at a time ``<= s`` is known by then; until that, the router keeps the data and a capability
at ``s``. Every worker therefore routes each record by the same, final table for its time.

**Per-time state needs no migration.** ``count_by``/``sum_by``/``fold_by``/``reduce_by`` and ``join``
keep state per pending timestamp only. The state for key ``k`` at time ``s`` is built from records at
``s``, and all of them go to the owner of ``k``'s bin at ``s``. After a move at ``t`` the old owner
receives only records at times ``< t`` for the bin, finishes those times itself and emits their
results; the new owner builds the state for every time ``>= t`` from nothing. The partial states an old
owner holds for pending times ``>= t`` of a moved bin are therefore always empty, and nothing is shipped.

**State across times moves with its bin.** A ``state_machine`` keeps one state per key across all
timestamps. At a move at ``t`` the old owner ``w`` ships the state of every key of the bins it loses to
their new owners, as ordinary data on the router's second output (so it crosses processes over TCP like
any record), and the new owner installs it before it applies any record at a time ``>= t``:

1. Every worker's router holds a capability at ``t`` on its state output from the moment it learns of
   the move (the control message's capability, delayed to ``t``) until it has shipped. The operator's
   state input frontier therefore stays at or below ``t`` until every worker has shipped, and the
   operator applies the records of a time ``s`` only once both its data and its state frontier have
   passed ``s``. Records at ``s >= t`` thus wait for every shipment at ``t`` to be received and
   installed (state messages are installed before any record is applied).
2. ``w``'s router ships at ``t`` only when (a) the control frontier has passed ``t`` (the table at ``t``
   is final), (b) neither of the operator's input frontiers on ``w`` has an element ``< t``, and (c) the
   operator holds no unapplied records at a time ``< t``. By (b) every record at a time ``< t`` that
   will ever reach ``w``'s operator has been taken from its queue (a message counts at the input until
   it is taken, and is sent in the same atomic progress batch as the change of the sender's
   capability), and every earlier shipment has been installed; by (c) those records have been applied.
   By the routing rule no record at a time ``>= t`` of a bin that leaves ``w`` ever reaches ``w``. So the
   state ``w`` ships is exactly the state after every record ``< t`` of those keys, and nothing is
   applied to it on ``w`` afterwards.
3. (b) and (c) are reached: the router's held capabilities at pending move times ``t' >= t`` keep the
   state frontier at or above the earliest pending move only, so every time ``< t`` becomes complete once
   the data upstream does, and the operator then applies it; moves ship in time order.

The operator wakes its router whenever it runs while moves are pending, so the router re-checks (b) and
(c) after every change of the operator's frontiers or buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Protocol

import pytimely.container as container
from pytimely.container.kind import Field
from pytimely.dataflow.bins import BinTable, Move, binner, bins_of
from pytimely.dataflow.capability import Capability, InputCapability
from pytimely.dataflow.channels import Broadcast, Direct, Exchange
from pytimely.dataflow.operators.fields import key_route
from pytimely.errors import LateMoveError, NotAMoveError
from pytimely.order import sort_key

if TYPE_CHECKING:
    from pytimely.dataflow.ports import InputPort, OutputPort
    from pytimely.dataflow.stream import Stream

__all__ = [
    "FIRST_COLUMN",
    "WHOLE_RECORD",
    "KeyColumn",
    "KeyedHolder",
    "Router",
    "StateHolder",
    "bin_exchange",
    "bin_routes",
    "earlier",
    "hold_state",
    "migrating_routes",
]

_KNOWN_LIMIT = 1 << 20
"""How many keys' bins a router remembers before it starts over (bounds its memory)."""

Key = Callable[[Any], Any] | int | str | None
"""A record's key: a function of the record, a column (position or name), or ``None`` (the record itself)."""



@dataclass(frozen=True, slots=True)
class KeyColumn:
    """Where a columnar batch's keys are: column ``field`` (``None``: each record is its own key)."""

    field: Field


WHOLE_RECORD = KeyColumn(None)
"""Each record is its key: a one-column batch is its own column of keys."""

FIRST_COLUMN = KeyColumn(0)
"""Records are ``(key, value)`` rows: the keys are the first column."""

Column = KeyColumn | None
"""Where a columnar batch's keys are, or ``None`` to route it record by record."""


def earlier(a: Any, b: Any) -> bool:
    """``a < b`` in the timestamps' partial order."""
    return bool(a <= b and a != b)


class StateHolder(Protocol):
    """What a router needs from the operator whose state it moves."""

    def settled_before(self, time: Any) -> bool:
        """Whether every record at a time ``< time`` that will reach this worker has been applied."""
        ...

    def extract(self, leaving: set[int], owners: Sequence[int]) -> dict[int, list[Any]]:
        """Remove the state of the bins in ``leaving``; return it grouped by new owner (``owners[bin]``)."""
        ...


def bin_routes(
    streams: Sequence[Stream[Any]],
    keys: Sequence[Key],
    name: str,
    control: Stream[Any] | None,
    bins: int,
    *,
    migrate: bool = False,
    columns: Sequence[Column] | None = None,
) -> tuple[list[tuple[Stream[Any], Any]], Router | None]:
    """The inputs (stream, pact) of a keyed operator, and the :class:`Router` in front of it if any.

    Without ``control`` each stream is exchanged by ``hash(key)`` as before bins existed (a table that never
    changes needs no bins), unless the operator keeps state across times (``migrate``): that state is declared
    in bins (:mod:`pytimely.dataflow.state`), so its keys go to the owner of their bin in the default table
    (:func:`bin_exchange`), where a run restored on another number of workers finds them.
    ``columns[i]`` says where the keys of a columnar batch of stream ``i`` are (or None: go record by record);
    by default a stream whose records are their own keys has them in its only column.
    """
    if control is None:
        if migrate:
            return [(stream, bin_exchange(key, bins)) for stream, key in zip(streams, keys, strict=True)], None
        return [(stream, _exchange(key)) for stream, key in zip(streams, keys, strict=True)], None
    if columns is None:
        columns = [_column_of(key) for key in keys]
    functions = [_function_of(key) for key in keys]
    router = Router(streams, functions, name, control, bins, migrate, columns)
    return [(s, router.pact) for s in router.data_outputs], router


def migrating_routes(
    streams: Sequence[Stream[Any]],
    keys: Sequence[Key],
    name: str,
    control: Stream[Any] | None,
    bins: int,
    columns: Sequence[Column] | None = None,
) -> tuple[list[tuple[Stream[Any], Any]], Router | None]:
    """:func:`bin_routes` for an operator whose state moves with its bins: a router's state output (the states
    shipped to this worker) is the operator's last input."""
    inputs, router = bin_routes(streams, keys, name, control, bins, migrate=True, columns=columns)
    if router is not None:
        assert router.state_output is not None
        inputs.append((router.state_output, router.pact))
    return inputs, router


class KeyedHolder:
    """The per-key state of an operator whose keys move with their bins, as its :class:`Router` sees it
    (a :class:`StateHolder`): the declared state, and the values waiting for their time to complete."""

    def __init__(self, ports: Sequence[Any], router: Router | None, keyed: Any, pending: dict[Any, list[Any]]) -> None:
        self.keyed = keyed
        """The declared :class:`~pytimely.dataflow.state.KeyedState`: per key, its state."""
        self.pending = pending
        self._ports = ports
        self._router = router

    def take_shipped(self, port: Any) -> None:
        """Install the states shipped to this worker (before any value is applied: step 1 of this module's doc)."""
        for _, shipped in port.batches():
            self.keyed.data.update(shipped)
            self.keyed.touch(k for k, _ in shipped)

    def settled_before(self, time: Any) -> bool:
        """Whether every value at a time ``< time`` that will reach this worker has been applied."""
        for port in self._ports:
            if any(earlier(e, time) for e in port.frontier.frontier_elements()):
                return False
        return not any(earlier(s, time) for s in self.pending)

    def extract(self, leaving: set[int], owners: Sequence[int]) -> dict[int, list[Any]]:
        """Remove the states of the keys in the bins ``leaving``; ``(key, state)`` pairs by new owner."""
        assert self._router is not None
        find = self._router.find
        states = self.keyed.data
        out: dict[int, list[Any]] = {}
        for k in [k for k in states if find(k) in leaving]:
            out.setdefault(owners[find(k)], []).append((k, states.pop(k)))
        for items in out.values():
            self.keyed.touch(k for k, _ in items)
        return out


def hold_state(router: Router | None, holder: StateHolder, subgraph: Any, index: int) -> None:
    """Let ``router`` (if any) ship the state of ``holder``, operator ``index`` of ``subgraph``, when its fence
    allows."""
    if router is not None:
        router.holder = holder
        router.may_change = lambda time: subgraph.may_change(index, time)


def _is_column(key: Key) -> bool:
    return isinstance(key, int | str) and not isinstance(key, bool)


def _column_of(key: Key) -> Column:
    """Where a columnar batch's keys are when the operator's key is ``key``."""
    if key is None:
        return WHOLE_RECORD
    return KeyColumn(key) if _is_column(key) else None  # type: ignore[arg-type]


def _function_of(key: Key) -> Callable[[Any], Any] | None:
    """``key`` as a function of a record (a column read by position or name)."""
    if isinstance(key, int | str):
        return itemgetter(key)
    return key


def _exchange(key: Key) -> Exchange:
    """The exchange of a keyed input without bins: a column key reads its column (every batch kind alike)."""
    if _is_column(key):
        return Exchange(key_route(key), vectorized=True)
    return Exchange(_hash_route(key))  # type: ignore[arg-type]


def bin_exchange(key: Key, bins: int) -> Exchange:
    """An exchange sending each record to the owner of its key's bin in the default table (bin ``b`` on worker
    ``b % peers``): the same placement in every run and process, whatever the hash seed.

    Columnar batches find their keys' bins once per distinct key; other batches remember the bins of the keys
    they saw (up to a bound), so a key's bin is hashed once, not once per record.
    """
    import numpy as np

    find = binner(bins)
    get = _function_of(key)
    column = _column_of(key)
    known: dict[Any, int] = {}

    def route(batch: Any) -> Any:
        kind = container.kind_of(batch)
        if column is not None and kind.columnar:
            numbers = kind.numeric(batch, column.field)
            if numbers is not None and numbers.dtype.kind in "iub":
                return bins_of(numbers, bins)
            return container.per_key(batch, column.field, find)
        records = container.records(batch)
        keys = records if get is None else list(map(get, records))
        if len(known) > _KNOWN_LIMIT:
            known.clear()
        for k in set(keys).difference(known):
            known[k] = find(k)
        return np.fromiter(map(known.__getitem__, keys), dtype=np.int64, count=len(keys))

    return Exchange(route, vectorized=True)


def _hash_route(key: Callable[[Any], Any] | None) -> Callable[[Any], int]:
    if key is None:
        return hash
    return lambda r: hash(key(r))


class Router:
    """One worker's F-operator: routes records by the table in force at their time, ships moving state."""

    def __init__(
        self,
        streams: Sequence[Stream[Any]],
        keys: Sequence[Callable[[Any], Any] | None],
        name: str,
        control: Stream[Any],
        bins: int,
        migrate: bool,
        columns: Sequence[Column],
    ) -> None:
        scope = streams[0].scope
        n = len(streams)
        self.name = name
        self.bins = bins
        self.index = scope.index
        if scope.subgraph.elastic:
            # Workers that join later take ids beyond the first ``peers``: any id may come to own a bin.
            self.table = BinTable([b % scope.peers for b in range(bins)], 1 << 16)
        else:
            self.table = BinTable.default(scope.peers, bins)
        self.find = binner(bins)
        self.may_change: Callable[[Any], bool] = lambda _time: True
        """Whether the holder's declared state may change at a time (set by the holder, from its own fence)."""
        self.holder: StateHolder | None = None
        """The operator whose state moves; set by it before the dataflow runs."""
        self.dest = 0
        self.pact = Direct(self._dest)
        # Each batch goes whole to ``dest``: the router splits batches itself and sets ``dest`` right before
        # each part is given (the push is synchronous).
        op = scope.add_operator(
            name, [*((s, None) for s in streams), (control, Broadcast())], n + (1 if migrate else 0)
        )
        op.notify = True
        self._keys = list(keys)
        self._columns = list(columns)
        self._data: list[InputPort[Any, Any]] = op.inputs[:n]
        self._control: InputPort[Any, Any] = op.inputs[n]
        self._outs: list[OutputPort[Any, Any]] = op.outputs[:n]
        self._state_out: OutputPort[Any, Any] | None = op.outputs[n] if migrate else None
        self.data_outputs: list[Stream[Any]] = [scope.stream(port) for port in self._outs]
        self.state_output: Stream[Any] | None = None if self._state_out is None else scope.stream(self._state_out)
        self._stash: dict[Any, list[tuple[int, Any]]] = {}
        self._held: dict[tuple[Any, int], Capability[Any]] = {}
        self._move_caps: dict[Any, Capability[Any]] = {}
        self._known: dict[Any, int] = {}
        self.activate = scope._info(op).activate
        """Schedule the router at the next step (the operator calls it while moves are pending)."""
        op.logic = self._logic

    @property
    def waiting(self) -> bool:
        """Whether some move has not been shipped yet."""
        return bool(self._move_caps)

    def _dest(self) -> int:
        return self.dest

    def _logic(self) -> None:
        frontier = self._control.frontier
        for cap, batch in self._control:
            self._schedule(cap, batch)
        # Kept data goes first, so a key's records from this worker keep their order within a time.
        if self._stash:
            for s in sorted((s for s in self._stash if not frontier.less_equal(s)), key=sort_key):
                for i, batch in self._stash.pop(s):
                    self._send(i, self._held[s, i], s, batch)
                for i in range(len(self._data)):
                    held = self._held.pop((s, i), None)
                    if held is not None:
                        held.drop()
        for i, port in enumerate(self._data):
            for cap, batch in port:
                s = cap.time
                if frontier.less_equal(s):  # a move in force at ``s`` may still arrive: keep the data
                    if (s, i) not in self._held:
                        self._held[s, i] = cap.retain(i)
                    self._stash.setdefault(s, []).append((i, batch))
                else:
                    self._send(i, cap, s, batch)
        if self._move_caps:
            self._migrate()
        if self.table.times():
            self._compact()

    def _schedule(self, cap: InputCapability[Any], batch: Any) -> None:
        arrived = cap.time
        moves = list(batch)
        for move in moves:
            if not isinstance(move, Move):
                raise NotAMoveError(f"{self.name!r}: the control stream carries Move records, got {move!r}")
            if not arrived <= move.time:
                raise LateMoveError(
                    f"{self.name!r}: {move!r} arrived on the control stream at time {arrived!r}; a move cannot "
                    f"take effect before the time it is sent at (data up to there may be routed already)",
                    move=move,
                    time=arrived,
                )
        self.table.schedule(moves)
        if self._state_out is not None:
            port = self._state_out.port
            for move in moves:
                if move.time not in self._move_caps:
                    self._move_caps[move.time] = cap.delayed(move.time, port)

    def _send(self, i: int, cap: Capability[Any] | InputCapability[Any], s: Any, batch: Any) -> None:
        """Split ``batch`` by the owners at ``s`` and give each part to its worker."""
        key = self._keys[i]
        out = self._outs[i]
        single = self.table.single_owner(s)
        if single is not None:  # one worker owns every bin (always so with one worker): no per-record work
            self.dest = single
            out.give(cap, batch)
            return
        if type(batch) is not list:
            import numpy as np

            # One table lookup for the whole batch: bins of the keys, then their owners.
            dests = self.table.array_at(s)[self._bins(i, batch)]
            for j in np.unique(dests).tolist():
                self.dest = j
                out.give(cap, container.take(batch, np.flatnonzero(dests == j)))
            return
        owners = self.table.at(s)
        buckets: list[list[Any]] = [[] for _ in range(max(owners) + 1)]
        appends = [b.append for b in buckets]
        find = self.find
        known = self._known
        if len(known) > _KNOWN_LIMIT:
            known.clear()
        get = known.get
        # A key's bin is remembered: a dict lookup costs less than hashing the key's bytes again.
        for r in batch:
            k = r if key is None else key(r)
            b = get(k)
            if b is None:
                b = known[k] = find(k)
            appends[owners[b]](r)
        for j, part in enumerate(buckets):
            if part:
                self.dest = j
                out.give(cap, part)

    def _bins(self, i: int, batch: Any) -> Any:
        """The bin of every record of a columnar ``batch`` of input ``i``, as an int64 array."""
        column = self._columns[i]
        if column is None:
            return container.per_key(batch, None, self.find, self._keys[i])
        keys = container.numeric(batch, column.field)
        if keys is not None and keys.dtype.kind in "iub":
            return bins_of(keys, self.bins)
        return container.per_key(batch, column.field, self.find)

    def _migrate(self) -> None:
        """Ship the state of the bins this worker loses, move by move in time order (module doc, step 2)."""
        holder = self.holder
        assert holder is not None and self._state_out is not None
        frontier = self._control.frontier
        for t in sorted(self._move_caps, key=sort_key):
            # Shipping changes the holder's declared state at ``t``: not before a pending snapshot of an earlier
            # epoch is taken (the operator wakes the router again when the snapshot's fence moves).
            if frontier.less_equal(t) or not holder.settled_before(t) or not self.may_change(t):
                return
            leaving = {b for b, (old, _) in self.table.moving_at(t).items() if old == self.index}
            cap = self._move_caps.pop(t)
            if leaving:
                for dest, items in holder.extract(leaving, self.table.at(t)).items():
                    if items:
                        self.dest = dest
                        self._state_out.give(cap, items)
            cap.drop()

    def _compact(self) -> None:
        """Fold changes no lookup can precede any more into the table's base (keeps lookups short)."""
        lows = [e for port in (*self._data, self._control) for e in port.frontier.frontier_elements()]
        lows.extend(self._stash)
        lows.extend(self._move_caps)
        done = [t for t in self.table.times() if t not in self._move_caps and all(t <= e for e in lows)]
        if done:
            self.table.compact(max(done, key=sort_key))
