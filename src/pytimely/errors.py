"""The error hierarchy: every failure pytimely reports is a `PytimelyError`."""

from __future__ import annotations


class PytimelyError(Exception):
    """Root of every error pytimely raises on purpose."""


class InvalidArgument(PytimelyError, ValueError):
    """A function was called with an argument it cannot take (wrong type, out of range); names the argument."""


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


class MembershipError(PytimelyError):
    """A process cannot join or leave the running computation as asked."""


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


class InputFormatError(PytimelyError, ValueError):
    """An input is malformed; names the file and line number when it is a file (else they are None)."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


class OutputPathError(PytimelyError, OSError):
    """An output file cannot be written where it was asked for (no such directory, not writable); names it."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path

    def __str__(self) -> str:
        return str(self.args[0])


class ConfigError(PytimelyError, ValueError):
    """A cluster configuration (flags, environment, host list, secret) is missing or inconsistent."""


class CommunicationError(PytimelyError):
    """Exchanging messages with another process failed; the computation stops."""

    def __init__(self, message: str, peer: int | None = None) -> None:
        super().__init__(message)
        self.peer = peer


class FrameError(CommunicationError):
    """A frame received from a peer is malformed; names the peer and, when known, the channel."""

    def __init__(self, message: str, peer: int | None, channel: tuple[int, int] | None) -> None:
        super().__init__(message, peer)
        self.channel = channel


class ChecksumError(FrameError):
    """A frame's checksum does not match its bytes: it was corrupted in transit."""


class FrameFormatError(FrameError):
    """Bytes that are not a frame of this protocol version (bad magic, version or precedence)."""


class FrameLengthError(FrameError):
    """A frame announces a payload longer than the frame limit."""


class RingError(FrameError):
    """A peer's shared-memory ring offer, descriptor or release is not one this process accepts."""

    def __init__(self, message: str, peer: int | None = None) -> None:
        super().__init__(message, peer, None)


class FrameSequenceError(FrameError):
    """A frame's sequence number is not the next one: a frame was lost, duplicated or reordered."""

    def __init__(
        self, message: str, peer: int | None, channel: tuple[int, int] | None, expected: int, received: int
    ) -> None:
        super().__init__(message, peer, channel)
        self.expected = expected
        self.received = received


class UnknownChannelError(FrameError):
    """A frame names a channel the receiving worker does not have (the processes run different programs)."""


class PayloadError(FrameError):
    """A checked frame's payload could not be decoded."""


class AuthenticationError(CommunicationError):
    """A peer did not prove it knows the cluster secret, or refused this process's proof."""


class PeerFailedError(CommunicationError):
    """Another process died, stalled, or stopped with an error; names the process."""


class SparkError(PytimelyError):
    """Running on Spark failed: the session, the barrier stage or one of its tasks."""


class SparkSetupError(SparkError):
    """Spark cannot start here: PySpark or a Java 17 runtime is missing (the message says how to install it)."""


class SparkSlotsError(SparkError):
    """More pytimely processes were asked for than the Spark session has task slots to run them at once."""


class SparkTaskError(SparkError):
    """A task of the barrier stage failed; carries the task's own error message."""


class SparkConnectError(SparkError):
    """On a Spark Connect session: the server cannot be reached, or what was asked needs a classic session."""


class SparkRendezvousError(SparkError):
    """The tasks of a barrier stage could not meet through the driver's registry (unreachable, late, or forged)."""


class WorkflowError(PytimelyError):
    """A resumable workflow could not be defined, resumed or run (its staging areas and executors included)."""


class StagingError(WorkflowError):
    """A staging area could not store, find or read a value; names the key."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


class StagingKeyError(StagingError, ValueError):
    """A staging key is malformed (empty, or a segment with characters outside letters, digits and ``_.=-``)."""


class ValueMissingError(StagingError, LookupError):
    """No complete value is staged under the key, or the one there was computed for another fingerprint."""


class UnpicklableValueError(StagingError, TypeError):
    """A value to be staged cannot be pickled; names the key and the value's type (nothing is left behind)."""


class CorruptValueError(ValueMissingError):
    """A staged value's payload does not match its commit marker (size or checksum): it counts as absent."""


class FingerprintError(WorkflowError, TypeError):
    """A value or callable cannot be fingerprinted; names its type."""


class ExecutorError(WorkflowError):
    """An executor could not run a module's code; names the module."""

    def __init__(self, message: str, module: str) -> None:
        super().__init__(message)
        self.module = module


