"""When to take a snapshot and how many to keep: every K epochs and/or every T seconds; the last N complete."""

from __future__ import annotations

import time
from dataclasses import dataclass

from pytimely.errors import InvalidArgument

__all__ = ["SnapshotPolicy"]


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """Snapshot at an epoch every ``every_epochs`` epochs, or once ``every_seconds`` passed since the last one.

    With both, whichever comes first; the last epoch of a run is always snapshotted (``commit(final=True)``).
    ``keep`` complete snapshots are kept (at least 1); older ones are removed after each commit.
    """

    every_epochs: int | None = 1
    every_seconds: float | None = None
    keep: int = 2

    def __post_init__(self) -> None:
        if self.every_epochs is not None and (type(self.every_epochs) is not int or self.every_epochs < 1):
            raise InvalidArgument(f"every_epochs must be a positive int or None, got {self.every_epochs!r}")
        if self.every_seconds is not None and not self.every_seconds > 0:
            raise InvalidArgument(f"every_seconds must be > 0 or None, got {self.every_seconds!r}")
        if self.every_epochs is None and self.every_seconds is None:
            raise InvalidArgument("a snapshot policy needs every_epochs or every_seconds")
        if type(self.keep) is not int or self.keep < 1:
            raise InvalidArgument(f"keep must be an int >= 1, got {self.keep!r}")

    def due(self, epoch: int, last_epoch: int, last_time: float, now: float | None = None) -> bool:
        """Whether ``epoch`` is snapshotted, the last snapshot being of ``last_epoch`` at ``last_time`` (monotonic)."""
        if self.every_epochs is not None and epoch - last_epoch >= self.every_epochs:
            return True
        if self.every_seconds is not None:
            return (time.monotonic() if now is None else now) - last_time >= self.every_seconds
        return False
