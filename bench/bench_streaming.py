"""Streaming on Spark: pytimely's micro-batches against Spark's own stateful streaming, in one run.

    python bench/bench_streaming.py [--parts wordcount,components,restart,scaling] [--sizes 10k,100k,1M] [--batches B]
                                    [--contenders driver,executors,native,pandas] [--processes N]
                                    [--dataflow example|arrow]
                                    [--edges N] [--edge-batches K] [--graphx-at 1,5,10] [--slots S] [--quick] [--json]
                                    [--restart-at 10,50,200] [--restart-contenders snapshots,replay,executors]
                                    [--master spark://HOST:PORT | --master standalone [--standalone-workers W]]

One Spark, started once (its start-up is reported, not counted): local (``S`` slots, default 2), or the master of
``--master``, or (``--master standalone``) a standalone cluster of ``W`` workers (default 2) of ``S`` cores each,
started by the bench on loopback from PySpark's own launcher and stopped at its end. ``--parts`` picks the parts
to run (default wordcount and components), each of which can run alone.

Word count (latency and throughput, ``--parts wordcount``): at each size of ``--sizes`` (rows per micro-batch,
default 10,000, 100,000 and 1,000,000; ``--quick``: 2,000), ``B`` text files (default 8) of that many lines of
one word each (drawn with seed 7 from 20,000 words by a Zipf law), read by Spark's text source one file per
micro-batch (``maxFilesPerTrigger=1``, ``availableNow``), so every query sees the same micro-batches and
writes the same per-batch CSV changelog (``epoch,word,count``) through ``foreachBatch``:
(a) pytimely, driver-hosted: ``examples/stream_wordcount.py``'s dataflow through ``run_stream`` (one worker
    on the driver), with its exactly-once snapshots and commits (its words split by Arrow into exactly
    ``str.split()``'s, counted on their column); ``--dataflow arrow``: the bench's own copy of that dataflow
    (Arrow's whitespace split taken as it is), which needs only this module on the executors;
(x) pytimely on the executors: the same through ``run_stream(..., host="executors", processes=N)`` when this
    tree's ``run_stream`` takes ``host=`` (else reported as not available);
(n) Spark's own stateful query, ``groupBy("word").count()`` in update mode;
(p) Spark's ``applyInPandasWithState`` keeping the same running count (update mode).
Per micro-batch latency is Spark's own ``durationMs.triggerExecution`` of each micro-batch, its p50 and p99
over the micro-batches after the first two (warm-up); rows/s is the rows over the sum of those times. Ratios
are taken within a size: (n)'s and (p)'s p50 over each row's, each row's rows/s over theirs. Every output is
checked to give every word its reference count.

Connected components (incremental against recomputation): ``--edges`` random edges (default 1,000,000 over
half as many vertices, seed 42) in ``K`` files (default 10), one per micro-batch.
(c) pytimely: ``examples/stream_wcc.py``'s dataflow through ``run_stream``: each micro-batch's time.
(d) GraphX ``ConnectedComponents`` recomputed on the whole graph so far (the files up to that micro-batch),
    at the micro-batches ``--graphx-at`` (1-based; default the 1st, the middle and the last), which is what
    a Spark query without incremental state pays at each micro-batch. Ratio: (d) over (c) at each.
(e) the candidate "one barrier stage per micro-batch, state restored by replay": ``run_dataflow`` over every
    edge so far with the epoch column, at the same micro-batches (its cost grows with the history).
The labels after the last micro-batch are checked against GraphX's.

Restart (``--parts restart``): components over ``--restart-at`` micro-batches of history (default 10,50,200;
``--restart-edges`` edges per micro-batch, default 2,000 over 20,000 vertices; its state grows with the edges), or
with ``--restart-query wordcount`` the running word count (as many words per micro-batch, drawn uniformly from the
20,000 words: once they are all seen the state stops growing, and only the history grows), files added to the folder in
steps; after each step one more file is added and the query is started again: the time of that run (Spark's
query start, the state's restore and the one new micro-batch), of the restore on the driver, of the micro-batch
(Spark's ``triggerExecution``) and the checkpoint's size are reported, for each of ``--restart-contenders``:
(f) driver-hosted, state from the newest snapshot (the default); (g) driver-hosted, ``ReplayRestore``: every
staged input fed again; (h) on the executors (``--processes N``): the hosted processes started again restore the
newest committed snapshot from the recovery store (their restore is inside the run and the micro-batch's time).

Scaling (``--parts scaling``; meant for ``--master``): the word count of (x) on the executors with 1 process and
with 2, over the same micro-batches at each of ``--sizes``, taking turns ``--scaling-runs`` times (default 2; the
best p50 of each kept); the ratio is 2 processes' rows/s over 1's.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from harness import Column, Table, parser, report

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import stream_wcc
import stream_wordcount

Row = dict[str, Any]


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    rank = max(1, int(np.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


WORDS = 20_000
"""The vocabulary: ``w0`` .. ``w19999``, drawn by a Zipf law."""


def write_lines(directory: Path, batches: int, rows: int, seed: int = 7) -> dict[str, int]:
    """``batches`` text files of ``rows`` lines of one Zipf-drawn word each, oldest first; the words' counts."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True)
    vocabulary = np.array([f"w{i}" for i in range(WORDS)])
    totals = np.zeros(WORDS, dtype=np.int64)
    base = time.time() - 100_000
    for k in range(batches):
        drawn = np.minimum(rng.zipf(1.3, rows) - 1, WORDS - 1)
        totals += np.bincount(drawn, minlength=WORDS)
        path = directory / f"t{k:04d}.txt"
        path.write_text("\n".join(vocabulary[drawn].tolist()) + "\n")
        os.utime(path, (base + 10 * k, base + 10 * k))
    return {f"w{i}": int(n) for i, n in enumerate(totals.tolist()) if n}


