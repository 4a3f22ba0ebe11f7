"""Running word counts over a stream of text files, one epoch per Spark micro-batch, exactly once.

    python examples/stream_wordcount.py --spark 'local[3]' --text-dir IN --output OUT --checkpoint CK [--available-now]

Text files arriving in IN (UTF-8, words split on whitespace, case kept) are read by Spark's text source.
Each micro-batch is an epoch of a dataflow hosted by ``--processes`` pytimely processes on the executors
(default 2). OUT holds, per micro-batch, CSV files ``part-<id>-*.csv`` committed by a manifest
``_pytimely/commits/epoch-<id>.json`` (``--processes 0``: on the driver, one ``batch-<id>.csv`` each), rows
``epoch,word,count`` with a row for every word seen in that micro-batch and its count over all micro-batches
up to it. The last row of a word is its total. Killed and run again with the same CK, the job continues with
no duplicate and no missing row. A CK whose state snapshots are lost stops the job with exit status 3 before
anything runs; ``--recovery-mode fresh`` then starts the state over (the committed output stays).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from pytimely.errors import CheckpointMismatchError, InputFormatError, PytimelyError, StreamStateLostError

SCHEMA = "epoch long, word string, count long"


PYTHON_WHITESPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace())
"""The characters ``str.split()`` splits on (``str.isspace()``; U+3000 is the last of them)."""


def arrow_splits_as_python() -> bool:
    """Whether Arrow's ``utf8_split_whitespace`` splits on exactly :data:`PYTHON_WHITESPACE` (tried on them and on
    look-alikes that older Unicode versions counted as whitespace; some 30 strings, so it is not worth a cache,
    which would also keep the dataflow from being shipped by value to the executors)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    probes = [*PYTHON_WHITESPACE, "\u180e", "\u200b", "\ufeff", "\x00", "\x7f"]
    split = pc.utf8_split_whitespace(pa.array([f"a{c}b" for c in probes])).to_pylist()
    return all((len(parts) == 2) == c.isspace() for c, parts in zip(probes, split, strict=True))


def words(batch: Any) -> Any:
    """The words of an Arrow batch of text lines (column ``value``) as a one-column batch (``word``): the lines
    split by Arrow, never a line at a time in Python, into exactly the words ``str.split()`` gives."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lines = batch.column("value")
    # Arrow's split is used on ASCII lines only: on others it was seen, once in hundreds of runs, to keep a trailing
    # U+1680 after a four-byte character on a first call and not on the next, so those get Python's whitespace
    # spelled out as a pattern (the same words, in C++ still).
    if arrow_splits_as_python() and pc.all(pc.string_is_ascii(lines)).as_py() is not False:
        split = pc.utf8_split_whitespace(lines)
    else:
        split = pc.split_pattern_regex(lines, f"[{PYTHON_WHITESPACE}]+")
    # Arrow keeps the empty strings before leading and after trailing whitespace (and an empty line's); str.split()
    # has none.
    tokens = pc.list_flatten(split)
    return pa.RecordBatch.from_arrays([pc.filter(tokens, pc.not_equal(tokens, ""))], names=["word"])


def add(word: Any, count: int, total: int | None) -> tuple[int, list[tuple[Any, int]]]:
    """A word's running total: the new total, and it as this epoch's row."""
    total = count + (total or 0)
    return total, [(word, total)]


def running_counts(stream: Any) -> Any:
    """Micro-batches of lines -> ``(word, count so far)`` for every word seen at each epoch (the words counted on
    their Arrow column: Python runs once per distinct word of a micro-batch, in the running totals)."""
    return stream.map_batch(words, name="words").count_by("word", name="count").state_machine(add, name="running")


def run(args: argparse.Namespace) -> Any:
    """Start (or continue) the streaming query; return what it did."""
    from pytimely.spark import session_for
    from pytimely.spark.streaming import run_stream

    directory = Path(args.text_dir)
    if not directory.is_dir():
        raise InputFormatError(f"--text-dir {directory} is not a directory")
    session = session_for(args.spark, app_name="pytimely-stream-wordcount")
    reader = session.readStream
    if args.files_per_batch is not None:
        reader = reader.option("maxFilesPerTrigger", args.files_per_batch)
    return run_stream(
        running_counts,
        reader.text(str(directory)),
        SCHEMA,
        sink=output_for(session, args, ["word"]),
        checkpoint=args.checkpoint,
        query="stream_wordcount",
        workers=args.workers,
        processes=processes(session, args) or None,
        available_now=args.available_now,
        timeout=None if args.available_now else args.timeout,
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
    parser.add_argument("--text-dir", required=True, help="directory where text files arrive")
    parser.add_argument("--output", required=True, help="directory of per-micro-batch CSV changelogs")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory (Spark's and pytimely's)")
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.add_argument("--files-per-batch", type=int, help="at most this many new files per micro-batch")
    parser.add_argument("-w", "--workers", type=int, default=1, help="pytimely workers per process")
    parser.add_argument(
        "--processes", type=int, help="pytimely processes on the executors (default 2; 0: the dataflow on the driver)"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="without --available-now: seconds to run")
    parser.add_argument("--recovery-mode", choices=["resume", "fresh"], default="resume",
                        help="resume: from the state's snapshots (refused, exit 3, when they are lost); fresh: "
                        "start the state over, the committed output staying")  # fmt: skip
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        done = run(args)
    except (InputFormatError, CheckpointMismatchError) as exc:
        print(f"stream_wordcount: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except StreamStateLostError as exc:
        said = " ".join(str(exc).split())
        print(f"stream_wordcount: {type(exc).__name__}: {said} (here: --recovery-mode fresh)", file=sys.stderr)
        return 3
    except PytimelyError as exc:
        print(f"stream_wordcount: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(
        f"stream_wordcount: {len(done.processed)} micro-batch(es) in {time.perf_counter() - started:.2f} s "
        f"-> {args.output}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
