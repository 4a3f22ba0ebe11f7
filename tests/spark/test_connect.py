"""pytimely on a Spark Connect session (``sc://``): no ``sparkContext``, no JVM in the client.

A real Connect server (``SparkConnectServer`` started with PySpark's own ``spark-submit``) runs the barrier
stages; its Python workers import this tree of pytimely. Streams hosted on the executors through Connect (the
handler in the server's Python process) run here too, on the module's one server.
"""

from __future__ import annotations

import csv
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pyspark")

from pytimely.errors import InvalidArgument, SparkConnectError, SparkTaskError
from pytimely.spark import collect, read, run_dataflow, save
from pytimely.spark.epoch_output import EpochOutput
from pytimely.spark.figures import Figures
from pytimely.spark.session import is_connect, master_of, slots_of
from pytimely.spark.streaming import CsvDirectorySink, run_stream
from pytimely.spark.watermark import Watermark
from tests.spark.test_hosted_eventtime import run as run_event_time
from tests.spark.test_hosted_stream import (
    ROOT,
    SCHEMA,
    assert_running_counts,
    changelog,
    count_words,
    drop_texts,
    output_changelog,
)
from tests.spark.test_hosting import _edges_frame, _fails_on_worker_one, wcc
from tests.spark.test_streaming import load
from tests.spark.test_watermark import BATCHES, drop_file, read_rows, reference


def _doubled(stream: Any) -> Any:
    return stream.map_batch(lambda b: [(x * 2,) for x in b.column("x").to_pylist()])


def test_a_connect_session_is_told_apart_and_its_slots_are_known(connect: Any, spark: Any) -> None:
    assert is_connect(connect) and not is_connect(spark)
    assert master_of(connect) == "local[4]" and slots_of(connect) == 4


def test_components_on_connect_equal_the_in_process_job(connect: Any, tmp_path: Path) -> None:
    """Connected components over a DataFrame of the Connect session, 2 processes x 2 workers, met by allGather."""
    edges = np.random.default_rng(5).integers(0, 400, size=(1500, 2))
    source = tmp_path / "edges.csv"
    np.savetxt(source, edges, fmt="%d", delimiter=",")
    expected = wcc.run(str(source), 1)
    table = collect(wcc.run_on_spark(connect, _edges_frame(connect, edges), 2, 2))
    got = sorted(zip(table.column("vertex").to_pylist(), table.column("label").to_pylist(), strict=True))
    assert got == [tuple(row) for row in expected.tolist()]


def test_read_run_and_save_one_file_through_connect(connect: Any, tmp_path: Path) -> None:
    rng = random.Random(3)
    values = [rng.randrange(1000) for _ in range(500)]
    source = tmp_path / "in.csv"
    source.write_text("x\n" + "".join(f"{v}\n" for v in values), encoding="utf-8")
    frame = read(connect, str(source), schema="x long")
    out = tmp_path / "out.csv"
    save(run_dataflow(_doubled, frame, "y long", processes=2, workers=2), str(out), order_by=["y"])
    with out.open(newline="", encoding="utf-8") as handle:
        assert [int(row[0]) for row in csv.reader(handle)] == sorted(2 * v for v in values)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "a staging folder was left"


def test_a_failing_task_on_connect_is_the_tasks_own_error_and_nothing_is_written(
    connect: Any, tmp_path: Path
) -> None:
    frame = connect.range(0, 100).selectExpr("id as x")
    with pytest.raises(SparkTaskError, match="ValueError: boom on worker one"):
        save(run_dataflow(_fails_on_worker_one, frame, "x long", processes=2), str(tmp_path / "out.parquet"))
    assert list(tmp_path.iterdir()) == []


def test_what_needs_a_classic_session_is_refused_by_name(connect: Any) -> None:
    frame = connect.range(0, 10).selectExpr("id as x")
    with pytest.raises(InvalidArgument, match="meeting='driver' needs a classic session"):
        run_dataflow(_doubled, frame, "y long", meeting="driver")
    with pytest.raises(SparkConnectError, match="figures= needs a classic session"):
        run_dataflow(_doubled, frame, "y long", figures=Figures.__new__(Figures))


