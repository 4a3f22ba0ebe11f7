"""Each module's stdout and stderr, captured while its function runs and kept with its values.

Python-level writes to ``sys.stdout`` and ``sys.stderr`` from the thread running a module's function are
collected (a process-wide router sends every other thread's writes on to the real streams); in a worker process
the same happens there and the text travels back with the result. Output written by C code or child processes
straight to file descriptors 1 and 2 is not captured.
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

__all__ = ["LOGS", "Captured", "capturing", "texts"]

LOGS = "\0logs"
"""The key, in an executor's outputs, of the module's captured ``(stdout, stderr)`` (never a port name)."""

MAX_CHARS = 1 << 20
"""Kept per stream and module: the last this many characters (a chatty module does not fill the staging area)."""


@dataclass(frozen=True, slots=True)
class Captured:
    """A function's return value with what it printed (``None`` when not captured) and the files it was seen
    writing (``None`` when not watched; see :mod:`pytimely.workflow.writes`)."""

    value: Any
    stdout: str | None = None
    stderr: str | None = None
    written: tuple[str, ...] | None = None


class _Router(io.TextIOBase):
    """Stands in for ``sys.stdout``/``sys.stderr``: a capturing thread's writes to its buffer, others' through."""

    def __init__(self, real: IO[str], which: str) -> None:
        self.real = real
        self.which = which

    def write(self, text: str) -> int:
        buffers = getattr(_local, "buffers", None)
        if buffers is None:
            return int(self.real.write(text))
        return int(buffers[self.which].write(text))

    def flush(self) -> None:
        if getattr(_local, "buffers", None) is None:
            self.real.flush()

    def isatty(self) -> bool:
        return bool(self.real.isatty())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.real, "encoding", "utf-8"))


_local = threading.local()
_install_lock = threading.Lock()


def _install() -> None:
    with _install_lock:
        if not isinstance(sys.stdout, _Router):
            sys.stdout = _Router(sys.stdout, "stdout")
        if not isinstance(sys.stderr, _Router):
            sys.stderr = _Router(sys.stderr, "stderr")


@contextlib.contextmanager
def capturing() -> Iterator[dict[str, io.StringIO]]:
    """Collect this thread's ``print``s and ``sys.stderr`` writes until the block ends."""
    _install()
    previous = getattr(_local, "buffers", None)
    buffers = {"stdout": io.StringIO(), "stderr": io.StringIO()}
    _local.buffers = buffers
    try:
        yield buffers
    finally:
        _local.buffers = previous


def texts(buffers: dict[str, io.StringIO] | None) -> tuple[str | None, str | None]:
    """The (last :data:`MAX_CHARS` of the) text collected in ``buffers``: stdout and stderr."""
    if buffers is None:
        return None, None
    return buffers["stdout"].getvalue()[-MAX_CHARS:], buffers["stderr"].getvalue()[-MAX_CHARS:]
