"""The workflow benchmark runs at a small size and reports every figure against its baseline (no timings checked;
the benchmark itself checks the workflow computes what the plain calls do)."""

from __future__ import annotations

import pytest

from tests.bench.bench_quick import run_quick


@pytest.mark.timeout(300)
def test_bench_workflow_quick_reports_every_figure() -> None:
    facts, *rows = run_quick("bench_workflow.py")
    assert "python" in facts
    interpreter = [row for row in rows if "seconds" in row]
    assert [row["what"] for row in interpreter][:2] == ["plain Python calls", "fresh run, memory staging"]
    assert len(interpreter) == 6 and all(row["modules"] == 40 and row["seconds"] > 0 for row in interpreter)
    costs = [row for row in rows if "value" in row]
    assert len(costs) == 3 and len(rows) == 9
    assert all(row["value"] > 0 and row["baseline_value"] > 0 and row["baseline"] for row in costs)