def final_counts(out: Path) -> dict[str, int]:
    """Every word's last running count in a folder of ``epoch,word,count`` CSV changelogs (any layout of files)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    tables = [pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(
        column_types={"word": pa.string(), "count": pa.int64()})) for path in sorted(out.rglob("*.csv"))]
    if not tables:
        return {}
    table = pa.concat_tables([t.select(["word", "count"]) for t in tables])
    # Running counts only grow: a word's largest is its last, whichever file (or process) wrote it.
    grouped = table.group_by("word").aggregate([("count", "max")])
    return dict(zip(grouped.column("word").to_pylist(), grouped.column("count_max").to_pylist(), strict=True))


def _words(spark: Any, directory: Path) -> Any:
    """The words of the text files, one file per micro-batch, split as the pytimely dataflow splits them."""
    from pyspark.sql import functions as F

    lines = spark.readStream.option("maxFilesPerTrigger", 1).text(str(directory))
    return lines.select(F.explode(F.split(F.col("value"), r"\s+")).alias("word")).filter(F.col("word") != "")


def _spark_query(counts: Any, out: Path, checkpoint: Path) -> dict[int, float]:
    """Run a Spark running count in update mode to the per-batch CSV sink through ``foreachBatch``."""
    from pyspark.sql import functions as F

    from pytimely.spark.streaming import CsvDirectorySink, trigger_times

    sink = CsvDirectorySink(out, order_by=["word"])

    def write(frame: Any, batch_id: int) -> None:
        sink.commit(batch_id, frame.select(F.lit(batch_id).cast("long").alias("epoch"), "word", "count").toArrow())

    query = (
        counts.writeStream.outputMode("update").foreachBatch(write)
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    return trigger_times(query)


def native_word_count(
    spark: Any, directory: Path, out: Path, checkpoint: Path, _: argparse.Namespace
) -> dict[int, float]:
    """Spark's own stateful count, the query a data engineer writes: ``groupBy("word").count()``, update mode."""
    return _spark_query(_words(spark, directory).groupBy("word").count(), out, checkpoint)


def pandas_word_count(
    spark: Any, directory: Path, out: Path, checkpoint: Path, _: argparse.Namespace
) -> dict[int, float]:
    """The same running count as ``applyInPandasWithState`` (update mode)."""
    import pandas as pd
    from pyspark.sql.streaming.state import GroupStateTimeout

    def running(key: Any, frames: Any, state: Any) -> Any:
        total = state.get[0] if state.exists else 0
        for frame in frames:
            total += len(frame)
        state.update((total,))
        yield pd.DataFrame({"word": [key[0]], "count": [total]})

    counts = _words(spark, directory).groupBy("word").applyInPandasWithState(
        running, "word string, count long", "total long", "update", GroupStateTimeout.NoTimeout
    )
    return _spark_query(counts, out, checkpoint)


