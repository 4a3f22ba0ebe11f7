"""What a batch kind is (timely's ``Container`` trait), and finding the kind of a batch.

A batch is what travels on a dataflow edge at one time: a list of records, a numpy array, an Arrow record batch
or table. Each kind is one :class:`BatchKind` that knows a batch's length, its records as Python values, how to
take rows by index, split by destination, concatenate, read a column as a numpy array, and build itself from
records. Everything in pytimely that looks inside a batch asks :func:`kind_of` for its kind, once per batch (a
dictionary lookup by the batch's type), instead of sniffing attributes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from pytimely.errors import BatchKindError, ColumnError

__all__ = ["BatchKind", "Field", "kind_named", "kind_of", "kinds", "register"]

Field = int | str | None
"""A column: a position, a name (Arrow batches, numpy structured arrays), or ``None`` for the record itself."""


class BatchKind(ABC):
    """One kind of batch: its records, its rows and its columns (see the module doc)."""

    name: ClassVar[str]
    """How errors and conversions name the kind: ``"list"``, ``"numpy"``, ``"arrow"``."""

    columnar: ClassVar[bool] = False
    """Whether a column can be read without a Python call per record."""

    @abstractmethod
    def owns(self, cls: type) -> bool:
        """Whether batches of type ``cls`` are of this kind (asked once per type)."""

    @abstractmethod
    def length(self, batch: Any) -> int:
        """How many records ``batch`` holds."""

    @abstractmethod
    def records(self, batch: Any) -> Sequence[Any]:
        """The records of ``batch`` as Python values, in order (rows of columns are tuples)."""

    @abstractmethod
    def take(self, batch: Any, indices: Any) -> Any:
        """The rows of ``batch`` at ``indices`` (an int64 numpy array), as a batch of the same kind."""

    @abstractmethod
    def concat(self, batches: Sequence[Any]) -> Any:
        """One batch holding the records of ``batches`` (all of this kind) in order."""

    @abstractmethod
    def from_records(self, records: list[Any], like: Any = None) -> Any:
        """A batch of this kind holding ``records`` (shaped like ``like`` when given: its schema or dtype)."""

    def split(self, batch: Any, dests: Any, parts: int) -> list[Any]:
        """``batch`` cut by destination: part ``j`` holds the rows whose ``dests`` entry is ``j`` (in order)."""
        import numpy as np

        if parts <= 4:
            return [self.take(batch, np.flatnonzero(dests == j)) for j in range(parts)]
        # One stable sort instead of a scan per destination.
        order = np.argsort(dests, kind="stable")
        bounds = np.searchsorted(dests[order], np.arange(parts + 1))
        return [self.take(batch, order[bounds[j] : bounds[j + 1]]) for j in range(parts)]

    def numeric(self, batch: Any, field: Field) -> Any:
        """Column ``field`` as a numpy array of numbers (timestamps as int64), or None when it is not numeric.

        Raises :class:`ColumnError` when the batch has no such column.
        """
        return None

    def values(self, batch: Any, field: Field) -> list[Any]:
        """Column ``field`` as a list of Python values (``None``: the records themselves)."""
        records = self.records(batch)
        if field is None:
            return list(records)
        return [_item(r, field, self, batch) for r in records]

    def encoded(self, batch: Any, field: Field) -> tuple[Any, list[Any]] | None:
        """``(codes, distinct)``: column ``field`` as int64 codes into its distinct Python values, or None.

        Kinds that can do it without a Python call per row (Arrow's dictionary encoding) return the pair; a
        keyed operator then runs Python once per distinct key, not once per record.
        """
        return None


def _item(record: Any, field: int | str, kind: BatchKind, batch: Any) -> Any:
    try:
        return record[field]
    except (IndexError, KeyError, TypeError) as exc:
        raise ColumnError(
            f"a {kind.name} batch has no column {field!r} (a record is {_preview(record)})",
            kind=kind.name,
            column=field,
        ) from exc


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_KINDS: list[BatchKind] = []
_BY_TYPE: dict[type, BatchKind] = {}
_BY_NAME: dict[str, BatchKind] = {}


def register(kind: BatchKind) -> BatchKind:
    """Make ``kind`` known to every operator (a new kind is asked before the built-in ones)."""
    _KINDS.insert(0, kind)
    _BY_NAME[kind.name] = kind
    _BY_TYPE.clear()
    return kind


def kinds() -> list[BatchKind]:
    """The batch kinds known, most recently registered first."""
    return list(_KINDS)


def kind_named(name: str) -> BatchKind:
    """The kind called ``name`` (``"list"``, ``"numpy"``, ``"arrow"``, or a registered one)."""
    kind = _BY_NAME.get(name)
    if kind is None:
        raise BatchKindError(f"no batch kind is called {name!r}; the kinds are {sorted(_BY_NAME)}", kind=name)
    return kind


def kind_of(batch: Any) -> BatchKind:
    """The kind of ``batch``; :class:`BatchKindError` names its type when no kind owns it."""
    cls = type(batch)
    kind = _BY_TYPE.get(cls)
    if kind is not None:
        return kind
    for candidate in _KINDS:
        if candidate.owns(cls):
            _BY_TYPE[cls] = candidate
            return candidate
    raise BatchKindError(
        f"a batch of type {cls.__module__}.{cls.__qualname__} is of no known kind; batches are lists of records, "
        f"numpy arrays or Arrow record batches and tables (or a kind added with pytimely.container.register)",
        kind=f"{cls.__module__}.{cls.__qualname__}",
    )
