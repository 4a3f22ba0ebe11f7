"""Progress traffic as processes grow, with real processes over loopback TCP, against the data each run moves.

    python bench/bench_progress_traffic.py [--quick] [--json] [--png PATH] [--svg PATH]

Every run is a keyed word count (input -> ``count_by`` -> probe) started by ``pytimely launch -n N -w W``:
each worker sends ``ROWS`` words per epoch (drawn from 2,000 words with a fixed seed), advances its input and
steps until its probe passes the epoch. Each process counts the frames and payload bytes its workers hand to
links towards other processes, by precedence (``Worker.communication_stats()['by_precedence']``: progress
batches travel at precedence ``progress``, records at ``data``), from after the dataflow is built until the
last epoch has passed every probe, so start-up and shutdown are left out. Bytes on the wire add a frame
header and an authentication tag per frame (``HEADER.size + TAG`` bytes); the table includes them.

Rows: ``-w 1`` with N = 2, 4, 8, 16 processes (seed 002's footnote 4 asks about processes), then N = 2, 4, 8, 16
processes of 2 workers each with progress sent per worker (``PYTIMELY_AGGREGATE_PROGRESS=0``) and aggregated per
process (the default: a process's workers' batches wait in its outbox for one another, up to 1 ms, and leave
combined, once per remote process), and 4 x 2 on an elastic cluster (``launch --elastic``, combined the same
way). Per row: progress frames and bytes per epoch (whole cluster), per process, per worker pair and per process
pair, progress bytes per data byte, and for aggregated rows the workers' batches per frame that left the outbox
(``batches per flush``).
The baseline is the first row (N = 2, W = 1), measured in the same run; the ratio column is the row's progress
bytes per epoch over it; each aggregated row also gives its progress frames per epoch over those of the same
shape sent per worker (``vs per worker``).

Prints a Markdown table; ``--json`` prints one JSON object per row; ``--png PATH`` plots progress bytes per
epoch against processes (needs matplotlib), ``--svg PATH`` writes the same plot as a plain SVG.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import Column, Row, Table, parser, report, save_png, save_svg

FRAME_OVERHEAD = 40 + 16
"""Bytes a frame adds to its payload on the wire: ``frame.HEADER.size`` plus the ``frame.TAG`` (checked below)."""


# -- the job, run inside every process -----------------------------------------------------------------------


def job(out: str, epochs: int, rows: int) -> None:
    """One process of a run: every worker writes its process's traffic counters before and after the epochs."""
    from pytimely import Worker, execute
    from pytimely.config import RunConfig

    config = RunConfig.from_env().cluster
    vocabulary = [f"w{i}" for i in range(2000)]

    def run(worker: Worker) -> None:
        def build(scope: Any) -> tuple[Any, Any]:
            handle, words = scope.new_input(name="words")
            return handle, words.count_by(lambda w: w, name="count").probe()

        handle, probe = worker.dataflow(build)
        pool = [random.Random(worker.index * 31 + i).choices(vocabulary, k=rows) for i in range(4)]
        # Every process's counters are the sum over its workers: only its first worker reports them.
        before = worker.communication_stats().get("by_precedence", {})
        outbox_before = _outbox(worker)
        started = time.perf_counter()
        for epoch in range(epochs):
            handle.send_batch(pool[epoch % len(pool)])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
        seconds = time.perf_counter() - started
        after = worker.communication_stats().get("by_precedence", {})
        outbox = {k: v - outbox_before.get(k, 0) for k, v in _outbox(worker).items()}
        handle.close()
        worker.step_while(lambda: not probe.done())
        record = {"worker": worker.index, "before": before, "after": after, "seconds": seconds, "outbox": outbox}
        Path(out, f"worker-{worker.index}.json").write_text(json.dumps(record))

    execute(run, config=config)


def _outbox(worker: Any) -> dict[str, float]:
    """The process's progress outbox counters (shared by its workers; none when progress is not aggregated)."""
    return {k: v for k, v in worker.progress_stats().items() if k.startswith("outbox_")}


