"""Errors of workflows: module definitions, staging areas, executors and runs."""

from __future__ import annotations

from pytimely.errors.base import PytimelyError


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
