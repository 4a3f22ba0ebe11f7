"""Runs you can steer and that explain themselves: rerun a module, stop after one, keep going past a failure,
retries with backoff, and why each module of a plan will run."""

from __future__ import annotations

import asyncio
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from pytimely.errors import ModuleRaisedError, RunStoppedError, UnknownModuleError
from pytimely.workflow import composite, loop, simple
from pytimely.workflow.cli import main
from pytimely.workflow.planning import plan
from pytimely.workflow.runner import arun, run
from pytimely.workflow.runtime import Event, Trace
from pytimely.workflow.staging import LocalStaging

CALLS: Counter[str] = Counter()


class Both(NamedTuple):
    c: int
    d: int


@simple
def a(x: int) -> int:
    CALLS["a"] += 1
    return x + 1


@simple
def b(y: int, *, salt: int = 0) -> int:
    CALLS["b"] += 1
    return y * 2 + salt


@simple
def c(z: int) -> int:
    CALLS["c"] += 1
    return z + 100


@simple
def d(x: int) -> int:
    CALLS["d"] += 1
    return -x


@composite
def chain(x: int) -> Both:
    return Both(c(b(a(x))), d(x))


def test_rerun_runs_the_module_and_what_its_new_value_changes(tmp_path: Path) -> None:
    staging = LocalStaging(tmp_path / "stage")
    assert run(chain, {"x": 1}, staging=staging) == {"c": 104, "d": -1}
    why = plan(chain, {"x": 1}, staging=staging, rerun=["b"]).why()
    assert [str(r) for r in why["chain/b"]] == ["asked to rerun (b)"]
    assert [str(r) for r in why["chain/c"]] == ["in-port z: chain/b reruns"]
    assert set(why) == {"chain/b", "chain/c"}
    trace = Trace()
    CALLS.clear()
    assert run(chain, {"x": 1}, staging=staging, rerun=["b"], trace=trace) == {"c": 104, "d": -1}
    # b runs whatever is staged (never cut off); c is recomputed, and cut off since b came out the same.
    assert trace.ran == ["chain/b"] and trace.cut_off == ["chain/c"] and dict(CALLS) == {"b": 1}
    # The path works too, and a module named twice is one rerun.
    again = Trace()
    run(chain, {"x": 1}, staging=staging, rerun=["chain/a", "a"], trace=again)
    assert again.ran == ["chain/a"] and again.cut_off == ["chain/b", "chain/c"]


@simple
def grow(v: int) -> int:
    CALLS["grow"] += 1
    return v + 3


@simple
def small(v: int) -> bool:
    return v < 10


class Grown(NamedTuple):
    v: int


@loop
def growing(v: int) -> Grown:
    w = grow(v)
    return Grown(v=w), small(w)


@composite
def looped(v: int) -> int:
    return growing(v).v


def test_rerun_of_a_module_inside_a_loop_reruns_it_in_every_iteration(tmp_path: Path) -> None:
    staging = LocalStaging(tmp_path / "stage")
    assert run(looped, {"v": 0}, staging=staging) == {"out": 12}
    trace = Trace()
    CALLS.clear()
    assert run(looped, {"v": 0}, staging=staging, rerun=["grow"], trace=trace) == {"out": 12}
    assert trace.ran == [f"looped/growing/iter-{k}/grow" for k in range(4)] and CALLS["grow"] == 4
    assert trace.cut_off == [f"looped/growing/iter-{k}/small" for k in range(4)]


class Loaded(NamedTuple):
    total: int
    report: str


@simple
def load(x: int) -> list[int]:
    CALLS["load"] += 1
    return list(range(x))


@simple
def clean(rows: list[int]) -> list[int]:
    CALLS["clean"] += 1
    return [r for r in rows if r % 2 == 0]


@simple
def summarise(rows: list[int]) -> str:
    CALLS["summarise"] += 1
    return f"{len(rows)} rows"


@composite
def inner(rows: list[int]) -> list[int]:
    return clean(rows)


@composite
def pipeline(x: int) -> str:
    return summarise(inner(load(x)))


