"""Keys of records as numbers every process computes alike: hashing a key, and routing a batch by a key column.

:func:`key_hash` is a 64-bit hash that does not depend on ``PYTHONHASHSEED``: workers in different processes
send a key's records to the same place. :func:`route_of` is what an exchange by key sends a record by (an int
key is its own route, so small int keys land on ``key % workers``), and :func:`per_key` maps a function over a
batch's key column with one call per distinct key on columnar batches, not one per row.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any
from zlib import crc32

from pytimely.container.kind import Field, kind_of

__all__ = ["key_hash", "per_key", "route_of", "routes"]

_MASK = (1 << 64) - 1
_TUPLE = 0x100000001B3
_NONE = 0x5A17
_DOUBLE = struct.Struct("<d")
_LOW, _HIGH = -(1 << 63), 1 << 63


def key_hash(key: Any) -> int:
    """A 64-bit hash of ``key`` that every process computes alike.

    Ints, ``str``, ``bytes``, floats, ``None``, tuples and frozensets of them hash alike everywhere; keys that
    compare equal hash alike (``1``, ``1.0`` and ``True``; equal tuples; a numpy scalar and the value it holds).
    Other types fall back to Python's ``hash``, the same across processes only when they share
    ``PYTHONHASHSEED``.
    """
    kind = type(key)
    if kind is int:
        return int(key) & _MASK
    if kind is str:
        return crc32(key.encode("utf-8", "surrogatepass")) | 1 << 32
    if kind is tuple:
        h = len(key)
        for item in key:
            h = ((h ^ key_hash(item)) * _TUPLE) & _MASK
        return h
    if kind is bytes:
        return crc32(key) | 2 << 32
    if kind is float:
        if key.is_integer():
            return int(key) & _MASK
        return crc32(_DOUBLE.pack(key)) | 3 << 32
    if key is None:
        return _NONE
    if isinstance(key, int):  # bool and int subclasses compare equal to their int value
        return int(key) & _MASK
    if isinstance(key, frozenset):
        return sum(map(key_hash, key)) & _MASK
    import numpy as np

    if isinstance(key, np.generic):  # numpy scalars hash as the Python value they hold
        return key_hash(key.item())
    return hash(key) & _MASK


def route_of(key: Any) -> int:
    """The int an exchange by key routes ``key`` by: an int key (or a float or bool equal to one) is itself."""
    kind = type(key)
    if kind is int:
        if _LOW <= key < _HIGH:
            return key  # type: ignore[no-any-return]
    elif (kind is float or kind is bool) and key == int(key) and _LOW <= key < _HIGH:
        return int(key)
    return key_hash(key) >> 1  # fits an int64


def per_key(batch: Any, field: Field, f: Callable[[Any], int], get: Callable[[Any], Any] | None = None) -> Any:
    """``f(key)`` for every record's key, as an int64 array, calling ``f`` once per distinct key when it can.

    The key is column ``field`` of the batch (``None``: the record itself), or ``get(record)`` when given.
    """
    import numpy as np

    kind = kind_of(batch)
    n = kind.length(batch)
    if get is None and kind.columnar:
        coded = kind.encoded(batch, field) if kind.numeric(batch, field) is None else _numbers(kind, batch, field)
        if coded is not None:
            codes, distinct = coded
            lookup = np.fromiter(map(f, distinct), dtype=np.int64, count=len(distinct))
            return lookup[codes]
    if get is not None:
        keys: Any = map(get, kind.records(batch))
    else:
        keys = kind.records(batch) if field is None else kind.values(batch, field)
    return np.fromiter(map(f, keys), dtype=np.int64, count=n)


def _numbers(kind: Any, batch: Any, field: Field) -> tuple[Any, list[Any]]:
    """A numeric column as codes into its distinct values (one sort)."""
    import numpy as np

    distinct, codes = np.unique(kind.numeric(batch, field), return_inverse=True)
    return codes.astype(np.int64, copy=False), distinct.tolist()


def _fits(column: Any) -> bool:
    """Whether an unsigned column's values all fit an int64."""
    return not len(column) or int(column.max()) < _HIGH


def routes(batch: Any, field: Field, get: Callable[[Any], Any] | None = None) -> Any:
    """:func:`route_of` of every record's key as an int64 array (an int64 key column is returned as it is)."""
    import numpy as np

    if get is None:
        kind = kind_of(batch)
        if kind.columnar:
            column = kind.numeric(batch, field)
            # uint64 keys past int64's range route by hash, as their Python values would.
            if column is not None and (column.dtype.kind == "i" or (column.dtype.kind == "u" and _fits(column))):
                return column.astype(np.int64, copy=False)
    return per_key(batch, field, route_of, get)
