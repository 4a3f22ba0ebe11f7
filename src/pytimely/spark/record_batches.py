"""Rows as Arrow record batches, both ways: the workers' shares of a partition's input (spread evenly, or
routed to the worker that owns each row's key) and the conversion of the dataflow's output batches into rows of
the output's schema."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.errors import BatchKindError, InputFormatError, InvalidArgument, SparkError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["owners", "split_by_owner", "to_record_batch"]


def _arrow_schema(schema: Any, timezone: str) -> pa.Schema:
    """The Arrow schema of Spark ``schema``, timestamps in the session's time zone; a type Arrow lacks is named."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    fields = []
    for field in schema:
        try:
            kind = to_arrow_type(field.dataType, timezone=timezone)
        except Exception as exc:
            raise InvalidArgument(
                f"output column {field.name!r} of type {field.dataType.simpleString()} cannot be carried by "
                f"Arrow ({type(exc).__name__}: {exc})"
            ) from exc
        fields.append(pa.field(field.name, kind, nullable=field.nullable))
    return pa.schema(fields)


def _shares(batches: list[pa.RecordBatch], workers: int, epoch: str | None) -> list[list[tuple[int, Any]]]:
    """Each local worker's ``(time, record batch)`` list: an even slice of every batch (per epoch if given)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    pieces: list[tuple[int, pa.RecordBatch]] = []
    if epoch is None:
        # Spark hands over small batches (10,000 rows by default); one batch per worker saves a pass through
        # the dataflow per batch.
        if len(batches) > 1:
            batches = [_one_batch(pa.Table.from_batches(batches))]
        pieces = [(0, b) for b in batches]
    elif batches:
        table = pa.Table.from_batches(batches).combine_chunks()
        column = table.column(epoch)
        if not pa.types.is_integer(column.type):
            raise InputFormatError(f"epoch column {epoch!r} must hold integers, holds {column.type}")
        if column.null_count:
            raise InputFormatError(f"epoch column {epoch!r} has {column.null_count} empty values")
        if len(column) and pc.min(column).as_py() < 0:
            raise InputFormatError(f"epoch column {epoch!r} has negative values (timestamps start at 0)")
        table = table.sort_by(epoch).combine_chunks()
        whole = _one_batch(table)
        values = whole.column(epoch).to_numpy()
        # Rows are sorted by epoch: cut where the value changes, one piece per epoch.
        cuts = (np.flatnonzero(np.diff(values)) + 1).tolist()
        pieces = [
            (int(values[s]), whole.slice(s, e - s)) for s, e in zip([0, *cuts], [*cuts, len(values)], strict=True)
        ]
    shares: list[list[tuple[int, Any]]] = [[] for _ in range(workers)]
    for time, batch in pieces:
        step = -(-batch.num_rows // workers)
        for k in range(workers):
            part = batch.slice(k * step, step)
            if part.num_rows:
                shares[k].append((time, part))
    return shares


def owners(batch: pa.RecordBatch, key: str, peers: int, bins: int) -> Any:
    """The worker (of ``peers``) that owns each row's value of column ``key``, as an int64 array.

    It is what a keyed operator's exchange computes (:func:`~pytimely.dataflow.operators.binned.bin_exchange`:
    bin ``b`` of ``bins`` on worker ``b % peers``), so rows sent to their owner are not moved again by it.
    """
    import numpy as np

    from pytimely.dataflow.operators.binned import bin_exchange

    if key not in batch.schema.names:
        raise InputFormatError(f"the routing key {key!r} is not a column of the input ({batch.schema.names})")
    return np.asarray(bin_exchange(key, bins).route(batch), dtype=np.int64) % peers


def split_by_owner(
    batch: pa.RecordBatch, key: str, peers: int, bins: int, *, parts: int, per: int = 1, first: int = 0
) -> list[Any]:
    """``batch`` cut into ``parts`` batches by the owner of each row's key: part ``i`` holds the rows of workers
    ``first + i * per`` to ``first + (i + 1) * per - 1`` (``per`` = workers per process: one part per process;
    ``per=1``: one per worker). A row owned by no part's worker is :class:`InputFormatError`."""
    dests = (owners(batch, key, peers, bins) - first) // per
    if len(dests) and (int(dests.min()) < 0 or int(dests.max()) >= parts):
        raise InputFormatError(f"rows routed by {key!r} belong to workers outside {first}..{first + parts * per - 1}")
    return container.split(batch, dests, parts)


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    """``table`` as a single record batch (its columns' chunks joined)."""
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([c.combine_chunks() for c in table.columns], schema=table.schema)


def to_record_batch(batch: Any, schema: pa.Schema, *, time: Any = None, epoch: str | None = None) -> pa.RecordBatch:
    """``batch`` (Arrow batch or table, numpy array, list of tuples or dicts) as a record batch of ``schema``.

    Columns are matched by name for Arrow batches and dicts, by position otherwise; a column named
    ``epoch`` that the batch lacks is filled with ``time``.
    """
    import pyarrow as pa

    names = schema.names
    fill = epoch if epoch is not None and epoch in names else None
    columns: dict[str, Any]
    try:
        kind = container.kind_of(batch).name
    except BatchKindError as exc:
        raise SparkError(f"cannot turn an output batch of type {type(batch).__name__} into rows of {names}") from exc
    if kind not in ("arrow", "numpy", "list"):  # a kind added by the user: its records as a list
        batch, kind = list(container.records(batch)), "list"
    if kind == "arrow":
        columns = {n: batch.column(n) for n in batch.schema.names}
    elif kind == "numpy":
        array = batch.reshape(-1, 1) if batch.ndim == 1 else batch
        positional = [n for n in names if n != fill or array.shape[1] == len(names)]
        if array.shape[1] != len(positional):
            raise SparkError(
                f"an output batch of {array.shape[1]} columns does not fit the schema {names} "
                f"({len(positional)} columns expected)"
            )
        columns = {n: array[:, i] for i, n in enumerate(positional)}
    else:
        if batch and isinstance(batch[0], dict):
            columns = {n: [row.get(n) for row in batch] for n in names if n != fill or fill in batch[0]}
        else:
            width = len(batch[0]) if batch else len(names)
            positional = [n for n in names if n != fill or width == len(names)]
            if any(len(row) != len(positional) for row in batch):
                raise SparkError(f"an output row does not have the {len(positional)} fields of the schema {names}")
            columns = {n: [row[i] for row in batch] for i, n in enumerate(positional)}
    length = len(next(iter(columns.values()))) if columns else 0
    arrays = []
    for field in schema:
        if field.name in columns:
            values = columns[field.name]
        elif field.name == fill:
            values = [time] * length
        else:
            raise SparkError(f"output column {field.name!r} is missing from a batch with columns {list(columns)}")
        try:
            if isinstance(values, pa.Array | pa.ChunkedArray):
                arrays.append(values.cast(field.type))
            else:
                arrays.append(pa.array(values, type=field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise SparkError(f"output column {field.name!r} cannot be {field.type}: {exc}") from exc
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
