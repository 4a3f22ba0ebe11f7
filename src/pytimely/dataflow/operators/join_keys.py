"""What the joins share: how an unmatched value goes, the interval of an interval join, the check that both
sides' keys can meet, and reading each side's event time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pytimely.container as container
from pytimely.dataflow.operators.fields import Field, check, getter
from pytimely.errors import InputFormatError, InvalidArgument

__all__ = ["How", "Interval", "KeyTypes", "kind_of", "pairs_of", "time_getters"]

How = Literal["inner", "left", "outer"]


@dataclass(frozen=True, slots=True)
class Interval:
    """A left value at event time ``x`` meets right values at ``y`` with ``x + lower <= y <= x + upper``."""

    lower: int
    upper: int


def pairs_of(port_batch: Any) -> Any:
    """A batch of ``(key, value)`` pairs as records."""
    return container.records(port_batch)


class KeyTypes:
    """The kinds of key each side has shown; two sides with no kind in common cannot be joined."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: tuple[set[str], set[str]] = (set(), set())

    def check(self, side: int, key: Any) -> None:
        """Note ``key``'s kind on ``side``; :class:`InputFormatError` when the sides share no kind."""
        kind = kind_of(key)
        mine, theirs = self.seen[side], self.seen[1 - side]
        if kind in mine:
            return
        mine.add(kind)
        if theirs and not (mine & theirs):
            left, right = (mine, theirs) if side == 0 else (theirs, mine)
            raise InputFormatError(
                f"join {self.name!r}: the left side's keys are {' and '.join(sorted(left))}, the right side's "
                f"{' and '.join(sorted(right))}: no key of one can equal a key of the other (e.g. {key!r})"
            )


def kind_of(key: Any) -> str:
    """The kind of a key, as the key check names it (numbers are one kind, tuples one per length)."""
    import numbers

    if isinstance(key, numbers.Number):
        return "numbers"
    if isinstance(key, tuple):
        return f"tuples of {len(key)}"
    return type(key).__name__


def time_getters(time: Field | tuple[Field, Field], name: str) -> tuple[Any, Any]:
    """The event time of a left and a right value (``time`` for both, or one per side)."""
    fields = time if isinstance(time, tuple) else (time, time)
    if len(fields) != 2:
        raise InvalidArgument(f"{name!r}: time= is one field for both sides or a (left, right) pair, got {time!r}")
    getters = []
    for f in fields:
        check(f, "time")
        if f is None:
            raise InvalidArgument(f"{name!r}: a join over event time reads each value's event time: give time=")
        getters.append(getter(f, "time"))
    return getters[0], getters[1]
