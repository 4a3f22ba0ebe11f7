"""Dataflow throughput and latency, each against a baseline measured in the same run.

    python bench/bench_dataflow.py [--quick] [--json]

(a) 2,000,000 integers through ``map(x+1)`` -> ``filter(even)`` -> ``count`` with
    per-record Python functions; baseline: a plain Python loop (and Bytewax when installed).
(b) word count of 1,000,000 words drawn with seed 42 from a 10,000-word vocabulary, on 1 and
    2 workers; baseline: ``collections.Counter`` (and Bytewax ``count_final`` when installed).
(c) connected components of a random graph with 100,000 vertices and 300,000 edges;
    baseline: NetworkX (graph construction plus ``connected_components``).
(d) epoch latency: from ``advance_to(t+1)`` until a probe passes ``t``, through
    input -> map -> exchange -> count, on 1 and 2 workers; p50 and p99.
(e) a running word count as a ``state_machine`` keyed through bins, over 10 epochs with a control stream
    that moves every bin to another worker at epoch 5, on 1 and 2 workers (same 1,000,000 words as (b));
    baseline: a plain Python loop over a dict emitting the same ``(word, count so far)`` records.
(f) the cost of the event log: workload (a) with the log off (the default) against the same workload
    with the log on and every event dropped; and the share of (a)'s time that the off-path's checks
    (one ``is not None`` per step or batch, as many as there are events when on) can take, from
    their count and the measured cost of one check.

Prints a Markdown table; ``--json`` prints one JSON object per row instead.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from harness import Column, Table, best_of, parser, report
from pytimely import Worker, execute
from pytimely.algorithms import connected_components

Row = dict[str, Any]


# -- (a) map / filter / count --------------------------------------------------------------


def pipeline_pytimely(n: int, workers: int = 1, log: Callable[[dict[str, Any]], None] | None = None) -> int:
    """Count of even ``x + 1`` for ``x < n``, through pytimely (with the event log going to ``log``)."""

    def job(worker: Worker) -> list[tuple[Any, list[Any]]]:
        def build(scope: Any) -> Any:
            mine = range(worker.index, n, worker.peers)
            return scope.to_stream(mine).map(lambda x: x + 1).filter(lambda x: x % 2 == 0).count().capture()

        return worker.dataflow(build)

    return sum(c for captured in execute(job, workers, log=log) for _, batch in captured for c in batch)


def pipeline_plain(n: int) -> int:
    """The same count with a plain Python loop."""
    count = 0
    for x in range(n):
        y = x + 1
        if y % 2 == 0:
            count += 1
    return count


def _bytewax() -> Any:
    try:
        import bytewax.operators as op
        from bytewax.dataflow import Dataflow
        from bytewax.testing import TestingSink, TestingSource, run_main
    except ImportError:
        return None
    return op, Dataflow, TestingSink, TestingSource, run_main


def pipeline_bytewax(n: int) -> int | None:
    """The same count with Bytewax (1 worker, source batches of 1000)."""
    bw = _bytewax()
    if bw is None:
        return None
    op, Dataflow, TestingSink, TestingSource, run_main = bw
    out: list[Any] = []
    flow = Dataflow("pipeline")
    stream = op.input("inp", flow, TestingSource(range(n), batch_size=1000))
    stream = op.filter("even", op.map("inc", stream, lambda x: x + 1), lambda x: x % 2 == 0)
    counted = op.count_final("count", op.key_on("key", stream, lambda _: "all"), lambda _: "all")
    op.output("out", counted, TestingSink(out))
    run_main(flow)
    return int(out[0][1])


# -- (b) word count --------------------------------------------------------------------------


def make_words(n: int) -> list[str]:
    """``n`` words drawn with seed 42 from a 10,000-word vocabulary."""
    rng = random.Random(42)
    vocabulary = [f"word{i}" for i in range(10_000)]
    return rng.choices(vocabulary, k=n)


def wordcount_pytimely(words: list[str], workers: int) -> dict[str, int]:
    """Word counts through pytimely: each worker sends its share, ``count_by`` exchanges and counts."""

    def job(worker: Worker) -> list[tuple[Any, list[Any]]]:
        handle, captured = worker.dataflow(lambda scope: _wordcount_build(scope))
        mine = words[worker.index :: worker.peers]
        for start in range(0, len(mine), 1 << 16):
            handle.send_batch(mine[start : start + (1 << 16)])
        return captured

    return {w: c for captured in execute(job, workers) for _, batch in captured for w, c in batch}


def _wordcount_build(scope: Any) -> Any:
    handle, stream = scope.new_input()
    return handle, stream.count_by().capture()


def wordcount_bytewax(words: list[str]) -> dict[str, int] | None:
    """Word counts with Bytewax ``count_final`` (1 worker, source batches of 1000)."""
    bw = _bytewax()
    if bw is None:
        return None
    op, Dataflow, TestingSink, TestingSource, run_main = bw
    out: list[Any] = []
    flow = Dataflow("wordcount")
    stream = op.input("inp", flow, TestingSource(words, batch_size=1000))
    op.output("out", op.count_final("count", stream, lambda w: w), TestingSink(out))
    run_main(flow)
    return dict(out)


# -- (c) connected components --------------------------------------------------------------


def make_graph(vertices: int, edges: int) -> Any:
    """A random graph (seed 7) as an ``(edges, 2)`` int64 array."""
    rng = np.random.default_rng(7)
    return rng.integers(0, vertices, size=(edges, 2), dtype=np.int64)


def wcc_pytimely(edges: Any, workers: int) -> dict[int, int]:
    """Component labels through pytimely's label propagation."""

    def job(worker: Worker) -> list[tuple[Any, list[Any]]]:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            return handle, connected_components(stream).capture()

        handle, captured = worker.dataflow(build)
        handle.send_batch(edges[worker.index :: worker.peers])
        return captured

    labels: dict[int, int] = {}
    for captured in execute(job, workers):
        for _, batch in captured:
            labels.update(zip(batch[:, 0].tolist(), batch[:, 1].tolist(), strict=True))
    return labels


