"""Running a benchmark at its smallest size for the smoke tests, which check results and never timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_quick(script: str, *extra: str, timeout: float = 280.0) -> list[dict[str, Any]]:
    """Run ``bench/SCRIPT --quick --json EXTRA...`` with this tree's ``src`` first; the JSON objects it printed."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--quick", "--json", *extra],
        capture_output=True, text=True, timeout=timeout, check=False, env=env, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
