"""The rescaling benchmark runs at a small size with real processes and reports every figure (no timings checked)."""

from __future__ import annotations

import math

import pytest

from tests.bench.bench_quick import run_quick

PHASES = ["a before the join", "a join", "a between", "a leave", "a after the leave"]
LATENCY = ["epochs", "p50_ms", "p99_ms", "baseline_p50_ms", "baseline_p99_ms", "p50_vs_baseline"]
SIZE = ["epochs", "first_bytes", "last_bytes", "max_bytes", "max_pointstamps", "baseline_max_bytes"]
BOOT = ["pointstamps", "state_bytes", "bootstrap_ms", "baseline_ms", "vs_baseline"]


@pytest.mark.timeout(300)
def test_bench_elastic_quick_reports_every_figure() -> None:
    """Every row is there, names its baseline, and each of its figures is positive and finite."""
    facts, *listed = run_quick("bench_elastic.py", timeout=290)
    assert "python" in facts
    rows = {row["id"]: row for row in listed}
    wanted = {**{p: LATENCY for p in PHASES}, "a' join": LATENCY, "a' between": LATENCY}
    wanted |= {"c": SIZE, **{f"b K={k}": BOOT for k in (0, 64, 256)}}
    assert set(rows) == set(wanted)
    for ident, names in wanted.items():
        row = rows[ident]
        assert row["baseline"], ident
        for name in names:
            assert math.isfinite(row[name]) and row[name] > 0, (ident, name, row[name])
    # The state a newcomer receives grows with the capabilities held: the held inputs are in it.
    sizes = [rows[f"b K={k}"]["pointstamps"] for k in (0, 64, 256)]
    assert sizes[0] < sizes[1] < sizes[2] and sizes[2] >= 256
