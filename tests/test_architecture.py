"""The package's shape: layers import only downward, no import circle, one run contract reading the environment.

The layers are those docs/architecture.md draws. Imports under ``if TYPE_CHECKING:`` count too: a circle of
type-only imports still ties the modules together for a reader and for a refactoring.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from pytimely.config import Config, RecoverySettings, RunConfig

SRC = Path(__file__).resolve().parents[1] / "src"

LAYERS: list[set[str]] = [
    {"errors", "order", "collector", "atomic", "signed_lines", "container", "config"},
    {"progress", "observe"},
    {"communication"},
    {"dataflow"},
    {"worker", "io", "connectors", "membership"},
    {"recovery", "algorithms", "inspection"},
    {"execute"},
    {"", "testing", "command", "simulate", "spark", "workflow", "verify", "cli", "__main__"},
]
"""Bottom up; a unit is a top-level module or package of ``pytimely`` (``""``: the package itself)."""

KNOWN_CIRCLES = {
    "pytimely.dataflow",
    "pytimely.recovery",
    "pytimely.workflow",
}
"""Packages whose modules still import each other in a circle (left to do, see docs/architecture.md); a circle
anywhere else, or one that reaches outside its package, fails."""

ENVIRONMENT_READERS = {
    "pytimely/config.py": "the run contract (RunConfig.from_env/to_env)",
    "pytimely/cli.py": "the command line: the launcher's hash seed and the environment of the processes it starts",
    "pytimely/spark/session.py": "the environment Spark's JVM and Python workers are started with",
}
"""The only modules that read or write the process environment, and why."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "pytimely").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The pytimely modules ``path`` imports, type-only imports included."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("pytimely"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in modules)
    return out


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer(unit: str) -> int:
    for i, members in enumerate(LAYERS):
        if unit in members:
            return i
    raise AssertionError(f"pytimely.{unit} is in no layer: add it to LAYERS and to docs/architecture.md")


def test_every_import_runs_down_the_layers() -> None:
    modules = _modules()
    upward = []
    for module, path in modules.items():
        for target in _imports(path, modules):
            if _layer(_unit(target)) > _layer(_unit(module)):
                upward.append(f"{module} imports {target}")
    assert upward == []


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_circle_between_units_and_none_but_the_known_ones_within() -> None:
    modules = _modules()
    graph: dict[str, set[str]] = {m: {t for t in _imports(p, modules) if t != m} for m, p in modules.items()}
    units: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        units[_unit(module)].update(_unit(t) for t in targets if _unit(t) != _unit(module))
    for unit in list(units):
        for target in units[unit]:
            units.setdefault(target, set())
    assert _circles(dict(units)) == [], "units of the package import each other in a circle"
    unknown = []
    for circle in _circles(graph):
        packages = {".".join(m.split(".")[:-1]) for m in circle}
        home = min(packages, key=len)
        if not (home in KNOWN_CIRCLES and all(p.startswith(home) for p in packages)):
            unknown.append(circle)
    assert unknown == [], "modules import each other in a circle"


def test_the_environment_is_read_only_by_the_run_contract_and_the_command_line() -> None:
    readers = {}
    for path in (SRC / "pytimely").rglob("*.py"):
        name = path.relative_to(SRC).as_posix()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            touches = (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv", "unsetenv")
                       and isinstance(node.value, ast.Name) and node.value.id == "os")  # fmt: skip
            if touches:
                readers.setdefault(name, node.lineno)
    assert {n: line for n, line in readers.items() if n not in ENVIRONMENT_READERS} == {}


def test_a_run_config_goes_through_the_environment_whole(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("k" * 32)
    run = RunConfig(
        cluster=Config(
            workers=2, processes=3, process=1, hosts=(("127.0.0.1", 1), ("127.0.0.1", 2), ("127.0.0.1", 3)),
            secret=b"s" * 32, heartbeat=0.25, timeout=7.5, encrypt=False, aggregate_progress=False,
            shared_memory=0, elastic=True, initial=2, left=(0,), listen_fd=5,
        ),
        recovery=RecoverySettings(str(tmp_path / "store"), mode="fresh", key_file=str(key), snapshot_every=3),
        log=str(tmp_path / "log.jsonl"),
        metrics_port=9100,
        control="127.0.0.1:4000",
    )
    assert RunConfig.from_env(run.to_env()) == run
    child = run.child_env({"PATH": "/bin", "PYTIMELY_PROCESS": "0", "PYTIMELY_HOSTFILE": "x", "OTHER": "1"})
    assert child["PYTIMELY_PROCESS"] == "1" and "PYTIMELY_HOSTFILE" not in child and child["OTHER"] == "1"


def test_pytimely_run_imports_a_module_of_the_current_folder(tmp_path: Path) -> None:
    (tmp_path / "mymodule.py").write_text(
        "def job(worker):\n"
        "    def build(scope):\n"
        "        handle, stream = scope.new_input()\n"
        "        return handle, stream.count().capture()\n"
        "    handle, counted = worker.dataflow(build)\n"
        "    handle.send_batch([1, 2, 3])\n"
        "    handle.close()\n"
        "    worker.finish()\n"
        "    return [n for _, batch in counted for n in batch]\n"
    )
    # The `pytimely` console script has its own folder first on its path, not the current one: so does this one.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "pytimely").write_text("import sys\nfrom pytimely.cli import main\nsys.exit(main())\n")
    done = subprocess.run(
        [sys.executable, "bin/pytimely", "run", "mymodule:job"], cwd=tmp_path, capture_output=True, text=True,
        timeout=60, check=False, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "worker 0: [3]"


@pytest.mark.parametrize("argv", [["--snapshot-every", "0", "--recovery", "s"], ["-n", "2"]])
def test_a_bad_run_flag_is_a_usage_error_naming_it(argv: list[str]) -> None:
    from pytimely.command import execute_from_args
    from pytimely.errors import ConfigError

    with pytest.raises(ConfigError):
        execute_from_args(lambda worker: None, argv)
