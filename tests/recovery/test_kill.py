"""``kill -9`` of a random process at a random moment under ``pytimely launch -n 2 --recovery DIR``.

Each trial runs word count (``--epochs``) or ``wcc --epochs`` (the changelog contract), kills one of the
launched processes after a seeded delay, then runs the same command again, with 1, 2 or 3 processes, until
it succeeds: its output must equal the output of an uninterrupted run (so nothing is missing or twice), and
a rerun that found a snapshot must say ``resumed at epoch N``. The delay is the random moment under test,
not a wait for something to happen; every wait on a process has a generous deadline.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 20
DEADLINE = 240.0


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env.pop("PYTIMELY_RECOVERY", None)
    return env


def _launch(n: int, store: Path, job: list[str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "pytimely", "launch", "-n", str(n), "-q", "--recovery", str(store), "--",
               sys.executable, *job]
    return subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return sorted(found)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[str], bytes]]:
    """Per job: its arguments (OUT last) and the output an uninterrupted run writes, computed without pytimely."""
    folder = tmp_path_factory.mktemp("inputs")
    rng = random.Random(16)
    vocabulary = [f"w{i}" for i in range(500)]
    words = [rng.choice(vocabulary) for _ in range(20000)]
    (folder / "text.txt").write_text("\n".join(" ".join(words[i : i + 10]) for i in range(0, len(words), 10)))
    counts = "".join(f"{w}\t{c}\n" for w, c in sorted(Counter(words).items()))
    edges = [(rng.randrange(300), rng.randrange(300), rng.randrange(16)) for _ in range(400)]
    (folder / "edges.csv").write_text("src,dst,epoch\n" + "".join(f"{a},{b},{e}\n" for a, b, e in edges))
    return {
        "wordcount": ([str(ROOT / "examples" / "wordcount.py"), "--input", str(folder / "text.txt"),
                       "--epochs", "16", "-q", "--output"], counts.encode()),
        "wcc": ([str(ROOT / "examples" / "wcc.py"), "--edges", str(folder / "edges.csv"), "--epochs", "-q",
                 "--output"], _changelog(edges)),
    }


def _changelog(edges: list[tuple[int, int, int]]) -> bytes:
    """``epoch,vertex,label`` lines for every vertex whose least-id component label is new or changed."""
    parent: dict[int, int] = {}

    def find(v: int) -> int:
        while parent.setdefault(v, v) != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    reported: dict[int, int] = {}
    lines = []
    for epoch in sorted({e for _, _, e in edges}):
        for a, b, e in edges:
            if e == epoch:
                ra, rb = find(a), find(b)
                parent[max(ra, rb)] = min(ra, rb)
        for v in sorted(parent):
            label = find(v)
            if reported.get(v) != label:
                reported[v] = label
                lines.append(f"{epoch},{v},{label}\n")
    return "".join(lines).encode()


@pytest.mark.parametrize("trial", range(TRIALS))
def test_kill_9_then_rerun_gives_the_uninterrupted_output(
    trial: int, tmp_path: Path, inputs: dict[str, tuple[list[str], bytes]]
) -> None:
    rng = random.Random(trial)
    name = "wordcount" if trial % 2 == 0 else "wcc"
    args, expected = inputs[name]
    out = tmp_path / "out"
    store = tmp_path / "store"
    job = [*args, str(out)]
    first = _launch(2, store, job)
    started = time.monotonic()
    while len(_children(first.pid)) < 2 and first.poll() is None and time.monotonic() - started < DEADLINE:
        time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 2.5))  # the random moment of the kill
    victims = _children(first.pid)
    if victims:
        os.kill(rng.choice(victims), signal.SIGKILL)
    first.communicate(timeout=DEADLINE)
    had_snapshot = any((store / "manifests").glob("0*")) if (store / "manifests").is_dir() else False
    n = rng.choice([1, 2, 3])
    again = _launch(n, store, job)
    _, err = again.communicate(timeout=DEADLINE)
    assert again.returncode == 0, err.decode(errors="replace")
    assert out.read_bytes() == expected
    if had_snapshot and first.returncode != 0:
        assert b"resumed at epoch " in err
