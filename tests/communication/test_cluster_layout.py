"""No module of the cluster package imports its process module (type-only imports included): a link knows its process
only through events, a mailbox its owner only through a protocol. That the package has no import circle at all is
checked with every other package by tests/test_architecture.py."""

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


def test_nothing_below_the_process_module_imports_it() -> None:
    graph = imports_within_package()
    assert "process" in graph and "link" in graph, graph
    assert [name for name, found in graph.items() if "process" in found] == []
