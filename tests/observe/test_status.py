"""The progress line: its text, its figures from the event log and from metrics, and when it stays quiet."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytimely import execute
from pytimely.observe.metrics import Metrics
from pytimely.observe.status import ProgressLine, Status, Tracker, render, status_from_metrics
from tests.cluster.helpers import ROOT
from tests.observe.test_eventlog import _job

WORDCOUNT = ROOT / "examples" / "wordcount.py"


def test_render_shows_epochs_rate_and_slowest() -> None:
    line = render(Status(elapsed=2.0, records=1_500_000, epochs=3, total_epochs=10, slowest="count", slowest_busy=1.25))
    assert line == "epochs 3/10 · 1.5M records · 750.0k rec/s · slowest: count 1.25 s busy · 2.0 s"
    assert render(Status(elapsed=0.0, records=0)) == "0 records · 0 rec/s · 0.0 s"


def test_tracker_follows_a_run() -> None:
    tracker = Tracker(total_epochs=4)
    seen: list[int] = []
    execute(_job(4, 1000, seen), 2, log=tracker)
    status = tracker.status()
    assert status.records == 4000  # sent by the source ("rows"), over both workers
    assert status.slowest in {"rows", "spread", "square", "seen", "probe"}
    assert status.slowest_busy == max(tracker.busy.values()) > 0
    assert status.epochs is None  # every frontier is empty at the end: nothing holds back


def test_metrics_carry_the_same_figures() -> None:
    metrics = Metrics()
    seen: list[int] = []
    execute(_job(3, 500, seen), 2, log=metrics)
    from prometheus_client import generate_latest

    status = status_from_metrics([generate_latest(metrics.registry).decode()] * 2, elapsed=1.0)
    assert status.records == 2 * 1500  # two copies of the same process's text
    assert status.slowest is not None and status.slowest_busy > 0


def test_off_the_terminal_it_is_off(tmp_path: Path) -> None:
    with open(tmp_path / "err", "w") as stream:
        line = ProgressLine(stream=stream)
        assert not line.enabled and line.sink is None
    assert ProgressLine(quiet=True).sink is None


def _run_on_terminal(args: list[str], tmp_path: Path) -> tuple[int, str]:
    """Run wordcount with stderr on a pseudo-terminal; its exit status and what it drew there."""
    text = tmp_path / "words.txt"
    text.write_text(" ".join(f"w{i % 50}" for i in range(200_000)))
    return _on_terminal([sys.executable, str(WORDCOUNT), "--input", str(text), "--output", str(tmp_path / "out.tsv"),
                         *args])


def _on_terminal(command: list[str]) -> tuple[int, str]:
    """Run ``command`` with stderr on a pseudo-terminal; its exit status and what it drew there."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]), "COLUMNS": "200"}
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=slave, env=env, cwd=ROOT)
    os.close(slave)
    drawn = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break  # the child closed the terminal
            if not chunk:
                break
            drawn += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=60), drawn.decode(errors="replace")


@pytest.mark.timeout(300)
def test_wordcount_draws_a_line_on_a_terminal_and_not_with_q(tmp_path: Path) -> None:
    code, drawn = _run_on_terminal([], tmp_path)
    assert code == 0, drawn
    assert "rec/s" in drawn and "records" in drawn
    code, quiet = _run_on_terminal(["-q"], tmp_path)
    assert code == 0, quiet
    assert "rec/s" not in quiet and "wordcount: 50 words" in quiet


def test_without_a_terminal_wordcount_prints_no_line(tmp_path: Path) -> None:
    text = tmp_path / "words.txt"
    text.write_text("a b a\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    result = subprocess.run(
        [sys.executable, str(WORDCOUNT), "--input", str(text), "--output", str(tmp_path / "out.tsv")],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "rec/s" not in result.stderr and result.stderr.startswith("wordcount: 2 words")


@pytest.mark.timeout(300)
def test_launch_draws_the_cluster_line_from_metrics() -> None:
    from tests.observe.test_metrics import _consecutive_free_ports

    base = _consecutive_free_ports(2)
    job = [sys.executable, "-m", "pytimely", "run", "tests.observe.jobs:counted", "40", "400", "0.05"]
    code, drawn = _on_terminal(
        [sys.executable, "-m", "pytimely", "launch", "-n", "2", "--metrics-port", str(base), "--", *job]
    )
    assert code == 0, drawn
    assert "rec/s" in drawn and "slowest: " in drawn and "epochs " in drawn
