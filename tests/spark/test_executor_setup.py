"""Executors whose Python cannot import pytimely are told how to fix it before the barrier stage runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.spark.standalone import quick_jvm
from tests.spark.test_hosting import EXAMPLES


def test_executors_without_pytimely_are_told_how_to_fix_it_before_the_stage(tmp_path: Path) -> None:
    """Executors run an interpreter that has PySpark but not pytimely (no ``.pth``, no source tree on its path)."""
    import site

    import pyspark

    packages = str(Path(pyspark.__file__).resolve().parents[1])
    assert packages in site.getsitepackages()
    python = tmp_path / "python-without-pytimely"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={packages} exec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    source = tmp_path / "edges.csv"
    source.write_text("1,2\n2,3\n")
    env = quick_jvm({**os.environ, "PYSPARK_PYTHON": str(python)})
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "wcc.py"), "--spark", "local[2]", "-n", "2", "--edges", str(source),
         "--output", str(tmp_path / "out.csv")],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"SparkExecutorSetupError: the Spark executors' Python ({sys.executable}) cannot import pytimely" in (
        done.stderr
    ), done.stderr[-3000:]
    assert "PYSPARK_PYTHON" in done.stderr and "Traceback" not in done.stderr
    # Spark on its own would retry the stage for about ten minutes; the check answers long before, even under load.
    assert time.monotonic() - started < 240
