"""Windowed counts over event time, against a plain-Python reference and Bytewax, measured in the same run.

    python bench/bench_windows.py [--quick] [--json]

2,000,000 events (seed 42), event times uniform over [0, 100,000) in no order, 100 keys; a count per key and
tumbling window of 100 (100,000 windows), and per key and sliding window of 300 every 100 (3 windows per
event). pytimely is given numpy batches of ``(time, key)`` rows (1 and 2 workers) and lists of tuples
(1 worker); the baselines are a plain Python dict loop over the same tuples and Bytewax 0.21.1's
``count_window`` with an ``EventClock`` (1 worker; its datetimes and string keys are made before the timing,
its watermark waits long enough that no event is late, and its sliding windows that start before time 0 are
left out of the check). Every result is checked against the reference.

Prints a Markdown table; ``--json`` prints one JSON object per row instead.
"""

from __future__ import annotations

import argparse
from collections import Counter
from functools import partial
from typing import Any

import numpy as np

from harness import best_of, machine, machine_line, print_json
from pytimely import Worker, execute

Row = dict[str, Any]
Windows = Counter[tuple[int, int]]
"""``(window start, key) -> count``."""

SPAN = 100_000
KEYS = 100
STEP = 100


def make_events(n: int) -> Any:
    """``n`` rows ``(time, key)`` as an int64 array, seed 42, times in no order."""
    rng = np.random.default_rng(42)
    return np.column_stack([rng.integers(0, SPAN, n), rng.integers(0, KEYS, n)]).astype(np.int64)


def windows_pytimely(events: Any, size: int, workers: int, *, tuples: bool = False) -> Windows:
    """Counts per (window start, key) through ``Stream.sliding`` (tumbling when ``size == STEP``)."""
    rows = [tuple(r) for r in events.tolist()] if tuples else events

    def job(worker: Worker) -> list[tuple[Any, list[Any]]]:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            if size == STEP:
                windows = stream.tumbling(size, time=0, key=1)
            else:
                windows = stream.sliding(size, STEP, time=0, key=1)
            return handle, windows.capture()

        handle, captured = worker.dataflow(build)
        mine = rows[worker.index :: worker.peers]
        for start in range(0, len(mine), 1 << 16):
            handle.send_batch(mine[start : start + (1 << 16)])
        handle.close()
        events: list[tuple[Any, list[Any]]] = captured
        return events

    return Counter({(s, k): c for captured in execute(job, workers) for _, batch in captured for s, _, k, c in batch})


def windows_plain(pairs: list[tuple[int, int]], size: int) -> Windows:
    """The reference: a dict loop over ``(time, key)`` tuples."""
    counts: Windows = Counter()
    per = size // STEP
    for x, k in pairs:
        last = x // STEP
        for j in range(per):
            if last - j >= 0:
                counts[(last - j) * STEP, k] += 1
    return counts


def bytewax_inputs(events: Any) -> list[tuple[str, Any]] | None:
    """``(key, aware datetime)`` items for Bytewax, or None when it is not installed."""
    try:
        import bytewax  # noqa: F401
    except ImportError:
        return None
    from datetime import UTC, datetime, timedelta

    origin = datetime(2024, 1, 1, tzinfo=UTC)
    return [(str(k), origin + timedelta(seconds=x)) for x, k in events.tolist()]


def windows_bytewax(items: list[tuple[str, Any]], size: int) -> Windows:
    """Bytewax 0.21.1's ``count_window`` on 1 worker, windows aligned as ours."""
    from datetime import UTC, datetime, timedelta

    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.operators.windowing import EventClock, SlidingWindower, TumblingWindower, count_window
    from bytewax.testing import TestingSink, TestingSource, run_main

    origin = datetime(2024, 1, 1, tzinfo=UTC)
    out: list[Any] = []
    flow = Dataflow("windows")
    up = op.input("inp", flow, TestingSource(items, batch_size=1000))
    clock: Any = EventClock(lambda item: item[1], wait_for_system_duration=timedelta(days=36500))
    windower: Any
    if size == STEP:
        windower = TumblingWindower(length=timedelta(seconds=size), align_to=origin)
    else:
        windower = SlidingWindower(length=timedelta(seconds=size), offset=timedelta(seconds=STEP), align_to=origin)
    counted = count_window("count", up, clock, windower, lambda item: item[0])
    op.output("out", counted.down, TestingSink(out))
    run_main(flow)  # type: ignore[no-untyped-call]
    # A window's id counts offsets from ``align_to``. Bytewax also opens the sliding windows that start before
    # it (ids < 0); ours start at 0, so those are left out of the comparison.
    return Counter({(wid * STEP, int(k)): c for k, (wid, c) in out if wid >= 0})


def run(quick: bool) -> list[Row]:
    """Every measurement, as table rows."""
    n = 200_000 if quick else 2_000_000
    runs = 1 if quick else 3
    events = make_events(n)
    pairs = [(x, k) for x, k in events.tolist()]
    items = bytewax_inputs(events)
    rows: list[Row] = []
    for size, label in ((STEP, "tumbling 100"), (3 * STEP, "sliding 300/100")):
        t_plain, expected = best_of(runs, partial(windows_plain, pairs, size))
        t_bw = None
        if items is not None:
            t_bw, got_bw = best_of(1, partial(windows_bytewax, items, size))
            assert +got_bw == +expected, "Bytewax disagrees with the reference"
        for workers, tuples in ((1, False), (2, False), (1, True)):
            kind = "tuples" if tuples else "numpy"
            t_ours, got = best_of(runs, partial(windows_pytimely, events, size, workers, tuples=tuples))
            assert got == expected, f"{label}, {workers} worker(s), {kind}: wrong counts"
            workload = f"windowed count, {label}, {kind}, {workers} worker(s)"
            rows.append(_row(workload, n, t_ours, "plain Python dict loop", t_plain))
            if t_bw is not None:
                rows.append(_row(workload, n, t_ours, "Bytewax 0.21.1 count_window, 1 worker", t_bw))
    return rows


def _row(workload: str, n: int, ours: float, baseline: str, theirs: float) -> Row:
    return {
        "workload": workload,
        "n": n,
        "seconds": round(ours, 4),
        "events_per_s": round(n / ours),
        "baseline": baseline,
        "baseline_seconds": round(theirs, 4),
        "speedup_vs_baseline": round(theirs / ours, 2),
    }


def main() -> None:
    """Run and print."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tenth of the events, one run each (a smoke test)")
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    args = parser.parse_args()
    rows = run(args.quick)
    if args.json:
        print_json(rows, machine())
        return
    print(f"{machine_line()}; best of {1 if args.quick else 3} runs\n")
    print("| workload | pytimely | events/s | baseline | baseline time | pytimely speedup |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['workload']} | {row['seconds']} s | {row['events_per_s']:,} | {row['baseline']} "
            f"| {row['baseline_seconds']} s | {row['speedup_vs_baseline']}x |"
        )


if __name__ == "__main__":
    main()
