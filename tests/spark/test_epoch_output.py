"""A stream's output by epoch: parts written by separate processes, an epoch committed whole, read back whole.

Real files, real processes (killed with SIGKILL mid-part), the moto S3 server and a real SparkSession.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pytimely.errors import InvalidArgument, StreamSinkError
from pytimely.spark.epoch_output import (
    EpochOutput,
    OutputCommitError,
    OutputCorruptError,
    OutputSchemaError,
    Part,
)

SCHEMA = pa.schema([("epoch", pa.int64()), ("word", pa.string()), ("count", pa.int64())])


def counts(epoch: int, words: dict[str, int]) -> pa.Table:
    """An ``epoch,word,count`` table."""
    return pa.table({"epoch": [epoch] * len(words), "word": list(words), "count": list(words.values())}, SCHEMA)


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """The table's rows as tuples, sorted."""
    return sorted(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.parametrize("format", ["parquet", "csv"])
def test_committed_epochs_read_back_in_order_and_an_uncommitted_one_is_not_seen(tmp_path: Path, format: str) -> None:
    out = EpochOutput(tmp_path / "out", SCHEMA, format=format)
    out.prepare()
    tricky = {"plain": 1, "a,comma": 2, 'a "quote"': 3, "": 4}
    for epoch in (0, 1, 3):
        a = out.write_part(epoch, "p0", counts(epoch, tricky if epoch == 1 else {"x": epoch}))
        b = out.write_part(epoch, "p1", counts(epoch, {"y": 10 + epoch}))
        out.commit(epoch, [a, b])
    out.write_part(4, "p0", counts(4, {"never": 1}))  # written, never committed
    assert out.committed() == [0, 1, 3] and out.last_committed() == 3
    read = out.read()
    assert read.schema.equals(SCHEMA)
    assert read.column("epoch").to_pylist() == [0, 0] + [1] * 5 + [3, 3]
    assert rows(out.read(1)) == rows(pa.concat_tables([counts(1, tricky), counts(1, {"y": 11})]))
    assert "never" not in read.column("word").to_pylist()
    with pytest.raises(OutputCommitError, match="epoch 4 is not committed"):
        out.read(4)
    if format == "csv":  # the examples' contract: a header, then rows a person can read
        text = (tmp_path / "out" / "epoch-000000000003" / "part-p1.csv").read_text()
        assert text == "epoch,word,count\n3,y,13\n"


def test_an_output_on_s3_round_trips_and_is_written_in_one_put_per_part(s3_server: Any) -> None:
    import s3fs

    url = f"s3://{s3_server.bucket}/epoch-output/round-trip"
    out = EpochOutput(url, SCHEMA, format="csv", storage_options=s3_server.options())
    out.prepare()
    parts = [out.write_part(0, f"p{i}", counts(0, {f"w{i}": i})) for i in range(3)]
    out.commit(0, parts)
    out.commit(0, parts)  # idempotent
    out.write_part(1, "p0", counts(1, {"late": 1}))
    assert out.committed() == [0]
    assert rows(out.read()) == [(0, "w0", 0), (0, "w1", 1), (0, "w2", 2)]
    fs = s3fs.S3FileSystem(**s3_server.options())
    names = sorted(p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1] for p in fs.find(url))
    assert "epoch-000000000000/part-p2.csv" in names and not any(n.endswith(".tmp") for n in names)
    assert "_spark_metadata/0" in names  # read by Spark as s3a://
    assert out.discard_uncommitted() == ["epoch-000000000001"]
    fs.invalidate_cache()
    assert not fs.exists(f"{url}/epoch-000000000001/part-p0.csv")
    # An executor gets the output pickled and opens the same bucket.
    again = pickle.loads(pickle.dumps(out))
    assert again.committed() == [0] and rows(again.read()) == rows(out.read())


def _write_parts(url: str, epoch: int, worker: int, parts: int, queue: Any) -> None:
    """A writer process: its parts of ``epoch``, described as JSON lines for the driver."""
    out = EpochOutput(url, SCHEMA)
    for i in range(parts):
        table = counts(epoch, {f"w{worker}-{i}-{j}": j for j in range(500)})
        queue.put(out.write_part(epoch, f"w{worker}-{i}", table).to_json())


def test_parts_written_by_several_processes_at_once_are_committed_as_one_epoch(tmp_path: Path) -> None:
    url = (tmp_path / "out").as_uri()
    out = EpochOutput(url, SCHEMA)
    out.prepare()
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    writers = [context.Process(target=_write_parts, args=(url, 5, w, 4, queue)) for w in range(3)]
    for writer in writers:
        writer.start()
    described = [Part.from_json(queue.get(timeout=120)) for _ in range(12)]
    for writer in writers:
        writer.join(timeout=120)
        assert writer.exitcode == 0
    out.commit(5, described)
    assert out.committed() == [5]
    read = out.read(5)
    assert read.num_rows == 12 * 500 and len(set(read.column("word").to_pylist())) == 12 * 500
    assert {p.name for p in out.parts(5)} == {f"w{w}-{i}" for w in range(3) for i in range(4)}


def _stall_before_rename(url: str, started: Any) -> None:
    """A writer process that has written its part's bytes and stops just before the rename (then is killed)."""
    import time

    def stall(*_: Any) -> None:
        started.set()
        time.sleep(600)

    os.replace = stall  # the part's temporary file is complete; the rename never comes
    EpochOutput(url, SCHEMA).write_part(2, "p0", counts(2, {"half": 1}))


