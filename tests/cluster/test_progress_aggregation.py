"""Progress aggregated per process on real processes: the same results, batches of several workers combined.

With aggregation (the default for a fixed cluster) a worker's progress batch crosses to another process once,
combined with the batches the process's other workers send in the same round, and is handed there to every worker;
without it (``PYTIMELY_AGGREGATE_PROGRESS=0``) the batch crosses once per worker there (seed 002 §3.3, footnote 4).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.cluster.helpers import Cluster, report

EPOCHS, ROWS = 6, 400


def expected() -> Counter[str]:
    """What the job counts over every worker of a 2 x 3 cluster."""
    total: Counter[str] = Counter()
    for worker in range(6):
        for epoch in range(EPOCHS):
            total.update(f"w{(worker * 7 + epoch * 13 + i * i) % 97}" for i in range(ROWS))
    return total


def _count(record: dict[str, object], name: str) -> int:
    value = record[name]
    assert isinstance(value, int), (name, value)
    return value


def run(tmp_path: Path, **env: str) -> list[dict[str, object]]:
    cluster = Cluster(2, workers="3", **env)
    try:
        cluster.start(["tests.cluster.jobs:progress_traffic", str(tmp_path), str(EPOCHS), str(ROWS)])
        results = cluster.wait(timeout=120)
    finally:
        cluster.kill()
    assert [r[0] for r in results] == [0, 0], report(results)
    return [json.loads((tmp_path / f"worker-{w}.json").read_text()) for w in range(6)]


@pytest.mark.parametrize(
    "env",
    [
        {"PYTIMELY_AGGREGATE_PROGRESS": "1"},
        {"PYTIMELY_AGGREGATE_PROGRESS": "0"},
        # Elastic clusters combine too: a newcomer hears from every other process's aggregate sender (the rescale
        # model's aggregated senders; tests/lockstep/test_rescale_lockstep.py).
        {"PYTIMELY_ELASTIC": "1"},
    ],
    ids=["aggregated", "per-worker", "elastic"],
)
def test_progress_crosses_to_a_process_once_per_batch_or_combined(tmp_path: Path, env: dict[str, str]) -> None:
    records = run(tmp_path, **env)
    counts: Counter[str] = Counter()
    for record in records:
        owned = record["counts"]
        assert isinstance(owned, dict)
        assert not set(owned) & set(counts), "a key counted by two workers"
        counts.update(owned)
    assert counts == expected()
    for record in records:
        assert isinstance(record["batches"], int) and record["batches"] > EPOCHS, record
    for process in range(2):
        mine = records[3 * process : 3 * process + 3]
        batches = sum(_count(r, "batches") for r in mine)
        frames = sum(_count(r, "frames") for r in mine)
        combined = max(_count(r, "combined") for r in mine)
        if env.get("PYTIMELY_AGGREGATE_PROGRESS") == "0":
            # One frame per batch and worker of the other process.
            assert frames == 3 * batches and not combined, (process, frames, batches)
        else:
            # A worker's batch wakes the process's other workers (it is pushed to their mailboxes), and waits for
            # their steps: batches of several workers leave as one.
            assert combined > 0 and frames < batches, (process, frames, batches, combined)


def test_processes_that_disagree_on_aggregating_are_refused_at_the_handshake(tmp_path: Path) -> None:
    cluster = Cluster(2, workers="2", PYTIMELY_CONNECT_TIMEOUT="5")
    try:
        cluster.start(
            ["tests.cluster.jobs:progress_traffic", str(tmp_path), "2", "10"],
            env={1: {"PYTIMELY_AGGREGATE_PROGRESS": "0"}},
        )
        results = cluster.wait(timeout=60)
    finally:
        cluster.kill()
    assert all(code != 0 for code, _, _ in results), report(results)
    assert any("PYTIMELY_AGGREGATE_PROGRESS" in err for _, _, err in results), report(results)
    assert not list(tmp_path.glob("worker-*.json"))


@pytest.mark.parametrize("elastic", ["1", "0"], ids=["elastic", "fixed"])
def test_a_broadcast_reaches_every_worker_once_and_crosses_to_a_process_once(tmp_path: Path, elastic: str) -> None:
    # A channel's push ends serialise a broadcast batch once and send it to each other process once, handed there
    # to each of its workers: one frame per batch from a worker to the other process, not one per worker there.
    cluster = Cluster(2, workers="3", PYTIMELY_ELASTIC=elastic)
    try:
        cluster.start(["tests.cluster.jobs:broadcast_traffic", str(tmp_path), "3", "40"])
        results = cluster.wait(timeout=120)
    finally:
        cluster.kill()
    assert [r[0] for r in results] == [0, 0], report(results)
    everything = sorted([w, e, i] for w in range(6) for e in range(3) for i in range(40))
    for worker in range(6):
        record = json.loads((tmp_path / f"worker-{worker}.json").read_text())
        assert record["received"] == everything, worker
        assert record["frames"] == 3, (worker, record["frames"])


@pytest.mark.parametrize("elastic", ["1", "0"], ids=["elastic", "fixed"])
def test_a_broadcast_of_arrays_crosses_to_a_process_once_and_each_worker_there_gets_its_own(
    tmp_path: Path, elastic: str
) -> None:
    # 20,000 int64 (160 KB) a batch: through the shared-memory ring, rebuilt on the received bytes as numpy arrays.
    cluster = Cluster(2, workers="3", PYTIMELY_ELASTIC=elastic)
    try:
        cluster.start(["tests.cluster.jobs:broadcast_arrays", str(tmp_path), "3", "20000"])
        results = cluster.wait(timeout=120)
    finally:
        cluster.kill()
    assert [r[0] for r in results] == [0, 0], report(results)
    everything = sorted(1000 * w + e for w in range(6) for e in range(3))
    for worker in range(6):
        record = json.loads((tmp_path / f"worker-{worker}.json").read_text())
        assert record["spoiled"] == [], (worker, record["spoiled"])
        assert record["values"] == everything, worker
        assert record["frames"] == 3, (worker, record["frames"])
