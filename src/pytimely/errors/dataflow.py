"""Errors of building and running dataflows: scopes, operators, capabilities, inputs and sources, stalls, bins,
batches and event streams."""

from __future__ import annotations

from pytimely.errors.base import InputFormatError, PytimelyError
from pytimely.errors.communication import AuthenticationError, PeerFailedError
from pytimely.errors.progress import GraphError


class DataflowError(PytimelyError):
    """A dataflow was built or run in a way the runtime cannot honour."""


class ScopeError(DataflowError, GraphError):
    """Streams from different scopes or dataflows were combined, or a scope was used where it does not belong."""


class ArityError(DataflowError, ValueError):
    """An operator was given the wrong number of inputs or outputs, or a route named a port it lacks."""


class RouteError(DataflowError, TypeError):
    """An exchange route is not callable, or gave something other than an integer key for a record."""


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


class StepTimeoutError(DataflowError, TimeoutError):
    """``Worker.step_while`` reached its deadline with its condition still true; names what is held."""


class UnpicklableRecordError(DataflowError, TypeError):
    """A record sent through an exchange could not be pickled; names the channel and the operator that sent it."""

    def __init__(self, message: str, channel: str, sender: str | None, receiver: str) -> None:
        super().__init__(message)
        self.channel = channel
        self.sender = sender
        self.receiver = receiver


class BinError(DataflowError, ValueError):
    """Keyed state in bins: a bin count, a bin, a worker or a move that cannot be."""


class BinCountError(BinError):
    """The number of bins is not an int from 1 to 2**32; names the value given."""


class BinRangeError(BinError):
    """A move names a bin outside ``0 .. bins - 1``; names the move and the bin."""

    def __init__(self, message: str, bin: object = None) -> None:
        super().__init__(message)
        self.bin = bin


class UnknownWorkerError(BinError):
    """A routing table or a move names a worker that does not exist; names the worker."""

    def __init__(self, message: str, worker: object = None) -> None:
        super().__init__(message)
        self.worker = worker


class LateMoveError(BinError):
    """A move takes effect earlier than the control stream's time where it arrives (data there may be routed)."""

    def __init__(self, message: str, move: object = None, time: object = None) -> None:
        super().__init__(message)
        self.move = move
        self.time = time


class NotAMoveError(BinError, TypeError):
    """A control stream of a keyed operator carried a record that is not a ``Move``; names the record."""


class PeerStalledError(PeerFailedError, StalledError):
    """Another process found the whole computation stalled and stopped it; its message names what is held."""


class InvalidPact(DataflowError, TypeError):
    """An edge was given something that is not a channel contract (``Pipeline``, ``Exchange``, ``Broadcast``...)."""


class SummaryViolationError(CapabilityError):
    """An operator asked for a capability its declared internal summary does not allow; names operator, ports, times."""


class DroppedDataflowError(DataflowError):
    """A dataflow was used after ``Worker.drop_dataflow`` released it; names the dataflow."""


class SimulatedAbortError(DataflowError):
    """A testing source reached the ``ABORT`` its test put in its input: a crash simulated on purpose."""

    def __init__(self, message: str, operator: str, worker: int, time: object) -> None:
        super().__init__(message)
        self.operator = operator
        self.worker = worker
        self.time = time


class EventStreamError(PytimelyError, ValueError):
    """Captured events read back from a file or socket are not a valid event stream; names the source."""

    def __init__(self, message: str, source: str = "", offset: int | None = None) -> None:
        super().__init__(message)
        self.source = source
        self.offset = offset


class TruncatedEventStreamError(EventStreamError):
    """An event stream ended in the middle of a record (a partly written file, a dropped connection)."""


class CorruptEventStreamError(EventStreamError):
    """An event stream's bytes fail their check, have a bad header or an impossible length."""


class EventStreamAuthError(EventStreamError, AuthenticationError):
    """A socket offering captured events did not prove it knows the shared secret; nothing of it was unpickled."""


class EventStreamTimeoutError(EventStreamError, TimeoutError):
    """An event stream sent nothing for longer than its reader's timeout, before its end."""


class SourceTimeoutError(InputError, TimeoutError):
    """A connector's source heard nothing (no file, no connection, no line) for longer than its timeout."""


class SenderLostError(InputError, ConnectionError):
    """A network source's sender closed its connection before its signed end; names the sender and its lines."""

    def __init__(self, message: str, peer: str = "", lines: int = 0) -> None:
        super().__init__(message)
        self.peer = peer
        self.lines = lines


class BatchError(DataflowError):
    """A batch does not fit what an operator does with it; names the operator (once known), the kind, the column."""

    def __init__(self, message: str, kind: str = "", column: object = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.column = column
        self.operator: str | None = None

    def name_operator(self, operator: str, worker: int | None, time: object) -> None:
        """Put the operator that met the batch at the front of the message (done once, where it is caught)."""
        if self.operator is None:
            self.operator = operator
            where = "" if worker is None else f" on worker {worker}"
            self.args = (f"operator {operator!r}{where} at time {time!r}: {self.args[0]}", *self.args[1:])


class BatchKindError(BatchError, TypeError):
    """A batch is of no known kind (or cannot become the kind asked for); names the kind."""


class ColumnError(BatchError, InputFormatError):
    """A batch has no column the operator names, or the column's values are of the wrong type; names both."""

    def __init__(self, message: str, kind: str = "", column: object = None) -> None:
        BatchError.__init__(self, message, kind, column)
        self.path: str | None = None
        self.line: int | None = None