def test_a_writer_killed_mid_part_leaves_nothing_visible_and_discard_removes_it(tmp_path: Path) -> None:
    out = EpochOutput(tmp_path / "out", SCHEMA)
    out.prepare()
    out.commit(1, [out.write_part(1, "p0", counts(1, {"kept": 1}))])
    context = multiprocessing.get_context("spawn")
    started = context.Event()
    writer = context.Process(target=_stall_before_rename, args=(str(tmp_path / "out"), started))
    writer.start()
    try:
        assert started.wait(timeout=120)
    finally:
        os.kill(writer.pid or 0, signal.SIGKILL)
        writer.join(timeout=60)
    assert writer.exitcode == -signal.SIGKILL
    left = list((tmp_path / "out" / "epoch-000000000002").iterdir())
    assert len(left) == 1 and left[0].name.startswith(".part-p0.parquet.") and left[0].name.endswith(".tmp")
    assert out.committed() == [1] and rows(out.read()) == [(1, "kept", 1)]
    with pytest.raises(OutputCommitError, match=r"part epoch-000000000002/part-p0\.parquet is not there"):
        out.commit(2, [Part(2, "p0", "epoch-000000000002/part-p0.parquet", 1, left[0].stat().st_size, "0")])
    assert out.discard_uncommitted() == ["epoch-000000000002"]
    assert not (tmp_path / "out" / "epoch-000000000002").exists()
    assert rows(out.read()) == [(1, "kept", 1)]


def test_a_commit_is_idempotent_and_removes_earlier_attempts(tmp_path: Path) -> None:
    out = EpochOutput(tmp_path / "out", SCHEMA, format="csv", order_by=["word"])
    out.prepare()
    out.write_part(0, "attempt-1", counts(0, {"z": 1}))  # a failed attempt's part, never committed
    first = out.write_part(0, "p0", counts(0, {"b": 1, "a": 2}))
    retried = out.write_part(0, "p0", counts(0, {"b": 1, "a": 2}))  # a retried task writes the same part again
    assert retried == first
    out.commit(0, [retried])
    out.commit(0, [first])
    assert sorted(p.name for p in (tmp_path / "out" / "epoch-000000000000").iterdir()) == ["part-p0.csv"]
    assert out.read().column("word").to_pylist() == ["a", "b"]  # sorted by order_by
    other = out.write_part(0, "p1", counts(0, {"c": 3}))
    with pytest.raises(OutputCommitError, match="committed already with other parts"):
        out.commit(0, [first, other])
    out.commit(2, [out.write_part(2, "p0", counts(2, {"x": 1}))])
    with pytest.raises(OutputCommitError, match="increasing order"):
        out.commit(1, [out.write_part(1, "p0", counts(1, {"x": 1}))])


def test_bad_outputs_are_refused_with_typed_errors_naming_them(tmp_path: Path) -> None:
    with pytest.raises(StreamSinkError, match="ftp://"):
        EpochOutput("ftp://host/out", SCHEMA)
    with pytest.raises(InvalidArgument, match="format"):
        EpochOutput(tmp_path / "x", SCHEMA, format="json")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "taken").write_text("a file where the output's folder would be\n")
    with pytest.raises(StreamSinkError, match="taken/out cannot be written"):
        EpochOutput(tmp_path / "taken" / "out", SCHEMA).prepare()
    out = EpochOutput(tmp_path / "out", SCHEMA)
    out.prepare()
    out.commit(0, [out.write_part(0, "p0", counts(0, {"x": 1}))])
    other = pa.schema([("epoch", pa.int64()), ("vertex", pa.int64()), ("label", pa.int64())])
    with pytest.raises(OutputSchemaError, match=r"holds parquet output of \(epoch int64, word string"):
        EpochOutput(tmp_path / "out", other).prepare()
    with pytest.raises(OutputSchemaError, match="not csv output"):
        EpochOutput(tmp_path / "out", SCHEMA, format="csv").prepare()
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "batch-000000000000.csv").write_text("epoch,word,count\n")
    with pytest.raises(OutputSchemaError, match="not a pytimely output"):
        EpochOutput(tmp_path / "foreign", SCHEMA).prepare()
    with pytest.raises(OutputSchemaError, match="columns"):
        out.write_part(1, "p0", pa.table({"epoch": [1], "vertex": [2], "label": [3]}))
    # A manifest may name only parts that are there, as they were written.
    gone = out.write_part(1, "p0", counts(1, {"x": 1}))
    (tmp_path / "out" / gone.path).unlink()
    with pytest.raises(OutputCommitError, match=r"part epoch-000000000001/part-p0\.parquet is not there"):
        out.commit(1, [gone])
    replaced = out.write_part(1, "p0", counts(1, {"x": 1}))
    out.write_part(1, "p0", counts(1, {"a much longer word than before": 1}))
    with pytest.raises(OutputCommitError, match="another attempt replaced it"):
        out.commit(1, [replaced])
    assert out.committed() == [0]
    # A committed part changed behind the manifest's back is found when read.
    (tmp_path / "out" / "epoch-000000000000" / "part-p0.parquet").write_bytes(b"PAR1 not parquet")
    with pytest.raises(OutputCorruptError, match="CRC-32"):
        out.read()
