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
from tests.spark.test_streaming import drop

FILES = ["a a b\n", "a c\n", "a b\n"]


def counts(out: Path, batch: int) -> dict[str, int]:
    """The word counts micro-batch ``batch`` wrote to the CSV folder ``out``."""
    with (out / f"batch-{batch:012d}.csv").open(newline="", encoding="utf-8") as handle:
        return {row["word"]: int(row["count"]) for row in csv.DictReader(handle)}


def test_a_stateful_query_without_its_snapshots_is_refused_unless_started_fresh(spark: Any, tmp_path: Path) -> None:
    """The state store deleted after two committed micro-batches: the next run stops before the query starts with
    StreamStateLostError naming the checkpoint, the last committed micro-batch and the snapshots found (none), and
    writes nothing; ``recovery_mode="fresh"`` then counts from empty state. Driver-hosted (the same check runs
    for the executors). ~15 s."""
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    for k in range(2):
        drop(incoming, f"t{k:03d}.txt", FILES[k], k)
    assert count_words(spark, incoming, out, ck).processed == [0, 1]
    shutil.rmtree(ck / "pytimely" / "state")
    drop(incoming, "t002.txt", FILES[2], 2)
    with pytest.raises(StreamStateLostError) as refused:
        count_words(spark, incoming, out, ck)
    message = str(refused.value)
    assert str(ck) in message and "micro-batches up to 1" in message and "found: none" in message, message
    assert "recovery_mode='fresh'" in message, message
    assert StreamCheckpoint(ck).last_committed() == 1 and not (out / "batch-000000000002.csv").exists()
    with pytest.raises(InvalidArgument, match="recovery_mode"):
        count_words(spark, incoming, out, ck, recovery_mode="again")
    assert count_words(spark, incoming, out, ck, recovery_mode="fresh").processed == [2]
    assert counts(out, 2) == {"a": 1, "b": 1}, "the state started over"


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
