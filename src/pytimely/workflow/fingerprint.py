"""Fingerprints: hex digests that say *what* a staged value was computed from, so stale values are never reused.

* :func:`code_fingerprint` — a module's code: the function's source text (dedented) with its module and
  qualified name when the source is available, else its bytecode, constants and names (stable across runs
  of the same Python version). It changes when the function's body changes, and not when other code in the
  same file does (a lambda's source is the whole lines it is written on). Values captured by a closure,
  defaults, ``functools.partial`` arguments and a callable object's attributes are included (a module by its
  name, a value that cannot be pickled — a lock, a session — by its type), and so are the user's own functions
  and classes it names and the immutable globals it reads; library code and mutable globals are not (give
  such values as parameters).
* :func:`value_fingerprint` — a value's content: Arrow tables and batches through their Arrow IPC stream
  (chunking does not matter), pandas frames through Arrow (index included), numpy arrays by dtype, shape and
  bytes, Spark DataFrames by an order-independent hash of their rows computed by Spark (a job over the data),
  ``None``/bool/int/float/str/bytes and lists, tuples, dicts, sets and frozensets of them canonically: lists,
  tuples and dicts in their order (a dict's insertion order is observable — iteration, ``next(iter(d))``, JSON —
  so ``{"a": 1, "b": 2}`` and ``{"b": 2, "a": 1}`` differ), sets and frozensets sorted (their iteration order
  follows hashing, not the program), anything else by its pickle. Limits: pickled values fingerprint by their
  pickle, which can differ for equal values (e.g. objects holding sets of strings between processes) — that
  only costs a recomputation; values that cannot be pickled raise
  :class:`~pytimely.errors.FingerprintError`.
* :func:`derive` — what a module's output is fingerprinted by: its code fingerprint, its parameters' value
  fingerprints and its named inputs' fingerprints (names in any order; every value matters).

All digests are SHA-256 (hashed by the CPU's SHA instructions where it has them), as 64 hex characters.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import inspect
import io
import math
import os
import pickle
import struct
import sys
import textwrap
import tokenize
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pytimely.errors import FingerprintError

__all__ = ["code_fingerprint", "derive", "is_user_file", "library_roots", "value_fingerprint"]

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
        version = getattr(fn, "__pytimely_version__", None)
        if version is not None:
            # An explicit version stands for the code and everything it uses: the user bumps it on purpose.
            return [b"version", _name(fn).encode(), str(version).encode()]
        return [b"function", _name(fn).encode(), _source_or_code(fn), *_captured(fn, seen), *_globals(fn, seen)]
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
        return _without_comments(textwrap.dedent(inspect.getsource(obj)))
    except (OSError, TypeError):
        return None


def _without_comments(source: str) -> str:
    """The source with comments and blank lines dropped: editing them changes nothing the code computes."""
    try:
        tokens = [
            tok
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type not in (tokenize.COMMENT, tokenize.NL)
        ]
        return tokenize.untokenize((tok.type, tok.string) for tok in tokens)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source  # a lambda's lines may not tokenize alone: keep them as they are


# -- what a function reads from its module: globals and the user's own functions --------------------------------

_LIBRARY_ROOTS: tuple[str, ...] | None = None


def library_roots() -> tuple[str, ...]:
    """Folders holding installed code (the standard library, site-packages, pytimely): not the user's own."""
    global _LIBRARY_ROOTS
    if _LIBRARY_ROOTS is None:
        import site
        import sysconfig

        roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.dirname(__file__))}
        roots.update(p for p in sysconfig.get_paths().values() if p)
        try:
            roots.update(site.getsitepackages())
            roots.add(site.getusersitepackages())
        except AttributeError:  # a virtualenv's old site module
            pass
        _LIBRARY_ROOTS = tuple(os.path.join(os.path.realpath(r), "") for r in roots if r)
    return _LIBRARY_ROOTS


_USER_FILES: dict[str, bool] = {}


