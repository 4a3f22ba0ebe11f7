"""Operator state the runtime snapshots and restores: declared per bin, per worker, or as an append-only log.

An operator that keeps state across timestamps declares it when it is built (``OperatorBuilder.state``, or
:func:`declare` for operators built on ``Scope._operator``), and from then on the state is the runtime's
business (Bytewax's ``StatefulBatchLogic.snapshot()``, Flink's operator state): with recovery on
(``execute(job, recovery=...)``) the runtime takes a snapshot at epoch boundaries by policy, writes only what
changed, and restores every declared state before the dataflow's first step, on any number of workers.

Three kinds of state, each a small protocol with a helper that implements it:

* :class:`BinnedState` — keyed state in bins (:mod:`pytimely.dataflow.bins`). The runtime asks which bins
  changed since the last snapshot, takes their values, and on restore hands each bin to the worker that owns
  it in the new run (bin ``b`` on worker ``b % peers``: route the operator's input with
  :func:`exchange_by_bin`, or a control stream of moves). :class:`KeyedState` is a dict in bins that tracks
  the keys written.
* :class:`WorkerState` — one small value per worker (a counter); on restore a worker takes the values of the
  old workers ``w`` with ``w % peers == index`` and merges them.
* :class:`LogState` — an append-only list per worker (what a capture gathered); only the entries appended
  since the last snapshot are written. :class:`Log` implements it.
* :class:`Positions` — where a replayable source stands, per partition, as JSON (kept in the manifest itself,
  readable without unpickling anything); partition ``p`` goes to worker ``p % peers`` on restore.

A snapshot of epoch ``e`` holds every declared state after every record at a time ``<= e`` and nothing later:
the runtime takes it at the first step at which no pointstamp at an epoch ``<= e`` remains in the dataflow
(seen by this worker, which the progress protocol makes a safe conclusion), before any operator runs in that
step, and it holds back from every stateful operator the messages of later epochs until it has taken it (see
:mod:`pytimely.recovery.runtime`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from pytimely.dataflow.bins import DEFAULT_BINS, binner
from pytimely.dataflow.channels import Exchange
from pytimely.errors import InvalidArgument

if TYPE_CHECKING:
    from pytimely.dataflow.operator import OperatorCore

__all__ = [
    "BinnedState",
    "Declared",
    "Delta",
    "KeyedState",
    "KeysMemo",
    "Log",
    "LogState",
    "PiecewiseState",
    "Positions",
    "State",
    "Tracked",
    "Value",
    "Whole",
    "WorkerState",
    "declare",
    "exchange_by_bin",
]

K = TypeVar("K")
V = TypeVar("V")


@runtime_checkable
class BinnedState(Protocol):
    """Keyed state in ``bins`` bins, snapshotted bin by bin (only the bins that changed)."""

    bins: int

    def changed(self) -> Collection[int]:
        """The bins changed on this worker since the last :meth:`snapshot` (filled, altered or emptied)."""
        ...

    def held(self) -> Collection[int]:
        """The bins this worker holds something in."""
        ...

    def snapshot(self, bins: Iterable[int]) -> dict[int, Any]:
        """Each of ``bins``' contents (picklable; ``None`` for a bin now empty here); they count as unchanged after."""
        ...

    def restore(self, bin: int, value: Any) -> None:
        """Install ``value`` (what :meth:`snapshot` gave for ``bin``) before the first step."""
        ...


@runtime_checkable
class PiecewiseState(Protocol):
    """What a :class:`BinnedState` may add so that a snapshot of much changed state is cheap: pieces that stand
    for many bins at once (:class:`KeyedState` does; the runtime uses it when it is there)."""

    def capture(self, turn: int, rewrite_every: int) -> list[tuple[tuple[int, ...], Any]]:
        """The pieces to write now: ``(bins it stands for, value)``; a value of ``None`` empties its bins.

        It covers every bin changed since the last capture, and each unchanged bin ``b`` held with
        ``b % rewrite_every == turn``; a bin it stood for before and no longer holds comes with ``None``.
        """
        ...

    def restore_piece(self, bins: Collection[int], value: Any) -> None:
        """Install the part of a piece that stands for ``bins`` (a piece may stand for bins written again since)."""
        ...


