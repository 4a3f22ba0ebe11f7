"""The main job, `make demo`: connected components on Spark in local mode, next to Spark's own GraphX.

Generates a random graph of 1,000,000 edges over 500,000 vertex ids (seed 42)
and writes it as Parquet; starts the embedded local Spark; Spark reads the
edges (cached as one equal partition per process), pytimely computes the
components on Spark-hosted workers (the ``wcc`` job), and GraphX ``ConnectedComponents`` computes them on the same
DataFrame in the same session (each after a warm-up run on a small graph, then twice on the full graph: the
first run still pays for the JVM compiling its hot paths at full size). Prints the number of components, the
largest one and the times, and checks that the two agree on every label.

    python examples/demo.py [--edges N] [--vertices N] [--processes P] [--no-graphx]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import wcc


def labels_of(table: Any) -> dict[int, int]:
    """``vertex -> label`` from an Arrow table of those two columns."""
    return dict(zip(table.column("vertex").to_pylist(), table.column("label").to_pylist(), strict=True))


def summary(labels: dict[int, int]) -> tuple[int, int]:
    """(number of components, vertices in the largest)."""
    _, sizes = np.unique(np.fromiter(labels.values(), dtype=np.int64, count=len(labels)), return_counts=True)
    return len(sizes), int(sizes.max()) if len(sizes) else 0


def _positive(text: str) -> int:
    """A whole number >= 1 for a flag; anything else is a usage error (exit status 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Generate, run on Spark with pytimely and with GraphX, compare, report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=_positive, default=1_000_000, help="edges to generate (default 1,000,000)")
    parser.add_argument("--vertices", type=_positive, default=500_000, help="vertex ids to draw from (default 500,000)")
    parser.add_argument("--processes", type=_positive, default=2, help="pytimely processes = Spark slots (default 2)")
    parser.add_argument("--no-graphx", action="store_true", help="skip the GraphX baseline")
    args = parser.parse_args(argv)

    import pyarrow as pa
    import pyarrow.parquet as pq

    from pytimely.errors import PytimelyError
    from pytimely.spark import collect, local_session, read

    rng = np.random.default_rng(42)
    edges = rng.integers(0, args.vertices, size=(args.edges, 2), dtype=np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "edges.parquet")
        pq.write_table(pa.table({"src": edges[:, 0], "dst": edges[:, 1]}), path)
        print(f"graph: {args.edges:,} random edges over {args.vertices:,} vertex ids (seed 42)")

        started = time.perf_counter()
        try:
            spark = local_session(args.processes)
        except PytimelyError as exc:
            print(f"demo: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        print(f"Spark local[{args.processes}] started in {time.perf_counter() - started:.1f} s")
        # Cached as one equal partition per process: a file of one Parquet row group would otherwise be one
        # partition holding every edge, and one process (and one GraphX task) would do all the reading.
        frame = read(spark, path, "src long, dst long").repartition(args.processes).cache()
        frame.count()
        # Both contenders first run once on a small graph, so neither timing includes starting Spark's
        # Python workers or compiling the JVM's hot paths.
        warmup = frame.limit(1000).cache()
        warmup.count()
        collect(wcc.run_on_spark(spark, warmup, args.processes, 1))
        from pytimely.spark.baselines import graphx_components

        if not args.no_graphx:
            collect(graphx_components(spark, warmup))

        def timed(run: Any) -> tuple[float, float, dict[int, int]]:
            """Seconds of the first full-size run and of a second one, and the labels."""
            started = time.perf_counter()
            labels = labels_of(collect(run()))
            first = time.perf_counter() - started
            started = time.perf_counter()
            again = labels_of(collect(run()))
            second = time.perf_counter() - started
            if again != labels:
                raise AssertionError("two runs on the same graph gave different labels")
            return first, second, labels

        ours_first, ours_again, ours = timed(lambda: wcc.run_on_spark(spark, frame, args.processes, 1))
        components, largest = summary(ours)
        print(f"components: {components:,}; largest: {largest:,} vertices")
        print(
            f"pytimely on Spark ({args.processes} processes x 1 worker): {ours_first:.2f} s, "
            f"then {ours_again:.2f} s"
        )
        if args.no_graphx:
            return 0
        graphx_first, graphx_again, theirs = timed(lambda: graphx_components(spark, frame))
        print(f"GraphX ConnectedComponents on the same Spark: {graphx_first:.2f} s, then {graphx_again:.2f} s")
        print(
            f"speed-up over GraphX: {graphx_first / ours_first:.1f}x on the first run, "
            f"{graphx_again / ours_again:.1f}x on the second"
        )
        agrees = theirs == ours
        print(f"agrees with GraphX on every label: {'yes' if agrees else 'NO'}")
        return 0 if agrees else 1

if __name__ == "__main__":
    sys.exit(main())
