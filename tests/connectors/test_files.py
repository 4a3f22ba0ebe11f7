"""File connectors against real files: lines, CSV and Parquet sources, a directory whose new files become epochs,
and the file sink; malformed input names its file and line."""

from __future__ import annotations

import csv
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pytimely import Scope
from pytimely.connectors import directory_source, file_sink, file_source, read_lines
from pytimely.errors import InputError, InputFormatError, OutputPathError, SourceTimeoutError
from pytimely.testing import TestingSink, run_dataflow, testing_source


def _write_csv(path: Path, rows: list[tuple[int, int]]) -> None:
    path.write_text("time,key\n" + "".join(f"{t},{k}\n" for t, k in rows))


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_lines_csv_and_parquet_files(tmp_path: Path, workers: int) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\r\nthree")
    _write_csv(tmp_path / "b.csv", [(1, 10), (2, 20)])
    pq.write_table(pa.table({"time": [5, 6], "key": [50, 60]}), tmp_path / "c.parquet")
    texts: TestingSink[Any] = TestingSink()
    tables: TestingSink[Any] = TestingSink()

    def build(scope: Scope[int]) -> None:
        texts.attach(file_source(scope, [tmp_path / "a.txt"]))
        tables.attach(file_source(scope, [tmp_path / "b.csv", tmp_path / "c.parquet"], epoch_per_file=True))

    run_dataflow(build, workers=workers)
    assert texts.by_epoch() == {0: ["one", "three", "two"]}
    assert tables.by_epoch() == {0: [(1, 10), (2, 20)], 1: [(5, 50), (6, 60)]}
    assert all(isinstance(c.batch, pa.RecordBatch) for c in tables.caught)  # columns stay columns


def test_lines_are_read_in_bounded_chunks(tmp_path: Path) -> None:
    path = tmp_path / "many.txt"
    path.write_text("".join(f"line {i}\n" for i in range(10000)))
    batches = list(read_lines(path, chunk=1000))
    assert len(batches) > 50
    assert [x for b in batches for x in b] == [f"line {i}" for i in range(10000)]


def test_bad_inputs_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("time,key\n1,2\n3,4,5\n")
    long = tmp_path / "long.txt"
    long.write_text("ok\n" + "x" * 200 + "\n")
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"fine\nalso fine\n\xff\xfe\n")
    cases = [(bad, {}, 3), (long, {"max_line": 100}, 2), (binary, {}, 3)]
    for path, options, line in cases:
        with pytest.raises(InputFormatError) as caught:
            run_dataflow(lambda scope, p=path, o=options: file_source(scope, [p], **o).probe())
        assert caught.value.path == str(path) and caught.value.line == line, caught.value
    with pytest.raises(InputFormatError, match="cannot read"):
        run_dataflow(lambda scope: file_source(scope, [tmp_path / "missing.txt"]).probe())


def _produce(directory: Path, files: list[tuple[str, str]], pause: float) -> threading.Thread:
    """Write ``files`` one by one (under a temporary name, renamed into place), then the end marker."""

    def run() -> None:
        for name, text in files:
            tmp = directory / f".{name}.partial"
            tmp.write_text(text)
            tmp.rename(directory / name)
            time.sleep(pause)  # files arrive over time, as they would from a producer
        (directory / "_DONE").write_text("")

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("workers", [1, 3])
def test_directory_new_files_become_epochs(tmp_path: Path, workers: int) -> None:
    files = [(f"part-{i:03d}.csv", "time,key\n" + "".join(f"{i},{k}\n" for k in range(i + 1))) for i in range(6)]
    sink: TestingSink[Any] = TestingSink()

    def build(scope: Scope[int]) -> None:
        sink.attach(directory_source(scope, tmp_path, poll_interval=0.01, timeout=60).count())

    producer = _produce(tmp_path, files, 0.02)
    try:
        run_dataflow(build, workers=workers)
    finally:
        producer.join(60)
    # File i holds i + 1 rows, all at epoch i: count per epoch shows each file became its own epoch.
    assert sink.by_epoch() == {i: [i + 1] for i in range(6)}


