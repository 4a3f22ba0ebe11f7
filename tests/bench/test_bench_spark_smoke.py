"""The Spark benchmark runs at a small size on a real local Spark and reports every figure (no timings checked)."""

from __future__ import annotations

import math

import pytest

from tests.bench.bench_quick import run_quick
from tests.spark.standalone import QUICK_JVM


@pytest.mark.timeout(300)
def test_bench_spark_quick_reports_every_contender(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every contender is there with positive figures; the benchmark itself checks they all agree.

    Its JVM compiles less (timings are not checked here, and a run this short spends most of its CPU compiling).
    """
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", QUICK_JVM)
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
