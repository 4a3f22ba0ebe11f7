"""The dataflow benchmark runs at a small size and its results agree with its baselines (no timings checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_dataflow.py"


@pytest.mark.timeout(300)
def test_bench_dataflow_quick_reports_every_workload() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json"], capture_output=True, text=True, timeout=280, check=False
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()[1:]]
    assert {row["id"] for row in rows} == {"a", "b", "c", "d", "e", "f"}
    assert {row["workload"] for row in rows if row["id"] == "e"} == {
        "state machine, bins moving, 1 worker(s)",
        "state machine, bins moving, 2 worker(s)",
    }
    for row in rows:
        if row["id"] == "d":
            assert 0 < row["p50_ms"] <= row["p99_ms"]
        else:
            assert row["seconds"] > 0 and row["baseline_seconds"] > 0
