"""A failed run explains itself and an interrupted one keeps what finished: logs of failed modules, errors with
the file and line, Ctrl-C once (what finishes is kept) and twice (out at once, in one line)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytimely.workflow.staging import LocalStaging

ROOT = Path(__file__).resolve().parents[2]

WORKFLOW = """
import sys
from pytimely.workflow import composite, simple

@simple
def load(x: int) -> int:
    print(f"loading {x}")
    print("checking", file=sys.stderr)
    if x < 0:
        raise ValueError(f"negative x: {x}")
    return x + 1

@simple
def report(y: int) -> int:
    return y * 2

@composite
def workflow(x: int) -> int:
    return report(load(x))
"""


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "pytimely", "workflow", *args], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)  # fmt: skip


def failing_run(tmp_path: Path, executor: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    """A run that succeeds, then one that fails in ``load``, on one staging area; the area and the failed run."""
    (tmp_path / "wf.py").write_text(textwrap.dedent(WORKFLOW), encoding="utf-8")
    stage = str(tmp_path / "stage")
    run = ("run", f"{tmp_path}/wf.py:workflow", "--staging", stage, "--executor", executor, "-q")
    assert cli(tmp_path, *run, "--input", "x=1").returncode == 0
    failed = cli(tmp_path, *run, "--input", "x=-4")
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
    return stage, failed


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_a_failed_modules_output_is_kept_and_shown_with_its_run(tmp_path: Path, executor: str) -> None:
    """Before: the failing run's prints were lost and ``logs`` showed the older successful run's output without
    saying so."""
    stage, _ = failing_run(tmp_path, executor)
    logs = cli(tmp_path, "logs", "load", "--staging", stage)
    assert logs.returncode == 0, logs.stderr
    header, error, *streams = logs.stdout.splitlines()
    assert re.fullmatch(r"== workflow/load: failed in run [0-9a-f]{8} of .* UTC ==", header), header
    line = textwrap.dedent(WORKFLOW).splitlines().index('        raise ValueError(f"negative x: {x}")') + 1
    assert error.startswith(f"ModuleRaisedError: module 'workflow/load' failed at wf.py:{line} (in load)"), error
    assert streams == ["== workflow/load (stdout) ==", "loading -4", "== workflow/load (stderr) ==", "checking"]


def test_a_module_error_names_the_file_and_line(tmp_path: Path) -> None:
    """Before: ``module 'workflow/load' failed: ValueError: ...``, with no file or line (a worker process's error
    names them too: see the test above)."""
    _, failed = failing_run(tmp_path, "thread")
    last = failed.stderr.strip().splitlines()[-1]
    line = textwrap.dedent(WORKFLOW).splitlines().index('        raise ValueError(f"negative x: {x}")') + 1
    assert re.search(rf"module 'workflow/load' failed at wf\.py:{line} \(in load\): ValueError: negative x: -4", last)


SLOW = """
import time
from pytimely.workflow import composite, simple

@simple
def slow(x: int) -> int:
    time.sleep(SECONDS)
    return x * 10

@simple
def after(y: int) -> int:
    return y + 1

@composite
def workflow(x: int) -> int:
    return after(slow(x))
"""


def start(tmp_path: Path, seconds: float) -> subprocess.Popen[str]:
    """A run on threads whose module ``slow`` sleeps ``seconds``; returned once ``slow`` has started."""
    (tmp_path / "wf.py").write_text(textwrap.dedent(SLOW.replace("SECONDS", str(seconds))), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-m", "pytimely", "workflow", "run", f"{tmp_path}/wf.py:workflow", "--staging",
               str(tmp_path / "stage"), "--input", "x=4", "--progress", "lines"]  # fmt: skip
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:  # a line per event: the wait ends with the process at the latest
        if line.startswith("started  workflow/slow"):
            return proc
    raise AssertionError(f"slow never started: {proc.communicate(timeout=60)}")


def test_what_finishes_after_the_first_ctrl_c_is_kept(tmp_path: Path) -> None:
    """Before: the thread's result, finished during the wait that followed Ctrl-C, was thrown away."""
    proc = start(tmp_path, 1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(
        "pytimely workflow: interrupted while workflow/slow was running (workflow/slow finished and its values are "
        "kept)"
    ), err
    area = LocalStaging(tmp_path / "stage")
    assert area.keys("workflow/slow") and not area.keys("workflow/after")  # after did not start
    fp = area.fingerprint("workflow/slow/out")
    assert fp is not None and area.get("workflow/slow/out", fp) == 40
    resumed = subprocess.run(
        [sys.executable, "-m", "pytimely", "workflow", "run", f"{tmp_path}/wf.py:workflow", "--staging",
         str(tmp_path / "stage"), "--input", "x=4", "--progress", "lines"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0 and resumed.stdout == "out = 41\n", resumed.stderr
    assert "started  workflow/slow" not in resumed.stderr


def test_a_second_ctrl_c_exits_at_once_in_one_line(tmp_path: Path) -> None:
    """Before: a second Ctrl-C while the first waited for a thread ended in a KeyboardInterrupt traceback."""
    proc = start(tmp_path, 120)
    proc.send_signal(signal.SIGINT)
    assert proc.stderr is not None
    waiting = proc.stderr.readline()  # said once the first Ctrl-C is taken: nothing is lost before the second
    assert "waiting for workflow/slow to finish" in waiting and "Ctrl-C again" in waiting, waiting
    began = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert time.monotonic() - began < 30  # not the 120 s the thread still sleeps
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.strip().splitlines() == [
        "pytimely workflow: interrupted again: stopped at once; values staged so far stay and the next run resumes "
        "from them"
    ]
