"""Windowed counts over event time, against a plain-Python reference and Bytewax, measured in the same run.

    python bench/bench_windows.py [--quick] [--json]

2,000,000 events (seed 42), event times uniform over [0, 100,000) in no order, 100 keys; a count per key and
tumbling window of 100 (100,000 windows), and per key and sliding window of 300 every 100 (3 windows per
event). pytimely is given numpy batches of ``(time, key)`` rows (1 and 2 workers) and lists of tuples
(1 worker); the baselines are a plain Python dict loop over the same tuples and Bytewax 0.21.1's
``count_window`` with an ``EventClock`` (1 worker; its datetimes and string keys are made before the timing,
its watermark waits long enough that no event is late, and its sliding windows that start before time 0 are
left out of the check). Every result is checked against the reference.

Two more workloads on 2,000,000 events with a value column (seed 42):

* a windowed **fold**: per key and tumbling window of 100, ``Fold`` of ``(count, sum of values)``, against a dict
  loop and Bytewax's ``fold_window`` with the same fold (numpy batches and tuples, 1 worker);
* an **event-clock** tumbling count: event times rise through [0, 100,000) with up to 499 units of disorder
  (so none is late behind a delay of 1,000), windowed behind ``EventClock(delay=1000)`` (numpy batches, 1
  and 2 workers), against a dict loop doing the same watermark bookkeeping and Bytewax's ``count_window``
  behind its ``EventClock`` (event times as days, its wait 1,000.5 days: the seconds its watermark gains from
  the system clock during the run cannot make an event late, so it agrees with the reference exactly).

``--quick`` runs 50,000 events and leaves Bytewax out (the smoke test stays cheap).

Prints a Markdown table; ``--json`` prints one JSON object per row instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from harness import Column, Row, Table, best_of, parser, report
from pytimely import Worker, execute

Windows = Counter[tuple[int, int]]
"""``(window start, key) -> count``."""

SPAN = 100_000
KEYS = 100
STEP = 100


def make_events(n: int) -> Any:
    """``n`` rows ``(time, key)`` as an int64 array, seed 42, times in no order."""
    rng = np.random.default_rng(42)
    return np.column_stack([rng.integers(0, SPAN, n), rng.integers(0, KEYS, n)]).astype(np.int64)


def windowed(rows: Any, workers: int, windows: Callable[[Any], Any]) -> Counter[tuple[int, int]]:
    """``(window start, key) -> result`` of ``windows(stream)`` over ``rows``, each worker feeding its share in
    batches of 65,536 rows."""

    def job(worker: Worker) -> list[tuple[Any, list[Any]]]:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            return handle, windows(stream).capture()

        handle, captured = worker.dataflow(build)
        mine = rows[worker.index :: worker.peers]
        for start in range(0, len(mine), 1 << 16):
            handle.send_batch(mine[start : start + (1 << 16)])
        handle.close()
        events: list[tuple[Any, list[Any]]] = captured
        return events

    return Counter({(s, k): r for captured in execute(job, workers) for _, batch in captured for s, _, k, r in batch})


def windows_pytimely(events: Any, size: int, workers: int, *, tuples: bool = False) -> Windows:
    """Counts per (window start, key) through ``Stream.sliding`` (tumbling when ``size == STEP``)."""
    rows = [tuple(r) for r in events.tolist()] if tuples else events
    if size == STEP:
        return windowed(rows, workers, lambda stream: stream.tumbling(size, time=0, key=1))
    return windowed(rows, workers, lambda stream: stream.sliding(size, STEP, time=0, key=1))


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


DELAY = 1000
"""The event clock's delay in the clocked workload; the disorder of its events is below half of it."""


def make_values(n: int) -> Any:
    """``n`` values in [-1000, 1000) (seed 42), the fold's input."""
    return np.random.default_rng(42).integers(-1000, 1000, n).astype(np.int64)


