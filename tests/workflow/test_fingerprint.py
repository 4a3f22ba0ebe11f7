"""Fingerprints: stable across processes, changed by what matters and only by that."""

from __future__ import annotations

import functools
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely.errors import FingerprintError
from pytimely.workflow.fingerprint import code_fingerprint, derive, value_fingerprint
from tests.profiles import examples


def clean(rows: list[int], limit: int) -> list[int]:
    return [r for r in rows if r < limit]


class Scaler:
    def __init__(self, factor: int) -> None:
        self.factor = factor

    def __call__(self, x: int) -> int:
        return x * self.factor

    def method(self, x: int) -> int:
        return x + self.factor


# -- code ----------------------------------------------------------------------------------------------------------


FINGERPRINT_OF = """
import importlib, sys
sys.path.insert(0, sys.argv[1])
from pytimely.workflow.fingerprint import code_fingerprint
module = importlib.import_module(sys.argv[2])
print(code_fingerprint(getattr(module, sys.argv[3])))
"""


def fingerprint_in_process(directory: Path, module: str, name: str, hash_seed: str = "1") -> str:
    """The code fingerprint of ``module.name`` computed by a fresh Python process."""
    out = subprocess.run(
        [sys.executable, "-c", FINGERPRINT_OF, str(directory), module, name],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
    )
    return out.stdout.strip()


def test_code_fingerprint_stable_across_processes(tmp_path: Path) -> None:
    (tmp_path / "steps.py").write_text(ORIGINAL)
    first = fingerprint_in_process(tmp_path, "steps", "clean", "1")
    assert first == fingerprint_in_process(tmp_path, "steps", "clean", "2")
    assert len(first) == 64 and int(first, 16) >= 0


ORIGINAL = """HELPER = 1


def clean(rows):
    return [r for r in rows if r]


def other():
    return 1
"""


def test_code_fingerprint_follows_the_body_not_its_neighbours(tmp_path: Path) -> None:
    def fingerprint_of(text: str) -> str:
        (tmp_path / "steps.py").write_text(text)
        return fingerprint_in_process(tmp_path, "steps", "clean")

    original = fingerprint_of(ORIGINAL)
    assert fingerprint_of(ORIGINAL.replace("return 1", "return 2")) == original
    assert fingerprint_of(ORIGINAL.replace("HELPER = 1", "HELPER = 2\n\n# a note")) == original
    assert fingerprint_of("\n\n\n" + ORIGINAL) == original  # moved down the file
    assert fingerprint_of(ORIGINAL.replace("if r]", "if r > 0]")) != original
    assert fingerprint_of(ORIGINAL.replace("def clean(rows)", "def clean(rows, extra=None)")) != original


def test_code_fingerprint_without_source_uses_bytecode() -> None:
    namespace: dict[str, Any] = {}
    exec("def f(x):\n    return x + 1\n", namespace)
    exec("def g(x):\n    return x + 2\n", namespace)
    exec("def f2(x):\n    return x + 1\n", namespace)
    f, g, f2 = namespace["f"], namespace["g"], namespace["f2"]
    assert code_fingerprint(f) != code_fingerprint(g)  # a constant differs
    f2.__qualname__ = f2.__name__ = "f"
    assert code_fingerprint(f) == code_fingerprint(f2)


def test_code_fingerprint_of_callables() -> None:
    assert code_fingerprint(clean) == code_fingerprint(clean)
    assert code_fingerprint(functools.partial(clean, limit=3)) != code_fingerprint(functools.partial(clean, limit=4))
    assert code_fingerprint(functools.partial(clean, limit=3)) != code_fingerprint(clean)
    assert code_fingerprint(Scaler(2)) != code_fingerprint(Scaler(3))  # the instance's state counts
    assert code_fingerprint(Scaler(2)) == code_fingerprint(Scaler(2))
    assert code_fingerprint(Scaler(2).method) == code_fingerprint(Scaler(5).method)  # the code, not the instance
    assert code_fingerprint(len) != code_fingerprint(sorted)


def test_code_fingerprint_sees_closures_and_defaults() -> None:
    def make(limit: int) -> Any:
        def keep(x: int) -> bool:
            return x < limit

        return keep

    def with_default(x: int, limit: int = 3) -> bool:
        return x < limit

    assert code_fingerprint(make(3)) == code_fingerprint(make(3))
    assert code_fingerprint(make(3)) != code_fingerprint(make(4))
    before = code_fingerprint(with_default)
    with_default.__defaults__ = (4,)
    assert code_fingerprint(with_default) != before


