"""The streaming jobs through ``spark://`` on a real standalone cluster (one worker, one core): the examples'
``main(argv)`` in a driver of their own on the cluster, one run after another on its one session (a rerun starts
its query again from the checkpoint, as a new driver would)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.spark.test_streaming import drop, edge_csv, random_edges, read_changelog, reference_changelog

# Each example's run is bounded at 300 s; the test runs three of them in turn, which a heavily loaded machine can
# stretch past the suite's 600 s a test.
pytestmark = pytest.mark.timeout(1200)


def test_streaming_jobs_through_spark_standalone_equal_their_references(
    standalone: Any, standalone_driver: Any, tmp_path: Path
) -> None:
    """stream_wcc over two rounds of files and stream_wordcount on ``spark://``, the dataflow on the driver."""
    import random
    from collections import Counter

    rng = random.Random(23)
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    rounds = []
    for number in range(2):
        edges = random_edges(rng, rng.randint(5, 25))
        drop(incoming, f"r{number}.csv", edge_csv(edges), number)
        rounds.append(edges)
        done = standalone_driver.run(
            "stream_wcc",
            [
                "--processes",
                "0",
                "--spark",
                standalone.url,
                "--edges-dir",
                str(incoming),
                "--output",
                str(out),
                "--checkpoint",
                str(ck),
                "--available-now",
            ],
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert read_changelog(out) == reference_changelog(rounds)

    texts, counted, ck2 = tmp_path / "text", tmp_path / "counted", tmp_path / "ck2"
    lines = ["the fox", "the dog and the fox", "é é x"]
    drop(texts, "t0.txt", "\n".join(lines) + "\n", 0)
    done = standalone_driver.run(
        "stream_wordcount",
        [
            "--processes",
            "0",
            "--spark",
            standalone.url,
            "--text-dir",
            str(texts),
            "--output",
            str(counted),
            "--checkpoint",
            str(ck2),
            "--available-now",
        ],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split(",") for p in sorted(counted.glob("batch-*.csv")) for line in p.read_text().splitlines()[1:]]
    assert sorted((w, int(c)) for _, w, c in rows) == sorted(Counter(" ".join(lines).split()).items())
