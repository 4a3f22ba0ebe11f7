"""The progress benchmark runs at a small size: the tracker agrees with recomputing from scratch on every workload
(the benchmark checks it) and every model checks without a violation (no timings checked)."""

from __future__ import annotations

import pytest

from pytimely.verify import MODELS
from tests.bench.bench_quick import run_quick


@pytest.mark.timeout(300)
def test_bench_progress_quick_reports_every_workload_and_model() -> None:
    facts, *rows = run_quick("bench_progress.py", "--chain", "100")
    assert "python" in facts
    tracked = {row["workload"]: row for row in rows if "workload" in row}
    assert set(tracked) == {"chain-100", "chain-100-traffic", "loop"}
    assert all(row["tracker_updates_per_s"] > 0 and row["from_scratch_updates_per_s"] > 0 for row in tracked.values())
    checked = {row["model"]: row for row in rows if "model" in row}
    assert set(checked) == set(MODELS)
    assert all(row["violation"] is None and row["states"] > 0 for row in checked.values())