def arrow_words(batch: Any) -> Any:
    """The words of an Arrow batch of text lines, as a one-column Arrow batch: split and flattened by Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    words = pc.list_flatten(pc.utf8_split_whitespace(batch.column("value")))
    return pa.RecordBatch.from_arrays([pc.filter(words, pc.not_equal(words, ""))], names=["word"])


def add_count(word: Any, count: int, total: int | None) -> tuple[int, list[tuple[Any, int]]]:
    """A word's running total (``examples/stream_wordcount.py``'s ``add``, here so the executors need only this
    module, which ``run_stream`` ships to them)."""
    total = count + (total or 0)
    return total, [(word, total)]


def arrow_running_counts(stream: Any) -> Any:
    """``examples/stream_wordcount.py``'s running counts, as that example's dataflow does them (the words split
    by Arrow and counted on their column: Python runs once per distinct word of a micro-batch, in the running
    totals), without its check that Arrow's whitespace is Python's."""
    return stream.map_batch(arrow_words, name="words").count_by("word", name="count").state_machine(
        add_count, name="running")  # fmt: skip


DATAFLOWS = {"example": stream_wordcount.running_counts, "arrow": arrow_running_counts}


def executors_available() -> bool:
    """Whether this tree's ``run_stream`` can host the dataflow on the executors (it takes ``host=``)."""
    import inspect

    from pytimely.spark.streaming import run_stream

    return "host" in inspect.signature(run_stream).parameters


def pytimely_word_count(
    spark: Any, directory: Path, out: Path, checkpoint: Path, args: argparse.Namespace, *, executors: bool = False
) -> dict[int, float]:
    """``examples/stream_wordcount.py``'s dataflow through ``run_stream``: on the driver, or on the executors."""
    from pytimely.spark.streaming import CsvDirectorySink, run_stream

    source = spark.readStream.option("maxFilesPerTrigger", 1).text(str(directory))
    where: dict[str, Any] = {"host": "executors", "processes": args.processes} if executors else {}
    done = run_stream(
        DATAFLOWS[args.dataflow], source, stream_wordcount.SCHEMA,
        sink=CsvDirectorySink(out, order_by=["word"]), checkpoint=checkpoint, query="bench_wordcount",
        available_now=True, **where,
    )
    return dict(done.trigger_ms)


CONTENDERS = {
    "driver": ("a", "pytimely run_stream, driver-hosted (1 worker)"),
    "executors": ("x", "pytimely run_stream, on the executors"),
    "native": ("n", "Spark groupBy(word).count(), update mode"),
    "pandas": ("p", "Spark applyInPandasWithState, update mode"),
}


def latency_row(contender: str, size: int, times: dict[int, float]) -> Row:
    """p50/p99 of the micro-batch times after the first two (warm-up), and rows per second over them."""
    ident, name = CONTENDERS[contender]
    kept = [times[b] for b in sorted(times)][2:] or list(times.values())
    return {
        "id": ident, "contender": name, "rows_per_batch": size, "batches": len(times),
        "p50_ms": round(percentile(kept, 50), 1), "p99_ms": round(percentile(kept, 99), 1),
        "rows_per_s": round(size * len(kept) / max(sum(kept) / 1000, 1e-9)),
    }


def word_count_rows(spark: Any, scratch: Path, args: argparse.Namespace) -> list[Row]:
    """Every contender's running word count over the same micro-batches, at each size; ratios within a size."""
    measures: dict[str, Callable[..., dict[int, float]]] = {
        "driver": partial(pytimely_word_count, executors=False), "native": native_word_count,
        "pandas": pandas_word_count, "executors": partial(pytimely_word_count, executors=True),
    }
    rows: list[Row] = []
    for size in args.sizes:
        directory = scratch / f"texts-{size}"
        expected = write_lines(directory, args.batches, size)
        spark.read.text(str(min(directory.iterdir()))).count()  # the JVM's first text read, outside every query
        at_size: dict[str, Row] = {}
        for contender in args.contenders:
            if contender == "executors" and not executors_available():
                at_size[contender] = {"id": "x", "contender": CONTENDERS["executors"][1], "rows_per_batch": size,
                                      "note": "not available on this tree (run_stream takes no host=)"}
                continue
            out, checkpoint = scratch / f"{contender}-{size}-out", scratch / f"{contender}-{size}-ck"
            times = measures[contender](spark, directory, out, checkpoint, args)
            if final_counts(out) != expected:
                raise SystemExit(f"bench_streaming: {contender}'s counts at {size:,} rows differ from the reference")
            at_size[contender] = latency_row(contender, size, times)
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(checkpoint, ignore_errors=True)
        shutil.rmtree(directory, ignore_errors=True)
        for baseline in ("native", "pandas"):
            base = at_size.get(baseline)
            for row in at_size.values():
                if base is not None and "p50_ms" in base and "p50_ms" in row:
                    row[f"p50_vs_{baseline}"] = round(base["p50_ms"] / row["p50_ms"], 2)
                    row[f"throughput_vs_{baseline}"] = round(row["rows_per_s"] / base["rows_per_s"], 2)
        rows += at_size.values()
    return rows


