"""``kill -9`` of a random process at a random moment under ``pytimely launch -n 2 --recovery DIR``.

Each trial runs word count (``--epochs``) or ``wcc --epochs`` (the changelog contract), kills one of the
launched processes once a seeded number of epochs is committed and a seeded delay passed, then runs the same
command again with 1, 2 or 3 processes: its output must equal the output of an uninterrupted run (so nothing
is missing or twice), and a rerun that found a snapshot must say ``resumed at epoch N``. Every wait on a
process has a generous deadline.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
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


def _committed(store: Path) -> int:
    """The newest epoch with a manifest in ``store`` (-1 if none yet)."""
    try:
        names = [n for n in os.listdir(store / "manifests") if n.isdigit()]
    except OSError:
        return -1
    return max(map(int, names), default=-1)


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


def _trial(trial: int, folder: Path, inputs: dict[str, tuple[list[str], bytes]]) -> tuple[bool, bool]:
    """One seeded trial; whether the first run was killed, and whether the rerun resumed from a snapshot."""
    rng = random.Random(trial)
    name = "wordcount" if trial % 2 == 0 else "wcc"
    args, expected = inputs[name]
    out = folder / "out"
    folder.mkdir()
    store = folder / "store"
    job = [*args, str(out)]
    first = _launch(2, store, job)
    started = time.monotonic()
    # The moment of the kill: a seeded number of committed epochs (0 to all), then a seeded delay, so the kills
    # fall all over the run, in an epoch's computation, its snapshot's writes or its commit alike.
    target = rng.randrange(-1, 16)
    while _committed(store) < target and first.poll() is None and time.monotonic() - started < DEADLINE:
        time.sleep(0.005)
    time.sleep(rng.uniform(0.0, 0.3))
    victims = _children(first.pid)
    if victims:
        # The run may end between listing its processes and the kill: then it was simply not interrupted.
        with contextlib.suppress(ProcessLookupError):
            os.kill(rng.choice(victims), signal.SIGKILL)
    first.communicate(timeout=DEADLINE)
    had_snapshot = any((store / "manifests").glob("0*")) if (store / "manifests").is_dir() else False
    n = rng.choice([1, 2, 3])
    again = _launch(n, store, job)
    _, err = again.communicate(timeout=DEADLINE)
    where = f"trial {trial} ({name}, rerun with -n {n})"
    assert again.returncode == 0, f"{where}: {err.decode(errors='replace')}"
    assert out.read_bytes() == expected, f"{where}: the output differs from an uninterrupted run's"
    killed = first.returncode != 0
    resumed = b"resumed at epoch " in err
    if had_snapshot and killed:
        assert resumed, f"{where}: a snapshot was there but the rerun did not resume from it"
    return killed, resumed


def test_kill_9_then_rerun_gives_the_uninterrupted_output(
    tmp_path: Path, inputs: dict[str, tuple[list[str], bytes]]
) -> None:
    # Trials run three at a time: most of a trial is processes starting and connecting, not computing.
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda t: _trial(t, tmp_path / f"trial-{t}", inputs), range(TRIALS)))
    killed = sum(k for k, _ in results)
    resumed = sum(r for _, r in results)
    # The seeds are fixed: enough of them kill mid-run and resume, or the test would prove little.
    assert killed >= TRIALS // 2, results
    assert resumed >= TRIALS // 4, results
