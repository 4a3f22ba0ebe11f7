"""Grouping the rows of a numpy batch by a key column without a Python call per row.

Integer keys spanning a small range are grouped densely (``ufunc.at`` into an array indexed by key) or sorted
with a radix sort (a stable sort of ``uint16`` offsets); other keys fall back to a stable comparison sort.
"""

from __future__ import annotations

from typing import Any

__all__ = ["group_starts", "reduce_by_key"]

_DENSE_SLACK = 1024


def _span(keys: Any) -> tuple[int, int] | None:
    """``(lowest, number of distinct slots)`` for integer keys in a range small enough to index, else None."""
    if keys.dtype.kind not in "iu" or not len(keys):
        return None
    lo, hi = int(keys.min()), int(keys.max())
    width = hi - lo + 1
    return (lo, width) if width <= 4 * len(keys) + _DENSE_SLACK else None


def group_starts(keys: Any) -> tuple[Any, Any]:
    """``(order, starts)``: ``keys[order]`` is sorted (stably) and each group of equal keys begins at a start."""
    import numpy as np

    span = _span(keys)
    if span is not None and span[1] <= 1 << 16:
        # numpy sorts 16-bit integers stably by radix: linear time.
        order = np.argsort((keys - span[0]).astype(np.uint16), kind="stable")
    else:
        order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(keys) else np.zeros(0, np.int64)
    return order, starts


def reduce_by_key(keys: Any, values: Any, how: str) -> tuple[Any, Any]:
    """``(distinct keys, value per key)`` for ``how`` in ``min``, ``max``, ``first``, ``last`` (by row order)."""
    import numpy as np

    span = _span(keys)
    if span is not None:
        lo, width = span
        slots = keys - lo
        present = np.zeros(width, dtype=bool)
        present[slots] = True
        hit = np.flatnonzero(present)
        if how in ("first", "last"):
            rows = np.arange(len(keys))
            pick = np.full(width, len(keys) if how == "first" else -1, dtype=np.int64)
            (np.minimum if how == "first" else np.maximum).at(pick, slots, rows)
            return hit + lo, values[pick[hit]]
        ufunc = np.minimum if how == "min" else np.maximum
        acc = np.zeros(width, dtype=values.dtype)
        # Start every slot from one of its own values, so no sentinel of the value type is needed.
        acc[slots] = values
        ufunc.at(acc, slots, values)
        return hit + lo, acc[hit]
    order, starts = group_starts(keys)
    ordered_keys = keys[order]
    if how in ("first", "last"):
        ends = np.r_[starts[1:], len(keys)] - 1
        pick = starts if how == "first" else ends
        return ordered_keys[pick], values[order][pick]
    ufunc = np.minimum if how == "min" else np.maximum
    return ordered_keys[starts], ufunc.reduceat(values[order], starts)