class ModuleFailedError(ExecutorError):
    """A simple module's own code raised; the original exception is the ``__cause__``."""


class ModuleOutputError(ExecutorError, ValueError):
    """A simple module returned something that does not fit its out-ports."""


class UnpicklableCallError(ExecutorError, TypeError):
    """A module's function or an input cannot be sent to a worker process (names the module and what failed)."""


class WorkerDiedError(ExecutorError):
    """The worker process running a module died (killed, or exited without answering)."""


class ExecutorClosedError(ExecutorError):
    """A module was given to an executor after it was closed."""


class ModuleDefinitionError(WorkflowError, ValueError):
    """A workflow module is malformed: a port, connection, submodule or ``deps`` entry names what is not there."""


class ResumePreconditionError(WorkflowError, ValueError):
    """``ComputeResumeState`` was asked for outputs that need an in-port which neither has a value nor gets one."""


class PortTypeError(ModuleDefinitionError, TypeError):
    """A connection's source port carries a type its target port does not accept; names both ports and types."""


class UnconnectedPortError(ModuleDefinitionError):
    """A submodule's in-port or a parent's out-port has no connection feeding it; names the port."""


class ModuleCycleError(ModuleDefinitionError):
    """Sibling connections outside a loop form a cycle; names the connections on it."""


class WorkflowInputError(WorkflowError, ValueError):
    """A workflow was given an input it lacks, or a module in-port that must have a value has none; names it."""


class LoopError(WorkflowError):
    """A loop module did not stop (its continue port stayed true) within its iteration limit; names the loop."""


class WorkflowUsageError(WorkflowError, ValueError):
    """The ``pytimely workflow`` command was given a bad target, input, output name or executor."""


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


class SignedLineError(PytimelyError):
    """A signed JSON-line exchange (control endpoint, Spark rendezvous) got a line it cannot accept."""


class LineTooLongError(SignedLineError, ValueError):
    """A peer sent a line longer than the limit; nothing of it was kept past the limit."""


class LineTimeoutError(SignedLineError, TimeoutError):
    """A peer did not send a whole line within the overall deadline."""


class MalformedLineError(SignedLineError, ValueError):
    """A line is not a signed JSON object, or the connection ended inside it."""


class BadSignatureError(SignedLineError):
    """A line's MAC is not right for the run's secret and the exchange's purpose."""


class JoinTimeoutError(MembershipError):
    """A process asked to join did not join within its deadline (or exited first); names the process."""

    def __init__(self, message: str, process: int | None) -> None:
        super().__init__(message)
        self.process = process


class LeaveTimeoutError(MembershipError):
    """A process that is leaving did not finish within its deadline; names the process."""

    def __init__(self, message: str, process: int | None) -> None:
        super().__init__(message)
        self.process = process


class RequestTimeoutError(MembershipError):
    """A request to the launcher's control endpoint got no answer within its deadline."""


class SinkModuleError(ModuleDefinitionError):
    """A submodule has no out-ports, so nothing could ever ask it to run; names the module."""


class StagingLockedError(StagingError):
    """Another run holds the staging area's lock; names the holder (host, process, since when)."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message, key)


class StagingUnavailableError(StagingError, OSError):
    """A staging area cannot be written or reached (a read-only folder, a missing bucket); names the cause."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message, key)


class ModuleTimeoutError(ExecutorError, TimeoutError):
    """A module ran longer than its ``timeout``; names the module and the limit."""


class FrameAuthenticationError(ChecksumError):
    """A frame's header or payload fails authentication under its connection's key: corrupted, forged or spliced."""


class WeakSecretError(ConfigError):
    """The cluster secret is shorter than 16 bytes (128 bits), too weak to authenticate a cluster."""


class HandshakeTimeoutError(AuthenticationError):
    """A connecting peer did not complete the handshake within its deadline (silent, trickling or stalled)."""


class SendTimeoutError(PeerFailedError):
    """A peer took no data for longer than the failure timeout while frames waited for it; names the peer."""


class FlowControlError(CommunicationError):
    """Processes sending to each other filled every window and none can read more: one step's output is too big."""


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


class RecoveryError(PytimelyError):
    """Snapshots of operator state could not be written or read; names the store and the file."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class StoreNotWritableError(RecoveryError, OSError):
    """A recovery store cannot be written (missing parent, no permission, a file in the way); raised at start."""


class RecoveryMismatchError(RecoveryError, ValueError):
    """A recovery store holds snapshots of another job or format version; names what differs. Nothing is touched."""

    def __init__(self, message: str, path: str = "", field: str = "") -> None:
        super().__init__(message, path)
        self.field = field


class SnapshotCorruptError(RecoveryError):
    """A committed snapshot's payload is missing or does not match the checksum its manifest records."""


