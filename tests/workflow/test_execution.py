"""Execution: no orphan processes after the command is killed, Ctrl-C stops cleanly, retries and timeouts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from pytimely.errors import ModuleFailedError, ModuleTimeoutError, WorkflowInputError
from pytimely.workflow import ProcessExecutor, SparkExecutor, composite, simple
from pytimely.workflow.runner import run
from pytimely.workflow.runtime import Event, Trace

ROOT = Path(__file__).resolve().parents[2]

SLOW = """
import os, sys, time
from pathlib import Path
from pytimely.workflow import composite, simple

@simple
def slow(x: int) -> int:
    Path(os.environ["PIDS"], str(os.getpid())).write_text("")
    time.sleep(120)
    return x

@simple
def quick(x: int) -> int:
    return x + 1

@composite
def workflow(x: int) -> int:
    return quick(slow(x))
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie awaiting its reaper counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def start(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    (tmp_path / "wf.py").write_text(textwrap.dedent(SLOW), encoding="utf-8")
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PIDS": str(pids)}
    command = [sys.executable, "-m", "pytimely", "workflow", "run", f"{tmp_path}/wf.py:workflow", "--executor",
               "process", "--staging", str(tmp_path / "stage"), "--input", "x=1"]  # fmt: skip
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(pids.iterdir()):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the module never started"
        time.sleep(0.1)
    return proc, pids


def test_no_orphans_five_seconds_after_the_command_is_killed(tmp_path: Path) -> None:
    proc, pids = start(tmp_path)
    workers = [int(p.name) for p in pids.iterdir()]
    proc.kill()
    proc.wait(timeout=60)
    # stderr reaches its end once nothing holds it: no worker kept the command's stderr open.
    closed = threading.Event()
    threading.Thread(target=lambda: (proc.stderr.read() if proc.stderr else None, closed.set()), daemon=True).start()
    time.sleep(5)
    assert [pid for pid in workers if alive(pid)] == []
    assert closed.wait(timeout=1), "stderr is still held open"


def test_ctrl_c_exits_130_naming_the_running_modules(tmp_path: Path) -> None:
    proc, pids = start(tmp_path)
    workers = [int(p.name) for p in pids.iterdir()]
    began = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.monotonic() - began < 30
    last = err.strip().splitlines()[-1]
    assert last.startswith("pytimely workflow: interrupted while workflow/slow was running"), err
    assert "Traceback" not in err
    time.sleep(1)
    assert [pid for pid in workers if alive(pid)] == []


ATTEMPTS: dict[str, int] = {}


@simple(retries=2, backoff=0.01)
def flaky(x: int) -> int:
    ATTEMPTS["flaky"] = ATTEMPTS.get("flaky", 0) + 1
    if ATTEMPTS["flaky"] < 3:
        raise RuntimeError(f"attempt {ATTEMPTS['flaky']} fails")
    return x * 10


@simple(timeout=0.5)
def sleepy(x: int) -> int:
    time.sleep(2)
    return x


@composite
def retried(x: int) -> int:
    return flaky(x)


@composite
def timed(x: int) -> int:
    return sleepy(x)


def test_a_module_is_retried_until_it_succeeds_or_its_retries_run_out() -> None:
    ATTEMPTS.clear()
    events: list[Event] = []
    assert run(retried, {"x": 4}, progress=events.append, trace=Trace()) == {"out": 40}
    assert [(e.kind, e.iteration) for e in events if e.kind == "retry"] == [("retry", 1), ("retry", 2)]
    assert "attempt 1 fails" in next(e.message for e in events if e.kind == "retry")
    ATTEMPTS["flaky"] = -10  # more failures than retries
    with pytest.raises(ModuleFailedError, match="retried/flaky"):
        run(retried, {"x": 5})


def test_a_module_past_its_timeout_fails_naming_it() -> None:
    began = time.monotonic()
    with pytest.raises(ModuleTimeoutError, match=r"module 'timed/sleepy' ran longer than its timeout of 0.5 s"):
        run(timed, {"x": 1})
    assert time.monotonic() - began < 10


@simple
def here(x: int) -> int:
    return os.getpid()


@simple(executor="process")
def elsewhere(x: int) -> int:
    return os.getpid()


class Pids(NamedTuple):
    here: int
    elsewhere: int


@composite
def mixed(x: int) -> Pids:
    return Pids(here(x), elsewhere(x))


def test_a_module_runs_on_the_executor_it_names_beside_the_default() -> None:
    with ProcessExecutor(1) as process:
        result = run(mixed, {"x": 1}, executors={"process": process})
    assert result["here"] == os.getpid() and result["elsewhere"] != os.getpid()
    with pytest.raises(WorkflowInputError, match=r"no executor 'process' \(given: \[\]\)"):
        run(mixed, {"x": 2})


def test_spark_starts_only_when_a_module_needs_its_session() -> None:
    started: list[int] = []

    def start() -> Any:
        started.append(1)
        raise AssertionError("no module here needs Spark")

    with SparkExecutor(start=start) as executor:
        assert run(retried_free, {"x": 3}, executor=executor) == {"out": 3}
        assert not executor.started
    assert started == []


@simple
def identity(x: int) -> int:
    return x


@composite
def retried_free(x: int) -> int:
    return identity(x)
