"""``pytimely workflow run|plan|show`` on the example workflow: outputs, progress lines, plans, Mermaid, exit status."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytimely.cli import main as pytimely_main
from pytimely.workflow.cli import load_workflow, main, parse_inputs
from pytimely.workflow.model import Kind
from pytimely.workflow.planning import plan
from pytimely.workflow.runner import run
from pytimely.workflow.staging import LocalStaging

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "workflows" / "components.py"
TARGET = f"{EXAMPLE}:workflow"
EDGES = "1,2\n2,3\n3,1\n3,4\n5,6\nnot an edge\n"


@pytest.fixture
def edges(tmp_path: Path) -> Path:
    path = tmp_path / "edges.csv"
    path.write_text(EDGES)
    return path


def args(edges: Path, stage: Path, *more: str) -> list[str]:
    return [TARGET, "--staging", str(stage), "--input", f"csv={edges}", "--input", "min_size=2", *more]


def test_run_prints_outputs_and_progress_then_resumes_with_nothing_to_do(
    edges: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stage = tmp_path / "stage"
    assert main(["run", *args(edges, stage, "--output", "summary")]) == 0
    out, err = capsys.readouterr()
    expected = run(load_workflow(TARGET), {"csv": str(edges), "min_size": 2}, outputs=["summary"])["summary"]
    assert out == f"summary = {json.dumps(expected, sort_keys=True)}\n"
    started = [line.split()[1] for line in err.splitlines() if line.startswith("started ")]
    finished = [line.split()[1] for line in err.splitlines() if line.startswith("finished ")]
    assert sorted(started) == sorted(finished) and "workflow/report" in started
    assert all(line.endswith(" s)") for line in err.splitlines() if line.startswith("finished "))
    assert err.splitlines()[-1].startswith(f"ran {len(started)} modules, reused 0 values in ")
    assert main(["run", *args(edges, stage, "--output", "summary")]) == 0
    out2, err2 = capsys.readouterr()
    assert out2 == out
    assert "started" not in err2 and err2.startswith("ran 0 modules, reused ")


def test_output_dir_quiet_and_fresh(edges: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stage, out_dir = tmp_path / "stage", tmp_path / "out"
    assert main(["run", *args(edges, stage, "-q", "--output-dir", str(out_dir))]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == ""
    assert sorted(p.name for p in out_dir.iterdir()) == ["labels.pkl", "summary.json"]
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary == run(load_workflow(TARGET), {"csv": str(edges), "min_size": 2})["summary"]
    assert main(["run", *args(edges, stage, "--fresh", "--output", "summary")]) == 0
    err = capsys.readouterr().err
    assert "started  workflow/load" in err and "reused 0 values" in err


def test_plan_prints_what_the_api_plans_and_the_run_does(
    edges: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stage = tmp_path / "stage"
    assert main(["run", *args(edges, stage, "-q")]) == 0
    capsys.readouterr()
    # A new min_size: only the report is recomputed.
    changed = [TARGET, "--staging", str(stage), "--input", f"csv={edges}", "--input", "min_size=3"]
    assert main(["plan", *changed]) == 0
    text = capsys.readouterr().out
    api = plan(load_workflow(TARGET), {"csv": str(edges), "min_size": 3}, staging=LocalStaging(stage))
    assert text.strip() == api.render()
    assert text.strip().splitlines()[-1] == "will run 1 module: workflow/report"
    ready_line = next(line for line in text.splitlines() if line.strip().startswith("ready"))
    assert "report.labels" in ready_line and "report.min_size" in ready_line
    assert main(["run", *changed]) == 0
    err = capsys.readouterr().err
    assert [line.split()[1] for line in err.splitlines() if line.startswith("started ")] == ["workflow/report"]


def test_show_draws_every_module_and_connection(capsys: pytest.CaptureFixture[str]) -> None:
    assert pytimely_main(["workflow", "show", TARGET]) == 0
    text = capsys.readouterr().out
    workflow = load_workflow(TARGET)
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    for module in workflow.walk():
        assert f'"{module.name}"' in text or f'"{module.name} ({module.kind.value})"' in text
    connections = sum(len(m.connections) for m in workflow.walk() if m.kind in (Kind.COMPOSITE, Kind.LOOP))
    assert sum(" --> " in line or " -->|" in line for line in lines) == connections
    assert sum("next iteration" in line for line in lines) == sum(len(m.io_ports) for m in workflow.walk())
    assert text.count("subgraph") == text.count("\n  end") + text.count("\n    end")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "no_such_module_here:workflow"], "cannot import"),
        (["run", f"{EXAMPLE}:nothing"], "has no attribute 'nothing'"),
        (["run", f"{EXAMPLE}:observe"], "not a workflow module"),
        (["run", TARGET, "--input", "csv"], "NAME=VALUE"),
        (["run", TARGET, "--input", "colour=red"], "no in-port 'colour'"),
        (["run", TARGET, "--input", "csv=x.csv"], "in-port 'min_size' needs a value"),
        (["plan", TARGET, "--input", "csv=x", "--input", "min_size=1", "--output", "nope"], "no out-port 'nope'"),
    ],
)
def test_usage_and_definition_errors_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err and err.startswith("pytimely workflow: error: ")


def test_a_failing_module_exits_1_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.csv"
    code = main(["run", TARGET, "--staging", str(tmp_path / "s"), "--input", f"csv={missing}", "--input", "min_size=2"])
    assert code == 1
    last = capsys.readouterr().err.splitlines()[-1]
    assert "ModuleRaisedError" in last and "'workflow/load'" in last and "missing.csv" in last
    # It names the file and line of the user's code that raised, not the library's.
    assert re.search(r"failed at examples/workflows/components\.py:\d+ \(in load\): FileNotFoundError", last), last


def test_a_file_whose_name_is_taken_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    load_workflow(TARGET)
    other = tmp_path / EXAMPLE.name
    other.write_text(EXAMPLE.read_text())
    assert main(["show", f"{other}:workflow"]) == 2
    assert "already loaded" in capsys.readouterr().err


def test_inputs_are_json_when_they_parse() -> None:
    assert parse_inputs(["a=2", "b=[1, 2]", "c=hello", "d=", 'e="x"', "f=a=b"]) == {
        "a": 2,
        "b": [1, 2],
        "c": "hello",
        "d": "",
        "e": "x",
        "f": "a=b",
    }


def test_process_executor_in_a_real_command(edges: Path, tmp_path: Path) -> None:
    """``python -m pytimely workflow run --executor process``: module code in worker processes, same outputs."""
    command = [
        sys.executable,
        "-m",
        "pytimely",
        "workflow",
        "run",
        *args(edges, tmp_path / "s"),
        "--executor",
        "process",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    expected = run(load_workflow(TARGET), {"csv": str(edges), "min_size": 2})
    assert done.stdout.splitlines()[-1] == f"summary = {json.dumps(expected['summary'], sort_keys=True)}"
