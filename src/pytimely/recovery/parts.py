"""What each worker reports of a snapshot, and how the reports of every worker become one manifest.

A :class:`Part` is one worker's report of one dataflow's state at one epoch: for each state, the bins that
changed (each with the place of its piece in a payload file, or ``None`` for a bin it emptied) or a delta over
the bins it holds (the keys written and removed since its snapshot before), its whole value
(worker state), the pieces of its log, the positions of its source partitions, and the old workers' slots it
took over on restore. :func:`merge` folds the parts of an epoch into the manifest before it:

* a bin is where the one part holding it says (two parts holding one bin is an error: a bin is on one worker);
  a bin reported empty and held by no part goes; a bin no part names stays where it was (unchanged);
* a delta is appended to the manifest's chain of deltas, standing for its bins after their pieces; a bin given
  a piece of its own leaves every delta before it (the piece holds what they did), so the chains hold only what
  came after each bin's piece, and the merge's work follows the deltas kept, not the bins;
* a worker's value and log replace that worker's; the slots of old workers a worker took over go.

A worker whose dataflow has finished sends no parts for later epochs: what it reported last stays in every
later manifest, which is right, as nothing it holds changes any more.

The merge is a pure function, so the rescaling model's lockstep test (``tests/lockstep/test_rescale_lockstep.py``)
drives exactly the code the committing worker runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytimely.errors import RecoveryError
from pytimely.recovery.manifest import Manifest

__all__ = ["Part", "Where", "merge"]

Where = tuple[str, int, int]
"""A piece of state: ``(payload file, offset, length)``."""


@dataclass(slots=True)
class Part:
    """One worker's report of one dataflow's state at one epoch (see the module doc)."""

    worker: int
    dataflow: int
    epoch: int
    final: bool = False
    """Whether the dataflow had finished on every worker when this worker took it (its last part)."""
    files: list[tuple[str, int, str]] = field(default_factory=list)
    binned: dict[str, dict[int, Where | None]] = field(default_factory=dict)
    values: dict[str, Where] = field(default_factory=dict)
    logs: dict[str, list[Where]] = field(default_factory=dict)
    positions: dict[str, dict[int, Any]] = field(default_factory=dict)
    absorbed: dict[str, list[int]] = field(default_factory=dict)
    """Per worker or log state: the slots of old workers this worker took over on restore."""
    deltas: dict[str, list[tuple[Where, int]]] = field(default_factory=dict)
    """Per keyed state: the deltas written, oldest first: where each lies, and the bins it stands for (bit ``b``
    for bin ``b``)."""


Chains = dict[str, list[tuple[Where, int]]]
"""Per keyed state: its deltas, oldest first, each with the bins it stands for (bit ``b`` for bin ``b``)."""


def _places(manifest: Manifest) -> tuple[dict[str, dict[int, Where]], dict[str, dict[int, Where]],
                                          dict[str, dict[int, list[Where]]], Chains]:
    names = manifest.files

    def where(piece: tuple[int, int, int]) -> Where:
        return (names[piece[0]][0], piece[1], piece[2])

    binned = {k: {b: where(p) for b, p in v.items()} for k, v in manifest.binned.items()}
    values = {k: {w: where(p) for w, p in v.items()} for k, v in manifest.worker.items()}
    logs = {k: {w: [where(p) for p in ps] for w, ps in v.items()} for k, v in manifest.logs.items()}
    deltas = {k: [(where(p), bins) for p, bins in v] for k, v in manifest.deltas.items()}
    return binned, values, logs, deltas


def merge(previous: Manifest | None, epoch: int, parts: list[Part], identity: str, peers: int) -> Manifest:
    """The manifest of ``epoch``: ``previous`` with every part of the epoch folded in (module doc)."""
    if previous is not None:
        binned, values, logs, deltas = _places(previous)
        positions = {k: dict(v) for k, v in previous.positions.items()}
        sizes = {name: (size, sha) for name, size, sha in previous.files}
    else:
        binned, values, logs, positions, sizes, deltas = {}, {}, {}, {}, {}, {}
    ordered = sorted(parts, key=lambda p: (p.worker, p.dataflow))
    for part in ordered:
        for name, size, sha in part.files:
            sizes[name] = (size, sha)
    _fold_bins(binned, deltas, ordered, epoch)
    _fold_workers(values, logs, positions, ordered)
    return _manifest(epoch, identity, peers, sizes, binned, values, logs, positions, deltas)


def _fold_bins(binned: dict[str, dict[int, Where]], deltas: Chains, ordered: list[Part], epoch: int) -> None:
    """Each bin a part holds goes where that part says, leaving the deltas before; a bin emptied and held by no
    part goes; a part's deltas go at the end of their chain."""
    holder: dict[tuple[str, int], int] = {}
    for part in ordered:
        for key, bins in part.binned.items():
            into = binned.setdefault(key, {})
            for b, piece in bins.items():
                if piece is None:
                    continue
                other = holder.get((key, b))
                if other is not None:
                    _held_twice(epoch, key, b, other, part.worker)
                holder[(key, b)] = part.worker
                into[b] = piece
    # Bins given pieces, as bit sets: only for the states with deltas (a job without any pays nothing for them).
    chained = {key for key, chain in deltas.items() if chain} | {key for p in ordered for key in p.deltas}
    rebased: dict[str, int] = {}
    for part in ordered:
        for key, bins in part.binned.items():
            if key in chained:
                mask = rebased.get(key, 0)
                for b in bins:
                    mask |= 1 << b
                rebased[key] = mask
    delta_held: dict[str, list[tuple[int, int]]] = {}
    for part in ordered:
        for key, chain in part.deltas.items():
            taken = delta_held.setdefault(key, [])
            for _, covered in chain:
                for other, mask in taken:
                    if other != part.worker and covered & mask:
                        _held_twice(epoch, key, _lowest(covered & mask), other, part.worker)
                both = covered & rebased.get(key, 0)
                if both and (key, _lowest(both)) in holder:
                    _held_twice(epoch, key, _lowest(both), holder[(key, _lowest(both))], part.worker)
                taken.append((part.worker, covered))
    for part in ordered:
        for key, bins in part.binned.items():
            into = binned.setdefault(key, {})
            for b, piece in bins.items():
                if piece is None and (key, b) not in holder:
                    into.pop(b, None)
    for key, mask in rebased.items():
        kept = deltas.get(key)
        if kept:
            deltas[key] = [(where, covered & ~mask) for where, covered in kept if covered & ~mask]
    for part in ordered:
        for key, chain in part.deltas.items():
            deltas.setdefault(key, []).extend(chain)