def is_user_file(file: str) -> bool:
    """Whether the source file ``file`` is the user's own code (not the standard library, a package or pytimely)."""
    known = _USER_FILES.get(file)
    if known is None:
        known = _USER_FILES[file] = not os.path.realpath(file).startswith(library_roots())
    return known


def _is_user_module(module: types.ModuleType | None) -> bool:
    if module is None:
        return False
    if module.__name__ == "__main__":
        return True
    file = getattr(module, "__file__", None)
    if not file:
        return False  # built in, or a namespace package
    return is_user_file(file)


def _is_user_code(obj: Any) -> bool:
    return _is_user_module(sys.modules.get(getattr(obj, "__module__", None) or ""))


def _code_names(code: types.CodeType) -> set[str]:
    """The global and attribute names a code object (and the functions defined in it) use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


_CONSTANT_TYPES = (type(None), bool, int, float, complex, str, bytes)


def _is_constant(value: Any) -> bool:
    if isinstance(value, (*_CONSTANT_TYPES, enum.Enum)):
        return True
    if type(value) in (tuple, frozenset):
        return all(_is_constant(v) for v in value)
    return False


def _globals(fn: types.FunctionType, seen: set[int]) -> list[bytes]:
    """What ``fn`` reads from its module and would compute differently if edited: the user's own functions
    and classes it names (followed recursively) and immutable values (numbers, strings, bytes, enum members,
    tuples and frozensets of them). Library code does not count (its version is the environment's business),
    nor does mutable state (counters, caches, dicts): it changes as the program runs, not when it is edited."""
    names = _code_names(fn.__code__)
    namespace = fn.__globals__
    parts: list[bytes] = []
    for name in sorted(names):
        if name not in namespace:
            continue  # a builtin, an attribute name, or a global not yet assigned
        part = _global_part(namespace[name], names, seen)
        if part is not None:
            parts.append(f"global {name}:".encode() + part)
    return parts


def _global_part(value: Any, names: set[str], seen: set[int]) -> bytes | None:
    if isinstance(value, types.ModuleType):
        if not _is_user_module(value):
            return None
        # helpers.normalize: the attributes the code names that the user's module holds.
        found = [
            f"{attr}=".encode() + part
            for attr in sorted(names)
            if attr in vars(value) and (part := _global_part(vars(value)[attr], set(), seen)) is not None
        ]
        return b"module " + value.__name__.encode() + b"{" + b";".join(found) + b"}"
    inner = getattr(value, "function", None)
    if type(value).__module__ == "pytimely.workflow.model" and isinstance(inner, types.FunctionType):
        value = inner  # a @simple module called as a plain function
    if isinstance(value, types.FunctionType | functools.partial):
        target = value.func if isinstance(value, functools.partial) else value
        if not _is_user_code(target):
            return None
        return b"".join(_code_parts(value, seen))
    if isinstance(value, type):
        return _source_or_name(value) if _is_user_code(value) else None
    if _is_constant(value):
        return _captured_bytes(value)
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
        # In insertion order: iteration, ``next(iter(d))`` and ``json.dumps`` see it, so it is part of the value.
        return b"D" + _sequence_of_bytes([_pair(_value_bytes(k), _value_bytes(v)) for k, v in value.items()])
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
        raise FingerprintError(f"derive() takes the code fingerprint as a str, got {type(code).__name__}")
    for name, fp in inputs.items():
        if not isinstance(fp, str):
            raise FingerprintError(f"input {name!r}: an input's fingerprint is a str, got {type(fp).__name__}")
    param_parts = sorted(_pair(_value_bytes(str(k)), _value_bytes(v)) for k, v in params.items())
    input_parts = sorted(_pair(_value_bytes(str(k)), v.encode()) for k, v in inputs.items())
    return _digest(b"derive", code.encode(), _sequence_of_bytes(param_parts), _sequence_of_bytes(input_parts))
