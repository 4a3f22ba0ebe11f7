"""Rescale plans: which processes take part at each epoch, and the all-at-once bin assignment."""

from __future__ import annotations

from dataclasses import dataclass

from pytimely.dataflow.bins import DEFAULT_BINS, Move
from pytimely.errors import MembershipError

__all__ = ["RescalePlan", "balanced_moves"]


def balanced_moves(time: int, members: list[int] | tuple[int, ...], bins: int = DEFAULT_BINS) -> list[Move]:
    """A move for every bin at ``time``: bin ``b`` to ``members[b % len(members)]`` (every table agrees after it)."""
    if not members:
        raise MembershipError("a bin assignment needs at least one member")
    ordered = sorted(members)
    return [Move(time, b, ordered[b % len(ordered)]) for b in range(bins)]


@dataclass(frozen=True)
class RescalePlan:
    """When processes join and leave: ``changes`` are ``(epoch, +1 or -1)``, after which epoch they happen.

    A joining process takes the next unused index. A leave names its process (``leaving``, aligned with
    ``changes``), or, unnamed (``None``), is the newest process still there. Any process may leave, one that
    started the computation included, as long as one is left. Changes take effect from the epoch after the one
    named. Several changes may name one epoch (``4:-1,4:+1``: one leaves and one joins at once), leaves before
    joins.
    """

    initial: int
    workers: int
    changes: tuple[tuple[int, int], ...] = ()
    leaving: tuple[int | None, ...] = ()
    """For each change, the process that leaves (``None``: the newest there, and for a join)."""

    @classmethod
    def parse(cls, text: str, *, initial: int, workers: int = 1) -> RescalePlan:
        """``"3:+1,6:-1,8:-p0"``: a process joins after epoch 3, the newest leaves after epoch 6, process 0 after 8
        (empty text: no change).

        Epochs never decrease; at one epoch, leaves come before joins (a newcomer never leaves before it
        took part).
        """
        changes, leaving = [], []
        for n, item in enumerate(t for t in text.replace(" ", "").split(",") if t):
            epoch, sep, delta = item.partition(":")
            named = delta[2:] if delta.startswith("-p") else ""
            if not sep or not epoch.isdigit() or (delta not in ("+1", "-1", "1") and not named.isdigit()):
                raise MembershipError(
                    f"rescale entry {n + 1} ({item!r}) is not EPOCH:+1, EPOCH:-1 or EPOCH:-pPROCESS "
                    "(for example 3:+1,6:-1,8:-p0)"
                )
            changes.append((int(epoch), -1 if delta.startswith("-") else 1))
            leaving.append(int(named) if named else None)
        if changes != sorted(changes):  # by epoch, and -1 before +1 within one
            raise MembershipError(
                f"rescale epochs must not decrease, and at one epoch leaves come before joins: {text!r}"
            )
        plan = cls(initial, workers, tuple(changes), tuple(leaving))
        plan._check()
        return plan

    def _who(self) -> tuple[int | None, ...]:
        return self.leaving or (None,) * len(self.changes)

    def _check(self) -> None:
        if len(self._who()) != len(self.changes):
            raise MembershipError(f"a plan of {len(self.changes)} changes names {len(self.leaving)} leavers")
        for epoch, _ in self.changes:
            self.processes_at(epoch + 1)

    def processes_at(self, epoch: int) -> list[int]:
        """The processes taking part in ``epoch``."""
        live = list(range(self.initial))
        fresh = self.initial
        for (at, delta), who in zip(self.changes, self._who(), strict=True):
            if at >= epoch:
                break
            if delta > 0:
                live.append(fresh)
                fresh += 1
                continue
            if not live or (len(live) == 1 and (who is None or who in live)):
                raise MembershipError(f"after epoch {at} no process would be left")
            leaver = live[-1] if who is None else who
            if leaver not in live:
                raise MembershipError(f"process {leaver} is to leave after epoch {at}, but it does not run then")
            live.remove(leaver)
        return live

    def members_at(self, epoch: int) -> list[int]:
        """The worker ids taking part in ``epoch``."""
        w = self.workers
        return [p * w + i for p in self.processes_at(epoch) for i in range(w)]

    @property
    def join_epochs(self) -> set[int]:
        """The epochs in which a newly joined process first takes part."""
        return {e + 1 for e, d in self.changes if d > 0}

    def joins_at(self, worker: int) -> int:
        """The first epoch in which ``worker`` takes part."""
        process = worker // self.workers
        for epoch in sorted(self.join_epochs):
            if process in self.processes_at(epoch):
                return epoch
        raise MembershipError(f"worker {worker} never joins in this plan")

    def newcomers_at(self, epoch: int) -> list[int]:
        """The processes that first take part in ``epoch``."""
        before = set(self.processes_at(epoch - 1)) if epoch > 0 else set(range(self.initial))
        return [p for p in self.processes_at(epoch) if p not in before]

    def leavers_at(self, epoch: int) -> list[int]:
        """The processes that took part in ``epoch - 1`` and no longer do in ``epoch``."""
        if epoch <= 0:
            return []
        now = set(self.processes_at(epoch))
        return [p for p in self.processes_at(epoch - 1) if p not in now]

    def coordinator_at(self, epoch: int) -> int:
        """The worker that asks for the processes joining at ``epoch`` and hands them their bins: the first worker
        of the lowest process taking part both in ``epoch - 1`` and in ``epoch`` (there is always one)."""
        staying = set(self.processes_at(epoch - 1)) & set(self.processes_at(epoch)) if epoch > 0 else {0}
        return min(staying) * self.workers

    def gatherer(self, epochs: int, *, operator: str = "gather") -> int:
        """The worker where ``operator`` may gather what ``epochs`` epochs emit: the first worker of the lowest
        process taking part in every one of them. :class:`MembershipError` naming ``operator`` if there is none."""
        steady = set(self.processes_at(0)) & set(self.processes_at(max(0, epochs - 1)))
        if not steady:
            raise MembershipError(
                f"operator {operator!r} gathers on one worker, and no process takes part in every one of the "
                f"{epochs} epochs of this plan: keep one process from start to end"
            )
        return min(steady) * self.workers

    def check_pinned(self, pinned: dict[str, tuple[int, ...]], epochs: int | None = None) -> None:
        """:class:`MembershipError` naming the operator, before anything runs, if a process that leaves (within
        ``epochs`` epochs) has a worker that ``pinned`` (see :meth:`Worker.pinned <pytimely.worker.Worker.pinned>`)
        says an operator receives records on by index."""
        for epoch, delta in self.changes:
            if delta > 0 or (epochs is not None and epoch + 1 >= epochs):
                continue
            for process in self.leavers_at(epoch + 1):
                workers = range(process * self.workers, (process + 1) * self.workers)
                for name, held in sorted(pinned.items()):
                    if any(w in held for w in workers):
                        raise MembershipError(
                            f"operator {name!r} receives records by worker index on worker(s) "
                            f"{', '.join(str(w) for w in workers if w in held)} of process {process}, which this "
                            f"plan has leave after epoch {epoch}: its records could not reach it any more. Route "
                            "by key through bins (keyed operators given a control stream), gather on a process "
                            "that stays, or keep this process"
                        )

    @property
    def processes(self) -> int:
        """How many process indices the plan uses in all."""
        return self.initial + sum(1 for _, d in self.changes if d > 0)
