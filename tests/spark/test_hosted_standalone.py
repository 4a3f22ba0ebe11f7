"""The stream examples hosted on the executors of a real standalone cluster (``spark://``) of two workers: two
processes, one on each worker, over rounds of files."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pytimely.spark.epoch_output import EpochOutput
from tests.spark.test_hosted_stream import assert_running_counts, drop_texts
from tests.spark.test_streaming import drop, edge_csv, random_edges, reference_changelog

pytestmark = pytest.mark.timeout(1200)

WORKERS, CORES = 2, 2
"""Two workers of two cores: a hosted process on each, and free slots for the feed jobs."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A master and two workers of two cores each."""
    from tests.spark.standalone import start_standalone

    started = start_standalone(tmp_path_factory.mktemp("standalone2x2"), cores=CORES, workers=WORKERS)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def driver(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A driver of its own on the cluster that runs the examples' ``main(argv)`` in turn, with Spark's event log in
    ``events`` beside its log: one driver JVM and one executor a worker for the module's runs, where a process a run
    would start them for each.

    The driver waits until every core of the cluster has registered (``minRegisteredResourcesRatio``) before its
    first job: else the hosting job may start while one executor alone has the slots, and both processes land on it.
    Its JVM and the executors' compile less and collect with one thread (they start sooner; what they do is the same).
    """
    from tests.spark.standalone import start_example_driver

    directory = tmp_path_factory.mktemp("driver")
    events = directory / "events"
    events.mkdir()
    settings = {
        "spark.cores.max": WORKERS * CORES,
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.compress": "false",
        "spark.eventLog.dir": events.as_uri(),
        "spark.driver.defaultJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        "spark.executor.defaultJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    }
    started = start_example_driver(directory, settings)
    yield started
    started.stop()


def run_driver(driver: Any, name: str, args: list[str]) -> None:
    """The example's ``main(args)`` in the driver; it must end well."""
    done = driver.run(name, args, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]


def hosting_workers(events: Path, cluster: Any) -> list[list[str]]:
    """Per hosting job (one a run of an example), the workers whose executors ran its tasks, one per task.

    The hosting jobs are found by their description; a task's executor by its id; the worker that started an
    executor by the executor's folder under that worker's work directory (``work-K/APP/EXECUTOR``). Spark 4 writes
    a run's event log as a folder of numbered files (``eventlog_v2_APP/events_N_APP``).
    """
    found = []
    for log in sorted(events.iterdir()):
        files = sorted(log.glob("events_*"), key=lambda f: int(f.name.split("_")[1])) if log.is_dir() else [log]
        lines = [line for f in files for line in f.read_text(encoding="utf-8").splitlines()]
        app, hosting_stages, placed = None, {}, {}
        for line in lines:
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerApplicationStart":
                app = event["App ID"]
            elif kind == "SparkListenerJobStart":
                if "hosted processes" in (event.get("Properties") or {}).get("spark.job.description", ""):
                    hosting_stages.update((stage, event["Job ID"]) for stage in event["Stage IDs"])
            elif kind == "SparkListenerTaskStart" and event["Stage ID"] in hosting_stages:
                placed.setdefault(hosting_stages[event["Stage ID"]], []).append(event["Task Info"]["Executor ID"])
        assert app is not None and placed, f"{log.name}: no hosting job in Spark's event log"
        for job in sorted(placed):
            workers = []
            for executor in placed[job]:
                owners = [f"work-{k}" for k in range(cluster.workers)
                          if (cluster.directory / f"work-{k}" / app / executor).is_dir()]  # fmt: skip
                assert len(owners) == 1, (log.name, job, executor, owners)
                workers.append(owners[0])
            found.append(workers)
    return found


def test_both_examples_on_two_workers_over_rounds_of_files(cluster: Any, driver: Any, tmp_path: Path) -> None:
    """stream_wordcount and stream_wcc with ``--processes 2`` on ``spark://`` (two workers), each over two rounds of
    two files (a run of the example's ``main`` per round, in one driver of its own; one file per micro-batch): every
    micro-batch is committed once and equals its reference (the second round's query started again from the
    checkpoint and its hosted processes from the snapshots), each process writes its part, and the two processes of
    each run ran on different workers. ~100 s."""
    rng = random.Random(29)
    words, out, ck = tmp_path / "words", tmp_path / "counted", tmp_path / "ck-words"
    args = ["--spark", cluster.url, "--processes", "2", "--text-dir", str(words), "--output", str(out),
            "--checkpoint", str(ck), "--available-now", "--files-per-batch", "1"]  # fmt: skip
    for rounds in (range(2), range(2, 4)):
        drop_texts(words, rng, rounds)
        run_driver(driver, "stream_wordcount", args)
    schema = pa.schema([("epoch", pa.int64()), ("word", pa.string()), ("count", pa.int64())])
    output = EpochOutput(out, schema, format="csv")
    assert output.committed() == [0, 1, 2, 3]
    assert_running_counts(output, words)
    for epoch in output.committed():
        names = {p.name for p in out.glob(f"part-{epoch:012d}-*")}
        assert {n.split("-p")[-1] for n in names} == {"00000.csv", "00001.csv"}, names

    edges_in, labels_out, ck = tmp_path / "edges", tmp_path / "labels", tmp_path / "ck-edges"
    args = ["--spark", cluster.url, "--processes", "2", "--edges-dir", str(edges_in), "--output", str(labels_out),
            "--checkpoint", str(ck), "--available-now", "--files-per-batch", "1"]  # fmt: skip
    files = []
    for rounds in (range(2), range(2, 4)):
        for k in rounds:
            files.append(random_edges(rng, rng.randint(5, 25)))
            drop(edges_in, f"e{k}.csv", edge_csv(files[-1]), k)
        run_driver(driver, "stream_wcc", args)
    schema = pa.schema([("epoch", pa.int64()), ("vertex", pa.int64()), ("label", pa.int64())])
    labels = EpochOutput(labels_out, schema, format="csv")
    assert labels.committed() == [0, 1, 2, 3]
    rows = []
    for epoch in labels.committed():
        table = labels.read(epoch)
        rows += sorted(zip(*(table.column(n).to_pylist() for n in ("epoch", "vertex", "label")), strict=True))
    assert rows == reference_changelog(files)

    placements = hosting_workers(driver.log.parent / "events", cluster)
    assert len(placements) == 4, placements
    for placed in placements:
        assert sorted(placed) == ["work-0", "work-1"], placements