def test_stream_wcc_on_connect_equals_the_reference_and_a_rerun_continues(
    connect: Any, connect_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The dataflow lives in the server's foreachBatch process; rounds of files give the reference changelog."""
    from tests.spark.test_streaming import drop, edge_csv, random_edges, read_changelog, reference_changelog

    stream_wcc = load("stream_wcc")
    rng = random.Random(23)
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    incoming.mkdir()
    rounds = []
    for number in range(2):
        edges = random_edges(rng, rng.randint(5, 30))
        drop(incoming, f"r{number}.csv", edge_csv(edges), number)
        rounds.append(edges)
        args = ["--spark", connect_server.url, "--edges-dir", str(incoming), "--output", str(out), "--checkpoint",
                str(ck), "--available-now", "--processes", "0"]  # fmt: skip
        assert stream_wcc.main(args) == 0
        assert read_changelog(out) == reference_changelog(rounds)
    # A file that does not parse stops the query with the typed error raised in the server's process.
    drop(incoming, "bad.csv", "src,dst\n3,4\n5,x\n", 9)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert stream_wcc.main(args) == 2
    err = capsys.readouterr().err
    assert "StreamInputError" in err and "micro-batch 2" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_the_wcc_command_runs_on_a_connect_server(connect_server: Any, tmp_path: Path) -> None:
    """``wcc.py --spark sc://...`` writes the same file as the in-process job (its ``main()`` here, the reference)."""
    root = Path(__file__).resolve().parents[2]
    edges = np.random.default_rng(9).integers(0, 200, size=(400, 2))
    source = tmp_path / "edges.csv"
    np.savetxt(source, edges, fmt="%d", delimiter=",")
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    here, out = tmp_path / "here.csv", tmp_path / "connect.csv"
    assert wcc.main(["--edges", str(source), "--output", str(here)]) == 0
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "wcc.py"), "--edges", str(source), "--output", str(out), "--spark",
         connect_server.url, "-n", "2"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.read_text() == here.read_text()


def test_the_connect_fragment_of_the_docs_runs(connect: Any, connect_server: Any, tmp_path: Path) -> None:
    from tests.docs.fragments import groups, run_group

    (fragments,) = [group for (_, needs), group in groups().items() if needs == {"connect"}]
    namespace = run_group(fragments, tmp_path, {"connect_url": connect_server.url})
    if namespace["spark"] is not connect:  # a second client: stop it before the server goes
        namespace["spark"].stop()
    labels = sorted(tuple(map(int, line.split(","))) for line in (tmp_path / "labels.csv").read_text().split())
    assert labels == [(1, 1), (2, 1), (3, 1), (4, 4), (5, 4), (6, 4), (7, 7), (8, 7)]


def test_the_wordcount_command_writes_text_through_a_connect_server(connect_server: Any, tmp_path: Path) -> None:
    """``wordcount.py --spark sc://... --output X.txt``: the session is in remote mode, so Spark's column
    functions build the text lines; the file equals the in-process job's (its ``main()`` here, the reference)."""
    from tests.spark.test_hosting import wordcount

    root = Path(__file__).resolve().parents[2]
    source = tmp_path / "words.txt"
    source.write_text("b a b\nc b\n\n a\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    here, out = tmp_path / "here.txt", tmp_path / "connect.txt"
    assert wordcount.main(["--input", str(source), "--output", str(here)]) == 0
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "wordcount.py"), "--input", str(source), "--output", str(out),
         "--spark", connect_server.url, "-n", "2"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    written = out.read_text() if out.is_file() else "".join(p.read_text() for p in sorted(out.glob("part-*")))
    assert here.read_text() == "a\t2\nb\t3\nc\t1\n"
    assert written == here.read_text()


