"""Early cutoff: a module recomputed to the same value does not make its dependents run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytimely.workflow.interpreter import Trace
from pytimely.workflow.runner import plan, run
from pytimely.workflow.staging import LocalStaging, StagingArea

PIPELINE = """
    from typing import NamedTuple
    from pytimely.workflow import composite, simple

    class Out(NamedTuple):
        total: int
        other: int

    @simple
    def double(x: int) -> int:
        return x * 2

    @simple
    def plus_one(y: int) -> int:
        return y + 1

    @simple
    def square(z: int) -> int:
        return z * z

    @simple
    def negate(x: int) -> int:
        return -x

    @composite
    def workflow(x: int) -> Out:
        return Out(square(plus_one(double(x))), negate(x))
"""


def _run(module: Any, staging: StagingArea) -> Trace:
    trace = Trace()
    assert run(module.workflow, {"x": 3}, staging=staging, trace=trace) == {"total": 49, "other": -3}
    return trace


def test_an_output_preserving_edit_reruns_that_module_alone(user_module: Any, tmp_path: Path) -> None:
    staging = LocalStaging(tmp_path / "stage")
    first = _run(user_module("pipeline_a", PIPELINE), staging)
    assert sorted(first.ran) == ["workflow/double", "workflow/negate", "workflow/plus_one", "workflow/square"]
    # A comment: no module's code changed at all.
    commented = PIPELINE.replace("return x * 2", "return x * 2  # twice")
    assert _run(user_module("pipeline_a", commented), staging).ran == []
    # The same function computed another way: it reruns, its dependents are cut off.
    same = PIPELINE.replace("return x * 2", "return x + x")
    module = user_module("pipeline_a", same)
    planned = plan(module.workflow, {"x": 3}, staging=staging)
    assert planned.will_run() == ["workflow/double", "workflow/plus_one", "workflow/square"]
    assert planned.may_be_cut_off() == ["workflow/plus_one", "workflow/square"]  # not double: its code changed
    trace = _run(module, staging)
    assert trace.ran == ["workflow/double"]
    assert trace.cut_off == ["workflow/plus_one", "workflow/square"]
    # The cut-off values were retagged: the next run finds everything.
    assert _run(user_module("pipeline_a", same), staging).ran == []
    # A real change reruns everything after it.
    changed = same.replace("return y + 1", "return y + 1 - 0 * y")  # the same values, once more
    trace = _run(user_module("pipeline_a", changed), staging)
    assert trace.ran == ["workflow/plus_one"] and trace.cut_off == ["workflow/square"]


def test_plan_names_the_modules_that_may_be_cut_off(user_module: Any, tmp_path: Path) -> None:
    staging = LocalStaging(tmp_path / "stage")
    _run(user_module("pipeline_b", PIPELINE), staging)
    module = user_module("pipeline_b", PIPELINE.replace("return x * 2", "return 2 * x"))
    planned = plan(module.workflow, {"x": 3}, staging=staging)
    # They are recomputed only because double is (ComputeResumeState knows no values), and their code is as
    # their trace records say.
    assert planned.may_be_cut_off() == ["workflow/plus_one", "workflow/square"]
    assert "may be cut off" in planned.render()


def test_a_changed_value_is_not_cut_off(user_module: Any, tmp_path: Path) -> None:
    staging = LocalStaging(tmp_path / "stage")
    _run(user_module("pipeline_c", PIPELINE), staging)
    module = user_module("pipeline_c", PIPELINE.replace("return x * 2", "return x * 4"))
    trace = Trace()
    assert run(module.workflow, {"x": 3}, staging=staging, trace=trace) == {"total": 169, "other": -3}
    assert sorted(trace.ran) == ["workflow/double", "workflow/plus_one", "workflow/square"]
    assert trace.cut_off == []