@runtime_checkable
class WorkerState(Protocol):
    """One small value per worker, written whole at every snapshot."""

    def snapshot(self) -> Any:
        """This worker's value (picklable)."""
        ...

    def restore(self, values: Sequence[Any]) -> None:
        """Take the values of the old workers this worker stands in for (one or more; merge them)."""
        ...


@runtime_checkable
class LogState(Protocol):
    """An append-only list per worker: a snapshot writes the entries appended since the previous one."""

    def appended(self) -> list[Any]:
        """The entries appended since the last call (they count as written after)."""
        ...

    def entries(self) -> list[Any]:
        """Every entry (a log written in many pieces is written again whole now and then)."""
        ...

    def restore(self, entries: list[Any]) -> None:
        """Put back the entries of the old workers this worker stands in for, oldest first."""
        ...


class Positions:
    """Where a replayable source stands, per partition, as JSON values kept in the snapshot's manifest.

    The source sets :meth:`set` as it reads; on restore :attr:`restored` holds the positions of the partitions
    this worker reads in the new run (partition ``p`` on worker ``p % peers``), and ``on_restore`` (if given)
    is told them before the first step.
    """

    def __init__(self, on_restore: Callable[[dict[int, Any]], None] | None = None) -> None:
        self._now: dict[int, Any] = {}
        self._changed: set[int] = set()
        self.restored: dict[int, Any] = {}
        """Partition -> position, as restored (empty on a fresh start)."""
        self._on_restore = on_restore

    def set(self, partition: int, position: Any) -> None:
        """Record that ``partition`` now stands at ``position`` (JSON: numbers, strings, lists, dicts)."""
        self._now[partition] = position
        self._changed.add(partition)

    def get(self, partition: int, default: Any = None) -> Any:
        """Where ``partition`` stands (as set or restored)."""
        return self._now.get(partition, default)

    def changed(self) -> dict[int, Any]:
        """The partitions set since the last call, with their positions."""
        out = {p: self._now[p] for p in self._changed}
        self._changed.clear()
        return out

    def restore(self, positions: dict[int, Any]) -> None:
        """Install the restored positions of this worker's partitions."""
        self.restored = dict(positions)
        self._now.update(positions)
        if self._on_restore is not None:
            self._on_restore(dict(positions))


State = BinnedState | WorkerState | LogState | Positions
"""Anything an operator may declare."""


def kind_of(state: Any) -> str:
    """``"binned"``, ``"worker"``, ``"log"`` or ``"positions"``: which protocol ``state`` implements."""
    if isinstance(state, Positions):
        return "positions"
    if isinstance(state, BinnedState):
        return "binned"
    if isinstance(state, LogState):
        return "log"
    if isinstance(state, WorkerState):
        return "worker"
    raise InvalidArgument(
        f"{type(state).__name__} is not operator state: implement BinnedState, WorkerState or LogState "
        "(pytimely.dataflow.state), or use KeyedState, Value or Log"
    )


@dataclass(frozen=True, slots=True)
class Declared:
    """A state an operator declared: its name within the operator, the state, and the version of its layout."""

    name: str
    state: Any
    layout: str
    kind: str


def declare(op: OperatorCore, name: str, state: Any, *, layout: str = "1") -> None:
    """Declare ``state`` (see the module doc) as operator ``op``'s state ``name``; ``layout`` versions its shape.

    A store written with another ``layout`` of the same state is refused rather than misread.
    """
    if not isinstance(name, str) or not name or "/" in name:
        raise InvalidArgument(
            f"operator {op.name!r}: a state's name must be a non-empty string without '/', got {name!r}"
        )
    if any(d.name == name for d in op.states):
        raise InvalidArgument(f"operator {op.name!r} declares the state {name!r} twice")
    op.states.append(Declared(name, state, str(layout), kind_of(state)))


