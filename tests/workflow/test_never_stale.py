"""Never stale, even with early cutoff: what a value depends on is in its fingerprint or its content.

Each test is a case a fresh run disagreed with a resumed one before: a parameter changed inside a loop body, a
dict reordered, a file whose path stays the same while its content changes, a declared file edited by hand.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from pytimely.errors import ModuleOutputError
from pytimely.workflow import composite, loop, simple
from pytimely.workflow.model import Module
from pytimely.workflow.planning import plan
from pytimely.workflow.runner import run
from pytimely.workflow.runtime import Trace
from pytimely.workflow.staging import LocalStaging

ROOT = Path(__file__).resolve().parents[2]


class Acc(NamedTuple):
    x: int
    n: int


@simple
def add(x: int, *, p: int = 1) -> int:
    return x + p


@simple
def count(n: int) -> int:
    return n + 1


@simple
def below(n: int, *, limit: int = 3) -> bool:
    return n < limit


def accumulating(p: int, limit: int = 3) -> Module:
    """x grows by ``p`` per iteration; the parameter sits in a composite inside the loop's body (two levels down)."""

    @composite
    def step(x: int) -> int:
        return add(x, p=p)

    @loop
    def accumulate(x: int, n: int) -> Acc:
        return Acc(x=step(x), n=count(n)), below(count(n), limit=limit)

    @composite
    def workflow(x: int, n: int) -> Acc:
        out = accumulate(x, n)
        return Acc(out.x, out.n)

    return workflow


def test_a_parameter_changed_inside_a_loop_body_reruns_the_loop(tmp_path: Path) -> None:
    """Before: ``step(x, p=1)`` → ``p=5`` gave x = 3 where a fresh run gives 15, and plan said it would run 0
    modules (the loop's fingerprint covered its children's code, not their parameters)."""
    staging = LocalStaging(tmp_path / "stage")
    assert run(accumulating(1), {"x": 0, "n": 0}, staging=staging) == {"x": 3, "n": 3}
    changed = accumulating(5)
    planned = plan(changed, {"x": 0, "n": 0}, staging=staging)
    assert "workflow/accumulate/iter-0/step/add" in planned.will_run()
    reasons = [str(r) for r in planned.why()["workflow/accumulate/iter-0/step/add"]]
    assert "parameter p changed: 1 → 5" in reasons
    assert run(changed, {"x": 0, "n": 0}, staging=staging) == run(changed, {"x": 0, "n": 0}) == {"x": 15, "n": 3}
    # The stop condition's parameter counts too, and the other modules' staged values are reused.
    trace = Trace()
    assert run(accumulating(5, limit=2), {"x": 0, "n": 0}, staging=staging, trace=trace) == {"x": 10, "n": 2}
    assert sorted(p.rsplit("/", 1)[1] for p in trace.ran) == ["below", "below"]


@simple
def rank(scores: list[list[Any]]) -> dict[str, int]:
    """Highest score first; a tie keeps the input's order (``sorted`` is stable)."""
    return dict(sorted(((name, score) for name, score in scores), key=lambda item: -item[1]))


@simple
def winner(ranking: dict[str, int]) -> str:
    return next(iter(ranking))


@composite
def contest(scores: list[list[Any]]) -> str:
    return winner(rank(scores))


def test_a_reordered_dict_is_not_cut_off_as_unchanged(tmp_path: Path) -> None:
    """Before: dicts were compared as sets of items, so ``winner`` was cut off and stayed "alice"."""
    staging = LocalStaging(tmp_path / "stage")
    assert run(contest, {"scores": [["alice", 3], ["bob", 3], ["carol", 1]]}, staging=staging) == {"out": "alice"}
    reordered = {"scores": [["bob", 3], ["alice", 3], ["carol", 1]]}
    trace = Trace()
    assert run(contest, reordered, staging=staging, trace=trace) == run(contest, reordered) == {"out": "bob"}
    assert trace.ran == ["contest/rank", "contest/winner"] and trace.cut_off == []


WRITER = """
    from pathlib import Path
    from pytimely.workflow import composite, simple

    @simple
    def write_total(values: list[int], *, folder: str) -> Path:
        path = Path(folder) / "total.txt"
        path.write_text(str(sum(values)))
        return path

    @simple
    def read_total(path: Path) -> str:
        return path.read_text()

    @composite
    def totals(values: list[int]) -> str:
        return read_total(write_total(values, folder=FOLDER))
"""


