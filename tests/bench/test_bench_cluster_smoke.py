"""The cluster benchmark runs at a small size with real processes and reports every figure (no timings checked)."""

from __future__ import annotations

import math

import pytest

from tests.bench.bench_quick import run_quick

EXCHANGE = [
    "records",
    "bytes",
    "seconds",
    "median_seconds",
    "bytes_per_s",
    "records_per_s",
    "baseline_seconds",
    "ratio_of_ceiling",
    "median_ratio_of_ceiling",
    "cpu_seconds",
    "baseline_cpu_seconds",
    "median_cpu_ratio_of_ceiling",
]
WORDCOUNT = [
    "records",
    "seconds",
    "records_per_s",
    "baseline_seconds",
    "speedup",
    "cpu_speedup",
    "machine_ceiling",
    "share_of_ceiling",
    "median_share_of_ceiling",
]

FIGURES = {
    "a1": [*EXCHANGE, "socket_only_seconds", "ring_speedup"],
    "a1-columnar": EXCHANGE,
    "a2": [
        *EXCHANGE,
        "python_floor_seconds",
        "ratio_of_python_floor",
        "median_ratio_of_python_floor",
        "python_floor_ratio_of_ceiling",
    ],
    "b": WORDCOUNT,
    "b2": WORDCOUNT,
    "c": ["epochs", "p50_ms", "p99_ms", "baseline_p50_ms", "baseline_p99_ms", "p50_vs_baseline"],
}


@pytest.mark.timeout(120)
def test_bench_cluster_quick_reports_every_figure() -> None:
    """Every row is there, names its baseline, and each of its figures is positive and finite."""
    facts, *listed = run_quick("bench_cluster.py", timeout=110)
    assert "python" in facts
    rows = {row["id"]: row for row in listed}
    assert set(rows) == set(FIGURES)
    for ident, names in FIGURES.items():
        row = rows[ident]
        assert row["baseline"], ident
        for name in names:
            value = row[name]
            assert isinstance(value, int | float) and not isinstance(value, bool), (ident, name, value)
            assert math.isfinite(value) and value > 0, (ident, name, value)
    for ident in ("a1", "a1-columnar", "a2", "b", "c"):
        assert isinstance(rows[ident]["met"], bool), ident
    assert all(isinstance(row["load_before"], float) for row in rows.values())
    assert rows["c"]["p50_ms"] <= rows["c"]["p99_ms"]
