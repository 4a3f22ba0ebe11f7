"""The root of the hierarchy and the errors every layer may raise: arguments, configuration, input files and
output paths, signed lines, the simulator."""

from __future__ import annotations


class PytimelyError(Exception):
    """Root of every error pytimely raises on purpose."""


class InvalidArgument(PytimelyError, ValueError):
    """A function was called with an argument it cannot take (wrong type, out of range); names the argument."""


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


class WeakSecretError(ConfigError):
    """The cluster secret is shorter than 16 bytes (128 bits), too weak to authenticate a cluster."""


class SimulationError(PytimelyError):
    """The simulator cannot run or check a workload (see :mod:`pytimely.simulate`)."""


class NotSimulableError(SimulationError):
    """A workload does something the simulator cannot control: a thread of its own, a wait on a real lock or socket,
    an activator opened from another thread. Names the thread or operator, and where it was."""
