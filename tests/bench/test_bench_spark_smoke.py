"""The Spark benchmark runs at a small size on a real local Spark and reports every figure (no timings checked)."""

from __future__ import annotations

import math

import pytest

from tests.bench.bench_quick import run_quick


@pytest.mark.timeout(300)
def test_bench_spark_quick_reports_every_contender() -> None:
    """Every contender is there with positive figures; the benchmark itself checks they all agree."""
    count_facts, count_e, count_f, facts, *listed = run_quick("bench_spark.py")
    assert count_facts["rows"] > 0 and count_facts["slots"] >= 1
    assert count_e["id"] == "e" and count_f["id"] == "f"
    assert count_e["rows_per_s_per_slot"] > 0 and count_f["speedup_of_pytimely"] > 0
    assert facts["components"] >= 1 and facts["largest"] >= 1
    rows = {row["id"]: row for row in listed}
    assert set(rows) == {"a", "b", "c", "d"}
    for ident, row in rows.items():
        assert row["baseline"], ident
        assert math.isfinite(row["seconds"]) and row["seconds"] > 0, ident
        if ident != "a":
            assert row["speedup_of_pytimely"] > 0, ident
    assert isinstance(rows["b"]["met"], bool)
