"""Recovery: what a snapshot per epoch costs, what a snapshot writes against what changed, how resuming grows.

    python bench/bench_recovery.py [--quick] [--json] [--runs R] [--epoch-ms 10,30,100] [--words N,...]
                                   [--figures throughput,zipf,...]

1. **Throughput.** Word count on 2 workers (20,000 distinct words, seed 16), the counts kept across epochs by
   ``state_machine`` (its state declared, so the runtime snapshots it), with epochs sized so that the job
   without recovery takes about 10, 30 and 100 ms per epoch (``--epoch-ms``). Variants, taking turns run after
   run (best of R):
   no recovery (the baseline), a snapshot every epoch into a local folder (fsynced), the same without fsync,
   and a snapshot every 4th epoch (fsynced). The ratio is the baseline's time over the variant's; the CPU
   ratio is the same of the CPU time the process spent (every thread's, the fsyncs' kernel time included,
   best of R), which a busy machine disturbs less than the time. ``--words N,...`` fixes the words per epoch
   for each ``--epoch-ms`` instead of sizing them from a probe (which a busy machine makes drift). The words
   are drawn uniformly, so nearly every key is written at every epoch at 10 ms and more (the state is written
   whole); *KB/snapshot* is what a snapshot wrote: payload records (and, after ``+``, the manifest).
1b. **Throughput of skewed word counts** (``zipf``): the same with the words drawn from 100,000 by Zipf's law
   (the ``r``-th most frequent with weight ``1/r``): every epoch writes the few hot words and some of the cold
   ones, a small share of the keys held, which is what snapshots of changed keys (deltas) are for.
2. **Snapshot bytes against bytes changed.** A state of 100,000 keys in 256 bins (and in 4,096); each epoch
   changes K keys (1 to 100,000). Per epoch: the bytes the snapshot wrote (payload files) against the bytes of
   the keys that changed (each changed key and value pickled on its own) and the bytes of the whole state.
   When fewer than a quarter of a worker's keys changed, its snapshot is a delta of the keys written and removed
   (whatever bins they fall in), the chain of deltas cut by writing the state whole every 32 snapshots
   (``SnapshotPolicy.rewrite_every``), which bounds the store; a worker whose keys did not change writes again
   1/32 of its bins; when at least half of the keys or of the bins held changed, the state is written whole.
3. **Resume time against state size.** A store holding a snapshot of N keys (10^4 to 10^6, 2 workers): the time
   for a new run to open it (find, verify and read the snapshot) and restore every key, against the time the
   run that wrote it took, and the same run's time on an empty store.

Prints a Markdown table per figure (``--json``: one JSON object per row); ``--figures`` picks some of them
(``throughput``, ``bytes``, ``resume``).
"""

from __future__ import annotations

import os
import pickle
import random
import tempfile
import time
from collections.abc import Callable
from functools import partial
from itertools import accumulate
from pathlib import Path
from typing import Any

from harness import Column, Row, Table, parser, report, runs_of, taking_turns
from pytimely import Worker, execute
from pytimely.dataflow.operators.state_machine import state_machine
from pytimely.recovery import LocalStore, Recovery, Seal, SnapshotPolicy, Snapshots


def _add(_word: str, _value: str, count: int | None) -> tuple[int, None]:
    return (count or 0) + 1, None


def _same(word: str) -> str:
    return word


class CountingStore(LocalStore):
    """A local store that counts the bytes written: payload records, and manifests apart."""

    def __init__(self, path: Path, *, durable: bool = True) -> None:
        super().__init__(path, durable=durable)
        self.payload = 0
        self.manifests = 0

    def write_at(self, name: str, offset: int, data: bytes) -> None:
        """Count, then write."""
        self.payload += len(data)
        super().write_at(name, offset, data)

    def put_new(self, name: str, data: bytes) -> None:
        """Count, then write."""
        self.payload += len(data)
        super().put_new(name, data)

    def put(self, name: str, data: bytes) -> None:
        """Count a manifest, then write."""
        if name.startswith("manifests/"):
            self.manifests += len(data)
        super().put(name, data)


