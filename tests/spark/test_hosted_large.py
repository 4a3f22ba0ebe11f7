"""Micro-batches far larger than the driver may receive: the hosted path takes them, the driver sees counts."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pytimely.spark.epoch_output import EpochOutput
from tests.spark.test_streaming import drop

ROOT = Path(__file__).resolve().parents[2]


def test_micro_batches_of_10_mb_under_a_1_mb_result_limit(tmp_path: Path) -> None:
    """Two micro-batches of ~11 MB of text with ``spark.driver.maxResultSize=1m``: both are counted right, and
    the driver receives the same few hundred bytes for each (no row passes through it). ~60 s, its own JVM."""
    rng = random.Random(10)
    vocabulary = [f"w{k}" for k in range(2000)]
    incoming, out = tmp_path / "in", tmp_path / "out"
    totals: Counter[str] = Counter()
    expected = []
    for k in range(2):
        lines = [" ".join(rng.choices(vocabulary, k=20)) for _ in range(110_000)]
        text = "\n".join(lines) + "\n"
        assert len(text) >= 10 << 20
        totals.update(w for line in lines for w in line.split())
        expected.append(dict(totals))
        drop(incoming, f"big{k}.txt", text, k)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "spark" / "hosted_large_run.py"), str(incoming),
                          str(out), str(tmp_path / "ck")], capture_output=True, text=True, timeout=600, env=env,
                         cwd=ROOT)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    assert figures["processed"] == [0, 1]
    sizes = list(figures["driver_bytes"].values())
    print("driver bytes per micro-batch:", figures["driver_bytes"], "Spark trigger ms:", figures["trigger_ms"])
    assert max(sizes) < 4096 and max(sizes) <= 2 * min(sizes), sizes
    output = EpochOutput(out, pa.schema([("epoch", pa.int64()), ("word", pa.string()), ("count", pa.int64())]))
    for epoch, total in enumerate(expected):
        table = output.read(epoch)
        assert dict(zip(table.column("word").to_pylist(), table.column("count").to_pylist(), strict=True)) == total
