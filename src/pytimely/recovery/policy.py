"""When snapshots are taken, how many are kept, and how often unchanged state is written again."""

from __future__ import annotations

from dataclasses import dataclass

from pytimely.errors import InvalidArgument

__all__ = ["SnapshotPolicy"]


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """Snapshot epochs ``e`` with ``e % every_epochs == every_epochs - 1``; keep the newest ``keep`` snapshots.

    The schedule depends on the epoch alone, so every worker (and every process that joins later) takes the
    same snapshots without asking the others; the end of a run (every dataflow finished) is always taken.
    A snapshot writes only what changed since the one before, plus, in turn, a ``1/rewrite_every`` share of
    what did not (a worker's value once every ``rewrite_every`` snapshots, and a worker's log written in more
    than ``rewrite_every`` pieces again as one), so a record of unchanged state is needed by at most
    ``rewrite_every`` snapshots and the store stays bounded; a worker's records go to one segment file per
    window of ``rewrite_every`` snapshot epochs (:mod:`pytimely.recovery.segments`).
    """

    every_epochs: int = 1
    keep: int = 2
    rewrite_every: int = 32

    def __post_init__(self) -> None:
        for name in ("every_epochs", "keep", "rewrite_every"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise InvalidArgument(f"SnapshotPolicy: {name} must be an int >= 1, got {value!r}")

    def due(self, epoch: int) -> bool:
        """Whether ``epoch`` is snapshotted."""
        return epoch % self.every_epochs == self.every_epochs - 1

    def first_at_or_after(self, epoch: int) -> int:
        """The first snapshot epoch ``>= epoch``."""
        k = self.every_epochs
        return epoch + (k - 1 - epoch % k)