def fold_pytimely(rows: Any, workers: int) -> Counter[tuple[int, int]]:
    """``(window start, key) -> (count, sum)`` through ``Stream.tumbling`` with a ``Fold``."""
    from pytimely.dataflow.operators.folds import Fold

    fold = Fold(lambda: (0, 0), lambda acc, v: (acc[0] + 1, acc[1] + v), lambda a, b: (a[0] + b[0], a[1] + b[1]))
    return windowed(rows, workers, lambda stream: stream.tumbling(STEP, time=0, key=1, value=2, aggregate=fold))


def fold_plain(triples: list[tuple[int, int, int]]) -> dict[tuple[int, int], tuple[int, int]]:
    """The reference: a dict loop folding ``(count, sum)`` per (window start, key)."""
    accs: dict[tuple[int, int], tuple[int, int]] = {}
    get = accs.get
    for x, k, v in triples:
        w = (x // STEP * STEP, k)
        c, t = get(w, (0, 0))
        accs[w] = (c + 1, t + v)
    return accs


def fold_bytewax(items: list[tuple[str, Any, int]]) -> dict[tuple[int, int], tuple[int, int]]:
    """Bytewax 0.21.1's ``fold_window`` with the same fold, 1 worker."""
    from datetime import UTC, datetime, timedelta

    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.operators.windowing import EventClock, TumblingWindower, fold_window
    from bytewax.testing import TestingSink, TestingSource, run_main

    origin = datetime(2024, 1, 1, tzinfo=UTC)
    out: list[Any] = []
    flow = Dataflow("fold")
    up = op.input("inp", flow, TestingSource(items, batch_size=1000))
    keyed = op.key_on("key", up, lambda item: item[0])
    clock: Any = EventClock(lambda item: item[1], wait_for_system_duration=timedelta(days=36500))
    windower: Any = TumblingWindower(length=timedelta(seconds=STEP), align_to=origin)
    folded = fold_window(
        "fold", keyed, clock, windower, lambda: (0, 0), lambda acc, item: (acc[0] + 1, acc[1] + item[2]),
        lambda a, b: (a[0] + b[0], a[1] + b[1]),
    )
    op.output("out", folded.down, TestingSink(out))
    run_main(flow)  # type: ignore[no-untyped-call]
    return {(wid * STEP, int(k)): acc for k, (wid, acc) in out}


def make_ordered(n: int) -> Any:
    """``n`` rows ``(time, key)``: times rising through [0, SPAN) with up to 499 units of disorder, seed 42."""
    rng = np.random.default_rng(42)
    base = np.arange(n, dtype=np.int64) * SPAN // n
    return np.column_stack([base + rng.integers(0, DELAY // 2, n), rng.integers(0, KEYS, n)]).astype(np.int64)


def clock_pytimely(rows: Any, workers: int) -> Windows:
    """Counts per (window start, key) through ``Stream.tumbling`` behind an ``EventClock``."""
    from pytimely.dataflow.operators.clock import EventClock

    return windowed(rows, workers, lambda stream: stream.tumbling(STEP, time=0, key=1, clock=EventClock(DELAY)))


def clock_plain(pairs: list[tuple[int, int]]) -> tuple[Windows, int]:
    """The reference: a dict loop with the event clock's bookkeeping; ``(counts, late)``."""
    counts: Windows = Counter()
    highest, watermark, late = -1, 0, 0
    for x, k in pairs:
        if x < watermark:
            late += 1
            continue
        counts[x // STEP * STEP, k] += 1
        if x > highest:
            highest = x
            watermark = max(watermark, x - DELAY)
    return counts, late


def clock_bytewax(items: list[tuple[str, Any]]) -> Windows:
    """Bytewax 0.21.1's ``count_window`` behind its ``EventClock``, times in days (see the module doc)."""
    from datetime import UTC, datetime, timedelta

    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.operators.windowing import EventClock, TumblingWindower, count_window
    from bytewax.testing import TestingSink, TestingSource, run_main

    origin = datetime(2024, 1, 1, tzinfo=UTC)
    out: list[Any] = []
    flow = Dataflow("clocked")
    up = op.input("inp", flow, TestingSource(items, batch_size=1000))
    clock: Any = EventClock(lambda item: item[1], wait_for_system_duration=timedelta(days=DELAY, hours=12))
    windower: Any = TumblingWindower(length=timedelta(days=STEP), align_to=origin)
    counted = count_window("count", up, clock, windower, lambda item: item[0])
    op.output("out", counted.down, TestingSink(out))
    run_main(flow)  # type: ignore[no-untyped-call]
    return Counter({(wid * STEP, int(k)): c for k, (wid, c) in out})


def run_more(n: int, runs: int, quick: bool) -> list[Row]:
    """The windowed fold and the event-clock count."""
    rows: list[Row] = []
    events = make_events(n)
    values = make_values(n)
    triples_array = np.column_stack([events, values])
    triples = [(x, k, v) for x, k, v in triples_array.tolist()]
    bytewax = not quick and bytewax_inputs(events[:1]) is not None
    t_plain, expected = best_of(runs, partial(fold_plain, triples))
    t_bw = None
    if bytewax:
        from datetime import UTC, datetime, timedelta

        origin = datetime(2024, 1, 1, tzinfo=UTC)
        items = [(str(k), origin + timedelta(seconds=x), v) for x, k, v in triples]
        t_bw, got_bw = best_of(1, partial(fold_bytewax, items))
        assert got_bw == expected, "Bytewax's fold disagrees with the reference"
        del items
    for workers, tuples in ((1, False), (2, False), (1, True)):
        kind = "tuples" if tuples else "numpy"
        data: Any = triples if tuples else triples_array
        t_ours, got = best_of(runs, partial(fold_pytimely, data, workers))
        assert dict(got) == expected, f"windowed fold, {kind}, {workers} worker(s): wrong folds"
        workload = f"windowed fold (count, sum), tumbling 100, {kind}, {workers} worker(s)"
        rows.append(_row(workload, n, t_ours, "plain Python dict loop", t_plain))
        if t_bw is not None:
            rows.append(_row(workload, n, t_ours, "Bytewax 0.21.1 fold_window, 1 worker", t_bw))

    ordered = make_ordered(n)
    pairs = [(x, k) for x, k in ordered.tolist()]
    t_plain, (expected_counts, late) = best_of(runs, partial(clock_plain, pairs))
    assert late == 0
    t_bw = None
    if bytewax:
        from datetime import UTC, datetime, timedelta

        origin = datetime(2024, 1, 1, tzinfo=UTC)
        clocked_items = [(str(k), origin + timedelta(days=x, hours=12)) for x, k in pairs]
        t_bw, got_clocked = best_of(1, partial(clock_bytewax, clocked_items))
        assert got_clocked == expected_counts, "Bytewax's clocked count disagrees with the reference"
    for workers in (1, 2):
        t_ours, got_counts = best_of(runs, partial(clock_pytimely, ordered, workers))
        assert got_counts == expected_counts, f"event-clock count, {workers} worker(s): wrong counts"
        workload = f"event-clock tumbling count 100, delay {DELAY}, numpy, {workers} worker(s)"
        rows.append(_row(workload, n, t_ours, "plain Python dict loop", t_plain))
        if t_bw is not None:
            rows.append(_row(workload, n, t_ours, "Bytewax 0.21.1 count_window + EventClock, 1 worker", t_bw))
    return rows


def run(quick: bool) -> list[Row]:
    """Every measurement, as table rows."""
    n = 50_000 if quick else 2_000_000
    runs = 1 if quick else 3
    events = make_events(n)
    pairs = [(x, k) for x, k in events.tolist()]
    # --quick leaves Bytewax out (as run_more does): the smoke test stays cheap.
    items = None if quick else bytewax_inputs(events)
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
    return rows + run_more(n, runs, quick)


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


COLUMNS = [
    Column("workload", "workload"),
    Column("pytimely", "seconds", "{} s"),
    Column("events/s", "events_per_s", "{:,}"),
    Column("baseline", "baseline"),
    Column("baseline time", "baseline_seconds", "{} s"),
    Column("pytimely speedup", "speedup_vs_baseline", "{}x"),
]


def main() -> None:
    """Run and print."""
    args = parser(__doc__).parse_args()
    rows = run(args.quick)
    report(rows, Table(COLUMNS), as_json=args.json, note=f"best of {1 if args.quick else 3} runs")


if __name__ == "__main__":
    main()