def launch(
    processes: int, workers: int, epochs: int, rows: int, aggregate: bool = True, elastic: bool = False
) -> list[dict[str, Any]]:
    """Run the job on ``launch -n processes -w workers`` (``--elastic``); each worker's record."""
    with tempfile.TemporaryDirectory(prefix="pytimely-bench-progress-") as out:
        command = [sys.executable, "-m", "pytimely", "launch", "-q", "-n", str(processes), "-w", str(workers)]
        command += ["--elastic", "--"] if elastic else ["--"]
        command += [sys.executable, __file__, "--job", out, str(epochs), str(rows)]
        env = {**os.environ, "PYTHONHASHSEED": "0", "PYTIMELY_AGGREGATE_PROGRESS": "1" if aggregate else "0"}
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the job on -n {processes} -w {workers} failed ({done.returncode}):\n"
                               f"{done.stderr[-4000:]}")
        return [json.loads(p.read_text()) for p in sorted(Path(out).glob("worker-*.json"))]


def traffic(records: list[dict[str, Any]], workers: int, precedence: str) -> tuple[int, int]:
    """Frames and payload bytes sent at ``precedence`` between the records' before and after, over processes."""
    frames = nbytes = 0
    for record in records:
        if record["worker"] % workers:
            continue  # counters are per process; its first worker reports them
        after = record["after"].get(precedence, {"frames": 0, "bytes": 0})
        before = record["before"].get(precedence, {"frames": 0, "bytes": 0})
        frames += after["frames"] - before["frames"]
        nbytes += after["bytes"] - before["bytes"]
    return frames, nbytes


def measure(processes: int, workers: int, epochs: int, rows: int, aggregate: bool = True, elastic: bool = False) -> Row:
    """One configuration's row (before the baseline ratio is added)."""
    records = launch(processes, workers, epochs, rows, aggregate, elastic)
    if len(records) != processes * workers:
        raise RuntimeError(f"-n {processes} -w {workers}: {len(records)} workers reported")
    p_frames, p_payload = traffic(records, workers, "progress")
    d_frames, d_payload = traffic(records, workers, "data")
    p_bytes = p_payload + p_frames * FRAME_OVERHEAD
    outboxes = [r["outbox"] for r in records if r["worker"] % workers == 0 and r["outbox"]]
    flushes = sum(o.get("outbox_flushes", 0) for o in outboxes)
    flushed = sum(o.get("outbox_batches", 0) for o in outboxes)
    d_bytes = d_payload + d_frames * FRAME_OVERHEAD
    peers = processes * workers
    pairs = peers * (peers - 1)
    process_pairs = processes * (processes - 1)
    return {
        "id": f"n={processes} w={workers}" + ("" if aggregate else " per-worker") + (" elastic" if elastic else ""),
        "processes": processes,
        "workers": workers,
        "aggregated": aggregate and workers > 1,
        "elastic": elastic,
        "epochs": epochs,
        "rows": rows,
        "progress_frames_per_epoch": round(p_frames / epochs, 2),
        "progress_bytes_per_epoch": round(p_bytes / epochs, 1),
        "progress_bytes_per_process_epoch": round(p_bytes / epochs / processes, 1),
        "progress_frames_per_worker_pair_epoch": round(p_frames / epochs / pairs, 3),
        "progress_frames_per_process_pair_epoch": round(p_frames / epochs / process_pairs, 3),
        "data_bytes_per_epoch": round(d_bytes / epochs, 1),
        "progress_per_data_byte": round(p_bytes / d_bytes, 4) if d_bytes else float("inf"),
        "epoch_ms": round(1e3 * max(r["seconds"] for r in records) / epochs, 2),
        "batches_per_flush": round(flushed / flushes, 2) if flushes else 0.0,
    }


def rows_for(quick: bool) -> list[Row]:
    """Every configuration, the baseline (-n 2 -w 1) first, with the ratio to it."""
    epochs, rows = (4, 500) if quick else (10, 2000)
    shapes = [2, 4, 8] if quick else [2, 4, 8, 16]
    out = [measure(n, 1, epochs, rows) for n in shapes]
    # Two workers per process, progress sent per worker (PYTIMELY_AGGREGATE_PROGRESS=0) and aggregated per process.
    for n in [2] if quick else shapes:
        per_worker = measure(n, 2, epochs, rows, aggregate=False)
        aggregated = measure(n, 2, epochs, rows)
        aggregated["vs_per_worker"] = round(
            aggregated["progress_frames_per_epoch"] / per_worker["progress_frames_per_epoch"], 3
        )
        out += [per_worker, aggregated]
    out.append(measure(2 if quick else 4, 2, epochs, rows, elastic=True))
    base = out[0]
    for row in out:
        row["baseline"] = "-n 2 -w 1 (same run)"
        row["vs_baseline"] = round(row["progress_bytes_per_epoch"] / base["progress_bytes_per_epoch"], 2)
    return out


# -- report --------------------------------------------------------------------------------------------------


