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
    args = ["--processes", "0",
            "--spark", "local[2]", "--text-dir", str(incoming), "--output", str(out), "--checkpoint", str(ck),
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
    args = ["--processes", "0",
            "--spark", "local[2]", "--edges-dir", str(incoming), "--output", str(out), "--checkpoint", str(ck),
            "--available-now", "--files-per-batch", "1"]  # fmt: skip
    assert stream_wcc.main(args) == 0
    assert len(list(out.glob("batch-*.csv"))) == 16
    payloads = list((ck / "pytimely" / "state" / "snapshots").iterdir())
    assert len(payloads) <= 5, sorted(p.name for p in payloads)


def _windows(stream: Any) -> Any:
    """Sessions of each text key's events (event time in column ``t``), each summing its ``v``s: open sessions are
    state that outlives a micro-batch."""
    return stream.session(1, time="t", key="k", value="v", aggregate="sum", name="sessions")


def _window_run(spark: Any, incoming: Path, out: Path, ck: Path, workers: int) -> None:
    from pytimely.spark.streaming import CsvDirectorySink, run_stream

    source = (
        spark.readStream.schema("t long, k string, v long").option("header", True)
        .option("maxFilesPerTrigger", 1).csv(str(incoming))
    )  # fmt: skip
    run_stream(
        _windows, source, "epoch long, first long, after long, k string, total long",
        sink=CsvDirectorySink(out, order_by=["first", "k"]), checkpoint=ck, query="sessions", workers=workers,
        available_now=True,
    )


def test_open_windows_of_arrow_batches_survive_restarts_on_other_workers(spark: Any, tmp_path: Path) -> None:
    """Streaming, recovery, rescaling, windows and Arrow together: Spark hands each micro-batch over as Arrow
    (a text key column), sessions stay open across micro-batches, and runs stopped after micro-batches 2 and 4
    and resumed on 1, then 3 workers write the changelog of one uninterrupted run on 2."""
    rng = random.Random(5)
    files = []
    for b in range(7):
        # Events at the micro-batch's own time, of two of five keys: a key missing from the next micro-batch
        # closes its session there, one present carries it on into the next run.
        keys = rng.sample("abcdé", 2)
        rows = [(b, rng.choice(keys), rng.randrange(-5, 50)) for _ in range(25)]
        files.append("t,k,v\n" + "".join(f"{t},{k},{v}\n" for t, k, v in rows))
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    for b, text in enumerate(files):
        drop(whole / "in", f"e{b}.csv", text, b)
    _window_run(spark, whole / "in", whole / "out", whole / "ck", 2)
    for b, text in enumerate(files):
        if b in (2, 4):
            _window_run(spark, parts / "in", parts / "out", parts / "ck", 1 if b == 2 else 3)
        drop(parts / "in", f"e{b}.csv", text, b)
    _window_run(spark, parts / "in", parts / "out", parts / "ck", 3)
    expected = {p.name: p.read_bytes() for p in sorted((whole / "out").iterdir())}
    assert len(expected) == 7
    assert sum(len(v.splitlines()) - 1 for v in expected.values()) >= 5, "sessions closed along the way"
    assert {p.name: p.read_bytes() for p in sorted((parts / "out").iterdir())} == expected
