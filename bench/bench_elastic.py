"""Live rescaling on loopback with real processes, each figure against a baseline measured in the same run.

    python bench/bench_elastic.py [--quick] [--json] [--png PATH] [--bins-per-epoch N] [--repeat N] [--latency-only]

Every run is the elastic word count (``count_keys`` under ``run_while_rescaling``, as ``wordcount --rescale``
runs it), started by ``pytimely launch -n 2 --elastic``: each member worker sends ``ROWS`` words per epoch.

(a) epoch latency around a join and a leave, plan ``J:+1,L:-1``: a third process joins after epoch ``J``
    (requested through the launcher's control endpoint) and leaves after epoch ``L``. Worker 0 times each
    epoch from the end of the one before until its probe passes it, so the wait for a newcomer and the
    handing over of bins count. p50 and p99 per phase: before the join, the three epochs from the join on,
    between, the three epochs from the leave on, after. Baseline: the same job without rescaling, in the
    same run, over the same epochs; the ratio is the phase's p50 over the baseline's p50. The newcomer takes
    its bins ``--bins-per-epoch`` (16) at a time over the epochs from the join on (fluid migration,
    ``migration_schedule``); rows ``a' join`` and ``a' between`` are the same plan run a second time with every
    bin moving at the join epoch (the way it was done before), against the same baseline. ``--repeat N`` runs
    the three jobs N times, interleaved, and reports per phase the median over runs of each run's p50 and p99.
(b) bootstrap time against the progress state's size: the same job joined by a third process after epoch
    2, with ``K`` input handles per worker that nobody advances, so each holds a capability and adds held
    pointstamps to the state a newcomer receives. The newcomer reports how long it took from building its
    dataflow until its view was complete, and the state it got (pointstamps, bytes on the wire). Baseline:
    ``K = 0``.
(c) the progress state's size as epochs grow: after each epoch of run (a), worker 0's
    ``Worker.progress_stats()``, the state a bootstrap server would send at that moment. Seed 002 expects it
    to stay small; the row reports its size at the first and last epoch and its largest. ``--png PATH``
    plots it (needs matplotlib: ``pip install -e '.[bench]'``).

Prints a Markdown table; ``--json`` prints one JSON object per row instead.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import Column, Row, Table, parser, report, save_png

JOINED_AT = 2
"""The epoch after which run (b)'s newcomer joins."""


# -- the job, run inside every process -----------------------------------------------------------------------


def job(out: str, epochs: int, rows: int, plan_text: str, held: int, per: str = "16") -> None:
    """One process of a run: every worker writes its epoch times and progress-state sizes to ``out``."""
    from pytimely import Worker, execute
    from pytimely.algorithms.rescaling import count_keys, run_while_rescaling
    from pytimely.config import RunConfig
    from pytimely.membership import Launcher, RescalePlan

    run_config = RunConfig.from_env()
    config = run_config.cluster
    plan = RescalePlan.parse(plan_text, initial=config.initial_processes, workers=config.workers)
    vocabulary = [f"w{i}" for i in range(5000)]
    pool = [random.Random(seed).choices(vocabulary, k=rows) for seed in range(16)]

    def stage(records: Any, control: Any) -> Any:
        for _ in range(held):
            records.scope.new_input(name="held")
        return count_keys(records, control)

    def run(worker: Worker) -> None:
        stamps: list[float] = []
        stats: list[dict[str, float]] = []

        def on_epoch(epoch: int) -> None:
            stamps.append(time.perf_counter())
            stats.append(worker.progress_stats())

        started = time.perf_counter()
        run_while_rescaling(
            worker,
            stage,
            lambda w, e, _: pool[(7 * w + e) % len(pool)],
            epochs,
            plan,
            coordinator=Launcher(address=run_config.control, secret=config.secret),
            on_epoch=on_epoch,
            bins_per_epoch=None if per == "all" else int(per),
        )
        first = plan.joins_at(worker.index) if worker.joined else 0
        record = {"worker": worker.index, "first": first, "started": started, "stamps": stamps, "stats": stats}
        Path(out, f"worker-{worker.index}.json").write_text(json.dumps(record))

    execute(run, config=config)


def launch(epochs: int, rows: int, plan: str, held: int = 0, per: str = "16") -> dict[int, dict[str, Any]]:
    """Run the job on ``launch -n 2 --elastic``; each worker's record."""
    with tempfile.TemporaryDirectory(prefix="pytimely-bench-elastic-") as out:
        command = [sys.executable, "-m", "pytimely", "launch", "-n", "2", "--elastic", "--"]
        command += [sys.executable, __file__, "--job", out, str(epochs), str(rows), plan, str(held), per]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the elastic job failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in Path(out).glob("worker-*.json")}


