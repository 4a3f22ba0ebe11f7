"""The graph view of built dataflows: WCC and word count against their construction; Mermaid and DOT text."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from pytimely.dataflow.graph_view import DataflowGraph, to_dot, to_mermaid
from pytimely.inspection import built_graphs
from pytimely.progress.timestamp import Increment, ProductSummary
from tests.observe import inspect_jobs


def _edges(graph: DataflowGraph) -> set[tuple[str, str, str]]:
    names = {op.index: op.name for op in graph.operators}
    return {(names[c.source.node], names[c.target.node], c.kind) for c in graph.channels}


def test_wcc_graph_matches_its_construction() -> None:
    (graph,) = built_graphs(inspect_jobs.wcc, 2)
    names = [op.name for op in graph.operators]
    assert names == [
        "edges", "wcc.symmetric", "wcc.feedback", "wcc.enter", "wcc.propagate",
        "wcc.proposals", "wcc.changes", "wcc.leave", "wcc.report", "gather", "probe",
    ]  # fmt: skip
    assert _edges(graph) == {
        ("edges", "wcc.symmetric", "pipeline"),
        ("wcc.symmetric", "wcc.enter", "pipeline"),
        ("wcc.enter", "wcc.propagate", "exchange"),
        ("wcc.feedback", "wcc.propagate", "exchange"),
        ("wcc.propagate", "wcc.proposals", "pipeline"),
        ("wcc.proposals", "wcc.feedback", "pipeline"),
        ("wcc.propagate", "wcc.changes", "pipeline"),
        ("wcc.changes", "wcc.leave", "pipeline"),
        ("wcc.leave", "wcc.report", "pipeline"),
        ("wcc.report", "gather", "exchange"),
        ("gather", "probe", "pipeline"),
    }
    assert len(graph.channels) == 11
    loop = [s for s in graph.scopes if s.name == "wcc.loop"]
    assert len(loop) == 1 and loop[0].parent == 0
    inside = {op.name for op in graph.operators if op.scope == loop[0].index}
    assert inside == {"wcc.feedback", "wcc.enter", "wcc.propagate", "wcc.proposals", "wcc.changes"}
    assert graph.operator("wcc.feedback").feedback == ProductSummary(Increment(0), Increment(1))
    assert [op.name for op in graph.operators if op.feedback is not None] == ["wcc.feedback"]


def test_wordcount_graph_matches_its_construction() -> None:
    # One worker runs exchanges as pipelines, but the graph reports the contract the dataflow asked for.
    # With several workers count_by combines each worker's counts before the exchange, then sums them by key.
    (graph,) = built_graphs(inspect_jobs.wordcount, 3)
    assert len(graph.scopes) == 1
    assert [op.name for op in graph.operators] == ["words", "count_by", "count_by", "gather", "capture"]
    assert [(c.source.node, c.target.node, c.kind) for c in graph.channels] == [
        (0, 1, "pipeline"),
        (1, 2, "exchange"),
        (2, 3, "exchange"),
        (3, 4, "pipeline"),
    ]
    assert all(op.feedback is None for op in graph.operators)
    # One worker runs exchanges as pipelines, but the graph reports the contract the dataflow asked for.
    (graph,) = built_graphs(inspect_jobs.wordcount, 1)
    assert [op.name for op in graph.operators] == ["words", "count_by", "gather", "capture"]
    assert [c.kind for c in graph.channels] == ["exchange", "exchange", "pipeline"]


def _check_mermaid(text: str, graph: DataflowGraph) -> None:
    lines = text.splitlines()
    assert lines[0] == "flowchart TD"
    assert all(line.count('"') % 2 == 0 for line in lines)
    opened = sum(1 for line in lines if line.strip().startswith("subgraph "))
    assert opened == sum(1 for line in lines if line.strip() == "end") == len(graph.scopes)
    declared = set(re.findall(r"^\s*(d\d+n\d+)\[", text, re.M))
    assert declared == {f"d0n{op.index}" for op in graph.operators}
    used = re.findall(r"^\s*(d\d+n\d+) -\.?->(?:\|[^|]*\|)? (d\d+n\d+)$", text, re.M)
    assert len(used) == len(graph.channels)
    assert {n for pair in used for n in pair} <= declared
    if any(op.feedback is not None for op in graph.operators):
        assert "feedback +1" in text


def _check_dot(text: str, graph: DataflowGraph) -> None:
    assert text.startswith("digraph pytimely {")
    for line in text.splitlines():  # every quoted string closes on its own line (newlines in labels are escaped)
        assert len(re.findall(r'(?<!\\)"', line)) % 2 == 0, line
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    assert stripped.count("{") == stripped.count("}")
    assert stripped.count("subgraph cluster_") == len(graph.scopes)
    declared = set(re.findall(r"^\s*(d\d+n\d+) \[label=", text, re.M))
    assert declared == {f"d0n{op.index}" for op in graph.operators}
    used = re.findall(r"^\s*(d\d+n\d+) -> (d\d+n\d+) \[", text, re.M)
    assert len(used) == len(graph.channels)
    assert {n for pair in used for n in pair} <= declared


def test_renderers_declare_every_node_and_balance_their_blocks() -> None:
    for job in (inspect_jobs.wcc, inspect_jobs.wordcount):
        graphs = built_graphs(job, 2)
        _check_mermaid(to_mermaid(graphs), graphs[0])
        _check_dot(to_dot(graphs), graphs[0])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytimely", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_show_prints_the_graph_without_running_it() -> None:
    done = _cli("show", "tests.observe.inspect_jobs:wcc", "-w", "2")
    assert done.returncode == 0, done.stderr
    _check_mermaid(done.stdout, built_graphs(inspect_jobs.wcc, 2)[0])
    done = _cli("show", "--format", "dot", "tests.observe.inspect_jobs:wordcount")
    assert done.returncode == 0, done.stderr
    _check_dot(done.stdout, built_graphs(inspect_jobs.wordcount)[0])
    # -w after the target still sets the layout: with 2 workers count_by has its combining stage.
    done = _cli("show", "tests.observe.inspect_jobs:wordcount", "-w", "2", "--format", "dot")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("count_by") == 2
    _check_dot(done.stdout, built_graphs(inspect_jobs.wordcount, 2)[0])


def test_show_svg_without_graphviz_is_a_typed_error() -> None:
    done = _cli("show", "--format", "svg", "tests.observe.inspect_jobs:wordcount")
    if shutil.which("dot") is None:
        assert done.returncode == 2
        assert "GraphvizError" in done.stderr and "Traceback" not in done.stderr
    else:  # pragma: no cover - depends on the machine
        assert done.returncode == 0 and "<svg" in done.stdout


def test_show_refuses_a_bad_target() -> None:
    done = _cli("show", "tests.observe.inspect_jobs:nothing_here")
    assert done.returncode == 2 and "Traceback" not in done.stderr


@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_show_of_several_dataflows_keeps_them_apart(fmt: str) -> None:
    def two(worker: object) -> None:
        from pytimely import Worker

        assert isinstance(worker, Worker)
        for _ in range(2):
            worker.dataflow(lambda scope: scope.new_input()[1].exchange(lambda r: r).probe())

    graphs = built_graphs(two, 2)
    assert [g.ident for g in graphs] == [0, 1]
    text = to_mermaid(graphs) if fmt == "mermaid" else to_dot(graphs)
    assert "d0n2" in text and "d1n2" in text


def test_show_stops_the_function_at_its_first_step() -> None:
    ran: list[str] = []

    def job(worker: object) -> None:
        from pytimely import Worker

        assert isinstance(worker, Worker)
        probe = worker.dataflow(lambda scope: scope.new_input()[1].inspect(ran.append, name="seen").probe())
        ran.append("built")
        try:
            worker.step_while(lambda: not probe.done(), timeout=1)
        except Exception:  # a user's broad handler must not swallow the stop
            ran.append("caught")
        ran.append("after the first step")

    (graph,) = built_graphs(job)
    assert ran == ["built"]
    assert [op.name for op in graph.operators] == ["input", "seen", "probe"]


def test_show_of_a_function_that_fails_while_building_is_one_line() -> None:
    done = _cli("show", "examples.wcc_progress:main")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "examples.wcc_progress:main raised TypeError while building its dataflows" in done.stderr
