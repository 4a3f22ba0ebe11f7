"""Every code fragment of docs/workflow.md runs as written: the Python ones in order, in one namespace (top-level
``await`` included), and the ``sh`` ones as commands, in a fresh folder holding an edge list."""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import shlex
import sys
import textwrap
import types
from pathlib import Path

import pytest

from pytimely.workflow.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "workflow.md"
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```$", re.MULTILINE | re.DOTALL)


def fragments(language: str) -> list[tuple[int, str]]:
    """The fenced blocks of ``language``, dedented, with the line each starts at."""
    text = DOC.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        if match.group(2) == language:
            line = text.count("\n", 0, match.start()) + 1
            found.append((line, textwrap.dedent(match.group(3))))
    return found


def test_the_python_fragments_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = fragments("python")
    assert len(blocks) >= 10
    # A module of its own, as the fragments would be in a user's file (NamedTuple annotations resolve there).
    module = types.ModuleType("workflow_docs")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for line, source in blocks:
        code = compile(source, f"docs/workflow.md:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, module.__dict__)  # the project's own documentation
        if inspect.iscoroutine(result):
            asyncio.run(result)


EDGES = "1,2\n2,3\n3,1\n3,4\n4,5\n5,6\n6,4\n7,8\nnot an edge\n"


def test_the_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "edges.csv").write_text(EDGES, encoding="utf-8")
    os.symlink(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    commands = [line for _, block in fragments("sh") for line in block.splitlines() if line.startswith("pytimely ")]
    assert len(commands) >= 6
    for command in commands:
        words = shlex.split(command)
        assert words[:2] == ["pytimely", "workflow"], command
        assert main(words[2:]) == 0, (command, capsys.readouterr().err)
    out = capsys.readouterr().out
    assert "staging area stage is not locked" in out and "== workflow/load (stdout" in out
