"""A hosted computation's figures come back to the driver, and its Spark job has a readable description."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytimely.spark import collect, run_dataflow
from pytimely.spark.figures import Figures
from tests.spark.test_hosting import wordcount

pytestmark = pytest.mark.timeout(300)


def _plus_one(stream: Any) -> Any:
    return stream.map_batch(lambda b: [(x + 1,) for x in b.column(0).to_pylist()], name="plus")


def test_figures_count_every_record_per_process(spark: Any) -> None:
    frame = spark.range(0, 5000).toDF("x")
    figures = Figures(spark)
    assert figures.processes() == {}
    result = run_dataflow(_plus_one, frame, "y long", processes=2, workers=2, figures=figures)
    assert spark.sparkContext.getLocalProperty("spark.job.description") == (
        "pytimely dataflow _plus_one: 2 process(es) x 2 worker(s), one barrier stage"
    )
    got = collect(result)
    assert sorted(got.column("y").to_pylist()) == list(range(1, 5001))
    per_process = figures.processes()
    assert set(per_process) == {0, 1}
    assert sum(f["records_in"] for f in per_process.values()) == 5000
    assert sum(f["records_out"] for f in per_process.values()) == 5000
    for f in per_process.values():
        assert f["run_s"] > 0 and f["read_s"] >= 0 and f["meet_s"] >= 0 and f["convert_s"] > 0
    table = figures.table()
    assert table.splitlines()[-1].split()[:3] == ["total", "5000", "5000"]


def test_wordcount_sets_its_description_and_prints_figures(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "words.txt"
    path.write_text("a b a\nc a b\n")
    figures = Figures(spark)
    got = collect(wordcount.run_on_spark(spark, spark.read.text(str(path)), 2, 1, figures=figures))
    assert sorted(zip(got.column("word").to_pylist(), got.column("count").to_pylist(), strict=True)) == [
        ("a", 3), ("b", 2), ("c", 1)
    ]
    assert spark.sparkContext.getLocalProperty("spark.job.description") == "pytimely wordcount: count words"
    assert sum(f["records_in"] for f in figures.processes().values()) == 2  # two lines of text
    assert sum(f["records_out"] for f in figures.processes().values()) == 3  # three words


def test_the_wordcount_job_prints_the_figures(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``wordcount.py --spark local[2] -n 2`` prints each process's figures and their total on stderr.

    Its ``main()`` on the suite's session: what is checked is what the job prints, and a driver of its own would
    start a JVM for it; its ``main()`` runs in a driver of its own in ``test_standalone.py``, and the command line
    in a process of its own in ``test_connect.py``.
    """
    path = tmp_path / "words.txt"
    path.write_text("x y x\n" * 100)
    capsys.readouterr()
    args = ["--spark", "local[2]", "-n", "2", "--input", str(path), "--output", str(tmp_path / "out.tsv")]
    done = wordcount.main(args)
    err = capsys.readouterr().err
    assert done == 0, err[-3000:]
    lines = err.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["process", "records", "in"])
    assert lines[header + 3].split()[:3] == ["total", "100", "2"]
