"""Streaming on Spark: micro-batches as epochs, exactly once across crashes and restarts, typed bad input.

The jobs run on the session's shared SparkSession (the examples' ``main`` finds it active); one test kills a
real job process with SIGKILL. References are computed in plain Python: a union-find per epoch for the
connected-components changelog, ``collections.Counter`` for the word counts.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pytimely.errors import CheckpointMismatchError, StreamError, StreamSchemaError
from pytimely.spark.streaming import CsvDirectorySink, StreamCheckpoint, run_stream
from tests.spark.standalone import quick_jvm

ROOT = Path(__file__).resolve().parents[2]
Edges = list[tuple[int, int]]


def load(name: str) -> ModuleType:
    """An example script as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def drop(directory: Path, name: str, text: str, order: int) -> None:
    """Put a whole file into ``directory`` (written aside, then renamed), its mtime fixing Spark's order."""
    directory.mkdir(parents=True, exist_ok=True)
    aside = directory.parent / f".{name}.part"
    aside.write_text(text, encoding="utf-8")
    stamp = time.time() - 10_000 + 10 * order
    os.utime(aside, (stamp, stamp))
    aside.rename(directory / name)


def edge_csv(edges: Edges) -> str:
    return "src,dst\n" + "".join(f"{a},{b}\n" for a, b in edges)


def random_edges(rng: random.Random, count: int, vertices: int = 60) -> Edges:
    return [(rng.randrange(vertices), rng.randrange(vertices)) for _ in range(count)]


def reference_changelog(epochs: list[Edges]) -> list[tuple[int, int, int]]:
    """``(epoch, vertex, label)`` for every vertex whose smallest-id component label is new or changed."""
    parent: dict[int, int] = {}

    def find(v: int) -> int:
        root = v
        while parent[root] != root:
            root = parent[root]
        while parent[v] != root:
            parent[v], v = root, parent[v]
        return root

    rows: list[tuple[int, int, int]] = []
    labels: dict[int, int] = {}
    for epoch, edges in enumerate(epochs):
        for a, b in edges:
            parent.setdefault(a, a)
            parent.setdefault(b, b)
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)  # the root is the smallest id: it is the label
        for vertex in sorted(parent):
            label = find(vertex)
            if labels.get(vertex) != label:
                rows.append((epoch, vertex, label))
                labels[vertex] = label
    return rows


def delivered_batches(ck: Path, files: dict[str, Edges]) -> list[Edges]:
    """The edges of each micro-batch as Spark's own checkpoint records them (not as pytimely staged them).

    After a crash Spark's file source may put several files into one micro-batch: the source's file log can be
    a batch ahead of the query's offset log, and ``maxFilesPerTrigger`` is not kept across the restart. So the
    reference is built from what Spark delivered, read from ``offsets/`` (the query batch's end in the file
    log) and ``sources/0/`` (each file's source batch, compacted files included).
    """
    import json

    ends: dict[int, int] = {}
    for path in (ck / "spark" / "offsets").iterdir():
        if path.name.isdigit():
            ends[int(path.name)] = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])["logOffset"]
    by_source: dict[int, set[str]] = {}
    for path in (ck / "spark" / "sources" / "0").iterdir():
        if path.name.split(".")[0].isdigit():  # a compacted file repeats the entries of the files before it
            for line in path.read_text(encoding="utf-8").splitlines()[1:]:
                entry = json.loads(line)
                by_source.setdefault(entry["batchId"], set()).add(entry["path"].rsplit("/", 1)[-1])
    assert sorted(ends) == list(range(len(ends))), f"Spark's offset log has gaps: {sorted(ends)}"
    names = [name for _, seen in sorted(by_source.items()) for name in sorted(seen)]
    assert sorted(names) == sorted(files), f"Spark's file log holds {names}, the input is {sorted(files)}"
    batches: list[Edges] = []
    start = -1
    for batch in range(len(ends)):
        batch_files = [n for source in range(start + 1, ends[batch] + 1) for n in sorted(by_source.get(source, ()))]
        batches.append([edge for name in sorted(batch_files, key=lambda n: int(n[1:].split(".")[0]))
                        for edge in files[name]])
        start = ends[batch]
    assert sum(len(b) for b in batches) == sum(len(e) for e in files.values()), "a file was delivered twice"
    return batches