def exchange_by_bin(key: Callable[[Any], Any] | None = None, bins: int = DEFAULT_BINS) -> Exchange:
    """A pact sending each record to the worker owning its key's bin (bin ``b`` on worker ``b % peers``).

    ``key`` gives a record's key (``None``: the record is its key). Keyed state restored on another number of
    workers is where its keys arrive only when the input is routed like this (or by a control stream of moves).
    """
    find = binner(bins)
    if key is None:
        return Exchange(find)
    get = key
    return Exchange(lambda record: find(get(record)))


_FOLD = 4096
"""How far an untracked :class:`KeyedState`'s notes of added and removed keys may grow beyond its size."""


@runtime_checkable
class Tracked(Protocol):
    """A state that notes its changes only once told to: the runtime calls :meth:`track` before the first step
    when recovery is on, so that a run without recovery pays nothing for what a snapshot would ask."""

    def track(self) -> None:
        """Start noting changes."""
        ...


class KeyedState(MutableMapping[K, V]):
    """A dict of per-key state kept in bins: what :class:`BinnedState` asks of it, for any operator.

    Reads and writes through the mapping API are tracked. An operator that writes :attr:`data` (the plain dict
    behind it) directly, for speed, says which keys it wrote with :meth:`touch`, or, cheaper still, with
    :meth:`touch_batch` naming the keys it added and removed.
    """

    __slots__ = (
        "_added",
        "_batches",
        "_bin_of",
        "_delta_keys",
        "_deltas",
        "_dirty",
        "_distinct",
        "_find",
        "_keys",
        "_members",
        "_moved",
        "_rebase",
        "_reported",
        "_since_whole",
        "_skipped",
        "_touched",
        "_tracking",
        "_written",
        "bins",
        "data",
    )  # fmt: skip

    def __init__(self, bins: int = DEFAULT_BINS, data: dict[K, V] | None = None) -> None:
        self.bins = bins
        self._find = binner(bins)
        self.data: dict[K, V] = {} if data is None else data
        """The state itself (also what a user passing ``states=`` to an operator sees)."""
        self._bin_of: dict[Any, int] = {}
        self._members: dict[int, set[Any]] = {}
        self._touched: set[Any] = set(self.data)
        self._dirty: set[int] = set()
        self._reported: set[int] = set()
        self._batches: list[Any] = []
        self._written = 0
        self._added: list[Any] = []
        self._tracking = False
        self._keys = KeysMemo()
        self._moved = True
        """Whether a key may have come or gone since the last whole piece (then its keys are written anew)."""
        self._deltas = 0
        """:class:`Delta` pieces written since the last whole piece (the bins' chains)."""
        self._delta_keys = 0
        """Keys those deltas held, together (a chain that outgrows the state is cut by a whole piece)."""
        self._since_whole = 0
        """Captures since the last whole piece."""
        self._distinct = 0.0
        """Of the keys written by the last capture that counted them, the share that were distinct (writes of a
        key twice count twice): a capture that would find too many for a delta by it does not count them (one in 64
        does, so a change of workload is seen)."""
        self._skipped = 0
        """Captures since the keys written were last counted."""
        self._rebase = False
        """Whether keys moved between workers with their bins since the last whole piece (:meth:`touch`,
        :meth:`extract`): two workers' deltas would then stand for one bin, so the next capture takes none."""

    def __getitem__(self, key: K) -> V:
        return self.data[key]

    def __setitem__(self, key: K, value: V) -> None:
        if key not in self.data:
            self._moved = True
        self.data[key] = value
        self._touched.add(key)

    def __delitem__(self, key: K) -> None:
        del self.data[key]
        self._moved = True
        self._touched.add(key)
        if not self._tracking and len(self._touched) > 2 * len(self.data) + _FOLD:
            self._sync(dirty=False)

    def __iter__(self) -> Iterator[K]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __contains__(self, key: object) -> bool:
        return key in self.data

    def get(self, key: K, default: Any = None) -> Any:
        """``data.get`` (no tracking needed for a read)."""
        return self.data.get(key, default)

    def touch(self, keys: Iterable[Any]) -> None:
        """Note that ``keys`` were written (or removed) in :attr:`data` directly (a bin moving here or away)."""
        self._touched.update(keys)
        self._moved = True
        self._rebase = True

    def touch_batch(self, keys: Sequence[Any], changed_keys: Sequence[Any]) -> None:
        """Note that ``keys`` were written in :attr:`data` directly, of which ``changed_keys`` were added or removed.

        Nothing is done per key now: a snapshot that writes the whole state (most keys written) needs only the
        keys added and removed, and one that writes changed bins looks at ``keys`` then.
        """
        if changed_keys:
            self._moved = True
        if self._tracking:
            self._batches.append(keys)
            self._written += len(keys)
            self._added.extend(changed_keys)
            return
        # Untracked (no recovery): only the index of keys by bin is kept (moving bins needs it), folded in now and
        # then so that what waits for it stays bounded.
        added = self._added
        added.extend(changed_keys)
        if len(added) > len(self.data) + _FOLD:
            self._sync(dirty=False)

    def track(self) -> None:
        """Note from now on what a snapshot asks (the runtime calls it when recovery is on; until then only the
        keys added and removed are noted)."""
        self._tracking = True

    def bin_of(self, key: Any) -> int:
        """The bin of ``key``."""
        b = self._bin_of.get(key)
        if b is None:
            b = self._bin_of[key] = self._find(key)
        return b

    def _sync(self, *, dirty: bool = True) -> set[int]:
        """Bring the bin index up to date with the touched keys; their bins count as changed (``dirty``).

        Returns the bins of the touched keys that are gone (a bin may have been emptied by them). Without
        ``dirty``, keys noted by :meth:`touch_batch` count only when added or removed.
        """
        touched = self._touched
        if self._batches or self._added:
            if dirty:
                for keys in self._batches:
                    touched.update(keys)
            touched.update(self._added)
            self._batches.clear()
            self._added.clear()
            self._written = 0
        gone: set[int] = set()
        if not touched:
            return gone
        data, members, bin_of, find = self.data, self._members, self._bin_of, self._find
        # Set operations and maps run in C; Python loops only over keys seen for the first time or gone.
        fresh = touched.difference(bin_of)
        for k in fresh:
            b = bin_of[k] = find(k)
            if k in data:
                m = members.get(b)
                if m is None:
                    members[b] = {k}
                else:
                    m.add(k)
        if dirty:
            self._dirty.update(map(bin_of.__getitem__, touched))
        for k in touched.difference(data):
            b = bin_of.pop(k)
            gone.add(b)
            m = members.get(b)
            if m is not None:
                m.discard(k)
        touched.clear()
        return gone

    def changed(self) -> set[int]:
        """The bins whose keys were written since the last call (they count as unchanged after)."""
        self._sync()
        dirty, self._dirty = self._dirty, set()
        return dirty

    def held(self) -> list[int]:
        """The bins holding a key here (call :meth:`changed` first: it brings the index up to date)."""
        return [b for b, m in self._members.items() if m]

    def snapshot(self, bins: Iterable[int]) -> dict[int, Any]:
        """``{key: value}`` of each bin (``None`` for an empty one)."""
        self._sync()
        data, members = self.data, self._members
        out: dict[int, Any] = {}
        get = data.__getitem__
        for b in bins:
            m = members.get(b)
            if m:
                out[b] = {k: get(k) for k in m}
            else:
                out[b] = None
                members.pop(b, None)
        return out

    def restore(self, bin: int, value: Any) -> None:
        """Install a bin's ``{key: value}``."""
        self.restore_piece((bin,), value)

    def capture(self, turn: int, rewrite_every: int) -> list[tuple[tuple[int, ...], Any]]:
        """The pieces to write (:class:`PiecewiseState`).

        * A :class:`Delta` (the keys written and removed since the last capture, standing for every bin held) when
          fewer than a quarter of the keys were, no keys moved between workers with their bins, and the chain of
          deltas since the last whole piece is short (at most ``rewrite_every`` captures, no more keys in all than
          the state holds);
        * else one piece for the whole state when at least half of its keys were written (no per-key work but the
          pickling), at least half of the bins it holds changed, or a chain of deltas is due to be cut;
        * else one piece per changed bin, and in turn the unchanged bins with ``b % rewrite_every == turn``.
        """
        self._since_whole += 1
        data = self.data
        size = len(data)
        written = len(self._touched) + self._written
        if (
            not self._rebase
            and self._since_whole <= rewrite_every
            and 0 < written < 2 * size
        ):
            self._skipped += 1
            if 10 * self._distinct * written < 3 * size or self._skipped > 64:
                self._skipped = 0
                keys = self._written_keys()
                self._distinct = len(keys) / written
                if 4 * len(keys) < size and self._delta_keys + len(keys) <= size:
                    return self._delta(keys)
        if data and (written * 2 >= size or (self._deltas and self._since_whole > rewrite_every)):
            gone = self._sync(dirty=False) | self._dirty
            self._dirty = set()
            return self._whole(gone)
        dirty = self.changed()
        held = self.held()
        if len(held) > 1 and len(dirty) * 2 >= len(held):
            return self._whole(dirty)
        rewrite = {b for b in held if b % rewrite_every == turn} - dirty
        values = self.snapshot(dirty | rewrite) if dirty or rewrite else {}
        for b, v in values.items():
            if v is None:
                self._reported.discard(b)
            else:
                self._reported.add(b)
        return [((b,), v) for b, v in sorted(values.items())]

    def _written_keys(self) -> set[Any]:
        """Every key written or removed since the last capture (without bringing the index up to date)."""
        keys = set(self._touched)
        for batch in self._batches:
            keys.update(batch)
        keys.update(self._added)
        return keys

    def _delta(self, keys: set[Any]) -> list[tuple[tuple[int, ...], Any]]:
        """``keys`` as a :class:`Delta` standing for every bin held or reported (a bin its removals emptied stays
        reported until a whole piece says it is empty)."""
        self._sync(dirty=False)
        self._dirty = set()
        self._reported.update(b for b, m in self._members.items() if m)
        data = self.data
        present = data.keys() & keys  # a dict's keys view walks the smaller side (set.intersection walks the dict)
        removed = tuple(keys - present) if len(present) < len(keys) else ()
        self._deltas += 1
        self._delta_keys += len(keys)
        if removed:
            self._moved = True
        bins = tuple(sorted(self._reported))
        return [(bins, Delta({k: data[k] for k in present}, removed))]

    def _whole(self, changed: set[int]) -> list[tuple[tuple[int, ...], Any]]:
        """Every bin held as one piece (the index is up to date), and ``None`` for each bin emptied: bins it stood
        for before, and bins ``changed`` (a key left them: given away or deleted) that hold nothing now."""
        self._deltas = self._delta_keys = self._since_whole = 0
        self._rebase = False
        held = sorted(b for b, m in self._members.items() if m)
        emptied = (self._reported | changed) - set(held)
        pieces: list[tuple[tuple[int, ...], Any]] = [((b,), None) for b in sorted(emptied)]
        self._reported = set(held)
        for b in emptied:
            self._members.pop(b, None)
        memo = self._keys
        memo.stable, self._moved = not self._moved, False
        if held:
            pieces.append((tuple(held), Whole(tuple(held), self.data, memo)))
        return pieces

    def restore_piece(self, bins: Collection[int], value: Any) -> None:
        """Install a piece's keys of ``bins``: all of it when it stands for exactly those bins, else filtered; a
        :class:`Delta` is applied (its keys of ``bins`` set or removed) over what its bins hold."""
        if not value:
            return
        self._moved = True
        if isinstance(value, Delta):
            self._apply(bins, value)
            return
        if isinstance(value, Whole):
            covered, items = value.bins, value.data
        else:
            covered, items = tuple(bins), value
        wanted = set(bins)
        find, bin_of, members = self._find, self._bin_of, self._members
        if set(covered) == wanted and len(wanted) == 1:
            (b,) = wanted
            self.data.update(items)
            members.setdefault(b, set()).update(items)
            bin_of.update(dict.fromkeys(items, b))
        else:
            for k, v in items.items():
                b = find(k)
                if b in wanted:
                    self.data[k] = v
                    bin_of[k] = b
                    m = members.get(b)
                    if m is None:
                        members[b] = {k}
                    else:
                        m.add(k)
        self._reported.update(b for b in wanted if members.get(b))

    def _apply(self, bins: Collection[int], delta: Delta) -> None:
        """Set and remove the keys of ``delta`` that lie in ``bins``."""
        wanted = set(bins)
        find, bin_of, members, data = self._find, self._bin_of, self._members, self.data
        for k, v in delta.changed.items():
            b = find(k)
            if b in wanted:
                data[k] = v
                bin_of[k] = b
                m = members.get(b)
                if m is None:
                    members[b] = {k}
                else:
                    m.add(k)
        for k in delta.removed:
            b = find(k)
            if b in wanted and k in data:
                del data[k]
                bin_of.pop(k, None)
                m = members.get(b)
                if m is not None:
                    m.discard(k)
        # A bin the delta emptied stays reported: the next whole piece says it is empty, which takes it, and the
        # deltas naming it, out of the manifest.
        self._reported.update(b for b in wanted if b in members)

    def extract(self, bins: Collection[int]) -> dict[Any, V]:
        """Remove and return the keys of ``bins`` (a bin moving to another worker)."""
        self._moved = True
        self._rebase = True
        self._sync()
        out: dict[Any, V] = {}
        data = self.data
        for b in bins:
            for k in self._members.get(b, ()):
                out[k] = data.pop(k)
        self._touched.update(out)
        return out


