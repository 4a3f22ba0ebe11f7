"""A stream's state lives in snapshots under its checkpoint: bounded by the state, not by the history.

Micro-batch ``b``'s state is snapshotted at epoch ``b`` and durable before its output is committed; a restart
resumes from the snapshot of the last committed micro-batch (on any number of workers: bins move) instead of
replaying every input, and no input is kept.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from tests.spark.test_streaming import drop, load


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _run(wordcount: Any, incoming: Path, out: Path, ck: Path, workers: int) -> None:
    args = ["--spark", "local[2]", "--text-dir", str(incoming), "--output", str(out), "--checkpoint", str(ck),
            "--available-now", "--files-per-batch", "1", "-w", str(workers)]  # fmt: skip
    assert wordcount.main(args) == 0


def test_the_checkpoint_does_not_grow_with_the_history(spark: Any, tmp_path: Path) -> None:
    """Six micro-batches over one vocabulary leave a checkpoint at most 1.5x the one left by two."""
    wordcount = load("stream_wordcount")
    rng = random.Random(11)
    vocabulary = [f"word{k:05d}" for k in range(3000)]
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    for k in range(6):
        if k == 2:
            _run(wordcount, incoming, out, ck, 2)
            after_two = _size(ck)
        words = vocabulary[:]
        rng.shuffle(words)
        drop(incoming, f"t{k}.txt", " ".join(words) + "\n", k)
    _run(wordcount, incoming, out, ck, 2)
    assert len(list(out.glob("batch-*.csv"))) == 6
    assert not (ck / "pytimely" / "inputs").exists()
    assert _size(ck) <= 1.5 * after_two, (after_two, _size(ck))


def test_a_restart_on_other_workers_gives_the_uninterrupted_changelog(spark: Any, tmp_path: Path) -> None:
    wordcount = load("stream_wordcount")
    rng = random.Random(4)
    vocabulary = [f"w{k}" for k in range(40)]
    texts = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(5, 60))) + "\n" for _ in range(6)]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    for k, text in enumerate(texts):
        drop(whole / "in", f"t{k}.txt", text, k)
    _run(wordcount, whole / "in", whole / "out", whole / "ck", 2)
    for k, text in enumerate(texts):
        if k in (3, 5):
            _run(wordcount, parts / "in", parts / "out", parts / "ck", 1 if k == 3 else 2)
        drop(parts / "in", f"t{k}.txt", text, k)
    _run(wordcount, parts / "in", parts / "out", parts / "ck", 3)
    expected = {p.name: p.read_bytes() for p in sorted((whole / "out").iterdir())}
    assert len(expected) == 6
    assert {p.name: p.read_bytes() for p in sorted((parts / "out").iterdir())} == expected
    assert not (parts / "ck" / "pytimely" / "inputs").exists()


def test_a_growing_graphs_checkpoint_holds_a_few_copies_of_its_state(spark: Any, tmp_path: Path) -> None:
    """Components (two stateful operators): each keeps its own turn in rewriting unchanged bins, so no payload
    file stays needed for longer than the rotation (four snapshots), however long the history."""
    stream_wcc = load("stream_wcc")
    rng = random.Random(8)
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    for k in range(16):
        edges = "".join(f"{rng.randrange(3000)},{rng.randrange(3000)}\n" for _ in range(300))
        drop(incoming, f"e{k:02d}.csv", "src,dst\n" + edges, k)
    args = ["--spark", "local[2]", "--edges-dir", str(incoming), "--output", str(out), "--checkpoint", str(ck),
            "--available-now", "--files-per-batch", "1"]  # fmt: skip
    assert stream_wcc.main(args) == 0
    assert len(list(out.glob("batch-*.csv"))) == 16
    payloads = list((ck / "pytimely" / "state" / "snapshots").iterdir())
    assert len(payloads) <= 5, sorted(p.name for p in payloads)