def test_directory_file_out_of_order_and_silence_are_typed_errors(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_text("x\n")

    def build(scope: Scope[int]) -> Any:
        return directory_source(scope, tmp_path, poll_interval=0.01, timeout=60).probe()

    def late_file() -> None:
        time.sleep(0.2)
        (tmp_path / "a.txt").write_text("y\n")

    thread = threading.Thread(target=late_file)
    thread.start()
    with pytest.raises(InputError, match="arrived after"):
        run_dataflow(build)
    thread.join()
    with pytest.raises(SourceTimeoutError):
        run_dataflow(lambda scope: directory_source(scope, tmp_path, poll_interval=0.01, timeout=0.3).probe())


def test_max_files_ends_a_directory_without_a_marker(tmp_path: Path) -> None:
    for i in range(4):
        (tmp_path / f"{i}.txt").write_text(f"{i}\n")
    sink: TestingSink[Any] = TestingSink()
    run_dataflow(lambda scope: sink.attach(directory_source(scope, tmp_path, end_marker=None, max_files=3)), workers=2)
    assert sink.by_epoch() == {0: ["0"], 1: ["1"], 2: ["2"]}


@pytest.mark.parametrize("workers", [1, 3])
def test_file_sink_writes_time_ordered_complete_files(tmp_path: Path, workers: int) -> None:
    epochs = [[(3, "c"), (1, "a")], [], [(2, "b")], [(4, "d"), (5, "e"), (6, "f")]]

    def build(scope: Scope[int]) -> None:
        stream = testing_source(scope, epochs)
        file_sink(stream.map(lambda r: r[1]), tmp_path / "out.txt")
        file_sink(stream, tmp_path / "out.csv", columns=["n", "s"])
        file_sink(stream, tmp_path / "out.parquet", columns=["n", "s"])

    run_dataflow(build, workers=workers)
    lines = (tmp_path / "out.txt").read_text().splitlines()
    # In time order; within a time in any order.
    assert sorted(lines[:2]) == ["a", "c"] and lines[2] == "b" and sorted(lines[3:]) == ["d", "e", "f"]
    with open(tmp_path / "out.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["n", "s"] and sorted(rows[1:]) == [[str(n), s] for n, s in sorted(r for e in epochs for r in e)]
    table = pq.read_table(tmp_path / "out.parquet")
    assert sorted(zip(table.column("n").to_pylist(), table.column("s").to_pylist(), strict=True)) == sorted(
        r for e in epochs for r in e
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv", "out.parquet", "out.txt"]


def test_file_sink_keeps_arrow_and_numpy_batches_columnar(tmp_path: Path) -> None:
    def build(scope: Scope[int]) -> None:
        batches = {0: pa.record_batch({"a": [1, 2]}), 1: pa.record_batch({"a": [3]})}
        file_sink(testing_source(scope, batches), tmp_path / "arrow.parquet")
        file_sink(testing_source(scope, {0: np.array([[1, 2], [3, 4]])}), tmp_path / "np.csv")

    run_dataflow(build, workers=2)
    assert pq.read_table(tmp_path / "arrow.parquet").column("a").to_pylist() == [1, 2, 3]
    assert sorted((tmp_path / "np.csv").read_text().splitlines()) == ["1,2", "3,4"]


def test_a_failed_dataflow_leaves_no_output_and_a_bad_path_is_named(tmp_path: Path) -> None:
    from pytimely.testing import ABORT

    def build(scope: Scope[int]) -> None:
        file_sink(testing_source(scope, [[1], ABORT]), tmp_path / "out.txt")

    with pytest.raises(Exception, match="simulated abort"):
        run_dataflow(build)
    assert not (tmp_path / "out.txt").exists()
    with pytest.raises(OutputPathError):
        run_dataflow(lambda scope: file_sink(testing_source(scope, [[1]]), tmp_path / "no" / "out.txt"))