def wcc_networkx(edges: Any) -> dict[int, int] | None:
    """Component labels with NetworkX."""
    try:
        import networkx as nx
    except ImportError:
        return None
    graph = nx.Graph()
    graph.add_edges_from(edges.tolist())
    labels: dict[int, int] = {}
    for component in nx.connected_components(graph):
        least = min(component)
        labels.update(dict.fromkeys(component, least))
    return labels


# -- (d) epoch latency ---------------------------------------------------------------------


def epoch_latency(epochs: int, per_epoch: int, workers: int) -> list[float]:
    """Seconds from ``advance_to(t+1)`` until the probe passes ``t``, measured on worker 0."""

    def job(worker: Worker) -> list[float]:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            probe = stream.map(lambda x: x * 3).exchange(lambda x: x).count().probe()
            return handle, probe

        handle, probe = worker.dataflow(build)
        samples = []
        data = list(range(per_epoch))
        for t in range(epochs):
            handle.send_batch(data)
            started = time.perf_counter()
            handle.advance_to(t + 1)
            while probe.less_than(t + 1):
                worker.step()
            samples.append(time.perf_counter() - started)
        return samples

    return execute(job, workers)[0]


# -- (e) state machine with moving bins -----------------------------------------------------


def _add(key: Any, value: int, state: int | None) -> tuple[int, tuple[tuple[Any, int]]]:
    total = (state or 0) + value
    return total, ((key, total),)


