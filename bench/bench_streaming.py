"""Streaming on Spark: pytimely's micro-batches against Spark's own stateful streaming, in one run.

    python bench/bench_streaming.py [--batches B] [--words-per-batch N] [--edges N] [--edge-batches K]
                                    [--graphx-at 1,5,10] [--slots S] [--quick] [--json]

One local Spark (``S`` slots, default 2), started once (its start-up is reported, not counted).

Word count (latency and throughput): ``B`` text files (default 40) of ``N`` words each (default 50,000,
drawn with seed 7 from 20,000 words by a Zipf law), read by Spark's text source one file per micro-batch
(``maxFilesPerTrigger=1``, ``availableNow``), so both queries see the same micro-batches.
(a) pytimely: ``examples/stream_wordcount.py``'s dataflow through ``run_stream`` (one worker on the driver),
    output to the per-batch CSV sink, with its exactly-once staging and commits.
(b) Spark: the same running count as ``applyInPandasWithState`` over the words (``update`` mode), output
    through ``foreachBatch`` to the same sink.
Per micro-batch latency is Spark's own ``durationMs.triggerExecution`` of each micro-batch for both, its p50
and p99 over the micro-batches after the first two (warm-up); throughput is the words over the sum of those
times. Both outputs are checked to give every word the same final count.

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
``--restart-edges`` edges per micro-batch, default 2,000 over 20,000 vertices), files added to the folder in
steps; after each step the query is started again with nothing new to read, and the time of that run (Spark's
query start included) and of the state's restore are reported, with the checkpoint's size:
(f) state from the newest snapshot (the default); (g) ``ReplayRestore``: every staged input fed again.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import shutil
import sys
import tempfile
import time
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


def write_texts(directory: Path, batches: int, words: int, seed: int = 7) -> list[list[str]]:
    """``batches`` text files of ``words`` Zipf-drawn words, oldest first by modification time."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True)
    vocabulary = np.array([f"w{i}" for i in range(20_000)])
    texts = []
    base = time.time() - 100_000
    for k in range(batches):
        drawn = vocabulary[np.minimum(rng.zipf(1.3, words) - 1, len(vocabulary) - 1)].tolist()
        texts.append(drawn)
        path = directory / f"t{k:04d}.txt"
        path.write_text("\n".join(" ".join(drawn[i : i + 10]) for i in range(0, len(drawn), 10)) + "\n")
        os.utime(path, (base + 10 * k, base + 10 * k))
    return texts


