"""Keyed state in bins: every key falls in one of a fixed number of bins, and a table says which worker owns
each bin from which time on (the routing state of Megaphone, seed ``002_640294948a1fdfd3.txt`` §3.5).

* :func:`bin_of` maps a key to its bin the same way in every process: ints by value, ``str`` and ``bytes``
  by CRC-32 of their bytes (not Python's salted ``hash``), tuples element by element, floats equal to
  an int like that int. :func:`bins_of` does the same for a numpy integer array at once.
* :class:`BinTable` maps bins to workers and keeps the changes scheduled at later times; ``at(t)`` is
  the table in force at ``t``: the base table with every change at a time ``<= t`` applied, in time order.
* :class:`Move` is what a control stream carries: from ``time`` on, ``bin`` belongs to ``worker``.

The operators that use these (``count_by``, ``sum_by``, ``fold_by``, ``reduce_by``, ``join``,
``state_machine``) and the migration of state between workers are described in
:mod:`pytimely.dataflow.operators.binned`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from zlib import crc32

from pytimely.container.keys import key_hash
from pytimely.errors import BinCountError, BinRangeError, UnknownWorkerError
from pytimely.order import sort_key

__all__ = ["DEFAULT_BINS", "BinTable", "Move", "bin_of", "binner", "bins_of", "key_hash"]

DEFAULT_BINS = 256
"""How many bins keyed operators use unless told otherwise."""

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
"""2**64 / golden ratio: multiplying by it spreads consecutive and strided ints over the high bits."""


def _check_bins(bins: int) -> None:
    if type(bins) is not int or not 1 <= bins <= 1 << 32:
        raise BinCountError(f"the number of bins must be an int from 1 to 2**32, got {bins!r}")


def bin_of(key: Any, bins: int = DEFAULT_BINS) -> int:
    """The bin of ``key`` among ``bins`` bins (``0 <= bin < bins``), the same in every process."""
    _check_bins(bins)
    # The high 32 bits of the mixed hash, scaled to ``bins`` (a multiply-shift range reduction).
    return (((key_hash(key) * _GOLDEN) & _MASK) >> 32) * bins >> 32


def binner(bins: int = DEFAULT_BINS) -> Callable[[Any], int]:
    """A fast ``key -> bin`` function for ``bins`` bins (what :func:`bin_of` computes), for per-record loops."""
    _check_bins(bins)
    mask, golden = _MASK, _GOLDEN
    general = key_hash

    def bin_of_key(key: Any) -> int:
        kind = type(key)
        h: int
        if kind is int:
            h = key & mask
        elif kind is str:
            h = crc32(key.encode("utf-8", "surrogatepass")) | 1 << 32
        else:
            h = general(key)
        return (((h * golden) & mask) >> 32) * bins >> 32

    return bin_of_key


def bins_of(keys: Any, bins: int = DEFAULT_BINS) -> Any:
    """The bins of a numpy array of keys (one per row), as an int64 array; integer arrays are vectorised."""
    import numpy as np

    _check_bins(bins)
    array = np.asarray(keys)
    if array.dtype.kind in "iub":
        # uint64 arithmetic wraps modulo 2**64, exactly like the masked Python ints of ``key_hash``.
        h = array.astype(np.uint64, copy=False) * np.uint64(_GOLDEN)
        return ((h >> np.uint64(32)) * np.uint64(bins) >> np.uint64(32)).astype(np.int64)
    one = binner(bins)
    return np.fromiter((one(k) for k in array.tolist()), dtype=np.int64, count=len(array))


@dataclass(frozen=True, slots=True)
class Move:
    """A change of the routing table: from ``time`` on, ``bin`` belongs to ``worker``."""

    time: Any
    bin: int
    worker: int


class BinTable:
    """Which worker owns each bin, with the changes scheduled at later times.

    ``at(t)`` gives the owners in force at ``t``: the base owners with every scheduled change at a time
    ``<= t`` applied in time order. Workers are named by stable ids, ``0 <= id < peers``.
    """

    __slots__ = ("_arrays", "_base", "_cache", "_changes", "bins", "peers")

    def __init__(self, owners: Sequence[int], peers: int) -> None:
        _check_bins(len(owners))
        self.bins = len(owners)
        self.peers = peers
        for b, worker in enumerate(owners):
            self._check_worker(worker, f"bin {b}")
        self._base: list[int] = list(owners)
        self._changes: dict[Any, dict[int, int]] = {}
        self._cache: dict[Any, list[int]] = {}
        self._arrays: dict[Any, Any] = {}

    @classmethod
    def default(cls, peers: int, bins: int = DEFAULT_BINS) -> BinTable:
        """Bin ``b`` on worker ``b % peers``."""
        _check_bins(bins)
        return cls([b % peers for b in range(bins)], peers)

    def __repr__(self) -> str:
        return f"BinTable(bins={self.bins}, peers={self.peers}, changes at {self.times()!r})"

    def _check_worker(self, worker: Any, what: str) -> None:
        if type(worker) is not int or not 0 <= worker < self.peers:
            raise UnknownWorkerError(
                f"{what}: no worker {worker!r}; the workers are 0 to {self.peers - 1}", worker=worker
            )

    def check(self, move: Move) -> None:
        """Raise :class:`BinRangeError` or :class:`UnknownWorkerError` if ``move`` names what is not there."""
        if type(move.bin) is not int or not 0 <= move.bin < self.bins:
            raise BinRangeError(f"{move!r}: no bin {move.bin!r}; the bins are 0 to {self.bins - 1}", bin=move.bin)
        self._check_worker(move.worker, repr(move))

    def schedule(self, moves: Iterable[Move]) -> None:
        """Add changes (each checked first); a later change of the same bin at the same time wins."""
        for move in moves:
            self.check(move)
            self._changes.setdefault(move.time, {})[move.bin] = move.worker
        self._cache.clear()
        self._arrays.clear()

    def times(self) -> list[Any]:
        """The times at which changes are scheduled, earliest first."""
        return sorted(self._changes, key=sort_key)

    def at(self, time: Any) -> list[int]:
        """The owner of every bin in force at ``time`` (a list indexed by bin; do not modify it)."""
        owners = self._cache.get(time)
        if owners is None:
            owners = self._compute(time, inclusive=True)
            self._cache[time] = owners
        return owners

    def array_at(self, time: Any) -> Any:
        """:meth:`at` as an int64 numpy array, for vectorised lookups."""
        import numpy as np

        array = self._arrays.get(time)
        if array is None:
            array = self._arrays[time] = np.asarray(self.at(time), dtype=np.int64)
        return array

    def single_owner(self, time: Any) -> int | None:
        """The worker that owns every bin at ``time``, if one does."""
        owners = self.at(time)
        first = owners[0]
        return first if owners.count(first) == len(owners) else None

    def before(self, time: Any) -> list[int]:
        """The owners in force just before ``time``: every change at a time ``< time`` applied."""
        return self._compute(time, inclusive=False)

    def owner(self, bin: int, time: Any) -> int:
        """The worker that owns ``bin`` at ``time``."""
        return self.at(time)[bin]

    def moving_at(self, time: Any) -> dict[int, tuple[int, int]]:
        """``bin -> (old owner, new owner)`` for the bins whose owner changes at ``time``."""
        old, new = self.before(time), self.at(time)
        return {b: (old[b], new[b]) for b in self._changes.get(time, {}) if old[b] != new[b]}

    def compact(self, time: Any) -> None:
        """Fold every change at a time ``<= time`` into the base (no lookup earlier than ``time`` follows)."""
        done = [t for t in self._changes if t <= time]
        if not done:
            return
        base = list(self._base)  # lists handed out by ``at`` stay as they were
        for t in sorted(done, key=sort_key):
            for b, worker in self._changes.pop(t).items():
                base[b] = worker
        self._base = base
        self._cache.clear()
        self._arrays.clear()

    def _compute(self, time: Any, inclusive: bool) -> list[int]:
        owners = self._base
        if not self._changes:
            return owners
        owners = list(owners)
        for t in self.times():
            if t <= time and (inclusive or t != time):
                for b, worker in self._changes[t].items():
                    owners[b] = worker
        return owners
