"""The streaming benchmark's word count and restart parts at a small size on a real local Spark (no timings checked).

The benchmark itself checks every contender's counts against a reference; this checks that every contender and
ratio is reported. Connected components (GraphX's first run alone takes half a minute) runs in full runs only.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest

from tests.bench.bench_quick import ROOT

sys.path.insert(0, str(ROOT / "bench"))

import bench_streaming


@pytest.mark.timeout(300)
def test_bench_streaming_quick_reports_every_contender_and_ratio(
    spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its ``main`` runs on the suite's session: what its command line measures, without a JVM of its own to start."""
    bench_streaming.main(["--quick", "--json", "--parts", "wordcount,restart"], spark=spark)
    lines = capsys.readouterr().out.splitlines()
    facts, *rows = [json.loads(line) for line in lines if line.startswith("{")]
    assert facts["sizes"] == [2_000] and facts["slots"] >= 1
    words = {row["id"]: row for row in rows if "rows_per_batch" in row}
    assert set(words) == {"a", "x", "n", "p"}
    for ident in ("a", "n", "p") + (("x",) if facts["executors_path"] else ()):
        row = words[ident]
        assert row["rows_per_batch"] == 2_000 and row["batches"] == 4, ident
        assert 0 < row["p50_ms"] <= row["p99_ms"] and math.isfinite(row["rows_per_s"]), ident
        assert row["p50_vs_native"] > 0 and row["throughput_vs_pandas"] > 0, ident
    assert words["n"]["p50_vs_native"] == 1.0 and words["p"]["p50_vs_pandas"] == 1.0
    if not facts["executors_path"]:
        assert "not available" in words["x"]["note"] and "p50_ms" not in words["x"]
    restarts = [(row["id"], row["history"]) for row in rows if row["id"] in ("f", "g")]
    assert restarts == [("f", 2), ("g", 2), ("f", 4), ("g", 4)]
    assert all(row["restore_s"] >= 0 and row["checkpoint_kb"] > 0 for row in rows if row["id"] in ("f", "g"))


def test_bench_streaming_command_line_starts() -> None:
    """The script runs as a command (its imports from ``bench/`` and ``examples/``) and names its flags."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_streaming.py"), "--help"],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for flag in ("--quick", "--json", "--parts", "--sizes", "--contenders", "--restart-contenders", "--master"):
        assert flag in result.stdout, flag
