"""Seeing a worker function's dataflows without running its computation (``pytimely show``).

:func:`built_graphs` calls ``func`` with a worker whose every attempt to run (``step``, ``step_while``,
``finish``, ``leave``) stops the function instead: what ``func`` built before it first runs a dataflow is
described, nothing runs, and no record flows. Dataflows a function builds only after it has stepped (a second
dataflow built once the first has finished) are not seen. The worker is worker 0 of ``workers`` in one
process: every worker builds the same graph, and a channel's contract does not depend on the layout.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

from pytimely.communication.local import LocalAllocator
from pytimely.dataflow.graph_view import DataflowGraph, render
from pytimely.errors import ConfigError, InvalidArgument
from pytimely.worker import Worker

__all__ = ["GraphvizError", "built_graphs", "render_format"]


class GraphvizError(ConfigError):
    """``--format svg`` needs Graphviz's ``dot`` program: it is not on the PATH, or it failed."""


class _Built(BaseException):
    """Unwinds the worker function at its first step (a BaseException, so user ``except Exception`` lets it by)."""


class _BuildOnly(Worker):
    """A worker that builds dataflows but stops the function at its first attempt to run them."""

    def step(self) -> bool:
        """Stop: the dataflows are built."""
        raise _Built

    def step_while(self, condition: Callable[[], bool], *, timeout: float | None = None) -> None:
        """Stop: the dataflows are built."""
        raise _Built

    def finish(self) -> None:
        """Stop: the dataflows are built."""
        raise _Built

    def leave(self, at: Any = None, *, timeout: float | None = None) -> None:
        """Stop: the dataflows are built."""
        raise _Built


def built_graphs(func: Callable[[Worker], Any], workers: int = 1) -> list[DataflowGraph]:
    """The dataflows ``func`` builds before it first runs them, as worker 0 of ``workers`` builds them."""
    if type(workers) is not int or workers < 1:
        raise InvalidArgument(f"workers must be a positive int, got {workers!r}")
    worker = _BuildOnly(LocalAllocator.group(workers)[0])
    with contextlib.suppress(_Built):
        func(worker)
    return worker.graph()


def render_format(graphs: list[DataflowGraph], fmt: str, *, timeout: float = 60.0) -> str:
    """``graphs`` as ``mermaid``, ``dot`` or ``svg`` (through Graphviz's ``dot``, which must be installed)."""
    if fmt != "svg":
        return render(graphs, fmt)
    dot = shutil.which("dot")
    if dot is None:
        raise GraphvizError("--format svg needs Graphviz's 'dot' program on the PATH; use --format dot or mermaid")
    try:
        done = subprocess.run(
            [dot, "-Tsvg"], input=render(graphs, "dot"), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise GraphvizError(f"Graphviz's dot did not finish within {timeout} s") from exc
    if done.returncode != 0:
        raise GraphvizError(f"Graphviz's dot failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout
