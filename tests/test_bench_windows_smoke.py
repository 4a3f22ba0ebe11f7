"""The windows benchmark runs at a small size and every result agrees with its reference (no timings checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "bench_windows.py"


@pytest.mark.timeout(300)
def test_bench_windows_quick_reports_every_workload() -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()[1:]]
    workloads = {row["workload"] for row in rows}
    for label in ("tumbling 100", "sliding 300/100"):
        for kind in ("numpy, 1 worker(s)", "numpy, 2 worker(s)", "tuples, 1 worker(s)"):
            assert f"windowed count, {label}, {kind}" in workloads
    assert all(row["seconds"] > 0 and row["baseline_seconds"] > 0 for row in rows)
    assert "plain Python dict loop" in {row["baseline"] for row in rows}
