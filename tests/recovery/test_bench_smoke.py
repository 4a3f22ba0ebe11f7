"""The recovery benchmark runs at a small size: counts agree with and without recovery, the store stays flat."""

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
    assert {r["figure"] for r in rows} == {"throughput", "recovery time", "store size"}
    sizes = [r["bytes"] for r in rows if r["figure"] == "store size"]
    # keep=2: once the state is full (from the second tenth on) the store's size stays within a band; a store
    # that kept every snapshot would grow tenfold.
    assert len(sizes) == 10 and max(sizes[2:]) <= 2 * min(sizes[2:])
