"""Everyday operators and capture/replay on batches, against plain-Python baselines measured in the same run.

    python bench/bench_everyday.py [--quick] [--json]

2,000,000 ``(key, value)`` rows (seed 7), 1,000 keys, sent in batches of 65,536 at one epoch:

* ``max_final``: pytimely with numpy batches (1 and 2 workers) and with lists of tuples (1 worker), against a
  dict loop over the same tuples;
* ``collect`` (keyed, per epoch): numpy batches and lists of tuples, against a dict-of-lists loop;
* capture to files and replay: numpy batches and lists of tuples written by ``capture_to_files`` and read back
  by ``replay_files``, against ``pickle.dump``/``pickle.load`` of the same batches to one file;
* a **running join** (``join(over="latest", how="outer")``) of 1,000,000 ``(key, value)`` records per side
  (half the rows), 1,000 keys, in 100 epochs: pytimely (1 and 2 workers) against a dict loop with the same
  semantics (after each epoch, one result per key it changed) and Bytewax 0.21.1's ``join(...,
  emit_mode="running")`` (1 worker; it sends one result per record, 2,000,000 in all). pytimely on 1 worker
  and the dict loop must agree on every result, and Bytewax must end with the same latest pair per key; on 2
  workers, which value of an epoch is a key's latest follows arrival order, so only the keys each epoch
  changed are checked.

Every result is checked against its baseline. Prints a Markdown table; ``--json`` prints one JSON object per row.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from harness import Column, Table, best_of, parser, report
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


JOIN_EPOCHS = 100


def join_sides(rows: Any) -> tuple[list[list[tuple[int, int]]], list[list[tuple[int, int]]]]:
    """The rows cut in two sides of ``(key, value)`` tuples, each in ``JOIN_EPOCHS`` epochs (made before timing)."""
    half = len(rows) // 2
    sides = []
    for part in (rows[:half], rows[half : 2 * half]):
        per = max(1, len(part) // JOIN_EPOCHS)
        sides.append([[tuple(r) for r in part[i : i + per].tolist()] for i in range(0, len(part), per)])
    return sides[0], sides[1]


def join_pytimely(left: list[Any], right: list[Any], workers: int) -> list[tuple[int, Any]]:
    """``(epoch, (key, (l, r)))`` of pytimely's running join, each worker sending its share of each epoch."""

    def job(worker: Worker) -> list[tuple[Any, Any]]:
        def dataflow(scope: Any) -> Any:
            h1, s1 = scope.new_input()
            h2, s2 = scope.new_input()
            return h1, h2, s1.join(s2, over="latest", how="outer").capture()

        h1, h2, captured = worker.dataflow(dataflow)
        for epoch in range(max(len(left), len(right))):
            for handle, side in ((h1, left), (h2, right)):
                handle.advance_to(epoch)
                if epoch < len(side):
                    handle.send_batch(side[epoch][worker.index :: worker.peers])
        h1.close()
        h2.close()
        out: list[tuple[Any, Any]] = captured
        return out

    return [(t, r) for events in execute(job, workers) for t, b in events for r in b]


def join_plain(left: list[Any], right: list[Any]) -> list[tuple[int, Any]]:
    """The baseline: each side's latest value per key in dicts; after each epoch, one result per changed key."""
    latest: dict[int, list[Any]] = {}
    out: list[tuple[int, Any]] = []
    for epoch in range(max(len(left), len(right))):
        changed: dict[int, list[Any]] = {}
        for side, records in ((0, left), (1, right)):
            if epoch < len(records):
                for k, v in records[epoch]:
                    pair = latest.get(k)
                    if pair is None:
                        pair = latest[k] = [None, None]
                    pair[side] = v
                    changed[k] = pair
        out.extend((epoch, (k, (p[0], p[1]))) for k, p in changed.items())
    return out


def join_bytewax(left: list[tuple[str, int]], right: list[tuple[str, int]]) -> list[Any]:
    """Bytewax 0.21.1's running join, 1 worker: every ``(key, (l, r))`` it sent."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    out: list[Any] = []
    flow = Dataflow("running_join")
    lefts = op.input("left", flow, TestingSource(left, batch_size=1000))
    rights = op.input("right", flow, TestingSource(right, batch_size=1000))
    joined = op.join("join", lefts, rights, insert_mode="last", emit_mode="running")
    op.output("out", joined, TestingSink(out))
    run_main(flow)  # type: ignore[no-untyped-call]
    return out


def last_pairs(results: list[Any]) -> dict[Any, Any]:
    """The last result per key (what every running join ends with)."""
    return {int(k): pair for k, pair in results}


def measure_join(rows: Any, runs: int, bytewax: bool) -> list[Row]:
    """The running-join rows of the table."""
    left, right = join_sides(rows)
    table: list[Row] = []
    base, expected = best_of(runs, lambda: join_plain(left, right))
    final = last_pairs(r for _, r in sorted(expected, key=lambda e: e[0]))  # type: ignore[arg-type]
    table.append({"workload": "running join", "system": "dict loop", "workers": 1, "seconds": base, "ratio": 1.0})
    for workers in (1, 2):
        took, got = best_of(runs, lambda w=workers: join_pytimely(left, right, w))
        # Which value of an epoch is a key's latest follows arrival order, fixed only when one worker sends.
        assert sorted((t, k) for t, (k, _) in got) == sorted((t, k) for t, (k, _) in expected), "running join: keys"
        if workers == 1:
            assert sorted(got) == sorted(expected), "running join disagrees with the dict loop"
        table.append({"workload": "running join", "system": "pytimely", "workers": workers, "seconds": took,
                      "ratio": base / took})
    if bytewax:
        flat_left = [(str(k), v) for epoch in left for k, v in epoch]
        flat_right = [(str(k), v) for epoch in right for k, v in epoch]
        took, got = best_of(1, lambda: join_bytewax(flat_left, flat_right))
        assert last_pairs(got) == final, "Bytewax's running join ends elsewhere"
        table.append({"workload": "running join", "system": "Bytewax 0.21.1 join running", "workers": 1,
                      "seconds": took, "ratio": base / took})
    return table


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
    import importlib.util

    # --quick leaves Bytewax out: the smoke test stays cheap.
    with_bytewax = n >= 1_000_000 and importlib.util.find_spec("bytewax") is not None
    table.extend(measure_join(rows, runs, with_bytewax))
    return table


COLUMNS = [
    Column("workload", "workload"),
    Column("system", "system"),
    Column("workers", "workers"),
    Column("seconds", "seconds", "{:.3f} s"),
    Column("ratio", "ratio", "{:.2f}x"),
]


def main() -> None:
    """Measure and print."""
    args = parser(__doc__).parse_args()
    n, runs = (20_000, 1) if args.quick else (2_000_000, 3)
    table = measure(n, runs)
    note = (
        f"{n:,} rows, {KEYS} keys (ratio: baseline seconds / seconds; the running join's baseline is the dict loop, "
        "so Bytewax's row is its own ratio to it)"
    )
    report(table, Table(COLUMNS), as_json=args.json, facts={"rows": n, "keys": KEYS}, note=note)


if __name__ == "__main__":
    main()