def _lowest(mask: int) -> int:
    """The lowest bin of a non-empty set of bits."""
    return (mask & -mask).bit_length() - 1


def _held_twice(epoch: int, key: str, b: int, first: int, second: int) -> None:
    raise RecoveryError(
        f"snapshot of epoch {epoch}: bin {b} of state {key!r} is held by workers {first} and {second} at once"
    )


def _fold_workers(
    values: dict[str, dict[int, Where]],
    logs: dict[str, dict[int, list[Where]]],
    positions: dict[str, dict[int, Any]],
    ordered: list[Part],
) -> None:
    """A worker's value and log replace that worker's; the old workers' slots a worker took over go."""
    reported = {(k, p.worker) for p in ordered for k in (*p.values, *p.logs)}
    for part in ordered:
        for key, slots in part.absorbed.items():
            for slot in slots:
                if (key, slot) not in reported:
                    values.get(key, {}).pop(slot, None)
                    logs.get(key, {}).pop(slot, None)
        for key, piece in part.values.items():
            values.setdefault(key, {})[part.worker] = piece
        for key, pieces in part.logs.items():
            logs.setdefault(key, {})[part.worker] = list(pieces)
        for key, changed in part.positions.items():
            positions.setdefault(key, {}).update(changed)


def _manifest(
    epoch: int,
    identity: str,
    peers: int,
    sizes: dict[str, tuple[int, str]],
    binned: dict[str, dict[int, Where]],
    values: dict[str, dict[int, Where]],
    logs: dict[str, dict[int, list[Where]]],
    positions: dict[str, dict[int, Any]],
    deltas: Chains,
) -> Manifest:
    """The manifest naming every place: each file it needs once, in the order first named, with its size and hash."""
    used: dict[str, int] = {}
    files: list[tuple[str, int, str]] = []

    def index(where: Where) -> tuple[int, int, int]:
        name = where[0]
        i = used.get(name)
        if i is None:
            if name not in sizes:
                raise RecoveryError(f"snapshot of epoch {epoch}: {name} is named but was never reported written", name)
            i = used[name] = len(files)
            files.append((name, *sizes[name]))
        return (i, where[1], where[2])

    manifest = Manifest(epoch, identity, peers)
    for key in sorted(binned):
        if binned[key]:
            manifest.binned[key] = {b: index(w) for b, w in sorted(binned[key].items())}
    for key in sorted(values):
        if values[key]:
            manifest.worker[key] = {s: index(w) for s, w in sorted(values[key].items())}
    for key in sorted(logs):
        if logs[key]:
            manifest.logs[key] = {s: [index(w) for w in ws] for s, ws in sorted(logs[key].items())}
    for key in sorted(deltas):
        if deltas[key]:
            manifest.deltas[key] = [(index(w), bins) for w, bins in deltas[key]]
    manifest.positions = {k: dict(sorted(v.items())) for k, v in sorted(positions.items()) if v}
    manifest.files = files
    return manifest
