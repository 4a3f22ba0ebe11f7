"""Where a record's time, key or value is (a ``Field``), and reading it from any batch kind.

Operators that take a field (windows, ``*_final``, ``collect``) read it the same way: a function of the
record, a column index, or the record itself; over numpy and Arrow batches a column index is read as one
array, with no Python call per record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytimely.errors import InvalidArgument

__all__ = ["Field", "column", "getter", "key_route", "rows"]

Field = Callable[[Any], Any] | int | None
"""Where a record's time, key or value is: a function of the record, a column index, or ``None`` (see ``window``)."""


def getter(field: Field, what: str) -> Callable[[Any], Any] | None:
    """The per-record function for ``field`` (None: the record itself)."""
    if field is None:
        return None
    if isinstance(field, bool) or not (callable(field) or isinstance(field, int)):
        raise InvalidArgument(f"{what} must be a function of the record or a column index, got {field!r}")
    if isinstance(field, int):
        i = field
        return lambda r: r[i]
    return field


def column(batch: Any, field: Field) -> Any:
    """The numpy array of ``field`` over a numpy or Arrow batch, or None when it needs a call per record."""
    if hasattr(batch, "dtype"):
        if field is None:
            return batch if batch.ndim == 1 else None
        if isinstance(field, int) and batch.ndim == 2:
            return batch[:, field]
        return None
    if hasattr(batch, "column") and isinstance(field, int):
        return batch.column(field).to_numpy()
    return None


def key_route(key: Field) -> Callable[[Any], Any]:
    """A vectorized exchange route sending every record of a key to the same worker, whatever its batch kind."""
    import numpy as np

    get = getter(key, "key")

    from pytimely.dataflow.bins import key_hash

    def one(k: Any) -> int:
        # key_hash, not hash: strings must go to the same worker in processes with different hash seeds.
        if type(k) is int and -(1 << 63) <= k < 1 << 63:
            return k
        return key_hash(k) >> 1  # fits an int64

    def route(batch: Any) -> Any:
        values_column = column(batch, key)
        if values_column is not None and values_column.dtype.kind in "iu":
            return values_column
        values = (
            values_column.tolist() if values_column is not None else (batch if get is None else map(get, rows(batch)))
        )
        return np.fromiter((one(k) for k in values), dtype=np.int64, count=len(batch))

    return route


def rows(batch: Any) -> Any:
    """The records of a batch: list items, numpy rows, or Arrow rows as tuples."""
    if isinstance(batch, list) or hasattr(batch, "dtype"):
        return batch
    return list(zip(*(c.to_pylist() for c in batch.columns), strict=True))
