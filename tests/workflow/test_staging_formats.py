"""Round trips of every format through every staging area, what is stored on disk, and damaged payloads."""

from __future__ import annotations

import json
import pickle
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pytimely.errors import CorruptValueError, UnpicklableValueError
from pytimely.workflow.staging import (
    FsspecStaging,
    LocalStaging,
    MemoryStaging,
    StagingArea,
    format_of,
    open_staging,
)
from tests.profiles import examples

AREA_SETTINGS = settings(
    max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

picklable = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8)
    | st.complex_numbers(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3), inner, max_size=4)
        | st.frozensets(st.integers(), max_size=4)
    ),
    max_leaves=15,
)

tables = (
    st.integers(0, 30)
    .flatmap(
        lambda n: st.fixed_dictionaries(
            {
                "id": st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n),
                "name": st.lists(st.text(max_size=5) | st.none(), min_size=n, max_size=n),
                "score": st.lists(st.floats(allow_nan=False, width=64), min_size=n, max_size=n),
            }
        )
    )
    .map(
        lambda cols: pa.table(
            cols, schema=pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
        )
    )
)


def roundtrip(area: StagingArea, value: Any, key: str) -> Any:
    area.put(key, value, "fp")
    assert area.has(key, "fp")
    return area.get(key, "fp")


@AREA_SETTINGS
@given(value=picklable, n=st.integers(0, 10**6))
def test_pickled_values(staging: StagingArea, value: Any, n: int) -> None:
    assert roundtrip(staging, value, f"p/v{n}") == value


@AREA_SETTINGS
@given(
    array=hnp.arrays(
        st.sampled_from(["int64", "float32", "uint8", "bool", "complex128", "<U3"]),
        hnp.array_shapes(min_dims=0, max_dims=3, max_side=5),
    )
)
def test_numpy_arrays(staging: StagingArea, array: np.ndarray) -> None:
    back = roundtrip(staging, array, "np/out")
    assert isinstance(back, np.ndarray)
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)


@AREA_SETTINGS
@given(table=tables, chunk=st.integers(1, 7))
def test_arrow_tables_and_batches(staging: StagingArea, table: pa.Table, chunk: int) -> None:
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=chunk), schema=table.schema)
    back = roundtrip(staging, chunked, "arrow/table")
    assert isinstance(back, pa.Table) and back.equals(table)
    batch = table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], table.schema)
    back_batch = roundtrip(staging, batch, "arrow/batch")
    assert isinstance(back_batch, pa.RecordBatch) and back_batch.equals(batch)


@AREA_SETTINGS
@given(table=tables, offset=st.integers(-5, 5))
def test_pandas_frames(staging: StagingArea, table: pa.Table, offset: int) -> None:
    frame = table.to_pandas()
    frame.index = pd.RangeIndex(offset, offset + len(frame)) if offset >= 0 else [f"r{i}" for i in range(len(frame))]
    back = roundtrip(staging, frame, "pd/out")
    assert isinstance(back, pd.DataFrame)
    pd.testing.assert_frame_equal(back, frame)


def test_pandas_frame_arrow_cannot_type_is_pickled(staging: StagingArea) -> None:
    frame = pd.DataFrame({"mixed": [1, "x", [2, 3]]})
    assert format_of(frame) == "parquet-pandas"
    pd.testing.assert_frame_equal(roundtrip(staging, frame, "pd/mixed"), frame)


# -- what is on disk -----------------------------------------------------------------------------------------------


def stored(root: Path, key: str) -> tuple[dict[str, Any], Path]:
    """The commit marker of ``key`` in a local area, and its payload file."""
    marker = json.loads((root / key / ".commit").read_text())
    [(name, _)] = marker["files"].items()
    return marker, root / key / marker["data"] / name


@pytest.mark.parametrize(
    ("value", "fmt"),
    [
        (np.arange(6).reshape(2, 3), "numpy"),
        (pa.table({"a": [1, 2]}), "parquet-arrow-table"),
        (pa.record_batch({"a": [1, 2]}), "parquet-arrow-batch"),
        (pd.DataFrame({"a": [1, 2]}), "parquet-pandas"),
        ({"a": 1}, "pickle"),
        (np.array([{"a": 1}], dtype=object), "pickle"),
    ],
    ids=["numpy", "arrow-table", "arrow-batch", "pandas", "dict", "object-array"],
)
def test_marker_records_format_and_payload_is_that_format(tmp_path: Path, value: Any, fmt: str) -> None:
    area = LocalStaging(tmp_path)
    area.put("m/out", value, "fp-1")
    marker, payload = stored(tmp_path, "m/out")
    assert marker["fingerprint"] == "fp-1" and marker["format"] == fmt and marker["key"] == "m/out"
    assert marker["files"][payload.name]["size"] == payload.stat().st_size
    if fmt == "numpy":
        np.testing.assert_array_equal(np.load(payload, allow_pickle=False), value)
    elif fmt.startswith("parquet"):
        assert pq.read_table(payload).num_rows == 2
    else:
        assert pickle.loads(payload.read_bytes()).__repr__() == value.__repr__()


