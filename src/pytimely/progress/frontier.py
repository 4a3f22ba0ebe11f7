"""Frontiers: antichains of minimal timestamps, plain and counted.

A frontier ``F`` stands for every timestamp ``t`` with some ``f <= t`` in ``F``
(seed ``000_306a8e6bd5c43d47.txt`` §2, "Frontiers").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

from pytimely.order import sort_key

__all__ = ["Antichain", "MutableAntichain", "frontier_of"]

T = TypeVar("T")


class Antichain(Generic[T]):
    """A set of mutually incomparable elements, kept minimal under insertion."""

    __slots__ = ("_elements",)

    def __init__(self, elements: Iterable[T] = ()) -> None:
        self._elements: list[T] = []
        for element in elements:
            self.insert(element)

    def insert(self, element: T) -> bool:
        """Add ``element`` unless something already present is ``<=`` it; return whether it was added."""
        for e in self._elements:
            if e <= element:  # type: ignore[operator]
                return False
        self._elements = [e for e in self._elements if not element <= e]  # type: ignore[operator]
        self._elements.append(element)
        return True

    def less_than(self, t: T) -> bool:
        """Whether some element is strictly less than ``t``."""
        return any(e < t for e in self._elements)  # type: ignore[operator]

    def less_equal(self, t: T) -> bool:
        """Whether some element is less than or equal to ``t`` (``t`` is at or beyond the frontier)."""
        return any(e <= t for e in self._elements)  # type: ignore[operator]

    def dominates(self, other: Antichain[T]) -> bool:
        """Whether every element of ``other`` is at or beyond this antichain."""
        return all(self.less_equal(t) for t in other._elements)

    def elements(self) -> list[T]:
        """The elements, smallest first in the total order extending ``<=``."""
        return sorted(self._elements, key=sort_key)

    def is_empty(self) -> bool:
        """Whether the antichain has no elements (the frontier of a finished stream)."""
        return not self._elements

    def __iter__(self) -> Iterator[T]:
        return iter(self.elements())

    def __len__(self) -> int:
        return len(self._elements)

    def __bool__(self) -> bool:
        return bool(self._elements)

    def __contains__(self, t: object) -> bool:
        return t in self._elements

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Antichain):
            return set(self._elements) == set(other._elements)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._elements))

    def __repr__(self) -> str:
        return f"Antichain({self.elements()!r})"


def frontier_of(times: Iterable[T]) -> list[T]:
    """The minimal elements of ``times`` (duplicates removed), smallest first."""
    out: list[T] = []
    for t in sorted(set(times), key=sort_key):
        # Sorting by a linear extension means no later element is below an earlier one.
        if not any(f <= t for f in out):  # type: ignore[operator]
            out.append(t)
    return out


class MutableAntichain(Generic[T]):
    """Counts per timestamp plus the frontier they imply (the minimal times with positive count).

    Counts may go transiently negative, as progress reports can arrive out of
    order; only positive counts shape the frontier.
    """

    __slots__ = ("_counts", "_frontier")

    def __init__(self, updates: Iterable[tuple[T, int]] = ()) -> None:
        self._counts: dict[T, int] = {}
        self._frontier: list[T] = []
        self.update_iter(updates)

    def update_iter(self, updates: Iterable[tuple[T, int]]) -> list[tuple[T, int]]:
        """Apply ``(time, diff)`` updates and return how the frontier changed, as ``(time, ±1)``."""
        counts = self._counts
        frontier = self._frontier
        rebuild = False
        for t, diff in updates:
            if not diff:
                continue
            old = counts.get(t, 0)
            new = old + diff
            if new:
                counts[t] = new
            else:
                del counts[t]
            if rebuild:
                continue
            if old <= 0 < new:
                if not any(f <= t for f in frontier):  # type: ignore[operator]
                    rebuild = True
            elif new <= 0 < old and t in frontier:
                rebuild = True
        if not rebuild:
            return []
        old_frontier = frontier
        self._frontier = frontier_of(t for t, c in counts.items() if c > 0)
        old_set = set(old_frontier)
        new_set = set(self._frontier)
        changes = [(t, -1) for t in old_frontier if t not in new_set]
        changes.extend((t, 1) for t in self._frontier if t not in old_set)
        return changes

    def update(self, t: T, diff: int) -> list[tuple[T, int]]:
        """Apply a single update and return how the frontier changed; see :meth:`update_iter`."""
        counts = self._counts
        old = counts.get(t, 0)
        new = old + diff
        if new:
            counts[t] = new
        elif old:
            del counts[t]
        frontier = self._frontier
        if old <= 0 < new:
            for f in frontier:
                if f <= t:  # type: ignore[operator]
                    return []
            # Nothing at or below t is positive, so t is minimal and displaces what lies above it.
            above = [f for f in frontier if t <= f]  # type: ignore[operator]
            if above:
                self._frontier = [f for f in frontier if not t <= f]  # type: ignore[operator]
                self._frontier.append(t)
                changes = [(f, -1) for f in above]
                changes.append((t, 1))
                return changes
            frontier.append(t)
            return [(t, 1)]
        if new <= 0 < old and t in frontier:
            # Only t leaves; what enters are the positive times t alone was covering.
            self._frontier = frontier_of(u for u, c in counts.items() if c > 0)
            old_set = set(frontier)
            changes = [(t, -1)]
            changes.extend((u, 1) for u in self._frontier if u not in old_set)
            return changes
        return []

    def frontier(self) -> Antichain[T]:
        """The current frontier as an :class:`Antichain`."""
        return Antichain(self._frontier)

    def frontier_elements(self) -> list[T]:
        """The current frontier's elements, smallest first."""
        return list(self._frontier)

    def count_for(self, t: T) -> int:
        """The accumulated count of ``t``."""
        return self._counts.get(t, 0)

    def counts(self) -> dict[T, int]:
        """A copy of the non-zero counts."""
        return dict(self._counts)

    def less_than(self, t: T) -> bool:
        """Whether some frontier element is strictly less than ``t``."""
        return any(f < t for f in self._frontier)  # type: ignore[operator]

    def less_equal(self, t: T) -> bool:
        """Whether some frontier element is less than or equal to ``t``."""
        return any(f <= t for f in self._frontier)  # type: ignore[operator]

    def is_empty(self) -> bool:
        """Whether no timestamp has a positive count."""
        return not self._frontier

    def __repr__(self) -> str:
        return f"MutableAntichain(frontier={self._frontier!r}, counts={self._counts!r})"


