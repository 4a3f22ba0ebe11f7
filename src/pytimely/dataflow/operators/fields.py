"""Where a record's time, key or value is (a ``Field``), and reading it from any batch kind.

Operators that take a field (windows, ``*_final``, ``collect``, ``key_on``) read it the same way: a function of
the record, a column (a position, or a name of an Arrow or structured numpy column), or the record itself. Over
columnar batches a column is read as one array (:mod:`pytimely.container`), with no Python call per record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from operator import itemgetter
from typing import Any

import pytimely.container as container
from pytimely.container.arrow import dict_records
from pytimely.errors import ColumnError, InvalidArgument

__all__ = ["Field", "check", "column", "column_errors", "getter", "key_route", "reader", "rows"]

Field = Callable[[Any], Any] | int | str | None
"""Where a record's time, key or value is: a function of the record, a column, or ``None`` (the record)."""


def check(field: Field, what: str) -> Field:
    """``field``, refused with :class:`InvalidArgument` unless it is a function, a column or None."""
    if field is None or callable(field) or (isinstance(field, int | str) and not isinstance(field, bool)):
        return field
    raise InvalidArgument(
        f"{what} must be a function of the record, a column (position or name) or None, got {field!r}"
    )


def getter(field: Field, what: str) -> Callable[[Any], Any] | None:
    """The per-record function for ``field`` over plain records (None: the record itself)."""
    check(field, what)
    if field is None or callable(field):
        return field
    return itemgetter(field)


def reader(batch: Any, field: Field) -> Callable[[Any], Any] | None:
    """The function reading ``field`` from the records of this ``batch`` (None: the record itself).

    A column named over an Arrow batch whose records are tuples is read by its position in the schema; a
    position over one whose records are dicts by its name.
    """
    if field is None or callable(field):
        return field
    kind = container.kind_of(batch)
    if kind.name == "arrow":
        names = batch.schema.names
        if isinstance(field, str) and not dict_records(batch):
            if field not in names:
                raise ColumnError(f"an arrow batch has no column {field!r}; its columns are {names}", kind="arrow",
                                  column=field)
            return itemgetter(names.index(field))
        if isinstance(field, int) and dict_records(batch):
            if not -len(names) <= field < len(names):
                raise ColumnError(f"an arrow batch has no column {field}; its columns are {names}", kind="arrow",
                                  column=field)
            return itemgetter(names[field])
    if kind.name == "numpy" and isinstance(field, str):
        names = batch.dtype.names or ()
        if field not in names:
            raise ColumnError(f"a numpy batch of dtype {batch.dtype} has no column {field!r}", kind="numpy",
                              column=field)
        return itemgetter(names.index(field))
    return itemgetter(field)


def column(batch: Any, field: Field) -> Any:
    """The numpy array of ``field`` over a columnar batch, or None when it needs a call per record."""
    if callable(field):
        return None
    return container.numeric(batch, field)


def key_route(key: Field) -> Callable[[Any], Any]:
    """A vectorized exchange route sending every record of a key to the same worker, whatever its batch kind."""
    check(key, "key")
    if callable(key):
        get = key
        return lambda batch: container.routes(batch, None, get)
    field = key
    return lambda batch: container.routes(batch, field)


def rows(batch: Any) -> Any:
    """The records of a batch as Python values (numpy and Arrow rows as tuples)."""
    return container.records(batch)


@contextmanager
def column_errors(batch: Any, *fields: Field) -> Iterator[None]:
    """Turn a column read that fails on a record of ``batch`` into a :class:`ColumnError` naming the column.

    Fast paths read columns of plain records with ``itemgetter``; a record without the column raises
    ``IndexError``, ``KeyError`` or ``TypeError`` there, which says nothing of the column.
    """
    try:
        yield
    except (IndexError, KeyError, TypeError) as exc:
        kind = container.kind_of(batch)
        for field in fields:
            if field is None or callable(field):
                continue
            get = reader(batch, field)
            for record in kind.records(batch):
                try:
                    get(record)  # type: ignore[misc]
                except (IndexError, KeyError, TypeError):
                    text = repr(record)
                    raise ColumnError(
                        f"a {kind.name} batch has no column {field!r} (a record is "
                        f"{text if len(text) <= 60 else text[:57] + '...'})",
                        kind=kind.name,
                        column=field,
                    ) from exc
        raise
