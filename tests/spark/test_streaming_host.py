"""The long-lived dataflow behind streaming, without Spark: epochs fed in turn, state kept, state replayed.

References are plain Python: a union-find per epoch for connected components.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from pytimely.algorithms import connected_components
from pytimely.errors import BuildResultError, CheckpointInUseError, InputFormatError
from pytimely.spark.epoch_host import EpochHost
from pytimely.spark.stream_sinks import _csv
from pytimely.spark.streaming import ReplayRestore, StreamCheckpoint

Edges = list[tuple[int, int]]


def components(stream: Any) -> Any:
    return connected_components(
        stream.map_batch(lambda b: np.column_stack([b.column("src").to_numpy(), b.column("dst").to_numpy()]))
    )


def table(edges: Edges, epochs: list[int] | None = None) -> Any:
    columns: dict[str, Any] = {
        "src": pa.array([a for a, _ in edges], pa.int64()),
        "dst": pa.array([b for _, b in edges], pa.int64()),
    }
    if epochs is not None:
        columns["epoch"] = pa.array(epochs, pa.int64())
    return pa.table(columns)


def changes(output: list[tuple[int, Any]]) -> list[tuple[int, int, int]]:
    return sorted((t, int(v), int(label)) for t, batch in output for v, label in np.asarray(batch).tolist())


def union_find_changes(epochs: list[Edges]) -> list[tuple[int, int, int]]:
    """``(epoch, vertex, smallest id of its component)`` whenever that is new or changed at the epoch."""
    parent: dict[int, int] = {}

    def find(v: int) -> int:
        while parent[v] != v:
            v = parent[v]
        return v

    rows, labels = [], {}
    for epoch, edges in enumerate(epochs):
        for a, b in edges:
            parent.setdefault(a, a)
            parent.setdefault(b, b)
            ra, rb = find(a), find(b)
            parent[max(ra, rb)] = min(ra, rb)
        for v in sorted(parent):
            if labels.get(v) != find(v):
                labels[v] = find(v)
                rows.append((epoch, v, labels[v]))
    return rows


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_feed_gives_that_epochs_changes(workers: int, seed: int) -> None:
    rng = random.Random(seed)
    epochs = [[(rng.randrange(50), rng.randrange(50)) for _ in range(rng.randint(0, 15))] for _ in range(8)]
    host = EpochHost(components, workers)
    got = []
    for epoch, edges in enumerate(epochs):
        output = host.feed(table(edges), time=epoch)
        assert all(t == epoch for t, _ in output)
        got += changes(output)
    host.close()
    assert got == union_find_changes(epochs)


def test_an_event_time_column_completes_the_epochs_before_the_largest() -> None:
    host = EpochHost(components, 2)
    first = host.feed(table([(1, 2), (3, 4), (2, 3)], epochs=[0, 2, 1]), epoch="epoch")
    assert changes(first) == [(0, 1, 1), (0, 2, 1), (1, 3, 1)]  # epoch 2 is still open
    assert host.frontier == 2
    with pytest.raises(InputFormatError, match="late"):
        host.feed(table([(7, 8)], epochs=[1]), epoch="epoch")
    second = host.feed(table([(0, 5)], epochs=[3]), epoch="epoch")
    assert changes(second) == [(2, 4, 1)]
    third = host.feed(table([(9, 9)], epochs=[5]), epoch="epoch")
    assert changes(third) == [(3, 0, 0), (3, 5, 0)]  # nothing at epoch 4
    host.close()


def test_replaying_staged_inputs_restores_the_state(tmp_path: Path) -> None:
    """A fresh dataflow fed the staged inputs of batches 0..k-1 answers batch k as the long-lived one did."""
    rng = random.Random(4)
    epochs = [[(rng.randrange(30), rng.randrange(30)) for _ in range(6)] for _ in range(6)]
    checkpoint = StreamCheckpoint(tmp_path)
    checkpoint.inputs.mkdir(parents=True)
    original = EpochHost(components, 2)
    outputs = []
    for epoch, edges in enumerate(epochs):
        checkpoint.stage(epoch, table(edges))
        outputs.append(changes(original.feed(table(edges), time=epoch)))
    for k in range(1, len(epochs)):
        fresh = EpochHost(components, 1)
        ReplayRestore(checkpoint).restore(fresh, list(range(k)))
        assert changes(fresh.feed(checkpoint.staged(k), time=k)) == outputs[k]


def test_csv_output_quotes_text_only_where_needed() -> None:
    text = pa.table({"epoch": [1, 1], "word": ["a,b", 'say "x"'], "count": [1, 2]})
    assert _csv(text) == b'epoch,word,count\n1,"a,b",1\n1,"say ""x""",2\n'
    assert _csv(pa.table({"epoch": [0], "vertex": [3], "label": [1]})) == b"epoch,vertex,label\n0,3,1\n"


def test_a_checkpoint_held_by_one_run_is_refused_to_another(tmp_path: Path) -> None:
    checkpoint = StreamCheckpoint(tmp_path / "ck")
    other = StreamCheckpoint(tmp_path / "ck")
    with (
        checkpoint.locked(jvm_pid=None),
        pytest.raises(CheckpointInUseError, match="in use by another run"),
        other.locked(jvm_pid=None),
    ):
        pass
    with checkpoint.locked(jvm_pid=None):  # released when the run ends
        pass


def test_a_killed_runs_jvm_is_awaited_before_the_checkpoint_is_used(tmp_path: Path) -> None:
    checkpoint = StreamCheckpoint(tmp_path / "ck")
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with checkpoint.locked(jvm_pid=leftover.pid):
            pass  # the run "dies" leaving its JVM behind
        with (
            pytest.raises(CheckpointInUseError, match=f"pid {leftover.pid}"),
            checkpoint.locked(jvm_pid=None, wait=0.3),
        ):
            pass
    finally:
        leftover.kill()
        leftover.wait(timeout=30)
    with checkpoint.locked(jvm_pid=None, wait=5.0):
        pass


def test_a_build_that_returns_no_stream_is_a_typed_error_naming_what_it_returned() -> None:
    """``build`` must return its output Stream; anything else is refused when the dataflow is made."""
    with pytest.raises(BuildResultError, match="returned NoneType"):
        EpochHost(lambda stream: None)
    with pytest.raises(TypeError):  # still a TypeError for callers that caught one
        EpochHost(lambda stream: [stream])
