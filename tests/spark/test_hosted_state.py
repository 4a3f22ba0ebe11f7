"""A streaming query's state and its snapshots: never a silent fresh start; a damaged snapshot passed over loudly."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pytimely.errors import InvalidArgument, StreamStateLostError
from pytimely.recovery import RecoveryWarning
from pytimely.recovery.manifest import epoch_of
from pytimely.spark.streaming import StreamCheckpoint
from tests.spark.test_hosted_stream import count_words
from tests.spark.test_streaming import drop, load

FILES = ["a a b\n", "a c\n", "a b\n"]


def counts(out: Path, batch: int) -> dict[str, int]:
    """The word counts micro-batch ``batch`` wrote to the CSV folder ``out``."""
    with (out / f"batch-{batch:012d}.csv").open(newline="", encoding="utf-8") as handle:
        return {row["word"]: int(row["count"]) for row in csv.DictReader(handle)}


def test_a_stateful_query_without_its_snapshots_is_refused_unless_started_fresh(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the word-count example's command line: the state store deleted after two committed micro-batches,
    the next run stops before the query starts with exit status 3 and one line naming StreamStateLostError, the
    checkpoint, the last committed micro-batch and the snapshots found (none), and writes nothing;
    ``--recovery-mode fresh`` then counts from empty state; the components example refuses the same way.
    Driver-hosted (the same check runs for the executors). ~20 s."""
    wordcount = load("stream_wordcount")
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    args = ["--spark", "local[2]", "--text-dir", str(incoming), "--output", str(out), "--checkpoint", str(ck),
            "--available-now", "--files-per-batch", "1", "--processes", "0"]  # fmt: skip
    for k in range(2):
        drop(incoming, f"t{k:03d}.txt", FILES[k], k)
    assert wordcount.main(args) == 0
    shutil.rmtree(ck / "pytimely" / "state")
    drop(incoming, "t002.txt", FILES[2], 2)
    capsys.readouterr()
    assert wordcount.main(args) == 3
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and said.startswith("stream_wordcount: StreamStateLostError: "), said
    assert str(ck) in said and "micro-batches up to 1" in said and "found: none" in said, said
    assert "--recovery-mode fresh" in said and "Traceback" not in said, said
    assert StreamCheckpoint(ck).last_committed() == 1 and not (out / "batch-000000000002.csv").exists()
    with pytest.raises(InvalidArgument, match="recovery_mode"):
        count_words(spark, incoming, out, ck, recovery_mode="again")
    assert wordcount.main([*args, "--recovery-mode", "fresh"]) == 0
    assert counts(out, 2) == {"a": 1, "b": 1}, "the state started over"
    # The components example says the same at its command line.
    stream_wcc = load("stream_wcc")
    edges, ck = tmp_path / "edges", tmp_path / "wcc-ck"
    args = ["--spark", "local[2]", "--edges-dir", str(edges), "--output", str(tmp_path / "wcc"), "--checkpoint",
            str(ck), "--available-now", "--processes", "0"]  # fmt: skip
    drop(edges, "e0.csv", "src,dst\n1,2\n", 0)
    assert stream_wcc.main(args) == 0
    shutil.rmtree(ck / "pytimely" / "state")
    drop(edges, "e1.csv", "src,dst\n2,3\n", 1)
    capsys.readouterr()
    assert stream_wcc.main(args) == 3
    said = capsys.readouterr().err
    assert said.startswith("stream_wcc: StreamStateLostError: ") and said.count("\n") == 1, said
    assert "--recovery-mode fresh" in said and "micro-batches up to 0" in said, said


def test_a_hosted_query_passes_a_damaged_snapshot_over_with_warnings_and_refuses_when_none_is_left(
    spark: Any, tmp_path: Path
) -> None:
    """Hosted on the executors: the snapshot of the last committed micro-batch damaged, the next run resumes from
    the one before it, warning about the damaged file and naming the committed micro-batch the state now lacks
    (its counts show it); with every snapshot damaged the run is refused, naming the files it found and why, and
    ``recovery_mode="fresh"`` starts the processes from empty state. ~60 s."""
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    for k in range(2):
        drop(incoming, f"t{k:03d}.txt", FILES[k], k)
    assert count_words(spark, incoming, out, ck, processes=1).processed == [0, 1]
    manifests = ck / "pytimely" / "state" / "manifests"
    newest = max((p for p in manifests.iterdir() if (epoch_of(p.name) or 99) <= 1), key=lambda p: p.name)
    assert epoch_of(newest.name) == 1, sorted(p.name for p in manifests.iterdir())
    newest.write_bytes(b"not a manifest")
    drop(incoming, "t002.txt", FILES[2], 2)
    with pytest.warns(RecoveryWarning) as warned:
        assert count_words(spark, incoming, out, ck, processes=1).processed == [2]
    said = " | ".join(str(w.message) for w in warned)
    assert newest.name in said and "micro-batches 1..1 are missing from the state" in said, said
    assert counts(out, 2) == {"a": 3, "b": 2}, "resumed from micro-batch 0's state: micro-batch 1's rows are lost"
    for path in manifests.iterdir():
        path.write_bytes(b"damaged")
    drop(incoming, "t003.txt", "c\n", 3)
    with pytest.raises(StreamStateLostError, match="micro-batches up to 2") as refused:
        count_words(spark, incoming, out, ck, processes=1)
    assert all(p.name in str(refused.value) for p in manifests.iterdir()), str(refused.value)
    assert "is damaged" in str(refused.value) and "starting over" not in str(refused.value), str(refused.value)
    assert StreamCheckpoint(ck).last_committed() == 2
    assert count_words(spark, incoming, out, ck, processes=1, recovery_mode="fresh").processed == [3]
    assert counts(out, 3) == {"c": 1}, "the hosted processes started from empty state"
