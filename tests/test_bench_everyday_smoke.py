"""The everyday-operators benchmark runs at a small size and every result agrees with its baseline (no timings
checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "bench_everyday.py"


@pytest.mark.timeout(300)
def test_bench_everyday_quick_reports_every_workload() -> None:
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
    assert {row["workload"] for row in rows} == {"max_final", "collect", "capture+replay"}
    assert all(row["seconds"] > 0 for row in rows)
