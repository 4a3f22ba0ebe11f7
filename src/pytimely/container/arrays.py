"""The numpy kind: a batch is an array whose rows are records.

A one-dimensional array's records are its items as Python values; a two-dimensional array's are its rows as
tuples of Python values (column ``i`` is position ``i``); a structured array's are its rows as tuples, and its
fields are also columns by name. Columns of numbers (and of datetimes, as int64) are read without copying.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytimely.container.kind import BatchKind, Field
from pytimely.errors import ColumnError

__all__ = ["ArrayKind"]

_NUMBERS = "iufb"
_TIMES = "Mm"


class ArrayKind(BatchKind):
    """Numpy arrays (see the module doc)."""

    name = "numpy"
    columnar = True

    def owns(self, cls: type) -> bool:
        """``numpy.ndarray`` and subclasses."""
        import numpy as np

        return issubclass(cls, np.ndarray)

    def length(self, batch: Any) -> int:
        """The number of rows."""
        return len(batch)

    def records(self, batch: Any) -> Sequence[Any]:
        """Items (one dimension) or rows as tuples (more)."""
        if batch.ndim == 1:
            return batch.tolist()  # type: ignore[no-any-return]
        return list(map(tuple, batch.tolist()))

    def take(self, batch: Any, indices: Any) -> Any:
        """Whole rows at ``indices`` (``take`` along axis 0 copies rows at once)."""
        return batch.take(indices, axis=0)

    def concat(self, batches: Sequence[Any]) -> Any:
        """``numpy.concatenate``."""
        import numpy as np

        return np.concatenate(batches)

    def from_records(self, records: list[Any], like: Any = None) -> Any:
        """An array of ``records`` (of ``like``'s dtype when given: an array or a dtype)."""
        import numpy as np

        dtype = None if like is None else (like if isinstance(like, np.dtype) else like.dtype)
        try:
            array = np.array(records, dtype=dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ColumnError(
                f"records do not make a numpy array{'' if dtype is None else f' of {dtype}'}: {exc}", kind=self.name
            ) from exc
        if array.ndim > 2:
            raise ColumnError(
                f"records of a numpy batch are numbers or rows of them, got {records[0]!r}", kind=self.name
            )
        return array

    def _column(self, batch: Any, field: Field) -> Any:
        if field is None:
            return batch if batch.ndim == 1 and batch.dtype.names is None else None
        if isinstance(field, str):
            names = batch.dtype.names
            if names is None or field not in names:
                raise ColumnError(
                    f"a numpy batch of dtype {batch.dtype} has no column {field!r}"
                    + (f"; its fields are {list(names)}" if names else " (only structured arrays have named columns)"),
                    kind=self.name,
                    column=field,
                )
            return batch[field]
        if batch.dtype.names is not None:
            names = batch.dtype.names
            if not -len(names) <= field < len(names):
                raise ColumnError(
                    f"a numpy batch has no column {field}; its fields are {list(names)}", kind=self.name, column=field
                )
            return batch[names[field]]
        if batch.ndim != 2 or not -batch.shape[1] <= field < batch.shape[1]:
            raise ColumnError(
                f"a numpy batch of shape {batch.shape} has no column {field}", kind=self.name, column=field
            )
        return batch[:, field]

    def numeric(self, batch: Any, field: Field) -> Any:
        """A column of numbers (datetimes as int64), without copying; None for other columns."""
        import numpy as np

        column = self._column(batch, field)
        if column is None:
            return None
        kind = column.dtype.kind
        if kind in _NUMBERS:
            return column
        if kind in _TIMES:
            return column.view(np.int64)
        return None

    def values(self, batch: Any, field: Field) -> list[Any]:
        """A column's Python values."""
        if field is None:
            return list(self.records(batch))
        return self._column(batch, field).tolist()  # type: ignore[no-any-return]

    def encoded(self, batch: Any, field: Field) -> tuple[Any, list[Any]] | None:
        """Codes into the column's distinct values, by one sort (strings and objects that compare)."""
        import numpy as np

        column = self._column(batch, field)
        if column is None or column.ndim != 1:
            return None
        try:
            distinct, codes = np.unique(column, return_inverse=True)
        except TypeError:  # objects that do not compare with each other
            return None
        return codes.astype(np.int64, copy=False), distinct.tolist()
