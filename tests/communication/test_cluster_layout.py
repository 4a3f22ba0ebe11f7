"""The cluster package's modules form no import circle, type-only imports included, and a link knows no Cluster."""

from __future__ import annotations

import ast
from pathlib import Path

import pytimely.communication.cluster as package

PACKAGE = "pytimely.communication.cluster"
ROOT = Path(package.__file__).parent


def imports_within_package() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports (at run time or for types)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(ROOT.glob("*.py")):
        if path.name == "__init__.py":
            continue
        name = path.stem
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE + "."):
                found.add(node.module.removeprefix(PACKAGE + ".").split(".")[0])
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PACKAGE + "."):
                        found.add(alias.name.removeprefix(PACKAGE + ".").split(".")[0])
        graph[name] = found - {name}
    return graph


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of ``graph``, as the modules along it, or ``None``."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_cluster_package_has_no_import_circle() -> None:
    graph = imports_within_package()
    assert "process" in graph and "link" in graph, graph
    assert circle(graph) is None, " -> ".join(circle(graph) or [])


def test_the_circle_finder_finds_a_circle() -> None:
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b"}, "b": set()}) is None


def test_nothing_below_the_process_module_imports_it() -> None:
    graph = imports_within_package()
    assert [name for name, found in graph.items() if "process" in found] == []
