"""The everyday-operators benchmark runs at a small size and every result agrees with its baseline (no timings
checked)."""

from __future__ import annotations

import pytest

from tests.bench.bench_quick import run_quick


@pytest.mark.timeout(300)
def test_bench_everyday_quick_reports_every_workload() -> None:
    rows = run_quick("bench_everyday.py")[1:]
    assert {row["workload"] for row in rows} == {"max_final", "collect", "capture+replay", "running join"}
    assert all(row["seconds"] > 0 for row in rows)