def test_until_runs_what_a_module_needs_and_gives_its_out_ports(tmp_path: Path) -> None:
    staging = LocalStaging(tmp_path / "stage")
    CALLS.clear()
    assert run(pipeline, {"x": 6}, staging=staging, until="clean") == {"out": [0, 2, 4]}
    assert dict(CALLS) == {"load": 1, "clean": 1}
    planned = plan(pipeline, {"x": 6}, staging=staging)
    assert planned.will_run() == ["pipeline/summarise"]  # the rest is staged, under the workflow's own keys
    assert run(pipeline, {"x": 6}, staging=staging) == {"out": "3 rows"}
    assert dict(CALLS) == {"load": 1, "clean": 1, "summarise": 1}
    # Stopped after clean with another input: summarise's input is staged, and not the one it ran with.
    assert run(pipeline, {"x": 9}, staging=staging, until="clean") == {"out": [0, 2, 4, 6, 8]}
    why = plan(pipeline, {"x": 9}, staging=staging).why()
    assert [str(r) for r in why["pipeline/summarise"]] == ["in-port rows: the value of pipeline/inner/clean changed "
                                                            "since it ran"]  # fmt: skip
    with pytest.raises(UnknownModuleError, match=r"inside loop 'looped/growing'.*name the loop"):
        run(looped, {"v": 0}, until="grow")


