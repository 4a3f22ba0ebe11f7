"""Taking a snapshot of an operator's declared states: what changed of each, encoded into one epoch's part.

The operators of a dataflow are snapshotted at an epoch one by one, as each passes its fence
(:mod:`pytimely.recovery.fences`); what each gives is encoded at once (:mod:`pytimely.recovery.codec`), so that
later changes cannot reach it, into the :class:`Assembling` part of that epoch, which goes to the writer as one
file once every operator is past the epoch. :class:`History` is what snapshots remember from one to the next:
the pieces a log was written in, the value a worker state had, the old workers' slots taken over on restore.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytimely.dataflow.state import Delta, PiecewiseState
from pytimely.errors import RecoveryError
from pytimely.recovery.codec import encode
from pytimely.recovery.parts import Part, Where

if TYPE_CHECKING:
    from pytimely.dataflow.state import BinnedState, Declared, LogState, WorkerState

__all__ = ["Assembling", "Capture", "History", "bin_mask", "binned_changes", "capture_states"]


def bin_mask(bins: tuple[int, ...]) -> int:
    """``bins`` as a set of bits (bit ``b`` for bin ``b``): how a delta names the bins it stands for."""
    mask = 0
    for b in bins:
        mask |= 1 << b
    return mask


def binned_changes(state: BinnedState, turn: int, rewrite_every: int) -> list[tuple[tuple[int, ...], Any]]:
    """What a snapshot writes of a keyed state, as ``(bins, value)`` pieces: the bins that changed (``None``:
    emptied) and, in turn, one ``rewrite_every``-th of the bins that did not (so no file is needed by more than
    ``rewrite_every`` snapshots). A :class:`~pytimely.dataflow.state.PiecewiseState` says so itself."""
    if isinstance(state, PiecewiseState):
        return state.capture(turn, rewrite_every)
    dirty = set(state.changed())
    rewrite = {b for b in state.held() if b % rewrite_every == turn} - dirty
    values = state.snapshot(dirty | rewrite) if dirty or rewrite else {}
    return [((b,), v) for b, v in sorted(values.items())]


@dataclass(slots=True)
class Capture:
    """A snapshot taken and on its way: the part to report, once its file (if any) is written."""

    epoch: int
    part: Part
    write: Future[tuple[str, int, str]] | None
    taken: Callable[[], None] | None = None
    """Tells the worker the write's result was taken (it counted as work under way until then)."""


@dataclass(slots=True)
class Assembling:
    """The part of one epoch while the operators of a dataflow take their snapshots of it, one by one, and the
    bytes of its payload file so far."""

    part: Part
    name: str
    buffer: bytearray = field(default_factory=bytearray)

    def add(self, data: bytes) -> Where:
        """Append encoded ``data`` to the payload; where it lies."""
        where = (self.name, len(self.buffer), len(data))
        self.buffer.extend(data)
        return where

    def piece(self, value: Any, operator: str, key: str) -> Where:
        """Encode ``value`` (of state ``key`` of ``operator``) into the payload; where it lies."""
        return self.add(_encoded(value, operator, key, self.part.epoch))


def _encoded(value: Any, operator: str, key: str, epoch: int) -> bytes:
    """``encode(value)``; a value that cannot be is a :class:`~pytimely.errors.RecoveryError` naming the
    operator, the state and the epoch."""
    try:
        return encode(value)
    except Exception as exc:
        raise RecoveryError(
            f"operator {operator!r}: its state {key.rsplit('/', 1)[-1]!r} cannot be pickled for a snapshot "
            f"at epoch {epoch}: {type(exc).__name__}: {exc}"
        ) from None


@dataclass(slots=True)
class History:
    """What one dataflow's snapshots on one worker remember from one to the next (see the module doc)."""

    logs: dict[str, list[Where]] = field(default_factory=dict)
    values: dict[str, bytes] = field(default_factory=dict)
    masks: dict[str, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    """Per keyed state: the bins its last delta stood for, and their :func:`bin_mask` (mostly the same again)."""
    absorbed: dict[str, list[int]] = field(default_factory=dict)
    """Per worker or log state: the slots of old workers taken over on restore, reported with the next part."""


def capture_states(
    into: Assembling,
    operator: str,
    states: list[tuple[str, Declared]],
    history: History,
    turn: int,
    rewrite_every: int,
) -> None:
    """Take what changed of an operator's declared ``states`` into ``into`` (``turn``: the operator's turn in
    the rewriting of unchanged bins)."""
    part = into.part
    for key, declared in states:
        state = declared.state
        kind = declared.kind
        if kind == "binned":
            _binned(into, operator, key, state, history, turn, rewrite_every)
        elif kind == "worker":
            _value(into, operator, key, state, history, rewrite=turn == 0)
        elif kind == "log":
            _log(into, operator, key, state, history, rewrite_every)
        else:
            changed = state.changed()
            if changed:
                part.positions[key] = changed


def _binned(
    into: Assembling, operator: str, key: str, state: BinnedState, history: History, turn: int, rewrite_every: int
) -> None:
    written = binned_changes(state, turn, rewrite_every)
    part = into.part
    for bins, v in written:
        where = None if v is None else into.piece(v, operator, key)
        if type(v) is Delta:
            assert where is not None
            known = history.masks.get(key)
            if known is None or known[0] != bins:
                known = history.masks[key] = (bins, bin_mask(bins))
            part.deltas.setdefault(key, []).append((where, known[1]))
            continue
        places = part.binned.setdefault(key, {})
        for b in bins:
            places[b] = where


def _value(
    into: Assembling, operator: str, key: str, state: WorkerState, history: History, *, rewrite: bool
) -> None:
    """A worker's value, when it changed; and, in turn, when it did not (so an old segment is not kept for it)."""
    data = _encoded(state.snapshot(), operator, key, into.part.epoch)
    if history.values.get(key) != data or history.absorbed.get(key) or rewrite:
        history.values[key] = data
        into.part.values[key] = into.add(data)


def _log(into: Assembling, operator: str, key: str, state: LogState, history: History, rewrite_every: int) -> None:
    new = state.appended()
    pieces = history.logs.setdefault(key, [])
    if new or history.absorbed.get(key):
        if len(pieces) >= rewrite_every:
            pieces[:] = [into.piece(state.entries(), operator, key)]
        elif new:
            pieces.append(into.piece(new, operator, key))
        into.part.logs[key] = list(pieces)  # the list goes on growing here
