"""The Spark benchmark runs at a small size on a real local Spark and reports every figure (no timings checked)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_spark.py"


@pytest.mark.timeout(300)
def test_bench_spark_quick_reports_every_contender() -> None:
    """Every contender is there with positive figures; the benchmark itself checks they all agree."""
    result = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json"], capture_output=True, text=True, timeout=280, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(lines[0])
    assert facts["components"] >= 1 and facts["largest"] >= 1
    rows = {row["id"]: row for row in map(json.loads, lines[1:])}
    assert set(rows) == {"a", "b", "c", "d"}
    for ident, row in rows.items():
        assert row["baseline"], ident
        assert math.isfinite(row["seconds"]) and row["seconds"] > 0, ident
        if ident != "a":
            assert row["speedup_of_pytimely"] > 0, ident
    assert isinstance(rows["b"]["met"], bool)
