"""Each module's output is kept with its values and shown by ``pytimely workflow logs``, apart from results."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

WORKFLOW = """
import sys
from pytimely.workflow import composite, simple

@simple
def load(x: int) -> int:
    print(f"loading {x}")
    print("a warning", file=sys.stderr)
    return x + 1

@simple
def report(y: int) -> int:
    print("reporting")
    return y * 2

@composite
def workflow(x: int) -> int:
    return report(load(x))
"""


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "pytimely", "workflow", *args], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_module_output_is_kept_and_shown_by_logs(tmp_path: Path, executor: str) -> None:
    (tmp_path / "wf.py").write_text(textwrap.dedent(WORKFLOW), encoding="utf-8")
    stage = str(tmp_path / "stage")
    done = cli(tmp_path, "run", f"{tmp_path}/wf.py:workflow", "--staging", stage, "--input", "x=1",
               "--executor", executor, "--progress", "lines")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "out = 4\n"  # results alone on stdout; module output is kept, not mixed in
    assert "loading" not in done.stderr and "a warning" not in done.stderr
    logs = cli(tmp_path, "logs", "load", "--staging", stage)
    assert logs.returncode == 0, logs.stderr
    header, *streams = logs.stdout.splitlines()
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
    assert re.fullmatch(rf"== workflow/load: finished in run [0-9a-f]{{8}} of {when} ==", header), header
    assert streams == [
        "== workflow/load (stdout) ==",
        "loading 1",
        "== workflow/load (stderr) ==",
        "a warning",
    ]
    both = cli(tmp_path, "logs", "workflow/report", "--staging", stage)
    assert "reporting" in both.stdout
    missing = cli(tmp_path, "logs", "nothing", "--staging", stage)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1


def test_live_progress_ends_with_the_summary(tmp_path: Path) -> None:
    (tmp_path / "wf.py").write_text(textwrap.dedent(WORKFLOW), encoding="utf-8")
    done = cli(tmp_path, "run", f"{tmp_path}/wf.py:workflow", "--staging", str(tmp_path / "stage"), "--input",
               "x=1", "--progress", "live")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "out = 4\n"
    assert done.stderr.strip().splitlines()[-1].startswith("ran 2 modules, reused 0 values in")
