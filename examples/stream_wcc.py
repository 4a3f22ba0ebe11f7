"""Connected components of a stream of edge files, one epoch per Spark micro-batch, exactly once.

    python examples/stream_wcc.py --spark 'local[3]' --edges-dir IN --output OUT --checkpoint CK [--available-now]

Edge files arriving in IN (CSV ``src,dst`` with a header, or Parquet with integer columns ``src`` and ``dst``;
``--format``, by default what IN holds, else CSV) are read by Spark's file source. Each micro-batch is an
epoch (its batch id) of one incremental connected-components dataflow whose state carries from batch to
batch, hosted by ``--processes`` pytimely processes on the executors (default 2; they need as many Spark task
slots, plus one for feeding them). OUT holds, per micro-batch, CSV files ``part-<id>-*.csv`` (one per
process) committed by a manifest ``_pytimely/commits/epoch-<id>.json`` (``--processes 0``: the dataflow on the
driver, one ``batch-<id>.csv`` per micro-batch), rows ``epoch,vertex,label``: a row for every vertex whose label
is new or changed at that epoch, given all edges up to it (the contract of ``wcc.py --epochs``); a micro-batch's
output appears whole or not at all.

With ``--available-now`` the job processes what IN holds and stops; otherwise it runs until ``--timeout``
seconds pass. Killed and run again with the same CK, it continues with no duplicate and no missing row.
A file that does not parse, files whose columns change, or a CK made by another query stop the job with
exit status 2, leaving OUT as it was after the last whole micro-batch. A CK whose state snapshots are lost
stops it with exit status 3 before anything runs; ``--recovery-mode fresh`` then starts the state over (the
committed output stays).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from pytimely.algorithms import connected_components
from pytimely.errors import (
    CheckpointMismatchError,
    InputFormatError,
    PytimelyError,
    StreamSchemaError,
    StreamStateLostError,
)

SCHEMA = "epoch long, vertex long, label long"


def edge_rows(batch: Any) -> Any:
    """An Arrow batch of ``src, dst`` columns as an ``(n, 2)`` int64 array."""
    return np.column_stack([batch.column("src").to_numpy(), batch.column("dst").to_numpy()]).astype(np.int64)


def components(stream: Any) -> Any:
    """Micro-batches of edges -> ``(vertex, label)`` changes per epoch (as ``wcc.py --epochs``)."""
    return connected_components(stream.map_batch(edge_rows, name="edges"))


def check_edges(table: Any, batch_id: int) -> Any:
    """Refuse a micro-batch with empty ``src``/``dst`` (a file whose columns differ), naming the files."""
    import pyarrow.compute as pc

    for column in ("src", "dst"):
        values = table.column(column)
        if values.null_count:
            files = sorted(set(pc.filter(table.column("file"), pc.is_null(values)).to_pylist()))
            raise StreamSchemaError(
                f"micro-batch {batch_id}: {values.null_count} row(s) have no {column!r}; the files "
                f"{', '.join(files[:5])} do not have integer columns src and dst"
            )
    return table.select(["src", "dst"])


def source_format(directory: Path, given: str | None) -> str:
    """The format of the edge files: as given, else Parquet when IN holds only Parquet files, else CSV."""
    if given:
        return given
    names = [p.name for p in directory.iterdir() if not p.name.startswith((".", "_"))]
    if names and all(n.endswith(".parquet") for n in names):
        return "parquet"
    return "csv"


def edge_stream(spark: Any, directory: str, fmt: str, files_per_batch: int | None) -> Any:
    """Spark's file source over ``directory``: ``src, dst`` and the file each row came from."""
    reader = spark.readStream.schema("src long, dst long")
    if files_per_batch is not None:
        reader = reader.option("maxFilesPerTrigger", files_per_batch)
    if fmt == "csv":
        frame = reader.option("header", True).option("mode", "FAILFAST").csv(directory)
    else:
        frame = reader.parquet(directory)
    # An expression string, not pyspark.sql.functions: it serves a classic and a Connect session alike.
    return frame.selectExpr("src", "dst", "_metadata.file_path AS file")


