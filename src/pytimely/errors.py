"""The error hierarchy: every failure pytimely reports is a `PytimelyError`."""

from __future__ import annotations


class PytimelyError(Exception):
    """Root of every error pytimely raises on purpose."""


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


class DataflowError(PytimelyError):
    """A dataflow was built or run in a way the runtime cannot honour."""


class ScopeError(DataflowError, GraphError):
    """Streams from different scopes or dataflows were combined, or a scope was used where it does not belong."""


class ArityError(DataflowError, ValueError):
    """An operator was given the wrong number of inputs or outputs, or a route named a port it lacks."""


class RouteError(DataflowError, TypeError):
    """An exchange route gave something other than an integer key for a record."""


class CapabilityError(DataflowError):
    """A capability was misused: downgraded backwards, used after being dropped, or used where it is not valid."""


class InputError(DataflowError, ValueError):
    """An input handle was misused: time moved backwards, or data sent after closing."""


class OperatorError(DataflowError):
    """User code inside an operator raised; names the operator, the worker and the timestamp."""

    def __init__(self, message: str, operator: str, worker: int, time: object) -> None:
        super().__init__(message)
        self.operator = operator
        self.worker = worker
        self.time = time


class StalledError(DataflowError):
    """The computation cannot finish: nothing can happen, yet capabilities or messages remain."""


class InputFormatError(PytimelyError, ValueError):
    """An input file has a malformed line; names the file and the line number."""

    def __init__(self, message: str, path: str, line: int) -> None:
        super().__init__(message)
        self.path = path
        self.line = line