def latencies(record: dict[str, Any]) -> list[float]:
    """Each epoch's latency on a worker, in seconds (from the end of the epoch before)."""
    times = [record["started"], *record["stamps"]]
    return [b - a for a, b in itertools.pairwise(times)]


def cut(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 in milliseconds (the largest sample stands in for p99 when there are few)."""
    if len(samples) < 20:
        return statistics.median(samples) * 1e3, max(samples) * 1e3
    q = statistics.quantiles(samples, n=100)
    return q[49] * 1e3, q[98] * 1e3


# -- (a) and (c) -------------------------------------------------------------------------------------------


def median_cut(runs: list[list[float]]) -> tuple[float, float]:
    """p50 and p99 in milliseconds of each run's samples, then the median of those over the runs."""
    cuts = [cut(samples) for samples in runs]
    return statistics.median(c[0] for c in cuts), statistics.median(c[1] for c in cuts)


def latency_and_size_rows(quick: bool, per: str = "16", repeat: int = 1) -> tuple[list[Row], dict[str, Any]]:
    """Per-phase latency around a join and a leave, the progress state's size per epoch, and what to plot."""
    epochs, rows = (36, 1000) if quick else (120, 4000)
    join, leave, warmup, window = epochs // 3 - 1, 2 * epochs // 3 - 1, 3, 3
    plan = f"{join}:+1,{leave}:-1"
    runs: list[tuple[list[float], list[float], list[float]]] = []
    for _ in range(repeat):
        # Interleaved, so that load from elsewhere on the machine falls on all three alike.
        rescaled_record = launch(epochs, rows, plan, per=per)[0]
        at_once = latencies(launch(epochs, rows, plan, per="all")[0])
        static_record = launch(epochs, rows, "")[0]
        runs.append((latencies(rescaled_record), at_once, latencies(static_record)))
    phases = [
        ("before the join", warmup, join + 1),
        ("join", join + 1, join + 1 + window),
        ("between", join + 1 + window, leave + 1),
        ("leave", leave + 1, leave + 1 + window),
        ("after the leave", leave + 1 + window, epochs),
    ]
    base_p50, base_p99 = median_cut([static[warmup:] for _, _, static in runs])
    out = []
    groups = "every bin at once" if per == "all" else f"{per} bins per epoch"
    measured = [("a " + name, 0, lo, hi, groups) for name, lo, hi in phases]
    measured += [("a' " + name, 1, lo, hi, "every bin at once") for name, lo, hi in phases[1:3]]
    for ident, which, lo, hi, moving in measured:
        p50, p99 = median_cut([run[which][lo:hi] for run in runs])
        out.append(
            {
                "id": ident,
                "workload": f"epochs {lo}..{hi - 1}, plan {plan}, {rows} words/worker/epoch, {moving}",
                "epochs": hi - lo,
                "p50_ms": round(p50, 3),
                "p99_ms": round(p99, 3),
                "baseline": f"the same job without rescaling, epochs {warmup}..{epochs - 1} (same run)",
                "repeats": repeat,
                "baseline_p50_ms": round(base_p50, 3),
                "baseline_p99_ms": round(base_p99, 3),
                "p50_vs_baseline": round(p50 / base_p50, 2),
            }
        )
    sizes = [s["state_bytes"] for s in rescaled_record["stats"]]
    points = [s["pointstamps"] for s in rescaled_record["stats"]]
    static_sizes = [s["state_bytes"] for s in static_record["stats"]]
    out.append(
        {
            "id": "c",
            "workload": f"worker 0's progress state after each of {epochs} epochs, plan {plan}",
            "epochs": epochs,
            "first_bytes": sizes[0],
            "last_bytes": sizes[-1],
            "max_bytes": max(sizes),
            "max_pointstamps": max(points),
            "baseline": "the same job without rescaling: its largest state (same run)",
            "baseline_max_bytes": max(static_sizes),
            "last_vs_first": round(sizes[-1] / sizes[0], 2),
        }
    )
    plot = {
        "plan": plan,
        "join": join,
        "leave": leave,
        "rescaled": rescaled_record["stats"],
        "static": static_record["stats"],
    }
    return out, plot


# -- (b) -----------------------------------------------------------------------------------------------------


def bootstrap_rows(quick: bool) -> list[Row]:
    """Bootstrap time of a newcomer as the state it receives grows."""
    epochs, rows = 6, 1000
    counts = (0, 64, 256) if quick else (0, 64, 256, 1024, 4096)
    measured = []
    for held in counts:
        records = launch(epochs, rows, f"{JOINED_AT}:+1", held)
        newcomer = records[2]["stats"][0]
        measured.append((held, newcomer))
    base = measured[0][1]["bootstrap_seconds"]
    return [
        {
            "id": f"b K={held}",
            "workload": f"a third process joins after epoch {JOINED_AT}; {held} held inputs per worker",
            "pointstamps": int(stats["bootstrap_pointstamps"]),
            "state_bytes": int(stats["bootstrap_bytes"]),
            "bootstrap_ms": round(stats["bootstrap_seconds"] * 1e3, 2),
            "baseline": "the same join with K = 0 (same run)",
            "baseline_ms": round(base * 1e3, 2),
            "vs_baseline": round(stats["bootstrap_seconds"] / base, 2),
        }
        for held, stats in measured
    ]


# -- report --------------------------------------------------------------------------------------------------


def draw(plot: dict[str, Any]) -> Callable[[Any], Any]:
    """The progress state's size per epoch, with and without rescaling, drawn by ``pyplot``."""

    def figure(plt: Any) -> Any:
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
        for name, style in (("static", "--"), ("rescaled", "-")):
            stats = plot[name]
            label = "no rescaling" if name == "static" else f"plan {plot['plan']}"
            top.plot(range(len(stats)), [s["state_bytes"] for s in stats], style, label=label)
            bottom.plot(range(len(stats)), [s["pointstamps"] for s in stats], style, label=label)
        for axis in (top, bottom):
            axis.axvline(plot["join"] + 0.5, color="green", linewidth=0.8)
            axis.axvline(plot["leave"] + 0.5, color="red", linewidth=0.8)
            axis.set_ylim(bottom=0)
            axis.grid(alpha=0.3)
        top.set_ylabel("state on the wire (bytes)")
        bottom.set_ylabel("held pointstamps")
        bottom.set_xlabel("epoch (green: a process joins, red: it leaves)")
        top.set_title("Worker 0's progress state (what a bootstrap server sends) as epochs grow")
        top.legend()
        return fig

    return figure


COLUMNS = [Column(header, header) for header in ("", "workload", "pytimely", "baseline", "baseline figure", "ratio")]


def table_line(row: Row) -> Row:
    """A row's cells by column."""
    if row["id"].startswith("a"):
        return {
            "": row["id"], "workload": row["workload"],
            "pytimely": f"p50 {row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms", "baseline": row["baseline"],
            "baseline figure": f"p50 {row['baseline_p50_ms']:.2f} ms, p99 {row['baseline_p99_ms']:.2f} ms",
            "ratio": f"p50 {row['p50_vs_baseline']:.2f}x",
        }  # fmt: skip
    if row["id"].startswith("b"):
        return {
            "": row["id"], "workload": row["workload"],
            "pytimely": f"{row['bootstrap_ms']:.1f} ms for {row['pointstamps']} pointstamps ({row['state_bytes']} B)",
            "baseline": row["baseline"], "baseline figure": f"{row['baseline_ms']:.1f} ms",
            "ratio": f"{row['vs_baseline']:.2f}x",
        }  # fmt: skip
    return {
        "": "c", "workload": row["workload"],
        "pytimely": f"{row['first_bytes']} B first, {row['last_bytes']} B last, {row['max_bytes']} B max "
        f"({row['max_pointstamps']} pointstamps)",
        "baseline": row["baseline"], "baseline figure": f"{row['baseline_max_bytes']} B",
        "ratio": f"last {row['last_vs_first']:.2f}x first",
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with ``--job``, one process of a run)."""
    command = parser(__doc__, png="the progress state's size per epoch")
    command.add_argument(
        "--bins-per-epoch", default="16", metavar="N", help="bins a newcomer takes per epoch, or 'all' (16)"
    )
    command.add_argument("--repeat", type=int, default=1, help="run (a) N times interleaved; report medians (1)")
    command.add_argument("--latency-only", action="store_true", help="only the latency rows (a)")
    command.add_argument(
        "--job", nargs=6, metavar=("OUT", "EPOCHS", "ROWS", "PLAN", "HELD", "PER"), help=argparse.SUPPRESS
    )
    args = command.parse_args(argv)
    if args.job:
        out, epochs, rows, plan, held, per = args.job
        job(out, int(epochs), int(rows), plan, int(held), per)
        return 0
    if args.bins_per_epoch != "all" and not (args.bins_per_epoch.isdigit() and int(args.bins_per_epoch) > 0):
        command.error(f"--bins-per-epoch must be a positive int or 'all', got {args.bins_per_epoch!r}")
    if args.repeat < 1:
        command.error(f"--repeat must be at least 1, got {args.repeat}")
    rows, plot = latency_and_size_rows(args.quick, args.bins_per_epoch, args.repeat)
    if args.latency_only:
        rows = [r for r in rows if r["id"].startswith("a")]
        args.png = None
    else:
        rows += bootstrap_rows(args.quick)
    repeats = rows[0].get("repeats", 1)
    runs = "one run each" if repeats == 1 else f"latency: median over {repeats} interleaved runs of each run's p50/p99"
    report(rows, Table(COLUMNS, [table_line(row) for row in rows]), as_json=args.json, note=runs)
    if args.png:
        save_png(args.png, draw(plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
