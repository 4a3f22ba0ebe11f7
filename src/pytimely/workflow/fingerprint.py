"""Fingerprints: hex digests that say *what* a staged value was computed from, so stale values are never reused.

* :func:`code_fingerprint` — a module's code: the function's source text (dedented) with its module and
  qualified name when the source is available, else its bytecode, constants and names (stable across runs
  of the same Python version). It changes when the function's body changes, and not when other code in the
  same file does (a lambda's source is the whole lines it is written on). Values captured by a closure,
  defaults, ``functools.partial`` arguments and a callable object's attributes are included (a module by its
  name, a value that cannot be pickled — a lock, a session — by its type); globals it reads, and functions it
  calls, are **not** (give them as parameters, or change the function, to force recomputation).
* :func:`value_fingerprint` — a value's content: Arrow tables and batches through their Arrow IPC stream
  (chunking does not matter), pandas frames through Arrow (index included), numpy arrays by dtype, shape and
  bytes, Spark DataFrames by an order-independent hash of their rows computed by Spark (a job over the data),
  ``None``/bool/int/float/str/bytes and lists, tuples, dicts, sets and frozensets of them canonically (a dict's
  or set's order does not matter), anything else by its pickle. Limits: pickled values fingerprint by their
  pickle, which can differ for equal values (e.g. objects holding sets of strings between processes) — that
  only costs a recomputation; values that cannot be pickled raise
  :class:`~pytimely.errors.FingerprintError`.
* :func:`derive` — what a module's output is fingerprinted by: its code fingerprint, its parameters' value
  fingerprints and its named inputs' fingerprints (names in any order; every value matters).

All digests are SHA-256 (hashed by the CPU's SHA instructions where it has them), as 64 hex characters.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import pickle
import struct
import textwrap
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pytimely.errors import FingerprintError

__all__ = ["code_fingerprint", "derive", "value_fingerprint"]

def _digest(*parts: bytes | memoryview) -> str:
    h = hashlib.sha256()
    for part in parts:
        # Length-prefixed so that no two different part lists hash the same bytes.
        h.update(struct.pack("<Q", part.nbytes if isinstance(part, memoryview) else len(part)))
        h.update(part)
    return h.hexdigest()


# -- code ----------------------------------------------------------------------------------------------------------


def code_fingerprint(fn: Callable[..., Any]) -> str:
    """A fingerprint of ``fn``'s code: source text and qualified name, else bytecode and constants.

    An object with a ``__code_fingerprint__()`` method (such as a dataflow step) gives its own.
    """
    own = getattr(fn, "__code_fingerprint__", None)
    if own is not None and not isinstance(fn, type):
        return str(own())
    return _digest(b"code", *_code_parts(fn, set()))


def _code_parts(fn: Any, seen: set[int]) -> list[bytes]:
    if id(fn) in seen:  # a recursive closure
        return [b"recursive", _name(fn).encode()]
    seen = seen | {id(fn)}
    own = getattr(fn, "__code_fingerprint__", None)
    if own is not None and not isinstance(fn, type):
        return [b"own", str(own()).encode()]
    if isinstance(fn, functools.partial):
        return [
            b"partial",
            *_code_parts(fn.func, seen),
            _value_bytes(tuple(fn.args)),
            _value_bytes(dict(fn.keywords)),
        ]
    if isinstance(fn, types.MethodType):
        return [b"method", *_code_parts(fn.__func__, seen)]
    if isinstance(fn, types.FunctionType):
        return [b"function", _name(fn).encode(), _source_or_code(fn), *_captured(fn, seen)]
    if isinstance(fn, type):
        return [b"class", _name(fn).encode(), _source_or_name(fn)]
    if callable(fn) and not isinstance(fn, types.BuiltinFunctionType | types.BuiltinMethodType):
        cls = type(fn)
        return [b"instance", _name(cls).encode(), _source_or_name(cls), _captured_bytes(_state(fn))]
    return [b"builtin", _name(fn).encode()]


def _name(fn: Any) -> str:
    return f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', getattr(fn, '__name__', repr(fn)))}"


def _source(obj: Any) -> str | None:
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return None


def _source_or_code(fn: types.FunctionType) -> bytes:
    source = _source(fn)
    if source is not None:
        return b"source:" + source.encode()
    return b"bytecode:" + _code_bytes(fn.__code__)


def _source_or_name(cls: type) -> bytes:
    source = _source(cls)
    return b"source:" + source.encode() if source is not None else b"name"


def _code_bytes(code: types.CodeType) -> bytes:
    """Bytecode, constants (nested code objects recursively) and names: what the function does, not where."""
    consts = []
    for const in code.co_consts:
        consts.append(_code_bytes(const) if isinstance(const, types.CodeType) else repr(const).encode())
    return b"\0".join([code.co_code, *consts, " ".join(code.co_names).encode(), " ".join(code.co_varnames).encode()])


def _captured(fn: types.FunctionType, seen: set[int]) -> list[bytes]:
    """Defaults and closure cells: they change what the function computes as much as its body does."""
    parts = [_captured_bytes(fn.__defaults__), _captured_bytes(fn.__kwdefaults__)]
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        try:
            content = cell.cell_contents
        except ValueError:  # not yet assigned
            parts.append(f"cell {name}: empty".encode())
            continue
        if callable(content) and not isinstance(content, type):
            parts.append(f"cell {name}:".encode() + b"".join(_code_parts(content, seen)))
        else:
            parts.append(f"cell {name}:".encode() + _captured_bytes(content))
    return parts


def _captured_bytes(value: Any) -> bytes:
    """Like ``_value_bytes``, but a module counts by its name and an unpicklable value by its type only."""
    if isinstance(value, types.ModuleType):
        return b"module:" + value.__name__.encode()
    try:
        return _value_bytes(value)
    except FingerprintError:
        # Locks, sessions, connections: what they are matters, not their momentary state.
        return b"unpicklable:" + _name(type(value)).encode()


def _state(obj: Any) -> Any:
    state = getattr(obj, "__dict__", None)
    if state is None:
        slots = [s for cls in type(obj).__mro__ for s in getattr(cls, "__slots__", ())]
        state = {s: getattr(obj, s) for s in slots if hasattr(obj, s)}
    return {k: _state_value(v) for k, v in state.items()}


def _state_value(value: Any) -> Any:
    if callable(value) and not isinstance(value, type):
        return code_fingerprint(value)
    return _captured_bytes(value)


# -- values --------------------------------------------------------------------------------------------------------


def value_fingerprint(value: Any) -> str:
    """A fingerprint of ``value``'s content (see the module docstring for how each kind is hashed)."""
    cls = type(value)
    # Large arrays and tables are hashed where they lie, without building one more copy of their bytes.
    if cls.__module__ == "numpy" and cls.__name__ == "ndarray" and not value.dtype.hasobject:
        header, data = _numpy_parts(value)
        return _digest(b"value-numpy", header, data)
    if cls.__module__.startswith("pyarrow") and cls.__name__ in ("Table", "RecordBatch"):
        return _digest(b"value-arrow", _arrow_buffer(value))
    return _digest(b"value", _value_bytes(value))


