"""The ```` ```python ```` fragments of README.md and docs/*.md, and running them as a reader would.

Every fragment runs. An HTML comment on the line before a fence says what it needs, directives separated by
``;``:

* ``<!-- needs: spark -->`` (or ``connect``, ``s3``): run where the suite's fixture is (a local SparkSession,
  a Spark Connect server, the moto S3 server); ``spark``, ``connect`` and ``s3`` are then names in the
  fragment's namespace (``s3`` an :class:`~tests.conftest.S3Server`).
* ``<!-- setup: NAME ... -->``: run the named setups of :data:`SETUPS` first (files the fragment reads, a
  ``secret``...), in the fragment's folder and namespace.

The fragments of one file that need the same fixtures run in order in one namespace and one fresh folder, as
one file of a reader's would: a later fragment may use what an earlier one defined. A fragment whose lines
carry ``# prints: TEXT`` comments must print exactly those lines, in order (its output is deterministic); other
output is not checked. ``docs/workflow.md`` is left to ``tests/workflow/test_docs.py``, which runs its
fragments with top-level ``await`` and its commands.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import secrets
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
DIRECTIVE = re.compile(r"<!--\s*(.*?)\s*-->\s*$")
PRINTS = re.compile(r"#\s*prints:\s?(.*)$")
ELSEWHERE = {"docs/workflow.md"}
"""Files whose fragments another test runs."""


@dataclass
class Fragment:
    """One fenced Python fragment: where it is, its source, and what it needs."""

    path: str
    line: int
    source: str
    needs: frozenset[str] = frozenset()
    setups: tuple[str, ...] = ()
    prints: list[str] = field(default_factory=list)


def fragments(path: Path) -> list[Fragment]:
    """The Python fragments of one Markdown file, with the directives of the comment before each."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        needs: set[str] = set()
        setups: list[str] = []
        directive = DIRECTIVE.search(before)
        if directive:
            for part in directive.group(1).split(";"):
                key, _, value = part.partition(":")
                words = value.replace(",", " ").split()
                if key.strip() == "needs":
                    needs.update(words)
                elif key.strip() == "setup":
                    setups.extend(words)
                else:
                    raise ValueError(f"{path.name}:{line - 1}: unknown directive {part.strip()!r}")
        source = textwrap.dedent(match.group(1))
        prints = [m.group(1).rstrip() for m in map(PRINTS.search, source.splitlines()) if m]
        found.append(Fragment(str(path.relative_to(ROOT)), line, source, frozenset(needs), tuple(setups), prints))
    return found


def groups() -> dict[tuple[str, frozenset[str]], list[Fragment]]:
    """Every fragment of README.md and docs/*.md, grouped by file and fixtures needed, in document order."""
    out: dict[tuple[str, frozenset[str]], list[Fragment]] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for fragment in fragments(path):
            if fragment.path in ELSEWHERE:
                continue
            out.setdefault((fragment.path, fragment.needs), []).append(fragment)
    return out


def group_id(key: tuple[str, frozenset[str]]) -> str:
    """A readable test id for a group."""
    path, needs = key
    return path + ("" if not needs else "[" + ",".join(sorted(needs)) + "]")


def run_group(fragments: list[Fragment], folder: Path, fixtures: dict[str, Any]) -> dict[str, Any]:
    """Run ``fragments`` in order in one namespace with ``folder`` as the working directory; return the namespace."""
    import sys

    namespace: dict[str, Any] = {"__name__": "__docs__", **fixtures}
    previous, stdin = Path.cwd(), sys.stdin
    os.chdir(folder)
    try:
        for fragment in fragments:
            for name in fragment.setups:
                SETUPS[name](namespace)
            run(fragment, namespace)
    finally:
        os.chdir(previous)
        sys.stdin = stdin
    return namespace


def run(fragment: Fragment, namespace: dict[str, Any]) -> None:
    """Run one fragment; check its output against its ``# prints:`` comments."""
    where = f"{fragment.path}:{fragment.line}"
    source = fragment.source
    if "connect_url" in namespace:  # the docs' Connect server is the suite's
        source = source.replace("sc://spark-host:15002", namespace["connect_url"])
    tree = ast.parse(source, where)
    if fragment.needs & {"spark", "connect"}:
        tree = _Absolute(Path.cwd()).visit(tree)
    code = compile(tree, where, "exec")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, namespace)  # the project's own documentation
    if fragment.prints:
        printed = out.getvalue().splitlines()
        assert printed == fragment.prints, f"{where} printed {printed!r}, its comments say {fragment.prints!r}"


class _Absolute(ast.NodeTransformer):
    """Relative file names in string literals made absolute in ``folder``: Spark resolves a relative path against
    its JVM's working folder, which is not the one a test moves Python to (a reader's Python and JVM share one)."""

    PATH = re.compile(r"^[\w.-]+(/|\.(csv|parquet|json|txt))$|^[\w-]+/$")

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, str) and self.PATH.match(node.value):
            return ast.copy_location(ast.Constant(str(self.folder / node.value) + "/" * node.value.endswith("/")),
                                     node)
        return node


# -- setups: what a fragment reads that a reader would have --------------------------------------------------


def _csv_files(namespace: dict[str, Any]) -> None:
    """``a.csv`` and ``b.csv`` of ``n,word`` rows (docs/connectors.md)."""
    Path("a.csv").write_text("n,word\n1,x\n2,y\n3,x\n", encoding="utf-8")
    Path("b.csv").write_text("n,word\n4,x\n5,z\n", encoding="utf-8")


def _incoming(namespace: dict[str, Any]) -> None:
    """A folder ``incoming`` of two text files and its ``_DONE`` marker (a directory source ends on it)."""
    folder = Path("incoming")
    folder.mkdir(exist_ok=True)
    (folder / "1.txt").write_text("the cat\n", encoding="utf-8")
    (folder / "2.txt").write_text("the hat\n", encoding="utf-8")
    (folder / "_DONE").write_text("", encoding="utf-8")


def _stdin(namespace: dict[str, Any]) -> None:
    """Standard input holding two lines of words (the fragment's source reads it)."""
    import sys

    sys.stdin = io.TextIOWrapper(io.BytesIO(b"a rose is a rose\nis a rose\n"))


def _secret(namespace: dict[str, Any]) -> None:
    """``secret``: 32 random bytes, as a job would read from its key file."""
    namespace["secret"] = secrets.token_bytes(32)


def _edges(namespace: dict[str, Any]) -> None:
    """``edges.parquet`` and ``edges.csv``: a small graph of three components (docs/spark.md)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src, dst = [1, 2, 4, 5, 7], [2, 3, 5, 6, 8]
    pq.write_table(pa.table({"src": src, "dst": dst}), "edges.parquet")
    Path("edges.csv").write_text("src,dst\n" + "".join(f"{a},{b}\n" for a, b in zip(src, dst, strict=True)))


def _incoming_edges(namespace: dict[str, Any]) -> None:
    """A folder ``incoming`` of one CSV file of ``src,dst`` edges (a streaming source's first micro-batch)."""
    folder = Path("incoming")
    folder.mkdir(exist_ok=True)
    (folder / "edges-1.csv").write_text("src,dst\n1,2\n2,3\n7,8\n", encoding="utf-8")


SETUPS: dict[str, Callable[[dict[str, Any]], None]] = {
    "incoming-edges": _incoming_edges,
    "csv-files": _csv_files,
    "incoming": _incoming,
    "stdin": _stdin,
    "secret": _secret,
    "edges": _edges,
}
