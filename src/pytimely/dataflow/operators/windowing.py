"""What the event-time window operators share: window kinds, what happens to late records, reading event times.

:mod:`.window` (vectorised aggregates), :mod:`.folds` (user folds over windows), :mod:`.join` (windowed
joins) and :mod:`.clock` (watermarks from the data) build on these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.dataflow.operators.fields import column
from pytimely.errors import ColumnError, InvalidArgument

if TYPE_CHECKING:
    from pytimely.dataflow.stream import Stream

__all__ = [
    "DropLate", "DroppedCount", "Kind", "Session", "SideOutput", "Sliding", "Tumbling", "check_kind", "column_type",
    "event_times", "first_of", "frontier_bound", "last_of", "late_policy", "not_an_int", "send_late_to", "take_start",
]


@dataclass(frozen=True, slots=True)
class Tumbling:
    """Windows ``[k*size, (k+1)*size)``: each event time in exactly one."""

    size: int

    def ends(self, x: int) -> list[int]:
        """The ends of the windows holding event time ``x``."""
        return [(x // self.size + 1) * self.size]

    def assign(self, xs: Any) -> tuple[Any, Any]:
        """``(ends, rows)``: one entry per (window, row) membership of the event times ``xs``."""
        import numpy as np

        return (xs // self.size + 1) * self.size, np.arange(len(xs))


@dataclass(frozen=True, slots=True)
class Sliding:
    """Windows ``[k*step, k*step + size)`` for every ``k >= 0``: an event time is in up to ``ceil(size/step)``."""

    size: int
    step: int

    def ends(self, x: int) -> list[int]:
        """The ends of the windows holding event time ``x``."""
        size, step = self.size, self.step
        last = x // step
        # Only the ceil(size/step) latest windows can still hold x.
        return [k * step + size for k in range(last, max(-1, last + size // -step), -1) if k * step + size > x]

    def assign(self, xs: Any) -> tuple[Any, Any]:
        """``(ends, rows)``: one entry per (window, row) membership of the event times ``xs``."""
        import numpy as np

        size, step = self.size, self.step
        last = xs // step
        ends, rows = [], []
        for j in range(-(-size // step)):
            k = last - j
            end = k * step + size
            hit = np.flatnonzero((k >= 0) & (end > xs))
            ends.append(end[hit])
            rows.append(hit)
        return np.concatenate(ends), np.concatenate(rows)


@dataclass(frozen=True, slots=True)
class Session:
    """Per key, maximal runs of event times in which consecutive ones are at most ``gap`` apart."""

    gap: int


Kind = Tumbling | Sliding | Session


class DropLate:
    """Late records are dropped; ``dropped`` counts those this worker's copy of the operator dropped."""

    def __init__(self) -> None:
        self.dropped = 0

    def snapshot(self) -> int:
        """The count (declared state of the window operator: it comes back after a restart)."""
        return self.dropped

    def restore(self, values: list[int]) -> None:
        """Add the counts of the old workers this worker stands in for."""
        self.dropped += sum(values)


class DroppedCount:
    """A :class:`DropLate` count as declared state of its window operator: it changes only when records come,
    so it tells the runtime the windows' next change (without it, a restored or finished run would step its
    snapshots epoch by epoch up to windows far ahead in event time)."""

    def __init__(self, policy: DropLate, windows: Any) -> None:
        self.policy = policy
        self.windows = windows

    def snapshot(self) -> int:
        """The count."""
        return self.policy.snapshot()

    def restore(self, values: list[int]) -> None:
        """Add the counts of the old workers this worker stands in for."""
        self.policy.restore(values)

    def next_change(self) -> int | None:
        """The windows' next change without input."""
        return self.windows.next_change()  # type: ignore[no-any-return]


class SideOutput:
    """Late records go, unchanged and at their own time, to ``stream`` (set when the operator is built)."""

    def __init__(self) -> None:
        self.stream: Stream[Any] | None = None


def column_type(batch: Any, field: Any) -> str:
    """What a non-numeric column holds, for an error."""
    if container.kind_of(batch).name == "arrow":
        return str(container.kind_named("arrow").column(batch, field).type)  # type: ignore[attr-defined]
    values = container.values(batch, field)
    return type(values[0]).__name__ if values else "nothing"


def not_an_int(x: Any, record: Any, field: Any, batch: Any) -> ColumnError:
    """The error for an event time that is not an int (a float, a string, a date...)."""
    return ColumnError(
        f"event times must be integers (the scope's timestamps are); the time {x!r} of {_preview(record)} "
        f"is a {type(x).__name__}",
        kind=container.kind_of(batch).name,
        column=field,
    )


def _preview(record: Any) -> str:
    """A record's repr, cut short for an error."""
    text = repr(record)
    return text if len(text) <= 60 else text[:57] + "..."


def first_of(session: list[Any]) -> Any:
    """A session's first event time (sessions are lists ``[first, last, ...]``)."""
    return session[0]


def last_of(session: list[Any]) -> Any:
    """A session's last event time."""
    return session[1]


def frontier_bound(frontier: Any) -> int | None:
    """The least time the frontier still allows (None when it is empty: every window may close)."""
    elements = list(frontier.frontier_elements())
    if not elements:
        return None
    return min(elements)  # type: ignore[no-any-return]


def check_kind(kind: Kind) -> None:
    """:class:`InvalidArgument` unless the sizes of ``kind`` are positive ints."""
    sizes = {"Tumbling": ["size"], "Sliding": ["size", "step"], "Session": ["gap"]}[type(kind).__name__]
    for name in sizes:
        v = getattr(kind, name)
        if type(v) is not int or v < 1:
            raise InvalidArgument(f"a {type(kind).__name__.lower()} window's {name} must be a positive int, got {v!r}")


def event_times(columns: Any, field: Any) -> Any:
    """The event time column ``field`` of a columnar batch as integers (``None`` for a function of the record,
    read record by record); a column of other values is a :class:`ColumnError`."""
    xs = column(columns, field)
    if xs is None:
        if callable(field):
            return None
        kind = container.kind_of(columns)
        raise ColumnError(
            f"event times must be integers; column {field!r} of this {kind.name} batch holds "
            f"{column_type(columns, field)}",
            kind=kind.name,
            column=field,
        )
    if xs.dtype.kind not in "iu":
        raise ColumnError(
            f"event times must be integers (the scope's timestamps are); column {field!r} holds {xs.dtype} values",
            kind=container.kind_of(columns).name,
            column=field,
        )
    return xs


def late_policy(late: DropLate | SideOutput | None, name: str) -> DropLate | SideOutput:
    """What ``late=`` asks for: :class:`DropLate` by default; anything else is an :class:`InvalidArgument`."""
    policy = DropLate() if late is None else late
    if not isinstance(policy, DropLate | SideOutput):
        raise InvalidArgument(f"{name!r}: late must be DropLate() or SideOutput(), got {late!r}")
    return policy


def send_late_to(policy: DropLate | SideOutput, late: Stream[Any] | None, more: list[Stream[Any]], name: str) -> None:
    """Give a :class:`SideOutput` its stream: ``late`` (the operator's late output) and ``more`` (its clocks')."""
    if isinstance(policy, SideOutput):
        assert late is not None
        policy.stream = late.concat(*more, name=f"{name}.late") if more else late


def take_start(initial: list[Any]) -> Any:
    """At an operator's first step, the capability its first output started with (those of the others are
    dropped; a restored copy re-times it to its pending emissions); ``None`` at any later step."""
    if not initial:
        return None
    for other in initial[1:]:
        other.drop()
    start = initial[0]
    initial.clear()
    return start