def _value_bytes(value: Any) -> bytes:
    """A canonical byte string for ``value``: equal for equal content (within the documented limits)."""
    if value is None:
        return b"N"
    if value is True or value is False:
        return b"T" if value else b"F"
    cls = type(value)
    if cls is int:
        return b"i" + str(value).encode()
    if cls is float:
        return b"f" + (b"nan" if math.isnan(value) else struct.pack("<d", value))
    if cls is str:
        text: str = value
        return b"s" + text.encode("utf-8", "surrogatepass")
    if cls is bytes or cls is bytearray:
        return b"b" + bytes(value)
    if cls is list or cls is tuple:
        return (b"l" if cls is list else b"t") + _sequence(value)
    if cls is dict:
        items = sorted(_pair(_value_bytes(k), _value_bytes(v)) for k, v in value.items())
        return b"d" + _sequence_of_bytes(items)
    if cls is set or cls is frozenset:
        return (b"S" if cls is set else b"Z") + _sequence_of_bytes(sorted(_value_bytes(v) for v in value))
    module = cls.__module__
    if module == "numpy" and cls.__name__ == "ndarray" and not value.dtype.hasobject:
        header, data = _numpy_parts(value)
        return b"np" + struct.pack("<Q", len(header)) + header + data.tobytes()
    if module.startswith("pyarrow") and cls.__name__ in ("Table", "RecordBatch"):
        return b"arrow" + _arrow_buffer(value).tobytes()
    if module.startswith("pandas") and cls.__name__ == "DataFrame":
        try:
            return b"pandas" + _pandas_bytes(value)
        except (TypeError, ValueError, ImportError):
            pass  # columns Arrow cannot type: fall back to the pickle
    if module.startswith("pyspark.sql") and cls.__name__ == "DataFrame":
        return b"spark" + _spark_bytes(value)
    try:
        return b"p" + pickle.dumps(value, protocol=5)
    except Exception as exc:
        raise FingerprintError(
            f"cannot fingerprint a {module}.{cls.__qualname__}: it cannot be pickled ({exc})"
        ) from exc