def read_changelog(out: Path) -> list[tuple[int, ...]]:
    """Every row of OUT's batch files in batch order; each file's rows carry its own batch id as epoch."""
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")], "a temporary file was left in OUT"
    rows: list[tuple[int, ...]] = []
    for path in sorted(out.glob("batch-*.csv")):
        batch = int(path.stem.split("-")[1])
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            assert next(reader) == ["epoch", "vertex", "label"]
            for row in reader:
                values = tuple(int(x) for x in row)
                assert values[0] == batch, f"{path.name} holds a row of epoch {values[0]}"
                rows.append(values)
    return rows


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_stream_wcc_over_rounds_of_files_equals_the_reference(spark: Any, tmp_path: Path, fmt: str) -> None:
    """Each --available-now run takes the files dropped since the last as one epoch; OUT is the changelog."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    stream_wcc = load("stream_wcc")
    rng = random.Random(17)
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    incoming.mkdir()
    rounds: list[Edges] = []
    order = 0
    for number in range(3):
        edges: Edges = []
        for k in range(rng.randint(1, 3)):
            part = random_edges(rng, rng.randint(1, 25))
            edges += part
            name = f"r{number}-{k}.{fmt}"
            if fmt == "csv":
                drop(incoming, name, edge_csv(part), order)
            else:
                table = pa.table({"src": [a for a, _ in part], "dst": [b for _, b in part]})
                pq.write_table(table, tmp_path / f".{name}")
                (tmp_path / f".{name}").rename(incoming / name)
            order += 1
        rounds.append(edges)
        args = ["--processes", "0",
                "--spark", "local[2]", "--edges-dir", str(incoming), "--output", str(out), "--checkpoint", str(ck),
                "--available-now", "--format", fmt]
        assert stream_wcc.main(args) == 0
        assert read_changelog(out) == reference_changelog(rounds)
    # Nothing new: a run processes nothing and changes nothing.
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert stream_wcc.main(args) == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


class Crash(RuntimeError):
    """The failure a crash trial injects."""


class CrashingSink(CsvDirectorySink):
    """The CSV sink, failing once at ``batch`` before or after writing."""

    def __init__(self, directory: Path, batch: int, when: str) -> None:
        super().__init__(directory, order_by=["vertex"])
        self.batch, self.when = batch, when

    def commit(self, batch_id: int, table: Any) -> None:
        if batch_id == self.batch and self.when == "sink-before":
            raise Crash(f"before writing batch {batch_id}")
        super().commit(batch_id, table)
        if batch_id == self.batch and self.when == "sink-after":
            raise Crash(f"after writing batch {batch_id}, before its commit")


class CrashingCheckpoint(StreamCheckpoint):
    """The checkpoint, failing right after committing ``batch``: Spark never marks that batch done."""

    def __init__(self, directory: Path, batch: int) -> None:
        super().__init__(directory)
        self.batch = batch

    def commit(self, batch_id: int) -> None:
        super().commit(batch_id)
        if batch_id == self.batch:
            raise Crash(f"after committing batch {batch_id}, before Spark's commit")


def _crashing_check(batch: int, check: Any) -> Any:
    def crash_then_check(table: Any, batch_id: int) -> Any:
        if batch_id == batch:
            raise Crash(f"while reading batch {batch_id}")
        return check(table, batch_id)

    return crash_then_check


def test_crash_at_seeded_points_then_restart_gives_each_row_once(spark: Any, tmp_path: Path) -> None:
    """Eight seeded trials: fail at a batch and point, restart from the checkpoint, compare OUT."""
    stream_wcc = load("stream_wcc")
    rng = random.Random(20261123)
    points = ["check", "sink-before", "sink-after", "after-commit"]
    for trial in range(8):
        root = tmp_path / f"trial{trial}"
        incoming, out, ck = root / "in", root / "out", root / "ck"
        files = [random_edges(rng, rng.randint(1, 20), vertices=40) for _ in range(3)]
        for k, edges in enumerate(files):
            drop(incoming, f"e{k}.csv", edge_csv(edges), k)
        # Every point twice: the first four trials fail the very first micro-batch, the next four a seeded later
        # one (the middle or the last), after a restart has batches before it to restore.
        batch = 0 if trial < 4 else rng.randrange(1, len(files))
        point = points[trial % len(points)]

        def start(sink: Any, checkpoint: Any, check: Any, incoming: Path = incoming) -> Any:
            source = stream_wcc.edge_stream(spark, str(incoming), "csv", 1)
            return run_stream(stream_wcc.components, source, stream_wcc.SCHEMA, sink=sink, checkpoint=checkpoint,
                              query="stream_wcc", check=check, available_now=True)

        sink: Any = CsvDirectorySink(out, order_by=["vertex"])
        checkpoint: Any = ck
        check = stream_wcc.check_edges
        if point in ("sink-before", "sink-after"):
            sink = CrashingSink(out, batch, point)
        elif point == "after-commit":
            checkpoint = CrashingCheckpoint(ck, batch)
        else:
            check = _crashing_check(batch, check)
        with pytest.raises(StreamError, match="Crash"):
            start(sink, checkpoint, check)
        done = start(CsvDirectorySink(out, order_by=["vertex"]), ck, stream_wcc.check_edges)
        expected_restored = batch + 1 if point == "after-commit" else batch
        assert done.restored_batches == expected_restored, (trial, batch, point)
        assert read_changelog(out) == reference_changelog(files), (trial, batch, point)


def test_killed_job_continues_from_its_checkpoint(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL the command-line job after a seeded number of micro-batches; the rerun completes OUT exactly."""
    stream_wcc = load("stream_wcc")
    rng = random.Random(99)
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    # Enough micro-batches (each at least ~0.1 s of Spark's own work) that the kill lands before the last: it
    # comes at most ~0.3 s after the third, and five more would take ~0.5 s or more.
    files = [random_edges(rng, rng.randint(1, 30)) for _ in range(8)]
    for k, edges in enumerate(files):
        drop(incoming, f"e{k}.csv", edge_csv(edges), k)
    args = ["--processes", "0",
            "--spark", "local[1]", "--edges-dir", str(incoming), "--output", str(out), "--checkpoint", str(ck),
            "--available-now", "--files-per-batch", "1"]
    env = quick_jvm({**os.environ, "PYTHONPATH": str(ROOT / "src")})
    log = (tmp_path / "job.log").open("w")
    job = subprocess.Popen([sys.executable, str(ROOT / "examples" / "stream_wcc.py"), *args], env=env,
                           stdout=log, stderr=log, start_new_session=True)
    target = rng.randint(1, 3)
    deadline = time.monotonic() + 240

    def written() -> int:
        return len(list(out.glob("batch-*.csv"))) if out.exists() else 0

    try:
        while written() < target:
            assert job.poll() is None, "the job ended before it could be killed"
            assert time.monotonic() < deadline, "the job wrote no micro-batch within 240 s"
            time.sleep(0.05)
        time.sleep(rng.random() * 0.3)  # somewhere inside a later micro-batch, or between two
    finally:
        # The whole process group: the job's Spark JVM, left alone, would run on for a moment and plan
        # micro-batches into the same checkpoint as the rerun.
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(60)
        log.close()
    job_log = (tmp_path / "job.log").read_text()[-2000:]
    assert target <= written() < len(files), f"killed after {written()} of {len(files)} micro-batches: {job_log}"
    assert stream_wcc.main(args) == 0, capsys.readouterr().err[-2000:]
    by_name = {f"e{k}.csv": edges for k, edges in enumerate(files)}
    assert read_changelog(out) == reference_changelog(delivered_batches(ck, by_name))