def state_machine_pytimely(pairs: list[tuple[str, int]], workers: int, epochs: int = 10) -> dict[str, int]:
    """Running counts of ``(word, 1)`` pairs through a binned state machine; every bin moves at epoch 5."""
    from pytimely.dataflow.bins import Move

    def job(worker: Worker) -> list[tuple[Any, list[Any]]]:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            control_handle, control = scope.new_input()
            return handle, control_handle, stream.state_machine(_add, control=control).capture()

        handle, control_handle, captured = worker.dataflow(build)
        mine = pairs[worker.index :: worker.peers]
        step = -(-len(mine) // epochs)
        for epoch in range(epochs):
            handle.send_batch(mine[epoch * step : (epoch + 1) * step])
            if epoch == epochs // 2 and worker.index == 0:
                control_handle.send_batch([Move(epoch, b, (b + 1) % worker.peers) for b in range(256)])
            handle.advance_to(epoch + 1)
            control_handle.advance_to(epoch + 1)
            worker.step()
        return captured

    last: dict[str, int] = {}
    for captured in execute(job, workers):
        for _, batch in captured:
            for word, count in batch:
                if count > last.get(word, 0):
                    last[word] = count
    return last


def state_machine_plain(pairs: list[tuple[str, int]]) -> dict[str, int]:
    """The same running counts with a dict; the emitted records are kept as the operator keeps them."""
    counts: dict[str, int] = {}
    emitted = []
    get = counts.get
    for word, n in pairs:
        total = get(word, 0) + n
        counts[word] = total
        emitted.append((word, total))
    return counts


# -- report --------------------------------------------------------------------------------


def run(quick: bool) -> list[Row]:
    """Every measurement, as table rows."""
    rows: list[Row] = []
    runs = 1 if quick else 3
    n = 200_000 if quick else 2_000_000
    t_plain, expected = best_of(runs, lambda: pipeline_plain(n))
    t_ours, got = best_of(runs, lambda: pipeline_pytimely(n))
    assert got == expected, (got, expected)
    rows.append(_row("a", "map/filter/count, 1 worker", n, t_ours, "plain Python loop", t_plain, "rec"))
    t_bw, got_bw = best_of(1, lambda: pipeline_bytewax(n))
    if got_bw is not None:
        assert got_bw == expected
        rows.append(_row("a", "map/filter/count, 1 worker", n, t_ours, "Bytewax 0.21.1, 1 worker", t_bw, "rec"))

    words = make_words(100_000 if quick else 1_000_000)
    t_counter, expected_counts = best_of(runs, lambda: Counter(words))
    for workers in (1, 2):
        t_wc, counts = best_of(runs, lambda w=workers: wordcount_pytimely(words, w))
        assert counts == expected_counts
        rows.append(_row("b", f"word count, {workers} worker(s)", len(words), t_wc, "Counter", t_counter, "words"))
    t_bwc, counts_bw = best_of(1, lambda: wordcount_bytewax(words))
    if counts_bw is not None:
        assert counts_bw == expected_counts
        t_wc1 = min(r["seconds"] for r in rows if r["workload"] == "word count, 1 worker(s)")
        rows.append(_row("b", "word count, 1 worker(s)", len(words), t_wc1, "Bytewax 0.21.1, 1 worker", t_bwc, "words"))

    vertices, edge_count = (10_000, 30_000) if quick else (100_000, 300_000)
    rows += wcc_rows(vertices, edge_count, runs)

    epochs = 200 if quick else 1000
    for workers in (1, 2):
        samples = epoch_latency(epochs, 100, workers)[10:]
        cuts = statistics.quantiles(samples, n=100)
        rows.append(
            {
                "id": "d",
                "workload": f"epoch latency, {workers} worker(s), 100 records/epoch",
                "p50_ms": round(cuts[49] * 1e3, 3),
                "p99_ms": round(cuts[98] * 1e3, 3),
                "epochs": len(samples),
            }
        )
    pairs = [(w, 1) for w in words]
    t_dict, expected_counts = best_of(runs, lambda: state_machine_plain(pairs))
    for workers in (1, 2):
        t_sm, last = best_of(runs, lambda w=workers: state_machine_pytimely(pairs, w))
        assert last == expected_counts
        rows.append(
            _row("e", f"state machine, bins moving, {workers} worker(s)", len(pairs), t_sm, "dict loop", t_dict, "rec")
        )
    rows.append(_log_overhead(n, runs, expected, t_ours))
    return rows


def _log_overhead(n: int, runs: int, expected: int, t_off_first: float) -> Row:
    """Row (f): workload (a) with the event log off against it on (events dropped), and the off-path's share."""
    events = [0]

    def drop(_event: dict[str, Any]) -> None:
        events[0] += 1

    t_on, got_on = best_of(runs, lambda: pipeline_pytimely(n, log=drop))
    t_off, got_off = best_of(runs, lambda: pipeline_pytimely(n))
    assert got_on == got_off == expected
    t_off = min(t_off, t_off_first)
    checks = events[0] // runs
    hook: Any = None
    loops = 1_000_000
    started = time.perf_counter()
    for _ in range(loops):
        if hook is not None:
            pass
    per_check = (time.perf_counter() - started) / loops
    row = _row("f", "map/filter/count, event log off", n, t_off, "event log on, events dropped", t_on, "rec")
    row["log_checks"] = checks
    row["log_off_share_pct"] = round(100 * checks * per_check / t_off, 4)
    return row


def _row(ident: str, workload: str, n: int, ours: float, baseline: str, theirs: float, unit: str) -> Row:
    return {
        "id": ident,
        "workload": workload,
        "n": n,
        "seconds": round(ours, 4),
        f"{unit}_per_s": round(n / ours),
        "baseline": baseline,
        "baseline_seconds": round(theirs, 4),
        "speedup_vs_baseline": round(theirs / ours, 2),
    }


def wcc_rows(vertices: int, edge_count: int, runs: int) -> list[dict[str, Any]]:
    """Connected components of a random graph on 1 and 2 workers against NetworkX (best of ``runs``)."""
    rows = []
    edges = make_graph(vertices, edge_count)
    wcc_networkx(edges[:10])  # import outside the timing
    t_nx, expected_labels = best_of(runs, lambda: wcc_networkx(edges))
    for workers in (1, 2):
        t_cc, labels = best_of(runs, lambda w=workers: wcc_pytimely(edges, w))
        if expected_labels is not None:
            assert labels == expected_labels
            rows.append(_row("c", f"WCC, {workers} worker(s)", edge_count, t_cc, "NetworkX", t_nx, "edges"))
    return rows


def _pytimely(row: Row) -> str:
    if "p50_ms" in row:
        return f"p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms"
    return f"{row['seconds']:.3f} s"


def _rate(row: Row) -> str | None:
    unit = next((k for k in row if k.endswith("_per_s")), None)
    return None if unit is None else f"{row[unit] / 1e6:.2f} M {unit.removesuffix('_per_s')}/s"


COLUMNS = [
    Column("", "id"),
    Column("workload", "workload"),
    Column("pytimely", _pytimely),
    Column("rate", _rate),
    Column("baseline", "baseline"),
    Column("baseline time", "baseline_seconds", "{:.3f} s"),
    Column("pytimely speedup", "speedup_vs_baseline", "{:.2f}x"),
]


def main() -> None:
    """Run and print."""
    command = parser(__doc__)
    command.add_argument(
        "--wcc-edges", default="", metavar="N,M",
        help="only connected components at these edge counts (vertices a third of the edges), one run each",
    )  # fmt: skip
    args = command.parse_args()
    sizes = [int(x) for x in args.wcc_edges.split(",") if x.strip()]
    rows = [r for n in sizes for r in wcc_rows(n // 3, n, 1)] if sizes else run(args.quick)
    runs = 1 if args.quick or sizes else 3
    report(rows, Table(COLUMNS), as_json=args.json, note=f"best of {runs} run(s)")


if __name__ == "__main__":
    main()