def _sequence(values: Iterable[Any]) -> bytes:
    return _sequence_of_bytes([_value_bytes(v) for v in values])


def _sequence_of_bytes(parts: list[bytes]) -> bytes:
    return b"".join(struct.pack("<Q", len(p)) + p for p in parts) + struct.pack("<Q", len(parts))


def _pair(key: bytes, value: bytes) -> bytes:
    return struct.pack("<Q", len(key)) + key + value


def _numpy_parts(array: Any) -> tuple[bytes, memoryview]:
    """The dtype and shape, and the bytes in C order (a view when the array already is C-contiguous)."""
    import numpy as np

    contiguous = np.ascontiguousarray(array)
    header = f"{contiguous.dtype.str}{contiguous.dtype.descr}{contiguous.shape}".encode()
    return header, contiguous.reshape(-1).view(np.uint8).data


def _arrow_buffer(value: Any) -> memoryview:
    """The Arrow IPC stream of ``value`` with its chunks combined (so chunking does not change it)."""
    import pyarrow as pa

    table = value if isinstance(value, pa.Table) else pa.Table.from_batches([value])
    table = table.combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return memoryview(sink.getvalue())


def _pandas_bytes(frame: Any) -> bytes:
    import pyarrow as pa

    try:
        table = pa.Table.from_pandas(frame, preserve_index=True)
    except pa.ArrowException as exc:
        raise ValueError(str(exc)) from exc
    return _arrow_buffer(table).tobytes()


def _spark_bytes(frame: Any) -> bytes:
    from pyspark.sql import functions as F

    columns = [F.col(f"`{name}`") for name in frame.columns]
    row_hash = F.xxhash64(*columns) if columns else F.lit(0)
    # A sum of row hashes is the same in any order and any partitioning; decimals cannot overflow.
    row = frame.agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(row_hash.cast("decimal(38,0)")).alias("h"),
        F.sum(F.hash(*columns).cast("decimal(38,0)") if columns else F.lit(0)).alias("g"),
    ).collect()[0]
    return f"{frame.schema.json()}|{row['n']}|{row['h']}|{row['g']}".encode()


# -- derived -------------------------------------------------------------------------------------------------------


def derive(code: str, params: Mapping[str, Any], inputs: Mapping[str, str]) -> str:
    """The fingerprint of a module's outputs: its code fingerprint, parameters and named inputs' fingerprints."""
    if not isinstance(code, str):
        raise TypeError(f"derive() takes the code fingerprint as a str, got {type(code).__name__}")
    for name, fp in inputs.items():
        if not isinstance(fp, str):
            raise TypeError(f"input {name!r}: an input's fingerprint is a str, got {type(fp).__name__}")
    param_parts = sorted(_pair(_value_bytes(str(k)), _value_bytes(v)) for k, v in params.items())
    input_parts = sorted(_pair(_value_bytes(str(k)), v.encode()) for k, v in inputs.items())
    return _digest(b"derive", code.encode(), _sequence_of_bytes(param_parts), _sequence_of_bytes(input_parts))
