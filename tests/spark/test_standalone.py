"""The batch and streaming jobs through ``spark://`` on a real standalone cluster (one worker, one core), and its
slot limit.

The examples' ``main(argv)`` run in a driver of their own on the cluster (``standalone_driver``), one after another
on its one session (a rerun of a stream starts its query again from the checkpoint, as a new driver would): one
cluster, one driver JVM and one executor for the module. The command lines as processes of their own are run in
``test_connect.py``, ``test_streaming.py`` and ``test_hosted_faults.py``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.spark.test_hosting import wcc, wordcount
from tests.spark.test_streaming import drop, edge_csv, random_edges, read_changelog, reference_changelog

# Each example's run is bounded at 300 s; a test runs up to three of them in turn (and the first starts the
# driver's session), which a heavily loaded machine can stretch past the suite's 600 s a test.
pytestmark = pytest.mark.timeout(1200)


def test_wcc_and_wordcount_through_spark_standalone_equal_the_in_process_jobs(
    standalone: Any, standalone_driver: Any, tmp_path: Path
) -> None:
    edges = np.random.default_rng(11).integers(0, 400, size=(1500, 2))
    source = tmp_path / "edges.csv"
    np.savetxt(source, edges, fmt="%d", delimiter=",")
    reference = tmp_path / "ref.csv"
    assert wcc.main(["--edges", str(source), "--output", str(reference), "-w", "2"]) == 0
    out = tmp_path / "spark.csv"
    # One core: one process (the barrier stage's one task), two workers in it.
    done = standalone_driver.run("wcc", ["--spark", standalone.url, "-n", "1", "-w", "2", "--edges", str(source),
                                         "--output", str(out)])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.read_bytes() == reference.read_bytes()

    text = tmp_path / "text.txt"
    text.write_text("the quick fox\nthe lazy dog and the fox\n\nΩ ω the\n", encoding="utf-8")
    expected = tmp_path / "ref.tsv"
    assert wordcount.main(["--input", str(text), "--output", str(expected), "-w", "2"]) == 0
    counted = tmp_path / "spark.tsv"
    args = ["--spark", standalone.url, "--input", str(text), "--output", str(counted)]
    done = standalone_driver.run("wordcount", args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert counted.read_bytes() == expected.read_bytes()


def test_more_processes_than_the_cluster_has_cores_fail_at_once(
    standalone: Any, standalone_driver: Any, tmp_path: Path
) -> None:
    source = tmp_path / "edges.csv"
    source.write_text("1,2\n2,3\n")
    started = time.monotonic()
    done = standalone_driver.run("wcc", ["--spark", standalone.url, "-n", "2", "--edges", str(source),
                                         "--output", str(tmp_path / "out.csv")])  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stderr[-3000:]
    assert "SparkSlotsError: 2 pytimely processes need 2 Spark task slots" in done.stderr
    assert f"({standalone.url}) has 1" in done.stderr
    assert "Traceback" not in done.stderr
    assert elapsed < 120, "refused up front, not after Spark's retries"
    assert not (tmp_path / "out.csv").exists()


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
