"""The list kind: a batch is a Python list of records (what ``send``, ``map`` and ``flat_map`` produce)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

from pytimely.container.kind import BatchKind

__all__ = ["ListKind"]


class ListKind(BatchKind):
    """Lists of records: records are the items themselves."""

    name = "list"

    def owns(self, cls: type) -> bool:
        """Lists (and subclasses)."""
        return issubclass(cls, list)

    def length(self, batch: Any) -> int:
        """``len(batch)``."""
        return len(batch)

    def records(self, batch: Any) -> Sequence[Any]:
        """The list itself."""
        return batch  # type: ignore[no-any-return]

    def take(self, batch: Any, indices: Any) -> Any:
        """The items at ``indices``."""
        return [batch[i] for i in indices.tolist()]

    def split(self, batch: Any, dests: Any, parts: int) -> list[Any]:
        """One pass over the items, appending each to its destination's list."""
        buckets: list[list[Any]] = [[] for _ in range(parts)]
        appends = [b.append for b in buckets]
        for record, j in zip(batch, dests.tolist(), strict=True):
            appends[j](record)
        return buckets

    def concat(self, batches: Sequence[Any]) -> Any:
        """One list of every item, in order."""
        return list(chain.from_iterable(batches))

    def from_records(self, records: list[Any], like: Any = None) -> Any:
        """``records`` as they are."""
        return records
