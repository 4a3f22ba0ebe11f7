"""Connected components of an undirected graph, all at once or epoch by epoch (seed 000, Fig. 2).

    python examples/wcc.py --edges EDGES --output OUT [-w W] [--epochs]
    pytimely launch -n 2 -w 2 -- python examples/wcc.py --edges EDGES --output OUT
    python examples/wcc.py --spark 'local[2]' --edges EDGES --output OUT [-n PROCESSES] [-w W]

Cluster flags (``-w -n -p --hosts --hostfile``, or their ``PYTIMELY_*``
variables) spread the workers over processes; every process reads its share of
EDGES, and process 0 writes OUT, under a temporary name renamed on success.

EDGES is CSV ``src,dst`` (integers). OUT is CSV ``vertex,label`` sorted by
vertex, where label is the smallest vertex id of the vertex's component. A
path ending in ``.parquet`` is Parquet instead, with the same columns.

With ``--spark MASTER`` Spark reads EDGES, hosts the workers (``-n``
processes, default one per task slot, of ``-w`` workers each, in one barrier
stage) and writes OUT; the file is the same as without Spark.

With ``--epochs`` EDGES has a third column ``epoch`` (integers >= 0, any order) and
the job runs incrementally: OUT is CSV ``epoch,vertex,label`` with a line for
every vertex whose label is new or changed at that epoch, given all edges with
epoch up to it. The output is the same whatever the number of workers.

With ``--epochs --recovery DIR`` (or under ``pytimely launch --recovery DIR``) the components' labels and
the change lines gathered so far are snapshotted into DIR after every epoch; a run started again after a
crash prints ``resumed at epoch N`` and goes on from the last snapshot, with any number of processes; OUT
is the same as without a crash. A store written for another EDGES file is refused. Snapshots are pickles:
see ``--recovery-key-file`` for a store that refuses what it did not seal (``docs/recovery.md``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from pytimely import InputHandle, Scope, Worker, execute
from pytimely.algorithms import connected_components
from pytimely.command import job_main
from pytimely.config import Config, RunConfig
from pytimely.errors import InputFormatError
from pytimely.io import check_output, read_edges, write_table
from pytimely.observe.eventlog import Sink
from pytimely.recovery import Recovery


def run(
    path: str,
    workers: int = 1,
    *,
    epochs: bool = False,
    seed: int | None = None,
    config: Config | None = None,
    log: Sink | None = None,
    recovery: Any = None,
) -> Any:
    """The job's rows: ``(vertex, label)`` or, with ``epochs``, ``(epoch, vertex, label)``, sorted.

    In a cluster, the process running worker 0 gets the rows; the others get ``None``. With ``recovery`` (and
    ``epochs``) the components' state and the gathered rows are snapshotted after each epoch, and a resumed
    run goes on from them (what it sends again of the snapshot's epochs is dropped).
    """

    def job(worker: Worker) -> list[tuple[Any, list[Any]]]:
        edges = read_edges(path, epochs=epochs, part=worker.index, parts=worker.peers)

        def build(scope: Scope[int]) -> tuple[InputHandle[int, Any], Any]:
            handle, stream = scope.new_input(name="edges")
            labels = connected_components(stream).gather(0)
            return handle, labels.capture()

        handle, captured = worker.dataflow(build)
        if epochs:
            for epoch in np.unique(edges[:, 2]).tolist():
                handle.advance_to(epoch)  # read_edges refused negative epochs: none is before the input's time
                handle.send_batch(edges[edges[:, 2] == epoch, :2])
        else:
            handle.send_batch(edges)
        handle.close()
        return captured

    parts = execute(job, workers, config=config, seed=seed, log=log, recovery=recovery)
    if config is not None and config.first_worker != 0:
        return None
    rows = [
        np.column_stack([np.full(len(batch), t), np.asarray(batch)]) for captured in parts for t, batch in captured
    ]
    table = np.concatenate(rows) if rows else np.empty((0, 3), dtype=np.int64)
    table = table[np.lexsort((table[:, 1], table[:, 0]))]
    return table if epochs else table[:, 1:]


def _edge_rows(batch: Any) -> Any:
    """An Arrow batch of ``src, dst`` columns as an ``(n, 2)`` int64 array (an edge needs both ends)."""
    for name in ("src", "dst"):
        gaps = batch.column(name).null_count
        if gaps:
            raise InputFormatError(f"edge column {name!r} has {gaps} empty value(s); every edge needs both ends")
    return np.column_stack([batch.column("src").to_numpy(), batch.column("dst").to_numpy()]).astype(np.int64)


def _components(stream: Any) -> Any:
    return connected_components(stream.map_batch(_edge_rows, name="edges"))


def run_on_spark(
    spark: Any,
    edges: Any,
    processes: int | None = None,
    workers: int = 1,
    *,
    epochs: bool = False,
    figures: Any = None,
) -> Any:
    """The job on Spark: a DataFrame ``vertex, label`` (``epoch, vertex, label`` with ``epochs``) from ``edges``.

    ``figures`` (:class:`pytimely.spark.figures.Figures`) gathers each process's records and phase times.
    """
    from pytimely.spark import run_dataflow

    schema = "epoch long, vertex long, label long" if epochs else "vertex long, label long"
    return run_dataflow(
        _components, edges, schema, processes=processes, workers=workers, epoch="epoch" if epochs else None,
        figures=figures, description="pytimely wcc: connected components" + (" by epoch" if epochs else ""),
    )


def main_spark(args: argparse.Namespace) -> str | None:
    """With ``--spark``: read EDGES with Spark, compute on Spark-hosted workers (``-n``, ``-w`` lay out the
    stage), write OUT with Spark; without, ``None``."""
    if not args.spark:
        return None
    processes, workers = args.processes, args.workers or 1
    from pytimely import spark as on_spark
    from pytimely.spark.figures import Figures

    started = time.perf_counter()
    session = on_spark.session_for(args.spark, app_name="pytimely-wcc")
    columns = "src long, dst long, epoch long" if args.epochs else "src long, dst long"
    edges = on_spark.read(session, args.edges, columns)
    # Spark Connect has no accumulators: no per-process figures there.
    figures = None if on_spark.is_connect(session) else Figures(session)
    result = run_on_spark(session, edges, processes, workers, epochs=args.epochs, figures=figures)
    order = ["epoch", "vertex"] if args.epochs else ["vertex"]
    on_spark.save(result, args.output, order_by=order, retries=args.retries)
    if figures is not None:
        print(figures.table(), file=sys.stderr)
    return f"on Spark {args.spark} in {time.perf_counter() - started:.2f} s -> {args.output}"


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, write OUT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", required=True, help="CSV of src,dst[,epoch] integer edges")
    parser.add_argument("--output", required=True, help="where to write the CSV result")
    parser.add_argument("--epochs", action="store_true", help="EDGES has an epoch column; report changes per epoch")
    parser.add_argument("--spark", metavar="MASTER", help="run on Spark, e.g. local[2] (Spark reads and writes)")
    parser.add_argument("--retries", type=int, default=0, help="with --spark: re-run a failed computation")

    def work(args: argparse.Namespace, run_config: RunConfig, log: Sink | None) -> str | None:
        if run_config.recovery is not None and not args.epochs:
            parser.error("--recovery needs --epochs")
        started = time.perf_counter()
        config = run_config.cluster
        if config.first_worker == 0:
            check_output(args.output)  # before the work, not after it
        recovery = (
            None
            if run_config.recovery is None
            else Recovery.from_settings(
                run_config.recovery, "wcc", inputs={"edges": Path(args.edges)}, announce=sys.stderr
            )
        )
        table = run(args.edges, epochs=args.epochs, config=config, log=log, recovery=recovery)
        if table is None:
            return None
        names = ["epoch", "vertex", "label"] if args.epochs else ["vertex", "label"]
        write_table(args.output, names, table)
        return f"{len(table)} rows in {time.perf_counter() - started:.2f} s -> {args.output}"

    return job_main(
        "wcc", parser, work, argv, recovery="the labels and changes found so far (with --epochs)",
        elsewhere=main_spark,
    )


if __name__ == "__main__":
    sys.exit(main())
