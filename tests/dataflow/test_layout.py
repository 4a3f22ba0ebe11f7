"""The dataflow layer's layout: pacts are types, operators build streams through the scope, the
progress exchange lives apart from the subgraph."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytimely import Stream, Worker, execute
from pytimely.dataflow.channels import Broadcast, Direct, Exchange, Pipeline, exchange_for, pact_of
from pytimely.dataflow.operators import core
from pytimely.dataflow.progcaster import Progcaster
from pytimely.errors import InvalidPact, RouteError

from .helpers import records

pytestmark = pytest.mark.timeout(120)

SRC = Path(__file__).resolve().parents[2] / "src" / "pytimely" / "dataflow"


def _runtime_imports(path: Path) -> set[str]:
    """The modules ``path`` imports when it runs (imports under ``if TYPE_CHECKING:`` left out)."""
    tree = ast.parse(path.read_text())
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for inner in ast.walk(node):
                typing_only.add(id(inner))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("path", sorted((SRC / "operators").glob("*.py")), ids=lambda p: p.name)
def test_operator_modules_import_stream_and_scope_only_for_typing(path: Path) -> None:
    imports = _runtime_imports(path)
    assert "pytimely.dataflow.stream" not in imports
    assert "pytimely.dataflow.scope" not in imports


def test_stream_imports_no_scope_and_the_subgraph_no_bootstrap() -> None:
    assert "pytimely.dataflow.scope" not in _runtime_imports(SRC / "stream.py")
    subgraph = _runtime_imports(SRC / "subgraph.py")
    assert "pytimely.progress.bootstrap" not in subgraph
    assert "pytimely.dataflow.progcaster" in subgraph


@pytest.mark.parametrize(
    "module",
    ["pytimely.dataflow.operators.core", "pytimely.dataflow.operators.window", "pytimely.dataflow.stream"],
)
def test_each_module_imports_first_without_a_cycle(module: str) -> None:
    code = f"import {module}; import pytimely; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_pacts_are_values_of_four_types() -> None:
    route = abs
    assert pact_of(None) == Pipeline()
    assert exchange_for(None) == Pipeline()
    assert exchange_for(route, True) == Exchange(route, vectorized=True)
    assert {p.kind for p in (Pipeline(), Exchange(route), Broadcast(), Direct(lambda: 0))} == {
        "pipeline",
        "exchange",
        "broadcast",
        "direct",
    }
    with pytest.raises(InvalidPact, match="not a channel contract"):
        pact_of(("exchange", route, False), "op")  # type: ignore[arg-type]
    with pytest.raises(RouteError, match="must be callable"):
        Exchange(3)  # type: ignore[arg-type]


def test_a_tuple_pact_is_refused_naming_the_operator() -> None:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> None:
            _, stream = scope.new_input()
            scope.add_operator("legacy", [(stream, ("broadcast",))], 1)

        worker.dataflow(build)

    with pytest.raises(InvalidPact, match="legacy"):
        execute(job, workers=2)


def test_the_graph_names_each_edge_by_its_contract() -> None:
    kinds: list[list[str]] = []

    def job(worker: Worker) -> None:
        def build(scope: Any) -> None:
            _, stream = scope.new_input()
            stream.exchange(lambda x: x).broadcast().map(str).probe()

        worker.dataflow(build)
        kinds.append(list(worker._dataflows[0].channel_kinds))

    execute(job, workers=2)
    assert kinds == [["exchange", "broadcast", "pipeline", "pipeline"]] * 2


def test_per_batch_is_the_skeleton_of_a_custom_pass_through_operator() -> None:
    seen: list[list[Any]] = [[], []]

    def job(worker: Worker) -> None:
        def build(scope: Any) -> None:
            handle, stream = scope.new_input()

            def handle_batch(time: Any, batch: Any, outs: Any) -> None:
                outs[time % 2]._push(time, [x * 10 for x in batch])

            evens, odds = core.per_batch(stream, "split_by_time", handle_batch, outputs=2)
            evens.capture(seen[0])
            odds.capture(seen[1])
            for t in range(4):
                handle.advance_to(t)
                handle.send(t)

        worker.dataflow(build)

    execute(job, workers=1)
    assert [(t, records(b)) for t, b in seen[0]] == [(0, [0]), (2, [20])]
    assert [(t, records(b)) for t, b in seen[1]] == [(1, [10]), (3, [30])]


def test_the_progress_exchange_is_the_progcasters() -> None:
    def job(worker: Worker) -> None:
        worker.dataflow(lambda scope: scope.new_input()[1].probe())
        subgraph = worker._dataflows[0]
        assert isinstance(subgraph.progress, Progcaster)
        assert subgraph.sender is subgraph.progress.sender
        assert subgraph.bootstrapped

    execute(job, workers=2)


def test_then_chains_a_function_of_a_stream_with_its_arguments() -> None:
    def longer_than(words: Stream[str], n: int, *, name: str) -> Stream[str]:
        return words.filter(lambda w: len(w) > n, name=name)

    def job(worker: Worker) -> list[Any]:
        def build(scope: Any) -> Any:
            return scope.to_stream(["a", "abc", "abcdef"]).then(longer_than, 2, name="long").map(str.upper).capture()

        return worker.dataflow(build)

    [captured] = execute(job, workers=1)
    assert sorted(r for _, b in captured for r in records(b)) == ["ABC", "ABCDEF"]
