"""Processes joining and leaving a running computation: rescale plans, bin assignments, the launcher's endpoint.

A computation started with ``PYTIMELY_ELASTIC=1`` accepts processes that join
while it runs (seed ``002_640294948a1fdfd3.txt``): a newcomer connects to every
member, its workers bootstrap their progress state from a member
(:mod:`pytimely.progress.bootstrap`) and hold capabilities the member minted for
them, so their inputs work. A process leaves with :meth:`Worker.leave
<pytimely.worker.Worker.leave>` once its bins moved to others. Keyed state
follows the bins (``control=`` on the keyed operators): whoever changes the
membership sends :func:`balanced_moves` on the control stream at the time the
change takes effect.

:class:`RescalePlan` is the schedule the ``wordcount --rescale`` job follows; it
tells every process, the same way, which workers take part at each epoch.
"""

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

    A joining process takes the next unused index; a leaving one is the newest process still there (never
    process 0). Changes take effect from the epoch after the one named.
    """

    initial: int
    workers: int
    changes: tuple[tuple[int, int], ...] = ()

    @classmethod
    def parse(cls, text: str, *, initial: int, workers: int = 1) -> RescalePlan:
        """``"3:+1,6:-1"``: a process joins after epoch 3, one leaves after epoch 6 (empty text: no change)."""
        changes = []
        for n, item in enumerate(t for t in text.replace(" ", "").split(",") if t):
            epoch, sep, delta = item.partition(":")
            if not sep or not epoch.isdigit() or delta not in ("+1", "-1", "1"):
                raise MembershipError(
                    f"rescale entry {n + 1} ({item!r}) is not EPOCH:+1 or EPOCH:-1 (for example 3:+1,6:-1)"
                )
            changes.append((int(epoch), -1 if delta == "-1" else 1))
        if [e for e, _ in changes] != sorted({e for e, _ in changes}):
            raise MembershipError(f"rescale epochs must increase, one change per epoch: {text!r}")
        plan = cls(initial, workers, tuple(changes))
        plan._check()
        return plan

    def _check(self) -> None:
        processes = self.initial
        for epoch, delta in self.changes:
            processes += delta
            if processes < 1:
                raise MembershipError(f"after epoch {epoch} no process would be left")

    def processes_at(self, epoch: int) -> list[int]:
        """The processes taking part in ``epoch``."""
        live = list(range(self.initial))
        fresh = self.initial
        for at, delta in self.changes:
            if at >= epoch:
                break
            if delta > 0:
                live.append(fresh)
                fresh += 1
            else:
                if live[-1] == 0:
                    raise MembershipError("process 0 never leaves")
                live.pop()
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

    @property
    def processes(self) -> int:
        """How many process indices the plan uses in all."""
        return self.initial + sum(1 for _, d in self.changes if d > 0)
