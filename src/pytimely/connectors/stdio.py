"""Standard input and output: lines from stdin (on worker 0) into a dataflow, and a stream's records to stdout.

:func:`stdin_source` reads without blocking the worker (``select`` on the file descriptor): line ``i`` is sent
at the scope's first time, or at epoch ``i // epoch_lines``; the stream ends at end of input. A line longer than
``max_line`` or not UTF-8 raises :class:`~pytimely.errors.InputFormatError` naming the line.
:func:`stdout_sink` writes each time's records as lines once the time is complete, in time order, from worker 0.
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from pytimely.connectors.files import ordered_sink, write_rows
from pytimely.connectors.formats import MAX_LINE, LineSplitter
from pytimely.connectors.source import Action, Advance, End, Send, polled_source
from pytimely.errors import InvalidArgument

if TYPE_CHECKING:
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = ["LineEpochs", "stdin_source", "stdout_sink"]


class LineEpochs:
    """Turns lines into actions: each at the first time, or line ``i`` at epoch ``minimum + i // epoch_lines``."""

    def __init__(self, minimum: Any, epoch_lines: int | None) -> None:
        self.minimum = minimum
        self.epoch_lines = epoch_lines
        self.count = 0

    def actions(self, lines: list[str]) -> list[Action]:
        """Send the lines at their epochs, advancing past each finished epoch."""
        if not lines:
            return []
        n = self.epoch_lines
        if n is None:
            self.count += len(lines)
            return [Send(self.minimum, lines)]
        out: list[Action] = []
        i = 0
        while i < len(lines):
            epoch, offset = divmod(self.count, n)
            take = min(n - offset, len(lines) - i)
            out.append(Advance(self.minimum + epoch))
            out.append(Send(self.minimum + epoch, lines[i : i + take]))
            i += take
            self.count += take
        return out


def _check_epoch_lines(epoch_lines: int | None, name: str) -> None:
    if epoch_lines is not None and (type(epoch_lines) is not int or epoch_lines < 1):
        raise InvalidArgument(f"{name}: epoch_lines must be a positive int or None, got {epoch_lines!r}")


def stdin_source(
    scope: Scope[Any],
    *,
    source: IO[bytes] | None = None,
    epoch_lines: int | None = None,
    max_line: int = MAX_LINE,
    name: str = "stdin_source",
) -> Stream[str]:
    """Lines of ``source`` (default: this process's standard input), read on worker 0; see the module doc."""
    _check_epoch_lines(epoch_lines, name)
    handle = source if source is not None else sys.stdin.buffer
    reader = scope.index == 0

    def make_poll(minimum: Any) -> Callable[[], list[Action]]:
        splitter = LineSplitter("<stdin>" if source is None else getattr(handle, "name", "<input>"), max_line)
        epochs = LineEpochs(minimum, epoch_lines)
        try:
            fd: int | None = handle.fileno()
        except (OSError, AttributeError, ValueError):
            fd = None  # an in-memory stream: reads never block

        def poll() -> list[Action]:
            if not reader:
                return [End()]
            if fd is not None:
                ready, _, _ = select.select([fd], [], [], 0)
                if not ready:
                    return []
                data = os.read(fd, 1 << 16)
            else:
                data = handle.read(1 << 16)
            if not data:
                return [*epochs.actions(splitter.finish()), End()]
            return epochs.actions(splitter.feed(data))

        return poll

    return polled_source(scope, make_poll, name=name)


def stdout_sink(
    stream: Stream[Any],
    *,
    out: IO[str] | None = None,
    format_line: Callable[[Any], str] = str,
    name: str = "stdout_sink",
) -> None:
    """Each record as ``format_line(record)`` on a line of ``out`` (default: standard output), in time order."""
    target = out if out is not None else sys.stdout

    def write(time: Any, batches: list[Any]) -> None:
        write_rows(target, "lines", batches, format_line)
        target.flush()

    ordered_sink(stream, write, target.flush, name)
