"""Event-time epochs and a watermark on the executors: the driver-hosted path's output, late rows and restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pytimely.errors import CheckpointFileError, InputFormatError
from pytimely.spark.streaming import CsvDirectorySink, run_stream
from pytimely.spark.watermark import Watermark
from tests.spark.test_watermark import BATCHES, SCHEMA, drop_file, read_rows, reference, running_counts, source


def run(spark: Any, incoming: Path, out: Path, ck: Path, watermark: Watermark | None, **hosting: Any) -> Any:
    """The running count over ``incoming`` (one file a micro-batch) with event-time epochs, until it is all read."""
    return run_stream(
        running_counts, source(spark, incoming), SCHEMA, sink=CsvDirectorySink(out, order_by=["epoch", "word"]),
        checkpoint=ck, query="event-time", epoch="epoch", watermark=watermark, available_now=True, **hosting,
    )  # fmt: skip


def crash_before_commit(ck: Path, batch: int, frontier: int) -> None:
    """The checkpoint as a run killed between micro-batch ``batch``'s held rows' write and its commit leaves it:
    pytimely's and Spark's commit records of it rolled back (its held rows' files stay: the run must not take them)."""
    import json

    assert list((ck / "pytimely" / "held").glob(f"batch-{batch:012d}-*.arrow")), "the micro-batch held nothing"
    (ck / "pytimely" / "committed.json").write_text(json.dumps({"batch": batch - 1, "frontier": frontier}) + "\n")
    for name in (str(batch), f".{batch}.crc"):
        (ck / "spark" / "commits" / name).unlink(missing_ok=True)


def test_event_time_on_the_executors_equals_the_driver_path_across_a_restart(spark: Any, tmp_path: Path) -> None:
    """delay=2, late rows to a side output, two processes killed after micro-batch 1's held rows were written and
    before its commit, run again on one process of two workers: the changelog and the side output equal the
    driver-hosted run's on the same files (and the reference); the held rows of open epochs and the frontier came
    back from the checkpoint (micro-batch 1's held rows not taken twice). ~90 s."""
    incoming = tmp_path / "in"
    for k, rows in enumerate(BATCHES[:2]):
        drop_file(incoming, f"b{k}.csv", rows, k)

    def watermark(side: Path) -> Watermark:
        return Watermark(delay=2, late="side", side=CsvDirectorySink(side, order_by=["epoch", "value"]))

    hosted_out, hosted_side, hosted_ck = tmp_path / "h-out", tmp_path / "h-side", tmp_path / "h-ck"
    first = run(spark, incoming, hosted_out, hosted_ck, watermark(hosted_side), processes=2)
    assert first.processed == [0, 1]
    crash_before_commit(hosted_ck, 1, frontier=max(e for _, e in BATCHES[0]) - 2)
    for k, rows in enumerate(BATCHES[2:], start=2):
        drop_file(incoming, f"b{k}.csv", rows, k)
    second = run(spark, incoming, hosted_out, hosted_ck, watermark(hosted_side), processes=1, workers=2)
    assert second.processed == [1, 2, 3] and second.restored_batches == 1
    driver_out, driver_side = tmp_path / "d-out", tmp_path / "d-side"
    driver = run(spark, incoming, driver_out, tmp_path / "d-ck", watermark(driver_side))
    late, outputs = reference(BATCHES, 2)
    assert [t.late for t in second.timings] == [t.late for t in driver.timings[1:]] == [len(r) for r in late[1:]]
    for hosted, driven in ((hosted_out, driver_out), (hosted_side, driver_side)):
        files = [read_rows(path) for path in sorted(hosted.glob("batch-*.csv"))]
        assert files == [read_rows(path) for path in sorted(driven.glob("batch-*.csv"))], hosted.name
    files = [read_rows(path) for path in sorted(hosted_out.glob("batch-*.csv"))]
    assert files == [[[str(e), w, str(c)] for e, w, c in batch] for batch in outputs]
    assert sum(map(len, late)) > 0 and sum(map(len, outputs)) > 5


def test_late_rows_dropped_and_a_manifest_before_its_commit_record_on_the_executors(spark: Any, tmp_path: Path) -> None:
    """delay=0, late rows dropped and counted, processes writing their own parts (EpochOutput): a run killed after
    micro-batch 1's manifest, before pytimely's and Spark's commit records (both rolled back here), is taken over
    with the frontier micro-batch 1 moved to (kept before its output was committed) and its held rows; the rerun
    skips the re-delivered batch and the whole changelog equals the reference. Without a watermark the first late
    row stops the query with the driver path's error (InputFormatError, "late data"). ~90 s."""
    import json

    import pyarrow as pa

    from pytimely.spark.epoch_output import EpochOutput

    incoming, ck = tmp_path / "in", tmp_path / "ck"
    schema = pa.schema([("epoch", pa.int64()), ("word", pa.string()), ("count", pa.int64())])
    output = EpochOutput(tmp_path / "out", schema, format="csv", order_by=["epoch", "word"])

    def hosted() -> Any:
        return run_stream(running_counts, source(spark, incoming), SCHEMA, sink=output, checkpoint=ck, query="manifest",
                          epoch="epoch", watermark=Watermark(delay=0), available_now=True, processes=2)  # fmt: skip

    for k, rows in enumerate(BATCHES[:2]):
        drop_file(incoming, f"b{k}.csv", rows, k)
    first = hosted()
    assert first.processed == [0, 1] and [t.late for t in first.timings] == [0, 2]
    record = json.loads((ck / "pytimely" / "committed.json").read_text(encoding="utf-8"))
    assert record["batch"] == 1 and record["frontier"] == 4, record
    frontier_after_0 = max(e for _, e in BATCHES[0])
    (ck / "pytimely" / "committed.json").write_text(json.dumps({"batch": 0, "frontier": frontier_after_0}) + "\n")
    for name in ("1", ".1.crc"):
        (ck / "spark" / "commits" / name).unlink(missing_ok=True)
    for k, rows in enumerate(BATCHES[2:], start=2):
        drop_file(incoming, f"b{k}.csv", rows, k)
    again = hosted()
    late, outputs = reference(BATCHES, 0)
    assert again.processed == [2, 3] and again.skipped == 1
    assert [t.late for t in again.timings] == [len(rows) for rows in late[2:]] == [1, 2] and again.late == 3
    assert output.committed() == [0, 1, 2, 3]
    for batch, expected in enumerate(outputs):
        table = output.read(batch)
        got = list(zip(*(table.column(n).to_pylist() for n in ("epoch", "word", "count")), strict=True))
        assert sorted(got) == sorted(expected), batch
    with pytest.raises(InputFormatError, match="late data"):
        run(spark, incoming, tmp_path / "out2", tmp_path / "ck2", None, processes=1)
    assert not list((tmp_path / "out2").glob("batch-000000000001*"))


def test_a_tampered_held_file_fails_the_run_with_the_typed_error_and_no_restart(spark: Any, tmp_path: Path) -> None:
    """A held file altered between two runs: the hosted process that takes it up refuses it, and run_stream raises
    CheckpointFileError naming the file, with no new generation started for it (every one would read the same
    file). ~40 s."""
    import re

    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    drop_file(incoming, "b0.csv", BATCHES[0], 0)
    assert run(spark, incoming, out, ck, Watermark(delay=2), processes=1).processed == [0]
    held = sorted((ck / "pytimely" / "held").glob("batch-*.arrow"))
    assert held, "micro-batch 0 held nothing"
    data = bytearray(held[0].read_bytes())
    data[len(data) // 2] ^= 1
    held[0].write_bytes(bytes(data))
    generations = set((ck / "pytimely" / "hosts").glob("gen-*.json"))
    drop_file(incoming, "b1.csv", BATCHES[1], 1)
    with pytest.raises(CheckpointFileError, match=re.escape(held[0].name)):
        run(spark, incoming, out, ck, Watermark(delay=2), processes=1)
    assert len(set((ck / "pytimely" / "hosts").glob("gen-*.json")) - generations) == 1  # started once, not again
