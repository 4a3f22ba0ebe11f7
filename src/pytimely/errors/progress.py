"""Errors of timestamps, dataflow graphs and progress tracking."""

from __future__ import annotations

from pytimely.errors.base import PytimelyError


class TimestampError(PytimelyError, ValueError):
    """A timestamp or path summary breaks the laws progress tracking relies on."""


class SummaryGoesBackError(TimestampError):
    """A path summary would move a timestamp backwards in time."""


class GraphError(PytimelyError, ValueError):
    """A dataflow graph handed to the progress tracker is malformed."""


class UnknownPortError(GraphError):
    """An edge, summary or update names an operator port that does not exist."""


class NonAdvancingCycleError(GraphError):
    """A cycle in the dataflow graph can carry a timestamp around without advancing it."""

    def __init__(self, message: str, operators: list[int | str]) -> None:
        super().__init__(message)
        self.operators = operators


class ProgressError(PytimelyError):
    """The progress protocol was used in a way that would break its safety."""


class UnknownLocationError(ProgressError, GraphError):
    """A progress update names a location outside the tracked graph."""


class DemandModeError(ProgressError, ValueError):
    """Demand mode was asked to judge what to keep back without what it needs to judge it."""


class UnjustifiedHoldError(ProgressError):
    """A worker tried to hold back progress changes that its own capabilities do not justify."""


class SequenceError(ProgressError):
    """A progress batch arrived out of its sender's FIFO order (a gap or a duplicate)."""

    def __init__(self, message: str, sender: int, expected: int, received: int) -> None:
        super().__init__(message)
        self.sender = sender
        self.expected = expected
        self.received = received


class BootstrapError(ProgressError):
    """A joining worker's bootstrap (seed 002 §3.4) got a message that does not fit the protocol."""
