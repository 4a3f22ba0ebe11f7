"""A signed multiset of updates, compacted lazily.

Producers append ``(item, diff)`` pairs cheaply; the pairs are folded together
(and zero counts dropped) only when someone reads the batch.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import Generic, TypeVar

__all__ = ["ChangeBatch"]

K = TypeVar("K", bound=Hashable)


class ChangeBatch(Generic[K]):
    """Accumulated signed counts per item; reading compacts pending updates first."""

    __slots__ = ("_counts", "_pending")

    def __init__(self, updates: Iterable[tuple[K, int]] = ()) -> None:
        self._counts: dict[K, int] = {}
        self._pending: list[tuple[K, int]] = list(updates)

    def update(self, item: K, diff: int) -> None:
        """Record that ``item``'s count changes by ``diff``."""
        if diff:
            self._pending.append((item, diff))

    def extend(self, updates: Iterable[tuple[K, int]]) -> None:
        """Record many ``(item, diff)`` updates."""
        self._pending.extend(updates)

    def compact(self) -> None:
        """Fold pending updates into the counts and drop items whose count is zero."""
        if not self._pending:
            return
        counts = self._counts
        get = counts.get
        touched = []
        for item, diff in self._pending:
            counts[item] = get(item, 0) + diff
            touched.append(item)
        self._pending.clear()
        for item in touched:
            if counts.get(item, 1) == 0:
                del counts[item]

    def count(self, item: K) -> int:
        """The accumulated count of ``item``."""
        self.compact()
        return self._counts.get(item, 0)

    def items(self) -> list[tuple[K, int]]:
        """The non-zero ``(item, count)`` pairs."""
        self.compact()
        return list(self._counts.items())

    def drain(self) -> list[tuple[K, int]]:
        """Return the non-zero pairs and empty the batch."""
        self.compact()
        out = list(self._counts.items())
        self._counts.clear()
        return out

    def clear(self) -> None:
        """Forget every update."""
        self._counts.clear()
        self._pending.clear()

    def is_empty(self) -> bool:
        """Whether every count is zero."""
        self.compact()
        return not self._counts

    def __iter__(self) -> Iterator[tuple[K, int]]:
        return iter(self.items())

    def __len__(self) -> int:
        self.compact()
        return len(self._counts)

    def __bool__(self) -> bool:
        return not self.is_empty()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChangeBatch):
            return NotImplemented
        self.compact()
        other.compact()
        return self._counts == other._counts

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ChangeBatch({self.items()!r})"
