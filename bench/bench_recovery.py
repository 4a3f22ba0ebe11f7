"""Durable epochs: what a snapshot per epoch costs, how recovery time grows with state, how big the store stays.

    python bench/bench_recovery.py [--quick] [--json]

1. Throughput: word count in 20 epochs of 25,000, 100,000 and 400,000 words (20,000 distinct, seed 16) on 2
   workers, counts kept across epochs by ``state_machine`` routed by bins; the same job without recovery is
   the baseline, run in the same process, and the ratio is reported (best of 3 each), with the cost of one
   snapshot in ms. With recovery every epoch's counts (the whole state) are written, fsynced, and committed
   by a manifest.
2. Recovery time against state size: a store holding one snapshot of N keys (2 workers); the time for a new
   run to open the store (find and verify its last snapshot) and for each worker to load its keys, against the
   time the snapshot took to write.
3. Store size over 1,000 epochs of a job with 20,000 keys, snapshot every epoch, ``keep=2``: the folder's size
   every 100 epochs (it stays flat: old snapshots are removed as new ones commit).

Prints a Markdown table; ``--json`` prints one JSON object per row instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from pytimely import Worker, execute
from pytimely.dataflow.operators.state_machine import state_machine
from pytimely.recovery import Durable, LocalStore, Recovery, SnapshotPolicy, fixed_bins

Row = dict[str, Any]


def _add(_word: str, _value: str, count: int | None) -> tuple[int, None]:
    return (count or 0) + 1, None


def _same(word: str) -> str:
    return word


def wordcount(words: list[str], epochs: int, store: Path | LocalStore | None) -> dict[str, int]:
    """Count ``words`` in ``epochs`` epochs on 2 workers, with a snapshot per epoch into ``store`` if given."""
    size = -(-len(words) // epochs)
    recovery = None if store is None else Recovery(store, SnapshotPolicy(every_epochs=1), job="bench")

    def job(worker: Worker) -> dict[str, int]:
        durable: Durable | None = worker.recovery
        counts: dict[str, int] = {} if durable is None else durable.keyed("counts")

        def build(scope: Any) -> tuple[Any, Any]:
            handle, stream = scope.new_input(name="words")
            out = state_machine(stream, _add, _same, fixed_bins(scope), 256, "count", states=counts)
            return handle, out.probe()

        handle, probe = worker.dataflow(build)
        start = 0 if durable is None else durable.begin()
        for epoch in range(start, epochs):
            handle.send_batch(words[epoch * size : (epoch + 1) * size][worker.index :: worker.peers])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
            if durable is not None:
                durable.commit(epoch, final=epoch == epochs - 1)
        return counts

    parts = execute(job, 2, recovery=recovery)
    return {k: v for part in parts for k, v in part.items()}


def throughput(per_epoch: list[int], distinct: int, epochs: int, runs: int, tmp: Path) -> list[Row]:
    """Word count with and without a snapshot per epoch, for epochs of each size in ``per_epoch`` words.

    A snapshot costs about the same whatever the epoch's size (it writes the whole state), so the ratio of
    throughputs depends on how long an epoch computes; ``ms per snapshot`` is that fixed cost. The variants
    take turns run after run (best of ``runs`` each), so a machine shared with other work slows them alike.
    """
    rows: list[Row] = []
    for size in per_epoch:
        rng = random.Random(16)
        vocabulary = [f"w{i}" for i in range(distinct)]
        total = size * epochs
        words = [rng.choice(vocabulary) for _ in range(total)]
        variants: dict[str, Callable[[int], Any]] = {
            "no recovery": lambda i: None,
            "snapshot every epoch": lambda i, size=size: tmp / f"wc-{size}-{i}",
            "snapshot every epoch, no fsync": lambda i, size=size: LocalStore(tmp / f"wc-ns-{size}-{i}", durable=False),
        }
        best = dict.fromkeys(variants, float("inf"))
        results: dict[str, dict[str, int]] = {}
        for i in range(runs):
            for name, store in variants.items():
                started = time.perf_counter()
                results[name] = wordcount(words, epochs, store(i))
                best[name] = min(best[name], time.perf_counter() - started)
        assert all(r == results["no recovery"] for r in results.values()), "counts with recovery differ"
        base = best["no recovery"]
        rows += [
            {"figure": "throughput", "words/epoch": size, "variant": name, "words/s": round(total / t),
             "ms/epoch": round(1000 * t / epochs, 1), "ms per snapshot": round(1000 * (t - base) / epochs, 1),
             "ratio": round(base / t, 3)}
            for name, t in best.items()
        ]  # fmt: skip
    return rows


def recovery_time(sizes: list[int], tmp: Path) -> list[Row]:
    """Time to resume from a snapshot of N keys, against the time that snapshot took to write."""
    rows = []
    for n in sizes:
        store = tmp / f"state-{n}"
        written: list[float] = []
        execute(partial(_fill, [f"k{i}" for i in range(n)], written), 2, recovery=Recovery(store, job="state"))
        loaded: list[int] = []
        started = time.perf_counter()
        execute(partial(_load, loaded), 2, recovery=Recovery(store, job="state"))
        elapsed = time.perf_counter() - started
        assert sum(loaded) == n
        rows.append({"figure": "recovery time", "keys": n, "seconds": round(elapsed, 4),
                     "write seconds": round(max(written), 4), "ratio": round(elapsed / max(written), 2)})
    return rows


def _fill(keys: list[str], written: list[float], worker: Worker) -> None:
    """Snapshot this worker's share of ``keys`` at epoch 0; note how long the commit took."""
    durable = worker.recovery
    state = durable.keyed("counts")
    durable.begin()
    find = durable._find
    for k in keys:
        if find(k) % worker.peers == worker.index:
            state[k] = 1
    started = time.perf_counter()
    durable.commit(0, final=True)
    written.append(time.perf_counter() - started)