@pytest.mark.timeout(900)
def test_hosted_word_count_through_connect_equals_the_driver_hosted_path(
    connect: Any, spark: Any, tmp_path: Path
) -> None:
    """Two hosted processes started from the server's foreachBatch process, two runs of the client: the same
    changelog as the driver-hosted path in this process; the client stops the processes when its query ends. Then
    an event-time query with a watermark and a side output through the same server (one hosted process): the same
    changelog and side output as the driver-hosted path."""
    rng = random.Random(43)
    incoming = tmp_path / "in"
    output = EpochOutput(tmp_path / "out", SCHEMA, format="csv", order_by=["word"])
    wordcount = load("stream_wordcount")
    for rounds in (range(2), range(2, 3)):
        drop_texts(incoming, rng, rounds)
        source = connect.readStream.option("maxFilesPerTrigger", 1).text(str(incoming))
        run_stream(wordcount.running_counts, source, wordcount.SCHEMA, sink=output, checkpoint=tmp_path / "ck",
                   query="connect_hosted", available_now=True, processes=2)
    assert output.committed() == [0, 1, 2]
    for epoch in range(3):
        names = sorted(p.name for p in (tmp_path / "out").glob(f"part-{epoch:012d}-*"))
        assert [n.split("-p")[-1] for n in names] == ["00000.csv", "00001.csv"], names  # both hosted processes
    driver_out = tmp_path / "driver"
    count_words(spark, incoming, driver_out, tmp_path / "driver-ck")
    assert output_changelog(output) == changelog(driver_out)
    # Event time through Connect on the same server: delay 2, late rows to a side output (the held and late rows'
    # files signed with the checkpoint's key on the server's side), as the driver-hosted path in this process.
    events = tmp_path / "events"
    for k, rows in enumerate(BATCHES):
        drop_file(events, f"b{k}.csv", rows, k)
    # One hosted process here: the word count above is the two-process run through Connect; this one adds the
    # watermark, the held rows and the side output on the server's side, which one process shows as well.
    for session, name, hosting in ((connect, "connect", {"processes": 1}), (spark, "driver", {})):
        side = CsvDirectorySink(tmp_path / f"{name}-side", order_by=["epoch", "value"])
        run_event_time(session, events, tmp_path / f"{name}-events", tmp_path / f"{name}-events-ck",
                       Watermark(delay=2, late="side", side=side), **hosting)  # fmt: skip
    files = {kind: [read_rows(p) for p in sorted((tmp_path / kind).glob("batch-*.csv"))]
             for kind in ("connect-events", "connect-side", "driver-events", "driver-side")}  # fmt: skip
    assert files["connect-events"] == files["driver-events"] and files["connect-side"] == files["driver-side"]
    late, outputs = reference(BATCHES, 2)
    assert files["connect-events"] == [[[str(e), w, str(c)] for e, w, c in batch] for batch in outputs]
    assert sum(map(len, files["connect-side"])) == sum(map(len, late)) > 0


@pytest.mark.timeout(900)
def test_a_connect_client_killed_mid_micro_batch_is_taken_over_by_the_next(
    connect: Any, connect_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kill -9 of the word-count example's client (a process of its own) while its query runs on the server: the
    next client, the example's ``main()`` in this process on the module's Connect session, takes the checkpoint
    over (the orphaned query and its hosted processes are fenced and stop) and the output holds every micro-batch
    once with its running counts."""
    rng = random.Random(47)
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    drop_texts(incoming, rng, range(6))
    args = ["--spark", connect_server.url, "--text-dir", str(incoming), "--output", str(out), "--checkpoint", str(ck),
            "--available-now", "--files-per-batch", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, str(ROOT / "examples" / "stream_wordcount.py"), *args]
    log = (tmp_path / "client.log").open("w")
    client = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
    commits = out / "_pytimely" / "commits"
    deadline = time.monotonic() + 300
    try:
        while len(list(commits.glob("epoch-*.json")) if commits.exists() else []) < 1:
            assert client.poll() is None, (tmp_path / "client.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the client committed nothing within 300 s"
            time.sleep(0.05)
    finally:
        os.killpg(client.pid, signal.SIGKILL)
        client.wait(60)
        log.close()
    capsys.readouterr()
    assert load("stream_wordcount").main(args) == 0, capsys.readouterr().err[-3000:]
    output = EpochOutput(out, SCHEMA, format="csv")
    committed = output.committed()
    assert committed == list(range(len(committed))) and committed[-1] == 5, committed
    assert_running_counts(output, incoming)