def test_damaged_payload(tmp_path: Path) -> None:
    area = LocalStaging(tmp_path)
    area.put("m/out", list(range(1000)), "fp")
    _, payload = stored(tmp_path, "m/out")
    data = bytearray(payload.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    payload.write_bytes(bytes(data))
    assert area.has("m/out", "fp")  # has() checks sizes only; get() checks the checksum
    with pytest.raises(CorruptValueError, match="'m/out'"):
        area.get("m/out")
    payload.write_bytes(bytes(data[:-1]))  # truncated: no longer counts at all
    assert not area.has("m/out", "fp")
    assert area.fingerprint("m/out") is None
    payload.unlink()
    with pytest.raises(CorruptValueError, match=r"'m/out'.*missing"):
        area.get("m/out")


def test_foreign_marker_does_not_count(tmp_path: Path) -> None:
    area = LocalStaging(tmp_path)
    area.put("a/out", 1, "fp")
    (tmp_path / "b" / "out").mkdir(parents=True)
    (tmp_path / "b" / "out" / ".commit").write_bytes((tmp_path / "a" / "out" / ".commit").read_bytes())
    assert not area.has("b/out", "fp")  # a marker copied from another key names that key
    (tmp_path / "a" / "out" / ".commit").write_text('{"pytimely-staging": 1, "key": "a/out"')  # cut short
    assert not area.has("a/out", "fp")


# -- unpicklable values --------------------------------------------------------------------------------------------


def test_unpicklable_value_names_key_and_type_and_leaves_nothing(persistent: StagingArea, tmp_path: Path) -> None:
    persistent.put("m/out", "previous", "f1")
    with pytest.raises(UnpicklableValueError, match=r"'m/out'.*_thread\.lock") as info:
        persistent.put("m/out", {"big": b"x" * 200_000, "lock": threading.Lock()}, "f2")
    assert info.value.key == "m/out"
    assert persistent.get("m/out", "f1") == "previous"
    assert persistent.keys("") == ["m/out"]
    with pytest.raises(UnpicklableValueError, match=r"'n/out'.*Lock|lock"):
        persistent.put("n/out", threading.Lock(), "f")
    assert persistent.keys("") == ["m/out"]
    for directory in (tmp_path / "area").rglob(".data-*") if (tmp_path / "area").exists() else []:
        assert directory.parent.name == "out" and directory.parent.parent.name == "m"
    if isinstance(persistent, LocalStaging | FsspecStaging) and (tmp_path / "area").exists():
        assert len(list((tmp_path / "area").rglob(".data-*"))) == 1  # only the previous value's payload


def test_memory_keeps_objects_as_they_are() -> None:
    area = MemoryStaging()
    lock = threading.Lock()
    area.put("m/out", lock, "f")
    assert area.get("m/out") is lock


# -- choosing an area by URL ---------------------------------------------------------------------------------------


def test_open_staging(tmp_path: Path) -> None:
    assert isinstance(open_staging("memory://"), MemoryStaging)
    local = open_staging(tmp_path / "a")
    assert isinstance(local, LocalStaging) and local.root == str(tmp_path / "a")
    file_url = open_staging(f"file://{tmp_path}/b")
    assert isinstance(file_url, LocalStaging) and file_url.root == str(tmp_path / "b")
    other = open_staging("memory-fs-unused://x") if False else open_staging("memory://")
    assert isinstance(other, MemoryStaging)
    generic = FsspecStaging("memory://staging-test/area")
    generic.put("k", [1], "f")
    assert generic.get("k") == [1] and generic.keys("") == ["k"]
    with pytest.raises(ValueError, match="memory://"):
        open_staging("memory://", key="x")


@pytest.mark.parametrize(
    "array",
    [
        np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
        np.arange(24, dtype=np.float64).reshape(2, 3, 4)[:, ::2, 1:],  # a strided view
        np.array(3.5),
        np.zeros((0, 4), dtype=np.int16),
        np.array([(1, 2.0), (3, 4.0)], dtype=[("a", "<i4"), ("b", "<f8")]),
        np.array([(1, {"x": 1})], dtype=[("a", "<i4"), ("b", object)]),  # holds objects: pickled
        np.arange(5, dtype=">u4"),  # big-endian
        np.zeros(2, dtype=[("größe", "<i4")]),  # a field name only UTF-8 holds: .npy format 3.0
    ],
    ids=["fortran", "strided", "0-d", "empty", "structured", "structured-object", "big-endian", "utf8-field"],
)
def test_special_arrays(persistent: StagingArea, array: np.ndarray) -> None:
    back = roundtrip(persistent, array, "np/special")
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.flags.writeable
    if array.dtype.hasobject:
        assert back.tolist() == array.tolist()
    else:
        np.testing.assert_array_equal(back, array)
        back[...] = 0  # a writable array of its own, not a view of anything the area keeps
        assert roundtrip(persistent, array, "np/special2").tolist() == array.tolist()


def test_marker_with_malformed_files_does_not_count(tmp_path: Path) -> None:
    area = LocalStaging(tmp_path)
    area.put("a/out", 1, "fp")
    marker_path = tmp_path / "a" / "out" / ".commit"
    marker = json.loads(marker_path.read_text())
    for files in [{"value.pickle": 5}, {"value.pickle": {"size": "5"}}, ["value.pickle"]]:
        marker_path.write_text(json.dumps({**marker, "files": files}))
        assert not area.has("a/out", "fp")
        assert area.keys("") == ["a/out"]  # the marker is there; it just does not make the value count