def spark_word_count(spark: Any, directory: Path, out: Path, checkpoint: Path) -> tuple[dict[int, float], Any]:
    """Spark's stateful running word count over the same micro-batches; its trigger times and final counts."""
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    from pytimely.spark.streaming import CsvDirectorySink, trigger_times

    def running(key: Any, frames: Any, state: Any) -> Any:
        total = state.get[0] if state.exists else 0
        for frame in frames:
            total += len(frame)
        state.update((total,))
        yield pd.DataFrame({"word": [key[0]], "count": [total]})

    words = (
        spark.readStream.option("maxFilesPerTrigger", 1)
        .text(str(directory))
        .select(F.explode(F.split(F.col("value"), r"\s+")).alias("word"))
        .filter(F.col("word") != "")
    )
    counts = words.groupBy("word").applyInPandasWithState(
        running, "word string, count long", "total long", "update", GroupStateTimeout.NoTimeout
    )
    sink = CsvDirectorySink(out, order_by=["word"])
    final: dict[str, int] = {}

    def write(frame: Any, batch_id: int) -> None:
        table = frame.select(F.lit(batch_id).cast("long").alias("epoch"), "word", "count").toArrow()
        sink.commit(batch_id, table)
        final.update(zip(table.column("word").to_pylist(), table.column("count").to_pylist(), strict=True))

    query = (
        counts.writeStream.outputMode("update").foreachBatch(write)
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    return trigger_times(query), final


def pytimely_word_count(spark: Any, directory: Path, out: Path, checkpoint: Path) -> tuple[Any, dict[str, int]]:
    """pytimely's running word count over the micro-batches; its run record and final counts."""
    from pytimely.spark.streaming import CsvDirectorySink, run_stream

    source = spark.readStream.option("maxFilesPerTrigger", 1).text(str(directory))
    done = run_stream(
        stream_wordcount.running_counts, source, stream_wordcount.SCHEMA,
        sink=CsvDirectorySink(out, order_by=["word"]), checkpoint=checkpoint, query="bench_wordcount",
        available_now=True,
    )
    final: dict[str, int] = {}
    for path in sorted(out.glob("batch-*.csv")):
        with path.open(newline="", encoding="utf-8") as handle:
            for _, word, count in list(csv.reader(handle))[1:]:
                final[word] = int(count)
    return done, final


def latency_rows(name: str, ident: str, times: dict[int, float], words: int) -> Row:
    """p50/p99 of the micro-batch times after the first two, and words per second over them."""
    kept = [times[b] for b in sorted(times)][2:] or list(times.values())
    return {
        "id": ident, "contender": name, "batches": len(times), "p50_ms": round(percentile(kept, 50), 1),
        "p99_ms": round(percentile(kept, 99), 1), "words_per_s": round(words * len(kept) / (sum(kept) / 1000)),
    }


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


def word_count_rows(spark: Any, scratch: Path, args: argparse.Namespace) -> list[Row]:
    """Both running word counts over the same micro-batches: latency and throughput rows."""
    texts = write_texts(scratch / "texts", args.batches, args.words_per_batch)
    spark_times, spark_final = spark_word_count(spark, scratch / "texts", scratch / "s-out", scratch / "s-ck")
    done, our_final = pytimely_word_count(spark, scratch / "texts", scratch / "p-out", scratch / "p-ck")
    expected: dict[str, int] = {}
    for text in texts:
        for word in text:
            expected[word] = expected.get(word, 0) + 1
    if our_final != expected or spark_final != expected:
        raise SystemExit("bench_streaming: a word count differs from the reference")
    ours = latency_rows("pytimely run_stream (1 worker on the driver)", "a", done.trigger_ms, args.words_per_batch)
    theirs = latency_rows("Spark applyInPandasWithState", "b", spark_times, args.words_per_batch)
    ours["p50_speedup"] = round(theirs["p50_ms"] / ours["p50_ms"], 1)
    ours["p99_speedup"] = round(theirs["p99_ms"] / ours["p99_ms"], 1)
    ours["throughput_ratio"] = round(ours["words_per_s"] / theirs["words_per_s"], 1)
    ours["compute_p50_ms"] = round(percentile([t.compute_s * 1000 for t in done.timings[2:]], 50), 1)
    return [ours, theirs]


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def restart_rows(spark: Any, scratch: Path, args: argparse.Namespace) -> list[Row]:
    """Restart time after growing histories: snapshots (f) against replaying the staged inputs (g)."""
    from pytimely.spark.streaming import CsvDirectorySink, ReplayRestore, StreamCheckpoint, run_stream

    rng = np.random.default_rng(5)
    directory = scratch / "restart-edges"
    directory.mkdir()
    base = time.time() - 100_000
    rows: list[Row] = []
    written = 0
    for at in args.restart_at:
        for k in range(written, at):
            path = directory / f"e{k:05d}.csv"
            edges = rng.integers(0, 20_000, size=(args.restart_edges, 2), dtype=np.int64)
            with path.open("w") as handle:
                handle.write("src,dst\n")
                np.savetxt(handle, edges, fmt="%d", delimiter=",")
            os.utime(path, (base + k, base + k))
        written = at
        for ident, name in (("f", "snapshots"), ("g", "replay")):
            checkpoint = StreamCheckpoint(scratch / f"restart-ck-{name}")
            restore = ReplayRestore(checkpoint) if name == "replay" else None
            runs = []
            for _ in range(2):  # the history's micro-batches, then a restart with nothing new
                source = stream_wcc.edge_stream(spark, str(directory), "csv", 1)
                started = time.perf_counter()
                done = run_stream(
                    stream_wcc.components, source, stream_wcc.SCHEMA, sink=CsvDirectorySink(scratch / f"out-{name}"),
                    checkpoint=checkpoint, query="bench_restart", restore=restore, available_now=True,
                )
                runs.append((time.perf_counter() - started, done))
            (restart_s, again) = runs[1]
            rows.append({
                "id": ident, "contender": name, "history": at, "restart_s": round(restart_s, 2),
                "restore_s": round(again.restore_s, 3), "checkpoint_kb": round(_folder_bytes(checkpoint.root) / 1024),
            })
    return rows


def run(args: argparse.Namespace) -> tuple[Row, list[Row]]:
    """Start Spark, run both parts, return the facts and the rows."""
    from pytimely.spark import local_session

    started = time.perf_counter()
    spark = local_session(args.slots, app_name="bench-streaming")
    facts: Row = {
        "python": platform.python_version(), "spark": spark.version, "slots": args.slots,
        "spark_start_s": round(time.perf_counter() - started, 1), "batches": args.batches,
        "words_per_batch": args.words_per_batch, "edges": args.edges, "edge_batches": args.edge_batches,
    }
    scratch = Path(tempfile.mkdtemp(prefix="bench-streaming-"))
    try:
        rows = word_count_rows(spark, scratch, args) if "wordcount" in args.parts else []
        if "components" in args.parts:
            rows += components_rows(spark, scratch, args)
        if "restart" in args.parts:
            rows += restart_rows(spark, scratch, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return facts, rows


def _gain(row: Row) -> str | None:
    if "p50_speedup" not in row:
        return None
    return f"**{row['p50_speedup']}x** / {row['p99_speedup']}x / {row['throughput_ratio']}x"


def _phases(row: Row) -> str:
    return " / ".join(f"{row[f'pytimely_{p}_s']}" for p in ("collect", "stage", "compute", "sink")) + " s"


WORD_COLUMNS = [
    Column("", "id"),
    Column("query", "contender"),
    Column("p50 per micro-batch", "p50_ms", "{} ms"),
    Column("p99", "p99_ms", "{} ms"),
    Column("words/s", "words_per_s", "{:,}"),
    Column("pytimely's speed-up (p50 / p99 / throughput)", _gain),
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
    Column("restart (query start included)", "restart_s", "{} s"),
    Column("restore", "restore_s", "{} s"),
    Column("checkpoint", "checkpoint_kb", "{:,} KiB"),
]


def main() -> None:
    """Parse, run, print."""
    command = parser(__doc__)
    command.add_argument("--batches", type=int, default=40)
    command.add_argument("--words-per-batch", type=int, default=50_000)
    command.add_argument("--edges", type=int, default=1_000_000)
    command.add_argument("--edge-batches", type=int, default=10)
    command.add_argument("--graphx-at", default="", help="1-based micro-batches to recompute GraphX at")
    command.add_argument("--slots", type=int, default=2)
    command.add_argument("--parts", type=lambda text: text.split(","), default=["wordcount", "components"],
                         help="which parts to run: wordcount,components,restart (default the first two)")
    command.add_argument("--restart-at", type=lambda text: [int(x) for x in text.split(",")], default=[10, 50, 200])
    command.add_argument("--restart-edges", type=int, default=2_000)
    args = command.parse_args()
    if args.quick:
        args.batches, args.words_per_batch, args.edges, args.edge_batches = 5, 2_000, 20_000, 3
    given = [int(x) for x in args.graphx_at.split(",") if x.strip()]
    middle = (args.edge_batches + 1) // 2
    args.graphx_at = given or sorted({1, middle, args.edge_batches})
    if any(not 1 <= at <= args.edge_batches for at in args.graphx_at):
        command.error(f"--graphx-at must name micro-batches 1..{args.edge_batches}")
    if set(args.parts) - {"wordcount", "components", "restart"}:
        command.error("--parts names wordcount, components and/or restart")
    facts, rows = run(args)
    words = [row for row in rows if row["id"] in ("a", "b")]
    graph = [row for row in rows if row["id"] == "c-d-e"]
    restarts = [row for row in rows if row["id"] in ("f", "g")]
    tables = []
    if words:
        title = f"Word count, {args.batches} micro-batches of {args.words_per_batch:,} words (first two not counted):"
        tables.append(Table(WORD_COLUMNS, words, title))
    if graph:
        title = (f"Connected components, {args.edges:,} edges in {args.edge_batches} micro-batches (a 2-row barrier "
                 f"stage takes {graph[0]['two_row_stage_s']} s):")
        tables.append(Table(GRAPH_COLUMNS, graph, title))
    if restarts:
        title = f"Restart of components after a history of micro-batches ({args.restart_edges:,} edges each):"
        tables.append(Table(RESTART_COLUMNS, restarts, title))
    note = f"Spark {facts['spark']} local[{facts['slots']}] (started in {facts['spark_start_s']} s, not counted)"
    report(rows, tables, as_json=args.json, facts=facts, note=note)


if __name__ == "__main__":
    main()
