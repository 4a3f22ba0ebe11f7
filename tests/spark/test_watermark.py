"""Late event-time rows under a declared watermark: dropped and counted, or sent to a side output, never a stop.

References are plain Python: a simulation of the frontier (the largest epoch seen minus the delay, never moving
back) that splits each micro-batch into late and on-time rows, and running word counts per completed epoch.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
import pyarrow as pa

from pytimely.errors import CheckpointMismatchError, InputFormatError, InvalidArgument
from pytimely.spark.epoch_host import EpochHost
from pytimely.spark.streaming import CsvDirectorySink, run_stream
from pytimely.spark.watermark import Watermark, split_late

SCHEMA = "epoch long, word string, count long"
Rows = list[tuple[str, int]]  # (word, epoch)


def running_counts(stream: Any) -> Any:
    """Lines of one word -> ``(word, count so far)`` for every word seen at each epoch."""

    def add(word: Any, count: int, total: int | None) -> tuple[int, list[tuple[Any, int]]]:
        total = count + (total or 0)
        return total, [(word, total)]

    words = stream.map_batch(lambda b: [w for w in b.column("value").to_pylist() if w], name="words")
    return words.count_by(name="count").state_machine(add, name="running")


def reference(batches: list[Rows], delay: int) -> tuple[list[Rows], list[list[tuple[int, str, int]]]]:
    """Per micro-batch: its late rows, and the ``(epoch, word, count)`` rows of the epochs it completes."""
    frontier, on_time, late, outputs = 0, [], [], []
    for rows in batches:
        late.append([r for r in rows if r[1] < frontier])
        kept = [r for r in rows if r[1] >= frontier]
        on_time += kept
        new = max(frontier, max(e for _, e in kept) - delay) if kept else frontier
        out = []
        for epoch in range(frontier, new):
            seen = {w for w, e in on_time if e == epoch}
            totals = Counter(w for w, e in on_time if e <= epoch)
            out += [(epoch, w, totals[w]) for w in sorted(seen)]
        outputs.append(out)
        frontier = new
    return late, outputs


def drop_file(directory: Path, name: str, rows: Rows, order: int) -> None:
    """A CSV of ``value,epoch`` rows, put in place whole, its mtime fixing Spark's order."""
    directory.mkdir(parents=True, exist_ok=True)
    aside = directory.parent / f".{name}.part"
    aside.write_text("value,epoch\n" + "".join(f"{w},{e}\n" for w, e in rows), encoding="utf-8")
    stamp = time.time() - 10_000 + 10 * order
    os.utime(aside, (stamp, stamp))
    aside.rename(directory / name)


def source(spark: Any, directory: Path) -> Any:
    """One file per micro-batch."""
    reader = spark.readStream.schema("value string, epoch long").option("header", True)
    return reader.option("maxFilesPerTrigger", 1).csv(str(directory))


def read_rows(path: Path) -> list[list[str]]:
    """A CSV file's rows after its header."""
    return [line.split(",") for line in path.read_text(encoding="utf-8").splitlines()[1:]]


BATCHES: list[Rows] = [
    [("a", 0), ("b", 2), ("a", 1), ("c", 3)],
    [("a", 1), ("b", 3), ("c", 4), ("a", 0)],  # with delay 0: 1 and 0 are late (frontier 3)
    [("b", 2), ("c", 4), ("a", 7), ("b", 5)],  # with delay 0: 2 late; with delay 2: 2 late (frontier 2 -> 2 is not)
    [("a", 3), ("c", 6), ("b", 8)],
]


def test_split_late_equals_a_row_by_row_filter_and_keeps_the_order() -> None:
    import random

    rng = random.Random(11)
    for kind in (pa.int64(), pa.int32(), pa.int8(), pa.uint16()):
        epochs = [rng.randrange(0, 50) for _ in range(500)]
        table = pa.table({"epoch": pa.array(epochs, kind), "n": list(range(500))})
        for frontier in (-3, 0, 17, 49, 50, 10_000):
            on_time, late = split_late(table, "epoch", frontier)
            assert on_time.column("n").to_pylist() == [n for n, e in enumerate(epochs) if e >= frontier]
            assert late.column("n").to_pylist() == [n for n, e in enumerate(epochs) if e < frontier]
            assert on_time.schema == table.schema == late.schema


def test_split_late_refuses_an_epoch_column_it_cannot_compare() -> None:
    with pytest.raises(InputFormatError, match="'ts' is not among the columns"):
        split_late(pa.table({"epoch": [1]}), "ts", 0)
    with pytest.raises(InputFormatError, match="must hold integers, holds string"):
        split_late(pa.table({"epoch": ["1"]}), "epoch", 0)
    with pytest.raises(InputFormatError, match="1 empty values"):
        split_late(pa.table({"epoch": pa.array([1, None], pa.int64())}), "epoch", 0)


