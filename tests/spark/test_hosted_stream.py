"""Streaming with the dataflow hosted on the executors: the same changelog as the driver-hosted path, restarts."""

from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pytimely.errors import InvalidArgument, StreamFencedError
from pytimely.spark.epoch_output import EpochOutput
from pytimely.spark.streaming import CsvDirectorySink, StreamCheckpoint, run_stream
from tests.spark.test_streaming import drop, load

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = pa.schema([("epoch", pa.int64()), ("word", pa.string()), ("count", pa.int64())])
VOCABULARY = ["a", "b", "c,d", 'say "hi"', "é", "zz", "x1", "q"]


def drop_texts(incoming: Path, rng: random.Random, rounds: range) -> None:
    """One text file per round (one micro-batch each with ``maxFilesPerTrigger=1``)."""
    for k in rounds:
        lines = [" ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(1, 30))]
        drop(incoming, f"t{k:03d}.txt", "\n".join(lines) + "\n", k)


def changelog(out: Path) -> list[tuple[str, ...]]:
    """Every row of OUT's batch files, in batch order and sorted within each batch."""
    rows: list[tuple[str, ...]] = []
    for path in sorted(out.glob("batch-*.csv")):
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            assert next(reader) == ["epoch", "word", "count"]
            rows.extend(sorted(tuple(r) for r in reader))
    return rows


def count_words(spark: Any, incoming: Path, out: Path | EpochOutput, ck: Path, **hosting: Any) -> Any:
    """The word-count example's dataflow over ``incoming``, one file per micro-batch, until it is all read."""
    wordcount = load("stream_wordcount")
    source = spark.readStream.option("maxFilesPerTrigger", 1).text(str(incoming))
    sink = out if isinstance(out, EpochOutput) else CsvDirectorySink(out, order_by=["word"])
    return run_stream(
        wordcount.running_counts, source, wordcount.SCHEMA, sink=sink, checkpoint=ck, query="hosted_wordcount",
        available_now=True, **hosting,
    )  # fmt: skip


def assert_running_counts(output: EpochOutput, incoming: Path) -> None:
    """Epoch ``e`` of ``output`` holds the running count of every word of the ``e``-th file of ``incoming`` (one file
    a micro-batch), counted over that file and the files before it."""
    assert_batch_counts(output, [[path] for path in sorted(incoming.glob("t*.txt"))])


def assert_batch_counts(output: EpochOutput, batches: list[list[Path]]) -> None:
    """Epoch ``e`` of ``output`` holds the running count of every word of the files of ``batches[e]``, counted over
    those files and the batches before."""
    totals: dict[str, int] = {}
    for epoch, batch in enumerate(batches):
        seen = [w for path in batch for line in path.read_text(encoding="utf-8").splitlines() for w in line.split()]
        for word in seen:
            totals[word] = totals.get(word, 0) + 1
        table = output.read(epoch)
        assert sorted(zip(table.column("word").to_pylist(), table.column("count").to_pylist(), strict=True)) == sorted(
            (w, totals[w]) for w in set(seen)
        ), f"epoch {epoch}"


def size(folder: Path) -> int:
    """Bytes of the files under ``folder``."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def output_changelog(output: EpochOutput) -> list[tuple[str, ...]]:
    """An :class:`EpochOutput`'s committed rows as :func:`changelog` gives a CSV folder's."""
    rows: list[tuple[str, ...]] = []
    for epoch in output.committed():
        table = output.read(epoch)
        rows.extend(
            sorted(
                (str(e), w, str(c))
                for e, w, c in zip(*(table.column(n).to_pylist() for n in ("epoch", "word", "count")), strict=True)
            )
        )
    return rows


def test_hosted_word_count_equals_the_driver_hosted_path_across_a_restart(spark: Any, tmp_path: Path) -> None:
    """Two processes on the executors, stopped after two micro-batches and run again (2 workers each) for four
    more, write the changelog one uninterrupted driver-hosted run writes (the state came back from the snapshots);
    pytimely's half of the checkpoint does not grow with the micro-batches. ~60 s."""
    rng = random.Random(35)
    incoming = tmp_path / "in"
    drop_texts(incoming, rng, range(2))
    hosted_out = EpochOutput(tmp_path / "hosted", SCHEMA, format="csv", order_by=["word"])
    hosted_ck = tmp_path / "hosted-ck"
    first = count_words(spark, incoming, hosted_out, hosted_ck, processes=2)
    assert first.processed == [0, 1]
    after_two = {half: size(hosted_ck / half) for half in ("pytimely", "spark")}
    drop_texts(incoming, rng, range(2, 6))
    second = count_words(spark, incoming, hosted_out, hosted_ck, processes=2, workers=2)
    assert second.processed == [2, 3, 4, 5] and second.restored_batches == 2
    after_six = {half: size(hosted_ck / half) for half in ("pytimely", "spark")}
    print("checkpoint bytes after 2 and 6 micro-batches:", after_two, after_six)
    assert after_six["pytimely"] <= 1.5 * after_two["pytimely"], (after_two, after_six)
    driver_out = tmp_path / "driver"
    count_words(spark, incoming, driver_out, tmp_path / "driver-ck")
    assert hosted_out.committed() == list(range(6))
    assert output_changelog(hosted_out) == changelog(driver_out)
    assert len(changelog(driver_out)) > 20
    parts = sorted(p.name for p in (tmp_path / "hosted").glob("part-000000000004-*"))
    assert parts == ["part-000000000004-g2-p00000.csv", "part-000000000004-g2-p00001.csv"], (
        "each process wrote its own part"
    )


def test_a_layout_that_cannot_run_is_refused_before_anything_starts(spark: Any, tmp_path: Path) -> None:
    """Bad processes/host settings are typed errors naming the setting."""
    source = spark.readStream.text(str(tmp_path))
    with pytest.raises(InvalidArgument, match="processes"):
        run_stream(
            lambda s: s,
            source,
            "word string",
            sink=CsvDirectorySink(tmp_path / "o"),
            checkpoint=tmp_path / "c",
            processes=0,
        )
    with pytest.raises(InvalidArgument, match="host"):
        run_stream(
            lambda s: s,
            source,
            "word string",
            sink=CsvDirectorySink(tmp_path / "o"),
            checkpoint=tmp_path / "c",
            processes=2,
            host="elsewhere",
        )


class TakenOverAfter(CsvDirectorySink):
    """A CSV sink during whose commit of ``batch`` another run takes the checkpoint over."""

    def __init__(self, directory: Path, checkpoint: Path, batch: int) -> None:
        super().__init__(directory, order_by=["word"])
        self.checkpoint = checkpoint
        self.batch = batch

    def commit(self, batch_id: int, table: Any) -> None:
        super().commit(batch_id, table)
        if batch_id == self.batch:
            StreamCheckpoint(self.checkpoint).take_ownership()


def test_a_run_whose_checkpoint_was_taken_over_commits_nothing_more(spark: Any, tmp_path: Path) -> None:
    """Once another run owns the checkpoint, this run's next commit is refused (StreamFencedError) and the query
    stops: the checkpoint and the output end at the last micro-batch it committed as owner. ~30 s."""
    rng = random.Random(3)
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    drop_texts(incoming, rng, range(4))
    wordcount = load("stream_wordcount")
    source = spark.readStream.option("maxFilesPerTrigger", 1).text(str(incoming))
    with pytest.raises(StreamFencedError, match="taken over"):
        run_stream(
            wordcount.running_counts,
            source,
            wordcount.SCHEMA,
            sink=TakenOverAfter(out, ck, 1),
            checkpoint=ck,
            query="fenced",
            available_now=True,
            processes=2,
        )
    assert StreamCheckpoint(ck).last_committed() == 1
    assert sorted(p.name for p in out.glob("batch-*.csv")) == [f"batch-{b:012d}.csv" for b in (0, 1)]


def test_files_whose_columns_change_stop_a_hosted_query_with_a_schema_error(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The wcc example's check runs in the feed tasks on the executors: a Parquet file without ``src``/``dst``
    stops the hosted query with StreamSchemaError naming the file (exit 2), nothing of it committed. ~40 s."""
    import pyarrow.parquet as pq

    stream_wcc = load("stream_wcc")
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    incoming.mkdir()
    pq.write_table(pa.table({"src": [1], "dst": [2]}), incoming / "a.parquet")
    args = [
        "--processes",
        "2",
        "--spark",
        "local[2]",
        "--edges-dir",
        str(incoming),
        "--output",
        str(out),
        "--checkpoint",
        str(ck),
        "--available-now",
        "--format",
        "parquet",
    ]
    assert stream_wcc.main(args) == 0
    pq.write_table(pa.table({"from": [3], "to": [4]}), tmp_path / "b.parquet")
    (tmp_path / "b.parquet").rename(incoming / "b.parquet")
    assert stream_wcc.main(args) == 2
    err = capsys.readouterr().err
    assert "StreamSchemaError" in err and "b.parquet" in err, err
    schema = pa.schema([("epoch", pa.int64()), ("vertex", pa.int64()), ("label", pa.int64())])
    assert EpochOutput(out, schema, format="csv").committed() == [0]


def test_a_manifest_written_just_before_a_crash_counts_as_the_commit(spark: Any, tmp_path: Path) -> None:
    """A run killed after micro-batch 1's manifest, before pytimely's and Spark's commit records (both rolled back
    here): the rerun takes the manifest as the commit, skips the re-delivered batch 1, and continues. ~25 s."""
    rng = random.Random(41)
    incoming, ck = tmp_path / "in", tmp_path / "ck"
    drop_texts(incoming, rng, range(2))
    output = EpochOutput(tmp_path / "out", SCHEMA, format="csv", order_by=["word"])
    assert count_words(spark, incoming, output, ck, processes=2).processed == [0, 1]
    (ck / "pytimely" / "committed.json").write_text('{"batch": 0}\n', encoding="utf-8")
    for name in ("1", ".1.crc"):
        (ck / "spark" / "commits" / name).unlink(missing_ok=True)
    drop_texts(incoming, rng, range(2, 3))
    again = count_words(spark, incoming, output, ck, processes=2)
    assert again.processed == [2] and again.skipped == 1
    driver_out = tmp_path / "driver"
    count_words(spark, incoming, driver_out, tmp_path / "driver-ck")
    assert output_changelog(output) == changelog(driver_out)
