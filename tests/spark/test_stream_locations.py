"""Where a stream's checkpoint and sink may live, and what is refused before the first epoch.

A checkpoint or sink is a path or a ``file://`` URL (the folder it names, never ``./file:/...``); a scheme
that cannot hold a checkpoint (``s3://``) is refused up front; a sink that cannot be written stops the run
before Spark's half of the checkpoint is made. Spark's own record of each job shows the dataflow and epoch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pytimely.errors import CheckpointLocationError, StreamSinkError
from pytimely.spark.streaming import CsvDirectorySink, run_stream
from tests.spark.test_streaming import drop, load


def _words_source(spark: Any, incoming: Path) -> Any:
    return spark.readStream.option("maxFilesPerTrigger", 1).text(str(incoming))


def test_file_urls_name_the_folders_they_point_at(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wordcount = load("stream_wordcount")
    incoming, out, ck, here = tmp_path / "in", tmp_path / "out", tmp_path / "ck", tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    drop(incoming, "a.txt", "x y x\n", 0)
    args = ["--processes", "0",
            "--spark", "local[2]", "--text-dir", str(incoming), "--output", out.as_uri(),
            "--checkpoint", ck.as_uri(), "--available-now"]  # fmt: skip
    assert wordcount.main(args) == 0
    assert list(here.iterdir()) == []
    assert (ck / "pytimely" / "query.json").is_file() and (ck / "spark" / "offsets").is_dir()
    assert (out / "batch-000000000000.csv").read_text().splitlines() == ["epoch,word,count", "0,x,2", "0,y,1"]


def test_an_object_store_checkpoint_is_refused_before_anything_is_made(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wordcount = load("stream_wordcount")
    incoming = tmp_path / "in"
    drop(incoming, "a.txt", "x\n", 0)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointLocationError, match="s3://"):
        run_stream(wordcount.running_counts, _words_source(spark, incoming), wordcount.SCHEMA,
                   sink=CsvDirectorySink(tmp_path / "out"), checkpoint="s3://b/ck", available_now=True)  # fmt: skip
    with pytest.raises(StreamSinkError, match="gs://"):
        CsvDirectorySink("gs://bucket/out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_a_sink_that_cannot_be_written_stops_the_run_before_the_first_epoch(spark: Any, tmp_path: Path) -> None:
    wordcount = load("stream_wordcount")
    incoming, ck = tmp_path / "in", tmp_path / "ck"
    drop(incoming, "a.txt", "x\n", 0)
    (tmp_path / "taken").write_text("a file where the sink's folder would be\n")
    sink = CsvDirectorySink(tmp_path / "taken" / "out")
    with pytest.raises(StreamSinkError, match="taken/out cannot be written"):
        run_stream(wordcount.running_counts, _words_source(spark, incoming), wordcount.SCHEMA, sink=sink,
                   checkpoint=ck, available_now=True)  # fmt: skip
    assert not (ck / "spark").exists()


def _job_descriptions(spark: Any) -> list[str]:
    """The descriptions of every job Spark's status store holds (what the UI's jobs page shows)."""
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    found = []
    for k in range(jobs.length()):  # a Scala Seq
        description = jobs.apply(k).description()
        if description.isDefined():
            found.append(str(description.get()))
    return found


def test_spark_jobs_name_the_dataflow_and_the_epoch(spark: Any, tmp_path: Path) -> None:
    wordcount = load("stream_wordcount")
    incoming = tmp_path / "in"
    for k in range(2):
        drop(incoming, f"t{k}.txt", f"w{k}\n", k)
    run_stream(wordcount.running_counts, _words_source(spark, incoming), wordcount.SCHEMA,
               sink=CsvDirectorySink(tmp_path / "out"), checkpoint=tmp_path / "ck", query="described",
               available_now=True)  # fmt: skip
    ours = [d for d in _job_descriptions(spark) if "query described" in d]
    assert any("running_counts" in d and d.endswith("epoch 0") for d in ours), ours
    assert any(d.endswith("epoch 1") for d in ours), ours