def quiet_streaming_log(spark: Any) -> None:
    """Silence Spark's logs of a failed micro-batch (JVM stack traces): the job prints the typed error instead."""
    from pytimely.spark import is_connect

    if is_connect(spark):
        return  # the server's logs are the server's
    jvm = spark.sparkContext._jvm
    try:
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in _LOUD:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
    except Exception:
        return  # another logging backend only means a louder log


_LOUD = (
    "org.apache.spark.sql.execution.streaming",
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
)


def run(args: argparse.Namespace) -> Any:
    """Start (or continue) the streaming query; return what it did."""
    from pytimely.spark import session_for
    from pytimely.spark.streaming import run_stream

    directory = Path(args.edges_dir)
    if not directory.is_dir():
        raise InputFormatError(f"--edges-dir {directory} is not a directory")
    session = session_for(args.spark, app_name="pytimely-stream-wcc")
    quiet_streaming_log(session)
    source = edge_stream(session, str(directory), source_format(directory, args.format), args.files_per_batch)
    return run_stream(
        components, source, SCHEMA, sink=output_for(session, args, ["vertex"]),
        checkpoint=args.checkpoint, query="stream_wcc", workers=args.workers,
        processes=processes(session, args) or None, check=check_edges,
        available_now=args.available_now, timeout=None if args.available_now else args.timeout,
        recovery_mode=args.recovery_mode,
    )


def processes(session: Any, args: argparse.Namespace) -> int:
    """How many processes host the dataflow on the executors (0: on the driver)."""
    return 2 if args.processes is None else int(args.processes)


def output_for(session: Any, args: argparse.Namespace, order_by: list[str]) -> Any:
    """OUT: per-micro-batch CSV parts and manifests (hosted), or one ``batch-<id>.csv`` per micro-batch (driver)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from pytimely.spark.epoch_output import EpochOutput
    from pytimely.spark.streaming import CsvDirectorySink

    if processes(session, args) == 0:
        return CsvDirectorySink(args.output, order_by=order_by)
    return EpochOutput(args.output, to_arrow_schema(StructType.fromDDL(SCHEMA)), format="csv", order_by=order_by)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the query, report on stderr."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spark", metavar="MASTER", required=True, help="Spark master, e.g. local[2]")
    parser.add_argument("--edges-dir", required=True, help="directory where edge files arrive")
    parser.add_argument("--output", required=True, help="directory of per-micro-batch CSV changelogs")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory (Spark's and pytimely's)")
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.add_argument("--format", choices=["csv", "parquet"], help="edge file format (default: detected)")
    parser.add_argument("--files-per-batch", type=int, help="at most this many new files per micro-batch")
    parser.add_argument("-w", "--workers", type=int, default=1, help="pytimely workers per process")
    parser.add_argument("--processes", type=int, help="pytimely processes on the executors (default 2; 0: the "
                        "dataflow on the driver)")
    parser.add_argument("--timeout", type=float, default=60.0, help="without --available-now: seconds to run")
    parser.add_argument("--recovery-mode", choices=["resume", "fresh"], default="resume",
                        help="resume: from the state's snapshots (refused, exit 3, when they are lost); fresh: "
                        "start the state over, the committed output staying")  # fmt: skip
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        done = run(args)
    except (InputFormatError, CheckpointMismatchError) as exc:
        print(f"stream_wcc: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except StreamStateLostError as exc:
        said = " ".join(str(exc).split())
        print(f"stream_wcc: {type(exc).__name__}: {said} (here: --recovery-mode fresh)", file=sys.stderr)
        return 3
    except PytimelyError as exc:
        print(f"stream_wcc: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(
        f"stream_wcc: {len(done.processed)} micro-batch(es) processed, {done.restored_batches} restored in "
        f"{done.restore_s:.2f} s, in {time.perf_counter() - started:.2f} s -> {args.output}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
