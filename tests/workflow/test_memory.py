"""Memory: a run holds the values its running modules read and return, not every value it has made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MB = 1 << 20
SIZE = 40 * MB
ITERATIONS = 25

CHILD = """
import json, resource, sys
from typing import NamedTuple

import numpy as np
from pytimely.workflow import composite, loop, simple
from pytimely.workflow.runner import run

SIZE, ITERATIONS = {size}, {iterations}

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

@simple
def start(n: int) -> np.ndarray:
    return np.full(SIZE // 8, float(n))

@simple
def step(x: np.ndarray) -> np.ndarray:
    return x + 1.0

@simple
def more(x: np.ndarray) -> bool:
    return bool(x[0] < ITERATIONS)

class State(NamedTuple):
    x: np.ndarray

@loop
def grow(x: np.ndarray) -> State:
    y = step(x)
    return State(x=y), more(y)

@simple
def first(x: np.ndarray) -> float:
    return float(x[0])

@composite
def workflow(n: int) -> float:
    return first(grow(start(n)).x)

# What the process holds with one value alive, before the run.
one = np.full(SIZE // 8, 1.0)
one += 1
del one
before = peak()
result = run(workflow, {{"n": 0}}, staging=sys.argv[1])
print(json.dumps({{"before": before, "after": peak(), "result": result}}))
"""


def test_a_loop_of_large_arrays_holds_a_few_at_a_time(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD.format(size=SIZE, iterations=ITERATIONS)), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "stage")], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["result"] == {"out": float(ITERATIONS)}
    grew = figures["after"] - figures["before"]
    print(f"peak RSS grew by {grew / MB:.0f} MB over {figures['before'] / MB:.0f} MB for {ITERATIONS} x 40 MB")
    # Every value kept would be 25 x 40 MB = 1,000 MB more; a few values at a time (an input, its output, the
    # bytes read or written) stay far below the generous bound of 8 values.
    assert grew < 8 * SIZE, f"peak RSS grew by {grew / MB:.0f} MB"
