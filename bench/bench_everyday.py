"""Everyday operators and capture/replay on batches, against plain-Python baselines measured in the same run.

    python bench/bench_everyday.py [--quick] [--json]

2,000,000 ``(key, value)`` rows (seed 7), 1,000 keys, sent in batches of 65,536 at one epoch:

* ``max_final``: pytimely with numpy batches (1 and 2 workers) and with lists of tuples (1 worker), against a
  dict loop over the same tuples;
* ``collect`` (keyed, per epoch): numpy batches and lists of tuples, against a dict-of-lists loop;
* capture to files and replay: numpy batches and lists of tuples written by ``capture_to_files`` and read back
  by ``replay_files``, against ``pickle.dump``/``pickle.load`` of the same batches to one file.

Every result is checked against its baseline. Prints a Markdown table; ``--json`` prints one JSON object per row.
"""

from __future__ import annotations

import argparse
import json
import pickle
import platform
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from harness import best_of
from pytimely import Worker, execute
from pytimely.dataflow.operators.capture import replay_files

Row = dict[str, Any]
KEYS = 1000
BATCH = 1 << 16


def make_rows(n: int) -> Any:
    """``n`` rows ``(key, value)`` as an int64 array, seed 7."""
    rng = np.random.default_rng(7)
    return np.column_stack([rng.integers(0, KEYS, n), rng.integers(-(10**9), 10**9, n)]).astype(np.int64)


def batches_of(rows: Any, tuples: bool) -> list[Any]:
    """``rows`` cut into batches: numpy slices, or lists of tuples (made before any timing)."""
    out = [rows[i : i + BATCH] for i in range(0, len(rows), BATCH)]
    return [[tuple(r) for r in b.tolist()] for b in out] if tuples else out


def run(batches: list[Any], workers: int, build: Callable[[Any], Any]) -> list[Any]:
    """Send ``batches`` (each worker its share) through ``build(stream)`` and return the captured output."""

    def job(worker: Worker) -> list[tuple[Any, Any]]:
        def dataflow(scope: Any) -> Any:
            handle, stream = scope.new_input()
            return handle, build(stream).capture()

        handle, captured = worker.dataflow(dataflow)
        for batch in batches[worker.index :: worker.peers]:
            handle.send_batch(batch)
        handle.close()
        out: list[tuple[Any, Any]] = captured
        return out

    return [r for events in execute(job, workers) for _, b in events for r in b]


def max_dict(batches: list[Any]) -> dict[int, int]:
    """The baseline: a dict loop over tuples."""
    best: dict[int, int] = {}
    for batch in batches:
        for k, v in batch:
            held = best.get(k)
            if held is None or v > held:
                best[k] = v
    return best


def collect_dict(batches: list[Any]) -> dict[int, list[int]]:
    """The baseline: a dict of lists."""
    groups: dict[int, list[int]] = {}
    for batch in batches:
        for k, v in batch:
            groups.setdefault(k, []).append(v)
    return groups


def capture_replay(batches: list[Any], workers: int) -> int:
    """Capture ``batches`` to files on ``workers`` workers and replay them on as many; how many rows came back."""
    with tempfile.TemporaryDirectory() as folder:

        def capture(worker: Worker) -> None:
            def dataflow(scope: Any) -> Any:
                handle, stream = scope.new_input()
                stream.capture_to_files(folder)
                return handle

            handle = worker.dataflow(dataflow)
            for batch in batches[worker.index :: worker.peers]:
                handle.send_batch(batch)

        execute(capture, workers)

        def replay(worker: Worker) -> list[int]:
            seen: list[int] = []  # filled as the dataflow runs, after this function has returned

            def dataflow(scope: Any) -> None:
                replay_files(scope, folder).sink(lambda t, b: seen.append(len(b)))

            worker.dataflow(dataflow)
            return seen

        return sum(sum(seen) for seen in execute(replay, workers))


def pickle_round_trip(batches: list[Any]) -> int:
    """The baseline: pickle every batch to one file and load them back."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "batches.pickle"
        with open(path, "wb") as out:
            for batch in batches:
                pickle.dump(batch, out, protocol=5)
        rows = 0
        with open(path, "rb") as source:
            for _ in batches:
                rows += len(pickle.load(source))
        return rows


def measure(n: int, runs: int) -> list[Row]:
    """Every row of the table."""
    rows = make_rows(n)
    arrays, tuples = batches_of(rows, False), batches_of(rows, True)
    table: list[Row] = []

    base, expected = best_of(runs, lambda: max_dict(tuples))
    table.append({"workload": "max_final", "system": "dict loop", "workers": 1, "seconds": base, "ratio": 1.0})
    for label, data, workers in (("numpy", arrays, 1), ("numpy", arrays, 2), ("tuples", tuples, 1)):
        took, got = best_of(runs, lambda d=data, w=workers: run(d, w, lambda s: s.max_final()))
        assert dict(got) == expected, f"max_final {label} x{workers} disagrees"
        table.append(
            {
                "workload": "max_final",
                "system": f"pytimely {label}",
                "workers": workers,
                "seconds": took,
                "ratio": base / took,
            }
        )

    base, groups = best_of(runs, lambda: collect_dict(tuples))
    table.append({"workload": "collect", "system": "dict of lists", "workers": 1, "seconds": base, "ratio": 1.0})
    for label, data in (("numpy", arrays), ("tuples", tuples)):
        took, got = best_of(runs, lambda d=data: run(d, 1, lambda s: s.collect()))
        assert {k: sorted(v) for k, v in got} == {k: sorted(v) for k, v in groups.items()}, f"collect {label} disagrees"
        table.append(
            {"workload": "collect", "system": f"pytimely {label}", "workers": 1, "seconds": took, "ratio": base / took}
        )

    base, count = best_of(runs, lambda: pickle_round_trip(arrays))
    table.append({"workload": "capture+replay", "system": "pickle numpy", "workers": 1, "seconds": base, "ratio": 1.0})
    for label, data, workers in (("numpy", arrays, 1), ("numpy", arrays, 2), ("tuples", tuples, 1)):
        took, got = best_of(runs, lambda d=data, w=workers: capture_replay(d, w))
        assert got == count == n, f"capture+replay {label} lost rows"
        table.append(
            {
                "workload": "capture+replay",
                "system": f"pytimely {label}",
                "workers": workers,
                "seconds": took,
                "ratio": base / took,
            }
        )
    return table


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 rows, one run each (a smoke test)")
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    args = parser.parse_args()
    n, runs = (20_000, 1) if args.quick else (2_000_000, 3)
    table = measure(n, runs)
    print(f"# {n:,} rows, {KEYS} keys, Python {platform.python_version()} (ratio: baseline seconds / seconds)")
    for row in table:
        if args.json:
            print(json.dumps(row))
        else:
            print(
                f"| {row['workload']} | {row['system']} | {row['workers']} | {row['seconds']:.3f} s | "
                f"{row['ratio']:.2f}x |"
            )


if __name__ == "__main__":
    main()
