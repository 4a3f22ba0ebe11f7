"""Held and late rows of a hosted event-time query: signed files under the checkpoint, written only as they change.

No Spark here: the files are what the hosted processes and the feed tasks write and a later run reads back.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa

from pytimely.errors import CheckpointFileError, CheckpointMismatchError, InvalidArgument
from pytimely.spark.signed_files import read_signed_arrow, write_signed_arrow
from pytimely.spark.stream_checkpoint import StreamCheckpoint
from pytimely.spark.stream_held import clear_held, load_held, write_held


def rows(*pairs: tuple[str, int]) -> pa.Table:
    return pa.table({"word": [w for w, _ in pairs], "epoch": pa.array([e for _, e in pairs], pa.int64())})


def held_rows(table: pa.Table | None) -> list[tuple[str, int]]:
    if table is None:
        return []
    return sorted(zip(table.column("word").to_pylist(), table.column("epoch").to_pylist(), strict=True))


def test_the_checkpoint_key_is_made_once_and_kept_private(tmp_path: Path) -> None:
    checkpoint = StreamCheckpoint(tmp_path / "ck")
    key = checkpoint.key()
    assert len(key) == 32 and checkpoint.key() == key
    assert (checkpoint.own / "key").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in checkpoint.own.iterdir()] == ["key"]  # nothing left aside
    assert StreamCheckpoint(tmp_path / "ck").key() == key  # the next run's
    os.chmod(checkpoint.own / "key", 0o644)
    with pytest.raises(CheckpointFileError, match="readable by it only"):
        StreamCheckpoint(tmp_path / "ck").key()


def test_a_flipped_byte_a_planted_and_a_renamed_file_are_refused_naming_the_file(tmp_path: Path) -> None:
    key = StreamCheckpoint(tmp_path / "ck").key()
    path = tmp_path / "late" / "s00000.arrow"
    table = rows(("a", 1), ("b", 2))
    with pytest.raises(InvalidArgument, match="at least 16 bytes"):
        write_signed_arrow(path, table, b"")  # no key is no signature
    write_signed_arrow(path, table, key)
    assert read_signed_arrow(path, key).equals(table)
    data = bytearray(path.read_bytes())
    for at in (len(data) // 2, len(data) - 1, 30):  # the body, its end, the MAC
        flipped = bytearray(data)
        flipped[at] ^= 0x01
        path.write_bytes(bytes(flipped))
        with pytest.raises(CheckpointFileError, match=r"s00000\.arrow is not signed"):
            read_signed_arrow(path, key)
    path.write_bytes(bytes(data[: len(data) - 8]))
    with pytest.raises(CheckpointFileError, match=r"s00000\.arrow"):
        read_signed_arrow(path, key)
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointFileError, match="not signed with the checkpoint's key"):
        read_signed_arrow(path, os.urandom(32))
    renamed = path.with_name("s00001.arrow")
    renamed.write_bytes(bytes(data))
    with pytest.raises(CheckpointFileError, match=r"s00001\.arrow is not signed"):
        read_signed_arrow(renamed, key)
    # A plain Arrow file planted among the held rows, named as a process would name it, is refused before parsing.
    own = tmp_path / "ck" / "pytimely"
    planted = own / "held" / "batch-000000000000-p00000-until9.arrow"
    planted.parent.mkdir(parents=True)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(rows(("planted", 9)))
    planted.write_bytes(sink.getvalue().to_pybytes())
    with pytest.raises(CheckpointFileError, match=r"batch-000000000000-p00000-until9\.arrow is not a signed"):
        load_held(own, key, 0, 0, 0, 1, "epoch")


def test_held_rows_are_written_as_they_change_and_a_crash_before_the_commit_resumes_right(tmp_path: Path) -> None:
    """Micro-batch 0 (frontier 3 after it) holds b@3, c@5; micro-batch 1 (frontier 5) adds d@7 in another
    process and a file is written for it before a crash, its commit never made: the rows held after micro-batch 0
    come back, micro-batch 1's file is removed, and only what each micro-batch added was ever written."""
    own = tmp_path / "ck" / "pytimely"
    key = StreamCheckpoint(tmp_path / "ck").key()
    write_held(own, key, 0, 0, rows(("a", 1), ("b", 3)), "epoch", 3)
    write_held(own, key, 0, 1, rows(("c", 5), ("z", 2)), "epoch", 3)
    first = sorted(p.name for p in (own / "held").iterdir())
    assert first == ["batch-000000000000-p00000-until3.arrow", "batch-000000000000-p00001-until5.arrow"]
    # Micro-batch 1: the frontier moves to 5 (b@3 enters its epoch); process 1 adds d@7; then the crash.
    write_held(own, key, 1, 1, rows(("d", 7), ("y", 4)), "epoch", 5)
    after_crash = [load_held(own, key, 0, 3, p, 2, "epoch") for p in range(2)]
    assert held_rows(after_crash[0]) == [("b", 3)] and held_rows(after_crash[1]) == [("c", 5)]
    on_one = load_held(own, key, 0, 3, 0, 1, "epoch")
    assert held_rows(on_one) == [("b", 3), ("c", 5)]  # one process takes up both processes' files
    clear_held(own, 0, 3)
    assert sorted(p.name for p in (own / "held").iterdir()) == first
    # Micro-batch 1 again, committed with frontier 5: b@3's file has nothing left to hold and goes.
    write_held(own, key, 1, 0, rows(("d", 7)), "epoch", 5)
    clear_held(own, 1, 5)
    assert sorted(p.name for p in (own / "held").iterdir()) == [
        "batch-000000000000-p00001-until5.arrow",
        "batch-000000000001-p00000-until7.arrow",
    ]
    assert held_rows(load_held(own, key, 1, 5, 0, 1, "epoch")) == [("c", 5), ("d", 7)]
    assert load_held(own, key, -1, 0, 0, 1, "epoch") is None
    (own / "held" / "batch-000000000001").mkdir()  # the earlier layout, whose rows this one would not find
    with pytest.raises(CheckpointMismatchError, match="batch-000000000001 holds held rows in an earlier layout"):
        clear_held(own, 1, 5)