class SnapshotSealError(RecoveryError):
    """A recovery store's file is not sealed by the store's key (or the store is sealed and no key was given);
    nothing of it was unpickled."""


class StoreWriteError(RecoveryError, OSError):
    """Writing a snapshot failed mid-run (a full disk, a lost connection); names the file. The last committed
    snapshot is untouched and nothing half-written counts."""


class SparkExecutorSetupError(SparkSetupError):
    """The Spark executors' Python cannot import pytimely; the message names the interpreter and how to fix it."""


class SparkInputError(SparkError, InputFormatError):
    """Spark could not read an input (missing path, malformed record); names Spark's cause and the file it gives."""


class StreamError(SparkError):
    """A streaming query that drives a pytimely dataflow stopped; names the micro-batch and what went wrong."""


class StreamSchemaError(StreamError, InputFormatError):
    """A streaming source's rows do not have the query's columns (its schema changed); names batch and file."""


class StreamInputError(StreamError, InputFormatError):
    """A streaming source's file does not parse; names the micro-batch and Spark's cause (file, record)."""


class CheckpointMismatchError(StreamError, InvalidArgument):
    """A checkpoint directory belongs to another query, or lost its commits; names what differs."""


class CheckpointInUseError(StreamError):
    """Another run holds the streaming checkpoint (or its Spark JVM still runs); names the checkpoint and holder."""


class CheckpointLocationError(StreamError, InvalidArgument):
    """A streaming checkpoint's URL names a place that cannot hold it (a scheme without locks or renames)."""


class StreamSinkError(StreamError, OSError):
    """A streaming query's sink cannot be written (no permission, a file in the way); raised before the first epoch."""


class StreamFeedError(StreamError):
    """A micro-batch did not reach the hosted processes whole (lost, duplicated, refused, or no answer in time)."""


class StreamHostError(StreamError):
    """The hosted processes of a streaming query failed, or did not start; names the generation and the cause."""


class StreamFencedError(StreamError):
    """Another run took the streaming checkpoint over: this one may not commit, and stops; names both owners."""


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


class ModuleRaisedError(ModuleFailedError):
    """A simple module's code raised: names the module and the file and line where, and keeps what it printed."""

    def __init__(
        self, message: str, module: str, *, file: str | None = None, line: int | None = None, stdout: str = "",
        stderr: str = "",
    ) -> None:  # fmt: skip
        super().__init__(message, module)
        self.file = file
        self.line = line
        self.stdout = stdout
        self.stderr = stderr


class ModulesFailedError(ModuleFailedError):
    """Several modules failed in one run (``keep_going``, or modules running at once): ``failures`` lists them."""

    def __init__(self, message: str, failures: list[ExecutorError]) -> None:
        super().__init__(message, failures[0].module)
        self.failures = failures


class UndeclaredWriteError(ExecutorError):
    """A module wrote a file it neither declared (``@simple(writes=...)``) nor returned as a path; names both."""

    def __init__(self, message: str, module: str, file: str) -> None:
        super().__init__(message, module)
        self.file = file


class UnpicklableOutputError(ExecutorError, TypeError):
    """A module returned a value that cannot be pickled, where it must be (a worker process, a persistent staging
    area); names the module, the out-port and the value's type."""

    def __init__(self, message: str, module: str, port: str = "") -> None:
        super().__init__(message, module)
        self.port = port


class RunStoppedError(WorkflowError):
    """A run was asked to stop (Ctrl-C): nothing new started, what was running finished or was stopped."""

    def __init__(self, message: str, running: list[str]) -> None:
        super().__init__(message)
        self.running = running


class StagingLockLostError(StagingLockedError):
    """A run lost its staging area's lease (taken over, or not renewed in time) and stopped before writing."""


class UnknownModuleError(WorkflowUsageError):
    """A module named to rerun or stop after (``--rerun``, ``--until``) is not in the workflow, or is ambiguous."""


class SimulationError(PytimelyError):
    """The simulator cannot run or check a workload (see :mod:`pytimely.simulate`)."""


class NotSimulableError(SimulationError):
    """A workload does something the simulator cannot control: a thread of its own, a wait on a real lock or socket,
    an activator opened from another thread. Names the thread or operator, and where it was."""