@dataclass(slots=True)
class KeysMemo:
    """What an encoder of :class:`Whole` pieces may keep of a state's keys from one piece to the next: the keys it
    wrote last and their bytes. ``stable``: no key came or went since then (the state says so from the writes it
    was told of), so the keys, in the same order, may be written as they were."""

    keys: list[Any] | None = None
    encoded: bytes | None = None
    stable: bool = False


@dataclass(frozen=True, slots=True)
class Whole:
    """A piece standing for many bins of a :class:`KeyedState`: the bins it covered when written, and their keys
    (what :meth:`KeyedState.capture` gives when most keys were written, and :meth:`KeyedState.restore_piece` takes).
    ``memo`` is the state's :class:`KeysMemo` (not part of the piece's value)."""

    bins: tuple[int, ...]
    data: dict[Any, Any]
    memo: KeysMemo | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece standing for many bins of a :class:`KeyedState`: the keys written (``changed``, with their values) and
    ``removed`` since the capture before. Restored over the bins' last whole piece and the deltas before it, in
    order (what :meth:`KeyedState.capture` gives when few keys changed, and :meth:`KeyedState.restore_piece`
    takes). The bins it stands for are the manifest's to say (a bit set), not the piece's."""

    changed: dict[Any, Any]
    removed: tuple[Any, ...] = ()


class Value(Generic[V]):
    """A small per-worker value (:class:`WorkerState`); ``merge`` combines the values of old workers on restore.

    The default merge keeps the first value; a counter merges with ``sum``.
    """

    def __init__(self, value: V, merge: Callable[[Sequence[V]], V] | None = None) -> None:
        self.value = value
        self._merge = merge

    def snapshot(self) -> V:
        """The value."""
        return self.value

    def restore(self, values: Sequence[Any]) -> None:
        """The merge of the old workers' values."""
        if values:
            self.value = self._merge(values) if self._merge is not None else values[0]


class Log(Generic[V]):
    """An append-only list (:class:`LogState`): ``items`` only grows; a snapshot writes only the new entries."""

    def __init__(self, items: list[V] | None = None) -> None:
        self.items: list[V] = [] if items is None else items
        self._written = 0

    def append(self, item: V) -> None:
        """Add ``item``."""
        self.items.append(item)

    def appended(self) -> list[V]:
        """The entries since the last call."""
        items = self.items
        new = items[self._written :]
        self._written = len(items)
        return new

    def entries(self) -> list[V]:
        """Every entry."""
        return list(self.items)

    def restore(self, entries: list[Any]) -> None:
        """Put ``entries`` back in front of whatever is there."""
        self.items[:0] = entries
        self._written += len(entries)
