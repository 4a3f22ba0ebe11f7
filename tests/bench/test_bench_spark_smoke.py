"""The Spark benchmark runs at a small size on a real local Spark and reports every figure (no timings checked)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest

from tests.bench.bench_quick import ROOT

sys.path.insert(0, str(ROOT / "bench"))

import bench_spark


@pytest.mark.timeout(300)
def test_bench_spark_quick_reports_every_contender(spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Every contender is there with positive figures; the benchmark itself checks they all agree.

    Its ``main`` runs on the suite's session: what its command line measures, without a JVM of its own to start.
    """
    bench_spark.main(["--quick", "--json"], spark=spark)
    lines = capsys.readouterr().out.splitlines()
    count_facts, count_e, count_f, facts, *listed = [json.loads(line) for line in lines if line.startswith("{")]
    assert count_facts["rows"] > 0 and count_facts["slots"] >= 1
    assert count_e["id"] == "e" and count_f["id"] == "f"
    assert count_e["rows_per_s_per_slot"] > 0 and count_f["speedup_of_pytimely"] > 0
    assert facts["components"] >= 1 and facts["largest"] >= 1
    rows = {row["id"]: row for row in listed}
    assert set(rows) == {"a", "b", "c", "d"}
    for ident, row in rows.items():
        assert row["baseline"], ident
        assert math.isfinite(row["seconds"]) and row["seconds"] > 0, ident
        if ident != "a":
            assert row["speedup_of_pytimely"] > 0, ident
    assert isinstance(rows["b"]["met"], bool)


def test_bench_spark_command_line_starts() -> None:
    """The script runs as a command (its imports from ``bench/`` and ``examples/``) and names its flags."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_spark.py"), "--help"],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for flag in ("--quick", "--json", "--edges", "--keyed-rows", "--part", "--repeat"):
        assert flag in result.stdout, flag
