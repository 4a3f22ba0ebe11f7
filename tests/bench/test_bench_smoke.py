"""The dataflow benchmark runs at a small size and its results agree with its baselines (no timings checked)."""

from __future__ import annotations

import pytest

from tests.bench.bench_quick import run_quick


@pytest.mark.timeout(300)
def test_bench_dataflow_quick_reports_every_workload() -> None:
    rows = run_quick("bench_dataflow.py")[1:]
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