COLUMNS = [
    Column("processes x workers", lambda r: f"{r['processes']} x {r['workers']}"),
    Column("progress sent", lambda r: _sent(r)),
    Column("progress frames/epoch", "progress_frames_per_epoch", "{:.0f}"),
    Column("vs per worker", "vs_per_worker", "{:.2f}x"),
    Column("batches per flush", lambda r: r["batches_per_flush"] or None, "{:.2f}"),
    Column("progress bytes/epoch", "progress_bytes_per_epoch", "{:.0f}"),
    Column("per process", "progress_bytes_per_process_epoch", "{:.0f}"),
    Column("frames per worker pair", "progress_frames_per_worker_pair_epoch", "{:.2f}"),
    Column("frames per process pair", "progress_frames_per_process_pair_epoch", "{:.2f}"),
    Column("data bytes/epoch", "data_bytes_per_epoch", "{:.0f}"),
    Column("progress per data byte", "progress_per_data_byte", "{:.3f}"),
    Column("epoch ms", "epoch_ms", "{:.1f}"),
    Column("bytes vs -n 2 -w 1", "vs_baseline", "{:.2f}x"),
]


def _sent(row: Row) -> str:
    """How a row's progress batches crossed to other processes."""
    if row["elastic"]:
        return "combined per process (elastic)"
    if row["workers"] == 1:
        return "one worker a process"
    return "combined per process" if row["aggregated"] else "per worker"


def _series(rows: list[Row]) -> tuple[list[Row], list[Row]]:
    single = [r for r in rows if r["workers"] == 1]
    two = [r for r in rows if r["workers"] == 2 and not r["elastic"]]
    return single, two


def draw(rows: list[Row]) -> Callable[[Any], Any]:
    """Progress bytes per epoch against processes (one worker each), and progress frames per epoch against
    processes of two workers, sent per worker and combined per process, drawn by ``pyplot``."""

    def figure(plt: Any) -> Any:
        single, two = _series(rows)
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        xs = [r["processes"] for r in single]
        left.plot(xs, [r["progress_bytes_per_epoch"] for r in single], "o-", label="progress bytes/epoch (cluster)")
        left.plot(xs, [r["progress_bytes_per_process_epoch"] for r in single], "s--", label="per process")
        left.set_xscale("log", base=2)
        left.set_yscale("log")
        left.set_xlabel("processes (one worker each)")
        left.set_ylabel("bytes per epoch")
        left.legend()
        left.grid(alpha=0.3)
        for aggregated, style in ((False, "o-"), (True, "s-")):
            series = [r for r in two if r["aggregated"] is aggregated]
            if series:
                right.plot(
                    [r["processes"] for r in series],
                    [r["progress_frames_per_epoch"] for r in series],
                    style,
                    label=_sent(series[0]),
                )
        if two:
            right.set_xscale("log", base=2)
            right.set_yscale("log")
            right.set_xlabel("processes (two workers each)")
            right.set_ylabel("progress frames per epoch")
            right.legend()
            right.grid(alpha=0.3)
        fig.suptitle("Progress traffic between processes (bench/bench_progress_traffic.py)")
        return fig

    return figure


def svg_points(rows: list[Row]) -> list[tuple[Any, float]]:
    """The left panel of :func:`draw` for a plain SVG: progress bytes per epoch by processes of one worker."""
    single, _ = _series(rows)
    return [(r["processes"], r["progress_bytes_per_epoch"]) for r in single]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with ``--job``, one process of a run)."""
    command = parser(__doc__, png="progress bytes and frames per epoch", svg="progress bytes per epoch")
    command.add_argument("--job", nargs=3, metavar=("OUT", "EPOCHS", "ROWS"), help=argparse.SUPPRESS)
    args = command.parse_args(argv)
    if args.job:
        out, epochs, rows = args.job
        job(out, int(epochs), int(rows))
        return 0
    from pytimely.communication.frame import HEADER, TAG

    assert HEADER.size + TAG == FRAME_OVERHEAD, "the frame layout changed: update FRAME_OVERHEAD"
    table = rows_for(args.quick)
    note = (
        f"load average {os.getloadavg()[0]:.2f} at the end; one run each; "
        f"{table[0]['epochs']} epochs of {table[0]['rows']} words per worker"
    )
    report(table, Table(COLUMNS), as_json=args.json, note=note)
    if args.png:
        save_png(args.png, draw(table))
    if args.svg:
        save_svg(args.svg, svg_points(table), x_label="processes (one worker each)", title="progress bytes per epoch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