# -- values --------------------------------------------------------------------------------------------------------

json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | st.binary(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=examples(60), deadline=None)
@given(value=json_like)
def test_equal_values_equal_fingerprints(value: Any) -> None:
    import copy

    assert value_fingerprint(value) == value_fingerprint(copy.deepcopy(value))


def same(a: Any, b: Any) -> bool:
    """Equal with types told apart (``1`` is not ``1.0`` or ``True``; ``0.0`` is not ``-0.0``), dicts in order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


@settings(max_examples=examples(100), deadline=None)
@given(a=json_like, b=json_like)
def test_fingerprints_equal_exactly_when_values_are(a: Any, b: Any) -> None:
    assert (value_fingerprint(a) == value_fingerprint(b)) == same(a, b)


@settings(max_examples=examples(100), deadline=None)
@given(a=json_like)
def test_one_change_changes_the_fingerprint(a: Any) -> None:
    assert value_fingerprint([a]) != value_fingerprint([a, None])
    assert value_fingerprint({"k": a}) != value_fingerprint({"k": [a]})


def test_value_kinds_are_told_apart() -> None:
    values = [None, True, 1, 1.0, "1", b"1", [1], (1,), {1}, frozenset([1]), {1: 1}, np.array([1])]
    assert len({value_fingerprint(v) for v in values}) == len(values)


@settings(max_examples=examples(30), deadline=None)
@given(st.dictionaries(st.text(max_size=4), st.integers(), max_size=6), st.randoms())
def test_dict_order_matters_and_set_order_does_not(mapping: dict[str, int], rnd: Any) -> None:
    items = list(mapping.items())
    rnd.shuffle(items)
    # A dict's order is observable (next(iter(d)), JSON), a set's follows hashing: only the dict's counts.
    assert (value_fingerprint(mapping) == value_fingerprint(dict(items))) == (list(mapping) == [k for k, _ in items])
    assert value_fingerprint(set(mapping)) == value_fingerprint({k for k, _ in items})


def test_sets_of_strings_stable_across_hash_seeds(tmp_path: Path) -> None:
    code = "from pytimely.workflow.fingerprint import value_fingerprint as v; print(v({'a', 'b', 'c', 'd', 'e'}))"
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ["1", "2", "3"]
    }
    assert len(outs) == 1


arrays = st.sampled_from([np.int64, np.float32, np.uint8, np.bool_]).flatmap(
    lambda dtype: st.lists(st.integers(0, 100), max_size=20).map(lambda xs: np.array(xs, dtype=dtype))
)


@settings(max_examples=examples(40), deadline=None)
@given(arrays)
def test_numpy_by_dtype_shape_and_bytes(array: np.ndarray) -> None:
    assert value_fingerprint(array) == value_fingerprint(array.copy())
    assert value_fingerprint(array) == value_fingerprint(np.asfortranarray(array))
    if array.size:
        changed = array.copy()
        changed[0] = not changed[0] if array.dtype == np.bool_ else changed[0] + 1
        assert value_fingerprint(changed) != value_fingerprint(array)
    if array.size % 2 == 0 and array.size:
        assert value_fingerprint(array.reshape(2, -1)) != value_fingerprint(array)  # shape matters
    if array.dtype != np.bool_:
        assert value_fingerprint(array.astype(np.int16)) != value_fingerprint(array)  # dtype matters


tables = st.lists(st.tuples(st.integers(-5, 5), st.text(max_size=3) | st.none()), max_size=12).map(
    lambda rows: pa.table(
        {"k": [r[0] for r in rows], "v": [r[1] for r in rows]},
        schema=pa.schema([("k", pa.int64()), ("v", pa.string())]),
    )
)


@settings(max_examples=examples(40), deadline=None)
@given(tables, st.integers(1, 5))
def test_arrow_tables_by_content_not_chunking(table: pa.Table, chunk: int) -> None:
    rechunked = pa.Table.from_batches(table.to_batches(max_chunksize=chunk), schema=table.schema)
    assert value_fingerprint(rechunked) == value_fingerprint(table)
    assert (
        value_fingerprint(table.combine_chunks().to_batches()[0] if table.num_rows else table)
        == value_fingerprint(table)
        or not table.num_rows
    )
    if table.num_rows:
        changed = table.set_column(0, "k", pa.array([k + 1 for k in table.column("k").to_pylist()], pa.int64()))
        assert value_fingerprint(changed) != value_fingerprint(table)


def test_pandas_by_content_and_index() -> None:
    frame = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    assert value_fingerprint(frame) == value_fingerprint(frame.copy())
    assert value_fingerprint(frame) != value_fingerprint(frame.set_axis([5, 6, 7]))
    assert value_fingerprint(frame) != value_fingerprint(frame.assign(a=[1, 2, 4]))
    mixed = pd.DataFrame({"a": [1, "x", [2]]})  # Arrow cannot type it: pickled instead
    assert value_fingerprint(mixed) == value_fingerprint(mixed.copy())


def test_unpicklable_value_is_a_typed_error() -> None:
    import threading

    with pytest.raises(FingerprintError, match=r"cannot fingerprint a _thread\.lock"):
        value_fingerprint(threading.Lock())


# -- derived -------------------------------------------------------------------------------------------------------


@settings(max_examples=examples(40), deadline=None)
@given(
    params=st.dictionaries(st.text(max_size=4), json_like, max_size=4),
    inputs=st.dictionaries(st.text(max_size=4), st.text("0123456789abcdef", min_size=1, max_size=8), max_size=4),
    rnd=st.randoms(),
)
def test_derive_ignores_name_order(params: dict[str, Any], inputs: dict[str, str], rnd: Any) -> None:
    p, i = list(params.items()), list(inputs.items())
    rnd.shuffle(p)
    rnd.shuffle(i)
    assert derive("c", params, inputs) == derive("c", dict(p), dict(i))


def test_derive_depends_on_every_part() -> None:
    base = derive("code", {"limit": 3}, {"rows": "f1", "other": "f2"})
    assert base != derive("code2", {"limit": 3}, {"rows": "f1", "other": "f2"})
    assert base != derive("code", {"limit": 4}, {"rows": "f1", "other": "f2"})
    assert base != derive("code", {"limit": 3}, {"rows": "f9", "other": "f2"})
    assert base != derive("code", {"limit": 3}, {"rows": "f2", "other": "f1"})  # values swapped between names
    assert base != derive("code", {"limit": 3, "x": None}, {"rows": "f1", "other": "f2"})
    assert base != derive("code", {"limit": 3}, {"rows": "f1"})
    assert base != derive("code", {}, {"limit": value_fingerprint(3), "rows": "f1", "other": "f2"})
    assert base == derive("code", {"limit": 3}, {"other": "f2", "rows": "f1"})


def test_derive_refuses_non_string_fingerprints() -> None:
    with pytest.raises(TypeError, match="'rows'"):
        derive("c", {}, {"rows": 1})  # type: ignore[dict-item]


def test_code_fingerprint_with_unpicklable_captures() -> None:
    import threading

    lock = threading.Lock()

    def uses_module_and_lock(x: int) -> int:
        with lock:
            return int(np.sum([x]))

    def make(module: Any) -> Any:
        def inner() -> Any:
            return module

        return inner

    assert code_fingerprint(uses_module_and_lock) == code_fingerprint(uses_module_and_lock)
    assert code_fingerprint(make(np)) == code_fingerprint(make(np))
    assert code_fingerprint(make(np)) != code_fingerprint(make(pd))
    holder = Scaler(2)
    holder.lock = threading.Lock()  # type: ignore[attr-defined]
    assert code_fingerprint(holder) == code_fingerprint(holder)


def test_arrays_nested_or_not() -> None:
    """An array alone and inside a list are both fingerprinted by content (through different encodings)."""
    a, b = np.arange(10), np.arange(10)
    b[3] = 0
    assert value_fingerprint(a) != value_fingerprint(b)
    assert value_fingerprint([a]) != value_fingerprint([b])
    assert value_fingerprint([a]) == value_fingerprint([a.copy()])
    assert value_fingerprint(a[::2]) == value_fingerprint(np.ascontiguousarray(a[::2]))
    structured = np.zeros(3, dtype=[("x", "<i4"), ("y", "<i4")])
    assert value_fingerprint(structured) != value_fingerprint(np.zeros(3, dtype=[("x", "<i4"), ("z", "<i4")]))
