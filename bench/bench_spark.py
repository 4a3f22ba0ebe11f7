"""Connected components on Spark: pytimely hosted by Spark against Spark's own ways, in one run.

    python bench/bench_spark.py [--edges N] [--vertices N] [--slots S] [--repeat R] [--with-label-propagation]
                                [--driver-memory SIZE] [--skip-networkx] [--quick] [--json]

The graph: ``--edges`` random edges (default 1,000,000) over ``--vertices`` ids (default half as many),
drawn with seed 42, written once as Parquet and read by Spark into a cached DataFrame of ``S`` partitions.
Spark runs in local mode with ``S`` slots (default 2), started once; its start-up is reported, not counted.

(a) pytimely on Spark: the ``wcc`` job (``examples/wcc.py``) as one barrier stage of ``S`` processes x 1
    worker, from the cached DataFrame to the collected ``vertex, label`` table.
(b) GraphX ``ConnectedComponents`` (shipped with PySpark, called through the JVM gateway) on the same
    DataFrame to the same table — the Spark-native baseline of the target.
(c) DataFrame label propagation, one Spark job per round — run only with ``--with-label-propagation`` or
    on graphs of at most 200,000 edges, as it takes minutes on larger ones.
(d) NetworkX: building the graph from the edge array and ``connected_components``, in this process.

Each contender first runs once on a 1,000-edge graph (Python workers started, JVM code compiled), then
is timed ``--repeat`` times (default 2) on the full graph and reported by its best time — what a
long-running Spark application sees once its JVM has compiled the hot paths; the first full-size run of
every Spark contender is slower (see docs/spark.md). Label propagation runs once. Every result is checked
to give every vertex the same label. ``--quick`` (2,000 edges, 20,000 words, for the smoke test, which checks
results, not speed) runs every contender once, without the warm-up runs.
Ratios are the baseline's time over pytimely's (> 1: pytimely faster). Target: (a) >= 10x faster than (b).

The keyed count (``--part keyed-count``, or ``all``): ``--keyed-rows`` words (default 2,000,000, a vocabulary of
10,000, seed 42) in a cached DataFrame of ``S`` partitions, counted per word and written as Parquet:
(e) pytimely on Spark, ``count_by("word")`` over the Arrow batches Spark hands over (exchange by the key column,
    counts on dictionary codes, no Python object per row), ``S`` processes x 1 worker, saved by Spark's writer;
(f) Spark's own ``groupBy("word").count()`` on the same DataFrame, written the same way.
The two take turns ``--repeat`` times and the best of each is reported as rows per second per slot; each
result is checked against the other.

Prints a Markdown table; ``--json`` prints one JSON object per row instead.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from harness import Column, Row, Table, parser, report, runs_of, taking_turns

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import wcc


def labels_of(table: Any) -> Any:
    """``(vertex, label)`` rows of an Arrow table, sorted by vertex, as an ``(n, 2)`` int64 array."""
    rows = np.column_stack([table.column("vertex").to_numpy(), table.column("label").to_numpy()])
    return rows[np.argsort(rows[:, 0], kind="stable")]


def networkx_labels(edges: Any) -> Any:
    """Components by NetworkX, as sorted ``(vertex, smallest vertex of its component)`` rows."""
    import networkx as nx

    graph = nx.Graph()
    graph.add_edges_from(edges.tolist())
    rows = [(v, least) for component in nx.connected_components(graph) for least in [min(component)] for v in component]
    array = np.array(rows, dtype=np.int64).reshape(-1, 2)
    return array[np.argsort(array[:, 0], kind="stable")]


def timed(func: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds ``func`` took, and what it returned."""
    started = time.perf_counter()
    result = func()
    return time.perf_counter() - started, result


def session(slots: int, given: Any, conf: dict[str, Any] | None = None) -> tuple[float, Any]:
    """The session to measure on: ``given`` (its start not measured: 0 s), else a new ``local[slots]`` one with
    ``conf``; and the seconds its start took."""
    from pytimely.spark import local_session

    if given is not None:
        return 0.0, given
    return timed(lambda: local_session(slots, conf=conf))