def test_unknown_or_ambiguous_modules_are_usage_errors_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    target = f"{__file__}:pipeline"
    for flag in ("--rerun", "--until"):
        assert main(["run", target, "--input", "x=1", flag, "cleen"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{flag}: workflow 'pipeline' has no module 'cleen'" in err[0], err
        assert "pipeline/inner/clean" in err[0]  # the modules it has are listed
    with pytest.raises(UnknownModuleError, match=r"'clean' names 2 modules \(twice/inner/clean, twice/inner_2/clean\)"):
        plan(twice, {"x": 1}, rerun=["clean"])
    assert plan(twice, {"x": 1}, rerun=["inner_2/clean"]).will_run() == [
        "twice/inner/clean", "twice/inner_2/clean", "twice/load", "twice/summarise"
    ]


@composite
def twice(x: int) -> str:
    return summarise(inner(inner(load(x))))


FAILED = threading.Event()


@simple
def bad(x: int) -> int:
    raise ValueError(f"bad {x}")


@simple
def good(x: int) -> int:
    assert FAILED.wait(60), "bad never failed"  # still running when bad fails
    return x + 1


@simple
def after(v: int) -> int:
    CALLS["after"] += 1
    return v * 10


class Branches(NamedTuple):
    left: int
    right: int


@composite
def branches(x: int) -> Branches:
    return Branches(after(bad(x)), after(good(x)))


def events(kinds: list[Event]) -> Any:
    def seen(event: Event) -> None:
        kinds.append(event)
        if event.kind == "failed":
            FAILED.set()

    return seen


@pytest.mark.parametrize("keep_going", [False, True])
def test_a_failure_stops_new_modules_unless_the_run_keeps_going(tmp_path: Path, keep_going: bool) -> None:
    staging = LocalStaging(tmp_path / "stage")
    FAILED.clear()
    CALLS.clear()
    seen: list[Event] = []
    trace = Trace()
    at = rf"failed at \S*test_steering\.py:{bad.function.__code__.co_firstlineno + 2} \(in bad\)"
    with pytest.raises(ModuleRaisedError, match=rf"'branches/bad' {at}: ValueError: bad 3"):
        run(branches, {"x": 3}, staging=staging, keep_going=keep_going, progress=events(seen), trace=trace)
    assert trace.failed == ["branches/bad"]
    # good was running when bad failed: it finished and its value was kept either way.
    assert staging.get("branches/good/out") == 4
    if keep_going:
        assert trace.skipped == ["branches/after"] and CALLS["after"] == 1
        assert staging.get("branches/after_2/out") == 40
    else:
        assert sorted(trace.skipped) == ["branches/after", "branches/after_2"] and CALLS["after"] == 0
    skipped = {e.path: e.message for e in seen if e.kind == "skipped"}
    assert skipped["branches/after"] == "its in-port v has no value (what computes it failed)"


ATTEMPTS: Counter[str] = Counter()


@simple(retries=2, backoff=0.2)
def flaky(x: int) -> int:
    ATTEMPTS["flaky"] += 1
    if ATTEMPTS["flaky"] <= 2:
        raise RuntimeError(f"attempt {ATTEMPTS['flaky']} fails")
    return x


@composite
def retried(x: int) -> int:
    return flaky(x)


def test_retries_wait_longer_each_time() -> None:
    ATTEMPTS.clear()
    seen: list[Event] = []
    began = time.monotonic()
    assert run(retried, {"x": 7}, progress=seen.append) == {"out": 7}
    assert time.monotonic() - began >= 0.6  # 0.2 s, then 0.4 s
    retries = [e.message for e in seen if e.kind == "retry"]
    assert len(retries) == 2
    assert retries[0].endswith("attempt 1 fails; again in 0.2 s") and retries[1].endswith("again in 0.4 s")


@simple(retries=5, backoff=30)
def hopeless(x: int) -> int:
    ATTEMPTS["hopeless"] += 1
    raise RuntimeError("never")


@composite
def waiting(x: int) -> int:
    return hopeless(x)


def test_a_stop_during_a_backoff_ends_the_wait_and_the_retries() -> None:
    ATTEMPTS.clear()

    async def go() -> None:
        stop = asyncio.Event()

        def seen(event: Event) -> None:
            if event.kind == "retry":
                stop.set()

        await arun(waiting, {"x": 1}, stop=stop, progress=seen)

    began = time.monotonic()
    with pytest.raises(RunStoppedError):
        asyncio.run(go())
    assert time.monotonic() - began < 25  # not the 30 s backoff
    assert ATTEMPTS["hopeless"] == 1


NUMBERS = """
    from pytimely.workflow import composite, simple

    @simple
    def scale(values: list[int], *, factor: int = 2) -> list[int]:
        return [v * factor for v in values]

    @simple
    def total(values: list[int], path: str) -> int:
        with open(path) as f:
            return sum(values) + int(f.read())

    @composite
    def numbers(values: list[int], path: str) -> int:
        return total(scale(values, factor=FACTOR), path)
"""


def test_plan_why_names_what_changed(user_module: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    staging = LocalStaging(tmp_path / "stage")
    data = tmp_path / "data.txt"
    data.write_text("1")
    inputs: dict[str, Any] = {"values": [1, 2], "path": str(data)}
    module = user_module("numbers_a", NUMBERS.replace("FACTOR", "2"))

    def why(mod: Any, given: dict[str, Any]) -> dict[str, list[str]]:
        return {k: [str(r) for r in v] for k, v in plan(mod.numbers, given, staging=staging).why().items()}

    assert why(module, inputs) == {
        "numbers/scale": ["it never ran here (no record of it in this staging area)"],
        "numbers/total": ["in-port values: numbers/scale reruns"],
    }
    run(module.numbers, inputs, staging=staging)
    assert why(module, inputs) == {}
    assert why(module, {**inputs, "values": [1, 3]}) == {
        "numbers/scale": ["in-port values changed: [1, 2] → [1, 3]"],
        "numbers/total": ["in-port values: numbers/scale reruns"],
    }
    assert why(user_module("numbers_a", NUMBERS.replace("FACTOR", "3")), inputs) == {
        "numbers/scale": ["parameter factor changed: 2 → 3"],
        "numbers/total": ["in-port values: numbers/scale reruns"],
    }
    edited = user_module("numbers_a", NUMBERS.replace("FACTOR", "2").replace("v * factor", "factor * v"))
    assert why(edited, inputs)["numbers/scale"] == ["its code changed"]
    module = user_module("numbers_a", NUMBERS.replace("FACTOR", "2"))
    data.write_text("2")
    assert why(module, inputs) == {"numbers/total": [f"in-port path: the content of {str(data)!r} changed"]}
    data.write_text("1")
    staging.delete("numbers/total/out")
    assert why(module, inputs) == {"numbers/total": ["its staged value of out-port out is gone"]}
    # The command prints the same, one line per module (the same code in a file of another name is other code:
    # a function's fingerprint holds its module's name).
    source = tmp_path / "numbers_b.py"
    source.write_text(textwrap.dedent(NUMBERS.replace("FACTOR", "2")))
    assert main(["plan", f"{source}:numbers", "--staging", str(staging.root), "--input", "values=[1,2]",
                 "--input", f"path={data}", "--why"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("will run 2 modules:")
    assert lines[at + 1 :] == [
        "  numbers/scale: its code changed",
        "  numbers/total: in-port values: numbers/scale reruns; its code changed",
    ]


def test_the_command_stops_after_a_module_and_keeps_going(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stage = str(tmp_path / "stage")
    assert main(["run", f"{__file__}:pipeline", "--staging", stage, "--input", "x=6", "--until", "inner/clean",
                 "-q"]) == 0  # fmt: skip
    assert capsys.readouterr().out == "out = [0, 2, 4]\n"
    assert main(["run", f"{__file__}:calm_branches", "--staging", stage, "--input", "x=3", "--keep-going",
                 "--progress", "lines"]) == 1  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert "not run  calm_branches/after (its in-port v has no value (what computes it failed))" in err
    assert any(line.startswith("finished calm_branches/after_2") for line in err), err
    assert err[-1].startswith("pytimely workflow: ModuleRaisedError: module 'calm_branches/bad' failed at "), err


@composite
def calm_branches(x: int) -> Branches:
    return Branches(after(bad(x)), after(a(x)))
