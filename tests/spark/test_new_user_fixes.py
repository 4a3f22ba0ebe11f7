"""What a new user ran into on Spark: causes named, one computation per save, nulls, timestamps, setup checks."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pytimely.errors import InputFormatError, InvalidArgument, SparkExecutorSetupError, SparkInputError, SparkTaskError
from pytimely.spark import collect, read, run_dataflow, save
from pytimely.spark.hosting import check_executors
from tests.spark.test_hosting import wcc, wordcount

pytestmark = pytest.mark.timeout(300)


def test_a_malformed_csv_names_spark_s_cause_and_the_file(spark: Any, tmp_path: Path) -> None:
    source = tmp_path / "edges.csv"
    source.write_text("1,2\n3,x\n5,6\n")
    result = wcc.run_on_spark(spark, read(spark, str(source), "src long, dst long"), 2, 1)
    with pytest.raises(SparkInputError, match=r"MALFORMED_RECORD_IN_PARSING.*\[3,null\]") as info:
        save(result, str(tmp_path / "out.csv"), order_by=["vertex"])
    assert info.value.path is not None and info.value.path.endswith("edges.csv")
    assert str(source) in str(info.value)
    assert not (tmp_path / "out.csv").exists()


def test_a_missing_input_is_one_line_and_exit_status_2(spark: Any, tmp_path: Path, capsys: Any) -> None:
    missing = tmp_path / "nowhere.csv"
    with pytest.raises(SparkInputError, match="PATH_NOT_FOUND"):
        read(spark, str(missing), "src long, dst long")
    status = wcc.main(["--spark", "local[4]", "-n", "2", "--edges", str(missing), "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert status == 2
    assert "PATH_NOT_FOUND" in err and str(missing) in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    status = wordcount.main(["--spark", "local[4]", "--input", str(missing), "--output", str(tmp_path / "o")])
    assert status == 2 and "PATH_NOT_FOUND" in capsys.readouterr().err


def test_executors_that_cannot_import_a_module_are_found_before_the_stage(spark: Any) -> None:
    with pytest.raises(SparkExecutorSetupError, match=r"cannot import pytimely_not_installed.*pip install.*PYSPARK"):
        check_executors(spark, module="pytimely_not_installed")
    check_executors(spark)  # pytimely itself is importable there


class _Counted:
    """A build that appends a line to ``marker`` each time one of its processes runs (counts computations)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __call__(self, stream: Any) -> Any:
        with open(self.marker, "a", encoding="utf-8") as handle:
            handle.write(f"{stream.scope.index}\n")
        return wcc._components(stream)


@pytest.mark.parametrize("single_file", [True, False])
def test_save_in_order_runs_the_dataflow_once(spark: Any, tmp_path: Path, single_file: bool) -> None:
    frame = spark.createDataFrame([(i, (i * 7) % 50) for i in range(200)], "src long, dst long")
    marker = tmp_path / "runs.txt"
    result = run_dataflow(_Counted(str(marker)), frame, "vertex long, label long", processes=2)
    out = tmp_path / "out.parquet"
    save(result, str(out), order_by=["vertex"], single_file=single_file)
    assert sorted(marker.read_text().split()) == ["0", "1"], "each of the two workers built its dataflow once"
    import pyarrow.parquet as pq

    vertices = pq.read_table(out).column("vertex").to_pylist()
    assert vertices == sorted(vertices) and len(vertices) == len(set(vertices)) == 50 + 150


def _keep_rows(stream: Any) -> Any:
    return stream


def _with_gaps(stream: Any) -> Any:
    return stream.map_batch(lambda b: [(r["k"], None if r["n"] is None else r["n"] * 2) for r in b.to_pylist()])


def test_nulls_pass_through_and_an_edge_without_an_end_is_named(spark: Any) -> None:
    frame = spark.createDataFrame([("a", 1), (None, 2), ("c", None)], "k string, n long")
    got = collect(run_dataflow(_with_gaps, frame, "k string, n long", processes=2))
    assert sorted(got.to_pylist(), key=str) == sorted(
        [{"k": "a", "n": 2}, {"k": None, "n": 4}, {"k": "c", "n": None}], key=str
    )
    edges = spark.createDataFrame([(1, 2), (3, None)], "src long, dst long")
    with pytest.raises(SparkTaskError, match=r"InputFormatError: edge column 'dst' has 1 empty value") as info:
        collect(wcc.run_on_spark(spark, edges, 2, 1))
    assert "ArrowInvalid" not in str(info.value)


def _stamp(stream: Any) -> Any:
    return stream.map_batch(lambda b: [(dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), len(b))])


def test_a_timestamp_column_in_the_output_schema_works(spark: Any) -> None:
    frame = spark.sql("select timestamp'2026-05-06 07:08:09' as t, 1 as x")
    echoed = collect(run_dataflow(_keep_rows, frame, "t timestamp, x int", processes=1))
    assert echoed.column("t").cast(pa.timestamp("us")).to_pylist() == [
        collect(frame).column("t").cast(pa.timestamp("us")).to_pylist()[0]
    ]
    made = collect(run_dataflow(_stamp, frame, "t timestamp, n long", processes=1))
    assert made.column("t").cast(pa.timestamp("us", tz="UTC")).to_pylist() == [
        dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    ]


def test_an_output_type_arrow_cannot_carry_is_named() -> None:
    from pyspark.sql.types import CalendarIntervalType, LongType, StructField, StructType

    from pytimely.spark.record_batches import _arrow_schema

    schema = StructType([StructField("ok", LongType()), StructField("span", CalendarIntervalType())])
    with pytest.raises(InvalidArgument, match="output column 'span' of type interval"):
        _arrow_schema(schema, "UTC")
    assert isinstance(InvalidArgument("x"), ValueError) and not issubclass(SparkInputError, InvalidArgument)
    assert issubclass(SparkInputError, InputFormatError)