def run(args: argparse.Namespace, given: Any = None) -> tuple[Row, list[Row]]:
    """Measure every contender on one graph, on the session ``given`` (``None``: one of its own); the session
    facts and one row per contender."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pytimely.spark import collect, read
    from pytimely.spark.baselines import graphx_components, label_propagation_components

    vertices = args.vertices or max(2, args.edges // 2)
    edges = np.random.default_rng(42).integers(0, vertices, size=(args.edges, 2), dtype=np.int64)
    with_lp = args.with_label_propagation or args.edges <= 200_000
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "edges.parquet")
        pq.write_table(pa.table({"src": edges[:, 0], "dst": edges[:, 1]}), path)
        conf = {"spark.driver.memory": args.driver_memory} if args.driver_memory else None
        start_seconds, spark = session(args.slots, given, conf)
        frame = read(spark, path, "src long, dst long").repartition(args.slots).cache()
        frame.count()
        small = None
        if not args.quick:  # the warm-up graph (figures of a --quick run are not for reading)
            small = spark.createDataFrame(edges[:1000].tolist(), "src long, dst long").repartition(args.slots)
            small = small.cache()
            small.count()

        def ours(data: Any) -> Any:
            return labels_of(collect(wcc.run_on_spark(spark, data, args.slots, 1)))

        def graphx(data: Any) -> Any:
            return labels_of(collect(graphx_components(spark, data)))

        def propagation(data: Any) -> Any:
            return labels_of(collect(label_propagation_components(spark, data)))

        contenders: list[tuple[str, str, Callable[[Any], Any]]] = [
            ("a", f"pytimely on Spark, {args.slots} processes x 1 worker", ours),
            ("b", "GraphX ConnectedComponents", graphx),
        ]
        if with_lp:
            contenders.append(("c", "DataFrame label propagation", propagation))
        results: dict[str, tuple[float, Any]] = {}
        first: dict[str, float] = {}
        for ident, _, func in contenders:
            if small is not None:
                func(small)
            runs = [
                timed(lambda func=func: func(frame))  # type: ignore[misc]
                for _ in range(1 if ident == "c" else args.runs)
            ]
            results[ident] = min(runs, key=lambda run: run[0])
            first[ident] = runs[0][0]
        if not args.skip_networkx:
            runs = [timed(lambda: networkx_labels(edges)) for _ in range(args.runs)]
            results["d"] = min(runs, key=lambda run: run[0])
            first["d"] = runs[0][0]
        spark_version = spark.version
        frame.unpersist()
        if small is not None:
            small.unpersist()
    names = {ident: name for ident, name, _ in contenders}
    names["d"] = "NetworkX build + connected_components (in process)"
    # Without NetworkX (graphs too large for it to build in memory soon), GraphX is the reference.
    reference = results["b" if args.skip_networkx else "d"][1]
    for ident, (_, labels) in results.items():
        if labels.shape != reference.shape or not np.array_equal(labels, reference):
            raise AssertionError(f"{names[ident]} disagrees with NetworkX on the components")
    _, sizes = np.unique(reference[:, 1], return_counts=True)
    ours_seconds = results["a"][0]
    rows: list[Row] = []
    for ident in sorted(results):
        seconds = results[ident][0]
        row: Row = {
            "id": ident,
            "workload": names[ident],
            "edges": args.edges,
            "seconds": round(seconds, 3),
            "first_run_seconds": round(first[ident], 3),
            "edges_per_s": round(args.edges / seconds),
        }
        if ident != "a":
            row["baseline"] = names[ident]
            row["speedup_of_pytimely"] = round(seconds / ours_seconds, 2)
        else:
            row["baseline"] = "itself (the rows below divide by its time)"
        if ident == "b":
            row["target"] = ">= 10x"
            row["met"] = seconds / ours_seconds >= 10
        rows.append(row)
    facts = {
        "python": platform.python_version(),
        "spark": spark_version,
        "slots": args.slots,
        "repeat": args.runs,
        "spark_start_s": round(start_seconds, 2),
        "vertices": len(reference),
        "components": len(sizes),
        "largest": int(sizes.max()),
        "label_propagation": "measured" if with_lp else "skipped (over 200,000 edges; --with-label-propagation)",
    }
    return facts, rows


def keyed_count(args: argparse.Namespace, given: Any = None) -> tuple[Row, list[Row]]:
    """pytimely's ``count_by`` of a word column against Spark's ``groupBy().count()``, both to Parquet, on the
    session ``given`` (``None``: one of its own, stopped at the end)."""
    import pyarrow.parquet as pq

    from pytimely.spark import run_dataflow, save

    rng = np.random.default_rng(42)
    words = np.char.add("w", rng.integers(0, 10_000, size=args.keyed_rows).astype(str))
    with tempfile.TemporaryDirectory() as tmp:
        import pyarrow as pa

        source = str(Path(tmp) / "words.parquet")
        pq.write_table(pa.table({"word": words}), source)
        start_seconds, spark = session(args.slots, given)
        frame = spark.read.parquet(source).repartition(args.slots).cache()
        frame.count()
        runs = iter(range(1_000_000))

        def ours() -> tuple[float, dict[str, int]]:
            out = str(Path(tmp) / f"ours-{next(runs)}.parquet")
            seconds, _ = timed(lambda: save(
                run_dataflow(_count_words, frame, "word string, count long", processes=args.slots), out,
                single_file=False,
            ))
            return seconds, _counts(pq.read_table(out))

        def theirs() -> tuple[float, dict[str, int]]:
            out = str(Path(tmp) / f"spark-{next(runs)}.parquet")
            seconds, _ = timed(lambda: frame.groupBy("word").count().write.parquet(out))
            return seconds, _counts(pq.read_table(out))

        if not args.quick:  # warm-up: Python workers started, JVM code compiled
            ours()
            theirs()
        best = taking_turns(args.runs, {"e": ours, "f": theirs}, key=lambda r: r[0])
        frame.unpersist()
        if given is None:
            spark.stop()
    if best["e"][1] != best["f"][1]:
        raise AssertionError("pytimely's counts differ from Spark's")
    facts: Row = {"rows": args.keyed_rows, "slots": args.slots, "spark_start_s": round(start_seconds, 1)}
    names = {"e": f"pytimely count_by('word') on Spark, {args.slots} processes", "f": "Spark groupBy('word').count()"}
    rows = []
    for ident in ("e", "f"):
        seconds = best[ident][0]
        row: Row = {
            "id": ident,
            "workload": names[ident],
            "seconds": round(seconds, 3),
            "rows_per_s_per_slot": int(args.keyed_rows / seconds / args.slots),
        }
        if ident == "f":
            row["baseline"] = names["f"]
            row["speedup_of_pytimely"] = round(seconds / best["e"][0], 2)
        rows.append(row)
    return facts, rows


def _count_words(stream: Any) -> Any:
    return stream.count_by("word")


def _counts(table: Any) -> dict[str, int]:
    return dict(zip(table.column("word").to_pylist(), table.column("count").to_pylist(), strict=True))


def _target(row: Row) -> str | None:
    return f"{row['target']}: {'met' if row['met'] else 'missed'}" if "target" in row else None


SPEEDUP = Column("pytimely's speed-up over it", "speedup_of_pytimely", "{:.2f}x")
COUNT_COLUMNS = [
    Column("", "id"),
    Column("contender", "workload"),
    Column("seconds (best)", "seconds", "{:.2f}"),
    Column("rows/s per slot", "rows_per_s_per_slot", "{:,}"),
    SPEEDUP,
]
COLUMNS = [
    Column("", "id"),
    Column("contender", "workload"),
    Column("seconds (best)", "seconds", "{:.2f}"),
    Column("first run", "first_run_seconds", "{:.2f}"),
    Column("edges/s", "edges_per_s", "{:,}"),
    SPEEDUP,
    Column("target", _target),
]


def main(argv: list[str] | None = None, spark: Any = None) -> None:
    """Parse ``argv`` (``None``: the command line's), run on ``spark`` (``None``: a session of its own), print."""
    command = parser(__doc__, runs=2)
    command.add_argument("--edges", type=int, default=1_000_000)
    command.add_argument("--vertices", type=int, default=0, help="vertex ids to draw from (default edges / 2)")
    command.add_argument("--slots", type=int, default=2, help="Spark slots = pytimely processes (default 2)")
    command.add_argument("--with-label-propagation", action="store_true")
    command.add_argument("--skip-networkx", action="store_true", help="no NetworkX row; GraphX is the reference")
    command.add_argument("--driver-memory", default="", help="Spark driver (= local executor) memory, e.g. 8g")
    command.add_argument("--part", choices=["components", "keyed-count", "all"], default="all")
    command.add_argument("--keyed-rows", type=int, default=2_000_000, help="words of the keyed count")
    args = command.parse_args(argv)
    if args.quick:
        args.edges = 2_000  # and --quick's one run each (runs_of), no warm-up
        args.keyed_rows = 20_000
    if args.runs < 1 and not args.quick:
        command.error("--runs must be at least 1")
    args.runs = runs_of(args)
    if args.part in ("keyed-count", "all"):
        count_facts, count_rows = keyed_count(args, spark)
        note = (
            f"keyed count of {args.keyed_rows:,} words to Parquet, local[{args.slots}], best of {args.runs} "
            "turns each"
        )
        report(count_rows, Table(COUNT_COLUMNS), as_json=args.json, facts=count_facts, note=note)
        if not args.json:
            print()
    if args.part == "keyed-count":
        return
    facts, rows = run(args, spark)
    note = (
        f"Spark {facts['spark']} local[{facts['slots']}] (started in {facts['spark_start_s']} s, not counted); "
        f"{args.edges:,} edges, {facts['vertices']:,} vertices, {facts['components']:,} components, the largest "
        f"{facts['largest']:,}; label propagation {facts['label_propagation']}; best of {facts['repeat']} timed runs"
    )
    report(rows, Table(COLUMNS), as_json=args.json, facts=facts, note=note)


if __name__ == "__main__":
    main()