def test_streaming_word_count_equals_counter(spark: Any, tmp_path: Path) -> None:
    """Per epoch, each word seen gets its running count; the last row of a word is Counter's total."""
    wordcount = load("stream_wordcount")
    rng = random.Random(5)
    vocabulary = ["a", "b", "c,d", 'say "hi"', "é", "zz", "x1"]
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    texts = []
    for k in range(3):
        lines = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 8))) for _ in range(rng.randint(1, 9))]
        texts.append(lines)
        drop(incoming, f"t{k}.txt", "\n".join(lines) + "\n", k)
    args = ["--processes", "0",
            "--spark", "local[2]", "--text-dir", str(incoming), "--output", str(out), "--checkpoint", str(ck),
            "--available-now", "--files-per-batch", "1", "-w", "2"]
    assert wordcount.main(args) == 0
    total: Counter[str] = Counter()
    for epoch, lines in enumerate(texts):
        seen = Counter(word for line in lines for word in line.split())
        total.update(seen)
        path = out / f"batch-{epoch:012d}.csv"
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
        assert rows[0] == ["epoch", "word", "count"]
        assert sorted((w, int(c)) for e, w, c in rows[1:] if int(e) == epoch) == sorted(
            (w, total[w]) for w in seen
        )
        assert len(rows) == 1 + len(seen)


