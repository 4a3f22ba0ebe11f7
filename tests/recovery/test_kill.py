"""``kill -9`` of a random process at a random moment under ``pytimely launch -n 2 --recovery DIR``, then a rerun.

Four jobs: word count (``--epochs``), components (``wcc --epochs``), a windowed count over event time and a
join feeding running totals (``tests/recovery/kill_jobs.py``); and word count under ``launch --elastic`` with a
join and a leave in its plan. Each trial kills one of the launched processes once a seeded number of epochs is
committed and a seeded delay has passed (so kills fall in an epoch's computation, a snapshot's writes, a commit,
a join or a leave alike), then runs the same command again on 1, 2 or 3 processes: its output must equal an
uninterrupted run's, computed here without pytimely (nothing missing, nothing twice), and a rerun that found a
snapshot must say it resumed.

The default run takes a few trials per job (the suite must stay fast). ``PYTIMELY_KILL_TRIALS=N`` runs N trials
per job instead (``PYTIMELY_KILL_TRIALS=20 pytest tests/recovery/test_kill.py`` for the issue's figure).
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
from itertools import accumulate
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("PYTIMELY_KILL_TRIALS") or 2)
DEADLINE = 240.0
EPOCHS = 16
FINAL = 1 << 62


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    for name in ("PYTIMELY_RECOVERY", "PYTIMELY_RECOVERY_MODE", "PYTIMELY_RECOVERY_KEY_FILE"):
        env.pop(name, None)
    return env


def _launch(n: int, store: Path, job: list[str], *, elastic: bool = False) -> subprocess.Popen[bytes]:
    layout = ["-n", str(n)]
    if elastic:
        # An elastic run needs two workers from the start: one process runs two.
        layout += ["--elastic", "-w", "2" if n == 1 else "1"]
    command = [sys.executable, "-m", "pytimely", "launch", *layout, "-q", "--recovery", str(store), "--",
               sys.executable, *job]
    return subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)


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
    """The newest epoch with a manifest in ``store`` (-1 if none yet; the final one counts as the last epoch)."""
    try:
        names = [int(n) for n in os.listdir(store / "manifests") if n.isdigit()]
    except OSError:
        return -1
    return max((EPOCHS if n == FINAL else n for n in names), default=-1)


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


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[str], bytes]]:
    """Per job: its arguments (OUT last) and the output an uninterrupted run writes, computed without pytimely."""
    folder = tmp_path_factory.mktemp("inputs")
    rng = random.Random(16)
    # Words by Zipf's law (the r-th with weight 1/r): most epochs write few of the counts held, so snapshots take
    # deltas (and the elastic trial's bins move between workers in their midst).
    vocabulary = [f"w{i}" for i in range(20000)]
    weights = list(accumulate(1 / r for r in range(1, len(vocabulary) + 1)))
    words = random.Random(17).choices(vocabulary, cum_weights=weights, k=20000)
    (folder / "text.txt").write_text("\n".join(" ".join(words[i : i + 10]) for i in range(0, len(words), 10)))
    counts = "".join(f"{w}\t{c}\n" for w, c in sorted(Counter(words).items()))
    edges = [(rng.randrange(300), rng.randrange(300), rng.randrange(EPOCHS)) for _ in range(400)]
    (folder / "edges.csv").write_text("src,dst,epoch\n" + "".join(f"{a},{b},{e}\n" for a, b, e in edges))
    events = [(e, 2 * e + rng.randrange(4), rng.randrange(12)) for e in range(EPOCHS) for _ in range(40)]
    (folder / "events.csv").write_text("epoch,time,key\n" + "".join(f"{e},{t},{k}\n" for e, t, k in events))
    windows = Counter(((t // 5) * 5, (t // 5) * 5 + 5, k) for _, t, k in events)
    sliding: Counter[tuple[int, int, int]] = Counter()  # sliding windows of 10 every 5: the sum of their times
    for _, t, k in events:
        for start in range(max(0, (t // 5 - 1) * 5), t + 1, 5):
            sliding[start, start + 10, k] += t
    window_rows = sorted([("count", s, e, k, c) for (s, e, k), c in windows.items()]
                         + [("sum", s, e, k, c) for (s, e, k), c in sliding.items()])
    orders, payments, totals, log = [], [], {}, []
    latest: dict[int, list[int | None]] = {}  # per customer: the latest epoch's orders and payments
    for epoch in range(EPOCHS):
        updates: Counter[int] = Counter()
        ordered: Counter[int] = Counter()
        paid: Counter[int] = Counter()
        for n in range(30):
            order, customer = epoch * 100 + n, rng.randrange(8)
            orders.append((epoch, order, customer))
            ordered[customer] += 1
            for _ in range(rng.randrange(3)):
                amount = rng.randrange(1, 50)
                payments.append((epoch, order, amount))
                totals[customer] = totals.get(customer, 0) + amount
                updates[customer] += 1
                paid[customer] += amount
        payments.append((epoch, epoch * 100 + 99, 7))  # no order: joins nothing
        log += [("total", epoch, c, n, totals[c]) for c, n in sorted(updates.items())]
        for c in set(ordered) | set(paid):
            pair = latest.setdefault(c, [None, None])
            pair[0] = ordered[c] if c in ordered else pair[0]
            pair[1] = paid[c] if c in paid else pair[1]
            if pair[0] is not None and pair[1] is not None:
                log.append(("latest", epoch, c, pair[0], pair[1]))
    (folder / "orders.csv").write_text("epoch,order,customer\n" + "".join(f"{e},{o},{c}\n" for e, o, c in orders))
    (folder / "payments.csv").write_text("epoch,order,amount\n" + "".join(f"{e},{o},{a}\n" for e, o, a in payments))
    jobs = "tests/recovery/kill_jobs.py"
    return {
        "wordcount": ([str(ROOT / "examples" / "wordcount.py"), "--input", str(folder / "text.txt"),
                       "--epochs", str(EPOCHS), "-q", "--output"], counts.encode()),
        "wcc": ([str(ROOT / "examples" / "wcc.py"), "--edges", str(folder / "edges.csv"), "--epochs", "-q",
                 "--output"], _changelog(edges)),
        "window": ([str(ROOT / jobs), "window", "--events", str(folder / "events.csv"), "--output"],
                   "".join(",".join(map(str, row)) + "\n" for row in window_rows).encode()),
        "join": ([str(ROOT / jobs), "join", "--orders", str(folder / "orders.csv"), "--payments",
                  str(folder / "payments.csv"), "--output"],
                 "".join(",".join(map(str, row)) + "\n" for row in sorted(log)).encode()),
        "elastic": ([str(ROOT / "examples" / "wordcount.py"), "--input", str(folder / "text.txt"),
                     "--epochs", str(EPOCHS), "--rescale", "4:+1,10:-1", "-q", "--output"], counts.encode()),
    }  # fmt: skip


def _trial(trial: int, name: str, folder: Path, inputs: dict[str, tuple[list[str], bytes]]) -> tuple[bool, bool]:
    """One seeded trial; whether the first run was killed, and whether the rerun resumed from a snapshot."""
    rng = random.Random(f"{name}-{trial}")
    args, expected = inputs[name]
    elastic = name == "elastic"
    out = folder / "out"
    folder.mkdir()
    store = folder / "store"
    job = [*args, str(out)]
    first = _launch(2, store, job, elastic=elastic)
    started = time.monotonic()
    target = rng.randrange(-1, EPOCHS)
    while _committed(store) < target and first.poll() is None and time.monotonic() - started < DEADLINE:
        time.sleep(0.005)
    time.sleep(rng.uniform(0.0, 0.3))
    victims = _children(first.pid)
    if victims:
        # The run may end between listing its processes and the kill: then it was simply not interrupted.
        with contextlib.suppress(ProcessLookupError):
            os.kill(rng.choice(victims), signal.SIGKILL)
    first.communicate(timeout=DEADLINE)
    had_snapshot = _committed(store) >= 0
    n = rng.choice([1, 2, 3])
    again = _launch(n, store, job, elastic=elastic)
    _, err = again.communicate(timeout=DEADLINE)
    where = f"{name} trial {trial} (killed after {target} epochs committed, rerun with -n {n})"
    assert again.returncode == 0, f"{where}: {err.decode(errors='replace')}"
    assert out.read_bytes() == expected, f"{where}: the output differs from an uninterrupted run's"
    assert not [p for p in store.rglob(".*") if p.is_file()], f"{where}: a temporary file survived the rerun"
    killed = first.returncode != 0
    resumed = b"resumed at " in err
    if had_snapshot and killed:
        assert resumed, f"{where}: a snapshot was there but the rerun did not resume from it"
    return killed, resumed


@pytest.mark.parametrize("name", ["wordcount", "wcc", "window", "join", "elastic"])
def test_kill_9_then_rerun_gives_the_uninterrupted_output(
    tmp_path: Path, inputs: dict[str, tuple[list[str], bytes]], name: str
) -> None:
    # Trials run three at a time: most of a trial is processes starting and connecting, not computing.
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda t: _trial(t, name, tmp_path / f"trial-{t}", inputs), range(TRIALS)))
    print(f"{name}: {len(results)} trials, killed {sum(k for k, _ in results)}, resumed {sum(r for _, r in results)}")
    if TRIALS >= 10:
        # The seeds are fixed: enough of them kill mid-run and resume, or the test would prove little.
        assert sum(k for k, _ in results) >= TRIALS // 2, results
        assert sum(r for _, r in results) >= TRIALS // 4, results
