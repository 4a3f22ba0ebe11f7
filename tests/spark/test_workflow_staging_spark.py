"""Spark DataFrames in staging areas, fingerprints and the Spark executor, on a real local SparkSession."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytimely.errors import ModuleFailedError
from pytimely.workflow.executors import Call, SparkExecutor
from pytimely.workflow.fingerprint import value_fingerprint
from pytimely.workflow.staging import FsspecStaging, LocalStaging, MemoryStaging, StagingArea
from tests.profiles import examples

rows = st.lists(st.tuples(st.integers(-1000, 1000), st.text("abcxyz", max_size=4)), max_size=20)


def frame(spark: Any, data: list[tuple[int, str]], partitions: int = 2) -> Any:
    return spark.createDataFrame(data, "id long, name string").repartition(partitions)


def collected(df: Any) -> list[tuple[int, str]]:
    return sorted((r["id"], r["name"]) for r in df.collect())


def areas(tmp_path: Path) -> dict[str, StagingArea]:
    return {
        "local": LocalStaging(tmp_path / "local"),
        "fsspec-local": FsspecStaging(f"file://{tmp_path}/fsspec"),
        "fsspec-memory": FsspecStaging(f"memory://spark-{tmp_path.name}/area"),
    }


@settings(max_examples=examples(3), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows)
def test_dataframe_round_trip(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, data: list[tuple[int, str]]
) -> None:
    for name, area in areas(tmp_path_factory.mktemp("areas")).items():
        area.put("spark/out", frame(spark, data), "fp")
        assert area.has("spark/out", "fp"), name
        back = area.get("spark/out", "fp")
        assert type(back).__name__ == "DataFrame", name
        assert collected(back) == sorted(data), name
        assert back.schema.simpleString() == "struct<id:bigint,name:string>", name


def test_spark_writes_parquet_itself_on_local_disks(spark: Any, tmp_path: Path) -> None:
    area = LocalStaging(tmp_path)
    area.put("m/out", frame(spark, [(1, "a"), (2, "b"), (3, "c")], partitions=3), "fp")
    marker = json.loads((tmp_path / "m" / "out" / ".commit").read_text())
    assert marker["format"] == "spark"
    parts = [name for name in marker["files"] if name.endswith(".parquet")]
    assert len(parts) == 3  # one file per partition, written by Spark's tasks
    (tmp_path / "m" / "out" / marker["data"] / parts[0]).unlink()
    assert not area.has("m/out", "fp")  # a lost part file: the value no longer counts


def test_non_local_filesystems_go_through_arrow(spark: Any, tmp_path: Path) -> None:
    area = FsspecStaging(f"memory://arrow-{tmp_path.name}")
    area.put("m/out", frame(spark, [(1, "a")]), "fp")
    assert json.loads(area.fs.cat_file(area._path("m/out", ".commit")))["format"] == "spark-arrow"
    assert collected(area.get("m/out")) == [(1, "a")]


def test_read_back_from_another_thread(spark: Any, tmp_path: Path) -> None:
    """The interpreter calls staging areas through ``asyncio.to_thread``: the session must be found there too."""
    area = LocalStaging(tmp_path)
    area.put("m/out", frame(spark, [(5, "x")]), "fp")
    back = asyncio.run(asyncio.to_thread(area.get, "m/out"))
    assert collected(back) == [(5, "x")]


def test_memory_staging_keeps_the_dataframe(spark: Any) -> None:
    area = MemoryStaging()
    df = frame(spark, [(1, "a")])
    area.put("m/out", df, "fp")
    assert area.get("m/out") is df


def test_dataframe_fingerprint_is_content_not_layout(spark: Any) -> None:
    data = [(i, "abc"[i % 3]) for i in range(50)]
    one = value_fingerprint(frame(spark, data, partitions=1))
    assert one == value_fingerprint(frame(spark, list(reversed(data)), partitions=4))
    assert one != value_fingerprint(frame(spark, [*data[:-1], (49, "z")], partitions=1))
    assert one != value_fingerprint(frame(spark, data[:-1], partitions=1))
    assert one != value_fingerprint(frame(spark, data + data[-1:], partitions=1))  # a duplicate row counts
    renamed = frame(spark, data, partitions=1).withColumnRenamed("name", "label")
    assert one != value_fingerprint(renamed)


# -- the Spark executor --------------------------------------------------------------------------------------------


def evens(spark: Any, limit: int) -> Any:
    return spark.range(limit).filter("id % 2 = 0")


def count_rows(table: Any) -> int:
    return int(table.count())


def same(table: Any) -> Any:
    return table


def broken(spark: Any) -> Any:
    return spark.sql("SELECT * FROM no_such_table_anywhere")


def test_spark_executor(spark: Any) -> None:
    before = set(threading.enumerate())

    async def main() -> None:
        async with SparkExecutor(spark) as executor:
            made = (await executor.run(Call("report/evens", evens, params={"limit": 10})))["out"]
            assert sorted(r["id"] for r in made.collect()) == [0, 2, 4, 6, 8]
            assert (await executor.run(Call("report/count", count_rows, {"table": made})))["out"] == 5
            assert (await executor.run(Call("report/same", same, {"table": made})))["out"] is made  # as is
            with pytest.raises(ModuleFailedError, match="'report/broken'") as info:
                await executor.run(Call("report/broken", broken))
            assert info.value.module == "report/broken"
            assert "no_such_table_anywhere" in str(info.value.__cause__)

    asyncio.run(main())
    assert [t for t in threading.enumerate() if t not in before and t.name.startswith("pytimely")] == []