def _load(loaded: list[int], worker: Worker) -> None:
    """Resume: load this worker's keys."""
    loaded.append(len(worker.recovery.keyed("counts")))


def _files(folder: Path) -> list[int]:
    """The sizes of the files under ``folder`` (walked while the writer thread may be removing old ones)."""
    sizes = []
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                sizes.append(os.stat(os.path.join(root, name)).st_size)
    return sizes


def store_size(epochs: int, keys: int, tmp: Path) -> list[Row]:
    """The store's size every tenth of ``epochs`` epochs, a snapshot of ``keys`` keys each epoch, keep=2."""
    store = tmp / "size"
    rows: list[Row] = []
    names = [f"k{i}" for i in range(keys)]

    def job(worker: Worker) -> None:
        durable = worker.recovery
        state = durable.keyed("counts")
        durable.begin()
        find = durable._find
        mine = [k for k in names if find(k) % worker.peers == worker.index]
        for epoch in range(epochs):
            for k in mine[epoch % 10 :: 10]:
                state[k] = state.get(k, 0) + 1
            durable.commit(epoch, final=epoch == epochs - 1)
            if worker.index == 0 and (epoch + 1) % (epochs // 10) == 0:
                sizes = _files(store)
                rows.append({"figure": "store size", "epoch": epoch + 1, "bytes": sum(sizes), "files": len(sizes)})

    execute(job, 2, recovery=Recovery(store, SnapshotPolicy(every_epochs=1, keep=2), job="size"))
    first = rows[0]["bytes"]
    for row in rows:
        row["ratio"] = round(row["bytes"] / first, 3)
    return rows


def main() -> None:
    """Run the figures and print them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if args.quick:
            rows = throughput([20_000], 2_000, 5, 1, tmp)
            rows += recovery_time([1_000, 10_000], tmp)
            rows += store_size(50, 2_000, tmp)
        else:
            rows = throughput([25_000, 100_000, 400_000], 20_000, 20, 3, tmp)
            rows += recovery_time([10_000, 100_000, 1_000_000], tmp)
            rows += store_size(1_000, 20_000, tmp)
    print(f"# bench_recovery on {os.cpu_count()} cpus")
    for row in rows:
        print(json.dumps(row) if args.json else " | ".join(f"{k}: {v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
