"""How a persistent staging area encodes values: Parquet for Arrow and pandas, ``np.save`` for arrays, pickle
for the rest; a writer that checksums what passes through."""

from __future__ import annotations

import io
import pickle
from typing import IO, Any

import xxhash

__all__ = ["Buffer", "HashingWriter", "decode", "encode", "format_of", "payload_name", "prepare"]

def format_of(value: Any) -> str:
    """The format a persistent staging area stores ``value`` in (``parquet-*``, ``spark``, ``numpy`` or ``pickle``)."""
    cls = type(value)
    module = cls.__module__
    if module.startswith("pyarrow"):
        if cls.__name__ == "Table":
            return "parquet-arrow-table"
        if cls.__name__ == "RecordBatch":
            return "parquet-arrow-batch"
    elif module.startswith("pandas") and cls.__name__ == "DataFrame":
        return "parquet-pandas"
    elif module.startswith("pyspark.sql") and cls.__name__ == "DataFrame":
        return "spark"
    elif module == "numpy" and cls.__name__ == "ndarray" and not value.dtype.hasobject:
        return "numpy"
    return "pickle"


Buffer = bytes | bytearray | memoryview
_PICKLE_PROTOCOL = 5


class HashingWriter:
    """A write-only file that forwards to another and keeps the size and xxh3-128 checksum of what passed."""

    def __init__(self, target: IO[bytes]) -> None:
        self.target = target
        self.hash = xxhash.xxh3_128()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.hash.update(view)
        self.size += len(view)
        self.target.write(view)
        return len(view)

    def flush(self) -> None:
        self.target.flush()

    def tell(self) -> int:
        return self.size

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return False


def payload_name(fmt: str) -> str:
    if fmt == "numpy":
        return "value.npy"
    if fmt.startswith("parquet") or fmt == "spark-arrow":
        return "value.parquet"
    return "value.pickle"


def encode(value: Any, fmt: str, out: Any) -> None:
    """Write ``value`` to the file ``out`` in ``fmt`` (a single-file format)."""
    if fmt == "pickle":
        pickle.dump(value, out, protocol=_PICKLE_PROTOCOL)
    elif fmt == "numpy":
        import numpy as np

        np.save(out, value, allow_pickle=False)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if fmt == "parquet-arrow-batch":
            table = pa.Table.from_batches([value])
        elif fmt == "spark-arrow":
            table = value.toArrow()
        else:
            table = value
        pq.write_table(table, out)


def decode(data: Buffer, fmt: str) -> Any:
    """The value ``_encode`` wrote as ``data``."""
    if fmt == "pickle":
        return pickle.loads(data)
    if fmt == "numpy":
        return load_array(data)
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(pa.BufferReader(data))
    if fmt == "parquet-pandas":
        return table.to_pandas()
    if fmt == "parquet-arrow-batch":
        table = table.combine_chunks()
        batches = table.to_batches()
        if batches:
            return batches[0]
        return pa.record_batch([pa.array([], type=f.type) for f in table.schema], schema=table.schema)
    if fmt == "spark-arrow":
        return active_spark().createDataFrame(table)
    return table


def load_array(data: Buffer) -> Any:
    """The array in ``.npy`` bytes, as a view of them when they are writable (no copy), else a copy."""
    import numpy as np

    head = io.BytesIO(memoryview(data)[: 1 << 16])
    version = np.lib.format.read_magic(head)
    try:
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(head)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(head)
        else:
            raise ValueError(f"version {version}")  # 3.0: UTF-8 field names, left to np.load
    except ValueError:  # a header longer than we looked at, or a version we do not parse here
        return np.load(io.BytesIO(data), allow_pickle=False)
    count = 1
    for side in shape:
        count *= side
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=head.tell())
    if not flat.flags.writeable:
        flat = flat.copy()  # a staged array reads back writable, like np.load's
    return flat.reshape(shape[::-1]).transpose() if fortran else flat.reshape(shape)


def active_spark() -> Any:
    from pyspark.sql import SparkSession

    return SparkSession.active()


def prepare(value: Any) -> tuple[str, Any]:
    """The format for ``value`` and what to encode: pandas frames become Arrow tables, or are pickled if they cannot."""
    fmt = format_of(value)
    if fmt == "parquet-pandas":
        import pyarrow as pa

        try:
            return fmt, pa.Table.from_pandas(value, preserve_index=True)
        except (pa.ArrowException, TypeError, ValueError):
            return "pickle", value
    return fmt, value
