"""The jobs users run (examples/wcc.py, wordcount.py, hello.py) against independent references."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytimely.errors import InputFormatError
from tests.profiles import examples

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    """Import an example script as a module."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wcc = load("wcc")
wordcount = load("wordcount")


def expected_labels(edges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(vertex, smallest id in its component)`` by NetworkX, sorted by vertex."""
    graph = nx.Graph()
    graph.add_edges_from(edges)
    return sorted((v, least) for c in nx.connected_components(graph) for least in [min(c)] for v in c)


def expected_epochs(edges: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Per epoch, NetworkX labels of the prefix graph, for vertices that are new or changed."""
    graph = nx.Graph()
    before: dict[int, int] = {}
    out = []
    for epoch in sorted({e for _, _, e in edges}):
        graph.add_edges_from((a, b) for a, b, e in edges if e == epoch)
        labels = {v: least for c in nx.connected_components(graph) for least in [min(c)] for v in c}
        out.extend(sorted((epoch, v, label) for v, label in labels.items() if before.get(v) != label))
        before = labels
    return out


def write(path: Path, rows: list[tuple[int, ...]]) -> Path:
    path.write_text("".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


edge_lists = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=80)
epoch_edges = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 6)), min_size=1, max_size=80
)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edges=edge_lists, workers=st.integers(1, 3), seed=st.integers(0, 1000))
def test_wcc_agrees_with_networkx(tmp_path: Path, edges: list[tuple[int, int]], workers: int, seed: int) -> None:
    path = write(tmp_path / "edges.csv", edges)
    table = wcc.run(str(path), workers, seed=seed)
    assert [tuple(r) for r in table.tolist()] == expected_labels(edges)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edges=epoch_edges, workers=st.integers(1, 3), seed=st.integers(0, 1000))
def test_wcc_epochs_agree_with_networkx_on_prefixes(
    tmp_path: Path, edges: list[tuple[int, int, int]], workers: int, seed: int
) -> None:
    path = write(tmp_path / "edges.csv", edges)
    table = wcc.run(str(path), workers, epochs=True, seed=seed)
    assert [tuple(r) for r in table.tolist()] == expected_epochs(edges)


def test_wcc_large_ids_and_chain(tmp_path: Path) -> None:
    # Ids far apart take the sorted-lookup path; a long chain needs many iterations.
    chain = [(i * 10**12, (i + 1) * 10**12) for i in range(60)]
    path = write(tmp_path / "edges.csv", chain)
    for workers in (1, 2):
        table = wcc.run(str(path), workers)
        assert [tuple(r) for r in table.tolist()] == expected_labels(chain)


def run_cli(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_wcc_cli_output_is_the_same_for_any_worker_count(tmp_path: Path) -> None:
    import random

    rng = random.Random(3)
    edges = [(rng.randrange(300), rng.randrange(300), rng.randrange(8)) for _ in range(400)]
    path = write(tmp_path / "edges.csv", edges)
    outputs = []
    for workers in ("1", "2", "3"):
        out = tmp_path / f"out{workers}.csv"
        result = run_cli("wcc.py", "--edges", str(path), "--output", str(out), "-w", workers, "--epochs")
        assert result.returncode == 0, result.stderr
        outputs.append(out.read_text())
    assert outputs[0] == outputs[1] == outputs[2]
    rows = [tuple(int(x) for x in line.split(",")) for line in outputs[0].splitlines()]
    assert rows == expected_epochs(edges)


@pytest.mark.parametrize(
    ("content", "line", "epochs"),
    [("1,2\n3\n", 2, False), ("1,2\n\n4,x\n", 3, False), ("1,2,0\n1,2\n", 2, True), ("1,2\n1.5,2\n", 2, False)],
)
def test_wcc_malformed_lines_are_named(tmp_path: Path, content: str, line: int, epochs: bool) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(InputFormatError) as info:
        wcc.run(str(path), 1, epochs=epochs)
    assert info.value.line == line
    assert info.value.path == str(path)
    result = run_cli("wcc.py", "--edges", str(path), "--output", str(tmp_path / "o.csv"), *(["--epochs"] * epochs))
    assert result.returncode == 2
    assert f"{path}, line {line}" in result.stderr
    assert not (tmp_path / "o.csv").exists()


def test_wcc_accepts_header_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "edges.csv"
    path.write_text("src,dst\n5,6\n\n6,7\n1,2\n")
    assert [tuple(r) for r in wcc.run(str(path)).tolist()] == [(1, 1), (2, 1), (5, 5), (6, 5), (7, 5)]


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.lists(st.sampled_from(["a", "B", "b", "éé", "a-b", "x\ty", "", "  ", "\n"]), max_size=60).map(" ".join),
    workers=st.integers(1, 3),
)
def test_wordcount_agrees_with_counter(tmp_path: Path, text: str, workers: int) -> None:
    path = tmp_path / "text.txt"
    path.write_text(text, encoding="utf-8")
    assert wordcount.run(str(path), workers) == sorted(Counter(text.split()).items())


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.lists(st.sampled_from(["a", "B", "b", "éé", "a-b", "x\ty", "", "\n"]), max_size=60).map(" ".join),
    workers=st.integers(1, 3),
    epochs=st.integers(1, 7),
)
def test_wordcount_in_epochs_agrees_with_counter(tmp_path: Path, text: str, workers: int, epochs: int) -> None:
    path = tmp_path / "text.txt"
    path.write_text(text, encoding="utf-8")
    assert wordcount.run_epochs(str(path), epochs, workers=workers) == sorted(Counter(text.split()).items())


def test_wordcount_cli(tmp_path: Path) -> None:
    path = tmp_path / "text.txt"
    path.write_text("the cat\nThe dog the\n\tend\n", encoding="utf-8")
    out = tmp_path / "out.tsv"
    result = run_cli("wordcount.py", "--input", str(path), "--output", str(out), "-w", "2")
    assert result.returncode == 0, result.stderr
    assert out.read_text() == "The\t1\ncat\t1\ndog\t1\nend\t1\nthe\t2\n"


def test_wordcount_rejects_invalid_utf8_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "text.txt"
    path.write_bytes(b"fine words\nmore\nbad \xff byte\n")
    result = run_cli("wordcount.py", "--input", str(path), "--output", str(tmp_path / "o"))
    assert result.returncode == 2
    assert f"{path}, line 3" in result.stderr


def test_hello_prints_every_round_once_across_workers() -> None:
    result = run_cli("hello.py", "-w", "3")
    assert result.returncode == 0, result.stderr
    lines: list[Any] = result.stdout.splitlines()
    seen = sorted(int(line.rsplit(" ", 1)[1]) for line in lines)
    assert seen == list(range(10))
    # Records are exchanged by value: round r is printed by worker r % 3.
    assert all(line.startswith(f"worker {int(line.rsplit(' ', 1)[1]) % 3}:") for line in lines)
