"""The Arrow kind: a batch is a ``pyarrow.RecordBatch`` or ``pyarrow.Table`` whose rows are records.

A record is a row as a tuple of Python values in column order, or as a dict by column name when the batch
asks for it (:func:`with_dict_records`, ``file_source(..., records="dict")``). Columns are named or numbered;
number, boolean and time columns without nulls are read as numpy arrays (times as int64 in their unit), and
other columns are dictionary-encoded, so keyed operators run Python once per distinct key, not per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytimely.container.kind import BatchKind, Field
from pytimely.errors import ColumnError

__all__ = ["ArrowKind", "dict_records", "with_dict_records"]

_RECORDS = b"pytimely.records"
"""Schema metadata key saying how a batch's records look (``dict``; tuples otherwise)."""


def with_dict_records(batch: Any) -> Any:
    """``batch`` with its records seen as dicts by column name (schema metadata; survives exchange)."""
    metadata = dict(batch.schema.metadata or {})
    metadata[_RECORDS] = b"dict"
    return batch.replace_schema_metadata(metadata)


def dict_records(batch: Any) -> bool:
    """Whether ``batch``'s records are dicts (see :func:`with_dict_records`)."""
    metadata = batch.schema.metadata
    return bool(metadata) and metadata.get(_RECORDS) == b"dict"


class ArrowKind(BatchKind):
    """Arrow record batches and tables (see the module doc)."""

    name = "arrow"
    columnar = True

    def owns(self, cls: type) -> bool:
        """``pyarrow.RecordBatch`` and ``pyarrow.Table`` (pyarrow is imported only once one is seen)."""
        if not cls.__module__.startswith("pyarrow"):
            return False
        import pyarrow as pa

        return issubclass(cls, pa.RecordBatch | pa.Table)

    def length(self, batch: Any) -> int:
        """The number of rows."""
        return batch.num_rows  # type: ignore[no-any-return]

    def records(self, batch: Any) -> Sequence[Any]:
        """Rows as tuples (or dicts, see :func:`with_dict_records`)."""
        if dict_records(batch):
            return batch.to_pylist()  # type: ignore[no-any-return]
        if batch.num_columns == 0:
            return [()] * batch.num_rows
        return list(zip(*(c.to_pylist() for c in batch.columns), strict=True))

    def take(self, batch: Any, indices: Any) -> Any:
        """The rows at ``indices``, of the same kind and schema."""
        return batch.take(indices)

    def concat(self, batches: Sequence[Any]) -> Any:
        """One table of every row (batches of one schema)."""
        import pyarrow as pa

        tables = [pa.Table.from_batches([b]) if isinstance(b, pa.RecordBatch) else b for b in batches]
        return pa.concat_tables(tables)

    def from_records(self, records: list[Any], like: Any = None) -> Any:
        """A record batch of ``records`` (tuples in column order, or dicts), of ``like``'s schema when given."""
        import pyarrow as pa

        schema = None if like is None else (like if isinstance(like, pa.Schema) else like.schema)
        if records and isinstance(records[0], dict):
            return pa.RecordBatch.from_pylist(records, schema=schema)
        rows = [r if isinstance(r, tuple | list) else (r,) for r in records]
        width = len(schema) if schema is not None else (len(rows[0]) if rows else 0)
        try:
            columns = list(zip(*rows, strict=True)) if rows else [() for _ in range(width)]
        except ValueError:
            odd = next(r for r in rows if len(r) != len(rows[0]))
            raise ColumnError(
                f"records of an arrow batch must all have {len(rows[0])} fields; {odd!r} has {len(odd)}",
                kind=self.name,
            ) from None
        if schema is None:
            names = [f"f{i}" for i in range(width)]
            return pa.RecordBatch.from_arrays([pa.array(c) for c in columns], names=names)
        if len(columns) != len(schema):
            raise ColumnError(
                f"records have {len(columns)} fields and the schema {len(schema)} ({schema.names})", kind=self.name
            )
        arrays = []
        for values, field in zip(columns, schema, strict=True):
            try:
                arrays.append(pa.array(values, type=field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
                raise ColumnError(
                    f"column {field.name!r} cannot hold these values as {field.type}: {exc}",
                    kind=self.name,
                    column=field.name,
                ) from exc
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def column(self, batch: Any, field: int | str) -> Any:
        """The Arrow column ``field`` (a position or a name); :class:`ColumnError` when there is none."""
        names = batch.schema.names
        if isinstance(field, str):
            if field not in names:
                raise ColumnError(f"an arrow batch has no column {field!r}; its columns are {names}", kind=self.name,
                                  column=field)
            return batch.column(field)
        if not -len(names) <= field < len(names):
            raise ColumnError(f"an arrow batch has no column {field}; its columns are {names}", kind=self.name,
                              column=field)
        return batch.column(field)

    def numeric(self, batch: Any, field: Field) -> Any:
        """Numbers, booleans and times without nulls as a numpy array (times as int64); None otherwise."""
        import pyarrow as pa

        if field is None:
            if batch.num_columns != 1 or dict_records(batch):
                return None
            field = 0
        column = self.column(batch, field)
        kind = column.type
        if column.null_count:
            return None
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
            return column.to_numpy(zero_copy_only=False)
        if pa.types.is_timestamp(kind) or pa.types.is_date(kind) or pa.types.is_duration(kind) or pa.types.is_time(
            kind
        ):
            return column.cast(pa.int64()).to_numpy()
        return None

    def values(self, batch: Any, field: Field) -> list[Any]:
        """A column's Python values (``None``: the records)."""
        if field is None:
            return list(self.records(batch))
        return self.column(batch, field).to_pylist()  # type: ignore[no-any-return]

    def encoded(self, batch: Any, field: Field) -> tuple[Any, list[Any]] | None:
        """Dictionary encoding of the column (nulls encoded as ``None``)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if field is None:
            if batch.num_columns != 1 or dict_records(batch):
                return None
            field = 0
        column = self.column(batch, field)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if not pa.types.is_dictionary(column.type):
            column = pc.dictionary_encode(column, null_encoding="encode")
        indices = column.indices
        if indices.null_count:  # a dictionary column holding nulls: give them a code of their own
            distinct = [*column.dictionary.to_pylist(), None]
            codes = indices.fill_null(len(distinct) - 1).to_numpy()
        else:
            distinct = column.dictionary.to_pylist()
            codes = indices.to_numpy(zero_copy_only=False)
        return codes.astype(np.int64, copy=False), distinct
