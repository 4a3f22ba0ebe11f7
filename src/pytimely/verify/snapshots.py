"""Snapshots and restarts (issue 28): keyed state through joins and leaves, with recovery.

The rescaling model (:mod:`pytimely.verify.rescale`) follows progress; this one follows keyed state through the
same membership changes and adds what recovery does with it: snapshots at epoch boundaries, commits, a crash and a
restart on any number of workers. Bins hold a count of the records applied to them; the records of epoch ``e`` for
bin ``b`` are fixed by the configuration, so the right count after epoch ``e`` (``truth``) is known. Records reach
the owner of their bin's at their epoch; a join or a leave moves bins at an epoch (Megaphone's moves, seed 002
§3.5): the old owner ships the bin once it has applied every earlier record, the new owner installs it. Each worker
snapshots at its fence once nothing at or before the fence is left anywhere, reports the bins it holds (and those
it held and gave away), and moves the fence on; a snapshot is committed once every member has reported, folded into
the one before. A crash loses everything but the committed snapshot; a restart on ``k`` workers gives bin ``b`` to
worker ``b % k`` and resumes at the epoch after the snapshot.

The runtime's rule that the model exists to check is the fence: while a worker's fence stands at ``f`` it
applies no record and installs no bin of a later epoch (the runtime holds those messages back), and ships no
bin at a later epoch (``OperatorInfo.may_change``). ``SnapshotExact`` fails without it (mutants ``no-fence``
and ``ship-early``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from pytimely.verify.model import Action, Invariant, TransitionInvariant
from pytimely.verify.rescale.state import LEAVING, LEFT, MEMBER, OUT, _set

NO_FENCE = "no-fence"
"""Mutant: records and installs of later epochs are taken while a snapshot is pending."""
SHIP_EARLY = "ship-early"
"""Mutant: a bin moving at a later epoch is shipped while a snapshot is pending."""
SNAPSHOT_MUTANTS = (NO_FENCE, SHIP_EARLY)


@dataclass(frozen=True)
class SnapshotConfig:
    """Bins, epochs and which bins have records at which epochs; workers; joins, leaves, restarts; a mutant."""

    bins: int = 2
    epochs: int = 3
    records: frozenset[tuple[int, int]] = frozenset({(0, 0), (1, 0), (0, 1), (1, 2)})
    """``(bin, epoch)``: a record for the bin at that epoch."""
    clears: frozenset[tuple[int, int]] = frozenset()
    """``(bin, epoch)``: a record that empties the bin (its keys are deleted: the bin goes from the snapshot)."""
    workers: int = 3
    """Worker ids ``0 .. workers-1`` (a restart starts ids again from 0)."""
    members: int = 2
    every: int = 1
    """Snapshot epochs ``e`` with ``e % every == every - 1`` (:class:`pytimely.recovery.SnapshotPolicy`)."""
    max_joins: int = 1
    max_leaves: int = 1
    max_restarts: int = 1
    mutant: str | None = None

    def truth(self, b: int, epoch: int) -> int:
        """The count of bin ``b`` once every record at an epoch ``<= epoch`` is applied."""
        # A clear empties the bin before the record of its own epoch is applied.
        cleared = max((ce for cb, ce in self.clears if cb == b and ce <= epoch), default=-1)
        return sum(1 for (rb, re) in self.records if rb == b and cleared <= re <= epoch)

    def changes(self, b: int, epoch: int) -> bool:
        """Whether a record changes bin ``b`` at ``epoch``."""
        return (b, epoch) in self.records or (b, epoch) in self.clears

    def first_at_or_after(self, epoch: int) -> int:
        """The first snapshot epoch ``>= epoch``."""
        return epoch + (self.every - 1 - epoch % self.every)


IN_FLIGHT = -1
"""``SnapState.holder[b]`` while bin ``b`` is shipped and not yet installed."""


class SnapState(NamedTuple):
    """A configuration of the snapshot model (module comment above)."""

    status: str
    """Per worker id: ``OUT``, ``MEMBER``, ``LEAVING`` or ``LEFT`` (joins and leaves are moves of bins here)."""
    released: int
    """Epochs the sources have sent: records of epochs ``< released`` exist."""
    holder: tuple[int, ...]
    """Per bin: the worker holding its state, or :data:`IN_FLIGHT`."""
    counts: tuple[int, ...]
    """Per bin: its count (where it is held, or in flight)."""
    done: tuple[int, ...]
    """Per bin: the last epoch applied to it (``-1``: none)."""
    moves: frozenset[tuple[int, int, int]]
    """``(bin, epoch, new owner)`` not yet installed (shipped or not)."""
    flight: frozenset[tuple[int, int, int]]
    """``(bin, epoch, new owner)`` shipped and not yet installed."""
    table: tuple[int, ...]
    """Per bin: its owner (a pending move names the owner from the move's epoch on)."""
    fence: tuple[int | None, ...]
    """Per worker: its fence (``None``: no more snapshots)."""
    stop: tuple[int | None, ...]
    """Per worker: the epoch it leaves at, if it leaves."""
    reported: tuple[frozenset[int], ...]
    """Per worker: the non-empty bins it held at its last snapshot, and those installed since (each reported
    empty at its next snapshot if it no longer holds it)."""
    parts: frozenset[tuple[int, int, tuple[tuple[int, int | None], ...]]]
    """``(epoch, worker, ((bin, count or None), ...))`` reported and not yet committed."""
    joined_at: tuple[int | None, ...]
    """Per worker: the epoch it joined at (``None``: a member from the start of the run)."""
    committed: tuple[int, tuple[int, ...]] | None
    """The newest committed snapshot: its epoch and every bin's count."""
    joins: int
    leaves: int
    restarts: int


def _snap_status(s: SnapState, w: int, st: str) -> str:
    return s.status[:w] + st + s.status[w + 1 :]


def snap_initial_states(cfg: SnapshotConfig) -> Iterator[SnapState]:
    """The one initial configuration: bin ``b`` on worker ``b % members``, fences at the first snapshot epoch."""
    n = cfg.workers
    yield SnapState(
        status=MEMBER * cfg.members + OUT * (n - cfg.members),
        released=0,
        holder=tuple(b % cfg.members for b in range(cfg.bins)),
        counts=(0,) * cfg.bins,
        done=(-1,) * cfg.bins,
        moves=frozenset(),
        flight=frozenset(),
        table=tuple(b % cfg.members for b in range(cfg.bins)),
        fence=tuple(cfg.first_at_or_after(0) if w < cfg.members else None for w in range(n)),
        stop=(None,) * n,
        reported=(frozenset(),) * n,
        parts=frozenset(),
        joined_at=(None,) * n,
        committed=None,
        joins=0,
        leaves=0,
        restarts=0,
    )


def _may(cfg: SnapshotConfig, s: SnapState, w: int, epoch: int, *, ship: bool = False) -> bool:
    """The fence rule: worker ``w`` may change state at ``epoch`` (a mutant lifts it)."""
    if cfg.mutant == (SHIP_EARLY if ship else NO_FENCE):
        return True
    fence = s.fence[w]
    return fence is None or epoch <= fence


def _owner_at(s: SnapState, b: int, epoch: int) -> int:
    """The owner of bin ``b`` at ``epoch``: a pending move's new owner from its epoch on, else the table's."""
    for mb, me, to in s.moves:
        if mb == b and me <= epoch:
            return to
    return s.table[b]


def snap_lows(s: SnapState, cfg: SnapshotConfig) -> list[int]:
    """The epochs of the pointstamps left: the sources' next epoch, records not yet applied, moves not done."""
    lows = [s.released] if s.released < cfg.epochs else []
    lows += [s.done[b] + 1 for b in range(cfg.bins) if s.done[b] + 1 < s.released]
    lows += [e for _, e, _ in s.moves]
    return lows


def release_enabled(cfg: SnapshotConfig, s: SnapState) -> bool:
    """``release``: the sources send the next epoch (none while a membership change waits to be made)."""
    return s.released < cfg.epochs


def release(cfg: SnapshotConfig, s: SnapState) -> SnapState:
    """Effect: records of one more epoch exist."""
    return s._replace(released=s.released + 1)


def apply_enabled(cfg: SnapshotConfig, s: SnapState, b: int) -> bool:
    """``apply b``: bin ``b``'s next epoch is released, its holder owns it then, and (with a record) may change."""
    e = s.done[b] + 1
    if e >= s.released:
        return False
    w = s.holder[b]
    if w == IN_FLIGHT or _owner_at(s, b, e) != w:
        return False
    return not cfg.changes(b, e) or _may(cfg, s, w, e)


def apply(cfg: SnapshotConfig, s: SnapState, b: int) -> SnapState:
    """Effect: the records of bin ``b`` at its next epoch (if any) are applied; the epoch is done for ``b``."""
    e = s.done[b] + 1
    count = 0 if (b, e) in cfg.clears else s.counts[b]
    count += 1 if (b, e) in cfg.records else 0
    return s._replace(counts=_set(s.counts, b, count), done=_set(s.done, b, e))


def ship_enabled(cfg: SnapshotConfig, s: SnapState, b: int) -> bool:
    """``ship b``: a move of ``b`` at ``e`` waits, every earlier epoch is applied, the holder may change at ``e``."""
    for move in s.moves:
        if move[0] == b and move not in s.flight:
            w = s.holder[b]
            return w != IN_FLIGHT and s.done[b] == move[1] - 1 and _may(cfg, s, w, move[1], ship=True)
    return False


def ship(cfg: SnapshotConfig, s: SnapState, b: int) -> SnapState:
    """Effect: the bin leaves its holder (its count travels with it)."""
    move = next(m for m in s.moves if m[0] == b)
    return s._replace(holder=_set(s.holder, b, IN_FLIGHT), flight=s.flight | {move})


def install_enabled(cfg: SnapshotConfig, s: SnapState, b: int) -> bool:
    """``install b``: a shipped bin reaches its new owner, which may change at the move's epoch."""
    return any(mb == b and _may(cfg, s, w, e) for mb, e, w in s.flight)


def install(cfg: SnapshotConfig, s: SnapState, b: int) -> SnapState:
    """Effect: the new owner holds the bin; the move is done. The new owner answers for the bin at its next
    snapshot even if it has emptied it by then (its last report of the bin was another worker's)."""
    move = next(m for m in s.flight if m[0] == b)
    to = move[2]
    return s._replace(
        holder=_set(s.holder, b, to), table=_set(s.table, b, to), flight=s.flight - {move},
        moves=s.moves - {move}, reported=_set(s.reported, to, s.reported[to] | {b}),
    )


def _rebalanced(s: SnapState, members: list[int]) -> dict[int, int]:
    """Bins that change owner when the members become ``members``: as few as keep shares within one."""
    from pytimely.algorithms.rescaling import rebalance

    return dict(rebalance(list(s.table), members))


def snap_join_enabled(cfg: SnapshotConfig, s: SnapState, n: int) -> bool:
    """``join n``: ``n`` is not in the run yet, no move is pending, joins left, epochs left to take part in."""
    return s.status[n] == OUT and not s.moves and s.joins < cfg.max_joins and s.released < cfg.epochs


def snap_join(cfg: SnapshotConfig, s: SnapState, n: int) -> SnapState:
    """Effect: ``n`` takes part from the next epoch; bins move to it then; its fence is the first at or after it."""
    at = s.released
    members = [w for w, st in enumerate(s.status) if st == MEMBER] + [n]
    moves = frozenset((b, at, w) for b, w in _rebalanced(s, members).items())
    return s._replace(
        status=_snap_status(s, n, MEMBER), moves=moves, joins=s.joins + 1,
        fence=_set(s.fence, n, cfg.first_at_or_after(at)), joined_at=_set(s.joined_at, n, at),
    )  # fmt: skip


def snap_leave_enabled(cfg: SnapshotConfig, s: SnapState, w: int) -> bool:
    """``leave w``: a member other than worker 0, no move pending, leaves left, epochs left."""
    return (
        w != 0 and s.status[w] == MEMBER and not s.moves and s.leaves < cfg.max_leaves and s.released < cfg.epochs
    )


def snap_leave(cfg: SnapshotConfig, s: SnapState, w: int) -> SnapState:
    """Effect: from the next epoch ``w``'s bins are the others'; it takes no snapshot at or after that epoch."""
    at = s.released
    members = [m for m, st in enumerate(s.status) if st == MEMBER and m != w]
    moves = frozenset((b, at, to) for b, to in _rebalanced(s, members).items())
    fence = s.fence[w]
    return s._replace(
        status=_snap_status(s, w, LEAVING), moves=moves, leaves=s.leaves + 1,
        stop=_set(s.stop, w, at), fence=_set(s.fence, w, None if fence is not None and fence >= at else fence),
    )  # fmt: skip


def gone_enabled(cfg: SnapshotConfig, s: SnapState, w: int) -> bool:
    """``gone w``: a leaver holds no bin, has shipped everything and taken its last snapshot."""
    return s.status[w] == LEAVING and w not in s.holder and s.fence[w] is None


def gone(cfg: SnapshotConfig, s: SnapState, w: int) -> SnapState:
    """Effect: the leaver has left."""
    return s._replace(status=_snap_status(s, w, LEFT))


def capture_plan(cfg: SnapshotConfig, s: SnapState, w: int) -> tuple[bool, int | None]:
    """Whether ``w`` snapshots now, and its fence after: its fence is passed once nothing at or before it is
    left; the next fence is the next snapshot epoch (none if nothing is left, or if ``w`` leaves by then)."""
    fence = s.fence[w]
    assert fence is not None
    lows = snap_lows(s, cfg)
    if not lows:
        return True, None
    if min(lows) <= fence:
        return False, fence
    after = cfg.first_at_or_after(fence + 1)
    stop = s.stop[w]
    return True, None if stop is not None and after >= stop else after


def capture_enabled(cfg: SnapshotConfig, s: SnapState, w: int) -> bool:
    """``capture w``: ``w``'s fence is passed (nothing at or before it is left anywhere)."""
    if s.status[w] not in (MEMBER, LEAVING) or s.fence[w] is None:
        return False
    return capture_plan(cfg, s, w)[0]


def snap_capture(cfg: SnapshotConfig, s: SnapState, w: int) -> SnapState:
    """Effect: ``w`` reports every bin it holds and every bin it held at its last snapshot and no longer does;
    its fence moves on (or ends: the run finished, or ``w`` leaves)."""
    fence = s.fence[w]
    assert fence is not None
    _, after = capture_plan(cfg, s, w)
    held = frozenset(b for b in range(cfg.bins) if s.holder[b] == w and s.counts[b])
    report: list[tuple[int, int | None]] = [(b, s.counts[b]) for b in sorted(held)]
    report += [(b, None) for b in sorted(s.reported[w] - held)]
    parts = s.parts | {(fence, w, tuple(report))}
    return s._replace(parts=parts, fence=_set(s.fence, w, after), reported=_set(s.reported, w, held))


def _expected_reporters(s: SnapState, epoch: int) -> list[int]:
    """The workers whose report of ``epoch`` a commit waits for: in the run at ``epoch`` and taking snapshots."""
    out = []
    for w, st in enumerate(s.status):
        if st not in (MEMBER, LEAVING, LEFT):
            continue
        joined, stop = s.joined_at[w], s.stop[w]
        if (joined is not None and joined > epoch) or (stop is not None and stop <= epoch):
            continue
        out.append(w)
    return out


def commit_enabled(cfg: SnapshotConfig, s: SnapState, epoch: int) -> bool:
    """``commit epoch``: reports of ``epoch`` are in, from every worker expected (the commit dataflow's frontier)."""
    if not any(e == epoch for e, _, _ in s.parts) or any(e < epoch for e, _, _ in s.parts):
        return False
    for w in _expected_reporters(s, epoch):
        fence = s.fence[w]
        if not any(e == epoch and r == w for e, r, _ in s.parts) and fence is not None and fence <= epoch:
            return False
    return True


def snap_commit(cfg: SnapshotConfig, s: SnapState, epoch: int) -> SnapState:
    """Effect: the reports of ``epoch`` are folded into the newest committed snapshot (a bin named by no report
    stays as it was; one reported empty and held by no report goes)."""
    counts = list(s.committed[1]) if s.committed is not None else [0] * cfg.bins
    reports = [r for e, _, r in s.parts if e == epoch]
    held = {b for report in reports for b, c in report if c is not None}
    for report in reports:
        for b, c in report:
            if c is not None:
                counts[b] = c
            elif b not in held:
                counts[b] = 0
    return s._replace(parts=frozenset(p for p in s.parts if p[0] != epoch), committed=(epoch, tuple(counts)))


def restart_enabled(cfg: SnapshotConfig, s: SnapState, k: int) -> bool:
    """``restart k``: the run crashes (anything but the committed snapshot is lost) and starts on ``k`` workers."""
    return s.restarts < cfg.max_restarts and 1 <= k <= cfg.workers


def restart(cfg: SnapshotConfig, s: SnapState, k: int) -> SnapState:
    """Effect: bin ``b`` restored on worker ``b % k`` with the snapshot's count; the sources resume at the epoch
    after the snapshot (what they send of earlier epochs is dropped)."""
    n = cfg.workers
    if s.committed is None:
        epoch, counts = -1, (0,) * cfg.bins
    else:
        epoch, counts = s.committed
    owners = tuple(b % k for b in range(cfg.bins))
    first = cfg.first_at_or_after(epoch + 1)
    return SnapState(
        status=MEMBER * k + OUT * (n - k),
        released=epoch + 1,
        holder=owners,
        counts=counts,
        done=(epoch,) * cfg.bins,
        moves=frozenset(),
        flight=frozenset(),
        table=owners,
        fence=tuple(first if w < k else None for w in range(n)),
        stop=(None,) * n,
        # What a worker restored it answers for: emptying a restored bin must reach the next snapshot.
        reported=tuple(frozenset(b for b in range(cfg.bins) if owners[b] == w and counts[b]) for w in range(n)),
        parts=frozenset(),
        joined_at=(None,) * n,
        committed=s.committed,
        joins=s.joins,
        leaves=s.leaves,
        restarts=s.restarts + 1,
    )


def SnapshotExact(cfg: SnapshotConfig, s: SnapState) -> bool:
    """The committed snapshot of epoch ``e`` holds every bin's count after exactly the records at epochs ``<= e``."""
    if s.committed is None:
        return True
    epoch, counts = s.committed
    return all(counts[b] == cfg.truth(b, epoch) for b in range(cfg.bins))


def CountsExact(cfg: SnapshotConfig, s: SnapState) -> bool:
    """Every bin's count (held or in flight) is its truth after the epochs applied to it: no record lost or twice."""
    return all(s.counts[b] == cfg.truth(b, s.done[b]) for b in range(cfg.bins))


def ReportsDisjoint(cfg: SnapshotConfig, s: SnapState) -> bool:
    """No two reports of one epoch hold the same bin (the runtime's merge refuses that)."""
    for epoch in {e for e, _, _ in s.parts}:
        seen: set[int] = set()
        for e, _, report in s.parts:
            if e != epoch:
                continue
            held = {b for b, c in report if c is not None}
            if held & seen:
                return False
            seen |= held
    return True


class SnapshotModel:
    """Keyed state through joins, leaves, snapshots, commits and a restart (see the comment above this section)."""

    name = "snapshots"

    def __init__(self, cfg: SnapshotConfig) -> None:
        self.cfg = cfg

    def initial_states(self) -> Iterator[SnapState]:
        """See :func:`snap_initial_states`."""
        return snap_initial_states(self.cfg)

    def successors(self, s: SnapState) -> Iterator[tuple[Action, SnapState]]:
        """Every enabled action."""
        cfg = self.cfg
        if release_enabled(cfg, s):
            yield Action("release", (("epoch", s.released),)), release(cfg, s)
        for b in range(cfg.bins):
            if apply_enabled(cfg, s, b):
                yield Action("apply", (("b", b), ("epoch", s.done[b] + 1))), apply(cfg, s, b)
            if ship_enabled(cfg, s, b):
                yield Action("ship", (("b", b),)), ship(cfg, s, b)
            if install_enabled(cfg, s, b):
                yield Action("install", (("b", b),)), install(cfg, s, b)
        for w in range(cfg.workers):
            if capture_enabled(cfg, s, w):
                yield Action("capture", (("w", w), ("epoch", s.fence[w]))), snap_capture(cfg, s, w)
            if snap_join_enabled(cfg, s, w):
                yield Action("join", (("n", w),)), snap_join(cfg, s, w)
            if snap_leave_enabled(cfg, s, w):
                yield Action("leave", (("w", w),)), snap_leave(cfg, s, w)
            if gone_enabled(cfg, s, w):
                yield Action("gone", (("w", w),)), gone(cfg, s, w)
        for epoch in sorted({e for e, _, _ in s.parts}):
            if commit_enabled(cfg, s, epoch):
                yield Action("commit", (("epoch", epoch),)), snap_commit(cfg, s, epoch)
        for k in range(1, cfg.workers + 1):
            if restart_enabled(cfg, s, k):
                yield Action("restart", (("k", k),)), restart(cfg, s, k)

    def invariants(self) -> list[Invariant[SnapState]]:
        """``SnapshotExact``, ``CountsExact`` and ``ReportsDisjoint``."""
        cfg = self.cfg
        return [
            Invariant("SnapshotExact", lambda s: SnapshotExact(cfg, s)),
            Invariant("CountsExact", lambda s: CountsExact(cfg, s)),
            Invariant("ReportsDisjoint", lambda s: ReportsDisjoint(cfg, s)),
        ]

    def transition_invariants(self) -> list[TransitionInvariant[SnapState]]:
        """None beyond the state invariants."""
        return []

    def format_state(self, s: SnapState) -> str:
        """A one-line rendering."""
        return (
            f"status={s.status} released={s.released} holder={list(s.holder)} count={list(s.counts)} "
            f"done={list(s.done)} moves={sorted(s.moves)} flight={sorted(s.flight)} fence={list(s.fence)} "
            f"parts={sorted(s.parts)} committed={s.committed}"
        )
