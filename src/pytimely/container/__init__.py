"""Batches, one container for every kind (timely's ``Container`` and ``PushPartitioned``).

A batch is a list of records, a numpy array or an Arrow record batch or table (and any kind added with
:func:`register`). This package is the one place that knows them apart: operators ask it for a batch's
length, its records, rows by index, a split by destination, a concatenation, a column, or a conversion to
another kind. Per-record operators (``map``, ``filter``, ``exchange`` by a function...) see every kind's
records alike (:func:`records`: numpy and Arrow rows are tuples of Python values); columnar paths (exchange
by a key column, keyed counts, windows, ``*_final``, ``collect``, sinks) read columns without a Python call per
record. ``filter``, ``branch``, ``partition`` and exchanges keep a batch's kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytimely.container.arrays import ArrayKind
from pytimely.container.arrow import ArrowKind, dict_records, with_dict_records
from pytimely.container.keys import key_hash, per_key, route_of, routes
from pytimely.container.kind import BatchKind, Field, kind_named, kind_of, kinds, register
from pytimely.container.lists import ListKind
from pytimely.errors import BatchError, BatchKindError

__all__ = [
    "BatchKind",
    "Field",
    "concat",
    "convert",
    "dict_records",
    "encoded",
    "key_hash",
    "kind_named",
    "kind_of",
    "kinds",
    "length",
    "numeric",
    "per_key",
    "records",
    "register",
    "route_of",
    "routes",
    "split",
    "take",
    "values",
    "with_dict_records",
]

register(ArrowKind())
register(ArrayKind())
register(ListKind())


def length(batch: Any) -> int:
    """How many records ``batch`` holds."""
    return kind_of(batch).length(batch)


def records(batch: Any) -> Sequence[Any]:
    """The records of ``batch`` as Python values (rows of numpy and Arrow batches as tuples)."""
    if type(batch) is list:
        return batch
    return kind_of(batch).records(batch)


def take(batch: Any, indices: Any) -> Any:
    """The rows of ``batch`` at ``indices`` (int64 numpy array), in the batch's own kind."""
    return kind_of(batch).take(batch, indices)


def split(batch: Any, dests: Any, parts: int) -> list[Any]:
    """``batch`` cut into ``parts`` batches of its kind: row ``i`` goes to part ``dests[i]``."""
    return kind_of(batch).split(batch, dests, parts)


def concat(batches: Sequence[Any]) -> Any:
    """One batch of every record of ``batches``: of their kind when they share one, else a list."""
    if not batches:
        return []
    kind = kind_of(batches[0])
    if all(kind_of(b) is kind for b in batches[1:]):
        return kind.concat(batches)
    out: list[Any] = []
    for b in batches:
        out.extend(records(b))
    return out


def numeric(batch: Any, field: Field) -> Any:
    """Column ``field`` as a numpy array of numbers, or None (a list, or a column of other values)."""
    return kind_of(batch).numeric(batch, field)


def values(batch: Any, field: Field) -> list[Any]:
    """Column ``field`` as a list of Python values (``None``: the records)."""
    return kind_of(batch).values(batch, field)


def encoded(batch: Any, field: Field) -> tuple[Any, list[Any]] | None:
    """``(codes, distinct values)`` of column ``field`` without a call per row, or None where it cannot."""
    return kind_of(batch).encoded(batch, field)


def convert(batch: Any, to: str, like: Any = None) -> Any:
    """``batch`` as a batch of kind ``to`` (``"list"``, ``"numpy"``, ``"arrow"``); ``like``: a schema or dtype."""
    target = kind_named(to)
    source = kind_of(batch)
    if source is target and like is None:
        return batch
    try:
        return target.from_records(list(source.records(batch)), like)
    except BatchError:
        raise
    except Exception as exc:
        raise BatchKindError(
            f"a {source.name} batch cannot be turned into a {to} batch: {type(exc).__name__}: {exc}", kind=source.name
        ) from exc
