"""The windows benchmark runs at a small size and every result agrees with its reference (no timings checked)."""

from __future__ import annotations

import pytest

from tests.bench.bench_quick import run_quick


@pytest.mark.timeout(300)
def test_bench_windows_quick_reports_every_workload() -> None:
    rows = run_quick("bench_windows.py")[1:]
    workloads = {row["workload"] for row in rows}
    for label in ("tumbling 100", "sliding 300/100"):
        for kind in ("numpy, 1 worker(s)", "numpy, 2 worker(s)", "tuples, 1 worker(s)"):
            assert f"windowed count, {label}, {kind}" in workloads
    assert all(row["seconds"] > 0 and row["baseline_seconds"] > 0 for row in rows)
    assert "plain Python dict loop" in {row["baseline"] for row in rows}
