"""Rows from Spark stay Arrow: exchange by a key column, keyed counts and windows over string keys, to Parquet."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pytimely import container
from pytimely.spark import collect, run_dataflow, save

pytestmark = pytest.mark.timeout(300)


def _words(spark: Any, rows: int = 3000) -> tuple[Any, list[tuple[str, int, float]]]:
    rng = random.Random(11)
    data = [(f"w{rng.randrange(40)}", rng.randrange(100), rng.randrange(1000) / 4) for _ in range(rows)]
    return spark.createDataFrame(data, "word string, t long, v double").repartition(3), data


def _count_words(stream: Any) -> Any:
    return stream.count_by("word")


def _kinds_after_exchange(stream: Any) -> Any:
    seen = stream.exchange(lambda r: r[1]).map_batch(lambda b: [(container.kind_of(b).name,)])
    return seen.exchange(lambda r: 0).map_batch(lambda b: sorted(set(container.records(b))))


def _windows(stream: Any) -> Any:
    return stream.tumbling(10, time="t", key="word", value="v", aggregate="sum")


def test_a_keyed_count_from_a_dataframe_to_parquet_equals_spark_group_by(spark: Any, tmp_path: Path) -> None:
    frame, data = _words(spark)
    out = tmp_path / "counts.parquet"
    save(run_dataflow(_count_words, frame, "word string, n long", processes=2, workers=2), str(out),
         single_file=False)
    got = dict(zip(*(pq.read_table(out).column(c).to_pylist() for c in ("word", "n")), strict=True))
    spark_counts = {r["word"]: r["count"] for r in frame.groupBy("word").count().collect()}
    assert got == spark_counts == dict(Counter(w for w, _, _ in data))


def test_batches_from_spark_stay_arrow_through_an_exchange(spark: Any) -> None:
    frame, _ = _words(spark, 500)
    kinds = collect(run_dataflow(_kinds_after_exchange, frame, "kind string", processes=2))
    assert set(kinds.column("kind").to_pylist()) == {"arrow"}


def test_windows_over_string_keys_of_spark_rows(spark: Any) -> None:
    frame, data = _words(spark)
    got = collect(run_dataflow(_windows, frame, "start long, end long, word string, total double", processes=2))
    expected: dict[tuple[int, int, str], float] = {}
    for word, t, v in data:
        start = t // 10 * 10
        expected[start, start + 10, word] = expected.get((start, start + 10, word), 0.0) + v
    rows = zip(*(got.column(c).to_pylist() for c in ("start", "end", "word", "total")), strict=True)
    assert {(s, e, w): total for s, e, w, total in rows} == expected
    assert isinstance(got, pa.Table)
