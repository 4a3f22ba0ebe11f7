"""The batch jobs through ``spark://`` on a real standalone cluster (one worker, one core) and its slot limit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.spark.test_hosting import EXAMPLES, wcc, wordcount
from tests.spark.test_streaming import drop, edge_csv, random_edges, read_changelog, reference_changelog

# Each example runs as a driver of its own, bounded at 300 s; a test runs up to three of them in turn, which a
# heavily loaded machine can stretch past the suite's 600 s a test.
pytestmark = pytest.mark.timeout(1200)


def _run_example(name: str, args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The example's command line in its own process: a driver of its own, as a user would run it."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), *args],
        capture_output=True, text=True, timeout=timeout, env=env, check=False,
    )


def test_wcc_and_wordcount_through_spark_standalone_equal_the_in_process_jobs(standalone: Any, tmp_path: Path) -> None:
    edges = np.random.default_rng(11).integers(0, 400, size=(1500, 2))
    source = tmp_path / "edges.csv"
    np.savetxt(source, edges, fmt="%d", delimiter=",")
    reference = tmp_path / "ref.csv"
    assert wcc.main(["--edges", str(source), "--output", str(reference), "-w", "2"]) == 0
    out = tmp_path / "spark.csv"
    # One core: one process (the barrier stage's one task), two workers in it.
    done = _run_example("wcc", ["--spark", standalone.url, "-n", "1", "-w", "2", "--edges", str(source),
                                "--output", str(out)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.read_bytes() == reference.read_bytes()

    text = tmp_path / "text.txt"
    text.write_text("the quick fox\nthe lazy dog and the fox\n\nΩ ω the\n", encoding="utf-8")
    expected = tmp_path / "ref.tsv"
    assert wordcount.main(["--input", str(text), "--output", str(expected), "-w", "2"]) == 0
    counted = tmp_path / "spark.tsv"
    done = _run_example("wordcount", ["--spark", standalone.url, "--input", str(text), "--output", str(counted)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert counted.read_bytes() == expected.read_bytes()


def test_streaming_jobs_through_spark_standalone_equal_their_references(standalone: Any, tmp_path: Path) -> None:
    """stream_wcc over two rounds of files and stream_wordcount, each run a driver of its own on ``spark://``."""
    import random
    from collections import Counter

    rng = random.Random(23)
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    rounds = []
    for number in range(2):
        edges = random_edges(rng, rng.randint(5, 25))
        drop(incoming, f"r{number}.csv", edge_csv(edges), number)
        rounds.append(edges)
        done = _run_example("stream_wcc", ["--processes", "0",
                                           "--spark", standalone.url, "--edges-dir", str(incoming), "--output",
                                           str(out), "--checkpoint", str(ck), "--available-now"])
        assert done.returncode == 0, done.stderr[-3000:]
        assert read_changelog(out) == reference_changelog(rounds)

    texts, counted, ck2 = tmp_path / "text", tmp_path / "counted", tmp_path / "ck2"
    lines = ["the fox", "the dog and the fox", "é é x"]
    drop(texts, "t0.txt", "\n".join(lines) + "\n", 0)
    done = _run_example("stream_wordcount", ["--processes", "0",
                                             "--spark", standalone.url, "--text-dir", str(texts), "--output",
                                             str(counted), "--checkpoint", str(ck2), "--available-now"])
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split(",") for p in sorted(counted.glob("batch-*.csv")) for line in p.read_text().splitlines()[1:]]
    assert sorted((w, int(c)) for _, w, c in rows) == sorted(Counter(" ".join(lines).split()).items())


def test_more_processes_than_the_cluster_has_cores_fail_at_once(standalone: Any, tmp_path: Path) -> None:
    source = tmp_path / "edges.csv"
    source.write_text("1,2\n2,3\n")
    started = time.monotonic()
    done = _run_example("wcc", ["--spark", standalone.url, "-n", "2", "--edges", str(source),
                                "--output", str(tmp_path / "out.csv")])
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stderr[-3000:]
    assert "SparkSlotsError: 2 pytimely processes need 2 Spark task slots" in done.stderr
    assert f"({standalone.url}) has 1" in done.stderr
    assert "Traceback" not in done.stderr
    assert elapsed < 120, "refused up front, not after Spark's retries"
    assert not (tmp_path / "out.csv").exists()


def test_executors_without_pytimely_are_told_how_to_fix_it_before_the_stage(tmp_path: Path) -> None:
    """Executors run an interpreter that has PySpark but not pytimely (no ``.pth``, no source tree on its path)."""
    import site

    import pyspark

    packages = str(Path(pyspark.__file__).resolve().parents[1])
    assert packages in site.getsitepackages()
    python = tmp_path / "python-without-pytimely"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={packages} exec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    source = tmp_path / "edges.csv"
    source.write_text("1,2\n2,3\n")
    env = {**os.environ, "PYSPARK_PYTHON": str(python)}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "wcc.py"), "--spark", "local[2]", "-n", "2", "--edges", str(source),
         "--output", str(tmp_path / "out.csv")],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"SparkExecutorSetupError: the Spark executors' Python ({sys.executable}) cannot import pytimely" in (
        done.stderr
    ), done.stderr[-3000:]
    assert "PYSPARK_PYTHON" in done.stderr and "Traceback" not in done.stderr
    assert time.monotonic() - started < 120
