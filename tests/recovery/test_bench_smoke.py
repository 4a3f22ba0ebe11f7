"""The recovery benchmark runs at a small size: counts agree with and without recovery, every figure is there,
and a snapshot of few changed keys writes far less than the whole state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_bench_recovery_quick_reports_every_figure() -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_recovery.py"), "--quick", "--json"],
        capture_output=True, text=True, timeout=280, check=False, env=env,
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()[1:]]
    assert {r["figure"] for r in rows} == {"throughput", "snapshot bytes", "resume time"}
    written = {r["keys changed per epoch"]: r for r in rows if r["figure"] == "snapshot bytes"}
    few, all_ = written[10], written[2_000]
    # Ten changed keys touch at most ten bins of 256 (and a rotating 1/32 of the rest): far from the whole state.
    assert few["bytes written per epoch"] < all_["bytes written per epoch"] / 3
    assert {r["keys"] for r in rows if r["figure"] == "resume time"} == {1_000, 10_000}
