"""The resume-state benchmark runs at a small size and reports every figure against its baseline (no timings
checked; the benchmark itself checks the lazy and eager states agree)."""

from __future__ import annotations

import pytest

from tests.bench.bench_quick import run_quick


@pytest.mark.timeout(300)
def test_bench_resume_quick_reports_every_figure() -> None:
    facts, *rows = run_quick("bench_resume.py")
    assert facts["children"] == 500 and facts["vertices"] > 0 and facts["edges"] > 0
    assert len(rows) == 8
    assert {row["baseline"] for row in rows} >= {"copy into dicts", "BFS", "eager"}
    for row in rows:
        assert (row["children"], row["vertices"], row["edges"]) == (500, facts["vertices"], facts["edges"])
        assert row["seconds"] > 0 and row["baseline_seconds"] > 0, row
