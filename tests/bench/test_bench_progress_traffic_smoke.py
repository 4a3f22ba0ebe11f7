"""The progress-traffic benchmark runs at a small size with real processes and reports every figure."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.bench.bench_quick import run_quick

FIGURES = [
    "progress_frames_per_epoch",
    "progress_bytes_per_epoch",
    "progress_bytes_per_process_epoch",
    "progress_frames_per_worker_pair_epoch",
    "progress_frames_per_process_pair_epoch",
    "data_bytes_per_epoch",
    "progress_per_data_byte",
    "vs_baseline",
]


@pytest.mark.timeout(300)
def test_bench_progress_traffic_quick_reports_every_figure(tmp_path: Path) -> None:
    """Every row is there with positive figures, and the SVG plot is written."""
    svg = tmp_path / "traffic.svg"
    facts, *listed = run_quick("bench_progress_traffic.py", "--svg", str(svg), timeout=290)
    assert "python" in facts
    rows = {row["id"]: row for row in listed}
    assert set(rows) == {"n=2 w=1", "n=4 w=1", "n=8 w=1", "n=2 w=2 per-worker", "n=2 w=2", "n=2 w=2 elastic"}
    for ident, row in rows.items():
        assert row["baseline"], ident
        for name in FIGURES:
            assert math.isfinite(row[name]) and row[name] > 0, (ident, name, row[name])
    # All-to-all broadcast: more processes, more progress frames per epoch than processes alone would explain.
    assert rows["n=8 w=1"]["progress_frames_per_epoch"] > 4 * rows["n=2 w=1"]["progress_frames_per_epoch"]
    # Sent per worker, each batch crosses a link once per remote worker: two workers per process pay more per
    # process pair than one. Aggregated per process, the batches of both workers of a process cross once, combined.
    per_worker, aggregated, one = rows["n=2 w=2 per-worker"], rows["n=2 w=2"], rows["n=2 w=1"]
    assert per_worker["progress_frames_per_process_pair_epoch"] > 2 * one["progress_frames_per_process_pair_epoch"]
    assert aggregated["progress_frames_per_process_pair_epoch"] < per_worker["progress_frames_per_process_pair_epoch"]
    assert aggregated["vs_per_worker"] < 1 and aggregated["batches_per_flush"] > 1
    # An elastic cluster combines them the same way.
    elastic = rows["n=2 w=2 elastic"]
    assert elastic["progress_frames_per_process_pair_epoch"] < per_worker["progress_frames_per_process_pair_epoch"]
    assert svg.read_text().startswith("<svg")
