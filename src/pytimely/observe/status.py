"""A live progress line for long runs: epochs done, records per second, the slowest operator.

:class:`Tracker` is an event-log sink (:mod:`pytimely.observe.eventlog`) that keeps what the line shows;
:class:`ProgressLine` draws it with ``rich`` on a terminal, and nothing at all (no event log either)
when told to be quiet or when its stream is not a terminal. :func:`render` is the line itself, and
:func:`status_from_metrics` reads the same figures from Prometheus text, which is how
``pytimely launch --metrics-port`` draws the line of a whole cluster.

*Epochs done* is the lowest integer frontier seen at any input port: every earlier epoch is complete
everywhere the log reaches. *Records* are the records sent by operators without inputs (the sources).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from pytimely.observe.eventlog import Event

__all__ = ["ProgressLine", "Status", "Tracker", "render", "status_from_metrics"]


@dataclass(frozen=True, slots=True)
class Status:
    """What the progress line shows."""

    elapsed: float
    records: int
    epochs: int | None = None
    total_epochs: int | None = None
    slowest: str | None = None
    slowest_busy: float = 0.0


def _count(n: float) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.1f}{suffix}"
    return f"{n:.0f}"


def render(status: Status) -> str:
    """The progress line for ``status``, e.g. ``epochs 3/10 · 1.2M records · 450.0k rec/s · slowest: count 2.10 s``."""
    parts = []
    if status.epochs is not None:
        total = f"/{status.total_epochs}" if status.total_epochs is not None else ""
        parts.append(f"epochs {status.epochs}{total}")
    rate = status.records / status.elapsed if status.elapsed > 0 else 0.0
    parts.append(f"{_count(status.records)} records")
    parts.append(f"{_count(rate)} rec/s")
    if status.slowest is not None:
        parts.append(f"slowest: {status.slowest} {status.slowest_busy:.2f} s busy")
    parts.append(f"{status.elapsed:.1f} s")
    return " · ".join(parts)


class Tracker:
    """An event-log sink keeping the figures of the progress line (records, busy time, lowest frontier)."""

    def __init__(self, total_epochs: int | None = None) -> None:
        self.started = time.monotonic()
        self.total_epochs = total_epochs
        self.records = 0
        self.busy: dict[str, float] = {}
        self._names: dict[tuple[int, str, int], str] = {}
        self._sources: set[tuple[int, str, int]] = set()
        self._fronts: dict[tuple[int, str, int, int], int] = {}

    def __call__(self, event: Event) -> None:
        """Take one event into account."""
        kind = event["event"]
        if kind == "messages":
            if event["direction"] == "sent" and (event["worker"], event["dataflow"], event["op"]) in self._sources:
                self.records += event["records"]
        elif kind == "schedule":
            self.busy[event["name"]] = self.busy.get(event["name"], 0.0) + event["duration"]
        elif kind == "frontier":
            key = (event["worker"], event["dataflow"], event["op"], event["port"])
            ints = [t for t in event["frontier"] if type(t) is int]
            if ints:
                self._fronts[key] = min(ints)
            elif not event["frontier"]:
                self._fronts.pop(key, None)  # complete: it holds nothing back
        elif kind == "operates":
            key3 = (event["worker"], event["dataflow"], event["op"])
            self._names[key3] = event["name"]
            if event["inputs"] == 0:
                self._sources.add(key3)

    def epochs(self, worker: int | None = None) -> int | None:
        """The lowest integer frontier at any input port (of ``worker``, if given); ``None`` if none is known."""
        values = [t for (w, *_), t in list(self._fronts.items()) if worker is None or w == worker]
        return min(values) if values else None

    def workers(self) -> list[int]:
        """The workers whose events arrived."""
        return sorted({w for w, _, _ in list(self._names)})

    def status(self) -> Status:
        """The figures now."""
        busy = list(self.busy.items())
        slowest = max(busy, key=lambda item: item[1]) if busy else (None, 0.0)
        return Status(
            time.monotonic() - self.started, self.records, self.epochs(), self.total_epochs, slowest[0], slowest[1]
        )


def status_from_metrics(texts: Sequence[str], elapsed: float, total_epochs: int | None = None) -> Status:
    """The progress line's figures from the Prometheus text of each process (see :mod:`pytimely.observe.metrics`)."""
    records = 0.0
    busy: dict[str, float] = {}
    epochs: list[float] = []
    for text in texts:
        for line in text.splitlines():
            match = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
            if match is None:
                continue
            name, labels, value = match.group(1), match.group(2) or "", float(match.group(3))
            if name == "pytimely_input_records_total":
                records += value
            elif name == "pytimely_operator_busy_seconds_total":
                op = re.search(r'operator="\d+:([^"]*)"', labels)
                if op is not None:
                    busy[op.group(1)] = busy.get(op.group(1), 0.0) + value
            elif name == "pytimely_epochs_done":
                epochs.append(value)
    slowest = max(busy.items(), key=lambda item: item[1]) if busy else (None, 0.0)
    return Status(
        elapsed, int(records), int(min(epochs)) if epochs else None, total_epochs, slowest[0], slowest[1]
    )


class ProgressLine:
    """A progress line on ``stream`` (stderr) while a ``with`` block runs; silent when ``quiet`` or not a terminal.

    ``source`` gives the figures to draw (by default :attr:`tracker`'s, fed by :attr:`sink`: give that sink to
    ``execute(..., log=...)``). When the line is off, :attr:`sink` is ``None`` so the event log stays off.
    """

    def __init__(
        self,
        *,
        quiet: bool = False,
        stream: TextIO | None = None,
        total_epochs: int | None = None,
        source: Callable[[], Status] | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = not quiet and self.stream.isatty()
        self.tracker: Tracker | None = Tracker(total_epochs) if self.enabled and source is None else None
        self._source = source
        self._live: Any = None

    @property
    def sink(self) -> Callable[[Event], None] | None:
        """The event-log sink feeding the line, or ``None`` when it is off."""
        return self.tracker

    def _text(self) -> Any:
        from rich.text import Text

        if self._source is not None:
            status = self._source()
        else:
            assert self.tracker is not None
            status = self.tracker.status()
        return Text(render(status))

    def __enter__(self) -> ProgressLine:
        if self.enabled:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                get_renderable=self._text, console=Console(file=self.stream), refresh_per_second=4, transient=True
            )
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