def wordcount(
    words: list[str], epochs: int, store: Path | LocalStore | None, every: int = 1
) -> tuple[float, dict[str, int], float]:
    """Count ``words`` in ``epochs`` epochs on 2 workers (a snapshot every ``every`` epochs into ``store`` if
    given); the seconds the epochs took, the counts, and the CPU seconds the process spent meanwhile (every
    thread: workers, writers, committer)."""
    size = -(-len(words) // epochs)
    recovery = None if store is None else Recovery(store, job="bench", policy=SnapshotPolicy(every_epochs=every))
    took: list[float] = []
    cpu: list[float] = []

    def job(worker: Worker) -> dict[str, int]:
        counts: dict[str, int] = {}

        def build(scope: Any) -> tuple[Any, Any]:
            handle, stream = scope.new_input(name="words")
            out = state_machine(stream, _add, _same, None, 256, "count", states=counts)
            return handle, out.probe()

        handle, probe = worker.dataflow(build)
        started, cpu_started = time.perf_counter(), time.process_time()
        for epoch in range(epochs):
            handle.send_batch(words[epoch * size : (epoch + 1) * size][worker.index :: worker.peers])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
        handle.close()
        worker.step_while(lambda: not probe.done())
        took.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
        return counts

    parts = execute(job, 2, recovery=recovery)
    return max(took), {k: v for part in parts for k, v in part.items()}, max(cpu)


def _noting(
    cpus: list[float], written: list[tuple[int, int]], words: list[str], epochs: int, make: Callable[[], Any],
    every: int,
) -> tuple[float, dict[str, int], float]:
    """:func:`wordcount` into the store ``make()`` gives, its CPU seconds noted in ``cpus`` and the bytes it
    wrote (payloads, manifests) in ``written``."""
    store = make()
    result = wordcount(words, epochs, store, every)
    cpus.append(result[2])
    if isinstance(store, CountingStore):
        written.append((store.payload, store.manifests))
    return result


def _draw(rng: random.Random, vocabulary: list[str], k: int, skewed: bool) -> list[str]:
    """``k`` words of ``vocabulary``: uniformly, or by Zipf's law (the ``r``-th word with weight ``1/r``)."""
    if not skewed:
        return [rng.choice(vocabulary) for _ in range(k)]
    return rng.choices(vocabulary, cum_weights=list(accumulate(1 / r for r in range(1, len(vocabulary) + 1))), k=k)


def throughput(
    targets: list[float], distinct: int, epochs: int, runs: int, tmp: Path, sizes: list[int] | None = None,
    *, skewed: bool = False,
) -> list[Row]:
    """Word count with and without a snapshot every epoch, at epochs of about each of ``targets`` seconds (or of
    ``sizes`` words each, when given: no calibration, so that runs on a busy machine compare like with like);
    ``skewed``: words drawn by Zipf's law."""
    rng = random.Random(16)
    vocabulary = [f"w{i}" for i in range(distinct)]
    probe_size = 25_000
    sample = _draw(rng, vocabulary, probe_size * 4, skewed) if not sizes else []
    per_epoch = 1.0 if sizes else min(wordcount(sample, 4, None)[0] for _ in range(3)) / 4
    rows: list[Row] = []
    counter = iter(range(1 << 30))
    tmp = tmp / ("zipf" if skewed else "uniform")  # a store per run: one of another figure would be resumed
    tmp.mkdir(exist_ok=True)
    for n, target in enumerate(targets):
        size = sizes[n] if sizes else max(1000, int(probe_size * target / per_epoch))
        words = _draw(rng, vocabulary, size * epochs, skewed)
        variants: dict[str, tuple[Callable[[], Any], int]] = {
            "no recovery": (lambda: None, 1),
            "snapshot every epoch": (lambda: CountingStore(tmp / f"wc-{next(counter)}"), 1),
            "snapshot every epoch, no fsync": (
                lambda: CountingStore(tmp / f"wc-{next(counter)}", durable=False), 1
            ),
            "snapshot every 4th epoch": (lambda: CountingStore(tmp / f"wc-{next(counter)}"), 4),
        }
        every_run: dict[str, list[float]] = {name: [] for name in variants}
        written: dict[str, list[tuple[int, int]]] = {name: [] for name in variants}

        measures = {
            name: partial(_noting, every_run[name], written[name], words, epochs, make, every)
            for name, (make, every) in variants.items()
        }
        best = taking_turns(runs, measures, key=lambda r: r[0])
        base_time, base_counts, _ = best["no recovery"]
        base_cpu = min(every_run["no recovery"])
        for name, (seconds, counts, _cpu) in best.items():
            assert counts == base_counts, f"{name}: the counts differ from the run without recovery"
            cpu = min(every_run[name])
            snapshots = epochs // variants[name][1]
            payload, manifests = written[name][-1] if written[name] else (0, 0)
            rows.append({
                "figure": "throughput", "words": "zipf" if skewed else "uniform",
                "target ms/epoch": round(1000 * target), "words/epoch": size, "variant": name,
                "ms/epoch": round(1000 * seconds / epochs, 2),
                "ms per snapshot": round(1000 * (seconds - base_time) / snapshots, 2),
                "ratio": round(base_time / seconds, 3), "cpu ms/epoch": round(1000 * cpu / epochs, 2),
                "cpu ratio": round(base_cpu / cpu, 3),
                "KB/snapshot": f"{payload / snapshots / 1000:.1f} + {manifests / snapshots / 1000:.1f}"
                if written[name] else "",
            })  # fmt: skip
    return rows


def _not_held(worker: Worker, epoch: int) -> bool:
    """Whether worker 0's store does not hold ``epoch`` durably yet."""
    return not worker.recovery.holds(epoch)


def _payload_bytes(store: Path) -> dict[int, int]:
    """Bytes of the payloads written at each epoch (the snapshots still in the store): what each manifest names
    that the one before did not (records of segments and payload files alike)."""
    snaps = Snapshots(LocalStore(store), Seal(None))
    out: dict[int, int] = {}
    before: set[str] = set()
    for name in snaps.store.list("manifests"):
        manifest = snaps._read_manifest(name)
        assert manifest is not None, name
        out[manifest.epoch] = sum(size for file, size, _ in manifest.files if file not in before)
        before = manifest.file_names()
    return out


def changed_bytes(keys: int, changes: list[int], bins: list[int], epochs: int, tmp: Path) -> list[Row]:
    """Per epoch: the bytes a snapshot writes when K of ``keys`` keys change, against the bytes changed."""
    rows: list[Row] = []
    names = [f"key-{i:07d}" for i in range(keys)]
    whole = len(pickle.dumps(dict.fromkeys(names, 1), protocol=pickle.HIGHEST_PROTOCOL))
    for nbins in bins:
        for k in changes:
            store = tmp / f"bytes-{nbins}-{k}"
            rng = random.Random(k)
            batches = [names] + [rng.sample(names, k) for _ in range(epochs)]

            def job(worker: Worker, batches: list[list[str]] = batches, nbins: int = nbins) -> None:
                def build(scope: Any) -> tuple[Any, Any]:
                    handle, stream = scope.new_input(name="keys")
                    out = state_machine(stream, _add, _same, None, nbins, "count")
                    return handle, out.probe()

                handle, probe = worker.dataflow(build)
                for epoch, batch in enumerate(batches):
                    handle.send_batch(batch[worker.index :: worker.peers])
                    handle.advance_to(epoch + 1)
                    worker.step_while(lambda: probe.less_than(handle.time))
                    if worker.index == 0:  # each epoch's manifest written (none dropped for a newer one)
                        worker.step_while(partial(_not_held, worker, epoch))

            execute(job, 2, recovery=Recovery(store, job="bytes", policy=SnapshotPolicy(keep=epochs + 5)))
            written = _payload_bytes(store)
            later = [written.get(e, 0) for e in range(1, epochs + 1)]
            per_key = len(pickle.dumps({names[0]: 2}, protocol=pickle.HIGHEST_PROTOCOL))
            rows.append({
                "figure": "snapshot bytes", "keys": keys, "bins": nbins, "keys changed per epoch": k,
                "bytes changed": k * per_key, "bytes written per epoch": round(sum(later) / len(later)),
                "whole state": whole, "ratio written/changed": round(sum(later) / len(later) / (k * per_key), 2),
            })  # fmt: skip
    return rows


def _fill(keys: list[str], worker: Worker) -> None:
    def build(scope: Any) -> tuple[Any, Any]:
        handle, stream = scope.new_input(name="keys")
        out = state_machine(stream, _add, _same, None, 256, "count")
        return handle, out.probe()

    handle, probe = worker.dataflow(build)
    handle.send_batch(keys[worker.index :: worker.peers])
    handle.advance_to(1)
    worker.step_while(lambda: probe.less_than(1))


def _resume(restored: list[int], worker: Worker) -> None:
    """Build the counting dataflow (restored before its first step); note how many keys came back."""
    counts: dict[str, int] = {}

    def build(scope: Any) -> Any:
        handle, stream = scope.new_input(name="keys")
        state_machine(stream, _add, _same, None, 256, "count", states=counts).probe()
        return handle

    worker.dataflow(build)
    restored.append(len(counts))


def resume_time(sizes: list[int], tmp: Path) -> list[Row]:
    """Time to resume from a snapshot of N keys, against the time of the run that wrote it."""
    rows = []
    for n in sizes:
        keys = [f"k{i}" for i in range(n)]
        store = tmp / f"state-{n}"
        started = time.perf_counter()
        execute(partial(_fill, keys), 2, recovery=Recovery(store, job="state"))
        wrote = time.perf_counter() - started
        restored: list[int] = []
        started = time.perf_counter()
        execute(partial(_resume, restored), 2, recovery=Recovery(store, job="state"))
        took = time.perf_counter() - started
        started = time.perf_counter()
        execute(partial(_resume, []), 2)
        empty = time.perf_counter() - started
        assert sum(restored[:2]) == n, restored
        rows.append({"figure": "resume time", "keys": n, "resume seconds": round(took, 3),
                     "without a store": round(empty, 3), "write seconds": round(wrote, 3),
                     "ratio resume/write": round(took / wrote, 2)})  # fmt: skip
    return rows


TABLES = {
    "throughput": (
        "Throughput: the ratio is the time without recovery over the variant's",
        ["words", "target ms/epoch", "words/epoch", "variant", "ms/epoch", "ms per snapshot", "ratio",
         "cpu ms/epoch", "cpu ratio", "KB/snapshot"],
    ),
    "snapshot bytes": (
        "Snapshot bytes against bytes changed",
        [
            "keys",
            "bins",
            "keys changed per epoch",
            "bytes changed",
            "bytes written per epoch",
            "whole state",
            "ratio written/changed",
        ],
    ),
    "resume time": (
        "Resume time against state size",
        ["keys", "resume seconds", "without a store", "write seconds", "ratio resume/write"],
    ),
}
"""Per figure: the title of its table and its columns (each a key of its rows)."""


def tables(rows: list[Row]) -> list[Table]:
    """A table per figure, of that figure's rows."""
    return [
        Table([Column(key, key) for key in keys], [row for row in rows if row["figure"] == figure], title)
        for figure, (title, keys) in TABLES.items()
    ]


FIGURES = ("throughput", "zipf", "bytes", "resume")


def main() -> None:
    """Run the figures and print them."""
    made = parser(__doc__, runs=5)
    made.add_argument(
        "--epoch-ms", default="10,30,100", metavar="MS,...", help="the epoch lengths of the throughput figure"
    )
    made.add_argument(
        "--words", default=None, metavar="N,...",
        help="words per epoch for each --epoch-ms (no calibration: a busy machine's runs compare like with like)",
    )
    made.add_argument("--figures", default=",".join(FIGURES), metavar="NAME,...", help=f"some of {FIGURES}")
    args = made.parse_args()
    figures = set(args.figures.split(","))
    if not figures <= set(FIGURES):
        made.error(f"--figures: unknown {sorted(figures - set(FIGURES))}; the figures are {', '.join(FIGURES)}")
    try:
        targets = [float(ms) / 1000 for ms in args.epoch_ms.split(",")]
    except ValueError:
        made.error(f"--epoch-ms: milliseconds separated by commas, got {args.epoch_ms!r}")
    try:
        sizes = None if args.words is None else [int(n) for n in args.words.split(",")]
    except ValueError:
        made.error(f"--words: numbers separated by commas, got {args.words!r}")
    if sizes is not None and len(sizes) != len(targets):
        made.error(f"--words: one number per --epoch-ms ({len(targets)}), got {len(sizes)}")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if args.quick:
            if "throughput" in figures:
                rows += throughput(targets[:1], 2_000, 8, 1, tmp, sizes[:1] if sizes else None)
            if "zipf" in figures:
                rows += throughput(targets[:1], 10_000, 8, 1, tmp, sizes[:1] if sizes else None, skewed=True)
            if "bytes" in figures:
                rows += changed_bytes(2_000, [10, 2_000], [256], 3, tmp)
            if "resume" in figures:
                rows += resume_time([1_000, 10_000], tmp)
        else:
            if "throughput" in figures:
                rows += throughput(targets, 20_000, 40, args.runs, tmp, sizes)
            if "zipf" in figures:
                rows += throughput(targets, 100_000, 40, args.runs, tmp, sizes, skewed=True)
            if "bytes" in figures:
                rows += changed_bytes(100_000, [1, 10, 100, 1_000, 10_000, 100_000], [256, 4096], 5, tmp)
            if "resume" in figures:
                rows += resume_time([10_000, 100_000, 1_000_000], tmp)
    report(rows, tables(rows), as_json=args.json, note=f"variants taking turns, best of {runs_of(args)}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