def test_bad_watermark_declarations_are_typed_errors(spark: Any, tmp_path: Path) -> None:
    sink = CsvDirectorySink(tmp_path / "side")
    for bad, message in (
        (dict(delay=-1), "delay must be"),
        (dict(delay=1.5), "delay must be"),
        (dict(late="keep"), "late must be 'drop' or 'side'"),
        (dict(late="side"), "needs side="),
        (dict(late="side", side=object()), "has no prepare or commit"),
        (dict(side=sink), "only used with late='side'"),
    ):
        with pytest.raises(InvalidArgument, match=message):
            Watermark(**bad)
    drop_file(tmp_path / "in", "a.csv", [("a", 0)], 0)
    with pytest.raises(InvalidArgument, match="needs an event-time column"):
        run_stream(running_counts, source(spark, tmp_path / "in"), SCHEMA, sink=CsvDirectorySink(tmp_path / "out"),
                   checkpoint=tmp_path / "ck", watermark=Watermark(), available_now=True)
    assert not (tmp_path / "out").exists() and not (tmp_path / "ck" / "spark").exists()


@pytest.mark.parametrize("delay", [0, 2])
def test_the_epoch_host_holds_the_delayed_epochs_open_and_equals_the_reference(delay: int) -> None:
    """Fed on-time rows only, the host's output per feed equals the reference's, for every delay."""
    late, outputs = reference(BATCHES, delay)
    host = EpochHost(running_counts, 2, delay=delay)
    for k, rows in enumerate(BATCHES):
        table = pa.table({"value": [w for w, _ in rows], "epoch": pa.array([e for _, e in rows], pa.int64())})
        on_time, dropped = split_late(table, "epoch", host.frontier)
        assert sorted(zip(*dropped.to_pydict().values(), strict=True)) == sorted(late[k])
        got = [(t, w, c) for t, batch in host.feed(on_time, epoch="epoch") for w, c in batch]
        assert sorted(got) == outputs[k], k
    host.close()


def test_late_rows_are_dropped_and_counted_and_the_rest_equals_the_reference(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    incoming, out = tmp_path / "in", tmp_path / "out"
    for k, rows in enumerate(BATCHES):
        drop_file(incoming, f"b{k}.csv", rows, k)
    caplog.set_level(logging.WARNING, logger="pytimely.spark.streaming")
    done = run_stream(running_counts, source(spark, incoming), SCHEMA,
                      sink=CsvDirectorySink(out, order_by=["epoch", "word"]), checkpoint=tmp_path / "ck",
                      query="late-drop", epoch="epoch", watermark=Watermark(), available_now=True)
    late, outputs = reference(BATCHES, 0)
    assert done.processed == [0, 1, 2, 3]
    assert [t.late for t in done.timings] == [len(rows) for rows in late] == [0, 2, 1, 2]
    assert done.late == 5
    logged = [r.getMessage() for r in caplog.records if r.name == "pytimely.spark.streaming"]
    assert logged == [
        "micro-batch 1: 2 late row(s) with 'epoch' before 3 (epochs already complete) dropped",
        "micro-batch 2: 1 late row(s) with 'epoch' before 4 (epochs already complete) dropped",
        "micro-batch 3: 2 late row(s) with 'epoch' before 7 (epochs already complete) dropped",
    ]
    files = [read_rows(path) for path in sorted(out.glob("batch-*.csv"))]
    assert files == [[[str(e), w, str(c)] for e, w, c in batch] for batch in outputs]


def test_without_a_watermark_a_late_row_still_stops_the_query(spark: Any, tmp_path: Path) -> None:
    incoming = tmp_path / "in"
    for k, rows in enumerate(BATCHES[:2]):
        drop_file(incoming, f"b{k}.csv", rows, k)
    with pytest.raises(InputFormatError, match="late data"):
        run_stream(running_counts, source(spark, incoming), SCHEMA, sink=CsvDirectorySink(tmp_path / "out"),
                   checkpoint=tmp_path / "ck", query="late-stop", epoch="epoch", available_now=True)


def test_late_rows_go_to_the_side_output_across_a_restart(spark: Any, tmp_path: Path) -> None:
    """delay=2 and a side output; a restart after two micro-batches rebuilds the held epochs exactly."""
    incoming, out, side, ck = tmp_path / "in", tmp_path / "out", tmp_path / "side", tmp_path / "ck"

    def run(watermark: Watermark) -> Any:
        return run_stream(running_counts, source(spark, incoming), SCHEMA,
                          sink=CsvDirectorySink(out, order_by=["epoch", "word"]), checkpoint=ck, query="late-side",
                          epoch="epoch", watermark=watermark, available_now=True)

    watermark = Watermark(delay=2, late="side", side=CsvDirectorySink(side, order_by=["epoch", "value"]))
    for k, rows in enumerate(BATCHES[:2]):
        drop_file(incoming, f"b{k}.csv", rows, k)
    assert run(watermark).processed == [0, 1]
    for k, rows in enumerate(BATCHES[2:], start=2):
        drop_file(incoming, f"b{k}.csv", rows, k)
    done = run(watermark)
    assert done.processed == [2, 3] and done.restored_batches == 2
    late, outputs = reference(BATCHES, 2)
    assert sum(map(len, late)) > 0
    assert [t.late for t in done.timings] == [len(rows) for rows in late[2:]]
    sides = [read_rows(path) for path in sorted(side.glob("batch-*.csv"))]
    assert sides == [[[w, str(e)] for w, e in sorted(rows, key=lambda r: (r[1], r[0]))] for rows in late]
    files = [read_rows(path) for path in sorted(out.glob("batch-*.csv"))]
    assert files == [[[str(e), w, str(c)] for e, w, c in batch] for batch in outputs]
    with pytest.raises(CheckpointMismatchError, match="epoch"):
        run(Watermark(delay=1))
