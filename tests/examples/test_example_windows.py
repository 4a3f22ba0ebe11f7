"""The windows example end to end in a subprocess: the reference's rows for every worker count, bad rows refused."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pytimely.dataflow.operators.window import Session, Sliding, Tumbling
from tests.dataflow.test_windows import reference

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "windows.py"
SRC = Path(__file__).resolve().parents[2] / "src"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


def write_events(path: Path, events: list[tuple[int, str]]) -> None:
    path.write_text("time,key\n" + "".join(f"{t},{k}\n" for t, k in events))


@pytest.mark.parametrize(
    ("flag", "value", "kind"),
    [("--tumbling", "7", Tumbling(7)), ("--sliding", "10,4", Sliding(10, 4)), ("--session", "3", Session(3))],
)
@pytest.mark.parametrize("keys", ["words", "numbers"])
def test_the_output_is_the_reference_for_every_worker_count(
    tmp_path: Path, flag: str, value: str, kind: Tumbling | Sliding | Session, keys: str
) -> None:
    rng = random.Random(5)
    names = ["apple", "fig", "kiwi", "plum"] if keys == "words" else ["3", "11", "-2", "40"]
    events = [(rng.randrange(300), rng.choice(names)) for _ in range(800)]  # not in time order
    write_events(tmp_path / "events.csv", events)
    as_keys = (lambda k: k) if keys == "words" else int
    expected = reference(kind, [(t, as_keys(k), 1) for t, k in events])
    outputs = []
    for workers in (1, 2, 3):
        out = tmp_path / f"out{workers}.csv"
        result = run("--input", str(tmp_path / "events.csv"), "--output", str(out), flag, value, "-w", str(workers))
        assert result.returncode == 0, result.stderr
        lines = out.read_text().splitlines()
        assert lines[0] == "start,end,key,count"
        outputs.append(lines)
    assert outputs[0] == outputs[1] == outputs[2]
    rows = [line.split(",") for line in outputs[0][1:]]
    assert [(int(s), int(e), as_keys(k), int(c)) for s, e, k, c in rows] == expected


@pytest.mark.parametrize(
    ("body", "line", "problem"),
    [
        ("time,key\n5,a\n6\n", 3, "expected 2 comma-separated fields"),
        ("time,key\n5,a\nsoon,b\n", 3, "the time must be an integer"),
        ("time,key\n5,a\n7,b\n-1,c\n", 4, "from 0 to"),
        ("time,key\n5,\n", 2, "the key is empty"),
        ("when,who\n5,a\n", 1, "expected the header"),
    ],
)
def test_a_bad_row_is_named_and_nothing_is_written(tmp_path: Path, body: str, line: int, problem: str) -> None:
    (tmp_path / "events.csv").write_text(body)
    out = tmp_path / "out.csv"
    result = run("--input", str(tmp_path / "events.csv"), "--output", str(out), "--tumbling", "5", "-w", "2")
    assert result.returncode == 2
    assert f"line {line}" in result.stderr and problem in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "events.csv"]


def test_exactly_one_window_kind_is_required(tmp_path: Path) -> None:
    write_events(tmp_path / "events.csv", [(1, "a")])
    both = run("--input", str(tmp_path / "events.csv"), "--output", "o.csv", "--tumbling", "5", "--session", "2")
    assert both.returncode == 2 and "not allowed with" in both.stderr
    bad = run("--input", str(tmp_path / "events.csv"), "--output", "o.csv", "--sliding", "5")
    assert bad.returncode == 2 and "SIZE,STEP" in bad.stderr