def write_edges(directory: Path, edges: int, files: int, seed: int = 42) -> list[Any]:
    """``edges`` random edges over ``edges // 2`` vertices in ``files`` CSV files, oldest first."""
    rng = np.random.default_rng(seed)
    vertices = max(2, edges // 2)
    all_edges = rng.integers(0, vertices, size=(edges, 2), dtype=np.int64)
    directory.mkdir(parents=True)
    parts = np.array_split(all_edges, files)
    base = time.time() - 100_000
    for k, part in enumerate(parts):
        path = directory / f"e{k:04d}.csv"
        with path.open("w") as handle:
            handle.write("src,dst\n")
            np.savetxt(handle, part, fmt="%d", delimiter=",")
        os.utime(path, (base + 10 * k, base + 10 * k))
    return parts


def components_rows(spark: Any, scratch: Path, args: argparse.Namespace) -> list[Row]:
    """Incremental components per micro-batch against GraphX recomputed, and against replay per batch."""
    from pytimely.spark import collect, run_dataflow
    from pytimely.spark.baselines import graphx_components
    from pytimely.spark.streaming import CsvDirectorySink, run_stream

    directory = scratch / "edges"
    parts = write_edges(directory, args.edges, args.edge_batches)
    # GraphX is timed in a JVM that has read these CSV files before; so is the query: one batch read of the
    # first file first, else the first micro-batch pays the JVM's first CSV read (4-7 s cold) alone.
    first = min(str(p) for p in directory.iterdir())
    spark.read.schema("src long, dst long").option("header", True).csv(first).count()
    source = stream_wcc.edge_stream(spark, str(directory), "csv", 1)
    done = run_stream(
        stream_wcc.components, source, stream_wcc.SCHEMA, sink=CsvDirectorySink(scratch / "wcc-out"),
        checkpoint=scratch / "wcc-ck", query="bench_wcc", check=stream_wcc.check_edges, available_now=True,
    )
    ours = {b: ms / 1000 for b, ms in done.trigger_ms.items()}
    files = sorted(str(p) for p in directory.iterdir())
    rows: list[Row] = []
    tiny = spark.createDataFrame([(0, 1), (1, 2)], "src long, dst long")
    stage_times = []
    for _ in range(3):
        started = time.perf_counter()
        collect(run_dataflow(stream_wcc.components, tiny, "vertex long, label long", processes=args.slots))
        stage_times.append(time.perf_counter() - started)
    empty_stage_s = min(stage_times)
    for at in args.graphx_at:
        batch = at - 1
        edges = spark.read.schema("src long, dst long").option("header", True).csv(files[:at])
        started = time.perf_counter()
        labels = graphx_components(spark, edges)
        graphx_s = time.perf_counter() - started
        if at == len(files):
            check_labels(scratch / "wcc-out", labels)
        labels.unpersist()
        with_epoch = _with_epochs(spark, files[:at])
        started = time.perf_counter()
        collect(run_dataflow(stream_wcc.components, with_epoch, stream_wcc.SCHEMA, processes=args.slots,
                             epoch="epoch"))
        replay_s = time.perf_counter() - started
        rows.append({
            "id": "c-d-e", "micro_batch": at, "edges_so_far": int(sum(len(p) for p in parts[:at])),
            "pytimely_s": round(ours[batch], 3), "pytimely_compute_s": round(done.timings[batch].compute_s, 3),
            "pytimely_collect_s": round(done.timings[batch].collect_s, 3),
            "pytimely_stage_s": round(done.timings[batch].stage_s, 3),
            "pytimely_sink_s": round(done.timings[batch].sink_s, 3), "rows_out": done.timings[batch].rows_out,
            "graphx_s": round(graphx_s, 2), "speedup_over_graphx": round(graphx_s / ours[batch], 1),
            "replay_stage_s": round(replay_s, 2), "speedup_over_replay": round(replay_s / ours[batch], 1),
            "two_row_stage_s": round(empty_stage_s, 3),
        })
    return rows


def _with_epochs(spark: Any, files: list[str]) -> Any:
    """The edges of ``files`` (named ``eNNNN.csv``) with each file's number as its ``epoch`` column, in one scan.

    One scan, not a union of one per file: a barrier stage cannot follow a union.
    """
    from pyspark.sql import functions as F

    number = F.regexp_extract(F.col("_metadata.file_name"), r"e(\d+)\.csv", 1).cast("long")
    frame = spark.read.schema("src long, dst long").option("header", True).csv(files)
    return frame.select("src", "dst", number.alias("epoch"))


def check_labels(out: Path, graphx: Any) -> None:
    """The last label of every vertex in the changelog equals GraphX's label for it."""
    latest: dict[int, int] = {}
    for path in sorted(out.glob("batch-*.csv")):
        table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
        latest.update(zip(table[:, 1].tolist(), table[:, 2].tolist(), strict=True))
    theirs = graphx.toArrow()
    expected = dict(zip(theirs.column("vertex").to_pylist(), theirs.column("label").to_pylist(), strict=True))
    if latest != expected:
        raise SystemExit("bench_streaming: pytimely's components differ from GraphX's")


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


RESTART_CONTENDERS = {
    "snapshots": ("f", "snapshots, driver-hosted"),
    "replay": ("g", "ReplayRestore, driver-hosted"),
    "executors": ("h", "snapshots, on the executors"),
}


def _restart_run(spark: Any, directory: Path, scratch: Path, contender: str, args: argparse.Namespace) -> Any:
    """One run of the restart query over what ``directory`` holds that the checkpoint has not committed."""
    from pytimely.spark.streaming import CsvDirectorySink, ReplayRestore, StreamCheckpoint, run_stream

    checkpoint = StreamCheckpoint(scratch / f"restart-ck-{contender}")
    where: dict[str, Any] = {}
    if contender == "replay":
        where["restore"] = ReplayRestore(checkpoint)
    elif contender == "executors":
        where.update(host="executors", processes=args.processes)
    if args.restart_query == "wordcount":
        build, schema = stream_wordcount.running_counts, stream_wordcount.SCHEMA
        source = spark.readStream.option("maxFilesPerTrigger", 1).text(str(directory))
    else:
        build, schema = stream_wcc.components, stream_wcc.SCHEMA
        source = stream_wcc.edge_stream(spark, str(directory), "csv", 1)
    return run_stream(
        build, source, schema, sink=CsvDirectorySink(scratch / f"out-{contender}"),
        checkpoint=checkpoint, query="bench_restart", available_now=True, **where,
    )


def restart_rows(spark: Any, scratch: Path, args: argparse.Namespace) -> list[Row]:
    """Restart time after growing histories: the time of a run that restores the state and processes one new
    micro-batch, for each contender of ``--restart-contenders``."""
    rng = np.random.default_rng(5)
    directory = scratch / "restart-input"
    directory.mkdir()
    base = time.time() - 100_000
    rows: list[Row] = []
    written = 0
    vocabulary = np.array([f"w{i}" for i in range(WORDS)])

    def write_until(end: int) -> None:
        nonlocal written
        for k in range(written, end):
            if args.restart_query == "wordcount":
                path = directory / f"t{k:05d}.txt"
                drawn = rng.integers(0, WORDS, size=args.restart_edges)  # uniform: the state fills up soon
                path.write_text("\n".join(vocabulary[drawn].tolist()) + "\n")
            else:
                path = directory / f"e{k:05d}.csv"
                edges = rng.integers(0, 20_000, size=(args.restart_edges, 2), dtype=np.int64)
                with path.open("w") as handle:
                    handle.write("src,dst\n")
                    np.savetxt(handle, edges, fmt="%d", delimiter=",")
            os.utime(path, (base + k, base + k))
        written = max(written, end)

    for at in args.restart_at:
        write_until(at)
        for contender in args.restart_contenders:  # the history's micro-batches not yet run
            _restart_run(spark, directory, scratch, contender, args)
        write_until(at + 1)  # the one micro-batch the restart processes
        for contender in args.restart_contenders:
            ident, name = RESTART_CONTENDERS[contender]
            if contender == "executors":
                name = f"{name} ({args.processes} process{'es' if args.processes > 1 else ''})"
            started = time.perf_counter()
            again = _restart_run(spark, directory, scratch, contender, args)
            restart_s = time.perf_counter() - started
            if again.processed != [at]:
                raise SystemExit(f"bench_streaming: the {contender} restart processed {again.processed}, not [{at}]")
            rows.append({
                "id": ident, "contender": name, "history": at, "restart_s": round(restart_s, 2),
                "restore_s": round(again.restore_s, 3) if contender != "executors" else None,
                "first_batch_ms": round(again.trigger_ms[at]),
                "checkpoint_kb": round(_folder_bytes(scratch / f"restart-ck-{contender}") / 1024),
            })
    return rows


def scaling_rows(spark: Any, scratch: Path, args: argparse.Namespace) -> list[Row]:
    """The word count on the executors with 1 process and with 2, over the same micro-batches, taking turns;
    ratio: 2 processes' rows/s over 1's, at each size."""
    rows: list[Row] = []
    for size in args.sizes:
        directory = scratch / f"scaling-{size}"
        expected = write_lines(directory, args.batches, size)
        spark.read.text(str(min(directory.iterdir()))).count()
        best: dict[int, Row] = {}
        for turn in range(args.scaling_runs):
            for processes in (1, 2):
                out, checkpoint = scratch / f"scale-{processes}-{turn}-out", scratch / f"scale-{processes}-{turn}-ck"
                given = argparse.Namespace(**{**vars(args), "processes": processes})
                times = pytimely_word_count(spark, directory, out, checkpoint, given, executors=True)
                if final_counts(out) != expected:
                    raise SystemExit(f"bench_streaming: {processes} process(es) at {size:,} rows miscounted")
                row = latency_row("executors", size, times)
                row.update(id=f"s{processes}", contender=f"on the executors, {processes} process(es)",
                           processes=processes)  # fmt: skip
                if processes not in best or row["p50_ms"] < best[processes]["p50_ms"]:
                    best[processes] = row
                shutil.rmtree(out, ignore_errors=True)
                shutil.rmtree(checkpoint, ignore_errors=True)
        best[2]["throughput_vs_one"] = round(best[2]["rows_per_s"] / best[1]["rows_per_s"], 2)
        best[2]["p50_vs_one"] = round(best[1]["p50_ms"] / best[2]["p50_ms"], 2)
        rows += [best[1], best[2]]
        shutil.rmtree(directory, ignore_errors=True)
    return rows


def session(args: argparse.Namespace) -> tuple[Any, Any]:
    """The bench's session (``local[S]``, ``--master URL``, or a standalone cluster this bench starts), and what
    stops that cluster (``None``: nothing to stop)."""
    from pytimely.spark import local_session
    from pytimely.spark.session import session_for, wait_for_slots

    cluster = None
    master = args.master
    if master == "standalone":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.spark.standalone import start_standalone

        cluster = start_standalone(Path(tempfile.mkdtemp(prefix="bench-standalone-")), cores=args.slots,
                                   workers=args.standalone_workers)  # fmt: skip
        master = cluster.url
    try:
        if master is None:
            return local_session(args.slots, app_name="bench-streaming"), None
        spark = session_for(master, app_name="bench-streaming")
        if cluster is not None:
            # Every executor registered before the first job: else the hosting job may find one executor alone.
            wait_for_slots(spark, cluster.workers * cluster.cores, 120.0, settle=15.0)
        return spark, cluster
    except BaseException:
        if cluster is not None:
            cluster.stop()
        raise


def run(args: argparse.Namespace, given: Any = None) -> tuple[Row, list[Row]]:
    """Start Spark (or run on the session ``given``, its start not measured), run the parts, return the facts and
    the rows."""
    from pytimely.spark.session import concurrent_slots, master_of

    started = time.perf_counter()
    spark, cluster = (given, None) if given is not None else session(args)
    facts: Row = {
        "python": platform.python_version(), "spark": spark.version, "slots": args.slots,
        "master": "standalone" if cluster is not None else master_of(spark), "cluster_slots": concurrent_slots(spark),
        "spark_start_s": round(time.perf_counter() - started, 1) if given is None else 0.0, "batches": args.batches,
        "sizes": args.sizes, "processes": args.processes, "executors_path": executors_available(),
        "dataflow": args.dataflow,
        "edges": args.edges, "edge_batches": args.edge_batches,
    }
    scratch = Path(tempfile.mkdtemp(prefix="bench-streaming-"))
    try:
        rows = word_count_rows(spark, scratch, args) if "wordcount" in args.parts else []
        if "components" in args.parts:
            rows += components_rows(spark, scratch, args)
        if "restart" in args.parts:
            rows += restart_rows(spark, scratch, args)
        if "scaling" in args.parts:
            rows += scaling_rows(spark, scratch, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if cluster is not None:
            spark.stop()
            cluster.stop()
    return facts, rows


def _ratios(baseline: str) -> Any:
    def cell(row: Row) -> str | None:
        if f"p50_vs_{baseline}" not in row:
            return row.get("note") if baseline == "native" else None
        return f"**{row[f'p50_vs_{baseline}']}x** / {row[f'throughput_vs_{baseline}']}x"

    return cell


def _phases(row: Row) -> str:
    return " / ".join(f"{row[f'pytimely_{p}_s']}" for p in ("collect", "stage", "compute", "sink")) + " s"


WORD_COLUMNS = [
    Column("", "id"),
    Column("rows per micro-batch", "rows_per_batch", "{:,}"),
    Column("query", "contender"),
    Column("p50 per micro-batch", "p50_ms", "{:,} ms"),
    Column("p99", "p99_ms", "{:,} ms"),
    Column("rows/s", "rows_per_s", "{:,}"),
    Column("against groupBy.count (p50 / rows/s)", _ratios("native")),
    Column("against applyInPandasWithState (p50 / rows/s)", _ratios("pandas")),
]
GRAPH_COLUMNS = [
    Column("micro-batch", "micro_batch"),
    Column("edges so far", "edges_so_far", "{:,}"),
    Column("pytimely (c)", "pytimely_s", "{} s"),
    Column("collect / stage / compute / sink", _phases),
    Column("rows out", "rows_out", "{:,}"),
    Column("GraphX recomputed (d)", "graphx_s", "{} s"),
    Column("(d)/(c)", "speedup_over_graphx", "**{}x**"),
    Column("barrier stage replaying the history (e)", "replay_stage_s", "{} s"),
    Column("(e)/(c)", "speedup_over_replay", "{}x"),
]
RESTART_COLUMNS = [
    Column("", "id"),
    Column("state", "contender"),
    Column("history", "history"),
    Column("restart + 1 micro-batch (query start included)", "restart_s", "{} s"),
    Column("restore on the driver", "restore_s", "{} s"),
    Column("that micro-batch", "first_batch_ms", "{:,} ms"),
    Column("checkpoint", "checkpoint_kb", "{:,} KiB"),
]
SCALING_COLUMNS = [
    Column("", "id"),
    Column("rows per micro-batch", "rows_per_batch", "{:,}"),
    Column("query", "contender"),
    Column("p50 per micro-batch", "p50_ms", "{:,} ms"),
    Column("p99", "p99_ms", "{:,} ms"),
    Column("rows/s", "rows_per_s", "{:,}"),
    Column("2 processes against 1 (rows/s)", "throughput_vs_one", "**{}x**"),
]


def _counts(text: str) -> list[int]:
    """``10000,100000`` (or ``10k,1M``) as integers."""
    scale = {"k": 1_000, "m": 1_000_000}
    return [int(x[:-1]) * scale[x[-1].lower()] if x[-1].lower() in scale else int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None, spark: Any = None) -> None:
    """Parse ``argv`` (``None``: the command line's), run on ``spark`` (``None``: a session of its own), print."""
    command = parser(__doc__)
    command.add_argument("--batches", type=int, default=8, help="micro-batches per size (the first two: warm-up)")
    command.add_argument("--sizes", type=_counts, default=[10_000, 100_000, 1_000_000],
                         help="rows (words) per micro-batch, comma-separated (default 10000,100000,1000000)")
    command.add_argument("--contenders", type=lambda text: text.split(","), default=list(CONTENDERS),
                         help="word count contenders: driver,executors,native,pandas (default all)")
    command.add_argument("--processes", type=int, default=1, help="pytimely processes of the executors path")
    command.add_argument("--dataflow", choices=sorted(DATAFLOWS), default="example",
                         help="pytimely's word count: the example's or arrow (the bench's own copy: Arrow's "
                              "whitespace split taken as it is)")  # fmt: skip
    command.add_argument("--edges", type=int, default=1_000_000)
    command.add_argument("--edge-batches", type=int, default=10)
    command.add_argument("--graphx-at", default="", help="1-based micro-batches to recompute GraphX at")
    command.add_argument("--slots", type=int, default=2)
    command.add_argument("--parts", type=lambda text: text.split(","), default=["wordcount", "components"],
                         help="which parts to run: wordcount,components,restart,scaling (default the first two)")
    command.add_argument("--restart-at", type=_counts, default=[10, 50, 200])
    command.add_argument("--restart-edges", type=int, default=2_000, help="rows (edges or words) per micro-batch")
    command.add_argument("--restart-query", choices=["components", "wordcount"], default="components",
                         help="the restart part's query: components (its state grows with the edges) or the word "
                         "count (its state bounded by the 20,000 words)")
    command.add_argument("--restart-contenders", type=lambda text: text.split(","), default=list(RESTART_CONTENDERS),
                         help="restart contenders: snapshots,replay,executors (default all)")
    command.add_argument("--master", help="a Spark master URL (spark://HOST:PORT), or 'standalone': a cluster of "
                         "--standalone-workers workers of --slots cores each, started (and stopped) by this bench")
    command.add_argument("--standalone-workers", type=int, default=2)
    command.add_argument("--scaling-runs", type=int, default=2, help="turns of 1 and 2 processes (the best kept)")
    args = command.parse_args(argv)
    if args.quick:
        args.batches, args.sizes, args.edges, args.edge_batches = 4, [2_000], 20_000, 3
        args.restart_at, args.restart_edges, args.scaling_runs = [2, 4], 200, 1
    if set(args.contenders) - set(CONTENDERS):
        command.error(f"--contenders names {', '.join(CONTENDERS)}")
    if args.batches < 3:
        command.error("--batches must be at least 3 (the first two are warm-up)")
    given = [int(x) for x in args.graphx_at.split(",") if x.strip()]
    middle = (args.edge_batches + 1) // 2
    args.graphx_at = given or sorted({1, middle, args.edge_batches})
    if any(not 1 <= at <= args.edge_batches for at in args.graphx_at):
        command.error(f"--graphx-at must name micro-batches 1..{args.edge_batches}")
    if set(args.parts) - {"wordcount", "components", "restart", "scaling"}:
        command.error("--parts names wordcount, components, restart and/or scaling")
    if set(args.restart_contenders) - set(RESTART_CONTENDERS):
        command.error(f"--restart-contenders names {', '.join(RESTART_CONTENDERS)}")
    facts, rows = run(args, spark)
    words = [row for row in rows if "rows_per_batch" in row and row["id"] not in ("s1", "s2")]
    graph = [row for row in rows if row["id"] == "c-d-e"]
    restarts = [row for row in rows if row["id"] in ("f", "g", "h")]
    scaling = [row for row in rows if row["id"] in ("s1", "s2")]
    tables = []
    if words:
        title = (f"Running word count, {args.batches} micro-batches per size (first two not counted), the same sink "
                 "(per-batch CSV through foreachBatch); Spark's triggerExecution per micro-batch:")
        tables.append(Table(WORD_COLUMNS, words, title))
    if graph:
        title = (f"Connected components, {args.edges:,} edges in {args.edge_batches} micro-batches (a 2-row barrier "
                 f"stage takes {graph[0]['two_row_stage_s']} s):")
        tables.append(Table(GRAPH_COLUMNS, graph, title))
    if restarts:
        what = "edges" if args.restart_query == "components" else "words"
        title = (f"Restart of {args.restart_query} after a history of micro-batches ({args.restart_edges:,} {what} "
                 "each):")
        tables.append(Table(RESTART_COLUMNS, restarts, title))
    if scaling:
        title = (f"Running word count on the executors, 1 process against 2 ({facts['master']}, "
                 f"{facts['cluster_slots']} task slots), {args.batches} micro-batches per size (first two not "
                 "counted):")
        tables.append(Table(SCALING_COLUMNS, scaling, title))
    note = f"Spark {facts['spark']} {facts['master']} (started in {facts['spark_start_s']} s, not counted)"
    report(rows, tables, as_json=args.json, facts=facts, note=note)


if __name__ == "__main__":
    main()
