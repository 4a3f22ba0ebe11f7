"""End to end: the example workflow (CSV → clean → 2-core loop → dataflow components → report) run by
``python -m pytimely workflow run`` in real processes on a local staging directory, interrupted at each module in
turn (an exception, or SIGKILL of the whole process) and resumed: the resumed run runs exactly what ``plan``
predicted and gives the outputs of an uninterrupted run. Editing one module's code reruns it and its dependents.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytimely.workflow.cli import load_workflow
from pytimely.workflow.model import Module
from pytimely.workflow.planning import Plan, plan
from pytimely.workflow.staging import LocalStaging

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "workflows" / "components.py"

# Two triangles, a tail of three edges hanging off one (peeled one edge per round: four rounds, the last
# dropping nothing), a lone edge, and lines clean() drops (malformed, a self-loop, a duplicate).
EDGES = "\n".join(
    ["1,2", "2,3", "3,1", "3,4", "4,5", "5,6", "7,8", "8,9", "9,7", "10,11", "x,y", "12,12", "2,1", "oops"]
)
MODULES = ["workflow/clean", "workflow/components", "workflow/load", "workflow/report"]


@pytest.fixture(scope="module")
def example() -> Module:
    """The example workflow imported as the command imports it (a function's fingerprint names its module)."""
    return load_workflow(f"{EXAMPLE}:workflow")


def cli(
    tmp: Path,
    workflow_file: Path,
    *,
    staging: Path,
    fail: str = "",
    trace: Path | None = None,
    extra: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """``python -m pytimely workflow run`` on the example in a fresh process."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTIMELY_EXAMPLE_FAIL": fail}
    env["PYTIMELY_EXAMPLE_TRACE"] = str(trace) if trace else ""
    command = [sys.executable, "-m", "pytimely", "workflow", "run", f"{workflow_file}:workflow"]
    command += ["--staging", str(staging), "--input", f"csv={tmp / 'edges.csv'}", "--input", "min_size=2", *extra]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=tmp)


def started(stderr: str) -> list[str]:
    """The module paths a run's progress lines say it started."""
    return sorted(line.split()[1] for line in stderr.splitlines() if line.startswith("started "))


def outputs(directory: Path) -> tuple[dict[str, Any], list[tuple[int, int]]]:
    """The summary and the (vertex, label) rows, sorted (the dataflow gives them in no set order)."""
    summary = json.loads((directory / "summary.json").read_text())
    labels = pickle.loads((directory / "labels.pkl").read_bytes())
    return summary, sorted(map(tuple, np.asarray(labels).tolist()))


def predicted_and_extra(predicted: Plan, ran: list[str]) -> tuple[set[str], set[str]]:
    """The modules ``plan`` names, and those a run may add: a resumed loop's iterations after the planned one."""
    extra = set()
    for loop, k in predicted.loops().items():
        if k is None:
            continue
        for path in ran:
            head = f"{loop}/iter-"
            if path.startswith(head) and int(path[len(head) :].split("/")[0]) > k:
                extra.add(path)
    return set(predicted.will_run()), extra


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[tuple[int, int]], list[str]]:
    """An uninterrupted run's outputs and the modules it ran."""
    tmp = tmp_path_factory.mktemp("reference")
    (tmp / "edges.csv").write_text(EDGES)
    done = cli(tmp, EXAMPLE, staging=tmp / "stage", extra=("--output-dir", str(tmp / "out")))
    assert done.returncode == 0, done.stderr
    summary, labels = outputs(tmp / "out")
    return summary, labels, started(done.stderr)


def test_reference_run_is_right(reference: tuple[dict[str, Any], list[tuple[int, int]], list[str]]) -> None:
    summary, labels, ran = reference
    # By hand from EDGES: components {1..6}, {7,8,9}, {10,11}; the 2-core is the two triangles.
    assert summary == {"vertices": 11, "edges": 10, "core_edges": 6, "components": 3, "largest": 6}
    assert labels == [(1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1), (7, 7), (8, 7), (9, 7), (10, 10), (11, 10)]
    assert ran == sorted([*MODULES, *(f"workflow/core/iter-{k}/peel" for k in range(4))])


@pytest.mark.parametrize("how", ["raise", "kill"])
@pytest.mark.parametrize("where", ["load", "clean", "peel#1", "peel#3", "components", "report"])
def test_killed_at_a_module_and_resumed(
    tmp_path: Path,
    example: Module,
    reference: tuple[dict[str, Any], list[tuple[int, int]], list[str]],
    where: str,
    how: str,
) -> None:
    (tmp_path / "edges.csv").write_text(EDGES)
    stage = tmp_path / "stage"
    killed = cli(tmp_path, EXAMPLE, staging=stage, fail=f"{where}:{how}")
    name, _, nth = where.partition("#")
    victim = f"workflow/core/iter-{int(nth) - 1}/peel" if nth else f"workflow/{name}"
    if how == "kill":
        assert killed.returncode == -signal.SIGKILL
    else:
        assert killed.returncode == 1
        assert f"module {victim!r} failed" in killed.stderr.splitlines()[-1]
    assert f"started  {victim}" in killed.stderr
    assert f"finished {victim}" not in killed.stderr

    predicted = plan(example, {"csv": str(tmp_path / "edges.csv"), "min_size": 2}, staging=LocalStaging(stage))
    assert victim in predicted.will_run()
    if nth:
        assert predicted.loops() == {"workflow/core": int(nth) - 1}

    log = tmp_path / "trace.log"
    resumed = cli(tmp_path, EXAMPLE, staging=stage, trace=log, extra=("--output-dir", str(tmp_path / "out")))
    assert resumed.returncode == 0, resumed.stderr
    ran = started(resumed.stderr)
    expected, extra = predicted_and_extra(predicted, ran)
    assert expected <= set(ran) and set(ran) - expected == extra
    assert Counter(log.read_text().split()) == Counter(path.rsplit("/", 1)[1] for path in ran)
    summary, labels = outputs(tmp_path / "out")
    assert (summary, labels) == reference[:2]
    # What ran before the interruption and finished is not run again.
    finished_before = {line.split()[1] for line in killed.stderr.splitlines() if line.startswith("finished ")}
    assert not finished_before & set(ran)


def test_editing_one_module_reruns_it_and_its_dependents(
    tmp_path: Path, reference: tuple[dict[str, Any], list[tuple[int, int]], list[str]]
) -> None:
    (tmp_path / "edges.csv").write_text(EDGES)
    copy = tmp_path / "components.py"
    shutil.copy(EXAMPLE, copy)
    stage = tmp_path / "stage"
    first = cli(tmp_path, copy, staging=stage)
    assert first.returncode == 0, first.stderr

    def edit(old: str, new: str) -> list[str]:
        source = copy.read_text()
        assert source.count(old) == 1
        copy.write_text(source.replace(old, new))
        log = tmp_path / f"trace-{len(list(tmp_path.glob('trace-*')))}.log"
        done = cli(tmp_path, copy, staging=stage, trace=log, extra=("--output-dir", str(tmp_path / "out")))
        assert done.returncode == 0, done.stderr
        return sorted(log.read_text().split()) if log.exists() else []

    # report's code changes: only report reruns, and its new output shows.
    assert edit('        "largest": big[0] if big else 0,\n', '        "largest": max(big, default=0),\n') == ["report"]
    summary, labels = outputs(tmp_path / "out")
    assert (summary, labels) == reference[:2]
    # peel's code changes: every iteration of the loop reruns; load, clean, components do not, and report is cut
    # off (peel computes what it did before).
    assert edit("leaves = vertices[degree < 2]", "leaves = vertices[degree <= 1]") == ["peel"] * 4
    # Only the file's docstring changes: nothing runs.
    assert edit("Run it twice:", "Run it twice, and") == []
    assert outputs(tmp_path / "out") == reference[:2]
