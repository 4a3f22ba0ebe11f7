"""`make demo`'s job at a small size: WCC on Spark in local mode agrees with GraphX on every label."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.standalone import quick_jvm

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


@pytest.mark.timeout(300)
def test_demo_runs_on_spark_and_agrees_with_graphx() -> None:
    # 89 components, the largest of 34 vertices, its smallest id 9 hops from the farthest: each hop is a GraphX
    # round of Spark jobs, run three times (warm-up and two timed runs); a larger graph checks the same agreement.
    result = subprocess.run(
        [sys.executable, str(DEMO), "--edges", "300", "--vertices", "600"],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
        env=quick_jvm(dict(os.environ)),
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    out = result.stdout
    assert "agrees with GraphX on every label: yes" in out
    components = re.search(r"components: ([\d,]+); largest: ([\d,]+) vertices", out)
    assert components is not None, out
    assert int(components.group(1).replace(",", "")) > 1
    assert re.search(r"pytimely on Spark \(2 processes x 1 worker\): [\d.]+ s", out)
    assert re.search(r"speed-up over GraphX: [\d.]+x", out)
