"""Restoring declared state before a dataflow's first step, on any number of workers.

A worker of a run of ``peers`` workers takes what the snapshot holds for bin (or old worker, or source
partition) ``s`` when :func:`owner_on_restore` gives it ``s``: bin ``b`` of a keyed state goes where a keyed
operator routes it by default, the values and logs of old worker ``w`` to worker ``w % peers``, and source
partition ``p`` to worker ``p % peers``. Each piece is decoded (:mod:`pytimely.recovery.codec`) only from a
snapshot whose seal and checksums were verified when it was opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytimely.dataflow.state import PiecewiseState
from pytimely.errors import SnapshotCorruptError
from pytimely.recovery.codec import decode

if TYPE_CHECKING:
    from pytimely.dataflow.state import Declared
    from pytimely.recovery.capture import History
    from pytimely.recovery.parts import Where
    from pytimely.recovery.snapshots import Opened

__all__ = ["owner_on_restore", "restore_states"]

Piece = tuple[int, int, int]
"""A piece as a manifest names it: ``(file index, offset, length)``."""


def owner_on_restore(slot: int, peers: int) -> int:
    """The worker that restores bin (or old worker, or source partition) ``slot`` in a run of ``peers`` workers:
    where a keyed operator routes the bin by default (``exchange_by_bin``, ``BinTable.default``)."""
    return slot % peers


class _Loader:
    """Decodes the pieces of one opened snapshot; a piece that does not decode is a typed error naming its file."""

    def __init__(self, opened: Opened, where: str) -> None:
        self.opened = opened
        self.where = where

    def __call__(self, piece: Piece, key: str) -> Any:
        try:
            return decode(self.opened.piece(piece))
        except Exception as exc:  # a piece that passed its file's checksum but does not load
            name = self.opened.manifest.files[piece[0]][0]
            raise SnapshotCorruptError(
                f"recovery store {self.where}: {name}: state {key!r} does not load: {type(exc).__name__}: {exc}",
                name,
            ) from None


def restore_states(
    opened: Opened, where: str, states: list[tuple[str, Declared]], peers: int, me: int, history: History
) -> None:
    """Give each of ``states`` (key, declared state) what ``opened`` holds for worker ``me`` of ``peers``;
    note in ``history`` the log pieces kept and the old workers' slots taken over."""
    load = _Loader(opened, where)
    manifest = opened.manifest
    for key, declared in states:
        state = declared.state
        kind = declared.kind
        if kind == "binned":
            _binned(load, manifest.binned.get(key, {}), key, state, peers, me)
            _deltas(load, manifest.deltas.get(key, []), key, state, peers, me)
        elif kind == "worker":
            places = manifest.worker.get(key, {})
            slots = sorted(s for s in places if owner_on_restore(s, peers) == me)
            if slots:
                state.restore([load(places[s], key) for s in slots])
            history.absorbed[key] = [s for s in slots if s != me]
        elif kind == "log":
            _log(load, manifest.logs.get(key, {}), key, state, peers, me, history)
        else:
            positions = manifest.positions.get(key, {})
            state.restore({p: v for p, v in positions.items() if owner_on_restore(p, peers) == me})


def _binned(load: _Loader, places: dict[int, Piece], key: str, state: Any, peers: int, me: int) -> None:
    by_piece: dict[Piece, list[int]] = {}
    for b, piece in places.items():
        if owner_on_restore(b, peers) == me:
            by_piece.setdefault(piece, []).append(b)
    for piece, bins in by_piece.items():
        value = load(piece, key)
        if isinstance(state, PiecewiseState):
            state.restore_piece(bins, value)
        else:
            for b in bins:
                state.restore(b, value)


def _deltas(load: _Loader, chain: list[tuple[Piece, int]], key: str, state: Any, peers: int, me: int) -> None:
    """Apply a keyed state's deltas, oldest first, to the bins of theirs this worker restores."""
    for piece, mask in chain:
        mine = [b for b in range(mask.bit_length()) if mask >> b & 1 and owner_on_restore(b, peers) == me]
        if mine:
            state.restore_piece(mine, load(piece, key))


def _log(
    load: _Loader, places: dict[int, list[Piece]], key: str, state: Any, peers: int, me: int, history: History
) -> None:
    names = load.opened.manifest.files
    slots = sorted(s for s in places if owner_on_restore(s, peers) == me)
    entries: list[Any] = []
    pieces: list[Where] = []
    for s in slots:
        for piece in places[s]:
            entries.extend(load(piece, key))
            pieces.append((names[piece[0]][0], piece[1], piece[2]))
    if entries:
        state.restore(entries)  # restored entries count as written: appended() leaves them out
    history.logs[key] = pieces
    history.absorbed[key] = [s for s in slots if s != me]