def test_a_reader_of_a_returned_path_sees_the_new_content(user_module: Any, tmp_path: Path) -> None:
    """Before: the writer's code changed, it wrote "15" to the same path and returned the same ``Path``; the
    reader was cut off (its input, the path, was unchanged) and returned "10"."""
    staging = LocalStaging(tmp_path / "stage")
    source = WRITER.replace("FOLDER", repr(str(tmp_path)))
    inputs = {"values": [1, 2, 3, 4]}
    assert run(user_module("writer_a", source).totals, inputs, staging=staging) == {"out": "10"}
    edited = source.replace("str(sum(values)))", "str(sum(values) + 5))")
    trace = Trace()
    assert run(user_module("writer_a", edited).totals, inputs, staging=staging, trace=trace) == {"out": "15"}
    assert (tmp_path / "total.txt").read_text() == "15"
    assert trace.ran == ["totals/write_total", "totals/read_total"]
    # Edited again without changing what it writes: the writer reruns, the reader is cut off.
    same = edited.replace("str(sum(values) + 5))", "str(5 + sum(values)))")
    again = Trace()
    assert run(user_module("writer_a", same).totals, inputs, staging=staging, trace=again) == {"out": "15"}
    assert again.ran == ["totals/write_total"] and again.cut_off == ["totals/read_total"]


DECLARED = """
    from pytimely.workflow import composite, simple

    @simple(writes="{name}.csv")
    def export(rows: list[int], *, name: str = "rows") -> int:
        with open(f"{name}.csv", "w") as f:
            f.write("\\n".join(map(str, rows)))
        return len(rows)

    @simple
    def check(count: int) -> str:
        with open("rows.csv") as f:
            return f"{count} rows: {f.read().split()}"

    @composite
    def exported(rows: list[int]) -> str:
        return check(export(rows))
"""


def test_a_declared_file_edited_by_hand_is_written_again(
    user_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A declared file is an output: edited or deleted since, the module and what depends on it run again (and
    the plan says why); as it was, nothing runs."""
    monkeypatch.chdir(tmp_path)
    module = user_module("declared_a", DECLARED)
    staging = LocalStaging(tmp_path / "stage")
    assert run(module.exported, {"rows": [1, 2]}, staging=staging) == {"out": "2 rows: ['1', '2']"}
    (tmp_path / "rows.csv").write_text("9\n9\n9")
    why = plan(module.exported, {"rows": [1, 2]}, staging=staging).why()
    assert [str(r) for r in why["exported/export"]] == [f"its file {tmp_path}/rows.csv changed since it wrote it"]
    trace = Trace()
    assert run(module.exported, {"rows": [1, 2]}, staging=staging, trace=trace) == {"out": "2 rows: ['1', '2']"}
    assert (tmp_path / "rows.csv").read_text() == "1\n2"
    assert trace.ran == ["exported/export"] and trace.cut_off == ["exported/check"]
    (tmp_path / "rows.csv").unlink()
    assert run(module.exported, {"rows": [1, 2]}, staging=staging) == {"out": "2 rows: ['1', '2']"}
    assert (tmp_path / "rows.csv").exists()
    nothing = Trace()
    run(module.exported, {"rows": [1, 2]}, staging=staging, trace=nothing)
    assert nothing.ran == [] and nothing.cut_off == []


def test_a_declared_file_not_written_fails_the_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    @simple(writes="never.csv")
    def promises(x: int) -> int:
        return x

    @composite
    def broken_promise(x: int) -> int:
        return promises(x)

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModuleOutputError, match=r"'broken_promise/promises' declares that it writes .*never\.csv"):
        run(broken_promise, {"x": 1})


UNDECLARED = """
    from pytimely.workflow import composite, simple

    @simple
    def sneaky(x: int) -> int:
        with open("side.txt", "w") as f:
            f.write(str(x))
        with open("log.txt", "a") as f:  # appending to a log is not an output
            f.write("ran\\n")
        return x + 1

    @composite
    def workflow(x: int) -> int:
        return sneaky(x)
"""


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_an_undeclared_file_fails_the_module_in_one_line(tmp_path: Path, executor: str) -> None:
    (tmp_path / "wf.py").write_text(textwrap.dedent(UNDECLARED), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytimely", "workflow", "run", f"{tmp_path}/wf.py:workflow", "--staging",
         str(tmp_path / "stage"), "--input", "x=1", "-q", "--executor", executor],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"UndeclaredWriteError: module 'workflow/sneaky' wrote {tmp_path}/side.txt without declaring it" in lines[0]
    assert not LocalStaging(tmp_path / "stage").keys("workflow/sneaky/out"), "nothing of it was staged"


@simple
def scratch(x: int) -> int:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".tmp") as f:  # temporary files are not outputs
        f.write(str(x))
    return x


@composite
def scratching(x: int) -> int:
    return scratch(x)


def test_temporary_files_are_not_outputs() -> None:
    assert run(scratching, {"x": 4}) == {"out": 4}  # an undeclared file would raise UndeclaredWriteError