def test_a_file_that_does_not_parse_stops_the_query_and_leaves_out_whole(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream_wcc = load("stream_wcc")
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    drop(incoming, "good.csv", edge_csv([(1, 2)]), 0)
    args = ["--processes", "0",
            "--spark", "local[2]", "--edges-dir", str(incoming), "--output", str(out), "--checkpoint", str(ck),
            "--available-now", "--files-per-batch", "1"]
    assert stream_wcc.main(args) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    drop(incoming, "bad.csv", "src,dst\n3,4\n5,x\n", 1)
    assert stream_wcc.main(args) == 2
    err = capsys.readouterr().err
    assert "StreamInputError" in err and "micro-batch 1" in err and "bad.csv" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert json.loads((ck / "pytimely" / "committed.json").read_text())["batch"] == 0


def test_files_whose_columns_change_are_a_schema_error(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    stream_wcc = load("stream_wcc")
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    incoming.mkdir()
    pq.write_table(pa.table({"src": [1], "dst": [2]}), incoming / "a.parquet")
    args = ["--processes", "0",
            "--spark", "local[2]", "--edges-dir", str(incoming), "--output", str(out), "--checkpoint", str(ck),
            "--available-now", "--format", "parquet"]
    assert stream_wcc.main(args) == 0
    pq.write_table(pa.table({"from": [3], "to": [4]}), tmp_path / "b.parquet")
    (tmp_path / "b.parquet").rename(incoming / "b.parquet")
    assert stream_wcc.main(args) == 2
    err = capsys.readouterr().err
    assert "StreamSchemaError" in err and "b.parquet" in err, err
    assert sorted(p.name for p in out.iterdir()) == ["batch-000000000000.csv"]


def test_a_checkpoint_of_another_query_is_refused(spark: Any, tmp_path: Path) -> None:
    stream_wcc, wordcount = load("stream_wcc"), load("stream_wordcount")
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    drop(incoming, "a.csv", edge_csv([(1, 2)]), 0)
    assert stream_wcc.main(["--processes", "0",
                            "--spark", "local[2]", "--edges-dir", str(incoming), "--output", str(out),
                            "--checkpoint", str(ck), "--available-now"]) == 0
    assert wordcount.main(["--processes", "0",
                           "--spark", "local[2]", "--text-dir", str(incoming), "--output", str(tmp_path / "o2"),
                           "--checkpoint", str(ck), "--available-now"]) == 2
    assert not (tmp_path / "o2").exists()
    # The same query name over rows of another shape: the source's schema changed.
    source = spark.readStream.schema("src long, dst long").option("header", True).csv(str(incoming))
    with pytest.raises(StreamSchemaError, match="schema changed"):
        run_stream(stream_wcc.components, source, stream_wcc.SCHEMA, sink=CsvDirectorySink(out), checkpoint=ck,
                   query="stream_wcc", available_now=True)
    # Spark's checkpoint without pytimely's record: another query's.
    (tmp_path / "other" / "spark" / "offsets").mkdir(parents=True)
    with pytest.raises(CheckpointMismatchError, match="another query"):
        run_stream(stream_wcc.components, source, stream_wcc.SCHEMA, sink=CsvDirectorySink(out),
                   checkpoint=tmp_path / "other", query="stream_wcc", available_now=True)


def test_an_event_time_column_names_the_epochs(spark: Any, tmp_path: Path) -> None:
    """With epoch=COLUMN, a micro-batch completes the epochs before its largest; later ones wait for a later one."""
    stream_wcc = load("stream_wcc")
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    drop(incoming, "a.csv", "src,dst,epoch\n1,2,0\n3,4,2\n2,3,1\n", 0)
    drop(incoming, "b.csv", "src,dst,epoch\n0,5,3\n", 1)
    drop(incoming, "c.csv", "src,dst,epoch\n4,5,3\n9,9,6\n", 2)
    source = (spark.readStream.schema("src long, dst long, epoch long").option("header", True)
              .option("maxFilesPerTrigger", 1).csv(str(incoming)))
    done = run_stream(stream_wcc.components, source, stream_wcc.SCHEMA, sink=CsvDirectorySink(out, order_by=["vertex"]),
                      checkpoint=ck, query="event-time", epoch="epoch", available_now=True)
    assert done.processed == [0, 1, 2]
    batches = [path.read_text().splitlines()[1:] for path in sorted(out.glob("batch-*.csv"))]
    assert batches == [["0,1,1", "0,2,1", "1,3,1"], ["2,4,1"], ["3,0,0", "3,1,0", "3,2,0", "3,3,0", "3,4,0", "3,5,0"]]


def test_output_to_a_spark_table_once_per_batch(spark: Any, tmp_path: Path) -> None:
    """SparkTableSink: the changelog read back through Spark equals the reference, each batch once."""
    from pytimely.spark.streaming import SparkTableSink

    stream_wcc = load("stream_wcc")
    rng = random.Random(3)
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    files = [random_edges(rng, 10, vertices=30) for _ in range(3)]
    for k, edges in enumerate(files):
        drop(incoming, f"e{k}.csv", edge_csv(edges), k)
    source = stream_wcc.edge_stream(spark, str(incoming), "csv", 1)
    sink = SparkTableSink(spark, out)
    run_stream(stream_wcc.components, source, stream_wcc.SCHEMA, sink=sink, checkpoint=ck, query="table",
               check=stream_wcc.check_edges, available_now=True)
    sink.commit(1, spark.range(0).toArrow())  # a repeated batch id is not written again
    rows = spark.read.parquet(str(out)).select("epoch", "vertex", "label", "batch_id").collect()
    assert all(r.epoch == r.batch_id for r in rows)
    assert sorted((r.epoch, r.vertex, r.label) for r in rows) == reference_changelog(files)
