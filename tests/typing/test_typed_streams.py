"""Typed streams: a small user program type-checks under ``mypy --strict`` and one with mistakes does not."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import pytimely
from pytimely import execute

from . import typed_program

pytestmark = pytest.mark.timeout(600)

HERE = Path(__file__).resolve().parent
ERROR = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")


def mypy(program: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``mypy --strict`` on ``program``, against the pytimely this test imports (not an installed copy)."""
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nstrict = True\n")
    env = {**os.environ, "MYPYPATH": str(Path(pytimely.__file__).resolve().parents[1])}
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(config),
        "--follow-imports=silent",
        "--cache-dir",
        str(tmp_path / "cache"),
        str(program),
    ]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)


def test_the_typed_program_type_checks_under_strict_mypy(tmp_path: Path) -> None:
    done = mypy(HERE / "typed_program.py", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found in 1 source file" in done.stdout


def test_the_ill_typed_program_fails_where_it_is_marked(tmp_path: Path) -> None:
    program = HERE / "ill_typed_program.py"
    expected = {
        (number, match.group(1))
        for number, line in enumerate(program.read_text().splitlines(), start=1)
        if (match := re.search(r"# error: ([a-z-]+)$", line))
    }
    assert len(expected) == 4
    done = mypy(program, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    found = set()
    for line in done.stdout.splitlines():
        match = ERROR.match(line)
        if match:
            found.add((int(match.group("line")), match.group("code")))
    assert expected <= found, done.stdout
    assert {n for n, _ in found} == {n for n, _ in expected}, done.stdout


def test_the_typed_program_runs_and_computes_its_result() -> None:
    per_worker = execute(typed_program.job, workers=2)
    got = Counter(record for captured in per_worker for _, batch in captured for record in batch)
    # Each worker sends the three words: counts are 2, and the pair is (WORD, count + length).
    assert got == Counter({("TIMELY", 8): 2, ("DATAFLOW", 10): 2, ("TYPED", 7): 2})


def test_a_type_that_is_not_a_type_is_refused() -> None:
    def job(worker: pytimely.Worker) -> None:
        worker.dataflow(lambda scope: scope.new_input(type=3))

    with pytest.raises(pytimely.errors.InvalidArgument, match="type= takes a type"):
        execute(job, workers=1)
